//! Driver statistics that matter for RoCE, under driver-independent names.
//!
//! Each [`Family`] is one entry of the counter catalog's `netdev` family (`catalog/netdev.toml`:
//! meaning, kind, unit) and one metric family of rdmad (`rdma_netdev_<name>_total`). The
//! table below says which statistic of which driver feeds it, with which labels; the names are
//! the drivers' own ethtool strings:
//!
//! | family | mlx5_core | bnxt_en | ice |
//! | --- | --- | --- | --- |
//! | `pause_frames` {direction,priority} | `rx_prio<N>_pause`, `tx_prio<N>_pause`, `rx_global_pause`, `tx_global_pause` | `rx_pfc_ena_frames_pri<N>`, `tx_pfc_ena_frames_pri<N>`, `rx_pause_frames`, `tx_pause_frames` | `rx_priority_<N>_xoff.nic`, `tx_priority_<N>_xoff.nic`, `link_xoff_rx.nic`, `link_xoff_tx.nic` |
//! | `pause_duration` {direction,priority} (us) | `rx_prio<N>_pause_duration`, `tx_prio<N>_pause_duration`, `{rx,tx}_global_pause_duration` | `pfc_pri<N>_rx_duration_us`, `pfc_pri<N>_tx_duration_us` | - |
//! | `discards` {direction,reason} | `rx_discards_phy`, `tx_discards_phy` (reason `port`), `rx_out_of_buffer` (reason `out_of_buffer`) | `rx_stat_discard`, `tx_stat_discard` (`port`) | `rx_dropped.nic` (`port`) |
//! | `crc_errors` | `rx_crc_errors_phy` | `rx_fcs_err_frames` | `rx_crc_errors.nic` |
//! | `symbol_errors` | `rx_symbol_err_phy` | - | - |
//! | `link_down_events` | `link_down_events_phy` | `link_down_events` | - |
//!
//! Sources: drivers/net/ethernet/mellanox/mlx5/core/en_stats.c (and the mlx5 counters
//! documentation), drivers/net/ethernet/broadcom/bnxt/bnxt_ethtool.c,
//! drivers/net/ethernet/intel/ice/ice_ethtool.c. "Priority" is the 802.1p priority the
//! frame pauses (PFC), or `global` for link-level 802.3x pause. A `-` means the driver has
//! no such statistic: the series is absent, never a zero.
//!
//! The kernel's standard statistics (ethtool netlink, [`super::standard`]) feed the same
//! families where they mean the same thing, and new ones otherwise ([`curate_standard`]):
//!
//! | standard statistic | family, labels |
//! | --- | --- |
//! | pause `tx_pause_frames`, `rx_pause_frames` | `pause_frames` {direction, priority=`global`} |
//! | eth-phy `SymbolErrorDuringCarrier` | `symbol_errors` |
//! | eth-mac `FrameCheckSequenceErrors` | `crc_errors` |
//! | eth-mac `OctetsTransmittedOK`, `OctetsReceivedOK` | `mac_bytes` {direction} |
//! | every other eth-phy, eth-mac, eth-ctrl, rmon statistic | `standard_frames` {group, stat} |
//!
//! No double counting: one series per (family, labels). When the kernel gives a standard
//! statistic for a series that a driver statistic would also feed (mlx5 `rx_global_pause`,
//! `rx_crc_errors_phy`, `rx_symbol_err_phy`; bnxt_en `rx_pause_frames`, ...), the standard
//! value wins (it is defined by IEEE 802.3 the same way on every driver) and the driver's
//! statistic is exported under its own name as a generic one instead. Per-priority (PFC)
//! pause has no standard counterpart and always comes from the driver.

/// A curated family (its catalog name is [`Family::name`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Family {
    /// Pause (XOFF) frames, per direction and priority.
    PauseFrames,
    /// Time paused, per direction and priority, in microseconds.
    PauseDuration,
    /// Frames the NIC dropped, per direction and reason.
    Discards,
    /// Frames received with a bad frame check sequence.
    CrcErrors,
    /// Physical-layer symbol errors.
    SymbolErrors,
    /// Times the physical link went down.
    LinkDownEvents,
    /// The kernel's standard frame counters (IEEE 802.3 / RMON), by group and name.
    StandardFrames,
    /// Bytes the MAC sent and received in good frames (IEEE 802.3 aOctets*OK).
    MacBytes,
}

