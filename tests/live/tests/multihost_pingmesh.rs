//! Pingmesh on the multi-host lab (`rdmactl lab test --hosts 4`, run on h1): one rdmad per
//! host (web 127.0.0.1:9811, probe listener :9737) given only the lab's DNS group name
//! (`--probe.peers-dns rdmad.lab`, answered by h1's dnsmasq with every host's address and
//! the `_rdmad-probe._tcp.rdmad.lab` SRV records for the port). Each host's metrics are read
//! on that host through the lab controller.
//!
//! Tests run one at a time in name order; each starts the four rdmads if they are not
//! running (so a test does not depend on another's success). The last test stops the
//! rdmads.
//!
//! Not here: netem loss on h3 showing on h3's pairs only, and the pingmesh alerts: those are
//! checked with a real Prometheus from the machine that runs the lab, by
//! tests/multihost-prometheus (UD's lost-request counter; over RC a lost packet is only a
//! retransmit, i.e. a slow sample, and under TCG healthy pairs have as many slow samples).
//! h4 killed (its pairs unreachable), taken out of rdmad.lab (its series gone, the others
//! probing on) and back (every pair answering) is checked there too, on the same rdmad
//! metrics (dashboards/multihost_check.py: kill-h4-pairs-unreachable,
//! dns-remove-h4-*, h4-back-*); this suite checked it a second time, 87 s of CI.
use live_tests::fabric::{lab_hosts, on_host, wait_on_host};
use live_tests::parse_exposition;
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

const HOSTS: [&str; 4] = ["h1", "h2", "h3", "h4"];
const WEB: u16 = 9811;
const PROBE_PORT: u16 = 9737;
const SECRET: &str = "pingmesh-lab-secret-0123456789abcdef";

fn peer_key(host: &str) -> String {
    format!("10.2.0.{}:{PROBE_PORT}", host.trim_start_matches('h'))
}

/// Start this test's rdmad on `host` unless it already runs.
fn ensure_rdmad(host: &str) {
    let script = format!(
        "if [ -f /tmp/rdmad-pm.pid ] && kill -0 $(cat /tmp/rdmad-pm.pid) 2>/dev/null; then exit 0; fi; \
         echo {SECRET} > /tmp/pm.secret; \
         rdmad --web.listen-address=127.0.0.1:{WEB} --probe.enable --probe.interval 2 \
           --probe.iterations 20 --probe.mr-sizes= --probe.devices rxe0 --probe.peer-histograms \
           --probe.listen=:{PROBE_PORT} --probe.peers-dns rdmad.lab \
           --probe.secret-file /tmp/pm.secret > /tmp/rdmad-pm.log 2>&1 & \
         echo $! > /tmp/rdmad-pm.pid"
    );
    on_host(host, &script).ok(&format!("starting the pingmesh rdmad on {host}"));
}

fn ensure_all() {
    lab_hosts(4);
    for h in HOSTS {
        ensure_rdmad(h);
    }
}

/// One scrape of the pingmesh rdmad on `host`; `None` while it does not answer yet.
fn scrape(host: &str) -> Option<BTreeMap<String, f64>> {
    let r = on_host(
        host,
        &format!("wget -q -O - http://127.0.0.1:{WEB}/metrics"),
    );
    if r.code != 0 {
        return None;
    }
    Some(parse_exposition(&r.output).unwrap_or_else(|e| panic!("FAIL: rdmad on {host}: {e}")))
}

/// The value of the series of `name` whose labels contain every `label="value"` of `want`.
fn value(s: &BTreeMap<String, f64>, name: &str, want: &[(&str, &str)]) -> Option<f64> {
    s.iter()
        .find(|(k, _)| {
            k.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('{') || rest.is_empty())
                && want
                    .iter()
                    .all(|(l, v)| k.contains(&format!("{l}=\"{v}\"")))
        })
        .map(|(_, v)| *v)
}

/// Peer-probe value of `name` on `src` towards `dst` (kind="peer").
fn pair(s: &BTreeMap<String, f64>, name: &str, dst: &str, extra: &[(&str, &str)]) -> Option<f64> {
    let peer = peer_key(dst);
    let mut want = vec![("kind", "peer"), ("peer", peer.as_str())];
    want.extend_from_slice(extra);
    value(s, name, &want)
}

