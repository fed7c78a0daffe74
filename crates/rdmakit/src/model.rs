//! The shared data model: what every source fills and every face reads.
//!
//! A [`Snapshot`] is one consistent look at the RDMA devices of a host: devices, their ports,
//! GIDs and every counter the kernel exposes, plus the per-file problems met while reading
//! ([`SourceError`]). Sources (sysfs, netlink) build it; faces (rdmad's `/metrics`, rdmactl's
//! tables and `--json`) only read it. The serde field names are a stable contract: `--json`
//! output and golden files are this model serialized.
//!
//! Conventions: absent is not zero (`Option`), raw values are kept as the kernel printed them
//! (a counter in 4-octet words stays in words; [`Counter::bytes`] carries the converted value).

use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// One look at all RDMA devices of a host, plus what could not be read.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snapshot {
    /// Devices, sorted by name.
    pub devices: Vec<Device>,
    /// Per-file or per-request problems; none of them stopped the snapshot.
    pub errors: Vec<SourceError>,
}

impl Snapshot {
    /// The device called `name`, if the snapshot has it.
    pub fn device(&self, name: &str) -> Option<&Device> {
        self.devices.iter().find(|d| d.name == name)
    }
}

/// One RDMA device (`/sys/class/infiniband/<name>`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Device {
    /// Kernel name, e.g. `mlx5_0`, `rxe0`.
    pub name: String,
    /// Node type, e.g. `1: CA`, `4: RNIC`.
    pub node_type: Option<Enumerated>,
    /// Node GUID as printed by the kernel (`0c42:a103:0065:bafe`).
    pub node_guid: Option<String>,
    /// System image GUID as printed by the kernel.
    pub sys_image_guid: Option<String>,
    /// Firmware version; `None` when the file is absent or empty (rxe prints an empty line).
    pub fw_ver: Option<String>,
    /// HCA type (e.g. `MT4123`), driver-provided.
    pub hca_type: Option<String>,
    /// Board id (e.g. `MT_0000000223`), driver-provided.
    pub board_id: Option<String>,
    /// Kernel driver of the parent device (basename of `device/driver`), e.g. `mlx5_core`.
    pub driver: Option<String>,
    /// PCI address of the parent device (basename of `device`), e.g. `0000:3b:00.0`.
    pub pci_addr: Option<String>,
    /// NUMA node of the PCI device (`device/numa_node`; absent when unknown or -1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub numa_node: Option<u32>,
    /// For an SR-IOV virtual function: the PCI address of its physical function (the
    /// basename of `device/physfn`); `None` for a PF or a virtual device.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pf_pci_addr: Option<String>,
    /// Ports, sorted by number.
    pub ports: Vec<Port>,
    /// Device-level driver counters (`<dev>/hw_counters/`, e.g. hfi1, efa), sorted by name.
    pub hw_counters: Vec<Counter>,
}

impl Device {
    /// The port numbered `num`, if the device has it.
    pub fn port(&self, num: u32) -> Option<&Port> {
        self.ports.iter().find(|p| p.num == num)
    }
}

/// A numbered kernel enumeration printed as `<id>: <name>` (port state, physical state, node type).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Enumerated {
    /// The number (e.g. 4 for `4: ACTIVE`).
    pub id: u32,
    /// The name as the kernel printed it (e.g. `ACTIVE`, `LinkUp`).
    pub name: String,
}

/// The active link rate of a port (`ports/<n>/rate`, e.g. `100 Gb/sec (4X EDR)`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rate {
    /// The text as the kernel printed it.
    pub text: String,
    /// The rate in bits per second, when the text parses (`100 Gb/sec` = 100e9).
    pub bits_per_second: Option<u64>,
    /// Link width in lanes (`4` for `4X`).
    pub width: Option<u32>,
    /// Lane speed name (`EDR`, `HDR`); `None` for SDR, which the kernel prints without a name.
    pub speed: Option<String>,
}

