//! `cm-roce-mode`: rdma_cm's default RoCE mode (configfs) is RoCE v2.

use super::{Outcome, PortFacts};
use crate::roce::Verdict;

pub(super) fn run(f: &PortFacts<'_>) -> Outcome {
    let cm_path = &f.cm_path;
    let (result, ev) = match &f.cm_mode {
        Some(m) if m == "RoCE v2" => ((Verdict::Ok, "rdma_cm uses RoCE v2 by default".to_string()), vec![format!("{cm_path}/default_roce_mode = {m}")]),
        Some(m) => ((Verdict::Warn, format!("rdma_cm uses {m} by default: RoCE v1 is not routable and carries no DSCP")), vec![format!("{cm_path}/default_roce_mode = {m}")]),
        None => ((Verdict::Ok, "no rdma_cm configfs group for the device: the kernel default applies (RoCE v2 where the port supports it)".to_string()), vec![format!("{cm_path}/default_roce_mode absent (configfs group not created, or configfs not mounted)")]),
    };
    Outcome::new(
        result,
        ev,
        format!(
            "{}echo 'RoCE v2' > {cm_path}/default_roce_mode",
            f.make_group
        ),
    )
}
