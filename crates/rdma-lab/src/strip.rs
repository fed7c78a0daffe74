//! The ELF files a VM gets, without their debug sections.
//!
//! The release profile keeps line tables, and the C libraries built by rdma-mummy-sys and
//! libbpf-sys keep their full DWARF: rdmad is about 89 MB, of which 15.6 MB are not
//! `.debug_*`; a live test binary is 20-44 MB, of which 4-5 MB are not. A guest unpacks its
//! initramfs into RAM, the archive and the unpacked files side by side, so those sections
//! cost every VM memory and boot time, and they made the 4-host lab's initramfs outgrow its
//! hosts' memory ("Initramfs unpacking failed: write error").
//!
//! Guests get `objcopy --strip-debug` copies. The symbol table stays, so a backtrace in the
//! guest names its functions (without file and line); the host's own files are untouched
//! and keep everything. A copy is made once per version of a file (its path, size and
//! modification time) and kept in `<cache>/stripped/`; older copies of the same file name
//! are removed there once they are an hour old (a concurrent run may still be reading one).

use std::collections::hash_map::DefaultHasher;
use std::fs;
use std::hash::{Hash, Hasher};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, SystemTime};

use crate::LabError;

/// The directory under the lab's cache that holds the stripped copies.
pub const STRIPPED_DIR: &str = "stripped";

/// Copies older than this, of a file name just stripped again, are removed.
const KEEP_OLD: Duration = Duration::from_secs(3600);

/// True when `path` starts with the ELF magic.
fn is_elf(path: &Path) -> Result<bool, LabError> {
    let mut magic = [0u8; 4];
    let mut f = fs::File::open(path).map_err(|e| LabError::io(path, e))?;
    match f.read_exact(&mut magic) {
        Ok(()) => Ok(&magic == b"\x7fELF"),
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Ok(false),
        Err(e) => Err(LabError::io(path, e)),
    }
}

/// The file to put into a guest for host file `src`: `src` itself unless it is an ELF file,
/// else its copy without debug sections (made now, or found from an earlier run).
pub fn guest_copy(cache: &Path, src: &Path) -> Result<PathBuf, LabError> {
    if !is_elf(src)? {
        return Ok(src.to_path_buf());
    }
    let meta = fs::metadata(src).map_err(|e| LabError::io(src, e))?;
    let name = src
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "file".into());
    let mut h = DefaultHasher::new();
    fs::canonicalize(src)
        .unwrap_or_else(|_| src.to_path_buf())
        .hash(&mut h);
    meta.len().hash(&mut h);
    meta.modified()
        .ok()
        .and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
        .map(|d| d.as_nanos())
        .hash(&mut h);
    let dir = cache.join(STRIPPED_DIR);
    let entry = format!("{:016x}-{name}", h.finish());
    let dst = dir.join(&entry);
    if dst.is_file() {
        // Touched, so that pruning by age never takes a copy still in use.
        if let Ok(f) = fs::File::options().write(true).open(&dst) {
            let _ = f.set_modified(SystemTime::now());
        }
        return Ok(dst);
    }
    fs::create_dir_all(&dir).map_err(|e| LabError::io(&dir, e))?;
    let tmp = dir.join(format!(".{entry}.{}.tmp", std::process::id()));
    let out = Command::new("objcopy")
        .arg("--strip-debug")
        .arg(src)
        .arg(&tmp)
        .output()
        .map_err(|e| LabError::Tool {
            tool: "objcopy".into(),
            detail: format!(
                "{e} (binutils: the lab strips the debug sections of the binaries it copies into a VM)"
            ),
        })?;
    if !out.status.success() {
        let _ = fs::remove_file(&tmp);
        return Err(LabError::Tool {
            tool: "objcopy".into(),
            detail: format!(
                "--strip-debug {}: {} {}",
                src.display(),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        });
    }
    fs::rename(&tmp, &dst).map_err(|e| LabError::io(&dst, e))?;
    prune(&dir, &entry, &name);
    Ok(dst)
}