impl Family {
    /// Every family.
    pub const ALL: &'static [Family] = &[
        Family::PauseFrames,
        Family::PauseDuration,
        Family::Discards,
        Family::CrcErrors,
        Family::SymbolErrors,
        Family::LinkDownEvents,
        Family::StandardFrames,
        Family::MacBytes,
    ];

    /// The catalog name (family `netdev`) and metric name fragment.
    pub fn name(self) -> &'static str {
        match self {
            Family::PauseFrames => "pause_frames",
            Family::PauseDuration => "pause_duration",
            Family::Discards => "discards",
            Family::CrcErrors => "crc_errors",
            Family::SymbolErrors => "symbol_errors",
            Family::LinkDownEvents => "link_down_events",
            Family::StandardFrames => "standard_frames",
            Family::MacBytes => "mac_bytes",
        }
    }

    /// The labels its series carry beyond `{device,port,netdev}`, in order.
    pub fn labels(self) -> &'static [&'static str] {
        match self {
            Family::PauseFrames | Family::PauseDuration => &["direction", "priority"],
            Family::Discards => &["direction", "reason"],
            Family::StandardFrames => &["group", "stat"],
            Family::MacBytes => &["direction"],
            Family::CrcErrors | Family::SymbolErrors | Family::LinkDownEvents => &[],
        }
    }
}

/// What one driver statistic is, curated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Curated {
    /// The family.
    pub family: Family,
    /// Values of [`Family::labels`], in that order.
    pub labels: Vec<String>,
}

/// Placeholder for a priority 0..7 in the table.
const N: &str = "<N>";

type Rule = (&'static str, Family, &'static str, &'static str);

/// (ethtool name with `<N>` for a priority, family, first label, second label); a second
/// label of `<N>` takes the priority, `global` stands for link-level pause.
const MLX5: &[Rule] = &[
    ("rx_prio<N>_pause", Family::PauseFrames, "rx", N),
    ("tx_prio<N>_pause", Family::PauseFrames, "tx", N),
    ("rx_global_pause", Family::PauseFrames, "rx", "global"),
    ("tx_global_pause", Family::PauseFrames, "tx", "global"),
    ("rx_prio<N>_pause_duration", Family::PauseDuration, "rx", N),
    ("tx_prio<N>_pause_duration", Family::PauseDuration, "tx", N),
    (
        "rx_global_pause_duration",
        Family::PauseDuration,
        "rx",
        "global",
    ),
    (
        "tx_global_pause_duration",
        Family::PauseDuration,
        "tx",
        "global",
    ),
    ("rx_discards_phy", Family::Discards, "rx", "port"),
    ("tx_discards_phy", Family::Discards, "tx", "port"),
    ("rx_out_of_buffer", Family::Discards, "rx", "out_of_buffer"),
    ("rx_crc_errors_phy", Family::CrcErrors, "", ""),
    ("rx_symbol_err_phy", Family::SymbolErrors, "", ""),
    ("link_down_events_phy", Family::LinkDownEvents, "", ""),
];

const BNXT: &[Rule] = &[
    ("rx_pfc_ena_frames_pri<N>", Family::PauseFrames, "rx", N),
    ("tx_pfc_ena_frames_pri<N>", Family::PauseFrames, "tx", N),
    ("rx_pause_frames", Family::PauseFrames, "rx", "global"),
    ("pfc_pri<N>_rx_duration_us", Family::PauseDuration, "rx", N),
    ("pfc_pri<N>_tx_duration_us", Family::PauseDuration, "tx", N),
    ("tx_pause_frames", Family::PauseFrames, "tx", "global"),
    ("rx_stat_discard", Family::Discards, "rx", "port"),
    ("tx_stat_discard", Family::Discards, "tx", "port"),
    ("rx_fcs_err_frames", Family::CrcErrors, "", ""),
    ("link_down_events", Family::LinkDownEvents, "", ""),
];

const ICE: &[Rule] = &[
    ("rx_priority_<N>_xoff.nic", Family::PauseFrames, "rx", N),
    ("tx_priority_<N>_xoff.nic", Family::PauseFrames, "tx", N),
    ("link_xoff_rx.nic", Family::PauseFrames, "rx", "global"),
    ("link_xoff_tx.nic", Family::PauseFrames, "tx", "global"),
    ("rx_dropped.nic", Family::Discards, "rx", "port"),
    ("rx_crc_errors.nic", Family::CrcErrors, "", ""),
];

/// The rules of a driver (the `driver` of `ETHTOOL_GDRVINFO`).
fn rules(driver: &str) -> &'static [Rule] {
    match driver {
        "mlx5_core" => MLX5,
        "bnxt_en" => BNXT,
        "ice" => ICE,
        _ => &[],
    }
}

