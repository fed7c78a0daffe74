//! Completion queues and their optional completion channel, on raw rdma-mummy-sys calls.
//!
//! Why not sideway: its extended CQ (`build_ex`) returns phantom completions on rxe, its
//! `From<u32>` conversions panic on unknown statuses/opcodes, its poll allocates, and its Drop
//! asserts that `ibv_destroy_cq` succeeded. Here the basic CQ (`ibv_create_cq`) is polled
//! into a stack array, every status maps to a [`WcStatus`] (unknown -> `Unknown(raw)`), and a
//! failed destroy is logged, not a panic.
use crate::codes::{WcOpcode, WcStatus};
use crate::device::Context;
use crate::error::{errno_of, non_null, VerbsError};
use nix::errno::Errno;
use nix::fcntl::{fcntl, FcntlArg, OFlag};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use rdma_mummy_sys::{
    ibv_ack_cq_events, ibv_comp_channel, ibv_cq, ibv_create_comp_channel, ibv_create_cq,
    ibv_destroy_comp_channel, ibv_destroy_cq, ibv_get_cq_event, ibv_poll_cq, ibv_req_notify_cq,
    ibv_wc, ibv_wc_flags,
};
use std::mem::MaybeUninit;
use std::os::fd::BorrowedFd;
use std::ptr::NonNull;
use std::sync::Arc;
use std::time::Duration;

/// One work completion. For failed completions only `wr_id`, `status`, `vendor_err` and
/// `qp_num` are meaningful (the verbs spec leaves the rest undefined).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct WorkCompletion {
    /// The caller's id from the work request.
    pub wr_id: u64,
    /// Outcome.
    pub status: WcStatus,
    /// What completed (valid on success).
    pub opcode: WcOpcode,
    /// Vendor error syndrome.
    pub vendor_err: u32,
    /// Bytes received (receive side).
    pub byte_len: u32,
    /// The local QP the completion belongs to.
    pub qp_num: u32,
    /// Source QP (UD only).
    pub src_qp: u32,
    /// Immediate data in host order, when the message carried it.
    pub imm_data: Option<u32>,
    /// Raw `IBV_WC_*` flags.
    pub wc_flags: u32,
}

impl WorkCompletion {
    /// A UD receive whose first 40 bytes hold a valid GRH (`IBV_WC_GRH`; always on RoCE).
    pub fn has_grh(&self) -> bool {
        self.wc_flags & ibv_wc_flags::IBV_WC_GRH.0 != 0
    }

    pub(crate) fn from_raw(wc: &ibv_wc) -> Self {
        let has_imm = wc.wc_flags & ibv_wc_flags::IBV_WC_WITH_IMM.0 != 0;
        WorkCompletion {
            wr_id: wc.wr_id,
            status: WcStatus::from_raw(wc.status),
            opcode: WcOpcode::from_raw(wc.opcode),
            vendor_err: wc.vendor_err,
            byte_len: wc.byte_len,
            qp_num: wc.qp_num,
            src_qp: wc.src_qp,
            // SAFETY: with IBV_WC_WITH_IMM the union holds the immediate (a plain u32).
            imm_data: has_imm
                .then(|| u32::from_be(unsafe { wc.imm_data_invalidated_rkey_union.imm_data })),
            wc_flags: wc.wc_flags,
        }
    }
}

/// A completion queue. QPs hold an `Arc` to their CQs; the CQ holds its device.
pub struct CompletionQueue {
    cq: NonNull<ibv_cq>,
    channel: Option<NonNull<ibv_comp_channel>>,
    capacity: u32,
    ctx: Arc<Context>,
}

// SAFETY: libibverbs CQ operations (poll, notify, destroy) are thread-safe; providers lock
// internally. The raw pointers are owned by this value alone.
unsafe impl Send for CompletionQueue {}
// SAFETY: as above.
unsafe impl Sync for CompletionQueue {}

impl std::fmt::Debug for CompletionQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompletionQueue")
            .field("device", &self.ctx.name())
            .field("capacity", &self.capacity)
            .field("with_channel", &self.channel.is_some())
            .finish()
    }
}

/// How many completions one `ibv_poll_cq` call may return into the stack array.
const POLL_BATCH: usize = 16;

