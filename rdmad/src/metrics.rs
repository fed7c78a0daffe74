//! The metrics of one scrape and their two encodings.
//!
//! Collectors add samples to a [`MetricSet`]: families keyed by name (listed and encoded sorted, so the
//! exposition is deterministic and golden files diff cleanly), each with one HELP text, one
//! type and its samples in the order they were added. A second sample with the same labels is
//! refused ([`AddError::Duplicate`]) instead of producing an invalid exposition.
//!
//! Encoding writes straight into one buffer ([`MetricSet::encode_into`]) either OpenMetrics
//! 1.0 text ([`Format::OpenMetrics`], with `# EOF`) or the Prometheus text format 0.0.4
//! ([`Format::Text`], the default: no `# EOF`, counters' HELP/TYPE lines carry the `_total`
//! name, info metrics become gauges named `*_info`), byte for byte as prometheus-client
//! writes them (a differential test encodes varied sets with both). Counter families are
//! named WITHOUT `_total` here; the encoders add it. Histograms ([`Kind::Histogram`] with
//! [`Value::Histogram`]) become `_bucket{le}` (cumulative, ending with `le="+Inf"`), `_sum`
//! and `_count` series in both formats. [`negotiate`] picks the format from the
//! request's `Accept` header the way Prometheus' own client libraries do.

use std::collections::HashMap;
use std::hash::{BuildHasher, BuildHasherDefault};
use std::sync::atomic::{AtomicUsize, Ordering};

/// What a family is: the workspace's one kind type, [`rdmakit::catalog::Kind`] (counter,
/// gauge, info, histogram), with the exposition's names ([`Kind::exposed_name`]). A counter
/// file's family has the counter's own kind.
pub use rdmakit::catalog::Kind;

/// A metric family as rdmad declares it: the name collectors add it under (no `_total` or
/// `_info`, see [`Kind::exposed_name`]), its type and HELP text. Collectors add samples of
/// fixed families only through their declaration ([`MetricSet::add_declared`]) and list
/// the declarations in their table row, which is what `rdmad --print-metrics` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Declared {
    /// The family name, without `_total` (counters) or `_info` (info families).
    pub name: &'static str,
    /// The type.
    pub kind: Kind,
    /// The HELP text.
    pub help: &'static str,
}

impl Declared {
    /// A counter family.
    pub const fn counter(name: &'static str, help: &'static str) -> Declared {
        Declared {
            name,
            kind: Kind::Counter,
            help,
        }
    }

    /// A gauge family.
    pub const fn gauge(name: &'static str, help: &'static str) -> Declared {
        Declared {
            name,
            kind: Kind::Gauge,
            help,
        }
    }

    /// An info family.
    pub const fn info(name: &'static str, help: &'static str) -> Declared {
        Declared {
            name,
            kind: Kind::Info,
            help,
        }
    }

    /// A histogram family.
    pub const fn histogram(name: &'static str, help: &'static str) -> Declared {
        Declared {
            name,
            kind: Kind::Histogram,
            help,
        }
    }
}

/// A sample value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// An exact unsigned integer (counters, most gauges).
    Int(u64),
    /// A float (durations, converted units).
    Float(f64),
    /// A histogram (only in [`Kind::Histogram`] families).
    Histogram(Histogram),
}

/// One histogram sample: the workspace's one histogram type (fixed bounds, per-bucket
/// counts, `+Inf`, sum and count), encoded as it is.
pub use rdmakit::histogram::Histogram;

