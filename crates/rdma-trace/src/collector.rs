//! A collector-shaped handle for rdmad: a background thread runs a [`Tracer`] and folds its
//! events into counts per (event, comm, device), QP transitions per device, async events,
//! errors, and log2 histograms of MR registration latency and size. rdmad polls
//! [`TraceCollector::snapshot`] at scrape time; nothing is exported from here.
//!
//! Cardinality: `comm` is bounded by [`MAX_COMMS`] and the cgroup by [`MAX_CGROUPS`]; later
//! values count as `other`. The pod UID and the Slurm job id come from the cgroup path, so
//! the cgroup's bound is theirs (a cgroup counted as `other` has neither).
use crate::event::{EventKind, TraceEvent};
use crate::owner::{no_owners, OwnerResolver};
use crate::probes::ProbeReport;
use crate::tracer::{Selection, TraceError, Tracer};
use prom_text::histogram::Histogram;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// Distinct `comm` values kept before the rest is folded into `other`.
pub const MAX_COMMS: usize = 128;

/// Distinct cgroup paths kept before the rest is folded into `other` (the owners
/// collector's default cap on owners is of the same order).
pub const MAX_CGROUPS: usize = 128;

/// Power-of-two bounds of the MR registration histograms: `1, 2, 4, ..., 2^64` (a value `v`
/// is counted under the smallest power of two `>= v`; 0 and 1 under 1; every `u64` below
/// `+Inf`).
pub const POWER_OF_TWO_BOUNDS: usize = 65;

/// An empty histogram over the [`POWER_OF_TWO_BOUNDS`] powers of two.
pub fn power_of_two_histogram() -> Histogram {
    Histogram::exponential(1.0, 2.0, POWER_OF_TWO_BOUNDS)
}

/// Events of one kind by one process name (in one cgroup) on one device.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EventCount {
    /// Event kind.
    pub kind: EventKind,
    /// Process name (or `other` past [`MAX_COMMS`]).
    pub comm: String,
    /// The process's cgroup path (`""` unknown, `other` past [`MAX_CGROUPS`]).
    pub cgroup: String,
    /// The pod UID its cgroup path names (`""` outside Kubernetes or unknown).
    pub pod_uid: String,
    /// The Slurm job id its cgroups name (`""` outside a Slurm job or unknown).
    pub job_id: String,
    /// Device (`-` when unknown).
    pub device: String,
    /// Events.
    pub count: u64,
    /// Of those, calls that failed.
    pub errors: u64,
}

/// Successful QP state transitions.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TransitionCount {
    /// Device.
    pub device: String,
    /// From-state (`?` when the QP predates the tracer).
    pub from: String,
    /// To-state.
    pub to: String,
    /// Transitions.
    pub count: u64,
}

/// Failed calls by errno.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ErrorCount {
    /// Event kind of the failed call.
    pub kind: EventKind,
    /// Device.
    pub device: String,
    /// Symbolic errno.
    pub error: String,
    /// Failures.
    pub count: u64,
}

/// Async (QP, CQ, port) events.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AsyncCount {
    /// Device.
    pub device: String,
    /// Event name (`QP_FATAL`, `PORT_ERR`).
    pub event: String,
    /// Events.
    pub count: u64,
}

/// Everything the collector knows, at one instant.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct TraceStats {
    /// Attach report.
    pub probes: Vec<ProbeReport>,
    /// Event counts per kind, comm and device.
    pub events: Vec<EventCount>,
    /// QP transitions per device.
    pub qp_transitions: Vec<TransitionCount>,
    /// Failed calls per errno.
    pub errors: Vec<ErrorCount>,
    /// Async events per device.
    pub async_events: Vec<AsyncCount>,
    /// MR registration latency in nanoseconds, per device.
    pub mr_reg_latency_ns: BTreeMap<String, Histogram>,
    /// MR registration size in bytes, per device.
    pub mr_reg_bytes: BTreeMap<String, Histogram>,
    /// Events lost in the kernel (ring buffer full).
    pub dropped: u64,
}

/// Events are counted per kind, comm, cgroup, pod UID, Slurm job id and device.
type EventKey = (EventKind, String, String, String, String, String);

