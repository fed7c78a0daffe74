//! Live tests of the course's C examples (lessons/code), run INSIDE the Soft-RoCE lab VM.
//!
//! `tests/lessons-build` compiles them into target/lessons-bin/; the lab copies them to
//! /opt/rdma/examples/ (override with LESSONS_EXAMPLES_DIR). Each test runs one example
//! against rxe0 and checks the lines the chapter quotes. A missing example is a failure,
//! never a skip: a lesson whose example does not run is a broken lesson.
use live_tests::LAB_DEVICE;
use std::io::Read;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const TIME_LIMIT: Duration = Duration::from_secs(120);

/// ibv_ud_pingpong on the lab's device with GID index 1: the arguments every UD run of these
/// tests starts with (its server and its client must agree on them).
const UD_PINGPONG: [&str; 5] = ["ibv_ud_pingpong", "-d", LAB_DEVICE, "-g", "1"];

fn examples_dir() -> PathBuf {
    std::env::var_os("LESSONS_EXAMPLES_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/opt/rdma/examples"))
}

/// What one run of an example printed.
struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Run {
    /// Panic with the whole output unless `needle` appears in stdout.
    fn expect(&self, needle: &str) -> &Self {
        assert!(
            self.stdout.contains(needle),
            "expected {needle:?} in the output.\n--- stdout\n{}\n--- stderr\n{}",
            self.stdout,
            self.stderr
        );
        self
    }

    /// The first stdout line that starts with `prefix`.
    fn line(&self, prefix: &str) -> &str {
        self.stdout
            .lines()
            .find(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("no line starting with {prefix:?} in:\n{}", self.stdout))
    }
}

/// Run `cmd` (stdout and stderr captured), kill it after TIME_LIMIT, and fail unless it
/// finished in time.
fn run_limited(cmd: Command, what: &str) -> Run {
    run_limited_for(cmd, what, TIME_LIMIT)
}

/// `run_limited` with another time limit.
fn run_limited_for(mut cmd: Command, what: &str, limit: Duration) -> Run {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("FAIL: cannot start {what}: {e}"));
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let out_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let start = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().expect("try_wait") {
            break Some(st);
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let run = Run {
        code: status.and_then(|s| s.code()),
        stdout: out_reader.join().unwrap_or_default(),
        stderr: err_reader.join().unwrap_or_default(),
    };
    assert!(
        status.is_some(),
        "FAIL: {what} did not finish within {limit:?}.\n--- stdout\n{}\n--- stderr\n{}",
        run.stdout,
        run.stderr
    );
    run
}

/// Run `name rxe0 [extra...]`, kill it after TIME_LIMIT, and require exit 0 and "OK".
fn run_ok(name: &str, extra: &[&str]) -> Run {
    let path = examples_dir().join(name);
    assert!(
        path.is_file(),
        "FAIL: example {} is missing: build with tests/lessons-build and add target/lessons-bin/* to /opt/rdma/examples/",
        path.display()
    );
    let mut cmd = Command::new(&path);
    cmd.arg(LAB_DEVICE).args(extra);
    let run = run_limited(cmd, name);
    assert_eq!(
        run.code,
        Some(0),
        "FAIL: {name} exited with {:?}.\n--- stdout\n{}\n--- stderr\n{}",
        run.code,
        run.stdout,
        run.stderr
    );
    run.expect("OK\n");
    run
}

/// Run a shell script as a chapter shows it: the examples and rdmactl on PATH, stderr
/// folded into stdout (`2>&1`, as the chapter quotes it). The exit code is the script's.
fn run_sh(script: &str) -> Run {
    let mut cmd = tool("sh");
    cmd.arg("-c").arg(format!("exec 2>&1\n{script}"));
    run_limited(cmd, script)
}

