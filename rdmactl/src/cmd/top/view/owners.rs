//! The top-owners pane: the owners holding the most QPs, with their QPs in ERR highlighted,
//! or why they cannot be shown.

use super::table;
use crate::cmd::top::state::owners::{OwnerStatus, TOP_OWNERS};
use crate::cmd::top::state::TopState;
use ratatui::layout::Rect;
use ratatui::style::Style;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Paragraph, Wrap};
use ratatui::Frame;

/// The lines of the pane.
pub fn lines(state: &TopState) -> Vec<Line<'static>> {
    match &state.owners {
        OwnerStatus::NotSampled => vec![Line::from("waiting for the first sample")],
        OwnerStatus::Unavailable(why) => vec![Line::from(why.clone())],
        OwnerStatus::Owners { rows, .. } if rows.is_empty() => {
            vec![Line::from("no owner holds a QP")]
        }
        OwnerStatus::Owners { rows, total, .. } => {
            let mut lines = vec![Line::from(Span::styled(
                format!("{:>5} {:>4}  OWNER  CGROUP/POD", "QPS", "ERR"),
                table::header(),
            ))];
            for r in rows {
                let style = if r.err > 0 {
                    table::alarm()
                } else {
                    Style::new()
                };
                lines.push(Line::from(Span::styled(
                    format!("{:>5} {:>4}  {}  {}", r.qps, r.err, r.owner, r.place),
                    style,
                )));
            }
            if *total > rows.len() {
                lines.push(Line::from(format!(
                    "({} more owners; the top {TOP_OWNERS} are shown)",
                    total - rows.len()
                )));
            }
            lines
        }
    }
}

/// Draw the pane.
pub fn draw(frame: &mut Frame<'_>, area: Rect, state: &TopState) {
    let title = match &state.owners {
        OwnerStatus::Owners { source, .. } => format!(" Top owners (QPs, {source}) "),
        _ => " Top owners (QPs) ".to_owned(),
    };
    let widget = Paragraph::new(lines(state))
        .wrap(Wrap { trim: false })
        .block(
            Block::bordered()
                .title(title)
                .border_style(table::border(false)),
        );
    frame.render_widget(widget, area);
}
