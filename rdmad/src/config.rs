//! The configuration file (`--config FILE`, TOML): every key is a flag's name.
//!
//! `--web.listen-address` is `web.listen-address` in the file, `--collector.sysfs_info` is
//! `collector.sysfs_info = true`, so a table header groups them:
//!
//! ```toml
//! [web]
//! listen-address = ":9736"
//! [collector]
//! device-exclude = "mlx5_[2-9]"
//! sysfs_counters = true
//! ```
//!
//! Flags and `RDMAD_*` environment variables override the file; the file overrides the
//! defaults. Unknown keys and values of the wrong type are errors that name the key, the file
//! and, when a known key is close, what was probably meant: a typo never silently turns a
//! setting off.

use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context, Result};
use toml::{Table, Value};

use crate::collector::TABLE;

/// What a configuration file sets; `None` means "not in the file".
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FileConfig {
    /// `web.listen-address`.
    pub listen_address: Option<String>,
    /// `web.max-requests`.
    pub max_requests: Option<usize>,
    /// `web.config.file` (`[web] config.file = ...`, or `[web.config] file = ...`).
    pub web_config_file: Option<PathBuf>,
    /// `web.disable-compression`.
    pub disable_compression: Option<bool>,
    /// `web.gzip-level`.
    pub gzip_level: Option<u8>,
    /// `path.sysfs`.
    pub sysfs: Option<PathBuf>,
    /// `path.ethtool-capture`.
    pub ethtool_capture: Option<PathBuf>,
    /// `collector.device-include`.
    pub device_include: Option<String>,
    /// `collector.device-exclude`.
    pub device_exclude: Option<String>,
    /// `collector.disable-defaults`.
    pub disable_defaults: Option<bool>,
    /// `collector.<name>` for each collector the file mentions, in file order.
    pub collectors: Vec<(&'static str, bool)>,
    /// The `[probe]` table.
    pub probe: ProbeFile,
}

/// The `[probe]` table: the `--probe.*` flags without their prefix.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProbeFile {
    /// `probe.enable`.
    pub enable: Option<bool>,
    /// `probe.interval` (seconds, or a string with a unit), milliseconds.
    pub interval_ms: Option<u64>,
    /// `probe.size` (bytes, or a string with a unit).
    pub size: Option<usize>,
    /// `probe.iterations`.
    pub iterations: Option<u64>,
    /// `probe.devices`, an array of device names.
    pub devices: Option<Vec<String>>,
    /// `probe.mr-sizes`, an array of sizes.
    pub mr_sizes: Option<Vec<usize>>,
    /// `probe.listen`.
    pub listen: Option<std::net::SocketAddr>,
    /// `probe.peer`, an array of `HOST:PORT`.
    pub peers: Option<Vec<String>>,
    /// `probe.transport`, `"ud"` or `"rc"`.
    pub transport: Option<crate::collector::probes::Transport>,
    /// `probe.secret-file`.
    pub secret_file: Option<PathBuf>,
    /// `probe.peers-dns`.
    pub peers_dns: Option<String>,
    /// `probe.peers-file`.
    pub peers_file: Option<PathBuf>,
    /// `probe.mesh-max`.
    pub mesh_max: Option<usize>,
    /// `probe.rack`.
    pub rack: Option<String>,
    /// `probe.peer-histograms`.
    pub peer_histograms: Option<bool>,
}

/// The keys of the `[probe]` table.
const PROBE_KEYS: &[&str] = &[
    "enable",
    "interval",
    "size",
    "iterations",
    "devices",
    "mr-sizes",
    "listen",
    "peer",
    "transport",
    "secret-file",
    "peers-dns",
    "peers-file",
    "mesh-max",
    "rack",
    "peer-histograms",
];

/// Every key the file accepts, for error messages.
pub fn known_keys() -> Vec<String> {
    let mut keys: Vec<String> = [
        "web.listen-address",
        "web.max-requests",
        "web.config.file",
        "web.disable-compression",
        "web.gzip-level",
        "path.sysfs",
        "path.ethtool-capture",
        "collector.device-include",
        "collector.device-exclude",
        "collector.disable-defaults",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    keys.extend(TABLE.iter().map(|s| format!("collector.{}", s.name)));
    keys.extend(PROBE_KEYS.iter().map(|k| format!("probe.{k}")));
    keys
}

/// Read and check a configuration file.
pub fn load(path: &Path) -> Result<FileConfig> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read config file {}", path.display()))?;
    parse(&text).with_context(|| format!("config file {}", path.display()))
}

