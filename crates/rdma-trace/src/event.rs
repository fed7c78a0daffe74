//! Trace events: the fixed-size record the BPF programs write into the ring buffer
//! (`struct rt_event` in `bpf/rdma_trace.bpf.c`, parsed here byte by byte, no unsafe), and
//! the typed [`TraceEvent`] every face prints or aggregates.
//!
//! Names come from the kernel's enums (`enum ib_qp_state`, `enum ib_qp_type`,
//! `enum ib_event_type`, `enum rdma_cm_event_type`) and errno values from the Linux UAPI.
//! No event carries a key (lkey/rkey) or a memory address: the record has no field for them.
use serde::Serialize;

/// Size of `struct rt_event` in bytes.
pub const RAW_EVENT_LEN: usize = 128;

/// "No state" marker of `from_state` / `to_state`.
const NO_STATE: u32 = 0xff;

/// What happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    /// A memory region was registered (`ibv_reg_mr`).
    MrReg,
    /// A memory region was deregistered.
    MrDereg,
    /// A QP was created.
    QpCreate,
    /// A QP was modified (usually a state transition).
    QpModify,
    /// A QP was destroyed.
    QpDestroy,
    /// An asynchronous QP event (fatal, path migrated, last WQE reached...).
    AsyncQp,
    /// An asynchronous CQ event (CQ error / overrun).
    AsyncCq,
    /// A device or port event (port error/active, GID change...).
    AsyncDevice,
    /// An rdma_cma tracepoint fired.
    Cma,
}

impl EventKind {
    fn from_raw(v: u32) -> Option<EventKind> {
        Some(match v {
            1 => EventKind::MrReg,
            2 => EventKind::MrDereg,
            3 => EventKind::QpCreate,
            4 => EventKind::QpModify,
            5 => EventKind::QpDestroy,
            6 => EventKind::AsyncQp,
            7 => EventKind::AsyncCq,
            8 => EventKind::AsyncDevice,
            9 => EventKind::Cma,
            _ => return None,
        })
    }

    /// Short name (`mr_reg`, `qp_modify`...).
    pub fn name(self) -> &'static str {
        match self {
            EventKind::MrReg => "mr_reg",
            EventKind::MrDereg => "mr_dereg",
            EventKind::QpCreate => "qp_create",
            EventKind::QpModify => "qp_modify",
            EventKind::QpDestroy => "qp_destroy",
            EventKind::AsyncQp => "async_qp",
            EventKind::AsyncCq => "async_cq",
            EventKind::AsyncDevice => "async_device",
            EventKind::Cma => "cma",
        }
    }

    /// The group a `trace` selection (`qp`, `mr`) matches.
    pub fn group(self) -> crate::Group {
        match self {
            EventKind::MrReg | EventKind::MrDereg => crate::Group::Mr,
            EventKind::QpCreate
            | EventKind::QpModify
            | EventKind::QpDestroy
            | EventKind::AsyncQp => crate::Group::Qp,
            EventKind::AsyncCq | EventKind::AsyncDevice => crate::Group::Async,
            EventKind::Cma => crate::Group::Cma,
        }
    }
}

/// `enum ib_qp_state` names, as `ibv_qp_state` prints them (`?` for an unknown code).
pub fn qp_state_name(state: u32) -> &'static str {
    rdma_uapi::qp_state_name(state).unwrap_or("?")
}

/// `enum ib_qp_type` names.
pub fn qp_type_name(t: u32) -> &'static str {
    match t {
        0 => "SMI",
        1 => "GSI",
        2 => "RC",
        3 => "UC",
        4 => "UD",
        5 => "RAW_IPV6",
        6 => "RAW_ETHERTYPE",
        8 => "RAW_PACKET",
        9 => "XRC_INI",
        10 => "XRC_TGT",
        _ => "OTHER",
    }
}

/// `enum ib_event_type` names.
pub fn ib_event_name(e: u32) -> &'static str {
    match e {
        0 => "CQ_ERR",
        1 => "QP_FATAL",
        2 => "QP_REQ_ERR",
        3 => "QP_ACCESS_ERR",
        4 => "COMM_EST",
        5 => "SQ_DRAINED",
        6 => "PATH_MIG",
        7 => "PATH_MIG_ERR",
        8 => "DEVICE_FATAL",
        9 => "PORT_ACTIVE",
        10 => "PORT_ERR",
        11 => "LID_CHANGE",
        12 => "PKEY_CHANGE",
        13 => "SM_CHANGE",
        14 => "SRQ_ERR",
        15 => "SRQ_LIMIT_REACHED",
        16 => "QP_LAST_WQE_REACHED",
        17 => "CLIENT_REREGISTER",
        18 => "GID_CHANGE",
        19 => "WQ_FATAL",
        _ => "UNKNOWN_EVENT",
    }
}

