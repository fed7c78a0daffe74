//! End-to-end tests of the rdmad binary over the fake sysfs trees: golden expositions,
//! promtool on the golden files, every counter file exported, a failing collector, and the
//! build info. The binary's other concerns have their own test files beside this one:
//! `flags.rs` (flags, env, the config file), `http.rs` (endpoints, content negotiation,
//! compression), `deploy.rs` (the deployment files) and `prometheus.rs` (a real Prometheus
//! scraping rdmad); `common/` holds what they share.
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

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

mod common;

use common::{
    normalize, once, prometheus_tool, rdmad, run, stdout, tempdir, workspace, SYSFS_ONLY,
};

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
