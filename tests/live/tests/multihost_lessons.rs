//! The course's two-host programs (lessons/code, chapter 5), run between h1 and h2 of the
//! multi-host lab (`rdmactl lab test --hosts N`, N >= 2; with more hosts, h3 adds one
//! client). Part of the multi-host suite: runs on h1, reaches h2 through the lab
//! controller. No test here injects a fault or depends on another test's.
//!
//! The examples are in /opt/rdma/examples on every host (built by tests/lessons-build).
//! A missing example is a failure, never a skip.
use live_tests::fabric::{addr, hw_counters, lab_hosts, on_host, spawn_on_host, wait_on_host};
use std::time::Duration;

const EXAMPLES: &str = "/opt/rdma/examples";

/// The example's path, failing unless it is installed on `host`.
fn example(host: &str, name: &str) -> String {
    let path = format!("{EXAMPLES}/{name}");
    on_host(host, &format!("test -x {path}")).ok(&format!(
        "FAIL: example {path} is missing on {host}: build with tests/lessons-build"
    ));
    path
}

/// Start `cmd` on `host` with its output in `log`, wait until `ready` shows in the log.
/// The handle's output is the log; its code is the command's.
fn start_server(
    host: &str,
    cmd: &str,
    log: &str,
    ready: &str,
) -> std::thread::JoinHandle<live_tests::fabric::Remote> {
    let server = spawn_on_host(
        host,
        &format!("rm -f {log}; {cmd} > {log} 2>&1; rc=$?; cat {log}; exit $rc"),
    );
    wait_on_host(
        host,
        &format!("grep -q '{ready}' {log}"),
        Duration::from_secs(120),
        &format!("{cmd:?} ready ({ready:?})"),
    );
    server
}

fn join(h: std::thread::JoinHandle<live_tests::fabric::Remote>) -> live_tests::fabric::Remote {
    h.join()
        .expect("the thread that ran a host's command panicked")
}

/// Print what a host's command printed (shown with --nocapture and on failure).
fn show(what: &str, r: &live_tests::fabric::Remote) {
    eprintln!("--- {what} (exit {}):\n{}", r.code, r.output.trim_end());
}

fn has(r: &live_tests::fabric::Remote, needle: &str, what: &str) {
    assert!(
        r.output.contains(needle),
        "FAIL: {what}: expected {needle:?} in:\n{}",
        r.output
    );
}

/// `rdma resource show`'s summary of rxe0 on `host`: kind -> count (pd, cq, qp, mr, ...).
fn rdma_res(host: &str) -> std::collections::BTreeMap<String, u64> {
    let out = on_host(host, "rdma resource show").ok("rdma resource show");
    let line = out
        .lines()
        .find(|l| l.contains(" rxe0: "))
        .unwrap_or_else(|| panic!("FAIL: no rxe0 in `rdma resource show` on {host}:\n{out}"));
    let words: Vec<&str> = line
        .split_once(" rxe0: ")
        .unwrap()
        .1
        .split_whitespace()
        .collect();
    let counts: std::collections::BTreeMap<String, u64> = words
        .chunks(2)
        .filter_map(|kv| Some((kv[0].to_string(), kv.get(1)?.parse().ok()?)))
        .collect();
    for kind in ["pd", "cq", "qp", "mr"] {
        assert!(counts.contains_key(kind), "FAIL: no {kind} in {line:?}");
    }
    counts
}

/// The verbs objects a process can leak: what must be back where it started.
fn objects(r: &std::collections::BTreeMap<String, u64>) -> Vec<(String, u64)> {
    ["pd", "cq", "qp", "mr", "srq"]
        .iter()
        .filter_map(|k| r.get(*k).map(|v| (k.to_string(), *v)))
        .collect()
}