/// A command as a chapter runs it: the examples and rdmactl on PATH.
fn tool(name: &str) -> Command {
    let rdmactl_dir = live_tests::rdmactl_bin()
        .parent()
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    let path = format!(
        "{}:{rdmactl_dir}:{}",
        examples_dir().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut cmd = Command::new(name);
    cmd.env("PATH", path);
    cmd
}

#[test]
fn ch01_devices_lists_rxe0_active() {
    let r = run_ok("01_devices", &[]);
    r.expect(&format!("device {LAB_DEVICE}:"))
        .expect("port 1: state active, link_layer Ethernet");
}

#[test]
fn ch02_fabric_is_roce_on_eth0() {
    let r = run_ok("02_fabric", &[]);
    r.expect("port 1: state active, physical state 5 (LinkUp)")
        .expect("fabric: Ethernet (RoCE); LID 0 and SM LID 0 are unused")
        .expect("netdev eth0, MTU 1500 -> largest RoCE MTU 1024; port active_mtu 1024")
        .expect("UDP port 4791 (RoCE v2): a kernel socket is bound to it");
}

#[test]
fn ch03_reg_mr_times_and_enforces_access_rules() {
    let r = run_ok("03_reg_mr", &[]);
    r.expect("reg_mr  67108864 B")
        .expect("REMOTE_WRITE without LOCAL_WRITE: rejected, errno 22 (Invalid argument)")
        .expect("REMOTE_ATOMIC without LOCAL_WRITE: rejected, errno 22");
    // Two registrations of the same buffer get two different local keys.
    let line = r.line("same buffer twice:");
    let keys: Vec<&str> = line
        .split_whitespace()
        .filter(|w| w.starts_with("0x"))
        .collect();
    assert_eq!(keys.len(), 4, "{line}");
    assert_ne!(keys[0], keys[2], "both MRs got the same lkey: {line}");
}

#[test]
fn ch04_qp_state_machine() {
    let r = run_ok("04_qp_states", &[]);
    r.expect("state RESET")
        .expect("RESET -> RTR (skipping INIT)");
    for accepted in ["RESET -> INIT ", "INIT -> RTR ", "RTR -> RTS", "RTS -> ERR"] {
        let line = r
            .stdout
            .lines()
            .find(|l| l.starts_with(accepted) && !l.contains("without"))
            .unwrap_or_else(|| panic!("no line for {accepted:?}"));
        assert!(line.contains(" ok "), "{line}");
    }
    for refused in [
        "RESET -> RTR (skipping INIT)",
        "RESET -> INIT without IBV_QP_PORT",
        "INIT -> RTR without IBV_QP_AV",
        "RTS -> INIT (backwards)",
    ] {
        assert!(
            r.line(refused)
                .contains("rejected: Invalid argument (errno 22)"),
            "{refused}: {}",
            r.line(refused)
        );
    }
    assert!(r.line("ERR -> RESET").ends_with("state RESET"));
}

#[test]
fn ch05_rc_loopback_send_recv() {
    let r = run_ok("05_rc_loopback", &["50"]);
    r.expect("gid[1] ::ffff:10.0.2.15")
        .expect("both QPs in RTS")
        .expect("B: recv completion: success, 64 bytes: \"hello from QP 0x")
        .expect("ping-pong: 50 round trips");
}

#[test]
fn ch05_rdma_cm_connects_over_10_0_2_15() {
    let r = run_ok("05_rdma_cm", &[]);
    r.expect("server: listening on 10.0.2.15:7471")
        .expect("client: event RDMA_CM_EVENT_ROUTE_RESOLVED")
        .expect("server: event RDMA_CM_EVENT_CONNECT_REQUEST")
        .expect("server: received 64 bytes: \"hello over rdma_cm")
        .expect("client: event RDMA_CM_EVENT_DISCONNECTED");
}

#[test]
fn ch06_write_imm_read_atomics() {
    let r = run_ok("06_write_read", &[]);
    r.expect("B's buffer now \"written by A with RDMA WRITE\"; completions at B: 0")
        .expect("IBV_WC_RECV_RDMA_WITH_IMM imm 0xc0ffee")
        .expect("A's buffer now \"B's data, fetched by A with RDMA READ\"")
        .expect("FETCH_AND_ADD +5: old value 100, counter at B now 105")
        .expect("CMP_AND_SWP 105->1: old value 105, counter at B now 1");
}

#[test]
fn ch07_gid_table_shows_roce_v2_ipv4_gid() {
    let r = run_ok("07_gid_table", &[]);
    r.expect("link_layer Ethernet, lid 0")
        .expect("gid[ 0] fe80::5054:ff:fe12:3456")
        .expect("gid[ 1] ::ffff:10.0.2.15             RoCE v2  netdev eth0")
        .expect("connect QPs with gid index 1 (::ffff:10.0.2.15)");
}

#[test]
fn ch08_wc_errors_rnr_and_remote_access() {
    let r = run_ok("08_wc_errors", &[]);
    r.expect("status IBV_WC_RNR_RETRY_EXC_ERR (13): RNR retry counter exceeded")
        .expect("status IBV_WC_WR_FLUSH_ERR (5)")
        .expect("status IBV_WC_REM_ACCESS_ERR (10): remote access error")
        .expect("QP states: A ERR, B ERR");
    assert!(r.line("QP states:").contains("A ERR, B RTS"));
    // Recovery: the SEND after RESET -> RTS succeeds.
    r.expect("A: wr_id 4 status IBV_WC_SUCCESS");
}

#[test]
fn ch09_teardown_order_and_ebusy() {
    let r = run_ok("09_teardown", &[]);
    assert!(r
        .line("ibv_dealloc_pd (MR and QP still use it)")
        .contains("EBUSY"));
    assert!(r
        .line("ibv_destroy_cq (QP still uses it)")
        .contains("EBUSY"));
    assert!(r
        .line("ibv_destroy_comp_channel (CQ still uses it)")
        .contains("EBUSY"));
    r.expect("EBUSY seen 4 times; everything freed");
}

#[test]
fn ch10_rkey_is_checked_by_the_responder() {
    let r = run_ok("10_rkey_check", &[]);
    assert!(r.line("1. inside the MR").ends_with("IBV_WC_SUCCESS"));
    for refused in ["2. ", "3. ", "4. ", "5b. ", "6c. "] {
        assert!(
            r.line(refused).ends_with("IBV_WC_REM_ACCESS_ERR"),
            "{}",
            r.line(refused)
        );
    }
    // A second window gets a new key; the invalidated one stays dead.
    let rebound = r.line("6d. ");
    let keys: Vec<&str> = rebound
        .split_whitespace()
        .filter(|w| w.trim_start_matches('(').starts_with("0x"))
        .collect();
    assert_eq!(keys.len(), 2, "{rebound}");
    assert_ne!(
        keys[0],
        keys[1].trim_start_matches('('),
        "the new window reused the old key: {rebound}"
    );
    // rxe does not enforce type-2 window bounds; the example must say so, not hide it.
    r.expect("window bounds: NOT enforced by this device");
    // Chapter 3: on rxe the MR with a bound window is refused with EINVAL (not EBUSY).
    r.expect("6f. ibv_dereg_mr of B's MR, a window bound: refused, errno 22 (Invalid argument)");
    // The responder checks the QP's own access flags before the key.
    assert!(
        r.line("7. ").ends_with("IBV_WC_REM_INV_REQ_ERR"),
        "{}",
        r.line("7. ")
    );
}

#[test]
fn ch11_counters_move_with_traffic() {
    let r = run_ok("11_counters", &[]);
    r.expect("hw_counters: present")
        .expect("ports/1/counters: absent")
        .expect("IBV_WC_RNR_RETRY_EXC_ERR");
    let delta = |name: &str| -> u64 {
        let line = r.line(&format!("  {name} "));
        let plus = line.rsplit("(+").next().unwrap().trim_end_matches(')');
        plus.parse()
            .unwrap_or_else(|_| panic!("bad delta in {line:?}"))
    };
    assert!(
        delta("sent_pkts") >= 1000,
        "4 KiB x 200 at MTU 1024 plus ACKs"
    );
    assert!(delta("rdma_recvs") >= 100);
    assert_eq!(delta("retry_rnr_exceeded_err"), 1);
    assert_eq!(delta("rcvd_rnr_err"), 1);
}

#[test]
fn ch12_ud_address_handle_and_q_key() {
    let r = run_ok("12_ud", &[]);
    r.expect("1. A sends \"datagram 1\" with Q_Key 0x11111111: send completion IBV_WC_SUCCESS")
        .expect("   B receives \"datagram 1\": 296 bytes (40 GRH + 256), GRH present, from QP 0x")
        // A wrong Q_Key: the send completes (no ACK in UD), B never sees it.
        .expect("2. A sends \"datagram 2\" with Q_Key 0x22222222: send completion IBV_WC_SUCCESS")
        .expect("   B receives \"datagram 3\"")
        .expect("message 2 (wrong Q_Key) never reached B")
        // Larger than the MTU: no packet, no error (IBTA C10-93.1.1).
        .expect("4. A sends 2048 bytes (MTU 1024): send completion IBV_WC_SUCCESS")
        .expect("5. A sends \"datagram 5\"; B's next completion: IBV_WC_SUCCESS, \"datagram 5\"");
    assert!(
        !r.stdout.contains("B receives \"datagram 2\""),
        "{}",
        r.stdout
    );
}

#[test]
fn ch12_srq_limit_event_is_read_from_the_async_queue() {
    let r = run_ok("12_srq_async", &[]);
    r.expect("posted 8 receives, limit armed at 4")
        .expect("limit event seen once; the SRQ's limit now reads 0 (disarmed)");
    // Both receiving QPs took from the one SRQ.
    assert!(
        r.stdout.contains("B1 got \"message 2 via A1\""),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout.contains("B2 got \"message 1 via A2\""),
        "{}",
        r.stdout
    );
    // The event comes after the count drops below the limit (3 left), never before.
    let lines: Vec<&str> = r.stdout.lines().collect();
    let event = lines
        .iter()
        .position(|l| l.contains("async event: SRQ limit reached"))
        .unwrap_or_else(|| panic!("no SRQ limit event:\n{}", r.stdout));
    let below = lines
        .iter()
        .position(|l| l.contains("3 receives left"))
        .unwrap();
    assert!(
        event > below,
        "the limit event came too early:\n{}",
        r.stdout
    );
    // Teardown (issue 31): both SRQ QPs went to ERR before being destroyed, and the
    // device raised LAST_WQE_REACHED for both or for neither (rxe long raised none).
    let err_lines: Vec<&str> = lines
        .iter()
        .copied()
        .filter(|l| (l.starts_with("B1 0x") || l.starts_with("B2 0x")) && l.contains(" in ERR: "))
        .collect();
    assert_eq!(
        err_lines.len(),
        2,
        "FAIL: both SRQ QPs to ERR:\n{}",
        r.stdout
    );
    let reached = err_lines
        .iter()
        .filter(|l| l.ends_with("IBV_EVENT_QP_LAST_WQE_REACHED, safe to destroy"))
        .count();
    assert!(
        reached == 0 || reached == 2,
        "FAIL: LAST_WQE_REACHED for one SRQ QP only:\n{}",
        r.stdout
    );
}

#[test]
fn ch12_inline_and_selective_signalling() {
    let r = run_ok("12_inline_signal", &[]);
    r.expect("1. B received \"sent inline from an unregistered buffer\"")
        .expect("2. 256 WRITEs all signalled: 256 completions")
        .expect("   256 WRITEs, every 16th signalled: 16 completions");
    let inline = r.line("A: sq_sig_all 0, max_inline_data ");
    let granted: u32 = inline
        .split_whitespace()
        .nth(4)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{inline}"));
    assert!(granted >= 64, "{inline}");
}

#[test]
fn ch12_extended_wr_api_batch() {
    let r = run_ok("12_wr_api", &[]);
    r.expect("opcode RDMA_WRITE")
        .expect("A: wr_id 2 IBV_WC_SUCCESS, opcode SEND")
        .expect("B: IBV_WC_RECV with imm 0x5eed; B's buffer \"written with ibv_wr_rdma_write\"");
    assert!(r
        .line("A: wr_id 1 ")
        .contains("IBV_WC_SUCCESS, opcode RDMA_WRITE"));
}

#[test]
fn ch12_fence_solicited_events_and_cq_moderation() {
    let r = run_ok("12_fence_events", &[]);
    r.expect("   READ then SEND, with fence: B received \"fresh data, read from B\"")
        .expect("2. SEND 3: completion event at B: no")
        .expect("2. SEND 4 with IBV_SEND_SOLICITED: completion event at B: yes")
        .expect("   one event, then 4 completions in B's CQ")
        // rxe has no CQ moderation: the example must say so, not pretend.
        .expect("3. CQ moderation (ibv_modify_cq): not supported by rxe0: Operation not supported");
    for i in 1..=3 {
        assert!(
            r.line(&format!("2. SEND {i}:")).ends_with("no"),
            "an unsolicited SEND woke B:\n{}",
            r.stdout
        );
    }
}

#[test]
fn ch12_multicast_join_and_send_to_the_group() {
    let r = run_ok("12_mcast", &[]);
    r.expect("receiver: QP 0x")
        .expect(" joined 239.1.2.3: group GID ::ffff:239.1.2.3, remote QPN 0xffffff, Q_Key 0x")
        .expect("receiver: received 104 bytes (40 of GRH) from QPN 0x")
        .expect("\"datagram 4 to the group\"")
        // rxe delivers a group's datagram to every attached QP, the sender's own included.
        .expect("sender: 4 SENDs completed; receiver got 4 of 4, sender's own QP got 4");
}

/// rdma_cm's configfs directory for rxe0, created for one test and removed on drop (even
/// when the test fails), with configfs unmounted again if the test mounted it.
struct CmConfigfs {
    dir: PathBuf,
    mounted: bool,
}

impl CmConfigfs {
    fn create() -> CmConfigfs {
        let root = std::path::Path::new("/sys/kernel/config");
        let mounted = !root.join("rdma_cm").is_dir();
        if mounted {
            let st = Command::new("mount")
                .args(["-t", "configfs", "none", "/sys/kernel/config"])
                .status()
                .expect("FAIL: cannot run mount");
            assert!(st.success(), "FAIL: mount -t configfs: {st}");
        }
        let dir = root.join("rdma_cm").join(LAB_DEVICE);
        std::fs::create_dir(&dir).unwrap_or_else(|e| panic!("FAIL: mkdir {}: {e}", dir.display()));
        CmConfigfs { dir, mounted }
    }

    fn port_file(&self, name: &str) -> PathBuf {
        self.dir.join("ports/1").join(name)
    }
}

impl Drop for CmConfigfs {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.dir);
        if self.mounted {
            let _ = Command::new("umount").arg("/sys/kernel/config").status();
        }
    }
}

