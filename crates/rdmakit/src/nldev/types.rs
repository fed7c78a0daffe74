//! What the nldev parsers produce: devices, ports, counters, the resource summary, resources
//! (QP, CQ, MR, PD, CM ID, context, SRQ) and device events, plus [`Secret`], the wrapper that
//! keeps keys and addresses (RKEY, LKEY, IOVA, ...) out of every Debug and JSON output.
//!
//! Field names are the JSON contract of `rdmactl resources --json` and `rdmactl monitor --json`.
//! Kernel enumerations are kept as numbers with the names iproute2 prints (`RC`, `RTS`).

use serde::{Serialize, Serializer};
use std::fmt;

/// A value that must not leak into logs or JSON (memory keys, addresses). Debug, Display and
/// Serialize print `<hidden>`; [`Secret::reveal`] is the only way to the value.
#[derive(Clone, Copy, PartialEq, Eq, Default)]
pub struct Secret<T>(T);

impl<T> Secret<T> {
    /// Wrap a value.
    pub fn new(value: T) -> Secret<T> {
        Secret(value)
    }

    /// The hidden value. Call sites say explicitly that they reveal it.
    pub fn reveal(&self) -> &T {
        &self.0
    }
}

impl<T> fmt::Debug for Secret<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<hidden>")
    }
}

impl<T> fmt::Display for Secret<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<hidden>")
    }
}

impl<T> Serialize for Secret<T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str("<hidden>")
    }
}

// Kernel enumerations with the names iproute2 prints (rdma-uapi's `code_names!`).
crate::uapi::code_names! {
    /// QP type (`RES_TYPE`): `RC`, `UD`, `GSI`, ...
    pub struct QpType(u8) else "UNKNOWN" {
        0 => "SMI", 1 => "GSI", 2 => "RC", 3 => "UC", 4 => "UD", 5 => "RAW_IPV6",
        6 => "RAW_ETHERTYPE", 8 => "RAW_PACKET", 9 => "XRC_INI", 10 => "XRC_TGT", 0xff => "DRIVER",
    }
}
crate::uapi::code_names! {
    /// QP state (`RES_STATE` on QPs): `RESET` .. `ERR`.
    pub struct QpState(u8) else "UNKNOWN" =
        |code: u8| crate::uapi::qp_state_name(code.into());
}
crate::uapi::code_names! {
    /// Path migration state.
    pub struct PathMigState(u8) else "UNKNOWN" { 0 => "MIGRATED", 1 => "REARM", 2 => "ARMED" }
}
crate::uapi::code_names! {
    /// RDMA CM identifier state (`RES_STATE` on CM IDs).
    pub struct CmState(u8) else "UNKNOWN" {
        0 => "IDLE", 1 => "ADDR_QUERY", 2 => "ADDR_RESOLVED", 3 => "ROUTE_QUERY",
        4 => "ROUTE_RESOLVED", 5 => "CONNECT", 6 => "DISCONNECT", 7 => "ADDR_BOUND",
        8 => "LISTEN", 9 => "DEVICE_REMOVAL", 10 => "DESTROYING",
    }
}
crate::uapi::code_names! {
    /// CQ poll context.
    pub struct PollCtx(u8) else "UNKNOWN" {
        0 => "DIRECT", 1 => "SOFTIRQ", 2 => "WORKQUEUE", 3 => "UNBOUND_WORKQUEUE",
    }
}
crate::uapi::code_names! {
    /// Node type (`DEV_NODE_TYPE`), iproute2 spelling.
    pub struct NodeType(u8) else "unknown" {
        1 => "ca", 2 => "switch", 3 => "router", 4 => "rnic", 5 => "usnic", 6 => "usnic_udp",
        7 => "unspecified",
    }
}
crate::uapi::code_names! {
    /// Logical port state.
    pub struct PortState(u8) else "UNKNOWN" =
        |code: u8| crate::uapi::port_state_name(code.into());
}
crate::uapi::code_names! {
    /// Physical port state.
    pub struct PhysState(u8) else "UNKNOWN" =
        |code: u8| crate::uapi::phys_state_name(code.into());
}

