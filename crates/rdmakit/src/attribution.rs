//! Who holds RDMA objects: the nldev QP, CQ, MR, PD, context and CM ID dumps tallied per
//! owner (command name, cgroup, pod, container, Slurm job and step; the pid only when asked
//! for).
//!
//! A [`Tally`] takes dump messages one at a time ([`Tally::add_message`]) as the socket
//! delivers them ([`Tally::dump`] drives [`NldevClient::request_each`]), so a dump of any size
//! is never held whole: only one receive buffer and the per-owner counts live at once. Each
//! pid is described once per tally from `<proc>/<pid>/{comm,cgroup}` ([`crate::owner`]).
//!
//! - Objects without a pid (kernel ULPs, the GSI QP) belong to the owner `kernel`.
//! - An object whose process is gone before its /proc entry was read belongs to `unknown`.
//! - Past `max_objects` objects in one dump (one device, one kind), the rest are counted,
//!   not read: [`OwnerReport::unread`] says how many per device and kind.
//! - [`Tally::finish`] keeps the `max_owners` owners holding the most objects and folds the
//!   others into the owner `other` per device, counted in [`OwnerReport::folded_owners`].

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::time::Instant;

use crate::nldev::{
    parse, NlDevice, NldevClient, NldevError, NldevMessage, Request, Resource, ResourceKind,
};
use crate::owner::{read_owner, OwnerError};

/// The kinds tallied per owner, in export order (SRQs are counted by the summary only).
pub const KINDS: [ResourceKind; 6] = [
    ResourceKind::Qp,
    ResourceKind::Cq,
    ResourceKind::Mr,
    ResourceKind::Pd,
    ResourceKind::Ctx,
    ResourceKind::CmId,
];

/// The owner name of objects the kernel holds (no pid).
pub const KERNEL: &str = "kernel";
/// The owner name of objects whose process exited before it could be described.
pub const UNKNOWN: &str = "unknown";
/// The owner name the owners beyond the cap are folded into.
pub const OTHER: &str = "other";

/// The name of rdmad's family of QPs per owner, state and type (declared by its
/// `netlink_owners` collector with this constant; `rdmactl top` reads it back).
pub const OWNER_QPS_METRIC: &str = "rdma_owner_qps";

/// One owner, as labels: empty strings where a fact is unknown or does not apply.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Default, serde::Serialize)]
pub struct OwnerKey {
    /// Command name, or [`KERNEL`], [`UNKNOWN`], [`OTHER`].
    pub comm: String,
    /// The cgroup path ("" when none).
    pub cgroup: String,
    /// The pod UID ("" outside Kubernetes).
    pub pod_uid: String,
    /// The container id ("" outside a container).
    pub container_id: String,
    /// The Slurm job id ("" outside a Slurm job).
    pub job_id: String,
    /// The Slurm job step (`0`, `extern`, `batch`; "" outside a Slurm job).
    pub job_step: String,
    /// The pid, only when the tally keeps pids.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
}

impl OwnerKey {
    fn named(comm: &str) -> OwnerKey {
        OwnerKey {
            comm: comm.to_string(),
            ..OwnerKey::default()
        }
    }
}

/// What one owner holds on one device.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize)]
pub struct Holdings {
    /// Objects per kind name (`qp`, `cq`, `mr`, `pd`, `ctx`, `cm_id`).
    pub objects: BTreeMap<&'static str, u64>,
    /// QPs per (state, type) name (`RTS`, `RC`).
    pub qps: BTreeMap<(String, String), u64>,
    /// Bytes registered in its MRs.
    pub mr_bytes: u64,
}

impl Holdings {
    /// Objects of every kind.
    pub fn total(&self) -> u64 {
        self.objects.values().sum()
    }

    fn absorb(&mut self, other: &Holdings) {
        for (k, v) in &other.objects {
            *self.objects.entry(k).or_default() += v;
        }
        for (k, v) in &other.qps {
            *self.qps.entry(k.clone()).or_default() += v;
        }
        self.mr_bytes += other.mr_bytes;
    }
}

