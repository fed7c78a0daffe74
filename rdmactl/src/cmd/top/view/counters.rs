//! The counters screen: every counter of one port (and of its device, for one-port devices)
//! with its value and rate; moving error counters are highlighted.

use super::table;
use crate::cmd::top::state::{PortKey, TopState};
use ratatui::layout::{Constraint, Rect};
use ratatui::style::Style;
use ratatui::text::Line;
use ratatui::widgets::{Block, Cell, Row, Table, TableState};
use ratatui::Frame;
use rdmakit::catalog::Severity;
use rdmakit::model::CounterKind;

/// Draw the counters of `key` into `area`.
pub fn draw(frame: &mut Frame<'_>, area: Rect, state: &TopState, key: &PortKey) {
    let rows = state.counter_rows(key);
    let title = format!(
        " Counters of {key} ({}) sort: {}  Esc: back ",
        rows.len(),
        state.counter_sort.label()
    );
    let body: Vec<Row<'_>> = rows
        .iter()
        .map(|r| {
            let per_second = r.rate.as_ref().map(|x| x.per_second);
            let moving = per_second.is_some_and(|v| v > 0.0);
            let style = match r.rate.as_ref().and_then(|x| x.severity) {
                Some(Severity::Error) if moving => table::alarm(),
                Some(Severity::Warning) if moving => table::warning(),
                _ => Style::new(),
            };
            let rate = match r.kind {
                CounterKind::Counter => table::rate(per_second),
                // A gauge (a counter file is never info or histogram).
                _ => "gauge".to_owned(),
            };
            Row::new(vec![
                Cell::from(r.source.as_str()),
                Cell::from(r.name.clone()),
                Cell::from(Line::from(r.value.to_string()).right_aligned()),
                Cell::from(Line::from(rate).right_aligned()),
            ])
            .style(style)
        })
        .collect();
    let name_width = rows.iter().map(|r| r.name.len()).max().unwrap_or(0).max(8) as u16;
    let widths = [
        Constraint::Length(9),
        Constraint::Length(name_width),
        Constraint::Length(20),
        Constraint::Length(10),
    ];
    let header = Row::new(["SOURCE", "COUNTER", "VALUE", "PER SEC"]).style(table::header());
    let widget = Table::new(body, widths)
        .header(header)
        .row_highlight_style(table::selected())
        .block(
            Block::bordered()
                .title(title)
                .border_style(table::border(true)),
        );
    let mut ts = TableState::default().with_selected(state.selected_counter_index(&rows));
    frame.render_stateful_widget(widget, area, &mut ts);
}
