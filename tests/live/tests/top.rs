//! Live test of `rdmactl top`, run INSIDE the lab VM (booted with `--devices 2`): while
//! `ib_write_bw` runs between rxe_a (veth0, 10.1.0.1) and rxe_b (veth1, 10.1.0.2), top's
//! screen, read through tmux, must show non-zero packet rates on both devices and the
//! benchmark's QPs in the resources pane (RDMA netlink) and the benchmark among the top
//! owners (the owners pane, tallied from this host's netlink dumps); `q` must give the
//! shell back.
//!
//! No device, no tmux or no traffic is a failure, never a skip: the lab image has them all.
#![forbid(unsafe_code)]

use live_tests::{perftest_pair_finished, rdmactl_bin};
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// How long a wait may take before the test gives up and prints the screen (TCG is slow).
const GIVE_UP: Duration = Duration::from_secs(120);
const PROMPT: &str = "LIVETOP$ ";
const SOCKET: &str = "rdmactl-live-top";

/// `sh` from PATH: tmux runs its commands with $SHELL, and the lab has no /bin/sh.
fn shell() -> PathBuf {
    std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .map(|d| d.join("sh"))
        .find(|p| p.exists())
        .expect("FAIL: no sh in PATH")
}

fn tmux(args: &[&str]) -> Output {
    Command::new("tmux")
        .arg("-L")
        .arg(SOCKET)
        .args(args)
        .env("SHELL", shell())
        // tmux picks C.UTF-8 itself (libc-bin in the image ships it); a host locale name
        // the image lacks must not leak in.
        .env_remove("LC_ALL")
        .env_remove("LC_CTYPE")
        .env_remove("LANG")
        .output()
        .unwrap_or_else(|e| panic!("FAIL: cannot run tmux ({e}); the lab image must ship it"))
}

