//! `rdmactl top`: a live, full-screen view of RDMA devices, like `top`.
//!
//! `rdmactl top [--path.sysfs P] [--interval SECS] [--rdmad URL [--rdmad.ca-file F]
//! [--rdmad.username U --rdmad.password-file F]]`. A table of every port
//! (state, link rate, link layer, RX/TX bytes and packets per second, error counters per
//! second highlighted when not zero), the counter catalog's explanation of the selected port
//! or counter, QPs by state and process (RDMA netlink, live `/sys` only), the owners holding
//! the most QPs with their QPs in ERR (rdmad's `rdma_owner_qps` with `--rdmad`, else this
//! host's netlink dumps), rdmad's `rdma_probe_*` series when `--rdmad` is given, and an
//! event log (tui-logger). With `rdmactl mesh`'s source options (`--prometheus URL`, or
//! `--target [NAME=]URL` per rdmad and `--peer-name`) it opens with the pingmesh's verdicts,
//! the lines `rdmactl mesh` prints under its matrix, built by the same code (`cmd::mesh`)
//! and read again every interval (at least every 2 s from Prometheus; in direct mode each
//! report scrapes the rdmads twice `mesh::DEFAULT_INTERVAL` apart).
//!
//! Layout follows tokio-console: `state/` is the model (no drawing), `view/` one file per
//! screen or pane, `input.rs` the key predicates, `term.rs` the terminal guard whose Drop
//! restores the screen, `sampler.rs` the one thread that reads sysfs, netlink and rdmad.
//! One loop here: wait for a key (up to a tick), apply it (views return intents), take any
//! new sample, redraw. No RDMA device at start is exit code 3, reported before the screen
//! is touched; devices that vanish later are shown as gone, not fatal. Ctrl-C, `q`, SIGTERM
//! and panics all restore the terminal.

mod input;
mod sampler;
mod state;
mod term;
mod view;

use crate::cmd::devices::no_devices;
use crate::cmd::mesh;
use crate::exit;
use anyhow::Context;
use ratatui::crossterm::event::{self, Event as TermEvent};
use rdmakit::catalog::Catalog;
use rdmakit::doctor::Rules;
use rdmakit::scrape::{ScrapeConfig, Scraper};
use rdmakit::sysfs::SysfsReader;
use sampler::{Sample, SamplerConfig};
use state::events::{Event, Level};
use state::mesh::MeshStatus;
use state::probes::ProbeStatus;
use state::TopState;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;
use tui_logger::{LevelFilter, TuiWidgetState};

/// How long the loop waits for a key before looking for a new sample.
const TICK: Duration = Duration::from_millis(100);

/// Live view of RDMA devices: ports, rates, errors explained, QPs, probes and events.
///
/// Keys: Up/Down (j/k) select, Enter explain, Esc back, s sort, f filter, ? help, q quit.
/// Examples: `rdmactl top`, `rdmactl top --interval 2 --rdmad http://127.0.0.1:9736`,
/// `rdmactl top --prometheus http://127.0.0.1:9090` (opens with the pingmesh's verdicts).
#[derive(clap::Args, Debug)]
#[command(
    after_help = "Keys: Up/Down or k/j select, Enter explain, Esc back, s sort, \
f filter, ? help, q or Ctrl-C quit.\n\
Exit codes: 0 quit, 1 failure, 2 usage error, 3 no RDMA device at start."
)]
pub struct Args {
    /// The sysfs root; devices are read from <PATH>/class/infiniband.
    #[arg(long = "path.sysfs", value_name = "PATH", default_value = "/sys")]
    pub path_sysfs: PathBuf,
    /// Seconds between samples.
    #[arg(long, value_name = "SECS", default_value = "1", value_parser = parse_interval)]
    pub interval: Duration,
    /// rdmad's address (`http://host:port` or `https://...`; path `/metrics` unless given):
    /// show its rdma_probe_* series.
    #[arg(long, value_name = "URL")]
    pub rdmad: Option<String>,
    /// PEM file of the CA that signed rdmad's certificate (its --web.config.file
    /// tls_server_config), for https:// URLs; default: the Mozilla roots.
    #[arg(long = "rdmad.ca-file", value_name = "FILE", requires = "rdmad")]
    pub rdmad_ca_file: Option<PathBuf>,
    /// Basic auth user for rdmad (one of its basic_auth_users).
    #[arg(long = "rdmad.username", value_name = "USER", requires = "rdmad")]
    pub rdmad_username: Option<String>,
    /// File holding the basic auth password (read on every scrape; surrounding whitespace
    /// is not part of it).
    #[arg(
        long = "rdmad.password-file",
        value_name = "FILE",
        requires = "rdmad_username"
    )]
    pub rdmad_password_file: Option<PathBuf>,
    /// The pingmesh whose verdicts open the screen: the options of `rdmactl mesh`.
    #[command(flatten)]
    pub mesh: mesh::Source,
}