impl Rate {
    /// The data rate of an InfiniBand link after line encoding, in bits per second: lanes x
    /// the lane's data rate. The kernel's `rate` (width x the lane's nominal speed) is the
    /// signalling rate for SDR, DDR and QDR, which carry 8 data bits in 10 (8b/10b: 2, 4 and
    /// 8 Gb/s per lane of data), and FDR signals 14.0625 Gbaud with 64b/66b (13.636 Gb/s of
    /// data, the kernel says 14); FDR10 (10.3125 Gbaud, 64b/66b) and EDR (25.78125 Gbaud,
    /// 64b/66b) carry their nominal 10 and 25 Gb/s, and HDR, NDR and XDR are specified by
    /// their data rates (50, 100, 200 Gb/s per lane, FEC included). `None` when the width or
    /// the lane speed is unknown. Not for Ethernet ports: the kernel's `rate` of a RoCE port
    /// is only the IB width and speed nearest to the netdev's speed (ib_get_eth_speed).
    pub fn infiniband_data_bits_per_second(&self) -> Option<u64> {
        let width = u64::from(self.width?);
        let lane: u64 = match self.speed.as_deref() {
            // SDR has no name in the kernel's text: recognise it by 2.5 Gb/s per lane.
            None => {
                let per_lane = self.bits_per_second? / width.max(1);
                if per_lane != 2_500_000_000 {
                    return None;
                }
                2_000_000_000
            }
            Some("DDR") => 4_000_000_000,
            Some("QDR") => 8_000_000_000,
            Some("FDR10") => 10_000_000_000,
            Some("FDR") => 14_062_500_000 * 64 / 66,
            Some("EDR") => 25_000_000_000,
            Some("HDR") => 50_000_000_000,
            Some("NDR") => 100_000_000_000,
            Some("XDR") => 200_000_000_000,
            Some(_) => return None,
        };
        Some(width * lane)
    }
}

/// One port of a device (`ports/<n>/`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Port {
    /// Port number (1-based).
    pub num: u32,
    /// Logical state (`4: ACTIVE`).
    pub state: Option<Enumerated>,
    /// Physical state (`5: LinkUp`).
    pub phys_state: Option<Enumerated>,
    /// Active rate.
    pub rate: Option<Rate>,
    /// `InfiniBand`, `Ethernet` (RoCE, iWARP) or `Unknown` as printed by the kernel.
    pub link_layer: Option<String>,
    /// Local identifier (0 on Ethernet link layers).
    pub lid: Option<u32>,
    /// Local identifier of the subnet manager.
    pub sm_lid: Option<u32>,
    /// Populated GID table entries (all-zero and unreadable entries are skipped), by index.
    pub gids: Vec<Gid>,
    /// The network device of the lowest GID that has one (RoCE, iWARP, rxe).
    pub netdev: Option<String>,
    /// Port counters: IB PMA ones (`counters/`) first, then driver ones (`hw_counters/`),
    /// each group sorted by name.
    pub counters: Vec<Counter>,
}

impl Port {
    /// The counter `name` from `source`, if the port has it.
    pub fn counter(&self, source: CounterSource, name: &str) -> Option<&Counter> {
        self.counters
            .iter()
            .find(|c| c.source == source && *c.name == *name)
    }
}

/// One GID table entry (`ports/<n>/gids/<index>` and its `gid_attrs`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Gid {
    /// Index in the port's GID table.
    pub index: u32,
    /// The GID in canonical IPv6 text form (`fe80::5054:ff:fe12:3456`, `::ffff:10.0.2.15`).
    pub gid: String,
    /// `IB/RoCE v1` or `RoCE v2` as printed by the kernel (`gid_attrs/types/<index>`).
    pub gid_type: Option<String>,
    /// Network device bound to the entry (`gid_attrs/ndevs/<index>`); none on InfiniBand.
    pub netdev: Option<String>,
}

/// Where a counter was read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CounterSource {
    /// IB Performance Management Agent counters, `ports/<n>/counters/`.
    Pma,
    /// Driver counters of a port, `ports/<n>/hw_counters/`.
    Hw,
    /// Driver counters of the whole device, `<dev>/hw_counters/`.
    DeviceHw,
}