/// Remove the copies of file name `name` other than `keep` that are older than [`KEEP_OLD`].
fn prune(dir: &Path, keep: &str, name: &str) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let file = e.file_name().to_string_lossy().into_owned();
        // "<16 hex digits>-<name>"
        let same = file.len() == 17 + name.len()
            && file.as_bytes()[16] == b'-'
            && file[..16].bytes().all(|b| b.is_ascii_hexdigit())
            && file[17..] == *name;
        if !same || file == keep {
            continue;
        }
        let old = e
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age > KEEP_OLD);
        if old {
            let _ = fs::remove_file(e.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    /// A directory of its own for a test, removed at the end.
    struct Scratch(PathBuf);

    impl Scratch {
        fn new(test: &str) -> Scratch {
            let p =
                std::env::temp_dir().join(format!("rdma-lab-strip-{}-{test}", std::process::id()));
            let _ = fs::remove_dir_all(&p);
            fs::create_dir_all(&p).unwrap();
            Scratch(p)
        }

        fn path(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    /// The section names of an ELF file, from binutils' readelf (the lab's own host tool).
    fn sections(path: &Path) -> Vec<String> {
        let out = Command::new("readelf")
            .args(["-S", "-W"])
            .arg(path)
            .output()
            .expect("readelf (binutils) runs");
        assert!(out.status.success(), "readelf -S {}", path.display());
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| {
                let l = l.trim_start();
                let rest = l.strip_prefix('[')?;
                let (_, after) = rest.split_once(']')?;
                after.split_whitespace().next().map(str::to_string)
            })
            .collect()
    }

    #[test]
    fn an_elf_file_gets_a_copy_without_debug_sections_made_once() {
        let cache = Scratch::new("once");
        // This test binary: built with (at least) line tables in every profile of the
        // workspace.
        let me = std::env::current_exe().unwrap();
        let src = cache.path().join("probe-binary");
        fs::copy(&me, &src).unwrap();
        let before = sections(&src);
        assert!(
            before.iter().any(|s| s.starts_with(".debug_")),
            "the test binary has no debug section to strip: {before:?}"
        );
        let dst = guest_copy(cache.path(), &src).unwrap();
        assert_ne!(dst, src);
        assert!(dst.starts_with(cache.path().join(STRIPPED_DIR)));
        let after = sections(&dst);
        // .debug_gdb_scripts is loaded data (rustc's note to gdb), not debug information:
        // objcopy keeps it, and it is a few bytes.
        assert!(
            !after
                .iter()
                .any(|s| s.starts_with(".debug_") && s != ".debug_gdb_scripts"),
            "debug sections left: {after:?}"
        );
        assert!(
            after.iter().any(|s| s == ".symtab"),
            "the symbol table stays"
        );
        assert!(fs::metadata(&dst).unwrap().len() < fs::metadata(&src).unwrap().len());
        // The same version again: the same copy, not made again.
        let made = fs::metadata(&dst).unwrap().ino();
        let again = guest_copy(cache.path(), &src).unwrap();
        assert_eq!(again, dst);
        assert_eq!(fs::metadata(&again).unwrap().ino(), made);
    }

    #[test]
    fn a_new_version_gets_a_new_copy_and_old_copies_of_the_name_age_out() {
        let cache = Scratch::new("versions");
        let me = std::env::current_exe().unwrap();
        let src = cache.path().join("tool");
        fs::copy(&me, &src).unwrap();
        let first = guest_copy(cache.path(), &src).unwrap();
        // A copy of another file name, old: never touched by this name's pruning.
        let other = cache
            .path()
            .join(STRIPPED_DIR)
            .join("0123456789abcdef-other");
        fs::write(&other, b"x").unwrap();
        let two_hours_ago = SystemTime::now() - Duration::from_secs(7200);
        for p in [&first, &other] {
            fs::File::options()
                .write(true)
                .open(p)
                .unwrap()
                .set_modified(two_hours_ago)
                .unwrap();
        }
        // A rebuild: the file's modification time changes.
        fs::File::options()
            .write(true)
            .open(&src)
            .unwrap()
            .set_modified(SystemTime::now() + Duration::from_secs(60))
            .unwrap();
        let second = guest_copy(cache.path(), &src).unwrap();
        assert_ne!(second, first);
        assert!(second.is_file());
        assert!(!first.exists(), "the old copy of `tool` is removed");
        assert!(other.exists(), "another name's copy is not");
    }

    #[test]
    fn other_files_go_in_as_they_are() {
        let dir = Scratch::new("others");
        let script = dir.path().join("run.sh");
        fs::write(&script, b"#!/bin/sh\necho hi\n").unwrap();
        let empty = dir.path().join("empty");
        fs::write(&empty, b"").unwrap();
        for p in [&script, &empty] {
            assert_eq!(guest_copy(dir.path(), p).unwrap(), *p);
        }
        assert!(!dir.path().join(STRIPPED_DIR).exists());
        let missing = dir.path().join("missing");
        let err = guest_copy(dir.path(), &missing).unwrap_err().to_string();
        assert!(err.contains("missing"), "{err}");
    }
}