/// The shortest time between two reads of the pingmesh.
const MESH_MIN_PERIOD: Duration = Duration::from_secs(2);

/// `--interval`: the workspace's duration grammar, 0.1 s to 1 h.
fn parse_interval(text: &str) -> Result<Duration, rdmakit::duration::DurationError> {
    rdmakit::duration::parse(text, Duration::from_millis(100)..=Duration::from_secs(3600))
}

/// Runs `rdmactl top`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let scraper = match &args.rdmad {
        Some(url) => {
            let mut config = ScrapeConfig::new(url.clone());
            config.ca_file = args.rdmad_ca_file.clone();
            config.username = args.rdmad_username.clone();
            config.password_file = args.rdmad_password_file.clone();
            Some(Scraper::new(&config).map_err(|e| anyhow::anyhow!("--rdmad: {e}"))?)
        }
        None => None,
    };
    let reader = SysfsReader::new(&args.path_sysfs);
    // No device: say so and exit 3 before the screen is touched.
    if reader.device_names()?.is_empty() {
        return Err(no_devices(&args.path_sysfs));
    }
    let catalog = Catalog::embedded()
        .map_err(|e| anyhow::anyhow!("the embedded counter catalog is broken: {e}"))?;
    let config = SamplerConfig {
        reader,
        interval: args.interval,
        rdmad: scraper,
    };
    // The first sample is taken before the screen changes, so a broken tree fails cleanly.
    let first = sampler::sample(&config);
    if let Err(e) = &first.snapshot {
        anyhow::bail!("cannot read RDMA devices: {e}");
    }

    let rules = Rules::embedded();
    if let Err(e) = &rules {
        log_event(&Event::warn(
            "doctor",
            format!("the doctor's rules do not load ({e}): no counter anomaly events"),
        ));
    }
    let mut state = TopState::new(catalog, rules.ok());
    if args.rdmad.is_some() {
        state.probes = ProbeStatus::Pending;
    }
    if args.mesh.is_set() {
        // From Prometheus the first verdicts are read before the screen opens; the direct
        // mode's two scrapes take seconds, so it opens pending.
        state.mesh = if args.mesh.prometheus.is_some() {
            mesh_status(mesh::report(&args.mesh, mesh::DEFAULT_INTERVAL))
        } else {
            MeshStatus::Pending
        };
    }
    tui_logger::set_default_level(LevelFilter::Trace);
    let log_state = TuiWidgetState::new().set_default_display_level(LevelFilter::Info);
    apply_sample(&mut state, first);

    let stop = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(signal, Arc::clone(&stop))
            .context("install the signal handler")?;
    }
    let (tx, rx) = mpsc::channel::<Sample>();
    let sampler_stop = Arc::clone(&stop);
    let sampler_config = config.clone();
    std::thread::Builder::new()
        .name("top-sampler".into())
        .spawn(move || {
            // Nothing may write over the screen from this thread either.
            let _quiet =
                tracing::subscriber::set_default(tracing::subscriber::NoSubscriber::default());
            // The first sample was taken above; start one interval later.
            std::thread::sleep(sampler_config.interval);
            sampler::run(sampler_config, tx, sampler_stop)
        })
        .context("start the sampler thread")?;

    let (mesh_tx, mesh_rx) = mpsc::channel::<MeshStatus>();
    if args.mesh.is_set() {
        let source = args.mesh.clone();
        let mesh_stop = Arc::clone(&stop);
        let period = args.interval.max(MESH_MIN_PERIOD);
        let first_done = source.prometheus.is_some();
        std::thread::Builder::new()
            .name("top-mesh".into())
            .spawn(move || {
                let _quiet =
                    tracing::subscriber::set_default(tracing::subscriber::NoSubscriber::default());
                mesh_loop(&source, period, first_done, &mesh_tx, &mesh_stop)
            })
            .context("start the pingmesh thread")?;
    }

    // Library warnings must not write over the screen: silence tracing on this thread
    // (sample problems reach the log pane through the state instead).
    let _quiet = tracing::subscriber::set_default(tracing::subscriber::NoSubscriber::default());
    term::install_panic_hook();
    let header = view::Header {
        root: args.path_sysfs.display().to_string(),
        interval: args.interval.as_secs_f64(),
    };
    let mut guard = term::TerminalGuard::enter().context("set up the terminal")?;
    let result = ui_loop(
        &mut guard, &mut state, &header, &log_state, &rx, &mesh_rx, &stop,
    );
    stop.store(true, Ordering::Relaxed);
    drop(guard);
    result?;
    Ok(ExitCode::from(exit::OK))
}

