//! Every numeric code the verbs API hands back, as a typed enum with an `Unknown(raw)` catch-all.
//!
//! sideway converts these with `panic!` on values it does not know; here conversion is total:
//! `from_raw` never fails, `raw()` gives the code back, `name()` is the rdma-core spelling.
//! All of them serialize as their display string (`"ACTIVE"`, `"unknown (9)"`). Declared with
//! rdma-uapi's `code_names!` (the shape with a catch-all), as rdmakit declares its own.
use rdma_mummy_sys::{
    ibv_atomic_cap, ibv_mtu, ibv_node_type, ibv_port_state, ibv_qp_state, ibv_transport_type,
    ibv_wc_opcode, ibv_wc_status,
};

// The state names are declared once, in rdma-uapi (shared with the nldev parsers and the tracer).
use rdma_uapi::{PHYS_STATE_NAMES as PHYS, PORT_STATE_VERBS_NAMES as PORT, QP_STATE_NAMES as QP};

rdma_uapi::code_names! {
    /// What kind of node a device is (`ibv_node_type`).
    pub enum NodeType: i32 {
        /// InfiniBand channel adapter (also RoCE and Soft-RoCE devices).
        Ca = ibv_node_type::IBV_NODE_CA => "CA",
        /// Switch.
        Switch = ibv_node_type::IBV_NODE_SWITCH => "SWITCH",
        /// Router.
        Router = ibv_node_type::IBV_NODE_ROUTER => "ROUTER",
        /// iWARP NIC.
        Rnic = ibv_node_type::IBV_NODE_RNIC => "RNIC",
        /// Cisco usNIC.
        Usnic = ibv_node_type::IBV_NODE_USNIC => "USNIC",
        /// Cisco usNIC over UDP.
        UsnicUdp = ibv_node_type::IBV_NODE_USNIC_UDP => "USNIC_UDP",
        /// Unspecified.
        Unspecified = ibv_node_type::IBV_NODE_UNSPECIFIED => "UNSPECIFIED",
    }
}

rdma_uapi::code_names! {
    /// The transport of a device (`ibv_transport_type`). RoCE and Soft-RoCE report InfiniBand.
    pub enum Transport: i32 {
        /// InfiniBand transport (IB, RoCE, rxe).
        InfiniBand = ibv_transport_type::IBV_TRANSPORT_IB => "InfiniBand",
        /// iWARP.
        Iwarp = ibv_transport_type::IBV_TRANSPORT_IWARP => "iWARP",
        /// usNIC.
        Usnic = ibv_transport_type::IBV_TRANSPORT_USNIC => "usNIC",
        /// usNIC UDP.
        UsnicUdp = ibv_transport_type::IBV_TRANSPORT_USNIC_UDP => "usNIC UDP",
        /// Unspecified.
        Unspecified = ibv_transport_type::IBV_TRANSPORT_UNSPECIFIED => "unspecified",
    }
}

rdma_uapi::code_names! {
    /// Logical port state (`ibv_port_state`).
    pub enum PortState: u32 {
        /// No state change.
        Nop = ibv_port_state::IBV_PORT_NOP => PORT[0],
        /// Link down.
        Down = ibv_port_state::IBV_PORT_DOWN => PORT[1],
        /// Link up, not yet configured by the subnet manager.
        Init = ibv_port_state::IBV_PORT_INIT => PORT[2],
        /// Configured, only SMPs may flow.
        Armed = ibv_port_state::IBV_PORT_ARMED => PORT[3],
        /// Ready for traffic.
        Active = ibv_port_state::IBV_PORT_ACTIVE => PORT[4],
        /// Active, deferring.
        ActiveDefer = ibv_port_state::IBV_PORT_ACTIVE_DEFER => PORT[5],
    }
}

rdma_uapi::code_names! {
    /// Physical port state (`phys_state`, IBTA PortPhysicalState).
    pub enum PhysState: u8 {
        /// Sleep.
        Sleep = 1 => PHYS[0],
        /// Polling for a peer.
        Polling = 2 => PHYS[1],
        /// Disabled.
        Disabled = 3 => PHYS[2],
        /// Link training.
        PortConfigurationTraining = 4 => PHYS[3],
        /// Link up.
        LinkUp = 5 => PHYS[4],
        /// Link error recovery.
        LinkErrorRecovery = 6 => PHYS[5],
        /// PHY test.
        PhyTest = 7 => PHYS[6],
    }
}

