//! `cm-tos`: rdma_cm's default ToS (configfs) puts RDMA traffic on a DSCP other than 0.

use super::{Outcome, PortFacts};
use crate::roce::Verdict;

pub(super) fn run(f: &PortFacts<'_>) -> Outcome {
    let cm_path = &f.cm_path;
    let (tos, dscp) = (f.tos(), f.dscp());
    let ev = vec![match f.cm_tos {
        Some(t) => format!("{cm_path}/default_roce_tos = {t} (DSCP {})", t >> 2),
        None => format!("{cm_path}/default_roce_tos absent: the kernel default ToS 0"),
    }];
    let result = if tos == 0 {
        (Verdict::Warn, "rdma_cm connections leave with ToS 0 (DSCP 0, best effort) unless the application sets RDMA_OPTION_ID_TOS".to_string())
    } else {
        (
            Verdict::Ok,
            format!("rdma_cm connections use ToS {tos} (DSCP {dscp})"),
        )
    };
    Outcome::new(
        result,
        ev,
        format!("{}echo 106 > {cm_path}/default_roce_tos   (DSCP 26; pick the DSCP your fabric maps to the PFC priority)", f.make_group),
    )
}
