//! The `rdma_cgroup` collector: the RDMA cgroup controller's accounting, per cgroup and
//! device (`rdmakit::rdmacg`), from the cgroup v2 hierarchy at `<--path.sysfs>/fs/cgroup`.
//!
//! - `rdma_cgroup_current{cgroup,device,resource}`: handles (`hca_handle`, one per opened
//!   device context) and objects (`hca_object`: PDs, CQs, QPs, MRs, ...) charged now.
//! - `rdma_cgroup_max{cgroup,device,resource}`: the limit (`rdma.max`); +Inf for `max`.
//! - `rdma_cgroups_at_limit{device,resource}`: cgroups whose next create would fail.
//!
//! Only cgroups that hold something or have a limit are exported (the kernel lists every
//! device in every cgroup; idle unlimited ones say nothing), at most [`MAX_CGROUPS`] are
//! read. Without cgroup v2 or without the rdma controller there is nothing to export and
//! no failure: the collector is on by default and silent where it does not apply.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::Context;
use rdmakit::rdmacg;
use rdmakit::sysfs::DeviceFilter;

use super::{Collector, CollectorConfig, CollectorSpec, Reads, Scrape};
use crate::metrics::{Declared, MetricSet, Value};

const CURRENT: Declared = Declared::gauge(
    "rdma_cgroup_current",
    "RDMA handles (hca_handle) or objects (hca_object) charged to the cgroup now (rdma.current)",
);
const MAX: Declared = Declared::gauge(
    "rdma_cgroup_max",
    "The cgroup's RDMA limit (rdma.max); +Inf when unlimited",
);
const AT_LIMIT: Declared = Declared::gauge(
    "rdma_cgroups_at_limit",
    "Cgroups whose rdma.current has reached rdma.max: their next create of that resource fails",
);

/// The most cgroups read per scrape.
pub const MAX_CGROUPS: usize = 10_000;

/// The table row.
pub const SPEC: CollectorSpec = CollectorSpec {
    name: "rdma_cgroup",
    help: "RDMA cgroup controller (cgroup v2): rdma.current and rdma.max per cgroup and device, and the cgroups at their limit",
    default_enabled: true,
    metrics: &[CURRENT, MAX, AT_LIMIT],
    catalog_counters: &[],
    patterns: &[],
    options: &[],
    reads: Reads::NOTHING,
    build,
};

fn build(config: &CollectorConfig) -> Box<dyn Collector> {
    Box::new(RdmaCgroup {
        root: config.sysfs.join("fs/cgroup"),
        filter: config.filter.clone(),
    })
}

struct RdmaCgroup {
    root: PathBuf,
    filter: DeviceFilter,
}

impl Collector for RdmaCgroup {
    fn update(&self, _scrape: &Scrape, out: &mut MetricSet) -> anyhow::Result<()> {
        if !rdmacg::has_controller(&self.root)? {
            return Ok(());
        }
        let tree = rdmacg::read_tree(&self.root, MAX_CGROUPS)
            .with_context(|| format!("reading {}", self.root.display()))?;
        if tree.skipped > 0 {
            tracing::warn!(
                skipped = tree.skipped,
                "more than {MAX_CGROUPS} cgroups with the rdma controller; the rest are not read"
            );
        }
        for e in &tree.errors {
            tracing::debug!("rdma cgroup: {e}");
        }
        let mut at_limit: BTreeMap<(String, String), u64> = BTreeMap::new();
        for cg in &tree.cgroups {
            let interesting = cg.is_interesting();
            for u in cg.usage() {
                if !self.filter.keeps(&u.device) {
                    continue;
                }
                let n = at_limit
                    .entry((u.device.clone(), u.resource.clone()))
                    .or_default();
                if u.at_limit() {
                    *n += 1;
                }
                if !interesting {
                    continue;
                }
                let labels = || {
                    vec![
                        ("cgroup", cg.path.clone()),
                        ("device", u.device.clone()),
                        ("resource", u.resource.clone()),
                    ]
                };
                out.add_declared(&CURRENT, labels(), Value::Int(u.current))?;
                let max = match u.max {
                    rdmacg::Amount::Count(n) => Value::Int(n),
                    rdmacg::Amount::Max => Value::Float(f64::INFINITY),
                };
                out.add_declared(&MAX, labels(), max)?;
            }
        }
        for ((device, resource), n) in at_limit {
            out.add_declared(
                &AT_LIMIT,
                vec![("device", device), ("resource", resource)],
                Value::Int(n),
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::Format;

    fn collector(root: PathBuf) -> RdmaCgroup {
        RdmaCgroup {
            root,
            filter: DeviceFilter::new(None, None).unwrap(),
        }
    }

    #[test]
    fn fixture_tree_gives_current_max_and_the_cgroups_at_their_limit() {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../crates/rdmakit/tests/data/cgroup-rdma");
        let mut out = MetricSet::new();
        collector(root)
            .update(&Scrape::detached(), &mut out)
            .unwrap();
        let text = out.encode(Format::Text);
        let b = "cgroup=\"/lab.slice/job-b.scope\",device=\"rxe0\",resource=\"hca_object\"";
        assert!(
            text.contains(&format!("rdma_cgroup_current{{{b}}} 8\n")),
            "{text}"
        );
        assert!(
            text.contains(&format!("rdma_cgroup_max{{{b}}} 8\n")),
            "{text}"
        );
        let a = "cgroup=\"/lab.slice/job-a.scope\",device=\"rxe0\",resource=\"hca_object\"";
        assert!(
            text.contains(&format!("rdma_cgroup_max{{{a}}} +Inf\n")),
            "{text}"
        );
        assert!(text.contains("rdma_cgroups_at_limit{device=\"rxe0\",resource=\"hca_object\"} 1\n"));
        assert!(
            text.contains("rdma_cgroups_at_limit{device=\"mlx5_0\",resource=\"hca_object\"} 0\n")
        );
        assert!(
            !text.contains("idle.slice"),
            "idle unlimited cgroups are not exported"
        );
    }

    #[test]
    fn no_controller_is_no_output_and_no_failure() {
        let mut out = MetricSet::new();
        collector(std::env::temp_dir().join("rdmad-no-cgroup-here"))
            .update(&Scrape::detached(), &mut out)
            .unwrap();
        assert!(out.names().next().is_none());
    }
}
