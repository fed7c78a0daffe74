//! The ports screen: one row per port of every device, with state, link, traffic and error
//! rates. Error rates that are not zero are highlighted, and so are ports that are not ACTIVE.

use super::table;
use crate::cmd::top::state::TopState;
use ratatui::layout::{Constraint, Rect};
use ratatui::style::Style;
use ratatui::text::Line;
use ratatui::widgets::{Block, Cell, Row, Table, TableState};
use ratatui::Frame;

/// Column titles (the live test reads the screen by these positions).
pub const HEADERS: [&str; 11] = [
    "DEVICE", "PORT", "STATE", "RATE", "LINK", "NETDEV", "RX B/s", "TX B/s", "RX pkt/s",
    "TX pkt/s", "ERR/s",
];

/// Draw the ports table into `area`.
pub fn draw(frame: &mut Frame<'_>, area: Rect, state: &TopState) {
    let rows = state.visible_ports();
    let title = format!(
        " Ports ({} of {}) sort: {} ",
        rows.len(),
        state.all_ports().len(),
        state.port_sort.label()
    );
    let body: Vec<Row<'_>> = rows
        .iter()
        .map(|r| {
            let erring = r.rates.errors.is_some_and(|e| e > 0.0);
            let state_style = match r.state.as_deref() {
                Some("ACTIVE") => Style::new(),
                _ => table::alarm(),
            };
            let err_style = if erring { table::alarm() } else { Style::new() };
            Row::new(vec![
                Cell::from(r.key.device.clone()),
                Cell::from(r.key.port.to_string()),
                Cell::from(r.state.clone().unwrap_or_else(|| "-".into())).style(state_style),
                Cell::from(table::link_rate(r.rate_bps, r.rate_text.as_deref())),
                Cell::from(table::link_layer(r.link_layer.as_deref())),
                Cell::from(r.netdev.clone().unwrap_or_else(|| "-".into())),
                Cell::from(Line::from(table::rate(r.rates.rx_bytes)).right_aligned()),
                Cell::from(Line::from(table::rate(r.rates.tx_bytes)).right_aligned()),
                Cell::from(Line::from(table::rate(r.rates.rx_packets)).right_aligned()),
                Cell::from(Line::from(table::rate(r.rates.tx_packets)).right_aligned()),
                Cell::from(Line::from(table::rate(r.rates.errors)).right_aligned())
                    .style(err_style),
            ])
        })
        .collect();
    let device_width = rows
        .iter()
        .map(|r| r.key.device.len())
        .max()
        .unwrap_or(0)
        .max(6) as u16;
    let netdev_width = rows
        .iter()
        .filter_map(|r| r.netdev.as_ref().map(String::len))
        .max()
        .unwrap_or(0)
        .max(6) as u16;
    let widths = [
        Constraint::Length(device_width),
        Constraint::Length(4),
        Constraint::Length(8),
        Constraint::Length(6),
        Constraint::Length(4),
        Constraint::Length(netdev_width),
        Constraint::Length(9),
        Constraint::Length(9),
        Constraint::Length(9),
        Constraint::Length(9),
        Constraint::Length(7),
    ];
    let header = Row::new(HEADERS.iter().map(|h| Cell::from(*h))).style(table::header());
    let widget = Table::new(body, widths)
        .header(header)
        .column_spacing(1)
        .row_highlight_style(table::selected())
        .block(
            Block::bordered()
                .title(title)
                .border_style(table::border(true)),
        );
    let mut ts = TableState::default().with_selected(state.selected_port_index());
    frame.render_stateful_widget(widget, area, &mut ts);
}
