//! rdmad as a library: everything but `main`, so integration tests and benchmarks can drive
//! the same code the binary runs.
//!
//! - [`build_info`]: version, git revision and features (`--version`, `rdma_exporter_build_info`);
//! - [`cli`]: flags (node_exporter style) and their merge with the [`config`] file;
//! - [`collector`]: the collector trait and table, one file per collector;
//! - [`metrics`]: the metric set of one scrape and its encodings (text 0.0.4, OpenMetrics);
//! - [`names`] and [`help`]: how a sysfs counter file becomes a metric name and HELP text;
//! - [`inventory`]: every family rdmad can export, as data (`--print-metrics json`);
//! - [`responses`]: the `/metrics` responses by encoding the server counts and exports;
//! - [`daemon`]: the composition root: collectors, probe engine, device monitor, then `--once`
//!   or the server;
//! - [`monitor`]: the device monitor (devices added and removed, logged);
//! - [`server`]: the HTTP face (`/metrics`, `/healthz`, `/`);
//! - [`webconfig`]: `--web.config.file`, TLS and basic auth (the exporter-toolkit format).
#![forbid(unsafe_code)]

pub mod build_info;
pub mod cli;
pub mod collector;
pub mod config;
pub mod daemon;
pub mod encoding;
pub mod help;
pub mod inventory;
pub mod metrics;
pub mod monitor;
pub mod names;
pub mod options;
pub mod responses;
pub mod server;
pub mod webconfig;