/// `enum rdma_cm_event_type` names.
pub fn cm_event_name(e: u32) -> &'static str {
    match e {
        0 => "ADDR_RESOLVED",
        1 => "ADDR_ERROR",
        2 => "ROUTE_RESOLVED",
        3 => "ROUTE_ERROR",
        4 => "CONNECT_REQUEST",
        5 => "CONNECT_RESPONSE",
        6 => "CONNECT_ERROR",
        7 => "UNREACHABLE",
        8 => "REJECTED",
        9 => "ESTABLISHED",
        10 => "DISCONNECTED",
        11 => "DEVICE_REMOVAL",
        12 => "MULTICAST_JOIN",
        13 => "MULTICAST_ERROR",
        14 => "ADDR_CHANGE",
        15 => "TIMEWAIT_EXIT",
        _ => "UNKNOWN_CM_EVENT",
    }
}

/// `enum ib_cm_event_type` names (the `event` of rdma_cma:cm_req_handler).
pub fn ib_cm_event_name(e: u32) -> &'static str {
    match e {
        0 => "REQ_ERROR",
        1 => "REQ_RECEIVED",
        2 => "REP_ERROR",
        3 => "REP_RECEIVED",
        4 => "RTU_RECEIVED",
        5 => "USER_ESTABLISHED",
        6 => "DREQ_ERROR",
        7 => "DREQ_RECEIVED",
        8 => "DREP_RECEIVED",
        9 => "TIMEWAIT_EXIT",
        10 => "MRA_RECEIVED",
        11 => "REJ_RECEIVED",
        12 => "LAP_ERROR",
        13 => "LAP_RECEIVED",
        14 => "APR_RECEIVED",
        15 => "SIDR_REQ_ERROR",
        16 => "SIDR_REQ_RECEIVED",
        17 => "SIDR_REP_RECEIVED",
        _ => "UNKNOWN_IB_CM_EVENT",
    }
}

/// The errno's symbol (`EINVAL`), `errno` for a number the platform does not define.
pub fn errno_name(errno: i32) -> &'static str {
    rdma_uapi::errno_name(errno).unwrap_or("errno")
}

/// One event from the control path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TraceEvent {
    /// Wall-clock time, nanoseconds since the Unix epoch (converted from CLOCK_MONOTONIC).
    pub time_unix_ns: u64,
    /// What happened.
    pub kind: EventKind,
    /// Process (thread group) id. For async events: whatever ran the handler (often a
    /// kernel worker), not the QP's owner.
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// Command name of the process (15 bytes at most, as the kernel keeps it).
    pub comm: String,
    /// RDMA device name (empty when unknown).
    pub device: String,
    /// QP number (create, modify, destroy, QP events). QP numbers are on the wire anyway.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub qp_num: Option<u32>,
    /// QP type name (create).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub qp_type: Option<&'static str>,
    /// State before a modify/destroy: the state the tracer last saw the QP put in by a
    /// create or a successful modify. A driver moving a QP to ERR on its own (after a remote
    /// access or retry error) makes no call and is not seen; `None` for QPs older than the
    /// tracer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from_state: Option<&'static str>,
    /// True when `from_state` was read from the driver's own copy of the QP (rxe), so it
    /// includes transitions the driver made by itself; false: the tracer's memory.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub from_driver: bool,
    /// Requested state of a modify (`RESET` for a create).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub to_state: Option<&'static str>,
    /// `ib_qp_attr_mask` bits of a modify.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attr_mask: Option<u32>,
    /// MR length in bytes (reg/dereg).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    /// Time from entry to return of the kernel call, in nanoseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub latency_ns: Option<u64>,
    /// Positive errno when the call failed (or the rdma_cm status was non-zero).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub errno: Option<i32>,
    /// Symbolic errno (`EINVAL`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<&'static str>,
    /// Async event name (`QP_FATAL`, `PORT_ERR`) or rdma_cm event name (`ESTABLISHED`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub event: Option<&'static str>,
    /// Port number of a port event.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub port: Option<u32>,
    /// rdma_cma tracepoint name (`cm_event_handler`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tracepoint: Option<String>,
    /// The process's cgroup path, looked up when the event was received
    /// ([`TraceEvent::resolve_owner`]; rdmad and rdmactl read `/proc/<pid>/cgroup`); `None`:
    /// not looked up, no cgroup hierarchy mounted, or the process had already exited.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cgroup: Option<String>,
    /// The Kubernetes pod UID the cgroup path names, where it follows the kubelet's layout.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod_uid: Option<String>,
    /// The Slurm job id the process's cgroups name, where they follow slurmstepd's layout.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub job_id: Option<String>,
    /// The Slurm job step (`0`, `extern`, `batch`), with [`job_id`](TraceEvent::job_id).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub job_step: Option<String>,
}

