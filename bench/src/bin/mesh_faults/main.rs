//! A timed, faulty pingmesh at cluster scale, simulated, and localized by the shipped rules
//! on a real Prometheus.
//!
//! ```text
//! cargo build --release -p rdmad -p rdma-bench --bin mesh_faults
//! target/release/mesh_faults                        # 1,000 and 10,000 hosts (~17 min)
//! target/release/mesh_faults 1000 10000 --plan-only # the sizes only, nothing run
//! target/release/mesh_faults 64 --check --for 10    # the check tests/run runs (~4 min)
//! target/release/mesh_faults 256 --full --for 10    # every pair evaluated: a whole mesh's cost
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
//! least 2 and more than half of its pairs in one role (target or prober; for a loss fault,
//! of its pairs probed in the loss window), and only pairs touching an injected host can fail
//! here ("faultable" pairs). Scenario A's lossy host has every pair evaluated and every other
//! host at most one faultable pair per role, so the loss counts need nothing more; the
//! layer faults of B count against all pairs, as below. So, from the planner's exact
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
//! run. With `--full` every pair of the mesh is evaluated instead: what the rules cost one
//! Prometheus on a whole fleet of that size. It asserts nothing, except with `--check` (the
//! culprits firing at the end of the fault must be exactly the injected ones, no other
//! pingmesh alert, and none left after).

mod mesh;
mod prometheus;
mod serve;
mod simulate;
mod templates;

use anyhow::{bail, Context};
use rdma_probe::engine::EngineConfig;
use rdma_probe::pinglist::DEFAULT_MESH_MAX;
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use mesh::{select, Fault, Mesh, Scenario};
use prometheus::{costs, report, rules_with_for, start_prometheus};
use serve::{serve, Combo};
use simulate::{simulate, Timeline};
use templates::templates;

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
    let mut full = false;
    let mut for_seconds = None;
    let mut max_series = 1_500_000usize;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--check" => check = true,
            "--keep" => keep = true,
            "--plan-only" => plan_only = true,
            "--full" => full = true,
            "--rdmad" => rdmad = args.next().context("--rdmad PATH")?.into(),
            "--rules" => rules = args.next().context("--rules PATH")?.into(),
            "--for" => for_seconds = Some(args.next().context("--for SECONDS")?.parse::<u64>()?),
            "--max-series" => max_series = args.next().context("--max-series N")?.parse()?,
            "-h" | "--help" => {
                println!("mesh_faults [HOSTS...] [--check] [--for SECONDS] [--max-series N] [--full] [--plan-only] [--keep] [--rdmad PATH] [--rules PATH]");
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
            let sel = select(&mesh, &fault, full);
            let hosts_in: BTreeSet<u32> = sel.pairs.iter().flat_map(|&(p, t)| [p, t]).collect();
            let selection = format!(
                "{} pairs ({} of them {}) of {} hosts, {} series; nameable by counting: {} as target, {} as prober",
                sel.pairs.len(),
                sel.padding,
                if full { "padding or the rest of the mesh (--full)" } else { "padding" },
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
