//! The HTTP face (`/metrics`, `/healthz`, `/`): it serves the collectors [`crate::daemon`] built
//! and counts its responses ([`crate::responses`]).
//!
//! Every scrape runs the enabled collectors on a blocking thread (sysfs reads block) and
//! encodes the result in the format the `Accept` header asks for. At most
//! `--web.max-requests` scrapes are accepted at once; more get `503 Service Unavailable` at
//! once rather than queueing behind slow reads. Of the accepted ones, at most one per CPU
//! (up to [`MAX_COLLECTING`]) collects at a time, the others wait their turn: more would not
//! finish sooner (reading sysfs is CPU work in the kernel), but each would hold its own
//! snapshot, metric set and allocator arena, so memory would grow with the number of
//! concurrent scrapers. Every scrape still collects after it arrived (nothing is shared
//! between scrapes). SIGINT and SIGTERM stop the server cleanly.
//!
//! Responses are compressed when the request's `Accept-Encoding` asks for it (zstd or gzip,
//! q-values honoured, identity otherwise, `406 Not Acceptable` when even identity is refused,
//! `Vary: Accept-Encoding` on every compressible response; [`crate::encoding`]). The
//! exposition is compressed whole on the scrape's blocking thread, after its collection slot
//! is given back, and its plain copy dropped. Prometheus always sends `Accept-Encoding: gzip`;
//! gzip is libdeflate at `--web.gzip-level` (6 by default; its bytes and CPU per level are in
//! [`crate::encoding`] and the `compression_levels` bench), and
//! `--web.disable-compression` turns it off. Each response is logged at
//! debug level (target `rdmad::http`) with its path, status, encoding and user agent, and
//! each `/metrics` response is counted by encoding in
//! `rdma_exporter_metrics_responses_total{encoding}` (shown by the scrapes after it), so the
//! encoding Prometheus' scrapes get is a query away.

use std::sync::Arc;

use anyhow::{Context, Result};
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use tokio::sync::Semaphore;

/// At most this many scrapes collect at the same time (fewer on hosts with fewer CPUs).
pub const MAX_COLLECTING: usize = 4;

use crate::cli::Settings;
use crate::collector::{Collectors, TABLE};
use crate::encoding::{Coding, NotAcceptable};
use crate::metrics::{negotiate, Format};
use crate::responses::ResponseCounts;
use crate::webconfig::WebConfig;

/// Shared by all requests.
pub struct Exporter {
    collectors: Collectors,
    permits: Arc<Semaphore>,
    collecting: Arc<Semaphore>,
    /// `/metrics` responses by encoding, counted by [`log_response`], exported by the scrapes.
    responses: ResponseCounts,
    /// The codings responses may be sent in besides identity (none with
    /// `--web.disable-compression`), best first.
    codings: &'static [Coding],
    /// `--web.gzip-level`.
    gzip_level: u8,
}

impl Exporter {
    /// Serve `collectors` with the HTTP settings of `settings`.
    pub fn new(settings: &Settings, collectors: Collectors) -> Exporter {
        Exporter {
            collectors,
            responses: ResponseCounts::default(),
            codings: if settings.disable_compression {
                &[]
            } else {
                &[Coding::Zstd, Coding::Gzip]
            },
            gzip_level: settings.gzip_level,
            permits: Arc::new(Semaphore::new(settings.max_requests)),
            collecting: Arc::new(Semaphore::new(
                std::thread::available_parallelism()
                    .map(|n| n.get())
                    .unwrap_or(1)
                    .clamp(1, MAX_COLLECTING),
            )),
        }
    }

    /// One exposition in `format`.
    pub fn render(&self, format: Format) -> String {
        let mut set = self.collectors.scrape();
        self.responses.export(&mut set);
        set.encode(format)
    }
}

/// The process's one async runtime: HTTP serving, and the probe engine's DNS lookups. Scrapes
/// run on its blocking threads, at most `--web.max-requests` (1 to 64) at a time.
pub fn runtime(settings: &Settings) -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .max_blocking_threads(settings.max_requests.clamp(1, 64))
        .enable_all()
        .build()
        .context("starting the runtime")
}

/// Serve `collectors` on `runtime` until SIGINT/SIGTERM with `settings` (listen address,
/// limits, compression) and the web config `web` (`--web.config.file`: TLS, basic auth).
pub fn run(
    runtime: &tokio::runtime::Runtime,
    settings: &Settings,
    collectors: Collectors,
    web: Option<WebConfig>,
) -> Result<()> {
    let exporter = Arc::new(Exporter::new(settings, collectors));
    runtime.block_on(serve(&settings.listen_address, exporter, web))
}

