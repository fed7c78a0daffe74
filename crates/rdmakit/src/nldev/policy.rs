//! The one nldev attribute policy: attribute number -> name and expected type, and the
//! validated attribute set every parser reads from.
//!
//! Rules (iproute2's `rd_attr_cb` habit, made strict on lengths):
//! - unknown attribute numbers (newer kernels) are skipped, never an error;
//! - a known attribute with the wrong length for its type, or a string without its NUL,
//!   is rejected with the command, attribute and device in the error;
//! - required attributes are checked by the parsers through [`AttrSet::required`];
//! - attribute 0 (UNSPEC / PAD before 64-bit values) is skipped.
//!
//! Nothing here panics on any input: every slice is bounds-checked by netlink-packet-core's
//! `NlasIterator` or by explicit length checks.

use super::error::{ParseError, ParseErrorKind};
use super::ids::attr as a;
use netlink_packet_core::{NlasIterator, NLA_TYPE_MASK};

/// The wire type of an attribute value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttrType {
    /// Exactly 1 byte.
    U8,
    /// Exactly 4 bytes, host order.
    U32,
    /// Exactly 8 bytes, host order.
    U64,
    /// A NUL-terminated string (at least the NUL).
    NulString,
    /// A stream of attributes.
    Nested,
    /// Any bytes.
    Binary,
}

/// One row of the policy table.
#[derive(Debug, Clone, Copy)]
pub struct AttrPolicy {
    /// Attribute number.
    pub id: u16,
    /// The uapi name without the `RDMA_NLDEV_ATTR_` prefix.
    pub name: &'static str,
    /// Expected type.
    pub ty: AttrType,
}

macro_rules! policy {
    ($($id:ident : $ty:ident),* $(,)?) => {
        /// The policy table, in attribute number order.
        pub const POLICY: &[AttrPolicy] = &[
            $(AttrPolicy { id: a::$id, name: stringify!($id), ty: AttrType::$ty },)*
        ];
    };
}

policy! {
    DEV_INDEX: U32, DEV_NAME: NulString, PORT_INDEX: U32, CAP_FLAGS: U64,
    FW_VERSION: NulString, NODE_GUID: U64, SYS_IMAGE_GUID: U64, SUBNET_PREFIX: U64,
    LID: U32, SM_LID: U32, LMC: U8, PORT_STATE: U8, PORT_PHYS_STATE: U8, DEV_NODE_TYPE: U8,
    RES_SUMMARY: Nested, RES_SUMMARY_ENTRY: Nested, RES_SUMMARY_ENTRY_NAME: NulString,
    RES_SUMMARY_ENTRY_CURR: U64, RES_QP: Nested, RES_QP_ENTRY: Nested, RES_LQPN: U32,
    RES_RQPN: U32, RES_RQ_PSN: U32, RES_SQ_PSN: U32, RES_PATH_MIG_STATE: U8, RES_TYPE: U8,
    RES_STATE: U8, RES_PID: U32, RES_KERN_NAME: NulString, RES_CM_ID: Nested,
    RES_CM_ID_ENTRY: Nested, RES_PS: U32, RES_SRC_ADDR: Binary, RES_DST_ADDR: Binary,
    RES_CQ: Nested, RES_CQ_ENTRY: Nested, RES_CQE: U32, RES_USECNT: U64, RES_POLL_CTX: U8,
    RES_MR: Nested, RES_MR_ENTRY: Nested, RES_RKEY: U32, RES_LKEY: U32, RES_IOVA: U64,
    RES_MRLEN: U64, RES_PD: Nested, RES_PD_ENTRY: Nested, RES_LOCAL_DMA_LKEY: U32,
    RES_UNSAFE_GLOBAL_RKEY: U32, NDEV_INDEX: U32, NDEV_NAME: NulString, DRIVER: Nested,
    DRIVER_ENTRY: Nested, DRIVER_STRING: NulString, DRIVER_PRINT_TYPE: U8, DRIVER_S32: U32,
    DRIVER_U32: U32, DRIVER_S64: U64, DRIVER_U64: U64, RES_PDN: U32, RES_CQN: U32,
    RES_MRN: U32, RES_CM_IDN: U32, RES_CTXN: U32, LINK_TYPE: NulString, SYS_NETNS_MODE: U8,
    DEV_PROTOCOL: NulString, NET_NS_FD: U32, CHARDEV_TYPE: NulString, CHARDEV_NAME: NulString,
    CHARDEV_ABI: U64, CHARDEV: U64, UVERBS_DRIVER_ID: U64, STAT_MODE: U32, STAT_RES: U32,
    STAT_AUTO_MODE_MASK: U32, STAT_COUNTER: Nested, STAT_COUNTER_ENTRY: Nested,
    STAT_COUNTER_ID: U32, STAT_HWCOUNTERS: Nested, STAT_HWCOUNTER_ENTRY: Nested,
    STAT_HWCOUNTER_ENTRY_NAME: NulString, STAT_HWCOUNTER_ENTRY_VALUE: U64, DEV_DIM: U8,
    RES_RAW: Binary, RES_CTX: Nested, RES_CTX_ENTRY: Nested, RES_SRQ: Nested,
    RES_SRQ_ENTRY: Nested, RES_SRQN: U32, MIN_RANGE: U32, MAX_RANGE: U32,
    SYS_COPY_ON_FORK: U8, STAT_HWCOUNTER_INDEX: U32, STAT_HWCOUNTER_DYNAMIC: U8,
    SYS_PRIVILEGED_QKEY_MODE: U8, DRIVER_DETAILS: U8, RES_SUBTYPE: NulString, DEV_TYPE: U8,
    PARENT_NAME: NulString, NAME_ASSIGN_TYPE: U8, EVENT_TYPE: U8, SYS_MONITOR_MODE: U8,
}

