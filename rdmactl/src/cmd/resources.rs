//! `rdmactl resources`: RDMA resources from the nldev netlink interface, like
//! `rdma res show [qp|cq|mr|pd|cm_id|ctx|srq]`: a per-device summary, or one line per object
//! with its owner, as a table or as JSON; `--by process|cgroup|pod|job`: who holds them
//! (`rdmakit::attribution`, the same tally as rdmad's `netlink_owners` collector).
//!
//! Data comes from `rdmakit::nldev`; this file only selects and formats. Memory keys and
//! addresses are `Secret` in the model and print as `<hidden>` in JSON; the table omits them.
use crate::exit::CodedError;
use rdmakit::attribution::{Grouping, OwnerReport, Tally, TallyOptions, KINDS};
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

/// How `--by` groups owners.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum By {
    /// One row per process (pid, command name, cgroup).
    Process,
    /// One row per cgroup.
    Cgroup,
    /// One row per Kubernetes pod (objects outside pods: one row without a pod).
    Pod,
    /// One row per Slurm job, its steps summed (objects outside jobs: one row without a job).
    Job,
}

/// Show RDMA resources (QPs, CQs, MRs, PDs, CM IDs, contexts, SRQs) like `rdma res show`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Resource kind; without it, a per-device count of every kind.
    #[arg(conflicts_with = "by")]
    pub kind: Option<Kind>,
    /// Who holds the objects: counts of every kind per process, cgroup, pod or Slurm job (owners from
    /// /proc/<pid>/cgroup), most objects first.
    #[arg(long, value_enum)]
    pub by: Option<By>,
    /// Where procfs is mounted (with --by).
    #[arg(long = "path.procfs", default_value = "/proc")]
    pub procfs: std::path::PathBuf,
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
    if let Some(by) = args.by {
        let report = owners(&mut client, &args.procfs, args.pid)?;
        print_owners(&mut out, &report, by, args.json)?;
        return Ok(ExitCode::SUCCESS);
    }
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
    write_rows(out, &rows)
}

