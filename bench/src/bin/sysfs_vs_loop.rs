//! The sysfs reader against its floor: a plain open/read/close loop over the same files.
//!
//! `cargo run --release -p rdma-bench --bin sysfs_vs_loop [DEVICES]` writes the synthetic
//! tree (`gen-sysfs.py OUT --devices 64` by default), then interleaves 25 full snapshots
//! with 25 loops (the loop's file list is built beforehand, outside the timing) and prints
//! both medians and their ratio. Target: ratio <= 1.3.

use std::fs::File;
use std::io::Read;

use rdma_bench::{all_files, median, synthetic_sysfs, time};
use rdmakit::sysfs::SysfsReader;

fn main() -> anyhow::Result<()> {
    let devices: u32 = std::env::args()
        .nth(1)
        .map(|a| a.parse())
        .transpose()?
        .unwrap_or(64);
    let root = synthetic_sysfs(devices)?;
    let mut files = Vec::new();
    all_files(&root.join("class/infiniband"), &mut files)?;
    let reader = SysfsReader::new(&root);
    let snap = reader.snapshot()?;
    let counters: usize = snap
        .devices
        .iter()
        .flat_map(|d| &d.ports)
        .map(|p| p.counters.len())
        .sum();
    anyhow::ensure!(snap.errors.is_empty(), "read errors: {:?}", snap.errors);
    let mut buf = vec![0u8; 4097];
    let (mut plain, mut ours) = (Vec::new(), Vec::new());
    for _ in 0..25 {
        plain.push(time(|| {
            let mut total = 0usize;
            for path in &files {
                if let Ok(mut f) = File::open(path) {
                    total += f.read(&mut buf).unwrap_or(0);
                }
            }
            std::hint::black_box(total);
        }));
        ours.push(time(|| {
            std::hint::black_box(reader.snapshot().ok());
        }));
    }
    let (p, o) = (median(plain), median(ours));
    println!(
        "sysfs tree: {devices} devices, {} files, {counters} counters read",
        files.len()
    );
    println!(
        "plain open/read/close loop  p50 {:>9.3} ms",
        p.as_secs_f64() * 1e3
    );
    println!(
        "rdmakit SysfsReader          p50 {:>9.3} ms",
        o.as_secs_f64() * 1e3
    );
    println!(
        "ratio reader/loop: {:.2}x (target <= 1.3x)",
        o.as_secs_f64() / p.as_secs_f64()
    );
    let _ = std::fs::remove_dir_all(&root);
    Ok(())
}