rdma_uapi::code_names! {
    /// An IB MTU code (`ibv_mtu`): the RDMA payload size per packet.
    pub enum Mtu: u32 {
        /// 256 bytes.
        Mtu256 = ibv_mtu::IBV_MTU_256 => "256",
        /// 512 bytes.
        Mtu512 = ibv_mtu::IBV_MTU_512 => "512",
        /// 1024 bytes.
        Mtu1024 = ibv_mtu::IBV_MTU_1024 => "1024",
        /// 2048 bytes.
        Mtu2048 = ibv_mtu::IBV_MTU_2048 => "2048",
        /// 4096 bytes.
        Mtu4096 = ibv_mtu::IBV_MTU_4096 => "4096",
    }
}

impl Mtu {
    /// The MTU in bytes, `None` for an unknown code.
    pub fn bytes(self) -> Option<u32> {
        match self {
            Mtu::Unknown(_) => None,
            known => Some(128 << known.raw()),
        }
    }
}

rdma_uapi::code_names! {
    /// Link layer of a port.
    pub enum LinkLayer: u8 {
        /// Not reported (old kernels; means InfiniBand).
        Unspecified = 0 => "Unspecified",
        /// InfiniBand.
        InfiniBand = 1 => "InfiniBand",
        /// Ethernet (RoCE, Soft-RoCE).
        Ethernet = 2 => "Ethernet",
    }
}

rdma_uapi::code_names! {
    /// GID type (`ibv_gid_type`).
    pub enum GidType: u32 {
        /// InfiniBand GID.
        Ib = rdma_mummy_sys::IBV_GID_TYPE_IB => "IB",
        /// RoCE v1 (Ethernet, EtherType 0x8915).
        RoceV1 = rdma_mummy_sys::IBV_GID_TYPE_ROCE_V1 => "RoCE v1",
        /// RoCE v2 (UDP/IP, port 4791).
        RoceV2 = rdma_mummy_sys::IBV_GID_TYPE_ROCE_V2 => "RoCE v2",
    }
}

rdma_uapi::code_names! {
    /// Atomic operation support (`ibv_atomic_cap`).
    pub enum AtomicCap: u32 {
        /// No atomics.
        None = ibv_atomic_cap::IBV_ATOMIC_NONE => "ATOMIC_NONE",
        /// Atomic between QPs of this device only.
        Hca = ibv_atomic_cap::IBV_ATOMIC_HCA => "ATOMIC_HCA",
        /// Atomic against any other device.
        Glob = ibv_atomic_cap::IBV_ATOMIC_GLOB => "ATOMIC_GLOB",
    }
}

rdma_uapi::code_names! {
    /// Queue pair state (`ibv_qp_state`).
    pub enum QpState: u32 {
        /// Just created, or reset.
        Reset = ibv_qp_state::IBV_QPS_RESET => QP[0],
        /// Initialised: port, pkey and access flags set; receives may be posted.
        Init = ibv_qp_state::IBV_QPS_INIT => QP[1],
        /// Ready to receive.
        Rtr = ibv_qp_state::IBV_QPS_RTR => QP[2],
        /// Ready to send.
        Rts = ibv_qp_state::IBV_QPS_RTS => QP[3],
        /// Send queue drained.
        Sqd = ibv_qp_state::IBV_QPS_SQD => QP[4],
        /// Send queue error.
        Sqe = ibv_qp_state::IBV_QPS_SQE => QP[5],
        /// Error: all outstanding work requests are flushed.
        Err = ibv_qp_state::IBV_QPS_ERR => QP[6],
    }
}

