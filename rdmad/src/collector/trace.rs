//! The `trace` collector: what the kernel saw of the RDMA control path since rdmad started,
//! from the eBPF tracer of `rdma-trace` (kprobes on ib_uverbs/ib_core, rdma_cma
//! tracepoints). Off by default: loading BPF programs needs CAP_BPF and CAP_PERFMON (or
//! CAP_SYS_ADMIN, or root), and rdmad must be built with the `bpf` feature.
//!
//! The tracer is started once, when the collector is built, and runs in its own thread;
//! every scrape reads its totals ([`TraceCollector::snapshot`]) and exports:
//!
//! - `rdma_trace_events_total{kind,comm,cgroup,pod_uid,job_id,device}`: control-path calls
//!   and events by kind (`mr_reg`, `qp_modify`, ...), process name, the process's cgroup
//!   path, Kubernetes pod UID and Slurm job id (read from `--path.procfs` as each event
//!   arrives; `""` when unknown) and device;
//! - `rdma_trace_qp_transitions_total{device,from,to}`: successful QP state changes
//!   (`from="?"` for a QP created before the tracer started);
//! - `rdma_trace_call_errors_total{kind,device,error}`: failed calls by symbolic errno;
//! - `rdma_trace_async_events_total{device,event}`: QP, CQ and port async events;
//! - `rdma_trace_events_dropped_total`: events lost in the kernel (ring buffer full);
//! - `rdma_trace_mr_reg_latency_seconds{device}` and `rdma_trace_mr_reg_size_bytes{device}`:
//!   histograms of successful MR registrations (power-of-two buckets).
//!
//! Keys and addresses are never exported (the snapshot holds none). `comm` and `cgroup` are capped
//! by the tracer at [`rdma_trace::collector::MAX_COMMS`] and
//! [`rdma_trace::collector::MAX_CGROUPS`] distinct values (later ones are `other`).
//! The device filter applies to the `device` label (`-`, an unknown device, is kept).
//!
//! When the tracer cannot start (no `bpf` feature, no privileges, nothing to attach) the
//! reason is logged once at startup and every scrape reports the collector with success 0;
//! rdmad itself keeps serving.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use rdma_trace::{Owner, OwnerResolver, Selection, TraceCollector, TraceStats};
use rdmakit::sysfs::DeviceFilter;

use super::{Collector, CollectorConfig, CollectorSpec, Reads, Reported, Scrape};
use crate::metrics::{Declared, Histogram, MetricSet, Value};

/// The families this collector adds (all of them: see [`CollectorSpec::metrics`]).
const EVENTS: Declared = Declared::counter(
    "rdma_trace_events",
    "RDMA control-path calls and events seen by the eBPF tracer, by kind, process name, its cgroup, pod and Slurm job, and device",
);
const QP_TRANSITIONS: Declared = Declared::counter(
    "rdma_trace_qp_transitions",
    "Successful QP state transitions seen by the eBPF tracer (from=\"?\": QP created before the tracer started)",
);
const CALL_ERRORS: Declared = Declared::counter(
    "rdma_trace_call_errors",
    "Failed RDMA control-path calls seen by the eBPF tracer, by kind, device and errno",
);
const ASYNC_EVENTS: Declared = Declared::counter(
    "rdma_trace_async_events",
    "RDMA async events (QP, CQ, port) seen by the eBPF tracer",
);
const EVENTS_DROPPED: Declared = Declared::counter(
    "rdma_trace_events_dropped",
    "Events the eBPF tracer lost in the kernel (ring buffer full)",
);
const MR_REG_LATENCY_SECONDS: Declared = Declared::histogram(
    "rdma_trace_mr_reg_latency_seconds",
    "Time a successful MR registration took in the kernel, seen by the eBPF tracer",
);
const MR_REG_SIZE_BYTES: Declared = Declared::histogram(
    "rdma_trace_mr_reg_size_bytes",
    "Size of successfully registered MRs, seen by the eBPF tracer",
);

