//! Parsers for the text formats of sysfs attributes (`4: ACTIVE`, `100 Gb/sec (4X EDR)`,
//! `0x1a`, GIDs, counter values, PCI addresses). Pure functions over bytes or text, no I/O.

use crate::model::{Enumerated, Rate};
use std::net::Ipv6Addr;

/// Trim ASCII whitespace (the trailing newline every attribute has) on both ends.
pub(crate) fn trim(bytes: &[u8]) -> &[u8] {
    bytes.trim_ascii()
}

/// A decimal counter value (`12345`); `None` for anything else (signs, hex, text, overflow).
pub(crate) fn parse_u64(bytes: &[u8]) -> Option<u64> {
    let digits = trim(bytes);
    if digits.is_empty() || digits.len() > 20 {
        return None;
    }
    let mut value: u64 = 0;
    for &b in digits {
        if !b.is_ascii_digit() {
            return None;
        }
        value = value.checked_mul(10)?.checked_add(u64::from(b - b'0'))?;
    }
    Some(value)
}

/// `<id>: <name>` as printed for port state, physical state and node type.
pub(crate) fn parse_enumerated(text: &str) -> Option<Enumerated> {
    let (id, name) = text.split_once(':')?;
    let id = id.trim().parse::<u32>().ok()?;
    Some(Enumerated {
        id,
        name: name.trim().to_owned(),
    })
}

/// A LID as printed by the kernel: hex with `0x` (`0x1a`), or plain decimal.
pub(crate) fn parse_lid(text: &str) -> Option<u32> {
    let text = text.trim();
    match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        Some(hex) => u32::from_str_radix(hex, 16).ok(),
        None => text.parse::<u32>().ok(),
    }
}

/// The rate attribute: `<n>[.<frac>] Gb/sec (<w>X[ <speed>])`. The kernel prints SDR without
/// a speed name (`10 Gb/sec (4X)`) and half rates with `.5` (`2.5 Gb/sec (1X)`).
pub(crate) fn parse_rate(text: &str) -> Rate {
    let text = text.trim();
    let mut bits_per_second = None;
    let mut width = None;
    let mut speed = None;
    if let Some((number, rest)) = text.split_once(' ') {
        let rest = rest.trim_start();
        let scale = if rest.starts_with("Gb/sec") {
            Some(1_000_000_000u64)
        } else if rest.starts_with("Mb/sec") {
            Some(1_000_000u64)
        } else {
            None
        };
        if let Some(scale) = scale {
            bits_per_second = parse_scaled_decimal(number, scale);
        }
        if let (Some(open), Some(close)) = (rest.find('('), rest.rfind(')')) {
            if open < close {
                let inner = rest[open + 1..close].trim();
                let (w, s) = match inner.split_once(' ') {
                    Some((w, s)) => (w, Some(s.trim())),
                    None => (inner, None),
                };
                width = w
                    .strip_suffix('X')
                    .or_else(|| w.strip_suffix('x'))
                    .and_then(|n| n.parse::<u32>().ok());
                speed = s.filter(|s| !s.is_empty()).map(str::to_owned);
            }
        }
    }
    Rate {
        text: text.to_owned(),
        bits_per_second,
        width,
        speed,
    }
}

/// `12.5` x `scale` without floating point; `None` on anything but digits and one dot.
fn parse_scaled_decimal(number: &str, scale: u64) -> Option<u64> {
    let (int_part, frac_part) = match number.split_once('.') {
        Some((i, f)) => (i, f),
        None => (number, ""),
    };
    if int_part.is_empty() || !int_part.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    if !frac_part.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let mut value = int_part.parse::<u64>().ok()?.checked_mul(scale)?;
    let mut unit = scale;
    for b in frac_part.bytes() {
        unit /= 10;
        if unit == 0 {
            break;
        }
        value = value.checked_add(u64::from(b - b'0').checked_mul(unit)?)?;
    }
    Some(value)
}

/// A GID as printed by the kernel (`fe80:0000:0000:0000:5054:00ff:fe12:3456`).
pub(crate) fn parse_gid(text: &str) -> Option<Ipv6Addr> {
    text.trim().parse::<Ipv6Addr>().ok()
}

