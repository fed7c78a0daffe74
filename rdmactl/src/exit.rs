//! Exit codes and how errors become messages.
use std::process::ExitCode;

/// Success.
pub const OK: u8 = 0;
/// Something failed (the message says what).
pub const FAILURE: u8 = 1;
/// No RDMA stack (libibverbs missing) or no RDMA device to talk to.
pub const NO_RDMA: u8 = 3;

/// An error that carries its own exit code (e.g. "no RDMA device": 3).
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct CodedError {
    /// What the user reads.
    pub message: String,
    /// The process exit code.
    pub code: u8,
}

impl CodedError {
    /// "Nothing to talk to": no RDMA stack or no device.
    pub fn no_rdma(message: impl Into<String>) -> anyhow::Error {
        anyhow::Error::new(CodedError {
            message: message.into(),
            code: NO_RDMA,
        })
    }
}

/// Print an error chain to stderr and pick the exit code. A closed pipe is not an error.
pub fn report(err: &anyhow::Error) -> ExitCode {
    if let Some(io) = err.downcast_ref::<std::io::Error>() {
        if io.kind() == std::io::ErrorKind::BrokenPipe {
            return ExitCode::from(OK);
        }
    }
    let code = err
        .downcast_ref::<CodedError>()
        .map(|c| c.code)
        .unwrap_or(FAILURE);
    eprintln!("rdmactl: {err}");
    for cause in err.chain().skip(1) {
        eprintln!("  caused by: {cause}");
    }
    ExitCode::from(code)
}
