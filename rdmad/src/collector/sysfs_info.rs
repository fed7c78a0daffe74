//! The `sysfs_info` collector: what the devices and ports are, from sysfs.
//!
//! Strings go into two info metrics (value 1) so that counters stay cheap and carry only
//! `{device,port}`; join them in PromQL when a label is needed, e.g.
//! `rate(rdma_port_hw_sent_pkts_total[5m]) * on(device,port) group_left(netdev,link_layer) rdma_port_info`.
//!
//! - `rdma_device_info{device,driver,fw_ver,hca_type,board_id,node_guid,pci_addr,is_vf,
//!   pf_pci_addr,numa_node}`: `is_vf` is `true` for an SR-IOV virtual function (its PCI
//!   function has `physfn`, whose PCI address is `pf_pci_addr`), `false` for any other PCI
//!   device, empty for a virtual device (rxe); `numa_node` of the PCI function (empty: unknown)
//! - `rdma_port_info{device,port,link_layer,netdev,state,phys_state,link_width,link_speed}`:
//!   width (`4X`) and lane speed (`EDR`, `HDR`, empty for SDR and unknown) of the active
//!   rate
//! - `rdma_device_numa_node`, `rdma_port_link_width_lanes` (4 for `4X`): the same as numbers
//! - `rdma_port_lane_rate_bytes_per_second`: the kernel's rate of one lane (rate / width)
//! - `rdma_port_effective_rate_bytes_per_second`: the data rate the link can carry after
//!   line encoding and FEC. InfiniBand: lanes x the lane's data rate
//!   (`rdmakit::model::Rate::infiniband_data_bits_per_second`: 8b/10b for SDR/DDR/QDR,
//!   64b/66b for FDR10/FDR/EDR, HDR and up are specified by their data rate). Ethernet
//!   (RoCE): the netdev's speed (`class/net/<netdev>/speed`, Mb/s), which is already the
//!   MAC's data rate (64b/66b and RS-FEC sit below the MAC, the 256b/257b transcoding of
//!   25G-and-up links makes room for RS-FEC), so the FEC mode does not change it; absent when
//!   the netdev reports no speed (virtio_net, link down) or is not in this sysfs tree. The
//!   kernel's own `rate` of a RoCE port is only the IB width x speed nearest to the netdev
//!   speed (1 GbE shows `2.5 Gb/sec (1X SDR)`), hence the netdev's number.
//! - `rdma_port_state_id`, `rdma_port_physical_state_id` (the kernel's numbers: 4 = ACTIVE,
//!   5 = LinkUp), `rdma_port_rate_bytes_per_second` (the active rate / 8), `rdma_port_lid`
//! - `rdma_sysfs_read_errors{collector="sysfs_info",device}`: files of the device that could
//!   not be read or parsed in this scrape (details at debug log level)
//!
//! Absent attributes are empty label values or missing series, never zeros. No counter file
//! and no GID is opened by this collector: the netdev comes from `gid_attrs/ndevs/<i>`,
//! read in index order up to the first one that names a netdev (none on InfiniBand ports).

use super::{Collector, CollectorConfig, CollectorSpec, Reads, Scrape};
use crate::metrics::{Declared, MetricSet, Value};

/// The families this collector adds (all of them: see [`CollectorSpec::metrics`]).
const DEVICE_INFO: Declared = Declared::info(
    "rdma_device",
    "RDMA device identity from sysfs (value 1); empty labels are unknown",
);
const PORT_INFO: Declared = Declared::info(
    "rdma_port",
    "RDMA port identity and state from sysfs (value 1); join on {device,port}",
);
const PORT_STATE_ID: Declared = Declared::gauge(
    "rdma_port_state_id",
    "Logical port state (1 DOWN, 2 INIT, 3 ARMED, 4 ACTIVE, 5 ACTIVE_DEFER)",
);
const PORT_PHYSICAL_STATE_ID: Declared = Declared::gauge(
    "rdma_port_physical_state_id",
    "Physical port state (2 Polling, 3 Disabled, 5 LinkUp, 6 LinkErrorRecovery, ...)",
);
const PORT_RATE_BYTES_PER_SECOND: Declared = Declared::gauge(
    "rdma_port_rate_bytes_per_second",
    "Active link rate of the port (sysfs rate / 8)",
);
const DEVICE_NUMA_NODE: Declared = Declared::gauge(
    "rdma_device_numa_node",
    "NUMA node of the device's PCI function (sysfs device/numa_node; absent when unknown)",
);
const PORT_LINK_WIDTH_LANES: Declared = Declared::gauge(
    "rdma_port_link_width_lanes",
    "Lanes of the port's active link (4 for 4X, from sysfs rate)",
);
const PORT_LANE_RATE: Declared = Declared::gauge(
    "rdma_port_lane_rate_bytes_per_second",
    "Rate of one lane of the port's active link (sysfs rate / width / 8)",
);
const PORT_EFFECTIVE_RATE: Declared = Declared::gauge(
    "rdma_port_effective_rate_bytes_per_second",
    "Data rate of the port's active link after line encoding and FEC (InfiniBand: lanes x lane data rate; Ethernet: the netdev's speed / 8)",
);
const PORT_LID: Declared = Declared::gauge(
    "rdma_port_lid",
    "Local identifier of the port (0 on Ethernet link layers)",
);

