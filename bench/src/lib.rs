//! Shared helpers of the benchmark binaries: timing, medians, the synthetic sysfs tree and
//! the floors every scrape is compared with: a plain open/read/close loop, and the physical
//! one, one `pread` per file through descriptors kept open ([`KeptFiles`]), serial.
#![forbid(unsafe_code)]

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// Median of some durations (the mean of the middle two for an even count).
pub fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    let n = v.len();
    match n {
        0 => Duration::ZERO,
        _ if n % 2 == 1 => v[n / 2],
        _ => (v[n / 2 - 1] + v[n / 2]) / 2,
    }
}

/// Time one call.
pub fn time(f: impl FnOnce()) -> Duration {
    let start = Instant::now();
    f();
    start.elapsed()
}

/// Write `gen-sysfs.py OUT --devices N` (RDMA_GEN_SYSFS, else `shared/bench/gen-sysfs.py` in
/// the nearest directory above the workspace that has it: `../shared` from a checkout,
/// `../../shared` from a worktree one level deeper).
pub fn synthetic_sysfs(devices: u32) -> anyhow::Result<PathBuf> {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let script = std::env::var_os("RDMA_GEN_SYSFS")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            manifest
                .ancestors()
                .skip(2)
                .map(|dir| dir.join("shared/bench/gen-sysfs.py"))
                .find(|p| p.is_file())
                .unwrap_or_else(|| manifest.join("../../shared/bench/gen-sysfs.py"))
        });
    anyhow::ensure!(
        script.is_file(),
        "{} not found (set RDMA_GEN_SYSFS)",
        script.display()
    );
    let root = std::env::temp_dir().join(format!("rdma-bench-sysfs-{devices}"));
    let _ = std::fs::remove_dir_all(&root);
    let status = Command::new("python3")
        .arg(&script)
        .arg(&root)
        .args(["--devices", &devices.to_string()])
        .status()?;
    anyhow::ensure!(status.success(), "gen-sysfs.py failed");
    Ok(root)
}

/// Every regular file below `dir`. Symbolic links below it are not followed nor listed (a
/// real sysfs device directory links to its parent device and subsystem); `dir` itself may
/// be one.
pub fn all_files(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let path = entry.path();
        let kind = entry.file_type()?;
        if kind.is_dir() {
            all_files(&path, out)?;
        } else if kind.is_file() {
            out.push(path);
        }
    }
    Ok(())
}

/// Every file of every device of a `class/infiniband` directory: the synthetic tree's
/// device directories, or the symbolic links to them of a real `/sys/class/infiniband`.
pub fn device_files(class: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(class)? {
        all_files(&entry?.path(), out)?;
    }
    Ok(())
}

/// The floor: open, one read into `buf` (a page and one byte, as the reader's), close, for
/// every file of `files` (a list built beforehand, outside any timing). Returns the bytes read.
pub fn plain_loop(files: &[PathBuf], buf: &mut [u8]) -> usize {
    let mut total = 0usize;
    for path in files {
        if let Ok(mut file) = File::open(path) {
            total += file.read(buf).unwrap_or(0);
        }
    }
    std::hint::black_box(total)
}

/// Whether `path` is a counter file (its directory is `counters/` or `hw_counters/`).
pub fn is_counter_file(path: &Path) -> bool {
    path.parent()
        .and_then(|d| d.file_name())
        .is_some_and(|d| d == "counters" || d == "hw_counters")
}

/// The physical floor of a scrape: descriptors opened once, then per round one `pread` at
/// offset 0 per file, serial (a sysfs attribute re-read from offset 0 runs its `show` again,
/// which is what rdmad does with the descriptors it keeps).
pub struct KeptFiles {
    files: Vec<File>,
}

impl KeptFiles {
    /// Open every file of `paths` (outside any timing).
    pub fn open(paths: &[PathBuf]) -> std::io::Result<KeptFiles> {
        let files = paths.iter().map(File::open).collect::<Result<_, _>>()?;
        Ok(KeptFiles { files })
    }

    /// How many descriptors are kept.
    pub fn len(&self) -> usize {
        self.files.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }

    /// One `pread` into `buf` per file; the bytes read.
    pub fn read_all(&self, buf: &mut [u8]) -> usize {
        let mut total = 0usize;
        for file in &self.files {
            total += file.read_at(buf, 0).unwrap_or(0);
        }
        std::hint::black_box(total)
    }
}

/// rdmad's default collectors (the ones a plain `rdmad` runs) over the sysfs tree `root`.
pub fn default_collectors(root: &Path) -> rdmad::collector::Collectors {
    use rdmad::collector::{CollectorConfig, Collectors, TABLE};
    let config = CollectorConfig::new(root, rdmakit::sysfs::DeviceFilter::all());
    let defaults: Vec<&str> = TABLE
        .iter()
        .filter(|s| s.default_enabled)
        .map(|s| s.name)
        .collect();
    Collectors::new(&config, &defaults)
}
