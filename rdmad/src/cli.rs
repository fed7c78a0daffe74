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