impl CounterSource {
    /// The short stable name used in JSON and tables (`pma`, `hw`, `device_hw`).
    pub fn as_str(self) -> &'static str {
        match self {
            CounterSource::Pma => "pma",
            CounterSource::Hw => "hw",
            CounterSource::DeviceHw => "device_hw",
        }
    }

    /// The directory name this source is read from, relative to a port or device directory.
    pub fn dir_name(self) -> &'static str {
        match self {
            CounterSource::Pma => "counters",
            CounterSource::Hw | CounterSource::DeviceHw => "hw_counters",
        }
    }
}

/// Counter or gauge: the catalog's [`crate::catalog::Kind`], under the name the model's
/// readers know it by.
pub use crate::catalog::Kind as CounterKind;
/// The unit of a raw value: the catalog's, [`Unit::Count`] for a counter it does not describe.
pub use crate::catalog::Unit;

/// One counter file and its value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counter {
    /// File name, exactly as the kernel names it (`port_xmit_data`, `VL15_dropped`); shared,
    /// so that a snapshot through kept descriptors allocates no name per counter.
    pub name: Arc<str>,
    /// Which directory it came from.
    pub source: CounterSource,
    /// The raw value as printed by the kernel.
    pub value: u64,
    /// Counter or gauge.
    pub kind: CounterKind,
    /// The unit of `value` as far as the faces convert it ([`Unit::for_snapshot`]: the data
    /// sizes and durations, else [`Unit::Count`]); in JSON, [`Unit::snapshot_name`].
    #[serde(with = "snapshot_unit")]
    pub unit: Unit,
    /// The value in bytes when the unit is a data size (`value x 4` for 4-octet words);
    /// `None` for non-data units and on overflow.
    pub bytes: Option<u64>,
}

impl Counter {
    /// Build a counter from a file name and its raw value, guessing kind, unit and bytes
    /// from the name ([`classify`]). The sysfs reader then gives every counter the catalog
    /// describes the catalog's kind and unit ([`crate::catalog::Catalog::kind_and_unit`]).
    pub fn new(name: impl Into<Arc<str>>, source: CounterSource, value: u64) -> Counter {
        let name = name.into();
        let (kind, unit) = classify(&name, source);
        Counter::described(name, source, value, kind, unit)
    }

    /// A counter of the given kind and unit (`bytes` follows the unit), without the file-name
    /// guess of [`Counter::new`]: for a reader that knows them (from the catalog).
    pub fn described(
        name: Arc<str>,
        source: CounterSource,
        value: u64,
        kind: CounterKind,
        unit: Unit,
    ) -> Counter {
        Counter {
            name,
            source,
            value,
            kind,
            unit,
            bytes: None,
        }
        .with_kind_and_unit(kind, unit)
    }

    /// This counter with another kind and unit (`bytes` follows the unit).
    pub fn with_kind_and_unit(mut self, kind: CounterKind, unit: Unit) -> Counter {
        self.set_kind_and_unit(kind, unit);
        self
    }

    /// Set the kind and unit (`bytes` follows the unit).
    pub fn set_kind_and_unit(&mut self, kind: CounterKind, unit: Unit) {
        self.kind = kind;
        self.unit = unit.for_snapshot();
        self.bytes = unit.bytes(self.value);
    }
}

/// A counter's unit in JSON, as snapshot files have always spelled it.
mod snapshot_unit {
    use super::Unit;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(unit: &Unit, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(unit.snapshot_name())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Unit, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        Unit::parse_snapshot_name(&text).ok_or_else(|| {
            serde::de::Error::unknown_variant(
                &text,
                &[
                    "count",
                    "four_octet_words",
                    "bytes",
                    "milliseconds",
                    "microseconds",
                ],
            )
        })
    }
}

