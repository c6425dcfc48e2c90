//! The node's dispatch for the writer (`protocol/replicate.rs`).
//!
//! Builds the writer's context from the node's fields, passes its effects on to the
//! roles they are for, and does the work that spans roles: taking host requests (PUTs
//! to the writer, GETs to the reader), predicting (predictor and leases), routing
//! acknowledgements (fragments and notices to the writer, rebuilt fragments to the
//! repairer) and resyncing a peer (decisions through the writer, fragments through the
//! repairer).

use prescient_models::WriteOutcome;
use prescient_shim::config::KEY_BYTES_MAX;
use prescient_shim::descriptor::OpCode;
use prescient_shim::directory;
use prescient_shim::Status;

use super::Node;
use crate::cluster::config::Invalidation;
use crate::cluster::format::entry::{EntryRepr, Outcome as Decision, OutcomeRecordRepr};
use crate::cluster::format::outcome::WriteState;
use crate::cluster::protocol::ack::{ACK_FENCED, ACK_OK};
use crate::cluster::protocol::lease::LeaseMark;
use crate::cluster::protocol::noisy::Noisy;
use crate::cluster::protocol::peer::Sent;
use crate::cluster::protocol::replicate::{
    post_fragment_entry, slot_for, Held, HeldNext, NoticeAnswer, WriteCx, WriteEffect, Writer,
};
use crate::cluster::protocol::sequencer::Recovered;
use crate::cluster::protocol::slotjob::{Finished, Intent, Owner};
use crate::cluster::protocol::slots::WriteId;
use crate::cluster::protocol::stats::LeaseTuning;
use crate::cluster::protocol::time::Now;
use crate::cluster::protocol::wr::WrId;
use crate::cluster::protocol::write::Mark;
use crate::fabric::Fabric;
use crate::limits::{REQUESTS_STARTED_PER_ROUND, RESYNC_CHUNK};
use crate::queue::{key_of, Outcome, Room};
use crate::seal::key_hash;

impl<F: Fabric> Node<F> {
    /// The writer and its context, borrowed from disjoint fields.
    fn write_cx(&mut self) -> (&mut Writer, WriteCx<'_, F::Qp>) {
        let cx = WriteCx {
            me: self.me,
            n: self.n,
            placement: &self.placement,
            k: self.k,
            m: self.m,
            quorum: self.quorum,
            policy: self.policy,
            write_timeout_ns: self.write_timeout_ns,
            incarnation: self.incarnation,
            directory_slots: self.directory_slots,
            links: &mut self.links,
            host: &mut self.host,
            metrics: &mut self.metrics,
            region: &self.region,
            arena_mr: &self.arena_mr,
            store: &mut self.store,
            outcomes: &mut self.outcomes,
            pools: &self.pools,
            sealer: &mut self.sealer,
            rs: &self.rs,
            crc_shift: &mut self.crc_shift,
            hlc: &mut self.hlc,
            hlc_floor: &mut self.hlc_floor,
            sequencer: self.sequencer.as_mut(),
            control: &self.control,
            stats: &mut self.stats,
            noisy: &mut self.noisy,
            own_resync: &mut self.own_resync,
            ledger: self.holder.ledger(),
        };
        (&mut self.writer, cx)
    }