/// How a tally reads and bounds its input.
#[derive(Debug, Clone)]
pub struct TallyOptions {
    /// Where /proc is.
    pub proc_root: PathBuf,
    /// Keep the pid in each owner (else owners with the same comm and cgroup merge).
    pub pids: bool,
    /// Objects read per dump (one device, one kind); the rest are counted only.
    pub max_objects: u64,
    /// Stop dumping at this instant (the scrape deadline): what was read stays.
    pub deadline: Option<Instant>,
}

impl Default for TallyOptions {
    fn default() -> TallyOptions {
        TallyOptions {
            proc_root: PathBuf::from("/proc"),
            pids: false,
            max_objects: u64::MAX,
            deadline: None,
        }
    }
}

/// Per-owner counts being built from dump messages.
#[derive(Debug)]
pub struct Tally {
    options: TallyOptions,
    /// pid -> owner, described once per tally.
    described: HashMap<u32, OwnerKey>,
    holdings: HashMap<(String, OwnerKey), Holdings>,
    /// Objects read per (device, kind) dump.
    read: HashMap<(String, ResourceKind), u64>,
    unread: BTreeMap<(String, &'static str), u64>,
    /// Pids whose /proc entry could not be read for another reason than exiting.
    errors: Vec<String>,
    timed_out: bool,
}

/// The finished tally.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct OwnerReport {
    /// (device, owner, holdings), devices and owners in order.
    pub rows: Vec<OwnerRow>,
    /// Owners folded into [`OTHER`] (beyond `max_owners`).
    pub folded_owners: u64,
    /// Objects counted but not read, per device and kind (beyond `max_objects`).
    pub unread: Vec<Unread>,
    /// Processes that could not be described (their objects went to [`UNKNOWN`]).
    pub errors: Vec<String>,
    /// The deadline stopped the dumps before they ended.
    pub timed_out: bool,
}

/// One owner's holdings on one device.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct OwnerRow {
    /// Device name.
    pub device: String,
    /// The owner.
    pub owner: OwnerKey,
    /// What it holds there.
    pub holdings: Holdings,
}

/// Objects of one dump that were counted, not read.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Unread {
    /// Device name.
    pub device: String,
    /// Kind name.
    pub kind: &'static str,
    /// Objects.
    pub count: u64,
}

impl Tally {
    /// An empty tally.
    pub fn new(options: TallyOptions) -> Tally {
        Tally {
            options,
            described: HashMap::new(),
            holdings: HashMap::new(),
            read: HashMap::new(),
            unread: BTreeMap::new(),
            errors: Vec::new(),
            timed_out: false,
        }
    }

    fn owner_of(&mut self, owner: &crate::nldev::Owner) -> OwnerKey {
        let Some(pid) = owner.pid else {
            return OwnerKey::named(KERNEL);
        };
        if let Some(key) = self.described.get(&pid) {
            return key.clone();
        }
        let mut key = match read_owner(&self.options.proc_root, pid) {
            Ok(o) => {
                let (job_id, job_step) = o.job.map(|j| (j.id, j.step)).unwrap_or_default();
                OwnerKey {
                    comm: o.comm,
                    cgroup: o.cgroup.unwrap_or_default(),
                    pod_uid: o.ids.pod_uid.unwrap_or_default(),
                    container_id: o.ids.container_id.unwrap_or_default(),
                    job_id,
                    job_step,
                    pid: None,
                }
            }
            Err(OwnerError::Gone { .. }) => OwnerKey::named(UNKNOWN),
            Err(e) => {
                self.errors.push(e.to_string());
                OwnerKey::named(UNKNOWN)
            }
        };
        if self.options.pids {
            key.pid = Some(pid);
        }
        self.described.insert(pid, key.clone());
        key
    }

