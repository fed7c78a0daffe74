//! Scrape time of an rdmad probing many silent peers against one probing none (issue #29:
//! "2,000 silent peers: scrape time within 1.5x of no peers"). A measurement, never a test:
//! it prints medians and their ratio and asserts nothing. Run inside the Soft-RoCE lab by
//! bench/lab-engine-scrape:
//!
//!     engine_scrape --addr ADDR [PEERS] [ROUNDS]     (defaults 2000, 100)
//!
//! It holds PEERS TCP listeners on ADDR (the lab host's own address) from port 30000 whose
//! accept queue is full (backlog 0, one connection never accepted), so the kernel drops
//! every further SYN: PEERS silent peers. Two rdmads ($RDMAD_BIN, else target/release/rdmad)
//! run side by side with the same probe flags (2 s interval, loopback on rxe0, the default
//! per-peer series): one with an empty peers file, one with the silent ports. Once the
//! second has tried at least 300 of them (their `rdma_probe_peer_status` series exist), both
//! are scraped ROUNDS times, interleaved (the order alternating), each over a new
//! connection; it prints the p50 and p90 of each, the ratio of the p50s, the series and
//! bytes (of the body) of each scrape, and each rdmad's RSS.
#![forbid(unsafe_code)]

use anyhow::{ensure, Context, Result};
use nix::sys::socket::{
    bind, listen, socket, AddressFamily, Backlog, SockFlag, SockType, SockaddrIn,
};
use rdma_bench::median;
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const SILENT_BASE: u16 = 30000;
const SECRET: &str = "engine scrape bench secret 0123456789";

/// An rdmad killed on drop.
struct Daemon {
    child: Child,
    port: u16,
    /// The HTTP client of the scrapes, made once (outside the timed part).
    agent: ureq::Agent,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Daemon {
    fn start(bin: &Path, peers_file: &Path, secret: &Path) -> Result<Daemon> {
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let child = Command::new(bin)
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .args([
                "--probe.enable",
                "--probe.interval",
                "2",
                "--probe.iterations",
                "20",
                "--probe.mr-sizes=",
                "--probe.devices",
                "rxe0",
            ])
            .arg("--probe.peers-file")
            .arg(peers_file)
            .arg("--probe.secret-file")
            .arg(secret)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        let agent = ureq::Agent::config_builder()
            .timeout_global(Some(Duration::from_secs(30)))
            // No idle connection kept: every scrape opens a new one.
            .max_idle_connections(0)
            .proxy(None)
            .accept("text/plain")
            .build()
            .into();
        let d = Daemon { child, port, agent };
        let deadline = Instant::now() + Duration::from_secs(60);
        while d.scrape().is_err() {
            ensure!(Instant::now() < deadline, "rdmad does not answer on {port}");
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(d)
    }

    /// GET /metrics over a new connection (an agent that keeps no idle connection): the
    /// body.
    fn scrape(&self) -> Result<Vec<u8>> {
        let mut response = self
            .agent
            .get(format!("http://127.0.0.1:{}/metrics", self.port))
            .call()?;
        Ok(response
            .body_mut()
            .with_config()
            .limit(u64::MAX)
            .read_to_vec()?)
    }

    fn rss_kib(&self) -> Result<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))?;
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .context("no VmRSS")
    }
}

/// Lines of a scrape that start with `prefix`.
fn lines(raw: &[u8], prefix: &str) -> usize {
    String::from_utf8_lossy(raw)
        .lines()
        .filter(|l| l.starts_with(prefix))
        .count()
}

/// `n` listeners on `ip` from [`SILENT_BASE`], each with its accept queue full.
fn silent_listeners(ip: Ipv4Addr, n: u16) -> Result<Vec<(OwnedFd, TcpStream)>> {
    let o = ip.octets();
    let mut held = Vec::new();
    for port in SILENT_BASE..SILENT_BASE + n {
        let fd = socket(
            AddressFamily::Inet,
            SockType::Stream,
            SockFlag::empty(),
            None,
        )?;
        bind(
            fd.as_raw_fd(),
            &SockaddrIn::new(o[0], o[1], o[2], o[3], port),
        )
        .with_context(|| format!("bind {ip}:{port}"))?;
        listen(&fd, Backlog::new(0)?)?;
        let filler =
            TcpStream::connect_timeout(&SocketAddr::from((ip, port)), Duration::from_secs(5))
                .with_context(|| format!("filling {ip}:{port}"))?;
        held.push((fd, filler));
    }
    Ok(held)
}

