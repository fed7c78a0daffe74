//! rdmad's options, declared once.
//!
//! Each option is one [`Opt`] row: its name (the flag without `--`, and its key in the
//! `--config` file), the type of its value, its default, its environment variable (derived from
//! the name: `RDMAD_` and the name in upper case with `_` for `.` and `-`) and its help. The
//! rows generate the clap command ([`crate::cli::command`]), the config file's keys and their
//! type checks ([`crate::config`]), the README's options table ([`readme_table`]), and through
//! clap the man page and the shell completions (`rdmad --generate ...`).
//!
//! The general options are [`GENERAL`]; a collector's own options are declared beside it (its
//! [`CollectorSpec::options`](crate::collector::CollectorSpec::options)) and follow, in
//! collector table order; the options that are commands rather than settings ([`COMMANDS`])
//! come last. `--collector.<name>` / `--no-collector.<name>` are generated from the collector
//! table itself. No option depends on a build feature, so the table (and the README generated
//! from it) is the same for every build.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::{anyhow, bail, Result};
use clap::builder::{BoolishValueParser, PossibleValuesParser, TypedValueParser};
use clap::parser::ValueSource;
use clap::{Arg, ArgAction, ArgMatches, ValueHint};
use toml::Value as Toml;

use crate::collector::TABLE;

/// The type of an option's value: how it is parsed from the command line or the environment,
/// and what the config file must hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `--name` alone is true, or `--name=BOOL` (`true`, `false`, `yes`, `no`, `1`, `0`, ...);
    /// a boolean in the file.
    Bool,
    /// `--name` alone, nothing else (no environment variable, no file key).
    Switch,
    /// A string.
    Text,
    /// A path (a string in the file).
    Path,
    /// An integer from `min` to `max`.
    Int { min: u64, max: u64 },
    /// A duration: seconds (`1`, `0.5`) or with a unit (`500ms`, `10s`, `1m`, `1h`), kept in
    /// milliseconds; `0` means none when `zero` is true. In the file: a number or a string.
    Duration { zero: bool },
    /// A size in bytes: `4096`, or with a binary unit (`4K`, `1M`). A number or a string in the
    /// file.
    Size,
    /// Strings, comma-separated on the command line (empty items are dropped); an array of
    /// strings in the file.
    List,
    /// Sizes, comma-separated (`""` for none); an array of sizes in the file.
    SizeList,
    /// A socket address: `HOST:PORT`, or `:PORT` for every interface.
    Addr,
    /// One of these words (any case).
    Choice(&'static [&'static str]),
}

/// One option.
#[derive(Debug, Clone, Copy)]
pub struct Opt {
    /// The long flag without `--`, and the config file key.
    pub name: &'static str,
    /// What its value is.
    pub kind: Kind,
    /// The default, as it would be written on the command line (`None`: unset).
    pub default: Option<&'static str>,
    /// The value's placeholder in `--help` (`ADDRESS`, `N`).
    pub value_name: &'static str,
    /// The help: one paragraph.
    pub help: &'static str,
    /// Read from its `RDMAD_*` environment variable.
    pub env: bool,
    /// Settable in the `--config` file.
    pub file: bool,
    /// The flag may be given more than once (the values add up).
    pub repeat: bool,
}

/// A settable option (flag, environment variable and config file key) without a default.
pub const fn opt(
    name: &'static str,
    kind: Kind,
    value_name: &'static str,
    help: &'static str,
) -> Opt {
    Opt {
        name,
        kind,
        default: None,
        value_name,
        help,
        env: true,
        file: true,
        repeat: false,
    }
}

impl Opt {
    /// With this default.
    pub const fn default(mut self, default: &'static str) -> Opt {
        self.default = Some(default);
        self
    }

    /// Repeatable on the command line.
    pub const fn repeat(mut self) -> Opt {
        self.repeat = true;
        self
    }

    /// Not a setting: no config file key.
    pub const fn not_in_file(mut self) -> Opt {
        self.file = false;
        self
    }

