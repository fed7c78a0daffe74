//! The tracer: checks privileges, resolves the probe table against the running kernel,
//! loads the BPF object, attaches what resolves (reporting what did not), and turns ring
//! buffer records into [`TraceEvent`]s.
//!
//! With the `bpf` feature the work is done by libbpf-rs through its safe API: the BPF object
//! compiled by build.rs is embedded and opened from memory, so this crate has no unsafe code
//! and no generated skeleton. Without the feature [`Tracer::start`] returns
//! [`TraceError::NoBpfSupport`].
use crate::event::TraceEvent;
use crate::probes::ProbeReport;
use crate::Group;
use std::path::PathBuf;
use std::time::Duration;

/// What to trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Selection {
    /// QP create / modify / destroy and QP async events.
    Qp,
    /// MR registration / deregistration.
    Mr,
    /// Everything: QP, MR, CQ and port events, rdma_cma tracepoints.
    All,
}

impl Selection {
    /// The probe groups of this selection.
    pub fn groups(self) -> Vec<Group> {
        match self {
            Selection::Qp => vec![Group::Qp],
            Selection::Mr => vec![Group::Mr],
            Selection::All => Group::ALL.to_vec(),
        }
    }
}

/// Where the tracer reads the kernel's description (flags for tests and odd systems).
#[derive(Debug, Clone)]
pub struct KernelPaths {
    /// BTF directory (`/sys/kernel/btf`).
    pub btf_dir: PathBuf,
    /// Symbol table (`/proc/kallsyms`).
    pub kallsyms: PathBuf,
}

impl Default for KernelPaths {
    fn default() -> Self {
        KernelPaths {
            btf_dir: "/sys/kernel/btf".into(),
            kallsyms: "/proc/kallsyms".into(),
        }
    }
}

/// Why tracing cannot run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TraceError {
    /// This binary was built without the `bpf` feature.
    #[error(
        "built without BPF support: rebuild with `--features bpf` (needs clang and libbpf-dev \
         at build time) to trace the RDMA control path"
    )]
    NoBpfSupport,
    /// Missing privileges.
    #[error("tracing needs CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN, or root): {0}")]
    Permission(String),
    /// The kernel's symbols could not be read.
    #[error("cannot read the kernel's functions (BTF or kallsyms): {0}")]
    Symbols(#[source] std::io::Error),
    /// Loading the BPF object failed.
    #[error("loading the BPF programs failed: {0}")]
    Load(String),
    /// Nothing of the selection could be attached.
    #[error("no probe point of this selection exists on this kernel ({0}); is ib_uverbs loaded?")]
    NothingAttached(String),
    /// Reading the ring buffer failed.
    #[error("reading trace events failed: {0}")]
    Poll(String),
}

/// Effective capabilities of this process (from /proc/self/status), as a bit set.
pub fn effective_capabilities() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    parse_cap_eff(&status)
}

/// The CapEff line of a `/proc/<pid>/status` text.
pub fn parse_cap_eff(status: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
}

const CAP_SYS_ADMIN: u32 = 21;
const CAP_PERFMON: u32 = 38;
const CAP_BPF: u32 = 39;

/// Check the capabilities a kprobe tracer needs; the error says which are missing.
pub fn check_privileges(cap_eff: Option<u64>) -> Result<(), TraceError> {
    let Some(caps) = cap_eff else {
        return Err(TraceError::Permission(
            "cannot read CapEff from /proc/self/status".into(),
        ));
    };
    let has = |c: u32| caps & (1u64 << c) != 0;
    if has(CAP_SYS_ADMIN) || (has(CAP_BPF) && has(CAP_PERFMON)) {
        return Ok(());
    }
    let missing: Vec<&str> = [(CAP_BPF, "CAP_BPF"), (CAP_PERFMON, "CAP_PERFMON")]
        .iter()
        .filter(|(c, _)| !has(*c))
        .map(|(_, n)| *n)
        .collect();
    Err(TraceError::Permission(format!(
        "this process lacks {} (run as root, or `setcap cap_bpf,cap_perfmon+ep` on the binary)",
        missing.join(" and ")
    )))
}

/// A running tracer. Dropping it detaches every probe.
pub struct Tracer {
    source: crate::resolve::SymbolSource,
    reports: Vec<ProbeReport>,
    tracepoints: Vec<String>,
    clock_offset: i128,
    inner: imp::Inner,
}

impl std::fmt::Debug for Tracer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tracer")
            .field("reports", &self.reports)
            .field("tracepoints", &self.tracepoints)
            .finish_non_exhaustive()
    }
}

