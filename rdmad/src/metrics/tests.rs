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

/// The samples a reference set holds: what prometheus-client encodes.
type Record = (String, Kind, String, Labels, Value);

/// The families of `records` as prometheus-client encodes them (sorted by name, first
/// HELP of a name wins, samples in order): the encoder rdmad used before its own.
#[derive(Debug)]
struct Reference(Vec<Record>);

impl prometheus_client::collector::Collector for Reference {
    fn encode(
        &self,
        mut encoder: prometheus_client::encoding::DescriptorEncoder,
    ) -> Result<(), std::fmt::Error> {
        use prometheus_client::encoding::NoLabelSet;
        use prometheus_client::metrics::MetricType;
        let mut names: Vec<&str> = self.0.iter().map(|r| r.0.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        for name in names {
            let mut records = self.0.iter().filter(|r| r.0 == name).peekable();
            let (_, kind, help, _, _) = records.peek().expect("one record");
            let metric_type = match kind {
                Kind::Counter => MetricType::Counter,
                Kind::Gauge => MetricType::Gauge,
                Kind::Info => MetricType::Info,
                Kind::Histogram => MetricType::Histogram,
            };
            let mut metric = encoder.encode_descriptor(name, help, None, metric_type)?;
            for (_, kind, _, labels, value) in records {
                match (kind, value) {
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
                        let per_bucket: Vec<(f64, u64)> = h.buckets().collect();
                        metric
                            .encode_family(labels)?
                            .encode_histogram::<NoLabelSet>(h.sum(), h.count(), &per_bucket, None)?
                    }
                    _ => unreachable!("add refuses it"),
                }
            }
        }
        Ok(())
    }
}

fn reference_encode(records: Vec<Record>, format: Format) -> String {
    let mut registry = prometheus_client::registry::Registry::default();
    registry.register_collector(Box::new(Reference(records)));
    let mut out = String::new();
    match format {
        Format::Text => prometheus_client::encoding::prometheus_text::encode(&mut out, &registry),
        Format::OpenMetrics => prometheus_client::encoding::text::encode(&mut out, &registry),
    }
    .expect("encodes");
    out
}

