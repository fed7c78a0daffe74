//! Devices: listing them ([`devices`]), opening one ([`open`] -> [`Context`]) and the device
//! attributes ([`Context::query_device`]).
//!
//! Raw rdma-mummy-sys calls, like the rest of the crate: the list comes from
//! `ibv_get_device_list` and is freed on drop; [`open`] opens the named entry with
//! `ibv_open_device` and [`Context`] closes it (`ibv_close_device`) when the last `Arc` goes.
use crate::codes::{AtomicCap, NodeType, Transport};
use crate::error::{errno_of, non_null, VerbsError};
use crate::stack::no_stack_reason;
use rdma_mummy_sys::{
    ibv_close_device, ibv_context, ibv_device, ibv_device_attr, ibv_free_device_list,
    ibv_get_device_guid, ibv_get_device_list, ibv_get_device_name, ibv_open_device,
    ibv_query_device,
};
use std::ffi::{c_char, CStr};
use std::io;
use std::mem::MaybeUninit;
use std::ptr::NonNull;
use std::sync::Arc;

/// A 64-bit GUID in host order; displayed like `ibv_devinfo` (`5054:00ff:fe12:3456`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Guid(pub u64);

impl Guid {
    /// From the big-endian `__be64` the library returns.
    pub(crate) fn from_be(raw: u64) -> Self {
        Guid(u64::from_be(raw))
    }
}

impl std::fmt::Display for Guid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let g = self.0;
        write!(
            f,
            "{:04x}:{:04x}:{:04x}:{:04x}",
            (g >> 48) & 0xffff,
            (g >> 32) & 0xffff,
            (g >> 16) & 0xffff,
            g & 0xffff
        )
    }
}

impl serde::Serialize for Guid {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// One RDMA device as listed by libibverbs.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct DeviceInfo {
    /// Device name, e.g. `rxe0`, `mlx5_0`.
    pub name: String,
    /// Node GUID.
    pub guid: Guid,
    /// Node type (CA for IB, RoCE and rxe).
    pub node_type: NodeType,
    /// Transport (InfiniBand for IB, RoCE and rxe).
    pub transport: Transport,
}

/// The array returned by `ibv_get_device_list`; freed on drop.
struct RawDeviceList {
    list: NonNull<*mut ibv_device>,
    len: usize,
}

impl RawDeviceList {
    fn get() -> Result<Self, VerbsError> {
        let mut num: std::ffi::c_int = 0;
        // SAFETY: `num` is a valid out pointer; the wrapper returns NULL (errno set) when the
        // library is not loaded.
        let list = unsafe { ibv_get_device_list(&mut num) };
        let errno = io::Error::last_os_error().raw_os_error();
        match NonNull::new(list) {
            Some(list) => Ok(RawDeviceList {
                list,
                len: usize::try_from(num).unwrap_or(0),
            }),
            None => match no_stack_reason(errno) {
                Some(reason) => Err(VerbsError::NoRdmaStack { reason }),
                None => Err(VerbsError::Call {
                    op: "ibv_get_device_list",
                    object: "the device list".into(),
                    source: io::Error::from_raw_os_error(errno.unwrap_or(libc::EIO)),
                }),
            },
        }
    }

    /// The non-null device pointers, valid while `self` lives.
    fn devices(&self) -> Vec<*mut ibv_device> {
        (0..self.len)
            .map(|i| {
                // SAFETY: the list has `len` entries followed by a NULL terminator.
                unsafe { *self.list.as_ptr().add(i) }
            })
            .take_while(|dev| !dev.is_null())
            .collect()
    }
}

impl Drop for RawDeviceList {
    fn drop(&mut self) {
        // SAFETY: the pointer came from ibv_get_device_list and is freed exactly once.
        unsafe { ibv_free_device_list(self.list.as_ptr()) };
    }
}

