//! The live suite runner's pure parts: which test binaries cargo built, which of them a
//! lab runs (the single-VM suite, or the multi-host `multihost*` binaries), the guest script
//! that runs them one after another, and the verdict from libtest's summaries.
//!
//! `rdmactl lab test` builds the suite with cargo and boots the lab; everything it decides
//! about the suite is here.

use std::path::PathBuf;

use crate::vm::shell_quote;

/// Test binaries of the multi-host suite are named `multihost*` (tests/live/tests/).
pub const MULTI_HOST_SUITE: &str = "multihost";

/// One test binary of the live suite, as cargo reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TestBinary {
    /// The test target's name (`smoke`), or `<crate>-unit` for the library's unit tests.
    pub name: String,
    /// The executable cargo built.
    pub path: PathBuf,
}

/// The test executables of `package` in `cargo test --no-run --message-format=json` output
/// (a build of several packages reports every package's), sorted by name with `smoke` first
/// (if it fails, nothing after it means much).
pub fn test_binaries(cargo_json: &str, package: &str) -> Vec<TestBinary> {
    let mut bins = Vec::new();
    for line in cargo_json.lines() {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if v["reason"] != "compiler-artifact" {
            continue;
        }
        if v["package_id"].as_str().and_then(package_name) != Some(package) {
            continue;
        }
        // Integration tests, and the crate's own unit tests (profile.test on the lib).
        if v["profile"]["test"] != true {
            continue;
        }
        if let (Some(exe), Some(name)) = (v["executable"].as_str(), v["target"]["name"].as_str()) {
            let kind = v["target"]["kind"][0].as_str().unwrap_or("test");
            bins.push(TestBinary {
                name: if kind == "lib" {
                    format!("{}-unit", name.replace('-', "_"))
                } else {
                    name.to_string()
                },
                path: PathBuf::from(exe),
            });
        }
    }
    bins.sort_by(|a, b| a.name.cmp(&b.name));
    bins.sort_by_key(|b| b.name != "smoke");
    bins
}

/// The package name in a cargo package ID: `path+file:///w/tests/live#live-tests@0.1.0`, or
/// `path+file:///w/rdmad#0.1.0` when the directory has the package's name (cargo's format
/// since 1.77), or `live-tests 0.1.0 (path+file:///w/tests/live)` (the older one).
fn package_name(id: &str) -> Option<&str> {
    if let Some((url, fragment)) = id.rsplit_once('#') {
        return match fragment.split_once('@') {
            Some((name, _version)) => Some(name),
            None => url.trim_end_matches('/').rsplit('/').next(),
        };
    }
    id.split_once(' ').map(|(name, _)| name)
}

/// The binaries a lab runs: the multi-host suite needs a fabric, the single-VM suite is
/// everything else; `only` keeps names that contain it.
pub fn select(bins: Vec<TestBinary>, multi_host: bool, only: Option<&str>) -> Vec<TestBinary> {
    bins.into_iter()
        .filter(|b| b.name.starts_with(MULTI_HOST_SUITE) == multi_host)
        .filter(|b| only.is_none_or(|o| b.name.contains(o)))
        .collect()
}

/// Where a binary goes in the guest.
pub fn guest_path(b: &TestBinary) -> String {
    format!("/opt/rdma/tests/{}", b.name)
}

/// The guest script: each binary in turn (one test thread, no colour, `test_args` passed
/// on), exit 1 when any failed.
pub fn script(bins: &[TestBinary], test_args: &[String]) -> String {
    let extra: Vec<String> = test_args.iter().map(|s| shell_quote(s)).collect();
    let mut s = String::from("fail=0\n");
    for b in bins {
        s.push_str(&format!(
            "echo '=== live suite: {name}'\n{guest} --test-threads=1 --color never {extra} || fail=1\n",
            name = b.name,
            guest = guest_path(b),
            extra = extra.join(" ")
        ));
    }
    s.push_str("exit $fail\n");
    s
}

/// Totals over libtest's "test result:" lines.
#[derive(Debug, Default, PartialEq, Eq, Clone, Copy)]
pub struct Counts {
    /// Tests that passed.
    pub passed: u64,
    /// Tests that failed.
    pub failed: u64,
    /// Tests that were ignored.
    pub ignored: u64,
    /// Summary lines seen (one per binary that ran to its end).
    pub summaries: usize,
}

impl Counts {
    /// Add one libtest summary line ("test result: ok. 3 passed; 0 failed; 1 ignored; ...").
    pub fn add_line(&mut self, line: &str) -> bool {
        let Some(rest) = line.trim().strip_prefix("test result:") else {
            return false;
        };
        for part in rest.split(';') {
            let words: Vec<&str> = part.split_whitespace().collect();
            let n = words
                .iter()
                .rev()
                .nth(1)
                .and_then(|w| w.parse::<u64>().ok())
                .unwrap_or(0);
            match words.last() {
                Some(&"passed") => self.passed += n,
                Some(&"failed") => self.failed += n,
                Some(&"ignored") => self.ignored += n,
                _ => {}
            }
        }
        self.summaries += 1;
        true
    }

    /// The final counts of a run of `binaries` binaries: one that printed no summary
    /// (crashed, or never reached) counts as a failed test.
    pub fn finish(mut self, binaries: usize) -> Counts {
        if self.summaries < binaries {
            self.failed += (binaries - self.summaries) as u64;
        }
        self
    }

