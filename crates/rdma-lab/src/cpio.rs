//! A writer for the "newc" cpio format the Linux kernel unpacks as an initramfs.
//!
//! The kernel accepts several archives concatenated, which is how the lab appends a small
//! per-run payload to the cached base image without rebuilding it.

use std::collections::BTreeSet;
use std::io::{self, Write};

const S_IFDIR: u32 = 0o040000;
const S_IFREG: u32 = 0o100000;
const S_IFLNK: u32 = 0o120000;

/// Streams entries into a newc archive; parent directories are created on demand.
pub struct CpioWriter<W: Write> {
    out: W,
    ino: u32,
    dirs: BTreeSet<String>,
    written: u64,
}

impl<W: Write> CpioWriter<W> {
    /// A new archive written to `out`.
    pub fn new(out: W) -> Self {
        CpioWriter {
            out,
            ino: 1,
            dirs: BTreeSet::new(),
            written: 0,
        }
    }

    /// Bytes written so far.
    pub fn written(&self) -> u64 {
        self.written
    }

    fn header(&mut self, name: &str, mode: u32, size: u32) -> io::Result<()> {
        let namesize = name.len() as u32 + 1;
        let hdr = format!(
            "070701{:08X}{:08X}{:08X}{:08X}{:08X}{:08X}{:08X}{:08X}{:08X}{:08X}{:08X}{:08X}{:08X}",
            self.ino,
            mode,
            0, // uid
            0, // gid
            if mode & S_IFDIR != 0 { 2 } else { 1 },
            0, // mtime: fixed, so images are reproducible
            size,
            0,
            0,
            0,
            0,
            namesize,
            0
        );
        self.ino += 1;
        self.out.write_all(hdr.as_bytes())?;
        self.out.write_all(name.as_bytes())?;
        self.out.write_all(&[0])?;
        self.written += hdr.len() as u64 + namesize as u64;
        self.pad()
    }

    fn pad(&mut self) -> io::Result<()> {
        let rem = (self.written % 4) as usize;
        if rem != 0 {
            let zeros = [0u8; 4];
            self.out.write_all(&zeros[..4 - rem])?;
            self.written += (4 - rem) as u64;
        }
        Ok(())
    }

    fn body(&mut self, data: &[u8]) -> io::Result<()> {
        self.out.write_all(data)?;
        self.written += data.len() as u64;
        self.pad()
    }

    /// Normalise "/a/b/" to "a/b"; the root is "".
    fn clean(path: &str) -> String {
        path.trim_matches('/').to_string()
    }

    fn parents(&mut self, name: &str) -> io::Result<()> {
        let mut acc = String::new();
        let parts: Vec<&str> = name.split('/').collect();
        for part in &parts[..parts.len().saturating_sub(1)] {
            if !acc.is_empty() {
                acc.push('/');
            }
            acc.push_str(part);
            if !self.dirs.contains(&acc) {
                let dir = acc.clone();
                self.header(&dir, S_IFDIR | 0o755, 0)?;
                self.dirs.insert(dir);
            }
        }
        Ok(())
    }

    /// A directory (and its parents).
    pub fn dir(&mut self, path: &str, mode: u32) -> io::Result<()> {
        let name = Self::clean(path);
        if name.is_empty() || self.dirs.contains(&name) {
            return Ok(());
        }
        self.parents(&name)?;
        self.header(&name, S_IFDIR | (mode & 0o7777), 0)?;
        self.dirs.insert(name);
        Ok(())
    }

    /// A regular file with the given permission bits.
    pub fn file(&mut self, path: &str, mode: u32, data: &[u8]) -> io::Result<()> {
        let name = Self::clean(path);
        let size = u32::try_from(data.len())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "file over 4 GiB"))?;
        self.parents(&name)?;
        self.header(&name, S_IFREG | (mode & 0o7777), size)?;
        self.body(data)
    }

    /// A symbolic link `path -> target`.
    pub fn symlink(&mut self, path: &str, target: &str) -> io::Result<()> {
        let name = Self::clean(path);
        self.parents(&name)?;
        self.header(&name, S_IFLNK | 0o777, target.len() as u32)?;
        self.body(target.as_bytes())
    }

    /// Ends the archive and returns the writer.
    pub fn finish(mut self) -> io::Result<W> {
        self.header("TRAILER!!!", 0, 0)?;
        self.out.flush()?;
        Ok(self.out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Parse a newc archive back into (name, mode, data) triples.
    fn parse(mut buf: &[u8]) -> Vec<(String, u32, Vec<u8>)> {
        let mut out = Vec::new();
        let mut offset = 0usize;
        loop {
            assert_eq!(&buf[..6], b"070701", "bad magic at {offset}");
            let field = |i: usize| {
                let s = std::str::from_utf8(&buf[6 + i * 8..6 + i * 8 + 8]).unwrap();
                usize::from_str_radix(s, 16).unwrap()
            };
            let mode = field(1) as u32;
            let size = field(6);
            let namesize = field(11);
            let name = std::str::from_utf8(&buf[110..110 + namesize - 1])
                .unwrap()
                .to_string();
            let data_start = (110 + namesize).div_ceil(4) * 4;
            let data_end = data_start + size;
            let next = data_end.div_ceil(4) * 4;
            if name == "TRAILER!!!" {
                assert_eq!(next, buf.len());
                break;
            }
            out.push((name, mode, buf[data_start..data_end].to_vec()));
            offset += next;
            buf = &buf[next..];
        }
        out
    }

    #[test]
    fn round_trip_with_parents_and_padding() {
        let mut w = CpioWriter::new(Vec::new());
        w.file("/opt/rdma/bin/x", 0o755, b"hello").unwrap();
        w.symlink("/bin/sh", "busybox").unwrap();
        w.dir("/opt/rdma", 0o755).unwrap(); // already created as a parent: not repeated
        let bytes = w.finish().unwrap();
        assert_eq!(bytes.len() % 4, 0);
        let entries = parse(&bytes);
        let names: Vec<&str> = entries.iter().map(|e| e.0.as_str()).collect();
        assert_eq!(
            names,
            [
                "opt",
                "opt/rdma",
                "opt/rdma/bin",
                "opt/rdma/bin/x",
                "bin",
                "bin/sh"
            ]
        );
        assert_eq!(entries[3].1, S_IFREG | 0o755);
        assert_eq!(entries[3].2, b"hello");
        assert_eq!(entries[5].1, S_IFLNK | 0o777);
        assert_eq!(entries[5].2, b"busybox");
    }
}
