//! Command-line flags in node_exporter style, and their merge with the config file.
//!
//! The fixed flags are declared with clap's derive ([`Flags`]); `--collector.<name>` and
//! `--no-collector.<name>` are generated from the collector table, so adding a collector adds
//! its flags, env variable and config key. Precedence, per setting: command line, then the
//! `RDMAD_*` environment variable, then the `--config` file, then the default.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::builder::BoolishValueParser;
use clap::parser::ValueSource;
use clap::{Arg, ArgAction, ArgMatches, Args, Command, FromArgMatches};

use crate::collector::probes::{self, ProbeSettings};
use crate::collector::TABLE;
use crate::config::{self, FileConfig};

/// The default port: not used by node_exporter (9100), rdma_exporter (9879) or the other
/// RDMA exporters we know of (9315, 9683).
pub const DEFAULT_PORT: u16 = 9736;

/// rdmad: RDMA devices and counters as Prometheus metrics.
#[derive(Args, Debug, Clone)]
pub struct Flags {
    /// Address to listen on: HOST:PORT, or :PORT for every interface.
    #[arg(
        long = "web.listen-address",
        env = "RDMAD_WEB_LISTEN_ADDRESS",
        default_value = ":9736",
        value_name = "ADDRESS"
    )]
    pub listen_address: String,
    /// Most scrapes served at once; more get 503 (a scrape reads sysfs on a blocking thread).
    #[arg(
        long = "web.max-requests",
        env = "RDMAD_WEB_MAX_REQUESTS",
        default_value_t = 40,
        value_parser = clap::value_parser!(u32).range(1..),
        value_name = "N"
    )]
    pub max_requests: u32,
    /// TLS and basic auth: a YAML file in the Prometheus exporter-toolkit web configuration
    /// format (tls_server_config, http_server_config, basic_auth_users); "" for none.
    #[arg(
        long = "web.config.file",
        env = "RDMAD_WEB_CONFIG_FILE",
        value_name = "FILE"
    )]
    pub web_config_file: Option<std::ffi::OsString>,
    /// Never compress responses. By default `/metrics` is sent gzip or zstd encoded when the
    /// request's Accept-Encoding asks for it (Prometheus always sends gzip).
    #[arg(
        long = "web.disable-compression",
        env = "RDMAD_WEB_DISABLE_COMPRESSION",
        value_parser = BoolishValueParser::new(),
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        default_value = "false",
        value_name = "BOOL"
    )]
    pub disable_compression: bool,
    /// The gzip level of compressed responses: 1 (fastest) to 12 (smallest), libdeflate's
    /// levels. 10 and up search for the shortest encoding: on the 64-device benchmark tree
    /// about one point of the plain size less than 6, for 20-40 times its CPU per scrape.
    #[arg(
        long = "web.gzip-level",
        env = "RDMAD_WEB_GZIP_LEVEL",
        default_value_t = crate::encoding::DEFAULT_GZIP_LEVEL,
        value_parser = clap::value_parser!(u8).range(1..=12),
        value_name = "LEVEL"
    )]
    pub gzip_level: u8,
    /// Where sysfs is mounted (devices are under PATH/class/infiniband).
    #[arg(
        long = "path.sysfs",
        env = "RDMAD_PATH_SYSFS",
        default_value = "/sys",
        value_name = "PATH"
    )]
    pub sysfs: PathBuf,
    /// Where procfs is mounted (the owners of RDMA objects are read from PATH/<pid>).
    #[arg(
        long = "path.procfs",
        env = "RDMAD_PATH_PROCFS",
        default_value = "/proc",
        value_name = "PATH"
    )]
    pub procfs: PathBuf,
    /// The scrape deadline: a collector still running then contributes what it has and
    /// rdma_scrape_collector_timeout{collector} is 1. Seconds or with a unit (500ms); 0 for
    /// none.
    #[arg(
        long = "scrape.timeout",
        env = "RDMAD_SCRAPE_TIMEOUT",
        default_value = "5s",
        value_parser = parse_timeout,
        value_name = "DURATION"
    )]
    pub scrape_timeout_ms: u64,
    /// Add a pid label to the netlink_owners series (every new process is a new series).
    #[arg(
        long = "collector.netlink_owners.pid",
        env = "RDMAD_COLLECTOR_NETLINK_OWNERS_PID",
        value_parser = BoolishValueParser::new(),
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        default_value = "false",
        value_name = "BOOL"
    )]
    pub owners_pid: bool,
    /// Owners exported per scrape by netlink_owners; the ones holding fewer objects fold
    /// into comm="other" (counted by rdma_owners_folded).
    #[arg(
        long = "collector.netlink_owners.max-owners",
        env = "RDMAD_COLLECTOR_NETLINK_OWNERS_MAX_OWNERS",
        default_value_t = crate::collector::netlink_owners::DEFAULT_MAX_OWNERS,
        value_name = "N"
    )]
    pub owners_max_owners: usize,
    /// Objects netlink_owners reads per dump (one device, one type); the rest are counted
    /// by rdma_owner_objects_unread.
    #[arg(
        long = "collector.netlink_owners.max-objects",
        env = "RDMAD_COLLECTOR_NETLINK_OWNERS_MAX_OBJECTS",
        default_value_t = crate::collector::netlink_owners::DEFAULT_MAX_OBJECTS,
        value_parser = clap::value_parser!(u64).range(1..),
        value_name = "N"
    )]
    pub owners_max_objects: u64,
    /// Read the `netdev` collector's ethtool answers from this directory (one
    /// subdirectory per netdev with the raw ioctl buffers, as captured by rdmakit's
    /// `KernelEthtool::capture`) instead of asking the kernel: for fixtures and for
    /// replaying a capture from another machine together with its `--path.sysfs` tree.
    #[arg(
        long = "path.ethtool-capture",
        env = "RDMAD_PATH_ETHTOOL_CAPTURE",
        value_name = "DIR"
    )]
    pub ethtool_capture: Option<PathBuf>,
    /// Only read devices whose whole name matches this regular expression.
    #[arg(
        long = "collector.device-include",
        env = "RDMAD_COLLECTOR_DEVICE_INCLUDE",
        value_name = "REGEX"
    )]
    pub device_include: Option<String>,
    /// Never read devices whose whole name matches this regular expression (applied before
    /// any file of the device is opened).
    #[arg(
        long = "collector.device-exclude",
        env = "RDMAD_COLLECTOR_DEVICE_EXCLUDE",
        value_name = "REGEX"
    )]
    pub device_exclude: Option<String>,
    /// Disable every collector that is not enabled explicitly.
    #[arg(
        long = "collector.disable-defaults",
        env = "RDMAD_COLLECTOR_DISABLE_DEFAULTS",
        value_parser = BoolishValueParser::new(),
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        default_value = "false",
        value_name = "BOOL"
    )]
    pub disable_defaults: bool,
    /// Run the active probe engine (needs a build with the `verbs` feature) and enable the
    /// probes collector.
    #[arg(
        long = "probe.enable",
        env = "RDMAD_PROBE_ENABLE",
        value_parser = BoolishValueParser::new(),
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        value_name = "BOOL"
    )]
    pub probe_enable: Option<bool>,
    /// Time between probe rounds: seconds, or with a unit (500ms, 10s) [default: 10s].
    #[arg(
        long = "probe.interval",
        env = "RDMAD_PROBE_INTERVAL",
        value_parser = probes::parse_interval,
        value_name = "DURATION"
    )]
    pub probe_interval_ms: Option<u64>,
    /// Probe message size, bytes [default: 64].
    #[arg(
        long = "probe.size",
        env = "RDMAD_PROBE_SIZE",
        value_parser = probes::parse_size,
        value_name = "BYTES"
    )]
    pub probe_size: Option<usize>,
    /// Timed exchanges per operation per round [default: 100].
    #[arg(
        long = "probe.iterations",
        env = "RDMAD_PROBE_ITERATIONS",
        value_parser = clap::value_parser!(u64).range(1..),
        value_name = "N"
    )]
    pub probe_iterations: Option<u64>,
    /// Devices to probe in loopback, comma-separated [default: every device with an active
    /// port].
    #[arg(
        long = "probe.devices",
        env = "RDMAD_PROBE_DEVICES",
        value_delimiter = ',',
        value_name = "DEVICES"
    )]
    pub probe_devices: Option<Vec<String>>,
    /// MR sizes whose registration is timed, comma-separated (4K, 1M, ...; "" for none)
    /// [default: 4K,64K,1M,16M,64M].
    #[arg(
        long = "probe.mr-sizes",
        env = "RDMAD_PROBE_MR_SIZES",
        value_delimiter = ',',
        value_name = "SIZES"
    )]
    pub probe_mr_sizes: Option<Vec<String>>,
    /// Accept peer probes here: HOST:PORT or :PORT (needs --probe.secret-file).
    #[arg(
        long = "probe.listen",
        env = "RDMAD_PROBE_LISTEN",
        value_parser = probes::parse_listen,
        value_name = "ADDR"
    )]
    pub probe_listen: Option<std::net::SocketAddr>,
    /// A peer to probe, HOST:PORT of its --probe.listen; repeatable (comma-separated in the
    /// environment; needs --probe.secret-file).
    #[arg(
        long = "probe.peer",
        env = "RDMAD_PROBE_PEER",
        value_delimiter = ',',
        action = ArgAction::Append,
        value_name = "HOST:PORT"
    )]
    pub probe_peers: Option<Vec<String>>,
    /// How peers are probed: `ud` (echo requests on one UD QP per local device, whatever
    /// the number of peers) or `rc` (one-sided RDMA READ on an RC QP per peer) [default: ud].
    #[arg(
        long = "probe.transport",
        env = "RDMAD_PROBE_TRANSPORT",
        value_parser = probes::parse_transport,
        value_name = "ud|rc"
    )]
    pub probe_transport: Option<probes::Transport>,
    /// Discover peers in DNS: every A/AAAA record of NAME (a headless Service), ports from
    /// the SRV records _rdmad-probe._tcp.NAME (else this host's --probe.listen port); asked
    /// again every interval.
    #[arg(
        long = "probe.peers-dns",
        env = "RDMAD_PROBE_PEERS_DNS",
        value_name = "NAME"
    )]
    pub probe_peers_dns: Option<String>,
    /// Discover peers from a Prometheus file_sd-style JSON (.json) or YAML file: targets
    /// HOST:PORT with labels such as rack and zone; re-read when it changes.
    #[arg(
        long = "probe.peers-file",
        env = "RDMAD_PROBE_PEERS_FILE",
        value_name = "FILE"
    )]
    pub probe_peers_file: Option<PathBuf>,
    /// Probe every peer every round up to this many peers; above it, the host's rack and a
    /// rotating sample of the others, at most this many per round [default: 64].
    #[arg(
        long = "probe.mesh-max",
        env = "RDMAD_PROBE_MESH_MAX",
        value_parser = clap::value_parser!(u64).range(1..=65536),
        value_name = "N"
    )]
    pub probe_mesh_max: Option<u64>,
    /// This host's rack label for the pinglist [default: its own entry's `rack` in
    /// --probe.peers-file].
    #[arg(long = "probe.rack", env = "RDMAD_PROBE_RACK", value_name = "RACK")]
    pub probe_rack: Option<String>,
    /// Export a latency histogram, every summary stat, runs and failures per peer (false: the
    /// 6 default series per peer: sent, lost by direction, typical and p99, status)
    /// [default: false].
    #[arg(
        long = "probe.peer-histograms",
        env = "RDMAD_PROBE_PEER_HISTOGRAMS",
        value_parser = BoolishValueParser::new(),
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        value_name = "BOOL"
    )]
    pub probe_peer_histograms: Option<bool>,
    /// File holding the shared secret of the peer handshake (never logged).
    #[arg(
        long = "probe.secret-file",
        env = "RDMAD_PROBE_SECRET_FILE",
        value_name = "FILE"
    )]
    pub probe_secret_file: Option<PathBuf>,
    /// A TOML file with the same settings as the flags (keys are flag names); flags and
    /// RDMAD_* variables override it.
    #[arg(long = "config", env = "RDMAD_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Print one exposition (text format 0.0.4) to stdout and exit.
    #[arg(long)]
    pub once: bool,
    /// Print every metric family rdmad can export (name, type, HELP, collectors, and the
    /// catalog counters behind them) in FORMAT and exit.
    #[arg(long = "print-metrics", value_name = "FORMAT", value_parser = ["json"])]
    pub print_metrics: Option<String>,
}

