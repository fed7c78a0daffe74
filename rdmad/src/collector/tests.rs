use super::*;
use crate::metrics::{Format, Kind};
use std::sync::{mpsc, Mutex};
use workers::{lock, Job};

/// The inputs of collectors that read none.
fn no_inputs() -> Arc<Inputs> {
    let config = CollectorConfig::new("/nonexistent", DeviceFilter::all());
    Arc::new(Inputs::new(&config, []))
}

struct Failing;
impl Collector for Failing {
    fn update(&self, _scrape: &Scrape, out: &mut MetricSet) -> anyhow::Result<()> {
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
    fn update(&self, _scrape: &Scrape, _out: &mut MetricSet) -> anyhow::Result<()> {
        panic!("collector bug")
    }
}

struct Fine;
impl Collector for Fine {
    fn update(&self, _scrape: &Scrape, out: &mut MetricSet) -> anyhow::Result<()> {
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
        inputs: no_inputs(),
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
fn the_scrape_exports_no_responses() {
    let collectors = Collectors {
        enabled: vec![("fine", Arc::new(Fine) as Arc<dyn Collector>)],
        timeout: None,
        inputs: no_inputs(),
        workers: Workers::default(),
    };
    let text = collectors.scrape().encode(Format::Text);
    assert!(text.contains("rdma_fine 2\n"), "{text}");
    // The HTTP server adds them (crate::responses).
    assert!(!text.contains("rdma_exporter_metrics_responses"), "{text}");
}

/// A collector that blocks until the test releases it (the stall hook).
struct Stalling(Mutex<mpsc::Receiver<()>>);
impl Collector for Stalling {
    fn update(&self, _scrape: &Scrape, out: &mut MetricSet) -> anyhow::Result<()> {
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
    fn update(&self, scrape: &Scrape, out: &mut MetricSet) -> anyhow::Result<()> {
        out.add(
            "rdma_partial",
            Kind::Gauge,
            String::new,
            vec![],
            Value::Int(3),
        )?;
        while !scrape.past_deadline() {
            std::thread::sleep(Duration::from_millis(5));
        }
        scrape.mark_timed_out("watching");
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
        inputs: no_inputs(),
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
fn sysfs_device_names_are_listed_once_per_scrape() {
    let root = std::env::temp_dir().join(format!("rdmad-shared-{}", std::process::id()));
    let class = root.join("class/infiniband");
    std::fs::create_dir_all(class.join("mlx5_1")).unwrap();
    std::fs::create_dir_all(class.join("mlx5_0")).unwrap();
    let config = CollectorConfig::new(&root, DeviceFilter::all());
    let scrape = || Scrape::of(&config, []);
    let first = scrape();
    assert_eq!(first.sysfs_device_names().unwrap(), ["mlx5_0", "mlx5_1"]);
    // A device that appears during the scrape shows up in the next scrape, not this one.
    std::fs::create_dir_all(class.join("mlx5_2")).unwrap();
    assert_eq!(first.sysfs_device_names().unwrap().len(), 2);
    assert_eq!(scrape().sysfs_device_names().unwrap().len(), 3);
    std::fs::remove_dir_all(&root).unwrap();
    // An unreadable class directory is an error for every collector that asks.
    std::fs::write(&root, "not a directory").unwrap();
    let broken = scrape();
    assert!(broken.sysfs_device_names().is_err());
    assert!(broken.sysfs_device_names().is_err());
    std::fs::remove_file(&root).unwrap();
}

#[test]
fn the_snapshot_reads_what_the_enabled_collectors_declare() {
    let config = CollectorConfig::new("/nonexistent", DeviceFilter::all());
    let reads = |names: &[&str]| {
        Inputs::new(&config, TABLE.iter().filter(|s| names.contains(&s.name))).reads()
    };
    assert_eq!(reads(&[]), Reads::NOTHING);
    let all = reads(&TABLE.iter().map(|s| s.name).collect::<Vec<_>>());
    assert!(
        all.sysfs_gids && all.sysfs_counters && all.netlink_port_hw,
        "{all:?}"
    );
    // Each declaration comes from its own collector: one enabled alone reads only its own.
    for spec in TABLE {
        assert_eq!(reads(&[spec.name]), spec.reads, "{}", spec.name);
    }
}

#[test]
fn the_snapshot_leaves_out_the_port_hw_counters_netlink_serves() {
    // No enabled collector exports netlink's port hw counters: the snapshot has them all.
    let root =
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/sysfs/rxe");
    let config = CollectorConfig::new(&root, DeviceFilter::all());
    let counters = TABLE.iter().filter(|s| s.reads.sysfs_counters);
    let scrape = Scrape::of(&config, counters.clone());
    let hw = |snapshot: &rdmakit::model::Snapshot| {
        snapshot.devices[0].ports[0]
            .counters
            .iter()
            .filter(|c| c.source == rdmakit::model::CounterSource::Hw)
            .count()
    };
    let all = hw(scrape.sysfs_snapshot().unwrap());
    assert!(all > 1, "{all}");
    let served =
        Scrape::of(&config, counters).with_netlink_port_hw(NetlinkPortHw::serving(&["rxe0"]));
    // Only `lifespan`, which netlink does not report, is left.
    assert_eq!(hw(served.sysfs_snapshot().unwrap()), 1);
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
