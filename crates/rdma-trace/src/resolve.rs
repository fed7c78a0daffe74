//! Which kernel functions exist on the running kernel: from BTF (`/sys/kernel/btf/vmlinux`
//! plus one split-BTF file per module, e.g. `ib_core`, `ib_uverbs`) where present, else from
//! `/proc/kallsyms`.
//!
//! A probe point named in [`crate::probes`] is attached only when its function resolves;
//! the others are reported as missing instead of failing the whole tracer. kallsyms also
//! shows compiler clones (`create_qp.part.0`): a function that only exists as a clone cannot
//! be probed by its name, and resolution says so.
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Where a symbol set came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SymbolSource {
    /// BTF FUNC records of vmlinux and modules.
    Btf,
    /// `/proc/kallsyms` text symbols.
    Kallsyms,
}

/// Errors reading BTF.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BtfError {
    /// Not a BTF blob (magic 0xeB9F missing) or of the other byte order.
    #[error("not BTF (magic {0:#06x})")]
    Magic(u16),
    /// A section or record runs past the end of the blob.
    #[error("BTF truncated: {0}")]
    Truncated(&'static str),
    /// A type kind this parser does not know how to skip.
    #[error("unknown BTF kind {0}")]
    Kind(u32),
}

/// The function names a kernel offers for probing.
#[derive(Debug, Clone)]
pub struct KernelSymbols {
    /// Where the names came from.
    pub source: SymbolSource,
    /// Function name -> module (`vmlinux` for the core kernel).
    funcs: BTreeMap<String, String>,
    /// Names that only exist as compiler clones (`.part.N`, `.isra.N`, `.constprop.N`).
    clones: BTreeSet<String>,
}

/// One BTF blob's header fields we use.
struct Header {
    type_start: usize,
    type_end: usize,
    str_start: usize,
    str_end: usize,
}

fn u16_at(b: &[u8], off: usize) -> Option<u16> {
    b.get(off..off + 2)
        .map(|s| u16::from_le_bytes([s[0], s[1]]))
}

