//! rdmad: the RDMA exporter.
//!
//! Serves `/metrics` (Prometheus exposition, collected fresh on every scrape), `/healthz`
//! and a small index page. `--once` prints one exposition to stdout and exits, for
//! node_exporter's textfile collector.
//!
//! Exit codes: 0 clean shutdown, 1 failure (bad flag value, cannot bind), 2 usage error.
//! A host with no RDMA device is not an error: rdmad logs it and serves its own metrics.
#![forbid(unsafe_code)]

mod exposition;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result};
use axum::http::{header, StatusCode};
use axum::response::{Html, IntoResponse};
use axum::routing::get;
use axum::Router;
use clap::Parser;

/// The default port: not used by node_exporter (9100), rdma_exporter (9879) or the other
/// RDMA exporters we know of (9315, 9683).
pub const DEFAULT_PORT: u16 = 9736;

/// rdmad: RDMA devices, counters, resources and probes as Prometheus metrics.
#[derive(Parser, Debug, Clone)]
#[command(name = "rdmad", version)]
pub struct Cli {
    /// Address to listen on for HTTP.
    #[arg(
        long = "web.listen-address",
        env = "RDMAD_LISTEN_ADDRESS",
        default_value = "0.0.0.0:9736"
    )]
    pub listen: SocketAddr,
    /// Where sysfs is mounted (RDMA devices are under PATH/class/infiniband).
    #[arg(long = "path.sysfs", env = "RDMAD_PATH_SYSFS", default_value = "/sys")]
    pub sysfs: PathBuf,
    /// Print one exposition to stdout and exit.
    #[arg(long)]
    pub once: bool,
}

fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("RDMAD_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    match real_main(cli) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rdmad: {e:#}");
            std::process::ExitCode::from(1)
        }
    }
}

fn real_main(cli: Cli) -> Result<()> {
    let exporter = Arc::new(exposition::Exporter::new(cli.sysfs.clone()));
    if cli.once {
        let text = exporter.scrape();
        print!("{text}");
        return Ok(());
    }
    let devices = exporter.device_names();
    if devices.is_empty() {
        tracing::warn!(
            sysfs = %cli.sysfs.display(),
            "no RDMA devices found (no RDMA stack or no device); serving exporter metrics only"
        );
    } else {
        tracing::info!(devices = ?devices, "RDMA devices found");
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the runtime")?;
    rt.block_on(serve(cli, exporter))
}

async fn serve(cli: Cli, exporter: Arc<exposition::Exporter>) -> Result<()> {
    let app = Router::new()
        .route("/", get(index))
        .route("/healthz", get(|| async { "ok\n" }))
        .route(
            "/metrics",
            get(move || {
                let exporter = Arc::clone(&exporter);
                async move {
                    match tokio::task::spawn_blocking(move || exporter.scrape()).await {
                        Ok(body) => (
                            StatusCode::OK,
                            [(header::CONTENT_TYPE, exposition::CONTENT_TYPE)],
                            body,
                        )
                            .into_response(),
                        Err(e) => {
                            (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response()
                        }
                    }
                }
            }),
        );
    let listener = tokio::net::TcpListener::bind(cli.listen)
        .await
        .with_context(|| format!("cannot listen on {}", cli.listen))?;
    tracing::info!(address = %cli.listen, "listening");
    axum::serve(listener, app)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await
        .context("serving HTTP")
}

async fn index() -> Html<&'static str> {
    Html(
        "<html><head><title>rdmad</title></head><body><h1>rdmad</h1>\
         <p>RDMA exporter.</p><ul><li><a href=\"/metrics\">/metrics</a></li>\
         <li><a href=\"/healthz\">/healthz</a></li></ul></body></html>\n",
    )
}
