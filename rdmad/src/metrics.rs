//! The metrics of one scrape and their two encodings.
//!
//! Collectors add samples to a [`MetricSet`]: families keyed by name (listed and encoded sorted, so the
//! exposition is deterministic and golden files diff cleanly), each with one HELP text, one
//! type and its samples in the order they were added. A second sample with the same labels is
//! refused ([`AddError::Duplicate`]) instead of producing an invalid exposition.
//!
//! Encoding goes through prometheus-client: the set is registered as a
//! [`prometheus_client::collector::Collector`] in a fresh registry and encoded either as
//! OpenMetrics 1.0 text ([`Format::OpenMetrics`], with `# EOF`) or as the Prometheus text
//! format 0.0.4 ([`Format::Text`], the default: no `# EOF`, counters' HELP/TYPE lines carry
//! the `_total` name, info metrics become gauges named `*_info`). Counter families are named
//! WITHOUT `_total` here; the encoders add it. Histograms ([`Kind::Histogram`] with
//! [`Value::Histogram`]) become `_bucket{le}` (cumulative, ending with `le="+Inf"`), `_sum`
//! and `_count` series in both formats. [`negotiate`] picks the format from the
//! request's `Accept` header the way Prometheus' own client libraries do.

use std::collections::HashMap;
use std::hash::{BuildHasher, BuildHasherDefault, Hasher};

use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

/// What a family is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Monotonic; the family name has no `_total` (the encoder adds it).
    Counter,
    /// A level.
    Gauge,
    /// Strings as labels on a constant 1; the family name has no `_info` (the encoder adds it).
    Info,
    /// A distribution; its samples are [`Value::Histogram`] and nothing else.
    Histogram,
}

impl Kind {
    /// The type as the exposition's `# TYPE` line spells it (text format 0.0.4, where an
    /// info family is a gauge).
    pub fn type_name(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge | Kind::Info => "gauge",
            Kind::Histogram => "histogram",
        }
    }

    /// The name a family added as `family` has in the text exposition: `_total` added to a
    /// counter, `_info` to an info family, a histogram's base name (its series add
    /// `_bucket`, `_sum`, `_count`).
    pub fn exposed_name(self, family: &str) -> String {
        match self {
            Kind::Counter => format!("{family}_total"),
            Kind::Info => format!("{family}_info"),
            Kind::Gauge | Kind::Histogram => family.to_owned(),
        }
    }
}

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

/// FNV-1a for the duplicate check: label sets are short and come from the kernel, not from
/// HTTP clients, so SipHash's flooding resistance buys nothing and costs a few percent of a
/// large scrape.
struct Fnv1a(u64);

impl Default for Fnv1a {
    fn default() -> Fnv1a {
        Fnv1a(0xcbf2_9ce4_8422_2325)
    }
}

impl Hasher for Fnv1a {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= u64::from(*b);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
    }
}

/// The label sets a family has, by hash: hash -> index of the first sample with that hash.
/// Keeping hashes instead of clones of the labels saves one allocation per label per sample.
type LabelSet = HashMap<u64, usize, BuildHasherDefault<Fnv1a>>;

fn label_hash(labels: &Labels) -> u64 {
    BuildHasherDefault::<Fnv1a>::default().hash_one(labels)
}

/// One family: HELP, type and samples.
#[derive(Debug, Clone)]
pub struct Family {
    help: String,
    kind: Kind,
    samples: Vec<(Labels, Value)>,
    seen: LabelSet,
}

impl Family {
    /// The HELP text.
    pub fn help(&self) -> &str {
        &self.help
    }

