//! Port attributes ([`Context::query_port`]): raw `ibv_port_attr` fields read as integers and
//! turned into typed codes plus the human strings `ibv_devinfo -v` prints.
//!
//! sideway's `PortAttr` accessors panic on unknown MTU/state/width/speed codes, so the raw
//! struct is read here instead.
use crate::codes::{LinkLayer, Mtu, PhysState, PortState};
use crate::device::Context;
use crate::error::{errno_of, VerbsError};
use rdma_mummy_sys::{ibv_port_attr, ibv_query_port};
use std::mem::MaybeUninit;

/// Attributes of one port.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct PortAttr {
    /// Port number (from 1).
    pub port: u8,
    /// Logical state.
    pub state: PortState,
    /// Physical state.
    pub phys_state: PhysState,
    /// Largest MTU the port supports.
    pub max_mtu: Mtu,
    /// MTU in use.
    pub active_mtu: Mtu,
    /// Base LID (0 on Ethernet).
    pub lid: u16,
    /// LID of the subnet manager (0 on Ethernet).
    pub sm_lid: u16,
    /// LID mask control.
    pub lmc: u8,
    /// SL of the subnet manager.
    pub sm_sl: u8,
    /// Link layer.
    pub link_layer: LinkLayer,
    /// GID table length.
    pub gid_tbl_len: u32,
    /// P_Key table length.
    pub pkey_tbl_len: u16,
    /// Largest message, bytes.
    pub max_msg_sz: u32,
    /// `IBV_PORT_*` capability bits.
    pub port_cap_flags: u32,
    /// `IBV_PORT_*2` capability bits.
    pub port_cap_flags2: u16,
    /// Raw active width code (1, 2, 4, 8, 16).
    pub active_width_code: u8,
    /// Active width as `ibv_devinfo` prints it (`1X`, `4X`...); `None` for unknown codes.
    pub active_width: Option<&'static str>,
    /// Raw active speed code (1, 2, 4, ... 128; 0 when `active_speed_ex` is used).
    pub active_speed_code: u8,
    /// Active speed per lane as `ibv_devinfo` prints it (`25.0 Gbps`); `None` when unknown.
    pub active_speed: Option<&'static str>,
    /// Extended speed code (XDR and later), 0 when unused.
    pub active_speed_ex: u32,
    /// Max virtual lanes code.
    pub max_vl_num: u8,
    /// Subnet timeout.
    pub subnet_timeout: u8,
    /// P_Key violations counter.
    pub bad_pkey_cntr: u32,
    /// Q_Key violations counter.
    pub qkey_viol_cntr: u32,
}

/// `ibv_devinfo`'s width string for a width code, e.g. `1X`.
pub fn width_name(code: u8) -> Option<&'static str> {
    match code {
        1 => Some("1X"),
        2 => Some("4X"),
        4 => Some("8X"),
        8 => Some("12X"),
        16 => Some("2X"),
        _ => None,
    }
}

/// `ibv_devinfo`'s per-lane speed string for a speed code, e.g. `25.0 Gbps`.
pub fn speed_name(code: u8) -> Option<&'static str> {
    match code {
        1 => Some("2.5 Gbps"),
        2 => Some("5.0 Gbps"),
        4 | 8 => Some("10.0 Gbps"),
        16 => Some("14.0 Gbps"),
        32 => Some("25.0 Gbps"),
        64 => Some("50.0 Gbps"),
        128 => Some("100.0 Gbps"),
        _ => None,
    }
}

impl PortAttr {
    pub(crate) fn from_raw(port: u8, a: &ibv_port_attr) -> Self {
        PortAttr {
            port,
            state: PortState::from_raw(a.state),
            phys_state: PhysState::from_raw(a.phys_state),
            max_mtu: Mtu::from_raw(a.max_mtu),
            active_mtu: Mtu::from_raw(a.active_mtu),
            lid: a.lid,
            sm_lid: a.sm_lid,
            lmc: a.lmc,
            sm_sl: a.sm_sl,
            link_layer: LinkLayer::from_raw(a.link_layer),
            gid_tbl_len: u32::try_from(a.gid_tbl_len).unwrap_or(0),
            pkey_tbl_len: a.pkey_tbl_len,
            max_msg_sz: a.max_msg_sz,
            port_cap_flags: a.port_cap_flags,
            port_cap_flags2: a.port_cap_flags2,
            active_width_code: a.active_width,
            active_width: width_name(a.active_width),
            active_speed_code: a.active_speed,
            active_speed: speed_name(a.active_speed),
            active_speed_ex: a.active_speed_ex,
            max_vl_num: a.max_vl_num,
            subnet_timeout: a.subnet_timeout,
            bad_pkey_cntr: a.bad_pkey_cntr,
            qkey_viol_cntr: a.qkey_viol_cntr,
        }
    }
}

