//! Kernel module selection: follow each module's `depends=` field (from its `.modinfo`
//! section) and produce an insmod order, so the image needs no depmod or modprobe.

use std::collections::{BTreeMap, HashSet};
use std::fs;
use std::path::{Path, PathBuf};

use crate::LabError;

/// Modules the lab loads, in the order given (dependencies are added before them).
pub const LAB_MODULES: &[&str] = &[
    "virtio_pci",
    "virtio_net",
    "crc32_generic",
    "veth",
    "rdma_rxe",
    "ib_uverbs",
    "rdma_ucm",
    "ib_umad",
    // tc netem faults on the multi-host lab's fabric links.
    "sch_netem",
];

/// The `depends=` list of a module file, read from its `.modinfo` strings.
pub fn module_depends(ko: &[u8]) -> Vec<String> {
    const KEY: &[u8] = b"depends=";
    let mut i = 0;
    while let Some(pos) = find(&ko[i..], KEY) {
        let start = i + pos;
        // .modinfo entries are NUL-separated "key=value" strings.
        if start == 0 || ko[start - 1] == 0 {
            let value_start = start + KEY.len();
            let end = ko[value_start..]
                .iter()
                .position(|&b| b == 0)
                .map(|p| value_start + p)
                .unwrap_or(ko.len());
            let value = String::from_utf8_lossy(&ko[value_start..end]);
            return value
                .split(',')
                .filter(|s| !s.is_empty())
                .map(|s| s.to_string())
                .collect();
        }
        i = start + KEY.len();
    }
    Vec::new()
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Module names are spelled with `-` or `_` interchangeably.
fn norm(name: &str) -> String {
    name.replace('-', "_")
}

/// Every `*.ko` under `modules_dir`, by normalised name.
pub fn index_modules(modules_dir: &Path) -> Result<BTreeMap<String, PathBuf>, LabError> {
    let mut out = BTreeMap::new();
    let mut stack = vec![modules_dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let entries = fs::read_dir(&dir).map_err(|e| LabError::io(&dir, e))?;
        for entry in entries {
            let entry = entry.map_err(|e| LabError::io(&dir, e))?;
            let path = entry.path();
            let ft = entry.file_type().map_err(|e| LabError::io(&path, e))?;
            if ft.is_dir() {
                stack.push(path);
            } else if let Some(name) = path.file_name().and_then(|n| n.to_str()) {
                if let Some(stem) = name.strip_suffix(".ko") {
                    out.insert(norm(stem), path.clone());
                }
            }
        }
    }
    Ok(out)
}

/// Names listed in `modules.builtin` (built into the kernel: nothing to load).
pub fn builtin_modules(kernel_modules_dir: &Path) -> HashSet<String> {
    let path = kernel_modules_dir.join("modules.builtin");
    fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.rsplit('/').next())
        .filter_map(|f| f.strip_suffix(".ko"))
        .map(norm)
        .collect()
}

/// The insmod order for `wanted`: each module after its dependencies, each once.
/// Built-in modules are skipped; a module that is neither a file nor built in is an error.
pub fn load_order(
    wanted: &[&str],
    index: &BTreeMap<String, PathBuf>,
    builtin: &HashSet<String>,
    read: &dyn Fn(&Path) -> std::io::Result<Vec<u8>>,
) -> Result<Vec<PathBuf>, LabError> {
    fn visit(
        name: &str,
        index: &BTreeMap<String, PathBuf>,
        builtin: &HashSet<String>,
        read: &dyn Fn(&Path) -> std::io::Result<Vec<u8>>,
        seen: &mut HashSet<String>,
        order: &mut Vec<PathBuf>,
        chain: &mut Vec<String>,
    ) -> Result<(), LabError> {
        let name = norm(name);
        if seen.contains(&name) || builtin.contains(&name) {
            return Ok(());
        }
        if chain.contains(&name) {
            return Err(LabError::Image(format!(
                "module dependency cycle: {} -> {name}",
                chain.join(" -> ")
            )));
        }
        let path = index.get(&name).ok_or_else(|| {
            LabError::Image(format!(
                "kernel module {name} is neither in the kernel package nor built in{}",
                if chain.is_empty() {
                    String::new()
                } else {
                    format!(" (needed by {})", chain.join(" -> "))
                }
            ))
        })?;
        let bytes = read(path).map_err(|e| LabError::io(path, e))?;
        chain.push(name.clone());
        for dep in module_depends(&bytes) {
            visit(&dep, index, builtin, read, seen, order, chain)?;
        }
        chain.pop();
        seen.insert(name);
        order.push(path.clone());
        Ok(())
    }
    let mut seen = HashSet::new();
    let mut order = Vec::new();
    for name in wanted {
        visit(
            name,
            index,
            builtin,
            read,
            &mut seen,
            &mut order,
            &mut Vec::new(),
        )?;
    }
    Ok(order)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ko(depends: &str) -> Vec<u8> {
        let mut v = b"\x7fELF....license=GPL\0".to_vec();
        v.extend_from_slice(format!("depends={depends}\0vermagic=6.1\0").as_bytes());
        v
    }

    #[test]
    fn depends_are_parsed_from_modinfo() {
        assert_eq!(
            module_depends(&ko("ib_core,ip6_udp_tunnel")),
            ["ib_core", "ip6_udp_tunnel"]
        );
        assert!(module_depends(&ko("")).is_empty());
        // "xdepends=" inside another string is not the key.
        assert!(module_depends(b"\0xdepends=foo\0").is_empty());
    }

    #[test]
    fn order_puts_dependencies_first_and_skips_builtins() {
        let mut index = BTreeMap::new();
        for n in ["rdma_rxe", "ib_core", "udp_tunnel", "ib_uverbs"] {
            index.insert(n.to_string(), PathBuf::from(format!("/{n}.ko")));
        }
        let builtin: HashSet<String> = ["crc32c".to_string()].into_iter().collect();
        let read = |p: &Path| -> std::io::Result<Vec<u8>> {
            Ok(match p.to_str().unwrap() {
                "/rdma_rxe.ko" => ko("ib_core,udp-tunnel,ib_uverbs,crc32c"),
                "/ib_uverbs.ko" => ko("ib_core"),
                _ => ko(""),
            })
        };
        let order = load_order(&["rdma_rxe"], &index, &builtin, &read).unwrap();
        let names: Vec<_> = order.iter().map(|p| p.to_str().unwrap()).collect();
        assert_eq!(
            names,
            [
                "/ib_core.ko",
                "/udp_tunnel.ko",
                "/ib_uverbs.ko",
                "/rdma_rxe.ko"
            ]
        );
    }

    #[test]
    fn missing_module_names_the_chain() {
        let mut index = BTreeMap::new();
        index.insert("a".to_string(), PathBuf::from("/a.ko"));
        let read = |_: &Path| -> std::io::Result<Vec<u8>> { Ok(ko("b")) };
        let err = load_order(&["a"], &index, &HashSet::new(), &read).unwrap_err();
        assert!(err.to_string().contains("b is neither"), "{err}");
        assert!(err.to_string().contains("needed by a"), "{err}");
    }
}