rdma_uapi::code_names! {
    /// Work completion status (`ibv_wc_status`): all `IBV_WC_*` values of rdma-core.
    pub enum WcStatus: u32 {
        /// Success.
        Success = ibv_wc_status::IBV_WC_SUCCESS => "SUCCESS",
        /// Local length error: a receive buffer was too small, or a send too long.
        LocLenErr = ibv_wc_status::IBV_WC_LOC_LEN_ERR => "LOC_LEN_ERR",
        /// Local QP operation error.
        LocQpOpErr = ibv_wc_status::IBV_WC_LOC_QP_OP_ERR => "LOC_QP_OP_ERR",
        /// Local EE context operation error.
        LocEecOpErr = ibv_wc_status::IBV_WC_LOC_EEC_OP_ERR => "LOC_EEC_OP_ERR",
        /// Local protection error: an lkey or address outside its MR.
        LocProtErr = ibv_wc_status::IBV_WC_LOC_PROT_ERR => "LOC_PROT_ERR",
        /// Flushed because the QP went to the error state.
        WrFlushErr = ibv_wc_status::IBV_WC_WR_FLUSH_ERR => "WR_FLUSH_ERR",
        /// Memory window bind error.
        MwBindErr = ibv_wc_status::IBV_WC_MW_BIND_ERR => "MW_BIND_ERR",
        /// Bad response.
        BadRespErr = ibv_wc_status::IBV_WC_BAD_RESP_ERR => "BAD_RESP_ERR",
        /// Local access error.
        LocAccessErr = ibv_wc_status::IBV_WC_LOC_ACCESS_ERR => "LOC_ACCESS_ERR",
        /// Remote invalid request.
        RemInvReqErr = ibv_wc_status::IBV_WC_REM_INV_REQ_ERR => "REM_INV_REQ_ERR",
        /// Remote access error: wrong rkey, address or permission on the responder.
        RemAccessErr = ibv_wc_status::IBV_WC_REM_ACCESS_ERR => "REM_ACCESS_ERR",
        /// Remote operation error.
        RemOpErr = ibv_wc_status::IBV_WC_REM_OP_ERR => "REM_OP_ERR",
        /// Transport retry counter exceeded: the peer did not answer.
        RetryExcErr = ibv_wc_status::IBV_WC_RETRY_EXC_ERR => "RETRY_EXC_ERR",
        /// RNR retry counter exceeded: the peer had no receive posted.
        RnrRetryExcErr = ibv_wc_status::IBV_WC_RNR_RETRY_EXC_ERR => "RNR_RETRY_EXC_ERR",
        /// Local RDD violation.
        LocRddViolErr = ibv_wc_status::IBV_WC_LOC_RDD_VIOL_ERR => "LOC_RDD_VIOL_ERR",
        /// Remote invalid RD request.
        RemInvRdReqErr = ibv_wc_status::IBV_WC_REM_INV_RD_REQ_ERR => "REM_INV_RD_REQ_ERR",
        /// Remote aborted.
        RemAbortErr = ibv_wc_status::IBV_WC_REM_ABORT_ERR => "REM_ABORT_ERR",
        /// Invalid EE context number.
        InvEecnErr = ibv_wc_status::IBV_WC_INV_EECN_ERR => "INV_EECN_ERR",
        /// Invalid EE context state.
        InvEecStateErr = ibv_wc_status::IBV_WC_INV_EEC_STATE_ERR => "INV_EEC_STATE_ERR",
        /// Fatal error.
        FatalErr = ibv_wc_status::IBV_WC_FATAL_ERR => "FATAL_ERR",
        /// Response timeout.
        RespTimeoutErr = ibv_wc_status::IBV_WC_RESP_TIMEOUT_ERR => "RESP_TIMEOUT_ERR",
        /// General error.
        GeneralErr = ibv_wc_status::IBV_WC_GENERAL_ERR => "GENERAL_ERR",
        /// Tag matching error.
        TmErr = ibv_wc_status::IBV_WC_TM_ERR => "TM_ERR",
        /// Tag matching rendezvous incomplete.
        TmRndvIncomplete = ibv_wc_status::IBV_WC_TM_RNDV_INCOMPLETE => "TM_RNDV_INCOMPLETE",
    }
}

impl WcStatus {
    /// True for [`WcStatus::Success`].
    pub fn is_success(self) -> bool {
        self == WcStatus::Success
    }

    /// The rdma-core macro name, e.g. `IBV_WC_REM_ACCESS_ERR` (`IBV_WC_<code>` when unknown).
    pub fn ibv_name(self) -> String {
        match self {
            WcStatus::Unknown(raw) => format!("IBV_WC_<{raw}>"),
            known => format!("IBV_WC_{}", known.name()),
        }
    }
}

