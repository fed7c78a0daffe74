//! The pingmesh pane's model: the report of `rdmactl mesh` (its verdicts), or why there is
//! none. The report is built by `cmd::mesh` itself, from the same options.

use crate::cmd::mesh::Report;

/// What the pingmesh pane shows.
#[derive(Debug)]
pub enum MeshStatus {
    /// Neither `--prometheus` nor `--target` was given: no pane.
    NotConfigured,
    /// Not read yet (direct mode: the two scrapes take `mesh::DEFAULT_INTERVAL`).
    Pending,
    /// The last attempt failed: why.
    Failed(String),
    /// The last report.
    Report(Box<Report>),
}