fn write_peers(path: &Path, peers: &[String]) -> Result<()> {
    let targets: Vec<String> = peers.iter().map(|p| format!("\"{p}\"")).collect();
    std::fs::write(
        path,
        format!("[{{\"targets\": [{}]}}]\n", targets.join(", ")),
    )?;
    Ok(())
}

fn p90(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v.get((v.len() * 9 / 10).min(v.len().saturating_sub(1)))
        .copied()
        .unwrap_or_default()
}

fn main() -> Result<()> {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    ensure!(
        args.len() >= 2 && args[0] == "--addr",
        "usage: engine_scrape --addr ADDR [PEERS] [ROUNDS]"
    );
    let ip: Ipv4Addr = args[1].parse().context("--addr: an IPv4 address")?;
    args.drain(..2);
    let peers: u16 = args.first().map(|a| a.parse()).transpose()?.unwrap_or(2000);
    let rounds: usize = args.get(1).map(|a| a.parse()).transpose()?.unwrap_or(100);
    ensure!(peers > 0 && rounds > 0, "PEERS and ROUNDS must be positive");
    let (_, hard) = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)?;
    nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE, hard, hard)?;
    let bin = std::env::var_os("RDMAD_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("target/release/rdmad"));
    let dir = std::env::temp_dir().join(format!("engine-scrape-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let secret = dir.join("secret");
    std::fs::write(&secret, format!("{SECRET}\n"))?;
    let started = Instant::now();
    let _held = silent_listeners(ip, peers)?;
    println!(
        "{peers} silent listeners on {ip}:{SILENT_BASE}.. in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let none = dir.join("none.json");
    write_peers(&none, &[])?;
    let many = dir.join("silent.json");
    let list: Vec<String> = (0..peers)
        .map(|i| format!("{ip}:{}", SILENT_BASE + i))
        .collect();
    write_peers(&many, &list)?;
    let a = Daemon::start(&bin, &none, &secret)?;
    let b = Daemon::start(&bin, &many, &secret)?;
    let want = usize::from(peers).min(300);
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let tried = lines(&b.scrape()?, "rdma_probe_peer_status{");
        if tried >= want {
            println!(
                "{tried} silent peers tried after {:.0} s",
                started.elapsed().as_secs_f64()
            );
            break;
        }
        ensure!(
            Instant::now() < deadline,
            "only {tried} of {peers} silent peers tried in 600 s"
        );
        std::thread::sleep(Duration::from_secs(1));
    }
    let (mut ta, mut tb) = (Vec::with_capacity(rounds), Vec::with_capacity(rounds));
    let (mut last_a, mut last_b) = (Vec::new(), Vec::new());
    for i in 0..rounds {
        let one = |d: &Daemon, into: &mut Vec<Duration>, keep: &mut Vec<u8>| -> Result<()> {
            let t = Instant::now();
            let raw = d.scrape()?;
            into.push(t.elapsed());
            *keep = raw;
            Ok(())
        };
        if i % 2 == 0 {
            one(&a, &mut ta, &mut last_a)?;
            one(&b, &mut tb, &mut last_b)?;
        } else {
            one(&b, &mut tb, &mut last_b)?;
            one(&a, &mut ta, &mut last_a)?;
        }
    }
    let series = |raw: &[u8]| {
        String::from_utf8_lossy(raw)
            .lines()
            .filter(|l| l.starts_with("rdma_"))
            .count()
    };
    let (ma, mb) = (median(ta.clone()), median(tb.clone()));
    println!(
        "no peers:          p50 {:>8.2} ms  p90 {:>8.2} ms  {} series  {} bytes  RSS {} KiB",
        ma.as_secs_f64() * 1e3,
        p90(ta).as_secs_f64() * 1e3,
        series(&last_a),
        last_a.len(),
        a.rss_kib()?
    );
    println!(
        "{peers} silent peers: p50 {:>8.2} ms  p90 {:>8.2} ms  {} series  {} bytes  RSS {} KiB  ({} peers with series)",
        mb.as_secs_f64() * 1e3,
        p90(tb).as_secs_f64() * 1e3,
        series(&last_b),
        last_b.len(),
        b.rss_kib()?,
        lines(&last_b, "rdma_probe_peer_status{")
    );
    println!(
        "scrape time ratio ({peers} silent peers / no peers, p50 over {rounds} interleaved rounds): {:.2}x",
        mb.as_secs_f64() / ma.as_secs_f64()
    );
    drop(a);
    drop(b);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
