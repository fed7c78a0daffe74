//! The catalog's vocabulary: one [`CounterInfo`] per (driver family, counter name), and the
//! small closed sets its fields draw from (units, kinds, severities, where the file lives,
//! which experiment or lesson chapter shows the counter).
//!
//! Every closed set knows its own spelling in the TOML files (`as_str`) and parses it back
//! (`parse`), so the loader can name the allowed values when a file uses a wrong one
//! (rdma-uapi's `code_names!`, the closed-set shape).

use serde::Serialize;

crate::uapi::code_names! {
    /// What one step of a counter's value stands for: the one unit type of the workspace
    /// (catalog entries, [`crate::model::Counter`], the faces' conversions).
    pub enum Unit {
        /// Packets (or frames) on the wire.
        Packets => "packets",
        /// Octets.
        Bytes => "bytes",
        /// 4-octet words: multiply by 4 for bytes (not by the lane count).
        Words4 => "words4",
        /// Occurrences of some event (an error, a NAK, a retry, a state change).
        Events => "events",
        /// Work requests or protocol operations (a READ request, a SEND completion).
        Operations => "operations",
        /// Management messages (for example connection-manager MADs).
        Messages => "messages",
        /// Hardware clock ticks whose length depends on the device and link speed.
        Ticks => "ticks",
        /// Milliseconds.
        Ms => "ms",
        /// Microseconds (mlx5 pause durations).
        Us => "us",
        /// A number of live objects (QPs, MRs, ...).
        Objects => "objects",
        /// Counted one by one, nothing more known: a counter the catalog does not describe
        /// (the file-name rules of [`crate::model::classify`]). Not a catalog spelling: the
        /// loader refuses it (declared last, see [`Unit::CATALOG_NAMES`]).
        Count => "count",
    }
}

impl Unit {
    /// The spellings a catalog file may use: every unit but [`Unit::Count`].
    pub const CATALOG_NAMES: &'static [&'static str] =
        Unit::NAMES.split_at(Unit::NAMES.len() - 1).0;

    /// Parses a catalog file's spelling ([`Unit::CATALOG_NAMES`]).
    pub fn parse_catalog(text: &str) -> Option<Unit> {
        Unit::parse(text).filter(|unit| *unit != Unit::Count)
    }

    /// The value in bytes of `value` steps of a data-size unit (x4 for 4-octet words, `None`
    /// on overflow); `None` for every other unit.
    pub fn bytes(self, value: u64) -> Option<u64> {
        match self {
            Unit::Words4 => value.checked_mul(4),
            Unit::Bytes => Some(value),
            _ => None,
        }
    }

    /// The name of the unit in a [`crate::model::Counter`]'s JSON (snapshot files, `rdmactl
    /// counters --json`), coarser than the catalog's and kept as it was: units counted one by
    /// one are all `count`.
    pub fn snapshot_name(self) -> &'static str {
        match self {
            Unit::Words4 => "four_octet_words",
            Unit::Bytes => "bytes",
            Unit::Ms => "milliseconds",
            Unit::Us => "microseconds",
            Unit::Packets
            | Unit::Events
            | Unit::Operations
            | Unit::Messages
            | Unit::Ticks
            | Unit::Objects
            | Unit::Count => "count",
        }
    }

    /// The unit as a [`crate::model::Counter`] keeps it: what the faces convert (data sizes,
    /// durations) as it is, every unit counted one by one as [`Unit::Count`], so a snapshot's
    /// JSON (which spells those all `count`) reads back to the same snapshot.
    pub fn for_snapshot(self) -> Unit {
        Unit::parse_snapshot_name(self.snapshot_name()).unwrap_or(Unit::Count)
    }

    /// Parses [`Unit::snapshot_name`] back (`count` reads as [`Unit::Count`]).
    pub fn parse_snapshot_name(text: &str) -> Option<Unit> {
        Some(match text {
            "four_octet_words" => Unit::Words4,
            "bytes" => Unit::Bytes,
            "milliseconds" => Unit::Ms,
            "microseconds" => Unit::Us,
            "count" => Unit::Count,
            _ => return None,
        })
    }
}