/// Bind `address`: `HOST:PORT`, `[V6]:PORT`, or `:PORT` for every interface (IPv6 and IPv4
/// where the host has IPv6, else IPv4 only).
pub async fn bind(address: &str) -> Result<tokio::net::TcpListener> {
    if let Some(port) = address.strip_prefix(':') {
        let port: u16 = port
            .parse()
            .with_context(|| format!("bad port in listen address {address:?}"))?;
        return match tokio::net::TcpListener::bind(("::", port)).await {
            Ok(listener) => Ok(listener),
            Err(_) => tokio::net::TcpListener::bind(("0.0.0.0", port))
                .await
                .with_context(|| format!("cannot listen on {address}")),
        };
    }
    tokio::net::TcpListener::bind(address)
        .await
        .with_context(|| format!("cannot listen on {address}"))
}

async fn serve(address: &str, exporter: Arc<Exporter>, web: Option<WebConfig>) -> Result<()> {
    let app = router(exporter);
    let listener = bind(address).await?;
    let local = listener.local_addr().context("reading the bound address")?;
    let Some(web) = web else {
        tracing::info!(address = %local, "listening");
        return serve_connections(listener, app, None, shutdown_signal()).await;
    };
    let app = web.apply(app);
    let users = web.auth.as_ref().map_or(0, |a| a.users());
    let tls = web.tls.is_some();
    tracing::info!(address = %local, tls, basic_auth_users = users, "listening");
    serve_connections(listener, app, web.tls, shutdown_signal()).await
}

/// A TLS handshake must finish within this time, or the connection is dropped.
pub const TLS_HANDSHAKE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// The request headers must arrive within this time once a connection is up.
pub const HEADER_READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// Serve `app` on `listener`, over TLS when `tls` is given, plain HTTP/1.1 otherwise, until
/// `shutdown` completes, then wait for the open connections to finish their requests. The one
/// accept loop of both: the same header read timeout ([`HEADER_READ_TIMEOUT`]), accept error
/// handling and graceful shutdown; TLS adds only the handshake ([`TLS_HANDSHAKE_TIMEOUT`]).
pub async fn serve_connections(
    listener: tokio::net::TcpListener,
    app: Router,
    tls: Option<Arc<rustls::ServerConfig>>,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<()> {
    use hyper_util::server::graceful::GracefulShutdown;
    use hyper_util::service::TowerToHyperService;

    let acceptor = tls.map(tokio_rustls::TlsAcceptor::from);
    let graceful = GracefulShutdown::new();
    // Connections still in their handshake are dropped at shutdown, not waited for.
    let (stopping, stop) = tokio::sync::watch::channel(false);
    tokio::pin!(shutdown);
    loop {
        let (tcp, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of file descriptors and the like: wait instead of spinning.
                    tracing::warn!("accepting a connection: {e}");
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let acceptor = acceptor.clone();
        let service = TowerToHyperService::new(app.clone());
        // Taken now: `graceful` is gone once shutdown starts. A connection still in its
        // handshake then is dropped (`stop`); one being served finishes its request.
        let watcher = graceful.watcher();
        let mut stop = stop.clone();
        tokio::spawn(async move {
            let Some(acceptor) = acceptor else {
                serve_connection(tcp, service, watcher, peer).await;
                return;
            };
            let handshake = tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, acceptor.accept(tcp));
            let stream = tokio::select! {
                done = handshake => match done {
                    Ok(Ok(stream)) => stream,
                    Ok(Err(e)) => {
                        tracing::debug!(%peer, "TLS handshake failed: {e}");
                        return;
                    }
                    Err(_) => {
                        tracing::debug!(%peer, "TLS handshake timed out");
                        return;
                    }
                },
                _ = stop.wait_for(|stop| *stop) => return,
            };
            serve_connection(stream, service, watcher, peer).await;
        });
    }
    drop(listener);
    let _ = stopping.send(true);
    graceful.shutdown().await;
    Ok(())
}

/// Serve the HTTP/1.1 requests of one connection (plain or after its TLS handshake), watched
/// by the graceful shutdown.
async fn serve_connection<S>(
    stream: S,
    service: hyper_util::service::TowerToHyperService<Router>,
    watcher: hyper_util::server::graceful::Watcher,
    peer: std::net::SocketAddr,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    use hyper_util::rt::{TokioIo, TokioTimer};
    let connection = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT)
        .serve_connection(TokioIo::new(stream), service);
    if let Err(e) = watcher.watch(connection).await {
        tracing::debug!(%peer, "connection: {e}");
    }
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
    tracing::info!("shutting down");
}

/// The routes, for `serve` and tests. `/metrics` and `/` are compressed as the request's
/// `Accept-Encoding` asks (see the module doc); `/healthz` is too small to be worth it.
pub fn router(exporter: Arc<Exporter>) -> Router {
    Router::new()
        .route("/", get(index))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/metrics", get(metrics))
        .with_state(Arc::clone(&exporter))
        .layer(axum::middleware::from_fn_with_state(exporter, log_response))
}

