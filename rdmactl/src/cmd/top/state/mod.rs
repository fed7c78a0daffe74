//! The model of `rdmactl top`: what the screen shows, with no drawing and no I/O.
//!
//! [`TopState`] takes samples ([`TopState::apply_snapshot`]) and keeps the latest snapshot,
//! per-second rates against the previous one, one [`PortRow`] per port, the events worth a
//! log line (devices appearing or vanishing, port state changes, counter anomalies from the
//! doctor, read errors), and the user's choices: which screen, which row, sort key and filter.
//! Views read it; `view::handle_key` changes it. Everything here is unit-tested.

pub mod events;
pub mod mesh;
pub mod owners;
pub mod probes;
pub mod rates;
pub mod resources;

#[cfg(test)]
mod tests;

use events::Event;
use probes::ProbeStatus;
use rates::{counter_rates, port_rates, CounterKey, CounterRate, PortRates};
use rdmakit::catalog::{Catalog, CounterInfo, Severity};
use rdmakit::doctor::Rules;
use rdmakit::model::{CounterKind, CounterSource};
use rdmakit::Snapshot;
use resources::ResourceStatus;
use std::collections::{HashMap, HashSet};
use std::time::Instant;

/// A port: device name and port number.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PortKey {
    /// Device name.
    pub device: String,
    /// Port number.
    pub port: u32,
}

impl std::fmt::Display for PortKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.device, self.port)
    }
}

/// One row of the ports table.
#[derive(Debug, Clone, PartialEq)]
pub struct PortRow {
    /// Which port.
    pub key: PortKey,
    /// Driver of the device (`mlx5_core`), when known.
    pub driver: Option<String>,
    /// Logical state name (`ACTIVE`).
    pub state: Option<String>,
    /// Physical state name (`LinkUp`).
    pub phys_state: Option<String>,
    /// Link rate text as the kernel prints it (`100 Gb/sec (4X EDR)`).
    pub rate_text: Option<String>,
    /// Link rate in bits per second.
    pub rate_bps: Option<u64>,
    /// `InfiniBand` or `Ethernet`.
    pub link_layer: Option<String>,
    /// The port's network device (RoCE, rxe).
    pub netdev: Option<String>,
    /// Traffic and error rates.
    pub rates: PortRates,
}

/// One row of the counters screen (the counters of one port, then the device's own).
#[derive(Debug, Clone, PartialEq)]
pub struct CounterRow {
    /// Where it was read.
    pub source: CounterSource,
    /// File name.
    pub name: String,
    /// Current raw value.
    pub value: u64,
    /// Counter or gauge.
    pub kind: CounterKind,
    /// Movement per second, once two samples exist (gauges have none).
    pub rate: Option<CounterRate>,
}

/// Which screen is shown.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Screen {
    /// All ports of all devices.
    Ports,
    /// The counters of one port.
    Counters(PortKey),
}

/// Sort order of the ports table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PortSort {
    /// Device name, then port (the default).
    Name,
    /// Received bytes per second, largest first (ports without a byte counter last).
    RxBytes,
    /// Transmitted bytes per second, largest first.
    TxBytes,
    /// Received plus transmitted packets per second, largest first.
    Packets,
    /// Error counters per second, largest first.
    Errors,
}

impl PortSort {
    /// The next sort key (the `s` key cycles through them).
    pub fn next(self) -> PortSort {
        match self {
            PortSort::Name => PortSort::RxBytes,
            PortSort::RxBytes => PortSort::TxBytes,
            PortSort::TxBytes => PortSort::Packets,
            PortSort::Packets => PortSort::Errors,
            PortSort::Errors => PortSort::Name,
        }
    }

    /// Short label for the status line.
    pub fn label(self) -> &'static str {
        match self {
            PortSort::Name => "name",
            PortSort::RxBytes => "rx bytes/s",
            PortSort::TxBytes => "tx bytes/s",
            PortSort::Packets => "packets/s",
            PortSort::Errors => "errors/s",
        }
    }
}

/// Sort order of the counters screen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CounterSort {
    /// Source then name, as the kernel lists them (the default).
    Name,
    /// Rate per second, largest first.
    Rate,
    /// Raw value, largest first.
    Value,
}