/// `rdma_probe_peer_status` of `dst` (0 ok, 1 agent, 2 host, 3 rdma).
fn status(s: &BTreeMap<String, f64>, dst: &str) -> Option<f64> {
    value(
        s,
        "rdma_probe_peer_status",
        &[("peer", peer_key(dst).as_str())],
    )
}

/// Scrape every host until `cond` holds for all of them, at most `limit`; fails with the
/// last scrapes.
fn wait_all(
    hosts: &[&str],
    limit: Duration,
    what: &str,
    cond: &dyn Fn(&str, &BTreeMap<String, f64>) -> bool,
) -> BTreeMap<String, BTreeMap<String, f64>> {
    let start = Instant::now();
    loop {
        let mut all = BTreeMap::new();
        let mut ok = true;
        for h in hosts {
            match scrape(h) {
                Some(s) => {
                    ok &= cond(h, &s);
                    all.insert(h.to_string(), s);
                }
                None => ok = false,
            }
        }
        if ok {
            println!("{what}: after {:.0} s", start.elapsed().as_secs_f64());
            return all;
        }
        if start.elapsed() > limit {
            let logs: String = hosts
                .iter()
                .map(|h| {
                    let r = on_host(h, "tail -n 20 /tmp/rdmad-pm.log");
                    format!("--- {h} log:\n{}", r.output)
                })
                .collect();
            let peers: String = all
                .iter()
                .map(|(h, s)| {
                    let lines: Vec<String> = s
                        .iter()
                        .filter(|(k, _)| {
                            k.starts_with("rdma_probe_peer_status{")
                                || k.starts_with("rdma_probe_discover")
                        })
                        .map(|(k, v)| format!("  {k} {v}"))
                        .collect();
                    format!("--- {h}:\n{}\n", lines.join("\n"))
                })
                .collect();
            panic!(
                "FAIL: {what} not within {} s\n{peers}{logs}",
                limit.as_secs()
            );
        }
        std::thread::sleep(Duration::from_secs(2));
    }
}

fn others(host: &str) -> Vec<&'static str> {
    HOSTS.iter().copied().filter(|h| *h != host).collect()
}

#[test]
fn a_every_rdmad_discovers_the_others_from_the_dns_name_and_the_matrix_has_12_pairs() {
    ensure_all();
    let all = wait_all(
        &HOSTS,
        Duration::from_secs(300),
        "every host probing the 3 others",
        &|h, s| {
            value(s, "rdma_probe_discovered_peers", &[("source", "dns")]) == Some(3.0)
                && others(h).iter().all(|o| {
                    pair(s, "rdma_probe_runs_total", o, &[]).unwrap_or(0.0) >= 2.0
                        && status(s, o) == Some(0.0)
                })
        },
    );
    let mut matrix = BTreeSet::new();
    for (h, s) in &all {
        let own = peer_key(h);
        assert!(
            !s.keys().any(|k| k.contains(&format!("peer=\"{own}\""))),
            "FAIL: {h} has series for itself ({own})"
        );
        for o in others(h) {
            let count = pair(s, "rdma_probe_latency_seconds_count", o, &[]).unwrap_or(0.0);
            assert!(count > 0.0, "FAIL: {h} -> {o}: no latency samples");
            assert!(
                pair(
                    s,
                    "rdma_probe_latency_seconds_count",
                    o,
                    &[("peer_rack", "")]
                )
                .is_some(),
                "FAIL: {h} -> {o}: no peer_rack label"
            );
            matrix.insert((h.clone(), o.to_string()));
        }
        assert_eq!(
            value(s, "rdma_probe_pinglist_peers", &[]),
            Some(3.0),
            "FAIL: {h}: a full mesh of 3"
        );
    }
    println!("matrix: {matrix:?}");
    assert_eq!(matrix.len(), 12, "FAIL: the matrix: {matrix:?}");
}

#[test]
fn z_stop_the_pingmesh_rdmads() {
    lab_hosts(4);
    for h in HOSTS {
        on_host(
            h,
            "if [ -f /tmp/rdmad-pm.pid ]; then kill $(cat /tmp/rdmad-pm.pid) 2>/dev/null; rm -f /tmp/rdmad-pm.pid; fi; exit 0",
        )
        .ok(&format!("stopping the pingmesh rdmad on {h}"));
    }
    for h in HOSTS {
        wait_on_host(
            h,
            &format!("! netstat -ltn | grep -q ':{PROBE_PORT} '"),
            Duration::from_secs(60),
            "the pingmesh rdmad gone",
        );
    }
}
