use super::*;
use crate::metrics::Format;

#[test]
fn responses_are_exported_by_encoding() {
    let counts = ResponseCounts::default();
    let exported = |counts: &ResponseCounts| {
        let mut out = MetricSet::new();
        counts.export(&mut out);
        out.encode(Format::Text)
    };
    let text = exported(&counts);
    for encoding in ["gzip", "zstd", "identity"] {
        let line = format!("rdma_exporter_metrics_responses_total{{encoding=\"{encoding}\"}} 0\n");
        assert!(text.contains(&line), "{text}");
    }
    assert!(text.contains("# TYPE rdma_exporter_metrics_responses_total counter\n"));
    counts.record(Some("gzip"));
    counts.record(Some("gzip"));
    counts.record(None);
    counts.record(Some("identity"));
    counts.record(Some("br"));
    let text = exported(&counts);
    assert!(text.contains("rdma_exporter_metrics_responses_total{encoding=\"gzip\"} 2\n"));
    assert!(text.contains("rdma_exporter_metrics_responses_total{encoding=\"zstd\"} 0\n"));
    assert!(
        text.contains("rdma_exporter_metrics_responses_total{encoding=\"identity\"} 2\n"),
        "{text}"
    );
}
