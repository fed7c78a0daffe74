//! Tests of the UD endpoint and its datagrams ([`super`]).
use super::datagram::{tag, TAGGED, TAGGED_V2};
use super::*;

const KEY: [u8; 16] = *b"0123456789abcdef";

fn request() -> Datagram {
    Datagram {
        reply: false,
        session: 0x1122_3344_5566_7788,
        seq: 42,
        stamp: 0xdead_beef,
        received: None,
    }
}

#[test]
fn a_version_2_reply_carries_its_count_under_the_tag() {
    let reply = Datagram {
        reply: true,
        received: Some(40),
        ..request()
    };
    let mut b = [0u8; 64];
    reply.encode(&KEY, &mut b);
    assert_eq!(b[4], 2);
    assert_eq!(reply.len(), UD_HEADER_V2);
    assert_eq!(Datagram::decode(&b), Ok(reply));
    assert!(Datagram::verify(&b, &KEY));
    // Every byte up to the tag is covered, the count included.
    for i in 0..TAGGED_V2 {
        let mut bad = b;
        bad[i] ^= 0x01;
        assert!(!Datagram::verify(&bad, &KEY), "byte {i} is not covered");
    }
    // A version 2 datagram cut to the version 1 length is malformed, not misread.
    assert_eq!(Datagram::decode(&b[..50]), Err(DropReason::Malformed));
    assert!(!Datagram::verify(&b[..50], &KEY));
    // A version 1 datagram relabelled as version 2 does not verify.
    let mut v1 = [0u8; 64];
    request().encode(&KEY, &mut v1);
    v1[4] = 2;
    assert!(!Datagram::verify(&v1, &KEY));
    let mut v3 = b;
    v3[4] = 3;
    assert_eq!(Datagram::decode(&v3), Err(DropReason::Malformed));
}

/// The prober's book of one session: requests 1..=10, the peer received 1..=6 but 4
/// (request 4 lost on the way), and replied to all it received but 5 and 6 (lost on the
/// way back); 7..=10 never arrived. Replies: 1, 2, 3, then silence from 4 on.
#[test]
fn loss_is_split_by_direction_from_the_replies_counts() {
    let mut b = LossBook::default();
    for seq in 1..=3 {
        assert_eq!(b.check(seq, Some(seq)), Ok(true));
        assert_eq!(b.attribute(seq, seq), (0, 0));
    }
    // 4, 5, 6 time out: not attributed yet.
    b.unanswered += 3;
    // Reply to 7 (say it came back): the peer had received 1, 2, 3, 5, 6, 7 = 6.
    assert_eq!(b.check(7, Some(6)), Ok(true));
    assert_eq!(
        b.attribute(7, 6),
        (1, 2),
        "4 lost going, 5 and 6 coming back"
    );
    // Then 8..=10 time out and the run ends without another reply: the peer is silent
    // since, those count as request loss.
    b.unanswered += 3;
    assert_eq!(b.silent(), 3);
    assert_eq!((b.request, b.reply), (4, 2));
    assert_eq!(b.request + b.reply, b.unanswered);
    // The peer answers again at 11 with 9 received: 8 and 9 had arrived after all (their
    // replies were lost). The request counter never goes back; nothing is counted twice.
    assert_eq!(b.check(11, Some(9)), Ok(true));
    assert_eq!(b.attribute(11, 9), (0, 0));
    assert_eq!(b.request + b.reply, b.unanswered);
    // Silence with nothing pending adds nothing.
    assert_eq!(b.silent(), 0);
}