impl CounterSort {
    /// The next sort key.
    pub fn next(self) -> CounterSort {
        match self {
            CounterSort::Name => CounterSort::Rate,
            CounterSort::Rate => CounterSort::Value,
            CounterSort::Value => CounterSort::Name,
        }
    }

    /// Short label for the status line.
    pub fn label(self) -> &'static str {
        match self {
            CounterSort::Name => "name",
            CounterSort::Rate => "rate",
            CounterSort::Value => "value",
        }
    }
}

/// What the explanation pane shows.
#[derive(Debug, Clone, PartialEq)]
pub enum Explanation<'a> {
    /// Nothing is selected (no rows).
    Nothing,
    /// A port: its row, plus the catalog entries of the error counters that move on it.
    Port(&'a PortRow, Vec<(&'a CounterInfo, f64)>),
    /// A counter and its catalog entry (`None`: the catalog does not describe it).
    Counter(CounterRow, Option<&'a CounterInfo>),
}

/// Everything `rdmactl top` shows, minus the log (tui-logger owns that).
#[derive(Debug)]
pub struct TopState {
    catalog: &'static Catalog,
    rules: Option<Rules>,
    latest: Option<(Snapshot, Instant)>,
    rates: HashMap<CounterKey, CounterRate>,
    ports: Vec<PortRow>,
    /// Source errors already logged (path + kind), so each is logged once while it lasts.
    seen_errors: HashSet<String>,
    /// Doctor findings already logged (id + target), so a steady anomaly is logged once.
    active_findings: HashSet<String>,
    /// The screen shown.
    pub screen: Screen,
    /// Ports sort key.
    pub port_sort: PortSort,
    /// Counters sort key.
    pub counter_sort: CounterSort,
    /// Rows whose text does not contain this (case-insensitive) are hidden.
    pub filter: String,
    /// True while the user types a filter.
    pub editing_filter: bool,
    /// The selected port, kept by identity so sorting and refreshes do not move it.
    selected_port: Option<PortKey>,
    /// The selected counter on the counters screen (source, name).
    selected_counter: Option<(CounterSource, String)>,
    /// The explanation pane shows everything (Enter) rather than the summary.
    pub explain_full: bool,
    /// The help overlay is shown.
    pub show_help: bool,
    /// RDMA netlink resources, as last sampled.
    pub resources: ResourceStatus,
    /// rdmad probe series, as last scraped.
    pub probes: ProbeStatus,
    /// The owners holding the most QPs, as last sampled.
    pub owners: owners::OwnerStatus,
    /// The pingmesh's verdicts (`--prometheus` or `--target`), as last read.
    pub mesh: mesh::MeshStatus,
    /// The last sample failed with this message (data on screen is from before it).
    pub sample_error: Option<String>,
    /// Number of samples taken.
    pub samples: u64,
}

impl TopState {
    /// An empty state; `rules` drive the doctor's anomaly events (none without them).
    pub fn new(catalog: &'static Catalog, rules: Option<Rules>) -> TopState {
        TopState {
            catalog,
            rules,
            latest: None,
            rates: HashMap::new(),
            ports: Vec::new(),
            seen_errors: HashSet::new(),
            active_findings: HashSet::new(),
            screen: Screen::Ports,
            port_sort: PortSort::Name,
            counter_sort: CounterSort::Name,
            filter: String::new(),
            editing_filter: false,
            selected_port: None,
            selected_counter: None,
            explain_full: false,
            show_help: false,
            resources: ResourceStatus::NotSampled,
            probes: ProbeStatus::NotConfigured,
            owners: owners::OwnerStatus::NotSampled,
            mesh: mesh::MeshStatus::NotConfigured,
            sample_error: None,
            samples: 0,
        }
    }

    /// The latest snapshot, if any.
    pub fn snapshot(&self) -> Option<&Snapshot> {
        self.latest.as_ref().map(|(s, _)| s)
    }

