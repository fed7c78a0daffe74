//! The help overlay: the key list of `input::HELP`, centered over the screen.

use super::table;
use crate::cmd::top::input::HELP;
use ratatui::layout::{Constraint, Flex, Layout, Rect};
use ratatui::text::Line;
use ratatui::widgets::{Block, Clear, Paragraph, Wrap};
use ratatui::Frame;

/// Draw the overlay.
pub fn draw(frame: &mut Frame<'_>) {
    let mut lines: Vec<Line<'static>> = HELP
        .iter()
        .map(|(keys, what)| Line::from(format!(" {keys:<14} {what}")))
        .collect();
    lines.push(Line::from(""));
    lines.push(Line::from(
        " Rates are per second between the last two samples; ERR/s sums the counters the",
    ));
    lines.push(Line::from(
        " catalog rates warning or error. `rdmactl explain NAME` says more.",
    ));
    let height = lines.len() as u16 + 2;
    let area = centered(frame.area(), 80, height);
    frame.render_widget(Clear, area);
    frame.render_widget(
        Paragraph::new(lines).wrap(Wrap { trim: false }).block(
            Block::bordered()
                .title(" Help: rdmactl top ")
                .border_style(table::border(true)),
        ),
        area,
    );
}

fn centered(area: Rect, width: u16, height: u16) -> Rect {
    let [row] = Layout::vertical([Constraint::Length(height)])
        .flex(Flex::Center)
        .areas(area);
    let [cell] = Layout::horizontal([Constraint::Length(width)])
        .flex(Flex::Center)
        .areas(row);
    cell
}