/// Why a ring buffer record was not an event.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// The record is shorter than `struct rt_event`.
    #[error("event record of {0} bytes, expected {RAW_EVENT_LEN}")]
    Short(usize),
    /// The kind field has no known value.
    #[error("unknown event kind {0}")]
    Kind(u32),
}

fn u32_at(b: &[u8], off: usize) -> u32 {
    u32::from_ne_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
}

fn u64_at(b: &[u8], off: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[off..off + 8]);
    u64::from_ne_bytes(a)
}

fn c_string(b: &[u8]) -> String {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}

fn state(v: u32) -> Option<&'static str> {
    (v != NO_STATE).then(|| qp_state_name(v))
}

/// Parse one ring buffer record. `boot_to_unix_ns` converts CLOCK_MONOTONIC to wall time
/// (see [`monotonic_to_unix_offset`]); `tracepoints` names the rdma_cma cookies.
pub fn parse_raw(
    b: &[u8],
    boot_to_unix_ns: i128,
    tracepoints: &[String],
) -> Result<TraceEvent, ParseError> {
    if b.len() < RAW_EVENT_LEN {
        return Err(ParseError::Short(b.len()));
    }
    let raw_kind = u32_at(b, 36);
    let kind = EventKind::from_raw(raw_kind).ok_or(ParseError::Kind(raw_kind))?;
    let ts = u64_at(b, 0);
    let latency = u64_at(b, 8);
    let size = u64_at(b, 16);
    let ret = u32_at(b, 32) as i32;
    let qp_num = u32_at(b, 40);
    let qp_type = u32_at(b, 44);
    let from = u32_at(b, 48);
    let to = u32_at(b, 52);
    let mask = u32_at(b, 56);
    let event_type = u32_at(b, 60);
    let port = u32_at(b, 64);
    let cookie = u32_at(b, 68);
    let flags = u32_at(b, 120);
    let errno = (ret < 0)
        .then_some(ret.saturating_neg())
        .or((kind == EventKind::Cma && ret > 0).then_some(ret));
    let is_qp = matches!(
        kind,
        EventKind::QpCreate | EventKind::QpModify | EventKind::QpDestroy | EventKind::AsyncQp
    );
    let is_mr = matches!(kind, EventKind::MrReg | EventKind::MrDereg);
    let timed = matches!(
        kind,
        EventKind::MrReg
            | EventKind::MrDereg
            | EventKind::QpCreate
            | EventKind::QpModify
            | EventKind::QpDestroy
    );
    let time = (ts as i128 + boot_to_unix_ns).max(0) as u64;
    let tracepoint = (kind == EventKind::Cma).then(|| {
        tracepoints
            .get(cookie as usize)
            .cloned()
            .unwrap_or_else(|| format!("rdma_cma#{cookie}"))
    });
    Ok(TraceEvent {
        time_unix_ns: time,
        kind,
        pid: u32_at(b, 24),
        tid: u32_at(b, 28),
        comm: c_string(&b[72..88]),
        device: c_string(&b[88..120]),
        qp_num: (is_qp && !(kind == EventKind::QpCreate && ret < 0)).then_some(qp_num),
        qp_type: (kind == EventKind::QpCreate).then(|| qp_type_name(qp_type)),
        from_state: state(from),
        from_driver: from != NO_STATE && flags & 1 != 0,
        to_state: state(to),
        attr_mask: (kind == EventKind::QpModify).then_some(mask),
        size: (is_mr && size > 0).then_some(size),
        latency_ns: timed.then_some(latency),
        errno,
        error: errno.map(errno_name),
        event: match kind {
            EventKind::AsyncQp | EventKind::AsyncCq | EventKind::AsyncDevice => {
                Some(ib_event_name(event_type))
            }
            // cm_req_handler reports the IB CM event it handles; the others rdma_cm events.
            EventKind::Cma if event_type != u32::MAX => {
                if tracepoint.as_deref() == Some("cm_req_handler") {
                    Some(ib_cm_event_name(event_type))
                } else {
                    Some(cm_event_name(event_type))
                }
            }
            _ => None,
        },
        port: (kind == EventKind::AsyncDevice).then_some(port),
        tracepoint,
        cgroup: None,
        pod_uid: None,
        job_id: None,
        job_step: None,
    })
}