rdma_uapi::code_names! {
    /// Work completion opcode (`ibv_wc_opcode`). Only valid on successful completions.
    pub enum WcOpcode: u32 {
        /// SEND completed (send side).
        Send = ibv_wc_opcode::IBV_WC_SEND => "SEND",
        /// RDMA WRITE completed.
        RdmaWrite = ibv_wc_opcode::IBV_WC_RDMA_WRITE => "RDMA_WRITE",
        /// RDMA READ completed.
        RdmaRead = ibv_wc_opcode::IBV_WC_RDMA_READ => "RDMA_READ",
        /// Compare and swap completed.
        CompSwap = ibv_wc_opcode::IBV_WC_COMP_SWAP => "COMP_SWAP",
        /// Fetch and add completed.
        FetchAdd = ibv_wc_opcode::IBV_WC_FETCH_ADD => "FETCH_ADD",
        /// Memory window bind completed.
        BindMw = ibv_wc_opcode::IBV_WC_BIND_MW => "BIND_MW",
        /// Local invalidate completed.
        LocalInv = ibv_wc_opcode::IBV_WC_LOCAL_INV => "LOCAL_INV",
        /// TSO send completed.
        Tso = ibv_wc_opcode::IBV_WC_TSO => "TSO",
        /// Flush completed.
        Flush = ibv_wc_opcode::IBV_WC_FLUSH => "FLUSH",
        /// Atomic write completed.
        AtomicWrite = ibv_wc_opcode::IBV_WC_ATOMIC_WRITE => "ATOMIC_WRITE",
        /// A receive consumed an incoming SEND.
        Recv = ibv_wc_opcode::IBV_WC_RECV => "RECV",
        /// A receive consumed an incoming RDMA WRITE with immediate.
        RecvRdmaWithImm = ibv_wc_opcode::IBV_WC_RECV_RDMA_WITH_IMM => "RECV_RDMA_WITH_IMM",
        /// Tag matching: add.
        TmAdd = ibv_wc_opcode::IBV_WC_TM_ADD => "TM_ADD",
        /// Tag matching: delete.
        TmDel = ibv_wc_opcode::IBV_WC_TM_DEL => "TM_DEL",
        /// Tag matching: sync.
        TmSync = ibv_wc_opcode::IBV_WC_TM_SYNC => "TM_SYNC",
        /// Tag matching: receive.
        TmRecv = ibv_wc_opcode::IBV_WC_TM_RECV => "TM_RECV",
        /// Tag matching: no tag.
        TmNoTag = ibv_wc_opcode::IBV_WC_TM_NO_TAG => "TM_NO_TAG",
        /// Driver specific 1.
        Driver1 = ibv_wc_opcode::IBV_WC_DRIVER1 => "DRIVER1",
        /// Driver specific 2.
        Driver2 = ibv_wc_opcode::IBV_WC_DRIVER2 => "DRIVER2",
        /// Driver specific 3.
        Driver3 = ibv_wc_opcode::IBV_WC_DRIVER3 => "DRIVER3",
    }
}

