//! `mtu`: the netdev MTU leaves room for the port's RoCE MTU plus the RoCE headers.

use super::{na, read_trim, Outcome, PortFacts};
use crate::roce::{iboe_mtu, Verdict, IBOE_HEADER_BUDGET};

pub(super) fn run(f: &PortFacts<'_>) -> Outcome {
    let netdev = f.netdev;
    let mut ev = Vec::new();
    let nd_mtu = read_trim(&f.net.join("mtu")).and_then(|t| t.parse::<u32>().ok());
    let pm = f.port_mtu;
    let result = match nd_mtu {
        None => na(format!(
            "the MTU of {netdev} is unreadable (class/net/{netdev}/mtu)"
        )),
        Some(m) => {
            let budget = iboe_mtu(m);
            ev.push(format!(
                "class/net/{netdev}/mtu = {m}: minus the {IBOE_HEADER_BUDGET}-byte RoCE header budget leaves room for IB MTU {budget}"
            ));
            match pm {
                Some(p) => {
                    ev.push(format!(
                        "port active_mtu {}, max_mtu {} ({})",
                        p.active, p.max, p.source
                    ));
                    if p.active > budget {
                        (Verdict::Fail, format!("the port's active MTU {} does not fit the netdev MTU {m} (room for {budget}): full-size RoCE packets exceed the netdev MTU", p.active))
                    } else if budget < p.max {
                        (Verdict::Warn, format!("netdev MTU {m} limits RoCE to {budget} bytes; the port supports {}", p.max))
                    } else {
                        (
                            Verdict::Ok,
                            format!("RoCE MTU {} fits netdev MTU {m}", p.active),
                        )
                    }
                }
                None => {
                    ev.push("port MTUs not available (no ibv_query_port answer)".into());
                    if budget < 4096 {
                        (
                            Verdict::Warn,
                            format!(
                                "netdev MTU {m} limits RoCE to {budget} bytes (4096 needs {})",
                                4096 + IBOE_HEADER_BUDGET
                            ),
                        )
                    } else {
                        (
                            Verdict::Ok,
                            format!("netdev MTU {m} leaves room for RoCE MTU 4096"),
                        )
                    }
                }
            }
        }
    };
    let want = pm.map(|p| p.max).unwrap_or(4096) + IBOE_HEADER_BUDGET;
    Outcome::new(
        result,
        ev,
        format!("ip link set dev {netdev} mtu {want}   (on every hop: the same MTU end to end)"),
    )
}