/// The resolved settings rdmad runs with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// `--web.listen-address`.
    pub listen_address: String,
    /// `--web.max-requests`.
    pub max_requests: usize,
    /// `--web.config.file`: TLS and basic auth (checked when the server starts).
    pub web_config_file: Option<PathBuf>,
    /// `--web.disable-compression`.
    pub disable_compression: bool,
    /// `--web.gzip-level`.
    pub gzip_level: u8,
    /// `--path.sysfs`.
    pub sysfs: PathBuf,
    /// `--path.procfs`.
    pub procfs: PathBuf,
    /// `--scrape.timeout` (`None`: no deadline).
    pub scrape_timeout: Option<std::time::Duration>,
    /// `--collector.netlink_owners.*`.
    pub owners: crate::collector::netlink_owners::OwnerSettings,
    /// `--path.ethtool-capture`.
    pub ethtool_capture: Option<PathBuf>,
    /// `--collector.device-include`.
    pub device_include: Option<String>,
    /// `--collector.device-exclude`.
    pub device_exclude: Option<String>,
    /// Enabled collectors, in table order.
    pub collectors: Vec<&'static str>,
    /// `--probe.*`.
    pub probe: ProbeSettings,
    /// `--once`.
    pub once: bool,
    /// `--print-metrics json`.
    pub print_metrics: bool,
}