/// Whether the driver has curated statistics at all.
pub fn knows(driver: &str) -> bool {
    !rules(driver).is_empty()
}

/// Match `name` against `pattern`; `Some(priority)` (empty without a placeholder).
fn matches(pattern: &str, name: &str) -> Option<String> {
    match pattern.split_once(N) {
        None => (pattern == name).then(String::new),
        Some((head, tail)) => {
            let digit = name.strip_prefix(head)?.strip_suffix(tail)?;
            (digit.len() == 1 && matches!(digit.as_bytes()[0], b'0'..=b'7'))
                .then(|| digit.to_string())
        }
    }
}

/// The curated meaning of statistic `name` of `driver`, if it has one.
pub fn curate(driver: &str, name: &str) -> Option<Curated> {
    rules(driver)
        .iter()
        .find_map(|&(pattern, family, first, second)| {
            let priority = matches(pattern, name)?;
            let labels = match family.labels().len() {
                0 => Vec::new(),
                _ => vec![
                    first.to_string(),
                    if second == N {
                        priority
                    } else {
                        second.to_string()
                    },
                ],
            };
            Some(Curated { family, labels })
        })
}

/// The curated meaning of a standard statistic (every one has one; see the module table).
pub fn curate_standard(stat: &super::standard::StandardStat) -> Curated {
    let c = |family: Family, labels: &[&str]| Curated {
        family,
        labels: labels.iter().map(|s| s.to_string()).collect(),
    };
    match (stat.group, stat.name.as_str()) {
        ("pause", "tx_pause_frames") => c(Family::PauseFrames, &["tx", "global"]),
        ("pause", "rx_pause_frames") => c(Family::PauseFrames, &["rx", "global"]),
        ("eth-phy", "SymbolErrorDuringCarrier") => c(Family::SymbolErrors, &[]),
        ("eth-mac", "FrameCheckSequenceErrors") => c(Family::CrcErrors, &[]),
        ("eth-mac", "OctetsTransmittedOK") => c(Family::MacBytes, &["tx"]),
        ("eth-mac", "OctetsReceivedOK") => c(Family::MacBytes, &["rx"]),
        (group, name) => c(Family::StandardFrames, &[group, name]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn standard_statistics_map_once() {
        let s = |group: &'static str, name: &str| super::super::standard::StandardStat {
            group,
            name: name.to_string(),
            value: 1,
        };
        assert_eq!(
            curate_standard(&s("pause", "rx_pause_frames")),
            curate("mlx5_core", "rx_global_pause").unwrap()
        );
        assert_eq!(
            curate_standard(&s("eth-mac", "FrameCheckSequenceErrors")),
            curate("bnxt_en", "rx_fcs_err_frames").unwrap()
        );
        assert_eq!(
            curate_standard(&s("rmon", "etherStatsJabbers")),
            Curated {
                family: Family::StandardFrames,
                labels: vec!["rmon".into(), "etherStatsJabbers".into()]
            }
        );
    }

    fn c(family: Family, labels: &[&str]) -> Option<Curated> {
        Some(Curated {
            family,
            labels: labels.iter().map(|s| s.to_string()).collect(),
        })
    }

    #[test]
    fn the_three_drivers() {
        assert_eq!(
            curate("mlx5_core", "rx_prio3_pause"),
            c(Family::PauseFrames, &["rx", "3"])
        );
        assert_eq!(
            curate("mlx5_core", "tx_prio3_pause_duration"),
            c(Family::PauseDuration, &["tx", "3"])
        );
        assert_eq!(
            curate("mlx5_core", "rx_out_of_buffer"),
            c(Family::Discards, &["rx", "out_of_buffer"])
        );
        assert_eq!(
            curate("bnxt_en", "tx_pfc_ena_frames_pri7"),
            c(Family::PauseFrames, &["tx", "7"])
        );
        assert_eq!(
            curate("ice", "link_xoff_rx.nic"),
            c(Family::PauseFrames, &["rx", "global"])
        );
        assert_eq!(
            curate("ice", "rx_crc_errors.nic"),
            c(Family::CrcErrors, &[])
        );
    }

    #[test]
    fn near_misses_are_not_curated() {
        assert_eq!(curate("mlx5_core", "rx_prio8_pause"), None);
        assert_eq!(curate("mlx5_core", "rx_prio33_pause"), None);
        assert_eq!(curate("mlx5_core", "rx_prio3_pause_transition"), None);
        assert_eq!(curate("virtio_net", "rx_prio3_pause"), None);
        assert_eq!(curate("bnxt_en", "rx_prio3_pause"), None);
    }
}
