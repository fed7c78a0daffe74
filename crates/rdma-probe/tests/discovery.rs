//! Peer discovery on real inputs: peers files written to a temporary directory and DNS
//! answers from a small DNS server on 127.0.0.1 inside the test (real DNS messages over UDP,
//! built with hickory-proto), whose zone the test changes between refreshes.
use hickory_proto::op::{Message, MessageType, ResponseCode};
use hickory_proto::rr::rdata::{A, AAAA, SRV};
use hickory_proto::rr::{Name, RData, Record, RecordType};
use rdma_probe::discovery::{Discovery, DiscoveryConfig, PeerSet};
use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Every log line of this test process (one subscriber for all its tests; each test looks
/// for its own file's or name's lines).
fn log_lines() -> &'static Mutex<Vec<u8>> {
    static LINES: std::sync::OnceLock<&'static Mutex<Vec<u8>>> = std::sync::OnceLock::new();
    LINES.get_or_init(|| {
        let lines: &'static Mutex<Vec<u8>> = Box::leak(Box::new(Mutex::new(Vec::new())));
        struct W(&'static Mutex<Vec<u8>>);
        impl std::io::Write for W {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        tracing_subscriber::fmt()
            .with_ansi(false)
            .with_writer(move || W(lines))
            .init();
        lines
    })
}

/// Logged lines containing every one of `needles`.
fn logged(needles: &[&str]) -> usize {
    String::from_utf8_lossy(&log_lines().lock().unwrap())
        .lines()
        .filter(|l| needles.iter().all(|n| l.contains(n)))
        .count()
}

#[derive(Default)]
struct Zone {
    /// name (with the final dot) -> addresses
    addrs: BTreeMap<String, Vec<IpAddr>>,
    /// name -> (target, port)
    srv: BTreeMap<String, Vec<(String, u16)>>,
}

struct DnsServer {
    addr: SocketAddr,
    zone: Arc<Mutex<Zone>>,
    /// While set, queries get no answer (a dead server).
    silent: Arc<AtomicBool>,
    queries: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl DnsServer {
    fn start() -> DnsServer {
        let sock = UdpSocket::bind("127.0.0.1:0").expect("bind a UDP port on 127.0.0.1");
        sock.set_read_timeout(Some(Duration::from_millis(50)))
            .unwrap();
        let addr = sock.local_addr().unwrap();
        let zone = Arc::new(Mutex::new(Zone::default()));
        let silent = Arc::new(AtomicBool::new(false));
        let queries = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (z, s, q, st) = (
            Arc::clone(&zone),
            Arc::clone(&silent),
            Arc::clone(&queries),
            Arc::clone(&stop),
        );
        let thread = std::thread::spawn(move || {
            let mut buf = [0u8; 1500];
            while !st.load(Ordering::Relaxed) {
                let Ok((n, from)) = sock.recv_from(&mut buf) else {
                    continue;
                };
                q.fetch_add(1, Ordering::Relaxed);
                if s.load(Ordering::Relaxed) {
                    continue;
                }
                let Ok(req) = Message::from_vec(&buf[..n]) else {
                    continue;
                };
                let reply = answer(&req, &z.lock().unwrap());
                let _ = sock.send_to(&reply.to_vec().expect("encode"), from);
            }
        });
        DnsServer {
            addr,
            zone,
            silent,
            queries,
            stop,
            thread: Some(thread),
        }
    }

    fn set(&self, name: &str, addrs: &[&str], srv: &[(&str, u16)]) {
        let mut z = self.zone.lock().unwrap();
        z.addrs.insert(
            format!("{name}."),
            addrs.iter().map(|a| a.parse().unwrap()).collect(),
        );
        z.srv.insert(
            format!("_rdmad-probe._tcp.{name}."),
            srv.iter().map(|(t, p)| (format!("{t}."), *p)).collect(),
        );
    }

    fn remove(&self, name: &str) {
        let mut z = self.zone.lock().unwrap();
        z.addrs.remove(&format!("{name}."));
        z.srv.remove(&format!("_rdmad-probe._tcp.{name}."));
    }
}

impl Drop for DnsServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn answer(req: &Message, zone: &Zone) -> Message {
    let mut resp = Message::new();
    resp.set_id(req.id());
    resp.set_message_type(MessageType::Response);
    resp.set_op_code(req.op_code());
    resp.set_recursion_desired(req.recursion_desired());
    resp.set_recursion_available(true);
    resp.set_authoritative(true);
    let mut known = false;
    for q in req.queries() {
        resp.add_query(q.clone());
        let name = q.name().to_ascii();
        let lower = name.to_ascii_lowercase();
        if let Some(addrs) = zone.addrs.get(&lower) {
            known = true;
            for ip in addrs {
                let rdata = match (ip, q.query_type()) {
                    (IpAddr::V4(v4), RecordType::A) => RData::A(A(*v4)),
                    (IpAddr::V6(v6), RecordType::AAAA) => RData::AAAA(AAAA(*v6)),
                    _ => continue,
                };
                resp.add_answer(Record::from_rdata(q.name().clone(), 0, rdata));
            }
        }
        if let Some(srv) = zone.srv.get(&lower) {
            known = true;
            if q.query_type() == RecordType::SRV {
                for (target, port) in srv {
                    let t = Name::from_ascii(target).expect("target name");
                    resp.add_answer(Record::from_rdata(
                        q.name().clone(),
                        0,
                        RData::SRV(SRV::new(0, 1, *port, t)),
                    ));
                }
            }
        }
    }
    if !known {
        resp.set_response_code(ResponseCode::NXDomain);
    }
    resp
}

fn dns_discovery(server: &DnsServer, name: &str, listen: Option<&str>) -> Discovery {
    Discovery::new(DiscoveryConfig {
        dns_name: Some(name.into()),
        dns_server: Some(server.addr),
        dns_timeout: Some(Duration::from_millis(300)),
        default_port: 9736,
        listen: listen.map(|l| l.parse().unwrap()),
        ..DiscoveryConfig::default()
    })
}

fn keys(set: &PeerSet) -> Vec<&str> {
    set.peers.keys().map(String::as_str).collect()
}

fn err(d: &Discovery, source: &str, reason: &str) -> u64 {
    d.stats()
        .errors_total
        .get(&(source.to_string(), reason.to_string()))
        .copied()
        .unwrap_or(0)
}

#[test]
fn dns_every_address_with_the_srv_port_followed_as_records_change() {
    let server = DnsServer::start();
    server.set(
        "rdmad.test",
        &["10.9.0.1", "10.9.0.2", "10.9.0.3", "fd00::4", "127.0.0.1"],
        &[("h1.rdmad.test", 7100), ("h2.rdmad.test", 7100)],
    );
    // This engine listens on every address, port 7100: 127.0.0.1:7100 is itself.
    let mut d = dns_discovery(&server, "rdmad.test", Some("0.0.0.0:7100"));
    let set = d.refresh();
    assert_eq!(
        keys(&set),
        [
            "10.9.0.1:7100",
            "10.9.0.2:7100",
            "10.9.0.3:7100",
            "[fd00::4]:7100"
        ],
        "{set:?}"
    );
    assert!(set.own_addrs.contains("127.0.0.1:7100"), "{set:?}");
    assert_eq!(d.stats().peers.get("dns"), Some(&4));
    let asked = server.queries.load(Ordering::Relaxed);

    // A host leaves and one joins: the next refresh asks again (no cache) and follows.
    server.set(
        "rdmad.test",
        &["10.9.0.1", "10.9.0.3", "10.9.0.5"],
        &[("h1.rdmad.test", 7100)],
    );
    let set = d.refresh();
    assert!(
        server.queries.load(Ordering::Relaxed) > asked,
        "asked again"
    );
    assert_eq!(
        keys(&set),
        ["10.9.0.1:7100", "10.9.0.3:7100", "10.9.0.5:7100"]
    );

    // Without SRV records: the default port.
    server.set("rdmad.test", &["10.9.0.1"], &[]);
    server.zone.lock().unwrap().srv.clear();
    assert_eq!(keys(&d.refresh()), ["10.9.0.1:9736"]);

    // Ports that differ per target: each address gets its target's port.
    server.set("a.test", &["10.9.1.1"], &[]);
    server.set("b.test", &["10.9.1.2"], &[]);
    server.set(
        "rdmad.test",
        &["10.9.1.1", "10.9.1.2"],
        &[("a.test", 7001), ("b.test", 7002)],
    );
    assert_eq!(keys(&d.refresh()), ["10.9.1.1:7001", "10.9.1.2:7002"]);
    assert_eq!(err(&d, "dns", "no_records") + err(&d, "dns", "resolve"), 0);
}

/// rdmad's case: the lookups run on the process's one runtime (discovery builds none), and
/// once that runtime has shut down (rdmad stopping) a refresh fails as "no answer", keeping
/// the last good one, instead of panicking in the discovery thread.
#[test]
fn dns_on_the_process_runtime_and_after_it_shut_down() {
    let server = DnsServer::start();
    server.set("rt.test", &["10.9.2.1", "10.9.2.2"], &[]);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let mut d = Discovery::new(DiscoveryConfig {
        dns_name: Some("rt.test".into()),
        dns_server: Some(server.addr),
        dns_timeout: Some(Duration::from_millis(300)),
        default_port: 9736,
        runtime: Some(runtime.handle().clone()),
        ..DiscoveryConfig::default()
    });
    assert_eq!(keys(&d.refresh()), ["10.9.2.1:9736", "10.9.2.2:9736"]);
    server.set("rt.test", &["10.9.2.3"], &[]);
    assert_eq!(keys(&d.refresh()), ["10.9.2.3:9736"]);
    assert_eq!(err(&d, "dns", "resolve"), 0, "{:?}", d.stats());
    drop(runtime);
    assert_eq!(keys(&d.refresh()), ["10.9.2.3:9736"]);
    assert_eq!(err(&d, "dns", "resolve"), 1, "{:?}", d.stats());
}

#[test]
fn dns_a_name_that_stops_resolving_and_a_dead_server() {
    let server = DnsServer::start();
    server.set("pm.test", &["10.9.0.1", "10.9.0.2"], &[]);
    let mut d = dns_discovery(&server, "pm.test", None);
    assert_eq!(keys(&d.refresh()), ["10.9.0.1:9736", "10.9.0.2:9736"]);

    // The server stops answering: the last good peers are kept, the failure counted (each
    // time) and logged (once).
    log_lines();
    server.silent.store(true, Ordering::Relaxed);
    let set = d.refresh();
    assert_eq!(keys(&set), ["10.9.0.1:9736", "10.9.0.2:9736"]);
    assert_eq!(err(&d, "dns", "resolve"), 1, "{:?}", d.stats());
    assert_eq!(keys(&d.refresh()), ["10.9.0.1:9736", "10.9.0.2:9736"]);
    assert_eq!(err(&d, "dns", "resolve"), 2, "{:?}", d.stats());
    assert_eq!(logged(&["pm.test", "keeping the last good answer"]), 1);
    server.silent.store(false, Ordering::Relaxed);

    // Kept for a bounded time only: an engine whose last good answer is older than its
    // bound (0 here, 5 minutes by default) drops the DNS peers while the name does not
    // resolve, and has them back at the next good answer.
    let mut bounded = Discovery::new(DiscoveryConfig {
        dns_name: Some("pm.test".into()),
        dns_server: Some(server.addr),
        dns_timeout: Some(Duration::from_millis(300)),
        dns_keep_last_good: Some(Duration::ZERO),
        default_port: 9736,
        ..DiscoveryConfig::default()
    });
    assert_eq!(keys(&bounded.refresh()), ["10.9.0.1:9736", "10.9.0.2:9736"]);
    server.silent.store(true, Ordering::Relaxed);
    assert!(bounded.refresh().peers.is_empty());
    assert!(bounded.refresh().peers.is_empty());
    assert_eq!(err(&bounded, "dns", "resolve"), 2, "{:?}", bounded.stats());
    assert_eq!(logged(&["pm.test", "its 2 peers are dropped"]), 1);
    // The default bound keeps them through the same outage.
    assert_eq!(keys(&d.refresh()), ["10.9.0.1:9736", "10.9.0.2:9736"]);
    assert_eq!(err(&d, "dns", "resolve"), 3, "{:?}", d.stats());
    server.silent.store(false, Ordering::Relaxed);
    assert_eq!(keys(&bounded.refresh()), ["10.9.0.1:9736", "10.9.0.2:9736"]);
    assert_eq!(
        rdma_probe::discovery::DNS_KEEP_LAST_GOOD,
        Duration::from_secs(300)
    );

    // The name is gone (NXDOMAIN): no DNS peers, counted; static peers are not disturbed.
    server.remove("pm.test");
    let mut with_static = Discovery::new(DiscoveryConfig {
        static_peers: vec!["10.8.0.9:9736".into(), "not a peer".into()],
        dns_name: Some("pm.test".into()),
        dns_server: Some(server.addr),
        dns_timeout: Some(Duration::from_millis(300)),
        default_port: 9736,
        ..DiscoveryConfig::default()
    });
    assert!(d.refresh().peers.is_empty());
    assert_eq!(err(&d, "dns", "no_records"), 1, "{:?}", d.stats());
    let set = with_static.refresh();
    assert_eq!(keys(&set), ["10.8.0.9:9736"], "{set:?}");
    assert_eq!(with_static.stats().invalid_entries.get("static"), Some(&1));
    assert_eq!(err(&with_static, "dns", "no_records"), 1);

    // Back in DNS: back in the set.
    server.set("pm.test", &["10.9.0.2"], &[]);
    assert_eq!(keys(&d.refresh()), ["10.9.0.2:9736"]);
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "rdma-probe-discovery-{}-{name}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn file_discovery(path: &std::path::Path, listen: Option<&str>) -> Discovery {
    Discovery::new(DiscoveryConfig {
        file: Some(path.to_path_buf()),
        default_port: 9736,
        listen: listen.map(|l| l.parse().unwrap()),
        ..DiscoveryConfig::default()
    })
}

/// Replace the file's content so that its size or inode changes (a rename, as config
/// management tools and Kubernetes ConfigMap updates do).
fn rewrite(path: &std::path::Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// A file_sd peers file mixing good groups with bad targets, a bad label and entries that
/// are not groups.
const MIXED_PEERS_JSON: &str = r#"[
  {"targets": ["10.7.0.1:9736", "10.7.0.2:9736", "10.7.0.3"], "labels": {"rack": "r1", "zone": "z1"}},
  {"targets": ["h9.example:7000", "bad host:1", 42, "10.7.0.4:0"], "labels": {"rack": "r2", "bad-label": "x", "n": 3}},
  {"labels": {"rack": "r3"}},
  "not a group",
  {"targets": ["10.7.0.5:9736"]}
]"#;

#[test]
fn json_file_targets_labels_bad_entries_skipped_and_reread_on_change() {
    let dir = temp_dir("json");
    let path = dir.join("peers.json");
    std::fs::write(&path, MIXED_PEERS_JSON).unwrap();
    log_lines();
    let mut d = file_discovery(&path, Some("10.7.0.1:9736"));
    let set = d.refresh();
    assert_eq!(
        keys(&set),
        [
            "10.7.0.2:9736",
            "10.7.0.3:9736",
            "10.7.0.5:9736",
            "h9.example:7000"
        ],
        "{set:?}"
    );
    assert_eq!(set.peers["10.7.0.2:9736"].rack(), Some("r1"));
    assert_eq!(set.peers["10.7.0.2:9736"].labels["zone"], "z1");
    assert_eq!(set.peers["h9.example:7000"].rack(), Some("r2"));
    assert!(set.peers["10.7.0.5:9736"].labels.is_empty());
    // 10.7.0.1:9736 is this engine: dropped, and its labels are this host's.
    assert!(set.own_addrs.contains("10.7.0.1:9736"));
    assert_eq!(set.own_rack(), Some("r1"));
    // bad host, 42, port 0, bad-label, n=3, the group without targets, "not a group".
    assert_eq!(
        d.stats().invalid_entries.get("file"),
        Some(&7),
        "{:?}",
        d.stats()
    );
    assert_eq!(d.stats().peers.get("file"), Some(&4));

    // Each bad entry is logged once, however often the file is read.
    let shown = path.display().to_string();
    assert_eq!(logged(&[&shown, "bad host:1"]), 1);
    rewrite(
        &path,
        r#"[{"targets": ["10.7.0.3:9736"]}, {"targets": ["bad host:1", "10.7.0.2:9736"]}]"#,
    );
    assert_eq!(keys(&d.refresh()), ["10.7.0.2:9736", "10.7.0.3:9736"]);
    assert_eq!(
        logged(&[&shown, "bad host:1"]),
        1,
        "logged once, not per read"
    );
    rewrite(&path, MIXED_PEERS_JSON);
    assert_eq!(keys(&d.refresh()), keys(&set));

    // Unchanged: not read again (the same set); changed: re-read.
    assert_eq!(d.refresh(), set);
    rewrite(
        &path,
        r#"[{"targets": ["10.7.0.2:9736", "10.7.0.6:9736"], "labels": {"rack": "r2"}}]"#,
    );
    let set = d.refresh();
    assert_eq!(keys(&set), ["10.7.0.2:9736", "10.7.0.6:9736"]);
    assert_eq!(set.peers["10.7.0.2:9736"].rack(), Some("r2"));
    assert_eq!(d.stats().invalid_entries.get("file"), Some(&0));

    // Garbage: the previous peers stay, the error is counted once per change.
    rewrite(&path, "{ this is not json ]");
    assert_eq!(keys(&d.refresh()), ["10.7.0.2:9736", "10.7.0.6:9736"]);
    assert_eq!(keys(&d.refresh()), ["10.7.0.2:9736", "10.7.0.6:9736"]);
    assert_eq!(err(&d, "file", "parse"), 1, "{:?}", d.stats());

    // Deleted: no file peers.
    std::fs::remove_file(&path).unwrap();
    assert!(d.refresh().peers.is_empty());
    assert_eq!(err(&d, "file", "missing"), 1);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn yaml_file_and_the_merge_with_static_peers() {
    let dir = temp_dir("yaml");
    let path = dir.join("peers.yml");
    std::fs::write(
        &path,
        "# file_sd in YAML\n- targets: ['10.6.0.1:9736', '10.6.0.2:9736']\n  labels:\n    rack: r7\n- targets:\n  - '[fd00::6]:9736'\n  labels: {rack: r8}\n",
    )
    .unwrap();
    let mut d = Discovery::new(DiscoveryConfig {
        static_peers: vec!["10.6.0.2:9736".into(), "10.6.0.9:9736".into()],
        file: Some(path.clone()),
        default_port: 9736,
        own_labels: [("rack".to_string(), "r7".to_string())].into(),
        ..DiscoveryConfig::default()
    });
    let set = d.refresh();
    assert_eq!(
        keys(&set),
        [
            "10.6.0.1:9736",
            "10.6.0.2:9736",
            "10.6.0.9:9736",
            "[fd00::6]:9736"
        ]
    );
    // A static peer also in the file gets the file's labels; it is one peer, not two.
    assert_eq!(set.peers["10.6.0.2:9736"].rack(), Some("r7"));
    assert_eq!(set.peers["[fd00::6]:9736"].rack(), Some("r8"));
    assert_eq!(set.own_rack(), Some("r7"), "configured");
    assert_eq!(d.stats().peers.get("static"), Some(&2));
    assert_eq!(d.stats().peers.get("file"), Some(&3));

    rewrite(
        &path,
        "- targets: [10.6.0.1:9736]\n  labels: [not, a, map]\n",
    );
    let set = d.refresh();
    assert_eq!(
        keys(&set),
        ["10.6.0.2:9736", "10.6.0.9:9736"],
        "the group with bad labels is skipped; the static peers stay"
    );
    assert_eq!(d.stats().invalid_entries.get("file"), Some(&1));
    rewrite(&path, "");
    assert_eq!(keys(&d.refresh()), ["10.6.0.2:9736", "10.6.0.9:9736"]);
    assert_eq!(err(&d, "file", "parse"), 0, "an empty file is no targets");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn dns_a_server_that_takes_queries_and_never_answers_fails_the_refresh() {
    // UDP queries read by nobody, TCP connections accepted by the kernel and never read:
    // every refresh ends (by the resolver's timeouts or the refresh's own bound) with the
    // failure counted and no peers.
    let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = udp.local_addr().unwrap();
    let _tcp = std::net::TcpListener::bind(addr).ok();
    let mut d = Discovery::new(DiscoveryConfig {
        dns_name: Some("pm.test".into()),
        dns_server: Some(addr),
        dns_timeout: Some(Duration::from_millis(200)),
        default_port: 9736,
        ..DiscoveryConfig::default()
    });
    for n in 1..=3 {
        assert!(d.refresh().peers.is_empty());
        assert_eq!(err(&d, "dns", "resolve"), n, "{:?}", d.stats());
    }
}
