//! Live tracing tests, run INSIDE the Soft-RoCE lab VM: `rdmactl trace` (eBPF kprobes on
//! ib_uverbs/ib_core) must show this test process's own QPs moving RESET->INIT->RTR->RTS->ERR
//! and a refused transition with its errno, with this process's pid and thread name; MR
//! registrations with their size and no keys; and `rdmactl experiment run wire` must decode
//! the rkey this WRITE used from the packets on the veth pair. rdmad's `trace` collector
//! (`--collector.trace`, rdmad built with `--features bpf`) must count the QP transitions to
//! ERR of `rdmactl experiment run qp-errors` on rxe0.
//!
//! Needs an rdmactl built with `--features bpf` (and verbs) and rxe0, rxe_a, rxe_b (the
//! `lab test` boot has all three). A missing device or a tracer that cannot start fails.
use live_tests::cgroup::TestCgroup;
use live_tests::{rdmactl_bin, Rdmad, RdmadOptions, LAB_DEVICE};
use rdma_verbs::{
    AccessFlags, Context, GidType, QueuePair, RcLink, RtsParams, SendOp, Sge, WcStatus,
};
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::sync::Arc;
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(30);

/// A running `rdmactl trace`, its stdout lines on a channel.
struct Trace {
    child: Child,
    lines: Receiver<String>,
}