/// Chapter 5's server (issue 31, items 1-3): refusals, three clients at once of which one
/// is killed mid-transfer, each connection with its own PD and CQ, the QP's access flags
/// as rdma_cm set them, every connection torn down through ERR and its flush completions,
/// and rxe0's PD/CQ/QP/MR counts back where they were while the server still runs.
#[test]
fn ch05_cm_event_loop_serves_many_clients_survives_a_killed_one_and_leaks_nothing() {
    let n = lab_hosts(2);
    let bin = example("h2", "05_cm_event_loop");
    example("h1", "05_cm_event_loop");
    let server_addr = addr("h2");
    let log = "/tmp/cm_event_loop_server.log";
    let before = rdma_res("h2");
    eprintln!("h2 rxe0 before the server: {before:?}");
    // -n 4: the three clients below, then one more once the leak check is done.
    let server = start_server(
        "h2",
        &format!("{bin} server -p 7472 -n 4 -c 3"),
        log,
        "server: listening on port 7472",
    );

    // A client that speaks another protocol version: refused with a reason.
    let refused = on_host("h1", &format!("{bin} client -p 7472 -v 99 {server_addr}"));
    show("h1: client -v 99", &refused);
    assert_eq!(
        refused.code, 3,
        "FAIL: a refused client exits 3:\n{}",
        refused.output
    );
    has(
        &refused,
        "client: event RDMA_CM_EVENT_REJECTED (status 28)",
        "refusal",
    );
    has(
        &refused,
        "client: the server says: protocol version 99, I speak 1",
        "the reject's private data",
    );

    // Nobody listens on that port: the remote CM itself rejects (invalid service ID).
    let nobody = on_host("h1", &format!("{bin} client -p 7999 {server_addr}"));
    show("h1: client -p 7999", &nobody);
    assert_eq!(
        nobody.code, 3,
        "FAIL: no listener: exit 3:\n{}",
        nobody.output
    );
    has(
        &nobody,
        "client: event RDMA_CM_EVENT_REJECTED (status 8)",
        "no listener",
    );

    // An address no host has: address resolution fails.
    let lost = on_host("h1", &format!("{bin} client -p 7472 -t 3000 10.2.0.250"));
    show("h1: client 10.2.0.250", &lost);
    assert_eq!(
        lost.code, 2,
        "FAIL: an unknown address: exit 2:\n{}",
        lost.output
    );
    has(
        &lost,
        "client: event RDMA_CM_EVENT_ADDR_ERROR",
        "unknown address",
    );

    // Three clients at once: a long one (on h3, or h1 with 2 hosts) that is killed
    // mid-transfer, and two from h1 that write 10 messages each, 0.5 s apart.
    let third = if n >= 3 { "h3" } else { "h1" };
    let third_bin = example(third, "05_cm_event_loop");
    let long = spawn_on_host(
        third,
        &format!(
            "{third_bin} client -p 7472 -r 1000000 -d 20 {server_addr} > /tmp/long.log 2>&1 & \
             echo $! > /tmp/long.pid; wait $!; rc=$?; cat /tmp/long.log; exit $rc"
        ),
    );
    wait_on_host(
        "h2",
        &format!("grep -q 'wrote: \"hello from {third}/' {log}"),
        Duration::from_secs(120),
        "the long client's first message",
    );
    let clients: Vec<_> = (0..2)
        .map(|_| {
            spawn_on_host(
                "h1",
                &format!("{bin} client -p 7472 -r 10 -d 500 {server_addr}"),
            )
        })
        .collect();
    // While all three are connected, a fourth is refused: the server caps open connections.
    wait_on_host(
        "h2",
        &format!("grep -q '(3 open)' {log}"),
        Duration::from_secs(120),
        "three open connections",
    );
    let full = on_host("h1", &format!("{bin} client -p 7472 {server_addr}"));
    show("h1: a fourth client", &full);
    // The two short clients may have ended by now; refused only if they had not.
    if full.code == 3 {
        has(
            &full,
            "client: the server says: server full: 3 of 3 open",
            "cap",
        );
    } else {
        assert_eq!(full.code, 0, "FAIL: the fourth client:\n{}", full.output);
    }
    // The long client is still writing: kill it mid-transfer (SIGKILL: its kernel sends
    // the DREQ when it closes the dead process's files).
    let killed = on_host(third, "kill -9 $(cat /tmp/long.pid)");
    assert_eq!(killed.code, 0, "FAIL: kill:\n{}", killed.output);
    let long = join(long);
    show("the killed client", &long);
    assert_eq!(
        long.code, 137,
        "FAIL: the long client was not killed:\n{}",
        long.output
    );
    has(
        &long,
        "client: WRITE and SEND completed",
        "the long client before the kill",
    );
    for c in clients {
        let c = join(c);
        show("a client", &c);
        assert_eq!(c.code, 0, "FAIL: a client exited {}:\n{}", c.code, c.output);
        for line in [
            "client: event RDMA_CM_EVENT_ADDR_RESOLVED (status 0)",
            "client: event RDMA_CM_EVENT_ROUTE_RESOLVED (status 0)",
            "client: event RDMA_CM_EVENT_ESTABLISHED (status 0)",
            "client: the server grants 128 bytes to write",
            // rdma_cm granted REMOTE_WRITE on the client's QP too, never asked for.
            ") grants the peer: REMOTE_WRITE\n",
            "client: 10 messages written",
            "client: event RDMA_CM_EVENT_DISCONNECTED (status 0)",
            "OK",
        ] {
            has(&c, line, "a client");
        }
    }
    // Three connections ended (four if the capped client got in): none is open, and
    // every PD, CQ, QP and MR of theirs is gone while the server still runs.
    let ended = if full.code == 0 { 4 } else { 3 };
    wait_on_host(
        "h2",
        &format!("test $(grep -c ' disconnected after ' {log}) -ge {ended}"),
        Duration::from_secs(120),
        "every connection's teardown",
    );
    let during = rdma_res("h2");
    eprintln!("h2 rxe0 with the server idle: {during:?}");
    assert_eq!(
        objects(&during),
        objects(&before),
        "FAIL: the idle server still holds verbs objects"
    );
    if full.code == 3 {
        // The fourth connection the server waits for.
        let last = on_host("h1", &format!("{bin} client -p 7472 {server_addr}"));
        show("h1: the last client", &last);
        assert_eq!(last.code, 0, "FAIL: the last client:\n{}", last.output);
    }
    let s = join(server);
    show("h2: server -n 4 -c 3", &s);
    assert_eq!(
        s.code, 0,
        "FAIL: the server exited {}:\n{}",
        s.code, s.output
    );
    has(
        &s,
        "server: refusing a client: protocol version 99, I speak 1",
        "server",
    );
    has(&s, "server: served 4 clients, refused", "server");
    // rdma_cm moved each accepted QP to INIT with REMOTE_WRITE (kernel cm.c,
    // cm_init_qp_init_attr), and with no responder resources nothing more.
    let grants = s
        .output
        .lines()
        .filter(|l| {
            l.starts_with("server: QP 0x") && l.ends_with(") grants the peer: REMOTE_WRITE")
        })
        .count();
    assert_eq!(
        grants, 4,
        "FAIL: four accepts, four grants printed:\n{}",
        s.output
    );
    let killed_line = s
        .output
        .lines()
        .find(|l| {
            l.starts_with(&format!("server: \"{third}/")) && l.contains(" disconnected after ")
        })
        .unwrap_or_else(|| panic!("FAIL: the killed client's teardown:\n{}", s.output));
    // "...; 4 posted receives back, K flushed; freeing it": all four, K > 0 of them flushed.
    let flushed: u32 = killed_line
        .split_once("; 4 posted receives back, ")
        .and_then(|(_, rest)| rest.split_once(" flushed;"))
        .and_then(|(k, _)| k.parse().ok())
        .unwrap_or_else(|| panic!("FAIL: not all four receives came back: {killed_line}"));
    assert!(
        flushed > 0,
        "FAIL: the killed connection's receives were not flushed: {killed_line}"
    );
    assert!(
        !s.output.contains("never flushed") && !s.output.contains("FAIL"),
        "FAIL: {}",
        s.output
    );
    let after = rdma_res("h2");
    assert_eq!(
        objects(&after),
        objects(&before),
        "FAIL: verbs objects after the server"
    );
}

