use super::sources::pairs_from_scrapes;
use super::*;
use rdmakit::exposition;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// (status, request loss share, reply loss share) of a pair, or None: the prober is not
/// scraped (its host or its rdmad is down).
type Fault = fn(&str, &str) -> Option<(u8, f64, f64)>;

const SENT: u64 = 200; // probes per pair between the two scrapes

/// One rdmad's exposition as rdmad writes its per-peer series (label order of
/// rdmad/src/collector/probes.rs: device, port, op, kind, peer, transport, peer_rack; the
/// status gauge by device, peer, peer_rack), `after` = false: before the window.
fn exposition(prober: &str, hosts: &[&str], fault: Fault, after: bool) -> Option<String> {
    let mut text = String::new();
    let mut series = Vec::new();
    for &t in hosts.iter().filter(|&&t| t != prober) {
        let (status, req, rep) = fault(prober, t)?;
        let peer = format!("10.2.0.{}:9737", &t[1..]);
        let probe = format!(
            "device=\"rxe0\",port=\"1\",op=\"send\",kind=\"peer\",peer=\"{peer}\",transport=\"ud\",peer_rack=\"\""
        );
        let (sent, lreq, lrep) = if after {
            (
                1000 + SENT,
                7 + (SENT as f64 * req) as u64,
                3 + (SENT as f64 * rep) as u64,
            )
        } else {
            (1000, 7, 3)
        };
        series.push(format!(
            "rdma_probe_peer_status{{device=\"rxe0\",peer=\"{peer}\",peer_rack=\"\"}} {status}"
        ));
        series.push(format!("rdma_probe_sent_total{{{probe}}} {sent}"));
        series.push(format!(
            "rdma_probe_lost_total{{{probe},direction=\"request\"}} {lreq}"
        ));
        series.push(format!(
            "rdma_probe_lost_total{{{probe},direction=\"reply\"}} {lrep}"
        ));
        series.push(format!(
            "rdma_probe_latency_last_seconds{{{probe},stat=\"typical\"}} 2.1e-5"
        ));
    }
    for family in [
        ("rdma_probe_peer_status", "gauge"),
        ("rdma_probe_sent_total", "counter"),
        ("rdma_probe_lost_total", "counter"),
        ("rdma_probe_latency_last_seconds", "gauge"),
    ] {
        text += &format!("# TYPE {} {}\n", family.0, family.1);
        for s in series
            .iter()
            .filter(|s| s.starts_with(&format!("{}{{", family.0)))
        {
            text += s;
            text.push('\n');
        }
    }
    Some(text)
}

fn names(hosts: &[&str]) -> BTreeMap<String, String> {
    hosts
        .iter()
        .map(|h| (format!("10.2.0.{}", &h[1..]), h.to_string()))
        .collect()
}

fn texts(hosts: &[&str], fault: Fault) -> Vec<String> {
    let t = thresholds().unwrap();
    let mut pairs = Vec::new();
    for &h in hosts {
        let (Some(b), Some(a)) = (
            exposition(h, hosts, fault, false),
            exposition(h, hosts, fault, true),
        ) else {
            continue;
        };
        let (b, a) = (
            exposition::parse(&b).unwrap(),
            exposition::parse(&a).unwrap(),
        );
        pairs.extend(pairs_from_scrapes(h, &b, &a, &names(hosts)));
    }
    verdicts(&pairs, &t).into_iter().map(|v| v.text).collect()
}

const H4: &[&str] = &["h1", "h2", "h3", "h4"];
const H3: &[&str] = &["h1", "h2", "h3"];

#[test]
fn thresholds_are_the_rules_ones() {
    let t = thresholds().unwrap();
    assert_eq!(t.loss_ratio, 0.02);
    assert_eq!(t.min_counterparts, 2);
    let rules = include_str!("../../../../dashboards/rules/rdma.rules.yml");
    let window = format!("[{}s]", t.window_seconds);
    assert!(rules.contains(&window), "the rules use {window}");
    assert!(rules.contains(&format!("> {}", t.loss_ratio)));
    assert!(rules.contains(&format!(">= {}", t.min_counterparts)));
}

#[test]
fn no_fault_no_verdict() {
    assert!(texts(H4, |_, _| Some((0, 0.0, 0.0))).is_empty());
    assert!(texts(H3, |_, _| Some((0, 0.0, 0.0))).is_empty());
}

