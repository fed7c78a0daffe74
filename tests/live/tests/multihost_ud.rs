//! Multi-host UD probes, run on h1 of `rdmactl lab test --hosts N` (N >= 3; tests/run boots
//! 4): every other host runs rdmad with a probe listener, h1's rdmad probes them all over UD
//! (the default transport), every pair h1 -> hK gets latency samples and no loss counter
//! above what was sent, and each host holds exactly one UD QP more on rxe0 than before (the
//! rdmad under test), however many peers it serves or probes. h1 finds its peers in a
//! `--probe.peers-file` that first lists h2 alone, then every other host: h1's QPs on rxe0
//! (every type, from `rdma res`) are the same with 1 peer and with 3. Independent of the other multi-host tests' faults: it starts and stops
//! its own rdmad instances (by their pid) and needs every host up.
#![forbid(unsafe_code)]

use live_tests::fabric::{addr, lab_hosts, on_host, wait_on_host};
use live_tests::Rdmad;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

const SECRET: &str = "multihost UD probe secret 0123456789";
const PORT: u16 = 7300;

/// QPs of rxe0 in `rdma -j res show qp` output whose type is `ty` (any type when None).
fn qps_of(json: &str, ty: Option<&str>) -> usize {
    let v: serde_json::Value = serde_json::from_str(json.trim())
        .unwrap_or_else(|e| panic!("FAIL: rdma -j res show qp: {e}: {json}"));
    v.as_array()
        .map(|a| {
            a.iter()
                .filter(|q| q["ifname"] == "rxe0" && ty.is_none_or(|t| q["type"] == t))
                .count()
        })
        .unwrap_or(0)
}

/// UD QPs of rxe0 in `rdma -j res show qp` output.
fn ud_qps(json: &str) -> usize {
    qps_of(json, Some("UD"))
}

/// Replace the peers file in one rename (rdmad reads it again when it changes).
fn write_peers(path: &std::path::Path, peers: &[String]) {
    let targets: Vec<String> = peers.iter().map(|p| format!("\"{p}\"")).collect();
    let tmp = path.with_extension("tmp");
    std::fs::write(
        &tmp,
        format!("[{{\"targets\": [{}]}}]\n", targets.join(", ")),
    )
    .expect("peers file");
    std::fs::rename(&tmp, path).expect("peers file rename");
}

