//! The resources pane's model: queue pairs grouped by device, state and process, from the
//! RDMA netlink dumps (`rdmakit::nldev`), or why they are not available.

use std::collections::BTreeMap;

/// One queue pair as the pane needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QpInfo {
    /// Device name.
    pub device: String,
    /// QP state name (`RTS`, `ERR`, ...).
    pub state: String,
    /// Owning process (`ib_write_bw[1234]`) or kernel module (`[ib_core]`).
    pub process: String,
}

/// A count of QPs sharing device, state and process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QpGroup {
    /// Device name.
    pub device: String,
    /// QP state.
    pub state: String,
    /// Owner.
    pub process: String,
    /// How many QPs.
    pub count: usize,
}

/// What the resources pane shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResourceStatus {
    /// Nothing sampled yet.
    NotSampled,
    /// Netlink is not consulted, or failed: the reason.
    Unavailable(String),
    /// QP groups, sorted by device, state, process; plus per-device object counts
    /// (`pd 1 cq 1 qp 1 ...`).
    Qps {
        /// The groups.
        groups: Vec<QpGroup>,
        /// `(device, "pd 1 cq 1 qp 1 ...")`.
        summaries: Vec<(String, String)>,
    },
}

/// The owner text of a QP: `comm[pid]`, `[pid]` when the process is gone, `[kernel module]`.
pub fn owner_text(pid: Option<u32>, comm: Option<&str>, kern_name: Option<&str>) -> String {
    match (pid, comm, kern_name) {
        (Some(pid), Some(comm), _) => format!("{comm}[{pid}]"),
        (Some(pid), None, _) => format!("[{pid}]"),
        (None, _, Some(k)) => format!("[{k}]"),
        (None, Some(c), None) => format!("[{c}]"),
        (None, None, None) => "?".to_owned(),
    }
}

/// Count QPs by (device, state, process), sorted.
pub fn group_qps(qps: &[QpInfo]) -> Vec<QpGroup> {
    let mut counts: BTreeMap<(&str, &str, &str), usize> = BTreeMap::new();
    for qp in qps {
        *counts
            .entry((&qp.device, &qp.state, &qp.process))
            .or_default() += 1;
    }
    counts
        .into_iter()
        .map(|((device, state, process), count)| QpGroup {
            device: device.to_owned(),
            state: state.to_owned(),
            process: process.to_owned(),
            count,
        })
        .collect()
}
