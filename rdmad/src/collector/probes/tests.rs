use super::*;
use crate::metrics::Format;
use rdma_probe::{
    DiscoveryStats, Histogram, LatencySummary, PeerState, PeerTransport, ProbeOp,
    RegistrationResult, UdEndpointState,
};
use std::collections::BTreeMap;

/// The summary of a run of one sample of `us` microseconds.
fn one_sample_summary(us: f64) -> LatencySummary {
    LatencySummary {
        iterations: 1,
        t_min_us: us,
        t_max_us: us,
        t_typical_us: us,
        t_avg_us: us,
        t_stdev_us: 0.0,
        p99_us: us,
        p99_9_us: us,
    }
}

fn snapshot() -> ProbeSnapshot {
    let target = |kind, device: &str, peer: Option<&str>, op, latency_seconds| TargetResult {
        latency_seconds,
        ..TargetResult::empty(
            kind,
            device,
            1,
            peer.map(str::to_string),
            op,
            PeerTransport::Rc,
            64,
        )
    };
    // Per bucket 2, 3, 0, 1 (the last in +Inf): cumulative 2, 5, 5, 6.
    let latency = Histogram::from_buckets(&[1e-5, 2e-5, 5e-5], &[2, 3, 0, 1], 0.25).unwrap();
    let write = TargetResult {
        last: Some(LatencySummary {
            iterations: 6,
            t_min_us: 5.0,
            t_max_us: 60.0,
            t_typical_us: 12.0,
            t_avg_us: 20.0,
            t_stdev_us: 3.0,
            p99_us: 15.0,
            p99_9_us: 60.0,
        }),
        runs_total: 3,
        failures_total: BTreeMap::from([
            ("RETRY_EXC_ERR".to_string(), 2),
            ("TIMEOUT".to_string(), 1),
        ]),
        up: true,
        ..target("loopback", "rxe0", None, ProbeOp::Write, latency)
    };
    let peer = TargetResult {
        transport: PeerTransport::Ud,
        sent_total: 200,
        lost_total: 3,
        lost_request_total: 1,
        lost_reply_total: 2,
        ..target(
            "peer",
            "rxe_a",
            Some("10.0.0.2:9737"),
            ProbeOp::Send,
            Histogram::new(&[]),
        )
    };
    ProbeSnapshot {
        clock: None,
        rounds_total: 7,
        round_duration_seconds: Some(1.25),
        rounds_late_total: 2,
        cpu_seconds_total: 0.5,
        uptime_seconds: 70.0,
        targets: vec![write, peer],
        registrations: vec![RegistrationResult {
            device: "rxe0".into(),
            size_bytes: 4096,
            last_seconds: Some(0.001),
            seconds: Histogram::from_buckets(&[1e-3], &[1, 0], 0.001).unwrap(),
            failures_total: 0,
        }],
        peers: vec![PeerState {
            peer: "10.0.0.2:9737".into(),
            connected: false,
            connects_total: 0,
            backoff_seconds: 1.0,
            labels: std::sync::Arc::new(BTreeMap::from([("rack".to_string(), "r2".to_string())])),
            planned: true,
            status: Some(rdma_probe::PeerStatus::Host),
        }],
        handshakes_accepted_total: 4,
        handshakes_refused_total: BTreeMap::from([("bad_mac".to_string(), 1)]),
        ud_endpoints: vec![UdEndpointState {
            device: "rxe_a".into(),
            sessions: 2,
            address_handles: 1,
            answered_total: 300,
            dropped_total: BTreeMap::from([
                ("bad_tag".to_string(), 5),
                ("malformed".to_string(), 0),
            ]),
        }],
        discovery: DiscoveryStats {
            peers: BTreeMap::from([("dns".to_string(), 1)]),
            invalid_entries: BTreeMap::from([("file".to_string(), 2)]),
            errors_total: BTreeMap::from([(("dns".to_string(), "no_records".to_string()), 3)]),
        },
        own_labels: BTreeMap::new(),
        own_peers: Vec::new(),
    }
}

fn text() -> String {
    let mut set = MetricSet::new();
    // With the peer detail (the histogram tests below read the peer's).
    emit(&snapshot(), true, &mut set).unwrap();
    set.encode(Format::Text)
}

const WRITE: &str =
    "device=\"rxe0\",port=\"1\",op=\"write\",kind=\"loopback\",peer=\"\",transport=\"rc\"";
const UD_PEER: &str =
    "device=\"rxe_a\",port=\"1\",op=\"send\",kind=\"peer\",peer=\"10.0.0.2:9737\",transport=\"ud\",peer_rack=\"r2\"";