impl Context {
    /// Attributes of port `port` (numbered from 1).
    pub fn query_port(&self, port: u8) -> Result<PortAttr, VerbsError> {
        if port == 0 {
            return Err(VerbsError::InvalidArgument(format!(
                "{}: ports are numbered from 1",
                self.name()
            )));
        }
        let mut attr = MaybeUninit::<ibv_port_attr>::zeroed();
        // SAFETY: the context is open and `attr` points to a zeroed ibv_port_attr of the size
        // the wrapper passes to the provider.
        let ret = unsafe { ibv_query_port(self.raw(), port, attr.as_mut_ptr()) };
        if ret != 0 {
            return Err(VerbsError::Call {
                op: "ibv_query_port",
                object: format!("{} port {port}", self.name()),
                source: errno_of(ret.into()),
            });
        }
        // SAFETY: every field is an integer (enums are bound as integer types); zeroed, then
        // filled by the call.
        let raw = unsafe { attr.assume_init() };
        let parsed = PortAttr::from_raw(port, &raw);
        if raw.gid_tbl_len < 0 {
            return Err(VerbsError::InvalidValue {
                op: "ibv_query_port",
                object: format!("{} port {port}", self.name()),
                field: "gid_tbl_len",
                value: raw.gid_tbl_len.into(),
            });
        }
        Ok(parsed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zeroed() -> ibv_port_attr {
        // SAFETY: ibv_port_attr is plain integers; all-zero is a valid value.
        unsafe { MaybeUninit::<ibv_port_attr>::zeroed().assume_init() }
    }

    #[test]
    fn rxe_like_port_decodes() {
        let mut a = zeroed();
        a.state = 4;
        a.phys_state = 5;
        a.max_mtu = 5;
        a.active_mtu = 3;
        a.link_layer = 2;
        a.gid_tbl_len = 1024;
        a.active_width = 1;
        a.active_speed = 1;
        let p = PortAttr::from_raw(1, &a);
        assert_eq!(p.state, PortState::Active);
        assert_eq!(p.phys_state, PhysState::LinkUp);
        assert_eq!(p.max_mtu.bytes(), Some(4096));
        assert_eq!(p.active_mtu, Mtu::Mtu1024);
        assert_eq!(p.link_layer, LinkLayer::Ethernet);
        assert_eq!(p.gid_tbl_len, 1024);
        assert_eq!(p.active_width, Some("1X"));
        assert_eq!(p.active_speed, Some("2.5 Gbps"));
    }

    #[test]
    fn garbage_codes_decode_without_panicking() {
        let mut a = zeroed();
        a.state = 99;
        a.phys_state = 200;
        a.max_mtu = 42;
        a.active_mtu = 0;
        a.link_layer = 9;
        a.active_width = 3;
        a.active_speed = 3;
        let p = PortAttr::from_raw(2, &a);
        assert_eq!(p.state, PortState::Unknown(99));
        assert_eq!(p.phys_state, PhysState::Unknown(200));
        assert_eq!(p.max_mtu, Mtu::Unknown(42));
        assert_eq!(p.link_layer, LinkLayer::Unknown(9));
        assert_eq!(p.active_width, None);
        assert_eq!(p.active_speed, None);
        let json = serde_json::to_value(&p).unwrap();
        assert_eq!(json["state"], "unknown (99)");
        assert_eq!(json["active_width_code"], 3);
    }

    #[test]
    fn speeds_match_ibv_devinfo() {
        assert_eq!(speed_name(4), speed_name(8));
        assert_eq!(speed_name(32), Some("25.0 Gbps"));
        assert_eq!(speed_name(0), None);
        assert_eq!(width_name(16), Some("2X"));
    }
}
