//! A timed, faulty pingmesh at cluster scale, simulated, and localized by the shipped rules
//! on a real Prometheus.
//!
//! ```text
//! cargo build --release -p rdmad -p rdma-bench --bin mesh_faults
//! target/release/mesh_faults                        # 1,000 and 10,000 hosts (~17 min)
//! target/release/mesh_faults 1000 10000 --plan-only # the sizes only, nothing run
//! target/release/mesh_faults 64 --check --for 10    # the check tests/run runs (~4 min)
//! ```
//!
//! Hosts in racks of 32 plan with the planner rdmad runs (`rdma_probe::pinglist::Pinglist`,
//! `--probe.mesh-max` 64), one round every 2 s, each host starting at its own point of its
//! cycle, 110 UD requests per run (the engine's iterations plus warm-up). The probes' outcomes
//! become the per-peer series rdmad exports: their names and labels are rendered by rdmad's
//! own collector (`rdmad::collector::probes::emit`) from an engine snapshot, and every name is
//! checked against `rdmad --print-metrics json`. The bench serves them on 127.0.0.1 (with
//! each prober's `instance`) to one Prometheus per scenario (a temporary directory, killed
//! at the end), scraping and evaluating the shipped `dashboards/rules/rdma.rules.yml` every
//! 10 s in real time (`--for S` sets every non-zero `for:` to S seconds, as
//! tests/multihost-prometheus does). Afterwards it asks that Prometheus which pingmesh alerts
//! fired when, and what the evaluations cost (its own metrics and the rules API's
//! per-rule evaluation time). `promtool test rules` cannot do this: its query engine refuses
//! queries over a few thousand samples, which a 64-host mesh with a rack down already
//! exceeds. Scenarios, injected after a minute of health:
//!
//! - A: one host loses 20% of what it sends (its requests to its targets, its replies to its
//!   probers), for the fault window, then heals;
//! - B: a whole rack of 32 hosts is down: no longer scraped (stale), and every run towards
//!   one of them times out (`rdma_probe_peer_status` 2, its requests lost), then it is back.
//!
//! The fault lasts the planner's cycle plus the rules' `for:` plus a minute, and the run goes
//! on for the cycle plus a minute after it (every pair re-probed: the alerts must resolve).
//! Wall times are those of this machine, shared; the CPU figure says how much was used.
//!
//! ## What is evaluated, and why it is enough
//!
//! The full mesh is 6 series per kept pair (about 3 M series at 1,000 hosts, 301 M at
//! 10,000: printed as "full"). The rules only ever name a host whose failing pairs are at
//! least 2 and more than half of its pairs in one role (target or prober), and only pairs
//! touching an injected host can fail here ("faultable" pairs). So, from the planner's exact
//! pair sets and counting only (no rule is consulted), in the rules' own three stages:
//!
//! 1. RC: hosts whose faultable pairs as target are >= 2 and more than half of their target
//!    pairs that are still scraped during the fault (raw target culprits can only be these);
//! 2. PC: hosts whose faultable pairs as prober are >= 2 and more than half of their prober
//!    pairs towards hosts outside RC (prober culprits can only be these);
//! 3. TC: as 1, with the target pairs from probers outside PC.
//!
//! Every series of a pair whose target is in RC or TC, whose prober is in PC, or which is
//! faultable, is evaluated. Any other host h present in those pairs is not nameable in the
//! full mesh (it is outside RC, PC, TC); so that it is not named on the partial data either,
//! each role of h in which it has faultable pairs gets real healthy pairs of its own (towards
//! hosts outside the injected ones and the candidates) until those are at least twice its
//! faultable ones, or all of its pairs in that role: then no stage of the rules can name it.
//! With that, every stage's verdict on every host is the same as on the full mesh (the
//! candidates' counts are complete; everyone else is provably below half), every failing
//! pair is present with its culprits' exact status, and the pairs left out are healthy
//! pairs whose latency never moves, on which no rule fires. The figures print how many
//! hosts and series that is; scenarios over `--max-series` (default 1.5 M) are sized, not
//! run. It asserts nothing, except with `--check` (the culprits firing at the end of the
//! fault must be exactly the injected ones, no other pingmesh alert, and none left after).

use anyhow::{bail, Context};
use rdma_probe::engine::EngineConfig;
use rdma_probe::pinglist::{stable_hash, Pinglist, DEFAULT_MESH_MAX};
use rdma_probe::snapshot::{
    DiscoveryStats, Histogram, PeerState, PeerStatus, PeerTransport, ProbeSnapshot, LATENCY_BUCKETS,
};
use rdma_probe::{LatencySummary, ProbeOp, TargetResult};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Instant;

const RACK: usize = 32;
const PROBE_PORT: u16 = 9737;
const METRICS_PORT: u16 = 9736;
/// Seconds between probe rounds (the interval the rules' 30 s loss window is written for).
const INTERVAL: u64 = 2;
/// Seconds between scrapes and between rule evaluations.
const STEP: u64 = 10;
/// Healthy seconds before the fault.
const WARM: u64 = 60;
const LOSS: f64 = 0.2;
const BASE_RTT_US: f64 = 20.0;
const P99_RTT_US: f64 = 31.0;
/// The pingmesh alerts (`rdma-alerts` group) whose verdicts are printed.
const MESH_ALERTS: &str = "RdmaHostUnreachable|RdmaAgentDown|RdmaHostRdmaDown|RdmaHostLinkLossy|RdmaPathDown|RdmaPathLossy|RdmaHostLatencyHigh|RdmaPairLatencyAboveBaseline";

fn host_ip(i: usize) -> String {
    format!("10.{}.{}.{}", 1 + i / 65536, (i / 256) % 256, i % 256)
}

