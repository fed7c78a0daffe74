//! The probe table: every kernel function the tracer hooks, which BPF program runs there,
//! and which selection (`qp`, `mr`, `async`, `cma`) wants it; plus the rdma_cma tracepoints
//! found in tracefs. Planning resolves each function against [`KernelSymbols`] so a kernel
//! without one of them loses that probe, not the tracer.
//!
//! The functions are those of Linux 6.1 (confirmed in the lab's /proc/kallsyms); each probe
//! lists alternatives in order of preference.
use crate::resolve::KernelSymbols;
use crate::Group;
use serde::Serialize;
use std::path::Path;

/// One hook: a BPF program on a kernel function's entry or return.
#[derive(Debug, Clone, Copy)]
pub struct ProbeSpec {
    /// What the hook observes, for reports (`mr_reg`).
    pub what: &'static str,
    /// Which selection needs it.
    pub group: Group,
    /// Candidate kernel functions, first resolvable wins.
    pub functions: &'static [&'static str],
    /// BPF program name in rdma_trace.bpf.c.
    pub program: &'static str,
    /// Return probe (kretprobe) rather than entry.
    pub retprobe: bool,
    /// Without this hook the others of its `what` are useless (the entry of an entry/return
    /// pair): when it is missing, its partners are skipped too.
    pub required_for_what: bool,
}

/// All kprobes. Entry/return pairs share `what`.
pub const PROBES: &[ProbeSpec] = &[
    // MR registration: the whole uverbs command (latency, errno) ...
    ProbeSpec {
        what: "mr_reg",
        group: Group::Mr,
        functions: &["ib_uverbs_reg_mr"],
        program: "reg_mr_entry",
        retprobe: false,
        required_for_what: true,
    },
    ProbeSpec {
        what: "mr_reg",
        group: Group::Mr,
        functions: &["ib_uverbs_reg_mr"],
        program: "reg_mr_exit",
        retprobe: true,
        required_for_what: true,
    },
    // ... and the pinning inside it, which knows the size and the device.
    ProbeSpec {
        what: "mr_reg",
        group: Group::Mr,
        functions: &["ib_umem_get"],
        program: "umem_get_entry",
        retprobe: false,
        required_for_what: false,
    },
    ProbeSpec {
        what: "mr_dereg",
        group: Group::Mr,
        functions: &["ib_dereg_mr_user"],
        program: "dereg_mr_entry",
        retprobe: false,
        required_for_what: true,
    },
    ProbeSpec {
        what: "mr_dereg",
        group: Group::Mr,
        functions: &["ib_dereg_mr_user"],
        program: "dereg_mr_exit",
        retprobe: true,
        required_for_what: true,
    },
    ProbeSpec {
        what: "qp_create",
        group: Group::Qp,
        functions: &["ib_create_qp_user"],
        program: "create_qp_entry",
        retprobe: false,
        required_for_what: true,
    },
    ProbeSpec {
        what: "qp_create",
        group: Group::Qp,
        functions: &["ib_create_qp_user"],
        program: "create_qp_exit",
        retprobe: true,
        required_for_what: true,
    },
    ProbeSpec {
        what: "qp_modify",
        group: Group::Qp,
        functions: &["ib_modify_qp_with_udata"],
        program: "modify_qp_entry",
        retprobe: false,
        required_for_what: true,
    },
    ProbeSpec {
        what: "qp_modify",
        group: Group::Qp,
        functions: &["ib_modify_qp_with_udata"],
        program: "modify_qp_exit",
        retprobe: true,
        required_for_what: true,
    },
    ProbeSpec {
        what: "qp_destroy",
        group: Group::Qp,
        functions: &["ib_destroy_qp_user"],
        program: "destroy_qp_entry",
        retprobe: false,
        required_for_what: true,
    },
    ProbeSpec {
        what: "qp_destroy",
        group: Group::Qp,
        functions: &["ib_destroy_qp_user"],
        program: "destroy_qp_exit",
        retprobe: true,
        required_for_what: true,
    },
    ProbeSpec {
        what: "qp_event",
        group: Group::Qp,
        functions: &["ib_uverbs_qp_event_handler"],
        program: "qp_event",
        retprobe: false,
        required_for_what: true,
    },
    ProbeSpec {
        what: "cq_event",
        group: Group::Async,
        functions: &["ib_uverbs_cq_event_handler"],
        program: "cq_event",
        retprobe: false,
        required_for_what: true,
    },
    ProbeSpec {
        what: "device_event",
        group: Group::Async,
        functions: &["ib_dispatch_event"],
        program: "device_event",
        retprobe: false,
        required_for_what: true,
    },
];

/// What happened to one probe point.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum ProbeStatus {
    /// Attached (or, in a plan, about to be).
    Attached {
        /// The kernel function or tracepoint.
        target: String,
        /// Its module (`ib_core`), or `tracepoint`.
        module: String,
    },
    /// The kernel has none of the candidate functions.
    Missing {
        /// What was looked for.
        tried: Vec<String>,
        /// Why (`not in BTF`, `only a compiler clone`).
        reason: String,
    },
    /// The function exists but attaching failed.
    Failed {
        /// The kernel function or tracepoint.
        target: String,
        /// The error.
        error: String,
    },
    /// Skipped because its entry probe is missing.
    Skipped {
        /// Why.
        reason: String,
    },
}