/// Nanoseconds to add to a CLOCK_MONOTONIC timestamp to get Unix time.
pub fn monotonic_to_unix_offset() -> i128 {
    use nix::time::{clock_gettime, ClockId};
    let mono = clock_gettime(ClockId::CLOCK_MONOTONIC)
        .map(|t| t.tv_sec() as i128 * 1_000_000_000 + t.tv_nsec() as i128)
        .unwrap_or(0);
    let unix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i128)
        .unwrap_or(0);
    unix - mono
}

/// `HH:MM:SS.micros` (UTC) of a Unix time in nanoseconds.
pub fn clock_time(unix_ns: u64) -> String {
    let secs = unix_ns / 1_000_000_000;
    let micros = (unix_ns % 1_000_000_000) / 1000;
    let day = secs % 86_400;
    format!(
        "{:02}:{:02}:{:02}.{:06}",
        day / 3600,
        (day / 60) % 60,
        day % 60,
        micros
    )
}

impl TraceEvent {
    /// What happened, in words: `qp 17 RESET->INIT`, `mr reg 4096 B 35.2us`,
    /// `qp 17 modify RTR->RTS failed: EINVAL (22)`.
    pub fn what(&self) -> String {
        let from = self.from_state.unwrap_or("?");
        let qpn = self.qp_num.map(|n| n.to_string()).unwrap_or_default();
        let mut s = match self.kind {
            EventKind::MrReg => format!("mr reg {}", bytes(self.size)),
            EventKind::MrDereg => format!("mr dereg {}", bytes(self.size)),
            EventKind::QpCreate => match self.qp_num {
                Some(n) => format!("qp {n} create {}", self.qp_type.unwrap_or("?")),
                None => format!("qp create {}", self.qp_type.unwrap_or("?")),
            },
            EventKind::QpModify => match self.to_state {
                Some(to) if self.errno.is_some() => format!("qp {qpn} modify {from}->{to}"),
                Some(to) => format!("qp {qpn} {from}->{to}"),
                None => format!("qp {qpn} modify (no state change)"),
            },
            EventKind::QpDestroy if self.from_driver => format!("qp {qpn} destroy (was {from})"),
            EventKind::QpDestroy => format!("qp {qpn} destroy (last set {from})"),
            EventKind::AsyncQp => format!("event {} qp {qpn}", self.event.unwrap_or("?")),
            EventKind::AsyncCq => format!("event {}", self.event.unwrap_or("?")),
            EventKind::AsyncDevice => format!(
                "event {} port {}",
                self.event.unwrap_or("?"),
                self.port.unwrap_or(0)
            ),
            EventKind::Cma => {
                let tp = self.tracepoint.as_deref().unwrap_or("rdma_cma");
                match self.event {
                    Some(ev) => format!("cma {tp} {ev}"),
                    None => format!("cma {tp}"),
                }
            }
        };
        if let Some(ns) = self.latency_ns.filter(|_| self.errno.is_none()) {
            s.push_str(&format!(" {:.1}us", ns as f64 / 1000.0));
        }
        if let Some(e) = self.errno {
            let word = if self.kind == EventKind::Cma {
                "status"
            } else {
                "failed:"
            };
            s.push_str(&format!(" {word} {} ({e})", errno_name(e)));
        }
        s
    }

    /// One gadget line: time, pid, comm, device, what.
    pub fn line(&self) -> String {
        format!(
            "{} {:>7} {:<15} {:<10} {}",
            clock_time(self.time_unix_ns),
            self.pid,
            self.comm,
            if self.device.is_empty() {
                "-"
            } else {
                &self.device
            },
            self.what()
        )
    }
}