    /// Take a new sample taken at `at`; returns what is worth a log line.
    pub fn apply_snapshot(&mut self, snapshot: Snapshot, at: Instant) -> Vec<Event> {
        let mut out = Vec::new();
        self.samples += 1;
        self.sample_error = None;
        match &self.latest {
            Some((before, then)) => {
                let seconds = at.saturating_duration_since(*then).as_secs_f64();
                self.rates = counter_rates(before, &snapshot, seconds, self.catalog);
                out.extend(events::topology_events(before, &snapshot));
                if let Some(rules) = &self.rules {
                    out.extend(events::anomaly_events(
                        before,
                        &snapshot,
                        seconds,
                        self.catalog,
                        rules,
                        &mut self.active_findings,
                    ));
                }
            }
            None => {
                self.rates.clear();
                out.push(Event::info(
                    "devices",
                    format!(
                        "watching {} device(s): {}",
                        snapshot.devices.len(),
                        snapshot
                            .devices
                            .iter()
                            .map(|d| d.name.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                ));
            }
        }
        out.extend(events::read_error_events(
            &snapshot.errors,
            &mut self.seen_errors,
        ));
        self.ports = build_rows(&snapshot, &self.rates);
        self.latest = Some((snapshot, at));
        self.keep_selection();
        out
    }

    /// A sample failed: keep the last data, remember why.
    pub fn apply_sample_error(&mut self, message: String) -> Vec<Event> {
        let first = self.sample_error.as_deref() != Some(message.as_str());
        self.sample_error = Some(message.clone());
        if first {
            vec![Event::error("sysfs", format!("sample failed: {message}"))]
        } else {
            Vec::new()
        }
    }

    /// All port rows, unsorted and unfiltered.
    pub fn all_ports(&self) -> &[PortRow] {
        &self.ports
    }

    /// The port rows shown: filtered, then sorted.
    pub fn visible_ports(&self) -> Vec<&PortRow> {
        let needle = self.filter.to_lowercase();
        let mut rows: Vec<&PortRow> = self
            .ports
            .iter()
            .filter(|r| needle.is_empty() || port_text(r).to_lowercase().contains(&needle))
            .collect();
        let desc = |a: Option<f64>, b: Option<f64>| {
            // Largest first; rows without a value go last.
            match (a, b) {
                (Some(a), Some(b)) => b.total_cmp(&a),
                (Some(_), None) => std::cmp::Ordering::Less,
                (None, Some(_)) => std::cmp::Ordering::Greater,
                (None, None) => std::cmp::Ordering::Equal,
            }
        };
        let packets = |r: &PortRow| match (r.rates.rx_packets, r.rates.tx_packets) {
            (None, None) => None,
            (a, b) => Some(a.unwrap_or(0.0) + b.unwrap_or(0.0)),
        };
        rows.sort_by(|a, b| {
            let primary = match self.port_sort {
                PortSort::Name => std::cmp::Ordering::Equal,
                PortSort::RxBytes => desc(a.rates.rx_bytes, b.rates.rx_bytes),
                PortSort::TxBytes => desc(a.rates.tx_bytes, b.rates.tx_bytes),
                PortSort::Packets => desc(packets(a), packets(b)),
                PortSort::Errors => desc(a.rates.errors, b.rates.errors),
            };
            primary.then_with(|| a.key.cmp(&b.key))
        });
        rows
    }

    /// Index of the selected port among [`Self::visible_ports`].
    pub fn selected_port_index(&self) -> Option<usize> {
        let rows = self.visible_ports();
        if rows.is_empty() {
            return None;
        }
        let found = self
            .selected_port
            .as_ref()
            .and_then(|k| rows.iter().position(|r| &r.key == k));
        Some(found.unwrap_or(0))
    }

    /// The selected port row.
    pub fn selected_port(&self) -> Option<&PortRow> {
        let rows = self.visible_ports();
        self.selected_port_index().map(|i| rows[i])
    }

    /// The counter rows of `key`: the port's counters, then (for a one-port device) the
    /// device-level ones; filtered, then sorted.
    pub fn counter_rows(&self, key: &PortKey) -> Vec<CounterRow> {
        let Some(snapshot) = self.snapshot() else {
            return Vec::new();
        };
        let Some(dev) = snapshot.device(&key.device) else {
            return Vec::new();
        };
        let Some(port) = dev.port(key.port) else {
            return Vec::new();
        };
        let single = dev.ports.len() == 1;
        let needle = self.filter.to_lowercase();
        let mut rows: Vec<CounterRow> = port
            .counters
            .iter()
            .map(|c| (Some(key.port), c))
            .chain(dev.hw_counters.iter().filter(|_| single).map(|c| (None, c)))
            .filter(|(_, c)| needle.is_empty() || c.name.to_lowercase().contains(&needle))
            .map(|(p, c)| CounterRow {
                source: c.source,
                name: c.name.to_string(),
                value: c.value,
                kind: c.kind,
                rate: self
                    .rates
                    .get(&(key.device.clone(), p, c.source, c.name.to_string()))
                    .cloned(),
            })
            .collect();
        let rate = |r: &CounterRow| r.rate.as_ref().map(|x| x.per_second).unwrap_or(-1.0);
        match self.counter_sort {
            CounterSort::Name => {}
            CounterSort::Rate => rows.sort_by(|a, b| rate(b).total_cmp(&rate(a))),
            CounterSort::Value => rows.sort_by_key(|r| std::cmp::Reverse(r.value)),
        }
        rows
    }

    /// Index of the selected counter among the rows of the counters screen.
    pub fn selected_counter_index(&self, rows: &[CounterRow]) -> Option<usize> {
        if rows.is_empty() {
            return None;
        }
        let found = self
            .selected_counter
            .as_ref()
            .and_then(|(s, n)| rows.iter().position(|r| r.source == *s && &r.name == n));
        Some(found.unwrap_or(0))
    }

    /// Move the selection by `step` rows (negative: up), clamped to the visible rows.
    pub fn move_selection(&mut self, step: isize) {
        match self.screen.clone() {
            Screen::Ports => {
                let keys: Vec<PortKey> =
                    self.visible_ports().iter().map(|r| r.key.clone()).collect();
                if let Some(i) = self.selected_port_index() {
                    let j = clamp_step(i, step, keys.len());
                    self.selected_port = Some(keys[j].clone());
                }
            }
            Screen::Counters(key) => {
                let rows = self.counter_rows(&key);
                if let Some(i) = self.selected_counter_index(&rows) {
                    let j = clamp_step(i, step, rows.len());
                    self.selected_counter = Some((rows[j].source, rows[j].name.clone()));
                }
            }
        }
    }

    /// Enter: on the ports screen open the selected port's counters (the first moving error
    /// counter selected, else the first counter); on the counters screen toggle the full
    /// explanation.
    pub fn enter(&mut self) {
        match &self.screen {
            Screen::Ports => {
                let Some(row) = self.selected_port() else {
                    return;
                };
                let key = row.key.clone();
                let first_error = row.rates.moving_errors.first().map(|(n, _)| n.clone());
                self.selected_port = Some(key.clone());
                self.screen = Screen::Counters(key.clone());
                self.filter.clear();
                self.explain_full = true;
                let rows = self.counter_rows(&key);
                self.selected_counter = first_error
                    .and_then(|n| rows.iter().find(|r| r.name == n))
                    .or_else(|| rows.first())
                    .map(|r| (r.source, r.name.clone()));
            }
            Screen::Counters(_) => self.explain_full = !self.explain_full,
        }
    }

    /// Esc / Backspace: leave the counters screen.
    pub fn back(&mut self) {
        if let Screen::Counters(_) = self.screen {
            self.screen = Screen::Ports;
            self.filter.clear();
            self.explain_full = false;
        }
    }

    /// `s`: the next sort key of the current screen.
    pub fn cycle_sort(&mut self) {
        match self.screen {
            Screen::Ports => self.port_sort = self.port_sort.next(),
            Screen::Counters(_) => self.counter_sort = self.counter_sort.next(),
        }
    }

    /// What the explanation pane shows for the current selection.
    pub fn explanation(&self) -> Explanation<'_> {
        match &self.screen {
            Screen::Ports => {
                let Some(row) = self.selected_port() else {
                    return Explanation::Nothing;
                };
                let driver = row.driver.as_deref();
                let infos = row
                    .rates
                    .moving_errors
                    .iter()
                    .filter_map(|(name, rate)| {
                        self.describe(driver, &row.key.device, name)
                            .map(|info| (info, *rate))
                    })
                    .collect();
                Explanation::Port(row, infos)
            }
            Screen::Counters(key) => {
                let rows = self.counter_rows(key);
                let Some(i) = self.selected_counter_index(&rows) else {
                    return Explanation::Nothing;
                };
                let row = rows[i].clone();
                let driver = self
                    .snapshot()
                    .and_then(|s| s.device(&key.device))
                    .and_then(|d| d.driver.as_deref());
                let info = if row.source == CounterSource::Pma {
                    self.catalog.get("ib_pma", &row.name)
                } else {
                    self.describe(driver, &key.device, &row.name)
                };
                Explanation::Counter(row, info)
            }
        }
    }

    /// The catalog entry of a counter of `device` (family by driver, then device name, then
    /// PMA, then any family that knows the name).
    fn describe(
        &self,
        driver: Option<&str>,
        device: &str,
        name: &str,
    ) -> Option<&'static CounterInfo> {
        let catalog = self.catalog;
        driver
            .and_then(|d| catalog.family_for(d))
            .or_else(|| catalog.family_for(device))
            .and_then(|f| catalog.get(f, name))
            .or_else(|| catalog.get("ib_pma", name))
            .or_else(|| catalog.by_name(name).into_iter().next())
    }