/// `--scrape.timeout`: a duration like `--probe.interval`, or 0 for none.
fn parse_timeout(text: &str) -> Result<u64, String> {
    if text.trim() == "0" {
        return Ok(0);
    }
    probes::parse_interval(text)
}

fn enable_id(name: &str) -> String {
    format!("collector.{name}")
}

fn disable_id(name: &str) -> String {
    format!("no-collector.{name}")
}

/// The env variable of `--collector.<name>`.
pub fn collector_env(name: &str) -> String {
    format!("RDMAD_COLLECTOR_{}", name.to_ascii_uppercase())
}

/// The full command: fixed flags plus the generated collector flags.
pub fn command() -> Command {
    let mut cmd = Flags::augment_args(
        Command::new("rdmad")
            .version(crate::build_info::long_version())
            .about("rdmad: RDMA devices and counters as Prometheus metrics")
            .after_help(
                "Exit codes: 0 clean exit, 1 failure (bad setting, cannot listen), 2 usage error.",
            ),
    );
    for spec in TABLE {
        let default = if spec.default_enabled {
            "enabled"
        } else {
            "disabled"
        };
        cmd = cmd
            .arg(
                Arg::new(enable_id(spec.name))
                    .long(enable_id(spec.name))
                    .env(collector_env(spec.name))
                    .help(format!(
                        "Enable the {} collector: {} (default: {default})",
                        spec.name, spec.help
                    ))
                    .value_parser(BoolishValueParser::new())
                    .num_args(0..=1)
                    .require_equals(true)
                    .default_missing_value("true")
                    .value_name("BOOL")
                    .action(ArgAction::Set),
            )
            .arg(
                Arg::new(disable_id(spec.name))
                    .long(disable_id(spec.name))
                    .help(format!("Disable the {} collector", spec.name))
                    .action(ArgAction::SetTrue),
            );
    }
    cmd
}