#[test]
fn ch13_tos_from_rdma_set_option_and_from_configfs() {
    // Without configfs: the default ToS is 0, rdma_set_option's lands in both QPs' GRH.
    let r = run_ok("13_tos", &["7483", "106"]);
    r.expect("configfs rdma_cm/rxe0: not present (default ToS 0)")
        .expect("connection with the default ToS:\n  route: traffic class 0\n  client QP traffic class   0 = DSCP  0, ECN 0;")
        .expect("connection with rdma_set_option(RDMA_OPTION_ID_TOS, 106):\n  route: traffic class 106\n")
        .expect("  client QP traffic class 106 = DSCP 26, ECN 2;")
        // The passive side takes the traffic class the connect request carried.
        .expect("  server QP traffic class 106 = DSCP 26, ECN 2;");
    // The device's default, set by an administrator in configfs; set_option still wins.
    let cfs = CmConfigfs::create();
    let mode = std::fs::read_to_string(cfs.port_file("default_roce_mode")).unwrap();
    assert_eq!(mode.trim(), "RoCE v2");
    std::fs::write(cfs.port_file("default_roce_tos"), "32").unwrap();
    let r = run_ok("13_tos", &["7484", "106"]);
    r.expect("configfs rdma_cm/rxe0/ports/1/default_roce_tos: 32")
        .expect("connection with the default ToS:\n  route: traffic class 32\n  client QP traffic class  32 = DSCP  8, ECN 0;")
        .expect("  server QP traffic class  32 = DSCP  8, ECN 0;")
        .expect("  client QP traffic class 106 = DSCP 26, ECN 2;");
    drop(cfs);
}