    /// Selected rows that vanished (device removed, filter changed) fall back to the first.
    fn keep_selection(&mut self) {
        if let Some(k) = &self.selected_port {
            if !self.ports.iter().any(|r| &r.key == k) {
                self.selected_port = None;
            }
        }
        if let Screen::Counters(key) = &self.screen {
            if !self.ports.iter().any(|r| &r.key == key) {
                self.screen = Screen::Ports;
                self.explain_full = false;
            }
        }
    }

    /// The worst severity moving on any port (for the title bar).
    pub fn worst_moving(&self) -> Option<Severity> {
        let mut worst = None;
        for rate in self.rates.values().filter(|r| r.per_second > 0.0) {
            match rate.severity {
                Some(Severity::Error) => return Some(Severity::Error),
                Some(Severity::Warning) => worst = Some(Severity::Warning),
                _ => {}
            }
        }
        worst
    }
}

fn clamp_step(i: usize, step: isize, len: usize) -> usize {
    let j = i as isize + step;
    j.clamp(0, len.saturating_sub(1) as isize) as usize
}

/// The text a filter matches against: device, port, driver, state, link layer, netdev.
fn port_text(r: &PortRow) -> String {
    format!(
        "{} {} {} {} {} {}",
        r.key,
        r.driver.as_deref().unwrap_or(""),
        r.state.as_deref().unwrap_or(""),
        r.link_layer.as_deref().unwrap_or(""),
        r.netdev.as_deref().unwrap_or(""),
        r.phys_state.as_deref().unwrap_or("")
    )
}

/// One row per port of every device.
pub fn build_rows(snapshot: &Snapshot, rates: &HashMap<CounterKey, CounterRate>) -> Vec<PortRow> {
    let mut rows = Vec::new();
    for dev in &snapshot.devices {
        let single = dev.ports.len() == 1;
        for port in &dev.ports {
            rows.push(PortRow {
                key: PortKey {
                    device: dev.name.clone(),
                    port: port.num,
                },
                driver: dev.driver.clone(),
                state: port.state.as_ref().map(|s| s.name.clone()),
                phys_state: port.phys_state.as_ref().map(|s| s.name.clone()),
                rate_text: port.rate.as_ref().map(|r| r.text.clone()),
                rate_bps: port.rate.as_ref().and_then(|r| r.bits_per_second),
                link_layer: port.link_layer.clone(),
                netdev: port.netdev.clone(),
                rates: port_rates(rates, &dev.name, port.num, single),
            });
        }
    }
    rows
}