crate::uapi::code_names! {
    /// Whether the value only grows (until it wraps or saturates) or goes up and down: the
    /// one kind type of the workspace (catalog entries, `rdmakit::model::CounterKind`,
    /// rdmad's metric families). A counter file is a counter or a gauge; info and histogram
    /// are the exposition's own kinds (declared last, see [`Kind::CATALOG_NAMES`]).
    pub enum Kind {
        /// Monotonic: rate it, alert on its increase. In the exposition the family name has
        /// no `_total` (the encoder adds it).
        Counter => "counter",
        /// A level or a setting: read it as is.
        Gauge => "gauge",
        /// Exposition only: strings as labels on a constant 1; the family name has no
        /// `_info` (the encoder adds it). Not a catalog spelling.
        Info => "info",
        /// Exposition only: a distribution (bucket, sum and count series). Not a catalog
        /// spelling.
        Histogram => "histogram",
    }
}

impl Kind {
    /// The spellings a catalog file may use: `counter` and `gauge`.
    pub const CATALOG_NAMES: &'static [&'static str] = Kind::NAMES.split_at(2).0;

    /// Parses a catalog file's spelling ([`Kind::CATALOG_NAMES`]).
    pub fn parse_catalog(text: &str) -> Option<Kind> {
        Kind::parse(text).filter(|kind| matches!(kind, Kind::Counter | Kind::Gauge))
    }

    /// The type as the text exposition format 0.0.4's `# TYPE` line spells it (where an
    /// info family is a gauge).
    pub fn type_name(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge | Kind::Info => "gauge",
            Kind::Histogram => "histogram",
        }
    }

    /// The name a family added as `family` has in the text exposition: `_total` added to a
    /// counter, `_info` to an info family, a histogram's base name (its series add
    /// `_bucket`, `_sum`, `_count`).
    pub fn exposed_name(self, family: &str) -> String {
        format!("{family}{}", self.suffix())
    }

    /// What the exposition adds to a family's name on its series: `_total` for a counter,
    /// `_info` for an info family, nothing for the others.
    pub fn suffix(self) -> &'static str {
        match self {
            Kind::Counter => "_total",
            Kind::Info => "_info",
            Kind::Gauge | Kind::Histogram => "",
        }
    }
}

crate::uapi::code_names! {
    /// What a counter does when it reaches its maximum.
    pub enum Overflow {
        /// Starts again from zero; a reader must handle the wrap when computing rates.
        Wrap => "wrap",
        /// Stops at all-ones (the InfiniBand PortCounters rule): it no longer moves.
        Saturate => "saturate",
    }
}

crate::uapi::code_names! {
    /// How worried a reader should be when a counter moves.
    pub enum Severity {
        /// Normal traffic or bookkeeping.
        Info => "info",
        /// Worth a look when it grows steadily; often benign in small numbers.
        Warning => "warning",
        /// Something failed: a work request, a link, a packet that should not be lost.
        Error => "error",
    }
}

crate::uapi::code_names! {
    /// Where the value is read under `/sys/class/infiniband/<dev>/`.
    pub enum Location {
        /// `ports/<n>/counters/`: the InfiniBand PMA port counters.
        PortCounters => "port_counters",
        /// `ports/<n>/hw_counters/`: the driver's per-port counters.
        PortHwCounters => "port_hw_counters",
        /// `hw_counters/` at the device level (for example efa, hfi1).
        DeviceHwCounters => "device_hw_counters",
        /// A port's optional counters (mlx5 `cc_*`, `rdma_*`): never in sysfs, enabled with
        /// `rdma statistic set ... optional-counters` and read over RDMA netlink.
        PortNetlink => "port_netlink",
        /// `ports/<n>/<group>/<message>`: ib_cm message counters, one directory per group
        /// (older kernels: `/sys/class/infiniband_cm/<dev>/<n>/<group>/`).
        PortCm => "port_cm",
        /// The driver statistics of the port's network device (`ethtool -S <netdev>`),
        /// curated into driver-independent families (catalog family `netdev`).
        Netdev => "netdev",
    }
}

