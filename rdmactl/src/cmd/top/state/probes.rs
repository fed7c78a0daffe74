//! The probes pane's model: the `rdma_probe_*` series of rdmad's `/metrics`, parsed from the
//! Prometheus text exposition, or why there are none.

/// One `rdma_probe_*` sample.
#[derive(Debug, Clone, PartialEq)]
pub struct ProbeSeries {
    /// Metric name (`rdma_probe_latency_seconds`).
    pub name: String,
    /// The label set in the text format, without braces (`device="rxe0",quantile="0.5"`).
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

/// The `rdma_probe_*` samples of a Prometheus text exposition (parsed whole by
/// [`rdmakit::exposition`]: an exposition that does not parse is an error, not a guess).
#[cfg(test)]
pub fn parse_probe_series(text: &str) -> Result<Vec<ProbeSeries>, rdmakit::exposition::ParseError> {
    Ok(probe_series(&rdmakit::exposition::parse(text)?))
}

/// The `rdma_probe_*` samples of a parsed exposition.
pub fn probe_series(exposition: &rdmakit::exposition::Exposition) -> Vec<ProbeSeries> {
    exposition
        .samples
        .iter()
        .filter(|s| s.name.starts_with(PROBE_PREFIX))
        .map(|s| ProbeSeries {
            labels: s
                .labels
                .iter()
                .map(|(k, v)| format!("{k}=\"{}\"", rdmakit::exposition::escape(v)))
                .collect::<Vec<_>>()
                .join(","),
            name: s.name.clone(),
            value: s.value,
        })
        .collect()
}