    /// Not a setting: a command line flag only.
    pub const fn flag_only(mut self) -> Opt {
        self.file = false;
        self.env = false;
        self
    }

    /// Its environment variable.
    pub fn env_var(&self) -> Option<String> {
        self.env.then(|| env_var(self.name))
    }
}

/// The environment variable of the option (or collector flag) `name`.
pub fn env_var(name: &str) -> String {
    let tail: String = name
        .chars()
        .map(|c| match c {
            '.' | '-' => '_',
            c => c.to_ascii_uppercase(),
        })
        .collect();
    format!("RDMAD_{tail}")
}

/// The general options, before the collectors' own.
pub const GENERAL: &[Opt] = &[
    opt(
        "web.listen-address",
        Kind::Text,
        "ADDRESS",
        "Address to listen on: HOST:PORT, or :PORT for every interface.",
    )
    .default(":9736"),
    opt(
        "web.max-requests",
        Kind::Int {
            min: 1,
            max: u32::MAX as u64,
        },
        "N",
        "Most scrapes served at once; more get 503 (a scrape reads sysfs on a blocking thread).",
    )
    .default("40"),
    opt(
        "web.config.file",
        Kind::Path,
        "FILE",
        "TLS and basic auth: a YAML file in the Prometheus exporter-toolkit web configuration \
         format (tls_server_config, http_server_config, basic_auth_users); \"\" for none.",
    ),
    opt(
        "web.disable-compression",
        Kind::Bool,
        "BOOL",
        "Never compress responses. By default /metrics is sent gzip or zstd encoded when the \
         request's Accept-Encoding asks for it (Prometheus always sends gzip).",
    )
    .default("false"),
    opt(
        "web.gzip-level",
        Kind::Int { min: 1, max: 12 },
        "LEVEL",
        "The gzip level of compressed responses: 1 (fastest) to 12 (smallest), libdeflate's \
         levels. 10 and up search for the shortest encoding: on the 64-device benchmark tree \
         about one point of the plain size less than 6, for 20-40 times its CPU per scrape.",
    )
    .default("6"),
    opt(
        "path.sysfs",
        Kind::Path,
        "PATH",
        "Where sysfs is mounted (devices are under PATH/class/infiniband).",
    )
    .default("/sys"),
    opt(
        "path.procfs",
        Kind::Path,
        "PATH",
        "Where procfs is mounted (the owners of RDMA objects are read from PATH/<pid>).",
    )
    .default("/proc"),
    opt(
        "scrape.timeout",
        Kind::Duration { zero: true },
        "DURATION",
        "The scrape deadline: a collector still running then contributes what it has and \
         rdma_scrape_collector_timeout{collector} is 1. Seconds or with a unit (500ms); 0 for \
         none.",
    )
    .default("5s"),
    opt(
        "collector.device-include",
        Kind::Text,
        "REGEX",
        "Only read devices whose whole name matches this regular expression (default: all).",
    ),
    opt(
        "collector.device-exclude",
        Kind::Text,
        "REGEX",
        "Never read devices whose whole name matches this regular expression (applied before \
         any file of the device is opened).",
    ),
    opt(
        "collector.disable-defaults",
        Kind::Bool,
        "BOOL",
        "Disable every collector that is not enabled explicitly.",
    )
    .default("false"),
];

/// The options that are commands rather than settings, after the collectors' options.
pub const COMMANDS: &[Opt] = &[
    opt(
        "config",
        Kind::Path,
        "FILE",
        "A TOML file with the same settings as the flags (keys are flag names); flags and \
         RDMAD_* variables override it.",
    )
    .not_in_file(),
    opt(
        "once",
        Kind::Switch,
        "",
        "Print one exposition (text format 0.0.4) to stdout and exit.",
    )
    .flag_only(),
    opt(
        "print-metrics",
        Kind::Choice(&["json"]),
        "FORMAT",
        "Print every metric family rdmad can export (name, type, HELP, collectors, and the \
         catalog counters behind them) in FORMAT and exit.",
    )
    .flag_only(),
];

