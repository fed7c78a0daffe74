//! The lab's own faults, each checked for what it does and that its undo undoes it: a
//! one-way partition, ingress loss, netem delay, rdmad killed and rxe0 removed with the
//! host up, `clear`; and the restricted user network (a guest cannot reach outside). Runs
//! on h1 of `rdmactl lab test --hosts N` (N >= 3), one test at a time in name order; each
//! leaves the fabric as it found it.
use live_tests::fabric::{addr, control, fault, lab_hosts, on_host, wait_on_host};
use std::io::ErrorKind;
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// ICMP echo requests `host` has received (/proc/net/snmp `Icmp: InEchos`).
fn in_echos(host: &str) -> u64 {
    let out = on_host(
        host,
        "awk '/^Icmp:/ { if (h) { for (i = 1; i <= NF; i++) if (n[i] == \"InEchos\") print $i } else { for (i = 1; i <= NF; i++) n[i] = $i; h = 1 } }' /proc/net/snmp",
    )
    .ok(&format!("reading {host}'s ICMP counters"));
    out.trim()
        .parse()
        .unwrap_or_else(|e| panic!("FAIL: InEchos of {host}: {e}: {out:?}"))
}

/// `ping -c N` from `from` to `to`: (replies received, whole output).
fn ping(from: &str, to: &str, count: u32, interval: &str) -> (u32, String) {
    let r = on_host(
        from,
        &format!("ping -c {count} -i {interval} -W 1 {} 2>&1", addr(to)),
    );
    let received = r
        .output
        .lines()
        .find_map(|l| {
            let (_, rest) = l.split_once("transmitted, ")?;
            rest.split_whitespace().next()?.parse().ok()
        })
        .unwrap_or_else(|| panic!("FAIL: no ping summary from {from}:\n{}", r.output));
    (received, r.output)
}

/// A host's line of `lab status`.
fn status_of(host: &str) -> String {
    let text = control("status");
    text.lines()
        .find(|l| l.starts_with(&format!("{host} ")))
        .unwrap_or_else(|| panic!("FAIL: no {host} in the lab status:\n{text}"))
        .to_string()
}

/// The lab's qemu user networks are `restrict=on`: a TCP connect to an address outside the
/// lab (192.0.2.1, TEST-NET-1, documentation only) is answered inside qemu with a reset, so
/// it is refused at once instead of leaving this machine (or waiting for a timeout). Here
/// on h1, and on every other host with busybox nc.
#[test]
fn a_guest_cannot_reach_outside_through_its_user_network() {
    let n = lab_hosts(3);
    let outside: SocketAddr = "192.0.2.1:80".parse().unwrap();
    match TcpStream::connect_timeout(&outside, Duration::from_secs(10)) {
        Ok(_) => panic!("FAIL: h1 connected to {outside}: the user network is not restricted"),
        Err(e) => assert_eq!(
            e.kind(),
            ErrorKind::ConnectionRefused,
            "FAIL: connecting to {outside} from h1 failed with {e} (kind {:?}), not a refusal from qemu's restricted network",
            e.kind()
        ),
    }
    for k in 2..=n {
        let host = format!("h{k}");
        let r = on_host(
            &host,
            "timeout 10 nc 192.0.2.1 80 < /dev/null 2>&1; echo nc-exit=$?",
        );
        assert!(
            r.output.contains("refused") && r.output.contains("nc-exit=1"),
            "FAIL: {host}'s connect to 192.0.2.1:80 was not refused at once:\n{}",
            r.output
        );
    }
}

