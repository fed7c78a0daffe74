//! rdmad against node_exporter's infiniband collector and against the floors, in one run.
//!
//! `cargo run --release -p rdma-bench --bin scrape_vs_node_exporter [DEVICES] [ROUNDS]`
//! writes the synthetic tree (`gen-sysfs.py OUT --devices 64` by default);
//! `scrape_vs_node_exporter --sysfs ROOT [ROUNDS]` uses the sysfs tree ROOT as it is instead
//! (`/sys` in the Soft-RoCE lab: `bench/lab-scrape` runs it there on 3 rxe ports). It starts
//! `target/release/rdmad` (or `$RDMAD_BIN`) and `prometheus-node-exporter` (or
//! `$NODE_EXPORTER_BIN`; `--collector.disable-defaults --collector.infiniband --path.sysfs OUT`)
//! on free 127.0.0.1 ports, and then, ROUNDS times (200 by default) in a rotating order:
//! - the floor: one `pread` per counter file through descriptors kept open, serial (what the
//!   kernel cannot do faster for one reader; rdmad keeps its descriptors the same way), and the
//!   same over every file of the tree;
//! - a plain open/read/close loop over every file (file list built beforehand);
//! - one HTTP scrape of each daemon without and with `Accept-Encoding: gzip` (a new
//!   connection per scrape, `Connection: close`, the whole response read).
//!
//! rdmad collects on every scrape (it caches no value; it keeps the counter files open and
//! re-reads them, see rdmad/README.md "Cost of a scrape"). Prints p50 (and p90) of each, the
//! ratios (targets: rdmad <= 2.0x the counter-file floor, <= 0.3x node_exporter), the series
//! of each, whether every counter file of the tree has its series in rdmad's exposition
//! (checked by name with rdmad's own naming, not only printed: the run fails otherwise), the
//! bytes on the wire with and without gzip (target: gzip <= 10% of plain), the CPU time rdmad
//! spends per scrape plain and gzip (utime + stime over ROUNDS back-to-back scrapes each), the
//! p50 of those back-to-back scrapes next to the floor's and node_exporter's, back to back
//! too (caches warm: on a 2-vCPU VM here the floor takes 2-3x as long after 20 ms of idle as
//! back to back, so the interleaved rounds, where each step follows other work, are the cold
//! case), and the resident memory (VmRSS) of both daemons idle after start and after the run.
//! A measurement, never a test: nothing here asserts a time.
#![forbid(unsafe_code)]

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use rdma_bench::{
    device_files, is_counter_file, median, plain_loop, synthetic_sysfs, time, KeptFiles,
};
use rdmad::metrics::Kind;
use rdmakit::model::{Counter, CounterSource};

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
        while scrape(port, false).is_err() {
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

    /// utime + stime so far, in clock ticks (fields 14 and 15 of /proc/PID/stat).
    fn cpu_ticks(&self) -> Result<u64> {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.child.id()))?;
        let after_name = stat.rsplit_once(')').context("bad /proc/PID/stat")?.1;
        let fields: Vec<&str> = after_name.split_whitespace().collect();
        let ticks = |i: usize| -> Result<u64> {
            fields
                .get(i)
                .and_then(|v| v.parse().ok())
                .context("bad /proc/PID/stat")
        };
        // After the name: field 3 (state) is index 0, so utime (14) is 11 and stime (15) 12.
        Ok(ticks(11)? + ticks(12)?)
    }
}

fn free_port() -> Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// One response: bytes read from the socket (headers and body as sent), the body de-chunked
/// and the content encoding.
struct Scraped {
    wire: usize,
    body: Vec<u8>,
    gzip: bool,
}

impl Scraped {
    /// The exposition text (gunzipped when it came compressed).
    fn text(&self) -> Result<String> {
        if !self.gzip {
            return Ok(String::from_utf8(self.body.clone())?);
        }
        let mut text = String::new();
        flate2::read::GzDecoder::new(&self.body[..]).read_to_string(&mut text)?;
        Ok(text)
    }
}

