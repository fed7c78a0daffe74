//! Metric names for counter files: the one place the naming scheme lives.
//!
//! | sysfs file | metric |
//! | --- | --- |
//! | `ports/<n>/counters/<f>` (IB PMA) | `rdma_port_<f'>_total{device,port}`, `<f'>` = `<f>` without a leading `port_` |
//! | `ports/<n>/counters/port_{xmit,rcv}_data` | `rdma_port_{xmit,rcv}_data_bytes_total` (value x 4: the files count 4-octet words) |
//! | `ports/<n>/hw_counters/<f>` (driver) | `rdma_port_hw_<f>_total{device,port}` |
//! | `hw_counters/<f>` (driver, whole device) | `rdma_device_hw_<f>_total{device}` |
//! | a gauge (`lifespan`, bnxt_re `active_*`, `watermark_*`) | the same name without `_total`; `lifespan` (ms) becomes `..._lifespan_seconds` |
//!
//! The PMA counters are defined by the InfiniBand spec and have the same meaning on every
//! device, so they get the short names; driver counters live under `hw_` so that a driver
//! file that shares a name with a PMA one (`link_downed` on hfi1 and rxe) never collides
//! with it and a dashboard can tell a spec counter from a vendor one by its name alone.
//!
//! File names are sanitized into `[a-z0-9_]`: camelCase is split into words (hfi1's
//! `RxDmaHdrQFullErr` -> `rx_dma_hdr_q_full_err`, cxgb4's `ip4InSegs` -> `ip4_in_segs`),
//! everything is lowercased (`VL15_dropped` -> `vl15_dropped`), any other character becomes
//! `_`, runs of `_` collapse, and a trailing `_total` is dropped (the encoder adds it once).
//! A name that sanitizes to nothing yields no metric. Two files that sanitize to the same
//! name cannot both be exported: the first one (in sysfs order) wins and the second is
//! counted as a read error (see the counters collector).

use rdmakit::model::{Counter, CounterSource, Unit};

use crate::metrics::{Kind, Value};

/// How one counter file is exported.
#[derive(Debug, Clone, PartialEq)]
pub struct CounterMetric {
    /// The family name, without `_total` for counters.
    pub name: String,
    /// Counter or gauge.
    pub kind: Kind,
    /// The exported value (converted to bytes or seconds where the name says so).
    pub value: Value,
}

/// The metric for `counter`, or `None` when its name sanitizes to nothing. A byte value that
/// overflows u64 (more than 2^62 words) is exported as a float, like every Prometheus value.
pub fn counter_metric(counter: &Counter) -> Option<CounterMetric> {
    let (name, kind) = counter_metric_name(counter)?;
    Some(CounterMetric {
        name,
        kind,
        value: counter_metric_value(counter),
    })
}

/// The metric name and kind of [`counter_metric`]: they depend on the counter's source and
/// file name only, so a collector exporting many devices can compute them once per name.
pub fn counter_metric_name(counter: &Counter) -> Option<(String, Kind)> {
    let mut base = sanitize(&counter.name);
    if counter.source == CounterSource::Pma {
        if let Some(rest) = base.strip_prefix("port_") {
            if !rest.is_empty() {
                base = rest.to_owned();
            }
        }
    }
    if base.is_empty() {
        return None;
    }
    let prefix = match counter.source {
        CounterSource::Pma => "rdma_port_",
        CounterSource::Hw => "rdma_port_hw_",
        CounterSource::DeviceHw => "rdma_device_hw_",
    };
    let suffix = unit_suffix(counter.unit);
    let suffix = if base.ends_with(suffix) { "" } else { suffix };
    Some((format!("{prefix}{base}{suffix}"), counter.kind))
}

/// What a counter's metric name ends with for its unit: the base unit it is exported in
/// (bytes for 4-octet words, seconds for ms and us), nothing for units counted one by one.
fn unit_suffix(unit: Unit) -> &'static str {
    match unit {
        Unit::Words4 => "_bytes",
        Unit::Ms | Unit::Us => "_seconds",
        _ => "",
    }
}

/// The value of [`counter_metric`], in base units (bytes for 4-octet words, seconds for
/// milliseconds).
pub fn counter_metric_value(counter: &Counter) -> Value {
    match counter.unit {
        Unit::Words4 => counter
            .bytes
            .map_or(Value::Float(counter.value as f64 * 4.0), Value::Int),
        Unit::Ms => Value::Float(counter.value as f64 / 1000.0),
        Unit::Us => Value::Float(counter.value as f64 / 1_000_000.0),
        _ => Value::Int(counter.value),
    }
}

