//! End-to-end tests of `rdmactl top`, driven in a real terminal: tmux runs a shell, the test
//! types the command, sends keys with `send-keys` and reads the screen with `capture-pane`.
//! They check that the devices of a fixture sysfs tree appear, that Enter shows the counter
//! catalog's explanation, that rates appear when counters move, that a device removed while
//! running is reported and not fatal, that a resize redraws, and that `q`, Ctrl-C and a panic
//! all leave the alternate screen and give the shell back. No device is exit code 3 before the
//! screen is touched.
//!
//! tmux must be installed (CI installs it); without it these tests fail with a clear message.
//! Waits poll the screen until the expected text appears; the long deadline only turns a hang
//! into a failure that prints the screen.
#![forbid(unsafe_code)]

use rdmakit::catalog::Catalog;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// How long a wait may take before the test gives up and prints the screen.
const GIVE_UP: Duration = Duration::from_secs(90);
const PROMPT: &str = "TOPTEST$ ";

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/sysfs")
}

/// Removes a scratch directory when the test ends, passed or failed.
struct Cleanup(PathBuf);

impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A scratch copy of the mlx5-roce fixture (two devices) that the test may change.
fn scratch_tree(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("rdmactl-top-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let status = Command::new("cp")
        .arg("-a")
        .arg(fixtures().join("mlx5-roce"))
        .arg(&dir)
        .status()
        .expect("run cp");
    assert!(status.success(), "copy the fixture to {}", dir.display());
    dir
}

fn counter_file(root: &Path, dev: &str, name: &str) -> PathBuf {
    root.join("class/infiniband")
        .join(dev)
        .join("ports/1/counters")
        .join(name)
}

/// Add `by` to a counter file of the scratch tree.
fn bump(root: &Path, dev: &str, name: &str, by: u64) {
    let path = counter_file(root, dev, name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let value: u64 = text.trim().parse().expect("a number");
    // Write beside the tree and rename: top must never read a half-written file.
    let tmp = root.join(format!("bump-{dev}-{name}"));
    std::fs::write(&tmp, format!("{}\n", value + by)).expect("write the counter");
    std::fs::rename(&tmp, &path).expect("move the counter into place");
}

/// One tmux server (its own socket) with one session running an interactive shell.
struct Tmux {
    socket: String,
}

impl Tmux {
    fn start(name: &str, width: u16, height: u16) -> Tmux {
        let socket = format!("rdmactl-top-{}-{name}", std::process::id());
        let tmux = Tmux { socket };
        let out = tmux.run(&[
            "-f",
            "/dev/null",
            "new-session",
            "-d",
            "-s",
            "top",
            "-x",
            &width.to_string(),
            "-y",
            &height.to_string(),
            "env",
            &format!("PS1={PROMPT}"),
            "sh",
            "-i",
        ]);
        assert!(out.status.success(), "tmux new-session failed: {out:?}");
        tmux.wait_for("the shell prompt", |s| s.contains(PROMPT.trim_end()));
        tmux
    }

    fn run(&self, args: &[&str]) -> Output {
        Command::new("tmux")
            .arg("-L")
            .arg(&self.socket)
            .args(args)
            .env("LC_ALL", "C.UTF-8")
            .output()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot run tmux ({e}): these tests need tmux installed (apt-get install tmux)"
                )
            })
    }

    /// Type a line into the shell and press Enter.
    fn type_line(&self, text: &str) {
        assert!(self
            .run(&["send-keys", "-t", "top", "-l", text])
            .status
            .success());
        self.keys(&["Enter"]);
    }

    /// Send named keys (`Enter`, `Up`, `C-c`, `q`).
    fn keys(&self, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", "top"];
        args.extend_from_slice(keys);
        let out = self.run(&args);
        assert!(out.status.success(), "send-keys {keys:?}: {out:?}");
    }

    fn screen(&self) -> String {
        let out = self.run(&["capture-pane", "-p", "-t", "top"]);
        assert!(out.status.success(), "capture-pane: {out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn alternate_on(&self) -> bool {
        let out = self.run(&["display-message", "-p", "-t", "top", "#{alternate_on}"]);
        String::from_utf8_lossy(&out.stdout).trim() == "1"
    }

    /// Poll the screen until `ok` holds; panic with the screen if it never does.
    fn wait_for(&self, what: &str, ok: impl Fn(&str) -> bool) -> String {
        self.wait_until(what, || {
            let s = self.screen();
            ok(&s).then_some(s)
        })
    }

    fn wait_until(&self, what: &str, mut ok: impl FnMut() -> Option<String>) -> String {
        let start = Instant::now();
        loop {
            if let Some(s) = ok() {
                return s;
            }
            if start.elapsed() > GIVE_UP {
                panic!(
                    "gave up waiting for {what}; alternate screen: {}; screen:\n{}",
                    self.alternate_on(),
                    self.screen()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Start `rdmactl top` in the shell and wait until it shows the ports table.
    fn start_top(&self, root: &Path, env: &str) {
        self.type_line(&format!(
            "{env}{} top --path.sysfs {} --interval 0.3",
            env!("CARGO_BIN_EXE_rdmactl"),
            root.display()
        ));
    }

    /// After top ended: the normal screen is back with a fresh prompt, and `$?` is `code`.
    fn assert_shell_back(&self, code: i32) {
        self.wait_until("the normal screen", || {
            (!self.alternate_on()).then(String::new)
        });
        // Type only once the shell prompts again, so the answer gets a line of its own.
        self.wait_for("a fresh prompt", |s| {
            s.lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .map(str::trim)
                == Some(PROMPT.trim_end())
        });
        self.type_line("echo \"exit=$?\"");
        let exit_line = |s: &str| -> Option<String> {
            s.lines()
                .map(|l| l.trim().trim_start_matches(PROMPT.trim_end()).trim())
                .find(|l| {
                    l.strip_prefix("exit=")
                        .is_some_and(|n| n.parse::<i32>().is_ok())
                })
                .map(str::to_owned)
        };
        let screen = self.wait_for("the exit status", |s| exit_line(s).is_some());
        assert_eq!(
            exit_line(&screen),
            Some(format!("exit={code}")),
            "top's exit status:\n{screen}"
        );
        assert!(
            !screen.contains("Ports ("),
            "the table must not be left on the normal screen:\n{screen}"
        );
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.run(&["kill-server"]);
    }
}

/// The cells of the table row of `device` (border characters stripped).
fn row_cells(screen: &str, device: &str) -> Option<Vec<String>> {
    screen.lines().find_map(|line| {
        let inner = line.trim_matches(|c: char| c == '│' || c.is_whitespace());
        let cells: Vec<String> = inner.split_whitespace().map(str::to_owned).collect();
        (cells.first().map(String::as_str) == Some(device) && cells.len() >= 11).then_some(cells)
    })
}

/// The text of the pane titled `title` (e.g. " Resources (QPs) "), its lines joined by single
/// spaces: where a message wraps depends on the pane's width and on what it quotes (a
/// temporary path whose length follows the process id), so assertions read the whole text.
fn pane_text(screen: &str, title: &str) -> String {
    let lines: Vec<Vec<char>> = screen.lines().map(|l| l.chars().collect()).collect();
    let title: Vec<char> = title.chars().collect();
    for (i, line) in lines.iter().enumerate() {
        let Some(at) = line
            .windows(title.len())
            .position(|w| w == title.as_slice())
        else {
            continue;
        };
        // The pane's left border: the corner before the title.
        let Some(left) = line[..at].iter().rposition(|&c| c == '┌') else {
            continue;
        };
        let mut words = Vec::new();
        for row in &lines[i + 1..] {
            if row.get(left) != Some(&'│') {
                break;
            }
            let inside: String = row[left + 1..].iter().take_while(|&&c| c != '│').collect();
            words.extend(inside.split_whitespace().map(str::to_string));
        }
        return words.join(" ");
    }
    panic!(
        "no pane titled {title:?} in:\n{screen}",
        title = String::from_iter(title)
    );
}

#[test]
fn top_shows_devices_rates_explanations_and_gives_the_terminal_back() {
    let root = scratch_tree("main");
    let _cleanup = Cleanup(root.clone());
    let tmux = Tmux::start("main", 160, 48);
    tmux.start_top(&root, "");
    let screen = tmux.wait_for("both devices", |s| {
        s.contains("Ports (2 of 2)") && s.contains("mlx5_0") && s.contains("mlx5_1")
    });
    assert!(tmux.alternate_on(), "top draws on the alternate screen");
    let cells =
        row_cells(&screen, "mlx5_1").unwrap_or_else(|| panic!("no row for mlx5_1 in:\n{screen}"));
    assert_eq!(cells[2], "DOWN", "{cells:?}");
    assert_eq!(cells[4], "Eth", "{cells:?}");
    assert!(
        pane_text(&screen, " Resources (QPs) ").contains("sysfs has no QP information"),
        "{screen}"
    );
    assert!(
        pane_text(&screen, " Probes (rdmad) ").contains("no --rdmad URL"),
        "{screen}"
    );
    assert!(
        pane_text(&screen, " Top owners (QPs) ")
            .contains("owners come from RDMA netlink (or --rdmad)"),
        "{screen}"
    );

    // Counters move: packets and an error counter. Rates and the doctor must show it.
    let screen = tmux.wait_until("non-zero rates for mlx5_0", || {
        bump(&root, "mlx5_0", "port_rcv_packets", 5000);
        bump(&root, "mlx5_0", "port_rcv_data", 1_000_000);
        bump(&root, "mlx5_0", "symbol_error", 3);
        let s = tmux.screen();
        let cells = row_cells(&s, "mlx5_0")?;
        (cells[6] != "0" && cells[8] != "0" && cells[10] != "0" && s.contains("doctor"))
            .then_some(s)
    });
    let cells = row_cells(&screen, "mlx5_0").unwrap();
    assert_ne!(cells[6], "-", "PMA data counters give bytes/s: {cells:?}");

    // Enter: the port's counters, each explained from the catalog.
    tmux.keys(&["Enter"]);
    tmux.wait_for("the counters screen", |s| {
        s.contains("Counters of mlx5_0/1")
    });
    tmux.keys(&["PageUp", "PageUp", "PageUp"]);
    let vl15 = Catalog::embedded()
        .unwrap()
        .get("ib_pma", "VL15_dropped")
        .expect("the catalog describes VL15_dropped");
    let words: Vec<&str> = vl15.summary.split_whitespace().take(4).collect();
    let screen = tmux.wait_for("the explanation of VL15_dropped", |s| {
        s.contains("VL15_dropped  (pma)") && s.contains(&words.join(" "))
    });
    assert!(screen.contains("Meaning:"), "{screen}");
    assert!(screen.contains("Next steps:"), "{screen}");

    // Help, then back to the ports, a filter, a sort.
    tmux.keys(&["?"]);
    tmux.wait_for("the help", |s| s.contains("Help: rdmactl top"));
    tmux.keys(&["Escape"]);
    tmux.wait_for("the help to close", |s| !s.contains("Help: rdmactl top"));
    tmux.keys(&["Escape"]);
    tmux.wait_for("the ports screen", |s| s.contains("Ports (2 of 2)"));
    tmux.keys(&["f"]);
    tmux.type_line("mlx5_1");
    tmux.wait_for("the filtered table", |s| {
        s.contains("Ports (1 of 2)") && row_cells(s, "mlx5_0").is_none()
    });
    tmux.keys(&["Escape"]);
    // Wait before the next key: an Escape followed at once by a key reads as Alt+key.
    tmux.wait_for("the filter to clear", |s| s.contains("Ports (2 of 2)"));
    tmux.keys(&["s"]);
    tmux.wait_for("the sort key", |s| {
        s.contains("Ports (2 of 2) sort: rx bytes/s")
    });

    // A device disappears while top runs.
    std::fs::remove_file(root.join("class/infiniband/mlx5_1")).expect("remove mlx5_1's link");
    let screen = tmux.wait_for("the removal", |s| {
        s.contains("Ports (1 of 1)") && s.contains("device mlx5_1 removed")
    });
    assert!(row_cells(&screen, "mlx5_1").is_none(), "{screen}");
    assert!(tmux.alternate_on(), "still running");

    // A resize redraws at the new size.
    assert!(tmux
        .run(&["resize-window", "-t", "top", "-x", "90", "-y", "30"])
        .status
        .success());
    let screen = tmux.wait_for("a redraw at 90x30", |s| {
        s.lines().count() <= 30 && s.contains("rdmactl top") && s.contains("mlx5_0")
    });
    assert!(screen.lines().all(|l| l.chars().count() <= 90), "{screen}");

    // The whole tree disappears: top says there is nothing and keeps running.
    std::fs::remove_dir_all(&root).expect("remove the tree");
    let screen = tmux.wait_for("the empty state", |s| {
        s.contains("no RDMA devices right now") && s.contains("device mlx5_0 removed")
    });
    assert!(row_cells(&screen, "mlx5_0").is_none(), "{screen}");
    assert!(tmux.alternate_on(), "still running");

    tmux.keys(&["q"]);
    tmux.assert_shell_back(0);
}

/// A one-page HTTP server on 127.0.0.1 that answers every request with `body`.
fn metrics_server(body: &'static str) -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut buf = [0u8; 4096];
            let _ = std::io::Read::read(&mut stream, &mut buf);
            let _ = std::io::Write::write_all(
                &mut stream,
                format!(
                    "HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\r\n{body}",
                    body.len()
                )
                .as_bytes(),
            );
        }
    });
    port
}

#[test]
fn probes_pane_shows_rdmad_probe_series_or_says_why_not() {
    let port = metrics_server(
        "# TYPE rdma_probe_latency_seconds gauge\n\
         rdma_probe_latency_seconds{device=\"mlx5_0\",quantile=\"0.5\"} 1.8e-05\n\
         rdma_devices 2\n",
    );
    let root = scratch_tree("probes");
    let _cleanup = Cleanup(root.clone());
    let tmux = Tmux::start("probes", 200, 48);
    tmux.type_line(&format!(
        "{} top --path.sysfs {} --interval 0.3 --rdmad http://127.0.0.1:{port}",
        env!("CARGO_BIN_EXE_rdmactl"),
        root.display()
    ));
    let screen = tmux.wait_for("the probe series", |s| {
        s.contains("rdma_probe_latency_seconds{device=\"mlx5_0\",quantile=\"0.5\"} 18.0 us")
    });
    assert!(
        !screen.contains("rdma_devices"),
        "only rdma_probe_* series: {screen}"
    );
    tmux.keys(&["q"]);
    tmux.assert_shell_back(0);

    // Nothing listens there: the pane says so and top keeps running.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead = closed.local_addr().unwrap().port();
    drop(closed);
    tmux.type_line(&format!(
        "{} top --path.sysfs {} --interval 0.3 --rdmad http://127.0.0.1:{dead}",
        env!("CARGO_BIN_EXE_rdmactl"),
        root.display()
    ));
    let screen = tmux.wait_for("the unreachable note", |s| {
        s.contains("rdmad unreachable") && s.contains("scrape failed")
    });
    assert!(row_cells(&screen, "mlx5_0").is_some(), "{screen}");
    tmux.keys(&["q"]);
    tmux.assert_shell_back(0);
}

/// rdmad's exposition captured in the lab: two holders in two cgroups, one with QPs in ERR
/// (tests/data/README.md).
const CAPTURED_OWNERS: &str = include_str!("data/owners.prom");

#[test]
fn owners_pane_ranks_rdmads_owners_and_shows_their_qps_in_err() {
    let port = metrics_server(CAPTURED_OWNERS);
    let root = scratch_tree("owners");
    let _cleanup = Cleanup(root.clone());
    let tmux = Tmux::start("owners", 200, 48);
    tmux.type_line(&format!(
        "{} top --path.sysfs {} --interval 0.3 --rdmad http://127.0.0.1:{port}",
        env!("CARGO_BIN_EXE_rdmactl"),
        root.display()
    ));
    let screen = tmux.wait_for("the owners pane", |s| {
        s.contains(" Top owners (QPs, rdmad) ")
            && pane_text(s, " Top owners (QPs, rdmad) ").contains("owners_scale[161]")
    });
    let text = pane_text(&screen, " Top owners (QPs, rdmad) ");
    // Most QPs first; the ERR column counts the holder's QPs in ERR.
    let a = text
        .find("5 2 owners_scale[158] /job-a.scope")
        .unwrap_or_else(|| panic!("no row for job A: {text}"));
    let b = text
        .find("3 0 owners_scale[161] /job-b.scope")
        .unwrap_or_else(|| panic!("no row for job B: {text}"));
    let kernel = text
        .find("1 0 kernel")
        .unwrap_or_else(|| panic!("no row for the kernel: {text}"));
    assert!(a < b && b < kernel, "{text}");
    // The probes pane of the same scrape: rdmad answered, without probe series.
    assert!(
        pane_text(&screen, " Probes (rdmad) ").contains("exports no rdma_probe_* series"),
        "{screen}"
    );
    tmux.keys(&["q"]);
    tmux.assert_shell_back(0);
}

#[test]
fn ctrl_c_quits_and_restores_the_terminal() {
    let root = scratch_tree("ctrlc");
    let _cleanup = Cleanup(root.clone());
    let tmux = Tmux::start("ctrlc", 120, 40);
    tmux.start_top(&root, "");
    tmux.wait_for("the table", |s| s.contains("Ports (2 of 2)"));
    assert!(tmux.alternate_on());
    tmux.keys(&["C-c"]);
    tmux.assert_shell_back(0);
}

#[test]
fn a_panic_restores_the_terminal_before_printing() {
    let root = scratch_tree("panic");
    let _cleanup = Cleanup(root.clone());
    let tmux = Tmux::start("panic", 120, 40);
    tmux.start_top(&root, "RUST_BACKTRACE=0 RDMACTL_TOP_TEST_PANIC=1 ");
    tmux.wait_until("the normal screen", || {
        (!tmux.alternate_on()).then(String::new)
    });
    let screen = tmux.wait_for("the panic message", |s| {
        s.contains("RDMACTL_TOP_TEST_PANIC is set")
    });
    assert!(!screen.contains("Ports ("), "{screen}");
    tmux.assert_shell_back(101);
}

#[test]
fn no_devices_is_exit_3_before_the_screen_is_touched() {
    let root = std::env::temp_dir().join(format!("rdmactl-top-{}-empty", std::process::id()));
    let _cleanup = Cleanup(root.clone());
    std::fs::create_dir_all(root.join("class")).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_rdmactl"))
        .args(["top", "--path.sysfs"])
        .arg(&root)
        .output()
        .expect("run rdmactl top");
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("no RDMA devices under"), "{stderr}");
    assert!(
        out.stdout.is_empty(),
        "nothing (no escape sequence) may reach the terminal: {:?}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn bad_arguments_are_usage_errors() {
    let out = Command::new(env!("CARGO_BIN_EXE_rdmactl"))
        .args(["top", "--interval", "0"])
        .output()
        .expect("run rdmactl top");
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let out = Command::new(env!("CARGO_BIN_EXE_rdmactl"))
        .args(["top", "--rdmad", "ftp://x", "--path.sysfs"])
        .arg(fixtures().join("rxe"))
        .output()
        .expect("run rdmactl top");
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("only http:// and https://"));
}
