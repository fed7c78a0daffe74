//! The `netlink_owners` collector: who holds RDMA objects. The RDMA netlink QP, CQ, MR, PD,
//! context and CM ID dumps, tallied per owner as they stream in (`rdmakit::attribution`).
//!
//! - `rdma_owner_objects{device,type,comm,cgroup,pod_uid,container_id,job_id,job_step}`:
//!   objects per owner.
//! - `rdma_owner_qps{device,state,qp_type,comm,cgroup,pod_uid,container_id,job_id,job_step}`:
//!   QPs by state and type (an owner's QPs in `ERR` are the ones that failed).
//! - `rdma_owner_mr_bytes{device,comm,cgroup,pod_uid,container_id,job_id,job_step}`: bytes
//!   registered.
//! - `rdma_owners_folded`: owners beyond `--collector.netlink_owners.max-owners` (default
//!   256), folded into `comm="other"`.
//! - `rdma_owner_objects_unread{device,type}`: objects beyond
//!   `--collector.netlink_owners.max-objects` in one dump, counted but not attributed.
//!
//! The owner is the creating process: its `comm`, its cgroup path (`/proc/<pid>/cgroup`
//! under `--path.procfs`) and, where the path follows the kubelet's conventions, `pod_uid`
//! and `container_id`, and where it follows slurmstepd's (cgroup v1 or v2), the Slurm
//! `job_id` and `job_step` (`0`, `extern`, `batch`; empty otherwise). Objects of kernel users (the GSI QP, NVMe-oF,
//! IPoIB) are `comm="kernel"`; objects whose process exited before it was read are
//! `comm="unknown"`. There is no `pid` label unless `--collector.netlink_owners.pid` is
//! set: pids churn and every new one is a new series. The kernel shows only objects of
//! processes visible in rdmad's pid namespace (a DaemonSet needs `hostPID`). MR keys and
//! addresses are never read into a metric.

use std::path::PathBuf;

use anyhow::Context;
use rdmakit::attribution::{OwnerKey, Tally, TallyOptions};
use rdmakit::sysfs::DeviceFilter;

use super::{Collector, CollectorConfig, CollectorSpec, Reads, Scrape};
use crate::metrics::{Declared, MetricSet, Value};
use crate::options::{opt, Kind, Opt, Values};

const OBJECTS: Declared = Declared::gauge(
    "rdma_owner_objects",
    "RDMA objects of each type held by each owner (process name, cgroup, pod, container, Slurm job), from the RDMA netlink resource dumps",
);
const QPS: Declared = Declared::gauge(
    rdmakit::attribution::OWNER_QPS_METRIC,
    "Queue pairs held by each owner, by QP state and type",
);
const MR_BYTES: Declared = Declared::gauge(
    "rdma_owner_mr_bytes",
    "Bytes of memory registered in the memory regions each owner holds",
);
const FOLDED: Declared = Declared::gauge(
    "rdma_owners_folded",
    "Owners beyond --collector.netlink_owners.max-owners in this scrape, folded into comm=\"other\"",
);
const UNREAD: Declared = Declared::gauge(
    "rdma_owner_objects_unread",
    "Objects beyond --collector.netlink_owners.max-objects in one dump: counted, not attributed to an owner",
);

/// The table row.
pub const SPEC: CollectorSpec = CollectorSpec {
    name: "netlink_owners",
    help: "RDMA objects (QPs by state and type, CQs, MRs, PDs, contexts, CM IDs) per owner: process name, cgroup, pod, container and Slurm job",
    default_enabled: true,
    metrics: &[OBJECTS, QPS, MR_BYTES, FOLDED, UNREAD],
    catalog_counters: &[],
    patterns: &[],
    options: OPTIONS,
    reads: Reads::NOTHING,
    build,
};

/// Its options (defaults: [`OwnerSettings::default`], which a test compares).
const OPTIONS: &[Opt] = &[
    opt(
        "collector.netlink_owners.pid",
        Kind::Bool,
        "BOOL",
        "Add a pid label to the netlink_owners series (every new process is a new series).",
    )
    .default("false"),
    opt(
        "collector.netlink_owners.max-owners",
        Kind::Int {
            min: 0,
            max: u64::MAX,
        },
        "N",
        "Owners exported per scrape by netlink_owners; the ones holding fewer objects fold \
         into comm=\"other\" (counted by rdma_owners_folded).",
    )
    .default("256"),
    opt(
        "collector.netlink_owners.max-objects",
        Kind::Int {
            min: 1,
            max: u64::MAX,
        },
        "N",
        "Objects netlink_owners reads per dump (one device, one type); the rest are counted \
         by rdma_owner_objects_unread.",
    )
    .default("100000"),
];

