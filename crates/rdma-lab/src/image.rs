//! The cached base image: a kernel to boot and an initramfs holding busybox, rdma-core,
//! perftest, iproute2, the RDMA kernel modules and the lab's `/init`.
//!
//! Built once into `<cache>/base` from Debian packages and reused while the package set and
//! the init script are unchanged (a stamp file records both).

use std::collections::HashSet;
use std::fs;
use std::io::BufWriter;
use std::path::{Path, PathBuf};

use crate::cpio::CpioWriter;
use crate::{host, kernel, kmod, packages, LabError, Progress};

/// The lab's PID 1.
pub const INIT_SH: &str = include_str!("../assets/init.sh");
/// What the interactive lab shell prints first.
pub const MOTD: &str = include_str!("../assets/motd");
/// The multi-host lab's command agent (served on port 7001 of every host).
pub const AGENT_SH: &str = include_str!("../assets/agent.sh");
/// Bump when the image layout changes in a way the stamp would not notice.
const BUILDER_VERSION: &str = "rdma-lab image v1";

/// Paths under an unpacked package that the image leaves out (docs, locales, headers).
const SKIP_PREFIXES: &[&str] = &[
    "usr/share/",
    "usr/include/",
    "usr/lib/x86_64-linux-gnu/gconv/",
    "usr/lib/x86_64-linux-gnu/audit/",
    "etc/init.d/",
    "etc/cron",
    "lib/systemd/",
    "usr/lib/systemd/",
    "lib/udev/",
    "usr/lib/udev/",
];

/// A bootable base image.
#[derive(Debug, Clone)]
pub struct BaseImage {
    /// The kernel file given to qemu (`vmlinux` when extracted, else the bzImage).
    pub kernel: PathBuf,
    /// The base initramfs (uncompressed newc cpio).
    pub initrd: PathBuf,
    /// The kernel release, e.g. `6.1.0-57-amd64`.
    pub kernel_release: String,
}