fn u32_at(b: &[u8], off: usize) -> Option<u32> {
    b.get(off..off + 4)
        .map(|s| u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
}

fn header(b: &[u8]) -> Result<Header, BtfError> {
    let magic = u16_at(b, 0).ok_or(BtfError::Truncated("header"))?;
    if magic != 0xeb9f {
        return Err(BtfError::Magic(magic));
    }
    let hdr_len = u32_at(b, 4).ok_or(BtfError::Truncated("header"))? as usize;
    let field = |off| {
        u32_at(b, off)
            .map(|v| v as usize)
            .ok_or(BtfError::Truncated("header"))
    };
    let (type_off, type_len, str_off, str_len) = (field(8)?, field(12)?, field(16)?, field(20)?);
    let h = Header {
        type_start: hdr_len + type_off,
        type_end: hdr_len + type_off + type_len,
        str_start: hdr_len + str_off,
        str_end: hdr_len + str_off + str_len,
    };
    if h.type_end > b.len() || h.str_end > b.len() {
        return Err(BtfError::Truncated("sections"));
    }
    Ok(h)
}

/// Length of a blob's string section: a module's split BTF numbers its strings after it.
pub fn btf_string_section_len(blob: &[u8]) -> Result<u32, BtfError> {
    let h = header(blob)?;
    Ok((h.str_end - h.str_start) as u32)
}

/// The names of all FUNC records of a BTF blob. For a module's split BTF pass the base
/// (vmlinux) string section length: string offsets at or above it are the module's own.
pub fn btf_func_names(blob: &[u8], base_str_len: Option<u32>) -> Result<Vec<String>, BtfError> {
    let h = header(blob)?;
    let strs = &blob[h.str_start..h.str_end];
    let base = base_str_len.unwrap_or(0) as usize;
    let name = |off: u32| -> Option<String> {
        let off = (off as usize).checked_sub(base)?;
        let rest = strs.get(off..)?;
        let end = rest.iter().position(|&c| c == 0)?;
        Some(String::from_utf8_lossy(&rest[..end]).into_owned())
    };
    let mut out = Vec::new();
    let mut at = h.type_start;
    while at < h.type_end {
        let name_off = u32_at(blob, at).ok_or(BtfError::Truncated("type"))?;
        let info = u32_at(blob, at + 4).ok_or(BtfError::Truncated("type"))?;
        let kind = (info >> 24) & 0x1f;
        let vlen = (info & 0xffff) as usize;
        let extra = match kind {
            1 => 4,                                      // INT
            2 | 7 | 8 | 9 | 10 | 11 | 12 | 16 | 18 => 0, // PTR FWD TYPEDEF VOLATILE CONST RESTRICT FUNC FLOAT TYPE_TAG
            3 => 12,                                     // ARRAY
            4 | 5 => vlen * 12,                          // STRUCT UNION
            6 => vlen * 8,                               // ENUM
            13 => vlen * 8,                              // FUNC_PROTO
            14 => 4,                                     // VAR
            15 => vlen * 12,                             // DATASEC
            17 => 4,                                     // DECL_TAG
            19 => vlen * 12,                             // ENUM64
            other => return Err(BtfError::Kind(other)),
        };
        if kind == 12 {
            if let Some(n) = name(name_off) {
                out.push(n);
            }
        }
        at += 12 + extra;
    }
    if at != h.type_end {
        return Err(BtfError::Truncated("last type"));
    }
    Ok(out)
}

fn clone_base(name: &str) -> Option<&str> {
    let (base, _) = name.split_once('.')?;
    Some(base)
}

impl KernelSymbols {
    /// From `/proc/kallsyms` text: `ADDR TYPE NAME [MODULE]`. Only text symbols (t/T) count.
    /// Addresses are ignored (they read as zero without privileges anyway).
    pub fn from_kallsyms(text: &str) -> KernelSymbols {
        let mut funcs = BTreeMap::new();
        let mut clones = BTreeSet::new();
        for line in text.lines() {
            let mut it = line.split_whitespace();
            let (Some(_addr), Some(ty), Some(name)) = (it.next(), it.next(), it.next()) else {
                continue;
            };
            if !matches!(ty, "t" | "T") {
                continue;
            }
            let module = it
                .next()
                .map(|m| m.trim_start_matches('[').trim_end_matches(']').to_string())
                .unwrap_or_else(|| "vmlinux".into());
            if let Some(base) = clone_base(name) {
                clones.insert(base.to_string());
            } else {
                funcs.insert(name.to_string(), module);
            }
        }
        clones.retain(|c| !funcs.contains_key(c));
        KernelSymbols {
            source: SymbolSource::Kallsyms,
            funcs,
            clones,
        }
    }

    /// From BTF blobs: `(module name, bytes)`, vmlinux first (its string section is the base
    /// of every module's split BTF).
    pub fn from_btf(blobs: &[(String, Vec<u8>)]) -> Result<KernelSymbols, BtfError> {
        let mut funcs = BTreeMap::new();
        let mut base = None;
        for (module, blob) in blobs {
            let names = btf_func_names(blob, base)?;
            if module == "vmlinux" {
                base = Some(btf_string_section_len(blob)?);
            }
            for n in names {
                funcs.entry(n).or_insert_with(|| module.clone());
            }
        }
        Ok(KernelSymbols {
            source: SymbolSource::Btf,
            funcs,
            clones: BTreeSet::new(),
        })
    }

    /// Read the running kernel: BTF from `btf_dir` (normally `/sys/kernel/btf`) when its
    /// `vmlinux` exists, else `kallsyms` (normally `/proc/kallsyms`).
    pub fn load(btf_dir: &Path, kallsyms: &Path) -> std::io::Result<KernelSymbols> {
        let vmlinux = btf_dir.join("vmlinux");
        if vmlinux.is_file() {
            let mut blobs = vec![("vmlinux".to_string(), std::fs::read(&vmlinux)?)];
            let mut modules: Vec<_> = std::fs::read_dir(btf_dir)?
                .filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n != "vmlinux")
                .collect();
            modules.sort();
            for m in modules {
                blobs.push((m.clone(), std::fs::read(btf_dir.join(&m))?));
            }
            match KernelSymbols::from_btf(&blobs) {
                Ok(syms) => return Ok(syms),
                Err(e) => tracing::warn!("BTF unreadable ({e}), using kallsyms"),
            }
        }
        let text = std::fs::read_to_string(kallsyms)?;
        Ok(KernelSymbols::from_kallsyms(&text))
    }

    /// The module a function lives in, when it can be probed by name.
    pub fn module_of(&self, name: &str) -> Option<&str> {
        self.funcs.get(name).map(String::as_str)
    }

    /// True when the name only exists as a compiler clone (kallsyms only).
    pub fn only_as_clone(&self, name: &str) -> bool {
        self.clones.contains(name)
    }

    /// Number of functions known.
    pub fn len(&self) -> usize {
        self.funcs.len()
    }

    /// True when no function is known.
    pub fn is_empty(&self) -> bool {
        self.funcs.is_empty()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A tiny BTF blob: INT "int", FUNC_PROTO, and one FUNC per name; strings after `base`.
    pub(crate) fn btf_blob(funcs: &[&str], base: u32) -> Vec<u8> {
        let mut strs = vec![0u8];
        let mut offs = Vec::new();
        for n in ["int"].iter().chain(funcs) {
            offs.push(strs.len() as u32 + base);
            strs.extend_from_slice(n.as_bytes());
            strs.push(0);
        }
        let mut types = Vec::new();
        let mut push = |name: u32, kind: u32, vlen: u32, sz: u32, extra: &[u32]| {
            types.extend_from_slice(&name.to_le_bytes());
            types.extend_from_slice(&((kind << 24) | vlen).to_le_bytes());
            types.extend_from_slice(&sz.to_le_bytes());
            for e in extra {
                types.extend_from_slice(&e.to_le_bytes());
            }
        };
        push(offs[0], 1, 0, 4, &[32]); // INT int, 32 bits
        push(0, 13, 1, 1, &[0, 1]); // FUNC_PROTO int (int)
        push(0, 4, 1, 4, &[offs[0], 1, 0]); // anonymous STRUCT with one member (skipped)
        for off in &offs[1..] {
            push(*off, 12, 1, 2, &[]); // FUNC -> proto
        }
        let mut b = Vec::new();
        b.extend_from_slice(&0xeb9fu16.to_le_bytes());
        b.push(1);
        b.push(0);
        b.extend_from_slice(&24u32.to_le_bytes());
        b.extend_from_slice(&0u32.to_le_bytes());
        b.extend_from_slice(&(types.len() as u32).to_le_bytes());
        b.extend_from_slice(&(types.len() as u32).to_le_bytes());
        b.extend_from_slice(&(strs.len() as u32).to_le_bytes());
        b.extend_from_slice(&types);
        b.extend_from_slice(&strs);
        b
    }

    #[test]
    fn btf_funcs_of_vmlinux_and_a_split_module() {
        let vmlinux = btf_blob(&["schedule", "do_sys_open"], 0);
        let base = btf_string_section_len(&vmlinux).unwrap();
        assert_eq!(base, 1 + 4 + 9 + 12);
        let ib_core = btf_blob(&["ib_modify_qp_with_udata", "ib_dispatch_event"], base);
        assert_eq!(
            btf_func_names(&ib_core, Some(base)).unwrap(),
            ["ib_modify_qp_with_udata", "ib_dispatch_event"]
        );
        let syms =
            KernelSymbols::from_btf(&[("vmlinux".into(), vmlinux), ("ib_core".into(), ib_core)])
                .unwrap();
        assert_eq!(syms.source, SymbolSource::Btf);
        assert_eq!(syms.module_of("ib_dispatch_event"), Some("ib_core"));
        assert_eq!(syms.module_of("schedule"), Some("vmlinux"));
        assert_eq!(syms.module_of("ib_uverbs_reg_mr"), None);
        assert_eq!(syms.len(), 4);
    }

    #[test]
    fn btf_rejects_garbage_and_truncation() {
        assert_eq!(
            btf_func_names(&[0x9f, 0xeb, 1, 0], None).err(),
            Some(BtfError::Truncated("header"))
        );
        assert!(matches!(
            btf_func_names(&[0u8; 32], None),
            Err(BtfError::Magic(0))
        ));
        let mut blob = btf_blob(&["f"], 0);
        blob.truncate(blob.len() - 3);
        assert_eq!(
            btf_func_names(&blob, None).err(),
            Some(BtfError::Truncated("sections"))
        );
    }

    /// Lines as /proc/kallsyms shows them in the lab (Debian 6.1.0-57-amd64), trimmed.
    const KALLSYMS: &str = "\
ffffffffc02c73d0 t ib_uverbs_reg_mr\t[ib_uverbs]
ffffffffc02c8d60 t create_qp\t[ib_uverbs]
ffffffffc0256d10 t create_qp.part.0\t[ib_core]
ffffffffc02577a0 t _ib_modify_qp\t[ib_core]
ffffffffc027e735 t _ib_modify_qp.cold\t[ib_core]
ffffffffc0257b80 T ib_modify_qp_with_udata\t[ib_core]
ffffffffc02c1ed0 t ib_uverbs_async_handler.part.0\t[ib_uverbs]
ffffffff81000000 T _stext
ffffffff82a00000 D some_data
0000000000000000 T ib_dispatch_event\t[ib_core]
";

    #[test]
    fn kallsyms_names_modules_and_clones() {
        let syms = KernelSymbols::from_kallsyms(KALLSYMS);
        assert_eq!(syms.source, SymbolSource::Kallsyms);
        assert_eq!(syms.module_of("ib_uverbs_reg_mr"), Some("ib_uverbs"));
        assert_eq!(syms.module_of("ib_modify_qp_with_udata"), Some("ib_core"));
        assert_eq!(syms.module_of("_stext"), Some("vmlinux"));
        // Zeroed addresses (no privileges) still resolve by name.
        assert_eq!(syms.module_of("ib_dispatch_event"), Some("ib_core"));
        // Data symbols are not probe points.
        assert_eq!(syms.module_of("some_data"), None);
        // A clone next to the real function is not "clone only".
        assert!(!syms.only_as_clone("_ib_modify_qp"));
        assert!(syms.only_as_clone("ib_uverbs_async_handler"));
        assert_eq!(syms.module_of("ib_uverbs_async_handler"), None);
    }

    #[test]
    fn load_prefers_btf_and_falls_back_to_kallsyms() {
        let dir = std::env::temp_dir().join(format!("rdma-trace-btf-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("btf")).unwrap();
        std::fs::write(dir.join("kallsyms"), KALLSYMS).unwrap();
        let from_kallsyms = KernelSymbols::load(&dir.join("btf"), &dir.join("kallsyms")).unwrap();
        assert_eq!(from_kallsyms.source, SymbolSource::Kallsyms);
        let vmlinux = btf_blob(&["schedule"], 0);
        let base = btf_string_section_len(&vmlinux).unwrap();
        std::fs::write(dir.join("btf/vmlinux"), &vmlinux).unwrap();
        std::fs::write(
            dir.join("btf/ib_uverbs"),
            btf_blob(&["ib_uverbs_reg_mr"], base),
        )
        .unwrap();
        let from_btf = KernelSymbols::load(&dir.join("btf"), &dir.join("kallsyms")).unwrap();
        assert_eq!(from_btf.source, SymbolSource::Btf);
        assert_eq!(from_btf.module_of("ib_uverbs_reg_mr"), Some("ib_uverbs"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