/// Chapter 15: four sender threads, each with its own QP pair, one CQ shared by all,
/// three pollers on it at once: every completion taken exactly once, every SEND counted
/// by rxe0; rxe has neither thread domains nor parent domains.
#[test]
fn ch15_threads_one_qp_each_one_cq_many_pollers() {
    let before = live_tests::sysfs_hw_counter(LAB_DEVICE, 1, "rdma_sends");
    let r = run_ok("15_threads", &[]);
    r.expect("thread domain: ibv_alloc_td: Operation not supported (errno 95)\n")
        .expect("parent domain: ibv_alloc_parent_domain: Operation not supported (errno 95)\n")
        .expect("4 sender threads, one RC QP pair each, 1000 SENDs of 32 bytes each")
        .expect("pollers: 8000 completions between them, 8000 expected\n")
        .expect(
            "senders: 4000 SENDs completed, 4000 receives completed, each once with its payload\n",
        );
    // The pollers' own counts add up to every completion, whoever took which.
    let took: Vec<u64> = r
        .stdout
        .lines()
        .filter_map(|l| l.strip_prefix("poller "))
        .map(|l| {
            let n = l.split(" took ").nth(1).and_then(|t| t.split(' ').next());
            n.and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("bad poller line {l:?}"))
        })
        .collect();
    assert_eq!(took.len(), 3, "three pollers:\n{}", r.stdout);
    assert_eq!(took.iter().sum::<u64>(), 8000);
    // Other tests may send at the same time: at least the program's 4000 SENDs.
    let sends = live_tests::sysfs_hw_counter(LAB_DEVICE, 1, "rdma_sends") - before;
    assert!(sends >= 4000, "FAIL: rxe0 counted {sends} SENDs");
}

/// Chapter 16: the missed event shown on purpose (a completion that arrived before the
/// re-arm raises no event; the poll after the re-arm finds it), then the event loop of
/// get / re-arm / poll with batched acknowledgements sees every one of 2000 receives.
#[test]
fn ch16_cq_events_missed_event_and_the_rearm_loop() {
    let r = run_ok("16_cq_events", &[]);
    r.expect("   event for message 0; polled until empty: 1 completion\n")
        .expect("   epoll_wait: no event in 2 s, with a completion waiting in the CQ\n")
        .expect("   the poll after the re-arm finds it: 1 completion\n")
        .expect("   2000 of 2000 receives seen in ");
    // "events got N, acknowledged in M calls, async events 0": every event acknowledged,
    // in batches (never more calls than events), none from the async fd.
    let line = r.line("events got ");
    let nums: Vec<u64> = line
        .split(|c: char| !c.is_ascii_digit())
        .filter(|w| !w.is_empty())
        .map(|w| w.parse().unwrap())
        .collect();
    assert_eq!(nums.len(), 3, "{line}");
    let (events, calls, async_events) = (nums[0], nums[1], nums[2]);
    assert!(events >= 2, "one event per part at least: {line}");
    assert!(calls >= 1 && calls <= events, "{line}");
    assert_eq!(async_events, 0, "{line}");
}

#[test]
fn ch05_cm_ep_convenience_api_and_what_private_data_the_peer_sees() {
    let r = run_ok("05_cm_ep", &[]);
    r.expect("server: listening on 10.0.2.15:7472")
        .expect("client: rdma_create_ep: device rxe0, QP 0x")
        // 57 bytes do not fit the REQ's 92 bytes after rdma_cm's 36-byte header.
        .expect("client: rdma_connect with 57 bytes of private data: refused, errno 22")
        // The receiver sees the field's fixed size, zero-padded, not the 6 bytes sent.
        .expect("server: connect request: private_data_len 56; bytes after the last nonzero one: 51; text \"hello\"")
        .expect("client: established: private_data_len 196; bytes after the last nonzero one: 189; text \"welcome\"")
        .expect("server: received 64 bytes: \"hello from rdma_post_send\"")
        .expect("client: received 64 bytes: \"reply from rdma_post_send\"");
}