/// Build the base image in `<cache>/base` unless an up-to-date one is there.
pub fn ensure_base(cache: &Path, progress: &Progress) -> Result<BaseImage, LabError> {
    host::ensure_tools(progress)?;
    let kernel_pkg = packages::kernel_package()?;
    let mut pkgs: Vec<String> = packages::USERSPACE.iter().map(|s| s.to_string()).collect();
    pkgs.push(kernel_pkg.clone());
    let debs = packages::download(&cache.join("debs"), &pkgs, progress)?;

    let base = cache.join("base");
    let stamp = stamp(&debs);
    let stamp_path = base.join("stamp");
    if let Ok(existing) = fs::read_to_string(&stamp_path) {
        if existing == stamp {
            if let Ok(img) = read_existing(&base) {
                return Ok(img);
            }
        }
    }
    progress("building the lab image (once; cached under target/lab)");
    let _ = fs::remove_dir_all(&base);
    fs::create_dir_all(&base).map_err(|e| LabError::io(&base, e))?;

    let unpack = cache.join("unpack");
    let _ = fs::remove_dir_all(&unpack);
    for (pkg, deb) in pkgs.iter().zip(&debs) {
        host::dpkg_extract(deb, &unpack.join(pkg))?;
    }
    progress(&format!("unpacked {} packages", pkgs.len()));

    let kroot = unpack.join(&kernel_pkg);
    let (bzimage, release) = find_kernel(&kroot)?;
    let modules_dir = kroot.join("lib/modules").join(&release);
    let index = kmod::index_modules(&modules_dir)?;
    let builtin = kmod::builtin_modules(&modules_dir);
    let order = kmod::load_order(kmod::LAB_MODULES, &index, &builtin, &|p| fs::read(p))?;

    let initrd = base.join("initrd.cpio");
    let tmp = base.join("initrd.cpio.tmp");
    let file = fs::File::create(&tmp).map_err(|e| LabError::io(&tmp, e))?;
    let mut w = CpioWriter::new(BufWriter::new(file));
    let io = |e: std::io::Error| LabError::io(&tmp, e);
    for d in [
        "proc",
        "sys",
        "dev",
        "tmp",
        "run",
        "root",
        "mnt",
        "var/log",
        "etc/lab",
        "opt/rdma/bin",
    ] {
        w.dir(d, 0o755).map_err(io)?;
    }
    w.file("init", 0o755, INIT_SH.as_bytes()).map_err(io)?;
    w.file("etc/lab/motd", 0o644, MOTD.as_bytes()).map_err(io)?;
    w.file("etc/lab/agent", 0o755, AGENT_SH.as_bytes())
        .map_err(io)?;
    w.file("etc/passwd", 0o644, b"root:x:0:0:root:/root:/bin/sh\n")
        .map_err(io)?;
    w.file("etc/group", 0o644, b"root:x:0:\n").map_err(io)?;
    w.file("etc/hosts", 0o644, b"127.0.0.1 localhost\n10.0.2.15 lab\n")
        .map_err(io)?;

    let mut module_list = String::new();
    for ko in &order {
        let name = ko.file_name().and_then(|n| n.to_str()).unwrap_or("x.ko");
        let guest = format!("lib/modules/lab/{name}");
        let bytes = fs::read(ko).map_err(|e| LabError::io(ko, e))?;
        w.file(&guest, 0o644, &bytes).map_err(io)?;
        module_list.push_str(&format!("/{guest}\n"));
    }
    w.file("etc/lab/modules", 0o644, module_list.as_bytes())
        .map_err(io)?;

    let mut elf_files = Vec::new();
    let mut sonames = HashSet::new();
    for pkg in packages::USERSPACE {
        add_tree(&mut w, &unpack.join(pkg), &mut elf_files, &mut sonames)?;
    }
    check_libraries(&elf_files, &sonames)?;
    let size = w.written();
    w.finish().map_err(io)?;
    fs::rename(&tmp, &initrd).map_err(|e| LabError::io(&initrd, e))?;
    progress(&format!(
        "initramfs: {:.1} MB, {} kernel modules, {} ELF files checked",
        size as f64 / 1e6,
        order.len(),
        elf_files.len()
    ));

    let vmlinux = base.join("vmlinux");
    let kernel = if kernel::prepare(&bzimage, &vmlinux)? {
        vmlinux
    } else {
        progress("could not extract vmlinux; booting the bzImage (slower)");
        let dst = base.join("bzImage");
        fs::copy(&bzimage, &dst).map_err(|e| LabError::io(&dst, e))?;
        dst
    };
    fs::write(base.join("release"), &release).map_err(|e| LabError::io(&base, e))?;
    fs::write(
        base.join("kernel-path"),
        kernel.file_name().and_then(|n| n.to_str()).unwrap_or(""),
    )
    .map_err(|e| LabError::io(&base, e))?;
    fs::write(&stamp_path, stamp).map_err(|e| LabError::io(&stamp_path, e))?;
    let _ = fs::remove_dir_all(&unpack);
    progress(&format!("lab image ready: kernel {release}"));
    Ok(BaseImage {
        kernel,
        initrd,
        kernel_release: release,
    })
}

fn stamp(debs: &[PathBuf]) -> String {
    let mut names: Vec<String> = debs
        .iter()
        .filter_map(|d| d.file_name().and_then(|n| n.to_str()).map(String::from))
        .collect();
    names.sort();
    format!(
        "{BUILDER_VERSION}\ninit {:016x}\nmotd {:016x}\nagent {:016x}\n{}\n",
        fnv1a(INIT_SH.as_bytes()),
        fnv1a(MOTD.as_bytes()),
        fnv1a(AGENT_SH.as_bytes()),
        names.join("\n")
    )
}

/// A small stable hash for the stamp (not for security).
fn fnv1a(data: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf29ce484222325;
    for b in data {
        h ^= *b as u64;
        h = h.wrapping_mul(0x100000001b3);
    }
    h
}

