//! The probes pane's model: the `rdma_probe_*` series of rdmad's `/metrics`, parsed from the
//! Prometheus text exposition, or why there are none.

/// One sample line: `name{labels} value`.
#[derive(Debug, Clone, PartialEq)]
pub struct ProbeSeries {
    /// Metric name (`rdma_probe_latency_seconds`).
    pub name: String,
    /// The label set as printed, without braces (`device="rxe0",quantile="0.5"`).
    pub labels: String,
    /// The value.
    pub value: f64,
}

/// What the probes pane shows.
#[derive(Debug, Clone, PartialEq)]
pub enum ProbeStatus {
    /// No `--rdmad` URL was given.
    NotConfigured,
    /// Not scraped yet.
    Pending,
    /// The scrape failed: why.
    Unreachable(String),
    /// The scrape worked; these `rdma_probe_*` series were in it (maybe none).
    Series(Vec<ProbeSeries>),
}

/// The metric-name prefix of rdmad's probe series.
pub const PROBE_PREFIX: &str = "rdma_probe_";

/// The `rdma_probe_*` samples of a Prometheus text exposition. Comments, other metrics and
/// lines that do not parse are skipped; timestamps after the value are ignored.
pub fn parse_probe_series(text: &str) -> Vec<ProbeSeries> {
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if !line.starts_with(PROBE_PREFIX) {
            continue;
        }
        let (name, labels, rest) = match line.find('{') {
            Some(open) => {
                let Some(close) = line.rfind('}') else {
                    continue;
                };
                if close < open {
                    continue;
                }
                (&line[..open], &line[open + 1..close], &line[close + 1..])
            }
            None => match line.split_once(char::is_whitespace) {
                Some((name, rest)) => (name, "", rest),
                None => continue,
            },
        };
        let Some(value) = rest.split_whitespace().next() else {
            continue;
        };
        let value = match value {
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            v => match v.parse::<f64>() {
                Ok(v) => v,
                Err(_) => continue,
            },
        };
        out.push(ProbeSeries {
            name: name.to_owned(),
            labels: labels.to_owned(),
            value,
        });
    }
    out
}
