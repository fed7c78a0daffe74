//! Why a request to the lab's controller (`wait-ready`, `exec`, `fault ...`) failed: the
//! text after `error ` in the controller's answer is each variant's message.

use std::path::PathBuf;

/// A host name that names no host of the lab ([`super::parse_host`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HostNameError {
    /// Not of the form `hK`.
    #[error("{name:?} is not a host name (h1..h{hosts})")]
    NotAHostName {
        /// The name as given.
        name: String,
        /// The lab's number of hosts.
        hosts: usize,
    },
    /// `hK` with K out of range.
    #[error("no host {name} (this lab has h1..h{hosts})")]
    NoSuchHost {
        /// The name as given.
        name: String,
        /// The lab's number of hosts.
        hosts: usize,
    },
}

/// A percentage argument that is not one (`ingress hK loss P%`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PercentError {
    /// Not a number.
    #[error("{text:?} is not a percentage (e.g. 20%)")]
    NotANumber {
        /// The argument as given.
        text: String,
    },
    /// Below 0 or above 100.
    #[error("{text:?}: a percentage is 0..100")]
    OutOfRange {
        /// The argument as given.
        text: String,
    },
}

/// Why a command on a host's QMP monitor failed.
#[derive(Debug, thiserror::Error)]
pub enum QmpError {
    /// The monitor socket could not be connected.
    #[error("{}: {source}", path.display())]
    Connect {
        /// The socket.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Setting up or writing to the connection failed.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// Reading an answer failed.
    #[error("QMP: {0}")]
    Read(#[source] std::io::Error),
    /// The monitor closed the connection.
    #[error("QMP closed")]
    Closed,
    /// The first line was not the monitor's greeting.
    #[error("not a QMP greeting: {0}")]
    Greeting(String),
    /// The monitor answered with an error (its answer line, as qemu wrote it).
    #[error("{0}")]
    Refused(String),
}

/// Why a controller request (or one of its faults) failed.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// An empty request line.
    #[error("empty request")]
    EmptyRequest,
    /// A request the controller does not know.
    #[error("unknown request {0:?} (wait-ready, status, exec, fault)")]
    UnknownRequest(String),
    /// The lab stops (while waiting for its hosts).
    #[error("the lab is stopping")]
    Stopping,
    /// A host name names no host.
    #[error(transparent)]
    Host(#[from] HostNameError),
    /// A host's command agent did not answer.
    #[error("{host}: the agent did not answer: {source}")]
    Agent {
        /// The host (`hK`).
        host: String,
        /// Why.
        source: std::io::Error,
    },
    /// A script run through a host's agent exited non-zero.
    #[error("{what} on {host} failed: {output}")]
    HostCommand {
        /// What ran (`tc`, `kill-rdmad`, ...).
        what: String,
        /// The host (`hK`).
        host: String,
        /// The script's output.
        output: String,
    },
    /// A QMP command on a host's monitor failed.
    #[error("qemu monitor of {host}: {source}")]
    Monitor {
        /// The host (`hK`).
        host: String,
        /// Why.
        source: QmpError,
    },
    /// `fault` without a fault.
    #[error("which fault? {}", super::faults::usage())]
    NoFault,
    /// A fault the controller does not know.
    #[error("unknown fault {words:?}: {}", super::faults::usage())]
    UnknownFault {
        /// The request's words after `fault`.
        words: String,
    },
    /// A fault's arguments do not fit its form.
    #[error("{name} {args}: expected `{name} {expected}`")]
    Usage {
        /// The fault.
        name: String,
        /// The arguments as given.
        args: String,
        /// The fault's form.
        expected: &'static str,
    },
    /// `netem hK` without netem arguments.
    #[error(
        "netem needs arguments, e.g. `loss 5%`, `delay 2ms`, `delay 10ms 2ms`, `reorder 25% gap 5`, `corrupt 1%`"
    )]
    NetemNeedsArguments,
    /// A netem argument with characters other than plain words have.
    #[error("netem argument {0:?}: only letters, digits and . _ % -")]
    NetemArgument(String),
    /// A percentage that is not one.
    #[error(transparent)]
    Percent(#[from] PercentError),
    /// `partition hA hA`.
    #[error("a partition needs two different hosts")]
    SameHost,
    /// `heal hA hB` of hosts that were not partitioned.
    #[error("{0} and {1} were not partitioned")]
    NotPartitioned(String, String),
    /// `kill hK` of a host that is not running.
    #[error("{0} is not running")]
    NotRunning(String),
    /// `restart hK` of a host that still runs.
    #[error("{0} is running; kill it first")]
    StillRunning(String),
    /// Starting a host's qemu again failed.
    #[error(transparent)]
    Spawn(#[from] crate::LabError),
    /// A restarted host did not reach ACTIVE in time (or the lab stopped).
    #[error("{0} did not come back ACTIVE")]
    NotBack(String),
}