impl Tracer {
    /// Check privileges, resolve, load and attach with the default kernel paths.
    pub fn start(selection: Selection) -> Result<Tracer, TraceError> {
        Tracer::start_with(selection, &KernelPaths::default())
    }

    /// [`Tracer::start`] with explicit kernel paths.
    pub fn start_with(selection: Selection, paths: &KernelPaths) -> Result<Tracer, TraceError> {
        if !crate::bpf_support() {
            return Err(TraceError::NoBpfSupport);
        }
        check_privileges(effective_capabilities())?;
        let syms = crate::resolve::KernelSymbols::load(&paths.btf_dir, &paths.kallsyms)
            .map_err(TraceError::Symbols)?;
        let groups = selection.groups();
        let plan = crate::probes::plan(&groups, &syms);
        let (inner, reports, tracepoints) = imp::Inner::start(&plan, groups.contains(&Group::Cma))?;
        if !reports.iter().any(ProbeReport::attached) {
            let mut tried: Vec<String> = Vec::new();
            for r in &reports {
                let names = match &r.status {
                    crate::probes::ProbeStatus::Missing { tried, .. } => tried.clone(),
                    crate::probes::ProbeStatus::Failed { target, .. } => vec![target.clone()],
                    _ => Vec::new(),
                };
                for n in names {
                    if !tried.contains(&n) {
                        tried.push(n);
                    }
                }
            }
            let source = match syms.source {
                crate::resolve::SymbolSource::Btf => "BTF",
                crate::resolve::SymbolSource::Kallsyms => "kallsyms",
            };
            return Err(TraceError::NothingAttached(format!(
                "{} not found in {source} or not attachable",
                tried.join(", ")
            )));
        }
        Ok(Tracer {
            source: syms.source,
            reports,
            tracepoints,
            clock_offset: crate::event::monotonic_to_unix_offset(),
            inner,
        })
    }

    /// Where the probe points were resolved (BTF or kallsyms).
    pub fn symbol_source(&self) -> crate::resolve::SymbolSource {
        self.source
    }

    /// What attached and what did not.
    pub fn reports(&self) -> &[ProbeReport] {
        &self.reports
    }

    /// Wait up to `timeout` for events and hand each to `on_event`. Records that do not
    /// parse are counted in [`Tracer::malformed`].
    pub fn poll(
        &mut self,
        timeout: Duration,
        on_event: &mut dyn FnMut(TraceEvent),
    ) -> Result<(), TraceError> {
        let (offset, tps) = (self.clock_offset, &self.tracepoints);
        self.inner.poll(timeout, &mut |bytes: &[u8]| {
            crate::event::parse_raw(bytes, offset, tps).map(&mut *on_event)
        })
    }

    /// Events the kernel side dropped because the ring buffer was full.
    pub fn dropped(&self) -> u64 {
        self.inner.dropped()
    }

    /// Records that did not parse (a BPF/user-space layout mismatch: a bug).
    pub fn malformed(&self) -> u64 {
        self.inner.malformed()
    }
}

#[cfg(not(feature = "bpf"))]
mod imp {
    //! Stand-in without the `bpf` feature: never constructed.
    use super::*;
    use crate::probes::ProbeSpec;

    pub(super) struct Inner;

    type Started = (Inner, Vec<ProbeReport>, Vec<String>);

    impl Inner {
        pub(super) fn start(
            _plan: &[(ProbeSpec, ProbeReport)],
            _cma: bool,
        ) -> Result<Started, TraceError> {
            Err(TraceError::NoBpfSupport)
        }

        pub(super) fn poll(
            &mut self,
            _timeout: Duration,
            _on_record: &mut dyn FnMut(&[u8]) -> Result<(), crate::event::ParseError>,
        ) -> Result<(), TraceError> {
            Err(TraceError::NoBpfSupport)
        }

        pub(super) fn dropped(&self) -> u64 {
            0
        }

        pub(super) fn malformed(&self) -> u64 {
            0
        }
    }
}

#[cfg(feature = "bpf")]
mod imp {
    //! The libbpf-rs side: open the embedded object, load, attach, read the ring buffer.
    use super::*;
    use crate::probes::{ProbeSpec, ProbeStatus};
    use libbpf_rs::{
        Link, MapCore, MapFlags, Object, ObjectBuilder, RingBuffer, RingBufferBuilder,
        TracepointCategory, TracepointOpts,
    };
    use std::cell::RefCell;
    use std::collections::VecDeque;
    use std::rc::Rc;

    static OBJECT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/rdma_trace.bpf.o"));

