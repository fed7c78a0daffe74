//! How rdmad uses the collector handle: start it once, take a snapshot per scrape (here
//! without an owner resolver, so no event carries a cgroup; rdmad passes one).
//! `cargo run -p rdma-trace --features bpf --example collector -- SECS` (as root, on a host
//! or lab VM with ib_uverbs loaded) prints the totals after SECS seconds as JSON.
use rdma_trace::{Selection, TraceCollector};
use std::time::Duration;

fn main() -> std::process::ExitCode {
    let secs: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    let collector = match TraceCollector::start(Selection::All) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("collector: {e}");
            return std::process::ExitCode::from(1);
        }
    };
    eprintln!("collector: ready");
    std::thread::sleep(Duration::from_secs(secs));
    match collector.snapshot() {
        Ok(stats) => {
            println!(
                "{}",
                serde_json::to_string_pretty(&stats).unwrap_or_default()
            );
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("collector: {e}");
            std::process::ExitCode::from(1)
        }
    }
}
