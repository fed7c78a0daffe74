//! The ethtool source: the driver statistics of a network device (what `ethtool -S` prints)
//! and the RoCE-relevant ones among them under driver-independent names ([`curated`]).
//!
//! Two sources answer the same questions: [`KernelEthtool`] asks the kernel (the
//! `SIOCETHTOOL` ioctl, in [`ioctl`], the one module of rdmakit with `unsafe`), and
//! [`CapturedEthtool`] reads answers captured earlier: per netdev a directory with the three
//! raw buffers exactly as the kernel filled them (`drvinfo.bin`, `strings.bin`,
//! `stats.bin`), or a file `errno` with the number the call failed with. Both go through the
//! same parser ([`parse`]); [`KernelEthtool::capture`] writes such a directory.
//!
//! The kernel's standard statistics (pause, eth-phy, eth-mac, eth-ctrl, rmon) and the FEC
//! state come over ethtool netlink instead ([`genl`], parsed by [`standard`]); a capture
//! holds each reply datagram as the kernel sent it (`nl-pause.bin`, `nl-stats.bin`,
//! `nl-fec.bin`: the reply, or the kernel's `NLMSG_ERROR`). A netdev directory without
//! them was captured without netlink: those requests are then not made at all.

pub mod curated;
pub mod genl;
#[allow(unsafe_code)]
mod ioctl;
pub mod parse;
pub mod standard;

use std::path::{Path, PathBuf};

pub use parse::DriverInfo;

/// `ETHTOOL_GDRVINFO`.
const GDRVINFO: u32 = 0x03;
/// `ETHTOOL_GSTRINGS`.
const GSTRINGS: u32 = 0x1b;
/// `ETHTOOL_GSTATS`.
const GSTATS: u32 = 0x1d;
/// `ETH_SS_STATS`.
const SS_STATS: u32 = 1;

/// Why the statistics of one netdev could not be read.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum EthtoolError {
    /// The kernel refused a call (`ENODEV`: the netdev is gone; `EOPNOTSUPP`: the driver
    /// has no such operation; `EPERM`, ...).
    #[error("ethtool {call}: {}", errno_text(*.errno))]
    Os {
        /// `GDRVINFO`, `GSTRINGS` or `GSTATS`.
        call: &'static str,
        /// The errno.
        errno: i32,
    },
    /// An answer too short for what it claims.
    #[error("ethtool {call}: malformed answer: {what}")]
    Malformed {
        /// The call.
        call: &'static str,
        /// What is wrong.
        what: String,
    },
    /// The driver's count changed between the names and the values (twice in a row).
    #[error("ethtool: the driver reported {names} names but {values} values")]
    CountChanged {
        /// Names.
        names: usize,
        /// Values.
        values: usize,
    },
    /// A captured answer could not be read.
    #[error("reading the captured answer {path}: {message}")]
    Capture {
        /// The file.
        path: String,
        /// The I/O error.
        message: String,
    },
}

impl EthtoolError {
    /// Whether the driver simply has no statistics (not a failure of the netdev).
    pub fn is_unsupported(&self) -> bool {
        matches!(self, EthtoolError::Os { errno, .. } if *errno == nix::errno::Errno::EOPNOTSUPP as i32)
    }
}

fn errno_text(errno: i32) -> String {
    match crate::uapi::errno_name(errno) {
        Some(name) => format!("{name} ({})", std::io::Error::from_raw_os_error(errno)),
        None => std::io::Error::from_raw_os_error(errno).to_string(),
    }
}

/// The three answers of one `ethtool -S`, raw.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RawDriverStats {
    /// `struct ethtool_drvinfo`.
    pub drvinfo: Vec<u8>,
    /// `struct ethtool_gstrings` (empty when the driver has no statistics).
    pub strings: Vec<u8>,
    /// `struct ethtool_stats` (empty when the driver has no statistics).
    pub stats: Vec<u8>,
}

/// The driver statistics of one netdev.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DriverStats {
    /// The driver's identity.
    pub info: DriverInfo,
    /// Name and value of every statistic, in the driver's order.
    pub stats: Vec<(String, u64)>,
}

