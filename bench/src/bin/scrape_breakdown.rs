//! Where a scrape's time goes, against the floor, in one run.
//!
//! `cargo run --release -p rdma-bench --bin scrape_breakdown [DEVICES] [ROUNDS]` writes the
//! synthetic tree (64 devices, 100 rounds by default) and interleaves, ROUNDS times: the
//! plain open/read/close loop over every file, the sysfs snapshot alone (serial, with the
//! default threads, and with the default threads and descriptors kept between snapshots as
//! rdmad keeps them), rdmad's collectors (`Collectors::scrape`, default collectors) and the
//! same plus the text encoding (what `/metrics` does minus HTTP). Prints p50s and each one's
//! ratio to the loop (the serial snapshot's target: <= 1.3x). A tree the reader reports
//! errors on is refused.
#![forbid(unsafe_code)]

use std::sync::Arc;
use std::time::Duration;

use rdma_bench::{all_files, median, plain_loop, synthetic_sysfs, time};
use rdmad::collector::{CollectorConfig, Collectors, TABLE};
use rdmad::metrics::Format;
use rdmakit::sysfs::{DeviceFilter, OpenFiles, SysfsReader};

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let devices: u32 = args.next().map(|a| a.parse()).transpose()?.unwrap_or(64);
    let rounds: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(100);
    let root = synthetic_sysfs(devices)?;
    let mut files = Vec::new();
    all_files(&root.join("class/infiniband"), &mut files)?;
    let config = CollectorConfig::new(&root, DeviceFilter::all());
    let defaults: Vec<&str> = TABLE
        .iter()
        .filter(|s| s.default_enabled)
        .map(|s| s.name)
        .collect();
    let collectors = Collectors::new(&config, &defaults);
    let serial = SysfsReader::new(&root).with_threads(1);
    let errors = serial.snapshot()?.errors;
    anyhow::ensure!(errors.is_empty(), "read errors: {errors:?}");
    let parallel = SysfsReader::new(&root);
    let kept = SysfsReader::new(&root).with_open_files(Arc::new(OpenFiles::new(100_000)));
    let mut buf = vec![0u8; 4097];
    let mut t: [Vec<Duration>; 6] = Default::default();
    let mut bytes = 0;
    for _ in 0..rounds {
        t[0].push(time(|| {
            plain_loop(&files, &mut buf);
        }));
        t[1].push(time(|| {
            serial.snapshot().expect("snapshot");
        }));
        t[2].push(time(|| {
            parallel.snapshot().expect("snapshot");
        }));
        t[3].push(time(|| {
            kept.snapshot().expect("snapshot");
        }));
        t[4].push(time(|| {
            collectors.scrape();
        }));
        t[5].push(time(|| {
            bytes = collectors.scrape().encode(Format::Text).len();
        }));
    }
    let names = [
        "open/read/close loop",
        "sysfs snapshot, serial",
        "sysfs snapshot, default threads",
        "  + descriptors kept",
        "collectors (no encoding)",
        "collectors + text encoding",
    ];
    let floor = median(t[0].clone()).as_secs_f64();
    println!(
        "sysfs tree: {devices} devices, {} files; {rounds} interleaved rounds; exposition {bytes} bytes",
        files.len()
    );
    for (name, v) in names.iter().zip(t) {
        let p50 = median(v).as_secs_f64();
        println!(
            "{name:<34} p50 {:>8.3} ms  {:>5.2}x the loop",
            p50 * 1e3,
            p50 / floor
        );
    }
    Ok(())
}
