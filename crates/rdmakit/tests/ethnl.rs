//! The ethtool netlink parsers (`rdmakit::ethtool::standard`) on replies captured from the
//! lab kernel (tests/data/ethnl/README.md says how), and on malformed bytes derived from
//! them: every failure is an error of its own request, never a panic.

use rdmakit::ethtool::standard::{parse_fec, parse_pause, parse_stats};
use rdmakit::ethtool::EthtoolError;
use std::path::PathBuf;

fn data(name: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/ethnl")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

const EOPNOTSUPP: i32 = 95;

#[test]
fn lab_drivers_have_no_pause_and_no_fec_operation() {
    for drv in ["virtio_net-eth0", "veth-veth0"] {
        let pause = parse_pause(&data(&format!("{drv}-pause.bin"))).unwrap_err();
        assert_eq!(
            pause,
            EthtoolError::Os {
                call: "PAUSE_GET",
                errno: EOPNOTSUPP
            }
        );
        assert!(pause.is_unsupported());
        let fec = parse_fec(&data(&format!("{drv}-fec.bin"))).unwrap_err();
        assert_eq!(
            fec,
            EthtoolError::Os {
                call: "FEC_GET",
                errno: EOPNOTSUPP
            }
        );
    }
}

#[test]
fn lab_drivers_answer_stats_with_empty_groups() {
    for drv in ["virtio_net-eth0", "veth-veth0"] {
        assert_eq!(parse_stats(&data(&format!("{drv}-stats.bin"))), Ok(vec![]));
    }
}

#[test]
fn malformed_captured_replies_are_errors() {
    let good = data("virtio_net-eth0-stats.bin");
    // Cut inside the message: the netlink length no longer fits the bytes.
    for n in [0, 3, 15, 16, 19, 40, good.len() - 1] {
        assert!(
            matches!(parse_stats(&good[..n]), Err(EthtoolError::Malformed { .. })),
            "{n} bytes"
        );
    }
    // An attribute claiming more bytes than its nest holds (the first group's length).
    let mut bad = good.clone();
    let at = 20 + 24; // nlmsghdr + genlmsghdr + the 24-byte header nest: the first group
    bad[at] = 0xf0;
    assert!(matches!(
        parse_stats(&bad),
        Err(EthtoolError::Malformed {
            call: "STATS_GET",
            ..
        })
    ));
    // A reply to another request is not taken for this one.
    assert!(matches!(
        parse_pause(&good),
        Err(EthtoolError::Malformed {
            call: "PAUSE_GET",
            ..
        })
    ));
    // Every single-byte corruption of every capture: an answer or an error, no panic.
    for name in [
        "virtio_net-eth0-stats.bin",
        "virtio_net-eth0-pause.bin",
        "veth-veth0-fec.bin",
    ] {
        let good = data(name);
        for i in 0..good.len() {
            for b in [0u8, 0x01, 0x80, 0xff] {
                let mut m = good.clone();
                m[i] = b;
                let _ = parse_stats(&m);
                let _ = parse_pause(&m);
                let _ = parse_fec(&m);
            }
        }
    }
}