/// Every option, in `--help` order.
pub fn all() -> impl Iterator<Item = &'static Opt> {
    GENERAL
        .iter()
        .chain(TABLE.iter().flat_map(|spec| spec.options.iter()))
        .chain(COMMANDS.iter())
}

/// The option called `name`.
pub fn find(name: &str) -> Option<&'static Opt> {
    all().find(|o| o.name == name)
}

/// A parsed value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    Bool(bool),
    Text(String),
    Path(PathBuf),
    Int(u64),
    /// A duration in milliseconds (0: none).
    Millis(u64),
    Size(usize),
    List(Vec<String>),
    Sizes(Vec<usize>),
    Addr(SocketAddr),
}

/// A duration option (`--probe.interval`, `--scrape.timeout`): the workspace's duration
/// grammar ([`rdmakit::duration`]), 1 ms to 24 h; in milliseconds.
pub fn parse_interval(text: &str) -> Result<u64, String> {
    let range = std::time::Duration::from_millis(1)..=std::time::Duration::from_secs(86_400);
    let d = rdmakit::duration::parse(text, range).map_err(|e| e.to_string())?;
    Ok((d.as_secs_f64() * 1000.0).round() as u64)
}

/// A size in bytes: `4096`, or with a binary unit (`4K`, `64M`, `1G`, `KiB`/`MiB`/`GiB`).
pub fn parse_size(text: &str) -> Result<usize, String> {
    let t = text.trim();
    let upper = t.to_ascii_uppercase();
    let (number, shift) = [
        ("KIB", 10),
        ("MIB", 20),
        ("GIB", 30),
        ("K", 10),
        ("M", 20),
        ("G", 30),
    ]
    .iter()
    .find_map(|(suffix, shift)| upper.strip_suffix(suffix).map(|n| (n.to_owned(), *shift)))
    .unwrap_or((upper.clone(), 0));
    number
        .trim()
        .parse::<usize>()
        .ok()
        .and_then(|n| n.checked_mul(1usize << shift))
        .filter(|n| *n > 0)
        .ok_or_else(|| format!("`{text}` is not a size in bytes (`4096`, `64K`, `1M`)"))
}

/// A listen address: `HOST:PORT`, or `:PORT` for every interface.
pub fn parse_listen(text: &str) -> Result<SocketAddr, String> {
    let full = match text.strip_prefix(':') {
        Some(port) => format!("0.0.0.0:{port}"),
        None => text.to_owned(),
    };
    full.parse()
        .map_err(|_| format!("`{text}` is not an address (`HOST:PORT` or `:PORT`)"))
}

/// clap's boolish words.
fn parse_bool(text: &str) -> Result<bool, String> {
    match text.trim().to_ascii_lowercase().as_str() {
        "y" | "yes" | "t" | "true" | "on" | "1" => Ok(true),
        "n" | "no" | "f" | "false" | "off" | "0" => Ok(false),
        _ => Err(format!("`{text}` is not true or false")),
    }
}

fn items(text: &str) -> impl Iterator<Item = &str> {
    text.split(',').filter(|s| !s.trim().is_empty())
}

impl Kind {
    /// Parse a value as written on the command line or in the environment.
    pub fn parse(self, text: &str) -> Result<Value, String> {
        Ok(match self {
            Kind::Bool | Kind::Switch => Value::Bool(parse_bool(text)?),
            Kind::Text => Value::Text(text.to_owned()),
            Kind::Path => Value::Path(PathBuf::from(text)),
            Kind::Int { min, max } => Value::Int(
                text.trim()
                    .parse::<u64>()
                    .ok()
                    .filter(|n| (min..=max).contains(n))
                    .ok_or_else(|| format!("`{text}` is not {}", int_range(min, max)))?,
            ),
            Kind::Duration { zero } => Value::Millis(if zero && text.trim() == "0" {
                0
            } else {
                parse_interval(text)?
            }),
            Kind::Size => Value::Size(parse_size(text)?),
            Kind::List => Value::List(items(text).map(str::to_owned).collect()),
            Kind::SizeList => Value::Sizes(items(text).map(parse_size).collect::<Result<_, _>>()?),
            Kind::Addr => Value::Addr(parse_listen(text)?),
            Kind::Choice(words) => Value::Text(
                words
                    .iter()
                    .find(|w| w.eq_ignore_ascii_case(text.trim()))
                    .ok_or_else(|| format!("`{text}` is not one of {}", words.join(", ")))?
                    .to_string(),
            ),
        })
    }

