//! The composition root: from resolved settings, build the process's one async runtime, start
//! the probe engine (`--probe.enable`; its DNS lookups run on that runtime), build the
//! collectors, then print one exposition (`--once`) or start the device monitor
//! ([`crate::monitor`]) and serve HTTP ([`crate::server`]) on the runtime until SIGINT/SIGTERM.

use std::io::Write;

use anyhow::{Context, Result};
use rdmakit::sysfs::{DeviceFilter, SysfsReader};

use crate::cli::Settings;
use crate::collector::{CollectorConfig, Collectors};
use crate::metrics::Format;

/// Run rdmad with resolved settings: print once, or serve until SIGINT/SIGTERM.
pub fn run(settings: Settings) -> Result<()> {
    let filter = DeviceFilter::new(
        settings.device_include.as_deref(),
        settings.device_exclude.as_deref(),
    )
    .context("--collector.device-include / --collector.device-exclude")?;
    // Parse the embedded counter catalog now, not during the first scrape.
    if let Err(e) = rdmakit::catalog::Catalog::embedded() {
        tracing::warn!("counter catalog unavailable, HELP texts will be generic: {e}");
    }
    // The process's one async runtime: the HTTP server and the probe engine's DNS lookups.
    let runtime = crate::server::runtime(&settings)?;
    // `--probe.enable`: start the probe engine (an error without the `verbs` feature). It runs
    // until this function returns.
    let (_probe_engine, probes) =
        crate::collector::probes::start(&settings.probe, runtime.handle())?;
    let config = CollectorConfig {
        sysfs: settings.sysfs.clone(),
        ethtool_capture: settings.ethtool_capture.clone(),
        filter: filter.clone(),
        enabled: settings.collectors.clone(),
        probes,
        open_files: crate::collector::sysfs_open_files(),
        procfs: settings.procfs.clone(),
        owners: settings.owners.clone(),
    };
    let collectors =
        Collectors::new(&config, &settings.collectors).with_timeout(settings.scrape_timeout);
    if settings.once {
        // No request is answered: no response counts.
        return print_once(&collectors);
    }
    // `--web.config.file`: checked before anything starts; a bad file is a bad setting.
    let web = settings
        .web_config_file
        .as_deref()
        .map(crate::webconfig::load)
        .transpose()?;
    log_devices(&settings);
    crate::monitor::watch_devices(filter);
    crate::server::run(&runtime, &settings, collectors, web)
}

/// `--once`: one exposition to stdout; a reader that stopped early (`| head`) is no failure.
fn print_once(collectors: &Collectors) -> Result<()> {
    let text = collectors.scrape().encode(Format::Text);
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|_| stdout.flush())
    {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other.context("writing to stdout"),
    }
}

fn log_devices(settings: &Settings) {
    tracing::info!(collectors = ?settings.collectors, "collectors enabled");
    let reader = SysfsReader::new(settings.sysfs.clone());
    match reader.device_names() {
        Ok(names) if names.is_empty() => tracing::warn!(
            sysfs = %settings.sysfs.display(),
            "no RDMA devices found (no RDMA stack or no device); serving exporter metrics only"
        ),
        Ok(names) => tracing::info!(devices = ?names, "RDMA devices found"),
        Err(e) => tracing::warn!("{e}"),
    }
}