/// Label names are fixed by the code; values come from the system.
pub type Labels = Vec<(&'static str, String)>;

/// The duplicate check hashes a sample's encoded label text: label sets are short and come
/// from the kernel, not from HTTP clients, so SipHash's flooding resistance buys nothing and
/// costs a few percent of a large scrape.
type LabelSet = HashMap<u64, usize, BuildHasherDefault<rustc_hash::FxHasher>>;

fn text_hash(text: &str) -> u64 {
    BuildHasherDefault::<rustc_hash::FxHasher>::default().hash_one(text.as_bytes())
}

/// One sample: where its encoded labels are in the family's label text, and its value.
#[derive(Debug, Clone)]
struct Sample {
    labels: std::ops::Range<usize>,
    value: Value,
}

/// One family: HELP, type and samples.
///
/// A sample's labels are kept as they appear in the exposition, escaped and without braces
/// (`device="mlx5_0",port="1"`), appended to one string per family: one allocation per family
/// instead of one per label, a duplicate check that compares bytes, and an encoder that
/// copies them. Label names are fixed by the code and values are escaped, so two label lists
/// are equal exactly when their texts are.
#[derive(Debug, Clone)]
pub struct Family {
    help: String,
    kind: Kind,
    label_text: String,
    samples: Vec<Sample>,
    seen: LabelSet,
}

impl Family {
    fn new(help: String, kind: Kind) -> Family {
        Family {
            help,
            kind,
            label_text: String::new(),
            samples: Vec::new(),
            seen: LabelSet::default(),
        }
    }

    /// The HELP text.
    pub fn help(&self) -> &str {
        &self.help
    }

    /// The type.
    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// How many samples it has.
    pub fn len(&self) -> usize {
        self.samples.len()
    }

    /// Whether it has no sample.
    pub fn is_empty(&self) -> bool {
        self.samples.is_empty()
    }

    /// The samples in the order they were added: each one's labels as the exposition
    /// writes them between the braces (escaped), and its value.
    pub fn samples(&self) -> impl Iterator<Item = (&str, &Value)> + '_ {
        self.samples
            .iter()
            .map(|s| (&self.label_text[s.labels.clone()], &s.value))
    }

    /// Append a sample whose label text `write` appends to the family's; false (and nothing
    /// kept) when the family has a sample with the same labels.
    fn push(&mut self, write: impl FnOnce(&mut String), value: Value) -> bool {
        let start = self.label_text.len();
        write(&mut self.label_text);
        let labels = start..self.label_text.len();
        let text = &self.label_text[labels.clone()];
        let index = self.samples.len();
        let duplicate = match self.seen.entry(text_hash(text)) {
            std::collections::hash_map::Entry::Vacant(slot) => {
                slot.insert(index);
                false
            }
            // Same hash: the same labels, or (rarely) a collision, which only costs a scan.
            std::collections::hash_map::Entry::Occupied(slot) => self.samples[*slot.get()..]
                .iter()
                .any(|s| self.label_text[s.labels.clone()] == *text),
        };
        if duplicate {
            self.label_text.truncate(start);
            return false;
        }
        self.samples.push(Sample { labels, value });
        true
    }
}

/// Append `labels` as the exposition writes them between the braces.
fn write_labels<V: AsRef<str>>(out: &mut String, labels: &[(&'static str, V)]) {
    for (i, (name, value)) in labels.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(name);
        out.push_str("=\"");
        write_escaped(out, value.as_ref(), true);
        out.push('"');
    }
}

/// Append `text` with `\` and newlines escaped, and `"` too when `quote` (label values;
/// HELP text in the text format escapes only the first two).
fn write_escaped(out: &mut String, text: &str, quote: bool) {
    let special = |b: u8| b == b'\\' || b == b'\n' || (quote && b == b'"');
    if !text.bytes().any(special) {
        out.push_str(text);
        return;
    }
    let mut last = 0;
    for (i, b) in text.bytes().enumerate() {
        let escaped = match b {
            b'\\' => "\\\\",
            b'\n' => "\\n",
            b'"' if quote => "\\\"",
            _ => continue,
        };
        out.push_str(&text[last..i]);
        out.push_str(escaped);
        last = i + 1;
    }
    out.push_str(&text[last..]);
}

/// Why a sample was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AddError {
    /// The family already has a sample with exactly these labels.
    Duplicate {
        /// The family name.
        name: String,
    },
    /// The family exists with another type, or the value does not fit the type (a
    /// histogram value outside a histogram family, or the reverse).
    KindMismatch {
        /// The family name.
        name: String,
    },
}

impl std::fmt::Display for AddError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AddError::Duplicate { name } => write!(f, "duplicate series in family {name}"),
            AddError::KindMismatch { name } => {
                write!(
                    f,
                    "family {name} was already added with another type, or the value does not fit its type"
                )
            }
        }
    }
}

impl std::error::Error for AddError {}

/// The size of the last exposition this process encoded: the next one's buffer is
/// allocated once, at about that size, instead of doubling its way up.
static LAST_ENCODED_LEN: AtomicUsize = AtomicUsize::new(0);

/// All families of one scrape (or of one collector, before merging).
#[derive(Debug, Clone, Default)]
pub struct MetricSet {
    /// By name; sorted when listed or encoded (a hash lookup per sample instead of a walk of
    /// string comparisons down a tree: names share long prefixes like `rdma_port_hw_`).
    families: rustc_hash::FxHashMap<String, Family>,
}

impl MetricSet {
    /// An empty set.
    pub fn new() -> MetricSet {
        MetricSet::default()
    }

