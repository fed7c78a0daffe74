//! Who a process is: its command name, its cgroup, and where the cgroup path follows the
//! Kubernetes conventions, its pod and container; where it follows Slurm's, its job and step.
//!
//! RDMA netlink resource dumps name the task that created each object; this module turns
//! that task id into labels an operator can join on. Everything is read under a
//! configurable proc root (`--path.procfs`), so tests run on captured trees.
//!
//! Path conventions recognised (kubelet and the container runtimes, both cgroup drivers):
//!
//! | driver | pod segment | container segment |
//! |---|---|---|
//! | systemd | `kubepods[-<qos>]-pod<uid, '_' for '-'>.slice` | `cri-containerd-<id>.scope`, `crio-<id>.scope`, `docker-<id>.scope` |
//! | cgroupfs | `pod<uid>` | `<id>` (containerd, Docker), `crio-<id>` |
//!
//! A CRI-O `crio-conmon-<id>.scope` is the container's monitor process, not the
//! container: it gets the pod, not a container id. A Docker container outside Kubernetes
//! (`docker-<id>.scope`, `/docker/<id>`) gets a container id and no pod.
//!
//! Slurm jobs ([`slurm_job`]), as slurmstepd lays out its cgroups:
//!
//! | plugin | path |
//! |---|---|
//! | `cgroup/v2` | `/system.slice/[<node>_]slurmstepd.scope/job_<id>/step_<step>/{slurm,user/task_<n>}` |
//! | `cgroup/v1` | `/slurm[_<node>]/uid_<uid>/job_<id>/step_<step>/task_<n>` (every controller) |
//!
//! `<step>` is a number or `extern`, `batch`, `interactive`. The v2 layout is the one of
//! Slurm's "Control Group v2 plugin" page (hierarchy overview: the delegated
//! `slurmstepd.scope`, node-name-prefixed with `--enable-multiple-slurmd`); the v1 layout is
//! built by Slurm's cgroup/v1 task and proctrack plugins (`<slurm>/uid_%u/job_%u/step_%u`).
//! A `job_<n>` segment anywhere else (under `user.slice`, in a pod) is not a Slurm job.
use crate::file::FileError;
use std::path::Path;

/// The container runtime a container id comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Runtime {
    /// containerd (`cri-containerd-<id>.scope`, or a bare id under a cgroupfs pod).
    Containerd,
    /// CRI-O (`crio-<id>`).
    CriO,
    /// Docker (`docker-<id>.scope`, `/docker/<id>`).
    Docker,
}

impl Runtime {
    /// The name used in labels.
    pub fn as_str(self) -> &'static str {
        match self {
            Runtime::Containerd => "containerd",
            Runtime::CriO => "cri-o",
            Runtime::Docker => "docker",
        }
    }
}

/// The Kubernetes and container identity found in a cgroup path.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ContainerIds {
    /// The pod's UID, in its canonical dashed form.
    pub pod_uid: Option<String>,
    /// The container's 64-hex-digit id.
    pub container_id: Option<String>,
    /// Which runtime's naming the container segment used; `None` for a bare id under
    /// a cgroupfs pod, which containerd and Docker both use.
    pub runtime: Option<Runtime>,
}

/// The Slurm job (and step) a cgroup path names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlurmJob {
    /// The job id (digits, as in `job_<id>`).
    pub id: String,
    /// The step: a number, `extern`, `batch` or `interactive`; empty when the path stops at
    /// the job's directory.
    pub step: String,
}

/// Who a process is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    /// The command name (`/proc/<pid>/comm`).
    pub comm: String,
    /// The cgroup path (the unified hierarchy's, else the rdma controller's).
    pub cgroup: Option<String>,
    /// Pod and container, where the cgroup path says.
    pub ids: ContainerIds,
    /// The Slurm job, where the cgroup path says.
    pub job: Option<SlurmJob>,
}

/// Why a process could not be described.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OwnerError {
    /// The process has exited (its /proc directory is gone).
    #[error("process {pid} is gone")]
    Gone {
        /// The process id.
        pid: u32,
    },
    /// A file could not be read or understood.
    #[error(transparent)]
    File(#[from] crate::file::FileError),
}