/// Whether a value came from the command line or the environment (not a default).
fn explicit(matches: &ArgMatches, id: &str) -> bool {
    matches!(
        matches.value_source(id),
        Some(ValueSource::CommandLine) | Some(ValueSource::EnvVariable)
    )
}

/// Resolve flags, environment and the config file into [`Settings`].
pub fn resolve(matches: &ArgMatches) -> Result<Settings> {
    let flags = Flags::from_arg_matches(matches).context("reading flags")?;
    let file = match &flags.config {
        Some(path) => config::load(path)?,
        None => FileConfig::default(),
    };
    let pick = |id: &str, flag: &Option<String>, file: &Option<String>| {
        if explicit(matches, id) {
            flag.clone()
        } else {
            file.clone().or_else(|| flag.clone())
        }
    };
    let listen_address = if explicit(matches, "listen_address") {
        flags.listen_address.clone()
    } else {
        file.listen_address
            .clone()
            .unwrap_or(flags.listen_address.clone())
    };
    let max_requests = if explicit(matches, "max_requests") {
        flags.max_requests as usize
    } else {
        file.max_requests.unwrap_or(flags.max_requests as usize)
    };
    let web_config_file = if explicit(matches, "web_config_file") {
        flags.web_config_file.clone().map(PathBuf::from)
    } else {
        file.web_config_file.clone()
    }
    .filter(|p| !p.as_os_str().is_empty());
    let disable_compression = if explicit(matches, "disable_compression") {
        flags.disable_compression
    } else {
        file.disable_compression
            .unwrap_or(flags.disable_compression)
    };
    let gzip_level = if explicit(matches, "gzip_level") {
        flags.gzip_level
    } else {
        file.gzip_level.unwrap_or(flags.gzip_level)
    };
    let sysfs = if explicit(matches, "sysfs") {
        flags.sysfs.clone()
    } else {
        file.sysfs.clone().unwrap_or(flags.sysfs.clone())
    };
    let ethtool_capture = if explicit(matches, "ethtool_capture") {
        flags.ethtool_capture.clone()
    } else {
        file.ethtool_capture.clone()
    }
    .filter(|p| !p.as_os_str().is_empty());
    let disable_defaults = if explicit(matches, "disable_defaults") {
        flags.disable_defaults
    } else {
        file.disable_defaults.unwrap_or(flags.disable_defaults)
    };
    let probe = resolve_probe(&flags, &file.probe)?;
    let mut collectors = Vec::new();
    for spec in TABLE {
        let (on, off) = (enable_id(spec.name), disable_id(spec.name));
        let on_index = matches
            .index_of(&on)
            .filter(|_| matches.value_source(&on) == Some(ValueSource::CommandLine));
        let off_index = matches.index_of(&off).filter(|_| matches.get_flag(&off));
        let from_file = file
            .collectors
            .iter()
            .find(|(n, _)| *n == spec.name)
            .map(|(_, b)| *b);
        let enabled = match (on_index, off_index) {
            // Both on the command line: the later one wins.
            (Some(a), Some(b)) => {
                if a > b {
                    matches.get_one::<bool>(&on).copied().unwrap_or(true)
                } else {
                    false
                }
            }
            (None, Some(_)) => false,
            _ if explicit(matches, &on) => matches.get_one::<bool>(&on).copied().unwrap_or(true),
            // `--probe.enable` turns the probes collector on.
            _ if spec.name == probes::SPEC.name && probe.enable => from_file.unwrap_or(true),
            _ => from_file.unwrap_or(spec.default_enabled && !disable_defaults),
        };
        if enabled {
            collectors.push(spec.name);
        }
    }
    Ok(Settings {
        listen_address,
        max_requests,
        web_config_file,
        disable_compression,
        gzip_level,
        sysfs,
        procfs: flags.procfs.clone(),
        scrape_timeout: (flags.scrape_timeout_ms > 0)
            .then(|| std::time::Duration::from_millis(flags.scrape_timeout_ms)),
        owners: crate::collector::netlink_owners::OwnerSettings {
            pid: flags.owners_pid,
            max_owners: flags.owners_max_owners,
            max_objects: flags.owners_max_objects,
        },
        ethtool_capture,
        device_include: pick(
            "device_include",
            &flags.device_include,
            &file.device_include,
        )
        .filter(|s| !s.is_empty()),
        device_exclude: pick(
            "device_exclude",
            &flags.device_exclude,
            &file.device_exclude,
        )
        .filter(|s| !s.is_empty()),
        collectors,
        probe,
        once: flags.once,
        print_metrics: flags.print_metrics.is_some(),
    })
}

