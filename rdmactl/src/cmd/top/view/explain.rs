//! The explanation pane: the catalog's word on the selected counter (summary, meaning,
//! causes, next steps), or on the selected port (its link and the error counters moving on it).

use super::table;
use crate::cmd::top::state::{Explanation, TopState};
use ratatui::layout::Rect;
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Paragraph, Wrap};
use ratatui::Frame;
use rdmakit::catalog::{CounterInfo, Severity};

fn severity_style(s: Severity) -> Style {
    match s {
        Severity::Error => table::alarm(),
        Severity::Warning => table::warning(),
        Severity::Info => Style::new(),
    }
}

fn bold(text: impl Into<String>) -> Span<'static> {
    Span::styled(text.into(), Style::new().add_modifier(Modifier::BOLD))
}

/// The full catalog entry, as lines.
fn details(info: &CounterInfo, lines: &mut Vec<Line<'static>>) {
    lines.push(Line::from(vec![
        bold("Meaning: "),
        Span::raw(info.meaning.clone()),
    ]));
    if !info.causes.is_empty() {
        lines.push(Line::from(bold("Likely causes:")));
        for c in &info.causes {
            lines.push(Line::from(format!("  - {c}")));
        }
    }
    if !info.next_steps.is_empty() {
        lines.push(Line::from(bold("Next steps:")));
        for s in &info.next_steps {
            lines.push(Line::from(format!("  - {s}")));
        }
    }
    if let Some(e) = info.experiment {
        lines.push(Line::from(format!(
            "Experiment that reproduces it: {}",
            e.as_str()
        )));
    }
}

/// The lines of the pane for the current selection.
pub fn lines(state: &TopState) -> Vec<Line<'static>> {
    let mut lines = Vec::new();
    match state.explanation() {
        Explanation::Nothing => lines.push(Line::from("No row selected.")),
        Explanation::Port(row, infos) => {
            lines.push(Line::from(vec![
                bold(row.key.to_string()),
                Span::raw(format!(
                    "  {} ({})  {}  {}  netdev {}  driver {}",
                    row.state.as_deref().unwrap_or("state ?"),
                    row.phys_state.as_deref().unwrap_or("?"),
                    row.rate_text.as_deref().unwrap_or("rate ?"),
                    row.link_layer.as_deref().unwrap_or("link ?"),
                    row.netdev.as_deref().unwrap_or("-"),
                    row.driver.as_deref().unwrap_or("-"),
                )),
            ]));
            if state.samples < 2 {
                lines.push(Line::from("Rates appear after the second sample."));
            } else if row.rates.rx_bytes.is_none() && row.rates.rx_packets.is_some() {
                lines.push(Line::from(
                    "This driver has no byte counters in sysfs: packets only (rxe counts \
                     packets; bytes would come from the netdev).",
                ));
            }
            if row.state.as_deref().is_some_and(|s| s != "ACTIVE") {
                lines.push(Line::from(Span::styled(
                    "The port is not ACTIVE: no traffic can flow. Check the cable/peer, the \
                     subnet manager (InfiniBand) or the netdev (RoCE).",
                    table::alarm(),
                )));
            }
            if infos.is_empty() {
                if row.rates.errors.is_some() {
                    lines.push(Line::from("No error counter is moving on this port."));
                }
            } else {
                lines.push(Line::from(bold("Error counters moving:")));
                for (info, rate) in &infos {
                    lines.push(Line::from(vec![
                        Span::styled(
                            format!("  {} {}/s ", info.name, table::si(*rate)),
                            severity_style(info.severity),
                        ),
                        Span::raw(info.summary.clone()),
                    ]));
                }
                if let Some((first, _)) = infos.first() {
                    details(first, &mut lines);
                }
            }
            lines.push(Line::from(Span::styled(
                "Enter: this port's counters, each explained.",
                Style::new().add_modifier(Modifier::DIM),
            )));
        }
        Explanation::Counter(row, info) => {
            let rate = row
                .rate
                .as_ref()
                .map(|r| format!("{}/s", table::si(r.per_second)))
                .unwrap_or_else(|| "-".into());
            lines.push(Line::from(vec![
                bold(row.name.clone()),
                Span::raw(format!(
                    "  ({}) value {}  rate {rate}",
                    row.source.as_str(),
                    row.value
                )),
            ]));
            match info {
                None => lines.push(Line::from(format!(
                    "The counter catalog does not describe {} for this driver.",
                    row.name
                ))),
                Some(info) => {
                    lines.push(Line::from(vec![
                        Span::styled(
                            format!("[{}] ", info.severity.as_str()),
                            severity_style(info.severity),
                        ),
                        Span::raw(info.summary.clone()),
                    ]));
                    if state.explain_full {
                        details(info, &mut lines);
                    } else {
                        lines.push(Line::from(Span::styled(
                            "Enter: meaning, causes and next steps.",
                            Style::new().add_modifier(Modifier::DIM),
                        )));
                    }
                }
            }
        }
    }
    lines
}

/// Draw the pane.
pub fn draw(frame: &mut Frame<'_>, area: Rect, state: &TopState) {
    let widget = Paragraph::new(lines(state))
        .wrap(Wrap { trim: false })
        .block(
            Block::bordered()
                .title(" Explain ")
                .border_style(table::border(false)),
        );
    frame.render_widget(widget, area);
}