/// `path`, or [`OwnerError::Gone`] when the task exited between the dump and this read
/// (ENOENT opening, ESRCH reading).
fn read_small(path: &Path, pid: u32) -> Result<String, OwnerError> {
    crate::file::read_small(path).map_err(|e| match e {
        FileError::Io { source, .. }
            if source.kind() == std::io::ErrorKind::NotFound
                || source.raw_os_error() == Some(3) =>
        {
            OwnerError::Gone { pid }
        }
        e => OwnerError::File(e),
    })
}

/// Describe process `pid` from `<proc_root>/<pid>/{comm,cgroup}`.
pub fn read_owner(proc_root: &Path, pid: u32) -> Result<Owner, OwnerError> {
    let dir = proc_root.join(pid.to_string());
    let comm_path = dir.join("comm");
    let comm = read_small(&comm_path, pid)?
        .trim_end_matches('\n')
        .to_string();
    if comm.is_empty() {
        return Err(FileError::malformed(&comm_path, "empty command name").into());
    }
    let (cgroup, job) = read_cgroup_and_job(proc_root, pid)?;
    let ids = cgroup.as_deref().map(container_ids).unwrap_or_default();
    Ok(Owner {
        comm,
        cgroup,
        ids,
        job,
    })
}

/// The cgroup path of process `pid` from `<proc_root>/<pid>/cgroup`; `None` when the process
/// is in no mounted hierarchy (an empty file) or the kernel has no cgroups (no file).
pub fn read_cgroup(proc_root: &Path, pid: u32) -> Result<Option<String>, OwnerError> {
    Ok(read_cgroup_and_job(proc_root, pid)?.0)
}

/// The cgroup path of process `pid` (as [`read_cgroup`]) and the Slurm job any of its
/// hierarchies names ([`proc_cgroup_job`]), from one reading of `<proc_root>/<pid>/cgroup`.
pub fn read_cgroup_and_job(
    proc_root: &Path,
    pid: u32,
) -> Result<(Option<String>, Option<SlurmJob>), OwnerError> {
    let dir = proc_root.join(pid.to_string());
    let cgroup_path = dir.join("cgroup");
    match read_small(&cgroup_path, pid) {
        // An empty file: the kernel has cgroups but no hierarchy is mounted (the lab's VM
        // before a test mounts cgroup2): no cgroup, and the process still has a name.
        Ok(text) if text.trim().is_empty() => Ok((None, None)),
        Ok(text) => match parse_proc_cgroup(&text) {
            Ok(path) => Ok((Some(path), proc_cgroup_job(&text))),
            Err(detail) => Err(FileError::malformed(&cgroup_path, detail.to_string()).into()),
        },
        // No cgroup file (a kernel without cgroups): the process still has a name.
        Err(OwnerError::Gone { .. }) if dir.is_dir() => Ok((None, None)),
        Err(e) => Err(e),
    }
}

/// The cgroup of a process and the pod and Slurm job its path names: what the tracer
/// (rdma-trace) labels an event with, without the command name [`Owner`] also reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupOwner {
    /// The cgroup path (as [`read_cgroup`]).
    pub cgroup: String,
    /// The pod UID the cgroup path names ([`container_ids`]).
    pub pod_uid: Option<String>,
    /// The Slurm job any of the process's hierarchies names ([`proc_cgroup_job`]).
    pub job: Option<SlurmJob>,
}

/// The [`CgroupOwner`] of process `pid`, from one reading of `<proc_root>/<pid>/cgroup`
/// ([`read_cgroup_and_job`]). A process that already exited, an empty file (no hierarchy
/// mounted) or a malformed one gives `None`: the caller labels nothing rather than fails.
pub fn cgroup_owner(proc_root: &Path, pid: u32) -> Option<CgroupOwner> {
    match read_cgroup_and_job(proc_root, pid) {
        Ok((Some(cgroup), job)) => Some(CgroupOwner {
            pod_uid: container_ids(&cgroup).pod_uid,
            cgroup,
            job,
        }),
        _ => None,
    }
}

/// The Slurm job of a `/proc/<pid>/cgroup` file: the first hierarchy whose path names one
/// ([`slurm_job`]). Under cgroup v1 Slurm places a task in its freezer, cpuset, memory,
/// devices and cpuacct hierarchies, not in the rdma one (whose path stays `/`), so every
/// line is looked at, not only the one [`parse_proc_cgroup`] picks.
pub fn proc_cgroup_job(text: &str) -> Option<SlurmJob> {
    text.lines()
        .filter_map(|line| line.splitn(3, ':').nth(2))
        .find_map(slurm_job)
}

