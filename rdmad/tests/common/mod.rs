//! Helpers shared by rdmad's integration tests (`tests/e2e.rs`, `tests/flags.rs`,
//! `tests/http.rs`, `tests/deploy.rs`, `tests/prometheus.rs`, `tests/web_config.rs`).
// Each test file compiles this module on its own and uses a part of it.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Instant;

/// The workspace root.
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("rdmad is inside the workspace")
        .to_path_buf()
}

/// The rdmad binary under test, with no `RDMAD_*` variable inherited: settings must come from
/// the test alone.
pub fn rdmad() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rdmad"));
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("RDMAD_") {
            cmd.env_remove(key);
        }
    }
    cmd
}

/// The program `name` from PATH. Missing: `None` (the caller skips, saying so), or a failure
/// when `CI` is set, because CI installs the Debian `package` that ships it.
pub fn tool_on_path(name: &str, package: &str, test: &str) -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join(name))
            .find(|p| p.is_file())
    });
    if found.is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "{name} is not installed but CI is set: install it (Debian package `{package}`)"
        );
        eprintln!("SKIP {test}: {name} not installed (apt-get install {package})");
    }
    found
}

/// Start `cmd` (an [`rdmad`] command listening on a free port, e.g.
/// `--web.listen-address=127.0.0.1:0`) with info logs on stderr, and wait for its
/// "listening" line: the child and the address it names. Fails, with everything rdmad
/// printed, when it exits first. stderr keeps being drained so rdmad never blocks on it.
pub fn spawn_listening(cmd: &mut Command) -> (Child, String) {
    let mut child = cmd
        .env("RDMAD_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("rdmad starts");
    let stderr = child.stderr.take().expect("piped stderr");
    let mut lines = BufReader::new(stderr).lines();
    let mut seen = String::new();
    let address = loop {
        let Some(Ok(line)) = lines.next() else {
            panic!("rdmad exited before listening:\n{seen}");
        };
        seen.push_str(&line);
        seen.push('\n');
        if line.contains("listening") {
            break line
                .split("address=")
                .nth(1)
                .and_then(|rest| rest.split_whitespace().next())
                .expect("the listening line names the address")
                .to_string();
        }
    };
    std::thread::spawn(move || for _ in lines {});
    (child, address)
}

pub fn run(cmd: &mut Command) -> Output {
    cmd.output().expect("rdmad runs")
}

pub fn stdout(out: &Output) -> String {
    String::from_utf8(out.stdout.clone()).expect("utf-8 exposition")
}

/// Replace the label `name`'s value in a sample line with `with`.
pub fn replace_label(line: &str, name: &str, with: &str) -> String {
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
pub fn normalize(text: &str) -> String {
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

pub fn once(root: &Path, extra: &[&str]) -> String {
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
pub const SYSFS_ONLY: &[&str] = &[
    "--collector.disable-defaults",
    "--collector.sysfs_info",
    "--collector.sysfs_counters",
];

/// A Prometheus tool from PATH (CI installs the Debian package `prometheus`, which ships
/// both); see [`tool_on_path`].
pub fn prometheus_tool(name: &str, test: &str) -> Option<PathBuf> {
    tool_on_path(name, "prometheus", test)
}

/// A fresh directory under the system temp dir.
pub fn tempdir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "rdmad-e2e-{tag}-{}-{:?}",
        std::process::id(),
        Instant::now()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Kills a child process on drop.
pub struct KillOnDrop(pub Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
