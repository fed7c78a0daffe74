//! Typed parsers: one nldev message (or one nested entry) in, the types of [`super::types`]
//! out. Each parser checks the attributes iproute2 requires for the same answer and returns
//! a [`ParseError`] naming command, attribute and device; none panics on any input.

use super::error::{ParseError, ParseErrorKind};
use super::ids::{attr as a, cmd};
use super::message::NldevMessage;
use super::policy::{AttrSet, Ctx};
use super::types::*;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

/// Run `f` on the validated top-level attributes of `msg` (which must be one of `expect`).
fn with_attrs<T>(
    msg: &NldevMessage,
    expect: &[u8],
    f: impl FnOnce(&AttrSet<'_>) -> Result<T, ParseError>,
) -> Result<T, ParseError> {
    let ctx = Ctx::new(msg.command);
    if !expect.contains(&msg.command) {
        return Err(ctx.err(
            None,
            ParseErrorKind::BadValue(format!(
                "unexpected command {} (expected {:?})",
                msg.command,
                expect
                    .iter()
                    .map(|c| cmd::name(*c).unwrap_or("?"))
                    .collect::<Vec<_>>()
            )),
        ));
    }
    let bytes = msg.attr_bytes();
    let set = AttrSet::parse(&bytes, &ctx)?;
    f(&set)
}

/// The `(DEV_INDEX, DEV_NAME)` pair every answer carries.
fn device_id(set: &AttrSet<'_>) -> Result<(u32, String), ParseError> {
    Ok((
        set.required(a::DEV_INDEX, AttrSet::u32)?,
        set.required(a::DEV_NAME, AttrSet::str)?,
    ))
}

/// A device from a `GET` answer.
pub fn device(msg: &NldevMessage) -> Result<NlDevice, ParseError> {
    with_attrs(msg, &[cmd::GET], |s| {
        let (index, name) = device_id(s)?;
        Ok(NlDevice {
            index,
            name,
            port_count: s.u32(a::PORT_INDEX),
            cap_flags: s.u64(a::CAP_FLAGS),
            fw_version: s.str(a::FW_VERSION),
            node_guid: s.u64(a::NODE_GUID),
            sys_image_guid: s.u64(a::SYS_IMAGE_GUID),
            node_type: s.u8(a::DEV_NODE_TYPE).map(NodeType),
            dim: s.u8(a::DEV_DIM),
            protocol: s.str(a::DEV_PROTOCOL),
        })
    })
}

/// A port from a `PORT_GET` answer.
pub fn port(msg: &NldevMessage) -> Result<NlPort, ParseError> {
    with_attrs(msg, &[cmd::PORT_GET], |s| {
        let (dev_index, dev_name) = device_id(s)?;
        Ok(NlPort {
            dev_index,
            dev_name,
            port: s.required(a::PORT_INDEX, AttrSet::u32)?,
            cap_flags: s.u64(a::CAP_FLAGS),
            subnet_prefix: s.u64(a::SUBNET_PREFIX),
            lid: s.u32(a::LID),
            sm_lid: s.u32(a::SM_LID),
            lmc: s.u8(a::LMC),
            state: s.u8(a::PORT_STATE).map(PortState),
            phys_state: s.u8(a::PORT_PHYS_STATE).map(PhysState),
            netdev_index: s.u32(a::NDEV_INDEX),
            netdev: s.str(a::NDEV_NAME),
        })
    })
}

/// The entries of a `STAT_HWCOUNTERS` table. `need_value`: each entry must carry a value
/// (a `STAT_GET` answer); `STAT_GET_STATUS` answers carry names, indexes and enabled flags.
fn hw_counters(s: &AttrSet<'_>, need_value: bool) -> Result<Vec<HwCounter>, ParseError> {
    let mut out = Vec::new();
    for e in s.table(a::STAT_HWCOUNTERS)? {
        let name = e.required(a::STAT_HWCOUNTER_ENTRY_NAME, AttrSet::str)?;
        let value = if need_value {
            Some(e.required(a::STAT_HWCOUNTER_ENTRY_VALUE, AttrSet::u64)?)
        } else {
            e.u64(a::STAT_HWCOUNTER_ENTRY_VALUE)
        };
        out.push(HwCounter {
            name,
            value,
            index: e.u32(a::STAT_HWCOUNTER_INDEX),
            enabled: e.u8(a::STAT_HWCOUNTER_DYNAMIC).map(|v| v != 0),
        });
    }
    Ok(out)
}

/// Port hardware counters from a `STAT_GET` (default counter) answer.
pub fn port_counters(msg: &NldevMessage) -> Result<PortHwCounters, ParseError> {
    with_attrs(msg, &[cmd::STAT_GET], |s| {
        let (dev_index, dev_name) = device_id(s)?;
        let port = s.required(a::PORT_INDEX, AttrSet::u32)?;
        s.required(a::STAT_HWCOUNTERS, AttrSet::raw)?;
        Ok(PortHwCounters {
            dev_index,
            dev_name,
            port,
            counters: hw_counters(s, true)?,
        })
    })
}

/// Optional counters and their enabled state from a `STAT_GET_STATUS` answer.
pub fn counter_status(msg: &NldevMessage) -> Result<PortHwCounters, ParseError> {
    with_attrs(msg, &[cmd::STAT_GET_STATUS], |s| {
        let (dev_index, dev_name) = device_id(s)?;
        let port = s.required(a::PORT_INDEX, AttrSet::u32)?;
        Ok(PortHwCounters {
            dev_index,
            dev_name,
            port,
            counters: hw_counters(s, false)?,
        })
    })
}

/// The QP counter mode from a `STAT_GET` (mode query) answer.
pub fn qp_counter_mode(msg: &NldevMessage) -> Result<QpCounterMode, ParseError> {
    with_attrs(msg, &[cmd::STAT_GET], |s| {
        let (dev_index, dev_name) = device_id(s)?;
        let mode = s
            .u32(a::STAT_MODE)
            .unwrap_or(super::ids::counter_mode::NONE);
        let auto_mode_mask = s.u32(a::STAT_AUTO_MODE_MASK);
        if mode == super::ids::counter_mode::AUTO && auto_mode_mask.is_none() {
            return Err(s
                .ctx()
                .err(Some(a::STAT_AUTO_MODE_MASK), ParseErrorKind::Missing));
        }
        Ok(QpCounterMode {
            dev_index,
            dev_name,
            port: s.required(a::PORT_INDEX, AttrSet::u32)?,
            mode,
            auto_mode_mask,
        })
    })
}

/// Bound QP counters from one `STAT_GET` (`STAT_RES` = QP) dump message.
pub fn bound_counters(msg: &NldevMessage) -> Result<Vec<BoundCounter>, ParseError> {
    with_attrs(msg, &[cmd::STAT_GET], |s| {
        let (dev_index, dev_name) = device_id(s)?;
        let mut out = Vec::new();
        for e in s.table(a::STAT_COUNTER)? {
            let counter_id = e.required(a::STAT_COUNTER_ID, AttrSet::u32)?;
            e.required(a::STAT_HWCOUNTERS, AttrSet::raw)?;
            e.required(a::RES_QP, AttrSet::raw)?;
            let mut lqpns = Vec::new();
            for q in e.table(a::RES_QP)? {
                lqpns.push(q.required(a::RES_LQPN, AttrSet::u32)?);
            }
            out.push(BoundCounter {
                dev_index,
                dev_name: dev_name.clone(),
                port: e.u32(a::PORT_INDEX).or_else(|| s.u32(a::PORT_INDEX)),
                counter_id,
                qp_type: e.u8(a::RES_TYPE).map(QpType),
                pid: e.u32(a::RES_PID),
                kern_name: e.str(a::RES_KERN_NAME),
                counters: hw_counters(&e, true)?,
                lqpns,
            });
        }
        Ok(out)
    })
}

/// Resource counts from a `RES_GET` answer.
pub fn resource_summary(msg: &NldevMessage) -> Result<ResourceSummary, ParseError> {
    with_attrs(msg, &[cmd::RES_GET], |s| {
        let (dev_index, dev_name) = device_id(s)?;
        s.required(a::RES_SUMMARY, AttrSet::raw)?;
        let mut counts = Vec::new();
        for e in s.table(a::RES_SUMMARY)? {
            counts.push((
                e.required(a::RES_SUMMARY_ENTRY_NAME, AttrSet::str)?,
                e.required(a::RES_SUMMARY_ENTRY_CURR, AttrSet::u64)?,
            ));
        }
        Ok(ResourceSummary {
            dev_index,
            dev_name,
            counts,
        })
    })
}

fn owner(e: &AttrSet<'_>) -> Owner {
    let kern_name = e.str(a::RES_KERN_NAME);
    Owner {
        pid: e.u32(a::RES_PID),
        comm: kern_name.clone(),
        kern_name,
    }
}

/// Decode a `__kernel_sockaddr_storage` (AF_INET / AF_INET6; others give `None`).
pub fn sockaddr(raw: &[u8], ctx: &Ctx, attr: u16) -> Result<Option<SocketAddr>, ParseError> {
    let bad = |d: &str| ctx.err(Some(attr), ParseErrorKind::BadValue(d.to_string()));
    let Some(family) = raw.get(0..2).map(|b| u16::from_ne_bytes([b[0], b[1]])) else {
        return Err(bad("shorter than a socket address family"));
    };
    let port = |r: &[u8]| r.get(2..4).map(|b| u16::from_be_bytes([b[0], b[1]]));
    match family {
        2 => {
            let (Some(p), Some(ip)) = (port(raw), raw.get(4..8)) else {
                return Err(bad("truncated AF_INET address"));
            };
            let ip = Ipv4Addr::new(ip[0], ip[1], ip[2], ip[3]);
            Ok(Some(SocketAddr::V4(SocketAddrV4::new(ip, p))))
        }
        10 => {
            let (Some(p), Some(flow), Some(ip), Some(scope)) =
                (port(raw), raw.get(4..8), raw.get(8..24), raw.get(24..28))
            else {
                return Err(bad("truncated AF_INET6 address"));
            };
            let mut octets = [0u8; 16];
            octets.copy_from_slice(ip);
            let flow = u32::from_be_bytes([flow[0], flow[1], flow[2], flow[3]]);
            let scope = u32::from_ne_bytes([scope[0], scope[1], scope[2], scope[3]]);
            Ok(Some(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(octets),
                p,
                flow,
                scope,
            ))))
        }
        _ => Ok(None),
    }
}