impl RawDriverStats {
    /// Parse the three answers.
    pub fn parse(&self) -> Result<DriverStats, EthtoolError> {
        let info = parse::drvinfo(&self.drvinfo)?;
        if info.n_stats == 0 && self.strings.is_empty() && self.stats.is_empty() {
            return Ok(DriverStats {
                info,
                stats: Vec::new(),
            });
        }
        let names = parse::gstrings(&self.strings)?;
        let values = parse::gstats(&self.stats)?;
        Ok(DriverStats {
            info,
            stats: parse::pair(names, values)?,
        })
    }
}

/// The answer to one ethtool netlink request: the raw reply datagram, `Ok(None)` when the
/// source has no such answer (a capture made without netlink), or why it failed before
/// the kernel answered.
pub type StandardAnswer = Result<Option<Vec<u8>>, EthtoolError>;

/// Where driver statistics come from.
pub trait EthtoolSource: Send + Sync {
    /// The driver statistics of `netdev`.
    fn driver_stats(&self, netdev: &str) -> Result<DriverStats, EthtoolError>;

    /// The raw replies to the ethtool netlink requests about `netdev`, in
    /// [`standard::Request::ALL`] order.
    fn standard_raw(&self, netdev: &str) -> Vec<(standard::Request, StandardAnswer)>;
}

/// The running kernel.
#[derive(Debug, Default, Clone, Copy)]
pub struct KernelEthtool;

impl KernelEthtool {
    /// The raw answers of `netdev`'s driver. Retries once when the count changed between
    /// the calls (channels reconfigured meanwhile).
    pub fn raw(&self, netdev: &str) -> Result<RawDriverStats, EthtoolError> {
        let socket = ioctl::control_socket().map_err(|e| EthtoolError::Os {
            call: "socket",
            errno: e as i32,
        })?;
        let mut last = None;
        for _ in 0..2 {
            match raw_once(&socket, netdev) {
                // The answer outgrew the buffer (it hit the guard page): the count grew.
                Err(e @ EthtoolError::Os { errno, .. })
                    if errno == nix::errno::Errno::EFAULT as i32 =>
                {
                    last = Some(e)
                }
                Err(e) => return Err(e),
                Ok(raw) => match raw.parse() {
                    Err(e @ EthtoolError::CountChanged { .. }) => last = Some(e),
                    _ => return Ok(raw),
                },
            }
        }
        Err(last.expect("the loop ran"))
    }

    /// Write the raw answers of `netdev` into `dir/<netdev>/` (the [`CapturedEthtool`]
    /// layout), or its errno when a call fails.
    pub fn capture(&self, netdev: &str, dir: &Path) -> std::io::Result<()> {
        let out = dir.join(netdev);
        std::fs::create_dir_all(&out)?;
        match self.raw(netdev) {
            Ok(raw) => {
                std::fs::write(out.join("drvinfo.bin"), &raw.drvinfo)?;
                std::fs::write(out.join("strings.bin"), &raw.strings)?;
                std::fs::write(out.join("stats.bin"), &raw.stats)?;
            }
            Err(EthtoolError::Os { errno, .. }) => {
                std::fs::write(out.join("errno"), format!("{errno}\n"))?;
            }
            Err(e) => return Err(std::io::Error::other(e.to_string())),
        }
        for (request, answer) in self.standard_raw(netdev) {
            if let Ok(Some(bytes)) = answer {
                std::fs::write(out.join(request.capture_file()), bytes)?;
            }
        }
        Ok(())
    }
}

fn os(call: &'static str) -> impl Fn(nix::errno::Errno) -> EthtoolError {
    move |e| EthtoolError::Os {
        call,
        errno: e as i32,
    }
}

fn buffer(call: &'static str, len: usize) -> Result<ioctl::GuardedBuffer, EthtoolError> {
    ioctl::GuardedBuffer::new(len).map_err(|e| EthtoolError::Os {
        call,
        errno: e.raw_os_error().unwrap_or(nix::errno::Errno::ENOMEM as i32),
    })
}