/// The policy row of an attribute number, `None` for unknown numbers (and for PAD).
pub fn lookup(id: u16) -> Option<&'static AttrPolicy> {
    POLICY.iter().find(|p| p.id == id)
}

/// The uapi name of an attribute (`RES_LQPN`), `None` when unknown.
pub fn attr_name(id: u16) -> Option<&'static str> {
    if id == a::PAD {
        return Some("PAD");
    }
    lookup(id).map(|p| p.name)
}

/// Where a parse happens: the command and, once known, the device name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ctx {
    /// The nldev command of the message.
    pub command: Option<u8>,
    /// The device, once its name is known.
    pub device: Option<String>,
}

impl Ctx {
    /// A context for `command`.
    pub fn new(command: u8) -> Ctx {
        Ctx {
            command: Some(command),
            device: None,
        }
    }

    /// An error about attribute `attr`.
    pub fn err(&self, attr: Option<u16>, kind: ParseErrorKind) -> ParseError {
        ParseError {
            command: self.command,
            attr,
            device: self.device.clone(),
            kind,
        }
    }
}

/// Validated attributes of one message or one nested entry, in wire order.
///
/// Every value in the set has passed the policy: getters never fail on type, only on absence.
#[derive(Debug, Clone)]
pub struct AttrSet<'a> {
    items: Vec<(u16, &'a [u8])>,
    ctx: Ctx,
}

impl<'a> AttrSet<'a> {
    /// Validate an attribute stream against the policy. Unknown and PAD attributes are skipped.
    pub fn parse(buf: &'a [u8], ctx: &Ctx) -> Result<AttrSet<'a>, ParseError> {
        let mut raw_items = Vec::new();
        for nla in NlasIterator::new(buf) {
            let nla = nla.map_err(|e| ctx.err(None, ParseErrorKind::Framing(e.to_string())))?;
            let id = nla.kind() & NLA_TYPE_MASK;
            let len = nla.value().len();
            // `value()` is bounded by the checked length, so this slice is in range.
            let value: &'a [u8] = nla.into_inner().get(4..4 + len).unwrap_or(&[]);
            raw_items.push((id, value));
        }
        let mut ctx = ctx.clone();
        if ctx.device.is_none() {
            // Name the device in every error of this message, even one met before DEV_NAME.
            if let Some((_, v)) = raw_items.iter().find(|(id, _)| *id == a::DEV_NAME) {
                if let Some(end) = v.iter().position(|b| *b == 0) {
                    ctx.device = Some(String::from_utf8_lossy(&v[..end]).into_owned());
                }
            }
        }
        let mut items = Vec::with_capacity(raw_items.len());
        for (id, value) in raw_items {
            let Some(policy) = lookup(id) else {
                continue;
            };
            check(policy, value).map_err(|kind| ctx.err(Some(id), kind))?;
            items.push((id, value));
        }
        Ok(AttrSet { items, ctx })
    }

    /// The context (command, device) errors from this set carry.
    pub fn ctx(&self) -> &Ctx {
        &self.ctx
    }

    /// Raw value of the last occurrence of `id`.
    pub fn raw(&self, id: u16) -> Option<&'a [u8]> {
        self.items
            .iter()
            .rev()
            .find(|(k, _)| *k == id)
            .map(|(_, v)| *v)
    }