    /// The type.
    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// The samples, in the order they were added.
    pub fn samples(&self) -> &[(Labels, Value)] {
        &self.samples
    }
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
        if matches!(value, Value::Histogram(_)) != (kind == Kind::Histogram) {
            return Err(AddError::KindMismatch {
                name: name.to_owned(),
            });
        }
        let family = match self.families.get_mut(name) {
            Some(family) => family,
            None => self.families.entry(name.to_owned()).or_insert(Family {
                help: help(),
                kind,
                samples: Vec::new(),
                seen: LabelSet::default(),
            }),
        };
        if family.kind != kind {
            return Err(AddError::KindMismatch {
                name: name.to_owned(),
            });
        }
        let hash = label_hash(&labels);
        let index = family.samples.len();
        let duplicate = match family.seen.get(&hash) {
            None => {
                family.seen.insert(hash, index);
                false
            }
            // Same hash: the same labels, or (rarely) a collision, which only costs a scan.
            Some(&first) => {
                family.samples[first].0 == labels
                    || family.samples[first..].iter().any(|(l, _)| *l == labels)
            }
        };
        if duplicate {
            return Err(AddError::Duplicate {
                name: name.to_owned(),
            });
        }
        family.samples.push((labels, value));
        Ok(())
    }

    /// Add one sample of a declared family.
    pub fn add_declared(
        &mut self,
        family: &Declared,
        labels: Labels,
        value: Value,
    ) -> Result<(), AddError> {
        self.add(
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
            let family = match self.families.entry(name) {
                std::collections::hash_map::Entry::Vacant(slot) => {
                    slot.insert(family);
                    continue;
                }
                std::collections::hash_map::Entry::Occupied(slot) => (slot.key().clone(), family),
            };
            let (name, family) = family;
            let help = family.help;
            for (labels, value) in family.samples {
                if let Err(e) = self.add(&name, family.kind, || help.clone(), labels, value) {
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
        let mut registry = Registry::default();
        registry.register_collector(Box::new(self));
        let mut out = String::with_capacity(16 * 1024);
        // Writing into a String cannot fail, and our collector only fails when the writer does.
        let result = match format {
            Format::Text => {
                prometheus_client::encoding::prometheus_text::encode(&mut out, &registry)
            }
            Format::OpenMetrics => prometheus_client::encoding::text::encode(&mut out, &registry),
        };
        debug_assert!(result.is_ok(), "encoding into a String failed");
        out
    }
}

impl prometheus_client::collector::Collector for MetricSet {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        for (name, family) in self.sorted() {
            if family.samples.is_empty() {
                continue;
            }
            let metric_type = match family.kind {
                Kind::Counter => MetricType::Counter,
                Kind::Gauge => MetricType::Gauge,
                Kind::Info => MetricType::Info,
                Kind::Histogram => MetricType::Histogram,
            };
            let mut metric = encoder.encode_descriptor(name, &family.help, None, metric_type)?;
            for (labels, value) in &family.samples {
                match (family.kind, value) {
                    (Kind::Info, _) => metric.encode_info(labels)?,
                    (Kind::Counter, Value::Int(v)) => metric
                        .encode_family(labels)?
                        .encode_counter::<NoLabelSet, u64, u64>(v, None)?,
                    (Kind::Counter, Value::Float(v)) => metric
                        .encode_family(labels)?
                        .encode_counter::<NoLabelSet, f64, f64>(v, None)?,
                    (Kind::Gauge, Value::Int(v)) => {
                        metric.encode_family(labels)?.encode_gauge(v)?
                    }
                    (Kind::Gauge, Value::Float(v)) => {
                        metric.encode_family(labels)?.encode_gauge(v)?
                    }
                    (Kind::Histogram, Value::Histogram(h)) => {
                        // prometheus-client takes per-bucket counts (the last one +Inf) and
                        // accumulates them.
                        let per_bucket: Vec<(f64, u64)> = h.buckets().collect();
                        metric
                            .encode_family(labels)?
                            .encode_histogram::<NoLabelSet>(h.sum(), h.count(), &per_bucket, None)?
                    }
                    // `add` refuses every other combination.
                    (Kind::Counter | Kind::Gauge, Value::Histogram(_))
                    | (Kind::Histogram, Value::Int(_) | Value::Float(_)) => {}
                }
            }
        }
        Ok(())
    }
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
            Format::Text => prometheus_client::encoding::prometheus_text::CONTENT_TYPE,
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
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
    let mut best_openmetrics: f32 = 0.0;
    let mut best_text: f32 = 0.0;
    for range in accept.split(',') {
        let mut parts = range.split(';').map(str::trim);
        let media = parts.next().unwrap_or("").to_ascii_lowercase();
        let mut q: f32 = 1.0;
        let mut version: Option<String> = None;
        for param in parts {
            if let Some((k, v)) = param.split_once('=') {
                let (k, v) = (k.trim().to_ascii_lowercase(), v.trim().trim_matches('"'));
                match k.as_str() {
                    "q" => q = v.parse().unwrap_or(0.0),
                    "version" => version = Some(v.to_owned()),
                    _ => {}
                }
            }
        }
        match media.as_str() {
            "application/openmetrics-text"
                if matches!(version.as_deref(), None | Some("1.0.0") | Some("0.0.1")) =>
            {
                best_openmetrics = best_openmetrics.max(q);
            }
            "text/plain" | "text/*" | "*/*" => best_text = best_text.max(q),
            _ => {}
        }
    }
    if best_openmetrics > 0.0 && best_openmetrics >= best_text {
        Format::OpenMetrics
    } else {
        Format::Text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample_set() -> MetricSet {
        let mut set = MetricSet::new();
        let port = |p: &str| vec![("device", "mlx5_0".to_string()), ("port", p.to_string())];
        set.add(
            "rdma_port_symbol_error",
            Kind::Counter,
            || "Lane errors".into(),
            port("1"),
            Value::Int(7),
        )
        .unwrap();
        set.add(
            "rdma_port",
            Kind::Info,
            || "Port \"info\" with a \\ and\nnewline".into(),
            vec![("device", "a\"b\\c\nd".to_string())],
            Value::Int(1),
        )
        .unwrap();
        set.add(
            "rdma_scrape_collector_duration_seconds",
            Kind::Gauge,
            || "Duration".into(),
            vec![("collector", "x".to_string())],
            Value::Float(0.25),
        )
        .unwrap();
        set
    }

    #[test]
    fn text_format_has_total_on_help_and_type_and_no_eof() {
        let text = sample_set().encode(Format::Text);
        assert!(
            text.contains("# HELP rdma_port_symbol_error_total Lane errors\n"),
            "{text}"
        );
        assert!(
            text.contains("# TYPE rdma_port_symbol_error_total counter\n"),
            "{text}"
        );
        assert!(text.contains("rdma_port_symbol_error_total{device=\"mlx5_0\",port=\"1\"} 7\n"));
        assert!(text.contains("# TYPE rdma_port_info gauge\n"), "{text}");
        assert!(
            text.contains("rdma_port_info{device=\"a\\\"b\\\\c\\nd\"} 1\n"),
            "{text}"
        );
        assert!(text.contains("\\n"), "HELP newline escaped: {text}");
        assert!(!text.contains("# EOF"));
        assert!(!text.contains("_total_total"));
        assert!(text.contains("rdma_scrape_collector_duration_seconds{collector=\"x\"} 0.25\n"));
    }

    #[test]
    fn openmetrics_names_family_without_total_and_ends_with_eof() {
        let text = sample_set().encode(Format::OpenMetrics);
        assert!(
            text.contains("# TYPE rdma_port_symbol_error counter\n"),
            "{text}"
        );
        assert!(text.contains("rdma_port_symbol_error_total{device=\"mlx5_0\",port=\"1\"} 7\n"));
        assert!(text.contains("# TYPE rdma_port info\n"), "{text}");
        assert!(text.ends_with("# EOF\n"), "{text}");
    }

    #[test]
    fn families_are_sorted_and_empty_ones_omitted() {
        let mut set = sample_set();
        set.add("aaa", Kind::Gauge, || "first".into(), vec![], Value::Int(1))
            .unwrap();
        let text = set.encode(Format::Text);
        let first = text.lines().next().unwrap();
        assert_eq!(first, "# HELP aaa first");
    }

    #[test]
    fn duplicates_and_kind_mismatches_are_refused() {
        let mut set = sample_set();
        let dup = set.add(
            "rdma_port_symbol_error",
            Kind::Counter,
            || unreachable!("family exists"),
            vec![("device", "mlx5_0".into()), ("port", "1".into())],
            Value::Int(9),
        );
        assert!(matches!(dup, Err(AddError::Duplicate { .. })));
        let mismatch = set.add(
            "rdma_port_symbol_error",
            Kind::Gauge,
            String::new,
            vec![],
            Value::Int(9),
        );
        assert!(matches!(mismatch, Err(AddError::KindMismatch { .. })));
        let text = set.encode(Format::Text);
        assert_eq!(text.matches("rdma_port_symbol_error_total{").count(), 1);
    }

    #[test]
    fn histogram_values_only_in_histogram_families() {
        let mut set = MetricSet::new();
        let h = Histogram::from_buckets(&[1.0, 2.0], &[1, 2, 1], 9.5).unwrap();
        let as_gauge = set.add(
            "rdma_g",
            Kind::Gauge,
            String::new,
            vec![],
            Value::Histogram(h.clone()),
        );
        assert!(matches!(as_gauge, Err(AddError::KindMismatch { .. })));
        let int_in_histogram = set.add(
            "rdma_h",
            Kind::Histogram,
            String::new,
            vec![],
            Value::Int(1),
        );
        assert!(matches!(
            int_in_histogram,
            Err(AddError::KindMismatch { .. })
        ));
        set.add(
            "rdma_h",
            Kind::Histogram,
            || "h".into(),
            vec![("device", "rxe0".into())],
            Value::Histogram(h),
        )
        .unwrap();
        let text = set.clone().encode(Format::Text);
        assert!(text.contains("# TYPE rdma_h histogram\n"), "{text}");
        assert!(
            text.contains("rdma_h_bucket{device=\"rxe0\",le=\"2\"} 3\n"),
            "{text}"
        );
        assert!(
            text.contains("rdma_h_bucket{device=\"rxe0\",le=\"+Inf\"} 4\n"),
            "{text}"
        );
        assert!(text.contains("rdma_h_count{device=\"rxe0\"} 4\n"), "{text}");
        let om = set.encode(Format::OpenMetrics);
        assert!(
            om.contains("rdma_h_bucket{le=\"+Inf\",device=\"rxe0\"} 4\n"),
            "{om}"
        );
        assert!(om.contains("rdma_h_sum{device=\"rxe0\"} 9.5\n"), "{om}");
    }

    #[test]
    fn merge_reports_refused_samples() {
        let mut a = sample_set();
        let refused = a.merge(sample_set());
        assert_eq!(refused.len(), 3);
        let mut b = MetricSet::new();
        assert!(b.merge(sample_set()).is_empty());
        assert_eq!(b.names().count(), 3);
    }

    #[test]
    fn negotiation() {
        assert_eq!(negotiate(None), Format::Text);
        assert_eq!(negotiate(Some("*/*")), Format::Text);
        assert_eq!(negotiate(Some("text/plain;version=0.0.4")), Format::Text);
        let prometheus = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert_eq!(negotiate(Some(prometheus)), Format::OpenMetrics);
        assert_eq!(
            negotiate(Some("application/openmetrics-text; version=1.0.0")),
            Format::OpenMetrics
        );
        assert_eq!(
            negotiate(Some("application/openmetrics-text;version=2.0.0")),
            Format::Text,
            "unknown OpenMetrics versions fall back to text"
        );
        assert_eq!(
            negotiate(Some("text/plain;q=0.9,application/openmetrics-text;q=0.5")),
            Format::Text
        );
        assert_eq!(
            negotiate(Some("application/openmetrics-text;q=0")),
            Format::Text
        );
    }
}
