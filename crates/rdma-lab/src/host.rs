//! What the lab needs from the host (qemu, apt, dpkg-deb, xz, readelf, objcopy) and how to get it:
//! on a Debian/Ubuntu host running as root the lab installs what is missing; elsewhere it
//! says exactly what to install.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::{LabError, Progress};

/// A host command the lab runs, and the Debian package that provides it.
pub const TOOLS: &[(&str, &str)] = &[
    ("qemu-system-x86_64", "qemu-system-x86"),
    ("apt-get", "apt"),
    ("apt-cache", "apt"),
    ("dpkg-deb", "dpkg"),
    ("xz", "xz-utils"),
    ("readelf", "binutils"),
    ("objcopy", "binutils"),
];

/// The first `name` on PATH.
pub fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

/// True when running as uid 0 (read from /proc, no libc call needed).
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(1).map(|u| u == "0"))
        })
        .unwrap_or(false)
}

/// True on Debian and its derivatives.
pub fn is_debian_like() -> bool {
    Path::new("/etc/debian_version").exists()
}

/// Make sure every tool in [`TOOLS`] is present, installing the missing ones when we can.
pub fn ensure_tools(progress: &Progress) -> Result<(), LabError> {
    let missing: Vec<(&str, &str)> = TOOLS
        .iter()
        .copied()
        .filter(|(tool, _)| which(tool).is_none())
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    let mut pkgs: Vec<&str> = missing.iter().map(|(_, p)| *p).collect();
    pkgs.dedup();
    let install = format!(
        "sudo apt-get install --no-install-recommends {}",
        pkgs.join(" ")
    );
    if !(is_root() && is_debian_like() && which("apt-get").is_some()) {
        return Err(LabError::MissingTool {
            tool: missing
                .iter()
                .map(|(t, _)| *t)
                .collect::<Vec<_>>()
                .join(", "),
            install,
        });
    }
    progress(&format!("installing {} (running as root)", pkgs.join(" ")));
    run_quiet("apt-get", &["update"], None)?;
    let mut args = vec!["install", "-y", "--no-install-recommends"];
    args.extend(pkgs.iter().copied());
    run_quiet("apt-get", &args, None)?;
    for (tool, _) in &missing {
        if which(tool).is_none() {
            return Err(LabError::MissingTool {
                tool: tool.to_string(),
                install,
            });
        }
    }
    Ok(())
}

