//! rdma-lab: the project's Soft-RoCE lab.
//!
//! This host has no RDMA hardware and its kernel has no RDMA modules, so every live test
//! runs in a small VM: a stock Debian kernel with `rdma_rxe` under qemu (TCG, or KVM where
//! it really works), booted from an initramfs built from Debian packages. The image is
//! cached under `target/lab`; each run appends a small payload archive (the project's
//! freshly built binaries and the command) and boots in about five seconds.
//!
//! - [`image`] builds (or reuses) the cached base image,
//! - [`vm`] boots it, runs one command or an interactive shell, and returns the exit code,
//! - [`multi`] boots N of them on one [`fabric`] (a switch on unix sockets) and injects
//!   faults on demand,
//! - [`suite`] decides which live test binaries a lab runs and what their results mean.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod cpio;
pub mod fabric;
pub mod host;
pub mod image;
pub mod kernel;
pub mod kmod;
pub mod multi;
pub mod packages;
pub mod strip;
pub mod suite;
pub mod vm;

use std::path::{Path, PathBuf};

/// A progress sink: one human line per step of long work.
pub type Progress = dyn Fn(&str);

/// Everything that can go wrong building or running the lab.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LabError {
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What the OS said.
        source: std::io::Error,
    },
    /// A host tool is missing and could not be installed here.
    #[error("{tool} is missing. Install it with: {install}")]
    MissingTool {
        /// The command that is missing.
        tool: String,
        /// The exact command that installs it.
        install: String,
    },
    /// A host tool failed.
    #[error("{tool} failed: {detail}")]
    Tool {
        /// The command.
        tool: String,
        /// Its error output or status.
        detail: String,
    },
    /// apt has no package lists, so packages cannot be found.
    #[error("{detail}. Run `sudo apt-get update` (as root, the lab does it by itself)")]
    AptLists {
        /// What failed.
        detail: String,
    },
    /// A package could not be downloaded.
    #[error("downloading {package} failed: {detail}")]
    Download {
        /// The package.
        package: String,
        /// apt's words.
        detail: String,
    },
    /// The image could not be assembled.
    #[error("building the lab image: {0}")]
    Image(String),
    /// The VM did not boot, or stopped without reporting the command's exit code.
    #[error("the lab VM failed: {detail} (console log: {console})")]
    Vm {
        /// What happened.
        detail: String,
        /// The kernel console log of the run, kept for diagnosis.
        console: PathBuf,
    },
}

impl LabError {
    /// An I/O error on `path`.
    pub fn io(path: &Path, source: std::io::Error) -> LabError {
        LabError::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}