fn screen() -> String {
    let out = tmux(&["capture-pane", "-p", "-t", "top"]);
    assert!(out.status.success(), "capture-pane: {out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn alternate_on() -> bool {
    let out = tmux(&["display-message", "-p", "-t", "top", "#{alternate_on}"]);
    String::from_utf8_lossy(&out.stdout).trim() == "1"
}

fn keys(k: &[&str]) {
    let mut args = vec!["send-keys", "-t", "top"];
    args.extend_from_slice(k);
    assert!(tmux(&args).status.success(), "send-keys {k:?}");
}

fn type_line(text: &str) {
    assert!(tmux(&["send-keys", "-t", "top", "-l", text])
        .status
        .success());
    keys(&["Enter"]);
}

fn wait_for(what: &str, ok: impl Fn(&str) -> bool) -> String {
    let start = Instant::now();
    loop {
        let s = screen();
        if ok(&s) {
            return s;
        }
        assert!(
            start.elapsed() < GIVE_UP,
            "gave up waiting for {what}; screen:\n{s}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The cells of the ports-table row of `device` (borders stripped).
fn row_cells(screen: &str, device: &str) -> Option<Vec<String>> {
    screen.lines().find_map(|line| {
        let inner = line.trim_matches(|c: char| c == '│' || c.is_whitespace());
        let cells: Vec<String> = inner.split_whitespace().map(str::to_owned).collect();
        (cells.first().map(String::as_str) == Some(device) && cells.len() >= 11).then_some(cells)
    })
}

/// RX and TX packets per second of a row are both shown and not zero.
fn packets_move(cells: &[String]) -> bool {
    let moving = |c: &str| c != "0" && c != "-";
    moving(&cells[8]) && moving(&cells[9])
}

fn ib_write_bw(device: &str, server: Option<&str>) -> Child {
    let mut cmd = Command::new("timeout");
    cmd.args([
        "90",
        "ib_write_bw",
        "-d",
        device,
        "-x",
        "1",
        "-s",
        "4096",
        "-D",
        "20",
    ]);
    if let Some(addr) = server {
        cmd.arg(addr);
    }
    cmd.stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("FAIL: start ib_write_bw on {device}: {e}"))
}

struct Server;

impl Drop for Server {
    fn drop(&mut self) {
        let _ = tmux(&["kill-server"]);
    }
}

#[test]
fn top_shows_rates_and_qps_while_ib_write_bw_runs() {
    for dev in ["rxe_a", "rxe_b"] {
        let path = format!("/sys/class/infiniband/{dev}/ports/1/state");
        let state = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("FAIL: {path}: {e} (the lab boots with --devices 2)"));
        assert!(state.contains("ACTIVE"), "FAIL: {dev} is {state}");
    }
    let _ = tmux(&["kill-server"]);
    let out = tmux(&[
        "-f",
        "/dev/null",
        "new-session",
        "-d",
        "-s",
        "top",
        "-x",
        "200",
        "-y",
        "50",
        "env",
        &format!("PS1={PROMPT}"),
        &shell().display().to_string(),
        "-i",
    ]);
    assert!(out.status.success(), "FAIL: tmux new-session: {out:?}");
    let _server = Server;
    wait_for("the shell prompt", |s| s.contains(PROMPT.trim_end()));
    type_line(&format!("{} top --interval 0.5", rdmactl_bin().display()));
    let first = wait_for("rxe0, rxe_a and rxe_b in the table", |s| {
        ["rxe0", "rxe_a", "rxe_b"]
            .iter()
            .all(|d| row_cells(s, d).is_some())
    });
    assert!(alternate_on(), "top draws on the alternate screen");
    let idle = row_cells(&first, "rxe_a").unwrap();
    assert_eq!(idle[2], "ACTIVE", "{idle:?}");
    assert_eq!(idle[5], "veth0", "{idle:?}");

    let mut server = ib_write_bw("rxe_a", None);
    // Listening: a server that never does fails the client, and the loop below says so.
    live_tests::tcp::wait_listening(18515, Duration::from_secs(30));
    let mut client = ib_write_bw("rxe_b", Some("10.1.0.1"));

    // Poll while the benchmark runs: both devices must show moving packets, and the
    // resources pane must list ib_write_bw's QPs.
    let start = Instant::now();
    let (mut rates_seen, mut qps_seen) = (None, None);
    while rates_seen.is_none() || qps_seen.is_none() {
        let s = screen();
        let a = row_cells(&s, "rxe_a");
        let b = row_cells(&s, "rxe_b");
        if rates_seen.is_none()
            && a.as_deref().is_some_and(packets_move)
            && b.as_deref().is_some_and(packets_move)
        {
            rates_seen = Some(s.clone());
        }
        // A QP row owned by the benchmark in the resources pane:
        // `rxe_b      RTS       1  ib_write_bw[181]`, and an owners pane row of it
        // (`    2    0  ib_write_bw[181]  /`): the panes side by side are cells between
        // borders, so each test reads one cell.
        let cells = || s.lines().flat_map(|l| l.split('│'));
        let bench_qp = cells().any(|c| {
            c.contains("ib_write_bw[")
                && (c.contains("rxe_a") || c.contains("rxe_b"))
                && (c.contains(" RTS ") || c.contains(" RTR "))
        });
        let bench_owner = s.contains(" Top owners (QPs, netlink) ")
            && cells().any(|c| {
                let words: Vec<&str> = c.split_whitespace().collect();
                words.len() >= 3
                    && words[0].parse::<u64>().is_ok_and(|n| n >= 1)
                    && words[1].parse::<u64>().is_ok()
                    && words[2].starts_with("ib_write_bw[")
            });
        if qps_seen.is_none() && bench_qp && bench_owner {
            qps_seen = Some(s.clone());
        }
        if let Ok(Some(status)) = client.try_wait() {
            if rates_seen.is_none() || qps_seen.is_none() {
                let out = client.wait_with_output().expect("client output");
                let _ = server.kill();
                panic!(
                    "FAIL: ib_write_bw ended ({status}) before top showed {}; client said:\n{}{}\nscreen:\n{s}",
                    if rates_seen.is_none() { "non-zero packet rates on rxe_a and rxe_b" } else { "its QPs and it among the top owners" },
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr),
                );
            }
        }
        assert!(
            start.elapsed() < GIVE_UP,
            "gave up; rates seen: {}, QPs seen: {}; screen:\n{s}",
            rates_seen.is_some(),
            qps_seen.is_some()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let client_out = client.wait_with_output().expect("wait for the client");
    let server_out = server.wait_with_output().expect("wait for the server");
    assert!(
        perftest_pair_finished(&client_out, &server_out),
        "FAIL: ib_write_bw failed: client {:?}, server {:?}\n{}{}",
        client_out.status,
        server_out.status,
        String::from_utf8_lossy(&client_out.stdout),
        String::from_utf8_lossy(&client_out.stderr)
    );
    let shown = rates_seen.unwrap();
    for dev in ["rxe_a", "rxe_b"] {
        let cells = row_cells(&shown, dev).unwrap();
        assert_eq!(cells[6], "-", "rxe has no byte counters: {cells:?}");
    }
    eprintln!("top during ib_write_bw:\n{shown}");

    keys(&["q"]);
    let start = Instant::now();
    while alternate_on() {
        assert!(
            start.elapsed() < GIVE_UP,
            "top did not leave the alternate screen"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // Type only once the shell prompts again, so the answer gets a line of its own.
    wait_for("a fresh prompt", |s| {
        s.lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .map(str::trim)
            == Some(PROMPT.trim_end())
    });
    type_line("echo \"exit=$?\"");
    let exit_line = |s: &str| -> Option<String> {
        s.lines()
            .map(|l| l.trim().trim_start_matches(PROMPT.trim_end()).trim())
            .find(|l| {
                l.strip_prefix("exit=")
                    .is_some_and(|n| n.parse::<i32>().is_ok())
            })
            .map(str::to_owned)
    };
    let s = wait_for("the exit status", |s| exit_line(s).is_some());
    assert_eq!(
        exit_line(&s).as_deref(),
        Some("exit=0"),
        "top's exit status:\n{s}"
    );
    assert!(
        !s.contains("Ports ("),
        "the table must not stay on the normal screen:\n{s}"
    );
}