fn bytes(size: Option<u64>) -> String {
    match size {
        Some(n) => format!("{n} B"),
        None => "? B".into(),
    }
}

/// Build a raw record (for tests and fixtures): the inverse of [`parse_raw`].
#[derive(Debug, Clone, Default)]
pub struct RawEventBuilder {
    /// Field values in `struct rt_event` order.
    pub ts_ns: u64,
    /// Entry-to-return nanoseconds.
    pub latency_ns: u64,
    /// MR size.
    pub size: u64,
    /// Thread group id.
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// 0 or -errno.
    pub ret: i32,
    /// `enum rt_kind`.
    pub kind: u32,
    /// QP number.
    pub qp_num: u32,
    /// `enum ib_qp_type`.
    pub qp_type: u32,
    /// From-state (0xff none).
    pub from_state: u32,
    /// To-state (0xff none).
    pub to_state: u32,
    /// Modify mask.
    pub attr_mask: u32,
    /// Event type.
    pub event_type: u32,
    /// Port.
    pub port: u32,
    /// Tracepoint index.
    pub cookie: u32,
    /// Command name.
    pub comm: String,
    /// Device name.
    pub dev: String,
    /// Bit 0: from_state read from the driver.
    pub flags: u32,
}

impl RawEventBuilder {
    /// The record's bytes.
    pub fn bytes(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(RAW_EVENT_LEN);
        for v in [self.ts_ns, self.latency_ns, self.size] {
            b.extend_from_slice(&v.to_ne_bytes());
        }
        for v in [
            self.pid,
            self.tid,
            self.ret as u32,
            self.kind,
            self.qp_num,
            self.qp_type,
            self.from_state,
            self.to_state,
            self.attr_mask,
            self.event_type,
            self.port,
            self.cookie,
        ] {
            b.extend_from_slice(&v.to_ne_bytes());
        }
        let mut comm = [0u8; 16];
        let n = self.comm.len().min(15);
        comm[..n].copy_from_slice(&self.comm.as_bytes()[..n]);
        b.extend_from_slice(&comm);
        let mut dev = [0u8; 32];
        let n = self.dev.len().min(31);
        dev[..n].copy_from_slice(&self.dev.as_bytes()[..n]);
        b.extend_from_slice(&dev);
        b.extend_from_slice(&self.flags.to_ne_bytes());
        b.extend_from_slice(&0u32.to_ne_bytes());
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn modify(from: u32, to: u32, ret: i32) -> Vec<u8> {
        RawEventBuilder {
            ts_ns: 5_000_000_000,
            latency_ns: 12_345,
            pid: 4242,
            tid: 4243,
            ret,
            kind: 4,
            qp_num: 17,
            from_state: from,
            to_state: to,
            attr_mask: 1,
            comm: "qp-errors".into(),
            dev: "rxe0".into(),
            ..Default::default()
        }
        .bytes()
    }

    #[test]
    fn record_size_matches_the_c_struct() {
        assert_eq!(RawEventBuilder::default().bytes().len(), RAW_EVENT_LEN);
    }

    #[test]
    fn modify_to_error_parses_and_prints_from_to() {
        let ev = parse_raw(&modify(3, 6, 0), 0, &[]).unwrap();
        assert_eq!(ev.kind, EventKind::QpModify);
        assert_eq!((ev.pid, ev.tid), (4242, 4243));
        assert_eq!(ev.comm, "qp-errors");
        assert_eq!(ev.device, "rxe0");
        assert_eq!(ev.qp_num, Some(17));
        assert_eq!(ev.from_state, Some("RTS"));
        assert_eq!(ev.to_state, Some("ERR"));
        assert_eq!(ev.errno, None);
        assert_eq!(ev.what(), "qp 17 RTS->ERR 12.3us");
        assert!(ev
            .line()
            .ends_with("4242 qp-errors       rxe0       qp 17 RTS->ERR 12.3us"));
    }

    #[test]
    fn destroy_says_where_the_state_came_from() {
        let mut raw = RawEventBuilder {
            kind: 5,
            qp_num: 9,
            from_state: 6,
            to_state: 0xff,
            ..Default::default()
        };
        let remembered = parse_raw(&raw.bytes(), 0, &[]).unwrap();
        assert!(!remembered.from_driver);
        assert!(remembered.what().starts_with("qp 9 destroy (last set ERR)"));
        raw.flags = 1;
        let read = parse_raw(&raw.bytes(), 0, &[]).unwrap();
        assert!(read.from_driver);
        assert!(read.what().starts_with("qp 9 destroy (was ERR)"));
        assert_eq!(serde_json::to_value(&read).unwrap()["from_driver"], true);
        assert!(serde_json::to_value(&remembered).unwrap()["from_driver"].is_null());
    }

    #[test]
    fn failed_modify_carries_errno() {
        let ev = parse_raw(&modify(0, 3, -22), 0, &[]).unwrap();
        assert_eq!(ev.errno, Some(22));
        assert_eq!(ev.error, Some("EINVAL"));
        assert_eq!(ev.what(), "qp 17 modify RESET->RTS failed: EINVAL (22)");
        let json = serde_json::to_value(&ev).unwrap();
        assert_eq!(json["kind"], "qp_modify");
        assert_eq!(json["from_state"], "RESET");
        assert_eq!(json["to_state"], "RTS");
        assert_eq!(json["errno"], 22);
    }

    #[test]
    fn unknown_from_state_prints_a_question_mark() {
        let ev = parse_raw(&modify(0xff, 1, 0), 0, &[]).unwrap();
        assert_eq!(ev.from_state, None);
        assert_eq!(ev.what(), "qp 17 ?->INIT 12.3us");
    }

    #[test]
    fn mr_registration_has_size_and_latency_but_no_key_fields() {
        let raw = RawEventBuilder {
            kind: 1,
            size: 4096,
            latency_ns: 35_200,
            comm: "ib_write_bw".into(),
            dev: "rxe0".into(),
            from_state: 0xff,
            to_state: 0xff,
            ..Default::default()
        }
        .bytes();
        let ev = parse_raw(&raw, 0, &[]).unwrap();
        assert_eq!(ev.size, Some(4096));
        assert_eq!(ev.what(), "mr reg 4096 B 35.2us");
        let json = serde_json::to_string(&ev).unwrap();
        for secret in ["key", "addr", "iova", "va\""] {
            assert!(!json.contains(secret), "{secret} in {json}");
        }
    }

    #[test]
    fn cma_event_names_the_tracepoint_and_event() {
        let raw = RawEventBuilder {
            kind: 9,
            cookie: 1,
            event_type: 9,
            from_state: 0xff,
            to_state: 0xff,
            ..Default::default()
        }
        .bytes();
        let tps = vec!["cm_send_req".to_string(), "cm_event_handler".to_string()];
        let ev = parse_raw(&raw, 0, &tps).unwrap();
        assert_eq!(ev.tracepoint.as_deref(), Some("cm_event_handler"));
        assert_eq!(ev.event, Some("ESTABLISHED"));
        assert_eq!(ev.what(), "cma cm_event_handler ESTABLISHED");
        let req = RawEventBuilder {
            kind: 9,
            cookie: 0,
            event_type: 1,
            from_state: 0xff,
            to_state: 0xff,
            ..Default::default()
        }
        .bytes();
        let tps = vec!["cm_req_handler".to_string()];
        assert_eq!(
            parse_raw(&req, 0, &tps).unwrap().event,
            Some("REQ_RECEIVED")
        );
    }

    #[test]
    fn port_event_and_bad_records() {
        let raw = RawEventBuilder {
            kind: 8,
            event_type: 10,
            port: 1,
            from_state: 0xff,
            to_state: 0xff,
            dev: "rxe0".into(),
            ..Default::default()
        }
        .bytes();
        assert_eq!(
            parse_raw(&raw, 0, &[]).unwrap().what(),
            "event PORT_ERR port 1"
        );
        assert_eq!(parse_raw(&raw[..50], 0, &[]), Err(ParseError::Short(50)));
        let bad = RawEventBuilder {
            kind: 77,
            ..Default::default()
        }
        .bytes();
        assert_eq!(parse_raw(&bad, 0, &[]), Err(ParseError::Kind(77)));
    }

    #[test]
    fn wall_clock_conversion() {
        // 1 s after boot, booted at 2026-11-30 03:00:00 UTC.
        let boot = 1_795_910_400i128 * 1_000_000_000 + 3 * 3600 * 1_000_000_000;
        let raw = modify(0, 1, 0);
        let ev = parse_raw(&raw, boot, &[]).unwrap();
        assert_eq!(clock_time(ev.time_unix_ns), "03:00:05.000000");
    }
}
