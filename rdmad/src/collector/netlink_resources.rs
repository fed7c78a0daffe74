//! The `netlink_resources` collector: how many RDMA objects each device holds now, from the
//! RDMA netlink resource summary (what `rdma resource show` prints).
//!
//! - `rdma_resources{device,type}`: live objects of each kind (`pd`, `cq`, `qp`, `cm_id`,
//!   `mr`, `ctx`, `srq`), as the kernel counts them for the caller.
//!
//! One `RES_GET` dump per scrape, no capability needed, no keys involved (the summary carries
//! counts only). The device filter applies to its output too. A kernel without RDMA netlink
//! (no `ib_core`) means "no devices", not a failure, like a missing `/sys/class/infiniband`.

use anyhow::Context;
use rdmakit::sysfs::DeviceFilter;

use super::{Collector, CollectorConfig, CollectorSpec, Reads, Scrape};
use crate::metrics::{Declared, MetricSet, Value};

/// The families this collector adds (all of them: see [`CollectorSpec::metrics`]).
const RESOURCES: Declared = Declared::gauge(
    "rdma_resources",
    "RDMA objects of each type on the device now (RDMA netlink resource summary, as `rdma resource show`)",
);

/// The table row.
pub const SPEC: CollectorSpec = CollectorSpec {
    name: "netlink_resources",
    help: "RDMA objects per device and kind (QPs, CQs, MRs, ...) from the RDMA netlink resource summary",
    default_enabled: true,
    metrics: &[RESOURCES],
    catalog_counters: &[],
    patterns: &[],
    options: &[],
    reads: Reads::NOTHING,
    build,
};

fn build(config: &CollectorConfig) -> Box<dyn Collector> {
    Box::new(NetlinkResources {
        filter: config.filter.clone(),
    })
}

struct NetlinkResources {
    filter: DeviceFilter,
}

impl Collector for NetlinkResources {
    fn update(&self, scrape: &Scrape, out: &mut MetricSet) -> anyhow::Result<()> {
        let summaries = scrape.netlink(|netlink| {
            netlink
                .client()
                .resource_summary()
                .context("RDMA netlink resource summary")
        })?;
        let Some(summaries) = summaries else {
            return Ok(());
        };
        for summary in summaries.iter().filter(|s| self.filter.keeps(&s.dev_name)) {
            for (kind, count) in &summary.counts {
                out.add_declared(
                    &RESOURCES,
                    vec![("device", summary.dev_name.clone()), ("type", kind.clone())],
                    Value::Int(*count),
                )?;
            }
        }
        Ok(())
    }
}