/// The table row.
pub const SPEC: CollectorSpec = CollectorSpec {
    name: "sysfs_info",
    help: "device and port identity and state from sysfs (rdma_device_info, rdma_port_info, ...)",
    default_enabled: true,
    metrics: &[
        DEVICE_INFO,
        PORT_INFO,
        PORT_STATE_ID,
        PORT_PHYSICAL_STATE_ID,
        PORT_RATE_BYTES_PER_SECOND,
        PORT_LID,
        DEVICE_NUMA_NODE,
        PORT_LINK_WIDTH_LANES,
        PORT_LANE_RATE,
        PORT_EFFECTIVE_RATE,
        super::scrape::READ_ERRORS,
    ],
    catalog_counters: &[],
    patterns: &[],
    options: &[],
    reads: Reads {
        sysfs_gids: true,
        ..Reads::NOTHING
    },
    build,
};

/// The port's netdev comes from the GID attributes, which the scrape's sysfs snapshot reads
/// for it only up to the first netdev (not the whole 1024-entry table of a RoCE port).
fn build(config: &CollectorConfig) -> Box<dyn Collector> {
    Box::new(SysfsInfo {
        root: config.sysfs.clone(),
    })
}

struct SysfsInfo {
    /// The sysfs root, for the netdevs' speeds.
    root: std::path::PathBuf,
}

/// The speed of `netdev` in bits per second (`<root>/class/net/<netdev>/speed`, Mb/s), when
/// the netdev is in this tree and reports one (the kernel says -1, or refuses the read, for
/// an unknown speed).
fn netdev_speed_bits(root: &std::path::Path, netdev: &str) -> Option<u64> {
    use std::io::Read;
    if netdev.is_empty() || netdev.contains('/') || netdev.starts_with('.') {
        return None;
    }
    let file = std::fs::File::open(root.join("class/net").join(netdev).join("speed")).ok()?;
    let mut text = String::new();
    file.take(32).read_to_string(&mut text).ok()?;
    let mbps: i64 = text.trim().parse().ok()?;
    u64::try_from(mbps)
        .ok()
        .filter(|&m| m > 0)?
        .checked_mul(1_000_000)
}