/// Run the TCP-exchange example: server on h2, client on h1, both with `args`, the client
/// also with `client_args`.
fn rc_tcp(
    port: u16,
    args: &str,
    client_args: &str,
) -> (live_tests::fabric::Remote, live_tests::fabric::Remote) {
    let bin = example("h2", "05_rc_tcp");
    example("h1", "05_rc_tcp");
    let server = start_server(
        "h2",
        &format!("{bin} -p {port} {args}"),
        &format!("/tmp/rc_tcp_{port}.log"),
        &format!("waiting for a client on TCP port {port}"),
    );
    let client = on_host(
        "h1",
        &format!("{bin} -p {port} {args} {client_args} {}", addr("h2")),
    );
    let server = join(server);
    show(&format!("h1: 05_rc_tcp {args} {client_args}"), &client);
    show(&format!("h2: 05_rc_tcp {args}"), &server);
    (client, server)
}

#[test]
fn ch05_rc_tcp_exchanges_lid_qpn_psn_gid_and_ping_pongs_h1_h2() {
    lab_hosts(2);
    let before = hw_counters("h2")["rcvd_pkts"];
    let (c, s) = rc_tcp(18515, "-n 100 -s 4096", "");
    assert_eq!(c.code, 0, "FAIL: client exited {}:\n{}", c.code, c.output);
    assert_eq!(s.code, 0, "FAIL: server exited {}:\n{}", s.code, s.output);
    for (r, me, peer) in [(&c, "h1", "h2"), (&s, "h2", "h1")] {
        has(r, "local address:  LID 0x0000, QPN 0x", me);
        has(r, &format!("GID ::ffff:{}, active MTU 1024", addr(me)), me);
        let remote = r
            .output
            .lines()
            .find(|l| l.starts_with("remote address:"))
            .unwrap_or_else(|| panic!("FAIL: no remote address on {me}:\n{}", r.output));
        assert!(
            remote.ends_with(&format!("GID ::ffff:{}, active MTU 1024", addr(peer))),
            "FAIL: {me} got {remote}"
        );
        has(r, "path MTU 1024 (the smaller active MTU)", me);
        has(r, "100 round trips of 4096 bytes", me);
        has(r, "OK", me);
    }
    // What one side printed as its own address is what the other received.
    let field = |r: &live_tests::fabric::Remote, prefix: &str| -> String {
        let l = r.output.lines().find(|l| l.starts_with(prefix)).unwrap();
        l.split_once("QPN").unwrap().1.to_string()
    };
    assert_eq!(field(&c, "local address:"), field(&s, "remote address:"));
    assert_eq!(field(&s, "local address:"), field(&c, "remote address:"));
    // 4096 bytes at path MTU 1024 are 4 packets: 100 pings reached h2 as >= 400 packets.
    let got = hw_counters("h2")["rcvd_pkts"] - before;
    assert!(got >= 400, "FAIL: h2 received only {got} packets");
}