fn read_existing(base: &Path) -> Result<BaseImage, LabError> {
    let rd = |n: &str| fs::read_to_string(base.join(n)).map_err(|e| LabError::io(&base.join(n), e));
    let kernel = base.join(rd("kernel-path")?.trim());
    let initrd = base.join("initrd.cpio");
    if !kernel.is_file() || !initrd.is_file() {
        return Err(LabError::Image("cached image incomplete".into()));
    }
    Ok(BaseImage {
        kernel,
        initrd,
        kernel_release: rd("release")?.trim().to_string(),
    })
}

fn find_kernel(kroot: &Path) -> Result<(PathBuf, String), LabError> {
    let boot = kroot.join("boot");
    let entries = fs::read_dir(&boot).map_err(|e| LabError::io(&boot, e))?;
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        if let Some(release) = name.strip_prefix("vmlinuz-") {
            return Ok((e.path(), release.to_string()));
        }
    }
    Err(LabError::Image(format!(
        "no vmlinuz-* in {}",
        boot.display()
    )))
}

fn skipped(rel: &str) -> bool {
    SKIP_PREFIXES.iter().chain(packages::LEFT_OUT).any(|p| {
        if p.ends_with('/') {
            rel.starts_with(p)
        } else {
            rel == *p
        }
    })
}

/// Add an unpacked package tree to the archive, noting ELF files and library names.
fn add_tree<W: std::io::Write>(
    w: &mut CpioWriter<W>,
    root: &Path,
    elf_files: &mut Vec<PathBuf>,
    sonames: &mut HashSet<String>,
) -> Result<(), LabError> {
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let mut entries: Vec<_> = fs::read_dir(&dir)
            .map_err(|e| LabError::io(&dir, e))?
            .flatten()
            .collect();
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let path = e.path();
            let rel = path
                .strip_prefix(root)
                .map_err(|_| LabError::Image(format!("{} escaped its root", path.display())))?
                .to_string_lossy()
                .to_string();
            let meta = fs::symlink_metadata(&path).map_err(|err| LabError::io(&path, err))?;
            let ft = meta.file_type();
            if ft.is_dir() {
                if skipped(&format!("{rel}/")) {
                    continue;
                }
                w.dir(&rel, 0o755).map_err(|err| LabError::io(&path, err))?;
                stack.push(path);
                continue;
            }
            if skipped(&rel) {
                continue;
            }
            let name = e.file_name().to_string_lossy().to_string();
            if name.contains(".so") {
                sonames.insert(name);
            }
            if ft.is_symlink() {
                let target = fs::read_link(&path).map_err(|err| LabError::io(&path, err))?;
                w.symlink(&rel, &target.to_string_lossy())
                    .map_err(|err| LabError::io(&path, err))?;
            } else if ft.is_file() {
                use std::os::unix::fs::PermissionsExt;
                let data = fs::read(&path).map_err(|err| LabError::io(&path, err))?;
                if data.starts_with(b"\x7fELF") {
                    elf_files.push(path.clone());
                }
                w.file(&rel, meta.permissions().mode(), &data)
                    .map_err(|err| LabError::io(&path, err))?;
            }
        }
    }
    Ok(())
}

/// Every library an ELF file in the image needs must be in the image too.
fn check_libraries(elf_files: &[PathBuf], sonames: &HashSet<String>) -> Result<(), LabError> {
    let needed = host::needed_libraries(elf_files)?;
    let mut missing = Vec::new();
    for (file, libs) in needed {
        for lib in libs {
            if !sonames.contains(&lib) && !lib.starts_with("ld-linux") {
                missing.push(format!("{} needs {lib}", file.display()));
            }
        }
    }
    if missing.is_empty() {
        Ok(())
    } else {
        Err(LabError::Image(format!(
            "libraries missing from the image (add their packages to packages::USERSPACE):\n  {}",
            missing.join("\n  ")
        )))
    }
}
