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

use std::path::Path;

use anyhow::{anyhow, Context, Result};
use toml::{Table, Value};

use crate::collector::TABLE;
use crate::options::{self, FileValues};

/// What a configuration file sets.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FileConfig {
    /// The options it sets, by name (only options settable from the file, checked by their
    /// kind: [`crate::options::Kind::from_file`]).
    pub values: FileValues,
    /// `collector.<name>` for each collector the file mentions, in file order.
    pub collectors: Vec<(&'static str, bool)>,
}

impl FileConfig {
    /// The value the file gives the option `name`.
    pub fn get(&self, name: &str) -> Option<&options::Value> {
        self.values.get(name)
    }
}

/// Every key the file accepts, for error messages: the general options, a key per collector,
/// then the collectors' own options.
pub fn known_keys() -> Vec<String> {
    let mut keys: Vec<String> = options::GENERAL
        .iter()
        .filter(|o| o.file)
        .map(|o| o.name.to_string())
        .collect();
    keys.extend(TABLE.iter().map(|s| format!("collector.{}", s.name)));
    keys.extend(
        TABLE
            .iter()
            .flat_map(|s| s.options.iter())
            .filter(|o| o.file)
            .map(|o| o.name.to_string()),
    );
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
    walk(&mut config, "", &table)?;
    Ok(config)
}