fn rack_of(i: usize) -> String {
    format!("r{}", i / RACK)
}

/// Which of rdmad's per-peer series a template line is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Role {
    Status,
    Sent,
    LostRequest,
    LostReply,
    Typical,
    P99,
}

/// One per-peer series as rdmad renders it, with the peer's address and rack to fill in.
struct Template {
    role: Role,
    /// `name{labels}` with `@PEER@` and `@RACK@` in place of the peer's.
    text: String,
}

const MARK_PEER: &str = "192.0.2.1:9737";
const MARK_RACK: &str = "rack-mark";
// Values no other series of the snapshot has: they tell the lines apart without naming them.
const MARK_SENT: u64 = 7_000_001;
const MARK_LOST_REQUEST: u64 = 7_000_002;
const MARK_LOST_REPLY: u64 = 7_000_003;
const MARK_TYPICAL_US: f64 = 7_000_004.0;
const MARK_P99_US: f64 = 7_000_005.0;

/// rdmad's per-peer series for one peer, rendered by rdmad's collector from a snapshot with
/// one UD peer, and their names checked against `rdmad --print-metrics json`.
fn templates(rdmad: &Path) -> anyhow::Result<Vec<Template>> {
    let summary = LatencySummary {
        iterations: 100,
        t_min_us: 1.0,
        t_max_us: 2.0,
        t_typical_us: MARK_TYPICAL_US,
        t_avg_us: 1.5,
        t_stdev_us: 0.5,
        p99_us: MARK_P99_US,
        p99_9_us: 3.0,
    };
    let labels = Arc::new(BTreeMap::from([(
        "rack".to_string(),
        MARK_RACK.to_string(),
    )]));
    let snapshot = ProbeSnapshot {
        clock: None,
        rounds_total: 1,
        round_duration_seconds: None,
        rounds_late_total: 0,
        cpu_seconds_total: 0.0,
        uptime_seconds: 1.0,
        targets: vec![TargetResult {
            kind: "peer",
            device: "mlx5_0".into(),
            port: 1,
            peer: Some(MARK_PEER.into()),
            op: ProbeOp::Send,
            transport: PeerTransport::Ud,
            size_bytes: 64,
            latency_seconds: Histogram::new(LATENCY_BUCKETS),
            last: Some(summary),
            runs_total: 1,
            sent_total: MARK_SENT,
            lost_total: MARK_LOST_REQUEST + MARK_LOST_REPLY,
            lost_request_total: MARK_LOST_REQUEST,
            lost_reply_total: MARK_LOST_REPLY,
            failures_total: BTreeMap::new(),
            up: true,
            last_error: None,
        }],
        registrations: Vec::new(),
        peers: vec![PeerState {
            peer: MARK_PEER.into(),
            connected: true,
            connects_total: 1,
            backoff_seconds: 1.0,
            labels,
            planned: true,
            status: Some(PeerStatus::Rdma),
        }],
        handshakes_accepted_total: 0,
        handshakes_refused_total: BTreeMap::new(),
        ud_endpoints: Vec::new(),
        discovery: DiscoveryStats::default(),
        own_labels: BTreeMap::new(),
        own_peers: Vec::new(),
    };
    let mut set = rdmad::metrics::MetricSet::new();
    rdmad::collector::probes::emit(&snapshot, false, &mut set)?;
    let text = set.encode(rdmad::metrics::Format::Text);
    let declared = declared_names(rdmad)?;
    let mut out = Vec::new();
    for line in text.lines() {
        if line.starts_with('#') || !line.contains(&format!("peer=\"{MARK_PEER}\"")) {
            continue;
        }
        let (series, value) = line
            .rsplit_once(' ')
            .with_context(|| format!("no value in {line:?}"))?;
        let value: f64 = value.parse()?;
        let role = if value == f64::from(PeerStatus::Rdma.value() as u32) {
            Role::Status
        } else if value == MARK_SENT as f64 {
            Role::Sent
        } else if value == MARK_LOST_REQUEST as f64 {
            Role::LostRequest
        } else if value == MARK_LOST_REPLY as f64 {
            Role::LostReply
        } else if value == MARK_TYPICAL_US / 1e6 {
            Role::Typical
        } else if value == MARK_P99_US / 1e6 {
            Role::P99
        } else {
            bail!("rdmad renders a per-peer series this bench does not know: {line}");
        };
        let name = series.split('{').next().unwrap_or_default();
        if !declared.contains(name) {
            bail!(
                "{name} is not in `{} --print-metrics json`",
                rdmad.display()
            );
        }
        out.push(Template {
            role,
            text: series
                .replace(MARK_PEER, "@PEER@")
                .replace(MARK_RACK, "@RACK@"),
        });
    }
    let roles: BTreeSet<Role> = out.iter().map(|t| t.role).collect();
    if roles.len() != 6 || out.len() != 6 {
        bail!(
            "expected rdmad's 6 per-peer series, got {}: {text}",
            out.len()
        );
    }
    Ok(out)
}

