//! Numeric identifiers of the RDMA netlink device interface (nldev): the netlink family, the
//! nldev client number, command numbers, attribute numbers and the value enumerations.
//!
//! Every number here is ABI from `include/uapi/rdma/rdma_netlink.h`. They were checked against
//! the copy of that header shipped by iproute2 v6.1.0 (synced from Linux 6.1, the lab kernel):
//! commands end at `STAT_GET_STATUS` (24) and attributes at `STAT_HWCOUNTER_DYNAMIC` (95) on
//! 6.1. Newer numbers (`NEWDEV` 26 .. `MONITOR` 28, `EVENT_TYPE` 102, the notify multicast
//! group 4) come from later kernels' headers and are marked as such; a 6.1 kernel never sends
//! them.

/// `NETLINK_RDMA`, the netlink protocol number of the RDMA subsystem.
pub const NETLINK_RDMA: isize = 20;
/// `RDMA_NL_NLDEV`, the client number of the device interface inside `NETLINK_RDMA`.
pub const RDMA_NL_NLDEV: u16 = 5;
/// `RDMA_NL_GROUP_NOTIFY`: the multicast group of device events (newer kernels; absent on 6.1).
pub const RDMA_NL_GROUP_NOTIFY: u32 = 4;

/// The netlink message type of an nldev command: `(client << 10) + op`.
pub const fn message_type(command: u8) -> u16 {
    (RDMA_NL_NLDEV << 10) | command as u16
}

/// Split a netlink message type into (client, op); `None` unless it belongs to nldev.
pub const fn command_of(message_type: u16) -> Option<u8> {
    let client = (message_type >> 10) & 0x3f;
    let op = message_type & 0x3ff;
    if client == RDMA_NL_NLDEV && op <= u8::MAX as u16 {
        Some(op as u8)
    } else {
        None
    }
}

/// nldev command numbers (`enum rdma_nldev_command`).
pub mod cmd {
    /// Device attributes; can dump.
    pub const GET: u8 = 1;
    /// Change device attributes (never sent by this crate).
    pub const SET: u8 = 2;
    /// Create a link (`rdma link add`); never sent by this crate.
    pub const NEWLINK: u8 = 3;
    /// Delete a link; never sent by this crate.
    pub const DELLINK: u8 = 4;
    /// Port attributes; can dump (per device).
    pub const PORT_GET: u8 = 5;
    /// System settings (netns mode, copy-on-fork).
    pub const SYS_GET: u8 = 6;
    /// Change system settings; never sent by this crate.
    pub const SYS_SET: u8 = 7;
    /// Resource summary (counts per type); can dump.
    pub const RES_GET: u8 = 9;
    /// Queue pairs; can dump (per device).
    pub const RES_QP_GET: u8 = 10;
    /// RDMA CM identifiers; can dump (per device).
    pub const RES_CM_ID_GET: u8 = 11;
    /// Completion queues; can dump (per device).
    pub const RES_CQ_GET: u8 = 12;
    /// Memory regions; can dump (per device).
    pub const RES_MR_GET: u8 = 13;
    /// Protection domains; can dump (per device).
    pub const RES_PD_GET: u8 = 14;
    /// Character device lookup.
    pub const GET_CHARDEV: u8 = 15;
    /// Change counters (bind, auto mode, optional counters); NEVER sent by this crate.
    pub const STAT_SET: u8 = 16;
    /// Counters: port hw counters (doit), QP counter mode, bound QP counters (dump).
    pub const STAT_GET: u8 = 17;
    /// Unbind QP counters; NEVER sent by this crate.
    pub const STAT_DEL: u8 = 18;
    /// Raw driver QP dump.
    pub const RES_QP_GET_RAW: u8 = 19;
    /// Raw driver CQ dump.
    pub const RES_CQ_GET_RAW: u8 = 20;
    /// Raw driver MR dump.
    pub const RES_MR_GET_RAW: u8 = 21;
    /// User contexts; can dump (per device).
    pub const RES_CTX_GET: u8 = 22;
    /// Shared receive queues; can dump (per device).
    pub const RES_SRQ_GET: u8 = 23;
    /// Optional (dynamic) counters of a port and whether each is enabled.
    pub const STAT_GET_STATUS: u8 = 24;
    /// Raw driver SRQ dump (newer than 6.1).
    pub const RES_SRQ_GET_RAW: u8 = 25;
    /// Create a sub-device (newer than 6.1).
    pub const NEWDEV: u8 = 26;
    /// Delete a sub-device (newer than 6.1).
    pub const DELDEV: u8 = 27;
    /// Event notifications on `RDMA_NL_GROUP_NOTIFY` (newer than 6.1).
    pub const MONITOR: u8 = 28;