    /// Add one sample. `help` is only called when the family is new: the first HELP wins.
    pub fn add(
        &mut self,
        name: &str,
        kind: Kind,
        help: impl FnOnce() -> String,
        labels: Labels,
        value: Value,
    ) -> Result<(), AddError> {
        self.add_labels(name, kind, help, &labels, value)
    }

    /// [`MetricSet::add`] with borrowed label values (`&[("device", name.as_str())]`): the
    /// same checks, no allocation per label.
    pub fn add_labels<V: AsRef<str>>(
        &mut self,
        name: &str,
        kind: Kind,
        help: impl FnOnce() -> String,
        labels: &[(&'static str, V)],
        value: Value,
    ) -> Result<(), AddError> {
        self.add_with(name, kind, help, |out| write_labels(out, labels), value)
    }

    fn add_with(
        &mut self,
        name: &str,
        kind: Kind,
        help: impl FnOnce() -> String,
        write: impl FnOnce(&mut String),
        value: Value,
    ) -> Result<(), AddError> {
        if matches!(value, Value::Histogram(_)) != (kind == Kind::Histogram) {
            return Err(AddError::KindMismatch {
                name: name.to_owned(),
            });
        }
        let family = match self.families.get_mut(name) {
            Some(family) => family,
            None => self
                .families
                .entry(name.to_owned())
                .or_insert_with(|| Family::new(help(), kind)),
        };
        if family.kind != kind {
            return Err(AddError::KindMismatch {
                name: name.to_owned(),
            });
        }
        if !family.push(write, value) {
            return Err(AddError::Duplicate {
                name: name.to_owned(),
            });
        }
        Ok(())
    }

    /// Add one sample of a declared family.
    pub fn add_declared(
        &mut self,
        family: &Declared,
        labels: Labels,
        value: Value,
    ) -> Result<(), AddError> {
        self.add_declared_labels(family, &labels, value)
    }

    /// [`MetricSet::add_declared`] with borrowed label values.
    pub fn add_declared_labels<V: AsRef<str>>(
        &mut self,
        family: &Declared,
        labels: &[(&'static str, V)],
        value: Value,
    ) -> Result<(), AddError> {
        self.add_labels(
            family.name,
            family.kind,
            || family.help.to_owned(),
            labels,
            value,
        )
    }

    /// Move every sample of `other` into `self`; returns the samples refused. A family
    /// `self` does not have yet is moved whole (no sample is re-checked).
    pub fn merge(&mut self, other: MetricSet) -> Vec<AddError> {
        let mut refused = Vec::new();
        for (name, family) in other.families {
            let name = match self.families.entry(name) {
                std::collections::hash_map::Entry::Vacant(slot) => {
                    slot.insert(family);
                    continue;
                }
                std::collections::hash_map::Entry::Occupied(slot) => slot.key().clone(),
            };
            let Family {
                help,
                kind,
                label_text,
                samples,
                ..
            } = family;
            for sample in samples {
                let text = &label_text[sample.labels];
                let added = self.add_with(
                    &name,
                    kind,
                    || help.clone(),
                    |out| out.push_str(text),
                    sample.value,
                );
                if let Err(e) = added {
                    refused.push(e);
                }
            }
        }
        refused
    }

    /// The family called `name`.
    pub fn family(&self, name: &str) -> Option<&Family> {
        self.families.get(name)
    }

    /// Family names, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        let mut names: Vec<&str> = self.families.keys().map(String::as_str).collect();
        names.sort_unstable();
        names.into_iter()
    }

    /// The families, sorted by name.
    fn sorted(&self) -> Vec<(&String, &Family)> {
        let mut families: Vec<(&String, &Family)> = self.families.iter().collect();
        families.sort_unstable_by(|a, b| a.0.cmp(b.0));
        families
    }

    /// Encode in `format`.
    pub fn encode(self, format: Format) -> String {
        let hint = LAST_ENCODED_LEN.load(Ordering::Relaxed);
        let mut out = String::with_capacity((hint + hint / 8).clamp(16 * 1024, 64 << 20));
        self.encode_into(format, &mut out);
        LAST_ENCODED_LEN.store(out.len(), Ordering::Relaxed);
        out
    }

    /// Append the exposition in `format` to `out`: the Prometheus text format 0.0.4 or
    /// OpenMetrics 1.0.0, byte for byte what prometheus-client writes for the same families
    /// (the differential test in this module checks it), written straight into one buffer.
    pub fn encode_into(&self, format: Format, out: &mut String) {
        let mut numbers = Numbers::default();
        for (name, family) in self.sorted() {
            if family.samples.is_empty() {
                continue;
            }
            encode_family(out, &mut numbers, format, name, family);
        }
        if format == Format::OpenMetrics {
            out.push_str("# EOF\n");
        }
    }
}

/// Number formatting on the stack: integers with `itoa`, floats with `dtoa`, the crates
/// prometheus-client formats with (so values read the same as before).
#[derive(Default)]
struct Numbers {
    int: itoa::Buffer,
    float: dtoa::Buffer,
}

impl Numbers {
    fn int(&mut self, v: u64) -> &str {
        self.int.format(v)
    }

    /// A float as OpenMetrics writes it (`dtoa`, non-finite as `NaN`, `inf`, `-inf`).
    fn float(&mut self, v: f64) -> &str {
        self.float.format(v)
    }

    /// A float as the text format writes it: `NaN`, `+Inf`, `-Inf` for the non-finite ones.
    fn text_float(&mut self, v: f64) -> &str {
        if v.is_finite() {
            self.float.format_finite(v)
        } else {
            non_finite(v)
        }
    }

    /// A float as Go's `strconv.FormatFloat(v, 'g', -1, 64)` writes it (the text format's
    /// `le` labels, as Go clients write them): whole numbers under 1e6 as integers, plain
    /// digits in [1e-4, 1e6), else the shortest digits with a signed two-digit exponent
    /// (`1e+06`, `2.5e-05`).
    fn go_float(&mut self, out: &mut String, v: f64) {
        use std::fmt::Write;
        if v.fract() == 0.0 && v.abs() < 1e6 {
            // Exact: |v| < 1e6 is a whole number.
            let whole = v as i64;
            out.push_str(itoa::Buffer::new().format(whole));
        } else if (1e-4..1e6).contains(&v.abs()) {
            let _ = write!(out, "{v}");
        } else if !v.is_finite() {
            out.push_str(non_finite(v));
        } else {
            let mut sci = String::with_capacity(32);
            let _ = write!(sci, "{v:e}");
            let (mantissa, exponent) = sci.split_once('e').unwrap_or((&sci, "0"));
            let exponent: i32 = exponent.parse().unwrap_or(0);
            let _ = write!(out, "{mantissa}e{exponent:+03}");
        }
    }
}

fn non_finite(v: f64) -> &'static str {
    if v.is_nan() {
        "NaN"
    } else if v.is_sign_positive() {
        "+Inf"
    } else {
        "-Inf"
    }
}

/// `name{labels}` (no braces for no labels), with `suffix` after the name.
fn write_series(out: &mut String, name: &str, suffix: &str, labels: &str) {
    out.push_str(name);
    out.push_str(suffix);
    if !labels.is_empty() {
        out.push('{');
        out.push_str(labels);
        out.push('}');
    }
}

/// One family in `format`. The two formats differ only where [`Format`]'s helpers below
/// say: the name on HELP and TYPE lines, HELP escaping, the info type, float spelling and
/// a histogram's layout (text: buckets with `le` last, then `_sum` and `_count`;
/// OpenMetrics: `_sum`, `_count`, then buckets with `le` first).
fn encode_family(
    out: &mut String,
    numbers: &mut Numbers,
    format: Format,
    name: &str,
    family: &Family,
) {
    let kind = family.kind;
    let suffix = kind.suffix();
    for (line, rest) in [("# HELP ", None), ("# TYPE ", Some(format.type_name(kind)))] {
        out.push_str(line);
        out.push_str(name);
        if format == Format::Text {
            out.push_str(suffix);
        }
        out.push(' ');
        match rest {
            Some(type_name) => out.push_str(type_name),
            None if format == Format::Text => write_escaped(out, &family.help, false),
            None => out.push_str(&family.help),
        }
        out.push('\n');
    }
    for (labels, value) in family.samples() {
        let scalar = match (kind, value) {
            (Kind::Info, _) => "1",
            (Kind::Counter | Kind::Gauge, Value::Int(v)) => numbers.int(*v),
            (Kind::Counter | Kind::Gauge, Value::Float(v)) => format.float(numbers, *v),
            (Kind::Histogram, Value::Histogram(h)) => {
                if format == Format::OpenMetrics {
                    write_histogram_totals(out, numbers, format, name, labels, h);
                }
                let mut cumulative = 0u64;
                // The buckets always end with `+Inf` (Histogram::buckets).
                for (le, count) in h.buckets() {
                    cumulative = cumulative.wrapping_add(count);
                    out.push_str(name);
                    out.push_str("_bucket{");
                    if format == Format::Text {
                        out.push_str(labels);
                        if !labels.is_empty() {
                            out.push(',');
                        }
                    }
                    out.push_str("le=\"");
                    format.write_le(out, numbers, le);
                    out.push('"');
                    if format == Format::OpenMetrics && !labels.is_empty() {
                        out.push(',');
                        out.push_str(labels);
                    }
                    out.push_str("} ");
                    out.push_str(numbers.int(cumulative));
                    out.push('\n');
                }
                if format == Format::Text {
                    write_histogram_totals(out, numbers, format, name, labels, h);
                }
                continue;
            }
            // `add` refuses every other combination.
            (Kind::Counter | Kind::Gauge, Value::Histogram(_))
            | (Kind::Histogram, Value::Int(_) | Value::Float(_)) => continue,
        };
        write_series(out, name, suffix, labels);
        out.push(' ');
        out.push_str(scalar);
        out.push('\n');
    }
}

/// A histogram's `_sum` and `_count` series.
fn write_histogram_totals(
    out: &mut String,
    numbers: &mut Numbers,
    format: Format,
    name: &str,
    labels: &str,
    h: &Histogram,
) {
    write_series(out, name, "_sum", labels);
    out.push(' ');
    out.push_str(format.float(numbers, h.sum()));
    out.push('\n');
    write_series(out, name, "_count", labels);
    out.push(' ');
    out.push_str(numbers.int(h.count()));
    out.push('\n');
}

/// An exposition format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// The Prometheus text format 0.0.4 (the default).
    Text,
    /// OpenMetrics 1.0.0 text.
    OpenMetrics,
}

impl Format {
    /// The `Content-Type` of a response in this format.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::Text => "text/plain; version=0.0.4; charset=utf-8",
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
        }
    }

    /// The type on a family's `# TYPE` line: the text format has no info type (a gauge).
    fn type_name(self, kind: Kind) -> &'static str {
        match (self, kind) {
            (Format::OpenMetrics, Kind::Info) => "info",
            _ => kind.type_name(),
        }
    }

    /// A float value: OpenMetrics as `dtoa` writes it (`NaN`, `inf`, `-inf` for the
    /// non-finite ones), the text format with `NaN`, `+Inf`, `-Inf`.
    fn float(self, numbers: &mut Numbers, v: f64) -> &str {
        match self {
            Format::Text => numbers.text_float(v),
            Format::OpenMetrics => numbers.float(v),
        }
    }

    /// A bucket's `le` bound: the text format as Go clients write it, OpenMetrics as `dtoa`
    /// does, `+Inf` in both.
    fn write_le(self, out: &mut String, numbers: &mut Numbers, le: f64) {
        match self {
            Format::Text => numbers.go_float(out, le),
            Format::OpenMetrics if le == f64::INFINITY => out.push_str("+Inf"),
            Format::OpenMetrics => out.push_str(numbers.float(le)),
        }
    }
}