/// The one loop: keys, samples, redraws, until an intent or a signal says quit.
fn ui_loop(
    guard: &mut term::TerminalGuard,
    state: &mut TopState,
    header: &view::Header,
    log_state: &TuiWidgetState,
    rx: &mpsc::Receiver<Sample>,
    mesh_rx: &mpsc::Receiver<MeshStatus>,
    stop: &AtomicBool,
) -> anyhow::Result<()> {
    if std::env::var_os("RDMACTL_TOP_TEST_PANIC").is_some() {
        // Test hook: proves the panic hook restores the terminal (rdmactl/tests/top.rs).
        guard
            .terminal
            .draw(|f| view::draw(f, state, header, log_state))?;
        panic!("RDMACTL_TOP_TEST_PANIC is set");
    }
    let mut dirty = true;
    loop {
        if stop.load(Ordering::Relaxed) {
            return Ok(());
        }
        if dirty {
            tui_logger::move_events();
            guard
                .terminal
                .draw(|f| view::draw(f, state, header, log_state))
                .context("draw")?;
            dirty = false;
        }
        if event::poll(TICK).context("read the terminal")? {
            match event::read().context("read the terminal")? {
                TermEvent::Key(key) => {
                    if view::handle_key(state, &key) == view::Intent::Quit {
                        return Ok(());
                    }
                    dirty = true;
                }
                TermEvent::Resize(_, _) => {
                    guard.terminal.autoresize().context("resize")?;
                    dirty = true;
                }
                _ => {}
            }
        }
        loop {
            match rx.try_recv() {
                Ok(sample) => {
                    apply_sample(state, sample);
                    dirty = true;
                }
                Err(mpsc::TryRecvError::Empty) => break,
                Err(mpsc::TryRecvError::Disconnected) => {
                    anyhow::bail!("the sampler thread stopped")
                }
            }
        }
        // The pingmesh thread only runs with a source; its end is not an error.
        while let Ok(status) = mesh_rx.try_recv() {
            apply_mesh(state, status);
            dirty = true;
        }
    }
}

fn mesh_status(r: anyhow::Result<mesh::Report>) -> MeshStatus {
    match r {
        Ok(r) => MeshStatus::Report(Box::new(r)),
        Err(e) => MeshStatus::Failed(format!("{e:#}")),
    }
}

/// Read the pingmesh every `period` until `stop`; the first read is skipped when `run` did it.
fn mesh_loop(
    source: &mesh::Source,
    period: Duration,
    mut skip: bool,
    tx: &mpsc::Sender<MeshStatus>,
    stop: &AtomicBool,
) {
    loop {
        if !skip {
            let status = mesh_status(mesh::report(source, mesh::DEFAULT_INTERVAL));
            if tx.send(status).is_err() {
                return;
            }
        }
        skip = false;
        let until = std::time::Instant::now() + period;
        while std::time::Instant::now() < until {
            if stop.load(Ordering::Relaxed) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// Fold a pingmesh read into the state; a change of verdicts goes to the log.
fn apply_mesh(state: &mut TopState, status: MeshStatus) {
    let texts = |s: &MeshStatus| match s {
        MeshStatus::Report(r) => r.verdicts.iter().map(|v| v.text.clone()).collect(),
        _ => Vec::new(),
    };
    let (old, new) = (texts(&state.mesh), texts(&status));
    for v in new.iter().filter(|v| !old.contains(v)) {
        log_event(&Event::warn("mesh", v.clone()));
    }
    if let (MeshStatus::Failed(why), false) = (&status, matches!(state.mesh, MeshStatus::Failed(_)))
    {
        log_event(&Event::warn("mesh", format!("pingmesh unavailable: {why}")));
    }
    state.mesh = status;
}

/// Fold one sample into the state and log its events.
fn apply_sample(state: &mut TopState, sample: Sample) {
    let events = match sample.snapshot {
        Ok(snapshot) => state.apply_snapshot(snapshot, sample.at),
        Err(e) => state.apply_sample_error(e),
    };
    for e in &events {
        log_event(e);
    }
    // A failing scrape is logged when it starts failing or fails differently, not each time.
    match (&state.probes, &sample.probes) {
        (ProbeStatus::Unreachable(old), ProbeStatus::Unreachable(new)) if old == new => {}
        (_, ProbeStatus::Unreachable(why)) => {
            log_event(&Event::warn("rdmad", format!("scrape failed: {why}")))
        }
        (ProbeStatus::Series(_), ProbeStatus::Series(_)) => {}
        (_, ProbeStatus::Series(series)) => log_event(&Event::info(
            "rdmad",
            format!("scrape works: {} rdma_probe_* series", series.len()),
        )),
        _ => {}
    }
    state.probes = sample.probes;
    state.resources = sample.resources;
    state.owners = sample.owners;
}

/// One line into tui-logger's buffer (straight to its drain: the process-wide `log` logger
/// belongs to the tracing subscriber that `main` installs).
fn log_event(e: &Event) {
    let level = match e.level {
        Level::Error => log::Level::Error,
        Level::Warn => log::Level::Warn,
        Level::Info => log::Level::Info,
    };
    tui_logger::Drain::new().log(
        &log::Record::builder()
            .args(format_args!("{}", e.message))
            .level(level)
            .target(e.target)
            .build(),
    );
}