/// IP's FragFails on `host`: packets the kernel could not send without fragmenting.
fn frag_fails(host: &str) -> u64 {
    let out = on_host(host, "grep '^Ip:' /proc/net/snmp").ok("reading /proc/net/snmp");
    let mut lines = out.lines();
    let (names, values) = (lines.next().unwrap_or(""), lines.next().unwrap_or(""));
    names
        .split_whitespace()
        .zip(values.split_whitespace())
        .find(|(n, _)| *n == "FragFails")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or_else(|| panic!("FAIL: no Ip FragFails on {host}:\n{out}"))
}

/// Chapter 5, exercise 4 (the defect 2): a path MTU of 4096 on a 1500-byte link.
/// Same-host, rxe loops its own packets back and the 4000-byte SEND arrives; between two
/// hosts each 4 KiB packet leaves with IP's "don't fragment" bit, the kernel refuses it
/// (FragFails), rxe counts send_err and tries again, and the SEND never completes.
/// A message that fits in one 1500-byte packet still goes through at path MTU 4096.
#[test]
fn ch05_path_mtu_4096_between_hosts_small_sends_pass_large_never_complete() {
    lab_hosts(2);
    let (c, s) = rc_tcp(18516, "-m 4096 -n 20 -s 1400", "");
    assert_eq!(c.code, 0, "FAIL: 1400 B at path MTU 4096:\n{}", c.output);
    assert_eq!(s.code, 0, "FAIL: server:\n{}", s.output);
    has(&c, "path MTU 4096 (forced with -m)", "client");
    has(&c, "20 round trips of 1400 bytes", "client");

    let send_err = hw_counters("h1")["send_err"];
    let frag = frag_fails("h1");
    // The client gives up after 10 s and says so over TCP; the server would wait 60 s.
    let (c, s) = rc_tcp(18517, "-m 4096 -n 1 -s 4000", "-w 10");
    assert_eq!(
        c.code, 1,
        "FAIL: 4000 B at path MTU 4096 must fail:\n{}",
        c.output
    );
    has(&c, "client: no send completion within 10 s", "client");
    assert_eq!(s.code, 1, "FAIL: the server must fail too:\n{}", s.output);
    has(
        &s,
        "server: the peer says: fail after 0 of 1 round trips",
        "server",
    );
    assert!(!s.output.contains("receive completion: IBV_WC_SUCCESS"));
    let send_err = hw_counters("h1")["send_err"] - send_err;
    let frag = frag_fails("h1") - frag;
    eprintln!("h1: rxe send_err +{send_err}, Ip FragFails +{frag} in the 4000-byte run");
    assert!(send_err > 0, "FAIL: rxe counted no send_err on h1");
    assert!(frag > 0, "FAIL: IP counted no FragFails on h1");
}