/// GET /metrics over a new connection, with `Accept-Encoding: gzip` when `gzip`.
///
/// Raw bytes on purpose, not the workspace's HTTP client (ureq): the bench reports the bytes
/// on the wire (status line, headers and chunk framing included), which a client that hands
/// back only the decoded body cannot count, and the timed scrape is the same few syscalls
/// for both daemons.
fn scrape(port: u16, gzip: bool) -> Result<Scraped> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    let encoding = if gzip {
        "Accept-Encoding: gzip\r\n"
    } else {
        ""
    };
    write!(
        stream,
        "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/plain\r\n{encoding}Connection: close\r\n\r\n"
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
    Ok(Scraped {
        wire: raw.len(),
        body,
        gzip: head.contains("content-encoding: gzip"),
    })
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

/// The series rdmad must export for the counter file `path` of the tree (rdmad's own naming:
/// `rdmad::names`), e.g. `rdma_port_xmit_data_bytes_total{device="mlx5_0",port="1"}`.
fn expected_series(path: &Path) -> Option<String> {
    let file = path.file_name()?.to_str()?;
    let dir = path.parent()?;
    let parts: Vec<&str> = dir.iter().filter_map(|p| p.to_str()).collect();
    let at = parts.iter().rposition(|p| *p == "infiniband")?;
    let (device, labels, source) = match &parts[at + 1..] {
        [device, "ports", port, "counters"] => (
            *device,
            format!("{{device=\"{device}\",port=\"{port}\"}}"),
            CounterSource::Pma,
        ),
        [device, "ports", port, "hw_counters"] => (
            *device,
            format!("{{device=\"{device}\",port=\"{port}\"}}"),
            CounterSource::Hw,
        ),
        [device, "hw_counters"] => (
            *device,
            format!("{{device=\"{device}\"}}"),
            CounterSource::DeviceHw,
        ),
        _ => return None,
    };
    let _ = device;
    let (name, kind) = rdmad::names::counter_metric_name(&Counter::new(file, source, 0))?;
    let suffix = if kind == Kind::Counter { "_total" } else { "" };
    Some(format!("{name}{suffix}{labels}"))
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

/// The timed steps of one round, in the order of round 0 (later rounds rotate it).
const STEPS: [&str; 7] = [
    "floor: pread, counter files",
    "floor: pread, every file",
    "open/read/close, every file",
    "rdmad          plain",
    "rdmad          gzip",
    "node_exporter  plain",
    "node_exporter  gzip",
];

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1).peekable();
    // `--sysfs ROOT`: an existing tree (kept); else DEVICES: a synthetic one (removed after).
    let given = if args.peek().map(String::as_str) == Some("--sysfs") {
        args.next();
        Some(PathBuf::from(
            args.next().context("--sysfs needs a directory")?,
        ))
    } else {
        None
    };
    let devices: Option<u32> = match given {
        Some(_) => None,
        None => Some(args.next().map(|a| a.parse()).transpose()?.unwrap_or(64)),
    };
    let rounds: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(200);
    ensure!(rounds > 0, "ROUNDS must be at least 1");
    let root = match (&given, devices) {
        (Some(root), _) => root.clone(),
        (None, devices) => synthetic_sysfs(devices.unwrap_or(64))?,
    };
    ensure!(
        root.join("class/infiniband").is_dir(),
        "{} has no class/infiniband",
        root.display()
    );
    // The kept descriptors need more than the default soft RLIMIT_NOFILE (1024): raise it to
    // the hard limit, as rdmad does at start.
    drop(rdmad::collector::sysfs_open_files());
    let mut files = Vec::new();
    device_files(&root.join("class/infiniband"), &mut files)?;
    // A real tree has attributes that cannot be opened for reading (write-only ones): left
    // out of every loop, as no reader reads them.
    files.retain(|p| std::fs::File::open(p).is_ok());
    files.sort();
    let counter_paths: Vec<PathBuf> = files
        .iter()
        .filter(|p| is_counter_file(p))
        .cloned()
        .collect();
    let counter_files = counter_paths.len();

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

    // What each exports and sends (checked once, outside the timing).
    let rdmad_plain = scrape(rdmad.port, false)?;
    let rdmad_gzip = scrape(rdmad.port, true)?;
    let node_plain = scrape(node.port, false)?;
    let node_gzip = scrape(node.port, true)?;
    ensure!(rdmad_gzip.gzip, "rdmad did not gzip when asked");
    let rdmad_text = rdmad_plain.text()?;
    let node_text = node_plain.text()?;
    ensure!(
        series(&rdmad_gzip.text()?, "")? == series(&rdmad_text, "")?,
        "rdmad's gzip exposition has other series than its plain one"
    );
    let exported: BTreeSet<&str> = rdmad_text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.rsplit_once(' ').map(|(s, _)| s))
        .collect();
    let missing: Vec<String> = counter_paths
        .iter()
        .filter(|p| expected_series(p).is_none_or(|s| !exported.contains(s.as_str())))
        .map(|p| p.display().to_string())
        .collect();
    ensure!(
        missing.is_empty(),
        "{} of {counter_files} counter files have no series in rdmad's exposition, e.g. {}",
        missing.len(),
        missing[0]
    );

    let kept_counters = KeptFiles::open(&counter_paths)?;
    let kept_all = KeptFiles::open(&files)?;
    let mut buf = vec![0u8; 4097];
    // Warm-up: page cache, dentries, allocators.
    for _ in 0..10 {
        scrape(rdmad.port, false)?;
        scrape(rdmad.port, true)?;
        scrape(node.port, false)?;
        scrape(node.port, true)?;
        kept_counters.read_all(&mut buf);
        kept_all.read_all(&mut buf);
        plain_loop(&files, &mut buf);
    }
    let load_start = load_average();
    let mut t: [Vec<Duration>; 7] = Default::default();
    for round in 0..rounds {
        for step in 0..STEPS.len() {
            let which = (round + step) % STEPS.len();
            let took = match which {
                0 => time(|| {
                    kept_counters.read_all(&mut buf);
                }),
                1 => time(|| {
                    kept_all.read_all(&mut buf);
                }),
                2 => time(|| {
                    plain_loop(&files, &mut buf);
                }),
                _ => {
                    let (port, gzip) = match which {
                        3 => (rdmad.port, false),
                        4 => (rdmad.port, true),
                        5 => (node.port, false),
                        _ => (node.port, true),
                    };
                    let start = Instant::now();
                    let got = scrape(port, gzip)?;
                    let took = start.elapsed();
                    std::hint::black_box(got);
                    took
                }
            };
            t[which].push(took);
        }
    }
    // rdmad's own CPU per scrape, plain and gzip: ROUNDS back-to-back scrapes each, timed
    // too; then the floor and node_exporter back to back as well. Nothing runs between two
    // of them, so each finds the caches as the previous one left them: the warm case, where
    // the interleaved rounds above measure each after other work.
    let ticks_per_second = 100.0; // USER_HZ on Linux
    let mut cpu_ms = [0.0f64; 2];
    let mut warm: [Vec<Duration>; 4] = Default::default();
    for (i, gzip) in [false, true].into_iter().enumerate() {
        let before = rdmad.cpu_ticks()?;
        for _ in 0..rounds {
            let start = Instant::now();
            std::hint::black_box(scrape(rdmad.port, gzip)?);
            warm[i].push(start.elapsed());
        }
        let ticks = rdmad.cpu_ticks()? - before;
        cpu_ms[i] = ticks as f64 / ticks_per_second * 1e3 / rounds as f64;
    }
    for _ in 0..rounds {
        warm[2].push(time(|| {
            kept_counters.read_all(&mut buf);
        }));
    }
    for _ in 0..rounds {
        let start = Instant::now();
        std::hint::black_box(scrape(node.port, false)?);
        warm[3].push(start.elapsed());
    }
    let warm: Vec<f64> = warm.into_iter().map(|v| ms(median(v))).collect();
    std::thread::sleep(Duration::from_secs(1));
    let rss_end = (rdmad.rss_kib()?, node.rss_kib()?);

    let p50: Vec<Duration> = t.iter().map(|v| median(v.clone())).collect();
    let p90: Vec<Duration> = t.iter().map(|v| percentile(v.clone(), 0.9)).collect();
    let tree = match devices {
        Some(n) => format!("synthetic, {n} devices"),
        None => format!(
            "{}, devices {}",
            root.display(),
            device_names(&root).join(" ")
        ),
    };
    println!(
        "sysfs tree: {tree}, {} files, {counter_files} counter files; {rounds} interleaved rounds; load average {} (at start), {} (at end)",
        files.len(),
        load_start,
        load_average(),
    );
    for (i, name) in STEPS.iter().enumerate() {
        println!(
            "{name:<28} p50 {:>8.3} ms  p90 {:>8.3} ms",
            ms(p50[i]),
            ms(p90[i])
        );
    }
    println!(
        "series: rdmad {} (rdma_* {}), node_exporter {} (node_infiniband_* {})",
        series(&rdmad_text, "")?,
        series(&rdmad_text, "rdma_")?,
        series(&node_text, "")?,
        series(&node_text, "node_infiniband_")?,
    );
    println!(
        "every counter file exported by rdmad: yes, {counter_files} of {counter_files} (checked by series name)"
    );
    let ratio = |a: usize, b: usize| p50[a].as_secs_f64() / p50[b].as_secs_f64();
    println!(
        "ratio rdmad/floor (counter files): plain {:.2}x, gzip {:.2}x (target <= 2.0x)",
        ratio(3, 0),
        ratio(4, 0)
    );
    println!(
        "ratio rdmad/node_exporter:         plain {:.2}x, gzip {:.2}x (target <= 0.3x)",
        ratio(3, 5),
        ratio(4, 6)
    );
    let pct = |a: &Scraped, b: &Scraped| 100.0 * a.wire as f64 / b.wire as f64;
    println!(
        "bytes on the wire (response, headers included): rdmad plain {} gzip {} ({:.1}%, target <= 10%); node_exporter plain {} gzip {} ({:.1}%)",
        rdmad_plain.wire,
        rdmad_gzip.wire,
        pct(&rdmad_gzip, &rdmad_plain),
        node_plain.wire,
        node_gzip.wire,
        pct(&node_gzip, &node_plain),
    );
    println!(
        "rdmad CPU per scrape (utime+stime over {rounds} scrapes each): plain {:.2} ms, gzip {:.2} ms",
        cpu_ms[0], cpu_ms[1]
    );
    println!(
        "back to back ({rounds} each, caches warm): floor p50 {:.3} ms, rdmad plain {:.3} ms ({:.2}x floor), gzip {:.3} ms, node_exporter plain {:.3} ms (rdmad {:.2}x)",
        warm[2],
        warm[0],
        warm[0] / warm[2],
        warm[1],
        warm[3],
        warm[0] / warm[3]
    );
    println!(
        "idle RSS after start: rdmad {} KiB, node_exporter {} KiB; after the run: rdmad {} KiB, node_exporter {} KiB",
        rss_start.0, rss_start.1, rss_end.0, rss_end.1
    );
    drop(rdmad);
    drop(node);
    if given.is_none() {
        let _ = std::fs::remove_dir_all(&root);
    }
    Ok(())
}

/// The first three fields of /proc/loadavg ("?" when unreadable).
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

/// The device names of `ROOT/class/infiniband`, sorted.
fn device_names(root: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(root.join("class/infiniband"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}
