//! One scenario on one mesh size as a scrape job, and the HTTP server Prometheus scrapes.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Instant;

use crate::mesh::Fault;
use crate::simulate::{PairSeries, Timeline};
use crate::templates::{Role, Template};
use crate::{host_ip, rack_of, BASE_RTT_US, METRICS_PORT, P99_RTT_US, PROBE_PORT, STEP};

/// One scenario on one mesh size, simulated, served to Prometheus as one scrape job.
pub(crate) struct Combo {
    pub(crate) n: usize,
    pub(crate) fault: Fault,
    pub(crate) time: Timeline,
    pub(crate) job: String,
    /// The evaluated pairs and their samples, sorted.
    pub(crate) data: Vec<((u32, u32), PairSeries)>,
    pub(crate) selection: String,
}

impl Combo {
    /// The exposition Prometheus scrapes at sample `s`: the evaluated pairs' series as
    /// rdmad renders them, without the dead probers' while they are down.
    pub(crate) fn render(&self, templates: &[Template], s: usize) -> String {
        let s = s.min(self.time.samples() - 1);
        let now = s as u64 * STEP;
        let mut out = String::with_capacity(self.data.len() * templates.len() * 180);
        for ((p, t), series) in &self.data {
            if self.fault.dead(*p) && self.time.faulty(now) {
                continue; // not scraped: Prometheus marks its series stale
            }
            let instance = format!("{}:{METRICS_PORT}", host_ip(*p as usize));
            let peer = format!("{}:{PROBE_PORT}", host_ip(*t as usize));
            let rack = rack_of(*t as usize);
            for tpl in templates {
                let body = tpl.text.replace("@PEER@", &peer).replace("@RACK@", &rack);
                let Some((name, labels)) = body.split_once('{') else {
                    continue;
                };
                let _ = write!(out, "{name}{{instance=\"{instance}\",{labels} ");
                let _ = match tpl.role {
                    Role::Status => writeln!(out, "{}", series.status[s]),
                    Role::Sent => writeln!(out, "{}", series.sent[s]),
                    Role::LostRequest => writeln!(out, "{}", series.lost_request[s]),
                    Role::LostReply => writeln!(out, "{}", series.lost_reply[s]),
                    Role::Typical => writeln!(out, "{}", BASE_RTT_US / 1e6),
                    Role::P99 => writeln!(out, "{}", P99_RTT_US / 1e6),
                };
            }
        }
        out
    }

    pub(crate) fn series(&self, templates: &[Template]) -> usize {
        self.data.len() * templates.len()
    }
}

/// Serves `/metrics/K` (combo K at the sample the wall clock is at) on 127.0.0.1.
pub(crate) fn serve(
    listener: std::net::TcpListener,
    combos: Arc<Vec<Combo>>,
    templates: Arc<Vec<Template>>,
    start: Instant,
) {
    use std::io::{BufRead, BufReader, Write};
    for stream in listener.incoming() {
        let Ok(stream) = stream else { continue };
        let combos = Arc::clone(&combos);
        let templates = Arc::clone(&templates);
        std::thread::spawn(move || {
            let mut reader = BufReader::new(&stream);
            let mut line = String::new();
            if reader.read_line(&mut line).is_err() {
                return;
            }
            let path = line
                .split_whitespace()
                .nth(1)
                .unwrap_or_default()
                .to_string();
            // The rest of the request head.
            loop {
                let mut h = String::new();
                match reader.read_line(&mut h) {
                    Ok(0) | Err(_) => break,
                    Ok(_) if h.trim().is_empty() => break,
                    Ok(_) => {}
                }
            }
            let s = (start.elapsed().as_secs() / STEP) as usize;
            let body = path
                .strip_prefix("/metrics/")
                .and_then(|k| k.parse::<usize>().ok())
                .and_then(|k| combos.get(k))
                .map(|c| c.render(&templates, s));
            let mut w = &stream;
            let _ = match body {
                Some(b) => write!(
                    w,
                    "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{b}",
                    b.len()
                ),
                None => write!(w, "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"),
            };
        });
    }
}