#[test]
fn ch06_gather_scatter_and_rereg_mr() {
    let r = run_ok("06_sge_rereg", &[]);
    r.expect("1. SEND of 3 SGEs (8 + 8 + 8 bytes): B received 24 bytes")
        .expect("   B's first SGE (8 bytes): \"HEADER1|\"; second SGE: \"payload|trailer\"")
        .expect("2. ibv_post_send with one SGE more than the QP's max_send_sge: refused");
    // What rxe does with each kind of re-registration, as chapter 3 and 6 quote it.
    for (line, want) in REREG_ON_RXE {
        assert!(
            r.line(line).contains(want),
            "{line}: expected {want:?}:\n{}",
            r.stdout
        );
    }
}

#[test]
fn ch08_idle_connection_learns_of_a_dead_peer_only_when_it_sends() {
    let r = run_ok("08_dead_peer", &["2000"]);
    r.expect("connected: timeout 14 (67 ms), retry_cnt 6")
        .expect("0. keepalive to live B: IBV_WC_SUCCESS; completions at B: 0")
        .expect("1. A idle for 2000 ms: completions 0, A's QP state RTS")
        .expect("2. keepalive to dead B: IBV_WC_RETRY_EXC_ERR after ");
    assert!(
        r.line("2. keepalive to dead B")
            .ends_with("A's QP state ERR"),
        "{}",
        r.stdout
    );
}

/// The lines of one branch of 17_triage (its title line and the indented lines after it).
fn triage_branch(r: &Run, title: &str) -> String {
    let mut lines = r.stdout.lines().skip_while(|l| !l.starts_with(title));
    let head = lines
        .next()
        .unwrap_or_else(|| panic!("no branch {title:?}:\n{}", r.stdout));
    let body: Vec<&str> = lines.take_while(|l| l.starts_with("   ")).collect();
    format!("{head}\n{}", body.join("\n"))
}

#[test]
fn ch17_triage_each_mistake_has_its_observable() {
    let r = run_ok("17_triage", &[]);
    r.expect("port 1: state active, physical state 5, active_mtu 1024, gid_tbl_len ");
    for (title, wants) in TRIAGE_ON_RXE {
        let b = triage_branch(&r, title);
        for want in *wants {
            assert!(
                b.contains(want),
                "branch {title:?}: expected {want:?} in:\n{b}"
            );
        }
    }
}

// Chapter 17's standard tools, run as the chapter runs them. A tool missing from the lab
// image fails its test (it cannot start), as a missing example does: never a skip.

/// A server started in the background, stdout and stderr in a file (no pipe that a test
/// could wait on forever), killed on drop so that a failed test leaves nothing listening.
struct Server {
    child: std::process::Child,
    log: PathBuf,
    what: String,
}

