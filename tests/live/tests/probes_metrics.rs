//! Live test of rdmad's `probes` collector, run INSIDE the Soft-RoCE lab VM
//! (`rdmactl lab test --only probes_metrics`): rdmad started with `--probe.enable
//! --probe.interval 1` must, after a few probe rounds, export `rdma_probe_latency_seconds` as
//! a histogram with samples for every loopback operation (send, write, read) on rxe0, the
//! `+Inf` bucket equal to `_count`, successful runs counted, and
//! `rdma_scrape_collector_success{collector="probes"} 1`. No key, rkey or address may appear.
//!
//! No device is a failure, never a skip: the lab always boots with rxe0.
#![forbid(unsafe_code)]

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use live_tests::{Rdmad, LAB_DEVICE};

const OPS: [&str; 3] = ["send", "write", "read"];

fn labels(op: &str) -> String {
    format!(
        "device=\"{LAB_DEVICE}\",port=\"1\",op=\"{op}\",kind=\"loopback\",peer=\"\",transport=\"rc\""
    )
}

/// Whether every op of rxe0 has at least one latency sample.
fn all_ops_sampled(series: &BTreeMap<String, f64>) -> bool {
    OPS.iter().all(|op| {
        series
            .get(&format!(
                "rdma_probe_latency_seconds_count{{{}}}",
                labels(op)
            ))
            .is_some_and(|n| *n > 0.0)
    })
}

#[test]
fn probes_collector_exports_latency_histograms_for_rxe0() {
    let rdmad = Rdmad::start(&[
        "--probe.enable",
        "--probe.interval",
        "1",
        "--probe.devices",
        LAB_DEVICE,
        "--probe.mr-sizes",
        "4K",
    ]);
    // A few rounds: under qemu TCG one round of three ops takes well under 10 s.
    let deadline = Instant::now() + Duration::from_secs(120);
    let (series, body) = loop {
        let scrape = rdmad.scrape();
        let (series, body) = (scrape.series, scrape.text);
        let rounds = series
            .get("rdma_probe_rounds_total")
            .copied()
            .unwrap_or(0.0);
        if all_ops_sampled(&series) && rounds >= 3.0 {
            break (series, body);
        }
        assert!(
            Instant::now() < deadline,
            "FAIL: after 120 s not every op of {LAB_DEVICE} has samples (rounds {rounds}):\n{}",
            body.lines()
                .filter(|l| l.starts_with("rdma_probe_") || l.contains("probes"))
                .collect::<Vec<_>>()
                .join("\n")
        );
        std::thread::sleep(Duration::from_secs(1));
    };
    assert_eq!(
        series.get("rdma_scrape_collector_success{collector=\"probes\"}"),
        Some(&1.0),
        "FAIL: probes collector did not succeed"
    );
    assert!(
        body.contains("# TYPE rdma_probe_latency_seconds histogram\n"),
        "FAIL: rdma_probe_latency_seconds is not typed histogram"
    );
    for op in OPS {
        let l = labels(op);
        let count = series[&format!("rdma_probe_latency_seconds_count{{{l}}}")];
        let inf = series
            .get(&format!(
                "rdma_probe_latency_seconds_bucket{{{l},le=\"+Inf\"}}"
            ))
            .copied()
            .unwrap_or_else(|| panic!("FAIL: no +Inf bucket for {op}"));
        assert_eq!(inf, count, "FAIL: {op}: +Inf bucket != _count");
        let buckets: Vec<f64> = series
            .iter()
            .filter(|(k, _)| k.starts_with(&format!("rdma_probe_latency_seconds_bucket{{{l},le=")))
            .map(|(_, v)| *v)
            .collect();
        assert!(
            buckets.len() > 2,
            "FAIL: {op}: only {} buckets",
            buckets.len()
        );
        assert!(
            buckets.iter().all(|b| *b <= count),
            "FAIL: {op}: bucket above _count"
        );
        let sum = series[&format!("rdma_probe_latency_seconds_sum{{{l}}}")];
        assert!(
            sum > 0.0 && sum / count < 0.1,
            "FAIL: {op}: mean latency {} s is implausible",
            sum / count
        );
        let runs = series
            .get(&format!("rdma_probe_runs_total{{{l}}}"))
            .copied()
            .unwrap_or(0.0);
        assert!(runs >= 1.0, "FAIL: {op}: no successful run counted");
    }
    // sysfs_info's `pci_addr` is fine; no probe series may carry a key or an address.
    let probe_lines: Vec<&str> = body.lines().filter(|l| l.contains("rdma_probe_")).collect();
    assert!(!probe_lines.is_empty());
    for line in probe_lines {
        for word in ["key", "addr", "secret"] {
            assert!(!line.contains(word), "FAIL: {line:?} mentions {word:?}");
        }
    }
}