/// Why a `/proc/<pid>/cgroup` file is not understood ([`parse_proc_cgroup`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CgroupParseError {
    /// A line is not `ID:CONTROLLERS:PATH`.
    #[error("line {line}: expected ID:CONTROLLERS:PATH")]
    Fields {
        /// The 1-based line number.
        line: usize,
    },
    /// A hierarchy id is not a number.
    #[error("line {line}: hierarchy id {id:?} is not a number")]
    HierarchyId {
        /// The 1-based line number.
        line: usize,
        /// The id as written.
        id: String,
    },
    /// A path does not start with `/`.
    #[error("line {line}: path {path:?} is not absolute")]
    RelativePath {
        /// The 1-based line number.
        line: usize,
        /// The path as written.
        path: String,
    },
    /// The file names no hierarchy.
    #[error("no cgroup entry")]
    NoEntry,
}

/// The cgroup path of a `/proc/<pid>/cgroup` file: the unified (v2) hierarchy's entry
/// `0::<path>` if there is one, else the v1 `rdma` controller's, else the first entry's.
pub fn parse_proc_cgroup(text: &str) -> Result<String, CgroupParseError> {
    let mut first = None;
    let mut rdma = None;
    for (n, line) in text.lines().enumerate() {
        if line.is_empty() {
            continue;
        }
        let mut parts = line.splitn(3, ':');
        let (id, controllers, path) = match (parts.next(), parts.next(), parts.next()) {
            (Some(i), Some(c), Some(p)) => (i, c, p),
            _ => return Err(CgroupParseError::Fields { line: n + 1 }),
        };
        if id.parse::<u32>().is_err() {
            return Err(CgroupParseError::HierarchyId {
                line: n + 1,
                id: id.to_string(),
            });
        }
        if !path.starts_with('/') {
            return Err(CgroupParseError::RelativePath {
                line: n + 1,
                path: path.to_string(),
            });
        }
        if id == "0" && controllers.is_empty() {
            return Ok(path.to_string());
        }
        if controllers.split(',').any(|c| c == "rdma") {
            rdma.get_or_insert(path);
        }
        first.get_or_insert(path);
    }
    rdma.or(first)
        .map(str::to_string)
        .ok_or(CgroupParseError::NoEntry)
}

