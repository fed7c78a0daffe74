//! The RDMA cgroup controller (cgroup v2): what each cgroup holds of each device
//! (`rdma.current`) and may hold (`rdma.max`).
//!
//! Both files have one line per RDMA device, `<device> hca_handle=<n> hca_object=<n>`, where
//! `rdma.max` says `max` for "no limit" (the kernel's S32_MAX). `hca_handle` counts user
//! contexts (opened devices), `hca_object` every verbs object (PD, CQ, QP, MR, SRQ, AH, ...).
//! The root cgroup has neither file. Everything is read under a root directory
//! (`<sysfs>/fs/cgroup`), so tests run on fixture trees; reads are size-limited and the
//! walk is bounded ([`read_tree`]).

use std::fs;
use std::path::{Path, PathBuf};

/// A resource amount or limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Amount {
    /// A number of handles or objects.
    Count(u64),
    /// No limit (`max`).
    Max,
}

impl Amount {
    /// As a float: `max` is +Inf.
    pub fn as_f64(self) -> f64 {
        match self {
            Amount::Count(n) => n as f64,
            Amount::Max => f64::INFINITY,
        }
    }
}

/// One device's line of an `rdma.current` or `rdma.max` file.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct DeviceLine {
    /// The RDMA device.
    pub device: String,
    /// `(resource, amount)` in file order (`hca_handle`, `hca_object`).
    pub resources: Vec<(String, Amount)>,
}

/// One cgroup's RDMA accounting.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct CgroupRdma {
    /// The cgroup path as /proc/<pid>/cgroup writes it (`/a/b`).
    pub path: String,
    /// `rdma.current`.
    pub current: Vec<DeviceLine>,
    /// `rdma.max`.
    pub max: Vec<DeviceLine>,
}

/// One (device, resource) of a cgroup with its usage and limit.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Usage {
    /// The RDMA device.
    pub device: String,
    /// `hca_handle` or `hca_object`.
    pub resource: String,
    /// In use now.
    pub current: u64,
    /// The limit.
    pub max: Amount,
}

impl Usage {
    /// Whether the next charge would fail.
    pub fn at_limit(&self) -> bool {
        matches!(self.max, Amount::Count(m) if self.current >= m)
    }
}

impl CgroupRdma {
    /// Usage and limit per device and resource (a resource missing from `rdma.max` has no
    /// limit; one missing from `rdma.current` is 0).
    pub fn usage(&self) -> Vec<Usage> {
        let mut out = Vec::new();
        let mut devices: Vec<&str> = self.current.iter().map(|l| l.device.as_str()).collect();
        for l in &self.max {
            if !devices.contains(&l.device.as_str()) {
                devices.push(&l.device);
            }
        }
        for device in devices {
            let find = |lines: &[DeviceLine], res: &str| {
                lines
                    .iter()
                    .find(|l| l.device == device)
                    .and_then(|l| l.resources.iter().find(|(r, _)| r == res))
                    .map(|(_, a)| *a)
            };
            let mut names: Vec<&str> = Vec::new();
            for l in self.current.iter().chain(&self.max) {
                if l.device == device {
                    for (r, _) in &l.resources {
                        if !names.contains(&r.as_str()) {
                            names.push(r);
                        }
                    }
                }
            }
            for res in names {
                let current = match find(&self.current, res) {
                    Some(Amount::Count(n)) => n,
                    _ => 0,
                };
                out.push(Usage {
                    device: device.to_string(),
                    resource: res.to_string(),
                    current,
                    max: find(&self.max, res).unwrap_or(Amount::Max),
                });
            }
        }
        out
    }

    /// Whether anything is in use or limited (the cgroups worth exporting).
    pub fn is_interesting(&self) -> bool {
        self.usage()
            .iter()
            .any(|u| u.current > 0 || u.max != Amount::Max)
    }
}

/// Why the controller could not be read (the error of every file this crate reads).
pub type RdmacgError = crate::file::FileError;

use crate::file::read_small;

/// Whether the cgroup v2 hierarchy at `root` has the rdma controller (its
/// `cgroup.controllers` lists `rdma`). `Ok(false)` when `root` is not a cgroup v2 mount.
pub fn has_controller(root: &Path) -> Result<bool, RdmacgError> {
    let path = root.join("cgroup.controllers");
    match read_small(&path) {
        Ok(text) => Ok(text.split_whitespace().any(|c| c == "rdma")),
        Err(RdmacgError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            Ok(false)
        }
        Err(e) => Err(e),
    }
}

/// Why an `rdma.current` / `rdma.max` file is not understood ([`parse_file`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RdmacgParseError {
    /// A word after the device name is not `NAME=VALUE`.
    #[error("line {line}: {word:?} is not NAME=VALUE")]
    NotNameValue {
        /// The 1-based line number.
        line: usize,
        /// The word as written.
        word: String,
    },
    /// A value is neither a count nor `max`.
    #[error("line {line}: {name}={value:?} is not a number or max")]
    NotAnAmount {
        /// The 1-based line number.
        line: usize,
        /// The resource name.
        name: String,
        /// The value as written.
        value: String,
    },
}