/// The family name and kind of a curated netdev family (catalog family `netdev`, see
/// `rdmakit::ethtool::curated`): `rdma_netdev_<name>` with the catalog's kind, `_seconds` for
/// durations (the encoder adds `_total` to counters).
pub fn netdev_metric_name(info: &rdmakit::catalog::CounterInfo) -> (String, Kind) {
    (
        format!(
            "rdma_netdev_{}{}",
            sanitize(&info.name),
            unit_suffix(info.unit)
        ),
        info.kind,
    )
}

/// The exported value of a curated netdev statistic `raw` (seconds for durations).
pub fn netdev_metric_value(info: &rdmakit::catalog::CounterInfo, raw: u64) -> Value {
    counter_metric_value(&netdev_counter(info, raw))
}

fn netdev_counter(info: &rdmakit::catalog::CounterInfo, raw: u64) -> Counter {
    Counter::described(
        info.name.clone().into(),
        CounterSource::Hw,
        raw,
        info.kind,
        info.unit,
    )
}

/// The metric for a counter of a bound QP counter (RDMA netlink `STAT_GET`, `STAT_RES` = QP):
/// `rdma_qp_<name>_total` (a gauge without `_total` when the name says so), or `None` when
/// the name sanitizes to nothing.
pub fn qp_counter_metric(name: &str, value: u64) -> Option<CounterMetric> {
    let port = counter_metric(&Counter::new(name, CounterSource::Hw, value))?;
    let rest = port.name.strip_prefix("rdma_port_hw_")?;
    Some(CounterMetric {
        name: format!("rdma_qp_{rest}"),
        ..port
    })
}