/// Format a host-order GUID the way the kernel and iproute2 print it (`5054:00ff:fe12:3456`).
pub fn format_guid(guid: u64) -> String {
    format!(
        "{:04x}:{:04x}:{:04x}:{:04x}",
        (guid >> 48) & 0xffff,
        (guid >> 32) & 0xffff,
        (guid >> 16) & 0xffff,
        guid & 0xffff
    )
}

fn guid_opt<S: Serializer>(guid: &Option<u64>, s: S) -> Result<S::Ok, S::Error> {
    match guid {
        Some(g) => s.serialize_str(&format_guid(*g)),
        None => s.serialize_none(),
    }
}

/// One device from `GET` (`rdma dev show`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct NlDevice {
    /// Kernel device index.
    pub index: u32,
    /// Device name.
    pub name: String,
    /// Number of ports (`PORT_INDEX` in a `GET` answer).
    pub port_count: Option<u32>,
    /// Capability flags.
    pub cap_flags: Option<u64>,
    /// Firmware version (absent or empty on rxe).
    pub fw_version: Option<String>,
    /// Node GUID.
    #[serde(serialize_with = "guid_opt")]
    pub node_guid: Option<u64>,
    /// System image GUID.
    #[serde(serialize_with = "guid_opt")]
    pub sys_image_guid: Option<u64>,
    /// Node type.
    pub node_type: Option<NodeType>,
    /// Adaptive CQ moderation on (1) or off (0).
    pub dim: Option<u8>,
    /// Protocol (`roce`, `ib`, `iw`).
    pub protocol: Option<String>,
}

/// One port from `PORT_GET` (`rdma link show`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct NlPort {
    /// Device index.
    pub dev_index: u32,
    /// Device name.
    pub dev_name: String,
    /// Port number.
    pub port: u32,
    /// Port capability flags.
    pub cap_flags: Option<u64>,
    /// Subnet prefix.
    pub subnet_prefix: Option<u64>,
    /// LID (InfiniBand).
    pub lid: Option<u32>,
    /// SM LID.
    pub sm_lid: Option<u32>,
    /// LMC.
    pub lmc: Option<u8>,
    /// Logical state.
    pub state: Option<PortState>,
    /// Physical state.
    pub phys_state: Option<PhysState>,
    /// Attached netdev index.
    pub netdev_index: Option<u32>,
    /// Attached netdev name.
    pub netdev: Option<String>,
}

/// One hardware counter.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HwCounter {
    /// Counter name as the driver names it.
    pub name: String,
    /// Value (absent in `STAT_GET_STATUS` answers, which list names only).
    pub value: Option<u64>,
    /// Index in the driver's counter table (`STAT_HWCOUNTER_INDEX`), when sent.
    pub index: Option<u32>,
    /// For optional counters: enabled (`Some(true)`) or disabled; `None` for mandatory ones.
    pub enabled: Option<bool>,
}

/// The hardware counters of one port (`STAT_GET`) or its optional counters (`STAT_GET_STATUS`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PortHwCounters {
    /// Device index.
    pub dev_index: u32,
    /// Device name.
    pub dev_name: String,
    /// Port.
    pub port: u32,
    /// Counters in kernel order.
    pub counters: Vec<HwCounter>,
}

impl PortHwCounters {
    /// The counter called `name`.
    pub fn get(&self, name: &str) -> Option<&HwCounter> {
        self.counters.iter().find(|c| c.name == name)
    }
}

/// The QP counter mode of a port (`STAT_GET` with `STAT_RES` = QP and `STAT_MODE`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct QpCounterMode {
    /// Device index.
    pub dev_index: u32,
    /// Device name.
    pub dev_name: String,
    /// Port.
    pub port: u32,
    /// 0 none, 1 auto, 2 manual.
    pub mode: u32,
    /// Auto mode criteria (1 QP type, 2 PID), present in auto mode.
    pub auto_mode_mask: Option<u32>,
}

/// One bound QP counter (`STAT_GET` dump with `STAT_RES` = QP).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BoundCounter {
    /// Device index.
    pub dev_index: u32,
    /// Device name.
    pub dev_name: String,
    /// Port.
    pub port: Option<u32>,
    /// Counter id (`cntn`).
    pub counter_id: u32,
    /// QP type criterion.
    pub qp_type: Option<QpType>,
    /// Owner pid.
    pub pid: Option<u32>,
    /// Kernel owner name.
    pub kern_name: Option<String>,
    /// Counters.
    pub counters: Vec<HwCounter>,
    /// Bound QP numbers.
    pub lqpns: Vec<u32>,
}