impl Location {
    /// A path pattern for humans, relative to the device directory.
    pub fn path_hint(self) -> &'static str {
        match self {
            Location::PortCounters => "/sys/class/infiniband/<dev>/ports/<n>/counters/",
            Location::PortHwCounters => "/sys/class/infiniband/<dev>/ports/<n>/hw_counters/",
            Location::DeviceHwCounters => "/sys/class/infiniband/<dev>/hw_counters/",
            Location::PortNetlink => "rdma statistic show link <dev>/<n> (netlink only, not sysfs)",
            Location::PortCm => "/sys/class/infiniband/<dev>/ports/<n>/",
            Location::Netdev => "ethtool -S <netdev> (the port's network device)",
        }
    }
}

crate::uapi::code_names! {
    /// The rdmactl experiments (`rdmactl experiment run NAME`): the one list of their names,
    /// titles and chapters. rdma-experiments declares the verbs ones (all but `wire`, which
    /// rdmactl implements on the tracer); a counter can point to any of them.
    pub enum Experiment {
        /// Registering memory regions: cost, pinning, limits.
        MrRegistration => "mr-registration",
        /// Walking a QP through RESET, INIT, RTR, RTS and the error states.
        QpStates => "qp-states",
        /// Provoking completion errors (bad rkey, RNR, retry exhaustion).
        QpErrors => "qp-errors",
        /// Keys and access flags: what a wrong rkey or missing flag does.
        SecurityKeys => "security-keys",
        /// SEND/RECV against RDMA WRITE/READ.
        OneVsTwoSided => "one-vs-two-sided",
        /// Polling against event-driven completion queues.
        CqModes => "cq-modes",
        /// RC, UC and UD side by side.
        Transports => "transports",
        /// Capturing real RoCE v2 frames of an RDMA WRITE and decoding what a sniffer sees
        /// (rdmactl's tracer experiment: two rxe devices on a veth pair, root).
        Wire => "wire",
    }
}

impl Experiment {
    /// The one-line title `rdmactl experiment list` prints.
    pub fn title(self) -> &'static str {
        match self {
            Experiment::MrRegistration => {
                "Registering memory: cost, pinning, keys and access rules"
            }
            Experiment::QpStates => {
                "Walking a QP through RESET, INIT, RTR, RTS (and SQD, ERR, back to RESET)"
            }
            Experiment::QpErrors => {
                "Completion errors: provoke each one and read what the device says"
            }
            Experiment::SecurityKeys => {
                "The rkey is a capability: what it grants, what revokes it, what it costs to guess"
            }
            Experiment::OneVsTwoSided => {
                "One-sided vs two-sided: SEND/RECV, WRITE, WRITE_WITH_IMM, READ"
            }
            Experiment::CqModes => "Completion queues: busy polling vs completion channel events",
            Experiment::Transports => {
                "Transports and addressing: GIDs, RoCE v1/v2, MTU, and what InfiniBand adds"
            }
            Experiment::Wire => "What a sniffer sees: BTH and RETH of a real RDMA WRITE",
        }
    }

    /// The course chapter the experiment belongs to.
    pub fn lesson(self) -> Lesson {
        match self {
            Experiment::MrRegistration => Lesson::MemoryRegistration,
            Experiment::QpStates => Lesson::QueuePairs,
            Experiment::QpErrors => Lesson::ErrorHandling,
            Experiment::SecurityKeys | Experiment::Wire => Lesson::Security,
            Experiment::OneVsTwoSided => Lesson::OneVsTwoSided,
            Experiment::CqModes => Lesson::VerbsApi,
            Experiment::Transports => Lesson::Transports,
        }
    }

    /// What it needs beyond one RDMA device, when that is more (`None` for most).
    pub fn needs(self) -> Option<&'static str> {
        match self {
            Experiment::Wire => {
                Some("rxe_a and rxe_b on a veth pair (rdmactl lab run --devices 2) and root")
            }
            _ => None,
        }
    }
}

