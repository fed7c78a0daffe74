//! rdmad against node_exporter's infiniband collector and against the floor, in one run.
//!
//! `cargo run --release -p rdma-bench --bin scrape_vs_node_exporter [DEVICES] [ROUNDS]`
//! writes the synthetic tree (`gen-sysfs.py OUT --devices 64` by default), starts
//! `target/release/rdmad` (or `$RDMAD_BIN`) and `prometheus-node-exporter` (or
//! `$NODE_EXPORTER_BIN`; `--collector.disable-defaults --collector.infiniband --path.sysfs OUT`)
//! on free 127.0.0.1 ports, and then, ROUNDS times (200 by default) in a rotating order,
//! scrapes each once over HTTP (a new connection per scrape, `Connection: close`, no gzip)
//! and runs one plain open/read/close loop over every file of the tree (file list built
//! beforehand). rdmad collects on every scrape (it caches no value; it keeps the counter
//! files open and re-reads them, see rdmad/README.md "Cost of a scrape"). Prints p50 (and p90) of
//! each, the ratios (targets: rdmad <= 0.5x node_exporter, <= 1.3x the loop), the series of
//! each (rdmad must export every counter file: checked, not only printed) and the resident
//! memory (VmRSS) of both daemons idle after start and idle after the run.
#![forbid(unsafe_code)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use rdma_bench::{all_files, median, plain_loop, synthetic_sysfs, time};

/// A daemon killed on drop.
struct Daemon {
    child: Child,
    port: u16,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Daemon {
    fn start(name: &'static str, bin: &Path, args: &[String], port: u16) -> Result<Daemon> {
        let child = Command::new(bin)
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        let daemon = Daemon { child, port };
        let deadline = Instant::now() + Duration::from_secs(20);
        while scrape(port).is_err() {
            ensure!(
                Instant::now() < deadline,
                "{name} does not answer on port {port}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(daemon)
    }

    /// VmRSS in KiB.
    fn rss_kib(&self) -> Result<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))?;
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .context("no VmRSS")
    }
}

fn free_port() -> Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// GET /metrics over a new connection; the body (de-chunked).
fn scrape(port: u16) -> Result<String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    stream.write_all(
        b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/plain\r\nConnection: close\r\n\r\n",
    )?;
    let mut raw = Vec::with_capacity(1 << 20);
    stream.read_to_end(&mut raw)?;
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .context("no end of HTTP header")?;
    let head = String::from_utf8_lossy(&raw[..end]).to_ascii_lowercase();
    if !head.starts_with("http/1.1 200") {
        bail!("HTTP status: {}", head.lines().next().unwrap_or(""));
    }
    let body = &raw[end + 4..];
    let body = if head.contains("transfer-encoding: chunked") {
        dechunk(body)?
    } else {
        body.to_vec()
    };
    Ok(String::from_utf8(body)?)
}

fn dechunk(mut data: &[u8]) -> Result<Vec<u8>> {
    let mut out = Vec::with_capacity(data.len());
    loop {
        let line_end = data
            .windows(2)
            .position(|w| w == b"\r\n")
            .context("bad chunk")?;
        let size_text = std::str::from_utf8(&data[..line_end])?;
        let size = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16)?;
        data = &data[line_end + 2..];
        if size == 0 {
            return Ok(out);
        }
        ensure!(data.len() >= size + 2, "short chunk");
        out.extend_from_slice(&data[..size]);
        data = &data[size + 2..];
    }
}

/// Samples of an exposition whose name starts with `prefix` (read with the workspace's one
/// exposition parser).
fn series(text: &str, prefix: &str) -> Result<usize> {
    Ok(rdmakit::exposition::parse(text)?
        .samples
        .iter()
        .filter(|s| s.name.starts_with(prefix))
        .count())
}

