//! The views of `rdmactl top`: one file per screen or pane, a shared `table.rs`, and the key
//! handling that turns input into state changes and [`Intent`]s for the loop in `top/mod.rs`.
//! Views read [`TopState`]; they do no I/O.

pub mod counters;
pub mod explain;
pub mod help;
pub mod log;
pub mod mesh;
pub mod owners;
pub mod ports;
pub mod probes;
pub mod resources;
pub mod table;

use super::input;
use super::state::{Screen, TopState};
use ratatui::crossterm::event::{KeyCode, KeyEvent};
use ratatui::layout::{Constraint, Layout};
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;
use ratatui::Frame;
use tui_logger::TuiWidgetState;

/// What the loop should do after a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Intent {
    /// Redraw (or nothing, if nothing changed).
    Redraw,
    /// Leave `top`.
    Quit,
}

/// What the title bar says besides the counts.
#[derive(Debug, Clone)]
pub struct Header {
    /// The sysfs root.
    pub root: String,
    /// Seconds between samples.
    pub interval: f64,
}

/// Draw the whole screen.
pub fn draw(frame: &mut Frame<'_>, state: &TopState, header: &Header, log: &TuiWidgetState) {
    let area = frame.area();
    let log_height = if area.height >= 36 { 9 } else { 5 };
    let [title, verdicts, main, middle, events, footer] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Length(mesh::height(state)),
        Constraint::Fill(3),
        Constraint::Fill(2),
        Constraint::Length(log_height),
        Constraint::Length(1),
    ])
    .areas(area);
    draw_title(frame, title, state, header);
    mesh::draw(frame, verdicts, state);
    match &state.screen {
        Screen::Ports => ports::draw(frame, main, state),
        Screen::Counters(key) => counters::draw(frame, main, state, key),
    }
    let [explain_area, side] =
        Layout::horizontal([Constraint::Percentage(45), Constraint::Percentage(55)]).areas(middle);
    explain::draw(frame, explain_area, state);
    let [qp_area, probe_area] =
        Layout::vertical([Constraint::Fill(2), Constraint::Fill(1)]).areas(side);
    let [res_area, owner_area] =
        Layout::horizontal([Constraint::Percentage(50), Constraint::Percentage(50)]).areas(qp_area);
    resources::draw(frame, res_area, state);
    owners::draw(frame, owner_area, state);
    probes::draw(frame, probe_area, state);
    log::draw(frame, events, log);
    draw_footer(frame, footer, state);
    if state.show_help {
        help::draw(frame);
    }
}

fn draw_title(frame: &mut Frame<'_>, area: ratatui::layout::Rect, state: &TopState, h: &Header) {
    let devices = state.snapshot().map(|s| s.devices.len()).unwrap_or(0);
    let mut spans = vec![Span::styled(
        "rdmactl top",
        Style::new().add_modifier(Modifier::BOLD | Modifier::REVERSED),
    )];
    // Alarms first: a narrow terminal cuts the end of the line.
    if devices == 0 && state.samples > 0 {
        spans.push(Span::styled("  no RDMA devices right now", table::alarm()));
    }
    if let Some(e) = &state.sample_error {
        spans.push(Span::styled(
            format!("  sample failed: {e}"),
            table::alarm(),
        ));
    }
    match state.worst_moving() {
        Some(rdmakit::catalog::Severity::Error) => {
            spans.push(Span::styled("  error counters moving", table::alarm()))
        }
        Some(rdmakit::catalog::Severity::Warning) => {
            spans.push(Span::styled("  warning counters moving", table::warning()))
        }
        _ => {}
    }
    spans.push(Span::raw(format!(
        "  {devices} device(s), {} port(s)  every {}s  sample #{}  sysfs {}",
        state.all_ports().len(),
        h.interval,
        state.samples,
        h.root,
    )));
    frame.render_widget(Paragraph::new(Line::from(spans)), area);
}