/// Check configuration text.
pub fn parse(text: &str) -> Result<FileConfig> {
    let table: Table = text.parse().map_err(|e| anyhow!("not valid TOML: {e}"))?;
    let mut config = FileConfig::default();
    for (section, value) in &table {
        let Value::Table(inner) = value else {
            return Err(unknown(section));
        };
        for (key, value) in inner {
            let full = format!("{section}.{key}");
            match (section.as_str(), key.as_str()) {
                ("web", "listen-address") => {
                    config.listen_address = Some(string(&full, value)?.to_owned())
                }
                ("web", "max-requests") => {
                    let n = value
                        .as_integer()
                        .ok_or_else(|| anyhow!("`{full}` must be an integer"))?;
                    config.max_requests = Some(
                        usize::try_from(n)
                            .ok()
                            .filter(|n| *n > 0)
                            .ok_or_else(|| anyhow!("`{full}` must be at least 1, not {n}"))?,
                    );
                }
                ("web", "disable-compression") => {
                    config.disable_compression = Some(boolean(&full, value)?)
                }
                ("web", "gzip-level") => {
                    let n = value
                        .as_integer()
                        .ok_or_else(|| anyhow!("`{full}` must be an integer"))?;
                    let levels = crate::encoding::GZIP_LEVELS;
                    config.gzip_level = Some(
                        u8::try_from(n)
                            .ok()
                            .filter(|n| levels.contains(n))
                            .ok_or_else(|| {
                                anyhow!(
                                    "`{full}` must be {} to {}, not {n}",
                                    levels.start(),
                                    levels.end()
                                )
                            })?,
                    );
                }
                ("web", "config") => {
                    // `--web.config.file`: the flag's name has one more dot than the others.
                    let Value::Table(inner) = value else {
                        return Err(unknown(&full));
                    };
                    for (key, value) in inner {
                        let full = format!("{full}.{key}");
                        match key.as_str() {
                            "file" => {
                                config.web_config_file = Some(PathBuf::from(string(&full, value)?))
                            }
                            _ => return Err(unknown(&full)),
                        }
                    }
                }
                ("path", "sysfs") => config.sysfs = Some(PathBuf::from(string(&full, value)?)),
                ("path", "ethtool-capture") => {
                    config.ethtool_capture = Some(PathBuf::from(string(&full, value)?))
                }
                ("collector", "device-include") => {
                    config.device_include = Some(string(&full, value)?.to_owned())
                }
                ("collector", "device-exclude") => {
                    config.device_exclude = Some(string(&full, value)?.to_owned())
                }
                ("collector", "disable-defaults") => {
                    config.disable_defaults = Some(boolean(&full, value)?)
                }
                ("probe", key) => probe_key(&mut config.probe, key, &full, value)?,
                ("collector", name) => match TABLE.iter().find(|s| s.name == name) {
                    Some(spec) => config.collectors.push((spec.name, boolean(&full, value)?)),
                    None => return Err(unknown(&full)),
                },
                _ => return Err(unknown(&full)),
            }
        }
    }
    Ok(config)
}