/// Count each `/metrics` response by the encoding sent (`rdma_exporter_metrics_responses_total`)
/// and log each response at debug level: path, status, the encoding sent, the client's agent.
async fn log_response(
    State(exporter): State<Arc<Exporter>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let scrape = request.uri().path() == "/metrics";
    if !tracing::enabled!(target: "rdmad::http", tracing::Level::DEBUG) {
        let response = next.run(request).await;
        if scrape {
            exporter.responses.record(content_encoding(&response));
        }
        return response;
    }
    let path = request.uri().path().to_owned();
    let agent = request
        .headers()
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let response = next.run(request).await;
    if scrape {
        exporter.responses.record(content_encoding(&response));
    }
    let encoding = content_encoding(&response).unwrap_or("identity");
    tracing::debug!(
        target: "rdmad::http",
        path,
        status = response.status().as_u16(),
        encoding,
        user_agent = agent,
        "response"
    );
    response
}

/// A response's `Content-Encoding` (`None`: identity).
fn content_encoding(response: &Response) -> Option<&str> {
    response
        .headers()
        .get(header::CONTENT_ENCODING)
        .and_then(|v| v.to_str().ok())
}

impl Exporter {
    /// The coding to answer a request with, from its `Accept-Encoding`.
    fn coding(&self, headers: &HeaderMap) -> Result<Coding, NotAcceptable> {
        let accept = headers
            .get(header::ACCEPT_ENCODING)
            .and_then(|v| v.to_str().ok());
        crate::encoding::negotiate(accept, self.codings)
    }
}

/// The `406` for a request refusing every coding.
fn not_acceptable(e: NotAcceptable) -> Response {
    (
        StatusCode::NOT_ACCEPTABLE,
        [(header::VARY, "accept-encoding")],
        format!("{e}\n"),
    )
        .into_response()
}

/// A compressible response: `body` in `coding`, with its content type and `Vary`.
fn encoded(content_type: &'static str, coding: Coding, body: Vec<u8>) -> Response {
    let mut response = (
        [
            (header::CONTENT_TYPE, content_type),
            (header::VARY, "accept-encoding"),
        ],
        body,
    )
        .into_response();
    if let Some(name) = coding.header() {
        response.headers_mut().insert(
            header::CONTENT_ENCODING,
            header::HeaderValue::from_static(name),
        );
    }
    response
}

async fn metrics(State(exporter): State<Arc<Exporter>>, headers: HeaderMap) -> Response {
    let coding = match exporter.coding(&headers) {
        Ok(coding) => coding,
        Err(e) => return not_acceptable(e),
    };
    let Ok(permit) = Arc::clone(&exporter.permits).try_acquire_owned() else {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "too many concurrent scrapes (see --web.max-requests)\n",
        )
            .into_response();
    };
    let format = negotiate(headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()));
    // Wait for a collection slot (see the module doc); the semaphore is never closed.
    let Ok(slot) = Arc::clone(&exporter.collecting).acquire_owned().await else {
        return (StatusCode::SERVICE_UNAVAILABLE, "shutting down\n").into_response();
    };
    let worker = Arc::clone(&exporter);
    let result = tokio::task::spawn_blocking(move || {
        // The request permit is held for the whole blocking scrape, the collection slot only
        // while collecting: compressing is not reading sysfs.
        let _permit = permit;
        let text = {
            let _slot = slot;
            worker.render(format)
        };
        crate::encoding::compress(coding, worker.gzip_level, text.into_bytes())
    })
    .await;
    match result {
        Ok(body) => encoded(format.content_type(), coding, body),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("scrape failed: {e}\n"),
        )
            .into_response(),
    }
}

async fn index(State(exporter): State<Arc<Exporter>>, headers: HeaderMap) -> Response {
    let coding = match exporter.coding(&headers) {
        Ok(coding) => coding,
        Err(e) => return not_acceptable(e),
    };
    let enabled = exporter.collectors.names();
    let mut rows = String::new();
    for spec in TABLE {
        let state = if enabled.contains(&spec.name) {
            "enabled"
        } else {
            "disabled"
        };
        rows.push_str(&format!(
            "<tr><td>{}</td><td>{state}</td><td>{}</td></tr>",
            spec.name, spec.help
        ));
    }
    let page = format!(
        "<!DOCTYPE html><html><head><title>rdmad</title></head><body>\
         <h1>rdmad {}</h1><p>RDMA exporter.</p>\
         <ul><li><a href=\"/metrics\">/metrics</a></li><li><a href=\"/healthz\">/healthz</a></li></ul>\
         <h2>Collectors</h2><table><tr><th>name</th><th>state</th><th>what</th></tr>{rows}</table>\
         </body></html>\n",
        env!("CARGO_PKG_VERSION")
    );
    let body = crate::encoding::compress(coding, exporter.gzip_level, page.into_bytes());
    encoded("text/html; charset=utf-8", coding, body)
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod serve_tests;