fn ordered_counts<S: Serializer>(counts: &[(String, u64)], s: S) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeMap;
    let mut map = s.serialize_map(Some(counts.len()))?;
    for (name, count) in counts {
        map.serialize_entry(name, count)?;
    }
    map.end()
}

/// Resource counts of one device (`RES_GET`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ResourceSummary {
    /// Device index.
    pub dev_index: u32,
    /// Device name.
    pub dev_name: String,
    /// `(name, count)` in kernel order: pd, cq, qp, cm_id, mr, ctx, srq (a JSON object).
    #[serde(serialize_with = "ordered_counts")]
    pub counts: Vec<(String, u64)>,
}

impl ResourceSummary {
    /// The count of `name` (`qp`, `cq`, ...).
    pub fn count(&self, name: &str) -> Option<u64> {
        self.counts.iter().find(|(n, _)| n == name).map(|(_, c)| *c)
    }
}

/// Resource kinds with a dump command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ResourceKind {
    /// Queue pairs.
    Qp,
    /// Completion queues.
    Cq,
    /// Memory regions.
    Mr,
    /// Protection domains.
    Pd,
    /// RDMA CM identifiers.
    CmId,
    /// User contexts.
    Ctx,
    /// Shared receive queues.
    Srq,
}

impl ResourceKind {
    /// Every kind, in `rdma res show` order.
    pub const ALL: [ResourceKind; 7] = [
        ResourceKind::Qp,
        ResourceKind::CmId,
        ResourceKind::Cq,
        ResourceKind::Mr,
        ResourceKind::Pd,
        ResourceKind::Ctx,
        ResourceKind::Srq,
    ];

    /// The dump command.
    pub fn command(self) -> u8 {
        use super::ids::cmd;
        match self {
            ResourceKind::Qp => cmd::RES_QP_GET,
            ResourceKind::Cq => cmd::RES_CQ_GET,
            ResourceKind::Mr => cmd::RES_MR_GET,
            ResourceKind::Pd => cmd::RES_PD_GET,
            ResourceKind::CmId => cmd::RES_CM_ID_GET,
            ResourceKind::Ctx => cmd::RES_CTX_GET,
            ResourceKind::Srq => cmd::RES_SRQ_GET,
        }
    }

    /// (table attribute, entry attribute) of the dump answer.
    pub fn table_attrs(self) -> (u16, u16) {
        use super::ids::attr as a;
        match self {
            ResourceKind::Qp => (a::RES_QP, a::RES_QP_ENTRY),
            ResourceKind::Cq => (a::RES_CQ, a::RES_CQ_ENTRY),
            ResourceKind::Mr => (a::RES_MR, a::RES_MR_ENTRY),
            ResourceKind::Pd => (a::RES_PD, a::RES_PD_ENTRY),
            ResourceKind::CmId => (a::RES_CM_ID, a::RES_CM_ID_ENTRY),
            ResourceKind::Ctx => (a::RES_CTX, a::RES_CTX_ENTRY),
            ResourceKind::Srq => (a::RES_SRQ, a::RES_SRQ_ENTRY),
        }
    }

    /// The name `rdma res show` uses (`qp`, `cm_id`, ...).
    pub fn name(self) -> &'static str {
        match self {
            ResourceKind::Qp => "qp",
            ResourceKind::Cq => "cq",
            ResourceKind::Mr => "mr",
            ResourceKind::Pd => "pd",
            ResourceKind::CmId => "cm_id",
            ResourceKind::Ctx => "ctx",
            ResourceKind::Srq => "srq",
        }
    }
}

/// Who owns a resource: a user process (pid, comm from /proc) or a kernel module.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct Owner {
    /// Owner pid (user objects).
    pub pid: Option<u32>,
    /// Kernel owner (`ib_core`, `rdma_cm`), kernel objects only.
    pub kern_name: Option<String>,
    /// Process name: `kern_name` for kernel objects, `/proc/<pid>/comm` for user ones (filled
    /// by the client; `None` when the process is gone or the bytes came from a capture).
    pub comm: Option<String>,
}