    type Queue = Rc<RefCell<VecDeque<Vec<u8>>>>;

    pub(super) struct Inner {
        // Field order is drop order: the ring buffer and links go before the object.
        ring: RingBuffer<'static>,
        queue: Queue,
        _links: Vec<Link>,
        object: Object,
        malformed: u64,
    }

    type Started = (Inner, Vec<ProbeReport>, Vec<String>);

    fn libbpf_log(level: libbpf_rs::PrintLevel, msg: String) {
        match level {
            libbpf_rs::PrintLevel::Warn => tracing::debug!(target: "libbpf", "{}", msg.trim_end()),
            _ => tracing::trace!(target: "libbpf", "{}", msg.trim_end()),
        }
    }

    fn mount_tracefs() -> Option<std::path::PathBuf> {
        if let Some(dir) = crate::probes::tracefs_events_dir() {
            return Some(dir);
        }
        let target = std::path::Path::new("/sys/kernel/tracing");
        let res = nix::mount::mount(
            Some("tracefs"),
            target,
            Some("tracefs"),
            nix::mount::MsFlags::empty(),
            None::<&str>,
        );
        if let Err(e) = res {
            tracing::warn!(
                "tracefs is not mounted and mounting it failed ({e}): no rdma_cma tracepoints"
            );
        }
        crate::probes::tracefs_events_dir()
    }

    impl Inner {
        pub(super) fn start(
            plan: &[(ProbeSpec, ProbeReport)],
            cma: bool,
        ) -> Result<Started, TraceError> {
            libbpf_rs::set_print(Some((libbpf_rs::PrintLevel::Debug, libbpf_log)));
            let mut open = ObjectBuilder::default()
                .open_memory(OBJECT)
                .map_err(|e| TraceError::Load(format!("{e:#}")))?;
            // Load only the programs we will attach: a program whose CO-RE relocations
            // fail on this kernel must not stop the others.
            let wanted: Vec<&str> = plan
                .iter()
                .filter(|(_, r)| r.attached())
                .map(|(s, _)| s.program)
                .chain(cma.then_some("cma_tracepoint"))
                .collect();
            for mut prog in open.progs_mut() {
                let name = prog.name().to_string_lossy().into_owned();
                prog.set_autoload(wanted.contains(&name.as_str()));
            }
            let object = open.load().map_err(|e| {
                let msg = format!("{e:#}");
                if msg.contains("Operation not permitted") || msg.contains("EPERM") {
                    TraceError::Permission(msg)
                } else {
                    TraceError::Load(msg)
                }
            })?;
            let mut links = Vec::new();
            let mut reports = Vec::new();
            for (spec, report) in plan {
                let mut report = report.clone();
                if let ProbeStatus::Attached { target, .. } = &report.status {
                    let target = target.clone();
                    let prog = object
                        .progs_mut()
                        .find(|p| p.name() == spec.program)
                        .ok_or_else(|| TraceError::Load(format!("no program {}", spec.program)))?;
                    match prog.attach_kprobe(spec.retprobe, &target) {
                        Ok(link) => links.push(link),
                        Err(e) => {
                            report.status = ProbeStatus::Failed {
                                target,
                                error: format!("{e:#}"),
                            }
                        }
                    }
                }
                reports.push(report);
            }
            let mut tracepoints = Vec::new();
            if cma {
                attach_cma(&object, &mut links, &mut reports, &mut tracepoints)?;
            }
            let queue: Queue = Rc::new(RefCell::new(VecDeque::new()));
            let sink = Rc::clone(&queue);
            let events = object
                .maps()
                .find(|m| m.name() == "events")
                .ok_or_else(|| TraceError::Load("no events map".into()))?;
            let mut builder = RingBufferBuilder::new();
            builder
                .add(&events, move |data: &[u8]| {
                    sink.borrow_mut().push_back(data.to_vec());
                    0
                })
                .map_err(|e| TraceError::Load(format!("{e:#}")))?;
            let ring = builder
                .build()
                .map_err(|e| TraceError::Load(format!("{e:#}")))?;
            Ok((
                Inner {
                    ring,
                    queue,
                    _links: links,
                    object,
                    malformed: 0,
                },
                reports,
                tracepoints,
            ))
        }