fn raw_once(socket: &std::os::fd::OwnedFd, netdev: &str) -> Result<RawDriverStats, EthtoolError> {
    let mut info = buffer("GDRVINFO", parse::DRVINFO_LEN)?;
    info.bytes_mut()[..4].copy_from_slice(&GDRVINFO.to_ne_bytes());
    ioctl::call(socket, netdev, &mut info).map_err(os("GDRVINFO"))?;
    let drvinfo = info.bytes()[..parse::DRVINFO_LEN].to_vec();
    let n = parse::drvinfo(&drvinfo)?.n_stats as usize;
    if n == 0 {
        return Ok(RawDriverStats {
            drvinfo,
            ..RawDriverStats::default()
        });
    }
    let strings_len = parse::GSTRINGS_HEADER + n * parse::GSTRING_LEN;
    let mut strings = buffer("GSTRINGS", strings_len)?;
    let header = strings.bytes_mut();
    header[..4].copy_from_slice(&GSTRINGS.to_ne_bytes());
    header[4..8].copy_from_slice(&SS_STATS.to_ne_bytes());
    header[8..12].copy_from_slice(&(n as u32).to_ne_bytes());
    ioctl::call(socket, netdev, &mut strings).map_err(os("GSTRINGS"))?;
    // The kernel wrote its own count into the header: keep what it wrote (up to the buffer).
    let written = parse::gstrings_len(strings.bytes()).min(strings.bytes().len());
    let strings = strings.bytes()[..written].to_vec();
    let stats_len = parse::STATS_HEADER + n * 8;
    let mut stats = buffer("GSTATS", stats_len)?;
    let header = stats.bytes_mut();
    header[..4].copy_from_slice(&GSTATS.to_ne_bytes());
    header[4..8].copy_from_slice(&(n as u32).to_ne_bytes());
    ioctl::call(socket, netdev, &mut stats).map_err(os("GSTATS"))?;
    let written = parse::gstats_len(stats.bytes()).min(stats.bytes().len());
    let stats = stats.bytes()[..written].to_vec();
    Ok(RawDriverStats {
        drvinfo,
        strings,
        stats,
    })
}

impl EthtoolSource for KernelEthtool {
    fn driver_stats(&self, netdev: &str) -> Result<DriverStats, EthtoolError> {
        self.raw(netdev)?.parse()
    }

    fn standard_raw(&self, netdev: &str) -> Vec<(standard::Request, StandardAnswer)> {
        // One socket per netdev and scrape: the family lookup is one more round trip.
        let mut socket = genl::EthtoolNetlink::open();
        standard::Request::ALL
            .iter()
            .map(|&r| {
                let answer = match &mut socket {
                    Ok(s) => s.raw(r, netdev).map(Some),
                    Err(e) => Err(e.clone()),
                };
                (r, answer)
            })
            .collect()
    }
}

/// Answers captured earlier (see the module documentation for the layout).
#[derive(Debug, Clone)]
pub struct CapturedEthtool {
    dir: PathBuf,
}

impl CapturedEthtool {
    /// Answers under `dir/<netdev>/`.
    pub fn new(dir: impl Into<PathBuf>) -> CapturedEthtool {
        CapturedEthtool { dir: dir.into() }
    }

    /// The raw answers of `netdev`, or the errno it failed with. A netdev without a
    /// directory is `ENODEV`, as the kernel says for a netdev that does not exist.
    pub fn raw(&self, netdev: &str) -> Result<RawDriverStats, EthtoolError> {
        let dir = self.dir.join(netdev);
        if netdev.is_empty() || netdev.contains('/') || !dir.is_dir() {
            return Err(EthtoolError::Os {
                call: "GDRVINFO",
                errno: nix::errno::Errno::ENODEV as i32,
            });
        }
        let read = |name: &str, required: bool| -> Result<Vec<u8>, EthtoolError> {
            let path = dir.join(name);
            match std::fs::read(&path) {
                Ok(bytes) => Ok(bytes),
                Err(e) if !required && e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
                Err(e) => Err(EthtoolError::Capture {
                    path: path.display().to_string(),
                    message: e.to_string(),
                }),
            }
        };
        let errno = read("errno", false)?;
        if !errno.is_empty() {
            let text = String::from_utf8_lossy(&errno);
            let errno = text
                .trim()
                .parse::<i32>()
                .map_err(|_| EthtoolError::Capture {
                    path: dir.join("errno").display().to_string(),
                    message: format!("not an errno number: {:?}", text.trim()),
                })?;
            return Err(EthtoolError::Os {
                call: "GSTATS",
                errno,
            });
        }
        Ok(RawDriverStats {
            drvinfo: read("drvinfo.bin", true)?,
            strings: read("strings.bin", false)?,
            stats: read("stats.bin", false)?,
        })
    }
}

