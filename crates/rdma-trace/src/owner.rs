//! Who the process behind an event is (its cgroup, pod, Slurm job), as the caller finds it.
//!
//! This crate does not read `/proc` for it: the program that runs the tracer (rdmad,
//! rdmactl) knows where the proc tree is and how to read it, and hands an
//! [`OwnerResolver`] to the [`TraceCollector`](crate::TraceCollector) or calls
//! [`TraceEvent::resolve_owner`] itself.
use crate::event::TraceEvent;

/// The owner of a process, as an [`OwnerResolver`] found it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Owner {
    /// The process's cgroup path.
    pub cgroup: String,
    /// The Kubernetes pod UID the cgroup path names.
    pub pod_uid: Option<String>,
    /// The Slurm job id and step (`0`, `extern`, `batch`) the process's cgroups name.
    pub job: Option<(String, String)>,
}

/// Looks up the owner of a process id when its event is received; `None`: not known (the
/// process exited, it is in no cgroup, the cgroup file was not understood).
pub type OwnerResolver = Box<dyn Fn(u32) -> Option<Owner> + Send + Sync>;

/// The resolver that looks nothing up: events carry no owner.
pub fn no_owners() -> OwnerResolver {
    Box::new(|_| None)
}

impl TraceEvent {
    /// Fill [`cgroup`](TraceEvent::cgroup), [`pod_uid`](TraceEvent::pod_uid) and the Slurm
    /// [`job_id`](TraceEvent::job_id) and [`job_step`](TraceEvent::job_step) from `owner`.
    pub fn set_owner(&mut self, owner: Owner) {
        self.cgroup = Some(owner.cgroup);
        self.pod_uid = owner.pod_uid;
        if let Some((id, step)) = owner.job {
            self.job_id = Some(id);
            self.job_step = Some(step);
        }
    }

    /// [`set_owner`](TraceEvent::set_owner) with what `resolver` says of the event's pid;
    /// pid 0 (no process) is not looked up, and an owner not found leaves the fields `None`.
    /// For async events the pid is whatever ran the handler.
    pub fn resolve_owner(&mut self, resolver: impl Fn(u32) -> Option<Owner>) {
        if self.pid == 0 {
            return;
        }
        if let Some(owner) = resolver(self.pid) {
            self.set_owner(owner);
        }
    }
}

#[cfg(test)]
mod tests;