/// The table row.
pub const SPEC: CollectorSpec = CollectorSpec {
    name: "trace",
    help: "RDMA control-path events traced with eBPF (QP transitions, call errors, async events, MR registration latency and size); needs the bpf build feature and CAP_BPF+CAP_PERFMON or root",
    default_enabled: false,
    metrics: &[EVENTS, QP_TRANSITIONS, CALL_ERRORS, ASYNC_EVENTS, EVENTS_DROPPED, MR_REG_LATENCY_SECONDS, MR_REG_SIZE_BYTES],
    catalog_counters: &[],
    patterns: &[],
    options: &[],
    reads: Reads::NOTHING,
    build,
};

/// The owner (cgroup, pod, Slurm job) of an event's process, from
/// `<proc_root>/<pid>/cgroup` (rdmakit's reading of cgroup paths, the owners collector's).
/// A process that already exited, an empty or a malformed file: no owner.
fn trace_owner(proc_root: &Path, pid: u32) -> Option<Owner> {
    rdmakit::owner::cgroup_owner(proc_root, pid).map(|o| Owner {
        cgroup: o.cgroup,
        pod_uid: o.pod_uid,
        job: o.job.map(|job| (job.id, job.step)),
    })
}

fn build(config: &CollectorConfig) -> Box<dyn Collector> {
    let procfs = config.procfs.clone();
    let owners: OwnerResolver = Box::new(move |pid| trace_owner(&procfs, pid));
    let tracer = match TraceCollector::start_with_owners(Selection::All, owners) {
        Ok(tracer) => {
            tracing::info!(collector = SPEC.name, "eBPF tracer started");
            Ok(tracer)
        }
        Err(e) => {
            let reason = e.to_string();
            tracing::warn!(
                collector = SPEC.name,
                "cannot start the eBPF tracer, the collector reports success 0: {reason}"
            );
            Err(reason)
        }
    };
    Box::new(Trace {
        tracer,
        filter: config.filter.clone(),
        failure_logged: AtomicBool::new(false),
    })
}

struct Trace {
    /// The running tracer, or why it could not start (logged once in [`build`]).
    tracer: Result<TraceCollector, String>,
    filter: DeviceFilter,
    /// Whether a failure of the running tracer was logged already.
    failure_logged: AtomicBool,
}

impl Collector for Trace {
    fn update(&self, _scrape: &Scrape, out: &mut MetricSet) -> anyhow::Result<()> {
        let tracer = match &self.tracer {
            Ok(tracer) => tracer,
            Err(reason) => return Err(Reported(reason.clone()).into()),
        };
        match tracer.snapshot() {
            Ok(stats) => {
                export(&stats, &self.filter, out)?;
                Ok(())
            }
            Err(reason) => {
                if !self.failure_logged.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        collector = SPEC.name,
                        "the eBPF tracer stopped, the collector reports success 0 from now on: {reason}"
                    );
                }
                Err(Reported(reason.to_string()).into())
            }
        }
    }
}

/// Nanoseconds per second, for the latency histogram.
const NS_PER_SECOND: f64 = 1e9;

/// A tracer histogram (65 powers of two) as exported: up to its highest non-empty bucket,
/// bounds and sum divided by `scale`.
fn histogram(h: &Histogram, scale: f64) -> Value {
    Value::Histogram(h.trimmed().divided_by(scale))
}