/// The `--probe.*` settings: flag or environment, else the `[probe]` table, else the default.
fn resolve_probe(flags: &Flags, file: &config::ProbeFile) -> Result<ProbeSettings> {
    let default = ProbeSettings::default();
    let mr_sizes = match &flags.probe_mr_sizes {
        Some(sizes) => sizes
            .iter()
            .filter(|s| !s.trim().is_empty())
            .map(|s| probes::parse_size(s).map_err(|e| anyhow::anyhow!("--probe.mr-sizes: {e}")))
            .collect::<Result<Vec<usize>>>()?,
        None => file.mr_sizes.clone().unwrap_or(default.mr_sizes),
    };
    let settings = ProbeSettings {
        enable: flags.probe_enable.or(file.enable).unwrap_or(default.enable),
        interval_ms: flags
            .probe_interval_ms
            .or(file.interval_ms)
            .unwrap_or(default.interval_ms),
        size: flags.probe_size.or(file.size).unwrap_or(default.size),
        iterations: flags
            .probe_iterations
            .or(file.iterations)
            .unwrap_or(default.iterations),
        devices: flags
            .probe_devices
            .clone()
            .or_else(|| file.devices.clone())
            .unwrap_or(default.devices)
            .into_iter()
            .filter(|d| !d.trim().is_empty())
            .collect(),
        mr_sizes,
        listen: flags.probe_listen.or(file.listen),
        peers: flags
            .probe_peers
            .clone()
            .or_else(|| file.peers.clone())
            .unwrap_or(default.peers)
            .into_iter()
            .filter(|p| !p.trim().is_empty())
            .collect(),
        transport: flags
            .probe_transport
            .or(file.transport)
            .unwrap_or(default.transport),
        secret_file: flags
            .probe_secret_file
            .clone()
            .or_else(|| file.secret_file.clone()),
        peers_dns: flags
            .probe_peers_dns
            .clone()
            .or_else(|| file.peers_dns.clone())
            .filter(|n| !n.trim().is_empty()),
        peers_file: flags
            .probe_peers_file
            .clone()
            .or_else(|| file.peers_file.clone()),
        mesh_max: flags
            .probe_mesh_max
            .map(|n| n as usize)
            .or(file.mesh_max)
            .unwrap_or(default.mesh_max),
        rack: flags
            .probe_rack
            .clone()
            .or_else(|| file.rack.clone())
            .filter(|r| !r.is_empty()),
        peer_histograms: flags
            .probe_peer_histograms
            .or(file.peer_histograms)
            .unwrap_or(default.peer_histograms),
    };
    let has_peers =
        !settings.peers.is_empty() || settings.peers_dns.is_some() || settings.peers_file.is_some();
    if settings.enable && (settings.listen.is_some() || has_peers) && settings.secret_file.is_none()
    {
        anyhow::bail!(
            "--probe.listen, --probe.peer, --probe.peers-dns and --probe.peers-file need --probe.secret-file"
        );
    }
    Ok(settings)
}

