//! Per-second rates between two snapshots, and which counters mean "traffic".
//!
//! Rates come from `rdmakit::doctor::deltas` (wrap- and reset-aware, gauges left out) divided
//! by the time between the samples. A port's RX/TX bytes and packets are read from the
//! counters listed in [`TRAFFIC`] (IB PMA counters first, then driver counters such as rxe's
//! `rcvd_pkts`); a port whose driver has no byte counter (rxe) shows no byte rate rather than
//! zero. Error rates are the sum of the counters the catalog rates `warning` or `error`.

use rdmakit::catalog::{Catalog, Severity};
use rdmakit::doctor::deltas;
use rdmakit::model::{CounterSource, Unit};
use rdmakit::Snapshot;
use std::collections::HashMap;

/// Identity of one counter: device, port (`None` for device-level counters), source, name.
pub type CounterKey = (String, Option<u32>, CounterSource, String);

/// What a traffic counter measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Traffic {
    /// Received bytes.
    RxBytes,
    /// Transmitted bytes.
    TxBytes,
    /// Received packets.
    RxPackets,
    /// Transmitted packets.
    TxPackets,
}

/// Counters that carry traffic, by source and name. The first one present wins for each kind.
pub const TRAFFIC: &[(CounterSource, &str, Traffic)] = &[
    (CounterSource::Pma, "port_rcv_data", Traffic::RxBytes),
    (CounterSource::Pma, "port_xmit_data", Traffic::TxBytes),
    (CounterSource::Pma, "port_rcv_packets", Traffic::RxPackets),
    (CounterSource::Pma, "port_xmit_packets", Traffic::TxPackets),
    (CounterSource::Hw, "rx_bytes", Traffic::RxBytes),
    (CounterSource::Hw, "tx_bytes", Traffic::TxBytes),
    (CounterSource::Hw, "rx_pkts", Traffic::RxPackets),
    (CounterSource::Hw, "tx_pkts", Traffic::TxPackets),
    (CounterSource::Hw, "rcvd_pkts", Traffic::RxPackets),
    (CounterSource::Hw, "sent_pkts", Traffic::TxPackets),
    (CounterSource::DeviceHw, "rx_bytes", Traffic::RxBytes),
    (CounterSource::DeviceHw, "tx_bytes", Traffic::TxBytes),
    (CounterSource::DeviceHw, "rx_pkts", Traffic::RxPackets),
    (CounterSource::DeviceHw, "tx_pkts", Traffic::TxPackets),
];

/// One counter's movement per second.
#[derive(Debug, Clone, PartialEq)]
pub struct CounterRate {
    /// Raw units per second (4-octet words stay words).
    pub per_second: f64,
    /// Bytes per second, for data counters.
    pub bytes_per_second: Option<f64>,
    /// The catalog's severity for this counter, when the catalog knows it.
    pub severity: Option<Severity>,
}

/// Rates of every counter present in both snapshots, keyed by [`CounterKey`].
/// `seconds` must be positive; otherwise no rates are returned.
pub fn counter_rates(
    before: &Snapshot,
    after: &Snapshot,
    seconds: f64,
    catalog: &Catalog,
) -> HashMap<CounterKey, CounterRate> {
    let mut out = HashMap::new();
    if seconds <= 0.0 || !seconds.is_finite() {
        return out;
    }
    for d in deltas(before, after, catalog) {
        let per_second = d.delta as f64 / seconds;
        let unit = catalog
            .kind_and_unit(d.family.as_deref(), d.source, &d.name)
            .1;
        let bytes_per_second = match unit {
            Unit::Words4 => Some(per_second * 4.0),
            Unit::Bytes => Some(per_second),
            _ => None,
        };
        let severity = d
            .family
            .as_deref()
            .and_then(|f| catalog.get(f, &d.name))
            .map(|info| info.severity);
        out.insert(
            (d.device, d.port, d.source, d.name),
            CounterRate {
                per_second,
                bytes_per_second,
                severity,
            },
        );
    }
    out
}

/// The traffic and error rates of one port.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PortRates {
    /// Received bytes per second (`None`: no byte counter, or no second sample yet).
    pub rx_bytes: Option<f64>,
    /// Transmitted bytes per second.
    pub tx_bytes: Option<f64>,
    /// Received packets per second.
    pub rx_packets: Option<f64>,
    /// Transmitted packets per second.
    pub tx_packets: Option<f64>,
    /// Sum of the warning/error counters per second (`None` before the second sample).
    pub errors: Option<f64>,
    /// The error counters that moved, with their rates, largest first.
    pub moving_errors: Vec<(String, f64)>,
}

/// Rates of port `port` of `device`. Device-level counters count for the port when the device
/// has exactly one port (`single_port`).
pub fn port_rates(
    rates: &HashMap<CounterKey, CounterRate>,
    device: &str,
    port: u32,
    single_port: bool,
) -> PortRates {
    let mut out = PortRates::default();
    if rates.is_empty() {
        return out;
    }
    let mine = |key: &CounterKey| {
        key.0 == device
            && (key.1 == Some(port) || (single_port && key.2 == CounterSource::DeviceHw))
    };
    for (source, name, traffic) in TRAFFIC {
        let key_port = if *source == CounterSource::DeviceHw {
            if !single_port {
                continue;
            }
            None
        } else {
            Some(port)
        };
        let key = (device.to_owned(), key_port, *source, (*name).to_owned());
        let Some(rate) = rates.get(&key) else {
            continue;
        };
        let slot = match traffic {
            Traffic::RxBytes => &mut out.rx_bytes,
            Traffic::TxBytes => &mut out.tx_bytes,
            Traffic::RxPackets => &mut out.rx_packets,
            Traffic::TxPackets => &mut out.tx_packets,
        };
        if slot.is_none() {
            *slot = Some(match traffic {
                Traffic::RxBytes | Traffic::TxBytes => {
                    rate.bytes_per_second.unwrap_or(rate.per_second)
                }
                Traffic::RxPackets | Traffic::TxPackets => rate.per_second,
            });
        }
    }
    let mut total = 0.0;
    let mut any = false;
    for (key, rate) in rates.iter().filter(|(k, _)| mine(k)) {
        any = true;
        if matches!(rate.severity, Some(Severity::Warning | Severity::Error)) {
            total += rate.per_second;
            if rate.per_second > 0.0 {
                out.moving_errors.push((key.3.clone(), rate.per_second));
            }
        }
    }
    if any {
        out.errors = Some(total);
    }
    out.moving_errors
        .sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    out
}