impl EthtoolSource for CapturedEthtool {
    fn driver_stats(&self, netdev: &str) -> Result<DriverStats, EthtoolError> {
        self.raw(netdev)?.parse()
    }

    fn standard_raw(&self, netdev: &str) -> Vec<(standard::Request, StandardAnswer)> {
        let dir = self.dir.join(netdev);
        standard::Request::ALL
            .iter()
            .map(|&r| {
                let answer = if netdev.is_empty() || netdev.contains('/') || !dir.is_dir() {
                    Err(EthtoolError::Os {
                        call: r.name(),
                        errno: nix::errno::Errno::ENODEV as i32,
                    })
                } else {
                    let path = dir.join(r.capture_file());
                    match std::fs::read(&path) {
                        Ok(bytes) => Ok(Some(bytes)),
                        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                        Err(e) => Err(EthtoolError::Capture {
                            path: path.display().to_string(),
                            message: e.to_string(),
                        }),
                    }
                };
                (r, answer)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_answers_enodev_for_a_missing_netdev() {
        assert_eq!(
            KernelEthtool.driver_stats("rdmad-nonexist"),
            Err(EthtoolError::Os {
                call: "GDRVINFO",
                errno: nix::errno::Errno::ENODEV as i32
            })
        );
    }

    #[test]
    fn kernel_netlink_answers_enodev_for_a_missing_netdev() {
        // A real request to this machine's kernel about a netdev that does not exist: every
        // request fails with ENODEV on its own (or the kernel has no ethtool family).
        for (request, answer) in KernelEthtool.standard_raw("rdmad-nonexist") {
            let err = match answer {
                Ok(Some(bytes)) => match request {
                    standard::Request::Pause => standard::parse_pause(&bytes).unwrap_err(),
                    standard::Request::Stats => standard::parse_stats(&bytes).unwrap_err(),
                    standard::Request::Fec => standard::parse_fec(&bytes).unwrap_err(),
                },
                Ok(None) => panic!("the kernel source always answers"),
                Err(e) => e,
            };
            assert!(
                matches!(err, EthtoolError::Os { errno, .. }
                    if errno == nix::errno::Errno::ENODEV as i32
                        || errno == nix::errno::Errno::ENOENT as i32),
                "{request:?}: {err}"
            );
        }
    }

    #[test]
    fn loopback_has_a_driver_and_no_statistics() {
        // lo exists in every network namespace; its driver has no ETH_SS_STATS.
        match KernelEthtool.driver_stats("lo") {
            Ok(stats) => assert!(stats.stats.is_empty(), "{stats:?}"),
            Err(e) => assert!(e.is_unsupported(), "{e}"),
        }
    }

    #[test]
    fn captured_errno_and_missing_netdev() {
        let dir = std::env::temp_dir().join(format!("rdmakit-ethtool-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("gone")).unwrap();
        std::fs::write(dir.join("gone/errno"), "95\n").unwrap();
        let source = CapturedEthtool::new(&dir);
        let e = source.driver_stats("gone").unwrap_err();
        assert!(e.is_unsupported(), "{e}");
        assert_eq!(
            source.driver_stats("nothere"),
            Err(EthtoolError::Os {
                call: "GDRVINFO",
                errno: nix::errno::Errno::ENODEV as i32
            })
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