/// Add the metric families of one tracer snapshot to `out`. Series of devices the filter
/// drops are left out.
pub(crate) fn export(
    stats: &TraceStats,
    filter: &DeviceFilter,
    out: &mut MetricSet,
) -> anyhow::Result<()> {
    let keep = |device: &str| device == "-" || filter.keeps(device);
    for e in stats.events.iter().filter(|e| keep(&e.device)) {
        out.add_declared(
            &EVENTS,
            vec![
                ("kind", e.kind.name().to_string()),
                ("comm", e.comm.clone()),
                ("cgroup", e.cgroup.clone()),
                ("pod_uid", e.pod_uid.clone()),
                ("job_id", e.job_id.clone()),
                ("device", e.device.clone()),
            ],
            Value::Int(e.count),
        )?;
    }
    for t in stats.qp_transitions.iter().filter(|t| keep(&t.device)) {
        out.add_declared(
            &QP_TRANSITIONS,
            vec![
                ("device", t.device.clone()),
                ("from", t.from.clone()),
                ("to", t.to.clone()),
            ],
            Value::Int(t.count),
        )?;
    }
    for e in stats.errors.iter().filter(|e| keep(&e.device)) {
        out.add_declared(
            &CALL_ERRORS,
            vec![
                ("kind", e.kind.name().to_string()),
                ("device", e.device.clone()),
                ("error", e.error.clone()),
            ],
            Value::Int(e.count),
        )?;
    }
    for a in stats.async_events.iter().filter(|a| keep(&a.device)) {
        out.add_declared(
            &ASYNC_EVENTS,
            vec![("device", a.device.clone()), ("event", a.event.clone())],
            Value::Int(a.count),
        )?;
    }
    out.add_declared(&EVENTS_DROPPED, vec![], Value::Int(stats.dropped))?;
    for (device, h) in stats.mr_reg_latency_ns.iter().filter(|(d, _)| keep(d)) {
        out.add_declared(
            &MR_REG_LATENCY_SECONDS,
            vec![("device", device.clone())],
            histogram(h, NS_PER_SECOND),
        )?;
    }
    for (device, h) in stats.mr_reg_bytes.iter().filter(|(d, _)| keep(d)) {
        out.add_declared(
            &MR_REG_SIZE_BYTES,
            vec![("device", device.clone())],
            histogram(h, 1.0),
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::Format;
    use rdma_trace::collector::{
        power_of_two_histogram, AsyncCount, ErrorCount, EventCount, TransitionCount,
    };
    use rdma_trace::EventKind;

    fn stats() -> TraceStats {
        let mut latency = power_of_two_histogram();
        for ns in [1000, 3000, 5000] {
            latency.observe(ns as f64);
        }
        let mut size = power_of_two_histogram();
        size.observe(4096.0);
        size.observe(8192.0);
        let mut other_dev = power_of_two_histogram();
        other_dev.observe(1.0);
        TraceStats {
            probes: vec![],
            events: vec![
                EventCount {
                    kind: EventKind::QpModify,
                    comm: "ib_write_bw".into(),
                    cgroup: "/kubepods.slice/kubepods-pod0c6d6f50_5a4e_4c0b_9a43_2f1d5e8b7a61.slice/cri-containerd-0123.scope".into(),
                    pod_uid: "0c6d6f50-5a4e-4c0b-9a43-2f1d5e8b7a61".into(),
                    job_id: String::new(),
                    device: "rxe0".into(),
                    count: 4,
                    errors: 1,
                },
                EventCount {
                    kind: EventKind::MrReg,
                    comm: "other".into(),
                    cgroup: String::new(),
                    pod_uid: String::new(),
                    job_id: String::new(),
                    device: "-".into(),
                    count: 2,
                    errors: 0,
                },
                EventCount {
                    kind: EventKind::MrReg,
                    comm: "app".into(),
                    cgroup: "/app".into(),
                    pod_uid: String::new(),
                    job_id: String::new(),
                    device: "mlx5_0".into(),
                    count: 9,
                    errors: 0,
                },
                EventCount {
                    kind: EventKind::QpCreate,
                    comm: "ib_write_bw".into(),
                    cgroup: "/system.slice/slurmstepd.scope/job_4242/step_0/user/task_0".into(),
                    pod_uid: String::new(),
                    job_id: "4242".into(),
                    device: "rxe0".into(),
                    count: 2,
                    errors: 0,
                },
            ],
            qp_transitions: vec![
                TransitionCount {
                    device: "rxe0".into(),
                    from: "RTS".into(),
                    to: "ERR".into(),
                    count: 3,
                },
                TransitionCount {
                    device: "rxe0".into(),
                    from: "?".into(),
                    to: "INIT".into(),
                    count: 1,
                },
            ],
            errors: vec![ErrorCount {
                kind: EventKind::QpModify,
                device: "rxe0".into(),
                error: "EINVAL".into(),
                count: 1,
            }],
            async_events: vec![AsyncCount {
                device: "rxe0".into(),
                event: "QP_FATAL".into(),
                count: 2,
            }],
            mr_reg_latency_ns: [("rxe0".to_string(), latency)].into(),
            mr_reg_bytes: [
                ("rxe0".to_string(), size),
                ("mlx5_0".to_string(), other_dev),
            ]
            .into(),
            dropped: 5,
        }
    }

    fn rxe_only() -> DeviceFilter {
        DeviceFilter::new(Some("rxe.*"), None).unwrap()
    }

    #[test]
    fn counters_carry_their_labels_and_values() {
        let mut set = MetricSet::new();
        export(&stats(), &rxe_only(), &mut set).unwrap();
        let text = set.encode(Format::Text);
        for line in [
            "rdma_trace_events_total{kind=\"qp_modify\",comm=\"ib_write_bw\",cgroup=\"/kubepods.slice/kubepods-pod0c6d6f50_5a4e_4c0b_9a43_2f1d5e8b7a61.slice/cri-containerd-0123.scope\",pod_uid=\"0c6d6f50-5a4e-4c0b-9a43-2f1d5e8b7a61\",job_id=\"\",device=\"rxe0\"} 4\n",
            "rdma_trace_events_total{kind=\"mr_reg\",comm=\"other\",cgroup=\"\",pod_uid=\"\",job_id=\"\",device=\"-\"} 2\n",
            "rdma_trace_events_total{kind=\"qp_create\",comm=\"ib_write_bw\",cgroup=\"/system.slice/slurmstepd.scope/job_4242/step_0/user/task_0\",pod_uid=\"\",job_id=\"4242\",device=\"rxe0\"} 2\n",
            "rdma_trace_qp_transitions_total{device=\"rxe0\",from=\"RTS\",to=\"ERR\"} 3\n",
            "rdma_trace_qp_transitions_total{device=\"rxe0\",from=\"?\",to=\"INIT\"} 1\n",
            "rdma_trace_call_errors_total{kind=\"qp_modify\",device=\"rxe0\",error=\"EINVAL\"} 1\n",
            "rdma_trace_async_events_total{device=\"rxe0\",event=\"QP_FATAL\"} 2\n",
            "rdma_trace_events_dropped_total 5\n",
            "# TYPE rdma_trace_qp_transitions_total counter\n",
        ] {
            assert!(text.contains(line), "missing {line:?} in\n{text}");
        }
        assert!(
            !text.contains("mlx5_0"),
            "filtered device exported:\n{text}"
        );
    }

    /// The `_bucket` series of `name` for rxe0 in `text`: `(le, cumulative count)`, with `le`
    /// parsed. The two formats differ in label order (`le` last in 0.0.4, first in
    /// OpenMetrics) and in how they print bounds (`4096` vs `4096.0`).
    fn buckets(text: &str, name: &str) -> Vec<(f64, u64)> {
        let prefix = format!("{name}_bucket{{");
        text.lines()
            .filter_map(|l| l.strip_prefix(prefix.as_str()))
            .filter_map(|rest| {
                let (labels, value) = rest.split_once("} ").unwrap();
                let mut labels: Vec<&str> = labels.split(',').collect();
                labels.sort_unstable();
                let [device, le] = labels[..] else {
                    panic!("labels {labels:?}")
                };
                if device != "device=\"rxe0\"" {
                    return None;
                }
                let le = le.strip_prefix("le=\"")?.strip_suffix('"')?;
                let le = if le == "+Inf" {
                    f64::INFINITY
                } else {
                    le.parse().unwrap()
                };
                Some((le, value.parse().unwrap()))
            })
            .collect()
    }

    /// The value of the one series `series` (name and labels) in `text`.
    fn value(text: &str, series: &str) -> f64 {
        let prefix = format!("{series} ");
        let found: Vec<f64> = text
            .lines()
            .filter_map(|l| l.strip_prefix(prefix.as_str()))
            .map(|v| v.parse().unwrap())
            .collect();
        assert_eq!(found.len(), 1, "{series} in\n{text}");
        found[0]
    }

    #[test]
    fn histograms_are_cumulative_with_inf_sum_and_count_in_both_formats() {
        for format in [Format::Text, Format::OpenMetrics] {
            let mut set = MetricSet::new();
            export(&stats(), &rxe_only(), &mut set).unwrap();
            let text = set.encode(format);
            assert!(
                text.contains("# TYPE rdma_trace_mr_reg_size_bytes histogram\n"),
                "{format:?}:\n{text}"
            );
            let size = buckets(&text, "rdma_trace_mr_reg_size_bytes");
            // Bounds 1, 2, 4, ..., 8192 (14 of them), then +Inf.
            assert_eq!(size.len(), 15, "{format:?}: {size:?}\n{text}");
            assert_eq!(size[11], (2048.0, 0));
            assert_eq!(size[12], (4096.0, 1));
            assert_eq!(size[13], (8192.0, 2));
            assert_eq!(size[14], (f64::INFINITY, 2));
            let rxe = "{device=\"rxe0\"}";
            assert_eq!(
                value(&text, &format!("rdma_trace_mr_reg_size_bytes_sum{rxe}")),
                12288.0
            );
            assert_eq!(
                value(&text, &format!("rdma_trace_mr_reg_size_bytes_count{rxe}")),
                2.0
            );
            // Latency in seconds: 1000 ns falls in the 1024 ns bucket, 3000 and 5000 ns in
            // the 4096 and 8192 ns ones.
            let latency = buckets(&text, "rdma_trace_mr_reg_latency_seconds");
            assert_eq!(latency[10], (1024e-9, 1), "{format:?}: {latency:?}");
            assert_eq!(latency[12], (4096e-9, 2));
            assert_eq!(latency[13], (8192e-9, 3));
            assert_eq!(latency.last(), Some(&(f64::INFINITY, 3)));
            let sum = value(
                &text,
                &format!("rdma_trace_mr_reg_latency_seconds_sum{rxe}"),
            );
            assert!((sum - 9e-6).abs() < 1e-12, "{sum}");
            assert_eq!(
                value(
                    &text,
                    &format!("rdma_trace_mr_reg_latency_seconds_count{rxe}")
                ),
                3.0
            );
            assert_eq!(format == Format::OpenMetrics, text.ends_with("# EOF\n"));
        }
    }

    #[test]
    fn an_empty_snapshot_gives_only_the_dropped_counter() {
        let mut set = MetricSet::new();
        export(&TraceStats::default(), &DeviceFilter::all(), &mut set).unwrap();
        assert_eq!(
            set.names().collect::<Vec<_>>(),
            ["rdma_trace_events_dropped"]
        );
    }

    #[test]
    fn events_are_owned_by_the_cgroup_pod_and_job_under_the_procfs_root() {
        let root =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../crates/rdmakit/tests/data/proc-owners");
        // 101: containerd pod; 131: Slurm job 3385's extern step; 4242: exited.
        let pod = trace_owner(&root, 101).unwrap();
        assert!(pod.cgroup.contains("cri-containerd-"), "{pod:?}");
        assert_eq!(
            pod.pod_uid.as_deref(),
            Some("1b2c3d4e-5f60-4718-92a3-b4c5d6e7f809")
        );
        assert_eq!(pod.job, None);
        assert_eq!(
            trace_owner(&root, 131).unwrap().job,
            Some(("3385".into(), "extern".into()))
        );
        assert_eq!(trace_owner(&root, 4242), None);
    }

    #[cfg(not(feature = "bpf"))]
    #[test]
    fn without_bpf_the_collector_fails_with_the_reason_and_does_not_panic() {
        let config = CollectorConfig::new("/nonexistent", DeviceFilter::all());
        let collector = (SPEC.build)(&config);
        let err = collector
            .update(&Scrape::detached(), &mut MetricSet::new())
            .unwrap_err();
        assert!(err.is::<Reported>(), "{err:#}");
        assert!(
            err.to_string().contains("built without BPF support"),
            "{err:#}"
        );
    }
}