    /// Runs `f` on the writer, then what it left for other roles.
    fn with_writer<R>(&mut self, now: Now, f: impl FnOnce(&mut Writer, &mut WriteCx<'_, F::Qp>) -> R) -> R {
        let (writer, mut cx) = self.write_cx();
        let r = f(writer, &mut cx);
        self.dispatch_write_effects(now);
        r
    }

    /// Passes the writer's effects on, oldest first (a job's start may leave more).
    fn dispatch_write_effects(&mut self, now: Now) {
        while let Some(effect) = self.writer.next_effect() {
            match effect {
                WriteEffect::StartJob { owner, host, slot, intent, guess } => {
                    let started = self.start_job(owner, host, slot, intent, guess);
                    if let Owner::Write(id) = owner {
                        let (writer, mut cx) = self.write_cx();
                        writer.job_started(&mut cx, id, host, slot, intent, started, now);
                    }
                }
                WriteEffect::Suspect { host } => self.suspect(host, now),
            }
        }
    }

    /// Takes new host requests while there is room for them.
    pub(in crate::cluster::protocol) fn take_requests(&mut self, now: Now) -> bool {
        if !self.ready_to_serve(now) {
            return false;
        }
        // Writes need a write slot and GETs a GET slot; NOPs need neither. A round
        // starts a bounded number of them (see the limit). In sequencer mode a write is
        // taken without a stamp in hand: it waits, held, for a block fetched after it
        // arrived (`start_write`), which no block fetched before could be.
        let room = Room {
            writes: self.writer.room() as u32,
            gets: self.reader.available() as u32,
            requests: (self.taken.capacity() as u32).min(REQUESTS_STARTED_PER_ROUND),
        };
        let mut taken = std::mem::take(&mut self.taken);
        taken.clear();
        let count = self.host.take(room, &mut taken, &mut self.metrics);
        for t in taken.drain(..) {
            match t.accepted.desc.op {
                OpCode::Put | OpCode::Delete => {
                    // The key is copied out of the host's buffer once, here.
                    let mut key = [0u8; KEY_BYTES_MAX];
                    let key = key_of(&self.region, &t.accepted, &mut key);
                    let (key_hash, key_id) = (key_hash(key), directory::key_id(key));
                    let held = Held { taken: t, key_hash, key_id, arrived_ns: now.mono_ns };
                    if let Some(held) = self.writer.hold_if_busy(held) {
                        if let Some(wait) = self.start_write(held, now) {
                            let end = self.writer.held_len();
                            self.writer.hold_at(end, wait);
                        }
                    }
                }
                OpCode::Get => self.start_get(t, now),
                other => {
                    self.host.complete(&t, Outcome::failed(Status::Unsupported, other as u32), &mut self.metrics);
                }
            }
        }
        self.taken = taken;
        count > 0
    }

    /// A node that has just started leaves requests in the rings until it reaches a
    /// quorum of nodes (its links come up within a few heartbeats), so that a restart
    /// does not fail every write queued across it for want of links; without a quorum
    /// after `write_timeout` it serves anyway, and its writes fail `NotDurable` as they
    /// would at any other time. The host's calls are not held up: heartbeats go on.
    fn ready_to_serve(&mut self, now: Now) -> bool {
        if self.serving {
            return true;
        }
        let up = 1 + self.links.iter().filter(|p| p.is_up()).count() as u32;
        let started = self.started_ns.unwrap_or(now.mono_ns);
        if up >= self.quorum || now.mono_ns.saturating_sub(started) >= self.write_timeout_ns {
            self.serving = true;
            tracing::info!(node = self.me, nodes_up = up, quorum = self.quorum, "serving the host's requests");
        }
        self.serving
    }

    /// Starts the held writes whose key is free now, oldest first; a held write past
    /// its deadline fails `NotDurable` without starting (nothing of it went out).
    pub(in crate::cluster::protocol) fn start_held(&mut self, now: Now) -> bool {
        let mut busy = false;
        let mut i = 0;
        loop {
            // (In sequencer mode a held write without a stamp in hand goes back to its
            // place below and asks for a block; one past its deadline fails.)
            let (writer, mut cx) = self.write_cx();
            match writer.next_held(&mut cx, &mut i, now) {
                HeldNext::Start(held) => {
                    if let Some(wait) = self.start_write(held, now) {
                        if now.mono_ns >= wait.arrived_ns.saturating_add(self.write_timeout_ns) {
                            // No stamp above its key's version came in its time (its
                            // directory says a version no sequencer reaches): it fails.
                            self.stats.record_failure(Status::NotDurable);
                            self.host.complete(&wait.taken, Outcome::failed(Status::NotDurable, 0), &mut self.metrics);
                        } else {
                            // Back in its place, and on past it: it waits for a fresh block.
                            self.writer.hold_at(i, wait);
                            i += 1;
                        }
                    }
                }
                HeldNext::Failed => {}
                HeldNext::Nothing => return busy,
            }
            busy = true;
        }
    }

    /// Starts a write; the caller checked that a write slot and a side buffer are free.
    /// In sequencer mode a write with no stamp in hand fetched after it arrived is
    /// handed back, to be held until one comes.
    fn start_write(&mut self, held: Held, now: Now) -> Option<Held> {
        let key_id = held.key_id;
        if let Some(s) = self.sequencer.as_mut() {
            if !s.has_for(held.arrived_ns, now) {
                s.want_for(held.arrived_ns);
                return Some(held);
            }
        }
        // The host clock when the write's stages began (for the per-stage figures).
        let started = prescient_shim::sys::monotonic_ns();
        // 2. Predict.
        let hit = self.predict(key_id, now);
        let predicted = now.mono_ns + prescient_shim::sys::monotonic_ns().saturating_sub(started);
        let (writer, mut cx) = self.write_cx();
        // None: refused and completed to the host; nothing to hold.
        let id = writer.begin(&mut cx, held, started, predicted, now)?;
        // A write that found its key leased upgrades the lease's marks.
        let lease = if hit { self.leases.take_for(key_id, now.mono_ns) } else { None };
        if let Some(saved_ns) = lease.map(|l| l.saved_ns).filter(|&s| s > 0) {
            if let Some(t) = self.predictor.as_mut().and_then(|p| p.tuner_mut()) {
                t.measured_hit(saved_ns);
            }
        }
        // The writer takes the lease's placed marks as its own (`Mark::Placed`).
        let marks = lease.map(|l| {
            l.marks.map(|m| match m {
                LeaseMark::Placed { placed, prior } => Mark::Placed { placed, prior },
                LeaseMark::None | LeaseMark::Running { .. } | LeaseMark::Settled => Mark::None,
            })
        });
        self.with_writer(now, |w, cx| w.replicate(cx, id, marks.as_ref()));
        if let Some(l) = lease {
            self.leases.release(l.id);
        }
        None
    }

    /// Step 2: tells the predictor of a write of `key_id`, opens the leases it predicts
    /// and rolls back the ones it let expire; whether it had predicted this write.
    fn predict(&mut self, key_id: u64, now: Now) -> bool {
        let Some(predictor) = self.predictor.as_mut() else { return false };
        let expired = &mut self.expired;
        expired.clear();
        let report = predictor.on_write(key_id, |lease| {
            if expired.len() < expired.capacity() {
                expired.push(lease.key)
            }
        });
        let hit = report.outcome == WriteOutcome::Hit;
        self.stats.predictor_hits += u64::from(hit);
        if let Some(t) = predictor.tuner() {
            self.stats.lease_tuning = Some(LeaseTuning::of(t));
        }
        if self.policy.predictive && self.policy.invalidation == Invalidation::Speculative {
            for p in &report.opened {
                self.open_lease(p.key, now);
            }
        }
        for i in 0..self.expired.len() {
            let key = self.expired[i];
            self.lease_expired(key, now);
        }
        hit
    }

    /// Moves every write forward.
    pub(in crate::cluster::protocol) fn advance_writes(&mut self, now: Now) -> bool {
        let mut busy = false;
        if self.writer.in_flight() == 0 {
            return false;
        }
        for slot in 0..self.writer.capacity() {
            // An empty slot costs a look, not a write context and an effect dispatch.
            if self.writer.occupied(slot) {
                busy |= self.with_writer(now, |w, cx| w.advance(cx, slot, now));
            }
        }
        busy
    }

    /// A directory job of write `id` on slot `dir_slot` of host `host` ended.
    pub(in crate::cluster::protocol) fn write_job_done(
        &mut self,
        id: WriteId,
        host: u8,
        dir_slot: u32,
        intent: Intent,
        f: Finished,
        now: Now,
    ) {
        self.with_writer(now, |w, cx| w.job_done(cx, id, host, dir_slot, intent, f, now));
    }

    /// The slot of `key_id` in host `j`'s directory.
    pub(in crate::cluster::protocol) fn slot_for(&self, j: u8, key_id: u64) -> u32 {
        slot_for(&self.links, self.me, self.directory_slots, j, key_id)
    }

    /// [`post_fragment_entry`] from this node's links, header pool and arena.
    #[allow(clippy::too_many_arguments)]
    pub(in crate::cluster::protocol) fn post_fragment_entry(
        &mut self,
        h: u8,
        bytes_at: usize,
        frag_header: &[u8; crate::stripe::HEADER_LEN],
        entry: EntryRepr,
        staging: u32,
        ids: (WrId, WrId),
        sent: Sent,
    ) {
        post_fragment_entry(
            &mut self.links,
            &self.pools,
            &self.arena_mr,
            h,
            bytes_at,
            frag_header,
            entry,
            staging,
            ids,
            sent,
        );
    }

    /// A fragment's WRITE (bytes or header) completed.
    pub(in crate::cluster::protocol) fn on_fragment_sent(&mut self, id: WrId, ok: bool, _now: Now) {
        self.writer.on_fragment_sent(id, ok);
    }

    /// A holder acknowledged the oldest entry this node wrote into its log.
    pub(in crate::cluster::protocol) fn on_ack(&mut self, peer: u8, imm: u32, now: Now) {
        let me = self.me;
        let status = (imm >> 24) & 0x7f;
        let Some(p) = self.links.peer_mut(peer) else { return };
        let acked_seq = p.next_seq - p.sent.len() as u64;
        let Some(sent) = p.sent.pop_front() else {
            tracing::warn!(node = me, peer, "acknowledgement with nothing outstanding: reconnecting");
            self.link_failed(peer, crate::fabric::WcStatus::RemoteOperation, now);
            return;
        };
        if (acked_seq & 0xff_ffff) as u32 != imm & 0xff_ffff {
            tracing::warn!(node = me, peer, acked_seq, imm, "acknowledgement out of order: reconnecting");
            self.entry_lost(peer, sent);
            self.link_failed(peer, crate::fabric::WcStatus::RemoteOperation, now);
            return;
        }
        let ok = status == ACK_OK;
        match sent {
            Sent::Fragment { write, .. } => {
                self.with_writer(now, |w, cx| w.fragment_acked(cx, write, peer, ok, status))
            }
            Sent::Notice { notice } => {
                let answer = if ok {
                    NoticeAnswer::Taken
                } else if status == ACK_FENCED {
                    NoticeAnswer::Fenced
                } else {
                    NoticeAnswer::Lost
                };
                self.with_writer(now, |w, cx| w.notice_done(cx, notice, peer, answer))
            }
            Sent::Repair { repair } => self.repair_acked(repair, peer, ok),
        }
    }

    /// An entry written to `peer` was lost with its link.
    pub(in crate::cluster::protocol) fn entry_lost(&mut self, peer: u8, sent: Sent) {
        match sent {
            Sent::Fragment { write, .. } => self.writer.fragment_lost(write, peer),
            Sent::Notice { notice } => {
                // Settling a notice leaves nothing for other roles.
                let (writer, mut cx) = self.write_cx();
                writer.notice_done(&mut cx, notice, peer, NoticeAnswer::Lost);
            }
            Sent::Repair { repair } => self.repair_acked(repair, peer, false),
        }
    }

    /// Sends the outcome records waiting for each peer, one notice entry per peer.
    pub(in crate::cluster::protocol) fn flush_notices(&mut self, now: Now) -> bool {
        self.with_writer(now, |w, cx| w.flush_notices(cx))
    }

    /// A notice's work request completed (its acknowledgement settles it).
    pub(in crate::cluster::protocol) fn on_notice_sent(&mut self, _id: WrId, _ok: bool) {}

    /// Notice slots free, and records waiting per peer (for diagnostics).
    pub(in crate::cluster::protocol) fn notices_debug(&self) -> String {
        self.writer.notices_debug()
    }

    /// Queues an outcome record for peer `h` that no write in flight waits for.
    pub(in crate::cluster::protocol) fn notices_queue(&mut self, h: u8, record: OutcomeRecordRepr) -> bool {
        self.writer.queue_notice(h, record)
    }

    /// After a restart: finishes what the previous incarnation decided
    /// ([`Writer::recover_outcomes`]).
    pub(in crate::cluster::protocol) fn recover_outcomes(&mut self, _now: Now) {
        Writer::recover_outcomes(self.me, &mut self.outcomes, &mut self.store, self.holder.ledger());
        let Some(s) = self.sequencer.as_mut() else { return };
        // The fate ring's Pending stamps decide as their writes' outcome entries say
        // (settled just above): a rolled-back one once its rollback reached enough
        // holders (this node's own record is resolved by now; the peers' resync tells
        // the rest). A stamp no entry holds never began a write.
        let me = self.me;
        let mut found = std::collections::HashMap::new();
        let end = self.outcomes.next_write_seq();
        for seq in end.saturating_sub(u64::from(self.outcomes.entries()))..end {
            let Some(e) = self.outcomes.get(seq) else { continue };
            let recovered = match e.state() {
                WriteState::Committed => Recovered::Committed,
                WriteState::Aborted => Recovered::RolledBack { holders: e.holders(), lacking: e.lacking(me) },
                WriteState::InProgress | WriteState::Free => {
                    tracing::error!(
                        node = me,
                        write_seq = seq,
                        "an outcome entry left undecided after recovery; its stamp is taken as never used"
                    );
                    continue;
                }
            };
            found.insert(e.stamp() >> 8, recovered);
        }
        s.recover_fates(self.quorum, |v| found.get(&v).copied().unwrap_or(Recovered::NeverBegan));
    }

    /// Resends the decisions peer `h` may have missed (it was down, or its link broke
    /// with notices queued): walks the outcome table from the peer's resync cursor, a
    /// bounded chunk per call, queueing every decided write of which `h` is a holder
    /// and has not persisted the decision.
    pub(in crate::cluster::protocol) fn resync(&mut self, h: u8, now: Now) {
        let Some(p) = self.links.peer(h) else { return };
        let (Some(mut seq), true) = (p.resync, p.is_up()) else { return };
        let end = self.writer.next_write_seq();
        let stop = (seq + RESYNC_CHUNK).min(end);
        while seq < stop {
            if let Some(e) = self.outcomes.get(seq) {
                let bit = 1u32 << h;
                let outcome = match e.state() {
                    WriteState::Committed => Some(Decision::Committed),
                    WriteState::Aborted => Some(Decision::Aborted),
                    _ => None,
                };
                // A committed write whose fragment it never persisted: rebuild it.
                if outcome == Some(Decision::Committed) && e.holders() & bit != 0 && e.acked() & bit == 0 {
                    if !self.start_repair(seq, e.key_hash(), e.stamp(), e.tombstone(), h, now) {
                        break;
                    }
                    seq += 1;
                    continue;
                }
                if let (Some(outcome), true) = (outcome, e.holders() & bit != 0 && e.decided() & bit == 0) {
                    let record =
                        OutcomeRecordRepr { write_seq: seq, key_hash: e.key_hash(), stamp: e.stamp(), outcome };
                    if !self.writer.queue_notice(h, record) {
                        break;
                    }
                    self.stats.notices_resent += 1;
                }
            }
            seq += 1;
        }
        let (me, resent, repairs) = (self.me, self.stats.notices_resent, self.stats.repairs_started);
        let mut done = false;
        if let Some(p) = self.links.peer_mut(h) {
            p.resync = (seq < end).then_some(seq);
            done = p.resync.is_none();
        }
        // Repair's progress, at most every few seconds (a rewind restarts a resync).
        if let Some(left_out) = done.then(|| self.admit_log(Noisy::ResyncDone)).flatten() {
            tracing::info!(
                node = me,
                peer = h,
                through_write = end.saturating_sub(1),
                decisions_resent_total = resent,
                repairs_started_total = repairs,
                left_out,
                "resync done: the peer has been sent every decision and fragment it missed (repairs may still be in flight)"
            );
        }
    }

    /// The resync of this node's own fragments: walks the outcome table from
    /// `own_resync`, a bounded chunk per call, starting a local repair for every
    /// committed write of which this node is a holder and has not stored its fragment
    /// (without it, m nodes down would leave the write short of k fragments).
    pub(in crate::cluster::protocol) fn resync_own(&mut self, now: Now) {
        let Some(mut seq) = self.own_resync else { return };
        let me = self.me;
        let end = self.writer.next_write_seq();
        let stop = (seq + RESYNC_CHUNK).min(end);
        while seq < stop {
            if let Some(e) = self.outcomes.get(seq) {
                let bit = 1u32 << me;
                if e.state() == WriteState::Committed
                    && e.holders() & bit != 0
                    && e.acked() & bit == 0
                    && !self.start_repair(seq, e.key_hash(), e.stamp(), e.tombstone(), me, now)
                {
                    break;
                }
            }
            seq += 1;
        }
        self.own_resync = (seq < end).then_some(seq);
    }
}