#[test]
fn latency_is_one_histogram_with_cumulative_buckets_inf_sum_and_count() {
    let text = text();
    assert_eq!(
        text.matches("# TYPE rdma_probe_latency_seconds histogram\n")
            .count(),
        1,
        "{text}"
    );
    let bucket = |le: &str| format!("rdma_probe_latency_seconds_bucket{{{WRITE},le=\"{le}\"}} ");
    let value = |le: &str| -> u64 {
        let prefix = bucket(le);
        let line = text
            .lines()
            .find(|l| l.starts_with(&prefix))
            .unwrap_or_else(|| panic!("no {prefix} in {text}"));
        line[prefix.len()..].parse().unwrap()
    };
    let les: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("rdma_probe_latency_seconds_bucket{device=\"rxe0\""))
        .map(|l| {
            let start = l.find("le=\"").unwrap() + 4;
            &l[start..start + l[start..].find('"').unwrap()]
        })
        .collect();
    assert_eq!(les.len(), 4, "3 bounds and +Inf once: {les:?}");
    assert_eq!(les.last(), Some(&"+Inf"));
    let counts: Vec<u64> = les.iter().map(|le| value(le)).collect();
    assert_eq!(counts, vec![2, 5, 5, 6], "cumulative, +Inf = count");
    assert!(
        text.contains(&format!("rdma_probe_latency_seconds_sum{{{WRITE}}} 0.25\n")),
        "{text}"
    );
    assert!(
        text.contains(&format!("rdma_probe_latency_seconds_count{{{WRITE}}} 6\n")),
        "{text}"
    );
    // The peer target with no samples still has its series, with count 0.
    assert!(
        text.contains(&format!(
            "rdma_probe_latency_seconds_count{{{UD_PEER}}} 0\n"
        )),
        "{text}"
    );
}

#[test]
fn failures_by_status_runs_and_up() {
    let text = text();
    assert!(
        text.contains(&format!(
            "rdma_probe_failures_total{{{WRITE},status=\"RETRY_EXC_ERR\"}} 2\n"
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "rdma_probe_failures_total{{{WRITE},status=\"TIMEOUT\"}} 1\n"
        )),
        "{text}"
    );
    assert_eq!(text.matches("rdma_probe_failures_total{").count(), 2);
    assert!(text.contains(&format!("rdma_probe_runs_total{{{WRITE}}} 3\n")));
    assert!(text.contains(&format!("rdma_probe_up{{{WRITE}}} 1\n")));
    assert!(
        text.contains(&format!(
            "rdma_probe_latency_last_seconds{{{WRITE},stat=\"p99\"}} 0.000015\n"
        )) || text.contains(&format!(
            "rdma_probe_latency_last_seconds{{{WRITE},stat=\"p99\"}} 1.5e-5\n"
        )),
        "{text}"
    );
}

#[test]
fn peers_count_requests_sent_and_lost_and_ud_endpoints_their_drops() {
    let text = text();
    for line in [
        format!("rdma_probe_sent_total{{{UD_PEER}}} 200\n"),
        format!("rdma_probe_lost_total{{{UD_PEER},direction=\"request\"}} 1\n"),
        format!("rdma_probe_lost_total{{{UD_PEER},direction=\"reply\"}} 2\n"),
        "rdma_probe_ud_dropped_total{device=\"rxe_a\",reason=\"bad_tag\"} 5\n".into(),
        "rdma_probe_ud_dropped_total{device=\"rxe_a\",reason=\"malformed\"} 0\n".into(),
        "rdma_probe_ud_answered_total{device=\"rxe_a\"} 300\n".into(),
        "rdma_probe_ud_sessions{device=\"rxe_a\"} 2\n".into(),
    ] {
        assert!(text.contains(&line), "missing {line:?} in {text}");
    }
    // Loopback targets have no requests to lose.
    assert!(
        !text.contains(&format!("rdma_probe_sent_total{{{WRITE}}}")),
        "{text}"
    );
    assert_eq!(parse_transport("UD"), Ok(Transport::Ud));
    assert_eq!(parse_transport("rc"), Ok(Transport::Rc));
    assert!(parse_transport("tcp").unwrap_err().contains("`ud` or `rc`"));
    assert_eq!(ProbeSettings::default().transport, Transport::Ud);
}