fn one_resource(
    kind: ResourceKind,
    e: &AttrSet<'_>,
    dev_index: u32,
    dev_name: &str,
) -> Result<Resource, ParseError> {
    let dev_name = dev_name.to_string();
    Ok(match kind {
        ResourceKind::Qp => Resource::Qp(Qp {
            dev_index,
            dev_name,
            port: e.u32(a::PORT_INDEX),
            lqpn: e.required(a::RES_LQPN, AttrSet::u32)?,
            rqpn: e.u32(a::RES_RQPN),
            qp_type: QpType(e.required(a::RES_TYPE, AttrSet::u8)?),
            state: QpState(e.required(a::RES_STATE, AttrSet::u8)?),
            rq_psn: e.u32(a::RES_RQ_PSN),
            sq_psn: e.required(a::RES_SQ_PSN, AttrSet::u32)?,
            path_mig_state: e.u8(a::RES_PATH_MIG_STATE).map(PathMigState),
            pdn: e.u32(a::RES_PDN),
            owner: owner(e),
        }),
        ResourceKind::Cq => Resource::Cq(Cq {
            dev_index,
            dev_name,
            cqn: e.u32(a::RES_CQN),
            cqe: e.required(a::RES_CQE, AttrSet::u32)?,
            users: e.required(a::RES_USECNT, AttrSet::u64)?,
            poll_ctx: e.u8(a::RES_POLL_CTX).map(PollCtx),
            dim: e.u8(a::DEV_DIM),
            ctxn: e.u32(a::RES_CTXN),
            owner: owner(e),
        }),
        ResourceKind::Mr => Resource::Mr(Mr {
            dev_index,
            dev_name,
            mrn: e.u32(a::RES_MRN),
            rkey: e.u32(a::RES_RKEY).map(Secret::new),
            lkey: e.u32(a::RES_LKEY).map(Secret::new),
            iova: e.u64(a::RES_IOVA).map(Secret::new),
            mrlen: e.required(a::RES_MRLEN, AttrSet::u64)?,
            pdn: e.u32(a::RES_PDN),
            owner: owner(e),
        }),
        ResourceKind::Pd => Resource::Pd(Pd {
            dev_index,
            dev_name,
            pdn: e.u32(a::RES_PDN),
            local_dma_lkey: e.u32(a::RES_LOCAL_DMA_LKEY).map(Secret::new),
            unsafe_global_rkey: e.u32(a::RES_UNSAFE_GLOBAL_RKEY).map(Secret::new),
            users: e.required(a::RES_USECNT, AttrSet::u64)?,
            ctxn: e.u32(a::RES_CTXN),
            owner: owner(e),
        }),
        ResourceKind::CmId => {
            let src_addr = match e.raw(a::RES_SRC_ADDR) {
                Some(raw) => sockaddr(raw, e.ctx(), a::RES_SRC_ADDR)?,
                None => None,
            };
            let dst_addr = match e.raw(a::RES_DST_ADDR) {
                Some(raw) => sockaddr(raw, e.ctx(), a::RES_DST_ADDR)?,
                None => None,
            };
            Resource::CmId(CmId {
                dev_index,
                dev_name,
                port: e.u32(a::PORT_INDEX),
                cm_idn: e.u32(a::RES_CM_IDN),
                lqpn: e.u32(a::RES_LQPN),
                qp_type: e.u8(a::RES_TYPE).map(QpType),
                ps: e.required(a::RES_PS, AttrSet::u32)?,
                state: CmState(e.required(a::RES_STATE, AttrSet::u8)?),
                src_addr,
                dst_addr,
                owner: owner(e),
            })
        }
        ResourceKind::Ctx => Resource::Ctx(Context {
            dev_index,
            dev_name,
            ctxn: e.required(a::RES_CTXN, AttrSet::u32)?,
            owner: owner(e),
        }),
        ResourceKind::Srq => {
            let mut qps = Vec::new();
            for q in e.table(a::RES_QP)? {
                if let Some(n) = q.u32(a::RES_LQPN) {
                    qps.push(QpnRange { min: n, max: n });
                } else {
                    qps.push(QpnRange {
                        min: q.required(a::MIN_RANGE, AttrSet::u32)?,
                        max: q.required(a::MAX_RANGE, AttrSet::u32)?,
                    });
                }
            }
            Resource::Srq(Srq {
                dev_index,
                dev_name,
                srqn: e.required(a::RES_SRQN, AttrSet::u32)?,
                srq_type: e.u8(a::RES_TYPE),
                pdn: e.u32(a::RES_PDN),
                cqn: e.u32(a::RES_CQN),
                qps,
                owner: owner(e),
            })
        }
    })
}

