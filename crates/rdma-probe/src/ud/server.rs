//! The thread of a UD endpoint ([`super`]): all of its verbs work, answering requests
//! and running the probe jobs, one request outstanding each.
use super::*;

/// The job in progress.
struct Active {
    job: Job,
    seq: u64,
    /// (seq, stamp) of the request waiting for its reply; the stamp is its send time in
    /// the job's clock ticks.
    waiting: Option<(u64, u64)>,
    done: u64,
    lost_in_a_row: u64,
    run: UdRun,
}

struct Server<'a> {
    shared: &'a Shared,
    verbs: Verbs,
    /// Sends posted and not yet completed, and the next send slot.
    in_flight: usize,
    next_send: usize,
    wcs: Vec<WorkCompletion>,
    /// The thread's CPU time, flushed to the shared stats every 16 sleeps.
    meter: CpuMeter,
    sleeps: u32,
}

pub(super) fn serve(shared: &Shared, verbs: Verbs, jobs: mpsc::Receiver<Job>) {
    let mut s = Server {
        shared,
        verbs,
        in_flight: 0,
        next_send: 0,
        wcs: Vec::with_capacity(32),
        meter: CpuMeter::start(),
        sleeps: 0,
    };
    let mut active: Vec<Active> = Vec::with_capacity(MAX_ACTIVE_JOBS);
    // When the loop last found nothing to do after some work (None while busy).
    let mut idle_since: Option<Instant> = None;
    let mut idle_spins = 0u32;
    while !shared.stop.load(Ordering::Relaxed) {
        let mut busy = s.poll_sends();
        busy |= s.poll_recvs(&mut active);
        while active.len() < MAX_ACTIVE_JOBS {
            let Ok(job) = jobs.try_recv() else { break };
            active.push(Active {
                seq: 0,
                job,
                waiting: None,
                done: 0,
                lost_in_a_row: 0,
                run: UdRun::default(),
            });
        }
        // The hot loops read the job's cheap clock, not Instant::now() (~1 us in a TCG
        // guest), so a reply is seen within a fraction of a microsecond.
        if !active.is_empty() {
            let mut i = 0;
            let (mut all_late, mut all_lost) = (true, true);
            // The sleep below ends before the first outstanding request times out.
            let mut sleep = IDLE_WAIT;
            while i < active.len() {
                if s.step(&mut active[i]) {
                    let a = active.swap_remove(i);
                    s.finish(a);
                    (idle_since, idle_spins) = (None, 0);
                    (all_late, all_lost) = (false, false);
                    continue;
                }
                let waited = active[i].waited_ns();
                all_late &= waited > YIELD_AFTER.as_nanos() as f64;
                all_lost &= waited > BLOCK_AFTER.as_nanos() as f64;
                let left = active[i].job.timeout.as_nanos() as f64 - waited;
                sleep = sleep.min(Duration::from_nanos(left.max(0.0) as u64));
                i += 1;
            }
            if all_lost {
                // Every outstanding request is most likely lost (a silent or cut-off peer):
                // sleep on the completion channel until a datagram comes or the first
                // timeout is due, instead of holding the CPU for the whole reply timeout,
                // which on a small host slows every other pair's probes and replies.
                s.sleep_on_recvs(&mut active, sleep);
            } else if all_late {
                // Every reply this late: let the other threads (maybe the responder) run.
                std::thread::yield_now();
            }
            continue;
        }
        if busy {
            (idle_since, idle_spins) = (None, 0);
            continue;
        }
        let since = *idle_since.get_or_insert_with(Instant::now);
        idle_spins = idle_spins.wrapping_add(1);
        if !idle_spins.is_multiple_of(64) {
            if idle_spins > 64 {
                std::thread::yield_now();
            }
            continue;
        }
        if since.elapsed() < SPIN_AFTER_ACTIVITY {
            std::thread::yield_now();
            continue;
        }
        // Idle: sleep on the completion channel.
        if s.sleep_on_recvs(&mut active, IDLE_WAIT) {
            (idle_since, idle_spins) = (None, 0);
        }
    }
    for mut a in active {
        a.run.failure = Some(ProbeFailure::new(
            FailureKind::NoDevice,
            "the UD endpoint stopped",
        ));
        s.finish(a);
    }
    s.meter.flush(&shared.stats.cpu_ns);
}