/// One line of the attach report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProbeReport {
    /// What the hook observes (`qp_modify`).
    pub what: String,
    /// BPF program.
    pub program: String,
    /// Entry, return or tracepoint.
    pub hook: &'static str,
    /// Outcome.
    #[serde(flatten)]
    pub status: ProbeStatus,
}

impl ProbeReport {
    /// True when attached.
    pub fn attached(&self) -> bool {
        matches!(self.status, ProbeStatus::Attached { .. })
    }
}

/// Decide, for each probe of the selected groups, which kernel function it will attach to.
pub fn plan(groups: &[Group], syms: &KernelSymbols) -> Vec<(ProbeSpec, ProbeReport)> {
    let source = match syms.source {
        crate::resolve::SymbolSource::Btf => "BTF",
        crate::resolve::SymbolSource::Kallsyms => "/proc/kallsyms",
    };
    let mut out: Vec<(ProbeSpec, ProbeReport)> = Vec::new();
    for spec in PROBES.iter().filter(|p| groups.contains(&p.group)) {
        let found = spec
            .functions
            .iter()
            .find_map(|f| syms.module_of(f).map(|m| (f.to_string(), m.to_string())));
        let status = match found {
            Some((target, module)) => ProbeStatus::Attached { target, module },
            None => {
                let clone = spec.functions.iter().any(|f| syms.only_as_clone(f));
                ProbeStatus::Missing {
                    tried: spec.functions.iter().map(|s| s.to_string()).collect(),
                    reason: if clone {
                        "only a compiler clone exists (inlined or specialised)".into()
                    } else {
                        format!("not in {source} (module not loaded, or another kernel)")
                    },
                }
            }
        };
        out.push((
            *spec,
            ProbeReport {
                what: spec.what.into(),
                program: spec.program.into(),
                hook: if spec.retprobe { "kretprobe" } else { "kprobe" },
                status,
            },
        ));
    }
    // An entry/return pair is all or nothing.
    let broken: Vec<&'static str> = out
        .iter()
        .filter(|(s, r)| s.required_for_what && !r.attached())
        .map(|(s, _)| s.what)
        .collect();
    for (spec, report) in out.iter_mut() {
        if broken.contains(&spec.what) && report.attached() {
            report.status = ProbeStatus::Skipped {
                reason: format!("another hook of {} is missing", spec.what),
            };
        }
    }
    out
}

/// One rdma_cma tracepoint and where its record keeps `event` and `status`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CmaTracepoint {
    /// Name under events/rdma_cma/.
    pub name: String,
    /// Byte offset of the `event` field, when the record has one.
    pub event_offset: Option<u16>,
    /// Byte offset of the `status` field, when the record has one.
    pub status_offset: Option<u16>,
}

impl CmaTracepoint {
    /// The attach cookie the BPF program decodes (see `cma_tracepoint` in the C source).
    pub fn cookie(&self, index: u16) -> u64 {
        index as u64
            | (self.event_offset.unwrap_or(0) as u64) << 16
            | (self.status_offset.unwrap_or(0) as u64) << 32
    }
}

