//! Input predicates: which key means what. The only place key bindings are spelled out
//! (the help overlay lists the same keys).

use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};

/// A key press (not a release or repeat report, which some terminals send).
pub fn is_press(key: &KeyEvent) -> bool {
    key.kind == KeyEventKind::Press
}

/// Ctrl-C: in raw mode it arrives as a key, not as SIGINT.
pub fn is_ctrl_c(key: &KeyEvent) -> bool {
    key.modifiers.contains(KeyModifiers::CONTROL) && key.code == KeyCode::Char('c')
}

/// `q`: quit.
pub fn is_quit(key: &KeyEvent) -> bool {
    key.code == KeyCode::Char('q') && !key.modifiers.contains(KeyModifiers::CONTROL)
}

/// Up arrow or `k`.
pub fn is_up(key: &KeyEvent) -> bool {
    matches!(key.code, KeyCode::Up | KeyCode::Char('k'))
}

/// Down arrow or `j`.
pub fn is_down(key: &KeyEvent) -> bool {
    matches!(key.code, KeyCode::Down | KeyCode::Char('j'))
}

/// Page up.
pub fn is_page_up(key: &KeyEvent) -> bool {
    key.code == KeyCode::PageUp
}

/// Page down.
pub fn is_page_down(key: &KeyEvent) -> bool {
    key.code == KeyCode::PageDown
}

/// Enter: explain (open a port's counters, or expand a counter's explanation).
pub fn is_enter(key: &KeyEvent) -> bool {
    key.code == KeyCode::Enter
}

/// Esc, Backspace or Left: back to the ports screen.
pub fn is_back(key: &KeyEvent) -> bool {
    matches!(key.code, KeyCode::Esc | KeyCode::Backspace | KeyCode::Left)
}

/// `s`: next sort key.
pub fn is_sort(key: &KeyEvent) -> bool {
    key.code == KeyCode::Char('s')
}

/// `f` or `/`: type a filter.
pub fn is_filter(key: &KeyEvent) -> bool {
    matches!(key.code, KeyCode::Char('f') | KeyCode::Char('/'))
}

/// `?` or F1: help.
pub fn is_help(key: &KeyEvent) -> bool {
    matches!(key.code, KeyCode::Char('?') | KeyCode::F(1))
}

/// The key list of the help overlay: (keys, what they do).
pub const HELP: &[(&str, &str)] = &[
    ("Up/Down, k/j", "select a row"),
    ("PgUp/PgDn", "move ten rows"),
    (
        "Enter",
        "explain: open the port's counters / expand the explanation",
    ),
    ("Esc, Left", "back to the ports table"),
    ("s", "next sort order"),
    ("f, /", "filter rows (Enter keeps, Esc clears)"),
    ("?", "this help (any key closes it)"),
    ("q, Ctrl-C", "quit"),
];
