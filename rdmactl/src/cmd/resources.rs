//! `rdmactl resources`: RDMA resources from the nldev netlink interface, like
//! `rdma res show [qp|cq|mr|pd|cm_id|ctx|srq]`: a per-device summary, or one line per object
//! with its owner, as a table or as JSON.
//!
//! Data comes from `rdmakit::nldev`; this file only selects and formats. Memory keys and
//! addresses are `Secret` in the model and print as `<hidden>` in JSON; the table omits them.
use crate::exit::CodedError;
use rdmakit::nldev::{NldevClient, NldevError, Resource, ResourceKind};
use std::io::Write;
use std::process::ExitCode;

/// Which resources to list.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Queue pairs.
    Qp,
    /// Completion queues.
    Cq,
    /// Memory regions (keys are never printed).
    Mr,
    /// Protection domains.
    Pd,
    /// RDMA CM identifiers.
    #[value(name = "cm_id")]
    CmId,
    /// User contexts.
    Ctx,
    /// Shared receive queues.
    Srq,
}

impl From<Kind> for ResourceKind {
    fn from(k: Kind) -> ResourceKind {
        match k {
            Kind::Qp => ResourceKind::Qp,
            Kind::Cq => ResourceKind::Cq,
            Kind::Mr => ResourceKind::Mr,
            Kind::Pd => ResourceKind::Pd,
            Kind::CmId => ResourceKind::CmId,
            Kind::Ctx => ResourceKind::Ctx,
            Kind::Srq => ResourceKind::Srq,
        }
    }
}

/// Show RDMA resources (QPs, CQs, MRs, PDs, CM IDs, contexts, SRQs) like `rdma res show`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Resource kind; without it, a per-device count of every kind.
    pub kind: Option<Kind>,
    /// Only objects owned by this process id.
    #[arg(long)]
    pub pid: Option<u32>,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Map "no RDMA netlink" to exit code 3.
fn nl_error(err: NldevError) -> anyhow::Error {
    if err.is_no_rdma() {
        CodedError::no_rdma(err.to_string())
    } else {
        anyhow::Error::new(err)
    }
}

/// Run `rdmactl resources`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let mut client = NldevClient::open().map_err(nl_error)?;
    let mut out = std::io::stdout().lock();
    let Some(kind) = args.kind else {
        let summary = client.resource_summary().map_err(nl_error)?;
        if args.json {
            serde_json::to_writer_pretty(&mut out, &summary)?;
            writeln!(out)?;
        } else {
            for s in &summary {
                write!(out, "{}: {}:", s.dev_index, s.dev_name)?;
                for (name, count) in &s.counts {
                    write!(out, " {name} {count}")?;
                }
                writeln!(out)?;
            }
        }
        return Ok(ExitCode::SUCCESS);
    };
    let mut list = client.all_resources(kind.into()).map_err(nl_error)?;
    if let Some(pid) = args.pid {
        list.retain(|r| r.owner().pid == Some(pid));
    }
    if args.json {
        serde_json::to_writer_pretty(&mut out, &list)?;
        writeln!(out)?;
    } else {
        print_table(&mut out, kind.into(), &list)?;
    }
    Ok(ExitCode::SUCCESS)
}

fn opt<T: ToString>(v: Option<T>) -> String {
    v.map(|v| v.to_string()).unwrap_or_else(|| "-".into())
}

/// `comm`, bracketed for kernel owners like `rdma res show` does.
fn comm(r: &Resource) -> String {
    let o = r.owner();
    match (&o.comm, o.pid) {
        (Some(c), Some(_)) => c.clone(),
        (Some(c), None) => format!("[{c}]"),
        (None, _) => "-".into(),
    }
}