/// Kind and unit of a counter from its name and source alone: the guess for counters the
/// catalog does not describe (see [`crate::catalog::Catalog::kind_and_unit`]).
///
/// - PMA `port_xmit_data` / `port_rcv_data`: 4-octet words.
/// - `lifespan`: gauge in milliseconds (the driver's cache period, not a counter).
/// - driver counters named `active_*` or `watermark_*` (bnxt_re): gauges.
/// - driver counters ending in `_bytes` (efa, bnxt_re): bytes.
pub fn classify(name: &str, source: CounterSource) -> (CounterKind, Unit) {
    match source {
        CounterSource::Pma => {
            if name == "port_xmit_data" || name == "port_rcv_data" {
                (CounterKind::Counter, Unit::Words4)
            } else {
                (CounterKind::Counter, Unit::Count)
            }
        }
        CounterSource::Hw | CounterSource::DeviceHw => {
            if name == "lifespan" {
                (CounterKind::Gauge, Unit::Ms)
            } else if name.starts_with("active_") || name.starts_with("watermark_") {
                (CounterKind::Gauge, Unit::Count)
            } else if name.ends_with("_bytes") {
                (CounterKind::Counter, Unit::Bytes)
            } else {
                (CounterKind::Counter, Unit::Count)
            }
        }
    }
}

/// Which source reported a [`SourceError`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ErrorOrigin {
    /// The sysfs reader.
    Sysfs,
    /// The RDMA netlink client.
    Netlink,
}

/// What went wrong with one file or request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum SourceErrorKind {
    /// The kernel said the value is not available (`N/A (no PMA)` on iWARP, MANA, ...).
    NotAvailable,
    /// The read failed with EINVAL (counters the device cannot report).
    InvalidArgument,
    /// The content did not parse (garbage, wrong format).
    Unparsable,
    /// The file is larger than the read limit.
    TooLarge,
    /// A directory where a file was expected.
    IsDirectory,
    /// Permission denied.
    PermissionDenied,
    /// Any other I/O error.
    Io,
}

impl SourceErrorKind {
    /// A short stable name (`not_available`, `unparsable`, ...), as in JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            SourceErrorKind::NotAvailable => "not_available",
            SourceErrorKind::InvalidArgument => "invalid_argument",
            SourceErrorKind::Unparsable => "unparsable",
            SourceErrorKind::TooLarge => "too_large",
            SourceErrorKind::IsDirectory => "is_directory",
            SourceErrorKind::PermissionDenied => "permission_denied",
            SourceErrorKind::Io => "io",
        }
    }
}

impl std::fmt::Display for SourceErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A problem with one file (sysfs) or request (netlink) that did not stop the snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{path}: {kind}: {detail}")]
pub struct SourceError {
    /// Which source met it.
    pub origin: ErrorOrigin,
    /// The device concerned, when known.
    pub device: Option<String>,
    /// The port concerned, when known.
    pub port: Option<u32>,
    /// The file (sysfs: relative to the sysfs root, e.g.
    /// `class/infiniband/mlx5_0/ports/1/counters/VL15_dropped`) or request that failed.
    pub path: String,
    /// What kind of problem.
    pub kind: SourceErrorKind,
    /// Human detail: the OS error or the offending content (shortened).
    pub detail: String,
}

#[cfg(test)]
mod rate_tests {
    use super::Rate;

    fn rate(text: &str, bps: u64, width: u32, speed: Option<&str>) -> Rate {
        Rate {
            text: text.into(),
            bits_per_second: Some(bps),
            width: Some(width),
            speed: speed.map(str::to_string),
        }
    }

    #[test]
    fn infiniband_data_rates() {
        let g = 1_000_000_000u64;
        let cases = [
            (rate("10 Gb/sec (4X)", 10 * g, 4, None), Some(8 * g)),
            (
                rate("40 Gb/sec (4X QDR)", 40 * g, 4, Some("QDR")),
                Some(32 * g),
            ),
            (
                rate("56 Gb/sec (4X FDR)", 56 * g, 4, Some("FDR")),
                Some(54_545_454_544),
            ),
            (
                rate("100 Gb/sec (4X EDR)", 100 * g, 4, Some("EDR")),
                Some(100 * g),
            ),
            (
                rate("200 Gb/sec (2X NDR)", 200 * g, 2, Some("NDR")),
                Some(200 * g),
            ),
            (rate("5 Gb/sec (1X)", 5 * g, 1, None), None),
            (rate("1 Gb/sec (1X ABC)", g, 1, Some("ABC")), None),
        ];
        for (r, want) in cases {
            assert_eq!(r.infiniband_data_bits_per_second(), want, "{}", r.text);
        }
    }
}