    /// True when `id` is present.
    pub fn has(&self, id: u16) -> bool {
        self.raw(id).is_some()
    }

    /// A u8 attribute.
    pub fn u8(&self, id: u16) -> Option<u8> {
        self.raw(id).and_then(|v| v.first().copied())
    }

    /// A u32 attribute.
    pub fn u32(&self, id: u16) -> Option<u32> {
        self.raw(id)
            .and_then(|v| <[u8; 4]>::try_from(v).ok())
            .map(u32::from_ne_bytes)
    }

    /// A u64 attribute.
    pub fn u64(&self, id: u16) -> Option<u64> {
        self.raw(id)
            .and_then(|v| <[u8; 8]>::try_from(v).ok())
            .map(u64::from_ne_bytes)
    }

    /// A string attribute, up to its first NUL (invalid UTF-8 is replaced, not rejected).
    pub fn str(&self, id: u16) -> Option<String> {
        self.raw(id).map(|v| {
            let end = v.iter().position(|b| *b == 0).unwrap_or(v.len());
            String::from_utf8_lossy(&v[..end]).into_owned()
        })
    }

    /// A required attribute: `get(self, id)` or a `Missing` error naming it.
    pub fn required<T>(
        &self,
        id: u16,
        get: impl Fn(&Self, u16) -> Option<T>,
    ) -> Result<T, ParseError> {
        get(self, id).ok_or_else(|| self.ctx.err(Some(id), ParseErrorKind::Missing))
    }

    /// The entries of a nested table `table` (each an attribute of any number, usually the
    /// matching `*_ENTRY`), each parsed as its own set. An absent table gives no entries.
    pub fn table(&self, table: u16) -> Result<Vec<AttrSet<'a>>, ParseError> {
        let Some(body) = self.raw(table) else {
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        for nla in NlasIterator::new(body) {
            let nla = nla.map_err(|e| {
                self.ctx
                    .err(Some(table), ParseErrorKind::BadNested(e.to_string()))
            })?;
            let value = nla.value();
            let value: &'a [u8] = nla.into_inner().get(4..4 + value.len()).unwrap_or(&[]);
            out.push(AttrSet::parse(value, &self.ctx)?);
        }
        Ok(out)
    }
}

/// Check one value against its policy row.
fn check(policy: &AttrPolicy, value: &[u8]) -> Result<(), ParseErrorKind> {
    let exact = |expected: usize| {
        if value.len() == expected {
            Ok(())
        } else {
            Err(ParseErrorKind::WrongLength {
                expected,
                found: value.len(),
            })
        }
    };
    match policy.ty {
        AttrType::U8 => exact(1),
        AttrType::U32 => exact(4),
        AttrType::U64 => exact(8),
        AttrType::NulString => {
            if value.last() == Some(&0) {
                Ok(())
            } else {
                Err(ParseErrorKind::NotNulTerminated)
            }
        }
        AttrType::Nested => {
            for nla in NlasIterator::new(value) {
                nla.map_err(|e| ParseErrorKind::BadNested(e.to_string()))?;
            }
            Ok(())
        }
        AttrType::Binary => Ok(()),
    }
}