fn probe_key(probe: &mut ProbeFile, key: &str, full: &str, value: &Value) -> Result<()> {
    use crate::collector::probes::{parse_interval, parse_listen, parse_size};
    // A number of seconds / bytes, or a string with a unit.
    let text = |value: &Value| match value {
        Value::Integer(n) => Some(n.to_string()),
        Value::Float(f) => Some(f.to_string()),
        Value::String(s) => Some(s.clone()),
        _ => None,
    };
    let size = |value: &Value| -> Result<usize> {
        let t = text(value)
            .ok_or_else(|| anyhow!("`{full}` must be a size, not {}", value.type_str()))?;
        parse_size(&t).map_err(|e| anyhow!("`{full}`: {e}"))
    };
    let strings = |value: &Value| -> Result<Vec<String>> {
        value
            .as_array()
            .and_then(|a| a.iter().map(|v| v.as_str().map(str::to_owned)).collect())
            .ok_or_else(|| anyhow!("`{full}` must be an array of strings"))
    };
    match key {
        "enable" => probe.enable = Some(boolean(full, value)?),
        "interval" => {
            let t = text(value)
                .ok_or_else(|| anyhow!("`{full}` must be seconds or a string like \"10s\""))?;
            probe.interval_ms = Some(parse_interval(&t).map_err(|e| anyhow!("`{full}`: {e}"))?);
        }
        "size" => probe.size = Some(size(value)?),
        "iterations" => {
            probe.iterations = Some(
                value
                    .as_integer()
                    .and_then(|n| u64::try_from(n).ok())
                    .filter(|n| *n > 0)
                    .ok_or_else(|| anyhow!("`{full}` must be an integer of at least 1"))?,
            )
        }
        "devices" => probe.devices = Some(strings(value)?),
        "mr-sizes" => {
            let sizes = value
                .as_array()
                .ok_or_else(|| anyhow!("`{full}` must be an array of sizes"))?;
            probe.mr_sizes = Some(sizes.iter().map(size).collect::<Result<_>>()?);
        }
        "listen" => {
            probe.listen =
                Some(parse_listen(string(full, value)?).map_err(|e| anyhow!("`{full}`: {e}"))?)
        }
        "peer" => probe.peers = Some(strings(value)?),
        "transport" => {
            probe.transport = Some(
                crate::collector::probes::parse_transport(string(full, value)?)
                    .map_err(|e| anyhow!("`{full}`: {e}"))?,
            )
        }
        "secret-file" => probe.secret_file = Some(PathBuf::from(string(full, value)?)),
        "peers-dns" => probe.peers_dns = Some(string(full, value)?.to_owned()),
        "peers-file" => probe.peers_file = Some(PathBuf::from(string(full, value)?)),
        "mesh-max" => {
            probe.mesh_max = Some(
                value
                    .as_integer()
                    .and_then(|n| usize::try_from(n).ok())
                    .filter(|n| (1..=65536).contains(n))
                    .ok_or_else(|| anyhow!("`{full}` must be an integer from 1 to 65536"))?,
            )
        }
        "rack" => probe.rack = Some(string(full, value)?.to_owned()),
        "peer-histograms" => probe.peer_histograms = Some(boolean(full, value)?),
        _ => return Err(unknown(full)),
    }
    Ok(())
}

fn string<'v>(key: &str, value: &'v Value) -> Result<&'v str> {
    match value.as_str() {
        Some(s) => Ok(s),
        None => bail!("`{key}` must be a string, not {}", value.type_str()),
    }
}

fn boolean(key: &str, value: &Value) -> Result<bool> {
    match value.as_bool() {
        Some(b) => Ok(b),
        None => bail!("`{key}` must be true or false, not {}", value.type_str()),
    }
}