/// True when libclang (for bindgen) is installed where clang-sys looks for it.
fn has_libclang() -> bool {
    let dirs = [
        "/usr/lib/x86_64-linux-gnu",
        "/usr/lib64",
        "/usr/lib",
        "/usr/local/lib",
    ];
    let llvm = std::fs::read_dir("/usr/lib")
        .map(|rd| {
            rd.flatten()
                .map(|e| e.path())
                .filter(|p| {
                    p.file_name()
                        .and_then(|n| n.to_str())
                        .map(|n| n.starts_with("llvm-"))
                        .unwrap_or(false)
                })
                .map(|p| p.join("lib"))
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    dirs.iter()
        .map(PathBuf::from)
        .chain(llvm)
        .filter_map(|d| std::fs::read_dir(d).ok())
        .flat_map(|rd| rd.flatten())
        .any(|e| e.file_name().to_string_lossy().starts_with("libclang"))
}

/// What building the verbs-enabled binaries for the VM needs: cmake and libclang
/// (rdma-mummy-sys builds its libibverbs loader with them) and a C compiler. Installed when
/// running as root on Debian/Ubuntu, else named exactly.
pub fn ensure_build_tools(progress: &Progress) -> Result<(), LabError> {
    let mut pkgs = Vec::new();
    if which("cmake").is_none() {
        pkgs.push("cmake");
    }
    if !has_libclang() {
        pkgs.extend(["clang", "libclang-dev"]);
    }
    if which("cc").is_none() {
        pkgs.push("gcc");
    }
    // rdmactl trace: clang compiles the BPF programs; libbpf-sys builds against libelf/zlib.
    if which("clang").is_none() && !pkgs.contains(&"clang") {
        pkgs.push("clang");
    }
    for (tool, pkg) in [("pkg-config", "pkg-config"), ("make", "make")] {
        if which(tool).is_none() {
            pkgs.push(pkg);
        }
    }
    for (header, pkg) in [
        ("/usr/include/libelf.h", "libelf-dev"),
        ("/usr/include/zlib.h", "zlib1g-dev"),
    ] {
        if !Path::new(header).exists() {
            pkgs.push(pkg);
        }
    }
    install_or_explain(
        progress,
        &pkgs,
        "the lab's binaries (cmake and libclang for rdma-mummy-sys; clang, libelf and zlib for the BPF tracer)",
    )
}

/// What compiling the course's C examples needs. Returns false (after saying why) when it
/// is missing and cannot be installed here; the lab then boots without the examples.
pub fn ensure_c_example_tools(progress: &Progress) -> bool {
    let mut pkgs = Vec::new();
    if which("make").is_none() {
        pkgs.push("make");
    }
    if !Path::new("/usr/include/infiniband/verbs.h").exists() {
        pkgs.push("libibverbs-dev");
    }
    if !Path::new("/usr/include/rdma/rdma_cma.h").exists() {
        pkgs.push("librdmacm-dev");
    }
    match install_or_explain(progress, &pkgs, "the course's C examples") {
        Ok(()) => true,
        Err(e) => {
            progress(&format!("{e}; booting without the C examples"));
            false
        }
    }
}

fn install_or_explain(progress: &Progress, pkgs: &[&str], what: &str) -> Result<(), LabError> {
    if pkgs.is_empty() {
        return Ok(());
    }
    let install = format!(
        "sudo apt-get install --no-install-recommends {}",
        pkgs.join(" ")
    );
    if !(is_root() && is_debian_like() && which("apt-get").is_some()) {
        return Err(LabError::MissingTool {
            tool: format!("{} (for {what})", pkgs.join(", ")),
            install,
        });
    }
    progress(&format!(
        "installing {} for {what} (running as root)",
        pkgs.join(" ")
    ));
    run_quiet("apt-get", &["update"], None)?;
    let mut args = vec!["install", "-y", "--no-install-recommends"];
    args.extend(pkgs.iter().copied());
    run_quiet("apt-get", &args, None).map(|_| ())
}

/// Run a command, keeping its output for the error message only.
fn run_quiet(cmd: &str, args: &[&str], dir: Option<&Path>) -> Result<String, LabError> {
    let mut c = Command::new(cmd);
    c.args(args)
        .env("DEBIAN_FRONTEND", "noninteractive")
        .stdin(Stdio::null());
    if let Some(d) = dir {
        c.current_dir(d);
    }
    let out = c.output().map_err(|e| LabError::Tool {
        tool: cmd.into(),
        detail: e.to_string(),
    })?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if out.status.success() {
        Ok(text)
    } else {
        Err(LabError::Tool {
            tool: format!("{cmd} {}", args.join(" ")),
            detail: last_lines(&text, 6),
        })
    }
}

fn last_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// `apt-get download` into `dir`; refreshes the apt lists once (as root) when a package is
/// unknown, since a fresh machine may have none.
pub fn apt_download(dir: &Path, pkgs: &[&String]) -> Result<(), LabError> {
    let mut args: Vec<&str> = vec!["-q", "-o", "APT::Sandbox::User=root", "download"];
    args.extend(pkgs.iter().map(|s| s.as_str()));
    match run_quiet("apt-get", &args, Some(dir)) {
        Ok(_) => Ok(()),
        Err(LabError::Tool { detail, .. })
            if detail.contains("Unable to locate")
                || detail.contains("has no installation candidate") =>
        {
            if is_root() {
                run_quiet("apt-get", &["update"], None)?;
                run_quiet("apt-get", &args, Some(dir))
                    .map(|_| ())
                    .map_err(|e| LabError::Download {
                        package: pkgs
                            .iter()
                            .map(|s| s.as_str())
                            .collect::<Vec<_>>()
                            .join(" "),
                        detail: e.to_string(),
                    })
            } else {
                Err(LabError::AptLists { detail })
            }
        }
        Err(e) => Err(LabError::Download {
            package: pkgs
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(" "),
            detail: e.to_string(),
        }),
    }
}

/// Unpack a `.deb` into `dest` with `dpkg-deb -x`.
pub fn dpkg_extract(deb: &Path, dest: &Path) -> Result<(), LabError> {
    std::fs::create_dir_all(dest).map_err(|e| LabError::io(dest, e))?;
    let deb_s = deb.to_string_lossy();
    let dest_s = dest.to_string_lossy();
    run_quiet("dpkg-deb", &["-x", &deb_s, &dest_s], None).map(|_| ())
}

/// The DT_NEEDED entries of each ELF file, from one `readelf -d` call.
pub fn needed_libraries(files: &[PathBuf]) -> Result<Vec<(PathBuf, Vec<String>)>, LabError> {
    let mut out = Vec::new();
    for chunk in files.chunks(200) {
        let mut c = Command::new("readelf");
        c.arg("-dW").args(chunk).stdin(Stdio::null());
        let o = c.output().map_err(|e| LabError::Tool {
            tool: "readelf".into(),
            detail: e.to_string(),
        })?;
        let text = String::from_utf8_lossy(&o.stdout);
        out.extend(parse_readelf(&text, chunk));
    }
    Ok(out)
}

/// Split `readelf -d` output of several files ("File: X" headers) into NEEDED lists.
pub fn parse_readelf(text: &str, files: &[PathBuf]) -> Vec<(PathBuf, Vec<String>)> {
    let mut out: Vec<(PathBuf, Vec<String>)> = Vec::new();
    let single = files.len() == 1;
    if single {
        out.push((files[0].clone(), Vec::new()));
    }
    for line in text.lines() {
        if let Some(name) = line.strip_prefix("File: ") {
            out.push((PathBuf::from(name.trim()), Vec::new()));
        } else if let Some(pos) = line.find("Shared library: [") {
            let rest = &line[pos + "Shared library: [".len()..];
            if let (Some(end), Some(last)) = (rest.find(']'), out.last_mut()) {
                last.1.push(rest[..end].to_string());
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readelf_output_is_split_per_file() {
        let text = "\nFile: /a\n\nDynamic section at offset 0x1 contains 2 entries:\n 0x0000000000000001 (NEEDED) Shared library: [libc.so.6]\n\nFile: /b\n 0x0000000000000001 (NEEDED) Shared library: [libibverbs.so.1]\n 0x0000000000000001 (NEEDED) Shared library: [libc.so.6]\n";
        let parsed = parse_readelf(text, &[PathBuf::from("/a"), PathBuf::from("/b")]);
        assert_eq!(parsed.len(), 2);
        assert_eq!(parsed[0].1, ["libc.so.6"]);
        assert_eq!(parsed[1].1, ["libibverbs.so.1", "libc.so.6"]);
        let one = parse_readelf(
            " (NEEDED) Shared library: [libm.so.6]\n",
            &[PathBuf::from("/x")],
        );
        assert_eq!(
            one,
            vec![(PathBuf::from("/x"), vec!["libm.so.6".to_string()])]
        );
    }
}