    /// Check and convert the config file's value of `key`.
    pub fn from_file(self, key: &str, value: &Toml) -> Result<Value> {
        let string = || match value.as_str() {
            Some(s) => Ok(s),
            None => Err(anyhow!(
                "`{key}` must be a string, not {}",
                value.type_str()
            )),
        };
        // A number of seconds / bytes, or a string with a unit.
        let text = |value: &Toml| match value {
            Toml::Integer(n) => Some(n.to_string()),
            Toml::Float(f) => Some(f.to_string()),
            Toml::String(s) => Some(s.clone()),
            _ => None,
        };
        let size = |value: &Toml| -> Result<usize> {
            let t = text(value)
                .ok_or_else(|| anyhow!("`{key}` must be a size, not {}", value.type_str()))?;
            parse_size(&t).map_err(|e| anyhow!("`{key}`: {e}"))
        };
        let with_key = |e: String| anyhow!("`{key}`: {e}");
        Ok(match self {
            Kind::Bool | Kind::Switch => Value::Bool(bool_from_file(key, value)?),
            Kind::Text => Value::Text(string()?.to_owned()),
            Kind::Path => Value::Path(PathBuf::from(string()?)),
            Kind::Int { min, max } => {
                let Some(n) = value.as_integer() else {
                    bail!("`{key}` must be an integer, not {}", value.type_str());
                };
                Value::Int(
                    u64::try_from(n)
                        .ok()
                        .filter(|n| (min..=max).contains(n))
                        .ok_or_else(|| {
                            anyhow!("`{key}` must be {}, not {n}", int_range(min, max))
                        })?,
                )
            }
            Kind::Duration { .. } => {
                let t = text(value)
                    .ok_or_else(|| anyhow!("`{key}` must be seconds or a string like \"10s\""))?;
                self.parse(&t).map_err(with_key)?
            }
            Kind::Size => Value::Size(size(value)?),
            Kind::List => Value::List(
                value
                    .as_array()
                    .and_then(|a| a.iter().map(|v| v.as_str().map(str::to_owned)).collect())
                    .map(|v: Vec<String>| v.into_iter().filter(|s| !s.trim().is_empty()).collect())
                    .ok_or_else(|| anyhow!("`{key}` must be an array of strings"))?,
            ),
            Kind::SizeList => {
                let sizes = value
                    .as_array()
                    .ok_or_else(|| anyhow!("`{key}` must be an array of sizes"))?;
                Value::Sizes(sizes.iter().map(size).collect::<Result<_>>()?)
            }
            Kind::Addr | Kind::Choice(_) => self.parse(string()?).map_err(with_key)?,
        })
    }
}

/// A boolean of the config file.
pub fn bool_from_file(key: &str, value: &Toml) -> Result<bool> {
    match value.as_bool() {
        Some(b) => Ok(b),
        None => bail!("`{key}` must be true or false, not {}", value.type_str()),
    }
}

fn int_range(min: u64, max: u64) -> String {
    if max == u64::MAX || max == u64::from(u32::MAX) {
        format!("at least {min}")
    } else {
        format!("{min} to {max}")
    }
}