/// Parse an `rdma.current` / `rdma.max` file.
pub fn parse_file(text: &str) -> Result<Vec<DeviceLine>, RdmacgParseError> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let mut words = line.split_whitespace();
        let Some(device) = words.next() else {
            continue;
        };
        let mut resources = Vec::new();
        for word in words {
            let (name, value) =
                word.split_once('=')
                    .ok_or_else(|| RdmacgParseError::NotNameValue {
                        line: n + 1,
                        word: word.to_string(),
                    })?;
            let amount = if value == "max" {
                Amount::Max
            } else {
                Amount::Count(value.parse().map_err(|_| RdmacgParseError::NotAnAmount {
                    line: n + 1,
                    name: name.to_string(),
                    value: value.to_string(),
                })?)
            };
            resources.push((name.to_string(), amount));
        }
        out.push(DeviceLine {
            device: device.to_string(),
            resources,
        });
    }
    Ok(out)
}

fn read_lines(path: &Path) -> Result<Vec<DeviceLine>, RdmacgError> {
    parse_file(&read_small(path)?).map_err(|detail| RdmacgError::Malformed {
        path: path.to_path_buf(),
        detail: detail.to_string(),
    })
}

/// What [`read_tree`] found.
#[derive(Debug, Default)]
pub struct Tree {
    /// Every cgroup below the root with the controller's files, in path order.
    pub cgroups: Vec<CgroupRdma>,
    /// Cgroups not read because the walk reached its bound.
    pub skipped: u64,
    /// Cgroups that vanished or could not be read during the walk (their paths and why).
    pub errors: Vec<String>,
}

impl Tree {
    /// Every (cgroup, device, resource) whose usage has reached its limit.
    pub fn at_limit(&self) -> Vec<(&CgroupRdma, Usage)> {
        self.cgroups
            .iter()
            .flat_map(|c| {
                c.usage()
                    .into_iter()
                    .filter(Usage::at_limit)
                    .map(move |u| (c, u))
            })
            .collect()
    }
}

/// Walk the hierarchy at `root` and read `rdma.current` and `rdma.max` of every cgroup
/// that has them (the root has none), at most `max_cgroups` of them. A cgroup removed
/// during the walk is skipped, not an error.
pub fn read_tree(root: &Path, max_cgroups: usize) -> Result<Tree, RdmacgError> {
    let mut tree = Tree::default();
    let mut stack = vec![PathBuf::new()];
    fs::read_dir(root).map_err(|e| RdmacgError::Io {
        path: root.to_path_buf(),
        source: e,
    })?;
    while let Some(rel) = stack.pop() {
        let dir = root.join(&rel);
        if !rel.as_os_str().is_empty() {
            let current = dir.join("rdma.current");
            if current.exists() {
                if tree.cgroups.len() >= max_cgroups {
                    tree.skipped += 1;
                } else {
                    match (read_lines(&current), read_lines(&dir.join("rdma.max"))) {
                        (Ok(current), Ok(max)) => tree.cgroups.push(CgroupRdma {
                            path: format!("/{}", rel.display()),
                            current,
                            max,
                        }),
                        (Err(e), _) | (_, Err(e)) => {
                            if dir.exists() {
                                tree.errors.push(e.to_string());
                            }
                        }
                    }
                }
            }
        }
        let Ok(entries) = fs::read_dir(&dir) else {
            continue;
        };
        let mut children: Vec<PathBuf> = entries
            .flatten()
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .map(|e| rel.join(e.file_name()))
            .collect();
        // Depth first, children in name order.
        children.sort();
        children.reverse();
        stack.extend(children);
    }
    tree.cgroups.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(tree)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_parse_counts_and_max() {
        let lines =
            parse_file("rxe0 hca_handle=1 hca_object=max \nmlx5_0 hca_handle=0 hca_object=7\n")
                .unwrap();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0].device, "rxe0");
        assert_eq!(
            lines[0].resources,
            vec![
                ("hca_handle".to_string(), Amount::Count(1)),
                ("hca_object".to_string(), Amount::Max)
            ]
        );
        assert_eq!(lines[1].resources[1].1, Amount::Count(7));
        assert!(parse_file("").unwrap().is_empty());
    }

    #[test]
    fn malformed_lines_are_errors() {
        assert!(parse_file("rxe0 hca_handle")
            .unwrap_err()
            .to_string()
            .contains("NAME=VALUE"));
        assert!(parse_file("rxe0 hca_handle=-1")
            .unwrap_err()
            .to_string()
            .contains("line 1"));
    }

    #[test]
    fn usage_pairs_current_with_max() {
        let cg = CgroupRdma {
            path: "/a".into(),
            current: parse_file("rxe0 hca_handle=1 hca_object=4\n").unwrap(),
            max: parse_file("rxe0 hca_handle=max hca_object=4\n").unwrap(),
        };
        let u = cg.usage();
        assert_eq!(u.len(), 2);
        assert!(!u[0].at_limit());
        assert_eq!(u[0].max.as_f64(), f64::INFINITY);
        assert!(u[1].at_limit());
        assert!(cg.is_interesting());
        let idle = CgroupRdma {
            path: "/b".into(),
            current: parse_file("rxe0 hca_handle=0 hca_object=0\n").unwrap(),
            max: parse_file("rxe0 hca_handle=max hca_object=max\n").unwrap(),
        };
        assert!(!idle.is_interesting());
    }
}
