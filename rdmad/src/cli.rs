//! Command-line flags in node_exporter style, and their merge with the config file.
//!
//! Every option is a row of [`crate::options`]; `--collector.<name>` and
//! `--no-collector.<name>` are generated from the collector table, so adding a collector adds
//! its flags, env variable and config key. Precedence, per setting: command line, then the
//! `RDMAD_*` environment variable, then the `--config` file, then the default.

use std::path::PathBuf;

use anyhow::Result;
use clap::builder::BoolishValueParser;
use clap::parser::ValueSource;
use clap::{Arg, ArgAction, ArgMatches, Command};

use crate::collector::netlink_owners::OwnerSettings;
use crate::collector::probes::{self, ProbeSettings};
use crate::collector::TABLE;
use crate::config::{self, FileConfig};
use crate::options::{self, explicit, Values};

/// The default port: not used by node_exporter (9100), rdma_exporter (9879) or the other
/// RDMA exporters we know of (9315, 9683).
pub const DEFAULT_PORT: u16 = 9736;

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

fn enable_id(name: &str) -> String {
    format!("collector.{name}")
}

fn disable_id(name: &str) -> String {
    format!("no-collector.{name}")
}

/// The env variable of `--collector.<name>`.
pub fn collector_env(name: &str) -> String {
    options::env_var(&enable_id(name))
}

/// What `--generate` writes to stdout (hidden: for packaging and the README).
pub const GENERATE: &[&str] = &[
    "man",
    "complete-bash",
    "complete-zsh",
    "complete-fish",
    "readme-options",
];

/// The full command: the general options, the collector flags, the collectors' own options,
/// then the command options (`--config`, `--once`, ...), all from [`crate::options`].
pub fn command() -> Command {
    let mut cmd = Command::new("rdmad")
        .version(crate::build_info::long_version())
        .about("rdmad: RDMA devices and counters as Prometheus metrics")
        .after_help(
            "Exit codes: 0 clean exit, 1 failure (bad setting, cannot listen), 2 usage error.",
        );
    for o in options::GENERAL {
        cmd = cmd.arg(options::arg(o));
    }
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
    for o in TABLE
        .iter()
        .flat_map(|spec| spec.options.iter())
        .chain(options::COMMANDS)
    {
        cmd = cmd.arg(options::arg(o));
    }
    cmd.arg(
        Arg::new("generate")
            .long("generate")
            .value_name("WHAT")
            .value_parser(GENERATE.to_vec())
            .hide(true)
            .exclusive(true),
    )
}

/// `rdmad --generate WHAT`: the man page (section 8), a shell's completions, or the README's
/// options table.
pub fn generate(what: &str) -> Result<String> {
    use clap_complete::Shell;
    let mut out = Vec::new();
    let mut cmd = command();
    let shell = match what {
        "man" => {
            clap_mangen::Man::new(cmd.clone())
                .section("8")
                .render(&mut out)?;
            None
        }
        "complete-bash" => Some(Shell::Bash),
        "complete-zsh" => Some(Shell::Zsh),
        "complete-fish" => Some(Shell::Fish),
        "readme-options" => return Ok(options::readme_table()),
        _ => anyhow::bail!("--generate: `{what}` is not one of {}", GENERATE.join(", ")),
    };
    if let Some(shell) = shell {
        clap_complete::generate(shell, &mut cmd, "rdmad", &mut out);
    }
    Ok(String::from_utf8(out)?)
}

/// Resolve flags, environment and the config file into [`Settings`].
pub fn resolve(matches: &ArgMatches) -> Result<Settings> {
    let config_path = match matches.get_one::<options::Value>("config") {
        Some(options::Value::Path(p)) => Some(p.clone()),
        _ => None,
    };
    let file = match &config_path {
        Some(path) => config::load(path)?,
        None => FileConfig::default(),
    };
    let values = Values::resolve(matches, &file.values)?;
    let probe = probes::settings(&values)?;
    let disable_defaults = values.bool("collector.disable-defaults")?;
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
    let scrape_timeout_ms = values.millis("scrape.timeout")?;
    Ok(Settings {
        listen_address: values.text_as_given("web.listen-address")?,
        max_requests: values.int("web.max-requests")? as usize,
        web_config_file: values.path("web.config.file")?,
        disable_compression: values.bool("web.disable-compression")?,
        gzip_level: u8::try_from(values.int("web.gzip-level")?)?,
        sysfs: values.path_as_given("path.sysfs")?,
        procfs: values.path_as_given("path.procfs")?,
        scrape_timeout: (scrape_timeout_ms > 0)
            .then(|| std::time::Duration::from_millis(scrape_timeout_ms)),
        owners: OwnerSettings::from_options(&values)?,
        ethtool_capture: values.path("path.ethtool-capture")?,
        device_include: values.text("collector.device-include")?,
        device_exclude: values.text("collector.device-exclude")?,
        collectors,
        probe,
        once: values.bool("once")?,
        print_metrics: values.text("print-metrics")?.is_some(),
    })
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
mod tests;