/// Every series name rdmad declares, from the binary itself.
fn declared_names(rdmad: &Path) -> anyhow::Result<BTreeSet<String>> {
    let out = Command::new(rdmad)
        .args(["--print-metrics", "json"])
        .output()
        .with_context(|| format!("running {}", rdmad.display()))?;
    if !out.status.success() {
        bail!("{} --print-metrics json failed", rdmad.display());
    }
    let text = String::from_utf8(out.stdout)?;
    // "series": ["name", ...] entries: every quoted word after a "series" key.
    let mut names = BTreeSet::new();
    for chunk in text.split("\"series\"").skip(1) {
        let list = chunk
            .split_once('[')
            .and_then(|(_, r)| r.split_once(']'))
            .map(|(l, _)| l)
            .unwrap_or_default();
        for name in list.split(',') {
            let name = name.trim().trim_matches('"');
            if !name.is_empty() {
                names.insert(name.to_string());
            }
        }
    }
    if names.is_empty() {
        bail!("no series in `{} --print-metrics json`", rdmad.display());
    }
    Ok(names)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Scenario {
    Egress,
    Rack,
}

impl Scenario {
    fn title(self) -> &'static str {
        match self {
            Scenario::Egress => "A: 20% egress loss on one host",
            Scenario::Rack => "B: a rack of 32 down",
        }
    }
}

/// The mesh: every host's plan and the pairs each keeps series for.
struct Mesh {
    n: usize,
    plans: Vec<Pinglist>,
    /// `globals[h][k]`: the host index of peer `k` in `h`'s peer list.
    globals: Vec<Vec<u32>>,
    /// The peers each host keeps series for (everything its plan ever probes), sorted.
    kept: Vec<Vec<u32>>,
    /// The planner round each host is at when the simulation starts.
    offset: Vec<u64>,
    cycle: u64,
}

impl Mesh {
    fn new(n: usize) -> Mesh {
        let ids: Vec<String> = (0..n)
            .map(|i| format!("{}:{PROBE_PORT}", host_ip(i)))
            .collect();
        let racks: Vec<String> = (0..n).map(rack_of).collect();
        let mut plans = Vec::with_capacity(n);
        let mut globals = Vec::with_capacity(n);
        let mut kept = Vec::with_capacity(n);
        let mut offset = Vec::with_capacity(n);
        let mut cycle = 1;
        for me in 0..n {
            let peers: Vec<(&str, Option<&str>)> = (0..n)
                .filter(|&i| i != me)
                .map(|i| (ids[i].as_str(), Some(racks[i].as_str())))
                .collect();
            let global: Vec<u32> = (0..n as u32).filter(|&i| i as usize != me).collect();
            let plan = Pinglist::new(DEFAULT_MESH_MAX, &ids[me], Some(&racks[me]), &peers);
            let c = plan.cycle_rounds();
            let mut set = BTreeSet::new();
            for r in 0..c {
                set.extend(plan.round(r).into_iter().map(|k| global[k]));
            }
            cycle = cycle.max(c);
            offset.push(stable_hash(&ids[me]) % c);
            kept.push(set.into_iter().collect());
            plans.push(plan);
            globals.push(global);
        }
        Mesh {
            n,
            plans,
            globals,
            kept,
            offset,
            cycle,
        }
    }

    fn pairs(&self) -> usize {
        self.kept.iter().map(Vec::len).sum()
    }
}

/// The fault: its hosts, and what it does to a run of `prober` towards `target`.
struct Fault {
    scenario: Scenario,
    hosts: BTreeSet<u32>,
}

impl Fault {
    fn new(scenario: Scenario, n: usize) -> Fault {
        let hosts = match scenario {
            // A host in the middle of the fleet.
            Scenario::Egress => BTreeSet::from([(n / 2) as u32]),
            // The last full rack.
            Scenario::Rack => {
                let r = n / RACK - 1;
                ((r * RACK) as u32..((r + 1) * RACK) as u32).collect()
            }
        };
        Fault { scenario, hosts }
    }

    /// Dead hosts are not scraped during the fault.
    fn dead(&self, h: u32) -> bool {
        self.scenario == Scenario::Rack && self.hosts.contains(&h)
    }

    /// Whether the pair's series can ever differ from a healthy pair's.
    fn faultable(&self, p: u32, t: u32) -> bool {
        match self.scenario {
            Scenario::Egress => self.hosts.contains(&p) || self.hosts.contains(&t),
            Scenario::Rack => !self.hosts.contains(&p) && self.hosts.contains(&t),
        }
    }
}

/// The pairs to evaluate, and the counting behind them.
struct Selection {
    pairs: BTreeSet<(u32, u32)>,
    nameable_target: BTreeSet<u32>,
    nameable_prober: BTreeSet<u32>,
    padding: usize,
}