    /// Tally one `RES_*_GET` answer message of `kind`.
    pub fn add_message(
        &mut self,
        kind: ResourceKind,
        msg: &NldevMessage,
    ) -> Result<(), crate::nldev::ParseError> {
        let count = parse::resource_count(kind, msg)? as u64;
        if count == 0 {
            return Ok(());
        }
        let resources = parse::resources(kind, msg)?;
        let Some(device) = resources.first().map(|r| device_of(r).to_string()) else {
            return Ok(());
        };
        let done = self.read.entry((device.clone(), kind)).or_default();
        let room = self.options.max_objects.saturating_sub(*done);
        let take = room.min(resources.len() as u64);
        *done += take;
        let skipped = count - take;
        if skipped > 0 {
            *self
                .unread
                .entry((device.clone(), kind.name()))
                .or_default() += skipped;
        }
        for r in resources.into_iter().take(take as usize) {
            let owner = self.owner_of(r.owner());
            let h = self.holdings.entry((device.clone(), owner)).or_default();
            *h.objects.entry(kind.name()).or_default() += 1;
            match &r {
                Resource::Qp(qp) => {
                    *h.qps
                        .entry((qp.state.name().to_string(), qp.qp_type.name().to_string()))
                        .or_default() += 1;
                }
                Resource::Mr(mr) => h.mr_bytes = h.mr_bytes.saturating_add(mr.mrlen),
                _ => {}
            }
        }
        Ok(())
    }

    /// Tally every message of one receive buffer (or captured answer) of a `kind` dump.
    pub fn add_answer(
        &mut self,
        kind: ResourceKind,
        bytes: &[u8],
    ) -> Result<(), crate::nldev::ParseError> {
        for (_, msg) in crate::nldev::message::split_messages(bytes)? {
            if let netlink_packet_core::NetlinkPayload::InnerMessage(m) = msg.payload {
                self.add_message(kind, &m)?;
            }
        }
        Ok(())
    }

    /// Whether a dump of `kind` on `device` has reached the cap (its remaining messages
    /// are only counted).
    fn capped(&self, device: &str, kind: ResourceKind) -> bool {
        self.read
            .get(&(device.to_string(), kind))
            .is_some_and(|n| *n >= self.options.max_objects)
    }

    /// Dump every kind of [`KINDS`] on every device of `devices` through `client` and
    /// tally the answers as they arrive. A device whose dump the kernel refuses is skipped
    /// (named in the returned list); past the deadline, the dumps stop and
    /// [`OwnerReport::timed_out`] is set.
    pub fn dump(
        &mut self,
        client: &mut NldevClient,
        devices: &[NlDevice],
    ) -> Result<Vec<String>, NldevError> {
        let mut refused = Vec::new();
        for dev in devices {
            for kind in KINDS {
                if self.past_deadline() {
                    self.timed_out = true;
                    return Ok(refused);
                }
                let req = Request::resources(kind, dev.index, Some(&dev.name));
                let result = client.request_each(&req, |msg| {
                    if self.past_deadline() {
                        self.timed_out = true;
                        return Err(NldevError::Stopped("scrape deadline".into()));
                    }
                    if self.capped(&dev.name, kind) {
                        let n = parse::resource_count(kind, msg)? as u64;
                        *self
                            .unread
                            .entry((dev.name.clone(), kind.name()))
                            .or_default() += n;
                        return Ok(());
                    }
                    self.add_message(kind, msg)?;
                    Ok(())
                });
                match result {
                    Ok(()) => {}
                    Err(NldevError::Stopped(_)) | Err(NldevError::Timeout { .. }) => {
                        self.timed_out = true;
                        return Ok(refused);
                    }
                    Err(e @ NldevError::Kernel { .. }) => refused.push(e.to_string()),
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(refused)
    }

    fn past_deadline(&self) -> bool {
        self.options.deadline.is_some_and(|d| Instant::now() >= d)
    }

    /// The report: the `max_owners` owners with the most objects (over all devices; ties by
    /// name) as they are, the others folded into [`OTHER`] per device.
    pub fn finish(self, max_owners: usize) -> OwnerReport {
        let mut totals: HashMap<&OwnerKey, u64> = HashMap::new();
        for ((_, owner), h) in &self.holdings {
            *totals.entry(owner).or_default() += h.total();
        }
        let mut ranked: Vec<(&OwnerKey, u64)> = totals.into_iter().collect();
        ranked.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0)));
        let kept: std::collections::HashSet<OwnerKey> = ranked
            .iter()
            .take(max_owners)
            .map(|(k, _)| (*k).clone())
            .collect();
        let folded_owners = ranked.len().saturating_sub(max_owners) as u64;
        let mut rows: BTreeMap<(String, OwnerKey), Holdings> = BTreeMap::new();
        for ((device, owner), h) in self.holdings {
            let owner = if kept.contains(&owner) {
                owner
            } else {
                OwnerKey::named(OTHER)
            };
            rows.entry((device, owner)).or_default().absorb(&h);
        }
        OwnerReport {
            rows: rows
                .into_iter()
                .map(|((device, owner), holdings)| OwnerRow {
                    device,
                    owner,
                    holdings,
                })
                .collect(),
            folded_owners,
            unread: self
                .unread
                .into_iter()
                .map(|((device, kind), count)| Unread {
                    device,
                    kind,
                    count,
                })
                .collect(),
            errors: self.errors,
            timed_out: self.timed_out,
        }
    }
}

