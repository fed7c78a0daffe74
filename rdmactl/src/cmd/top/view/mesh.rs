//! The pingmesh pane: the verdicts `rdmactl mesh` prints (the same lines, from the same
//! code: `cmd::mesh::summary`), shown first when `--prometheus` or `--target` is given.

use super::table;
use crate::cmd::mesh;
use crate::cmd::top::state::mesh::MeshStatus;
use crate::cmd::top::state::TopState;
use ratatui::layout::Rect;
use ratatui::style::{Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Block, Paragraph, Wrap};
use ratatui::Frame;

/// The most lines the pane takes (a longer list is cut; `rdmactl mesh` prints it all).
const MAX_LINES: usize = 6;

/// The pane's title and lines; `None` without a pingmesh source.
pub fn lines(state: &TopState) -> Option<(String, Vec<Line<'static>>)> {
    let (title, lines) = match &state.mesh {
        MeshStatus::NotConfigured => return None,
        MeshStatus::Pending => (
            " Pingmesh ".to_string(),
            vec![Line::from("reading the pingmesh...")],
        ),
        MeshStatus::Failed(why) => (
            " Pingmesh ".to_string(),
            vec![Line::styled(
                format!("pingmesh unavailable: {why}"),
                table::alarm(),
            )],
        ),
        MeshStatus::Report(r) => {
            let title = format!(
                " Pingmesh (from {}): {} hosts, {} pairs, {} verdict(s) ",
                r.source,
                r.hosts.len(),
                r.pairs.len(),
                r.verdicts.len()
            );
            let lines = match mesh::thresholds() {
                Ok(t) => mesh::summary(r, &t)
                    .into_iter()
                    .map(|(text, verdict)| {
                        if verdict {
                            Line::styled(text, table::alarm().add_modifier(Modifier::BOLD))
                        } else {
                            Line::from(text)
                        }
                    })
                    .collect(),
                Err(e) => vec![Line::styled(format!("{e:#}"), table::alarm())],
            };
            (title, lines)
        }
    };
    Some((title, lines))
}

/// Rows the pane needs (0 without a pingmesh source).
pub fn height(state: &TopState) -> u16 {
    lines(state).map_or(0, |(_, l)| l.len().min(MAX_LINES) as u16 + 2)
}