#[test]
fn dead_host_is_the_culprit_not_its_pairs() {
    fn down(p: &str, t: &str) -> Option<(u8, f64, f64)> {
        match (p, t) {
            ("h4", _) => None,
            (_, "h4") => Some((2, 1.0, 0.0)),
            _ => Some((0, 0.0, 0.0)),
        }
    }
    assert_eq!(texts(H4, down), ["h4: unreachable (host) on 3 of 3 pairs"]);
    fn down3(p: &str, t: &str) -> Option<(u8, f64, f64)> {
        match (p, t) {
            ("h3", _) => None,
            (_, "h3") => Some((1, 1.0, 0.0)),
            _ => Some((0, 0.0, 0.0)),
        }
    }
    assert_eq!(
        texts(H3, down3),
        ["h3: rdmad refuses or is absent (agent) on 2 of 2 pairs"]
    );
}

#[test]
fn a_host_whose_link_is_down_is_unreachable_not_also_rdma_down() {
    // As the lab shows `link h4 down` (and the rules' promtool case): its peers time out
    // connecting to it (host), while its own UD probes fail at its DOWN port (rdma).
    fn f(p: &str, t: &str) -> Option<(u8, f64, f64)> {
        Some(match (p, t) {
            ("h4", _) => (3, 1.0, 0.0),
            (_, "h4") => (2, 1.0, 0.0),
            _ => (0, 0.0, 0.0),
        })
    }
    assert_eq!(texts(H4, f), ["h4: unreachable (host) on 3 of 3 pairs"]);
    assert_eq!(
        texts(H3, |p, t| {
            Some(match (p, t) {
                ("h3", _) => (3, 1.0, 0.0),
                (_, "h3") => (2, 1.0, 0.0),
                _ => (0, 0.0, 0.0),
            })
        }),
        ["h3: unreachable (host) on 2 of 2 pairs"]
    );
}

#[test]
fn half_the_mesh_down_blames_the_dead_not_the_survivors() {
    // h1 and h2 each fail to 2 of 3 targets (a majority), but those targets go first.
    fn f(p: &str, t: &str) -> Option<(u8, f64, f64)> {
        match (p, t) {
            ("h3" | "h4", _) => None,
            (_, "h3" | "h4") => Some((2, 1.0, 0.0)),
            _ => Some((0, 0.0, 0.0)),
        }
    }
    assert_eq!(
        texts(H4, f),
        [
            "h3: unreachable (host) on 2 of 2 pairs",
            "h4: unreachable (host) on 2 of 2 pairs"
        ]
    );
}

#[test]
fn rdma_down_both_ways_is_the_host() {
    fn f(p: &str, t: &str) -> Option<(u8, f64, f64)> {
        Some(if p == "h3" || t == "h3" {
            (3, 1.0, 0.0)
        } else {
            (0, 0.0, 0.0)
        })
    }
    assert_eq!(
        texts(H4, f),
        ["h3: RDMA does not answer (rdma) on 3 of 3 pairs"]
    );
    assert_eq!(
        texts(H3, f),
        ["h3: RDMA does not answer (rdma) on 2 of 2 pairs"]
    );
}

#[test]
fn egress_and_ingress_loss_name_the_host_and_direction() {
    fn egress(p: &str, t: &str) -> Option<(u8, f64, f64)> {
        Some(match (p, t) {
            (_, "h2") => (0, 0.0, 0.3),
            ("h2", _) => (0, 0.3, 0.0),
            _ => (0, 0.0, 0.0),
        })
    }
    assert_eq!(texts(H4, egress), ["h2: egress loss 30% on 3 of 3 pairs"]);
    assert_eq!(texts(H3, egress), ["h2: egress loss 30% on 2 of 2 pairs"]);
    fn ingress(p: &str, t: &str) -> Option<(u8, f64, f64)> {
        Some(match (p, t) {
            (_, "h2") => (0, 0.2, 0.0),
            ("h2", _) => (0, 0.0, 0.2),
            _ => (0, 0.0, 0.0),
        })
    }
    assert_eq!(texts(H4, ingress), ["h2: ingress loss 20% on 3 of 3 pairs"]);
}

#[test]
fn partition_of_one_pair_is_a_path_not_a_host() {
    fn f(p: &str, t: &str) -> Option<(u8, f64, f64)> {
        Some(match (p, t) {
            ("h1", "h3") | ("h3", "h1") => (2, 1.0, 0.0),
            _ => (0, 0.0, 0.0),
        })
    }
    assert_eq!(
        texts(H4, f),
        ["h1<->h3: path down (host), h2 and h4 reach both"]
    );
    assert_eq!(texts(H3, f), ["h1<->h3: path down (host), h2 reaches both"]);
}

