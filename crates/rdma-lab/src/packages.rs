//! The Debian packages the lab image is made of, and fetching them with `apt-get download`.
//!
//! Packages are never installed on the host: they are downloaded into the lab cache and
//! unpacked with `dpkg-deb -x`. The host must be Debian/Ubuntu-like with apt lists present.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::{host, LabError, Progress};

/// The meta-package whose dependency names the kernel image to boot.
pub const KERNEL_META: &str = "linux-image-amd64";

/// User space of the image: busybox for the shell and tools, rdma-core, perftest, iproute2
/// (`rdma`, `ip`), ethtool, tmux, and the shared libraries they need (checked with readelf at build time).
pub const USERSPACE: &[&str] = &[
    "busybox",
    "libc6",
    "libgcc-s1",
    "libibverbs1",
    "ibverbs-providers",
    "librdmacm1",
    "libibumad3",
    "ibverbs-utils",
    "rdmacm-utils",
    "perftest",
    "iproute2",
    "libnl-3-200",
    "libnl-route-3-200",
    "libmnl0",
    "libbsd0",
    "libmd0",
    "libcap2",
    "libelf1",
    "libbpf1",
    "libpci3",
    "libudev1",
    "zlib1g",
    // tmux drives `rdmactl top` in the live suite (tests/live/tests/top.rs); ncurses-base
    // gives it (and the lab shell) the basic terminfo entries, libc-bin the C.UTF-8 locale
    // without which tmux 3.3 refuses to start.
    "tmux",
    "libc-bin",
    "libevent-core-2.1-7",
    "libtinfo6",
    "libutempter0",
    "ncurses-base",
    // ethtool: the live suite compares rdmad's netdev collector with `ethtool -S`
    // (tests/live/tests/netdev.rs); it needs only libc6 and libmnl0.
    "ethtool",
    // tc (iproute2) for the multi-host lab's netem faults needs libxtables.
    "libxtables12",
    // dnsmasq answers the multi-host lab's names, group name and SRV records on the fabric.
    "dnsmasq-base",
    "libdbus-1-3",
    "libsystemd0",
    "libgcrypt20",
    "libgpg-error0",
    "liblzma5",
    "libzstd1",
    "liblz4-1",
    "libidn2-0",
    "libunistring2",
    "libnetfilter-conntrack3",
    "libnfnetlink0",
    "libnettle8",
    "libhogweed6",
    "libgmp10",
    "libnftables1",
    "libnftnl11",
    "libjansson4",
];

/// Files of those packages left out of the image: their libraries (SELinux, Kerberos via
/// libtirpc, Berkeley DB, libatm) would double its size and no lab task needs them.
pub const LEFT_OUT: &[&str] = &[
    "bin/ss",
    "usr/sbin/arpd",
    "usr/lib/x86_64-linux-gnu/tc/q_atm.so",
];

/// The kernel image package `linux-image-amd64` depends on (override: RDMA_LAB_KERNEL_PKG).
pub fn kernel_package() -> Result<String, LabError> {
    if let Ok(name) = std::env::var("RDMA_LAB_KERNEL_PKG") {
        if !name.is_empty() {
            return Ok(name);
        }
    }
    let out = Command::new("apt-cache")
        .args(["depends", "--important", KERNEL_META])
        .output()
        .map_err(|e| LabError::Tool {
            tool: "apt-cache".into(),
            detail: e.to_string(),
        })?;
    let text = String::from_utf8_lossy(&out.stdout);
    parse_kernel_dep(&text).ok_or_else(|| LabError::AptLists {
        detail: format!(
            "`apt-cache depends {KERNEL_META}` named no kernel package (apt lists missing?)"
        ),
    })
}

/// Pick `linux-image-<version>-amd64` out of `apt-cache depends` output.
pub fn parse_kernel_dep(text: &str) -> Option<String> {
    text.lines()
        .filter_map(|l| l.trim().strip_prefix("Depends:"))
        .map(|s| s.trim().trim_start_matches('<').trim_end_matches('>'))
        .find(|s| s.starts_with("linux-image-") && !s.contains("unsigned"))
        .map(|s| s.to_string())
}

/// The downloaded `.deb` for `pkg` in `dir`, if there is one (`pkg_<version>_<arch>.deb`).
pub fn find_deb(dir: &Path, pkg: &str) -> Option<PathBuf> {
    let prefix = format!("{pkg}_");
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .map(|n| n.starts_with(&prefix) && n.ends_with(".deb"))
                .unwrap_or(false)
        })
        .collect();
    found.sort();
    found.pop()
}

/// Download whatever of `pkgs` is not in `dir` yet; returns each package's `.deb`.
pub fn download(
    dir: &Path,
    pkgs: &[String],
    progress: &Progress,
) -> Result<Vec<PathBuf>, LabError> {
    std::fs::create_dir_all(dir).map_err(|e| LabError::io(dir, e))?;
    let missing: Vec<&String> = pkgs.iter().filter(|p| find_deb(dir, p).is_none()).collect();
    if !missing.is_empty() {
        progress(&format!(
            "downloading {} Debian packages into {} (the kernel is ~70 MB)",
            missing.len(),
            dir.display()
        ));
        host::apt_download(dir, &missing)?;
    }
    pkgs.iter()
        .map(|p| {
            find_deb(dir, p).ok_or_else(|| LabError::Download {
                package: p.clone(),
                detail: "apt-get download reported success but no .deb is there".into(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_dependency_is_found() {
        let text = "linux-image-amd64\n  Depends: linux-image-6.1.0-57-amd64\n";
        assert_eq!(
            parse_kernel_dep(text).as_deref(),
            Some("linux-image-6.1.0-57-amd64")
        );
        assert_eq!(parse_kernel_dep("linux-image-amd64\n"), None);
    }

    #[test]
    fn deb_lookup_does_not_confuse_prefixes() {
        let dir = std::env::temp_dir().join(format!("rdma-lab-debs-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("libnl-route-3-200_3.7.0_amd64.deb"), b"x").unwrap();
        assert!(find_deb(&dir, "libnl-3-200").is_none());
        std::fs::write(dir.join("libnl-3-200_3.7.0_amd64.deb"), b"x").unwrap();
        assert!(find_deb(&dir, "libnl-3-200").is_some());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