        pub(super) fn poll(
            &mut self,
            timeout: Duration,
            on_record: &mut dyn FnMut(&[u8]) -> Result<(), crate::event::ParseError>,
        ) -> Result<(), TraceError> {
            // The BPF side never wakes us (BPF_RB_NO_WAKEUP, see the C source): wait out
            // the timeout, then read whatever is there.
            if let Err(e) = self.ring.poll(timeout) {
                // A signal interrupting epoll is not an error.
                if e.kind() != libbpf_rs::ErrorKind::Interrupted {
                    return Err(TraceError::Poll(format!("{e:#}")));
                }
            }
            self.ring
                .consume()
                .map_err(|e| TraceError::Poll(format!("{e:#}")))?;
            loop {
                let next = self.queue.borrow_mut().pop_front();
                let Some(rec) = next else { break };
                if let Err(e) = on_record(&rec) {
                    self.malformed += 1;
                    tracing::warn!("dropping a trace record: {e}");
                }
            }
            Ok(())
        }

        pub(super) fn dropped(&self) -> u64 {
            let Some(map) = self.object.maps().find(|m| m.name() == "drops") else {
                return 0;
            };
            match map.lookup(&0u32.to_ne_bytes(), MapFlags::ANY) {
                Ok(Some(v)) if v.len() >= 8 => {
                    u64::from_ne_bytes(v[..8].try_into().unwrap_or([0; 8]))
                }
                _ => 0,
            }
        }

        pub(super) fn malformed(&self) -> u64 {
            self.malformed
        }
    }

    fn attach_cma(
        object: &Object,
        links: &mut Vec<Link>,
        reports: &mut Vec<ProbeReport>,
        names: &mut Vec<String>,
    ) -> Result<(), TraceError> {
        let events = mount_tracefs().map(|d| d.join("rdma_cma"));
        let found = match events.as_deref().map(crate::probes::cma_tracepoints) {
            Some(Ok(tps)) => tps,
            Some(Err(e)) => {
                reports.push(cma_missing(format!(
                    "no rdma_cma events in tracefs ({e}); is rdma_cm loaded?"
                )));
                return Ok(());
            }
            None => {
                reports.push(cma_missing("tracefs is not available".into()));
                return Ok(());
            }
        };
        let prog = object
            .progs_mut()
            .find(|p| p.name() == "cma_tracepoint")
            .ok_or_else(|| TraceError::Load("no program cma_tracepoint".into()))?;
        for (i, tp) in found.iter().enumerate() {
            let opts = TracepointOpts {
                cookie: tp.cookie(i as u16),
                ..Default::default()
            };
            let status = match prog.attach_tracepoint_with_opts(
                TracepointCategory::Custom("rdma_cma".into()),
                &tp.name,
                opts,
            ) {
                Ok(link) => {
                    links.push(link);
                    ProbeStatus::Attached {
                        target: format!("rdma_cma:{}", tp.name),
                        module: "tracepoint".into(),
                    }
                }
                Err(e) => ProbeStatus::Failed {
                    target: format!("rdma_cma:{}", tp.name),
                    error: format!("{e:#}"),
                },
            };
            reports.push(ProbeReport {
                what: "cma".into(),
                program: "cma_tracepoint".into(),
                hook: "tracepoint",
                status,
            });
            names.push(tp.name.clone());
        }
        Ok(())
    }

    fn cma_missing(reason: String) -> ProbeReport {
        ProbeReport {
            what: "cma".into(),
            program: "cma_tracepoint".into(),
            hook: "tracepoint",
            status: ProbeStatus::Missing {
                tried: vec!["rdma_cma:*".into()],
                reason,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capabilities_decide_permission() {
        let root = "Name:\tx\nCapEff:\t000001ffffffffff\n";
        assert!(check_privileges(parse_cap_eff(root)).is_ok());
        let bpf_perfmon = 1u64 << CAP_BPF | 1u64 << CAP_PERFMON;
        assert!(check_privileges(Some(bpf_perfmon)).is_ok());
        let err = check_privileges(Some(1u64 << CAP_BPF))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("CAP_PERFMON") && !err.contains("lacks CAP_BPF"),
            "{err}"
        );
        let none = check_privileges(parse_cap_eff("CapEff:\t0000000000000000\n"))
            .unwrap_err()
            .to_string();
        assert!(none.contains("lacks CAP_BPF and CAP_PERFMON"), "{none}");
        assert!(check_privileges(None).is_err());
    }

    #[test]
    fn selections_map_to_groups() {
        assert_eq!(Selection::Qp.groups(), [Group::Qp]);
        assert_eq!(Selection::All.groups().len(), 4);
    }

    #[cfg(not(feature = "bpf"))]
    #[test]
    fn without_bpf_the_tracer_says_so() {
        let err = Tracer::start(Selection::Qp).unwrap_err();
        assert!(matches!(err, TraceError::NoBpfSupport));
        assert!(err.to_string().contains("built without BPF support"));
    }
}