fn select(mesh: &Mesh, fault: &Fault) -> Selection {
    let n = mesh.n;
    // Per host: target pairs by prober.
    let mut probers: Vec<Vec<u32>> = vec![Vec::new(); n];
    for (p, list) in mesh.kept.iter().enumerate() {
        for &t in list {
            probers[t as usize].push(p as u32);
        }
    }
    let nameable = |f: usize, d: usize| f >= 2 && 2 * f > d;
    // 1. Raw target culprits can only be these.
    let rc: BTreeSet<u32> = (0..n as u32)
        .filter(|&h| {
            let live = probers[h as usize].iter().filter(|&&p| !fault.dead(p));
            let (mut f, mut d) = (0, 0);
            for &p in live {
                d += 1;
                f += usize::from(fault.faultable(p, h));
            }
            nameable(f, d)
        })
        .collect();
    // 2. Prober culprits: every faultable pair counts, the denominator leaves out RC.
    let pc: BTreeSet<u32> = (0..n as u32)
        .filter(|&h| {
            if fault.dead(h) {
                return false; // not scraped during the fault: no prober series
            }
            let kept = &mesh.kept[h as usize];
            let f = kept.iter().filter(|&&t| fault.faultable(h, t)).count();
            let d = kept.iter().filter(|&&t| !rc.contains(&t)).count();
            nameable(f, d)
        })
        .collect();
    // 3. Target culprits, the denominator without PC's pairs.
    let tc: BTreeSet<u32> = (0..n as u32)
        .filter(|&h| {
            let (mut f, mut d) = (0, 0);
            for &p in probers[h as usize].iter().filter(|&&p| !fault.dead(p)) {
                f += usize::from(fault.faultable(p, h));
                d += usize::from(!pc.contains(&p));
            }
            nameable(f, d)
        })
        .collect();
    let nameable_target: BTreeSet<u32> = rc.union(&tc).copied().collect();
    let candidates: BTreeSet<u32> = nameable_target
        .union(&pc)
        .chain(fault.hosts.iter())
        .copied()
        .collect();
    let mut pairs = BTreeSet::new();
    for (p, list) in mesh.kept.iter().enumerate() {
        let p = p as u32;
        for &t in list {
            if pc.contains(&p) || nameable_target.contains(&t) || fault.faultable(p, t) {
                pairs.insert((p, t));
            }
        }
    }
    // Padding: healthy pairs of the other hosts present, until their faultable pairs in a
    // role are at most half of their healthy ones there (or all of the role's pairs are in).
    let mut need_prober: BTreeMap<u32, (usize, usize)> = BTreeMap::new(); // (faultable, healthy)
    let mut need_target: BTreeMap<u32, (usize, usize)> = BTreeMap::new();
    let healthy =
        |p: u32, t: u32| !fault.dead(p) && !candidates.contains(&p) && !candidates.contains(&t);
    for &(p, t) in &pairs {
        let f = usize::from(fault.faultable(p, t));
        let h = usize::from(healthy(p, t));
        let e = need_prober.entry(p).or_default();
        e.0 += f;
        e.1 += h;
        let e = need_target.entry(t).or_default();
        e.0 += f;
        e.1 += h;
    }
    let before = pairs.len();
    for (&h, &(f, mut have)) in &need_prober {
        if pc.contains(&h) || f < 2 {
            continue;
        }
        for &t in &mesh.kept[h as usize] {
            if have >= 2 * f {
                break;
            }
            if healthy(h, t) && pairs.insert((h, t)) {
                have += 1;
            }
        }
        if have < 2 * f {
            pairs.extend(mesh.kept[h as usize].iter().map(|&t| (h, t)));
        }
    }
    for (&h, &(f, mut have)) in &need_target {
        if nameable_target.contains(&h) || f < 2 {
            continue;
        }
        for &p in &probers[h as usize] {
            if have >= 2 * f {
                break;
            }
            if healthy(p, h) && pairs.insert((p, h)) {
                have += 1;
            }
        }
        if have < 2 * f {
            pairs.extend(probers[h as usize].iter().map(|&p| (p, h)));
        }
    }
    let padding = pairs.len() - before;
    Selection {
        pairs,
        nameable_target,
        nameable_prober: pc,
        padding,
    }
}

/// splitmix64: a reproducible stream for the losses.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn lost(&mut self, n: u64, p: f64) -> u64 {
        (0..n)
            .filter(|_| (self.next() >> 11) as f64 / (1u64 << 53) as f64 <= p)
            .count() as u64
    }
}

/// One pair's samples, one per scrape.
#[derive(Default, Clone)]
struct PairSeries {
    status: Vec<u64>,
    sent: Vec<u64>,
    lost_request: Vec<u64>,
    lost_reply: Vec<u64>,
}

struct Timeline {
    /// Seconds of the fault's start and end, and of the last scrape.
    fault_start: u64,
    fault_end: u64,
    end: u64,
}

impl Timeline {
    /// A minute of health, the fault for the planner's cycle plus the rules' `for:` plus a
    /// minute, then the cycle plus a minute to resolve.
    fn new(cycle: u64, for_s: u64) -> Timeline {
        let cycle_s = cycle * INTERVAL;
        let fault_start = WARM;
        let fault_end = fault_start + (cycle_s + for_s + 60).div_ceil(STEP) * STEP;
        let end = fault_end + (cycle_s + 60).div_ceil(STEP) * STEP;
        Timeline {
            fault_start,
            fault_end,
            end,
        }
    }

    fn samples(&self) -> usize {
        (self.end / STEP) as usize + 1
    }

    fn faulty(&self, t: u64) -> bool {
        t >= self.fault_start && t < self.fault_end
    }
}

/// Runs the rounds of every prober of a selected pair and records the scrapes.
fn simulate(
    mesh: &Mesh,
    fault: &Fault,
    sel: &Selection,
    time: &Timeline,
    sent_per_run: u64,
) -> HashMap<(u32, u32), PairSeries> {
    let mut by_prober: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
    for &(p, t) in &sel.pairs {
        by_prober.entry(p).or_default().push(t);
    }
    let samples = time.samples();
    let mut out = HashMap::with_capacity(sel.pairs.len());
    let mut rng = Rng(0x5eed);
    for (&p, targets) in &by_prober {
        // State per target: (status, sent, lost request, lost reply).
        let mut state: HashMap<u32, (u64, u64, u64, u64)> =
            targets.iter().map(|&t| (t, (0, 0, 0, 0))).collect();
        let mut series: HashMap<u32, PairSeries> = targets
            .iter()
            .map(|&t| (t, PairSeries::default()))
            .collect();
        let plan = &mesh.plans[p as usize];
        let global = &mesh.globals[p as usize];
        let mut round = 0u64;
        for s in 0..samples as u64 {
            let now = s * STEP;
            // The rounds that ended before this scrape.
            while round * INTERVAL < now {
                let t_round = round * INTERVAL;
                let faulty = time.faulty(t_round);
                if !(faulty && fault.dead(p)) {
                    for k in plan.round(round + mesh.offset[p as usize]) {
                        let t = global[k];
                        let Some(st) = state.get_mut(&t) else {
                            continue;
                        };
                        st.1 += sent_per_run;
                        if !faulty {
                            st.0 = 0;
                            continue;
                        }
                        match fault.scenario {
                            Scenario::Rack if fault.dead(t) => {
                                st.0 = PeerStatus::Host.value();
                                st.2 += sent_per_run;
                            }
                            Scenario::Egress if fault.hosts.contains(&p) => {
                                st.0 = 0;
                                st.2 += rng.lost(sent_per_run, LOSS);
                            }
                            Scenario::Egress if fault.hosts.contains(&t) => {
                                st.0 = 0;
                                st.3 += rng.lost(sent_per_run, LOSS);
                            }
                            _ => st.0 = 0,
                        }
                    }
                }
                round += 1;
            }
            for (t, st) in &state {
                let ps = series.get_mut(t).expect("every target has series");
                ps.status.push(st.0);
                ps.sent.push(st.1);
                ps.lost_request.push(st.2);
                ps.lost_reply.push(st.3);
            }
        }
        out.extend(series.into_iter().map(|(t, s)| ((p, t), s)));
    }
    out
}