impl Context {
    /// Create a CQ with room for at least `cqe` completions (`ibv_create_cq`).
    pub fn create_cq(self: &Arc<Self>, cqe: u32) -> Result<Arc<CompletionQueue>, VerbsError> {
        self.create_cq_inner(cqe, false)
    }

    /// Create a CQ with its own completion channel, for [`CompletionQueue::wait`].
    pub fn create_cq_with_channel(
        self: &Arc<Self>,
        cqe: u32,
    ) -> Result<Arc<CompletionQueue>, VerbsError> {
        self.create_cq_inner(cqe, true)
    }

    fn create_cq_inner(
        self: &Arc<Self>,
        cqe: u32,
        with_channel: bool,
    ) -> Result<Arc<CompletionQueue>, VerbsError> {
        let cqe_c = i32::try_from(cqe)
            .ok()
            .filter(|n| *n > 0)
            .ok_or_else(|| VerbsError::InvalidArgument(format!("CQ size {cqe}")))?;
        let channel = if with_channel {
            // SAFETY: the context is open.
            let ch = unsafe { ibv_create_comp_channel(self.raw()) };
            let ch = non_null(ch, "ibv_create_comp_channel", || self.name())?;
            // SAFETY: `ch` is a live channel; its fd, owned by libibverbs, stays open until
            // ibv_destroy_comp_channel, which happens after this borrow ends.
            let fd = unsafe { BorrowedFd::borrow_raw(ch.as_ref().fd) };
            set_nonblocking(fd);
            Some(ch)
        } else {
            None
        };
        let channel_ptr = channel.map_or(std::ptr::null_mut(), |c| c.as_ptr());
        // SAFETY: the context is open; the channel is NULL or live; comp_vector 0 always exists.
        let cq = unsafe { ibv_create_cq(self.raw(), cqe_c, std::ptr::null_mut(), channel_ptr, 0) };
        let Some(cq) = NonNull::new(cq) else {
            let err = VerbsError::call(
                "ibv_create_cq",
                format!("{} ({cqe} entries)", self.name()),
                -1,
            );
            if let Some(ch) = channel {
                // SAFETY: the channel is live and unused.
                unsafe { ibv_destroy_comp_channel(ch.as_ptr()) };
            }
            return Err(err);
        };
        // SAFETY: `cq` is live; cqe is the real capacity the provider chose.
        let capacity = u32::try_from(unsafe { cq.as_ref().cqe }).unwrap_or(cqe);
        Ok(Arc::new(CompletionQueue {
            cq,
            channel,
            capacity,
            ctx: Arc::clone(self),
        }))
    }
}

/// Make `fd` non-blocking, so a spurious wake-up makes the verbs call after the poll return
/// EAGAIN instead of blocking (rdma-core supports non-blocking channel and async fds).
/// Failure only leaves it blocking: the waits poll first.
pub(crate) fn set_nonblocking(fd: BorrowedFd<'_>) {
    if let Ok(bits) = fcntl(fd, FcntlArg::F_GETFL) {
        let flags = OFlag::from_bits_retain(bits);
        if !flags.contains(OFlag::O_NONBLOCK) {
            let _ = fcntl(fd, FcntlArg::F_SETFL(flags | OFlag::O_NONBLOCK));
        }
    }
}

/// Wait up to `timeout` for `fd` to become readable; `Ok(false)` on timeout or a signal.
pub(crate) fn wait_readable(fd: BorrowedFd<'_>, timeout: Duration) -> Result<bool, std::io::Error> {
    let mut fds = [PollFd::new(fd, PollFlags::POLLIN)];
    let timeout = PollTimeout::try_from(timeout).unwrap_or(PollTimeout::MAX);
    match poll(&mut fds, timeout) {
        Ok(0) | Err(Errno::EINTR) => Ok(false),
        Ok(_) => Ok(true),
        Err(errno) => Err(errno.into()),
    }
}

impl CompletionQueue {
    /// The device.
    pub fn context(&self) -> &Arc<Context> {
        &self.ctx
    }

    /// Real capacity (the provider may round up).
    pub fn capacity(&self) -> u32 {
        self.capacity
    }

    pub(crate) fn raw(&self) -> *mut ibv_cq {
        self.cq.as_ptr()
    }