fn is_hex(s: &str, len: usize) -> bool {
    s.len() == len && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// A pod UID in canonical form (8-4-4-4-12 hex digits), from its dashed (cgroupfs) or
/// underscored (systemd) spelling.
fn pod_uid(raw: &str) -> Option<String> {
    let uid = raw.replace('_', "-");
    let groups: Vec<&str> = uid.split('-').collect();
    let ok = groups.len() == 5
        && groups
            .iter()
            .zip([8, 4, 4, 4, 12])
            .all(|(g, len)| is_hex(g, len));
    ok.then(|| uid.to_ascii_lowercase())
}

/// The pod UID of one path segment, if it is a pod's.
fn pod_segment(seg: &str) -> Option<String> {
    if let Some(slice) = seg.strip_suffix(".slice") {
        // systemd: kubepods-burstable-pod<uid>.slice, kubepods-pod<uid>.slice, and
        // prefixed variants (kubelet-kubepods-...).
        if !slice.contains("kubepods") {
            return None;
        }
        let at = slice.rfind("-pod")?;
        return pod_uid(&slice[at + 4..]);
    }
    pod_uid(seg.strip_prefix("pod")?)
}

/// The container id (and runtime) of one path segment, if it is a container's.
fn container_segment(
    seg: &str,
    under_pod: bool,
    parent: Option<&str>,
) -> Option<(String, Option<Runtime>)> {
    let scope = seg.strip_suffix(".scope");
    let named = |s: &str| -> Option<(String, Option<Runtime>)> {
        for (prefix, rt) in [
            ("cri-containerd-", Runtime::Containerd),
            ("crio-", Runtime::CriO),
            ("docker-", Runtime::Docker),
        ] {
            if let Some(id) = s.strip_prefix(prefix) {
                return is_hex(id, 64).then(|| (id.to_ascii_lowercase(), Some(rt)));
            }
        }
        None
    };
    if let Some(s) = scope {
        return named(s);
    }
    if let Some(found) = named(seg) {
        return Some(found);
    }
    if is_hex(seg, 64) {
        if parent == Some("docker") {
            return Some((seg.to_ascii_lowercase(), Some(Runtime::Docker)));
        }
        if under_pod {
            return Some((seg.to_ascii_lowercase(), None));
        }
    }
    None
}

/// The pod and container a cgroup path names, following the kubelet's and the
/// runtimes' conventions (see the module documentation). Unknown layouts give nothing.
pub fn container_ids(path: &str) -> ContainerIds {
    let mut ids = ContainerIds::default();
    let mut parent: Option<&str> = None;
    for seg in path.split('/').filter(|s| !s.is_empty()) {
        if ids.pod_uid.is_none() {
            if let Some(uid) = pod_segment(seg) {
                ids.pod_uid = Some(uid);
                parent = Some(seg);
                continue;
            }
        }
        if ids.container_id.is_none() {
            if let Some((id, rt)) = container_segment(seg, ids.pod_uid.is_some(), parent) {
                ids.container_id = Some(id);
                ids.runtime = rt;
            }
        }
        parent = Some(seg);
    }
    ids
}

/// The id of a `job_<digits>` segment.
fn job_segment(seg: &str) -> Option<&str> {
    let id = seg.strip_prefix("job_")?;
    (!id.is_empty() && id.len() <= 10 && id.bytes().all(|b| b.is_ascii_digit())).then_some(id)
}

/// The step of a `step_<digits|extern|batch|interactive>` segment.
fn step_segment(seg: &str) -> Option<&str> {
    let step = seg.strip_prefix("step_")?;
    let numeric = !step.is_empty() && step.len() <= 10 && step.bytes().all(|b| b.is_ascii_digit());
    (numeric || matches!(step, "extern" | "batch" | "interactive")).then_some(step)
}

/// Whether a segment is slurmstepd's delegated scope (`slurmstepd.scope`, or
/// `<node>_slurmstepd.scope` with multiple slurmd per host).
fn is_stepd_scope(seg: &str) -> bool {
    seg == "slurmstepd.scope"
        || seg
            .strip_suffix("_slurmstepd.scope")
            .is_some_and(|node| !node.is_empty())
}

/// Whether a segment is the cgroup/v1 plugins' root (`slurm`, or `slurm_<node>`).
fn is_v1_root(seg: &str) -> bool {
    seg == "slurm"
        || seg
            .strip_prefix("slurm_")
            .is_some_and(|node| !node.is_empty())
}

/// The Slurm job and step a cgroup path names, following slurmstepd's layouts (see the
/// module documentation): the job segment must sit right under the slurmstepd scope (v2) or
/// under `/slurm/uid_<uid>` at the hierarchy's root (v1). Anything else gives `None`.
pub fn slurm_job(path: &str) -> Option<SlurmJob> {
    let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let job_at = if segs.first().is_some_and(|s| is_v1_root(s)) {
        // v1: /slurm/uid_<uid>/job_<id>/...
        let uid = segs.get(1)?.strip_prefix("uid_")?;
        if uid.is_empty() || !uid.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        2
    } else {
        // v2: .../slurmstepd.scope/job_<id>/... (under system.slice by default; the scope
        // is the anchor, wherever systemd placed it).
        segs.iter().position(|s| is_stepd_scope(s))? + 1
    };
    let id = job_segment(segs.get(job_at)?)?;
    let step = match segs.get(job_at + 1) {
        None => "",
        Some(seg) => step_segment(seg)?,
    };
    Some(SlurmJob {
        id: id.to_string(),
        step: step.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    const UID: &str = "1b2c3d4e-5f60-4718-92a3-b4c5d6e7f809";
    const CID: &str = "3f1c0e9a8b7d6c5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a0b9c8d7e6f5a4b3c2d1e";

    #[test]
    fn v2_entry_wins_then_rdma_then_first() {
        assert_eq!(parse_proc_cgroup("0::/a/b\n").unwrap(), "/a/b");
        let v1 = "12:memory:/m\n5:rdma:/r\n1:name=systemd:/s\n";
        assert_eq!(parse_proc_cgroup(v1).unwrap(), "/r");
        assert_eq!(parse_proc_cgroup("3:cpu,cpuacct:/c\n").unwrap(), "/c");
        let hybrid = "5:rdma:/r\n0::/unified\n";
        assert_eq!(parse_proc_cgroup(hybrid).unwrap(), "/unified");
    }

    #[test]
    fn malformed_cgroup_files_are_errors_not_guesses() {
        assert!(parse_proc_cgroup("").is_err());
        assert!(parse_proc_cgroup("garbage\n")
            .unwrap_err()
            .to_string()
            .contains("line 1"));
        assert!(parse_proc_cgroup("x::/a\n")
            .unwrap_err()
            .to_string()
            .contains("not a number"));
        assert!(parse_proc_cgroup("0::relative\n")
            .unwrap_err()
            .to_string()
            .contains("absolute"));
    }

    #[test]
    fn an_empty_cgroup_file_is_no_cgroup_not_an_unknown_process() {
        let root = std::env::temp_dir().join(format!("rdmakit-owner-{}", std::process::id()));
        let dir = root.join("178");
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join("comm"), "ib_write_bw\n").unwrap();
        // What /proc/<pid>/cgroup holds in the lab VM when no cgroup fs is mounted.
        fs::write(dir.join("cgroup"), "").unwrap();
        let owner = read_owner(&root, 178).unwrap();
        assert_eq!(owner.comm, "ib_write_bw");
        assert_eq!(owner.cgroup, None);
        // A malformed non-empty file is still an error.
        fs::write(dir.join("cgroup"), "garbage\n").unwrap();
        assert!(read_owner(&root, 178).is_err());
        fs::remove_dir_all(&root).unwrap();
    }

    /// rdmakit's captured /proc tree of RDMA owners (containerd, CRI-O, Docker, a session,
    /// Slurm jobs; see its README).
    fn proc_owners() -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../rdmakit/tests/data/proc-owners")
    }

    #[test]
    fn cgroup_owners_name_the_cgroup_and_pod_of_a_process() {
        let root = proc_owners();
        // 101: containerd under the systemd driver.
        let o = cgroup_owner(&root, 101).unwrap();
        assert!(
            o.cgroup
                .starts_with("/kubepods.slice/kubepods-burstable.slice/")
                && o.cgroup.contains("cri-containerd-")
                && o.cgroup.ends_with(".scope"),
            "{o:?}"
        );
        assert_eq!(o.pod_uid.as_deref(), Some(UID));
        assert_eq!(o.job, None);
        // 110: a login session, neither pod nor job.
        assert_eq!(
            cgroup_owner(&root, 110),
            Some(CgroupOwner {
                cgroup: "/user.slice/user-0.slice/session-1.scope".into(),
                pod_uid: None,
                job: None,
            })
        );
        // 4242: exited (no directory); 120: a malformed cgroup file.
        assert_eq!(cgroup_owner(&root, 4242), None);
        assert_eq!(cgroup_owner(&root, 120), None);
    }

    #[test]
    fn cgroup_owners_name_the_slurm_job_and_step_of_a_process() {
        let root = proc_owners();
        let job_of = |pid| cgroup_owner(&root, pid).unwrap().job;
        // 130, 131: Slurm cgroup/v2 job 3385, step 0 and extern; 132: cgroup/v1 job 777,
        // named by the hierarchies other than the rdma one; 134: a look-alike.
        assert_eq!(job_of(130), job("3385", "0"));
        assert_eq!(job_of(131), job("3385", "extern"));
        assert_eq!(job_of(132), job("777", "0"));
        assert_eq!(job_of(134), None);
        assert_eq!(cgroup_owner(&root, 134).unwrap().pod_uid, None);
    }

    #[test]
    fn an_empty_cgroup_file_is_no_cgroup_owner() {
        let root = std::env::temp_dir().join(format!("rdmakit-cgowner-{}", std::process::id()));
        let dir = root.join("179");
        fs::create_dir_all(&dir).unwrap();
        // What /proc/<pid>/cgroup holds in the lab VM when no cgroup fs is mounted.
        fs::write(dir.join("cgroup"), "").unwrap();
        assert_eq!(cgroup_owner(&root, 179), None);
        fs::write(dir.join("cgroup"), "0::/a/b\n").unwrap();
        assert_eq!(cgroup_owner(&root, 179).unwrap().cgroup, "/a/b");
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn pod_uids_take_both_spellings_and_reject_lookalikes() {
        assert_eq!(pod_uid(UID).as_deref(), Some(UID));
        assert_eq!(pod_uid(&UID.replace('-', "_")).as_deref(), Some(UID));
        assert_eq!(pod_uid("1b2c3d4e-5f60-4718-92a3"), None);
        assert_eq!(pod_uid("zb2c3d4e-5f60-4718-92a3-b4c5d6e7f809"), None);
    }

    #[test]
    fn unknown_layouts_give_nothing() {
        assert_eq!(
            container_ids("/user.slice/user-0.slice/session-3.scope"),
            ContainerIds::default()
        );
        assert_eq!(container_ids("/"), ContainerIds::default());
        // A 64-hex segment outside a pod and not under docker/ is not taken for a container.
        assert_eq!(
            container_ids(&format!("/system.slice/{CID}")),
            ContainerIds::default()
        );
        // A pod-like segment without "kubepods" is not a pod.
        let fake = format!("/user.slice/app-pod{}.slice", UID.replace('-', "_"));
        assert_eq!(container_ids(&fake), ContainerIds::default());
    }

    fn job(id: &str, step: &str) -> Option<SlurmJob> {
        Some(SlurmJob {
            id: id.into(),
            step: step.into(),
        })
    }

    #[test]
    fn slurm_v2_steps_and_the_node_prefixed_scope() {
        let scope = "/system.slice/slurmstepd.scope";
        assert_eq!(
            slurm_job(&format!("{scope}/job_3385/step_0/user/task_0")),
            job("3385", "0")
        );
        for step in ["extern", "batch", "interactive"] {
            assert_eq!(
                slurm_job(&format!("{scope}/job_3385/step_{step}/user/task_0")),
                job("3385", step)
            );
        }
        // slurmstepd itself, and a pid a plugin added to the step but to no task.
        assert_eq!(
            slurm_job(&format!("{scope}/job_7/step_12/slurm")),
            job("7", "12")
        );
        assert_eq!(
            slurm_job(&format!("{scope}/job_7/step_12/user/task_special")),
            job("7", "12")
        );
        assert_eq!(
            slurm_job("/system.slice/gamba1_slurmstepd.scope/job_9/step_1/user/task_3"),
            job("9", "1")
        );
        // The waiting area and the infinity process are in the scope but in no job.
        assert_eq!(slurm_job(&format!("{scope}/system")), None);
        assert_eq!(slurm_job(scope), None);
    }

    #[test]
    fn slurm_v1_layout_under_the_slurm_root() {
        assert_eq!(
            slurm_job("/slurm/uid_1000/job_777/step_0/task_1"),
            job("777", "0")
        );
        assert_eq!(
            slurm_job("/slurm/uid_0/job_5/step_batch"),
            job("5", "batch")
        );
        assert_eq!(slurm_job("/slurm/uid_1000/job_777"), job("777", ""));
        assert_eq!(
            slurm_job("/slurm_node3/uid_1000/job_8/step_extern/task_0"),
            job("8", "extern")
        );
    }

    #[test]
    fn slurm_lookalikes_are_not_jobs() {
        for path in [
            "/user.slice/job_1/x",
            "/user.slice/user-1000.slice/job_42.scope",
            "/kubepods/burstable/pod1b2c3d4e-5f60-4718-92a3-b4c5d6e7f809/job_5",
            "/system.slice/job_3385/step_0/user/task_0",
            "/system.slice/slurmd.service/job_3385/step_0",
            "/system.slice/slurmstepd.scope/x/job_3385/step_0",
            "/system.slice/slurmstepd.scope/job_/step_0",
            "/system.slice/slurmstepd.scope/job_12a/step_0",
            "/system.slice/slurmstepd.scope/job_3385/step_x",
            "/system.slice/slurmstepd.scope/job_3385/user/task_0",
            "/system.slice/_slurmstepd.scope/job_3385/step_0",
            "/system.slice/notslurmstepd.scope/job_3385/step_0",
            "/lab/slurm/uid_1000/job_777/step_0",
            "/slurm/job_777/step_0",
            "/slurm/uid_x/job_777/step_0",
            "/slurmd/uid_1000/job_777/step_0",
            "/",
        ] {
            assert_eq!(slurm_job(path), None, "{path}");
        }
    }
}