/// Folds events into [`TraceStats`]; usable without a tracer (tests, replays).
#[derive(Debug, Default)]
pub struct Aggregator {
    comms: BTreeSet<String>,
    cgroups: BTreeSet<String>,
    events: BTreeMap<EventKey, (u64, u64)>,
    transitions: BTreeMap<(String, String, String), u64>,
    errors: BTreeMap<(EventKind, String, String), u64>,
    asyncs: BTreeMap<(String, String), u64>,
    latency: BTreeMap<String, Histogram>,
    sizes: BTreeMap<String, Histogram>,
}

impl Aggregator {
    /// Count one event.
    pub fn add(&mut self, ev: &TraceEvent) {
        let device = if ev.device.is_empty() {
            "-".to_string()
        } else {
            ev.device.clone()
        };
        let comm = if self.comms.contains(&ev.comm) || self.comms.len() < MAX_COMMS {
            self.comms.insert(ev.comm.clone());
            ev.comm.clone()
        } else {
            "other".to_string()
        };
        let (cgroup, pod_uid, job_id) = match &ev.cgroup {
            None => (String::new(), String::new(), String::new()),
            Some(c) if self.cgroups.contains(c) || self.cgroups.len() < MAX_CGROUPS => {
                self.cgroups.insert(c.clone());
                (
                    c.clone(),
                    ev.pod_uid.clone().unwrap_or_default(),
                    ev.job_id.clone().unwrap_or_default(),
                )
            }
            Some(_) => ("other".to_string(), String::new(), String::new()),
        };
        let slot = self
            .events
            .entry((ev.kind, comm, cgroup, pod_uid, job_id, device.clone()))
            .or_default();
        slot.0 += 1;
        if let Some(err) = ev.error {
            slot.1 += 1;
            *self
                .errors
                .entry((ev.kind, device.clone(), err.to_string()))
                .or_default() += 1;
        }
        match ev.kind {
            EventKind::QpModify if ev.errno.is_none() => {
                if let Some(to) = ev.to_state {
                    let from = ev.from_state.unwrap_or("?").to_string();
                    *self
                        .transitions
                        .entry((device, from, to.to_string()))
                        .or_default() += 1;
                }
            }
            EventKind::MrReg if ev.errno.is_none() => {
                if let Some(ns) = ev.latency_ns {
                    self.latency
                        .entry(device.clone())
                        .or_insert_with(power_of_two_histogram)
                        .observe(ns as f64);
                }
                if let Some(size) = ev.size {
                    self.sizes
                        .entry(device)
                        .or_insert_with(power_of_two_histogram)
                        .observe(size as f64);
                }
            }
            EventKind::AsyncQp | EventKind::AsyncCq | EventKind::AsyncDevice => {
                let name = ev.event.unwrap_or("?").to_string();
                *self.asyncs.entry((device, name)).or_default() += 1;
            }
            _ => {}
        }
    }

    /// The current totals.
    pub fn stats(&self, probes: &[ProbeReport], dropped: u64) -> TraceStats {
        TraceStats {
            probes: probes.to_vec(),
            events: self
                .events
                .iter()
                .map(
                    |((kind, comm, cgroup, pod_uid, job_id, device), (count, errors))| EventCount {
                        kind: *kind,
                        comm: comm.clone(),
                        cgroup: cgroup.clone(),
                        pod_uid: pod_uid.clone(),
                        job_id: job_id.clone(),
                        device: device.clone(),
                        count: *count,
                        errors: *errors,
                    },
                )
                .collect(),
            qp_transitions: self
                .transitions
                .iter()
                .map(|((device, from, to), count)| TransitionCount {
                    device: device.clone(),
                    from: from.clone(),
                    to: to.clone(),
                    count: *count,
                })
                .collect(),
            errors: self
                .errors
                .iter()
                .map(|((kind, device, error), count)| ErrorCount {
                    kind: *kind,
                    device: device.clone(),
                    error: error.clone(),
                    count: *count,
                })
                .collect(),
            async_events: self
                .asyncs
                .iter()
                .map(|((device, event), count)| AsyncCount {
                    device: device.clone(),
                    event: event.clone(),
                    count: *count,
                })
                .collect(),
            mr_reg_latency_ns: self.latency.clone(),
            mr_reg_bytes: self.sizes.clone(),
            dropped,
        }
    }
}