    /// Poll at most one completion; never blocks, never allocates.
    pub fn poll_one(&self) -> Result<Option<WorkCompletion>, VerbsError> {
        let mut wc = MaybeUninit::<ibv_wc>::uninit();
        // SAFETY: the CQ is live; room for exactly one ibv_wc.
        let n = unsafe { ibv_poll_cq(self.raw(), 1, wc.as_mut_ptr()) };
        match n {
            0 => Ok(None),
            // SAFETY: the provider filled the one entry it reported.
            1 => Ok(Some(WorkCompletion::from_raw(unsafe {
                wc.assume_init_ref()
            }))),
            n => Err(self.poll_error(n)),
        }
    }

    /// Poll up to `max` completions into `out` (appended); returns how many were added.
    pub fn poll_into(
        &self,
        out: &mut Vec<WorkCompletion>,
        max: usize,
    ) -> Result<usize, VerbsError> {
        let mut total = 0;
        while total < max {
            let want = (max - total).min(POLL_BATCH);
            let mut wcs = [MaybeUninit::<ibv_wc>::uninit(); POLL_BATCH];
            // SAFETY: the CQ is live; `wcs` has room for `want` <= POLL_BATCH entries.
            let n = unsafe { ibv_poll_cq(self.raw(), want as i32, wcs[0].as_mut_ptr()) };
            if n < 0 {
                return Err(self.poll_error(n));
            }
            let n = (n as usize).min(want);
            for wc in &wcs[..n] {
                // SAFETY: the provider filled the first `n` entries.
                out.push(WorkCompletion::from_raw(unsafe { wc.assume_init_ref() }));
            }
            total += n;
            if n < want {
                break;
            }
        }
        Ok(total)
    }

    /// Poll until `count` completions arrived or `timeout` passed (busy polling).
    pub fn poll_until(
        &self,
        count: usize,
        timeout: Duration,
    ) -> Result<Vec<WorkCompletion>, VerbsError> {
        let deadline = std::time::Instant::now() + timeout;
        let mut out = Vec::with_capacity(count);
        while out.len() < count {
            let missing = count - out.len();
            if self.poll_into(&mut out, missing)? == 0 {
                if std::time::Instant::now() >= deadline {
                    break;
                }
                std::thread::yield_now();
            }
        }
        Ok(out)
    }

    fn poll_error(&self, n: i32) -> VerbsError {
        VerbsError::call("ibv_poll_cq", self.ctx.name(), n.into())
    }

    /// Ask for an event on the channel at the next completion (`ibv_req_notify_cq`).
    pub fn req_notify(&self, solicited_only: bool) -> Result<(), VerbsError> {
        if self.channel.is_none() {
            return Err(VerbsError::InvalidArgument(
                "req_notify on a CQ without a completion channel".into(),
            ));
        }
        // SAFETY: the CQ is live and has a channel.
        let ret = unsafe { ibv_req_notify_cq(self.raw(), i32::from(solicited_only)) };
        if ret != 0 {
            return Err(VerbsError::call(
                "ibv_req_notify_cq",
                self.ctx.name(),
                ret.into(),
            ));
        }
        Ok(())
    }

    /// Wait up to `timeout` for a completion event (after [`req_notify`](Self::req_notify));
    /// the event is acknowledged at once. `Ok(false)` on timeout. Poll the CQ afterwards.
    pub fn wait(&self, timeout: Duration) -> Result<bool, VerbsError> {
        let Some(channel) = self.channel else {
            return Err(VerbsError::InvalidArgument(
                "wait on a CQ without a completion channel".into(),
            ));
        };
        // SAFETY: the channel is live while self lives, and its fd (owned by libibverbs) stays
        // open until Drop destroys the channel; the borrow ends with this call.
        let fd = unsafe { BorrowedFd::borrow_raw(channel.as_ref().fd) };
        let ready = wait_readable(fd, timeout).map_err(|source| VerbsError::Call {
            op: "poll(completion channel)",
            object: self.ctx.name().to_string(),
            source,
        })?;
        if !ready {
            return Ok(false);
        }
        let mut cq: *mut ibv_cq = std::ptr::null_mut();
        let mut cq_context: *mut libc::c_void = std::ptr::null_mut();
        // SAFETY: the channel is live; the out pointers are valid. The fd is non-blocking, so
        // a spurious wake-up returns -1/EAGAIN instead of blocking.
        let ret = unsafe { ibv_get_cq_event(channel.as_ptr(), &mut cq, &mut cq_context) };
        if ret != 0 {
            let err = std::io::Error::last_os_error();
            if err.kind() == std::io::ErrorKind::WouldBlock {
                return Ok(false);
            }
            return Err(VerbsError::Call {
                op: "ibv_get_cq_event",
                object: self.ctx.name().to_string(),
                source: err,
            });
        }
        if !cq.is_null() {
            // SAFETY: every event taken must be acked before ibv_destroy_cq, which otherwise
            // waits forever; `cq` is the live CQ the event was for (this channel serves only
            // this CQ).
            unsafe { ibv_ack_cq_events(cq, 1) };
        }
        Ok(cq == self.raw())
    }
}

