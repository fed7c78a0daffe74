//! The kernel to boot: the uncompressed ELF `vmlinux` taken out of Debian's bzImage.
//!
//! qemu boots an ELF vmlinux directly through its PVH entry point, which skips the
//! in-guest decompression (about 3 s under TCG). If extraction fails the bzImage is used.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use crate::LabError;

const XZ_MAGIC: &[u8] = &[0xfd, b'7', b'z', b'X', b'Z', 0x00];
const ZSTD_MAGIC: &[u8] = &[0x28, 0xb5, 0x2f, 0xfd];

/// Decompress the payload of a bzImage into an ELF image, trying every magic in turn.
pub fn extract_vmlinux(bzimage: &[u8]) -> Result<Vec<u8>, LabError> {
    let mut tried = Vec::new();
    for (magic, tool, args) in [
        (XZ_MAGIC, "xz", &["-dc", "--single-stream"][..]),
        (ZSTD_MAGIC, "zstd", &["-dc"][..]),
    ] {
        let mut start = 0;
        while let Some(pos) = bzimage[start..]
            .windows(magic.len())
            .position(|w| w == magic)
        {
            let at = start + pos;
            tried.push(format!("{tool}@{at}"));
            if let Ok(out) = decompress(tool, args, &bzimage[at..]) {
                if out.starts_with(b"\x7fELF") {
                    return Ok(out);
                }
            }
            start = at + 1;
            if tried.len() > 16 {
                break;
            }
        }
    }
    Err(LabError::Image(format!(
        "no ELF kernel found inside the bzImage (tried {})",
        if tried.is_empty() {
            "nothing: no xz or zstd stream".to_string()
        } else {
            tried.join(", ")
        }
    )))
}

fn decompress(tool: &str, args: &[&str], input: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut child = Command::new(tool)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    let mut stdin = child.stdin.take().expect("piped stdin");
    let data = input.to_vec();
    // Feed stdin from a thread so a full stdout pipe cannot deadlock us.
    let feeder = std::thread::spawn(move || {
        let _ = stdin.write_all(&data);
    });
    let out = child.wait_with_output()?;
    let _ = feeder.join();
    // zstd and xz complain about trailing garbage after the stream; the output is still whole.
    Ok(out.stdout)
}

/// Write `vmlinux` next to the bzImage's cache entry; returns false when falling back.
pub fn prepare(bzimage_path: &Path, vmlinux_path: &Path) -> Result<bool, LabError> {
    let bz = std::fs::read(bzimage_path).map_err(|e| LabError::io(bzimage_path, e))?;
    match extract_vmlinux(&bz) {
        Ok(elf) => {
            std::fs::write(vmlinux_path, elf).map_err(|e| LabError::io(vmlinux_path, e))?;
            Ok(true)
        }
        Err(_) => Ok(false),
    }
}