/// One scenario on one mesh size, simulated, served to Prometheus as one scrape job.
struct Combo {
    n: usize,
    fault: Fault,
    time: Timeline,
    job: String,
    /// The evaluated pairs and their samples, sorted.
    data: Vec<((u32, u32), PairSeries)>,
    selection: String,
}

impl Combo {
    /// The exposition Prometheus scrapes at sample `s`: the evaluated pairs' series as
    /// rdmad renders them, without the dead probers' while they are down.
    fn render(&self, templates: &[Template], s: usize) -> String {
        let s = s.min(self.time.samples() - 1);
        let now = s as u64 * STEP;
        let mut out = String::with_capacity(self.data.len() * templates.len() * 180);
        for ((p, t), series) in &self.data {
            if self.fault.dead(*p) && self.time.faulty(now) {
                continue; // not scraped: Prometheus marks its series stale
            }
            let instance = format!("{}:{METRICS_PORT}", host_ip(*p as usize));
            let peer = format!("{}:{PROBE_PORT}", host_ip(*t as usize));
            let rack = rack_of(*t as usize);
            for tpl in templates {
                let body = tpl.text.replace("@PEER@", &peer).replace("@RACK@", &rack);
                let Some((name, labels)) = body.split_once('{') else {
                    continue;
                };
                let _ = write!(out, "{name}{{instance=\"{instance}\",{labels} ");
                let _ = match tpl.role {
                    Role::Status => writeln!(out, "{}", series.status[s]),
                    Role::Sent => writeln!(out, "{}", series.sent[s]),
                    Role::LostRequest => writeln!(out, "{}", series.lost_request[s]),
                    Role::LostReply => writeln!(out, "{}", series.lost_reply[s]),
                    Role::Typical => writeln!(out, "{}", BASE_RTT_US / 1e6),
                    Role::P99 => writeln!(out, "{}", P99_RTT_US / 1e6),
                };
            }
        }
        out
    }

    fn series(&self, templates: &[Template]) -> usize {
        self.data.len() * templates.len()
    }
}

/// Serves `/metrics/K` (combo K at the sample the wall clock is at) on 127.0.0.1.
fn serve(
    listener: std::net::TcpListener,
    combos: Arc<Vec<Combo>>,
    templates: Arc<Vec<Template>>,
    start: Instant,
) {
    use std::io::{BufRead, BufReader, Write};
    for stream in listener.incoming() {
        let Ok(stream) = stream else { continue };
        let combos = Arc::clone(&combos);
        let templates = Arc::clone(&templates);
        std::thread::spawn(move || {
            let mut reader = BufReader::new(&stream);
            let mut line = String::new();
            if reader.read_line(&mut line).is_err() {
                return;
            }
            let path = line
                .split_whitespace()
                .nth(1)
                .unwrap_or_default()
                .to_string();
            // The rest of the request head.
            loop {
                let mut h = String::new();
                match reader.read_line(&mut h) {
                    Ok(0) | Err(_) => break,
                    Ok(_) if h.trim().is_empty() => break,
                    Ok(_) => {}
                }
            }
            let s = (start.elapsed().as_secs() / STEP) as usize;
            let body = path
                .strip_prefix("/metrics/")
                .and_then(|k| k.parse::<usize>().ok())
                .and_then(|k| combos.get(k))
                .map(|c| c.render(&templates, s));
            let mut w = &stream;
            let _ = match body {
                Some(b) => write!(
                    w,
                    "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{b}",
                    b.len()
                ),
                None => write!(w, "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"),
            };
        });
    }
}