/// Read a C string from a fixed-size or library-owned buffer, lossily.
fn c_chars_to_string(chars: &[c_char]) -> String {
    let bytes: Vec<u8> = chars
        .iter()
        .take_while(|c| **c != 0)
        .map(|c| *c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Describe one device of a live list.
fn describe(dev: *mut ibv_device) -> DeviceInfo {
    // SAFETY: `dev` is a non-null entry of a live device list; the name is a NUL-terminated
    // string owned by the list (or NULL, handled).
    let name = unsafe {
        let p = ibv_get_device_name(dev);
        if p.is_null() {
            String::new()
        } else {
            CStr::from_ptr(p).to_string_lossy().into_owned()
        }
    };
    // SAFETY: as above; the GUID call only reads the device (sysfs on first use).
    let guid = Guid::from_be(unsafe { ibv_get_device_guid(dev) });
    // SAFETY: as above; the two enum fields are plain C ints, read as integers.
    let (node, transport) = unsafe { ((*dev).node_type, (*dev).transport_type) };
    DeviceInfo {
        name,
        guid,
        node_type: NodeType::from_raw(node),
        transport: Transport::from_raw(transport),
    }
}

/// List the RDMA devices. `Ok(vec![])` means a working stack with no device;
/// [`VerbsError::NoRdmaStack`] means no libibverbs or no kernel support.
pub fn devices() -> Result<Vec<DeviceInfo>, VerbsError> {
    let list = RawDeviceList::get()?;
    Ok(list.devices().into_iter().map(describe).collect())
}

/// Open a device by name.
pub fn open(name: &str) -> Result<Arc<Context>, VerbsError> {
    let list = RawDeviceList::get()?;
    let all: Vec<(*mut ibv_device, DeviceInfo)> = list
        .devices()
        .into_iter()
        .map(|dev| (dev, describe(dev)))
        .collect();
    let Some((dev, info)) = all.iter().find(|(_, info)| info.name == name).cloned() else {
        return Err(VerbsError::DeviceNotFound {
            name: name.to_string(),
            available: all.into_iter().map(|(_, info)| info.name).collect(),
        });
    };
    // SAFETY: `dev` is a non-null entry of `list`, which is still alive. The context holds its
    // own reference on the device, so it stays valid after the list is freed below
    // (ibv_get_device_list(3): free the list once the wanted devices are open).
    let ctx = unsafe { ibv_open_device(dev) };
    let ctx = non_null(ctx, "ibv_open_device", || name)?;
    drop(list);
    Ok(Arc::new(Context { info, ctx }))
}

/// An open device. Children (PDs, CQs) hold an `Arc` to it; it closes when the last one goes.
pub struct Context {
    info: DeviceInfo,
    ctx: NonNull<ibv_context>,
}

// SAFETY: libibverbs calls on an ibv_context (query, create/destroy children, async events)
// are thread-safe and not tied to the opening thread; the pointer is owned by this value
// alone and closed once, in Drop.
unsafe impl Send for Context {}
// SAFETY: as above; `&Context` only passes the pointer to those thread-safe calls.
unsafe impl Sync for Context {}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: the context is open and owned by self; every child (PD, CQ) holds an
        // `Arc<Context>`, so none is left when this runs.
        let ret = unsafe { ibv_close_device(self.ctx.as_ptr()) };
        if ret != 0 {
            tracing::warn!(device = %self.info.name, error = %errno_of(ret.into()), "ibv_close_device failed");
        }
    }
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("device", &self.info.name)
            .finish()
    }
}

impl Context {
    /// The device name.
    pub fn name(&self) -> &str {
        &self.info.name
    }

    /// What the device list said about this device.
    pub fn info(&self) -> &DeviceInfo {
        &self.info
    }

    /// The raw `ibv_context`, valid while `self` lives.
    pub(crate) fn raw(&self) -> *mut ibv_context {
        self.ctx.as_ptr()
    }

    /// Device attributes (`ibv_query_device`).
    pub fn query_device(&self) -> Result<DeviceAttr, VerbsError> {
        let mut attr = MaybeUninit::<ibv_device_attr>::zeroed();
        // SAFETY: the context is open; `attr` is a zeroed ibv_device_attr the call fills in.
        let ret = unsafe { ibv_query_device(self.raw(), attr.as_mut_ptr()) };
        if ret != 0 {
            return Err(VerbsError::Call {
                op: "ibv_query_device",
                object: self.info.name.clone(),
                source: errno_of(ret.into()),
            });
        }
        // SAFETY: the struct is plain integers and arrays; zero-initialised, then filled.
        let a = unsafe { attr.assume_init() };
        Ok(DeviceAttr {
            fw_ver: c_chars_to_string(&a.fw_ver),
            node_guid: Guid::from_be(a.node_guid),
            sys_image_guid: Guid::from_be(a.sys_image_guid),
            max_mr_size: a.max_mr_size,
            page_size_cap: a.page_size_cap,
            vendor_id: a.vendor_id,
            vendor_part_id: a.vendor_part_id,
            hw_ver: a.hw_ver,
            max_qp: a.max_qp,
            max_qp_wr: a.max_qp_wr,
            device_cap_flags: a.device_cap_flags,
            max_sge: a.max_sge,
            max_sge_rd: a.max_sge_rd,
            max_cq: a.max_cq,
            max_cqe: a.max_cqe,
            max_mr: a.max_mr,
            max_pd: a.max_pd,
            max_qp_rd_atom: a.max_qp_rd_atom,
            max_res_rd_atom: a.max_res_rd_atom,
            max_qp_init_rd_atom: a.max_qp_init_rd_atom,
            atomic_cap: AtomicCap::from_raw(a.atomic_cap),
            max_mw: a.max_mw,
            max_ah: a.max_ah,
            max_srq: a.max_srq,
            max_srq_wr: a.max_srq_wr,
            max_srq_sge: a.max_srq_sge,
            max_mcast_grp: a.max_mcast_grp,
            max_pkeys: a.max_pkeys,
            local_ca_ack_delay: a.local_ca_ack_delay,
            phys_port_cnt: a.phys_port_cnt,
        })
    }
}