impl Server {
    fn start(argv: &[&str], log: &str) -> Server {
        let what = argv.join(" ");
        let out = std::fs::File::create(log).unwrap_or_else(|e| panic!("FAIL: {log}: {e}"));
        let err = out.try_clone().expect("dup the log file");
        let child = tool(argv[0])
            .args(&argv[1..])
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("FAIL: cannot start {what}: {e}"));
        Server {
            child,
            log: PathBuf::from(log),
            what,
        }
    }

    fn output(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Wait until it exits; fail if it is still running after `limit`. Its exit code.
    fn finish(&mut self, limit: Duration) -> Option<i32> {
        let start = Instant::now();
        loop {
            if let Some(st) = self.child.try_wait().expect("try_wait") {
                return st.code();
            }
            assert!(
                start.elapsed() < limit,
                "FAIL: {} still running after {limit:?}:\n{}",
                self.what,
                self.output()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Run a tool to its end (stdout and stderr apart) within `limit` seconds.
fn run_tool(argv: &[&str], limit: u64) -> Run {
    let mut cmd = tool(argv[0]);
    cmd.args(&argv[1..]).stdin(Stdio::null());
    run_limited_for(cmd, &argv.join(" "), Duration::from_secs(limit))
}

/// `rdma` (iproute2) with these arguments: its stdout, failing unless it exits 0.
fn rdma_ok(args: &str) -> String {
    let argv: Vec<&str> = std::iter::once("rdma").chain(args.split(' ')).collect();
    let r = run_tool(&argv, 30);
    assert_eq!(
        r.code,
        Some(0),
        "FAIL: rdma {args}:\n{}{}",
        r.stdout,
        r.stderr
    );
    r.stdout
}

/// `ibv_devinfo -v`: the port lines the chapter reads first, and what `-v` adds.
#[test]
fn ch17_ibv_devinfo_v_port_lines() {
    let plain = run_tool(&["ibv_devinfo", "-d", LAB_DEVICE], 30);
    let verbose = run_tool(&["ibv_devinfo", "-v", "-d", LAB_DEVICE], 30);
    for r in [&plain, &verbose] {
        assert_eq!(
            r.code,
            Some(0),
            "FAIL: ibv_devinfo:\n{}{}",
            r.stdout,
            r.stderr
        );
    }
    let devs = live_tests::parse_devinfo(&verbose.stdout).unwrap_or_else(|e| panic!("FAIL: {e}"));
    assert_eq!(devs.len(), 1, "{}", verbose.stdout);
    let port = devs[0].port(1).expect("ibv_devinfo -v shows port 1");
    for (key, want) in DEVINFO_PORT {
        assert_eq!(
            port.field(key),
            Some(*want),
            "FAIL: port 1 {key}:\n{}",
            verbose.stdout
        );
    }
    // The GID table, each entry with its type; the lab's IPv4 address at index 1.
    assert!(
        !port.gids.is_empty(),
        "FAIL: no GID lines:\n{}",
        verbose.stdout
    );
    for g in &port.gids {
        assert!(
            matches!(g.gid_type.as_deref(), Some("RoCE v1") | Some("RoCE v2")),
            "FAIL: GID[{}] without a RoCE type: {g:?}",
            g.index
        );
    }
    let gid1 = port.gids.iter().find(|g| g.index == 1).expect("GID[1]");
    assert_eq!(gid1.gid.to_string(), "::ffff:10.0.2.15", "{gid1:?}");
    assert_eq!(gid1.gid_type.as_deref(), Some("RoCE v2"), "{gid1:?}");
    // -v adds the device's limits, phys_state and the GID table; without it, none of them.
    assert!(devs[0].field("max_qp").is_some(), "{}", verbose.stdout);
    for absent in ["max_qp:", "phys_state:", "GID["] {
        assert!(
            !plain.stdout.contains(absent),
            "FAIL: {absent} without -v:\n{}",
            plain.stdout
        );
    }
    assert!(plain.stdout.contains("PORT_ACTIVE (4)"), "{}", plain.stdout);
}

/// Puts rxe0/1's per-QP counter mode back to `auto off` (the lab's default) on drop, so
/// that the tests after this one (rdmad's counter-mode collector) see the default.
struct QpCounterModeOff;

impl Drop for QpCounterModeOff {
    fn drop(&mut self) {
        let _ = tool("rdma")
            .args(["statistic", "qp", "set", "link", "rxe0/1", "auto", "off"])
            .status();
    }
}

/// `rdma statistic qp` on rxe: the auto mode is accepted, yet a QP that exists gets no
/// counter of its own (rxe implements no per-QP counter); the QP is in `rdma resource
/// show qp`, and the port-wide counters the chapter quotes are in `rdma statistic show`.
#[test]
fn ch17_rdma_statistic_qp_on_rxe() {
    let mode = rdma_ok("statistic qp mode link rxe0/1");
    assert!(
        mode.starts_with("link rxe0/1 mode qp auto off"),
        "FAIL: the lab's default mode:\n{mode}"
    );
    let _restore = QpCounterModeOff;
    rdma_ok("statistic qp set link rxe0/1 auto type on");
    let mode = rdma_ok("statistic qp mode link rxe0/1");
    assert!(
        mode.starts_with("link rxe0/1 mode qp auto type on"),
        "FAIL: mode after set:\n{mode}"
    );
    // A QP that exists: ibv_ud_pingpong's server creates its UD QP (to INIT, with the
    // port: the moment the kernel binds a counter in auto mode) before it waits on TCP.
    let mut server = Server::start(
        &[&UD_PINGPONG[..], &["-s", "512", "-p", "18517"]].concat(),
        "/tmp/ch17-statqp-server.log",
    );
    let mut qps = String::new();
    let listed = live_tests::wait_until(Duration::from_secs(20), || {
        qps = rdma_ok("resource show qp link rxe0/1");
        qps.contains("comm ibv_ud_pingpong")
    });
    assert!(
        listed,
        "FAIL: no ibv_ud_pingpong QP in rdma resource show qp:\n{qps}\n{}",
        server.output()
    );
    let line = qps
        .lines()
        .find(|l| l.contains("comm ibv_ud_pingpong"))
        .unwrap();
    assert!(
        line.contains("type UD") && line.contains("state INIT"),
        "{line}"
    );
    let counters = rdma_ok("statistic qp show");
    println!("rdma statistic qp show, a UD QP in INIT, auto type on:\n{counters}--");
    assert!(
        !counters.contains("cntn"),
        "FAIL: rxe now has per-QP counters; chapter 17 says it has none:\n{counters}"
    );
    let _ = server.child.kill();
    let _ = server.finish(Duration::from_secs(10));
    // What remains: the port's counters, with the names chapters 11 and 17 quote.
    let port = rdma_ok("statistic show link rxe0/1");
    for name in PORT_COUNTERS_QUOTED {
        assert!(
            port.contains(&format!(" {name} ")),
            "FAIL: no {name} in rdma statistic show:\n{port}"
        );
    }
    drop(_restore);
    let mode = rdma_ok("statistic qp mode link rxe0/1");
    assert!(mode.starts_with("link rxe0/1 mode qp auto off"), "{mode}");
}

/// rping: server and client on rxe0's address, three round trips, both exit 0.
#[test]
fn ch17_rping_three_round_trips() {
    let mut server = Server::start(
        &["rping", "-s", "-a", "10.0.2.15", "-C", "3", "-v"],
        "/tmp/ch17-rping-server.log",
    );
    let listening = live_tests::wait_until(Duration::from_secs(20), || {
        rdma_ok("resource show cm_id")
            .lines()
            .any(|l| l.contains("LISTEN") && l.contains("comm rping"))
    });
    assert!(
        listening,
        "FAIL: rping -s never listened:\n{}",
        server.output()
    );
    let client = run_tool(
        &[
            "rping",
            "-c",
            "-a",
            "10.0.2.15",
            "-C",
            "3",
            "-v",
            "-S",
            "64",
        ],
        60,
    );
    assert_eq!(
        client.code,
        Some(0),
        "FAIL: rping -c:\n{}{}\n--- server\n{}",
        client.stdout,
        client.stderr,
        server.output()
    );
    let pings: Vec<&str> = client
        .stdout
        .lines()
        .filter(|l| l.starts_with("ping data: rdma-ping-"))
        .collect();
    assert_eq!(pings.len(), 3, "FAIL: not 3 pings:\n{}", client.stdout);
    for (i, l) in pings.iter().enumerate() {
        assert!(l.starts_with(&format!("ping data: rdma-ping-{i}: ")), "{l}");
    }
    let code = server.finish(Duration::from_secs(30));
    let out = server.output();
    assert_eq!(code, Some(0), "FAIL: rping -s:\n{out}");
    let echoed = out
        .lines()
        .filter(|l| l.starts_with("server ping data: rdma-ping-"))
        .count();
    assert_eq!(echoed, 3, "FAIL: the server saw not 3 pings:\n{out}");
}

/// ibv_ud_pingpong: the default 2048 bytes do not fit the lab's MTU; 512 bytes ping-pong
/// 100 times and both sides print the same byte count.
#[test]
fn ch17_ibv_ud_pingpong_fits_the_mtu() {
    // The lab's rdma-core 44: a server alone with the default 2048 bytes (more than the
    // MTU) is not refused up front; it listens and waits for a client.
    let mut big = Server::start(
        &[&UD_PINGPONG[..], &["-p", "18518"]].concat(),
        "/tmp/ch17-ud-big.log",
    );
    assert!(
        live_tests::tcp::wait_listening(18518, Duration::from_secs(20)),
        "FAIL: the 2048-byte server neither listened nor stayed:\n{}",
        big.output()
    );
    assert!(
        !big.output().contains("Requested size larger than port MTU"),
        "FAIL: rdma-core now refuses up front; chapter 17 says it waits:\n{}",
        big.output()
    );
    let _ = big.child.kill();
    drop(big);
    // The server and the client of one exchange: the same arguments, the client's ending
    // with the server's address.
    let ud = [&UD_PINGPONG[..], &["-s", "512", "-n", "100"]].concat();
    let mut server = Server::start(&ud, "/tmp/ch17-ud-server.log");
    let listening = live_tests::tcp::wait_listening(18515, Duration::from_secs(20));
    assert!(
        listening,
        "FAIL: no server on TCP 18515:\n{}",
        server.output()
    );
    let mut argv = ud.clone();
    argv.push("127.0.0.1");
    let client = run_tool(&argv, 60);
    assert_eq!(
        client.code,
        Some(0),
        "FAIL: client:\n{}{}\n--- server\n{}",
        client.stdout,
        client.stderr,
        server.output()
    );
    let code = server.finish(Duration::from_secs(30));
    let out = server.output();
    assert_eq!(code, Some(0), "FAIL: server:\n{out}");
    // 512 bytes x 100 iterations x 2 directions.
    for text in [&client.stdout, &out] {
        assert!(text.contains("102400 bytes in "), "FAIL:\n{text}");
        let iters = text
            .lines()
            .find(|l| l.starts_with("100 iters in "))
            .unwrap_or_else(|| panic!("FAIL: no iters line:\n{text}"));
        let usec: f64 = iters
            .rsplit("= ")
            .next()
            .and_then(|v| v.strip_suffix(" usec/iter"))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("FAIL: {iters}"));
        assert!(usec > 0.0, "{iters}");
    }
    assert!(
        client.stdout.contains("remote address: LID 0x0000, QPN 0x"),
        "{}",
        client.stdout
    );
}

/// What one theft of section 5.5 printed: the thief's run, the victim's and the server's
/// output, and both clients' names.
struct Theft {
    thief: Run,
    thief_name: String,
    victim: String,
    victim_name: String,
    server: String,
}

/// The name a client of 05_cm_event_loop connected as.
fn client_name(out: &str) -> String {
    out.lines()
        .find_map(|l| l.strip_prefix("client: connecting as \""))
        .and_then(|l| l.split('"').next())
        .unwrap_or_else(|| panic!("FAIL: no 'connecting as' line:\n{out}"))
        .to_string()
}

/// Chapter 5.5 on rxe0: the server (`-g`: it prints each grant; `-1`: one PD for all),
/// a victim that keeps writing for 15 s, and a thief that WRITEs with the victim's grant
/// on its own connection.
fn steal_a_grant(port: &str, one_pd: bool) -> Theft {
    let bin = examples_dir().join("05_cm_event_loop");
    assert!(bin.is_file(), "FAIL: example {} is missing", bin.display());
    let mut args = vec!["05_cm_event_loop", "server", "-p", port, "-n", "2", "-g"];
    if one_pd {
        args.push("-1");
    }
    let mut server = Server::start(&args, &format!("/tmp/ch05-theft-server-{port}.log"));
    let listening = format!("server: listening on port {port}");
    assert!(
        live_tests::wait_until(Duration::from_secs(20), || server
            .output()
            .contains(&listening)),
        "FAIL: the server never listened:\n{}",
        server.output()
    );
    let client = ["05_cm_event_loop", "client", "-p", port];
    let mut victim_args = client.to_vec();
    victim_args.extend(["-r", "300", "-d", "50", "10.0.2.15"]);
    let mut victim = Server::start(&victim_args, &format!("/tmp/ch05-theft-victim-{port}.log"));
    let mut grant = String::new();
    let granted = live_tests::wait_until(Duration::from_secs(30), || {
        let out = server.output();
        match out.lines().find(|l| l.starts_with("server: grant to \"")) {
            Some(l) => {
                grant = l.to_string();
                true
            }
            None => false,
        }
    });
    assert!(granted, "FAIL: no grant printed:\n{}", server.output());
    // "server: grant to "NAME": addr 0x..., rkey 0x..., 128 bytes"
    let field = |key: &str| -> String {
        grant
            .split(key)
            .nth(1)
            .and_then(|v| v.split(',').next())
            .unwrap_or_else(|| panic!("FAIL: no {key:?} in {grant:?}"))
            .to_string()
    };
    let stolen = format!("{}:{}", field("addr "), field("rkey "));
    let mut thief_args = client.to_vec();
    thief_args.extend(["-s", &stolen, "10.0.2.15"]);
    let thief = run_tool(&thief_args, 60);
    assert_eq!(
        victim.finish(Duration::from_secs(90)),
        Some(0),
        "FAIL: the victim:\n{}",
        victim.output()
    );
    assert_eq!(
        server.finish(Duration::from_secs(30)),
        Some(0),
        "FAIL: the server:\n{}",
        server.output()
    );
    let (victim, server) = (victim.output(), server.output());
    Theft {
        thief_name: client_name(&thief.stdout),
        victim_name: client_name(&victim),
        thief,
        victim,
        server,
    }
}

/// Chapter 5.5: a client's grant (address, length, rkey) names an MR in that client's
/// own PD, so another client that learnt it is refused on its own connection; with one
/// PD for every client (the server's `-1`), the same theft succeeds. Both clients'
/// QPs and the server's grant REMOTE_WRITE after the handshake, as rdma_cm set them.
#[test]
fn ch05_a_grant_is_useless_on_another_clients_connection() {
    for (port, one_pd) in [("7475", false), ("7476", true)] {
        let t = steal_a_grant(port, one_pd);
        let all = format!(
            "--- thief\n{}{}\n--- victim\n{}\n--- server\n{}",
            t.thief.stdout, t.thief.stderr, t.victim, t.server
        );
        t.thief
            .expect("client: writing with a grant taken from another connection instead\n");
        for out in [&t.thief.stdout, &t.victim] {
            assert!(
                out.lines().any(|l| l.starts_with("client: QP 0x")
                    && l.ends_with(") grants the peer: REMOTE_WRITE")),
                "FAIL: a client's access flags:\n{all}"
            );
        }
        let server_grants = t
            .server
            .lines()
            .filter(|l| {
                l.starts_with("server: QP 0x") && l.ends_with(") grants the peer: REMOTE_WRITE")
            })
            .count();
        assert_eq!(server_grants, 2, "FAIL: the server's access flags:\n{all}");
        assert!(t.victim.contains("client: 300 messages written\n"), "{all}");
        assert!(
            t.server.contains("server: served 2 clients, refused 0\n"),
            "{all}"
        );
        // The theft happened while the victim's connection (and its MR) was open.
        let gone = |name: &str| {
            t.server
                .lines()
                .position(|l| l.starts_with(&format!("server: \"{name}\" disconnected after ")))
                .unwrap_or_else(|| panic!("FAIL: {name} never disconnected:\n{all}"))
        };
        assert!(
            gone(&t.thief_name) < gone(&t.victim_name),
            "FAIL: the victim left before the thief wrote:\n{all}"
        );
        let victim_line = format!(
            "server: \"{}\" disconnected after 300 messages",
            t.victim_name
        );
        assert!(t.server.contains(&victim_line), "{all}");
        if one_pd {
            // One PD: the victim's rkey works on the thief's QP; the thief's own buffer
            // at the server stays empty, its WRITE landed in the victim's.
            assert_eq!(t.thief.code, Some(0), "FAIL: one PD, the theft:\n{all}");
            t.thief.expect("client: WRITE and SEND completed\n");
            assert!(
                t.server
                    .contains(&format!("server: \"{}\" wrote: \"\"\n", t.thief_name)),
                "FAIL: one PD:\n{all}"
            );
        } else {
            // A PD per client: the server's device refuses the WRITE.
            assert_eq!(t.thief.code, Some(1), "FAIL: a PD per client:\n{all}");
            t.thief
                .expect("client: message 1: WRITE completed with IBV_WC_REM_ACCESS_ERR\n");
            let thief_line = format!("server: \"{}\" disconnected after 0 messages", t.thief_name);
            assert!(t.server.contains(&thief_line), "{all}");
        }
    }
}

#[test]
fn ch17_rdmactl_answers_the_same_questions() {
    let r = run_sh("rdmactl explain retry_exceeded_err");
    assert_eq!(r.code, Some(0), "{}", r.stdout);
    for want in EXPLAIN_LINES {
        r.expect(want);
    }
    let r = run_sh(DOCTOR_SCRIPT);
    for want in DOCTOR_LINES {
        r.expect(want);
    }
    let r = run_sh(TRACE_SCRIPT);
    for want in TRACE_LINES {
        r.expect(want);
    }
}

#[test]
fn ch17_wire_experiment_decodes_the_write() {
    // Exit 0: the WRITE was captured on rxe_b's interface with the rkey the program used.
    let r = run_sh("rdmactl experiment run wire");
    assert_eq!(r.code, Some(0), "{}", r.stdout);
}

// What chapters 3, 6 and 17 say of the lab, in one place per claim.

/// 06_sge_rereg: each re-registration's line, and that rxe answered it (done or a named
/// IBV_REREG_MR_ERR_* code; the chapter claims no particular answer).
const REREG_ON_RXE: &[(&str, &str)] = &[
    ("3a. rereg CHANGE_ACCESS", ": "),
    ("3b. rereg CHANGE_PD", ": "),
    ("3c. rereg CHANGE_TRANSLATION", ": "),
];

/// 17_triage on rxe: each branch's title and the lines the chapter says decide it.
const TRIAGE_ON_RXE: &[(&str, &[&str])] = &[
    (
        "baseline: everything right",
        &["A: IBV_WC_SUCCESS; A's QP RTS", "B: received 64 bytes"],
    ),
    (
        "gid: source GID index = gid_tbl_len",
        &["A: ibv_modify_qp to RTR refused: errno 22"],
    ),
    ("gid: source GID index 0 (IPv6 link-local)", &["   "]),
    (
        "qpn: A sends to QPN 0xfffff0",
        &[
            "A: IBV_WC_RETRY_EXC_ERR; A's QP ERR",
            "B: nothing received",
            "retry_exceeded_err +1",
        ],
    ),
    ("psn: B expects A's PSN + 100 (A is behind)", &["   "]),
    ("psn: B expects A's PSN - 100 (A is ahead)", &["   "]),
    ("mtu: path MTU 4096", &["   "]),
    (
        "access: RDMA WRITE to B",
        &["A: IBV_WC_REM_INV_REQ_ERR; A's QP ERR"],
    ),
];

/// ibv_devinfo -v, port 1 of the lab's rxe0: the lines chapter 17 reads first.
const DEVINFO_PORT: &[(&str, &str)] = &[
    ("state", "PORT_ACTIVE (4)"),
    ("phys_state", "LINK_UP (5)"),
    ("active_mtu", "1024 (3)"),
    ("link_layer", "Ethernet"),
];

/// Port counters chapter 17's triage names, as `rdma statistic show` prints them.
const PORT_COUNTERS_QUOTED: &[&str] = &[
    "rcvd_pkts",
    "retry_exceeded_err",
    "duplicate_request",
    "out_of_seq_request",
];

const EXPLAIN_LINES: &[&str] = &["retry_exceeded_err"];

const DOCTOR_SCRIPT: &str = "rdmactl counters --json > /tmp/before.json
17_triage rxe0 > /dev/null
rdmactl counters --json > /tmp/after.json
rdmactl doctor -v --from /tmp/before.json --to /tmp/after.json; echo \"exit $?\"";
const DOCTOR_LINES: &[&str] = &["retry_exceeded_err"];

/// The chapter's two commands; the trace is ended (SIGTERM) once it shows 17_triage, and
/// otherwise runs its 15 s (the chapter's --duration 15).
const TRACE_SCRIPT: &str = "rdmactl trace qp --json --duration 15 > /tmp/trace.log 2>&1 &
i=0; until grep -q 'rdmactl trace: ready' /tmp/trace.log || [ $i -ge 300 ]; do i=$((i+1)); sleep 0.1; done
17_triage rxe0 > /dev/null
i=0; until grep -q '\"comm\":\"17_triage\"' /tmp/trace.log || ! kill -0 $! 2>/dev/null || [ $i -ge 200 ]; do i=$((i+1)); sleep 0.1; done
kill $! 2>/dev/null; wait; cat /tmp/trace.log";
const TRACE_LINES: &[&str] = &["\"comm\":\"17_triage\""];
