//! The probes pane: rdmad's `rdma_probe_*` series (probe latency), or why there are none.

use super::table;
use crate::cmd::top::state::probes::ProbeStatus;
use crate::cmd::top::state::TopState;
use ratatui::layout::Rect;
use ratatui::text::Line;
use ratatui::widgets::{Block, Paragraph, Wrap};
use ratatui::Frame;

/// The lines of the pane.
pub fn lines(state: &TopState) -> Vec<Line<'static>> {
    match &state.probes {
        ProbeStatus::NotConfigured => vec![Line::from(
            "no --rdmad URL: probe latency comes from rdmad's /metrics",
        )],
        ProbeStatus::Pending => vec![Line::from("scraping rdmad...")],
        ProbeStatus::Unreachable(why) => vec![Line::from(format!("rdmad unreachable: {why}"))],
        ProbeStatus::Series(series) if series.is_empty() => vec![Line::from(
            "rdmad answered, but exports no rdma_probe_* series (probes off?)",
        )],
        ProbeStatus::Series(series) => series
            .iter()
            .map(|s| {
                let value = if s.name.ends_with("_seconds") {
                    format!("{:.1} us", s.value * 1e6)
                } else {
                    table::si(s.value)
                };
                Line::from(format!("{}{{{}}} {value}", s.name, s.labels))
            })
            .collect(),
    }
}

/// Draw the pane.
pub fn draw(frame: &mut Frame<'_>, area: Rect, state: &TopState) {
    let widget = Paragraph::new(lines(state))
        .wrap(Wrap { trim: false })
        .block(
            Block::bordered()
                .title(" Probes (rdmad) ")
                .border_style(table::border(false)),
        );
    frame.render_widget(widget, area);
}