fn unknown(key: &str) -> anyhow::Error {
    let known = known_keys();
    let closest = known
        .iter()
        .map(|k| (rdmakit::catalog::edit_distance(key, k), k))
        .min()
        .filter(|(d, _)| *d <= 3);
    match closest {
        Some((_, k)) => anyhow!("unknown key `{key}` (did you mean `{k}`?)"),
        None => anyhow!("unknown key `{key}` (known keys: {})", known.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_file() {
        let c = parse(
            r#"
[web]
listen-address = "127.0.0.1:9999"
max-requests = 3
disable-compression = true
gzip-level = 9
[path]
sysfs = "/host/sys"
[collector]
device-include = "mlx5_.*"
device-exclude = "mlx5_1"
disable-defaults = true
sysfs_info = true
"#,
        )
        .expect("valid");
        assert_eq!(c.listen_address.as_deref(), Some("127.0.0.1:9999"));
        assert_eq!(c.max_requests, Some(3));
        assert_eq!(c.disable_compression, Some(true));
        assert_eq!(c.gzip_level, Some(9));
        assert_eq!(c.sysfs, Some(PathBuf::from("/host/sys")));
        assert_eq!(c.device_include.as_deref(), Some("mlx5_.*"));
        assert_eq!(c.device_exclude.as_deref(), Some("mlx5_1"));
        assert_eq!(c.disable_defaults, Some(true));
        assert_eq!(c.collectors, vec![("sysfs_info", true)]);
    }

    #[test]
    fn probe_table() {
        let c = parse(
            r#"
[probe]
enable = true
interval = "500ms"
size = "1K"
iterations = 10
devices = ["rxe0", "rxe_a"]
mr-sizes = [4096, "1M"]
listen = ":9737"
peer = ["10.0.0.2:9737"]
transport = "rc"
secret-file = "/etc/rdmad/probe.secret"
peers-dns = "rdmad-peers.rdma.svc"
peers-file = "/etc/rdmad/peers.yml"
mesh-max = 32
rack = "r7"
peer-histograms = false
"#,
        )
        .expect("valid");
        let p = &c.probe;
        assert_eq!(p.peers_dns.as_deref(), Some("rdmad-peers.rdma.svc"));
        assert_eq!(p.peers_file, Some(PathBuf::from("/etc/rdmad/peers.yml")));
        assert_eq!(p.mesh_max, Some(32));
        assert_eq!(p.rack.as_deref(), Some("r7"));
        assert_eq!(p.peer_histograms, Some(false));
        assert!(parse("[probe]\nmesh-max = 0\n").is_err());
        assert_eq!(p.enable, Some(true));
        assert_eq!(p.interval_ms, Some(500));
        assert_eq!(p.size, Some(1024));
        assert_eq!(p.iterations, Some(10));
        assert_eq!(
            p.devices.as_deref(),
            Some(&["rxe0".to_string(), "rxe_a".to_string()][..])
        );
        assert_eq!(p.mr_sizes, Some(vec![4096, 1 << 20]));
        assert_eq!(p.listen.map(|a| a.port()), Some(9737));
        assert_eq!(p.peers, Some(vec!["10.0.0.2:9737".to_string()]));
        assert_eq!(p.transport, Some(crate::collector::probes::Transport::Rc));
        let err = parse("[probe]\ntransport = \"tcp\"\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("`probe.transport`"), "{err}");
        assert_eq!(
            p.secret_file,
            Some(PathBuf::from("/etc/rdmad/probe.secret"))
        );
        assert_eq!(
            parse("probe.interval = 2\n").unwrap().probe.interval_ms,
            Some(2000)
        );
        let err = parse("[probe]\nintervall = 1\n").unwrap_err().to_string();
        assert!(err.contains("did you mean `probe.interval`"), "{err}");
        let err = parse("[probe]\niterations = 0\n").unwrap_err().to_string();
        assert!(err.contains("`probe.iterations`"), "{err}");
        let err = parse("[probe]\npeer = \"h:1\"\n").unwrap_err().to_string();
        assert!(err.contains("`probe.peer` must be an array"), "{err}");
    }

    #[test]
    fn dotted_keys_work_like_tables() {
        let c = parse("web.listen-address = \":1\"\ncollector.sysfs_counters = false\n").unwrap();
        assert_eq!(c.listen_address.as_deref(), Some(":1"));
        assert_eq!(c.collectors, vec![("sysfs_counters", false)]);
    }

    #[test]
    fn web_config_file_key() {
        for text in [
            "[web]\nconfig.file = \"/etc/rdmad/web.yml\"\n",
            "[web.config]\nfile = \"/etc/rdmad/web.yml\"\n",
            "web.config.file = \"/etc/rdmad/web.yml\"\n",
        ] {
            let c = parse(text).unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(c.web_config_file, Some(PathBuf::from("/etc/rdmad/web.yml")));
        }
        let err = parse("[web]\nconfig.fil = \"x\"\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("did you mean `web.config.file`"), "{err}");
        let err = parse("[web]\nconfig = \"x\"\n").unwrap_err().to_string();
        assert!(err.contains("unknown key `web.config`"), "{err}");
        let err = parse("[web]\nconfig.file = 1\n").unwrap_err().to_string();
        assert!(err.contains("`web.config.file` must be a string"), "{err}");
    }

    #[test]
    fn unknown_keys_are_named() {
        let err = parse("[web]\nlisten_address = \":1\"\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("`web.listen_address`"), "{err}");
        assert!(err.contains("did you mean `web.listen-address`"), "{err}");
        let err = parse("[collector]\nsysfs_bogus = true\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("`collector.sysfs_bogus`"), "{err}");
        let err = parse("verbose = true\n").unwrap_err().to_string();
        assert!(err.contains("unknown key `verbose`"), "{err}");
        assert!(err.contains("known keys: web.listen-address"), "{err}");
    }

    #[test]
    fn wrong_types_are_named() {
        let err = parse("[collector]\nsysfs_info = \"yes\"\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("`collector.sysfs_info` must be true or false"),
            "{err}"
        );
        let err = parse("[web]\nmax-requests = 0\n").unwrap_err().to_string();
        assert!(err.contains("at least 1"), "{err}");
        for bad in ["0", "13", "-1", "\"6\""] {
            let err = parse(&format!("[web]\ngzip-level = {bad}\n"))
                .unwrap_err()
                .to_string();
            assert!(err.contains("`web.gzip-level` must be"), "{bad}: {err}");
        }
        assert!(parse("[web\n").unwrap_err().to_string().contains("TOML"));
    }
}