/// Draw the pane.
pub fn draw(frame: &mut Frame<'_>, area: Rect, state: &TopState) {
    let Some((title, lines)) = lines(state) else {
        return;
    };
    let widget = Paragraph::new(lines).wrap(Wrap { trim: false }).block(
        Block::bordered()
            .title(title)
            .title_style(Style::new().add_modifier(Modifier::BOLD))
            .border_style(table::border(false)),
    );
    frame.render_widget(widget, area);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cmd::mesh::{report, summary, thresholds, Source, DEFAULT_INTERVAL};
    use ratatui::backend::TestBackend;
    use ratatui::Terminal;
    use rdmakit::catalog::Catalog;
    use std::io::{BufRead, BufReader, Write};
    use std::net::TcpListener;

    const HOSTS: [&str; 4] = ["h1", "h2", "h3", "h4"];

    /// A Prometheus API answer: an instant vector of (labels, value).
    fn vector(samples: &[(Vec<(&str, String)>, f64)]) -> String {
        let result: Vec<serde_json::Value> = samples
            .iter()
            .map(|(labels, v)| {
                let metric: serde_json::Map<String, serde_json::Value> = labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), serde_json::Value::from(v.clone())))
                    .collect();
                serde_json::json!({"metric": metric, "value": [1764936190.0, v.to_string()]})
            })
            .collect();
        serde_json::json!({"status": "success", "data": {"resultType": "vector", "result": result}})
            .to_string()
    }

    /// The recording rules' series of a 4-host mesh whose h4 is down (not scraped: no pairs
    /// as prober; its probers time out: status 2), as the Prometheus API returns them.
    fn answer(path: &str) -> String {
        let pair = |p: &str, t: &str| {
            vec![
                ("__name__", String::new()),
                ("job", "rdmad".to_string()),
                ("instance", format!("{p}:9736")),
                ("peer", format!("10.2.0.{}:9737", &t[1..])),
                ("prober", p.to_string()),
                ("target", t.to_string()),
            ]
        };
        let live = || {
            HOSTS[..3]
                .iter()
                .flat_map(move |p| HOSTS.iter().filter(move |t| *t != p).map(move |t| (*p, *t)))
        };
        if path.contains("query=rdma%3Aprobe_pair_status") {
            let s: Vec<_> = live()
                .map(|(p, t)| (pair(p, t), if t == "h4" { 2.0 } else { 0.0 }))
                .collect();
            vector(&s)
        } else if path.contains("query=rdma%3Aprobe_pair_latency_seconds%3Atypical") {
            let s: Vec<_> = live()
                .filter(|(_, t)| *t != "h4")
                .map(|(p, t)| (pair(p, t), 2.1e-5))
                .collect();
            vector(&s)
        } else if path.contains("query=rdma%3Aprobe_pair_loss_direction") {
            vector(&[])
        } else if path.starts_with("/api/v1/alerts") {
            serde_json::json!({"status": "success", "data": {"alerts": [{
                "labels": {"alertname": "RdmaHostUnreachable", "host": "h4", "a": "h4",
                           "b": "h4", "fault": "host", "job": "rdmad", "severity": "critical"},
                "state": "firing", "activeAt": "2026-12-04T12:03:10.123Z", "value": "3e+00"}]}})
            .to_string()
        } else {
            serde_json::json!({"status": "error", "error": format!("unexpected {path}")})
                .to_string()
        }
    }

    /// A Prometheus API on 127.0.0.1 answering [`answer`]; its base URL.
    fn prometheus() -> String {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut line = String::new();
                reader.read_line(&mut line).unwrap();
                loop {
                    let mut h = String::new();
                    if reader.read_line(&mut h).unwrap_or(0) == 0 || h.trim().is_empty() {
                        break;
                    }
                }
                let path = line.split_whitespace().nth(1).unwrap_or_default();
                let body = answer(path);
                let _ = write!(
                    stream,
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            }
        });
        format!("http://127.0.0.1:{port}")
    }

    fn screen(state: &TopState, width: u16) -> String {
        let mut term = Terminal::new(TestBackend::new(width, height(state))).unwrap();
        term.draw(|f| draw(f, f.area(), state)).unwrap();
        let buf = term.backend().buffer().clone();
        (0..buf.area.height)
            .map(|y| {
                (0..buf.area.width)
                    .map(|x| buf[(x, y)].symbol().to_string())
                    .collect::<String>()
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    #[test]
    fn top_opens_with_the_verdicts_of_mesh_from_prometheus() {
        let source = Source {
            prometheus: Some(prometheus()),
            ..Source::default()
        };
        let r = report(&source, DEFAULT_INTERVAL).unwrap();
        // What `rdmactl mesh --prometheus` prints under its matrix...
        let want = summary(&r, &thresholds().unwrap());
        assert_eq!(
            want,
            vec![(
                "h4: unreachable (host) on 3 of 3 pairs since 12:03:10 UTC".to_string(),
                true
            )]
        );
        let mut text = Vec::new();
        mesh::print_text(&r, &thresholds().unwrap(), false, &mut text).unwrap();
        let text = String::from_utf8(text).unwrap();
        assert!(text.ends_with(&format!("{}\n", want[0].0)), "{text}");
        // ...is what top's pane shows, on screen.
        let mut state = TopState::new(Catalog::embedded().unwrap(), None);
        assert!(lines(&state).is_none());
        assert_eq!(height(&state), 0);
        state.mesh = MeshStatus::Report(Box::new(r));
        let (title, shown) = lines(&state).unwrap();
        assert_eq!(
            title,
            " Pingmesh (from prometheus): 4 hosts, 9 pairs, 1 verdict(s) "
        );
        let shown: Vec<String> = shown.iter().map(|l| l.to_string()).collect();
        assert_eq!(shown, vec![want[0].0.clone()]);
        let drawn = screen(&state, 100);
        assert!(drawn.contains(&want[0].0), "{drawn}");
        assert!(drawn.contains("Pingmesh (from prometheus)"), "{drawn}");
    }

    #[test]
    fn a_pingmesh_that_cannot_be_read_says_why() {
        // A port nobody listens on.
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let source = Source {
            prometheus: Some(format!("http://127.0.0.1:{port}")),
            ..Source::default()
        };
        let e = report(&source, DEFAULT_INTERVAL).unwrap_err();
        let mut state = TopState::new(Catalog::embedded().unwrap(), None);
        state.mesh = MeshStatus::Failed(format!("{e:#}"));
        let drawn = screen(&state, 200);
        assert!(drawn.contains("pingmesh unavailable: "), "{drawn}");
        state.mesh = MeshStatus::Pending;
        assert!(screen(&state, 60).contains("reading the pingmesh"));
    }
}