/// The resources in one `RES_*_GET` dump message of `kind`.
pub fn resources(kind: ResourceKind, msg: &NldevMessage) -> Result<Vec<Resource>, ParseError> {
    with_attrs(msg, &[kind.command()], |s| {
        let (dev_index, dev_name) = device_id(s)?;
        let (table, _entry) = kind.table_attrs();
        s.required(table, AttrSet::raw)?;
        s.table(table)?
            .iter()
            .map(|e| one_resource(kind, e, dev_index, &dev_name))
            .collect()
    })
}

/// A device event from a `MONITOR` notification (newer kernels).
pub fn event(msg: &NldevMessage) -> Result<Event, ParseError> {
    with_attrs(msg, &[cmd::MONITOR], |s| {
        Ok(Event {
            kind: EventKind::from_u8(s.required(a::EVENT_TYPE, AttrSet::u8)?),
            dev_index: s.u32(a::DEV_INDEX),
            dev_name: s.str(a::DEV_NAME),
            port: s.u32(a::PORT_INDEX),
            netdev_index: s.u32(a::NDEV_INDEX),
            netdev: s.str(a::NDEV_NAME),
            source: EventSource::Kernel,
        })
    })
}

/// Parse `msg` with the parser its command calls for; used by the fuzz target and the
/// capture tool to check a message end to end. Returns a short description.
pub fn any(msg: &NldevMessage) -> Result<String, ParseError> {
    Ok(match msg.command {
        cmd::GET => format!("{:?}", device(msg)?),
        cmd::PORT_GET => format!("{:?}", port(msg)?),
        cmd::RES_GET => format!("{:?}", resource_summary(msg)?),
        cmd::STAT_GET_STATUS => format!("{:?}", counter_status(msg)?),
        cmd::STAT_GET => {
            let is_qp = with_attrs(msg, &[cmd::STAT_GET], |s| {
                Ok(s.u32(a::STAT_RES) == Some(u32::from(a::RES_QP)) || s.has(a::STAT_COUNTER))
            })?;
            let has_mode = with_attrs(msg, &[cmd::STAT_GET], |s| Ok(s.has(a::STAT_MODE)))?;
            if has_mode {
                format!("{:?}", qp_counter_mode(msg)?)
            } else if is_qp {
                format!("{:?}", bound_counters(msg)?)
            } else {
                format!("{:?}", port_counters(msg)?)
            }
        }
        cmd::MONITOR => format!("{:?}", event(msg)?),
        c => match ResourceKind::ALL.iter().find(|k| k.command() == c) {
            Some(kind) => format!("{:?}", resources(*kind, msg)?),
            None => {
                return Err(ParseError::message(
                    Some(c),
                    ParseErrorKind::BadValue("no parser for this command".into()),
                ))
            }
        },
    })
}

/// How many resources one `RES_*_GET` dump message of `kind` holds, without parsing them:
/// the entries of its table are counted, not read (for objects beyond a dump cap).
pub fn resource_count(kind: ResourceKind, msg: &NldevMessage) -> Result<usize, ParseError> {
    with_attrs(msg, &[kind.command()], |s| {
        let (table, _entry) = kind.table_attrs();
        let Some(body) = s.raw(table) else {
            return Ok(0);
        };
        let mut n = 0;
        for nla in netlink_packet_core::NlasIterator::new(body) {
            nla.map_err(|e| {
                s.ctx()
                    .err(Some(table), ParseErrorKind::BadNested(e.to_string()))
            })?;
            n += 1;
        }
        Ok(n)
    })
}
