//! Whether a TCP port listens inside the lab, from /proc (the lab image has no ss): a
//! server started in the background is waited for this way, never for a fixed time.

use std::time::Duration;

/// Whether something listens on this TCP port (IPv4 or IPv6).
pub fn listening(port: u16) -> bool {
    let local = format!(":{port:04X} ");
    ["/proc/net/tcp", "/proc/net/tcp6"].iter().any(|f| {
        std::fs::read_to_string(f)
            .unwrap_or_default()
            .lines()
            .any(|l| {
                let cols: Vec<&str> = l.split_whitespace().collect();
                cols.len() > 3 && format!("{} ", cols[1]).ends_with(&local) && cols[3] == "0A"
            })
    })
}

/// Poll [`listening`] until it holds, at most `limit`; whether it did.
pub fn wait_listening(port: u16, limit: Duration) -> bool {
    crate::wait_until(limit, || listening(port))
}

#[cfg(test)]
mod tests;
