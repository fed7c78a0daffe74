use super::*;
use crate::metrics::{Format, Kind};

struct Failing;
impl Collector for Failing {
    fn update(&self, out: &mut MetricSet) -> anyhow::Result<()> {
        out.add(
            "rdma_partial",
            Kind::Gauge,
            String::new,
            vec![],
            Value::Int(1),
        )?;
        anyhow::bail!("boom")
    }
}

struct Panicking;
impl Collector for Panicking {
    fn update(&self, _out: &mut MetricSet) -> anyhow::Result<()> {
        panic!("collector bug")
    }
}

struct Fine;
impl Collector for Fine {
    fn update(&self, out: &mut MetricSet) -> anyhow::Result<()> {
        out.add(
            "rdma_fine",
            Kind::Gauge,
            || "ok".into(),
            vec![],
            Value::Int(2),
        )?;
        Ok(())
    }
}

#[test]
fn failing_and_panicking_collectors_do_not_fail_the_scrape() {
    let collectors = Collectors {
        enabled: vec![
            ("failing", Arc::new(Failing)),
            ("panicking", Arc::new(Panicking)),
            ("fine", Arc::new(Fine)),
        ],
        timeout: None,
        responses: None,
        workers: Workers::default(),
    };
    let text = collectors.scrape().encode(Format::Text);
    assert!(text.contains("rdma_scrape_collector_success{collector=\"failing\"} 0\n"));
    assert!(text.contains("rdma_scrape_collector_success{collector=\"panicking\"} 0\n"));
    assert!(text.contains("rdma_scrape_collector_success{collector=\"fine\"} 1\n"));
    assert!(text.contains("rdma_fine 2\n"), "{text}");
    assert!(
        !text.contains("rdma_partial"),
        "a failed collector's output is dropped"
    );
    assert!(text.contains("rdma_exporter_build_info{version=\""));
}

#[test]
fn responses_are_exported_by_encoding_when_serving_only() {
    let fine = || Collectors {
        enabled: vec![("fine", Arc::new(Fine) as Arc<dyn Collector>)],
        timeout: None,
        responses: None,
        workers: Workers::default(),
    };
    let once = fine().scrape().encode(Format::Text);
    assert!(!once.contains("rdma_exporter_metrics_responses"), "{once}");
    let counts = Arc::new(ResponseCounts::default());
    let serving = fine().with_responses(Arc::clone(&counts));
    let text = serving.scrape().encode(Format::Text);
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
    let text = serving.scrape().encode(Format::Text);
    assert!(text.contains("rdma_exporter_metrics_responses_total{encoding=\"gzip\"} 2\n"));
    assert!(text.contains("rdma_exporter_metrics_responses_total{encoding=\"zstd\"} 0\n"));
    assert!(
        text.contains("rdma_exporter_metrics_responses_total{encoding=\"identity\"} 2\n"),
        "{text}"
    );
}

/// A collector that blocks until the test releases it (the stall hook).
struct Stalling(Mutex<mpsc::Receiver<()>>);
impl Collector for Stalling {
    fn update(&self, out: &mut MetricSet) -> anyhow::Result<()> {
        let _ = self.0.lock().unwrap().recv();
        out.add(
            "rdma_stalled",
            Kind::Gauge,
            String::new,
            vec![],
            Value::Int(1),
        )?;
        Ok(())
    }
}

/// A collector that watches the deadline: one series, then it waits for the deadline
/// and stops with what it has.
struct Watching;
impl Collector for Watching {
    fn update(&self, _out: &mut MetricSet) -> anyhow::Result<()> {
        unreachable!("the scrape calls update_shared")
    }
    fn update_shared(&self, shared: &Shared, out: &mut MetricSet) -> anyhow::Result<()> {
        out.add(
            "rdma_partial",
            Kind::Gauge,
            String::new,
            vec![],
            Value::Int(3),
        )?;
        while !shared.past_deadline() {
            std::thread::sleep(Duration::from_millis(5));
        }
        shared.mark_timed_out("watching");
        Ok(())
    }
}

#[test]
fn a_stalled_collector_is_left_behind_at_the_deadline_and_the_others_are_exported() {
    let (release, stall) = mpsc::channel();
    let collectors = Collectors {
        enabled: vec![
            ("stalling", Arc::new(Stalling(Mutex::new(stall)))),
            ("watching", Arc::new(Watching)),
            ("fine", Arc::new(Fine)),
        ],
        timeout: Some(Duration::from_secs(2)),
        responses: None,
        workers: Workers::default(),
    };
    let text = collectors.scrape().encode(Format::Text);
    assert!(
        text.contains("rdma_scrape_collector_timeout{collector=\"stalling\"} 1\n"),
        "{text}"
    );
    assert!(text.contains("rdma_scrape_collector_success{collector=\"stalling\"} 0\n"));
    assert!(!text.contains("rdma_stalled"), "{text}");
    // The one that watched the deadline keeps what it had.
    assert!(text.contains("rdma_scrape_collector_timeout{collector=\"watching\"} 1\n"));
    assert!(text.contains("rdma_scrape_collector_success{collector=\"watching\"} 1\n"));
    assert!(text.contains("rdma_partial 3\n"));
    // The others are all there.
    assert!(text.contains("rdma_scrape_collector_timeout{collector=\"fine\"} 0\n"));
    assert!(text.contains("rdma_fine 2\n"));
    assert!(text.contains("rdma_exporter_build_info{"));
    drop(release);
}

