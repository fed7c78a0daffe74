//! `ecn`: mlx5's ECN switches (DCQCN notification and reaction point) are on for the
//! priority RDMA traffic uses.

use super::{join, na, read_trim, Outcome, PortFacts};
use crate::roce::Verdict;

pub(super) fn run(f: &PortFacts<'_>) -> Outcome {
    let netdev = f.netdev;
    let ecn = f.net.join("ecn");
    let which: Vec<u8> = match (f.rdma_priority(), &f.dcb) {
        (Some(p), _) => vec![p],
        (None, Ok(d)) if !d.pfc_priorities().is_empty() => d.pfc_priorities(),
        _ => (0..8).collect(),
    };
    if !ecn.is_dir() {
        return Outcome::na(format!("not available on this driver: no ECN switches (class/net/{netdev}/ecn/, an mlx5 feature)"));
    }
    let mut ev = Vec::new();
    let mut off = Vec::new();
    let mut unknown = 0;
    for p in &which {
        for side in ["roce_np", "roce_rp"] {
            let file = format!("class/net/{netdev}/ecn/{side}/enable/{p}");
            match read_trim(&f.root.join(&file)) {
                Some(v) => {
                    if v != "1" {
                        off.push(format!("{side} priority {p}"));
                    }
                    ev.push(format!("{file} = {v}"));
                }
                None => unknown += 1,
            }
        }
    }
    let r = if ev.is_empty() {
        na(format!(
            "ECN switches for priority {} unreadable under class/net/{netdev}/ecn/",
            join(&which)
        ))
    } else if off.is_empty() && unknown == 0 {
        (
            Verdict::Ok,
            format!(
                "ECN (DCQCN notification and reaction point) on for priority {}",
                join(&which)
            ),
        )
    } else if off.is_empty() {
        (
            Verdict::Warn,
            format!(
                "ECN switches partly unreadable for priority {}",
                join(&which)
            ),
        )
    } else {
        (Verdict::Warn, format!("ECN off for {}: no DCQCN congestion control there, congestion is left to PFC pauses", off.join(", ")))
    };
    let p = which.first().copied().unwrap_or(3);
    Outcome::new(r, ev, format!("echo 1 > /sys/class/net/{netdev}/ecn/roce_np/enable/{p}; echo 1 > /sys/class/net/{netdev}/ecn/roce_rp/enable/{p}"))
}