impl Drop for Trace {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn lines_of(stream: impl std::io::Read + Send + 'static) -> Receiver<String> {
    let (tx, rx) = channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stream).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// Start `rdmactl trace WHAT --json` and wait until it says its probes are attached.
fn start_trace(what: &str) -> Trace {
    let mut child = Command::new(rdmactl_bin())
        .args(["trace", what, "--json", "--duration", "120"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("FAIL: cannot run {}: {e}", rdmactl_bin().display()));
    let stderr = lines_of(child.stderr.take().unwrap());
    let lines = lines_of(child.stdout.take().unwrap());
    let mut said = Vec::new();
    let deadline = Instant::now() + WAIT;
    loop {
        match stderr.recv_timeout(Duration::from_millis(200)) {
            Ok(line) if line.contains("rdmactl trace: ready") => break,
            Ok(line) => said.push(line),
            Err(_) => {
                if let Ok(Some(status)) = child.try_wait() {
                    panic!(
                        "FAIL: `rdmactl trace {what}` exited ({status}) before attaching; the live \
                         suite needs an rdmactl built with --features bpf. It said:\n{}",
                        said.join("\n")
                    );
                }
                assert!(
                    Instant::now() < deadline,
                    "FAIL: `rdmactl trace {what}` not ready after {WAIT:?}:\n{}",
                    said.join("\n")
                );
            }
        }
    }
    let report = said.join("\n");
    assert!(report.contains("attached"), "no attach report:\n{report}");
    // Keep draining stderr so the child never blocks on a full pipe.
    std::thread::spawn(move || while stderr.recv().is_ok() {});
    Trace { child, lines }
}

impl Trace {
    /// Collect events until `done` says the set is complete, or fail after WAIT.
    fn until(&self, what: &str, mut done: impl FnMut(&[Value]) -> bool) -> Vec<Value> {
        let mut events = Vec::new();
        let deadline = Instant::now() + WAIT;
        while Instant::now() < deadline {
            if let Ok(line) = self.lines.recv_timeout(Duration::from_millis(200)) {
                let v: Value = serde_json::from_str(&line)
                    .unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
                for secret in ["rkey", "lkey", "addr", "iova", "\"va\""] {
                    assert!(
                        !line.contains(secret),
                        "a trace event carries {secret}: {line}"
                    );
                }
                events.push(v);
                if done(&events) {
                    return events;
                }
            }
        }
        let dump: Vec<String> = events.iter().map(Value::to_string).collect();
        panic!(
            "FAIL: no {what} within {WAIT:?}; saw {} events:\n{}",
            events.len(),
            dump.join("\n")
        );
    }
}

fn open(name: &str) -> Arc<Context> {
    rdma_verbs::open(name).unwrap_or_else(|e| {
        panic!(
            "FAIL: cannot open {name} ({e}); devices: {:?}. Run inside `rdmactl lab test`.",
            rdma_verbs::devices()
        )
    })
}

fn access() -> AccessFlags {
    AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ
}

/// The name the kernel gives the calling thread (what the tracer reports as comm).
fn thread_comm() -> String {
    std::fs::read_to_string("/proc/thread-self/comm")
        .expect("read /proc/thread-self/comm")
        .trim_end()
        .to_string()
}

fn connect(ctx: &Arc<Context>, a: &QueuePair, b: &QueuePair) {
    let gid = ctx.choose_gid(1, GidType::RoceV2).expect("choose_gid");
    let mtu = ctx.query_port(1).unwrap().active_mtu;
    RcLink::new(1, mtu, access())
        .connect_pair((a, &gid, 0x100), (b, &gid, 0x200))
        .expect("RESET -> INIT -> RTR -> RTS");
}

fn is_modify(e: &Value, qpn: u32, from: &str, to: &str) -> bool {
    e["kind"] == "qp_modify" && e["qp_num"] == qpn && e["from_state"] == from && e["to_state"] == to
}

#[test]
fn trace_qp_shows_this_process_moving_a_qp_to_error() {
    let trace = start_trace("qp");
    let pid = std::process::id();
    let comm = thread_comm();
    let ctx = open(LAB_DEVICE);
    let pd = ctx.alloc_pd().expect("alloc_pd");
    let cq = ctx.create_cq(16).expect("create_cq");
    let a = pd.create_rc_qp(&cq, &cq, Default::default()).expect("qp a");
    let b = pd.create_rc_qp(&cq, &cq, Default::default()).expect("qp b");
    let refused = pd.create_rc_qp(&cq, &cq, Default::default()).expect("qp c");
    connect(&ctx, &a, &b);
    a.to_error().expect("RTS -> ERR");
    // RESET -> RTS skips two states: the kernel refuses it with EINVAL.
    let err = refused.to_rts(&RtsParams::default());
    assert!(err.is_err(), "RESET -> RTS was accepted");
    let (qa, qc) = (a.qp_num(), refused.qp_num());

    let events = trace.until("RTS->ERR and the refused RESET->RTS", |evs| {
        evs.iter().any(|e| is_modify(e, qa, "RTS", "ERR"))
            && evs
                .iter()
                .any(|e| is_modify(e, qc, "RESET", "RTS") && e["errno"].is_number())
    });
    let ours: Vec<&Value> = events
        .iter()
        .filter(|e| e["pid"] == pid && e["qp_num"] == qa)
        .collect();
    let steps: Vec<String> = ours
        .iter()
        .filter(|e| e["kind"] == "qp_modify")
        .map(|e| {
            format!(
                "{}->{}",
                e["from_state"].as_str().unwrap_or("?"),
                e["to_state"].as_str().unwrap_or("?")
            )
        })
        .collect();
    assert_eq!(steps, ["RESET->INIT", "INIT->RTR", "RTR->RTS", "RTS->ERR"]);
    let create = ours
        .iter()
        .find(|e| e["kind"] == "qp_create")
        .expect("the create of QP a");
    assert_eq!(create["qp_type"], "RC");
    for e in &ours {
        assert_eq!(e["comm"], comm.as_str(), "{e}");
        assert_eq!(e["device"], LAB_DEVICE, "{e}");
        assert!(e["errno"].is_null(), "{e}");
    }
    let failed = events
        .iter()
        .find(|e| is_modify(e, qc, "RESET", "RTS"))
        .unwrap();
    assert_eq!(failed["pid"], pid);
    assert_eq!(failed["errno"], 22, "{failed}");
    assert_eq!(failed["error"], "EINVAL");

    // Destroying the QPs shows up with the state they were in.
    drop(a);
    let destroyed = trace.until("the destroy of QP a", |evs| {
        evs.iter()
            .any(|e| e["kind"] == "qp_destroy" && e["qp_num"] == qa)
    });
    let d = destroyed
        .iter()
        .find(|e| e["kind"] == "qp_destroy")
        .unwrap();
    assert_eq!(d["from_state"], "ERR", "{d}");
    assert_eq!(d["pid"], pid);
    // rxe: the state is read from the driver itself.
    assert_eq!(d["from_driver"], true, "{d}");
}

#[test]
fn trace_qp_sees_the_driver_move_a_qp_to_error_without_a_modify() {
    let trace = start_trace("qp");
    let ctx = open(LAB_DEVICE);
    let pd = ctx.alloc_pd().expect("alloc_pd");
    let cq = ctx.create_cq(16).expect("create_cq");
    let a = pd.create_rc_qp(&cq, &cq, Default::default()).expect("qp a");
    let b = pd.create_rc_qp(&cq, &cq, Default::default()).expect("qp b");
    let src = pd.register(4096, access()).expect("src MR");
    let dst = pd.register(4096, access()).expect("dst MR");
    connect(&ctx, &a, &b);
    let mut remote = dst.remote();
    remote.rkey ^= 0x5a5a_0000;
    a.post_send(
        1,
        SendOp::Write { remote, offset: 0 },
        &[Sge {
            mr: &src,
            offset: 0,
            len: 8,
        }],
    )
    .expect("post WRITE");
    let wcs = cq.poll_until(1, Duration::from_secs(10)).expect("poll");
    assert_eq!(wcs.first().map(|w| w.status), Some(WcStatus::RemAccessErr));
    let qa = a.qp_num();
    // No modify moved A to ERR: the requester did, after the NAK.
    drop(a);
    let events = trace.until("the destroy of QP a", |evs| {
        evs.iter()
            .any(|e| e["kind"] == "qp_destroy" && e["qp_num"] == qa)
    });
    assert!(
        !events.iter().any(|e| is_modify(e, qa, "RTS", "ERR")),
        "a modify to ERR that the program never made"
    );
    let d = events
        .iter()
        .find(|e| e["kind"] == "qp_destroy" && e["qp_num"] == qa)
        .unwrap();
    assert_eq!(d["from_state"], "ERR", "{d}");
    assert_eq!(d["from_driver"], true, "{d}");
}

#[test]
fn trace_mr_shows_sizes_and_latency_without_keys() {
    let trace = start_trace("mr");
    let pid = std::process::id();
    let ctx = open(LAB_DEVICE);
    let pd = ctx.alloc_pd().expect("alloc_pd");
    let size = 3 * 65536;
    let mr = pd.register(size, access()).expect("register");
    drop(mr);
    let events = trace.until("the MR's reg and dereg", |evs| {
        evs.iter()
            .any(|e| e["kind"] == "mr_dereg" && e["pid"] == pid)
    });
    let reg = events
        .iter()
        .find(|e| e["kind"] == "mr_reg" && e["pid"] == pid)
        .expect("mr_reg of this process");
    assert_eq!(reg["size"], size as u64, "{reg}");
    assert_eq!(reg["device"], LAB_DEVICE);
    assert!(reg["latency_ns"].as_u64().unwrap() > 0, "{reg}");
    let dereg = events
        .iter()
        .find(|e| e["kind"] == "mr_dereg" && e["pid"] == pid)
        .unwrap();
    assert_eq!(dereg["size"], size as u64);
}

#[test]
fn trace_qp_shows_the_sq_drained_async_event() {
    let trace = start_trace("qp");
    let ctx = open(LAB_DEVICE);
    let pd = ctx.alloc_pd().expect("alloc_pd");
    let cq = ctx.create_cq(16).expect("create_cq");
    let a = pd.create_rc_qp(&cq, &cq, Default::default()).expect("qp a");
    let b = pd.create_rc_qp(&cq, &cq, Default::default()).expect("qp b");
    connect(&ctx, &a, &b);
    // RTS -> SQD with the notify flag: the driver raises IB_EVENT_SQ_DRAINED for QP a,
    // delivered through ib_uverbs_qp_event_handler (in whatever context the driver runs).
    a.to_sqd().expect("RTS -> SQD");
    let qa = a.qp_num();
    let events = trace.until("SQ_DRAINED for QP a", |evs| {
        evs.iter()
            .any(|e| e["kind"] == "async_qp" && e["qp_num"] == qa)
    });
    assert!(events.iter().any(|e| is_modify(e, qa, "RTS", "SQD")));
    let ev = events.iter().find(|e| e["kind"] == "async_qp").unwrap();
    assert_eq!(ev["event"], "SQ_DRAINED", "{ev}");
    assert_eq!(ev["device"], LAB_DEVICE);
}

fn sh(cmd: &str) {
    let out = Command::new("sh")
        .args(["-c", cmd])
        .output()
        .expect("run sh");
    assert!(
        out.status.success(),
        "`{cmd}` failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Removes the test's own rxe device and veth pair, even when the test fails.
struct ScratchDevice;

impl Drop for ScratchDevice {
    fn drop(&mut self) {
        let _ = Command::new("sh")
            .args(["-c", "rdma link delete rxe_tr; ip link del tr0"])
            .output();
    }
}

#[test]
fn trace_all_shows_port_events_of_a_link_going_down_and_up() {
    // A device of its own (rxe_tr on a fresh veth pair) so rxe0/rxe_a/rxe_b stay untouched.
    sh("ip link add tr0 type veth peer name tr1 && ip link set tr1 up && ip link set tr0 up");
    let _cleanup = ScratchDevice;
    sh("rdma link add rxe_tr type rxe netdev tr0");
    let trace = start_trace("all");
    sh("ip link set tr0 down && sleep 0.5 && ip link set tr0 up");
    let events = trace.until("PORT_ERR and PORT_ACTIVE of rxe_tr", |evs| {
        let port = |name: &str| {
            evs.iter().any(|e| {
                e["kind"] == "async_device" && e["device"] == "rxe_tr" && e["event"] == name
            })
        };
        port("PORT_ERR") && port("PORT_ACTIVE")
    });
    let order: Vec<&str> = events
        .iter()
        .filter(|e| e["device"] == "rxe_tr" && e["kind"] == "async_device")
        .filter_map(|e| e["event"].as_str())
        .filter(|n| n.starts_with("PORT_"))
        .collect();
    assert_eq!(order.first(), Some(&"PORT_ERR"), "{order:?}");
    assert_eq!(order.last(), Some(&"PORT_ACTIVE"), "{order:?}");
    for e in events.iter().filter(|e| e["device"] == "rxe_tr") {
        assert_eq!(e["port"], 1, "{e}");
    }
}

fn wire(show_keys: bool) -> Value {
    let mut args = vec!["experiment", "run", "wire", "--json"];
    if show_keys {
        args.push("--show-keys");
    }
    let out = Command::new(rdmactl_bin())
        .args(&args)
        .output()
        .expect("run rdmactl experiment run wire");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "FAIL: rdmactl {} -> {}\n{stdout}{}",
        args.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("not JSON ({e}):\n{stdout}"))
}

#[test]
fn wire_decoder_shows_the_rkey_the_write_used() {
    // The experiment needs the veth pair's devices; fail loudly if the boot lacks them.
    open("rxe_a");
    open("rxe_b");
    let v = wire(true);
    assert_eq!(v["write_seen"], true, "{v:#}");
    let used = v["write"]["rkey"].as_u64().expect("the program's rkey");
    let write = v["packets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["reth"].is_object())
        .expect("a packet with a RETH");
    assert_eq!(write["reth"]["rkey"].as_u64(), Some(used), "{write}");
    assert_eq!(write["reth"]["va"], v["write"]["va"]);
    assert_eq!(write["opcode_name"], "RC_RDMA_WRITE_ONLY");
    assert_eq!(write["dest_qp"], v["responder"]["qp_num"]);
    assert_eq!(write["reth"]["dma_len"], v["write"]["len"]);
    assert_eq!(v["rkey_matches"], true);
    assert_eq!(v["write"]["landed"], true);
    assert!(!v["frames_hex"].as_array().unwrap().is_empty());
    // The responder acknowledged it.
    assert!(v["packets"]
        .as_array()
        .unwrap()
        .iter()
        .any(|p| p["opcode_name"] == "RC_ACKNOWLEDGE"));
}

#[test]
fn wire_decoder_masks_keys_by_default() {
    let v = wire(false);
    assert_eq!(v["write_seen"], true, "{v:#}");
    assert_eq!(v["masked"], serde_json::json!(["va", "rkey"]));
    assert_eq!(v["write"]["rkey"], "<masked>");
    let text = v.to_string();
    assert!(
        !text.contains("frames_hex"),
        "raw frames without --show-keys"
    );
    for p in v["packets"].as_array().unwrap() {
        if p["reth"].is_object() {
            assert_eq!(p["reth"]["rkey"], "<masked>");
            assert_eq!(p["reth"]["va"], "<masked>");
        }
    }
    // The comparison is still made, without showing the values.
    assert_eq!(v["rkey_matches"], true);
}

#[test]
fn rdmad_trace_collector_counts_the_qp_errors_experiments_transitions_to_err() {
    // The tracer is attached before rdmad listens: /healthz answering means it is tracing.
    let rdmad = Rdmad::start_with(
        &["--collector.trace"],
        RdmadOptions {
            startup: Duration::from_secs(60),
            ..RdmadOptions::default()
        },
    );

    let out = Command::new(rdmactl_bin())
        .args([
            "experiment",
            "run",
            "qp-errors",
            "--json",
            "--device",
            LAB_DEVICE,
        ])
        .output()
        .unwrap_or_else(|e| panic!("FAIL: cannot run {}: {e}", rdmactl_bin().display()));
    assert_eq!(
        out.status.code(),
        Some(0),
        "FAIL: experiment qp-errors\nstderr:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // The tracer thread folds events every 200 ms: allow it a few rounds.
    let series_to_err = |text: &str| -> f64 {
        let prefix = format!("rdma_trace_qp_transitions_total{{device=\"{LAB_DEVICE}\",from=\"");
        text.lines()
            .filter(|l| l.starts_with(&prefix) && l.contains(",to=\"ERR\"}"))
            .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
            .sum()
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    let scrape = loop {
        let scrape = rdmad.scrape();
        if series_to_err(&scrape.text) > 0.0 || Instant::now() > deadline {
            break scrape;
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    let text: &str = &scrape.text;
    assert_eq!(
        scrape.sample("rdma_scrape_collector_success{collector=\"trace\"}"),
        Some(1.0),
        "FAIL: the trace collector did not succeed:\n{text}"
    );
    assert!(
        series_to_err(text) > 0.0,
        "FAIL: no rdma_trace_qp_transitions_total{{device=\"{LAB_DEVICE}\",to=\"ERR\"}} > 0:\n{}",
        text.lines()
            .filter(|l| l.contains("rdma_trace"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    // The experiment registered MRs on the lab device: the size histogram has them.
    let count = scrape.sample(&format!(
        "rdma_trace_mr_reg_size_bytes_count{{device=\"{LAB_DEVICE}\"}}"
    ));
    assert!(
        count.is_some_and(|c| c >= 1.0),
        "FAIL: no MR registrations in rdma_trace_mr_reg_size_bytes_count: {count:?}"
    );
    let trace_lines: Vec<&str> = text.lines().filter(|l| l.contains("rdma_trace")).collect();
    assert!(
        trace_lines
            .iter()
            .all(|l| !l.contains("key") && !l.contains("addr")),
        "FAIL: a key or address in the trace series:\n{}",
        trace_lines.join("\n")
    );
}

#[test]
fn trace_qp_shows_the_qp_errors_experiments_transitions_with_its_pid_and_comm() {
    let trace = start_trace("qp");
    let experiment = Command::new(rdmactl_bin())
        .args(["experiment", "run", "qp-errors", "--json"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("FAIL: cannot start rdmactl experiment run qp-errors");
    let pid = experiment.id();
    let status = experiment
        .wait_with_output()
        .expect("wait for the experiment");
    assert!(status.status.success(), "qp-errors failed: {status:?}");
    let mine = |e: &Value| e["pid"] == pid;
    let into_err = |e: &Value| {
        (e["kind"] == "qp_modify" && e["to_state"] == "ERR" && e["errno"].is_null())
            || (e["kind"] == "qp_destroy" && e["from_state"] == "ERR")
    };
    let events = trace.until("the experiment's QPs reaching ERR", |evs| {
        evs.iter().any(|e| mine(e) && into_err(e))
            && evs
                .iter()
                .any(|e| mine(e) && e["kind"] == "qp_modify" && e["to_state"] == "RTS")
    });
    let ours: Vec<&Value> = events.iter().filter(|e| mine(e)).collect();
    for step in [("RESET", "INIT"), ("INIT", "RTR"), ("RTR", "RTS")] {
        assert!(
            ours.iter().any(|e| e["kind"] == "qp_modify"
                && e["from_state"] == step.0
                && e["to_state"] == step.1),
            "no {}->{} by the experiment in {ours:?}",
            step.0,
            step.1
        );
    }
    assert!(ours.iter().any(|e| into_err(e)), "no move to ERR: {ours:?}");
    for e in &ours {
        assert_eq!(e["comm"], "rdmactl", "{e}");
        assert_eq!(e["device"], LAB_DEVICE, "{e}");
    }
}

#[test]
fn trace_and_rdmad_name_the_cgroup_of_the_calling_process() {
    let cgroup = TestCgroup::new(&live_tests::cgroup::mounted_root(), "trace-live");
    let rdmad = Rdmad::start_with(
        &["--collector.trace"],
        RdmadOptions {
            startup: Duration::from_secs(60),
            ..RdmadOptions::default()
        },
    );
    let trace = start_trace("mr");
    // The shell joins the cgroup, then becomes the experiment (same pid, comm "rdmactl").
    let script = format!(
        "echo $$ > {}/cgroup.procs && exec {} experiment run qp-errors --json --device {LAB_DEVICE}",
        cgroup.dir.display(),
        rdmactl_bin().display()
    );
    let experiment = Command::new("sh")
        .args(["-c", &script])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("FAIL: cannot start sh");
    let pid = experiment.id();
    let out = experiment
        .wait_with_output()
        .expect("wait for the experiment");
    assert!(
        out.status.success(),
        "FAIL: qp-errors in the cgroup: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let events = trace.until(
        "an MR registration of the experiment with its cgroup",
        |evs| {
            evs.iter()
                .any(|e| e["pid"] == pid && e["kind"] == "mr_reg" && e["cgroup"] == "/trace-live")
        },
    );
    for e in events.iter().filter(|e| e["pid"] == pid) {
        // Read while the process ran: every event of it has the cgroup, and no pod (not
        // a Kubernetes path).
        assert_eq!(e["cgroup"], "/trace-live", "{e}");
        assert!(e.get("pod_uid").is_none(), "{e}");
    }

    // rdmad's tracer thread folds events every 200 ms: allow it a few rounds.
    let ours = |text: &str| -> f64 {
        text.lines()
            .filter(|l| {
                l.starts_with("rdma_trace_events_total{")
                    && l.contains("comm=\"rdmactl\"")
                    && l.contains("cgroup=\"/trace-live\"")
                    && l.contains("pod_uid=\"\"")
            })
            .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
            .sum()
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    let text = loop {
        let text = rdmad.scrape().text;
        if ours(&text) > 0.0 || Instant::now() > deadline {
            break text;
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    assert!(
        ours(&text) > 0.0,
        "FAIL: no rdma_trace_events_total{{comm=\"rdmactl\",cgroup=\"/trace-live\"}} > 0:\n{}",
        text.lines()
            .filter(|l| l.starts_with("rdma_trace_events_total"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

#[test]
fn trace_and_rdmad_name_the_slurm_job_of_the_calling_process() {
    let root = live_tests::cgroup::mounted_root();
    // slurmstepd's cgroup v2 layout for step 0 of job 4242, made with mkdir.
    let step = live_tests::cgroup::SlurmStepCgroup::new(&root, 4242, "0");
    let rdmad = Rdmad::start_with(
        &["--collector.trace"],
        RdmadOptions {
            startup: Duration::from_secs(60),
            ..RdmadOptions::default()
        },
    );
    let trace = start_trace("mr");
    // The shell joins the task cgroup, then becomes the experiment (same pid).
    let script = format!(
        "echo $$ > {}/cgroup.procs && exec {} experiment run qp-errors --json --device {LAB_DEVICE}",
        step.task.display(),
        rdmactl_bin().display()
    );
    let experiment = Command::new("sh")
        .args(["-c", &script])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("FAIL: cannot start sh");
    let pid = experiment.id();
    let out = experiment
        .wait_with_output()
        .expect("wait for the experiment");
    assert!(
        out.status.success(),
        "FAIL: qp-errors in the Slurm step cgroup: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let events = trace.until("an MR registration of the experiment with its job", |evs| {
        evs.iter()
            .any(|e| e["pid"] == pid && e["kind"] == "mr_reg" && e["job_id"] == "4242")
    });
    for e in events.iter().filter(|e| e["pid"] == pid) {
        assert_eq!(e["cgroup"], step.path(&root).as_str(), "{e}");
        assert_eq!(
            (&e["job_id"], &e["job_step"]),
            (&"4242".into(), &"0".into()),
            "{e}"
        );
    }
    let ours = |text: &str| -> f64 {
        text.lines()
            .filter(|l| {
                l.starts_with("rdma_trace_events_total{")
                    && l.contains("comm=\"rdmactl\"")
                    && l.contains("job_id=\"4242\"")
            })
            .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
            .sum()
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    let text = loop {
        let text = rdmad.scrape().text;
        if ours(&text) > 0.0 || Instant::now() > deadline {
            break text;
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    assert!(
        ours(&text) > 0.0,
        "FAIL: no rdma_trace_events_total{{comm=\"rdmactl\",job_id=\"4242\"}} > 0:\n{}",
        text.lines()
            .filter(|l| l.starts_with("rdma_trace_events_total"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}
