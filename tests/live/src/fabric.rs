//! Helpers of the multi-host suite (tests/multihost.rs), which runs on h1 of
//! `rdmactl lab test --hosts N`: the other hosts are reached through the lab controller
//! (`exec hK`, answered by the host's agent over qemu's user network, so it works while
//! the fabric link is down), and faults are asked of the same controller, as
//! `rdmactl lab fault` does inside a host.
//!
//! Everything that cannot reach a host or the controller fails the test.

use rdma_lab::multi::{self, ControlTarget};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The lab's host count ($LAB_HOSTS, set by the lab's init); fails outside a lab of at
/// least `min` hosts.
pub fn lab_hosts(min: usize) -> usize {
    let n: usize = std::env::var("LAB_HOSTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| {
            panic!("FAIL: $LAB_HOSTS is not set: the multi-host suite runs on h1 of `rdmactl lab test --hosts N`")
        });
    assert!(
        n >= min,
        "FAIL: this test needs at least {min} hosts, the lab has {n}"
    );
    n
}

/// The fabric address of host `hK`.
pub fn addr(host: &str) -> String {
    format!("10.2.0.{}", host.trim_start_matches('h'))
}

/// One request to the lab controller; the whole answer.
pub fn control(line: &str) -> String {
    let mut out = Vec::new();
    multi::request(&ControlTarget::Guest, line, &mut out).unwrap_or_else(|e| {
        panic!(
            "FAIL: the lab controller ({}) did not answer {line:?}: {e}",
            multi::CONTROL_GUEST_ADDR
        )
    });
    String::from_utf8_lossy(&out).to_string()
}

/// Ask for a fault (`link h3 down`, ...); fails the test unless the controller did it.
pub fn fault(words: &str) -> String {
    let answer = control(&format!("fault {words}"));
    assert!(answer.starts_with("ok "), "FAIL: fault {words}: {answer}");
    eprintln!("fault: {}", answer.trim_end());
    answer
}

/// What a command on a host did.
#[derive(Debug, Clone)]
pub struct Remote {
    /// Its exit code.
    pub code: i32,
    /// Its output (stdout and stderr).
    pub output: String,
}

impl Remote {
    /// The output, failing the test unless the command exited 0.
    pub fn ok(self, what: &str) -> String {
        assert_eq!(
            self.code, 0,
            "FAIL: {what} exited {}:\n{}",
            self.code, self.output
        );
        self.output
    }
}

/// Run a shell script on host `hK` (h1 included) and wait for it.
pub fn on_host(host: &str, script: &str) -> Remote {
    let answer = control(&format!("exec {host} {}", multi::base64(script.as_bytes())));
    let mut code = None;
    let mut output = String::new();
    for line in answer.lines() {
        if let Some(c) = line.strip_prefix("LAB-AGENT-EXIT=") {
            code = c.trim().parse().ok();
        } else if let Some(e) = line.strip_prefix("error ") {
            panic!("FAIL: exec on {host}: {e}");
        } else {
            output.push_str(line);
            output.push('\n');
        }
    }
    let code = code.unwrap_or_else(|| {
        panic!("FAIL: exec on {host} gave no exit code (host down?):\n{answer}")
    });
    Remote { code, output }
}

/// [`on_host`] in a thread.
pub fn spawn_on_host(host: &str, script: &str) -> JoinHandle<Remote> {
    let (host, script) = (host.to_string(), script.to_string());
    std::thread::spawn(move || on_host(&host, &script))
}

/// Run `script` on `host` until it exits 0, at most `limit`; fails the test after that.
pub fn wait_on_host(host: &str, script: &str, limit: Duration, what: &str) {
    let deadline = Instant::now() + limit;
    loop {
        let r = on_host(host, script);
        if r.code == 0 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "FAIL: {what} on {host} not within {} s; last output:\n{}",
            limit.as_secs(),
            r.output
        );
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// rxe0's port-1 hw counters on `host`, read in one go: name -> value.
pub fn hw_counters(host: &str) -> std::collections::BTreeMap<String, u64> {
    let out = on_host(
        host,
        "cd /sys/class/infiniband/rxe0/ports/1/hw_counters && for f in *; do echo \"$f $(cat $f)\"; done",
    )
    .ok(&format!("reading rxe0's hw_counters on {host}"));
    let map: std::collections::BTreeMap<String, u64> = out
        .lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(' ')?;
            Some((k.to_string(), v.trim().parse().ok()?))
        })
        .collect();
    assert!(
        map.contains_key("rcvd_pkts"),
        "FAIL: no rxe0 hw_counters on {host}:\n{out}"
    );
    map
}

/// rxe's counters that move when a requester's packets are lost (requester: NAKs,
/// retransmissions and retries exhausted; responder: out-of-sequence and duplicate requests).
pub const LOSS_COUNTERS: &[&str] = &[
    "rcvd_seq_err",
    "completer_retry_err",
    "duplicate_request",
    "out_of_seq_request",
    "retry_exceeded_err",
];

/// How much each of [`LOSS_COUNTERS`] rose between two [`hw_counters`] readings; a counter
/// missing from either fails.
pub fn loss_deltas(
    before: &std::collections::BTreeMap<String, u64>,
    after: &std::collections::BTreeMap<String, u64>,
) -> std::collections::BTreeMap<&'static str, u64> {
    LOSS_COUNTERS
        .iter()
        .map(|c| {
            let get = |m: &std::collections::BTreeMap<String, u64>| {
                *m.get(*c)
                    .unwrap_or_else(|| panic!("FAIL: rxe0 has no hw counter {c}"))
            };
            (*c, get(after) - get(before))
        })
        .collect()
}

/// Clears the netem qdisc on a host when dropped (also when the test fails).
pub struct Netem(pub &'static str);

impl Drop for Netem {
    fn drop(&mut self) {
        let _ = control(&format!("fault clear {}", self.0));
    }
}

/// Puts a host's link back up when dropped (also when the test fails).
pub struct LinkUp(pub &'static str);

impl Drop for LinkUp {
    fn drop(&mut self) {
        let _ = control(&format!("fault link {} up", self.0));
    }
}