/// A Prometheus of ours on 127.0.0.1, killed and its directory removed on drop.
struct Prometheus {
    child: std::process::Child,
    url: String,
    dir: PathBuf,
    keep: bool,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if !self.keep {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

fn start_prometheus(
    dir: &Path,
    rules: &Path,
    exporter: u16,
    jobs: &[(usize, &Combo)],
    keep: bool,
) -> anyhow::Result<Prometheus> {
    std::fs::create_dir_all(dir)?;
    let port = free_port()?;
    let mut cfg = format!(
        "global:\n  scrape_interval: {STEP}s\n  scrape_timeout: {STEP}s\n  evaluation_interval: {STEP}s\nrule_files:\n  - {}\nscrape_configs:\n  - job_name: prometheus\n    static_configs:\n      - targets: ['127.0.0.1:{port}']\n",
        rules.display()
    );
    for (k, c) in jobs {
        let _ = write!(
            cfg,
            "  - job_name: {}\n    honor_labels: true\n    metrics_path: /metrics/{k}\n    static_configs:\n      - targets: ['127.0.0.1:{exporter}']\n",
            c.job
        );
    }
    let config = dir.join("prometheus.yml");
    std::fs::write(&config, cfg)?;
    let log = std::fs::File::create(dir.join("prometheus.log"))?;
    let child = Command::new("prometheus")
        .arg(format!("--config.file={}", config.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("data").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .arg("--storage.tsdb.retention.time=1d")
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .context("starting prometheus (Debian: prometheus)")?;
    let p = Prometheus {
        child,
        url: format!("http://127.0.0.1:{port}"),
        dir: dir.to_path_buf(),
        keep,
    };
    // Ready within a minute, polled.
    for _ in 0..120 {
        if ureq::get(&format!("{}/-/ready", p.url)).call().is_ok() {
            return Ok(p);
        }
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
    bail!(
        "prometheus did not get ready: see {}",
        dir.join("prometheus.log").display()
    )
}

/// An instant query: (labels, value) of each sample.
fn query(
    prom: &Prometheus,
    expr: &str,
    at: f64,
) -> anyhow::Result<Vec<(BTreeMap<String, String>, f64)>> {
    let body = ureq::get(&format!("{}/api/v1/query", prom.url))
        .query("query", expr)
        .query("time", format!("{at:.3}"))
        .call()
        .with_context(|| format!("query {expr}"))?
        .body_mut()
        .read_to_string()?;
    let v: serde_json::Value = serde_json::from_str(&body)?;
    if v["status"] != "success" {
        bail!("query {expr}: {body}");
    }
    let mut out = Vec::new();
    for r in v["data"]["result"].as_array().into_iter().flatten() {
        let labels = r["metric"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
            .collect();
        let value = r["value"][1]
            .as_str()
            .and_then(|s| s.parse().ok())
            .unwrap_or(f64::NAN);
        out.push((labels, value));
    }
    Ok(out)
}

/// The alert as one line: its name and the labels that say which culprit.
fn alert_key(l: &BTreeMap<String, String>) -> String {
    let mut s = l.get("alertname").cloned().unwrap_or_default();
    let parts: Vec<String> = ["host", "direction", "a", "b", "layer"]
        .iter()
        .filter(|k| !(l.contains_key("host") && (**k == "a" || **k == "b")))
        .filter_map(|k| l.get(*k).map(|v| format!("{k}={v}")))
        .collect();
    if !parts.is_empty() {
        let _ = write!(s, "{{{}}}", parts.join(","));
    }
    s
}

const CULPRIT_ALERTS: [&str; 5] = [
    "RdmaHostUnreachable",
    "RdmaAgentDown",
    "RdmaHostRdmaDown",
    "RdmaHostLinkLossy",
    "RdmaHostLatencyHigh",
];

/// The culprit alerts the fault should fire (keys as [`alert_key`] writes them).
fn injected(fault: &Fault) -> BTreeSet<String> {
    fault
        .hosts
        .iter()
        .map(|&h| {
            let host = host_ip(h as usize);
            match fault.scenario {
                Scenario::Egress => format!("RdmaHostLinkLossy{{host={host},direction=egress}}"),
                Scenario::Rack => format!("RdmaHostUnreachable{{host={host}}}"),
            }
        })
        .collect()
}

/// What one combo's job fired, from the Prometheus that evaluated it. Returns whether it
/// fired exactly the injected culprits and nothing else at the end of the fault.
fn report(prom: &Prometheus, c: &Combo, start_unix: f64) -> anyhow::Result<bool> {
    let job = &c.job;
    let firing =
        format!("ALERTS{{job=\"{job}\",alertstate=\"firing\",alertname=~\"{MESH_ALERTS}\"}}");
    let at_end = start_unix + (c.time.fault_end - STEP) as f64;
    let now = start_unix + c.time.end as f64;
    let want = injected(&c.fault);
    let (found, others): (BTreeSet<String>, BTreeSet<String>) = query(prom, &firing, at_end)?
        .iter()
        .map(|(l, _)| alert_key(l))
        .partition(|k| {
            CULPRIT_ALERTS
                .iter()
                .any(|n| k.split('{').next() == Some(n))
        });
    let hit = found.intersection(&want).count();
    println!(
        "    culprits: {} injected, {} found at the end of the fault, {} right, {} wrong; other pingmesh alerts firing then: {}",
        want.len(),
        found.len(),
        hit,
        found.len() - hit,
        others.len()
    );
    for k in want.difference(&found).take(3) {
        println!("      missed: {k}");
    }
    for k in found.difference(&want).take(3) {
        println!("      unexpected: {k}");
    }
    for k in others.iter().take(3) {
        println!("      also firing: {k}");
    }
    let span = c.time.end;
    let first = query(
        prom,
        &format!("min_over_time(timestamp({firing})[{span}s:{STEP}s])"),
        now,
    )?;
    let last = query(
        prom,
        &format!("max_over_time(timestamp({firing})[{span}s:{STEP}s])"),
        now,
    )?;
    let mut by_name: BTreeMap<String, (usize, f64, f64, f64)> = BTreeMap::new();
    for (l, v) in &first {
        let name = l.get("alertname").cloned().unwrap_or_default();
        let end = last
            .iter()
            .find(|(m, _)| m == l)
            .map_or(f64::NAN, |(_, w)| *w);
        let e = by_name
            .entry(name)
            .or_insert((0, f64::MAX, f64::MAX, f64::MIN));
        e.0 += 1;
        e.1 = e.1.min(*v);
        e.2 = e.2.min(if want.contains(&alert_key(l)) {
            *v
        } else {
            f64::MAX
        });
        e.3 = e.3.max(end);
    }
    let since = |t: f64, from: u64| t - start_unix - from as f64;
    for (name, (count, first, _, last)) in &by_name {
        println!(
            "    fired {name}: {count} alert(s), the first +{:.0} s after injection; the last still firing +{:.0} s after the fault's end",
            since(*first, c.time.fault_start),
            since(*last, c.time.fault_end),
        );
    }
    if by_name.is_empty() {
        println!("    fired: no pingmesh alert");
    }
    let firing_after = query(prom, &firing, now)?.len();
    println!(
        "    still firing at the end (+{} s after the fault): {firing_after}",
        c.time.end - c.time.fault_end
    );
    Ok(found == want && others.is_empty() && firing_after == 0)
}

/// Prometheus's own figures over the run: rule evaluation, scrapes, memory.
fn costs(prom: &Prometheus, end_unix: f64, span: u64) -> anyhow::Result<()> {
    let one = |expr: &str| -> anyhow::Result<f64> {
        Ok(query(prom, expr, end_unix)?
            .first()
            .map_or(f64::NAN, |(_, v)| *v))
    };
    let r = format!("[{span}s]");
    println!(
        "    Prometheus: pingmesh rule group {:.2} s per evaluation (max {:.2} s), all rules {:.2} s per {STEP} s evaluation; {:.0} evaluations missed; scrape of the mesh jobs max {:.2} s; head series max {:.0}; RSS max {:.0} MiB",
        one(&format!("avg(avg_over_time(prometheus_rule_group_last_duration_seconds{{rule_group=~\".*;rdma-pingmesh\"}}{r}))"))?,
        one(&format!("max(max_over_time(prometheus_rule_group_last_duration_seconds{{rule_group=~\".*;rdma-pingmesh\"}}{r}))"))?,
        one(&format!("sum(avg_over_time(prometheus_rule_group_last_duration_seconds{r}))"))?,
        one("sum(prometheus_rule_group_iterations_missed_total)")?,
        one(&format!("max(max_over_time(scrape_duration_seconds{{job!=\"prometheus\"}}{r}))"))?,
        one(&format!("max_over_time(prometheus_tsdb_head_series{r})"))?,
        one(&format!("max_over_time(process_resident_memory_bytes{{job=\"prometheus\"}}{r})"))? / 1048576.0,
    );
    println!(
        "    Prometheus CPU: {:.2} cores on average over the run (wall times above include waiting for a loaded machine's CPU)",
        one(&format!("rate(process_cpu_seconds_total{{job=\"prometheus\"}}{r})"))?,
    );
    // The costliest rules of the last evaluation (the rules API's per-rule evaluationTime).
    let body = ureq::get(&format!("{}/api/v1/rules", prom.url))
        .call()?
        .body_mut()
        .read_to_string()?;
    let v: serde_json::Value = serde_json::from_str(&body)?;
    let mut rules: Vec<(f64, String)> = v["data"]["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|g| g["rules"].as_array().into_iter().flatten())
        .map(|r| {
            (
                r["evaluationTime"].as_f64().unwrap_or(0.0),
                r["name"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    rules.sort_by(|a, b| b.0.total_cmp(&a.0));
    let top: Vec<String> = rules
        .iter()
        .take(4)
        .map(|(t, n)| format!("{n} {t:.2} s"))
        .collect();
    println!(
        "    costliest rules in the last evaluation: {}",
        top.join(", ")
    );
    Ok(())
}

/// The shipped rules with every non-zero `for:` at `seconds` (as tests/multihost-prometheus
/// shortens them), in `dir`.
fn rules_with_for(rules: &Path, seconds: u64, dir: &Path) -> anyhow::Result<PathBuf> {
    let text = std::fs::read_to_string(rules)?;
    let mut changed = 0;
    let out: Vec<String> = text
        .lines()
        .map(|l| {
            let t = l.trim_start();
            match t.strip_prefix("for: ") {
                Some(d) if !d.starts_with('0') => {
                    changed += 1;
                    format!("{}for: {seconds}s", &l[..l.len() - t.len()])
                }
                _ => l.to_string(),
            }
        })
        .collect();
    if changed == 0 {
        bail!("no `for:` in {}", rules.display());
    }
    let path = dir.join("rdma.rules.yml");
    std::fs::write(&path, out.join("\n") + "\n")?;
    Ok(path)
}

fn human(n: usize) -> String {
    if n >= 10_000_000 {
        format!("{:.1} M", n as f64 / 1e6)
    } else {
        n.to_string()
    }
}

fn main() -> anyhow::Result<()> {
    let mut sizes = Vec::new();
    let mut check = false;
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut rdmad = root.join("target/release/rdmad");
    let mut rules = root.join("dashboards/rules/rdma.rules.yml");
    let mut keep = false;
    let mut plan_only = false;
    let mut for_seconds = None;
    let mut max_series = 1_500_000usize;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--check" => check = true,
            "--keep" => keep = true,
            "--plan-only" => plan_only = true,
            "--rdmad" => rdmad = args.next().context("--rdmad PATH")?.into(),
            "--rules" => rules = args.next().context("--rules PATH")?.into(),
            "--for" => for_seconds = Some(args.next().context("--for SECONDS")?.parse::<u64>()?),
            "--max-series" => max_series = args.next().context("--max-series N")?.parse()?,
            "-h" | "--help" => {
                println!("mesh_faults [HOSTS...] [--check] [--for SECONDS] [--max-series N] [--plan-only] [--keep] [--rdmad PATH] [--rules PATH]");
                return Ok(());
            }
            s => sizes.push(
                s.parse::<usize>()
                    .map_err(|_| anyhow::anyhow!("`{s}` is not a host count"))?,
            ),
        }
    }
    if sizes.is_empty() {
        sizes = vec![1000, 10_000];
    }
    let shipped = rules
        .canonicalize()
        .with_context(|| format!("rules file {}", rules.display()))?;
    let templates = templates(&rdmad)?;
    let engine = EngineConfig::default();
    let sent_per_run = engine.iterations + engine.warmup;
    let dir = std::env::temp_dir().join(format!("mesh-faults-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let rules = match for_seconds {
        Some(s) => rules_with_for(&shipped, s, &dir)?,
        None => shipped.clone(),
    };
    let for_s = for_seconds.unwrap_or(120);
    println!(
        "pingmesh faults through {}{} on a real Prometheus, racks of {RACK}, --probe.mesh-max {DEFAULT_MESH_MAX}, rounds every {INTERVAL} s, scrape and evaluation every {STEP} s, {sent_per_run} requests per run",
        shipped.display(),
        for_seconds.map_or(String::new(), |s| format!(" (`for:` at {s} s)")),
    );
    let mut combos = Vec::new();
    for &n in &sizes {
        if n < 2 * RACK {
            bail!("at least {} hosts (two racks)", 2 * RACK);
        }
        let t = Instant::now();
        let mesh = Mesh::new(n);
        let plan_s = t.elapsed().as_secs_f64();
        let pairs = mesh.pairs();
        let per_host: Vec<usize> = mesh
            .kept
            .iter()
            .map(|k| k.len() * templates.len())
            .collect();
        println!(
            "{n} hosts: planner cycle {} rounds ({} s); series per host {}..{} (mean {:.0}); full mesh {} pairs, {} series (6 per pair); planned in {plan_s:.1} s",
            mesh.cycle,
            mesh.cycle * INTERVAL,
            per_host.iter().min().unwrap_or(&0),
            per_host.iter().max().unwrap_or(&0),
            per_host.iter().sum::<usize>() as f64 / n as f64,
            human(pairs),
            human(pairs * templates.len()),
        );
        for scenario in [Scenario::Egress, Scenario::Rack] {
            let fault = Fault::new(scenario, n);
            let time = Timeline::new(mesh.cycle, for_s);
            let t = Instant::now();
            let sel = select(&mesh, &fault);
            let hosts_in: BTreeSet<u32> = sel.pairs.iter().flat_map(|&(p, t)| [p, t]).collect();
            let selection = format!(
                "{} pairs ({} of them padding) of {} hosts, {} series; nameable by counting: {} as target, {} as prober",
                sel.pairs.len(),
                sel.padding,
                hosts_in.len(),
                sel.pairs.len() * templates.len(),
                sel.nameable_target.len(),
                sel.nameable_prober.len(),
            );
            let job = format!("rdmad-{n}-{}", &scenario.title()[..1]);
            println!("  {job}: {}: evaluated {selection}", scenario.title());
            if plan_only {
                continue;
            }
            if sel.pairs.len() * templates.len() > max_series {
                println!("    not evaluated: over --max-series {max_series} on this machine");
                continue;
            }
            let mut data: Vec<_> = simulate(&mesh, &fault, &sel, &time, sent_per_run)
                .into_iter()
                .collect();
            data.sort_unstable_by_key(|d| d.0);
            println!("    simulated in {:.1} s", t.elapsed().as_secs_f64());
            combos.push(Combo {
                n,
                fault,
                time,
                job,
                data,
                selection,
            });
        }
    }
    if plan_only || combos.is_empty() {
        return Ok(());
    }
    let combos = Arc::new(combos);
    let templates = Arc::new(templates);
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let exporter = listener.local_addr()?.port();
    let start = Instant::now();
    let start_unix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_secs_f64();
    {
        let combos = Arc::clone(&combos);
        let templates = Arc::clone(&templates);
        std::thread::spawn(move || serve(listener, combos, templates, start));
    }
    // One Prometheus per scenario and size, so that one's rule evaluations do not hold up
    // another's.
    let mut proms = Vec::new();
    for (k, c) in combos.iter().enumerate() {
        let prom = start_prometheus(
            &dir.join(format!("prometheus-{}", c.job)),
            &rules,
            exporter,
            &[(k, c)],
            keep,
        )?;
        proms.push((c.n, prom, vec![k]));
    }
    let end = combos.iter().map(|c| c.time.end).max().unwrap_or(0) + 2 * STEP;
    println!(
        "running the timeline in real time: {end} s (Prometheus evaluates the rules as they come)"
    );
    while start.elapsed().as_secs() < end {
        std::thread::sleep(std::time::Duration::from_secs(1));
    }
    let mut wrong = 0;
    for (n, prom, jobs) in &proms {
        println!("{n} hosts, {} Prometheus:", jobs.len());
        let mut span = 0;
        for &k in jobs {
            let c = &combos[k];
            span = span.max(c.time.end);
            println!(
                "  {}: {} (fault {}..{} s): {} series evaluated ({})",
                c.job,
                c.fault.scenario.title(),
                c.time.fault_start,
                c.time.fault_end,
                c.series(&templates),
                c.selection
            );
            if !report(prom, c, start_unix)? {
                wrong += 1;
            }
        }
        costs(prom, start_unix + span as f64, span)?;
    }
    drop(proms);
    if !keep {
        let _ = std::fs::remove_dir_all(&dir);
    } else {
        println!("kept {}", dir.display());
    }
    if check {
        if wrong > 0 {
            bail!("mesh-faults: {wrong} scenario(s) did not fire exactly the injected culprits");
        }
        println!("mesh-faults: every scenario fired exactly the injected culprits, nothing else, and resolved");
    }
    Ok(())
}