/// Parse `args` (including the program name) into settings; for tests and `main`.
pub fn parse_from<I, T>(args: I) -> Result<Settings, ParseFailure>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let matches = command()
        .try_get_matches_from(args)
        .map_err(ParseFailure::Usage)?;
    resolve(&matches).map_err(ParseFailure::Invalid)
}

/// Why the command line could not be turned into settings.
#[derive(Debug)]
pub enum ParseFailure {
    /// clap rejected it (or `--help` / `--version` was asked for): print and exit as clap says.
    Usage(clap::Error),
    /// A setting is invalid (config file, ...): exit 1.
    Invalid(anyhow::Error),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(args: &[&str]) -> Settings {
        let mut all = vec!["rdmad"];
        all.extend_from_slice(args);
        match parse_from(all) {
            Ok(s) => s,
            Err(e) => panic!("{e:?}"),
        }
    }

    #[test]
    fn defaults() {
        let s = settings(&[]);
        assert_eq!(s.listen_address, ":9736");
        assert_eq!(s.sysfs, PathBuf::from("/sys"));
        assert_eq!(
            s.collectors,
            vec![
                "netlink_counters",
                "sysfs_info",
                "sysfs_counters",
                "netlink_qp_counters",
                "netlink_resources",
                "netlink_owners",
                "rdma_cgroup",
                "netdev"
            ]
        );
        assert_eq!(s.procfs, PathBuf::from("/proc"));
        assert_eq!(
            s.scrape_timeout,
            Some(crate::collector::DEFAULT_SCRAPE_TIMEOUT)
        );
        assert_eq!(s.owners, Default::default());
        let s = settings(&[
            "--scrape.timeout=0",
            "--collector.netlink_owners.pid",
            "--collector.netlink_owners.max-owners=3",
        ]);
        assert_eq!(s.scrape_timeout, None);
        assert!(s.owners.pid);
        assert_eq!(s.owners.max_owners, 3);
        assert_eq!(
            settings(&["--scrape.timeout=750ms"]).scrape_timeout,
            Some(std::time::Duration::from_millis(750))
        );
        assert_eq!(s.ethtool_capture, None);
        assert_eq!(s.max_requests, 40);
        assert!(!s.disable_compression, "compression is on by default");
        assert!(!s.once);
    }

    /// How many collectors run when no flag names any (some are off by default).
    fn default_count() -> usize {
        TABLE.iter().filter(|s| s.default_enabled).count()
    }

    #[test]
    fn some_collectors_are_off_by_default() {
        let s = settings(&[]);
        assert!(!s.collectors.contains(&"trace"), "{:?}", s.collectors);
        assert!(settings(&["--collector.trace"])
            .collectors
            .contains(&"trace"));
    }

    #[test]
    fn collector_flags_from_the_table() {
        let s = settings(&["--no-collector.sysfs_counters"]);
        assert!(!s.collectors.contains(&"sysfs_counters"));
        assert_eq!(s.collectors.len(), default_count() - 1);
        let s = settings(&["--collector.disable-defaults", "--collector.sysfs_counters"]);
        assert_eq!(s.collectors, vec!["sysfs_counters"]);
        let only_info = |args: &[&str]| {
            let mut all = vec!["--collector.disable-defaults"];
            all.extend_from_slice(args);
            settings(&all).collectors
        };
        assert_eq!(
            only_info(&["--no-collector.sysfs_info", "--collector.sysfs_info"]),
            vec!["sysfs_info"],
            "later wins"
        );
        assert!(
            only_info(&["--collector.sysfs_info", "--no-collector.sysfs_info"]).is_empty(),
            "later wins"
        );
        let s = settings(&["--collector.sysfs_info=false"]);
        assert!(!s.collectors.contains(&"sysfs_info"));
        assert_eq!(s.collectors.len(), default_count() - 1);
    }