impl Collector for SysfsInfo {
    fn update(&self, scrape: &Scrape, out: &mut MetricSet) -> anyhow::Result<()> {
        let snapshot = scrape.sysfs_snapshot()?;
        let mut numbers = itoa::Buffer::new();
        for device in &snapshot.devices {
            fn text(v: &Option<String>) -> &str {
                v.as_deref().unwrap_or_default()
            }
            let dev = device.name.as_str();
            let numa_node = device
                .numa_node
                .map(|n| numbers.format(n).to_owned())
                .unwrap_or_default();
            out.add_declared_labels(
                &DEVICE_INFO,
                &[
                    ("device", dev),
                    ("driver", text(&device.driver)),
                    ("fw_ver", text(&device.fw_ver)),
                    ("hca_type", text(&device.hca_type)),
                    ("board_id", text(&device.board_id)),
                    ("node_guid", text(&device.node_guid)),
                    ("pci_addr", text(&device.pci_addr)),
                    (
                        "is_vf",
                        match (&device.pci_addr, &device.pf_pci_addr) {
                            (None, _) => "",
                            (Some(_), Some(_)) => "true",
                            (Some(_), None) => "false",
                        },
                    ),
                    ("pf_pci_addr", text(&device.pf_pci_addr)),
                    ("numa_node", numa_node.as_str()),
                ],
                Value::Int(1),
            )?;
            if let Some(node) = device.numa_node {
                out.add_declared_labels(
                    &DEVICE_NUMA_NODE,
                    &[("device", dev)],
                    Value::Int(u64::from(node)),
                )?;
            }
            for port in &device.ports {
                let port_text = port.num.to_string();
                let labels = [("device", dev), ("port", port_text.as_str())];
                fn name(e: &Option<rdmakit::model::Enumerated>) -> &str {
                    e.as_ref().map(|e| e.name.as_str()).unwrap_or_default()
                }
                let rate = port.rate.as_ref();
                let link_width = rate
                    .and_then(|r| r.width)
                    .map(|w| format!("{w}X"))
                    .unwrap_or_default();
                out.add_declared_labels(
                    &PORT_INFO,
                    &[
                        labels[0],
                        labels[1],
                        ("link_layer", text(&port.link_layer)),
                        ("netdev", text(&port.netdev)),
                        ("state", name(&port.state)),
                        ("phys_state", name(&port.phys_state)),
                        ("link_width", link_width.as_str()),
                        (
                            "link_speed",
                            rate.and_then(|r| r.speed.as_deref()).unwrap_or_default(),
                        ),
                    ],
                    Value::Int(1),
                )?;
                let mut gauge = |family: &Declared, value: u64| {
                    out.add_declared_labels(family, &labels, Value::Int(value))
                };
                if let Some(state) = &port.state {
                    gauge(&PORT_STATE_ID, u64::from(state.id))?;
                }
                if let Some(phys) = &port.phys_state {
                    gauge(&PORT_PHYSICAL_STATE_ID, u64::from(phys.id))?;
                }
                if let Some(bps) = port.rate.as_ref().and_then(|r| r.bits_per_second) {
                    gauge(&PORT_RATE_BYTES_PER_SECOND, bps / 8)?;
                }
                if let Some(width) = rate.and_then(|r| r.width) {
                    gauge(&PORT_LINK_WIDTH_LANES, u64::from(width))?;
                }
                if let (Some(bps), Some(width)) = (
                    rate.and_then(|r| r.bits_per_second),
                    rate.and_then(|r| r.width),
                ) {
                    if width > 0 {
                        gauge(&PORT_LANE_RATE, bps / u64::from(width) / 8)?;
                    }
                }
                let effective = match port.link_layer.as_deref() {
                    Some("InfiniBand") => rate.and_then(|r| r.infiniband_data_bits_per_second()),
                    Some("Ethernet") => port
                        .netdev
                        .as_deref()
                        .and_then(|nd| netdev_speed_bits(&self.root, nd)),
                    _ => None,
                };
                if let Some(bits) = effective {
                    gauge(&PORT_EFFECTIVE_RATE, bits / 8)?;
                }
                if let Some(lid) = port.lid {
                    gauge(&PORT_LID, u64::from(lid))?;
                }
            }
        }
        super::scrape::report_read_errors(
            out,
            SPEC.name,
            snapshot,
            |e| !super::scrape::is_counter_path(&e.path),
            &[],
        )?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::Format;
    use rdmakit::sysfs::DeviceFilter;
    use std::path::PathBuf;

    fn fixture(name: &str) -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/fixtures/sysfs")
            .join(name)
    }

    #[test]
    fn rxe_fixture_info() {
        let config = CollectorConfig::new(fixture("rxe"), DeviceFilter::all());
        let mut out = MetricSet::new();
        build(&config)
            .update(&Scrape::of(&config, [&SPEC]), &mut out)
            .expect("collects");
        let text = out.encode(Format::Text);
        assert!(
            text.contains("rdma_port_info{device=\"rxe0\",port=\"1\",link_layer=\"Ethernet\",netdev=\"eth0\",state=\"ACTIVE\",phys_state=\"LinkUp\",link_width=\"1X\",link_speed=\"\"} 1\n"),
            "{text}"
        );
        assert!(text
            .contains("rdma_port_rate_bytes_per_second{device=\"rxe0\",port=\"1\"} 312500000\n"));
        assert!(text.contains("rdma_port_state_id{device=\"rxe0\",port=\"1\"} 4\n"));
        assert!(
            !text.contains("_total"),
            "no counters from the info collector: {text}"
        );
    }

    #[test]
    fn missing_class_dir_is_no_devices_not_an_error() {
        let config = CollectorConfig::new("/nonexistent-sysfs-root", DeviceFilter::all());
        let mut out = MetricSet::new();
        build(&config)
            .update(&Scrape::of(&config, [&SPEC]), &mut out)
            .expect("no devices is fine");
        assert_eq!(out.names().count(), 0);
    }
}