/// `--collector.netlink_owners.*`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnerSettings {
    /// Add a `pid` label (`--collector.netlink_owners.pid`).
    pub pid: bool,
    /// Owners exported per scrape; the rest fold into `other`.
    pub max_owners: usize,
    /// Objects read per dump (one device, one kind).
    pub max_objects: u64,
}

/// The default `--collector.netlink_owners.max-owners`.
pub const DEFAULT_MAX_OWNERS: usize = 256;
/// The default `--collector.netlink_owners.max-objects`.
pub const DEFAULT_MAX_OBJECTS: u64 = 100_000;

impl Default for OwnerSettings {
    fn default() -> OwnerSettings {
        OwnerSettings {
            pid: false,
            max_owners: DEFAULT_MAX_OWNERS,
            max_objects: DEFAULT_MAX_OBJECTS,
        }
    }
}

impl OwnerSettings {
    /// From the resolved options.
    pub fn from_options(values: &Values) -> anyhow::Result<OwnerSettings> {
        Ok(OwnerSettings {
            pid: values.bool("collector.netlink_owners.pid")?,
            max_owners: usize::try_from(values.int("collector.netlink_owners.max-owners")?)
                .unwrap_or(usize::MAX),
            max_objects: values.int("collector.netlink_owners.max-objects")?,
        })
    }
}

fn build(config: &CollectorConfig) -> Box<dyn Collector> {
    Box::new(NetlinkOwners {
        procfs: config.procfs.clone(),
        filter: config.filter.clone(),
        settings: config.owners.clone(),
    })
}

struct NetlinkOwners {
    procfs: PathBuf,
    filter: DeviceFilter,
    settings: OwnerSettings,
}

fn owner_labels(owner: &OwnerKey) -> Vec<(&'static str, String)> {
    let mut labels = vec![
        ("comm", owner.comm.clone()),
        ("cgroup", owner.cgroup.clone()),
        ("pod_uid", owner.pod_uid.clone()),
        ("container_id", owner.container_id.clone()),
        ("job_id", owner.job_id.clone()),
        ("job_step", owner.job_step.clone()),
    ];
    if let Some(pid) = owner.pid {
        labels.push(("pid", pid.to_string()));
    }
    labels
}

impl Collector for NetlinkOwners {
    fn update(&self, scrape: &Scrape, out: &mut MetricSet) -> anyhow::Result<()> {
        let in_sysfs = scrape.sysfs_device_names()?;
        let mut tally = Tally::new(TallyOptions {
            proc_root: self.procfs.clone(),
            pids: self.settings.pid,
            max_objects: self.settings.max_objects,
            deadline: scrape.deadline(),
        });
        let done = scrape.netlink(|netlink| {
            let devices: Vec<_> = netlink
                .devices()?
                .into_iter()
                .filter(|d| self.filter.keeps(&d.name) && in_sysfs.contains(&d.name))
                .collect();
            let refused = tally
                .dump(netlink.client(), &devices)
                .context("RDMA netlink resource dump")?;
            for r in refused {
                tracing::debug!("{r}");
            }
            Ok(())
        })?;
        if done.is_none() {
            return Ok(());
        }
        let report = tally.finish(self.settings.max_owners);
        export(out, &report)?;
        if report.timed_out {
            scrape.mark_timed_out(SPEC.name);
        }
        Ok(())
    }
}