/// Replies whose count cannot be true are refused before anything moves: a forged or
/// replayed reply never moves loss (nor, since the engine checks it before it takes the
/// sample, latency).
#[test]
fn impossible_counts_are_refused_and_move_nothing() {
    // Requests 1..=5, 1 and 2 never arrived: the reply to 5 says 3.
    let mut b = LossBook {
        unanswered: 2,
        ..LossBook::default()
    };
    assert_eq!(b.check(5, Some(3)), Ok(true));
    assert_eq!(b.attribute(5, 3), (2, 0));
    let before = b;
    for (seq, r) in [
        (6, 7), // more received than sent
        (6, 0), // a reply counts its own request
        (5, 3), // not a later sequence than the last accepted reply (replayed)
        (4, 3), // an older one
        (7, 2), // fewer received than an earlier reply said
        (7, 6), // 3 more received since the last reply, only 2 sent since
    ] {
        assert_eq!(
            b.check(seq, Some(r)),
            Err(DropReason::BadCount),
            "{seq} {r}"
        );
        assert_eq!(b, before);
    }
    assert_eq!(b.check(7, Some(5)), Ok(true));
    // Version 1 replies carry no count: accepted, nothing to attribute.
    assert_eq!(b.check(6, None), Ok(false));
}

#[test]
fn a_datagram_round_trips_and_its_tag_binds_every_header_byte() {
    let mut b = [0u8; 64];
    request().encode(&KEY, &mut b);
    assert_eq!(&b[0..4], b"RDUD");
    assert_eq!(Datagram::decode(&b), Ok(request()));
    assert!(Datagram::verify(&b, &KEY));
    assert!(!Datagram::verify(&b, b"0123456789abcdeX"));
    for i in 0..TAGGED {
        let mut bad = b;
        bad[i] ^= 0x01;
        assert!(!Datagram::verify(&bad, &KEY), "byte {i} is not covered");
    }
    let mut bad = b;
    bad[40] ^= 0x80;
    assert!(!Datagram::verify(&bad, &KEY), "a flipped tag bit");
    // Padding after the header is not part of it.
    let mut padded = b;
    padded[60] = 7;
    assert!(Datagram::verify(&padded, &KEY));
    let reply = Datagram {
        reply: true,
        ..request()
    };
    let mut r = [0u8; 48];
    reply.encode(&KEY, &mut r);
    assert_eq!(Datagram::decode(&r).unwrap(), reply);
    assert_ne!(
        &r[32..48],
        &b[32..48],
        "a reply's tag differs from its request's"
    );
}

#[test]
fn the_tag_is_siphash_2_4_128_of_the_header() {
    // Reference vector of SipHash-2-4-128 (the reference implementation's vectors.h):
    // key 00..0f, empty input.
    let key: [u8; 16] = core::array::from_fn(|i| i as u8);
    assert_eq!(
        tag(&key, &[]),
        [
            0xa3, 0x81, 0x7f, 0x04, 0xba, 0x25, 0xa8, 0xe6, 0x6d, 0xf6, 0x72, 0x14, 0xc7, 0x55,
            0x02, 0x93
        ]
    );
}

#[test]
fn junk_is_malformed_and_never_panics() {
    let mut good = [0u8; 48];
    request().encode(&KEY, &mut good);
    assert_eq!(Datagram::decode(&good[..47]), Err(DropReason::Malformed));
    for (at, v) in [(0, b'X'), (4, 2), (5, 0), (5, 3), (6, 1)] {
        let mut bad = good;
        bad[at] = v;
        assert_eq!(Datagram::decode(&bad), Err(DropReason::Malformed), "{at}");
    }
    let mut x = 0x9e37_79b9u32;
    for len in 0..200 {
        let junk: Vec<u8> = (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                x as u8
            })
            .collect();
        let _ = Datagram::decode(&junk);
        assert!(!Datagram::verify(&junk, &KEY) || len >= UD_HEADER);
    }
    assert!(!Datagram::verify(&[], &KEY));
}

#[test]
fn drop_reasons_have_distinct_names_and_slots() {
    let names: std::collections::BTreeSet<_> = DropReason::ALL.iter().map(|r| r.name()).collect();
    assert_eq!(names.len(), DropReason::ALL.len());
    let s = UdStats::default();
    s.drop_one(DropReason::BadTag);
    s.drop_one(DropReason::BadTag);
    assert_eq!(s.dropped(DropReason::BadTag), 2);
    assert_eq!(s.dropped(DropReason::Malformed), 0);
}