    #[test]
    fn probe_discovery_flags() {
        let s = settings(&[]);
        assert_eq!(s.probe.mesh_max, 64);
        assert!(!s.probe.peer_histograms);
        let s = settings(&[
            "--probe.enable",
            "--probe.peers-dns",
            "rdmad.lab",
            "--probe.peers-file",
            "/etc/rdmad/peers.json",
            "--probe.mesh-max",
            "16",
            "--probe.rack",
            "r1",
            "--probe.peer-histograms",
            "--probe.secret-file",
            "/s",
        ]);
        assert_eq!(s.probe.peers_dns.as_deref(), Some("rdmad.lab"));
        assert_eq!(
            s.probe.peers_file.as_deref(),
            Some(std::path::Path::new("/etc/rdmad/peers.json"))
        );
        assert_eq!(s.probe.mesh_max, 16);
        assert_eq!(s.probe.rack.as_deref(), Some("r1"));
        assert!(s.probe.peer_histograms);
        match parse_from(["rdmad", "--probe.enable", "--probe.peers-dns", "rdmad.lab"]) {
            Err(ParseFailure::Invalid(e)) => {
                assert!(
                    format!("{e:#}").contains("need --probe.secret-file"),
                    "{e:#}"
                )
            }
            other => panic!("discovery without a secret: {other:?}"),
        }
        assert!(matches!(
            parse_from(["rdmad", "--probe.mesh-max", "0"]),
            Err(ParseFailure::Usage(_))
        ));
    }

    #[test]
    fn probe_flags() {
        let s = settings(&[]);
        assert_eq!(s.probe, ProbeSettings::default());
        assert!(!s.probe.enable);
        assert!(!s.collectors.contains(&"probes"), "{:?}", s.collectors);
        let s = settings(&[
            "--probe.enable",
            "--probe.interval",
            "1",
            "--probe.size",
            "128",
            "--probe.iterations",
            "20",
            "--probe.devices",
            "rxe0,rxe_a",
            "--probe.mr-sizes",
            "4K,1M",
            "--probe.listen",
            ":9737",
            "--probe.peer",
            "10.0.0.2:9737",
            "--probe.peer=10.0.0.3:9737",
            "--probe.secret-file",
            "/etc/rdmad/probe.secret",
        ]);
        assert!(s.probe.enable);
        assert!(
            s.collectors.contains(&"probes"),
            "enable turns the collector on"
        );
        assert_eq!(s.probe.interval_ms, 1000);
        assert_eq!(s.probe.size, 128);
        assert_eq!(s.probe.iterations, 20);
        assert_eq!(s.probe.devices, vec!["rxe0", "rxe_a"]);
        assert_eq!(s.probe.mr_sizes, vec![4096, 1 << 20]);
        assert_eq!(s.probe.listen.map(|a| a.port()), Some(9737));
        assert_eq!(s.probe.peers, vec!["10.0.0.2:9737", "10.0.0.3:9737"]);
        assert_eq!(
            s.probe.secret_file,
            Some(PathBuf::from("/etc/rdmad/probe.secret"))
        );
        assert_eq!(s.probe.transport, probes::Transport::Ud, "UD by default");
        assert_eq!(
            settings(&["--probe.transport", "rc"]).probe.transport,
            probes::Transport::Rc
        );
        assert!(matches!(
            parse_from(["rdmad", "--probe.transport", "tcp"]),
            Err(ParseFailure::Usage(_))
        ));
        let s = settings(&["--probe.enable", "--no-collector.probes"]);
        assert!(s.probe.enable);
        assert!(!s.collectors.contains(&"probes"));
        assert!(settings(&["--probe.mr-sizes="]).probe.mr_sizes.is_empty());
        let Err(ParseFailure::Invalid(e)) =
            parse_from(["rdmad", "--probe.enable", "--probe.peer", "h:1"])
        else {
            panic!("a peer without a secret must be refused");
        };
        assert!(e.to_string().contains("--probe.secret-file"), "{e}");
        assert!(matches!(
            parse_from(["rdmad", "--probe.interval", "soon"]),
            Err(ParseFailure::Usage(_))
        ));
    }