#[test]
fn engine_wide_series() {
    let text = text();
    for line in [
        "rdma_probe_rounds_total 7\n",
        "rdma_probe_cpu_seconds_total 0.5\n",
        "rdma_probe_handshakes_accepted_total 4\n",
        "rdma_probe_handshakes_refused_total{reason=\"bad_mac\"} 1\n",
        "rdma_probe_peer_status{device=\"rxe_a\",peer=\"10.0.0.2:9737\",peer_rack=\"r2\"} 2\n",
        "rdma_probe_round_duration_seconds 1.25\n",
        "rdma_probe_rounds_late_total 2\n",
        "rdma_probe_discovered_peers{source=\"dns\"} 1\n",
        "rdma_probe_discovery_invalid_entries{source=\"file\"} 2\n",
        "rdma_probe_discovery_errors_total{source=\"dns\",reason=\"no_records\"} 3\n",
        "rdma_probe_pinglist_peers 1\n",
        "rdma_probe_mr_registration_seconds_count{device=\"rxe0\",size_bytes=\"4096\"} 1\n",
        "rdma_probe_mr_registration_failures_total{device=\"rxe0\",size_bytes=\"4096\"} 0\n",
        "rdma_probe_mr_registration_last_seconds{device=\"rxe0\",size_bytes=\"4096\"} 0.001\n",
    ] {
        assert!(text.contains(line), "missing {line:?} in {text}");
    }
}

#[test]
fn by_default_peers_get_sent_lost_by_direction_two_stats_and_a_status_only() {
    let mut snap = snapshot();
    snap.targets[1].last = Some(one_sample_summary(20.0));
    snap.targets[1]
        .failures_total
        .insert("TIMEOUT".to_string(), 1);
    let mut set = MetricSet::new();
    emit(&snap, false, &mut set).unwrap();
    let text = set.encode(Format::Text);
    let peer_lines: Vec<&str> = text
        .lines()
        .filter(|l| !l.starts_with('#') && l.contains("peer=\"10.0.0.2:9737\""))
        .collect();
    let families: std::collections::BTreeSet<String> = peer_lines
        .iter()
        .map(|l| {
            let name = &l[..l.find('{').unwrap()];
            match l.find("stat=\"").or(l.find("direction=\"")) {
                Some(i) => format!("{name}{{{}", &l[i..l[i..].find('}').unwrap() + i]),
                None => name.to_string(),
            }
        })
        .collect();
    assert_eq!(
        families.into_iter().collect::<Vec<_>>(),
        [
            "rdma_probe_latency_last_seconds{stat=\"p99\"",
            "rdma_probe_latency_last_seconds{stat=\"typical\"",
            "rdma_probe_lost_total{direction=\"reply\"",
            "rdma_probe_lost_total{direction=\"request\"",
            "rdma_probe_peer_status",
            "rdma_probe_sent_total",
        ],
        "{text}"
    );
    assert_eq!(peer_lines.len(), 6, "{text}");
    assert!(
        text.contains(&format!("rdma_probe_latency_seconds_count{{{WRITE}}} 6\n")),
        "loopback keeps its histogram"
    );
    assert!(
        text.contains(&format!("rdma_probe_up{{{WRITE}}} 1\n")),
        "and its up"
    );
    // With the peer detail: histogram, every stat, runs, failures; never `up` for a peer
    // (rdma_probe_peer_status is its verdict).
    let mut set = MetricSet::new();
    emit(&snap, true, &mut set).unwrap();
    let text = set.encode(Format::Text);
    for family in [
        "rdma_probe_latency_seconds_count{",
        "rdma_probe_runs_total{",
        "rdma_probe_failures_total{",
    ] {
        assert!(
            text.lines()
                .any(|l| l.starts_with(family) && l.contains(UD_PEER)),
            "{family} for the peer: {text}"
        );
    }
    assert!(
        !text
            .lines()
            .any(|l| l.starts_with("rdma_probe_up{") && l.contains(UD_PEER)),
        "{text}"
    );
    assert!(!text.contains("rdma_probe_peer_connected"), "{text}");
}