#[test]
fn h1_probes_every_other_host_over_ud_with_one_ud_qp_per_host() {
    let n = lab_hosts(3);
    let others: Vec<String> = (2..=n).map(|k| format!("h{k}")).collect();
    let qps_here = || {
        let out = std::process::Command::new("rdma")
            .args(["-j", "res", "show", "qp"])
            .output()
            .expect("rdma res show qp");
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    let qps_on = |h: &str| on_host(h, "rdma -j res show qp").ok("rdma res show qp");
    // Whatever else may hold UD QPs: the rdmads under test add one each.
    let before_here = ud_qps(&qps_here());
    let before: Vec<usize> = others.iter().map(|h| ud_qps(&qps_on(h))).collect();
    for h in &others {
        on_host(
            h,
            &format!(
                "echo '{SECRET}' > /tmp/ud.secret; rdmad --web.listen-address=127.0.0.1:9811 --probe.enable --probe.interval 3600 --probe.mr-sizes= --probe.listen={}:{PORT} --probe.secret-file=/tmp/ud.secret > /tmp/rdmad-ud.log 2>&1 & echo $! > /tmp/rdmad-ud.pid",
                addr(h)
            ),
        )
        .ok("starting rdmad's probe listener");
        wait_on_host(
            h,
            &format!("netstat -ltn | grep -q ':{PORT} '"),
            Duration::from_secs(60),
            "rdmad's probe listener",
        );
    }
    let secret = std::env::temp_dir().join("multihost-ud.secret");
    std::fs::write(&secret, format!("{SECRET}\n")).expect("secret file");
    let peers: Vec<String> = others
        .iter()
        .map(|h| format!("{}:{PORT}", addr(h)))
        .collect();
    let peers_file = std::env::temp_dir().join("multihost-ud-peers.json");
    write_peers(&peers_file, &peers[..1]);
    let rdmad = Rdmad::start(&[
        "--probe.enable",
        "--probe.interval",
        "1",
        "--probe.mr-sizes=",
        "--probe.peer-histograms",
        "--probe.transport",
        "ud",
        "--probe.peers-file",
        peers_file.to_str().expect("utf-8"),
        "--probe.secret-file",
        secret.to_str().expect("utf-8"),
    ]);
    let count = |s: &BTreeMap<String, f64>, peer: &str, metric: &str| -> f64 {
        s.iter()
            .filter(|(k, _)| {
                k.starts_with(metric)
                    && k.contains(&format!("peer=\"{peer}\""))
                    && k.contains("transport=\"ud\"")
            })
            .map(|(_, v)| *v)
            .sum()
    };
    let probed = |want: &[String], what: &str| -> BTreeMap<String, f64> {
        let deadline = Instant::now() + Duration::from_secs(180);
        loop {
            let s = rdmad.try_scrape().map(|s| s.series).unwrap_or_default();
            if want
                .iter()
                .all(|p| count(&s, p, "rdma_probe_latency_seconds_count{") >= 100.0)
            {
                return s;
            }
            assert!(
                Instant::now() < deadline,
                "FAIL: h1 does not probe {what} over UD within 180 s: {:?}",
                s.iter()
                    .filter(|(k, _)| k.starts_with("rdma_probe_"))
                    .collect::<Vec<_>>()
            );
            std::thread::sleep(Duration::from_secs(1));
        }
    };
    // One peer (h2), from the file.
    let one = probed(&peers[..1], "its one peer");
    let with_one = qps_here();
    let sessions = |s: &BTreeMap<String, f64>| -> f64 {
        s.iter()
            .filter(|(k, _)| k.starts_with("rdma_probe_ud_sessions{"))
            .map(|(_, v)| *v)
            .sum()
    };
    // Every other host: the file changes, rdmad reads it again (no restart).
    write_peers(&peers_file, &peers);
    let series = probed(&peers, "every peer");
    let with_all = qps_here();
    println!(
        "h1's QPs on rxe0: {} with 1 peer ({} UD sessions), {} with {} peers ({} UD sessions)",
        qps_of(&with_one, None),
        sessions(&one),
        qps_of(&with_all, None),
        peers.len(),
        sessions(&series)
    );
    assert_eq!(
        qps_of(&with_all, None),
        qps_of(&with_one, None),
        "FAIL: h1's QPs grew from 1 peer to {}: {with_one} -> {with_all}",
        peers.len()
    );
    assert!(
        sessions(&series) >= sessions(&one) + (peers.len() - 1) as f64,
        "FAIL: the peers added to the file were not probed through new UD sessions"
    );
    for p in &peers {
        let samples = count(&series, p, "rdma_probe_latency_seconds_count{");
        let sum = count(&series, p, "rdma_probe_latency_seconds_sum{");
        let sent = count(&series, p, "rdma_probe_sent_total{");
        let lost = count(&series, p, "rdma_probe_lost_total{");
        println!(
            "h1 -> {p} over UD: {samples} samples, mean RTT {:.1} us, sent {sent} lost {lost}",
            sum / samples * 1e6
        );
        assert!(
            sum > 0.0 && sum / samples < 0.1,
            "FAIL: {p}: implausible RTT"
        );
        assert!(
            sent >= samples && lost <= sent,
            "FAIL: {p}: sent {sent}, lost {lost}, {samples} samples"
        );
    }
    let here = qps_here();
    assert_eq!(
        ud_qps(&here),
        before_here + 1,
        "FAIL: h1 probes {} peers from one UD QP: {here}",
        peers.len()
    );
    for (h, b) in others.iter().zip(&before) {
        let out = qps_on(h);
        assert_eq!(
            ud_qps(&out),
            b + 1,
            "FAIL: {h} answers from one UD QP: {out}"
        );
    }
    drop(rdmad);
    let _ = std::fs::remove_file(&peers_file);
    for h in &others {
        on_host(h, "kill $(cat /tmp/rdmad-ud.pid)").ok("stopping rdmad");
    }
}