/// The clap argument of an option.
pub fn arg(o: &Opt) -> Arg {
    let mut arg = Arg::new(o.name).long(o.name).help(o.help);
    if let Some(env) = o.env_var() {
        arg = arg.env(env);
    }
    if let Some(default) = o.default {
        arg = arg.default_value(default);
    }
    if !o.value_name.is_empty() {
        arg = arg.value_name(o.value_name);
    }
    let kind = o.kind;
    match kind {
        Kind::Switch => arg.action(ArgAction::SetTrue),
        Kind::Bool => arg
            .value_parser(BoolishValueParser::new().map(Value::Bool))
            .num_args(0..=1)
            .require_equals(true)
            .default_missing_value("true")
            .action(ArgAction::Set),
        Kind::Choice(words) => arg
            .value_parser(
                PossibleValuesParser::new(words.iter().copied()).try_map(move |w| kind.parse(&w)),
            )
            .ignore_case(true),
        _ => {
            let arg = arg.value_parser(move |text: &str| kind.parse(text));
            let arg = match kind {
                Kind::Path => arg.value_hint(ValueHint::AnyPath),
                _ => arg,
            };
            if o.repeat {
                arg.action(ArgAction::Append)
            } else {
                arg.action(ArgAction::Set)
            }
        }
    }
}

/// What the config file sets, by option name.
pub type FileValues = BTreeMap<&'static str, Value>;

/// Whether a value came from the command line or the environment (not a default).
pub fn explicit(matches: &ArgMatches, id: &str) -> bool {
    matches!(
        matches.value_source(id),
        Some(ValueSource::CommandLine) | Some(ValueSource::EnvVariable)
    )
}

/// The options' values after precedence: command line, environment, config file, default.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Values(BTreeMap<&'static str, Value>);

impl Values {
    /// Resolve every option from the parsed command line and the file's values.
    pub fn resolve(matches: &ArgMatches, file: &FileValues) -> Result<Values> {
        let mut values = BTreeMap::new();
        for o in all() {
            let value = if o.kind == Kind::Switch {
                Some(Value::Bool(matches.get_flag(o.name)))
            } else if explicit(matches, o.name) {
                let mut given = matches
                    .get_many::<Value>(o.name)
                    .into_iter()
                    .flatten()
                    .cloned();
                if o.repeat {
                    let mut all = Vec::new();
                    for v in given {
                        if let Value::List(items) = v {
                            all.extend(items);
                        }
                    }
                    Some(Value::List(all))
                } else {
                    given.next_back()
                }
            } else if let Some(v) = file.get(o.name) {
                Some(v.clone())
            } else {
                match o.default {
                    Some(d) => Some(
                        o.kind
                            .parse(d)
                            .map_err(|e| anyhow!("the default of --{}: {e}", o.name))?,
                    ),
                    None => None,
                }
            };
            if let Some(v) = value {
                values.insert(o.name, v);
            }
        }
        Ok(Values(values))
    }

    fn get(&self, name: &str) -> Option<&Value> {
        self.0.get(name)
    }

    fn wrong(name: &str, what: &str) -> anyhow::Error {
        anyhow!("internal: option --{name} has no {what} value")
    }

    /// A boolean option.
    pub fn bool(&self, name: &str) -> Result<bool> {
        match self.get(name) {
            Some(Value::Bool(b)) => Ok(*b),
            _ => Err(Self::wrong(name, "boolean")),
        }
    }

    /// An integer option.
    pub fn int(&self, name: &str) -> Result<u64> {
        match self.get(name) {
            Some(Value::Int(n)) => Ok(*n),
            _ => Err(Self::wrong(name, "integer")),
        }
    }

    /// A duration option, milliseconds.
    pub fn millis(&self, name: &str) -> Result<u64> {
        match self.get(name) {
            Some(Value::Millis(n)) => Ok(*n),
            _ => Err(Self::wrong(name, "duration")),
        }
    }

    /// A size option, bytes.
    pub fn size(&self, name: &str) -> Result<usize> {
        match self.get(name) {
            Some(Value::Size(n)) => Ok(*n),
            _ => Err(Self::wrong(name, "size")),
        }
    }

    /// A text (or choice) option; `None` when unset or empty.
    pub fn text(&self, name: &str) -> Result<Option<String>> {
        match self.get(name) {
            Some(Value::Text(t)) => Ok(Some(t.clone()).filter(|t| !t.trim().is_empty())),
            None => Ok(None),
            _ => Err(Self::wrong(name, "text")),
        }
    }

