//! Shared table helpers: number formatting and styles used by every table of `top`.

use ratatui::style::{Color, Modifier, Style};

/// A per-second rate for a table cell: `-` when unknown, `0`, `7.5`, `120`, `12.3K`, `4.1M`.
pub fn rate(value: Option<f64>) -> String {
    match value {
        None => "-".to_owned(),
        Some(v) => si(v),
    }
}

/// A number with an SI suffix (K, M, G, T), one decimal below 100 of a unit.
pub fn si(v: f64) -> String {
    if !v.is_finite() {
        return v.to_string();
    }
    if v == 0.0 {
        return "0".to_owned();
    }
    let units = [("", 1.0), ("K", 1e3), ("M", 1e6), ("G", 1e9), ("T", 1e12)];
    let mut chosen = units[0];
    for u in units {
        if v.abs() >= u.1 {
            chosen = u;
        }
    }
    let scaled = v / chosen.1;
    if scaled.abs() < 100.0 && (chosen.1 > 1.0 || scaled.fract() != 0.0) {
        format!("{scaled:.1}{}", chosen.0)
    } else {
        format!("{scaled:.0}{}", chosen.0)
    }
}

/// A link rate in bits per second, short: `100G`, `2.5G`, `10M`.
pub fn link_rate(bps: Option<u64>, text: Option<&str>) -> String {
    match (bps, text) {
        (Some(b), _) => {
            let g = b as f64 / 1e9;
            if g >= 1.0 {
                trim_zero(format!("{g:.1}")) + "G"
            } else {
                trim_zero(format!("{:.1}", b as f64 / 1e6)) + "M"
            }
        }
        (None, Some(t)) => t.split_whitespace().next().unwrap_or("-").to_owned(),
        (None, None) => "-".to_owned(),
    }
}

fn trim_zero(s: String) -> String {
    s.strip_suffix(".0").map(str::to_owned).unwrap_or(s)
}

/// `InfiniBand` -> `IB`, `Ethernet` -> `Eth`.
pub fn link_layer(text: Option<&str>) -> String {
    match text {
        Some("InfiniBand") => "IB".to_owned(),
        Some("Ethernet") => "Eth".to_owned(),
        Some(other) => other.to_owned(),
        None => "-".to_owned(),
    }
}

/// Header row style.
pub fn header() -> Style {
    Style::new().add_modifier(Modifier::BOLD | Modifier::UNDERLINED)
}

/// The selected row.
pub fn selected() -> Style {
    Style::new().add_modifier(Modifier::REVERSED)
}

/// A moving error counter.
pub fn alarm() -> Style {
    Style::new().fg(Color::Red).add_modifier(Modifier::BOLD)
}

/// A warning-level value.
pub fn warning() -> Style {
    Style::new().fg(Color::Yellow)
}

/// Pane borders.
pub fn border(focused: bool) -> Style {
    if focused {
        Style::new().fg(Color::Cyan)
    } else {
        Style::new().fg(Color::DarkGray)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_short() {
        assert_eq!(rate(None), "-");
        assert_eq!(si(0.0), "0");
        assert_eq!(si(7.5), "7.5");
        assert_eq!(si(120.0), "120");
        assert_eq!(si(12_345.0), "12.3K");
        assert_eq!(si(4_100_000.0), "4.1M");
        assert_eq!(link_rate(Some(100_000_000_000), None), "100G");
        assert_eq!(link_rate(Some(2_500_000_000), None), "2.5G");
        assert_eq!(link_layer(Some("InfiniBand")), "IB");
    }
}
