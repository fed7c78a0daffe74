//! `rdmactl verbs`: devices, ports and GID tables as the verbs layer sees them (like
//! `ibv_devinfo -v`), as a table or as JSON.
//!
//! All data comes from `rdma-verbs`; this file only selects and formats. No keys or addresses
//! are printed (there are none at this level).
use crate::exit::CodedError;
use anyhow::Context as _;
use rdma_verbs::{DeviceAttr, DeviceInfo, GidEntry, PortAttr, VerbsError};
use std::io::Write;
use std::process::ExitCode;

/// Show RDMA devices, their ports and GID tables through libibverbs (like `ibv_devinfo -v`).
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Only this device (e.g. rxe0); default: all devices.
    #[arg(long, short = 'd')]
    pub device: Option<String>,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// One device with its attributes and ports, the JSON shape of `rdmactl verbs --json`.
#[derive(serde::Serialize, Debug)]
struct DeviceReport {
    #[serde(flatten)]
    info: DeviceInfo,
    attr: DeviceAttr,
    ports: Vec<PortReport>,
}

/// One port with its GID table.
#[derive(serde::Serialize, Debug)]
struct PortReport {
    #[serde(flatten)]
    attr: PortAttr,
    gids: Vec<GidEntry>,
}

/// The top-level JSON document.
#[derive(serde::Serialize, Debug)]
struct Report {
    devices: Vec<DeviceReport>,
}

/// Map "nothing to talk to" to exit code 3, anything else to a plain error.
fn verbs_error(err: VerbsError, what: &str) -> anyhow::Error {
    if err.is_no_rdma() {
        CodedError::no_rdma(err.to_string())
    } else {
        anyhow::Error::new(err).context(what.to_string())
    }
}

fn collect(info: DeviceInfo) -> anyhow::Result<DeviceReport> {
    let name = info.name.clone();
    let ctx = rdma_verbs::open(&name).map_err(|e| verbs_error(e, &format!("opening {name}")))?;
    let attr = ctx
        .query_device()
        .with_context(|| format!("querying {name}"))?;
    let mut ports = Vec::new();
    for port in 1..=attr.phys_port_cnt {
        let pattr = ctx
            .query_port(port)
            .with_context(|| format!("querying {name} port {port}"))?;
        let gids = ctx
            .gid_table(port)
            .with_context(|| format!("reading the GID table of {name} port {port}"))?;
        ports.push(PortReport { attr: pattr, gids });
    }
    Ok(DeviceReport { info, attr, ports })
}