#[test]
fn one_way_loss_is_one_leg() {
    // Half of h1 -> h3 dropped: h1's requests to h3, and h1's replies to h3's probes.
    fn f(p: &str, t: &str) -> Option<(u8, f64, f64)> {
        Some(match (p, t) {
            ("h1", "h3") => (0, 0.5, 0.0),
            ("h3", "h1") => (0, 0.0, 0.5),
            _ => (0, 0.0, 0.0),
        })
    }
    assert_eq!(
        texts(H4, f),
        ["h1->h3: loss 50% on the way, h2 and h4 reach both"]
    );
    assert_eq!(
        texts(H3, f),
        ["h1->h3: loss 50% on the way, h2 reaches both"]
    );
}

#[test]
fn a_pair_down_at_the_start_of_the_window_is_not_lossy_once_up() {
    let before = exposition(
        "h1",
        H3,
        |_, t| {
            Some(if t == "h3" {
                (2, 1.0, 0.0)
            } else {
                (0, 0.0, 0.0)
            })
        },
        false,
    )
    .unwrap();
    let after = exposition(
        "h1",
        H3,
        |_, t| {
            Some(if t == "h3" {
                (0, 0.5, 0.0)
            } else {
                (0, 0.0, 0.0)
            })
        },
        true,
    )
    .unwrap();
    let pairs = pairs_from_scrapes(
        "h1",
        &exposition::parse(&before).unwrap(),
        &exposition::parse(&after).unwrap(),
        &names(H3),
    );
    let h3 = pairs.iter().find(|p| p.target == "h3").unwrap();
    assert_eq!((h3.status, h3.loss_request), (0, None));
    let h2 = pairs.iter().find(|p| p.target == "h2").unwrap();
    assert_eq!(h2.loss_request, Some(0.0));
}

/// A /metrics server on 127.0.0.1: GET /hK/metrics answers hK's exposition before the
/// window the first time, after it from then on.
fn serve(hosts: &'static [&'static str], fault: Fault) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen: Arc<Vec<AtomicUsize>> = Arc::new(hosts.iter().map(|_| AtomicUsize::new(0)).collect());
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let mut reader = BufReader::new(conn.try_clone().unwrap());
            let mut line = String::new();
            reader.read_line(&mut line).unwrap();
            loop {
                let mut h = String::new();
                if reader.read_line(&mut h).unwrap() == 0 || h == "\r\n" {
                    break;
                }
            }
            let path = line.split_whitespace().nth(1).unwrap_or("").to_string();
            let body = hosts
                .iter()
                .position(|h| path == format!("/{h}/metrics"))
                .and_then(|i| {
                    let n = seen[i].fetch_add(1, Ordering::SeqCst);
                    exposition(hosts[i], hosts, fault, n > 0)
                });
            let resp = match body {
                Some(b) => format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{b}",
                    b.len()
                ),
                None => "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".into(),
            };
            let _ = conn.write_all(resp.as_bytes());
        }
    });
    port
}