crate::uapi::code_names! {
    /// The course chapters a counter can point to.
    pub enum Lesson {
        /// Chapter 1.
        WhyRdma => "why-rdma",
        /// Chapter 2.
        Architecture => "architecture",
        /// Chapter 3.
        MemoryRegistration => "memory-registration",
        /// Chapter 4.
        QueuePairs => "queue-pairs",
        /// Chapter 5.
        VerbsApi => "verbs-api",
        /// Chapter 6.
        OneVsTwoSided => "one-vs-two-sided",
        /// Chapter 7.
        Transports => "transports",
        /// Chapter 8.
        ErrorHandling => "error-handling",
        /// Chapter 9.
        Resources => "resources",
        /// Chapter 10.
        Security => "security",
        /// Chapter 11.
        Observing => "observing",
        /// Chapter 12.
        ApiBreadth => "api-breadth",
        /// Chapter 13.
        DesignPatterns => "design-patterns",
        /// Chapter 14, the appendix on the project's tools.
        Tools => "tools",
        /// Chapter 15.
        Threads => "threads",
        /// Chapter 16, the capstone.
        EventDrivenServer => "event-driven-server",
        /// Chapter 17, debugging.
        Debugging => "debugging",
    }
}

impl Lesson {
    /// The chapter number (1 for why-rdma ... 14 for the tools appendix, then the later
    /// chapters in order).
    pub fn chapter(self) -> u8 {
        // ALL is in chapter order and has fewer than 256 entries, so the index always fits.
        Lesson::ALL
            .iter()
            .position(|l| *l == self)
            .map_or(0, |i| i as u8 + 1)
    }
}

/// Widths (in bits) a counter may have. The IB PMA error counters are narrow (4, 8, 16).
pub const WIDTHS: &[u8] = &[4, 8, 16, 32, 64];

/// One driver family: one catalog file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FamilyInfo {
    /// The family name (`mlx5`, `rxe`, ...), equal to the file name without `.toml`.
    pub name: String,
    /// One line saying which devices and which sysfs directory the family covers.
    pub description: String,
    /// Prefixes that may precede a counter's name and mean "the same counter, seen from
    /// elsewhere" (mlx5: `vport_` on switchdev representors).
    pub alias_prefixes: Vec<String>,
    /// True when the driver takes its counter names from the device firmware at run time
    /// (ionic): the catalog cannot list them, and `explain` says so.
    pub names_from_firmware: bool,
    /// The catalog file.
    pub file: String,
}

/// Everything the catalog says about one counter of one driver family.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CounterInfo {
    /// The driver family (the catalog file's name without `.toml`): `mlx5`, `rxe`, `ib_pma`...
    pub driver: String,
    /// The file name in sysfs, exactly as the kernel spells it.
    pub name: String,
    /// One line for tables and Prometheus HELP text.
    pub summary: String,
    /// Where it lives in sysfs.
    pub location: Location,
    /// What one step stands for.
    pub unit: Unit,
    /// Counter or gauge.
    pub kind: Kind,
    /// Width in bits.
    pub width: u8,
    /// What happens at the maximum.
    pub overflow: Overflow,
    /// How worried to be when it moves.
    pub severity: Severity,
    /// What it counts, for a sysadmin.
    pub meaning: String,
    /// Likely causes when it moves (may be empty for plain traffic counters).
    pub causes: Vec<String>,
    /// What to check next.
    pub next_steps: Vec<String>,
    /// The experiment that makes it move, if there is one.
    pub experiment: Option<Experiment>,
    /// The course chapter that explains it, if there is one.
    pub lesson: Option<Lesson>,
    /// The kernel series (`6.1`, `6.12`, ...) whose sources declare this file name, from
    /// `catalog/kernel/*.tsv` (empty for families the extraction does not cover).
    pub kernels: Vec<String>,
    /// The file name older kernels gave this counter, if the driver renamed it.
    pub renamed_from: Option<String>,
    /// The file name newer kernels give this counter, if the driver renamed it.
    pub renamed_to: Option<String>,
    /// True for a port counter whose file also exists in the device-level `hw_counters/`
    /// (mlx4's diag counters, mana's rate_inc_events): the same meaning, for the device.
    pub also_device: bool,
    /// Where the entry's facts come from (the driver file, table entry, register or
    /// accessor), for entries generated from the source (hfi1).
    pub source: Option<String>,
    /// The catalog file it came from (for error messages and `--json`).
    pub file: String,
}