    /// The uapi name of a command (`RES_QP_GET`), or `None` when unknown.
    pub fn name(command: u8) -> Option<&'static str> {
        Some(match command {
            GET => "GET",
            SET => "SET",
            NEWLINK => "NEWLINK",
            DELLINK => "DELLINK",
            PORT_GET => "PORT_GET",
            SYS_GET => "SYS_GET",
            SYS_SET => "SYS_SET",
            RES_GET => "RES_GET",
            RES_QP_GET => "RES_QP_GET",
            RES_CM_ID_GET => "RES_CM_ID_GET",
            RES_CQ_GET => "RES_CQ_GET",
            RES_MR_GET => "RES_MR_GET",
            RES_PD_GET => "RES_PD_GET",
            GET_CHARDEV => "GET_CHARDEV",
            STAT_SET => "STAT_SET",
            STAT_GET => "STAT_GET",
            STAT_DEL => "STAT_DEL",
            RES_QP_GET_RAW => "RES_QP_GET_RAW",
            RES_CQ_GET_RAW => "RES_CQ_GET_RAW",
            RES_MR_GET_RAW => "RES_MR_GET_RAW",
            RES_CTX_GET => "RES_CTX_GET",
            RES_SRQ_GET => "RES_SRQ_GET",
            STAT_GET_STATUS => "STAT_GET_STATUS",
            RES_SRQ_GET_RAW => "RES_SRQ_GET_RAW",
            NEWDEV => "NEWDEV",
            DELDEV => "DELDEV",
            MONITOR => "MONITOR",
            _ => return None,
        })
    }
}