#[test]
fn json_from_rdmads_scraped_over_http() {
    fn egress(p: &str, t: &str) -> Option<(u8, f64, f64)> {
        Some(match (p, t) {
            (_, "h4") => (0, 0.0, 0.3),
            ("h4", _) => (0, 0.3, 0.0),
            _ => (0, 0.0, 0.0),
        })
    }
    let port = serve(H4, egress);
    // A fifth target nobody answers: listed, and the others still give their verdict.
    let dead = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut targets: Vec<String> = H4
        .iter()
        .map(|h| format!("{h}=http://127.0.0.1:{port}/{h}/metrics"))
        .collect();
    targets.push(format!("h5=http://127.0.0.1:{dead}/metrics"));
    let source = Source {
        prometheus: None,
        targets,
        peer_names: (1..=4).map(|k| format!("10.2.0.{k}=h{k}")).collect(),
    };
    let r = report(&source, 0.05).unwrap();
    let mut out = Vec::new();
    print_json(&r, &mut out).unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v["source"], "targets");
    assert_eq!(v["hosts"], serde_json::json!(["h1", "h2", "h3", "h4"]));
    let pairs = v["pairs"].as_array().unwrap();
    assert_eq!(pairs.len(), 12);
    let p = pairs
        .iter()
        .find(|p| p["prober"] == "h1" && p["target"] == "h4")
        .unwrap();
    assert_eq!(p["status"], 0);
    assert_eq!(p["sent"], 200.0);
    assert_eq!(p["loss_request"], 0.0);
    assert_eq!(p["loss_reply"], 0.3);
    assert_eq!(p["latency_typical_seconds"], 2.1e-5);
    let verdicts = v["verdicts"].as_array().unwrap();
    assert_eq!(verdicts.len(), 1, "{verdicts:?}");
    assert_eq!(verdicts[0]["kind"], "host");
    assert_eq!(verdicts[0]["alert"], "RdmaHostLinkLossy");
    assert_eq!(verdicts[0]["host"], "h4");
    assert_eq!(verdicts[0]["fault"], "egress");
    assert_eq!(verdicts[0]["pairs_failing"], 3);
    assert_eq!(verdicts[0]["text"], "h4: egress loss 30% on 3 of 3 pairs");
    let un = v["unreachable_targets"].as_array().unwrap();
    assert_eq!(un.len(), 1);
    assert!(un[0].as_str().unwrap().starts_with("h5 "), "{un:?}");
    // The text form: the matrix's h4 column shows the reply loss, plain without colour.
    let mut text = Vec::new();
    print_text(&r, &thresholds().unwrap(), false, &mut text).unwrap();
    let text = String::from_utf8(text).unwrap();
    assert!(text.contains("21us 0%/30%"), "{text}");
    assert!(!text.contains('\x1b'), "{text}");
    assert!(
        text.ends_with("h4: egress loss 30% on 3 of 3 pairs\n"),
        "{text}"
    );
}

#[test]
fn bad_arguments_are_errors() {
    let args = |targets: Vec<String>, peer_names: Vec<String>| Source {
        prometheus: None,
        targets,
        peer_names,
    };
    assert!(report(&args(vec![], vec![]), 1.0).is_err());
    let e = report(
        &args(
            vec!["http://127.0.0.1:1/metrics".into()],
            vec!["nonsense".into()],
        ),
        1.0,
    )
    .unwrap_err();
    assert!(e.to_string().contains("ADDR=NAME"), "{e}");
}

/// Above --probe.mesh-max a pair is probed once per planner cycle, longer than the loss
/// window: a host's loss counts against its pairs probed in the window, its layer faults
/// (a status every pair keeps) against all of them.
#[test]
fn loss_on_a_sampled_mesh_counts_the_pairs_probed_in_the_window() {
    let hosts: Vec<String> = (1..=16).map(|k| format!("h{k}")).collect();
    let t = thresholds().unwrap();
    // h16 loses 30% of what it sends; a pair was probed in the window when its two hosts'
    // numbers add up to a multiple of 4 (a quarter of the pairs), else it has a status only.
    let pairs = |status_of_h16: u8| -> Vec<Pair> {
        let mut out = Vec::new();
        for (i, p) in hosts.iter().enumerate() {
            for (j, q) in hosts.iter().enumerate() {
                if p == q {
                    continue;
                }
                let probed = (i + j) % 4 == 0;
                let (req, rep) = match (p.as_str(), q.as_str()) {
                    ("h16", _) => (0.3, 0.0),
                    (_, "h16") => (0.0, 0.3),
                    _ => (0.0, 0.0),
                };
                let status = if q == "h16" { status_of_h16 } else { 0 };
                out.push(Pair {
                    prober: p.clone(),
                    target: q.clone(),
                    status,
                    sent: None,
                    loss_request: (probed && status == 0).then_some(req),
                    loss_reply: (probed && status == 0).then_some(rep),
                    latency_typical_seconds: None,
                });
            }
        }
        out
    };
    let v = verdicts(&pairs(0), &t);
    assert_eq!(v.len(), 1, "{v:?}");
    assert_eq!(v[0].host.as_deref(), Some("h16"));
    assert_eq!(v[0].fault, super::verdict::Fault::Egress);
    // h16 as a target: 15 probers, 4 of them probed it in the window, all losing.
    assert_eq!((v[0].pairs_failing, v[0].pairs_total), (4, 4), "{v:?}");
    // The same mesh with h16 unreachable: its status counts against all 15 probers.
    let v = verdicts(&pairs(2), &t);
    assert_eq!(v.len(), 1, "{v:?}");
    assert_eq!(v[0].fault, super::verdict::Fault::Host);
    assert_eq!((v[0].pairs_failing, v[0].pairs_total), (15, 15), "{v:?}");
}
