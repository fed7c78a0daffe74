//! The resources pane: queue pairs by device, state and process (RDMA netlink), or why
//! they cannot be shown.

use super::table;
use crate::cmd::top::state::resources::ResourceStatus;
use crate::cmd::top::state::TopState;
use ratatui::layout::Rect;
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Paragraph, Wrap};
use ratatui::Frame;

/// The lines of the pane.
pub fn lines(state: &TopState) -> Vec<Line<'static>> {
    match &state.resources {
        ResourceStatus::NotSampled => vec![Line::from("waiting for the first sample")],
        ResourceStatus::Unavailable(why) => vec![Line::from(why.clone())],
        ResourceStatus::Qps { groups, summaries } => {
            let mut lines = Vec::new();
            for (dev, text) in summaries {
                lines.push(Line::from(vec![
                    Span::styled(
                        format!("{dev}: "),
                        Style::new().add_modifier(Modifier::BOLD),
                    ),
                    Span::raw(text.clone()),
                ]));
            }
            if groups.is_empty() {
                lines.push(Line::from("no QPs"));
            } else {
                lines.push(Line::from(Span::styled(
                    format!("{:<10} {:<6} {:>4}  PROCESS", "DEVICE", "STATE", "QPS"),
                    table::header(),
                )));
                for g in groups {
                    let style = if g.state == "ERR" || g.state == "SQE" {
                        table::alarm()
                    } else {
                        Style::new()
                    };
                    lines.push(Line::from(Span::styled(
                        format!(
                            "{:<10} {:<6} {:>4}  {}",
                            g.device, g.state, g.count, g.process
                        ),
                        style,
                    )));
                }
            }
            lines
        }
    }
}

/// Draw the pane.
pub fn draw(frame: &mut Frame<'_>, area: Rect, state: &TopState) {
    let widget = Paragraph::new(lines(state))
        .wrap(Wrap { trim: false })
        .block(
            Block::bordered()
                .title(" Resources (QPs) ")
                .border_style(table::border(false)),
        );
    frame.render_widget(widget, area);
}
