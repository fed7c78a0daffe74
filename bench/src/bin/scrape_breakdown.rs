//! Where a scrape's time goes, against the floor, in one run.
//!
//! `cargo run --release -p rdma-bench --bin scrape_breakdown [DEVICES] [ROUNDS]` writes the
//! synthetic tree (64 devices, 100 rounds by default) and interleaves, ROUNDS times: the
//! floor (one `pread` per counter file through descriptors kept open, serial), the plain
//! open/read/close loop over every file, the sysfs snapshot alone (serial, with the default
//! threads, and with descriptors kept between snapshots as rdmad keeps them, with 1, 2 and
//! 4 reader threads), rdmad's collectors (`Collectors::scrape`, default collectors) and the
//! same plus the text encoding (what `/metrics` does minus HTTP). Prints p50s and each one's
//! ratio to the floor and to the loop. A tree the reader reports errors on is refused.
#![forbid(unsafe_code)]

use std::sync::Arc;
use std::time::Duration;

use rdma_bench::{
    all_files, default_collectors, is_counter_file, median, plain_loop, synthetic_sysfs, time,
    KeptFiles,
};
use rdmad::metrics::Format;
use rdmakit::sysfs::{OpenFiles, SysfsReader};

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let devices: u32 = args.next().map(|a| a.parse()).transpose()?.unwrap_or(64);
    let rounds: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(100);
    let root = synthetic_sysfs(devices)?;
    // The kept descriptors need more than the default soft RLIMIT_NOFILE (1024): raise it to
    // the hard limit, as rdmad does at start.
    drop(rdmad::collector::sysfs_open_files());
    let mut files = Vec::new();
    all_files(&root.join("class/infiniband"), &mut files)?;
    let collectors = default_collectors(&root);
    let serial = SysfsReader::new(&root).with_threads(1);
    let errors = serial.snapshot()?.errors;
    anyhow::ensure!(errors.is_empty(), "read errors: {errors:?}");
    let parallel = SysfsReader::new(&root);
    // One descriptor store for the three (as rdmad's readers share one): the hard
    // RLIMIT_NOFILE here may not hold three copies.
    let open_files = Arc::new(OpenFiles::new(100_000));
    let kept: Vec<SysfsReader> = [1, 2, 4]
        .iter()
        .map(|&n| {
            SysfsReader::new(&root)
                .with_threads(n)
                .with_open_files(Arc::clone(&open_files))
        })
        .collect();
    let counter_paths: Vec<_> = files
        .iter()
        .filter(|p| is_counter_file(p))
        .cloned()
        .collect();
    let kept_counters = KeptFiles::open(&counter_paths)?;
    let mut buf = vec![0u8; 4097];
    let mut t: [Vec<Duration>; 9] = Default::default();
    let mut bytes = 0;
    for _ in 0..rounds {
        t[0].push(time(|| {
            kept_counters.read_all(&mut buf);
        }));
        t[1].push(time(|| {
            plain_loop(&files, &mut buf);
        }));
        t[2].push(time(|| {
            serial.snapshot().expect("snapshot");
        }));
        t[3].push(time(|| {
            parallel.snapshot().expect("snapshot");
        }));
        for (i, reader) in kept.iter().enumerate() {
            t[4 + i].push(time(|| {
                reader.snapshot().expect("snapshot");
            }));
        }
        t[7].push(time(|| {
            collectors.scrape();
        }));
        t[8].push(time(|| {
            bytes = collectors.scrape().encode(Format::Text).len();
        }));
    }
    let names = [
        "floor: pread of kept counter files",
        "open/read/close loop",
        "sysfs snapshot, serial",
        "sysfs snapshot, default threads",
        "  descriptors kept, 1 thread",
        "  descriptors kept, 2 threads",
        "  descriptors kept, 4 threads",
        "collectors (no encoding)",
        "collectors + text encoding",
    ];
    let floor = median(t[0].clone()).as_secs_f64();
    let plain = median(t[1].clone()).as_secs_f64();
    println!(
        "sysfs tree: {devices} devices, {} files ({} counter files); {rounds} interleaved rounds; exposition {bytes} bytes",
        files.len(),
        kept_counters.len()
    );
    for (name, v) in names.iter().zip(t) {
        let p50 = median(v).as_secs_f64();
        println!(
            "{name:<36} p50 {:>8.3} ms  {:>5.2}x the floor  {:>5.2}x the loop",
            p50 * 1e3,
            p50 / floor,
            p50 / plain
        );
    }
    Ok(())
}