impl Drop for CompletionQueue {
    fn drop(&mut self) {
        // SAFETY: the CQ is live and no QP uses it any more (QPs hold an Arc to it).
        let ret = unsafe { ibv_destroy_cq(self.cq.as_ptr()) };
        if ret != 0 {
            tracing::warn!(device = self.ctx.name(), error = %errno_of(ret.into()), "ibv_destroy_cq failed");
        }
        if let Some(ch) = self.channel {
            // SAFETY: the only CQ on this channel was destroyed just above.
            let ret = unsafe { ibv_destroy_comp_channel(ch.as_ptr()) };
            if ret != 0 {
                tracing::warn!(device = self.ctx.name(), error = %errno_of(ret.into()), "ibv_destroy_comp_channel failed");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdma_mummy_sys::imm_data_invalidated_rkey_union_t;

    fn wc(status: u32, opcode: u32, flags: u32, imm_be: u32) -> ibv_wc {
        ibv_wc {
            wr_id: 42,
            status,
            opcode,
            vendor_err: 0,
            byte_len: 64,
            imm_data_invalidated_rkey_union: imm_data_invalidated_rkey_union_t { imm_data: imm_be },
            qp_num: 17,
            src_qp: 0,
            wc_flags: flags,
            pkey_index: 0,
            slid: 0,
            sl: 0,
            dlid_path_bits: 0,
        }
    }

    #[test]
    fn success_with_immediate_decodes_in_host_order() {
        let w = WorkCompletion::from_raw(&wc(
            0,
            129,
            ibv_wc_flags::IBV_WC_WITH_IMM.0,
            0x1234_5678u32.to_be(),
        ));
        assert_eq!(w.status, WcStatus::Success);
        assert_eq!(w.opcode, WcOpcode::RecvRdmaWithImm);
        assert_eq!(w.imm_data, Some(0x1234_5678));
        assert_eq!((w.wr_id, w.byte_len, w.qp_num), (42, 64, 17));
    }

    #[test]
    fn errors_and_garbage_decode_without_panicking() {
        let w = WorkCompletion::from_raw(&wc(10, 0, 0, 0));
        assert_eq!(w.status, WcStatus::RemAccessErr);
        assert_eq!(w.imm_data, None);
        let w = WorkCompletion::from_raw(&wc(4242, 77, 0, 0));
        assert_eq!(w.status, WcStatus::Unknown(4242));
        assert_eq!(w.opcode, WcOpcode::Unknown(77));
        let json = serde_json::to_value(w).unwrap();
        assert_eq!(json["status"], "unknown (4242)");
    }

    #[test]
    fn waiting_on_a_socket_times_out_then_sees_data() {
        use std::io::Write;
        use std::os::fd::AsFd;
        let (reader, mut writer) = std::os::unix::net::UnixStream::pair().unwrap();
        set_nonblocking(reader.as_fd());
        let flags = OFlag::from_bits_retain(fcntl(reader.as_fd(), FcntlArg::F_GETFL).unwrap());
        assert!(flags.contains(OFlag::O_NONBLOCK));
        assert!(!wait_readable(reader.as_fd(), Duration::from_millis(10)).unwrap());
        writer.write_all(b"x").unwrap();
        assert!(wait_readable(reader.as_fd(), Duration::from_millis(10)).unwrap());
    }
}