/// One queue pair (`RES_QP_GET`, `rdma res show qp`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Qp {
    /// Device index.
    pub dev_index: u32,
    /// Device name.
    pub dev_name: String,
    /// Port (absent before the QP is bound to a port, e.g. in RESET).
    pub port: Option<u32>,
    /// Local QP number.
    pub lqpn: u32,
    /// Remote QP number (RC/UC once connected).
    pub rqpn: Option<u32>,
    /// QP type.
    pub qp_type: QpType,
    /// QP state.
    pub state: QpState,
    /// Receive queue PSN.
    pub rq_psn: Option<u32>,
    /// Send queue PSN.
    pub sq_psn: u32,
    /// Path migration state.
    pub path_mig_state: Option<PathMigState>,
    /// PD number.
    pub pdn: Option<u32>,
    /// Owner.
    #[serde(flatten)]
    pub owner: Owner,
}

/// One completion queue (`RES_CQ_GET`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Cq {
    /// Device index.
    pub dev_index: u32,
    /// Device name.
    pub dev_name: String,
    /// CQ number.
    pub cqn: Option<u32>,
    /// Size in entries.
    pub cqe: u32,
    /// Users (QPs, SRQs) of the CQ.
    pub users: u64,
    /// Poll context (kernel CQs).
    pub poll_ctx: Option<PollCtx>,
    /// Adaptive moderation.
    pub dim: Option<u8>,
    /// Context number.
    pub ctxn: Option<u32>,
    /// Owner.
    #[serde(flatten)]
    pub owner: Owner,
}

/// One memory region (`RES_MR_GET`). Keys and the address are [`Secret`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Mr {
    /// Device index.
    pub dev_index: u32,
    /// Device name.
    pub dev_name: String,
    /// MR number.
    pub mrn: Option<u32>,
    /// Remote key (secret).
    pub rkey: Option<Secret<u32>>,
    /// Local key (secret).
    pub lkey: Option<Secret<u32>>,
    /// I/O virtual address (secret).
    pub iova: Option<Secret<u64>>,
    /// Length in bytes.
    pub mrlen: u64,
    /// PD number.
    pub pdn: Option<u32>,
    /// Owner.
    #[serde(flatten)]
    pub owner: Owner,
}

/// One protection domain (`RES_PD_GET`). Keys are [`Secret`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Pd {
    /// Device index.
    pub dev_index: u32,
    /// Device name.
    pub dev_name: String,
    /// PD number.
    pub pdn: Option<u32>,
    /// Local DMA lkey (secret).
    pub local_dma_lkey: Option<Secret<u32>>,
    /// Unsafe global rkey (secret; present only when one exists).
    pub unsafe_global_rkey: Option<Secret<u32>>,
    /// Users of the PD.
    pub users: u64,
    /// Context number.
    pub ctxn: Option<u32>,
    /// Owner.
    #[serde(flatten)]
    pub owner: Owner,
}

/// One RDMA CM identifier (`RES_CM_ID_GET`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct CmId {
    /// Device index.
    pub dev_index: u32,
    /// Device name.
    pub dev_name: String,
    /// Port.
    pub port: Option<u32>,
    /// CM ID number.
    pub cm_idn: Option<u32>,
    /// QP number (when a QP is attached).
    pub lqpn: Option<u32>,
    /// QP type.
    pub qp_type: Option<QpType>,
    /// Port space (`TCP` 0x106, `UDP` 0x111, `IPOIB` 0x2, `IB` 0x3f).
    pub ps: u32,
    /// CM state.
    pub state: CmState,
    /// Source address.
    pub src_addr: Option<std::net::SocketAddr>,
    /// Destination address.
    pub dst_addr: Option<std::net::SocketAddr>,
    /// Owner.
    #[serde(flatten)]
    pub owner: Owner,
}

/// One user context (`RES_CTX_GET`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Context {
    /// Device index.
    pub dev_index: u32,
    /// Device name.
    pub dev_name: String,
    /// Context number.
    pub ctxn: u32,
    /// Owner.
    #[serde(flatten)]
    pub owner: Owner,
}

/// A range of QP numbers attached to an SRQ (`[min, max]`, equal for one QP).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct QpnRange {
    /// First QP number.
    pub min: u32,
    /// Last QP number.
    pub max: u32,
}