/// Samples of every kind, value and escaping the exporter can meet, added to a set
/// and kept (when `add` accepts them) for the reference.
fn varied() -> (MetricSet, Vec<Record>) {
    let mut set = MetricSet::new();
    let mut records = Vec::new();
    let l = |pairs: &[(&'static str, &str)]| -> Labels {
        pairs.iter().map(|(k, v)| (*k, v.to_string())).collect()
    };
    let floats = [
        0.0,
        -0.0,
        0.25,
        1.0,
        -3.5,
        1e-7,
        1.5e-4,
        123456.789,
        1e6,
        2.5e15,
        1e21,
        1.7976931348623157e308,
        f64::MIN_POSITIVE,
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
    ];
    let ints = [0, 1, 42, 1 << 53, u64::MAX];
    let values = [
        "mlx5_0",
        "",
        "a\"b",
        "back\\slash",
        "new\nline",
        "\\\"\n\\",
        "ü ∞",
    ];
    let helps = [
        "Plain help",
        "Help with a \\ backslash",
        "Help with a\nnewline and \"quotes\"",
        "",
    ];
    let mut add = |name: &str, kind: Kind, help: &str, labels: Labels, value: Value| {
        let ok = set
            .add(
                name,
                kind,
                || help.to_string(),
                labels.clone(),
                value.clone(),
            )
            .is_ok();
        if ok {
            records.push((name.to_string(), kind, help.to_string(), labels, value));
        }
    };
    for (i, v) in ints.iter().enumerate() {
        let port = i.to_string();
        add(
            "rdma_c_int",
            Kind::Counter,
            helps[1],
            l(&[("device", "d"), ("port", &port)]),
            Value::Int(*v),
        );
        add(
            "rdma_g_int",
            Kind::Gauge,
            helps[2],
            l(&[("device", values[i % values.len()])]),
            Value::Int(*v),
        );
    }
    for (i, v) in floats.iter().enumerate() {
        let n = i.to_string();
        add(
            "rdma_c_float",
            Kind::Counter,
            helps[0],
            l(&[("n", &n)]),
            Value::Float(*v),
        );
        add(
            "rdma_g_float",
            Kind::Gauge,
            helps[3],
            l(&[("n", &n), ("x", values[i % values.len()])]),
            Value::Float(*v),
        );
    }
    // Int and Float samples in one counter family, and one with no labels at all.
    add("rdma_mixed", Kind::Counter, helps[2], vec![], Value::Int(3));
    add(
        "rdma_mixed",
        Kind::Counter,
        helps[0],
        l(&[("k", "v")]),
        Value::Float(0.5),
    );
    add(
        "rdma_bare",
        Kind::Gauge,
        helps[0],
        vec![],
        Value::Float(f64::NAN),
    );
    for (i, v) in values.iter().enumerate() {
        let port = i.to_string();
        add(
            "rdma_port",
            Kind::Info,
            helps[2],
            l(&[("device", v), ("port", &port), ("empty", "")]),
            Value::Int(1),
        );
    }
    add("rdma_lonely", Kind::Info, helps[1], vec![], Value::Int(1));
    let bounds = [
        -2.0, 1e-5, 1.5e-4, 0.001, 0.5, 1.0, 2.5, 123456.789, 1e6, 1e7, 2.5e15,
    ];
    let counts: Vec<u64> = (1..=bounds.len() as u64 + 1).collect();
    let h1 = Histogram::from_buckets(&bounds, &counts, 1234.5).unwrap();
    let h2 = Histogram::from_buckets(&[], &[0], 0.0).unwrap();
    let h3 = Histogram::from_buckets(&[0.1], &[2, 0], f64::INFINITY).unwrap();
    add(
        "rdma_h",
        Kind::Histogram,
        helps[2],
        l(&[("device", "a\"b"), ("port", "1")]),
        Value::Histogram(h1.clone()),
    );
    add(
        "rdma_h",
        Kind::Histogram,
        helps[0],
        vec![],
        Value::Histogram(h2),
    );
    add(
        "rdma_h",
        Kind::Histogram,
        helps[0],
        l(&[("device", "x")]),
        Value::Histogram(h3),
    );
    add(
        "rdma_h_bare",
        Kind::Histogram,
        helps[1],
        vec![],
        Value::Histogram(h1),
    );
    // Refused ones stay out of both.
    add(
        "rdma_c_int",
        Kind::Counter,
        helps[0],
        l(&[("device", "d"), ("port", "0")]),
        Value::Int(9),
    );
    add("rdma_bare", Kind::Counter, helps[0], vec![], Value::Int(1));
    (set, records)
}

#[test]
fn encoding_is_byte_identical_to_prometheus_client() {
    for format in [Format::Text, Format::OpenMetrics] {
        let (set, records) = varied();
        assert!(records.len() > 40, "{}", records.len());
        let ours = set.encode(format);
        let reference = reference_encode(records, format);
        assert_eq!(ours, reference, "{format:?}");
    }
    // Empty: nothing (text), only the EOF (OpenMetrics).
    for format in [Format::Text, Format::OpenMetrics] {
        assert_eq!(
            MetricSet::new().encode(format),
            reference_encode(Vec::new(), format)
        );
    }
    assert_eq!(
        Format::Text.content_type(),
        prometheus_client::encoding::prometheus_text::CONTENT_TYPE
    );
}

#[test]
fn merged_sets_encode_like_one() {
    let (whole, _) = varied();
    let (mut a, _) = varied();
    // Merging a set into itself refuses every sample and changes nothing.
    let (again, records) = varied();
    assert_eq!(a.merge(again).len(), records.len());
    for format in [Format::Text, Format::OpenMetrics] {
        assert_eq!(a.clone().encode(format), whole.clone().encode(format));
    }
}

#[test]
fn borrowed_labels_are_the_same_series_as_owned_ones() {
    let mut set = MetricSet::new();
    set.add_labels(
        "rdma_x",
        Kind::Gauge,
        || "x".into(),
        &[("device", "a\"b"), ("port", "1")],
        Value::Int(1),
    )
    .unwrap();
    let dup = set.add(
        "rdma_x",
        Kind::Gauge,
        String::new,
        vec![("device", "a\"b".into()), ("port", "1".into())],
        Value::Int(2),
    );
    assert!(matches!(dup, Err(AddError::Duplicate { .. })));
    let family = set.family("rdma_x").unwrap();
    assert_eq!(family.len(), 1);
    let samples: Vec<_> = family.samples().collect();
    assert_eq!(samples, [("device=\"a\\\"b\",port=\"1\"", &Value::Int(1))]);
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

/// One family of every kind (labelled and bare series, an escaped HELP, int and float
/// values, a histogram with and without labels), for the pinned expositions below.
fn every_kind_set() -> MetricSet {
    let mut set = MetricSet::new();
    let dev = |d: &str| vec![("device", d.to_string())];
    let add = |set: &mut MetricSet, name, kind, help: &str, labels, value| {
        let help = help.to_string();
        set.add(name, kind, || help, labels, value).unwrap();
    };
    add(
        &mut set,
        "c",
        Kind::Counter,
        "A \\ count\nof \"x\"",
        dev("d0"),
        Value::Int(7),
    );
    add(
        &mut set,
        "c",
        Kind::Counter,
        "ignored",
        vec![],
        Value::Float(1.5),
    );
    add(
        &mut set,
        "g",
        Kind::Gauge,
        "A level",
        dev("d0"),
        Value::Float(0.25),
    );
    add(
        &mut set,
        "g",
        Kind::Gauge,
        "",
        dev("d1"),
        Value::Float(f64::INFINITY),
    );
    add(
        &mut set,
        "i",
        Kind::Info,
        "Facts",
        dev("a\"b"),
        Value::Int(1),
    );
    let h = Histogram::from_buckets(&[0.5, 2e6], &[1, 2, 3], 9.5).unwrap();
    add(
        &mut set,
        "h",
        Kind::Histogram,
        "Times",
        dev("d0"),
        Value::Histogram(h.clone()),
    );
    add(
        &mut set,
        "h",
        Kind::Histogram,
        "",
        vec![],
        Value::Histogram(h),
    );
    set
}

#[test]
fn every_kind_encodes_as_pinned_in_both_formats() {
    let text = "\
# HELP c_total A \\\\ count\\nof \"x\"
# TYPE c_total counter
c_total{device=\"d0\"} 7
c_total 1.5
# HELP g A level
# TYPE g gauge
g{device=\"d0\"} 0.25
g{device=\"d1\"} +Inf
# HELP h Times
# TYPE h histogram
h_bucket{device=\"d0\",le=\"0.5\"} 1
h_bucket{device=\"d0\",le=\"2e+06\"} 3
h_bucket{device=\"d0\",le=\"+Inf\"} 6
h_sum{device=\"d0\"} 9.5
h_count{device=\"d0\"} 6
h_bucket{le=\"0.5\"} 1
h_bucket{le=\"2e+06\"} 3
h_bucket{le=\"+Inf\"} 6
h_sum 9.5
h_count 6
# HELP i_info Facts
# TYPE i_info gauge
i_info{device=\"a\\\"b\"} 1
";
    assert_eq!(every_kind_set().encode(Format::Text), text);
    // HELP as it is (a raw newline included) and `inf`: what prometheus-client writes.
    let openmetrics = "\
# HELP c A \\ count
of \"x\"
# TYPE c counter
c_total{device=\"d0\"} 7
c_total 1.5
# HELP g A level
# TYPE g gauge
g{device=\"d0\"} 0.25
g{device=\"d1\"} inf
# HELP h Times
# TYPE h histogram
h_sum{device=\"d0\"} 9.5
h_count{device=\"d0\"} 6
h_bucket{le=\"0.5\",device=\"d0\"} 1
h_bucket{le=\"2000000.0\",device=\"d0\"} 3
h_bucket{le=\"+Inf\",device=\"d0\"} 6
h_sum 9.5
h_count 6
h_bucket{le=\"0.5\"} 1
h_bucket{le=\"2000000.0\"} 3
h_bucket{le=\"+Inf\"} 6
# HELP i Facts
# TYPE i info
i_info{device=\"a\\\"b\"} 1
# EOF
";
    assert_eq!(every_kind_set().encode(Format::OpenMetrics), openmetrics);
}