rdma_uapi::code_names! {
    /// Asynchronous event type (`ibv_event_type`).
    pub enum AsyncEventType: u32 {
        /// CQ overrun or CQ error.
        CqErr = 0 => "CQ_ERR",
        /// QP fatal error.
        QpFatal = 1 => "QP_FATAL",
        /// Invalid request on a QP.
        QpReqErr = 2 => "QP_REQ_ERR",
        /// Access violation on a QP.
        QpAccessErr = 3 => "QP_ACCESS_ERR",
        /// Communication established.
        CommEst = 4 => "COMM_EST",
        /// Send queue drained (SQD).
        SqDrained = 5 => "SQ_DRAINED",
        /// Path migrated.
        PathMig = 6 => "PATH_MIG",
        /// Path migration failed.
        PathMigErr = 7 => "PATH_MIG_ERR",
        /// Device fatal: the device must be closed.
        DeviceFatal = 8 => "DEVICE_FATAL",
        /// A port became active.
        PortActive = 9 => "PORT_ACTIVE",
        /// A port left the active state.
        PortErr = 10 => "PORT_ERR",
        /// LID changed.
        LidChange = 11 => "LID_CHANGE",
        /// P_Key table changed.
        PkeyChange = 12 => "PKEY_CHANGE",
        /// Subnet manager changed.
        SmChange = 13 => "SM_CHANGE",
        /// SRQ error.
        SrqErr = 14 => "SRQ_ERR",
        /// SRQ limit reached.
        SrqLimitReached = 15 => "SRQ_LIMIT_REACHED",
        /// Last WQE reached on a QP attached to an SRQ.
        QpLastWqeReached = 16 => "QP_LAST_WQE_REACHED",
        /// Client reregister requested by the SM.
        ClientReregister = 17 => "CLIENT_REREGISTER",
        /// GID table changed.
        GidChange = 18 => "GID_CHANGE",
        /// WQ fatal error.
        WqFatal = 19 => "WQ_FATAL",
        /// Link speed changed.
        DeviceSpeedChange = 20 => "DEVICE_SPEED_CHANGE",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_known_wc_status_round_trips_and_has_a_distinct_name() {
        let mut names = std::collections::HashSet::new();
        for (code, status) in WcStatus::ALL.iter().enumerate() {
            // rdma-core numbers the statuses 0..=23 without gaps.
            assert_eq!(status.raw(), code as u32);
            assert_eq!(WcStatus::from_raw(status.raw()), *status);
            assert!(names.insert(status.name()), "duplicate {}", status.name());
        }
        assert_eq!(WcStatus::ALL.len(), 24);
        assert_eq!(WcStatus::from_raw(10), WcStatus::RemAccessErr);
        assert_eq!(
            WcStatus::from_raw(13).ibv_name(),
            "IBV_WC_RNR_RETRY_EXC_ERR"
        );
    }

    #[test]
    fn state_names_are_rdmakits_for_the_same_codes() {
        use rdma_uapi as uapi;
        assert_eq!(QpState::ALL.len(), uapi::QP_STATE_NAMES.len());
        for s in QpState::ALL {
            assert_eq!(Some(s.name()), uapi::qp_state_name(s.raw()), "{s:?}");
        }
        assert_eq!(QpState::Rts.to_string(), "RTS");
        for s in PortState::ALL {
            let ibta = uapi::port_state_name(s.raw()).expect("known code");
            assert_eq!(s.name(), format!("PORT_{ibta}"), "{s:?}");
        }
        assert_eq!(PortState::Active.to_string(), "PORT_ACTIVE");
        for s in PhysState::ALL {
            assert_eq!(
                Some(s.name()),
                uapi::phys_state_name(s.raw().into()),
                "{s:?}"
            );
        }
    }

    #[test]
    fn unknown_codes_never_panic_and_keep_their_value() {
        assert_eq!(WcStatus::from_raw(999), WcStatus::Unknown(999));
        assert_eq!(WcStatus::Unknown(999).raw(), 999);
        assert_eq!(WcStatus::from_raw(999).to_string(), "unknown (999)");
        assert_eq!(WcOpcode::from_raw(10), WcOpcode::Unknown(10));
        assert_eq!(PortState::from_raw(77).raw(), 77);
        assert_eq!(PhysState::from_raw(0), PhysState::Unknown(0));
        assert_eq!(NodeType::from_raw(-1), NodeType::Unknown(-1));
        assert_eq!(Transport::from_raw(-1).to_string(), "unknown (-1)");
        assert_eq!(QpState::from_raw(7), QpState::Unknown(7));
        assert_eq!(AsyncEventType::from_raw(21), AsyncEventType::Unknown(21));
        assert_eq!(Mtu::from_raw(0).bytes(), None);
    }

    #[test]
    fn wc_opcodes_match_rdma_core() {
        assert_eq!(WcOpcode::from_raw(0), WcOpcode::Send);
        assert_eq!(WcOpcode::from_raw(1), WcOpcode::RdmaWrite);
        assert_eq!(WcOpcode::from_raw(128), WcOpcode::Recv);
        assert_eq!(WcOpcode::from_raw(129), WcOpcode::RecvRdmaWithImm);
        for op in WcOpcode::ALL {
            assert_eq!(WcOpcode::from_raw(op.raw()), *op);
        }
    }

    #[test]
    fn mtu_codes_map_to_bytes() {
        let bytes: Vec<_> = Mtu::ALL.iter().map(|m| m.bytes()).collect();
        assert_eq!(
            bytes,
            vec![Some(256), Some(512), Some(1024), Some(2048), Some(4096)]
        );
        assert_eq!(Mtu::from_raw(3), Mtu::Mtu1024);
    }

    #[test]
    fn codes_serialize_as_their_display_string() {
        let json =
            serde_json::to_string(&(PortState::Active, GidType::RoceV2, PortState::Unknown(9)))
                .unwrap();
        assert_eq!(json, r#"["PORT_ACTIVE","RoCE v2","unknown (9)"]"#);
    }

    #[test]
    fn async_event_codes_match_the_binding_enum() {
        use rdma_mummy_sys::ibv_event_type as E;
        assert_eq!(AsyncEventType::CqErr.raw(), E::IBV_EVENT_CQ_ERR as u32);
        assert_eq!(AsyncEventType::PortErr.raw(), E::IBV_EVENT_PORT_ERR as u32);
        assert_eq!(
            AsyncEventType::GidChange.raw(),
            E::IBV_EVENT_GID_CHANGE as u32
        );
        assert_eq!(
            AsyncEventType::DeviceSpeedChange.raw(),
            E::IBV_EVENT_DEVICE_SPEED_CHANGE as u32
        );
    }
}