impl Active {
    /// Nanoseconds since the outstanding request went out (0 when none is).
    fn waited_ns(&self) -> f64 {
        match self.waiting {
            Some((_, stamp)) => self
                .job
                .clock
                .ticks_to_ns(self.job.clock.now().wrapping_sub(stamp)),
            None => 0.0,
        }
    }
}

impl Server<'_> {
    /// Arm the receive CQ and sleep on its channel up to `limit`, after one more poll so a
    /// datagram that came in between is not left waiting; true when that poll found one
    /// (no sleep). Every 16th sleep flushes the thread's CPU time.
    fn sleep_on_recvs(&mut self, active: &mut [Active], limit: Duration) -> bool {
        if self.verbs.recv_cq.req_notify(false).is_err() {
            std::thread::sleep(limit);
        } else if self.poll_recvs(active) {
            return true;
        } else {
            let _ = self.verbs.recv_cq.wait(limit);
        }
        self.sleeps = self.sleeps.wrapping_add(1);
        if self.sleeps.is_multiple_of(16) {
            self.meter.flush(&self.shared.stats.cpu_ns);
        }
        false
    }

    /// Retire send completions; true when there were any.
    fn poll_sends(&mut self) -> bool {
        self.wcs.clear();
        let n = match self.verbs.send_cq.poll_into(&mut self.wcs, SEND_SLOTS) {
            Ok(n) => n,
            Err(e) => {
                tracing::warn!(device = self.shared.device, "UD send CQ: {e}");
                self.shared.broken.store(true, Ordering::Relaxed);
                0
            }
        };
        self.in_flight = self.in_flight.saturating_sub(n);
        if self.wcs.iter().any(|wc| wc.status != WcStatus::Success) {
            self.check_qp("a UD send failed");
        }
        n > 0
    }

    /// After an error completion: a UD QP that left RTS serves no one any more; mark the
    /// endpoint broken so that the next handshake builds a new one.
    fn check_qp(&self, what: &str) {
        let state = self.verbs.qp.state();
        if !matches!(state, Ok(rdma_verbs::QpState::Rts))
            && !self.shared.broken.swap(true, Ordering::Relaxed)
        {
            tracing::warn!(device = self.shared.device, state = ?state, "{what}: the UD probe QP left RTS; a new one is built at the next handshake");
        }
    }

    /// Handle arrived datagrams; true when there were any.
    fn poll_recvs(&mut self, active: &mut [Active]) -> bool {
        let mut wcs = std::mem::take(&mut self.wcs);
        wcs.clear();
        let n = match self.verbs.recv_cq.poll_into(&mut wcs, 32) {
            Ok(n) => n,
            Err(e) => {
                tracing::warn!(device = self.shared.device, "UD receive CQ: {e}");
                self.shared.broken.store(true, Ordering::Relaxed);
                0
            }
        };
        for wc in &wcs {
            self.on_recv(wc, active);
        }
        self.wcs = wcs;
        n > 0
    }

    fn on_recv(&mut self, wc: &WorkCompletion, active: &mut [Active]) {
        let slot = wc.wr_id as usize;
        if slot >= RECV_SLOTS {
            return;
        }
        if wc.status != WcStatus::Success {
            self.dropped(DropReason::RecvError, wc);
            self.check_qp("a UD receive failed");
        } else if let Err(why) = self.datagram(wc, slot, active) {
            self.dropped(why, wc);
        }
        if let Err(f) = self.verbs.post_recv(slot) {
            tracing::warn!(device = self.shared.device, "UD receive re-post: {f}");
            self.shared.broken.store(true, Ordering::Relaxed);
        }
    }

    /// Count a dropped datagram, and log it unless its reason was logged within a minute.
    fn dropped(&self, why: DropReason, wc: &WorkCompletion) {
        self.shared.stats.drop_one(why);
        if let Some(n) = self.shared.drop_log.check(why.name(), Instant::now()) {
            tracing::warn!(
                device = self.shared.device,
                reason = why.name(),
                src_qp = wc.src_qp,
                "UD probe datagram dropped ({}); every drop is counted by reason {}",
                why.name(),
                suppressed_note(n)
            );
        }
    }

    /// Check one datagram and act on it.
    fn datagram(
        &mut self,
        wc: &WorkCompletion,
        slot: usize,
        active: &mut [Active],
    ) -> Result<(), DropReason> {
        let len = (wc.byte_len as usize).min(self.verbs.slot);
        if len < GRH_LEN + UD_HEADER {
            return Err(DropReason::Malformed);
        }
        let mut buf = [0u8; GRH_LEN + UD_HEADER_V2];
        let head = &mut buf[..len.min(GRH_LEN + UD_HEADER_V2)];
        self.verbs
            .mr
            .read(slot * self.verbs.slot, head)
            .map_err(|_| DropReason::Malformed)?;
        let (grh, payload) = head.split_at(GRH_LEN);
        let d = Datagram::decode(payload)?;
        let source = wc.has_grh().then(|| grh_source_gid(grh)).flatten();
        let role = if d.reply {
            Role::Requester
        } else {
            Role::Responder
        };
        let mut sessions = lock(&self.shared.sessions);
        let session = sessions
            .get_mut(&(d.session, role))
            .ok_or(DropReason::UnknownSession)?;
        if !Datagram::verify(payload, &session.key) {
            return Err(DropReason::BadTag);
        }
        if wc.src_qp != session.peer.qp_num || source.is_some_and(|g| g != session.peer_gid) {
            return Err(DropReason::WrongSource);
        }
        if d.reply {
            let a = active
                .iter_mut()
                .find(|a| a.job.session == d.session && a.waiting == Some((d.seq, d.stamp)))
                .ok_or(DropReason::Unexpected)?;
            // Nothing moves before every check passed.
            let counted = session.book.check(d.seq, d.received)?;
            let rtt = a
                .job
                .clock
                .ticks_to_ns(a.job.clock.now().wrapping_sub(d.stamp));
            a.waiting = None;
            a.lost_in_a_row = 0;
            a.run.replies += 1;
            if a.done >= a.job.warmup {
                a.run.samples_ns.push(rtt);
            }
            a.done += 1;
            if let (true, Some(r)) = (counted, d.received) {
                let (req, rep) = session.book.attribute(d.seq, r);
                a.run.lost_request += req;
                a.run.lost_reply += rep;
            }
            return Ok(());
        }
        if d.seq <= session.last_seq {
            return Err(DropReason::Replay);
        }
        session.last_seq = d.seq;
        session.received += 1;
        let reply = Datagram {
            reply: true,
            received: d.received.map(|_| session.received),
            ..d
        };
        let (key, ah, peer) = (session.key, Arc::clone(&session.ah), session.peer);
        drop(sessions);
        let size = len - GRH_LEN;
        self.send(&reply, &key, &ah, peer, size)
            .map_err(|_| DropReason::ReplyFailed)?;
        self.shared.stats.answered.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Post one datagram of `size` bytes (header, then zeros).
    fn send(
        &mut self,
        d: &Datagram,
        key: &[u8; 16],
        ah: &AddressHandle,
        peer: UdAddr,
        size: usize,
    ) -> Result<(), ProbeFailure> {
        if self.in_flight >= SEND_SLOTS {
            self.poll_sends();
            if self.in_flight >= SEND_SLOTS {
                return Err(ProbeFailure::new(FailureKind::Post, "UD send queue full"));
            }
        }
        let v = &mut self.verbs;
        let off = (RECV_SLOTS + self.next_send) * v.slot;
        let mut buf = [0u8; UD_HEADER_V2];
        d.encode(key, &mut buf);
        let size = size.clamp(d.len(), v.slot - GRH_LEN);
        v.mr.write(off, &buf[..d.len()])
            .map_err(|e| ProbeFailure::setup("UD send slot", e))?;
        let sge = Sge {
            mr: &v.mr,
            offset: off,
            len: size as u32,
        };
        let dest = UdDest {
            ah,
            qp_num: peer.qp_num,
            qkey: peer.qkey,
        };
        v.qp.post_ud_send(self.next_send as u64, dest, &[sge], size as u32 <= v.inline)
            .map_err(ProbeFailure::post)?;
        self.next_send = (self.next_send + 1) % SEND_SLOTS;
        self.in_flight += 1;
        Ok(())
    }

    /// Advance the job: send the next request, or time one out. True when it is finished.
    fn step(&mut self, a: &mut Active) -> bool {
        let total = a.job.warmup + a.job.iterations;
        if a.waiting.is_some() {
            if a.waited_ns() < a.job.timeout.as_nanos() as f64 {
                return false;
            }
            // Lost: no reply within the timeout (which way: see LossBook).
            a.waiting = None;
            if let Some(s) = lock(&self.shared.sessions).get_mut(&(a.job.session, Role::Requester))
            {
                s.book.unanswered += 1;
            }
            a.done += 1;
            a.lost_in_a_row += 1;
            if a.lost_in_a_row >= MAX_CONSECUTIVE_LOSSES {
                if a.run.replies == 0 {
                    a.run.failure = Some(ProbeFailure::new(
                        FailureKind::Timeout,
                        format!("{} requests in a row without a reply", a.lost_in_a_row),
                    ));
                }
                return true;
            }
        }
        if a.done >= total {
            return true;
        }
        // Out of time or out of luck, a run that got answers measured a lossy path: its lost
        // requests are loss (each holds the run a reply timeout, so 20% loss runs out of
        // time), not a failure; only a run without any answer fails (the peer is silent).
        if Instant::now() >= a.job.deadline {
            if a.run.replies == 0 {
                a.run.failure = Some(ProbeFailure::new(
                    FailureKind::Timeout,
                    "the run did not finish before its deadline",
                ));
            }
            return true;
        }
        let target = {
            let mut sessions = lock(&self.shared.sessions);
            sessions
                .get_mut(&(a.job.session, Role::Requester))
                .map(|s| {
                    s.last_seq += 1;
                    (s.last_seq, s.key, Arc::clone(&s.ah), s.peer)
                })
        };
        let Some((seq, key, ah, peer)) = target else {
            a.run.failure = Some(ProbeFailure::new(
                FailureKind::PeerClosed,
                "the session ended",
            ));
            return true;
        };
        a.seq = seq;
        let stamp = a.job.clock.now();
        let d = Datagram {
            reply: false,
            session: a.job.session,
            seq,
            stamp,
            received: Some(0),
        };
        if let Err(f) = self.send(&d, &key, &ah, peer, a.job.size) {
            a.run.failure = Some(f);
            return true;
        }
        a.waiting = Some((a.seq, stamp));
        a.run.sent += 1;
        false
    }

    /// A run is over: a peer that answered nothing in it (or stopped answering) is silent,
    /// its unattributed losses count as request loss; then the result goes to the engine.
    fn finish(&mut self, mut a: Active) {
        if a.run.replies == 0 || a.run.failure.is_some() {
            if let Some(s) = lock(&self.shared.sessions).get_mut(&(a.job.session, Role::Requester))
            {
                a.run.lost_request += s.book.silent();
            }
        }
        a.run.lost = a.run.lost_request + a.run.lost_reply;
        let _ = a.job.done.send(a.run);
    }
}