/// `partition h2 h3 --oneway`: h2's frames never reach h3, h3's reach h2 (seen in the ICMP
/// echo requests each receives; static neighbour entries, since ARP needs both ways), and
/// `heal` undoes it.
#[test]
fn b_oneway_partition_drops_one_direction_only() {
    lab_hosts(3);
    let mac = |h: &str| format!("52:54:00:02:00:{:02x}", h[1..].parse::<u8>().unwrap());
    for (me, peer) in [("h2", "h3"), ("h3", "h2")] {
        on_host(
            me,
            &format!(
                "ip neigh replace {} lladdr {} dev eth1 nud permanent",
                addr(peer),
                mac(peer)
            ),
        )
        .ok(&format!("a static neighbour on {me}"));
    }
    fault("partition h2 h3 --oneway");
    assert!(
        control("status")
            .lines()
            .any(|l| l == "partition h2 h3 --oneway"),
        "FAIL: the status does not show the one-way partition:\n{}",
        control("status")
    );
    // h3 -> h2 passes: h2 receives the requests (its replies to h3 are dropped).
    let before = in_echos("h2");
    let (got, out) = ping("h3", "h2", 3, "0.3");
    let seen = in_echos("h2") - before;
    assert_eq!(
        got, 0,
        "FAIL: h3 got replies from h2 through the partition:\n{out}"
    );
    assert!(
        seen >= 3,
        "FAIL: h2 received {seen} of h3's 3 echo requests"
    );
    // h2 -> h3 is dropped: h3 receives nothing.
    let before = in_echos("h3");
    let (got, out) = ping("h2", "h3", 3, "0.3");
    let seen = in_echos("h3") - before;
    assert_eq!(got, 0, "FAIL: h2 got replies from h3:\n{out}");
    assert_eq!(seen, 0, "FAIL: h3 received {seen} echo requests from h2");
    fault("heal h2 h3");
    let (got, out) = ping("h2", "h3", 3, "0.3");
    assert_eq!(got, 3, "FAIL: h2 -> h3 after heal:\n{out}");
    for (me, peer) in [("h2", "h3"), ("h3", "h2")] {
        on_host(me, &format!("ip neigh del {} dev eth1", addr(peer)))
            .ok(&format!("removing the static neighbour on {me}"));
    }
}

/// `ingress h2 loss 30%`: some of h1's echo requests never reach h2 (counted by the
/// switch as h2's ingress_lost), not all; `clear h2` stops it.
#[test]
fn c_ingress_loss_drops_part_of_what_a_host_receives() {
    lab_hosts(3);
    fault("ingress h2 loss 30%");
    let st = status_of("h2");
    assert!(st.contains("ingress_loss=30%"), "FAIL: status: {st}");
    let lost_before: u64 = field(&st, "ingress_lost");
    // 40 requests at 30%: P(none lost) = 0.7^40 < 1e-6, P(all lost) = 0.3^40.
    let (got, out) = ping("h1", "h2", 40, "0.2");
    let lost = field(&status_of("h2"), "ingress_lost") - lost_before;
    assert!(
        got > 0 && got < 40,
        "FAIL: {got} of 40 replies with 30% ingress loss on h2:\n{out}"
    );
    assert!(
        lost > 0,
        "FAIL: the switch counted no frame lost towards h2"
    );
    let line = fault("clear h2");
    assert!(line.contains("ingress loss 30%"), "FAIL: clear said {line}");
    assert!(status_of("h2").contains("ingress_loss=none"));
    let (got, out) = ping("h1", "h2", 5, "0.2");
    assert_eq!(got, 5, "FAIL: loss after clear:\n{out}");
}

fn field(status: &str, name: &str) -> u64 {
    status
        .split_whitespace()
        .find_map(|w| w.strip_prefix(&format!("{name}=")))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("FAIL: no {name}= in {status}"))
}

/// `netem h2 delay 2ms`: tc shows it on h2's eth1 and no round trip through h2 is shorter
/// than the added 2 ms (netem's delay is a floor, not a timing measurement); `clear` ends it.
#[test]
fn d_netem_delay_on_one_host() {
    lab_hosts(3);
    fault("netem h2 delay 2ms");
    let qdisc = on_host("h2", "tc qdisc show dev eth1").ok("tc on h2");
    assert!(
        qdisc.contains("netem") && qdisc.contains("delay 2ms"),
        "FAIL: {qdisc}"
    );
    let (got, out) = ping("h1", "h2", 5, "0.2");
    assert_eq!(got, 5, "FAIL: delay lost packets:\n{out}");
    let min_ms: f64 = out
        .lines()
        .filter(|l| l.contains("min/avg/max"))
        .find_map(|l| l.split_once(" = ")?.1.split('/').next()?.parse().ok())
        .unwrap_or_else(|| panic!("FAIL: no rtt summary:\n{out}"));
    assert!(
        min_ms >= 2.0,
        "FAIL: a round trip through h2 took {min_ms} ms:\n{out}"
    );
    fault("clear h2");
    let qdisc = on_host("h2", "tc qdisc show dev eth1").ok("tc on h2");
    assert!(
        !qdisc.contains("netem"),
        "FAIL: netem left after clear: {qdisc}"
    );
}