#[test]
fn collector_threads_are_kept_and_a_stuck_one_delays_no_other() {
    let workers = Workers::default();
    let (tx, ran_on) = mpsc::channel();
    let report = |tx: &mpsc::Sender<std::thread::ThreadId>| -> Job {
        let tx = tx.clone();
        Box::new(move || {
            let _ = tx.send(std::thread::current().id());
        })
    };
    let idle_threads = |n: usize| {
        let until = Instant::now() + Duration::from_secs(30);
        while lock(&workers.shared.0).idle != n {
            assert!(Instant::now() < until, "never {n} idle threads");
            std::thread::sleep(Duration::from_millis(1));
        }
    };
    let wait = Duration::from_secs(30);
    workers.run(report(&tx)).unwrap();
    let first = ran_on.recv_timeout(wait).unwrap();
    idle_threads(1);
    workers.run(report(&tx)).unwrap();
    assert_eq!(
        ran_on.recv_timeout(wait).unwrap(),
        first,
        "the idle thread ran it"
    );
    idle_threads(1);
    // A job that does not return keeps its thread; the next one gets a new thread.
    let (release, stuck) = mpsc::channel::<()>();
    workers
        .run(Box::new(move || {
            let _ = stuck.recv();
        }))
        .unwrap();
    idle_threads(0);
    workers.run(report(&tx)).unwrap();
    let second = ran_on.recv_timeout(wait).unwrap();
    assert_ne!(second, first);
    drop(release);
    // Both threads are idle again: two jobs at once run on them (either may take both),
    // no third is started.
    idle_threads(2);
    workers.run(report(&tx)).unwrap();
    workers.run(report(&tx)).unwrap();
    let ran = [
        ran_on.recv_timeout(wait).unwrap(),
        ran_on.recv_timeout(wait).unwrap(),
    ];
    assert!(
        ran.iter().all(|id| [first, second].contains(id)),
        "{ran:?} not on {first:?} or {second:?}"
    );
    idle_threads(2);
}

#[test]
fn a_past_deadline_bounds_the_netlink_socket_and_the_sysfs_wait() {
    // A scrape whose deadline has passed: waiting for netlink_counters returns at once.
    let shared = Shared::new(Some(Instant::now()), true);
    shared.wait_netlink_hw_ready();
    assert!(shared.past_deadline());
    // Without a deadline, the wait ends when netlink_counters says so.
    let shared = Arc::new(Shared::new(None, true));
    let s2 = Arc::clone(&shared);
    let t = std::thread::spawn(move || s2.wait_netlink_hw_ready());
    shared.set_netlink_hw_ready();
    t.join().unwrap();
}

#[test]
fn sysfs_device_names_are_listed_once_per_scrape() {
    let root = std::env::temp_dir().join(format!("rdmad-shared-{}", std::process::id()));
    let class = root.join("class/infiniband");
    std::fs::create_dir_all(class.join("mlx5_1")).unwrap();
    std::fs::create_dir_all(class.join("mlx5_0")).unwrap();
    let shared = Shared::default();
    assert_eq!(
        shared.sysfs_device_names(&root).unwrap(),
        ["mlx5_0", "mlx5_1"]
    );
    // A device that appears during the scrape shows up in the next scrape, not this one.
    std::fs::create_dir_all(class.join("mlx5_2")).unwrap();
    assert_eq!(shared.sysfs_device_names(&root).unwrap().len(), 2);
    assert_eq!(
        Shared::default().sysfs_device_names(&root).unwrap().len(),
        3
    );
    std::fs::remove_dir_all(&root).unwrap();
    // An unreadable class directory is an error for every collector that asks.
    std::fs::write(&root, "not a directory").unwrap();
    let shared = Shared::default();
    assert!(shared.sysfs_device_names(&root).is_err());
    assert!(shared.sysfs_device_names(&root).is_err());
    std::fs::remove_file(&root).unwrap();
}

#[test]
fn table_names_are_unique_and_flag_safe() {
    for (i, s) in TABLE.iter().enumerate() {
        assert!(
            s.name.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'),
            "{}",
            s.name
        );
        assert!(TABLE[..i].iter().all(|o| o.name != s.name), "{}", s.name);
        assert!(spec(s.name).is_some());
    }
}