/// Run `rdmactl verbs`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let all = rdma_verbs::devices().map_err(|e| verbs_error(e, "listing RDMA devices"))?;
    if all.is_empty() {
        return Err(CodedError::no_rdma(
            "no RDMA devices found (for Soft-RoCE: modprobe rdma_rxe && rdma link add rxe0 type rxe netdev eth0)",
        ));
    }
    let selected: Vec<DeviceInfo> = match &args.device {
        None => all,
        Some(want) => {
            let names: Vec<String> = all.iter().map(|d| d.name.clone()).collect();
            let found: Vec<DeviceInfo> = all.into_iter().filter(|d| &d.name == want).collect();
            if found.is_empty() {
                return Err(CodedError::no_rdma(format!(
                    "RDMA device {want:?} not found (available: {})",
                    names.join(", ")
                )));
            }
            found
        }
    };
    let report = Report {
        devices: selected
            .into_iter()
            .map(collect)
            .collect::<anyhow::Result<_>>()?,
    };
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    if args.json {
        serde_json::to_writer_pretty(&mut out, &report).map_err(std::io::Error::from)?;
        writeln!(out)?;
    } else {
        write_table(&mut out, &report)?;
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

fn opt(s: Option<&str>) -> &str {
    s.unwrap_or("invalid")
}

fn write_table(out: &mut impl Write, report: &Report) -> std::io::Result<()> {
    for (i, dev) in report.devices.iter().enumerate() {
        if i > 0 {
            writeln!(out)?;
        }
        let a = &dev.attr;
        writeln!(out, "{}", dev.info.name)?;
        let rows: Vec<(&str, String)> = vec![
            ("transport", dev.info.transport.to_string()),
            ("node_type", dev.info.node_type.to_string()),
            ("node_guid", a.node_guid.to_string()),
            ("sys_image_guid", a.sys_image_guid.to_string()),
            (
                "fw_ver",
                if a.fw_ver.is_empty() {
                    "-".into()
                } else {
                    a.fw_ver.clone()
                },
            ),
            ("vendor_id", format!("{:#06x}", a.vendor_id)),
            ("vendor_part_id", a.vendor_part_id.to_string()),
            ("hw_ver", format!("{:#x}", a.hw_ver)),
            ("phys_port_cnt", a.phys_port_cnt.to_string()),
            ("max_mr_size", format!("{:#x}", a.max_mr_size)),
            ("page_size_cap", format!("{:#x}", a.page_size_cap)),
            ("max_qp", a.max_qp.to_string()),
            ("max_qp_wr", a.max_qp_wr.to_string()),
            ("device_cap_flags", format!("{:#010x}", a.device_cap_flags)),
            ("max_sge", a.max_sge.to_string()),
            ("max_sge_rd", a.max_sge_rd.to_string()),
            ("max_cq", a.max_cq.to_string()),
            ("max_cqe", a.max_cqe.to_string()),
            ("max_mr", a.max_mr.to_string()),
            ("max_pd", a.max_pd.to_string()),
            ("max_qp_rd_atom", a.max_qp_rd_atom.to_string()),
            ("max_qp_init_rd_atom", a.max_qp_init_rd_atom.to_string()),
            ("max_res_rd_atom", a.max_res_rd_atom.to_string()),
            ("atomic_cap", a.atomic_cap.to_string()),
            ("max_mw", a.max_mw.to_string()),
            ("max_ah", a.max_ah.to_string()),
            ("max_srq", a.max_srq.to_string()),
            ("max_srq_wr", a.max_srq_wr.to_string()),
            ("max_pkeys", a.max_pkeys.to_string()),
        ];
        for (k, v) in rows {
            writeln!(out, "  {k:<22}{v}")?;
        }
        for p in &dev.ports {
            let pa = &p.attr;
            writeln!(out, "  port {}", pa.port)?;
            let rows: Vec<(&str, String)> = vec![
                ("state", format!("{} ({})", pa.state, pa.state.raw())),
                (
                    "phys_state",
                    format!("{} ({})", pa.phys_state, pa.phys_state.raw()),
                ),
                ("max_mtu", format!("{} ({})", pa.max_mtu, pa.max_mtu.raw())),
                (
                    "active_mtu",
                    format!("{} ({})", pa.active_mtu, pa.active_mtu.raw()),
                ),
                ("link_layer", pa.link_layer.to_string()),
                ("lid", pa.lid.to_string()),
                ("sm_lid", pa.sm_lid.to_string()),
                ("lmc", format!("{:#04x}", pa.lmc)),
                (
                    "active_width",
                    format!("{} ({})", opt(pa.active_width), pa.active_width_code),
                ),
                (
                    "active_speed",
                    format!("{} ({})", opt(pa.active_speed), pa.active_speed_code),
                ),
                ("max_msg_sz", format!("{:#x}", pa.max_msg_sz)),
                ("port_cap_flags", format!("{:#010x}", pa.port_cap_flags)),
                ("port_cap_flags2", format!("{:#06x}", pa.port_cap_flags2)),
                ("gid_tbl_len", pa.gid_tbl_len.to_string()),
                ("pkey_tbl_len", pa.pkey_tbl_len.to_string()),
            ];
            for (k, v) in rows {
                writeln!(out, "    {k:<20}{v}")?;
            }
            if p.gids.is_empty() {
                writeln!(out, "    (no GIDs)")?;
            }
            for g in &p.gids {
                writeln!(
                    out,
                    "    GID[{:>3}]           {:<40} {:<8} {}",
                    g.index,
                    g.gid.to_string(),
                    g.gid_type.to_string(),
                    g.netdev.as_deref().unwrap_or("-")
                )?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdma_verbs::NoStackReason;

    fn code_of(err: &anyhow::Error) -> Option<u8> {
        err.downcast_ref::<CodedError>().map(|c| c.code)
    }

    #[test]
    fn no_stack_and_missing_devices_exit_with_code_3() {
        let err = verbs_error(
            VerbsError::NoRdmaStack {
                reason: NoStackReason::LibraryMissing,
            },
            "listing",
        );
        assert_eq!(code_of(&err), Some(crate::exit::NO_RDMA));
        assert!(err.to_string().contains("libibverbs.so.1"), "{err}");
        let err = verbs_error(
            VerbsError::DeviceNotFound {
                name: "mlx5_9".into(),
                available: vec!["rxe0".into()],
            },
            "opening",
        );
        assert_eq!(code_of(&err), Some(crate::exit::NO_RDMA));
    }

    #[test]
    fn other_verbs_errors_are_plain_failures_with_context() {
        let err = verbs_error(
            VerbsError::InvalidArgument("port 0".into()),
            "querying rxe0",
        );
        assert_eq!(code_of(&err), None);
        assert_eq!(
            format!("{err:#}"),
            "querying rxe0: invalid argument: port 0"
        );
    }

    #[test]
    fn on_this_machine_the_command_either_works_or_exits_3() {
        // Hosts without RDMA (CI, this build host) must get exit code 3, never a panic; the
        // lab VM has rxe0 and succeeds.
        match run(Args {
            device: None,
            json: true,
        }) {
            Ok(code) => assert_eq!(code, ExitCode::SUCCESS),
            Err(err) => assert_eq!(code_of(&err), Some(crate::exit::NO_RDMA), "{err:#}"),
        }
    }
}
