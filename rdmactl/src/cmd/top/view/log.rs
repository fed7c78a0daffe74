//! The log pane: tui-logger's widget over the events `top` records (devices added or
//! removed, port state changes, counter anomalies, read errors), newest at the bottom.

use super::table;
use ratatui::layout::Rect;
use ratatui::widgets::Block;
use ratatui::Frame;
use tui_logger::{TuiLoggerLevelOutput, TuiLoggerWidget, TuiWidgetState};

/// Draw the pane.
pub fn draw(frame: &mut Frame<'_>, area: Rect, log: &TuiWidgetState) {
    let widget = TuiLoggerWidget::default()
        .block(
            Block::bordered()
                .title(" Events ")
                .border_style(table::border(false)),
        )
        .output_separator(' ')
        .output_timestamp(Some("%H:%M:%S".to_owned()))
        .output_level(Some(TuiLoggerLevelOutput::Abbreviated))
        .output_target(true)
        .output_file(false)
        .output_line(false)
        .style_error(table::alarm())
        .style_warn(table::warning())
        .state(log);
    frame.render_widget(widget, area);
}
