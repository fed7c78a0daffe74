//! End-to-end tests of the rdmad binary: golden expositions over every fake sysfs tree,
//! promtool on the golden files, a real Prometheus scraping rdmad, HTTP content negotiation,
//! flags, env, the config file and the deployment files.
//!
//! Golden files live in `tests/fixtures/golden/<fixture>.prom`, one per tree in
//! `tests/fixtures/sysfs/` (a directory with a `class/` subdirectory). Collector durations are
//! the only values that vary between runs: they are replaced by 0 before comparing; the build's
//! git revision and features (`rdma_exporter_build_info`) by `@REVISION@` and `@FEATURES@`,
//! checked on their own by `version_and_build_info_name_the_build`. To accept a change,
//! regenerate with `UPDATE_GOLDEN=1 cargo test -p rdmad --test e2e` (the test writes the
//! files and then fails; it refuses to when `CI` is set), review the diff and run again. The
//! promtool and Prometheus tests fail (they do not skip) when `CI` is set and the
//! tool is missing.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

mod common;

use common::{rdmad, spawn_listening, tool_on_path, workspace};

fn run(cmd: &mut Command) -> Output {
    cmd.output().expect("rdmad runs")
}

fn stdout(out: &Output) -> String {
    String::from_utf8(out.stdout.clone()).expect("utf-8 exposition")
}

/// Every fixture tree: (name, root).
fn fixtures() -> Vec<(String, PathBuf)> {
    let dir = workspace().join("tests/fixtures/sysfs");
    let mut trees: Vec<(String, PathBuf)> = std::fs::read_dir(&dir)
        .expect("tests/fixtures/sysfs exists")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("class").is_dir())
        .map(|p| (p.file_name().unwrap().to_string_lossy().into_owned(), p))
        .collect();
    trees.sort();
    trees
}

fn golden_dir() -> PathBuf {
    workspace().join("tests/fixtures/golden")
}

/// Replace the label `name`'s value in a sample line with `with`.
fn replace_label(line: &str, name: &str, with: &str) -> String {
    let key = format!("{name}=\"");
    match line.find(&key) {
        Some(start) => {
            let value = start + key.len();
            let end = value + line[value..].find('"').expect("a closing quote");
            format!("{}{with}{}", &line[..value], &line[end..])
        }
        None => line.to_string(),
    }
}

/// Replace the values that change from run to run (collector durations) with 0, and those
/// that change from build to build (revision, features) with placeholders.
fn normalize(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        if line.starts_with("rdma_exporter_build_info{") {
            let line = replace_label(line, "revision", "@REVISION@");
            out.push_str(&replace_label(&line, "features", "@FEATURES@"));
        } else if line.starts_with("rdma_scrape_collector_duration_seconds{") {
            let (series, _) = line.rsplit_once(' ').expect("a sample line has a value");
            out.push_str(series);
            out.push_str(" 0");
        } else {
            out.push_str(line);
        }
        out.push('\n');
    }
    out
}

