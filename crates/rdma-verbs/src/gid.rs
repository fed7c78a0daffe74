//! The GID table of a port ([`Context::gid_table`]): index, address, type and the netdev a RoCE
//! GID belongs to.
//!
//! Read with `ibv_query_gid_table` (one call for the whole device), falling back to
//! `ibv_query_gid_ex` per index where the kernel lacks the ioctl. sideway's version unwraps and
//! panics on unknown GID types, so it is not used.
use crate::codes::GidType;
use crate::device::Context;
use crate::error::{errno_of, VerbsError};
use rdma_mummy_sys::{ibv_gid_entry, ibv_query_gid_ex, ibv_query_gid_table};
use std::ffi::CStr;
use std::mem::MaybeUninit;
use std::net::Ipv6Addr;

/// One valid GID table entry.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct GidEntry {
    /// Index in the port's table (what a QP's `sgid_index` refers to).
    pub index: u32,
    /// The GID. For RoCE v2 an IPv4 address shows up as `::ffff:a.b.c.d`.
    pub gid: Ipv6Addr,
    /// GID type.
    pub gid_type: GidType,
    /// The network device of a RoCE GID (`None` for IB, or when the interface is gone).
    pub netdev: Option<String>,
}

impl GidEntry {
    /// Build from a raw entry; `None` for an all-zero (unused) GID.
    fn from_raw(e: &ibv_gid_entry) -> Option<Self> {
        // SAFETY: both union members are plain bytes of the same 16-byte storage.
        let raw: [u8; 16] = unsafe { e.gid.raw };
        if raw == [0u8; 16] {
            return None;
        }
        Some(GidEntry {
            index: e.gid_index,
            gid: Ipv6Addr::from(raw),
            gid_type: GidType::from_raw(e.gid_type),
            netdev: ifindex_name(e.ndev_ifindex),
        })
    }

    /// True when the GID is an IPv4-mapped address (`::ffff:a.b.c.d`).
    pub fn is_ipv4_mapped(&self) -> bool {
        self.gid.to_ipv4_mapped().is_some()
    }
}

/// The interface name of an ifindex (`None` for 0 or a vanished interface).
fn ifindex_name(index: u32) -> Option<String> {
    if index == 0 {
        return None;
    }
    let mut buf = [0 as libc::c_char; libc::IF_NAMESIZE];
    // SAFETY: `buf` has IF_NAMESIZE bytes as if_indextoname requires; NULL means no such index.
    let p = unsafe { libc::if_indextoname(index, buf.as_mut_ptr()) };
    if p.is_null() {
        return None;
    }
    // SAFETY: on success if_indextoname wrote a NUL-terminated name into `buf`.
    let name = unsafe { CStr::from_ptr(buf.as_ptr()) };
    Some(name.to_string_lossy().into_owned())
}

fn empty_entry() -> ibv_gid_entry {
    // SAFETY: ibv_gid_entry is plain integers and bytes; all-zero is a valid value.
    unsafe { MaybeUninit::<ibv_gid_entry>::zeroed().assume_init() }
}

impl Context {
    /// The valid (non-zero) GIDs of port `port`, by index.
    pub fn gid_table(&self, port: u8) -> Result<Vec<GidEntry>, VerbsError> {
        let attr = self.query_device()?;
        if port == 0 || port > attr.phys_port_cnt {
            return Err(VerbsError::InvalidArgument(format!(
                "{} has ports 1..={}, not {port}",
                self.name(),
                attr.phys_port_cnt
            )));
        }
        // The table call wants room for every port's entries.
        let mut capacity = 0usize;
        for p in 1..=attr.phys_port_cnt {
            capacity += self.query_port(p)?.gid_tbl_len as usize;
        }
        let mut entries = vec![empty_entry(); capacity];
        // SAFETY: `entries` holds `capacity` writable entries of the size the wrapper passes.
        let ret =
            unsafe { ibv_query_gid_table(self.raw(), entries.as_mut_ptr(), entries.len(), 0) };
        if ret == -(libc::EOPNOTSUPP as isize) {
            return self.gid_table_by_index(port);
        }
        if ret < 0 {
            return Err(VerbsError::Call {
                op: "ibv_query_gid_table",
                object: self.name().to_string(),
                source: errno_of(ret as i64),
            });
        }
        let valid = (ret as usize).min(entries.len());
        let mut out: Vec<GidEntry> = entries[..valid]
            .iter()
            .filter(|e| e.port_num == u32::from(port))
            .filter_map(GidEntry::from_raw)
            .collect();
        out.sort_by_key(|e| e.index);
        Ok(out)
    }

    /// Fallback: one `ibv_query_gid_ex` per index.
    fn gid_table_by_index(&self, port: u8) -> Result<Vec<GidEntry>, VerbsError> {
        let len = self.query_port(port)?.gid_tbl_len;
        let mut out = Vec::new();
        for index in 0..len {
            let mut e = empty_entry();
            // SAFETY: `e` is a valid, writable ibv_gid_entry; the wrapper passes its size.
            let ret = unsafe { ibv_query_gid_ex(self.raw(), port.into(), index, &mut e, 0) };
            match ret {
                0 => out.extend(GidEntry::from_raw(&e)),
                // An unused slot.
                libc::ENODATA => {}
                r => {
                    return Err(VerbsError::Call {
                        op: "ibv_query_gid_ex",
                        object: format!("{} port {port} index {index}", self.name()),
                        source: errno_of(r.into()),
                    })
                }
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rxe_entries_decode() {
        let mut e = empty_entry();
        e.gid.raw = "fe80::5054:ff:fe12:3456"
            .parse::<Ipv6Addr>()
            .unwrap()
            .octets();
        e.gid_index = 0;
        e.port_num = 1;
        e.gid_type = 2;
        let g = GidEntry::from_raw(&e).unwrap();
        assert_eq!(g.gid.to_string(), "fe80::5054:ff:fe12:3456");
        assert_eq!(g.gid_type, GidType::RoceV2);
        assert_eq!(g.netdev, None);
        assert!(!g.is_ipv4_mapped());

        e.gid.raw = "::ffff:10.0.2.15".parse::<Ipv6Addr>().unwrap().octets();
        e.gid_index = 1;
        e.gid_type = 7;
        let g = GidEntry::from_raw(&e).unwrap();
        assert_eq!(g.gid.to_string(), "::ffff:10.0.2.15");
        assert!(g.is_ipv4_mapped());
        assert_eq!(g.gid_type, GidType::Unknown(7));
    }

    #[test]
    fn zero_gids_are_skipped() {
        assert!(GidEntry::from_raw(&empty_entry()).is_none());
    }

    #[test]
    fn loopback_ifindex_has_a_name_and_zero_has_none() {
        assert_eq!(ifindex_name(0), None);
        assert_eq!(ifindex_name(1).as_deref(), Some("lo"));
        assert_eq!(ifindex_name(u32::MAX), None);
    }
}