fn draw_footer(frame: &mut Frame<'_>, area: ratatui::layout::Rect, state: &TopState) {
    let line = if state.editing_filter {
        Line::from(vec![
            Span::styled("filter: ", Style::new().add_modifier(Modifier::BOLD)),
            Span::raw(format!("{}_", state.filter)),
            Span::raw("   (Enter keeps, Esc clears)"),
        ])
    } else {
        let filter = if state.filter.is_empty() {
            String::new()
        } else {
            format!("filter \"{}\"  ", state.filter)
        };
        Line::from(format!(
            "{filter}Up/Down select  Enter explain  Esc back  s sort  f filter  ? help  q quit"
        ))
    };
    frame.render_widget(Paragraph::new(line), area);
}

/// Apply a key to the state; the intent says whether to quit.
pub fn handle_key(state: &mut TopState, key: &KeyEvent) -> Intent {
    if !input::is_press(key) {
        return Intent::Redraw;
    }
    if input::is_ctrl_c(key) {
        return Intent::Quit;
    }
    if state.show_help {
        state.show_help = false;
        return Intent::Redraw;
    }
    if state.editing_filter {
        match key.code {
            KeyCode::Enter => state.editing_filter = false,
            KeyCode::Esc => {
                state.editing_filter = false;
                state.filter.clear();
            }
            KeyCode::Backspace => {
                state.filter.pop();
            }
            KeyCode::Char(c) => state.filter.push(c),
            _ => {}
        }
        return Intent::Redraw;
    }
    if input::is_quit(key) {
        Intent::Quit
    } else {
        if input::is_up(key) {
            state.move_selection(-1);
        } else if input::is_down(key) {
            state.move_selection(1);
        } else if input::is_page_up(key) {
            state.move_selection(-10);
        } else if input::is_page_down(key) {
            state.move_selection(10);
        } else if input::is_enter(key) {
            state.enter();
        } else if input::is_back(key) {
            if state.filter.is_empty() {
                state.back();
            } else {
                state.filter.clear();
            }
        } else if input::is_sort(key) {
            state.cycle_sort();
        } else if input::is_filter(key) {
            state.editing_filter = true;
        } else if input::is_help(key) {
            state.show_help = true;
        }
        Intent::Redraw
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ratatui::crossterm::event::KeyModifiers;
    use rdmakit::catalog::Catalog;

    fn key(code: KeyCode) -> KeyEvent {
        KeyEvent::new(code, KeyModifiers::NONE)
    }

    fn state() -> TopState {
        TopState::new(Catalog::embedded().unwrap(), None)
    }

    #[test]
    fn quit_keys_and_help() {
        let mut st = state();
        assert_eq!(handle_key(&mut st, &key(KeyCode::Char('q'))), Intent::Quit);
        let ctrl_c = KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL);
        assert_eq!(handle_key(&mut st, &ctrl_c), Intent::Quit);
        assert_eq!(
            handle_key(&mut st, &key(KeyCode::Char('?'))),
            Intent::Redraw
        );
        assert!(st.show_help);
        // Any key closes the help, even q (it does not quit from the overlay).
        assert_eq!(
            handle_key(&mut st, &key(KeyCode::Char('q'))),
            Intent::Redraw
        );
        assert!(!st.show_help);
    }

    #[test]
    fn the_filter_takes_every_character_until_enter_or_esc() {
        let mut st = state();
        handle_key(&mut st, &key(KeyCode::Char('f')));
        assert!(st.editing_filter);
        for c in "rxq".chars() {
            assert_eq!(handle_key(&mut st, &key(KeyCode::Char(c))), Intent::Redraw);
        }
        handle_key(&mut st, &key(KeyCode::Backspace));
        assert_eq!(st.filter, "rx");
        handle_key(&mut st, &key(KeyCode::Enter));
        assert!(!st.editing_filter);
        assert_eq!(st.filter, "rx");
        // Esc outside the editor clears the filter first.
        handle_key(&mut st, &key(KeyCode::Esc));
        assert_eq!(st.filter, "");
        handle_key(&mut st, &key(KeyCode::Char('/')));
        handle_key(&mut st, &key(KeyCode::Char('m')));
        handle_key(&mut st, &key(KeyCode::Esc));
        assert!(!st.editing_filter);
        assert_eq!(st.filter, "");
        handle_key(&mut st, &key(KeyCode::Char('s')));
        assert_eq!(st.port_sort, crate::cmd::top::state::PortSort::RxBytes);
    }
}