/// nldev attribute numbers (`enum rdma_nldev_attr`). 0 is both UNSPEC and the u64 PAD.
pub mod attr {
    /// Padding before 64-bit values (and UNSPEC).
    pub const PAD: u16 = 0;
    /// u32 device index.
    pub const DEV_INDEX: u16 = 1;
    /// NUL-terminated device name.
    pub const DEV_NAME: u16 = 2;
    /// u32 port index (GET: number of ports).
    pub const PORT_INDEX: u16 = 3;
    /// u64 capability flags.
    pub const CAP_FLAGS: u16 = 4;
    /// Firmware version string.
    pub const FW_VERSION: u16 = 5;
    /// u64 node GUID (host order).
    pub const NODE_GUID: u16 = 6;
    /// u64 system image GUID (host order).
    pub const SYS_IMAGE_GUID: u16 = 7;
    /// u64 subnet prefix.
    pub const SUBNET_PREFIX: u16 = 8;
    /// u32 LID.
    pub const LID: u16 = 9;
    /// u32 SM LID.
    pub const SM_LID: u16 = 10;
    /// u8 LID mask control.
    pub const LMC: u16 = 11;
    /// u8 logical port state.
    pub const PORT_STATE: u16 = 12;
    /// u8 physical port state.
    pub const PORT_PHYS_STATE: u16 = 13;
    /// u8 node type.
    pub const DEV_NODE_TYPE: u16 = 14;
    /// Nested resource summary table.
    pub const RES_SUMMARY: u16 = 15;
    /// Nested summary entry.
    pub const RES_SUMMARY_ENTRY: u16 = 16;
    /// Summary entry name.
    pub const RES_SUMMARY_ENTRY_NAME: u16 = 17;
    /// u64 summary entry count.
    pub const RES_SUMMARY_ENTRY_CURR: u16 = 18;
    /// Nested QP table.
    pub const RES_QP: u16 = 19;
    /// Nested QP entry.
    pub const RES_QP_ENTRY: u16 = 20;
    /// u32 local QP number.
    pub const RES_LQPN: u16 = 21;
    /// u32 remote QP number.
    pub const RES_RQPN: u16 = 22;
    /// u32 receive queue PSN.
    pub const RES_RQ_PSN: u16 = 23;
    /// u32 send queue PSN.
    pub const RES_SQ_PSN: u16 = 24;
    /// u8 path migration state.
    pub const RES_PATH_MIG_STATE: u16 = 25;
    /// u8 QP type.
    pub const RES_TYPE: u16 = 26;
    /// u8 QP (or CM ID) state.
    pub const RES_STATE: u16 = 27;
    /// u32 owner process id (user objects only).
    pub const RES_PID: u16 = 28;
    /// Owner kernel module name (kernel objects only).
    pub const RES_KERN_NAME: u16 = 29;
    /// Nested CM ID table.
    pub const RES_CM_ID: u16 = 30;
    /// Nested CM ID entry.
    pub const RES_CM_ID_ENTRY: u16 = 31;
    /// u32 CM port space.
    pub const RES_PS: u16 = 32;
    /// Binary sockaddr_storage, source address.
    pub const RES_SRC_ADDR: u16 = 33;
    /// Binary sockaddr_storage, destination address.
    pub const RES_DST_ADDR: u16 = 34;
    /// Nested CQ table.
    pub const RES_CQ: u16 = 35;
    /// Nested CQ entry.
    pub const RES_CQ_ENTRY: u16 = 36;
    /// u32 CQ size in entries.
    pub const RES_CQE: u16 = 37;
    /// u64 use count.
    pub const RES_USECNT: u16 = 38;
    /// u8 CQ poll context.
    pub const RES_POLL_CTX: u16 = 39;
    /// Nested MR table.
    pub const RES_MR: u16 = 40;
    /// Nested MR entry.
    pub const RES_MR_ENTRY: u16 = 41;
    /// u32 remote key (secret).
    pub const RES_RKEY: u16 = 42;
    /// u32 local key (secret).
    pub const RES_LKEY: u16 = 43;
    /// u64 I/O virtual address (secret).
    pub const RES_IOVA: u16 = 44;
    /// u64 MR length.
    pub const RES_MRLEN: u16 = 45;
    /// Nested PD table.
    pub const RES_PD: u16 = 46;
    /// Nested PD entry.
    pub const RES_PD_ENTRY: u16 = 47;
    /// u32 local DMA lkey (secret).
    pub const RES_LOCAL_DMA_LKEY: u16 = 48;
    /// u32 unsafe global rkey (secret).
    pub const RES_UNSAFE_GLOBAL_RKEY: u16 = 49;
    /// u32 netdev ifindex.
    pub const NDEV_INDEX: u16 = 50;
    /// netdev name.
    pub const NDEV_NAME: u16 = 51;
    /// Nested driver-specific table.
    pub const DRIVER: u16 = 52;
    /// Nested driver-specific entry.
    pub const DRIVER_ENTRY: u16 = 53;
    /// Driver entry name.
    pub const DRIVER_STRING: u16 = 54;
    /// u8 driver print type.
    pub const DRIVER_PRINT_TYPE: u16 = 55;
    /// s32 driver value.
    pub const DRIVER_S32: u16 = 56;
    /// u32 driver value.
    pub const DRIVER_U32: u16 = 57;
    /// s64 driver value.
    pub const DRIVER_S64: u16 = 58;
    /// u64 driver value.
    pub const DRIVER_U64: u16 = 59;
    /// u32 PD number.
    pub const RES_PDN: u16 = 60;
    /// u32 CQ number.
    pub const RES_CQN: u16 = 61;
    /// u32 MR number.
    pub const RES_MRN: u16 = 62;
    /// u32 CM ID number.
    pub const RES_CM_IDN: u16 = 63;
    /// u32 context number.
    pub const RES_CTXN: u16 = 64;
    /// Link type (driver name, e.g. `rxe`).
    pub const LINK_TYPE: u16 = 65;
    /// u8 netns mode.
    pub const SYS_NETNS_MODE: u16 = 66;
    /// Device protocol (`roce`, `ib`, `iw`, ...).
    pub const DEV_PROTOCOL: u16 = 67;
    /// u32 netns fd.
    pub const NET_NS_FD: u16 = 68;
    /// Chardev type.
    pub const CHARDEV_TYPE: u16 = 69;
    /// Chardev name.
    pub const CHARDEV_NAME: u16 = 70;
    /// u64 chardev ABI.
    pub const CHARDEV_ABI: u16 = 71;
    /// u64 chardev dev_t.
    pub const CHARDEV: u16 = 72;
    /// u64 uverbs driver id.
    pub const UVERBS_DRIVER_ID: u16 = 73;
    /// u32 counter mode (none / auto / manual).
    pub const STAT_MODE: u16 = 74;
    /// u32 counter resource (the QP attribute number, 19).
    pub const STAT_RES: u16 = 75;
    /// u32 auto mode mask.
    pub const STAT_AUTO_MODE_MASK: u16 = 76;
    /// Nested bound counter table.
    pub const STAT_COUNTER: u16 = 77;
    /// Nested bound counter entry.
    pub const STAT_COUNTER_ENTRY: u16 = 78;
    /// u32 counter id.
    pub const STAT_COUNTER_ID: u16 = 79;
    /// Nested hw counter table.
    pub const STAT_HWCOUNTERS: u16 = 80;
    /// Nested hw counter entry.
    pub const STAT_HWCOUNTER_ENTRY: u16 = 81;
    /// hw counter name.
    pub const STAT_HWCOUNTER_ENTRY_NAME: u16 = 82;
    /// u64 hw counter value.
    pub const STAT_HWCOUNTER_ENTRY_VALUE: u16 = 83;
    /// u8 adaptive moderation.
    pub const DEV_DIM: u16 = 84;
    /// Binary raw driver data.
    pub const RES_RAW: u16 = 85;
    /// Nested context table.
    pub const RES_CTX: u16 = 86;
    /// Nested context entry.
    pub const RES_CTX_ENTRY: u16 = 87;
    /// Nested SRQ table.
    pub const RES_SRQ: u16 = 88;
    /// Nested SRQ entry.
    pub const RES_SRQ_ENTRY: u16 = 89;
    /// u32 SRQ number.
    pub const RES_SRQN: u16 = 90;
    /// u32 first QP number of a range.
    pub const MIN_RANGE: u16 = 91;
    /// u32 last QP number of a range.
    pub const MAX_RANGE: u16 = 92;
    /// u8 copy-on-fork.
    pub const SYS_COPY_ON_FORK: u16 = 93;
    /// u32 hw counter index (optional counters).
    pub const STAT_HWCOUNTER_INDEX: u16 = 94;
    /// u8 optional counter enabled (1) or disabled (0).
    pub const STAT_HWCOUNTER_DYNAMIC: u16 = 95;
    /// u8 privileged qkey mode (newer than 6.1).
    pub const SYS_PRIVILEGED_QKEY_MODE: u16 = 96;
    /// u8 driver details (newer than 6.1).
    pub const DRIVER_DETAILS: u16 = 97;
    /// QP subtype string (newer than 6.1).
    pub const RES_SUBTYPE: u16 = 98;
    /// u8 device type (newer than 6.1).
    pub const DEV_TYPE: u16 = 99;
    /// Parent device name (newer than 6.1).
    pub const PARENT_NAME: u16 = 100;
    /// u8 name assign type (newer than 6.1).
    pub const NAME_ASSIGN_TYPE: u16 = 101;
    /// u8 monitor event type (newer than 6.1).
    pub const EVENT_TYPE: u16 = 102;
    /// u8 monitor mode (newer than 6.1).
    pub const SYS_MONITOR_MODE: u16 = 103;
}

/// Counter bind modes (`enum rdma_nl_counter_mode`).
pub mod counter_mode {
    /// No automatic or manual binding.
    pub const NONE: u32 = 0;
    /// QPs are bound automatically according to the auto mask.
    pub const AUTO: u32 = 1;
    /// QPs are bound explicitly by the user.
    pub const MANUAL: u32 = 2;
}

/// Auto mode criteria (`enum rdma_nl_counter_mask`).
pub mod counter_mask {
    /// One counter per QP type.
    pub const QP_TYPE: u32 = 1;
    /// One counter per process.
    pub const PID: u32 = 2;
}