/// Whether `name` looks like a PCI address, `dddd:bb:dd.f` (domain may be longer than 4).
pub(crate) fn is_pci_addr(name: &str) -> bool {
    let b = name.as_bytes();
    let n = b.len();
    if n < 12 {
        return false;
    }
    // ...:bb:dd.f from the end
    let tail = &b[n - 8..];
    let hex = |c: u8| c.is_ascii_hexdigit();
    tail[0] == b':'
        && hex(tail[1])
        && hex(tail[2])
        && tail[3] == b':'
        && hex(tail[4])
        && hex(tail[5])
        && tail[6] == b'.'
        && (b'0'..=b'7').contains(&tail[7])
        && b[..n - 8].iter().all(|&c| hex(c))
}

/// A short, printable rendering of file content for error details (at most 64 characters,
/// `(empty)` for an empty file).
pub(crate) fn excerpt(bytes: &[u8]) -> String {
    let bytes = trim(bytes);
    if bytes.is_empty() {
        return "(empty)".to_owned();
    }
    let text = String::from_utf8_lossy(bytes);
    let mut out: String = text.chars().take(64).collect();
    if text.chars().nth(64).is_some() {
        out.push_str("...");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn u64_values() {
        assert_eq!(parse_u64(b"12345\n"), Some(12345));
        assert_eq!(parse_u64(b"18446744073709551615\n"), Some(u64::MAX));
        assert_eq!(parse_u64(b"18446744073709551616\n"), None);
        assert_eq!(parse_u64(b"N/A (no PMA)\n"), None);
        assert_eq!(parse_u64(b"-1\n"), None);
        assert_eq!(parse_u64(b"\n"), None);
        assert_eq!(parse_u64(b"0x10\n"), None);
    }

    #[test]
    fn enumerated() {
        let e = parse_enumerated("4: ACTIVE").expect("parses");
        assert_eq!((e.id, e.name.as_str()), (4, "ACTIVE"));
        let e = parse_enumerated("7: Phy Test").expect("parses");
        assert_eq!((e.id, e.name.as_str()), (7, "Phy Test"));
        assert!(parse_enumerated("ACTIVE").is_none());
        assert!(parse_enumerated("x: ACTIVE").is_none());
    }

    #[test]
    fn lids() {
        assert_eq!(parse_lid("0x1a"), Some(26));
        assert_eq!(parse_lid("0x0"), Some(0));
        assert_eq!(parse_lid("7"), Some(7));
        assert_eq!(parse_lid("0xzz"), None);
    }

    #[test]
    fn rates() {
        let r = parse_rate("100 Gb/sec (4X EDR)");
        assert_eq!(r.bits_per_second, Some(100_000_000_000));
        assert_eq!(r.width, Some(4));
        assert_eq!(r.speed.as_deref(), Some("EDR"));
        let r = parse_rate("2.5 Gb/sec (1X)");
        assert_eq!(r.bits_per_second, Some(2_500_000_000));
        assert_eq!(r.width, Some(1));
        assert_eq!(r.speed, None);
        let r = parse_rate("53.125 Gb/sec (1X HDR)");
        assert_eq!(r.bits_per_second, Some(53_125_000_000));
        let r = parse_rate("fast");
        assert_eq!(r.bits_per_second, None);
        assert_eq!(r.text, "fast");
    }

    #[test]
    fn gids() {
        let g = parse_gid("fe80:0000:0000:0000:5054:00ff:fe12:3456").expect("parses");
        assert_eq!(g.to_string(), "fe80::5054:ff:fe12:3456");
        let g = parse_gid("0000:0000:0000:0000:0000:ffff:0a00:020f").expect("parses");
        assert_eq!(g.to_string(), "::ffff:10.0.2.15");
        assert!(parse_gid("0000:0000:0000:0000:0000:0000:0000:0000")
            .expect("parses")
            .is_unspecified());
        assert!(parse_gid("garbage").is_none());
    }

    #[test]
    fn pci_addresses() {
        assert!(is_pci_addr("0000:3b:00.0"));
        assert!(is_pci_addr("10000:3b:00.7"));
        assert!(!is_pci_addr("0000:3b:00.8"));
        assert!(!is_pci_addr("virtual"));
        assert!(!is_pci_addr("0000:3b:0g.0"));
    }

    #[test]
    fn excerpts_are_short() {
        assert_eq!(excerpt(b"N/A (no PMA)\n"), "N/A (no PMA)");
        assert_eq!(excerpt(&[b'x'; 100]).len(), 67);
        assert_eq!(excerpt(b"\n"), "(empty)");
    }
}