/// Sum of every series whose name-and-labels starts with `prefix` and contains all `parts`.
fn sum_where(series: &BTreeMap<String, f64>, prefix: &str, parts: &[&str]) -> f64 {
    series
        .iter()
        .filter(|(k, _)| k.starts_with(prefix) && parts.iter().all(|p| k.contains(p)))
        .map(|(_, v)| *v)
        .sum()
}

/// Scrape `rdmad` until `done` holds for its series, or fail after `secs`.
fn wait_for(
    rdmad: &Rdmad,
    what: &str,
    secs: u64,
    done: impl Fn(&BTreeMap<String, f64>) -> bool,
) -> BTreeMap<String, f64> {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let series = rdmad.try_scrape().map(|s| s.series).unwrap_or_default();
        if done(&series) {
            return series;
        }
        assert!(
            Instant::now() < deadline,
            "FAIL: {what} not seen within {secs} s; probe series: {:?}",
            series
                .iter()
                .filter(|(k, _)| k.starts_with("rdma_probe_"))
                .collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

#[test]
fn two_rdmad_instances_probe_each_other_refuse_a_wrong_secret_and_recover() {
    let dir = std::env::temp_dir();
    let secret = dir.join("pingmesh-secret");
    let wrong = dir.join("pingmesh-wrong-secret");
    std::fs::write(&secret, "the lab's shared pingmesh secret 1f0c\n").expect("secret file");
    std::fs::write(&wrong, "not the secret at all 77aa\n").expect("wrong secret file");
    let (a_addr, b_addr) = ("10.1.0.1:19737", "10.1.0.2:19738");
    let instance = |dev: &str, listen: &str, peer: &str, secret: &std::path::Path| {
        Rdmad::start(&[
            "--probe.enable",
            "--probe.interval",
            "1",
            "--probe.devices",
            dev,
            "--probe.mr-sizes",
            "4K",
            "--probe.listen",
            listen,
            "--probe.peer",
            peer,
            "--probe.secret-file",
            secret.to_str().expect("utf-8 path"),
            // The per-peer histogram and failures this test reads are opt-in (by default a
            // peer gets 6 series: sent, lost by direction, typical, p99, status).
            "--probe.peer-histograms",
        ])
    };
    let a = instance("rxe_a", a_addr, b_addr, &secret);
    let b = instance("rxe_b", b_addr, a_addr, &secret);
    let peer_b = format!("peer=\"{b_addr}\"");
    let peer_a = format!("peer=\"{a_addr}\"");
    let a_to_b = |s: &BTreeMap<String, f64>| {
        sum_where(
            s,
            "rdma_probe_latency_seconds_count{",
            &["kind=\"peer\"", &peer_b],
        )
    };
    let first = wait_for(&a, "A probing B", 120, |s| a_to_b(s) > 0.0);
    wait_for(&b, "B probing A", 120, |s| {
        sum_where(
            s,
            "rdma_probe_latency_seconds_count{",
            &["kind=\"peer\"", &peer_a],
        ) > 0.0
    });

    // A third instance with the wrong secret: A refuses and counts it; nothing is probed.
    let refused_before = sum_where(&first, "rdma_probe_handshakes_refused_total", &[]);
    let c = Rdmad::start(&[
        "--probe.enable",
        "--probe.interval",
        "1",
        "--probe.devices",
        "rxe_b",
        "--probe.mr-sizes",
        "4K",
        "--probe.peer",
        a_addr,
        "--probe.secret-file",
        wrong.to_str().expect("utf-8 path"),
        "--probe.peer-histograms",
    ]);
    wait_for(&a, "A refusing the wrong secret", 90, |s| {
        sum_where(s, "rdma_probe_handshakes_refused_total", &[]) > refused_before
    });
    let c_series = wait_for(&c, "C's failed handshake", 90, |s| {
        sum_where(s, "rdma_probe_failures_total{", &[&peer_a]) > 0.0
    });
    assert_eq!(
        sum_where(&c_series, "rdma_probe_latency_seconds_count{", &[&peer_a]),
        0.0,
        "the wrong secret must not get a single probe through"
    );
    drop(c);

    // B dies: A's failures towards B rise; B comes back: A's probes to B succeed again.
    let failures_to_b =
        |s: &BTreeMap<String, f64>| sum_where(s, "rdma_probe_failures_total{", &[&peer_b]);
    let before = wait_for(&a, "a scrape of A", 30, |_| true);
    drop(b);
    let dead = wait_for(&a, "A counting failures towards the dead B", 90, |s| {
        failures_to_b(s) > failures_to_b(&before)
    });
    let b_again = instance("rxe_b", b_addr, a_addr, &secret);
    wait_for(&a, "A probing B again after it came back", 180, |s| {
        a_to_b(s) > a_to_b(&dead)
    });
    drop(b_again);
    drop(a);
}