/// One shared receive queue (`RES_SRQ_GET`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Srq {
    /// Device index.
    pub dev_index: u32,
    /// Device name.
    pub dev_name: String,
    /// SRQ number.
    pub srqn: u32,
    /// SRQ type (0 basic, 1 XRC, 2 tag matching).
    pub srq_type: Option<u8>,
    /// PD number.
    pub pdn: Option<u32>,
    /// CQ number.
    pub cqn: Option<u32>,
    /// QPs using the SRQ.
    pub qps: Vec<QpnRange>,
    /// Owner.
    #[serde(flatten)]
    pub owner: Owner,
}

/// One resource of any kind, tagged by kind in JSON.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Resource {
    /// A queue pair.
    Qp(Qp),
    /// A completion queue.
    Cq(Cq),
    /// A memory region.
    Mr(Mr),
    /// A protection domain.
    Pd(Pd),
    /// A CM identifier.
    CmId(CmId),
    /// A user context.
    Ctx(Context),
    /// A shared receive queue.
    Srq(Srq),
}

impl Resource {
    /// The owner of the resource.
    pub fn owner(&self) -> &Owner {
        match self {
            Resource::Qp(r) => &r.owner,
            Resource::Cq(r) => &r.owner,
            Resource::Mr(r) => &r.owner,
            Resource::Pd(r) => &r.owner,
            Resource::CmId(r) => &r.owner,
            Resource::Ctx(r) => &r.owner,
            Resource::Srq(r) => &r.owner,
        }
    }

    /// The owner, mutable (the client fills `comm`).
    pub fn owner_mut(&mut self) -> &mut Owner {
        match self {
            Resource::Qp(r) => &mut r.owner,
            Resource::Cq(r) => &mut r.owner,
            Resource::Mr(r) => &mut r.owner,
            Resource::Pd(r) => &mut r.owner,
            Resource::CmId(r) => &mut r.owner,
            Resource::Ctx(r) => &mut r.owner,
            Resource::Srq(r) => &mut r.owner,
        }
    }
}

/// Kinds of device events (`enum rdma_nl_notify_event_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum EventKind {
    /// A device appeared (`[REGISTER]`).
    Register,
    /// A device went away (`[UNREGISTER]`).
    Unregister,
    /// A netdev was attached to a port.
    NetdevAttach,
    /// A netdev was detached from a port.
    NetdevDetach,
    /// A device was renamed.
    Rename,
    /// An attached netdev was renamed.
    NetdevRename,
    /// A kind this crate does not know.
    Other(u8),
}

impl EventKind {
    /// From the kernel's `EVENT_TYPE` value.
    pub fn from_u8(value: u8) -> EventKind {
        match value {
            0 => EventKind::Register,
            1 => EventKind::Unregister,
            2 => EventKind::NetdevAttach,
            3 => EventKind::NetdevDetach,
            4 => EventKind::Rename,
            5 => EventKind::NetdevRename,
            other => EventKind::Other(other),
        }
    }

    /// The name `rdma monitor` prints, without brackets (`REGISTER`).
    pub fn name(self) -> String {
        match self {
            EventKind::Register => "REGISTER".into(),
            EventKind::Unregister => "UNREGISTER".into(),
            EventKind::NetdevAttach => "NETDEV_ATTACH".into(),
            EventKind::NetdevDetach => "NETDEV_DETACH".into(),
            EventKind::Rename => "RENAME".into(),
            EventKind::NetdevRename => "NETDEV_RENAME".into(),
            EventKind::Other(v) => format!("EVENT_{v}"),
        }
    }
}

/// Where an event came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EventSource {
    /// A kernel notification on `RDMA_NL_GROUP_NOTIFY`.
    Kernel,
    /// A difference between two device/port dumps (kernels without notifications, like 6.1).
    Poll,
}

/// One device or link event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Event {
    /// What happened.
    pub kind: EventKind,
    /// Device index.
    pub dev_index: Option<u32>,
    /// Device name.
    pub dev_name: Option<String>,
    /// Port (netdev events).
    pub port: Option<u32>,
    /// Netdev index (netdev events).
    pub netdev_index: Option<u32>,
    /// Netdev name (netdev events).
    pub netdev: Option<String>,
    /// How it was observed.
    pub source: EventSource,
}