fn device_of(r: &Resource) -> &str {
    match r {
        Resource::Qp(x) => &x.dev_name,
        Resource::Cq(x) => &x.dev_name,
        Resource::Mr(x) => &x.dev_name,
        Resource::Pd(x) => &x.dev_name,
        Resource::CmId(x) => &x.dev_name,
        Resource::Ctx(x) => &x.dev_name,
        Resource::Srq(x) => &x.dev_name,
    }
}

/// How `rdmactl resources --by` groups owners.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Grouping {
    /// One row per process (pid and comm).
    Process,
    /// One row per cgroup.
    Cgroup,
    /// One row per pod (objects outside pods: one row with an empty pod).
    Pod,
    /// One row per Slurm job (objects outside jobs: one row with an empty job).
    Job,
}

impl OwnerReport {
    /// Owners holding QPs in `state` (`ERR`), per device, most first.
    pub fn qps_in_state(&self, state: &str) -> Vec<(&OwnerRow, u64)> {
        let mut out: Vec<(&OwnerRow, u64)> = self
            .rows
            .iter()
            .map(|r| {
                let n = r
                    .holdings
                    .qps
                    .iter()
                    .filter(|((s, _), _)| s == state)
                    .map(|(_, n)| n)
                    .sum();
                (r, n)
            })
            .filter(|(_, n)| *n > 0)
            .collect();
        out.sort_by_key(|b| std::cmp::Reverse(b.1));
        out
    }

    /// The rows regrouped by `by`, summed over devices: (owner fields that remain, holdings),
    /// most objects first.
    pub fn grouped(&self, by: Grouping) -> Vec<(OwnerKey, Holdings)> {
        let mut groups: BTreeMap<OwnerKey, Holdings> = BTreeMap::new();
        for row in &self.rows {
            let o = &row.owner;
            let key = match by {
                Grouping::Process => o.clone(),
                // Owners without a cgroup (kernel, unknown, other) keep their name.
                Grouping::Cgroup => OwnerKey {
                    comm: if o.cgroup.is_empty() {
                        o.comm.clone()
                    } else {
                        String::new()
                    },
                    cgroup: o.cgroup.clone(),
                    ..OwnerKey::default()
                },
                Grouping::Pod => OwnerKey {
                    pod_uid: o.pod_uid.clone(),
                    ..OwnerKey::default()
                },
                Grouping::Job => OwnerKey {
                    job_id: o.job_id.clone(),
                    ..OwnerKey::default()
                },
            };
            groups.entry(key).or_default().absorb(&row.holdings);
        }
        let mut out: Vec<(OwnerKey, Holdings)> = groups.into_iter().collect();
        out.sort_by(|a, b| b.1.total().cmp(&a.1.total()).then_with(|| a.0.cmp(&b.0)));
        out
    }
}