/// Shared state between the tracer thread and the handle.
#[derive(Default)]
struct Shared {
    agg: Aggregator,
    probes: Vec<ProbeReport>,
    dropped: u64,
    failure: Option<Arc<TraceError>>,
}

/// The handle rdmad keeps: start once, [`snapshot`](TraceCollector::snapshot) per scrape.
/// Dropping it stops the thread and detaches the probes.
pub struct TraceCollector {
    shared: Arc<Mutex<Shared>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for TraceCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TraceCollector").finish_non_exhaustive()
    }
}

impl TraceCollector {
    /// Start tracing in a background thread; returns once the probes are attached (or
    /// with the reason they cannot be: no BPF support, no privileges, nothing to attach).
    /// Events carry no owner (cgroup, pod, Slurm job): see
    /// [`start_with_owners`](TraceCollector::start_with_owners).
    pub fn start(selection: Selection) -> Result<TraceCollector, TraceError> {
        TraceCollector::start_with_owners(selection, no_owners())
    }

    /// [`start`](TraceCollector::start), with the owner of each event's process looked up by
    /// `owners` when the event is received (rdmad reads its `--path.procfs`).
    pub fn start_with_owners(
        selection: Selection,
        owners: OwnerResolver,
    ) -> Result<TraceCollector, TraceError> {
        if !crate::bpf_support() {
            return Err(TraceError::NoBpfSupport);
        }
        let shared = Arc::new(Mutex::new(Shared::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let (ready_tx, ready_rx) = mpsc::channel::<Result<(), TraceError>>();
        let thread = {
            let shared = Arc::clone(&shared);
            let stop = Arc::clone(&stop);
            std::thread::Builder::new()
                .name("rdma-trace".into())
                .spawn(move || run(selection, owners, shared, stop, ready_tx))
                .map_err(|e| TraceError::Load(format!("cannot spawn the tracer thread: {e}")))?
        };
        match ready_rx.recv() {
            Ok(Ok(())) => Ok(TraceCollector {
                shared,
                stop,
                thread: Some(thread),
            }),
            Ok(Err(e)) => {
                let _ = thread.join();
                Err(e)
            }
            Err(_) => {
                let _ = thread.join();
                Err(TraceError::Load(
                    "the tracer thread exited during start".into(),
                ))
            }
        }
    }

    /// The totals so far. `Err` when the tracer thread stopped on an error (that error).
    pub fn snapshot(&self) -> Result<TraceStats, Arc<TraceError>> {
        let s = self.shared.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(f) = &s.failure {
            return Err(f.clone());
        }
        Ok(s.agg.stats(&s.probes, s.dropped))
    }
}

impl Drop for TraceCollector {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn run(
    selection: Selection,
    owners: OwnerResolver,
    shared: Arc<Mutex<Shared>>,
    stop: Arc<AtomicBool>,
    ready: mpsc::Sender<Result<(), TraceError>>,
) {
    let mut tracer = match Tracer::start(selection) {
        Ok(t) => t,
        Err(e) => {
            let _ = ready.send(Err(e));
            return;
        }
    };
    shared.lock().unwrap_or_else(|p| p.into_inner()).probes = tracer.reports().to_vec();
    let _ = ready.send(Ok(()));
    let mut batch = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        let res = tracer.poll(Duration::from_millis(200), &mut |mut ev| {
            // Read now, while the process most likely still runs (outside the lock).
            ev.resolve_owner(&owners);
            batch.push(ev);
        });
        let mut s = shared.lock().unwrap_or_else(|p| p.into_inner());
        for ev in batch.drain(..) {
            s.agg.add(&ev);
        }
        s.dropped = tracer.dropped();
        if let Err(e) = res {
            s.failure = Some(Arc::new(e));
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{parse_raw, RawEventBuilder};
    use crate::owner::Owner;

    fn ev(kind: u32, comm: &str, from: u32, to: u32, ret: i32) -> TraceEvent {
        let raw = RawEventBuilder {
            kind,
            comm: comm.into(),
            dev: "rxe0".into(),
            from_state: from,
            to_state: to,
            ret,
            size: 8192,
            latency_ns: 3000,
            ..Default::default()
        }
        .bytes();
        parse_raw(&raw, 0, &[]).unwrap()
    }

    #[test]
    fn the_handle_fits_rdmads_collector_trait() {
        // rdmad's `Collector: Send + Sync` holds this handle.
        fn send_sync<T: Send + Sync>() {}
        send_sync::<TraceCollector>();
    }

    #[test]
    fn histogram_buckets_are_powers_of_two() {
        // The bucket (upper bound) a value is counted under.
        let le = |v: u64| {
            let mut h = power_of_two_histogram();
            h.observe(v as f64);
            // The first bound whose cumulative count is the one value.
            h.cumulative().into_iter().find(|(_, c)| *c == 1).unwrap().0
        };
        assert_eq!(le(0), 1.0);
        assert_eq!(le(1), 1.0);
        assert_eq!(le(2), 2.0);
        assert_eq!(le(3), 4.0);
        assert_eq!(le(4096), 4096.0);
        assert_eq!(le(4097), 8192.0);
        assert_eq!(le(u64::MAX), 2f64.powi(64));
        let mut h = power_of_two_histogram();
        for v in [1u64, 3, 4, 5] {
            h.observe(v as f64);
        }
        assert_eq!(
            h.trimmed().cumulative(),
            [(1.0, 1), (2.0, 1), (4.0, 3), (8.0, 4), (f64::INFINITY, 4)]
        );
        assert_eq!((h.count(), h.sum()), (4, 13.0));
    }

    #[test]
    fn aggregates_transitions_errors_and_mr_histograms() {
        let mut agg = Aggregator::default();
        agg.add(&ev(4, "app", 0, 1, 0));
        agg.add(&ev(4, "app", 3, 6, 0));
        agg.add(&ev(4, "app", 0, 3, -22));
        agg.add(&ev(1, "app", 0xff, 0xff, 0));
        agg.add(&ev(1, "app", 0xff, 0xff, -12));
        let s = agg.stats(&[], 7);
        assert_eq!(s.dropped, 7);
        let modify = s
            .events
            .iter()
            .find(|e| e.kind == EventKind::QpModify)
            .unwrap();
        assert_eq!((modify.count, modify.errors), (3, 1));
        let t: Vec<_> = s
            .qp_transitions
            .iter()
            .map(|t| format!("{}->{}", t.from, t.to))
            .collect();
        assert_eq!(t, ["RESET->INIT", "RTS->ERR"]);
        let errs: Vec<_> = s.errors.iter().map(|e| e.error.as_str()).collect();
        assert_eq!(errs, ["ENOMEM", "EINVAL"]);
        // The failed registration is not in the histograms.
        assert_eq!(s.mr_reg_bytes["rxe0"].count(), 1);
        assert_eq!(s.mr_reg_latency_ns["rxe0"].sum(), 3000.0);
        assert!(serde_json::to_string(&s).unwrap().contains("\"RTS\""));
    }

    #[test]
    fn comm_cardinality_is_bounded() {
        let mut agg = Aggregator::default();
        for i in 0..MAX_COMMS + 5 {
            agg.add(&ev(3, &format!("p{i}"), 0xff, 0, 0));
        }
        let s = agg.stats(&[], 0);
        assert_eq!(s.events.len(), MAX_COMMS + 1);
        let other = s.events.iter().find(|e| e.comm == "other").unwrap();
        assert_eq!(other.count, 5);
    }

    const UID: &str = "1b2c3d4e-5f60-4718-92a3-b4c5d6e7f809";

    /// A resolver that answers as rdmad's does on rdmakit's /proc fixture tree (that reading
    /// is tested in rdma-procfs: `owner::cgroup_owner`): 101 a containerd pod, 110 a login
    /// session, 130 and 132 Slurm jobs, 134 a look-alike, any other pid exited.
    fn fixture_owners(pid: u32) -> Option<Owner> {
        let owner = |cgroup: &str, pod_uid: Option<&str>, job: Option<(&str, &str)>| Owner {
            cgroup: cgroup.into(),
            pod_uid: pod_uid.map(Into::into),
            job: job.map(|(id, step)| (id.into(), step.into())),
        };
        let pod = format!(
            "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{}.slice/cri-containerd-3f1c.scope",
            UID.replace('-', "_")
        );
        Some(match pid {
            101 => owner(&pod, Some(UID), None),
            110 => owner("/user.slice/user-0.slice/session-1.scope", None, None),
            130 => owner(
                "/system.slice/slurmstepd.scope/job_3385/step_0/user/task_0",
                None,
                Some(("3385", "0")),
            ),
            132 => owner("/", None, Some(("777", "0"))),
            134 => owner("/user.slice/user-1000.slice/job_1/x", None, None),
            _ => return None,
        })
    }

    /// The events of `(pid, comm)` as the collector's thread adds them: owner resolved by
    /// `owners` (as `run` does), then counted.
    fn collect(events: &[(u32, &str)], owners: impl Fn(u32) -> Option<Owner>) -> TraceStats {
        let mut agg = Aggregator::default();
        for &(pid, comm) in events {
            let mut e = ev(3, comm, 0xff, 0, 0);
            e.pid = pid;
            e.resolve_owner(&owners);
            agg.add(&e);
        }
        agg.stats(&[], 0)
    }

    #[test]
    fn events_are_counted_by_the_cgroup_and_pod_their_resolver_gives() {
        // 101: a pod; 110: a login session; 4242: exited.
        let s = collect(
            &[
                (101, "ib_write_bw"),
                (101, "ib_write_bw"),
                (110, "rping"),
                (4242, "gone"),
            ],
            fixture_owners,
        );
        let find = |comm: &str| s.events.iter().find(|e| e.comm == comm).unwrap();
        let bw = find("ib_write_bw");
        assert_eq!(bw.count, 2);
        assert_eq!(bw.cgroup, fixture_owners(101).unwrap().cgroup);
        assert_eq!(bw.pod_uid, UID);
        let rping = find("rping");
        assert_eq!(
            (rping.cgroup.as_str(), rping.pod_uid.as_str()),
            ("/user.slice/user-0.slice/session-1.scope", "")
        );
        let gone = find("gone");
        assert_eq!((gone.cgroup.as_str(), gone.pod_uid.as_str()), ("", ""));
        // Without a resolver (`TraceCollector::start`) no event has an owner.
        let s = collect(&[(101, "ib_write_bw"), (110, "rping")], no_owners());
        assert!(
            s.events
                .iter()
                .all(|e| e.cgroup.is_empty() && e.pod_uid.is_empty()),
            "{:?}",
            s.events
        );
    }

    #[test]
    fn cgroup_cardinality_is_bounded() {
        let mut agg = Aggregator::default();
        for i in 0..MAX_CGROUPS + 3 {
            let mut e = ev(3, "app", 0xff, 0, 0);
            e.cgroup = Some(format!("/job-{i}"));
            agg.add(&e);
        }
        let s = agg.stats(&[], 0);
        assert_eq!(s.events.len(), MAX_CGROUPS + 1);
        let other = s.events.iter().find(|e| e.cgroup == "other").unwrap();
        assert_eq!((other.count, other.pod_uid.as_str()), (3, ""));
    }

    #[test]
    fn events_are_counted_by_the_slurm_job_their_resolver_gives_and_its_bound() {
        // 130: Slurm cgroup/v2 job 3385 step 0; 132: cgroup/v1 job 777; 134: a look-alike.
        let s = collect(
            &[
                (130, "ib_write_bw"),
                (132, "mpi_allreduce"),
                (134, "ib_read_lat"),
            ],
            fixture_owners,
        );
        let job = |comm: &str| {
            s.events
                .iter()
                .find(|e| e.comm == comm)
                .unwrap()
                .job_id
                .clone()
        };
        assert_eq!(job("ib_write_bw"), "3385");
        assert_eq!(job("mpi_allreduce"), "777");
        assert_eq!(job("ib_read_lat"), "");
        // Past the cgroup bound, a job's events count as cgroup `other`, without a job.
        let mut agg = Aggregator::default();
        for i in 0..MAX_CGROUPS + 2 {
            let mut e = ev(3, "app", 0xff, 0, 0);
            e.cgroup = Some(format!("/system.slice/slurmstepd.scope/job_{i}/step_0"));
            e.job_id = Some(i.to_string());
            agg.add(&e);
        }
        let s = agg.stats(&[], 0);
        let other = s.events.iter().find(|e| e.cgroup == "other").unwrap();
        assert_eq!((other.count, other.job_id.as_str()), (2, ""));
    }

    #[cfg(not(feature = "bpf"))]
    #[test]
    fn collector_without_bpf_fails_cleanly() {
        assert!(matches!(
            TraceCollector::start(Selection::All),
            Err(TraceError::NoBpfSupport)
        ));
    }
}