/// Whether h1 can connect to rdmad on `host` (:9736 on the fabric): Ok, or the error kind.
fn rdmad_reachable(host: &str) -> Result<(), ErrorKind> {
    let a: SocketAddr = format!("{}:9736", addr(host)).parse().unwrap();
    TcpStream::connect_timeout(&a, Duration::from_secs(5))
        .map(|_| ())
        .map_err(|e| e.kind())
}

/// `kill-rdmad h2`: the host and rxe0 stay up, rdmad's port refuses; `start-rdmad h2`
/// starts the same rdmad again. Then the same with `clear h3` as the undo.
#[test]
fn e_kill_rdmad_keeps_the_host_up_and_start_rdmad_brings_it_back() {
    lab_hosts(3);
    for (host, undo) in [("h2", "start-rdmad h2"), ("h3", "clear h3")] {
        assert_eq!(rdmad_reachable(host), Ok(()), "FAIL: {host}'s rdmad before");
        fault(&format!("kill-rdmad {host}"));
        assert!(status_of(host).contains("rdmad=killed"));
        assert_eq!(
            rdmad_reachable(host),
            Err(ErrorKind::ConnectionRefused),
            "FAIL: {host}'s rdmad port after kill-rdmad"
        );
        on_host(
            host,
            "grep -q ACTIVE /sys/class/infiniband/rxe0/ports/1/state && ! grep -qx rdmad /proc/[0-9]*/comm",
        )
        .ok(&format!("{host} up with rxe0 ACTIVE and no rdmad"));
        fault(undo);
        assert!(status_of(host).contains("rdmad=running"));
        wait_on_host(
            host,
            "wget -q -O - http://127.0.0.1:9736/metrics | grep -q '^rdma_port_state_id{device=\"rxe0\",port=\"1\"} 4'",
            Duration::from_secs(60),
            "rdmad serving rxe0's metrics again",
        );
        assert_eq!(
            rdmad_reachable(host),
            Ok(()),
            "FAIL: {host}'s rdmad after {undo}"
        );
    }
}

/// `rxe-remove h2`: rxe0 is gone while eth1 and the host stay up; `rxe-add h2` brings it
/// back ACTIVE. Then the same with `clear h3` as the undo.
#[test]
fn f_rxe_remove_keeps_the_host_up_and_rxe_add_brings_it_back() {
    lab_hosts(3);
    for (host, undo) in [("h2", "rxe-add h2"), ("h3", "clear h3")] {
        fault(&format!("rxe-remove {host}"));
        assert!(status_of(host).contains("rxe0=removed"));
        on_host(host, "[ ! -e /sys/class/infiniband/rxe0 ]").ok(&format!("rxe0 gone from {host}"));
        let (got, out) = ping("h1", host, 3, "0.2");
        assert_eq!(
            got, 3,
            "FAIL: {host} unreachable over IP without rxe0:\n{out}"
        );
        fault(undo);
        assert!(status_of(host).contains("rxe0=present"));
        on_host(
            host,
            "grep -q ACTIVE /sys/class/infiniband/rxe0/ports/1/state && rdma link show rxe0/1 | grep -q 'netdev eth1'",
        )
        .ok(&format!("rxe0 back ACTIVE on eth1 of {host}"));
    }
}

/// Bad fault words get a clear error and change nothing.
#[test]
fn g_bad_faults_are_refused() {
    lab_hosts(3);
    for words in [
        "ingress h2 loss 120%",
        "ingress h2 delay 5ms",
        "partition h2 h2 --oneway",
        "kill-rdmad",
        "rxe-add h9",
        "explode h2",
    ] {
        let answer = control(&format!("fault {words}"));
        assert!(
            answer.starts_with("error "),
            "FAIL: fault {words} was accepted: {answer}"
        );
    }
    assert!(status_of("h2").contains("ingress_loss=none"));
}