fn print_table(out: &mut impl Write, kind: ResourceKind, list: &[Resource]) -> std::io::Result<()> {
    let header: &[&str] = match kind {
        ResourceKind::Qp => &[
            "LINK", "LQPN", "RQPN", "TYPE", "STATE", "RQ-PSN", "SQ-PSN", "PDN", "PID", "COMM",
        ],
        ResourceKind::Cq => &[
            "DEV", "CQN", "CQE", "USERS", "POLL-CTX", "CTXN", "PID", "COMM",
        ],
        ResourceKind::Mr => &["DEV", "MRN", "MRLEN", "PDN", "PID", "COMM"],
        ResourceKind::Pd => &["DEV", "PDN", "USERS", "CTXN", "PID", "COMM"],
        ResourceKind::CmId => &[
            "LINK", "CM-IDN", "LQPN", "TYPE", "STATE", "PS", "SRC-ADDR", "DST-ADDR", "PID", "COMM",
        ],
        ResourceKind::Ctx => &["DEV", "CTXN", "PID", "COMM"],
        ResourceKind::Srq => &["DEV", "SRQN", "TYPE", "LQPN", "PDN", "CQN", "PID", "COMM"],
    };
    let mut rows: Vec<Vec<String>> = vec![header.iter().map(|h| h.to_string()).collect()];
    for r in list {
        let link = |dev: &str, port: Option<u32>| format!("{dev}/{}", opt(port));
        let row = match r {
            Resource::Qp(q) => vec![
                link(&q.dev_name, q.port),
                q.lqpn.to_string(),
                opt(q.rqpn),
                q.qp_type.to_string(),
                q.state.to_string(),
                opt(q.rq_psn),
                q.sq_psn.to_string(),
                opt(q.pdn),
                opt(q.owner.pid),
                comm(r),
            ],
            Resource::Cq(c) => vec![
                c.dev_name.clone(),
                opt(c.cqn),
                c.cqe.to_string(),
                c.users.to_string(),
                opt(c.poll_ctx),
                opt(c.ctxn),
                opt(c.owner.pid),
                comm(r),
            ],
            Resource::Mr(m) => vec![
                m.dev_name.clone(),
                opt(m.mrn),
                m.mrlen.to_string(),
                opt(m.pdn),
                opt(m.owner.pid),
                comm(r),
            ],
            Resource::Pd(p) => vec![
                p.dev_name.clone(),
                opt(p.pdn),
                p.users.to_string(),
                opt(p.ctxn),
                opt(p.owner.pid),
                comm(r),
            ],
            Resource::CmId(c) => vec![
                link(&c.dev_name, c.port),
                opt(c.cm_idn),
                opt(c.lqpn),
                opt(c.qp_type),
                c.state.to_string(),
                port_space(c.ps),
                opt(c.src_addr),
                opt(c.dst_addr),
                opt(c.owner.pid),
                comm(r),
            ],
            Resource::Ctx(c) => vec![
                c.dev_name.clone(),
                c.ctxn.to_string(),
                opt(c.owner.pid),
                comm(r),
            ],
            Resource::Srq(s) => vec![
                s.dev_name.clone(),
                s.srqn.to_string(),
                match s.srq_type {
                    Some(0) => "BASIC".into(),
                    Some(1) => "XRC".into(),
                    Some(2) => "TM".into(),
                    other => opt(other),
                },
                s.qps
                    .iter()
                    .map(|q| {
                        if q.min == q.max {
                            q.min.to_string()
                        } else {
                            format!("{}-{}", q.min, q.max)
                        }
                    })
                    .collect::<Vec<_>>()
                    .join(","),
                opt(s.pdn),
                opt(s.cqn),
                opt(s.owner.pid),
                comm(r),
            ],
            _ => continue,
        };
        rows.push(row);
    }
    let widths: Vec<usize> = (0..header.len())
        .map(|i| {
            rows.iter()
                .map(|r| r.get(i).map_or(0, |c| c.len()))
                .max()
                .unwrap_or(0)
        })
        .collect();
    for row in &rows {
        let line: Vec<String> = row
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{c:<w$}", w = widths[i]))
            .collect();
        writeln!(out, "{}", line.join("  ").trim_end())?;
    }
    Ok(())
}

/// The RDMA CM port space name (`TCP`, `UDP`, `IPOIB`, `IB`), as `rdma res show cm_id`.
fn port_space(ps: u32) -> String {
    match ps {
        0x0002 => "IPOIB".into(),
        0x0106 => "TCP".into(),
        0x0111 => "UDP".into(),
        0x013f => "IB".into(),
        other => format!("{other:#x}"),
    }
}