/// Peers as the engine holds them: `silent` (every connect timed out: no device, nothing
/// sent), `mute` (connected, its UD requests all unanswered), `fell` (answered 4 runs, then
/// its host became unreachable), and the snapshot's own peer (no run completed, but 197 of
/// its 200 requests answered).
fn peers_that_never_answered_and_one_that_did() -> ProbeSnapshot {
    let mut snap = snapshot();
    let base = snap.targets[1].clone();
    let peer = |name: &str, status| PeerState {
        peer: name.into(),
        connected: false,
        connects_total: 0,
        backoff_seconds: 4.0,
        labels: Default::default(),
        planned: true,
        status: Some(status),
    };
    snap.targets.push(TargetResult {
        device: String::new(),
        peer: Some("10.0.0.7:9737".into()),
        sent_total: 0,
        lost_total: 0,
        lost_request_total: 0,
        lost_reply_total: 0,
        failures_total: BTreeMap::from([("HOST_UNREACHABLE".to_string(), 5)]),
        last_error: Some("timed out".into()),
        ..base.clone()
    });
    snap.peers
        .push(peer("10.0.0.7:9737", rdma_probe::PeerStatus::Host));
    snap.targets.push(TargetResult {
        peer: Some("10.0.0.8:9737".into()),
        sent_total: 30,
        lost_total: 30,
        lost_request_total: 30,
        lost_reply_total: 0,
        failures_total: BTreeMap::from([("TIMEOUT".to_string(), 10)]),
        ..base.clone()
    });
    snap.peers
        .push(peer("10.0.0.8:9737", rdma_probe::PeerStatus::Rdma));
    snap.targets.push(TargetResult {
        peer: Some("10.0.0.9:9737".into()),
        last: Some(one_sample_summary(20.0)),
        runs_total: 4,
        sent_total: 400,
        lost_total: 40,
        lost_request_total: 40,
        lost_reply_total: 0,
        failures_total: BTreeMap::from([("HOST_UNREACHABLE".to_string(), 2)]),
        ..base
    });
    snap.peers
        .push(peer("10.0.0.9:9737", rdma_probe::PeerStatus::Host));
    snap
}

/// The series lines of `peer` in `text`.
fn lines_of<'a>(text: &'a str, peer: &str) -> Vec<&'a str> {
    let label = format!("peer=\"{peer}\"");
    text.lines()
        .filter(|l| !l.starts_with('#') && l.contains(&label))
        .collect()
}

#[test]
fn a_peer_that_never_answered_has_its_status_only() {
    let snap = peers_that_never_answered_and_one_that_did();
    let mut set = MetricSet::new();
    emit(&snap, false, &mut set).unwrap();
    let text = set.encode(Format::Text);
    // Every connect timed out: its verdict, from no device.
    assert_eq!(
        lines_of(&text, "10.0.0.7:9737"),
        ["rdma_probe_peer_status{device=\"\",peer=\"10.0.0.7:9737\",peer_rack=\"\"} 2"],
        "{text}"
    );
    // Connected, every UD request unanswered: its verdict, not 30 sent and 30 lost.
    assert_eq!(
        lines_of(&text, "10.0.0.8:9737"),
        ["rdma_probe_peer_status{device=\"rxe_a\",peer=\"10.0.0.8:9737\",peer_rack=\"\"} 3"],
        "{text}"
    );
    // Up once, then unreachable: its 6 series, the counters still there for increase().
    let fell = "device=\"rxe_a\",port=\"1\",op=\"send\",kind=\"peer\",peer=\"10.0.0.9:9737\",transport=\"ud\",peer_rack=\"\"";
    let lines = lines_of(&text, "10.0.0.9:9737");
    assert_eq!(lines.len(), 6, "{text}");
    for line in [
        format!("rdma_probe_sent_total{{{fell}}} 400"),
        format!("rdma_probe_lost_total{{{fell},direction=\"request\"}} 40"),
        format!("rdma_probe_lost_total{{{fell},direction=\"reply\"}} 0"),
        "rdma_probe_peer_status{device=\"rxe_a\",peer=\"10.0.0.9:9737\",peer_rack=\"\"} 2"
            .to_string(),
    ] {
        assert!(lines.contains(&line.as_str()), "missing {line:?} in {text}");
    }
    // Answered in runs that all failed (197 of 200 requests): measured, so its counters.
    assert_eq!(lines_of(&text, "10.0.0.2:9737").len(), 4, "{text}");
    assert!(
        text.contains(&format!("rdma_probe_sent_total{{{UD_PEER}}} 200\n")),
        "{text}"
    );
    // With the peer detail every peer gets its series: the silent one's failures count its
    // attempts.
    let mut set = MetricSet::new();
    emit(&snap, true, &mut set).unwrap();
    let text = set.encode(Format::Text);
    let silent = "device=\"\",port=\"1\",op=\"send\",kind=\"peer\",peer=\"10.0.0.7:9737\",transport=\"ud\",peer_rack=\"\"";
    for line in [
        format!("rdma_probe_failures_total{{{silent},status=\"HOST_UNREACHABLE\"}} 5\n"),
        format!("rdma_probe_sent_total{{{silent}}} 0\n"),
    ] {
        assert!(text.contains(&line), "missing {line:?} in {text}");
    }
}