    /// The suite passed: the VM's command exited 0, nothing failed, something passed.
    pub fn passed_with(&self, vm_code: i32) -> bool {
        vm_code == 0 && self.failed == 0 && self.passed > 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn libtest_summaries_are_counted() {
        let mut c = Counts::default();
        assert!(c.add_line(
            "test result: ok. 3 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out; finished in 0.01s"
        ));
        assert!(c.add_line("test result: FAILED. 1 passed; 2 failed; 0 ignored; 0 measured"));
        assert!(!c.add_line("running 3 tests"));
        assert_eq!(
            c,
            Counts {
                passed: 4,
                failed: 2,
                ignored: 1,
                summaries: 2
            }
        );
        let c = c.finish(3);
        assert_eq!(c.failed, 3, "a binary without a summary is a failure");
        assert!(!c.passed_with(0));
        let ok = Counts {
            passed: 1,
            summaries: 1,
            ..Counts::default()
        }
        .finish(1);
        assert!(ok.passed_with(0));
        assert!(!ok.passed_with(124));
        assert!(!Counts::default().finish(0).passed_with(0), "nothing ran");
    }

    #[test]
    fn cargo_artifacts_become_ordered_binaries_and_are_selected() {
        // A workspace build: other packages' tests (rdmad's own `exporter`, rdmactl's unit
        // tests, a package whose directory has its name) are not the live suite.
        let json = r#"{"reason":"compiler-artifact","package_id":"path+file:///w/tests/live#live-tests@0.1.0","profile":{"test":true},"target":{"name":"verbs","kind":["test"]},"executable":"/t/verbs-1"}
{"reason":"compiler-artifact","package_id":"path+file:///w/tests/live#live-tests@0.1.0","profile":{"test":false},"target":{"name":"live-tests","kind":["lib"]},"executable":null}
{"reason":"compiler-artifact","package_id":"path+file:///w/rdmad#0.1.0","profile":{"test":true},"target":{"name":"exporter","kind":["test"]},"executable":"/t/exporter-5"}
{"reason":"compiler-artifact","package_id":"path+file:///w/rdmactl#0.1.0","profile":{"test":true},"target":{"name":"rdmactl","kind":["lib"]},"executable":"/t/rdmactl-6"}
{"reason":"compiler-artifact","package_id":"path+file:///w/tests/live#live-tests@0.1.0","profile":{"test":true},"target":{"name":"live-tests","kind":["lib"]},"executable":"/t/live_tests-2"}
{"reason":"compiler-artifact","package_id":"path+file:///w/tests/live#live-tests@0.1.0","profile":{"test":true},"target":{"name":"multihost","kind":["test"]},"executable":"/t/multihost-3"}
{"reason":"compiler-artifact","package_id":"live-tests 0.1.0 (path+file:///w/tests/live)","profile":{"test":true},"target":{"name":"smoke","kind":["test"]},"executable":"/t/smoke-4"}
{"reason":"compiler-artifact","package_id":"registry+https://example.invalid/index#serde@1.0.0","profile":{"test":false},"target":{"name":"serde","kind":["lib"]},"executable":null}
not json
{"reason":"build-finished","success":true}"#;
        let bins = test_binaries(json, "live-tests");
        let names: Vec<&str> = bins.iter().map(|b| b.name.as_str()).collect();
        assert_eq!(names, ["smoke", "live_tests-unit", "multihost", "verbs"]);
        let rdmad: Vec<String> = test_binaries(json, "rdmad")
            .into_iter()
            .map(|b| b.name)
            .collect();
        assert_eq!(rdmad, ["exporter"]);
        assert_eq!(test_binaries(json, "rdmactl")[0].name, "rdmactl-unit");
        assert!(test_binaries(json, "live").is_empty());
        let single: Vec<String> = select(bins.clone(), false, None)
            .into_iter()
            .map(|b| b.name)
            .collect();
        assert_eq!(single, ["smoke", "live_tests-unit", "verbs"]);
        let multi = select(bins.clone(), true, None);
        assert_eq!(multi.len(), 1);
        assert_eq!(guest_path(&multi[0]), "/opt/rdma/tests/multihost");
        assert!(select(bins.clone(), true, Some("smoke")).is_empty());
        assert_eq!(select(bins, false, Some("verb")).len(), 1);
    }

    #[test]
    fn the_script_runs_every_binary_and_fails_if_any_did() {
        let bins = vec![
            TestBinary {
                name: "a".into(),
                path: "/x/a".into(),
            },
            TestBinary {
                name: "b".into(),
                path: "/x/b".into(),
            },
        ];
        let s = script(&bins, &["it's".to_string()]);
        assert!(s.contains("/opt/rdma/tests/a --test-threads=1 --color never 'it'\\''s' || fail=1"));
        assert!(s.contains("/opt/rdma/tests/b "));
        assert!(s.ends_with("exit $fail\n"));
        // The real shell: a failing "binary" makes the script exit 1, after running all.
        let s = "fail=0\nfalse || fail=1\ntrue || fail=1\nexit $fail\n";
        let st = std::process::Command::new("sh")
            .arg("-c")
            .arg(s)
            .status()
            .unwrap();
        assert_eq!(st.code(), Some(1));
    }
}