/// Offsets of `event` and `status` in a tracepoint `format` file.
pub fn parse_format(name: &str, format: &str) -> CmaTracepoint {
    let mut tp = CmaTracepoint {
        name: name.to_string(),
        event_offset: None,
        status_offset: None,
    };
    for line in format.lines() {
        let Some(decl) = line.trim().strip_prefix("field:") else {
            continue;
        };
        let mut parts = decl.split(';').map(str::trim);
        let (Some(field), Some(offset), Some(size)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        let Some(fname) = field.split_whitespace().last() else {
            continue;
        };
        let num = |s: &str, key: &str| s.strip_prefix(key).and_then(|v| v.parse::<u16>().ok());
        let (Some(off), Some(sz)) = (num(offset, "offset:"), num(size, "size:")) else {
            continue;
        };
        match fname {
            "event" if sz == 4 || sz == 8 => tp.event_offset = Some(off),
            "status" if sz == 4 => tp.status_offset = Some(off),
            _ => {}
        }
    }
    tp
}

/// The rdma_cma tracepoints of a tracefs `events/rdma_cma` directory, sorted by name.
pub fn cma_tracepoints(events_dir: &Path) -> std::io::Result<Vec<CmaTracepoint>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(events_dir)? {
        let entry = entry?;
        let format = entry.path().join("format");
        if !format.is_file() {
            continue;
        }
        let name = entry.file_name().to_string_lossy().into_owned();
        let text = std::fs::read_to_string(&format)?;
        out.push(parse_format(&name, &text));
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

/// Where tracefs is: `/sys/kernel/tracing`, or the older `/sys/kernel/debug/tracing`.
pub fn tracefs_events_dir() -> Option<std::path::PathBuf> {
    [
        "/sys/kernel/tracing/events",
        "/sys/kernel/debug/tracing/events",
    ]
    .iter()
    .map(std::path::PathBuf::from)
    .find(|p| p.is_dir())
}

#[cfg(test)]
mod tests {
    use super::*;

    const LAB_KALLSYMS: &str = "\
0 t ib_uverbs_reg_mr\t[ib_uverbs]
0 T ib_umem_get\t[ib_uverbs]
0 T ib_dereg_mr_user\t[ib_core]
0 T ib_create_qp_user\t[ib_core]
0 T ib_modify_qp_with_udata\t[ib_core]
0 T ib_destroy_qp_user\t[ib_core]
0 t ib_uverbs_qp_event_handler\t[ib_uverbs]
0 t ib_uverbs_cq_event_handler\t[ib_uverbs]
0 T ib_dispatch_event\t[ib_core]
";

    #[test]
    fn everything_resolves_on_the_lab_kernel() {
        let syms = KernelSymbols::from_kallsyms(LAB_KALLSYMS);
        let plan = plan(&Group::ALL, &syms);
        assert_eq!(plan.len(), PROBES.len());
        for (_, r) in &plan {
            assert!(r.attached(), "{r:?}");
        }
        let qp_only = super::plan(&[Group::Qp], &syms);
        assert!(qp_only.iter().all(|(s, _)| s.group == Group::Qp));
        assert_eq!(qp_only.len(), 7);
    }

    #[test]
    fn a_missing_entry_skips_its_return_probe_only() {
        let text: String = LAB_KALLSYMS
            .lines()
            .filter(|l| !l.contains("ib_modify_qp_with_udata") && !l.contains("ib_umem_get"))
            .map(|l| format!("{l}\n"))
            .collect();
        let syms = KernelSymbols::from_kallsyms(&text);
        let plan = plan(&[Group::Qp, Group::Mr], &syms);
        let status = |prog: &str| {
            plan.iter()
                .find(|(s, _)| s.program == prog)
                .unwrap()
                .1
                .clone()
        };
        assert!(matches!(
            status("modify_qp_entry").status,
            ProbeStatus::Missing { .. }
        ));
        assert!(matches!(
            status("modify_qp_exit").status,
            ProbeStatus::Missing { .. }
        ));
        assert!(status("create_qp_exit").attached());
        // ib_umem_get is optional for mr_reg: the pair still attaches, without sizes.
        assert!(matches!(
            status("umem_get_entry").status,
            ProbeStatus::Missing { .. }
        ));
        assert!(status("reg_mr_entry").attached());
        assert!(status("reg_mr_exit").attached());
    }

    #[test]
    fn a_missing_return_target_skips_the_entry() {
        let syms = KernelSymbols::from_kallsyms("0 t ib_uverbs_qp_event_handler\t[ib_uverbs]\n");
        let plan = plan(&[Group::Qp], &syms);
        let attached: Vec<_> = plan
            .iter()
            .filter(|(_, r)| r.attached())
            .map(|(s, _)| s.program)
            .collect();
        assert_eq!(attached, ["qp_event"]);
        let json = serde_json::to_value(&plan[0].1).unwrap();
        assert_eq!(json["status"], "missing");
        assert_eq!(json["what"], "qp_create");
    }

    /// The format file of rdma_cma/cm_event_handler in the lab (6.1), trimmed.
    const CM_EVENT_HANDLER: &str = "name: cm_event_handler
ID: 1400
format:
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;

\tfield:u32 cm_id;\toffset:8;\tsize:4;\tsigned:0;
\tfield:u32 tos;\toffset:12;\tsize:4;\tsigned:0;
\tfield:unsigned long event;\toffset:16;\tsize:8;\tsigned:0;
\tfield:int status;\toffset:24;\tsize:4;\tsigned:1;
\tfield:unsigned char srcaddr[28];\toffset:28;\tsize:28;\tsigned:0;
";

    #[test]
    fn format_offsets_become_the_cookie() {
        let tp = parse_format("cm_event_handler", CM_EVENT_HANDLER);
        assert_eq!(tp.event_offset, Some(16));
        assert_eq!(tp.status_offset, Some(24));
        assert_eq!(tp.cookie(3), 3 | 16 << 16 | 24 << 32);
        let plain = parse_format(
            "cm_send_req",
            "format:\n\tfield:u32 cm_id;\toffset:8;\tsize:4;\tsigned:0;\n",
        );
        assert_eq!(plain.cookie(1), 1);
    }

    #[test]
    fn tracepoints_from_a_fake_tracefs() {
        let dir = std::env::temp_dir().join(format!("rdma-trace-tp-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        for (name, fmt) in [
            ("cm_send_req", "format:\n"),
            ("cm_event_handler", CM_EVENT_HANDLER),
        ] {
            std::fs::create_dir_all(dir.join(name)).unwrap();
            std::fs::write(dir.join(name).join("format"), fmt).unwrap();
        }
        std::fs::write(dir.join("enable"), "0").unwrap();
        let tps = cma_tracepoints(&dir).unwrap();
        let names: Vec<_> = tps.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["cm_event_handler", "cm_send_req"]);
        assert_eq!(tps[0].event_offset, Some(16));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
