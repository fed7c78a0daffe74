//! A real Prometheus scraping rdmad over a fixture tree (fails, does not skip, when `CI` is
//! set and Prometheus is missing).

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod common;

use common::{once, prometheus_tool, rdmad, tempdir, workspace, KillOnDrop};

/// A free loopback port (a race with other processes is possible but harmless here).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// GET a body from 127.0.0.1:port (whatever the status; no proxy from the environment).
fn http_get(port: u16, path: &str) -> Option<String> {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_secs(10)))
        .http_status_as_error(false)
        .proxy(None)
        .build()
        .into();
    let mut response = agent
        .get(format!("http://127.0.0.1:{port}{path}"))
        .call()
        .ok()?;
    response.body_mut().read_to_string().ok()
}

/// The value of the first result of a Prometheus instant query, as Prometheus prints it.
fn query(prometheus: u16, expr: &str) -> Option<String> {
    let encoded: String = expr
        .bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect();
    let body = http_get(prometheus, &format!("/api/v1/query?query={encoded}"))?;
    // The value is the string after the timestamp in "value":[t,"v"].
    let value = body.split("\"value\":[").nth(1)?;
    let value = value.split(',').nth(1)?;
    Some(value.split('"').nth(1)?.to_string())
}

#[test]
fn prometheus_scrapes_rdmad() {
    // The real Prometheus (it negotiates OpenMetrics) scraping rdmad over a fixture tree.
    let Some(prometheus) = prometheus_tool("prometheus", "prometheus_scrapes_rdmad") else {
        return;
    };
    let root = workspace().join("tests/fixtures/sysfs/mlx5-roce");
    let exposition = once(&root, &[]);
    let samples = exposition
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .count();
    let rdmad_port = free_port();
    let _rdmad = KillOnDrop(
        rdmad()
            .arg(format!("--web.listen-address=127.0.0.1:{rdmad_port}"))
            .arg("--path.sysfs")
            .arg(&root)
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let dir = tempdir("prometheus");
    std::fs::write(
        dir.join("prometheus.yml"),
        format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n\
             scrape_configs:\n  - job_name: rdmad\n    static_configs:\n      - targets: ['127.0.0.1:{rdmad_port}']\n"
        ),
    )
    .unwrap();
    let prom_port = free_port();
    let _prometheus = KillOnDrop(
        Command::new(prometheus)
            .arg(format!(
                "--config.file={}",
                dir.join("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{prom_port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    let up = loop {
        if let Some(up) = query(prom_port, "up{job=\"rdmad\"}") {
            if up == "1" || Instant::now() > deadline {
                break up;
            }
        }
        assert!(
            Instant::now() < deadline,
            "Prometheus never answered a query"
        );
        std::thread::sleep(Duration::from_millis(250));
    };
    assert_eq!(up, "1", "Prometheus could not scrape rdmad");
    // Served, rdmad also exports its responses by encoding (gzip, zstd, identity): 3 more.
    assert_eq!(
        query(prom_port, "scrape_samples_scraped{job=\"rdmad\"}").as_deref(),
        Some((samples + 3).to_string().as_str()),
        "Prometheus ingested a different number of samples than rdmad exposes"
    );
    let want = exposition
        .lines()
        .find(|l| l.starts_with("rdma_port_xmit_data_bytes_total{device=\"mlx5_0\""))
        .and_then(|l| l.rsplit_once(' '))
        .map(|(_, v)| v.to_string())
        .expect("the fixture has xmit data");
    assert_eq!(
        query(
            prom_port,
            "rdma_port_xmit_data_bytes_total{device=\"mlx5_0\"}"
        )
        .as_deref(),
        Some(want.as_str())
    );
    assert_eq!(
        query(
            prom_port,
            "rdma_port_info{device=\"mlx5_0\",netdev=\"ens1f0np0\"}"
        )
        .as_deref(),
        Some("1")
    );
    // Prometheus asks for gzip and gets it: its scrapes are counted as gzip (from the
    // second scrape on, which shows the first), none as identity or zstd.
    let gzip = loop {
        let gzip = query(
            prom_port,
            "rdma_exporter_metrics_responses_total{encoding=\"gzip\"}",
        );
        if gzip.as_deref().is_some_and(|v| v != "0") || Instant::now() > deadline {
            break gzip;
        }
        std::thread::sleep(Duration::from_millis(250));
    };
    assert!(
        gzip.as_deref()
            .and_then(|v| v.parse::<u64>().ok())
            .is_some_and(|n| n >= 1),
        "no gzip response counted while Prometheus scraped: {gzip:?}"
    );
    for other in ["identity", "zstd"] {
        assert_eq!(
            query(
                prom_port,
                &format!("rdma_exporter_metrics_responses_total{{encoding=\"{other}\"}}")
            )
            .as_deref(),
            Some("0"),
            "a scrape of Prometheus' was answered {other}"
        );
    }
    drop(_prometheus);
    let _ = std::fs::remove_dir_all(&dir);
}