    /// A text option with a default, as given (even empty).
    pub fn text_as_given(&self, name: &str) -> Result<String> {
        match self.get(name) {
            Some(Value::Text(t)) => Ok(t.clone()),
            _ => Err(Self::wrong(name, "text")),
        }
    }

    /// A path option; `None` when unset or empty.
    pub fn path(&self, name: &str) -> Result<Option<PathBuf>> {
        match self.get(name) {
            Some(Value::Path(p)) => Ok(Some(p.clone()).filter(|p| !p.as_os_str().is_empty())),
            None => Ok(None),
            _ => Err(Self::wrong(name, "path")),
        }
    }

    /// A path option with a default, as given (even empty).
    pub fn path_as_given(&self, name: &str) -> Result<PathBuf> {
        match self.get(name) {
            Some(Value::Path(p)) => Ok(p.clone()),
            _ => Err(Self::wrong(name, "path")),
        }
    }

    /// A list option (empty when unset).
    pub fn list(&self, name: &str) -> Result<Vec<String>> {
        match self.get(name) {
            Some(Value::List(l)) => Ok(l.clone()),
            None => Ok(Vec::new()),
            _ => Err(Self::wrong(name, "list")),
        }
    }

    /// A list of sizes.
    pub fn sizes(&self, name: &str) -> Result<Vec<usize>> {
        match self.get(name) {
            Some(Value::Sizes(l)) => Ok(l.clone()),
            _ => Err(Self::wrong(name, "list of sizes")),
        }
    }

    /// An address option.
    pub fn addr(&self, name: &str) -> Result<Option<SocketAddr>> {
        match self.get(name) {
            Some(Value::Addr(a)) => Ok(Some(*a)),
            None => Ok(None),
            _ => Err(Self::wrong(name, "address")),
        }
    }
}

/// The first line of the README's options table, and its last.
pub const README_BEGIN: &str =
    "<!-- options: generated from rdmad/src/options.rs by `rdmad --generate readme-options` -->";
/// See [`README_BEGIN`].
pub const README_END: &str = "<!-- options: end -->";

fn md(text: &str) -> String {
    text.replace('|', "\\|")
}

/// The flag as the README shows it (`--web.gzip-level LEVEL`, `--once`).
fn usage(o: &Opt) -> String {
    let mut s = format!("`--{}", o.name);
    match o.kind {
        Kind::Switch => {}
        Kind::Bool => s.push_str("[=BOOL]"),
        _ => {
            s.push(' ');
            s.push_str(o.value_name);
        }
    }
    s.push('`');
    if o.repeat {
        s.push_str(" (repeatable)");
    }
    md(&s)
}

/// The README's options table, between [`README_BEGIN`] and [`README_END`] (both included).
pub fn readme_table() -> String {
    let mut out = format!("{README_BEGIN}\n\n");
    out.push_str("| flag | env | config file key | default | meaning |\n");
    out.push_str("| --- | --- | --- | --- | --- |\n");
    let row = |out: &mut String, o: &Opt| {
        let code = |s: Option<String>| s.map(|s| md(&format!("`{s}`"))).unwrap_or_default();
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} |\n",
            usage(o),
            code(o.env_var()),
            code(o.file.then(|| o.name.to_string())),
            o.default
                .map(|d| code(Some(d.to_string())))
                .unwrap_or_else(|| "none".into()),
            md(o.help),
        ));
    };
    for o in GENERAL {
        row(&mut out, o);
    }
    out.push_str(
        "| `--collector.<name>[=BOOL]`, `--no-collector.<name>` | `RDMAD_COLLECTOR_<NAME>` | \
         `collector.<name>` | per collector (see [Collectors](#collectors)) | Enable or disable \
         one collector; the later flag wins. |\n",
    );
    for o in TABLE.iter().flat_map(|spec| spec.options.iter()) {
        row(&mut out, o);
    }
    for o in COMMANDS {
        row(&mut out, o);
    }
    out.push_str(&format!("\n{README_END}\n"));
    out
}