/// The series per peer of a healthy UD peer (a summary, no failure), with the engine's
/// own latency buckets: the figures of rdmad/README.md (Probes: series per host).
#[test]
fn series_per_peer_with_and_without_peer_histograms() {
    let per_peer = |n: usize, histograms: bool| -> usize {
        let mut snap = snapshot();
        snap.targets.truncate(1);
        snap.peers.clear();
        for i in 0..n {
            let peer = format!("10.0.{}.{}:9736", i / 250, i % 250 + 1);
            snap.targets.push(TargetResult {
                kind: "peer",
                device: "rxe0".into(),
                port: 1,
                peer: Some(peer.clone()),
                op: ProbeOp::Send,
                transport: PeerTransport::Ud,
                size_bytes: 64,
                latency_seconds: Histogram::new(rdma_probe::snapshot::LATENCY_BUCKETS),
                last: Some(one_sample_summary(20.0)),
                runs_total: 1,
                sent_total: 100,
                lost_total: 0,
                lost_request_total: 0,
                lost_reply_total: 0,
                failures_total: BTreeMap::new(),
                up: true,
                last_error: None,
            });
            snap.peers.push(PeerState {
                peer,
                connected: true,
                connects_total: 1,
                backoff_seconds: 0.0,
                labels: Default::default(),
                planned: true,
                status: Some(rdma_probe::PeerStatus::Ok),
            });
        }
        let mut set = MetricSet::new();
        emit(&snap, histograms, &mut set).unwrap();
        set.encode(Format::Text)
            .lines()
            .filter(|l| !l.starts_with('#') && l.contains("peer=\"10.0."))
            .count()
    };
    // Default: sent, lost{request}, lost{reply}, latency typical and p99, status = 6.
    // Detail: 14 bounds + Inf = 15 buckets, sum, count; 7 stats; runs; sent, lost x 2;
    // status = 29 (a failure adds one per failure name).
    assert_eq!(rdma_probe::snapshot::LATENCY_BUCKETS.len(), 14);
    assert_eq!(per_peer(1, false), 6);
    assert_eq!(per_peer(1, true), 29);
    assert_eq!(per_peer(64, false), 384);
    assert_eq!(per_peer(64, true), 1_856);
    assert_eq!(per_peer(1000, false), 6_000);
    assert_eq!(per_peer(1000, true), 29_000);
}

#[test]
fn without_an_engine_the_collector_adds_nothing() {
    let collector = Probes {
        source: ProbeSource::default(),
    };
    let mut set = MetricSet::new();
    collector.update(&Scrape::detached(), &mut set).unwrap();
    assert_eq!(set.names().count(), 0);
}

#[test]
fn flag_value_parsers() {
    assert_eq!(parse_interval("1"), Ok(1000));
    assert_eq!(parse_interval("0.5"), Ok(500));
    assert_eq!(parse_interval("250ms"), Ok(250));
    assert_eq!(parse_interval("10s"), Ok(10_000));
    assert_eq!(parse_interval("2m"), Ok(120_000));
    // The unit the range error spells its maximum with (`1ms to 24h`).
    assert_eq!(parse_interval("24h"), Ok(86_400_000));
    // Rounded to milliseconds, as the parser it replaced did.
    assert_eq!(parse_interval("1.4ms"), Ok(1));
    assert!(parse_interval("0").is_err());
    assert_eq!(
        parse_interval("1e20").unwrap_err(),
        "`1e20` is too long a duration"
    );
    assert!(parse_interval("soon").is_err());
    assert_eq!(parse_size("4096"), Ok(4096));
    assert_eq!(parse_size("64K"), Ok(64 << 10));
    assert_eq!(parse_size("16MiB"), Ok(16 << 20));
    assert!(parse_size("0").is_err());
    assert!(parse_size("-1").is_err());
    assert_eq!(parse_listen(":9737").unwrap().port(), 9737);
    assert_eq!(
        parse_listen("127.0.0.1:1").unwrap().to_string(),
        "127.0.0.1:1"
    );
    assert!(parse_listen("nowhere").is_err());
}

#[cfg(not(feature = "verbs"))]
#[test]
fn enabling_without_verbs_is_a_clear_error() {
    let settings = ProbeSettings {
        enable: true,
        ..ProbeSettings::default()
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let e = start(&settings, runtime.handle())
        .err()
        .expect("must fail")
        .to_string();
    assert!(
        e.contains("built without verbs support; cargo build-rdma"),
        "{e}"
    );
    assert!(start(&ProbeSettings::default(), runtime.handle()).is_ok());
}