/// Pick the format from an `Accept` header: OpenMetrics when the client ranks
/// `application/openmetrics-text` (versions 1.0.0 or 0.0.1, or no version) at least as high
/// as the text format, else the text format 0.0.4. Prometheus sends
/// `application/openmetrics-text;version=1.0.0,...,text/plain;version=0.0.4;q=0.5,*/*;q=0.1`
/// when its scrape config allows OpenMetrics, and mostly `text/plain` otherwise.
pub fn negotiate(accept: Option<&str>) -> Format {
    let Some(accept) = accept else {
        return Format::Text;
    };
    // Weights in thousandths; a malformed one counts as 0.
    let mut best_openmetrics: u16 = 0;
    let mut best_text: u16 = 0;
    for item in crate::encoding::weighted_items(accept) {
        let q = item.q.unwrap_or(0);
        let version = item
            .params
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case("version"))
            .map(|(_, v)| *v);
        match item.name.to_ascii_lowercase().as_str() {
            "application/openmetrics-text"
                if matches!(version, None | Some("1.0.0") | Some("0.0.1")) =>
            {
                best_openmetrics = best_openmetrics.max(q);
            }
            "text/plain" | "text/*" | "*/*" => best_text = best_text.max(q),
            _ => {}
        }
    }
    if best_openmetrics > 0 && best_openmetrics >= best_text {
        Format::OpenMetrics
    } else {
        Format::Text
    }
}

#[cfg(test)]
mod tests;
