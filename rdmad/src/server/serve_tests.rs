//! The accept loop of plain HTTP and TLS ([`serve_connections`]).

use super::*;

/// A self-signed certificate for 127.0.0.1 (made with rcgen, written to `dir`) as a
/// rustls server config, loaded the way a web config file is.
fn tls_config(dir: &std::path::Path) -> Arc<rustls::ServerConfig> {
    let made = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()])
        .expect("a self-signed certificate");
    std::fs::write(dir.join("c.pem"), made.cert.pem()).unwrap();
    std::fs::write(dir.join("k.pem"), made.signing_key.serialize_pem()).unwrap();
    let yaml = "tls_server_config:\n  cert_file: c.pem\n  key_file: k.pem\n";
    let web = crate::webconfig::parse(yaml, dir).expect("valid web config");
    web.tls.expect("the web config enables TLS")
}

/// Plain HTTP goes through the same accept loop: a request is answered, and shutdown
/// returns once the connection is done.
#[tokio::test]
async fn plain_http_is_served_by_the_same_loop() {
    let listener = bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let app = Router::new().route("/healthz", get(|| async { "ok\n" }));
    let server = tokio::spawn(serve_connections(listener, app, None, async {
        let _ = stopped.await;
    }));
    // A blocking client on its own thread (tokio's io-util is not built in).
    let answer = tokio::task::spawn_blocking(move || {
        use std::io::{Read, Write};
        let mut client = std::net::TcpStream::connect(address).unwrap();
        client
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .unwrap();
        let mut answer = String::new();
        client.read_to_string(&mut answer).unwrap();
        answer
    })
    .await
    .unwrap();
    assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
    assert!(answer.ends_with("\r\n\r\nok\n"), "{answer}");
    stop.send(()).unwrap();
    let result = tokio::time::timeout(std::time::Duration::from_secs(10), server).await;
    assert!(matches!(result, Ok(Ok(Ok(())))), "{result:?}");
}

/// Shutdown does not wait for a client stuck in its TLS handshake (that would take
/// TLS_HANDSHAKE_TIMEOUT).
#[tokio::test]
async fn shutdown_drops_connections_in_their_handshake() {
    let dir = std::env::temp_dir().join(format!("rdmad-server-tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let tls = tls_config(&dir);
    let listener = bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let app = Router::new().route("/healthz", get(|| async { "ok\n" }));
    let server = tokio::spawn(serve_connections(listener, app, Some(tls), async {
        let _ = stopped.await;
    }));
    // Connected, says nothing: its handshake waits for the client hello.
    let connected = tokio::time::Instant::now();
    let _silent = tokio::net::TcpStream::connect(address).await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    let started = std::time::Instant::now();
    stop.send(()).unwrap();
    // Waiting for the silent client would end its handshake's timeout, which started
    // when the server accepted it (after `connected`): returning before then is the proof.
    let result = tokio::time::timeout_at(connected + TLS_HANDSHAKE_TIMEOUT, server).await;
    assert!(
        matches!(result, Ok(Ok(Ok(())))),
        "serve_connections waited for the handshake timeout instead of dropping it: {result:?}"
    );
    // Past the test harness' capture, so the log shows it.
    let _ = std::io::Write::write_fmt(
        &mut std::io::stderr(),
        format_args!(
            "figure: serve_connections returned {:.1} ms after the stop signal\n",
            started.elapsed().as_secs_f64() * 1e3
        ),
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
