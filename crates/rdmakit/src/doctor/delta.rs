//! Counter deltas between two snapshots: wrap-aware, reset-aware, gauges left out.

use serde::Serialize;

use crate::catalog::{Catalog, Kind};
use crate::model::{CounterKind, CounterSource, Snapshot};

/// How a counter got from its first value to its second.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Movement {
    /// Plain increase (or no change).
    Rose,
    /// A 32-bit counter passed its maximum and started again from zero.
    Wrapped,
    /// It went backwards and is not a 32-bit counter: reset (driver reload, device re-created).
    /// The delta is then the second value (what was counted since the reset).
    Reset,
}

/// One counter's movement.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CounterDelta {
    /// Device name.
    pub device: String,
    /// Port number; `None` for device-level counters.
    pub port: Option<u32>,
    /// Where it was read.
    pub source: CounterSource,
    /// File name.
    pub name: String,
    /// The catalog family it belongs to (`ib_pma`, `mlx5`, `rxe`, ...), when known.
    pub family: Option<String>,
    /// First value.
    pub before: u64,
    /// Second value.
    pub after: u64,
    /// How much it moved.
    pub delta: u64,
    /// How.
    pub movement: Movement,
}

impl CounterDelta {
    /// `device/port` or `device`.
    pub fn target(&self) -> String {
        match self.port {
            Some(p) => format!("{}/{}", self.device, p),
            None => self.device.clone(),
        }
    }
}

/// The delta of `before -> after` for a counter `width` bits wide.
pub fn step(before: u64, after: u64, width: u8) -> (u64, Movement) {
    if after >= before {
        (after - before, Movement::Rose)
    } else if width == 32 && before <= u32::MAX as u64 {
        ((u32::MAX as u64 - before) + after + 1, Movement::Wrapped)
    } else {
        (after, Movement::Reset)
    }
}

/// The catalog family of a counter ([`Catalog::family_of`]): PMA counters are `ib_pma`;
/// driver counters follow the driver (`mlx5_core` -> `mlx5`) or, failing that, the device
/// name (`rxe0` -> `rxe`).
pub fn family_of(
    catalog: &Catalog,
    source: CounterSource,
    driver: Option<&str>,
    device: &str,
) -> Option<String> {
    catalog
        .family_of(source, device, driver)
        .map(str::to_string)
}

/// Every counter present in both snapshots, with its delta. Gauges (by the model or the
/// catalog) are left out: their change is not a count of events.
pub fn deltas(before: &Snapshot, after: &Snapshot, catalog: &Catalog) -> Vec<CounterDelta> {
    let mut out = Vec::new();
    for dev_after in &after.devices {
        let Some(dev_before) = before.device(&dev_after.name) else {
            continue;
        };
        let driver = dev_after.driver.as_deref();
        let mut pairs = Vec::new();
        for port in &dev_after.ports {
            let Some(pb) = dev_before.port(port.num) else {
                continue;
            };
            for c in &port.counters {
                if let Some(cb) = pb.counter(c.source, &c.name) {
                    pairs.push((Some(port.num), cb, c));
                }
            }
        }
        for c in &dev_after.hw_counters {
            if let Some(cb) = dev_before
                .hw_counters
                .iter()
                .find(|x| x.name == c.name && x.source == c.source)
            {
                pairs.push((None, cb, c));
            }
        }
        for (port, cb, ca) in pairs {
            if ca.kind == CounterKind::Gauge {
                continue;
            }
            let family = family_of(catalog, ca.source, driver, &dev_after.name);
            let info = family.as_deref().and_then(|f| catalog.get(f, &ca.name));
            if info.map(|i| i.kind == Kind::Gauge).unwrap_or(false) {
                continue;
            }
            let width = info.map(|i| i.width).unwrap_or(64);
            let (delta, movement) = step(cb.value, ca.value, width);
            out.push(CounterDelta {
                device: dev_after.name.clone(),
                port,
                source: ca.source,
                name: ca.name.to_string(),
                family,
                before: cb.value,
                after: ca.value,
                delta,
                movement,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_handle_wrap_and_reset() {
        assert_eq!(step(5, 9, 64), (4, Movement::Rose));
        assert_eq!(step(u32::MAX as u64 - 1, 3, 32), (5, Movement::Wrapped));
        assert_eq!(step(100, 7, 64), (7, Movement::Reset));
        // A "32-bit" counter above 2^32 is not a wrap: treat it as a reset.
        assert_eq!(step(1 << 40, 7, 32), (7, Movement::Reset));
    }
}
