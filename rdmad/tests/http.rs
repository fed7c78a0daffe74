//! rdmad's HTTP face end to end: the endpoints, content negotiation (Accept) and response
//! compression (Accept-Encoding), against the binary on a loopback port.

use std::io::Read;
use std::path::Path;
use std::process::Child;

mod common;

use common::{normalize, rdmad, spawn_listening, workspace, KillOnDrop, SYSFS_ONLY};

/// A running rdmad on a free loopback port; killed on drop.
struct Server {
    child: Child,
    address: String,
}

impl Server {
    fn start(root: &Path) -> Server {
        let (child, address) = spawn_listening(
            rdmad()
                .arg("--web.listen-address=127.0.0.1:0")
                .arg("--path.sysfs")
                .arg(root),
        );
        Server { child, address }
    }

    /// (status line, headers, body) of a GET.
    fn get(&self, path: &str, accept: Option<&str>) -> (String, String, String) {
        let headers: Vec<(&str, &str)> = accept.map(|a| ("Accept", a)).into_iter().collect();
        let (status, headers, body) = get_bytes(&self.address, path, &headers);
        (
            status,
            headers,
            String::from_utf8(body).expect("a UTF-8 body"),
        )
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn http_endpoints_and_content_negotiation() {
    let server = Server::start(&workspace().join("tests/fixtures/sysfs/mlx5-ib"));

    let (status, headers, body) = server.get("/metrics", None);
    assert!(status.contains("200"), "{status}");
    assert!(
        headers.contains("content-type: text/plain; version=0.0.4; charset=utf-8"),
        "{headers}"
    );
    assert!(!body.contains("# EOF"));
    assert!(
        body.contains("# TYPE rdma_port_xmit_data_bytes_total counter\n"),
        "{body}"
    );

    let prometheus_accept = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
    let (status, headers, body) = server.get("/metrics", Some(prometheus_accept));
    assert!(status.contains("200"));
    assert!(
        headers
            .contains("content-type: application/openmetrics-text; version=1.0.0; charset=utf-8"),
        "{headers}"
    );
    assert!(body.ends_with("# EOF\n"), "{body}");
    assert!(body.contains("# TYPE rdma_port_xmit_data_bytes counter\n"));
    assert!(body.contains("rdma_port_xmit_data_bytes_total{device=\"mlx5_0\",port=\"1\"}"));

    let (status, _, body) = server.get("/healthz", None);
    assert!(status.contains("200"));
    assert_eq!(body, "ok\n");

    let (status, _, body) = server.get("/", None);
    assert!(status.contains("200"));
    assert!(body.contains("href=\"/metrics\""));
    assert!(body.contains("sysfs_counters"));

    let (status, _, _) = server.get("/nope", None);
    assert!(status.contains("404"), "{status}");
}

/// (status line, headers in lower case, body) of a GET to `address` with extra request
/// headers; the body as bytes, as sent (this client decodes no compression: ureq without its
/// gzip feature, so `content-encoding` and `content-length` are the server's).
fn get_bytes(address: &str, path: &str, headers: &[(&str, &str)]) -> (String, String, Vec<u8>) {
    let mut request = live_tests::http_agent().get(format!("http://{address}{path}"));
    for (k, v) in headers {
        request = request.header(*k, *v);
    }
    let mut response = request.call().expect("an HTTP response");
    let status = format!("{:?} {}", response.version(), response.status());
    let headers: String = response
        .headers()
        .iter()
        .map(|(k, v)| format!("{k}: {}\r\n", v.to_str().unwrap_or("")))
        .collect::<String>()
        .to_ascii_lowercase();
    let body = response
        .body_mut()
        .with_config()
        .limit(u64::MAX)
        .read_to_vec()
        .expect("a body");
    (status, headers, body)
}

/// An exposition without its `rdma_exporter_metrics_responses_total` samples (they count the
/// responses before it, so two scrapes never have the same).
fn without_responses(text: &str) -> String {
    text.lines()
        .filter(|l| !l.starts_with("rdma_exporter_metrics_responses_total{"))
        .map(|l| format!("{l}\n"))
        .collect()
}

/// The decoded body of a response with `content-encoding` `encoding`.
fn decode(encoding: &str, body: &[u8]) -> String {
    let mut text = String::new();
    match encoding {
        "gzip" => {
            flate2::read::GzDecoder::new(body)
                .read_to_string(&mut text)
                .expect("valid gzip");
        }
        "zstd" => text = String::from_utf8(zstd::decode_all(body).expect("valid zstd")).unwrap(),
        other => panic!("unexpected encoding {other}"),
    }
    text
}

/// The `content-encoding` of a response's headers (lower case), `None` when absent.
fn content_encoding(headers: &str) -> Option<&str> {
    headers
        .lines()
        .find_map(|l| l.strip_prefix("content-encoding: "))
        .map(str::trim)
}

#[test]
fn responses_are_compressed_as_accept_encoding_asks() {
    let root = workspace().join("tests/fixtures/sysfs/mlx5-roce");
    let (child, address) = spawn_listening(
        rdmad()
            .arg("--web.listen-address=127.0.0.1:0")
            .arg("--path.sysfs")
            .arg(&root)
            .args(SYSFS_ONLY),
    );
    let _server = KillOnDrop(child);
    let get = |accept_encoding: Option<&str>| {
        let headers: Vec<(&str, &str)> = accept_encoding
            .map(|v| ("Accept-Encoding", v))
            .into_iter()
            .collect();
        get_bytes(&address, "/metrics", &headers)
    };
    let (status, headers, plain) = get(None);
    assert!(status.contains("200"), "{status}");
    assert_eq!(content_encoding(&headers), None, "{headers}");
    assert!(headers.contains("vary: accept-encoding"), "{headers}");
    let plain = String::from_utf8(plain).unwrap();
    assert!(
        plain.contains("rdma_port_xmit_data_bytes_total{"),
        "{plain}"
    );

    // (Accept-Encoding, the encoding chosen): q-values decide, unknown codings are ignored,
    // identity is the fallback (the cases of rdmad::encoding's unit test, end to end).
    for (accept, want) in [
        ("gzip", Some("gzip")),
        ("x-gzip", Some("gzip")),
        ("GZIP;q=0.8", Some("gzip")),
        ("zstd", Some("zstd")),
        ("gzip;q=0.5, zstd;q=0.9", Some("zstd")),
        ("zstd;q=0.4, gzip", Some("gzip")),
        ("zstd;q=0, gzip;q=0.1", Some("gzip")),
        ("br, deflate", None),
        ("gzip;q=0", None),
        ("identity", None),
        ("identity, gzip;q=0.5", None),
        ("*;q=0.5, zstd;q=0", Some("gzip")),
        ("", None),
    ] {
        let (status, headers, body) = get(Some(accept));
        assert!(status.contains("200"), "{accept:?}: {status}");
        assert_eq!(content_encoding(&headers), want, "{accept:?}: {headers}");
        assert!(
            headers.contains("vary: accept-encoding"),
            "{accept:?}: {headers}"
        );
        let text = match want {
            Some(encoding) => {
                // Compressed whole, so its length is known and sent.
                let length = format!("content-length: {}", body.len());
                assert!(
                    headers.contains(&length),
                    "{accept:?}: want {length:?} in {headers}"
                );
                assert!(
                    body.len() * 4 < plain.len(),
                    "{accept:?}: {} compressed bytes for {} plain",
                    body.len(),
                    plain.len()
                );
                decode(encoding, &body)
            }
            None => String::from_utf8(body).unwrap(),
        };
        assert_eq!(
            normalize(&without_responses(&text)),
            normalize(&without_responses(&plain)),
            "{accept:?}"
        );
    }
    // Every /metrics response so far is counted by its encoding: 1 + 5 identity, 6 gzip, 2
    // zstd (this response is counted after it is sent).
    let (_, _, counted) = get(None);
    let counted = String::from_utf8(counted).unwrap();
    for (encoding, n) in [("gzip", 6), ("zstd", 2), ("identity", 6)] {
        let line =
            format!("rdma_exporter_metrics_responses_total{{encoding=\"{encoding}\"}} {n}\n");
        assert!(counted.contains(&line), "want {line:?} in\n{counted}");
    }
    // Nothing acceptable (identity refused too): 406, as RFC 9110 says.
    let (status, headers, _) = get(Some("identity;q=0"));
    assert!(status.contains("406"), "{status}");
    assert!(headers.contains("vary: accept-encoding"), "{headers}");

    // OpenMetrics the way Prometheus asks for it, gzip as Prometheus always sends.
    let prometheus_accept =
        "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
    let (status, headers, body) = get_bytes(
        &address,
        "/metrics",
        &[("Accept", prometheus_accept), ("Accept-Encoding", "gzip")],
    );
    assert!(status.contains("200"), "{status}");
    assert!(
        headers.contains("content-type: application/openmetrics-text"),
        "{headers}"
    );
    assert_eq!(content_encoding(&headers), Some("gzip"));
    let om = decode("gzip", &body);
    assert!(om.ends_with("# EOF\n"), "{om}");
    let (_, _, plain_om) = get_bytes(&address, "/metrics", &[("Accept", prometheus_accept)]);
    assert_eq!(
        normalize(&without_responses(&om)),
        normalize(&without_responses(&String::from_utf8(plain_om).unwrap()))
    );

    // Tiny responses are not worth it; the index page is.
    let (_, headers, body) = get_bytes(&address, "/healthz", &[("Accept-Encoding", "gzip")]);
    assert_eq!(content_encoding(&headers), None, "{headers}");
    assert_eq!(body, b"ok\n");
    let (_, headers, body) = get_bytes(&address, "/", &[("Accept-Encoding", "gzip")]);
    assert_eq!(content_encoding(&headers), Some("gzip"));
    assert!(decode("gzip", &body).contains("href=\"/metrics\""));
}

#[test]
fn gzip_level_trades_cpu_for_bytes() {
    let root = workspace().join("tests/fixtures/sysfs/mlx5-roce");
    let mut bodies = Vec::new();
    for level in ["1", "12"] {
        let (child, address) = spawn_listening(
            rdmad()
                .arg("--web.listen-address=127.0.0.1:0")
                .arg("--path.sysfs")
                .arg(&root)
                .args(SYSFS_ONLY)
                .env("RDMAD_WEB_GZIP_LEVEL", level),
        );
        let _server = KillOnDrop(child);
        let (status, headers, body) =
            get_bytes(&address, "/metrics", &[("Accept-Encoding", "gzip")]);
        assert!(status.contains("200"), "level {level}: {status}");
        assert_eq!(content_encoding(&headers), Some("gzip"), "level {level}");
        bodies.push(body);
    }
    let (fast, small) = (&bodies[0], &bodies[1]);
    assert!(
        small.len() < fast.len(),
        "level 12 sent {} bytes, level 1 {}",
        small.len(),
        fast.len()
    );
    assert_eq!(
        normalize(&decode("gzip", small)),
        normalize(&decode("gzip", fast))
    );
}

#[test]
fn disable_compression_sends_identity() {
    let root = workspace().join("tests/fixtures/sysfs/mlx5-roce");
    for how in ["flag", "env"] {
        let mut cmd = rdmad();
        cmd.arg("--web.listen-address=127.0.0.1:0")
            .arg("--path.sysfs")
            .arg(&root)
            .args(SYSFS_ONLY);
        if how == "flag" {
            cmd.arg("--web.disable-compression");
        } else {
            cmd.env("RDMAD_WEB_DISABLE_COMPRESSION", "true");
        }
        let (child, address) = spawn_listening(&mut cmd);
        let _server = KillOnDrop(child);
        let (status, headers, body) =
            get_bytes(&address, "/metrics", &[("Accept-Encoding", "gzip, zstd")]);
        assert!(status.contains("200"), "{how}: {status}");
        assert_eq!(content_encoding(&headers), None, "{how}: {headers}");
        let text = String::from_utf8(body).expect("plain text");
        assert!(text.contains("rdma_port_xmit_data_bytes_total{"), "{how}");
        // The scrape after it shows that one response, identity.
        let (_, _, body) = get_bytes(&address, "/metrics", &[("Accept-Encoding", "gzip")]);
        let text = String::from_utf8(body).expect("plain text");
        for (encoding, n) in [("gzip", 0), ("zstd", 0), ("identity", 1)] {
            let line =
                format!("rdma_exporter_metrics_responses_total{{encoding=\"{encoding}\"}} {n}\n");
            assert!(text.contains(&line), "{how}: want {line:?} in\n{text}");
        }
    }
}