/// A sysfs file name as a metric name fragment: snake_case, `[a-z0-9_]` only, no leading,
/// trailing or doubled `_`, no trailing `_total`.
pub fn sanitize(raw: &str) -> String {
    // hfi1's ",32" says the counter is 32 bits wide; it is not part of the counter's name, so
    // "SwLinkUp,32" and a later kernel's "SwLinkUp" (if it ever widens) give one metric.
    let raw = rdmakit::catalog::strip_width_suffix(raw);
    let chars: Vec<char> = raw.chars().collect();
    let mut out = String::with_capacity(raw.len() + 4);
    for (i, &c) in chars.iter().enumerate() {
        if c.is_ascii_uppercase() {
            let prev = i.checked_sub(1).map(|j| chars[j]);
            let next = chars.get(i + 1).copied();
            let boundary = match prev {
                Some(p) if p.is_ascii_lowercase() || p.is_ascii_digit() => true,
                Some(p) if p.is_ascii_uppercase() => next.is_some_and(|n| n.is_ascii_lowercase()),
                _ => false,
            };
            if boundary {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
        } else if c.is_ascii_lowercase() || c.is_ascii_digit() {
            out.push(c);
        } else {
            out.push('_');
        }
    }
    let mut collapsed = String::with_capacity(out.len());
    for c in out.chars() {
        if c == '_' && (collapsed.is_empty() || collapsed.ends_with('_')) {
            continue;
        }
        collapsed.push(c);
    }
    while collapsed.ends_with('_') {
        collapsed.pop();
    }
    while let Some(stripped) = collapsed.strip_suffix("_total") {
        collapsed = stripped.to_owned();
    }
    if collapsed == "total" {
        collapsed.clear();
    }
    join_unit_lookalikes(&collapsed)
}

/// Words that Prometheus' linter (`promtool check metrics`) reads as abbreviated units.
const UNIT_ABBREVIATIONS: &[&str] = &[
    "s", "ms", "us", "ns", "sec", "b", "kb", "mb", "gb", "tb", "pb", "m", "h", "d",
];

/// Joins a word that only looks like an abbreviated unit to its neighbour: hfi1's
/// `SDmaHaltErr` (SDMA) would split into `s_dma_halt_err`, `RxCtxEgrS` (eager stall) into
/// `rx_ctx_egr_s` and `RxTidFLGMs` (flow generation mismatch) into `rx_tid_flg_ms`, and
/// promtool rejects those as units. The word joins the one before it, or the one after it at
/// the start: `sdma_halt_err`, `rx_ctx_egrs`, `rx_tid_flgms`.
fn join_unit_lookalikes(name: &str) -> String {
    let mut words: Vec<String> = Vec::new();
    let mut carry = String::new();
    for word in name.split('_').filter(|w| !w.is_empty()) {
        if UNIT_ABBREVIATIONS.contains(&word) {
            match words.last_mut() {
                Some(last) => last.push_str(word),
                None => carry.push_str(word),
            }
        } else {
            words.push(std::mem::take(&mut carry) + word);
        }
    }
    if !carry.is_empty() {
        words.push(carry);
    }
    words.join("_")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sanitize_examples() {
        let cases = [
            ("symbol_error", "symbol_error"),
            ("VL15_dropped", "vl15_dropped"),
            ("RxDmaHdrQFullErr", "rx_dma_hdr_q_full_err"),
            ("ip4InSegs", "ip4_in_segs"),
            ("DcRecvErr", "dc_recv_err"),
            ("LinkDn", "link_dn"),
            ("SwLinkUp,32", "sw_link_up"),
            ("RNR sent", "rnr_sent"),
            ("Nak Sequence Error Implied", "nak_sequence_error_implied"),
            ("Tx Egress Reserved 10", "tx_egress_reserved_10"),
            ("TxPioMallocErr", "tx_pio_malloc_err"),
            ("SDmaHaltErr", "sdma_halt_err"),
            ("RxCtxEgrS,32", "rx_ctx_egrs"),
            ("RxTidFLGMs,32", "rx_tid_flgms"),
            ("s", "s"),
            ("rx-bytes.err", "rx_bytes_err"),
            ("__odd__name__", "odd_name"),
            ("tx_total", "tx"),
            ("HTTPServer", "http_server"),
            ("ümlaut", "mlaut"),
            ("___", ""),
            ("_total", ""),
        ];
        for (raw, want) in cases {
            assert_eq!(sanitize(raw), want, "{raw}");
        }
    }

    fn metric(name: &str, source: CounterSource, value: u64) -> CounterMetric {
        counter_metric(&Counter::new(name, source, value)).expect("a metric")
    }

    #[test]
    fn pma_names_drop_port_prefix_and_data_is_bytes() {
        let m = metric("port_xmit_data", CounterSource::Pma, 10);
        assert_eq!(m.name, "rdma_port_xmit_data_bytes");
        assert_eq!(m.value, Value::Int(40));
        assert_eq!(m.kind, Kind::Counter);
        assert_eq!(
            metric("symbol_error", CounterSource::Pma, 1).name,
            "rdma_port_symbol_error"
        );
        assert_eq!(
            metric("VL15_dropped", CounterSource::Pma, 1).name,
            "rdma_port_vl15_dropped"
        );
        assert_eq!(
            metric("port_rcv_packets", CounterSource::Pma, 1).name,
            "rdma_port_rcv_packets"
        );
    }

    #[test]
    fn driver_names_are_apart_from_pma_names() {
        let pma = metric("link_downed", CounterSource::Pma, 1);
        let hw = metric("link_downed", CounterSource::Hw, 1);
        let dev = metric("link_downed", CounterSource::DeviceHw, 1);
        assert_eq!(pma.name, "rdma_port_link_downed");
        assert_eq!(hw.name, "rdma_port_hw_link_downed");
        assert_eq!(dev.name, "rdma_device_hw_link_downed");
        // A driver counter is not stripped of `port_`.
        assert_eq!(
            metric("port_x", CounterSource::Hw, 1).name,
            "rdma_port_hw_port_x"
        );
    }

    #[test]
    fn gauges_and_units() {
        let lifespan = metric("lifespan", CounterSource::Hw, 10);
        assert_eq!(lifespan.name, "rdma_port_hw_lifespan_seconds");
        assert_eq!(lifespan.kind, Kind::Gauge);
        assert_eq!(lifespan.value, Value::Float(0.01));
        let active = metric("active_qps", CounterSource::Hw, 3);
        assert_eq!(active.name, "rdma_port_hw_active_qps");
        assert_eq!(active.kind, Kind::Gauge);
        let bytes = metric("rx_bytes", CounterSource::DeviceHw, 5);
        assert_eq!(bytes.name, "rdma_device_hw_rx_bytes");
        assert_eq!(bytes.value, Value::Int(5));
    }

    #[test]
    fn qp_counter_names() {
        let m = qp_counter_metric("rx_write_requests", 3).expect("a metric");
        assert_eq!(m.name, "rdma_qp_rx_write_requests");
        assert_eq!((m.kind, m.value), (Kind::Counter, Value::Int(3)));
        assert_eq!(
            qp_counter_metric("OutOfSequence", 1).unwrap().name,
            "rdma_qp_out_of_sequence"
        );
        assert!(qp_counter_metric("__", 1).is_none());
    }

    #[test]
    fn unusable_names_give_nothing_and_overflow_gives_a_float() {
        assert!(counter_metric(&Counter::new("___", CounterSource::Hw, 1)).is_none());
        let m = metric("port_xmit_data", CounterSource::Pma, 1 << 62);
        assert_eq!(m.value, Value::Float(18446744073709551616.0));
    }
}