fn percentile(mut v: Vec<Duration>, p: f64) -> Duration {
    v.sort();
    let i = ((v.len() as f64 - 1.0) * p).round() as usize;
    v.get(i).copied().unwrap_or_default()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn workspace_bin(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../target/release")
        .join(name)
}

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let devices: u32 = args.next().map(|a| a.parse()).transpose()?.unwrap_or(64);
    let rounds: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(200);
    let root = synthetic_sysfs(devices)?;
    let mut files = Vec::new();
    all_files(&root.join("class/infiniband"), &mut files)?;
    let counter_files = files
        .iter()
        .filter(|p| {
            p.parent()
                .and_then(|d| d.file_name())
                .is_some_and(|d| d == "counters" || d == "hw_counters")
        })
        .count();

    let rdmad_bin = std::env::var_os("RDMAD_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_bin("rdmad"));
    let node_bin = std::env::var_os("NODE_EXPORTER_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/bin/prometheus-node-exporter"));
    ensure!(
        rdmad_bin.is_file(),
        "{} missing: cargo build --release -p rdmad",
        rdmad_bin.display()
    );
    ensure!(
        node_bin.is_file(),
        "{} missing: apt-get install prometheus-node-exporter",
        node_bin.display()
    );
    let sysfs = root.display().to_string();
    let rdmad_port = free_port()?;
    let rdmad = Daemon::start(
        "rdmad",
        &rdmad_bin,
        &[
            format!("--web.listen-address=127.0.0.1:{rdmad_port}"),
            format!("--path.sysfs={sysfs}"),
        ],
        rdmad_port,
    )?;
    let node_port = free_port()?;
    let node = Daemon::start(
        "node_exporter",
        &node_bin,
        &[
            format!("--web.listen-address=127.0.0.1:{node_port}"),
            "--collector.disable-defaults".into(),
            "--collector.infiniband".into(),
            format!("--path.sysfs={sysfs}"),
        ],
        node_port,
    )?;
    std::thread::sleep(Duration::from_millis(500));
    let rss_start = (rdmad.rss_kib()?, node.rss_kib()?);

    // What each exports (checked once, outside the timing).
    let rdmad_text = scrape(rdmad.port)?;
    let node_text = scrape(node.port)?;
    let rdmad_counters = rdmad_text
        .lines()
        .filter(|l| {
            (l.starts_with("rdma_port_") || l.starts_with("rdma_device_hw_"))
                && (l.contains("_total{") || l.contains("_hw_"))
        })
        .count();
    ensure!(
        rdmad_counters == counter_files,
        "rdmad exports {rdmad_counters} counter series for {counter_files} counter files"
    );

    let mut buf = vec![0u8; 4097];
    let mut floor = || {
        plain_loop(&files, &mut buf);
    };
    // Warm-up: page cache, dentries, allocators.
    for _ in 0..10 {
        scrape(rdmad.port)?;
        scrape(node.port)?;
        floor();
    }
    let (mut t_rdmad, mut t_node, mut t_loop) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..rounds {
        for step in 0..3 {
            match (round + step) % 3 {
                0 => {
                    let start = Instant::now();
                    let body = scrape(rdmad.port)?;
                    t_rdmad.push(start.elapsed());
                    std::hint::black_box(body);
                }
                1 => {
                    let start = Instant::now();
                    let body = scrape(node.port)?;
                    t_node.push(start.elapsed());
                    std::hint::black_box(body);
                }
                _ => t_loop.push(time(&mut floor)),
            }
        }
    }
    std::thread::sleep(Duration::from_secs(1));
    let rss_end = (rdmad.rss_kib()?, node.rss_kib()?);

    let p90 = (
        percentile(t_rdmad.clone(), 0.9),
        percentile(t_node.clone(), 0.9),
        percentile(t_loop.clone(), 0.9),
    );
    let (r, n, l) = (median(t_rdmad), median(t_node), median(t_loop));
    println!(
        "sysfs tree: {devices} devices, {} files, {counter_files} counter files; {rounds} interleaved rounds",
        files.len()
    );
    println!(
        "rdmad          HTTP scrape  p50 {:>8.3} ms  p90 {:>8.3} ms  series {} (rdma_* {}, counters {rdmad_counters})",
        ms(r),
        ms(p90.0),
        series(&rdmad_text, "")?,
        series(&rdmad_text, "rdma_")?,
    );
    println!(
        "node_exporter  HTTP scrape  p50 {:>8.3} ms  p90 {:>8.3} ms  series {} (node_infiniband_* {})",
        ms(n),
        ms(p90.1),
        series(&node_text, "")?,
        series(&node_text, "node_infiniband_")?,
    );
    println!(
        "open/read/close loop        p50 {:>8.3} ms  p90 {:>8.3} ms  files {}",
        ms(l),
        ms(p90.2),
        files.len()
    );
    println!(
        "ratio rdmad/node_exporter: {:.2}x (target <= 0.5x)",
        r.as_secs_f64() / n.as_secs_f64()
    );
    println!(
        "ratio rdmad/loop:          {:.2}x (target <= 1.3x)",
        r.as_secs_f64() / l.as_secs_f64()
    );
    println!(
        "idle RSS after start: rdmad {} KiB, node_exporter {} KiB; after the run: rdmad {} KiB, node_exporter {} KiB",
        rss_start.0, rss_start.1, rss_end.0, rss_end.1
    );
    drop(rdmad);
    drop(node);
    let _ = std::fs::remove_dir_all(&root);
    Ok(())
}