/// Add the families of one report (also used by the tests on captured dumps).
pub(crate) fn export(
    out: &mut MetricSet,
    report: &rdmakit::attribution::OwnerReport,
) -> anyhow::Result<()> {
    for e in &report.errors {
        tracing::debug!("describing an RDMA object owner: {e}");
    }
    for row in &report.rows {
        let owner = owner_labels(&row.owner);
        let with = |extra: Vec<(&'static str, String)>| {
            let mut labels = vec![("device", row.device.clone())];
            labels.extend(extra);
            labels.extend(owner.iter().cloned());
            labels
        };
        for (kind, n) in &row.holdings.objects {
            out.add_declared(
                &OBJECTS,
                with(vec![("type", kind.to_string())]),
                Value::Int(*n),
            )?;
        }
        for ((state, qp_type), n) in &row.holdings.qps {
            out.add_declared(
                &QPS,
                with(vec![("state", state.clone()), ("qp_type", qp_type.clone())]),
                Value::Int(*n),
            )?;
        }
        if row.holdings.objects.contains_key("mr") {
            out.add_declared(&MR_BYTES, with(vec![]), Value::Int(row.holdings.mr_bytes))?;
        }
    }
    out.add_declared(&FOLDED, vec![], Value::Int(report.folded_owners))?;
    for u in &report.unread {
        out.add_declared(
            &UNREAD,
            vec![("device", u.device.clone()), ("type", u.kind.to_string())],
            Value::Int(u.count),
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::Format;
    use rdmakit::attribution::KINDS;

    fn data(rel: &str) -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../crates/rdmakit/tests/data")
            .join(rel)
    }

    /// The captured dumps of the three lab devices, tallied as the collector does.
    fn exposition(pids: bool, max_owners: usize, max_objects: u64) -> String {
        let mut tally = Tally::new(TallyOptions {
            proc_root: data("proc-captured"),
            pids,
            max_objects,
            deadline: None,
        });
        for dev in ["rxe0", "rxe_a", "rxe_b"] {
            for kind in KINDS {
                let path = data("nldev").join(format!("res_{}_{dev}.bin", kind.name()));
                let bytes = std::fs::read(path).unwrap_or_default();
                tally.add_answer(kind, &bytes).unwrap();
            }
        }
        let mut out = MetricSet::new();
        export(&mut out, &tally.finish(max_owners)).unwrap();
        out.encode(Format::Text)
    }

    #[test]
    fn captured_dumps_give_per_owner_series_without_pids() {
        let text = exposition(false, 256, u64::MAX);
        let b = "device=\"rxe_b\",type=\"qp\",comm=\"ibv_srq_pingpon\",cgroup=\"/lab.slice/job-b.scope\",pod_uid=\"\",container_id=\"\",job_id=\"\",job_step=\"\"";
        assert!(
            text.contains(&format!("rdma_owner_objects{{{b}}} 16\n")),
            "{text}"
        );
        assert!(text.contains(
            "rdma_owner_qps{device=\"rxe_b\",state=\"INIT\",qp_type=\"RC\",comm=\"ibv_srq_pingpon\""
        ));
        assert!(text.contains(
            "rdma_owner_qps{device=\"rxe0\",state=\"RTS\",qp_type=\"GSI\",comm=\"kernel\",cgroup=\"\",pod_uid=\"\",container_id=\"\",job_id=\"\",job_step=\"\"} 1\n"
        ));
        assert!(text.contains("pod_uid=\"1b2c3d4e-5f60-4718-92a3-b4c5d6e7f809\""));
        assert!(text.contains("rdma_owners_folded 0\n"));
        assert!(!text.contains("pid="), "no pid label unless asked for");
        assert!(!text.contains("rdma_owner_objects_unread"));
        assert!(!text.to_ascii_lowercase().contains("key"), "no MR keys");
    }

    #[test]
    fn pids_and_caps_show_in_the_series() {
        let text = exposition(true, 1, 4);
        assert!(text.contains(",pid=\"170\"} "), "{text}");
        assert!(text.contains("comm=\"other\""));
        assert!(text.contains("rdma_owners_folded 3\n"), "{text}");
        assert!(text.contains("rdma_owner_objects_unread{device=\"rxe_b\",type=\"qp\"} 13\n"));
    }

    #[test]
    fn a_slurm_owner_carries_its_job_and_step() {
        use rdmakit::attribution::{Holdings, OwnerReport, OwnerRow};
        let mut holdings = Holdings::default();
        holdings.objects.insert("qp", 2);
        holdings.qps.insert(("ERR".into(), "RC".into()), 2);
        let report = OwnerReport {
            rows: vec![OwnerRow {
                device: "mlx5_0".into(),
                owner: OwnerKey {
                    comm: "ib_write_bw".into(),
                    cgroup: "/system.slice/slurmstepd.scope/job_4242/step_0/user/task_0".into(),
                    job_id: "4242".into(),
                    job_step: "0".into(),
                    ..OwnerKey::default()
                },
                holdings,
            }],
            ..OwnerReport::default()
        };
        let mut out = MetricSet::new();
        export(&mut out, &report).unwrap();
        let text = out.encode(Format::Text);
        assert!(
            text.contains("rdma_owner_qps{device=\"mlx5_0\",state=\"ERR\",qp_type=\"RC\",comm=\"ib_write_bw\",cgroup=\"/system.slice/slurmstepd.scope/job_4242/step_0/user/task_0\",pod_uid=\"\",container_id=\"\",job_id=\"4242\",job_step=\"0\"} 2\n"),
            "{text}"
        );
    }
}