    #[test]
    fn probe_file_and_flag_precedence() {
        let dir = std::env::temp_dir().join(format!("rdmad-cli-probe-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("rdmad.toml");
        std::fs::write(
            &file,
            "[probe]\nenable = true\ninterval = 3\nsize = 256\ndevices = [\"rxe_b\"]\n",
        )
        .unwrap();
        let f = file.to_str().unwrap();
        let s = settings(&["--config", f]);
        assert!(s.probe.enable);
        assert!(s.collectors.contains(&"probes"));
        assert_eq!(s.probe.interval_ms, 3000);
        assert_eq!(s.probe.size, 256);
        assert_eq!(s.probe.devices, vec!["rxe_b"]);
        let s = settings(&["--config", f, "--probe.size", "64", "--probe.enable=false"]);
        assert_eq!(s.probe.size, 64, "the flag wins");
        assert_eq!(s.probe.interval_ms, 3000, "the file still applies");
        assert!(!s.probe.enable);
        assert!(!s.collectors.contains(&"probes"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn unknown_collector_flag_is_a_usage_error() {
        let err = parse_from(["rdmad", "--collector.nope"]).unwrap_err();
        match err {
            ParseFailure::Usage(e) => assert_eq!(e.exit_code(), 2),
            ParseFailure::Invalid(e) => panic!("wanted a usage error, got {e}"),
        }
    }

    #[test]
    fn flags_override_the_file_and_the_file_overrides_defaults() {
        let dir = std::env::temp_dir().join(format!("rdmad-cli-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("rdmad.toml");
        std::fs::write(
            &file,
            "[web]\nlisten-address = \"127.0.0.1:1\"\n[path]\nsysfs = \"/from/file\"\n\
             [collector]\nsysfs_counters = false\ndevice-exclude = \"mlx5_1\"\n",
        )
        .unwrap();
        let f = file.to_str().unwrap();
        let s = settings(&["--config", f]);
        assert_eq!(s.listen_address, "127.0.0.1:1");
        assert_eq!(s.sysfs, PathBuf::from("/from/file"));
        assert!(!s.collectors.contains(&"sysfs_counters"));
        assert_eq!(s.device_exclude.as_deref(), Some("mlx5_1"));
        let s = settings(&[
            "--config",
            f,
            "--path.sysfs",
            "/from/flag",
            "--collector.sysfs_counters",
            "--collector.device-exclude=",
        ]);
        assert_eq!(s.sysfs, PathBuf::from("/from/flag"));
        assert_eq!(s.listen_address, "127.0.0.1:1");
        assert_eq!(s.collectors.len(), default_count());
        assert_eq!(
            s.device_exclude, None,
            "an empty flag clears the file's pattern"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn web_config_file_from_flag_or_config_file() {
        assert_eq!(settings(&[]).web_config_file, None, "none by default");
        let dir = std::env::temp_dir().join(format!("rdmad-cli-web-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("rdmad.toml");
        std::fs::write(&file, "[web]\nconfig.file = \"/etc/rdmad/web.yml\"\n").unwrap();
        let f = file.to_str().unwrap();
        assert_eq!(
            settings(&["--config", f]).web_config_file,
            Some(PathBuf::from("/etc/rdmad/web.yml"))
        );
        assert_eq!(
            settings(&["--config", f, "--web.config.file", "/flag.yml"]).web_config_file,
            Some(PathBuf::from("/flag.yml")),
            "the flag wins"
        );
        assert_eq!(
            settings(&["--config", f, "--web.config.file="]).web_config_file,
            None,
            "an empty flag turns the file's setting off"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn disable_compression_from_flag_env_or_config_file() {
        assert!(settings(&["--web.disable-compression"]).disable_compression);
        assert!(!settings(&["--web.disable-compression=false"]).disable_compression);
        let dir = std::env::temp_dir().join(format!("rdmad-cli-gzip-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("rdmad.toml");
        std::fs::write(&file, "[web]\ndisable-compression = true\n").unwrap();
        let f = file.to_str().unwrap();
        assert!(settings(&["--config", f]).disable_compression);
        assert!(
            !settings(&["--config", f, "--web.disable-compression=false"]).disable_compression,
            "the flag wins"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn gzip_level_from_flag_or_config_file() {
        assert_eq!(
            settings(&[]).gzip_level,
            crate::encoding::DEFAULT_GZIP_LEVEL
        );
        assert_eq!(settings(&["--web.gzip-level", "11"]).gzip_level, 11);
        for bad in ["0", "13", "fast"] {
            assert!(
                parse_from(["rdmad", "--web.gzip-level", bad]).is_err(),
                "--web.gzip-level {bad}"
            );
        }
        let dir = std::env::temp_dir().join(format!("rdmad-cli-level-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("rdmad.toml");
        std::fs::write(&file, "[web]\ngzip-level = 2\n").unwrap();
        let f = file.to_str().unwrap();
        assert_eq!(settings(&["--config", f]).gzip_level, 2);
        assert_eq!(
            settings(&["--config", f, "--web.gzip-level=9"]).gzip_level,
            9,
            "the flag wins"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn bad_config_is_invalid_not_usage() {
        let err = parse_from(["rdmad", "--config", "/nonexistent/rdmad.toml"]).unwrap_err();
        match err {
            ParseFailure::Invalid(e) => {
                assert!(format!("{e:#}").contains("/nonexistent/rdmad.toml"))
            }
            ParseFailure::Usage(e) => panic!("wanted invalid, got usage {e}"),
        }
    }
}