fn once(root: &Path, extra: &[&str]) -> String {
    let out = run(rdmad()
        .arg("--once")
        .arg("--path.sysfs")
        .arg(root)
        .args(extra));
    assert!(
        out.status.success(),
        "rdmad --once failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout(&out)
}

/// The goldens cover the collectors that read the fixture trees; netlink would read the host.
const SYSFS_ONLY: &[&str] = &[
    "--collector.disable-defaults",
    "--collector.sysfs_info",
    "--collector.sysfs_counters",
];

#[test]
fn golden_expositions() {
    let trees = fixtures();
    assert!(
        trees.len() >= 5,
        "expected the fixture trees, found {trees:?}"
    );
    let update = std::env::var_os("UPDATE_GOLDEN").is_some();
    // A rewrite is never a pass: refused under CI, and outside CI the files are written and
    // the test fails, so the new goldens are reviewed (git diff) and checked by a clean run.
    assert!(
        !update || std::env::var_os("CI").is_none(),
        "UPDATE_GOLDEN is set under CI: golden files are rewritten by hand, never by CI"
    );
    let mut rewritten = Vec::new();
    std::fs::create_dir_all(golden_dir()).unwrap();
    let mut failures = Vec::new();
    for (name, root) in &trees {
        // Trees with captured ethtool answers (tests/fixtures/sysfs/build_roce_fixtures.py)
        // also cover the netdev collector, reading the captures instead of this machine.
        let capture = root.join("ethtool");
        let mut args: Vec<&str> = SYSFS_ONLY.to_vec();
        let capture_arg = capture.to_string_lossy().into_owned();
        if capture.is_dir() {
            args.extend(["--collector.netdev", "--path.ethtool-capture", &capture_arg]);
        }
        let got = normalize(&once(root, &args));
        // promtool does not catch duplicate series; check here.
        let mut seen = std::collections::HashSet::new();
        for line in got.lines().filter(|l| !l.starts_with('#')) {
            let series = line.rsplit_once(' ').map_or(line, |(s, _)| s);
            assert!(
                seen.insert(series.to_string()),
                "{name}: duplicate series {series}"
            );
        }
        let path = golden_dir().join(format!("{name}.prom"));
        if update {
            std::fs::write(&path, &got).unwrap();
            rewritten.push(path.display().to_string());
            continue;
        }
        let want = std::fs::read_to_string(&path).unwrap_or_default();
        if got != want {
            let line = got
                .lines()
                .zip(want.lines())
                .position(|(a, b)| a != b)
                .unwrap_or_else(|| got.lines().count().min(want.lines().count()));
            failures.push(format!(
                "{name}: exposition differs from {} at line {}:\n  got:  {:?}\n  want: {:?}",
                path.display(),
                line + 1,
                got.lines().nth(line),
                want.lines().nth(line)
            ));
        }
    }
    assert!(
        !update,
        "UPDATE_GOLDEN: rewrote {}; review the diff, then run again without UPDATE_GOLDEN",
        rewritten.join(", ")
    );
    // A golden file without a fixture is stale.
    for entry in std::fs::read_dir(golden_dir()).unwrap().flatten() {
        let file = entry.file_name().to_string_lossy().into_owned();
        if let Some(stem) = file.strip_suffix(".prom") {
            if !trees.iter().any(|(n, _)| n == stem) {
                failures.push(format!("{file}: golden file without a fixture tree"));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{}\n(run UPDATE_GOLDEN=1 cargo test -p rdmad --test e2e to accept, then review the diff)",
        failures.join("\n")
    );
}

/// A Prometheus tool from PATH (CI installs the Debian package `prometheus`, which ships
/// both); see [`tool_on_path`].
fn prometheus_tool(name: &str, test: &str) -> Option<PathBuf> {
    tool_on_path(name, "prometheus", test)
}

#[test]
fn goldens_pass_promtool() {
    let Some(promtool) = prometheus_tool("promtool", "goldens_pass_promtool") else {
        return;
    };
    let mut checked = 0;
    for (name, _) in fixtures() {
        let path = golden_dir().join(format!("{name}.prom"));
        let text = std::fs::read(&path)
            .unwrap_or_else(|e| panic!("{}: {e} (run UPDATE_GOLDEN=1)", path.display()));
        let mut child = Command::new(&promtool)
            .args(["check", "metrics"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("promtool runs");
        child.stdin.take().unwrap().write_all(&text).unwrap();
        let out = child.wait_with_output().unwrap();
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            out.status.success() && said.trim().is_empty(),
            "promtool check metrics {}: {}\n{said}",
            path.display(),
            out.status
        );
        checked += 1;
    }
    assert!(checked >= 5, "only {checked} golden files checked");
}

#[test]
fn every_counter_file_of_every_fixture_is_exported() {
    // Independent of the naming code: count the files, count the counter series.
    for (name, root) in fixtures() {
        let text = once(&root, &[]);
        let errors: u64 = text
            .lines()
            .filter(|l| l.starts_with("rdma_sysfs_read_errors{collector=\"sysfs_counters\""))
            .map(|l| l.rsplit_once(' ').unwrap().1.parse::<u64>().unwrap())
            .sum();
        let series = text
            .lines()
            .filter(|l| {
                (l.starts_with("rdma_port_") || l.starts_with("rdma_device_hw_"))
                    && (l.contains("_total{") || l.contains("_hw_"))
            })
            .count() as u64;
        let mut files = 0u64;
        let class = root.join("class/infiniband");
        for dev in std::fs::read_dir(&class).unwrap().flatten() {
            let dev = dev.path();
            let mut dirs = vec![dev.join("hw_counters")];
            if let Ok(ports) = std::fs::read_dir(dev.join("ports")) {
                for port in ports.flatten() {
                    dirs.push(port.path().join("counters"));
                    dirs.push(port.path().join("hw_counters"));
                }
            }
            for dir in dirs {
                if let Ok(entries) = std::fs::read_dir(dir) {
                    files += entries.count() as u64;
                }
            }
        }
        assert_eq!(
            series + errors,
            files,
            "{name}: {series} counter series + {errors} read errors != {files} counter files"
        );
    }
}

#[test]
fn a_failing_collector_does_not_fail_the_scrape() {
    let dir = tempdir("failing");
    std::fs::create_dir_all(dir.join("class")).unwrap();
    // class/infiniband is a file: listing devices fails with ENOTDIR.
    std::fs::write(dir.join("class/infiniband"), "not a directory\n").unwrap();
    let text = once(&dir, &[]);
    assert!(text.contains("rdma_scrape_collector_success{collector=\"sysfs_info\"} 0\n"));
    assert!(text.contains("rdma_scrape_collector_success{collector=\"sysfs_counters\"} 0\n"));
    assert!(text.contains("rdma_exporter_build_info{"));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The features this test binary was compiled with are rdmad's (cargo enables the package's
/// features for its integration tests).
fn expected_features() -> &'static str {
    match (cfg!(feature = "bpf"), cfg!(feature = "verbs")) {
        (true, true) => "bpf,verbs",
        (true, false) => "bpf",
        (false, true) => "verbs",
        (false, false) => "none",
    }
}

/// The commit of this checkout, or "unknown" outside git (a release tarball): a failure
/// under CI, which always runs in a clone.
fn expected_revision() -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(workspace())
        .args(["rev-parse", "HEAD"])
        .output();
    match out {
        Ok(out) if out.status.success() => {
            String::from_utf8(out.stdout).unwrap().trim().to_string()
        }
        _ => {
            assert!(
                std::env::var_os("CI").is_none(),
                "CI is set but the workspace is not a git checkout"
            );
            "unknown".to_string()
        }
    }
}

#[test]
fn version_and_build_info_name_the_build() {
    let (revision, features) = (expected_revision(), expected_features());
    let out = run(rdmad().arg("--version"));
    assert!(out.status.success());
    assert_eq!(
        stdout(&out),
        format!(
            "rdmad {} (revision {revision}, features {features})\n",
            env!("CARGO_PKG_VERSION")
        )
    );
    let dir = tempdir("build-info");
    std::fs::create_dir_all(dir.join("class/infiniband")).unwrap();
    let text = once(&dir, SYSFS_ONLY);
    std::fs::remove_dir_all(&dir).unwrap();
    let want = format!(
        "rdma_exporter_build_info{{version=\"{}\",revision=\"{revision}\",features=\"{features}\"}} 1\n",
        env!("CARGO_PKG_VERSION")
    );
    assert!(text.contains(&want), "no {want:?} in\n{text}");
}

/// Without the `bpf` feature `--collector.trace` is not a startup failure: the reason is
/// logged once, at startup, and the collector reports success 0 (no warning per scrape).
#[cfg(not(feature = "bpf"))]
#[test]
fn trace_collector_without_bpf_reports_failure_once_and_serves() {
    let dir = tempdir("trace");
    let out = run(rdmad()
        .args(["--once", "--collector.trace", "--path.sysfs"])
        .arg(&dir)
        .env("RDMAD_LOG", "info"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "rdmad --once failed: {stderr}");
    let text = stdout(&out);
    assert!(
        text.contains("rdma_scrape_collector_success{collector=\"trace\"} 0\n"),
        "{text}"
    );
    assert!(text.contains("rdma_scrape_collector_success{collector=\"sysfs_counters\"} 1\n"));
    assert!(!text.contains("rdma_trace_"), "{text}");
    assert_eq!(
        stderr.matches("built without BPF support").count(),
        1,
        "the reason once: {stderr}"
    );
    assert!(!stderr.contains("collector failed"), "{stderr}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn no_devices_is_not_an_error() {
    let dir = tempdir("empty");
    let text = once(&dir, &[]);
    assert!(text.contains("rdma_scrape_collector_success{collector=\"sysfs_counters\"} 1\n"));
    assert!(!text.contains("rdma_device_info"));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A fresh directory under the system temp dir.
fn tempdir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "rdmad-e2e-{tag}-{}-{:?}",
        std::process::id(),
        Instant::now()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn excluded_devices_are_never_opened() {
    // bad0's only counter is a FIFO: opening it would block forever. With bad0 excluded the
    // scrape must finish, proving the filter runs before any counter file is opened.
    let dir = tempdir("filter");
    let good = dir.join("class/infiniband/good0/ports/1/hw_counters");
    let bad = dir.join("class/infiniband/bad0/ports/1/hw_counters");
    std::fs::create_dir_all(&good).unwrap();
    std::fs::create_dir_all(&bad).unwrap();
    std::fs::write(good.join("sent_pkts"), "5\n").unwrap();
    let status = Command::new("mkfifo")
        .arg(bad.join("sent_pkts"))
        .status()
        .expect("mkfifo runs");
    assert!(status.success());
    let mut child = rdmad()
        .arg("--once")
        .arg("--path.sysfs")
        .arg(&dir)
        .arg("--collector.device-exclude=bad.*")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("rdmad hung: the excluded device's FIFO was opened");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut text = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut text)
        .unwrap();
    assert!(
        text.contains("rdma_port_hw_sent_pkts_total{device=\"good0\",port=\"1\"} 5\n"),
        "{text}"
    );
    assert!(!text.contains("bad0"), "{text}");
    let include = once(&dir, &["--collector.device-include", "good0"]);
    assert!(!include.contains("bad0"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn env_vars_set_flags() {
    let root = workspace().join("tests/fixtures/sysfs/rxe");
    let out = run(rdmad()
        .arg("--once")
        .env("RDMAD_PATH_SYSFS", &root)
        .env("RDMAD_COLLECTOR_SYSFS_COUNTERS", "false"));
    assert!(out.status.success());
    let text = stdout(&out);
    assert!(text.contains("rdma_port_info{device=\"rxe0\""), "{text}");
    assert!(!text.contains("rdma_port_hw_sent_pkts_total"));
    assert!(!text.contains("collector=\"sysfs_counters\""));
}

#[test]
fn example_config_loads_and_runs() {
    let example = workspace().join("deploy/rdmad.toml");
    let config = rdmad::config::load(&example).expect("deploy/rdmad.toml is valid");
    assert!(
        config.get("web.listen-address").is_some(),
        "the example sets the listen address"
    );
    let root = workspace().join("tests/fixtures/sysfs/mlx5-roce");
    let text = once(&root, &["--config", example.to_str().unwrap()]);
    assert!(text.contains("rdma_scrape_collector_success{collector=\"sysfs_counters\"} 1\n"));
}

#[test]
fn config_errors_name_the_key_and_exit_1() {
    let dir = tempdir("config");
    let file = dir.join("rdmad.toml");
    std::fs::write(&file, "[collector]\nsysfs_infos = true\n").unwrap();
    let out = run(rdmad().arg("--once").arg("--config").arg(&file));
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("unknown key `collector.sysfs_infos`"), "{err}");
    assert!(err.contains(file.to_str().unwrap()), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn usage_errors_exit_2_and_bad_patterns_exit_1() {
    let out = run(rdmad().arg("--collector.nonexistent"));
    assert_eq!(out.status.code(), Some(2));
    let out = run(rdmad().args(["--once", "--collector.device-include", "mlx5_("]));
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("device-include"));
}

/// Without the `verbs` feature `--probe.enable` is refused at startup (exit 1), with the
/// remedy; a secret file's content never appears in an error.
#[cfg(not(feature = "verbs"))]
#[test]
fn probe_enable_without_verbs_exits_1() {
    let out = run(rdmad().args(["--once", "--probe.enable"]));
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("built without verbs support; cargo build-rdma"),
        "{err}"
    );
    let out = run(rdmad().arg("--once").env("RDMAD_PROBE_ENABLE", "true"));
    assert_eq!(
        out.status.code(),
        Some(1),
        "the env variable enables it too"
    );
    // Off (the default): no probe series, and the exposition is unchanged.
    let root = workspace().join("tests/fixtures/sysfs/mlx5-roce");
    let text = once(&root, &[]);
    assert!(!text.contains("rdma_probe_"));
    assert!(!text.contains("collector=\"probes\""));
}

/// A peer or listener without a secret file is a bad setting (exit 1), before anything starts.
#[test]
fn probe_peer_without_secret_exits_1() {
    let out = run(rdmad().args(["--once", "--probe.enable", "--probe.peer", "10.0.0.2:9737"]));
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--probe.secret-file"), "{err}");
}

#[test]
fn help_lists_generated_collector_flags() {
    let out = run(rdmad().arg("--help"));
    assert!(out.status.success());
    let help = stdout(&out);
    for flag in [
        "--web.listen-address",
        "--path.sysfs",
        "--config",
        "--collector.device-include",
        "--collector.device-exclude",
        "--collector.sysfs_info",
        "--no-collector.sysfs_info",
        "--collector.sysfs_counters",
        "--no-collector.sysfs_counters",
        "RDMAD_COLLECTOR_SYSFS_COUNTERS",
    ] {
        assert!(help.contains(flag), "--help lacks {flag}:\n{help}");
    }
}

/// A running rdmad on a free loopback port; killed on drop.
struct Server {
    child: Child,
    address: String,
}

impl Server {
    fn start(root: &Path) -> Server {
        let (child, address) = spawn_listening(
            rdmad()
                .arg("--web.listen-address=127.0.0.1:0")
                .arg("--path.sysfs")
                .arg(root),
        );
        Server { child, address }
    }

    /// (status line, headers, body) of a GET.
    fn get(&self, path: &str, accept: Option<&str>) -> (String, String, String) {
        let mut stream = TcpStream::connect(&self.address).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        let accept = accept
            .map(|a| format!("Accept: {a}\r\n"))
            .unwrap_or_default();
        write!(
            stream,
            "GET {path} HTTP/1.1\r\nHost: test\r\n{accept}Connection: close\r\n\r\n"
        )
        .unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).unwrap();
        let (head, body) = response.split_once("\r\n\r\n").expect("HTTP response");
        let (status, headers) = head.split_once("\r\n").unwrap_or((head, ""));
        (
            status.to_string(),
            headers.to_ascii_lowercase(),
            body.to_string(),
        )
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn http_endpoints_and_content_negotiation() {
    let server = Server::start(&workspace().join("tests/fixtures/sysfs/mlx5-ib"));

    let (status, headers, body) = server.get("/metrics", None);
    assert!(status.contains("200"), "{status}");
    assert!(
        headers.contains("content-type: text/plain; version=0.0.4; charset=utf-8"),
        "{headers}"
    );
    assert!(!body.contains("# EOF"));
    assert!(
        body.contains("# TYPE rdma_port_xmit_data_bytes_total counter\n"),
        "{body}"
    );

    let prometheus_accept = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
    let (status, headers, body) = server.get("/metrics", Some(prometheus_accept));
    assert!(status.contains("200"));
    assert!(
        headers
            .contains("content-type: application/openmetrics-text; version=1.0.0; charset=utf-8"),
        "{headers}"
    );
    assert!(body.ends_with("# EOF\n"), "{body}");
    assert!(body.contains("# TYPE rdma_port_xmit_data_bytes counter\n"));
    assert!(body.contains("rdma_port_xmit_data_bytes_total{device=\"mlx5_0\",port=\"1\"}"));

    let (status, _, body) = server.get("/healthz", None);
    assert!(status.contains("200"));
    assert_eq!(body, "ok\n");

    let (status, _, body) = server.get("/", None);
    assert!(status.contains("200"));
    assert!(body.contains("href=\"/metrics\""));
    assert!(body.contains("sysfs_counters"));

    let (status, _, _) = server.get("/nope", None);
    assert!(status.contains("404"), "{status}");
}

/// (status line, headers in lower case, body de-chunked) of a GET to `address` with extra
/// request headers; the body as bytes (it may be compressed).
fn get_bytes(address: &str, path: &str, headers: &[(&str, &str)]) -> (String, String, Vec<u8>) {
    let mut stream = TcpStream::connect(address).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let extra: String = headers
        .iter()
        .map(|(k, v)| format!("{k}: {v}\r\n"))
        .collect();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: test\r\n{extra}Connection: close\r\n\r\n"
    )
    .unwrap();
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).unwrap();
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("an HTTP response");
    let head = String::from_utf8(raw[..end].to_vec()).unwrap();
    let (status, headers) = head.split_once("\r\n").unwrap_or((&head, ""));
    let headers = headers.to_ascii_lowercase();
    let mut body = &raw[end + 4..];
    if !headers.contains("transfer-encoding: chunked") {
        return (status.to_string(), headers, body.to_vec());
    }
    let mut out = Vec::new();
    loop {
        let eol = body
            .windows(2)
            .position(|w| w == b"\r\n")
            .expect("chunk size line");
        let size = std::str::from_utf8(&body[..eol]).unwrap();
        let size = usize::from_str_radix(size.split(';').next().unwrap().trim(), 16).unwrap();
        body = &body[eol + 2..];
        if size == 0 {
            break;
        }
        out.extend_from_slice(&body[..size]);
        body = &body[size + 2..];
    }
    (status.to_string(), headers, out)
}

/// An exposition without its `rdma_exporter_metrics_responses_total` samples (they count the
/// responses before it, so two scrapes never have the same).
fn without_responses(text: &str) -> String {
    text.lines()
        .filter(|l| !l.starts_with("rdma_exporter_metrics_responses_total{"))
        .map(|l| format!("{l}\n"))
        .collect()
}

/// The decoded body of a response with `content-encoding` `encoding`.
fn decode(encoding: &str, body: &[u8]) -> String {
    let mut text = String::new();
    match encoding {
        "gzip" => {
            flate2::read::GzDecoder::new(body)
                .read_to_string(&mut text)
                .expect("valid gzip");
        }
        "zstd" => text = String::from_utf8(zstd::decode_all(body).expect("valid zstd")).unwrap(),
        other => panic!("unexpected encoding {other}"),
    }
    text
}

/// The `content-encoding` of a response's headers (lower case), `None` when absent.
fn content_encoding(headers: &str) -> Option<&str> {
    headers
        .lines()
        .find_map(|l| l.strip_prefix("content-encoding: "))
        .map(str::trim)
}

#[test]
fn responses_are_compressed_as_accept_encoding_asks() {
    let root = workspace().join("tests/fixtures/sysfs/mlx5-roce");
    let (child, address) = spawn_listening(
        rdmad()
            .arg("--web.listen-address=127.0.0.1:0")
            .arg("--path.sysfs")
            .arg(&root)
            .args(SYSFS_ONLY),
    );
    let _server = KillOnDrop(child);
    let get = |accept_encoding: Option<&str>| {
        let headers: Vec<(&str, &str)> = accept_encoding
            .map(|v| ("Accept-Encoding", v))
            .into_iter()
            .collect();
        get_bytes(&address, "/metrics", &headers)
    };
    let (status, headers, plain) = get(None);
    assert!(status.contains("200"), "{status}");
    assert_eq!(content_encoding(&headers), None, "{headers}");
    assert!(headers.contains("vary: accept-encoding"), "{headers}");
    let plain = String::from_utf8(plain).unwrap();
    assert!(
        plain.contains("rdma_port_xmit_data_bytes_total{"),
        "{plain}"
    );

    // (Accept-Encoding, the encoding chosen): q-values decide, unknown codings are ignored,
    // identity is the fallback (the cases of rdmad::encoding's unit test, end to end).
    for (accept, want) in [
        ("gzip", Some("gzip")),
        ("x-gzip", Some("gzip")),
        ("GZIP;q=0.8", Some("gzip")),
        ("zstd", Some("zstd")),
        ("gzip;q=0.5, zstd;q=0.9", Some("zstd")),
        ("zstd;q=0.4, gzip", Some("gzip")),
        ("zstd;q=0, gzip;q=0.1", Some("gzip")),
        ("br, deflate", None),
        ("gzip;q=0", None),
        ("identity", None),
        ("identity, gzip;q=0.5", None),
        ("*;q=0.5, zstd;q=0", Some("gzip")),
        ("", None),
    ] {
        let (status, headers, body) = get(Some(accept));
        assert!(status.contains("200"), "{accept:?}: {status}");
        assert_eq!(content_encoding(&headers), want, "{accept:?}: {headers}");
        assert!(
            headers.contains("vary: accept-encoding"),
            "{accept:?}: {headers}"
        );
        let text = match want {
            Some(encoding) => {
                // Compressed whole, so its length is known and sent.
                let length = format!("content-length: {}", body.len());
                assert!(
                    headers.contains(&length),
                    "{accept:?}: want {length:?} in {headers}"
                );
                assert!(
                    body.len() * 4 < plain.len(),
                    "{accept:?}: {} compressed bytes for {} plain",
                    body.len(),
                    plain.len()
                );
                decode(encoding, &body)
            }
            None => String::from_utf8(body).unwrap(),
        };
        assert_eq!(
            normalize(&without_responses(&text)),
            normalize(&without_responses(&plain)),
            "{accept:?}"
        );
    }
    // Every /metrics response so far is counted by its encoding: 1 + 5 identity, 6 gzip, 2
    // zstd (this response is counted after it is sent).
    let (_, _, counted) = get(None);
    let counted = String::from_utf8(counted).unwrap();
    for (encoding, n) in [("gzip", 6), ("zstd", 2), ("identity", 6)] {
        let line =
            format!("rdma_exporter_metrics_responses_total{{encoding=\"{encoding}\"}} {n}\n");
        assert!(counted.contains(&line), "want {line:?} in\n{counted}");
    }
    // Nothing acceptable (identity refused too): 406, as RFC 9110 says.
    let (status, headers, _) = get(Some("identity;q=0"));
    assert!(status.contains("406"), "{status}");
    assert!(headers.contains("vary: accept-encoding"), "{headers}");

    // OpenMetrics the way Prometheus asks for it, gzip as Prometheus always sends.
    let prometheus_accept =
        "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
    let (status, headers, body) = get_bytes(
        &address,
        "/metrics",
        &[("Accept", prometheus_accept), ("Accept-Encoding", "gzip")],
    );
    assert!(status.contains("200"), "{status}");
    assert!(
        headers.contains("content-type: application/openmetrics-text"),
        "{headers}"
    );
    assert_eq!(content_encoding(&headers), Some("gzip"));
    let om = decode("gzip", &body);
    assert!(om.ends_with("# EOF\n"), "{om}");
    let (_, _, plain_om) = get_bytes(&address, "/metrics", &[("Accept", prometheus_accept)]);
    assert_eq!(
        normalize(&without_responses(&om)),
        normalize(&without_responses(&String::from_utf8(plain_om).unwrap()))
    );

    // Tiny responses are not worth it; the index page is.
    let (_, headers, body) = get_bytes(&address, "/healthz", &[("Accept-Encoding", "gzip")]);
    assert_eq!(content_encoding(&headers), None, "{headers}");
    assert_eq!(body, b"ok\n");
    let (_, headers, body) = get_bytes(&address, "/", &[("Accept-Encoding", "gzip")]);
    assert_eq!(content_encoding(&headers), Some("gzip"));
    assert!(decode("gzip", &body).contains("href=\"/metrics\""));
}

#[test]
fn gzip_level_trades_cpu_for_bytes() {
    let root = workspace().join("tests/fixtures/sysfs/mlx5-roce");
    let mut bodies = Vec::new();
    for level in ["1", "12"] {
        let (child, address) = spawn_listening(
            rdmad()
                .arg("--web.listen-address=127.0.0.1:0")
                .arg("--path.sysfs")
                .arg(&root)
                .args(SYSFS_ONLY)
                .env("RDMAD_WEB_GZIP_LEVEL", level),
        );
        let _server = KillOnDrop(child);
        let (status, headers, body) =
            get_bytes(&address, "/metrics", &[("Accept-Encoding", "gzip")]);
        assert!(status.contains("200"), "level {level}: {status}");
        assert_eq!(content_encoding(&headers), Some("gzip"), "level {level}");
        bodies.push(body);
    }
    let (fast, small) = (&bodies[0], &bodies[1]);
    assert!(
        small.len() < fast.len(),
        "level 12 sent {} bytes, level 1 {}",
        small.len(),
        fast.len()
    );
    assert_eq!(
        normalize(&decode("gzip", small)),
        normalize(&decode("gzip", fast))
    );
}

#[test]
fn disable_compression_sends_identity() {
    let root = workspace().join("tests/fixtures/sysfs/mlx5-roce");
    for how in ["flag", "env"] {
        let mut cmd = rdmad();
        cmd.arg("--web.listen-address=127.0.0.1:0")
            .arg("--path.sysfs")
            .arg(&root)
            .args(SYSFS_ONLY);
        if how == "flag" {
            cmd.arg("--web.disable-compression");
        } else {
            cmd.env("RDMAD_WEB_DISABLE_COMPRESSION", "true");
        }
        let (child, address) = spawn_listening(&mut cmd);
        let _server = KillOnDrop(child);
        let (status, headers, body) =
            get_bytes(&address, "/metrics", &[("Accept-Encoding", "gzip, zstd")]);
        assert!(status.contains("200"), "{how}: {status}");
        assert_eq!(content_encoding(&headers), None, "{how}: {headers}");
        let text = String::from_utf8(body).expect("plain text");
        assert!(text.contains("rdma_port_xmit_data_bytes_total{"), "{how}");
        // The scrape after it shows that one response, identity.
        let (_, _, body) = get_bytes(&address, "/metrics", &[("Accept-Encoding", "gzip")]);
        let text = String::from_utf8(body).expect("plain text");
        for (encoding, n) in [("gzip", 0), ("zstd", 0), ("identity", 1)] {
            let line =
                format!("rdma_exporter_metrics_responses_total{{encoding=\"{encoding}\"}} {n}\n");
            assert!(text.contains(&line), "{how}: want {line:?} in\n{text}");
        }
    }
}

/// The flags of a deployment file must be flags rdmad accepts.
fn assert_flags_parse(source: &str, args: &[String]) {
    let mut argv = vec!["rdmad".to_string()];
    argv.extend(args.iter().cloned());
    if let Err(e) = rdmad::cli::command().try_get_matches_from(&argv) {
        panic!("{source}: rdmad rejects {args:?}: {e}");
    }
}

#[test]
fn systemd_unit_is_hardened_and_its_flags_are_valid() {
    let unit = std::fs::read_to_string(workspace().join("deploy/systemd/rdmad.service")).unwrap();
    let settings: Vec<&str> = unit
        .lines()
        .map(str::trim)
        .filter(|l| !l.starts_with('#') && l.contains('='))
        .collect();
    for required in [
        "DynamicUser=yes",
        "CapabilityBoundingSet=",
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
    ] {
        assert!(
            settings.contains(&required),
            "rdmad.service lacks {required}"
        );
    }
    assert!(
        !settings.iter().any(|l| l.contains("CAP_")),
        "rdmad.service grants a capability"
    );
    let exec = settings
        .iter()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .expect("ExecStart");
    let args: Vec<String> = exec.split_whitespace().skip(1).map(String::from).collect();
    assert!(args.iter().any(|a| a == "--config"), "{exec}");
    assert_flags_parse("rdmad.service", &args);
}

/// A string field of a YAML mapping.
fn yaml_str<'a>(v: &'a serde_yaml_ng::Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(|x| x.as_str())
}

/// The Kubernetes manifests, as rendered by `kubectl kustomize` for the base and each
/// component: the golden renders in tests/kubernetes/golden (tests/kubernetes-check keeps them
/// equal to the real renders). In each, the DaemonSet's args and environment and the
/// ConfigMap's rdmad.toml must be settings rdmad accepts, as a whole (so a component that needs
/// another, like pingmesh the probes' secret, fails here when rendered alone).
#[test]
fn kubernetes_manifests_match_the_binary() {
    use serde::Deserialize;
    use serde_yaml_ng::Value;
    let dir = workspace().join("tests/kubernetes/golden");
    let mut renders: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("tests/kubernetes/golden exists")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    renders.sort();
    assert!(renders.len() >= 5, "golden renders: {renders:?}");
    let command = rdmad::cli::command();
    let tmp = tempdir("kubernetes");
    std::fs::create_dir_all(&tmp).unwrap();
    for path in &renders {
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        let text = std::fs::read_to_string(path).unwrap();
        let docs: Vec<Value> = serde_yaml_ng::Deserializer::from_str(&text)
            .map(|d| Value::deserialize(d).expect("a YAML document"))
            .collect();
        let kind = |k: &'static str| docs.iter().filter(move |d| yaml_str(d, "kind") == Some(k));
        let config_map = |n: &str| {
            kind("ConfigMap")
                .find(|d| yaml_str(&d["metadata"], "name") == Some(n))
                .unwrap_or_else(|| panic!("{name}: no ConfigMap {n}"))
        };
        let toml = yaml_str(&config_map("rdmad-config")["data"], "rdmad.toml").expect("rdmad.toml");
        let config = tmp.join(format!("{name}.toml"));
        std::fs::write(&config, toml).unwrap();
        let ds: Vec<&Value> = kind("DaemonSet").collect();
        assert_eq!(ds.len(), 1, "{name}: one DaemonSet");
        let container = &ds[0]["spec"]["template"]["spec"]["containers"][0];
        let mut argv = vec!["rdmad".to_string()];
        for arg in container["args"].as_sequence().expect("args") {
            let arg = arg.as_str().expect("a string arg");
            match arg.strip_prefix("--config=") {
                Some(file) => {
                    assert_eq!(
                        file, "/etc/rdmad/rdmad.toml",
                        "{name}: the ConfigMap's mount"
                    );
                    argv.push(format!("--config={}", config.display()));
                }
                None => argv.push(arg.to_string()),
            }
        }
        // Each environment variable as the flag it stands for, with its value (from the
        // ConfigMap it references): an unknown RDMAD_* name fails.
        for env in container["env"].as_sequence().into_iter().flatten() {
            let var = yaml_str(env, "name").expect("env name");
            let value = match yaml_str(env, "value") {
                Some(v) => v.to_string(),
                None => {
                    let r = &env["valueFrom"]["configMapKeyRef"];
                    let cm = config_map(yaml_str(r, "name").expect("configMapKeyRef.name"));
                    yaml_str(&cm["data"], yaml_str(r, "key").expect("key"))
                        .unwrap_or_else(|| panic!("{name}: {var}: no such key"))
                        .to_string()
                }
            };
            let flag = command
                .get_arguments()
                .find(|a| a.get_env().is_some_and(|e| e == var))
                .and_then(|a| a.get_long())
                .unwrap_or_else(|| panic!("{name}: rdmad reads no environment variable {var}"));
            if !value.is_empty() {
                argv.push(format!("--{flag}={value}"));
            }
        }
        let settings = match rdmad::cli::parse_from(&argv) {
            Ok(s) => s,
            Err(e) => panic!("{name}: rdmad rejects {argv:?}: {e:?}"),
        };
        assert_eq!(settings.sysfs, PathBuf::from("/host/sys"), "{name}");
        assert_eq!(settings.listen_address, ":9736", "{name}");
        let port = &container["ports"][0];
        assert_eq!(
            (yaml_str(port, "name"), port["containerPort"].as_u64()),
            (Some("metrics"), Some(9736)),
            "{name}"
        );
        assert_eq!(
            settings.collectors.contains(&"trace"),
            argv.iter().any(|a| a == "--collector.trace"),
            "{name}"
        );
        assert_eq!(
            settings.probe.enable,
            argv.iter().any(|a| a == "--probe.enable"),
            "{name}"
        );
        assert!(!text.contains("NET_ADMIN"), "{name}: NET_ADMIN");
    }
    std::fs::remove_dir_all(&tmp).unwrap();
}

/// A free loopback port (a race with other processes is possible but harmless here).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Kills a child process on drop.
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// GET a body from 127.0.0.1:port.
fn http_get(port: u16, path: &str) -> Option<String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .ok()?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    Some(response.split_once("\r\n\r\n")?.1.to_string())
}

/// The value of the first result of a Prometheus instant query, as Prometheus prints it.
fn query(prometheus: u16, expr: &str) -> Option<String> {
    let encoded: String = expr
        .bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect();
    let body = http_get(prometheus, &format!("/api/v1/query?query={encoded}"))?;
    // The body may be chunked; the value is the string after the timestamp in "value":[t,"v"].
    let value = body.split("\"value\":[").nth(1)?;
    let value = value.split(',').nth(1)?;
    Some(value.split('"').nth(1)?.to_string())
}

#[test]
fn prometheus_scrapes_rdmad() {
    // The real Prometheus (it negotiates OpenMetrics) scraping rdmad over a fixture tree.
    let Some(prometheus) = prometheus_tool("prometheus", "prometheus_scrapes_rdmad") else {
        return;
    };
    let root = workspace().join("tests/fixtures/sysfs/mlx5-roce");
    let exposition = once(&root, &[]);
    let samples = exposition
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .count();
    let rdmad_port = free_port();
    let _rdmad = KillOnDrop(
        rdmad()
            .arg(format!("--web.listen-address=127.0.0.1:{rdmad_port}"))
            .arg("--path.sysfs")
            .arg(&root)
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let dir = tempdir("prometheus");
    std::fs::write(
        dir.join("prometheus.yml"),
        format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n\
             scrape_configs:\n  - job_name: rdmad\n    static_configs:\n      - targets: ['127.0.0.1:{rdmad_port}']\n"
        ),
    )
    .unwrap();
    let prom_port = free_port();
    let _prometheus = KillOnDrop(
        Command::new(prometheus)
            .arg(format!(
                "--config.file={}",
                dir.join("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{prom_port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    let up = loop {
        if let Some(up) = query(prom_port, "up{job=\"rdmad\"}") {
            if up == "1" || Instant::now() > deadline {
                break up;
            }
        }
        assert!(
            Instant::now() < deadline,
            "Prometheus never answered a query"
        );
        std::thread::sleep(Duration::from_millis(250));
    };
    assert_eq!(up, "1", "Prometheus could not scrape rdmad");
    // Served, rdmad also exports its responses by encoding (gzip, zstd, identity): 3 more.
    assert_eq!(
        query(prom_port, "scrape_samples_scraped{job=\"rdmad\"}").as_deref(),
        Some((samples + 3).to_string().as_str()),
        "Prometheus ingested a different number of samples than rdmad exposes"
    );
    let want = exposition
        .lines()
        .find(|l| l.starts_with("rdma_port_xmit_data_bytes_total{device=\"mlx5_0\""))
        .and_then(|l| l.rsplit_once(' '))
        .map(|(_, v)| v.to_string())
        .expect("the fixture has xmit data");
    assert_eq!(
        query(
            prom_port,
            "rdma_port_xmit_data_bytes_total{device=\"mlx5_0\"}"
        )
        .as_deref(),
        Some(want.as_str())
    );
    assert_eq!(
        query(
            prom_port,
            "rdma_port_info{device=\"mlx5_0\",netdev=\"ens1f0np0\"}"
        )
        .as_deref(),
        Some("1")
    );
    // Prometheus asks for gzip and gets it: its scrapes are counted as gzip (from the
    // second scrape on, which shows the first), none as identity or zstd.
    let gzip = loop {
        let gzip = query(
            prom_port,
            "rdma_exporter_metrics_responses_total{encoding=\"gzip\"}",
        );
        if gzip.as_deref().is_some_and(|v| v != "0") || Instant::now() > deadline {
            break gzip;
        }
        std::thread::sleep(Duration::from_millis(250));
    };
    assert!(
        gzip.as_deref()
            .and_then(|v| v.parse::<u64>().ok())
            .is_some_and(|n| n >= 1),
        "no gzip response counted while Prometheus scraped: {gzip:?}"
    );
    for other in ["identity", "zstd"] {
        assert_eq!(
            query(
                prom_port,
                &format!("rdma_exporter_metrics_responses_total{{encoding=\"{other}\"}}")
            )
            .as_deref(),
            Some("0"),
            "a scrape of Prometheus' was answered {other}"
        );
    }
    drop(_prometheus);
    let _ = std::fs::remove_dir_all(&dir);
}