/// Device attributes, as `ibv_devinfo -v` prints them (C `int`s stay `i32`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct DeviceAttr {
    /// Firmware version (empty for rxe).
    pub fw_ver: String,
    /// Node GUID.
    pub node_guid: Guid,
    /// System image GUID.
    pub sys_image_guid: Guid,
    /// Largest MR, bytes.
    pub max_mr_size: u64,
    /// Supported page sizes (bit mask).
    pub page_size_cap: u64,
    /// IEEE vendor id.
    pub vendor_id: u32,
    /// Vendor part id.
    pub vendor_part_id: u32,
    /// Hardware version.
    pub hw_ver: u32,
    /// Max QPs.
    pub max_qp: i32,
    /// Max outstanding WRs per queue.
    pub max_qp_wr: i32,
    /// `IBV_DEVICE_*` capability bits.
    pub device_cap_flags: u32,
    /// Max scatter/gather entries per WR.
    pub max_sge: i32,
    /// Max SGEs per RDMA READ.
    pub max_sge_rd: i32,
    /// Max CQs.
    pub max_cq: i32,
    /// Max entries per CQ.
    pub max_cqe: i32,
    /// Max MRs.
    pub max_mr: i32,
    /// Max PDs.
    pub max_pd: i32,
    /// Max outstanding RDMA READ/atomic per QP as responder.
    pub max_qp_rd_atom: i32,
    /// Max RDMA READ/atomic resources as responder, device wide.
    pub max_res_rd_atom: i32,
    /// Max outstanding RDMA READ/atomic per QP as initiator.
    pub max_qp_init_rd_atom: i32,
    /// Atomic support.
    pub atomic_cap: AtomicCap,
    /// Max memory windows.
    pub max_mw: i32,
    /// Max address handles.
    pub max_ah: i32,
    /// Max SRQs.
    pub max_srq: i32,
    /// Max WRs per SRQ.
    pub max_srq_wr: i32,
    /// Max SGEs per SRQ WR.
    pub max_srq_sge: i32,
    /// Max multicast groups.
    pub max_mcast_grp: i32,
    /// P_Key table size.
    pub max_pkeys: u16,
    /// Local CA ack delay.
    pub local_ca_ack_delay: u8,
    /// Number of physical ports (numbered from 1).
    pub phys_port_cnt: u8,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guid_prints_like_ibv_devinfo() {
        assert_eq!(
            Guid(0x5054_00ff_fe12_3456).to_string(),
            "5054:00ff:fe12:3456"
        );
        // The library hands GUIDs over big-endian.
        assert_eq!(
            Guid::from_be(0x0123_4567_89ab_cdefu64.to_be()).to_string(),
            "0123:4567:89ab:cdef"
        );
    }

    #[test]
    fn c_strings_stop_at_nul_and_survive_bad_utf8() {
        let raw: Vec<c_char> = b"2.1\0junk".iter().map(|b| *b as c_char).collect();
        assert_eq!(c_chars_to_string(&raw), "2.1");
        let bad: Vec<c_char> = [0xffu8, b'x', 0].iter().map(|b| *b as c_char).collect();
        assert_eq!(c_chars_to_string(&bad), "\u{fffd}x");
    }

    #[test]
    fn listing_devices_never_panics_and_no_stack_is_typed() {
        // On a host without RDMA this is NoRdmaStack; in the lab it is a list. Either way it
        // must not panic, and an empty list only happens with a working stack.
        match devices() {
            Ok(list) => {
                for d in &list {
                    assert!(!d.name.is_empty());
                }
            }
            Err(VerbsError::NoRdmaStack { reason }) => {
                assert_eq!(Err(reason), crate::stack_available());
            }
            Err(other) => panic!("unexpected error: {other}"),
        }
    }

    #[test]
    fn opening_a_missing_device_is_a_typed_error() {
        let err = open("no-such-device-0").unwrap_err();
        assert!(err.is_no_rdma(), "{err}");
    }
}