/// The keys of `table` under `prefix`: an option's key takes its value; a table whose name
/// begins known keys (`[web]`, `[web.config]`, `web.config.file = ...` alike) is walked.
fn walk(config: &mut FileConfig, prefix: &str, table: &Table) -> Result<()> {
    for (key, value) in table {
        let full = if prefix.is_empty() {
            key.clone()
        } else {
            format!("{prefix}.{key}")
        };
        let is_prefix = || {
            known_keys()
                .iter()
                .any(|k| k.starts_with(&full) && k[full.len()..].starts_with('.'))
        };
        if let Some(o) = options::find(&full).filter(|o| o.file) {
            config
                .values
                .insert(o.name, o.kind.from_file(&full, value)?);
        } else if let (Value::Table(inner), true) = (value, is_prefix()) {
            // `[web]`, `[web.config]`, `[collector.netlink_owners]`, or dotted keys.
            walk(config, &full, inner)?
        } else if let Some(spec) = full
            .strip_prefix("collector.")
            .and_then(crate::collector::spec)
        {
            config
                .collectors
                .push((spec.name, options::bool_from_file(&full, value)?));
        } else {
            return Err(unknown(&full));
        }
    }
    Ok(())
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
    use crate::options::Value as V;

    fn get(c: &FileConfig, key: &str) -> Option<V> {
        c.get(key).cloned()
    }

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
        assert_eq!(
            get(&c, "web.listen-address"),
            Some(V::Text("127.0.0.1:9999".into()))
        );
        assert_eq!(get(&c, "web.max-requests"), Some(V::Int(3)));
        assert_eq!(get(&c, "web.disable-compression"), Some(V::Bool(true)));
        assert_eq!(get(&c, "web.gzip-level"), Some(V::Int(9)));
        assert_eq!(get(&c, "path.sysfs"), Some(V::Path("/host/sys".into())));
        assert_eq!(
            get(&c, "collector.device-include"),
            Some(V::Text("mlx5_.*".into()))
        );
        assert_eq!(
            get(&c, "collector.device-exclude"),
            Some(V::Text("mlx5_1".into()))
        );
        assert_eq!(get(&c, "collector.disable-defaults"), Some(V::Bool(true)));
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
        assert_eq!(
            get(&c, "probe.peers-dns"),
            Some(V::Text("rdmad-peers.rdma.svc".into()))
        );
        assert_eq!(
            get(&c, "probe.peers-file"),
            Some(V::Path("/etc/rdmad/peers.yml".into()))
        );
        assert_eq!(get(&c, "probe.mesh-max"), Some(V::Int(32)));
        assert_eq!(get(&c, "probe.rack"), Some(V::Text("r7".into())));
        assert_eq!(get(&c, "probe.peer-histograms"), Some(V::Bool(false)));
        assert!(parse("[probe]\nmesh-max = 0\n").is_err());
        assert_eq!(get(&c, "probe.enable"), Some(V::Bool(true)));
        assert_eq!(get(&c, "probe.interval"), Some(V::Millis(500)));
        assert_eq!(get(&c, "probe.size"), Some(V::Size(1024)));
        assert_eq!(get(&c, "probe.iterations"), Some(V::Int(10)));
        assert_eq!(
            get(&c, "probe.devices"),
            Some(V::List(vec!["rxe0".to_string(), "rxe_a".to_string()]))
        );
        assert_eq!(
            get(&c, "probe.mr-sizes"),
            Some(V::Sizes(vec![4096, 1 << 20]))
        );
        assert!(matches!(get(&c, "probe.listen"), Some(V::Addr(a)) if a.port() == 9737));
        assert_eq!(
            get(&c, "probe.peer"),
            Some(V::List(vec!["10.0.0.2:9737".to_string()]))
        );
        assert_eq!(get(&c, "probe.transport"), Some(V::Text("rc".into())));
        let err = parse("[probe]\ntransport = \"tcp\"\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("`probe.transport`"), "{err}");
        assert_eq!(
            get(&c, "probe.secret-file"),
            Some(V::Path("/etc/rdmad/probe.secret".into()))
        );
        assert_eq!(
            get(&parse("probe.interval = 2\n").unwrap(), "probe.interval"),
            Some(V::Millis(2000))
        );
        let err = parse("[probe]\nintervall = 1\n").unwrap_err().to_string();
        assert!(err.contains("did you mean `probe.interval`"), "{err}");
        let err = parse("[probe]\niterations = 0\n").unwrap_err().to_string();
        assert!(err.contains("`probe.iterations`"), "{err}");
        let err = parse("[probe]\npeer = \"h:1\"\n").unwrap_err().to_string();
        assert!(err.contains("`probe.peer` must be an array"), "{err}");
    }

    /// The keys the file could not set before the options table (issue #30).
    #[test]
    fn every_option_has_a_key() {
        let c = parse(
            "[path]\nprocfs = \"/host/proc\"\n[scrape]\ntimeout = \"1s\"\n\
             [collector.netlink_owners]\npid = true\nmax-owners = 3\nmax-objects = 9\n",
        )
        .expect("valid");
        assert_eq!(get(&c, "path.procfs"), Some(V::Path("/host/proc".into())));
        assert_eq!(get(&c, "scrape.timeout"), Some(V::Millis(1000)));
        assert_eq!(get(&c, "collector.netlink_owners.pid"), Some(V::Bool(true)));
        assert_eq!(
            get(&c, "collector.netlink_owners.max-owners"),
            Some(V::Int(3))
        );
        assert_eq!(
            get(&c, "collector.netlink_owners.max-objects"),
            Some(V::Int(9))
        );
        assert!(c.collectors.is_empty(), "{:?}", c.collectors);
        assert_eq!(
            get(&parse("scrape.timeout = 0\n").unwrap(), "scrape.timeout"),
            Some(V::Millis(0))
        );
        let err = parse("[collector.netlink_owners]\nmax-objects = 0\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("`collector.netlink_owners.max-objects` must be at least 1"),
            "{err}"
        );
        let err = parse("[collector.netlink_owners]\npids = true\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("did you mean `collector.netlink_owners.pid`"),
            "{err}"
        );
    }

    #[test]
    fn dotted_keys_work_like_tables() {
        let c = parse("web.listen-address = \":1\"\ncollector.sysfs_counters = false\n").unwrap();
        assert_eq!(get(&c, "web.listen-address"), Some(V::Text(":1".into())));
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
            assert_eq!(
                get(&c, "web.config.file"),
                Some(V::Path("/etc/rdmad/web.yml".into()))
            );
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