/// Print rows (the first is the header) in columns padded to their widest cell, two spaces
/// apart, without trailing blanks.
fn write_rows(out: &mut impl Write, rows: &[Vec<String>]) -> std::io::Result<()> {
    let cols = rows.first().map_or(0, Vec::len);
    let widths: Vec<usize> = (0..cols)
        .map(|i| {
            rows.iter()
                .map(|r| r.get(i).map_or(0, |c| c.len()))
                .max()
                .unwrap_or(0)
        })
        .collect();
    for row in rows {
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

/// Every device's objects tallied per process (pids kept), optionally only `pid`'s.
pub fn owners(
    client: &mut NldevClient,
    procfs: &std::path::Path,
    pid: Option<u32>,
) -> anyhow::Result<OwnerReport> {
    let devices = client.devices().map_err(nl_error)?;
    let mut tally = Tally::new(TallyOptions {
        proc_root: procfs.to_path_buf(),
        pids: true,
        ..TallyOptions::default()
    });
    for refused in tally.dump(client, &devices).map_err(nl_error)? {
        eprintln!("rdmactl: {refused}");
    }
    let mut report = tally.finish(usize::MAX);
    if let Some(pid) = pid {
        report.rows.retain(|r| r.owner.pid == Some(pid));
    }
    Ok(report)
}

fn or_dash(s: &str) -> &str {
    if s.is_empty() {
        "-"
    } else {
        s
    }
}

/// The `--by` table or JSON.
fn print_owners(
    out: &mut impl Write,
    report: &OwnerReport,
    by: By,
    json: bool,
) -> anyhow::Result<()> {
    let grouping = match by {
        By::Process => Grouping::Process,
        By::Cgroup => Grouping::Cgroup,
        By::Pod => Grouping::Pod,
        By::Job => Grouping::Job,
    };
    let groups = report.grouped(grouping);
    if json {
        let rows: Vec<serde_json::Value> = groups
            .iter()
            .map(|(owner, h)| {
                let mut v = serde_json::to_value(owner).unwrap_or_default();
                let qps: Vec<serde_json::Value> = h
                    .qps
                    .iter()
                    .map(|((state, qp_type), n)| {
                        serde_json::json!({"state": state, "qp_type": qp_type, "count": n})
                    })
                    .collect();
                if let Some(map) = v.as_object_mut() {
                    map.retain(|_, x| x.as_str() != Some(""));
                    map.insert("objects".into(), serde_json::json!(h.objects));
                    map.insert("qps".into(), serde_json::json!(qps));
                    map.insert("mr_bytes".into(), serde_json::json!(h.mr_bytes));
                }
                v
            })
            .collect();
        serde_json::to_writer_pretty(&mut *out, &rows)?;
        writeln!(out)?;
        return Ok(());
    }
    let who: &[&str] = match by {
        By::Process => &["PID", "COMM", "CGROUP"],
        By::Cgroup => &["CGROUP"],
        By::Pod => &["POD"],
        By::Job => &["JOB"],
    };
    let mut header: Vec<String> = who.iter().map(|s| s.to_string()).collect();
    header.extend(KINDS.iter().map(|k| k.name().to_ascii_uppercase()));
    header.extend(["QP-ERR".to_string(), "MR-BYTES".to_string()]);
    let mut rows = vec![header];
    for (o, h) in &groups {
        let mut row: Vec<String> = match by {
            By::Process => vec![
                o.pid.map_or("-".into(), |p| p.to_string()),
                o.comm.clone(),
                or_dash(&o.cgroup).to_string(),
            ],
            // Owners without a cgroup (kernel, exited processes) show their name.
            By::Cgroup => vec![if o.cgroup.is_empty() {
                format!("[{}]", o.comm)
            } else {
                o.cgroup.clone()
            }],
            By::Pod => vec![or_dash(&o.pod_uid).to_string()],
            By::Job => vec![or_dash(&o.job_id).to_string()],
        };
        for k in KINDS {
            row.push(h.objects.get(k.name()).copied().unwrap_or(0).to_string());
        }
        let err: u64 = h
            .qps
            .iter()
            .filter(|((state, _), _)| state == "ERR")
            .map(|(_, n)| n)
            .sum();
        row.push(err.to_string());
        row.push(h.mr_bytes.to_string());
        rows.push(row);
    }
    write_rows(&mut *out, &rows)?;
    if report.timed_out {
        writeln!(out, "(the dump stopped early; counts are partial)")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn data() -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../crates/rdmakit/tests/data")
    }

    /// The captured lab dumps (crates/rdmakit/tests/data/nldev) with their /proc tree.
    fn captured() -> OwnerReport {
        tally_with(data().join("proc-captured"))
    }

    fn tally_with(proc_root: PathBuf) -> OwnerReport {
        let data = data();
        let mut tally = Tally::new(TallyOptions {
            proc_root,
            pids: true,
            ..TallyOptions::default()
        });
        for dev in ["rxe0", "rxe_a", "rxe_b"] {
            for kind in KINDS {
                let path = data.join(format!("nldev/res_{}_{dev}.bin", kind.name()));
                let bytes = std::fs::read(path).unwrap_or_default();
                tally.add_answer(kind, &bytes).unwrap();
            }
        }
        tally.finish(usize::MAX)
    }

    #[test]
    fn by_cgroup_table_and_json_name_the_cgroups() {
        let report = captured();
        let mut out = Vec::new();
        print_owners(&mut out, &report, By::Cgroup, false).unwrap();
        let text = String::from_utf8(out).unwrap();
        let line = text
            .lines()
            .find(|l| l.starts_with("/lab.slice/job-b.scope"))
            .unwrap_or_else(|| panic!("{text}"));
        assert_eq!(line.split_whitespace().nth(1), Some("16"), "{line}");
        assert!(text.lines().any(|l| l.starts_with("[kernel]")), "{text}");
        let mut out = Vec::new();
        print_owners(&mut out, &report, By::Process, true).unwrap();
        let rows: serde_json::Value = serde_json::from_slice(&out).unwrap();
        let row = rows
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["pid"] == 170)
            .unwrap();
        assert_eq!(row["comm"], "ibv_srq_pingpon");
        assert_eq!(row["objects"]["qp"], 16);
        assert!(
            row.get("pod_uid").is_none(),
            "empty labels are left out: {row}"
        );
    }

    #[test]
    fn by_job_sums_a_jobs_steps_in_one_row() {
        // The captured processes with ibv_srq_pingpong (170) in step 0 and ibv_rc_pingpong
        // (168) in the extern step of Slurm job 4242 (slurmstepd's cgroup v2 layout).
        let root = std::env::temp_dir().join(format!("rdmactl-by-job-{}", std::process::id()));
        for (pid, step) in [("168", "extern"), ("170", "0")] {
            let dir = root.join(pid);
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::copy(
                data().join("proc-captured").join(pid).join("comm"),
                dir.join("comm"),
            )
            .unwrap();
            std::fs::write(
                dir.join("cgroup"),
                format!("0::/system.slice/slurmstepd.scope/job_4242/step_{step}/user/task_0\n"),
            )
            .unwrap();
        }
        let report = tally_with(root.clone());
        std::fs::remove_dir_all(&root).unwrap();
        let mut out = Vec::new();
        print_owners(&mut out, &report, By::Job, false).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.starts_with("JOB "), "{text}");
        let line = text
            .lines()
            .find(|l| l.starts_with("4242 "))
            .unwrap_or_else(|| panic!("{text}"));
        assert_eq!(line.split_whitespace().nth(1), Some("17"), "{line}");
        assert!(text.lines().any(|l| l.starts_with("- ")), "{text}");
        let mut out = Vec::new();
        print_owners(&mut out, &report, By::Process, true).unwrap();
        let rows: serde_json::Value = serde_json::from_slice(&out).unwrap();
        let row = rows
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["pid"] == 168)
            .unwrap();
        assert_eq!(
            (&row["job_id"], &row["job_step"]),
            (&"4242".into(), &"extern".into())
        );
    }
}
