//! The writer's side of a write, DESIGN.md's steps 2-8: predict, order, invalidate
//! speculatively, seal, encode, replicate, decide, commit or roll back, complete.
//!
//! Phase 1 sends fragment i to holder i (one WRITE of its bytes straight from the
//! arena or the side buffer, then one WRITE_WITH_IMM of its entry header, so the
//! holder sees the header only after the bytes) and, in the speculative policy, marks
//! every host's directory slot `Pending` in the same round trip. A quorum of holders
//! persisting their fragment commits the write at the writer (recorded in its outcome
//! table); phase 2 sends that decision to the holders, and once `m + 1` of them have
//! persisted it (so any reader with at most `m` nodes down meets one), and every mark
//! is settled, the write completes to the host and the marks turn `Invalid`. The
//! baseline policy invalidates only then, and waits for it.
//!
//! The role is [`Writer`]: it owns the writes in flight (a `SlotTable<Write, WriteId>`,
//! each write's phase in [`super::write`]), the requests held behind a write of their
//! key, the outcome notices waiting for or flying to each holder, the side buffers and
//! the write numbers. A call borrows what it uses of the node through a [`WriteCx`]
//! (links, host, store, outcome table, pools, sealer, clock, stats) and leaves what
//! other roles must do - start a directory job, suspect a host - as [`WriteEffect`]s,
//! which the node's dispatch (`node/write.rs`) passes on, in order, before the
//! next call. Predicting (the predictor and its leases), taking host requests (PUTs
//! and GETs come in together), acknowledgements (fragments, notices and repairs share
//! a log) and the resync of a peer (decisions and repairs) are that dispatch's too.

use std::collections::VecDeque;
use std::sync::Arc;

use prescient_shim::completion::FLAG_LEASED;
use prescient_shim::config::VALUE_OFFSET;
use prescient_shim::descriptor::OpCode;
use prescient_shim::directory::{self, SlotState};
use prescient_shim::region::Region;
use prescient_shim::Status;

use super::links::Links;
use super::noisy::Noisy;
use super::peer::rewind;
use super::peer::{Sent, Trust};
use super::pool::Pools;
use super::sequencer::Sequencer;
use super::slotjob::{Finished, Intent, Owner, Started};
use super::slots::{Handle, NoticeId, SlotTable, WriteId};
use super::stats::NodeStats;
use super::time::Now;
use super::wr::{Kind, WrId};
use super::write::{End, Mark, NewWrite, Phase, Write};
use crate::cluster::config::{Invalidation, Policy};
use crate::cluster::format::control::ControlBlock;
use crate::cluster::format::crc_combine::ShiftCache;
use crate::cluster::format::entry::{
    EntryKind, EntryRepr, Outcome as Decision, OutcomeRecordRepr, HEADER_LEN as ENTRY_HEADER_LEN,
};
use crate::cluster::format::ledger::Ledger;
use crate::cluster::format::outcome::{OutcomeError, OutcomeTable, WriteState};
use crate::cluster::format::record::RecordRepr;
use crate::cluster::format::store::Store;
use crate::cluster::hlc::{Hlc, HlcFloor, Stamp};
use crate::cluster::placement;
use crate::cluster::sequence::LeaderWord;
use crate::fabric::{MemoryRegion, Op, RawQp};
use crate::histogram::WriteStage;
use crate::limits::{FRAGMENT_HEAD_BYTES, NODES_MAX, ROLLBACK_ANSWER_TIMEOUTS};
use crate::limits::{NOTICE_RECORDS_MAX, OUTCOME_RECORD_BYTES as OUTCOME_RECORD_LEN};
use crate::log_limit::LogLimits;
use crate::metrics::Metrics;
use crate::queue::Outcome;
use crate::region_server::{RegionServer, Taken};
use crate::seal::{Binding, Sealer};
use crate::stripe::{encode_stripe, fragment, ReedSolomon, StripeId, StripeLayout};

/// A write request waiting for the write of its key in flight here to finish.
#[derive(Debug)]
pub struct Held {
    pub(super) taken: Taken,
    pub(super) key_hash: u64,
    pub(super) key_id: u64,
    pub(super) arrived_ns: u64,
}

/// An outcome record waiting to go to one holder, and the write it speaks for.
#[derive(Clone, Copy, Debug)]
struct Pending {
    record: OutcomeRecordRepr,
    owner: Option<WriteId>,
}

/// What a holder's answer to a notice says of one record it carried.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecordAnswer {
    /// Taken: the holder has the decision (a rollback: it dropped the fragment).
    Taken,
    /// A rollback the holder did not take: it keeps the write frozen (`fence.rs`).
    Frozen,
    /// Unknown: a rollback among several in a notice answered `ACK_FENCED`, which
    /// does not say which it left out. Sent again alone, its answer says.
    AskAlone,
    /// Lost with the link, or refused: the resync sends it again.
    Lost,
}

/// What `answer` says of a record deciding `outcome`, in a notice carrying `rollbacks`
/// rollbacks in all.
pub fn read_answer(answer: NoticeAnswer, outcome: Decision, rollbacks: usize) -> RecordAnswer {
    match (answer, outcome) {
        (NoticeAnswer::Taken, _) | (NoticeAnswer::Fenced, Decision::Committed) => RecordAnswer::Taken,
        (NoticeAnswer::Fenced, Decision::Aborted) if rollbacks == 1 => RecordAnswer::Frozen,
        (NoticeAnswer::Fenced, Decision::Aborted) => RecordAnswer::AskAlone,
        (NoticeAnswer::Lost, _) => RecordAnswer::Lost,
    }
}

/// Outcome notices: per peer the records waiting to be sent, and per notice in flight
/// (its slot is its slot of the notices pool) the records it carries and the writes
/// they speak for.
#[derive(Debug)]
pub struct NoticeTable {
    batches: Vec<Vec<Pending>>,
    /// Per peer, rollbacks to send one per notice ([`RecordAnswer::AskAlone`]).
    alone: Vec<Vec<Pending>>,
    in_flight: SlotTable<Vec<Pending>, NoticeId>,
    /// Emptied batches, to swap in for one that goes out (no allocation per notice).
    spare: Vec<Vec<Pending>>,
}

impl NoticeTable {
    /// Room for `per_peer` notices in flight to each of `nodes` nodes.
    pub fn new(nodes: usize, per_peer: u32) -> Self {
        let slots = per_peer * nodes as u32;
        Self {
            batches: (0..nodes).map(|_| Vec::with_capacity(NOTICE_RECORDS_MAX)).collect(),
            alone: (0..nodes).map(|_| Vec::with_capacity(NOTICE_RECORDS_MAX)).collect(),
            in_flight: SlotTable::new(slots),
            spare: (0..slots).map(|_| Vec::with_capacity(NOTICE_RECORDS_MAX)).collect(),
        }
    }

    fn queue(&mut self, peer: u8, record: OutcomeRecordRepr, owner: Option<WriteId>) -> bool {
        let batch = &mut self.batches[peer as usize];
        if batch.len() >= NOTICE_RECORDS_MAX {
            return false;
        }
        batch.push(Pending { record, owner });
        true
    }

    /// Queues `p` for peer `peer` in a notice of its own; false if there is no room.
    fn queue_alone(&mut self, peer: u8, p: Pending) -> bool {
        let alone = &mut self.alone[peer as usize];
        if alone.len() >= NOTICE_RECORDS_MAX {
            return false;
        }
        alone.push(p);
        true
    }

    /// The records of the next notice to `peer` (a notice slot was reserved for it),
    /// swapped out for an empty batch: a record to be sent alone first, else the
    /// peer's batch.
    fn take_next(&mut self, peer: u8) -> Vec<Pending> {
        let mut next = self.spare.pop().expect("a spare batch per notice slot");
        if let Some(p) = self.alone[peer as usize].pop() {
            next.push(p);
        } else {
            std::mem::swap(&mut next, &mut self.batches[peer as usize]);
        }
        next
    }

    /// Whether a record waits to go to `peer`.
    fn waiting(&self, peer: u8) -> bool {
        !self.batches[peer as usize].is_empty() || !self.alone[peer as usize].is_empty()
    }
}

/// What the writer leaves for other roles, in the order it must happen.
#[derive(Clone, Copy, Debug)]
pub enum WriteEffect {
    /// Start directory job `intent` on slot `slot` of host `host`'s directory from the
    /// word `guess` (`Node::start_job`); for `Owner::Write(id)` the writer hears how
    /// it started through [`Writer::job_started`].
    StartJob {
        /// Who hears of its end.
        owner: Owner,
        /// The host whose directory it works on.
        host: u8,
        /// The slot there.
        slot: u32,
        /// What for.
        intent: Intent,
        /// The word expected there, if known.
        guess: Option<u64>,
    },
    /// Suspect host `host`: a write's mark cannot reach its directory.
    Suspect {
        /// The host.
        host: u8,
    },
}

/// What [`Writer::next_held`] found among the held writes.
#[derive(Debug)]
pub enum HeldNext {
    /// This one's key is free and there is room: start it.
    Start(Held),
    /// One was past its deadline and failed `NotDurable`; look on.
    Failed,
    /// None can start now.
    Nothing,
}

/// What the writer may use of its node for one call: configuration and the node's
/// shared equipment, borrowed from disjoint fields of the node.
pub struct WriteCx<'a, Q: RawQp> {
    pub(super) me: u8,
    pub(super) n: usize,
    pub(super) placement: &'a crate::cluster::placement::Placement,
    pub(super) k: usize,
    pub(super) m: usize,
    pub(super) quorum: u32,
    pub(super) policy: Policy,
    pub(super) write_timeout_ns: u64,
    pub(super) incarnation: u32,
    pub(super) directory_slots: u32,
    pub(super) links: &'a mut Links<Q>,
    pub(super) host: &'a mut RegionServer,
    pub(super) metrics: &'a mut Metrics,
    pub(super) region: &'a Region,
    pub(super) arena_mr: &'a Arc<MemoryRegion>,
    pub(super) store: &'a mut Store,
    pub(super) outcomes: &'a mut OutcomeTable,
    pub(super) pools: &'a Pools,
    pub(super) sealer: &'a mut Sealer,
    pub(super) rs: &'a ReedSolomon,
    pub(super) crc_shift: &'a mut ShiftCache,
    pub(super) hlc: &'a mut Hlc,
    pub(super) hlc_floor: &'a mut HlcFloor,
    /// Where versions come from in sequencer mode (`None`: the HLC).
    pub(super) sequencer: Option<&'a mut Sequencer>,
    /// This node's control block (its leader word, its counter when it sequences).
    pub(super) control: &'a ControlBlock,
    pub(super) stats: &'a mut NodeStats,
    pub(super) noisy: &'a mut LogLimits<{ Noisy::COUNT }>,
    pub(super) own_resync: &'a mut Option<u64>,
    /// In sequencer mode, this node's stamp ledger: its own fragments are recorded
    /// there as any holder's are (`format/ledger.rs`).
    pub(super) ledger: Option<&'a Ledger>,
}

impl<Q: RawQp> WriteCx<'_, Q> {
    /// Whether a log line about `why` may be written now (see `Node::admit_log`).
    fn admit(&mut self, why: Noisy) -> Option<u64> {
        self.noisy.admit(why as usize, prescient_shim::sys::monotonic_ns())
    }
}

/// The slot of `key_id` in host `j`'s directory (`own_slots`: this node's, `me`).
pub(super) fn slot_for<Q: RawQp>(links: &Links<Q>, me: u8, own_slots: u32, j: u8, key_id: u64) -> u32 {
    let slots = if j == me { own_slots } else { links.peer(j).and_then(|p| p.remote).map_or(0, |r| r.directory_slots) };
    if slots == 0 {
        0
    } else {
        directory::slot_of(key_id, slots)
    }
}

/// Writes one fragment entry into peer `h`'s log (which must be up, with credit and
/// send room): the `f` bytes at `bytes_at` in the arena (`arena_mr`) with a plain
/// WRITE, then the entry header and fragment header from header staging slot
/// `staging` with the WRITE_WITH_IMM that announces it; `sent` is what its
/// acknowledgement settles.
#[allow(clippy::too_many_arguments)]
pub(super) fn post_fragment_entry<Q: RawQp>(
    links: &mut Links<Q>,
    pools: &Pools,
    arena_mr: &Arc<MemoryRegion>,
    h: u8,
    bytes_at: usize,
    frag_header: &[u8; crate::stripe::HEADER_LEN],
    mut entry: EntryRepr,
    staging: u32,
    ids: (WrId, WrId),
    sent: Sent,
) {
    let f = entry.payload_len as usize - crate::stripe::HEADER_LEN;
    let p = links.peer_mut(h).expect("peer exists");
    let remote = p.remote.expect("an up peer has advertised its regions");
    let seq = p.next_seq;
    p.next_seq += 1;
    p.sent.push_back(sent);
    p.bytes_out += (FRAGMENT_HEAD_BYTES + f) as u64;
    entry.seq = seq;
    let mut head = [0u8; FRAGMENT_HEAD_BYTES];
    entry.emit(&mut head[..ENTRY_HEADER_LEN]);
    head[ENTRY_HEADER_LEN..].copy_from_slice(frag_header);
    pools.header.write(staging, &head);
    let log_at = (seq % u64::from(remote.log_slots)) * u64::from(remote.log_slot_bytes);
    if f > 0 {
        let buf = arena_mr.buf(bytes_at, f).expect("fragment inside the arena");
        links.post(h, ids.0, Op::Write { remote: remote.log.at(log_at + FRAGMENT_HEAD_BYTES as u64), imm: None }, buf);
    }
    let buf = pools.header.buf(staging, FRAGMENT_HEAD_BYTES);
    links.post(h, ids.1, Op::Write { remote: remote.log.at(log_at), imm: Some((seq & 0x7fff_ffff) as u32) }, buf);
}

/// What a holder answered to an outcome notice.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NoticeAnswer {
    /// Every record taken (`ACK_OK`).
    Taken,
    /// Taken but for the rollbacks of writes the holder keeps frozen, unknown which
    /// (`ACK_FENCED`, `fence.rs`).
    Fenced,
    /// Lost with its link, or refused.
    Lost,
}

/// The writer: the writes in flight and everything only they use.
#[derive(Debug)]
pub struct Writer {
    writes: SlotTable<Write, WriteId>,
    /// Write requests waiting for the write of their key in flight (FIFO; with the
    /// writes in flight never more than the write table holds).
    held: VecDeque<Held>,
    notices: NoticeTable,
    /// The DPU buffers free for a write's headers and parity. Repairs take theirs
    /// from here too (two each: data and side) and give them back.
    pub(super) side_free: Vec<u32>,
    /// The write number the next write takes (the outcome table's).
    next_write_seq: u64,
    /// What other roles must do, in order (drained by the node after every call).
    effects: VecDeque<WriteEffect>,
}

impl Writer {
    /// A writer with room for `writes_max` writes, the side buffers `side_free`, and
    /// `next_write_seq` the next write number; notices for `nodes` nodes.
    pub fn new(writes_max: u32, side_free: Vec<u32>, next_write_seq: u64, nodes: usize) -> Self {
        Self {
            writes: SlotTable::new(writes_max),
            held: VecDeque::with_capacity(writes_max as usize),
            notices: NoticeTable::new(nodes, crate::limits::NOTICES_MAX),
            side_free,
            next_write_seq,
            effects: VecDeque::with_capacity(4 * NODES_MAX),
        }
    }

    /// Write slots in all (the header pool's repair slots come after theirs).
    pub fn capacity(&self) -> u32 {
        self.writes.capacity()
    }

    /// Whether write slot `slot` holds a write (one [`Writer::advance`] may move).
    pub fn occupied(&self, slot: u32) -> bool {
        self.writes.current(slot).is_some()
    }

    /// Writes in flight, held ones included.
    pub fn in_flight(&self) -> usize {
        self.writes.in_use() + self.held.len()
    }

    /// How many write requests are held.
    pub fn held_len(&self) -> usize {
        self.held.len()
    }

    /// Whether write requests wait behind a write of their key (or for a stamp).
    pub fn has_held(&self) -> bool {
        !self.held.is_empty()
    }

    /// The write number the next write takes.
    pub fn next_write_seq(&self) -> u64 {
        self.next_write_seq
    }

    /// How many new write requests there is room for: each takes a write slot and a
    /// side buffer, and the held ones will take theirs first.
    pub fn room(&self) -> usize {
        self.writes.available().min(self.side_free.len()).saturating_sub(self.held.len())
    }

    /// The next thing the node must do for the writer, oldest first.
    pub fn next_effect(&mut self) -> Option<WriteEffect> {
        self.effects.pop_front()
    }

    /// Whether write `id` is deciding (committed at the writer: a mark still looking
    /// for its slot's word may go straight to Invalid).
    pub fn is_deciding(&self, id: WriteId) -> bool {
        self.writes.get(id).is_some_and(|w| w.phase() == Phase::Deciding)
    }

    /// Whether write `id` is in flight and before its deadline.
    pub fn before_deadline(&self, id: WriteId, now: Now) -> bool {
        self.writes.get(id).is_some_and(|w| now.mono_ns < w.deadline_ns)
    }

    /// Host `j`'s directory is excluded (it revoked after our suspicion, or its lease
    /// lapsed): writes waiting on a failed mark there go ahead.
    pub fn host_excluded(&mut self, j: u8) {
        for (_, w) in self.writes.iter_mut() {
            if w.mark(j) == Mark::Failed {
                w.set_mark(j, Mark::Skipped);
            }
        }
    }

    /// Node `j` is dead: writes waiting on its fragment stop waiting.
    pub fn holder_dead(&mut self, j: u8) {
        for (_, w) in self.writes.iter_mut() {
            if w.holder_mask() & (1 << j) != 0 && w.acked & (1 << j) == 0 {
                w.failed |= 1 << j;
            }
        }
    }

    /// Whether a write of the key `key_hash` is in flight here, or among the first
    /// `held` held writes (all of them for a new request).
    fn key_busy(&self, key_hash: u64, held: usize) -> bool {
        self.writes.iter().any(|(_, w)| w.key_hash == key_hash)
            || self.held.iter().take(held).any(|h| h.key_hash == key_hash)
    }

    /// Holds `held` again at index `at` of the held writes (at most their count): it
    /// found no stamp above its key's version and waits for a fresh block, keeping its
    /// place before later writes of its key.
    pub fn hold_at(&mut self, at: usize, held: Held) {
        self.held.insert(at.min(self.held.len()), held);
    }

    /// A new write request: held (`None`) while a write of its key is in flight or
    /// held, else handed back to be started.
    pub fn hold_if_busy(&mut self, held: Held) -> Option<Held> {
        if self.key_busy(held.key_hash, self.held.len()) {
            // One write of a key at a time from this writer: the next waits for it
            // instead of piling undecided versions into the key's store set on every
            // holder (a hot key filled it).
            self.held.push_back(held);
            return None;
        }
        Some(held)
    }

    /// The next held write, from index `*i` on, whose key is free and for which there
    /// is room, oldest first; a held write past its deadline fails `NotDurable` without
    /// starting (nothing of it went out).
    pub fn next_held<Q: RawQp>(&mut self, cx: &mut WriteCx<'_, Q>, i: &mut usize, now: Now) -> HeldNext {
        while *i < self.held.len() {
            let (key_hash, arrived_ns) = (self.held[*i].key_hash, self.held[*i].arrived_ns);
            let blocked = self.key_busy(key_hash, *i);
            let expired = now.mono_ns >= arrived_ns.saturating_add(cx.write_timeout_ns);
            // A write slot and a side buffer (repairs take side buffers too).
            let room = self.writes.available() > 0 && !self.side_free.is_empty();
            if !expired && (blocked || !room) {
                *i += 1;
                continue;
            }
            let held = self.held.remove(*i).expect("index checked");
            if blocked || !room {
                cx.stats.record_failure(Status::NotDurable);
                cx.host.complete(&held.taken, Outcome::failed(Status::NotDurable, 0), cx.metrics);
                return HeldNext::Failed;
            }
            return HeldNext::Start(held);
        }
        HeldNext::Nothing
    }

    /// Begins a write (steps 3, 5, 6: order, seal, encode, and its outcome-table
    /// entry); the caller checked that a write slot and a side buffer are free and ran
    /// step 2, whose end was `predicted_ns` (`started_ns`: the host clock when the
    /// write's stages began); in sequencer mode its stamp comes from a block fetched
    /// after it arrived. `None`: refused, and completed to the host.
    pub fn begin<Q: RawQp>(
        &mut self,
        cx: &mut WriteCx<'_, Q>,
        held: Held,
        started_ns: u64,
        predicted_ns: u64,
        now: Now,
    ) -> Option<WriteId> {
        let Held { taken: t, key_hash, key_id, arrived_ns: arrived } = held;
        let id = self.writes.reserve().expect("the caller checked room");
        let side = self.side_free.pop().expect("the caller checked room");
        let tombstone = t.accepted.desc.op == OpCode::Delete;
        let mut times = [0u64; WriteStage::ALL.len()];
        times[WriteStage::Predict as usize] = predicted_ns;
        let write_seq = self.next_write_seq;
        let (stamp, layout, holders) =
            match Self::prepare(cx, &t, key_hash, side, tombstone, write_seq, arrived, &mut times, started_ns, now) {
                Ok(p) => p,
                Err((end, why)) => {
                    if let Some(s) = cx.sequencer.as_deref_mut() {
                        // A stamp taken for it, if any, is a no-op.
                        s.abandon_taken();
                    }
                    if let Some(left_out) = cx.admit(Noisy::WriteRefused) {
                        tracing::warn!(node = cx.me, sq_index = t.accepted.sq_index, why, left_out, "write refused");
                    }
                    self.writes.unreserve(id);
                    self.side_free.push(side);
                    cx.host.complete(&t, Outcome::failed(end, 0), cx.metrics);
                    return None;
                }
            };
        self.next_write_seq += 1;
        self.writes.put(
            id,
            Write::new(NewWrite {
                taken: t,
                key_hash,
                key_id,
                stamp,
                tombstone,
                write_seq,
                layout,
                side,
                holders,
                // From arrival: a write held behind another of its key has waited already.
                deadline_ns: arrived + cx.write_timeout_ns,
                times,
                arrived_ns: arrived,
            }),
        );
        Some(id)
    }

    /// Orders, seals and encodes the write of `t` in place (its side buffer `side`),
    /// and records it in the outcome table as `write_seq`: its stamp, stripe and
    /// holders, or the status to refuse it with and why.
    #[allow(clippy::too_many_arguments)]
    fn prepare<Q: RawQp>(
        cx: &mut WriteCx<'_, Q>,
        t: &Taken,
        key_hash: u64,
        side: u32,
        tombstone: bool,
        write_seq: u64,
        arrived_ns: u64,
        times: &mut [u64; WriteStage::ALL.len()],
        started_ns: u64,
        now: Now,
    ) -> Result<(u64, StripeLayout, [u8; crate::limits::FRAGMENTS_MAX]), (Status, String)> {
        let a = t.accepted;
        // The stages up to encode run within one call: their ends are `now` plus the
        // real time spent so far, read from the host clock for the per-stage figures
        // only (nothing decides on them, so a manual clock stays deterministic).
        let at = move || now.mono_ns + prescient_shim::sys::monotonic_ns().saturating_sub(started_ns);
        let failed = |e: &dyn std::fmt::Display| (Status::StageFailed, e.to_string());

        // 3. Order.
        let stamp = match cx.sequencer.as_deref_mut() {
            // The caller took the write only with a stamp in hand; it can be gone
            // only if the epoch changed in between.
            Some(s) => s
                .take(cx.control, arrived_ns, key_hash, tombstone, write_seq, now)
                .and_then(|v| Stamp::new(v, cx.me))
                .ok_or_else(|| (Status::Unavailable, "no sequencer stamp in hand (the epoch changed)".to_owned()))?
                .raw(),
            None => {
                if let Some(floor) = cx.hlc.reservation_due(now.wall_us) {
                    // Keeps the persisted version floor ahead of the versions issued (an
                    // fsync at most once per second of versions).
                    cx.hlc_floor
                        .persist(floor)
                        .map_err(|e| (Status::StageFailed, format!("cannot persist the version floor: {e}")))?;
                    cx.hlc.floor_persisted(floor);
                }
                cx.hlc.next(now.wall_us).map_err(|e| failed(&e))?.raw()
            }
        };
        times[WriteStage::Sequence as usize] = at();

        // 5. Seal, 6. encode, in place in the arena.
        let config = cx.region.layout().config;
        let buffer_offset = cx.region.layout().buffer(a.buffer);
        let side_offset = cx.region.layout().buffer(side);
        // SAFETY: the host buffer was accepted (ownership Dpu in the private in-flight
        // table) and the side buffer is this write's, taken from the free list; no work
        // request carries either yet (fragments are posted after both slices end), and
        // they are two different buffers.
        #[allow(unsafe_code)]
        let (buf, side_buf) = unsafe {
            (
                super::host_memory::buffer_mut(cx.region, buffer_offset, config.buffer_bytes as usize),
                super::host_memory::buffer_mut(cx.region, side_offset, config.buffer_bytes as usize),
            )
        };
        let binding = Binding { key_hash, version: stamp, k: cx.k as u8, m: cx.m as u8, tombstone };
        let frame_len = cx
            .sealer
            .seal_in_place(&mut buf[VALUE_OFFSET..], a.desc.value_len as usize, &binding)
            .map_err(|e| failed(&e))?;
        times[WriteStage::Seal as usize] = at();
        let layout = StripeLayout::new(cx.k, cx.m, frame_len).map_err(|e| failed(&e))?;
        let Some(data) = buf.get_mut(VALUE_OFFSET..VALUE_OFFSET + layout.data_len()) else {
            return Err((Status::BadValueLength, "the stripe does not fit the buffer".into()));
        };
        encode_stripe(cx.rs, &layout, StripeId { key_hash, version: stamp }, data, side_buf).map_err(|e| failed(&e))?;
        times[WriteStage::Encode as usize] = at();

        // Holders: the stripe's k + m fragments on consecutive storage nodes from the
        // key's home.
        let holders = cx.placement.holders(key_hash, layout.fragments());
        let holder_mask = placement::mask_of(&holders[..layout.fragments()]);
        cx.outcomes
            .begin(write_seq, key_hash, stamp, holder_mask, u32::from(tombstone))
            .map_err(|e| (Status::Overloaded, e.to_string()))?;
        Ok((stamp, layout, holders))
    }

    /// Sends begun write `id` out (steps 7 and 4): its fragments to their holders and,
    /// in the speculative policy, its marks to every host's directory, upgraded from
    /// the marks `lease` of the predictor lease its key had, if any.
    pub fn replicate<Q: RawQp>(&mut self, cx: &mut WriteCx<'_, Q>, id: WriteId, lease: Option<&[Mark; NODES_MAX]>) {
        let w = self.writes.get_mut(id).expect("a write just begun");
        if let Some(marks) = lease {
            for (j, mark) in marks.iter().enumerate() {
                if let Mark::Placed { prior, .. } = mark {
                    w.lease_priors[j] = Some(*prior);
                    w.leased = true;
                }
            }
        }
        let (holders, fragments, stamp) = (w.holders, w.layout.fragments(), w.stamp);

        // 7. Replicate.
        for (i, &h) in holders.iter().enumerate().take(fragments) {
            if h == cx.me {
                self.persist_own_fragment(cx, id, i);
            } else {
                self.try_send_fragment(cx, id, i, h);
            }
        }
        // 4. Invalidate speculatively, in the same round trip.
        if cx.policy.invalidation == Invalidation::Speculative {
            for j in 0..cx.n as u8 {
                let guess = lease.and_then(|marks| match marks[j as usize] {
                    Mark::Placed { placed, .. } => Some(placed.pack()),
                    _ => None,
                });
                self.start_mark(cx, id, j, Intent::Mark { version: stamp >> 8 }, guess);
            }
        }
    }

    /// Starts (or skips) a directory job of write `id` on host `j`.
    fn start_mark<Q: RawQp>(
        &mut self,
        cx: &mut WriteCx<'_, Q>,
        id: WriteId,
        j: u8,
        intent: Intent,
        guess: Option<u64>,
    ) {
        if j != cx.me {
            let trust = cx.links.peer(j).map(|p| (p.trust(), p.is_up()));
            match trust {
                Some((Trust::Excluded, _)) => {
                    self.set_mark(id, j, Mark::Skipped);
                    return;
                }
                Some((Trust::Suspect { .. }, _)) | Some((_, false)) => {
                    self.set_mark(id, j, Mark::Failed);
                    if cx.links.peer(j).is_some_and(|p| p.trust() == Trust::Trusted) {
                        self.effects.push_back(WriteEffect::Suspect { host: j });
                    }
                    return;
                }
                _ => {}
            }
        }
        let key_id = self.writes.get(id).map(|w| w.key_id).unwrap_or_default();
        let slot = slot_for(cx.links, cx.me, cx.directory_slots, j, key_id);
        self.effects.push_back(WriteEffect::StartJob { owner: Owner::Write(id), host: j, slot, intent, guess });
    }

    fn set_mark(&mut self, id: WriteId, j: u8, mark: Mark) {
        if let Some(w) = self.writes.get_mut(id) {
            w.set_mark(j, mark);
        }
    }

    /// How the directory job [`WriteEffect::StartJob`] asked for write `id` started.
    #[allow(clippy::too_many_arguments)]
    pub fn job_started<Q: RawQp>(
        &mut self,
        cx: &mut WriteCx<'_, Q>,
        id: WriteId,
        j: u8,
        dir_slot: u32,
        intent: Intent,
        started: Started,
        now: Now,
    ) {
        match started {
            Started::Finished(f) => self.job_done(cx, id, j, dir_slot, intent, f, now),
            Started::Running(job) => self.set_mark(id, j, Mark::Running { job }),
        }
    }

    /// A directory job of write `id` on slot `dir_slot` of host `j` ended.
    #[allow(clippy::too_many_arguments)]
    pub fn job_done<Q: RawQp>(
        &mut self,
        cx: &mut WriteCx<'_, Q>,
        id: WriteId,
        j: u8,
        dir_slot: u32,
        intent: Intent,
        f: Finished,
        now: Now,
    ) {
        let rollback = |placed: directory::SlotWord, prior| WriteEffect::StartJob {
            owner: Owner::Detached,
            host: j,
            slot: dir_slot,
            intent: Intent::Rollback { placed, prior },
            guess: Some(placed.pack()),
        };
        let Some(w) = self.writes.get_mut(id) else {
            // The write is gone: a mark that landed after it ended must not stay.
            if let (Intent::Mark { .. }, Finished::Done { placed, replaced }) = (intent, f) {
                self.effects.push_back(rollback(placed, directory::prior_of(replaced)));
            }
            return;
        };
        match (intent, f) {
            (Intent::Mark { .. }, Finished::Done { placed, replaced }) => {
                let prior = w.lease_priors[j as usize].unwrap_or_else(|| directory::prior_of(replaced));
                if let Phase::Finished(_) = w.phase() {
                    // Aborted while the CAS flew: roll it back now.
                    w.set_mark(j, Mark::Settled);
                    self.effects.push_back(rollback(placed, prior));
                } else {
                    w.set_mark(j, Mark::Placed { placed, prior });
                    if w.marks_placed(cx.n) {
                        w.stamp_stage(WriteStage::Invalidate, now.mono_ns);
                    }
                    if w.phase() == Phase::Deciding {
                        // Decided while the CAS flew: commit the mark now.
                        self.commit_mark(cx, id, j);
                    }
                }
            }
            (Intent::Mark { .. }, Finished::NotNeeded { current }) => {
                let prior = w.lease_priors[j as usize].unwrap_or(SlotState::Invalid);
                w.set_mark(j, Mark::Placed { placed: current, prior });
                if w.phase() == Phase::Deciding {
                    self.commit_mark(cx, id, j);
                }
            }
            (Intent::Invalidate { .. } | Intent::Commit { .. }, Finished::Done { .. } | Finished::NotNeeded { .. }) => {
                w.set_mark(j, Mark::Settled);
            }
            (
                Intent::Mark { .. } | Intent::Invalidate { .. } | Intent::Commit { .. },
                Finished::Failed | Finished::Contended { .. },
            ) => {
                w.set_mark(j, Mark::Failed);
                tracing::debug!(node = cx.me, peer = j, "directory job failed: waiting for the host's exclusion");
            }
            (Intent::Rollback { .. }, _) => {}
        }
    }

    /// This node holds fragment `i` of its own write: straight into its store.
    fn persist_own_fragment<Q: RawQp>(&mut self, cx: &mut WriteCx<'_, Q>, id: WriteId, i: usize) {
        let me = cx.me;
        let Some(w) = self.writes.get_mut(id) else { return };
        let config = cx.region.layout().config;
        // SAFETY: both buffers are this write's (accepted host buffer, side buffer from
        // the free list) and were last written when it sealed and striped; since then
        // only the NIC reads them, as fragment sources.
        #[allow(unsafe_code)]
        let (data, side) = unsafe {
            (
                super::host_memory::buffer(
                    cx.region,
                    cx.region.layout().buffer(w.taken.accepted.buffer),
                    config.buffer_bytes as usize,
                ),
                super::host_memory::buffer(cx.region, cx.region.layout().buffer(w.side), config.buffer_bytes as usize),
            )
        };
        if cx.sequencer.is_some() && LeaderWord::unpack(cx.control.leader()).refuses(w.stamp >> 8) {
            // Deposed since it was stamped: this node refuses it as any holder would.
            cx.stats.deposed_refused += 1;
            w.failed |= 1 << me;
            return;
        }
        let f = fragment(&w.layout, &data[VALUE_OFFSET..], side, i);
        let record = RecordRepr {
            writer: me,
            fragment_index: i as u8,
            key_hash: w.key_hash,
            stamp: w.stamp,
            write_seq: w.write_seq,
            fragment_len: f.payload.len() as u32,
            tombstone: w.tombstone,
            incarnation: cx.incarnation,
        };
        if cx.store.insert(&record, f.header, f.payload).is_ok() {
            w.acked |= 1 << me;
            // Begun moments ago with this node among its holders: nothing can refuse it.
            let write_seq = w.write_seq;
            // In the ledger before it counts towards the quorum, as at any holder.
            if let Some(ledger) = cx.ledger {
                ledger.accept(me, write_seq, w.stamp, w.key_hash, w.tombstone);
            }
            cx.outcomes
                .set_acked(write_seq, me)
                .unwrap_or_else(|e| panic!("node {me}: recording write {write_seq}'s own fragment: {e}"));
        } else {
            w.failed |= 1 << me;
        }
    }

    /// Sends fragment `i` to holder `h` now, or - if its log has no free slot (the
    /// holder is slow) or its send queue no room - marks it to retry: a write waits for
    /// log credit until its deadline rather than overwrite what the holder has not
    /// persisted. A holder that is down counts as failed at once.
    fn try_send_fragment<Q: RawQp>(&mut self, cx: &mut WriteCx<'_, Q>, id: WriteId, i: usize, h: u8) {
        let up = cx.links.peer(h).is_some_and(|p| p.is_up());
        let sent = up && self.send_fragment(cx, id, i, h);
        let Some(w) = self.writes.get_mut(id) else { return };
        if sent {
            w.waiting_credit &= !(1 << i);
            w.posted |= 1 << h;
        } else if up {
            w.waiting_credit |= 1 << i;
        } else {
            w.waiting_credit &= !(1 << i);
            w.failed |= 1 << h;
        }
    }

    /// Sends fragment `i` of a write to holder `h`: its bytes, then its entry header
    /// with the immediate. False if `h` cannot take it now (down, no log credit).
    fn send_fragment<Q: RawQp>(&mut self, cx: &mut WriteCx<'_, Q>, id: WriteId, i: usize, h: u8) -> bool {
        let Some(p) = cx.links.peer(h) else { return false };
        if !p.is_up() || !p.has_credit() || !cx.links.send_room(h, 2) {
            return false;
        }
        let w = self.writes.get_mut(id).expect("write exists");
        let (layout, side, buffer) = (w.layout, w.side, w.taken.accepted.buffer);
        let f = layout.fragment_len();
        let rl = cx.region.layout();
        let arena = rl.arena_offset;
        // Where fragment i's bytes and header are, as offsets into the arena region.
        let bytes_at = if i < layout.k() {
            rl.buffer(buffer) + VALUE_OFFSET + i * f
        } else {
            rl.buffer(side) + layout.headers_len() + (i - layout.k()) * f
        } - arena;
        let header_at = rl.buffer(side) + i * crate::stripe::HEADER_LEN;
        let mut frag_header = [0u8; crate::stripe::HEADER_LEN];
        cx.region.read_bytes(header_at, &mut frag_header);
        let payload_crc = cx.crc_shift.combine(
            crc32c::crc32c(&frag_header),
            u32::from_le_bytes(frag_header[32..36].try_into().expect("4 bytes")),
            f,
        );
        // b: the generation's low 16 bits and the fragment (a fragment index is 8 bits).
        let tag = (id.generation() & 0xffff) << 8 | i as u32;
        let entry = EntryRepr {
            kind: EntryKind::Fragment,
            writer: cx.me,
            holder: h,
            seq: 0,
            write_seq: w.write_seq,
            key_hash: w.key_hash,
            stamp: w.stamp,
            payload_len: (crate::stripe::HEADER_LEN + f) as u32,
            tombstone: w.tombstone,
            repair: false,
            payload_crc,
            incarnation: cx.incarnation,
        };
        let staging = id.slot() * (cx.k + cx.m) as u32 + i as u32;
        w.wrs += if f > 0 { 2 } else { 1 };
        post_fragment_entry(
            cx.links,
            cx.pools,
            cx.arena_mr,
            h,
            bytes_at,
            &frag_header,
            entry,
            staging,
            (WrId::new(Kind::FragmentBytes, h, id.slot(), tag), WrId::new(Kind::FragmentHeader, h, id.slot(), tag)),
            Sent::Fragment { write: id, fragment: i as u8 },
        );
        true
    }

    /// A fragment's WRITE (bytes or header) completed.
    pub fn on_fragment_sent(&mut self, id: WrId, ok: bool) {
        let Some(write) = self.writes.current(id.a) else { return };
        if write.generation() & 0xffff != id.b >> 8 {
            return;
        }
        let w = self.writes.get_mut(write).expect("current");
        w.wrs = w.wrs.saturating_sub(1);
        if !ok && w.acked & (1 << id.peer) == 0 {
            w.failed |= 1 << id.peer;
        }
    }

    /// Holder `peer` acknowledged its fragment of write `write`: persisted (`ok`) or
    /// refused with `status`.
    pub fn fragment_acked<Q: RawQp>(
        &mut self,
        cx: &mut WriteCx<'_, Q>,
        write: WriteId,
        peer: u8,
        ok: bool,
        status: u32,
    ) {
        let me = cx.me;
        let Some(w) = self.writes.get_mut(write) else { return };
        if ok {
            w.acked |= 1 << peer;
            match cx.outcomes.set_acked(w.write_seq, peer) {
                // A late acknowledgement of a write whose entry settled while it
                // waited for its marks or work requests, and a newer write took the
                // entry (the table wrapped): the table needs nothing more of it.
                Ok(()) | Err(OutcomeError::NotFound { .. }) => {}
                Err(e) => panic!("node {me}: recording node {peer}'s fragment of a write: {e}"),
            }
        } else {
            w.failed |= 1 << peer;
            cx.stats.refusals += 1;
            if let Some(left_out) = cx.admit(Noisy::HolderRefused) {
                tracing::warn!(node = me, peer, status, left_out, "holder refused a fragment");
            }
        }
        // A late holder of a decided write gets the decision too (an aborted write's,
        // so it drops the fragment).
        if ok && w.phase() != Phase::Replicating {
            self.notify(me, write, peer);
        }
    }

    /// Holder `peer`'s fragment of write `write` was lost with its link.
    pub fn fragment_lost(&mut self, write: WriteId, peer: u8) {
        if let Some(w) = self.writes.get_mut(write) {
            if w.acked & (1 << peer) == 0 {
                w.failed |= 1 << peer;
            }
        }
    }

    /// Moves the write in slot `slot` (if any) forward.
    pub fn advance<Q: RawQp>(&mut self, cx: &mut WriteCx<'_, Q>, slot: u32, now: Now) -> bool {
        let Some(id) = self.writes.current(slot) else { return false };
        let (quorum, n, decide_min) = (cx.quorum, cx.n, cx.m as u32 + 1);
        let w = self.writes.get_mut(id).expect("current");
        match w.phase() {
            Phase::Replicating => {
                if w.waiting_credit != 0 {
                    let (waiting, holders, fragments) = (w.waiting_credit, w.holders, w.layout.fragments());
                    for (i, &holder) in holders.iter().enumerate().take(fragments) {
                        if waiting & (1 << i) != 0 {
                            self.try_send_fragment(cx, id, i, holder);
                        }
                    }
                }
                let w = self.writes.get_mut(id).expect("write exists");
                if w.acked.count_ones() >= quorum {
                    w.stamp_stage(WriteStage::Replicate, now.mono_ns);
                    self.decide(cx, id);
                    true
                } else if !w.quorum_possible(quorum) || now.mono_ns >= w.deadline_ns {
                    self.abort(cx, id);
                    true
                } else {
                    false
                }
            }
            Phase::Deciding => {
                self.renotify(cx, id);
                let w = self.writes.get_mut(id).expect("write exists");
                let decided = w.decided.count_ones() >= decide_min;
                if decided && w.marks_settled(n) {
                    w.stamp_stage(WriteStage::Decide, now.mono_ns);
                    self.commit(cx, id, now);
                    true
                } else if decided
                    && !w.completed
                    && w.wrs == 0
                    && cx.policy.invalidation == Invalidation::Speculative
                    && w.marks_in_force(n)
                {
                    w.stamp_stage(WriteStage::Decide, now.mono_ns);
                    self.complete_early(cx, id, now);
                    true
                } else if now.mono_ns >= w.deadline_ns {
                    w.set_phase(Phase::Finished(End::Undecided));
                    let (write_seq, decided) = (w.write_seq, w.decided);
                    if let Some(left_out) = cx.admit(Noisy::Undecided) {
                        tracing::warn!(
                            node = cx.me,
                            write_seq,
                            decided,
                            left_out,
                            "write committed but its decision did not reach m + 1 holders in time"
                        );
                    }
                    true
                } else {
                    false
                }
            }
            Phase::Invalidating => {
                if w.marks_settled(n) {
                    w.stamp_stage(WriteStage::Invalidate, now.mono_ns);
                    w.set_phase(Phase::Finished(End::Committed));
                    true
                } else if now.mono_ns >= w.deadline_ns {
                    w.set_phase(Phase::Finished(End::Undecided));
                    true
                } else {
                    false
                }
            }
            Phase::Finished(_) => {
                // A rollback not settled yet holds the answer back, up to its bound.
                let answer_by = w.deadline_ns + cx.write_timeout_ns * ROLLBACK_ANSWER_TIMEOUTS;
                if w.rollback_open && now.mono_ns < answer_by {
                    return false;
                }
                if w.wrs == 0 {
                    self.retire(cx, id, now);
                    true
                } else {
                    false
                }
            }
        }
    }

    /// Phase 1 reached its quorum: the write is committed at the writer.
    fn decide<Q: RawQp>(&mut self, cx: &mut WriteCx<'_, Q>, id: WriteId) {
        let me = cx.me;
        let w = self.writes.get_mut(id).expect("write exists");
        w.set_phase(Phase::Deciding);
        let (write_seq, key_hash, stamp, acked, holders) = (w.write_seq, w.key_hash, w.stamp, w.acked, w.holder_mask());
        if let Err(e) = cx.outcomes.set_state(write_seq, WriteState::Committed) {
            tracing::error!(node = me, write_seq, error = %e, "cannot record the commit");
        }
        if let Some(s) = cx.sequencer.as_deref_mut() {
            s.commit(stamp >> 8);
        }
        if acked & (1 << me) != 0 && Self::settle_own(cx, write_seq, key_hash, stamp, Decision::Committed) {
            w.decided |= 1 << me;
        }
        // Every holder hears the decision, also those whose acknowledgement was lost
        // (they may hold the fragment); only acknowledged ones count towards m + 1.
        for h in 0..cx.n as u8 {
            if h != me && holders & (1 << h) != 0 {
                self.notify(me, id, h);
            }
        }
        // The marks turn Invalid now, in the same round trip as the decision: the host
        // hears of the commit only once both are done, so no reader can refill a slot
        // from a value without this write after it (a reader's GET that sees this
        // write's fragments still undecided gets no refill either).
        for j in 0..cx.n as u8 {
            self.commit_mark(cx, id, j);
        }
    }

    /// Applies the decision of this node's own write to its own record and, once the
    /// store has it, records it in the outcome table (the writer is one of its holders,
    /// and an entry settles only when every holder that stored a fragment has its
    /// decision). False if the store could not apply it: the entry stays unsettled, and
    /// the next start's [`Writer::recover_outcomes`] tries again.
    fn settle_own<Q: RawQp>(
        cx: &mut WriteCx<'_, Q>,
        write_seq: u64,
        key_hash: u64,
        stamp: u64,
        decision: Decision,
    ) -> bool {
        let me = cx.me;
        if let Some(ledger) = cx.ledger.filter(|_| decision == Decision::Aborted) {
            ledger.roll_back(me, write_seq, stamp, key_hash);
        }
        if let Err(e) = cx.store.resolve(key_hash, stamp, decision) {
            tracing::error!(node = me, write_seq, error = %e, "cannot apply the decision of an own write to the store");
            return false;
        }
        if let Err(e) = cx.outcomes.set_decided(write_seq, me) {
            tracing::error!(node = me, write_seq, error = %e, "cannot record an own write's decision");
            return false;
        }
        true
    }

    /// Turns write `id`'s placed mark on host `j` Invalid, as a tracked job.
    fn commit_mark<Q: RawQp>(&mut self, cx: &mut WriteCx<'_, Q>, id: WriteId, j: u8) {
        let Some(w) = self.writes.get_mut(id) else { return };
        let Mark::Placed { placed, .. } = w.mark(j) else { return };
        if placed.state != SlotState::Pending {
            w.set_mark(j, Mark::Settled);
            return;
        }
        let slot = slot_for(cx.links, cx.me, cx.directory_slots, j, w.key_id);
        let intent = Intent::Commit { placed };
        self.effects.push_back(WriteEffect::StartJob {
            owner: Owner::Write(id),
            host: j,
            slot,
            intent,
            guess: Some(placed.pack()),
        });
    }

    /// Queues the write's decision for holder `h` (nothing while it is undecided).
    fn notify(&mut self, me: u8, id: WriteId, h: u8) {
        let Some(w) = self.writes.get_mut(id) else { return };
        let outcome = match w.phase() {
            Phase::Replicating => return,
            Phase::Finished(End::NotDurable) => Decision::Aborted,
            Phase::Deciding | Phase::Invalidating | Phase::Finished(End::Committed | End::Undecided) => {
                Decision::Committed
            }
        };
        let record = OutcomeRecordRepr { write_seq: w.write_seq, key_hash: w.key_hash, stamp: w.stamp, outcome };
        // Only a Committed decision counts towards the m + 1 a write waits for.
        let owner = (outcome == Decision::Committed).then_some(id);
        if self.notices.queue(h, record, owner) {
            w.notified |= 1 << h;
        } else {
            // The batch is full (the peer is slow or away): the write tries again while
            // it decides (`renotify`), and a retired one leaves it to the peer's resync.
            tracing::debug!(node = me, peer = h, "notice batch full; the decision is queued again later");
        }
    }

    /// Queues the decision again for the holders it counts on that have neither heard it
    /// nor have it queued (a full batch refused it, or its notice was lost).
    fn renotify<Q: RawQp>(&mut self, cx: &mut WriteCx<'_, Q>, id: WriteId) {
        let me = cx.me;
        let Some(w) = self.writes.get(id) else { return };
        let waiting = w.holder_mask() & w.acked & !w.decided & !w.notified & !(1 << me);
        if waiting == 0 {
            return;
        }
        for h in 0..cx.n as u8 {
            if waiting & (1 << h) != 0 && cx.links.peer(h).is_some_and(|p| p.is_up()) {
                self.notify(me, id, h);
            }
        }
    }

    /// Phase 1 cannot reach its quorum: roll back.
    fn abort<Q: RawQp>(&mut self, cx: &mut WriteCx<'_, Q>, id: WriteId) {
        let me = cx.me;
        let w = self.writes.get_mut(id).expect("write exists");
        let (write_seq, key_hash, stamp, acked, holders) = (w.write_seq, w.key_hash, w.stamp, w.acked, w.holder_mask());
        // Holders never sent a fragment (down when it went out) cannot hold it: they
        // count as lacking it from the start, so the rollback waits only for those
        // that may. Without this, a write rolled back while one holder was away and
        // the others froze it Held (they fenced this writer) waited for that holder's
        // return, and every order with it (the double fault of the cluster README's
        // "Not built").
        let unsent = holders & !w.posted & !(1 << me);
        w.set_phase(Phase::Finished(End::NotDurable));
        // Counted by status in the summary; per write only at debug level.
        tracing::debug!(node = me, write_seq, acked, failed = w.failed, unsent, "write not durable: rolling back");
        // Still replicating, so its entry is InProgress and protected from reuse.
        cx.outcomes
            .set_state(write_seq, WriteState::Aborted)
            .unwrap_or_else(|e| panic!("node {me}: recording write {write_seq}'s rollback: {e}"));
        for h in (0..cx.n as u8).filter(|&h| unsent & (1 << h) != 0) {
            cx.outcomes
                .set_decided(write_seq, h)
                .unwrap_or_else(|e| panic!("node {me}: recording that write {write_seq} never reached node {h}: {e}"));
        }
        // The writer is a holder too: its own record dropped is its own decision
        // persisted. Without this bit the entry never settles, and once the table
        // wraps every new write finds it in its way (the outcome-table wedge).
        if acked & (1 << me) != 0 {
            Self::settle_own(cx, write_seq, key_hash, stamp, Decision::Aborted);
        }
        if let Some(s) = cx.sequencer.as_deref_mut() {
            // Its stamp is recorded Aborted once too few of the other holders can hold
            // the fragment (`rollbacks.rs`): as they persist the rollback. This node
            // never counts itself, its ledger being gone with it if it goes for good.
            let lacking = cx.outcomes.get(write_seq).map_or(0, |e| e.lacking(me));
            let settled = s.roll_back(stamp >> 8, holders, lacking, cx.quorum);
            // Answered `NotDurable` only once settled (see `Write::rollback_open`).
            self.writes.get_mut(id).expect("write exists").rollback_open = !settled;
        }
        for h in 0..cx.n as u8 {
            if h != me && holders & !unsent & (1 << h) != 0 {
                let record = OutcomeRecordRepr { write_seq, key_hash, stamp, outcome: Decision::Aborted };
                if !self.notices.queue(h, record, None) {
                    if let Some(p) = cx.links.peer_mut(h) {
                        rewind(&mut p.resync, write_seq);
                    }
                }
            }
        }
        // A rollback not settled yet may still turn out a write (the holders' rule, once
        // holders fence this node: `fence.rs`): its marks go Invalid, right whatever
        // the order decides, instead of back to what they replaced.
        let open = self.writes.get(id).is_some_and(|w| w.rollback_open);
        self.rollback_marks(cx, id, open);
    }

    /// Rolls the write's placed marks back to what they replaced, or (`invalidate`)
    /// turns them Invalid.
    fn rollback_marks<Q: RawQp>(&mut self, cx: &mut WriteCx<'_, Q>, id: WriteId, invalidate: bool) {
        for j in 0..cx.n as u8 {
            let Some(w) = self.writes.get_mut(id) else { return };
            let Mark::Placed { placed, prior } = w.mark(j) else { continue };
            w.set_mark(j, Mark::Settled);
            if placed.state != SlotState::Pending {
                continue;
            }
            let slot = slot_for(cx.links, cx.me, cx.directory_slots, j, w.key_id);
            let intent = if invalidate { Intent::Commit { placed } } else { Intent::Rollback { placed, prior } };
            self.effects.push_back(WriteEffect::StartJob {
                owner: Owner::Detached,
                host: j,
                slot,
                intent,
                guess: Some(placed.pack()),
            });
        }
    }

    /// Decided on m + 1 holders with every mark placed, and no work request carries
    /// its buffer: the host gets its completion now, before the marks move to the
    /// committed version (see `write.rs`). The write keeps its slot until they have.
    fn complete_early<Q: RawQp>(&mut self, cx: &mut WriteCx<'_, Q>, id: WriteId, now: Now) {
        let w = self.writes.get_mut(id).expect("write exists");
        w.completed = true;
        cx.stats.record_commit(w.stamp, now.mono_ns);
        cx.stats.record_write(w, now.mono_ns, Status::Ok);
        let mut outcome = Outcome::ok(w.stamp);
        if w.leased {
            outcome.flags |= FLAG_LEASED;
        }
        cx.host.complete(&w.taken, outcome, cx.metrics);
    }

    /// Decided on m + 1 holders and every mark settled: the write is committed.
    fn commit<Q: RawQp>(&mut self, cx: &mut WriteCx<'_, Q>, id: WriteId, now: Now) {
        let w = self.writes.get_mut(id).expect("write exists");
        w.stamp_stage(WriteStage::Commit, now.mono_ns);
        if !w.completed {
            cx.stats.record_commit(w.stamp, now.mono_ns);
        }
        if cx.policy.invalidation == Invalidation::AfterCommit {
            w.set_phase(Phase::Invalidating);
            let version = w.stamp >> 8;
            for j in 0..cx.n as u8 {
                self.start_mark(cx, id, j, Intent::Invalidate { version }, None);
            }
        } else {
            w.set_phase(Phase::Finished(End::Committed));
        }
    }

    /// Completes a finished write to the host and frees its slot and side buffer.
    fn retire<Q: RawQp>(&mut self, cx: &mut WriteCx<'_, Q>, id: WriteId, now: Now) {
        let Some(w) = self.writes.remove(id) else { return };
        self.side_free.push(w.side);
        let Some(end) = w.phase().end() else { unreachable!("retiring write {} before it finished", w.write_seq) };
        let mut outcome = match end {
            End::Committed => Outcome::ok(w.stamp),
            // Its rollback may still not reach enough holders: the outcome is not known.
            End::NotDurable if w.rollback_open => Outcome::failed(Status::Unavailable, w.acked.count_ones()),
            End::NotDurable => Outcome::failed(Status::NotDurable, w.acked.count_ones()),
            End::Undecided => Outcome::failed(Status::Unavailable, w.decided.count_ones()),
        };
        if w.leased {
            outcome.flags |= FLAG_LEASED;
        }
        // Holders that never persisted their fragment of a committed write get it
        // rebuilt (the resync of each comes back to this write).
        if matches!(end, End::Committed | End::Undecided) {
            // And those that may not have heard the decision, with none queued for them.
            let missing = w.holder_mask() & (!w.acked | (!w.decided & !w.notified)) & !(1 << cx.me);
            // Its own fragment, if its store refused it (a set full of undecided
            // versions of a hot key): rebuilt into its own store by a local repair.
            if w.holder_mask() & !w.acked & (1 << cx.me) != 0 {
                rewind(cx.own_resync, w.write_seq);
            }
            for h in 0..cx.n as u8 {
                if missing & (1 << h) != 0 {
                    if let Some(p) = cx.links.peer_mut(h) {
                        rewind(&mut p.resync, w.write_seq);
                    }
                }
            }
        }
        if !w.completed {
            cx.stats.record_write(&w, now.mono_ns, outcome.status);
            cx.host.complete(&w.taken, outcome, cx.metrics);
        }
    }

    /// After a restart: finishes what the previous incarnation of node `me` decided. A
    /// write it left in progress never completed to the host and is aborted; one it
    /// committed has its own record resolved (holders it did not tell keep a pending
    /// record, which readers do not count).
    pub fn recover_outcomes(me: u8, outcomes: &mut OutcomeTable, store: &mut Store, ledger: Option<&Ledger>) {
        let mut unsettled = Vec::new();
        let me_bit = 1u32 << me;
        outcomes
            .unsettled(|e| {
                let own_open = e.acked() & me_bit != 0 && e.decided() & me_bit == 0;
                unsettled.push((e.write_seq(), e.key_hash(), e.stamp(), e.state(), own_open))
            })
            .unwrap_or_else(|e| panic!("node {me}: reading the outcome table at start: {e}"));
        let (mut aborted, mut committed) = (0, 0);
        for (write_seq, key_hash, stamp, state, own_open) in unsettled {
            let decision = match state {
                WriteState::InProgress => {
                    // InProgress a moment ago, in a table only this node writes.
                    outcomes.set_state(write_seq, WriteState::Aborted).unwrap_or_else(|e| {
                        panic!("node {me}: aborting write {write_seq} a previous incarnation left: {e}")
                    });
                    aborted += 1;
                    Decision::Aborted
                }
                WriteState::Aborted => Decision::Aborted,
                WriteState::Committed => {
                    committed += 1;
                    Decision::Committed
                }
                WriteState::Free => continue,
            };
            // The own record (if the store took one) gets the decision, and the entry
            // the own holder bit: the peers' bits come with their resync.
            if own_open || state == WriteState::InProgress {
                // The store may never have taken the own record (it was full): nothing
                // to resolve then. The ledger may have it even if the outcome table does
                // not (a crash between the two): a rollback goes to both.
                if let Some(ledger) = ledger.filter(|_| decision == Decision::Aborted) {
                    ledger.roll_back(me, write_seq, stamp, key_hash);
                }
                let _ = store.resolve(key_hash, stamp, decision);
                if own_open {
                    // Decided (aborted just above if it was not), and this node is a
                    // holder: its acked bit says so.
                    outcomes.set_decided(write_seq, me).unwrap_or_else(|e| {
                        panic!("node {me}: settling write {write_seq} a previous incarnation left: {e}")
                    });
                }
            }
        }
        if aborted + committed > 0 {
            tracing::info!(node = me, aborted, committed, "settled writes a previous incarnation left");
        }
    }

    /// The order decided this node's write of stamp `stamp` by the holders' ledgers
    /// (`ledgers.rs`), a write or not (`holding`: the holders read holding its fragment),
    /// and the fate ring took it. A write still waiting for its rollback to settle is
    /// answered: `NotDurable` if not a write; a write keeps waiting for its bound and is
    /// answered `Unavailable` (its holders commit it as their orders release it, so a
    /// GET right after an OK might not see it yet). Its outcome entry takes the decision
    /// ([`OutcomeTable::take_ordered`]); for a write, returns its number: the resyncs
    /// must go over it again (repairs, then the decision).
    pub fn adopted(&mut self, outcomes: &mut OutcomeTable, stamp: u64, write: bool, holding: u32) -> Option<u64> {
        if let Some((_, w)) = self.writes.iter_mut().find(|(_, w)| w.stamp == stamp) {
            if !write {
                w.rollback_open = false;
            }
        }
        let mut found = None;
        let _ = outcomes.unsettled(|e| {
            if e.stamp() == stamp {
                found = Some(e.write_seq());
            }
        });
        tracing::debug!(stamp, write, holding, found = ?found, "the order's decision of a rolled-back write");
        let write_seq = found?;
        if let Err(e) = outcomes.take_ordered(write_seq, write, holding) {
            tracing::error!(error = %e, write_seq, "cannot record the order's decision of a rolled-back write");
            return None;
        }
        write.then_some(write_seq)
    }

    /// Notice slots free, and records waiting per peer (for diagnostics).
    pub fn notices_debug(&self) -> String {
        format!(
            "{} free, batches {:?}",
            self.notices.in_flight.available(),
            self.notices.batches.iter().map(Vec::len).collect::<Vec<_>>()
        )
    }

    /// Queues an outcome record for peer `h` that no write in flight waits for; false
    /// if its batch is full.
    pub fn queue_notice(&mut self, h: u8, record: OutcomeRecordRepr) -> bool {
        self.notices.queue(h, record, None)
    }

    /// Sends the outcome records waiting for each peer, one notice entry per peer.
    pub fn flush_notices<Q: RawQp>(&mut self, cx: &mut WriteCx<'_, Q>) -> bool {
        let mut busy = false;
        for h in 0..cx.n as u8 {
            if h == cx.me || !self.notices.waiting(h) {
                continue;
            }
            let Some(p) = cx.links.peer(h) else { continue };
            let (up, credit, remote) = (p.is_up(), p.has_credit(), p.remote);
            if !up {
                // Kept for when the link is back (bounded by the batch; what does not
                // fit is found again by the resync from the outcome table).
                continue;
            }
            if !credit || !cx.links.send_room(h, 1) {
                continue;
            }
            let Some(notice) = self.notices.in_flight.reserve() else { continue };
            busy = true;
            let remote = remote.expect("an up peer has advertised its regions");
            let batch = self.notices.take_next(h);
            let mut payload = [0u8; NOTICE_RECORDS_MAX * OUTCOME_RECORD_LEN];
            for (i, r) in batch.iter().enumerate() {
                r.record.emit(&mut payload[i * OUTCOME_RECORD_LEN..(i + 1) * OUTCOME_RECORD_LEN]);
            }
            let payload = &payload[..batch.len() * OUTCOME_RECORD_LEN];
            let p = cx.links.peer_mut(h).expect("peer exists");
            let seq = p.next_seq;
            p.next_seq += 1;
            p.sent.push_back(Sent::Notice { notice });
            p.bytes_out += (ENTRY_HEADER_LEN + payload.len()) as u64;
            let entry = EntryRepr {
                kind: EntryKind::Outcomes,
                writer: cx.me,
                holder: h,
                seq,
                write_seq: 0,
                key_hash: 0,
                stamp: 0,
                payload_len: payload.len() as u32,
                tombstone: false,
                repair: false,
                payload_crc: crc32c::crc32c(payload),
                incarnation: cx.incarnation,
            };
            let mut head = [0u8; ENTRY_HEADER_LEN];
            entry.emit(&mut head);
            let pool = &cx.pools.notices;
            pool.write(notice.slot(), &head);
            pool.memory().write(pool.offset(notice.slot()) + ENTRY_HEADER_LEN, payload).expect("notice fits its slot");
            self.notices.in_flight.put(notice, batch);
            let log_at = (seq % u64::from(remote.log_slots)) * u64::from(remote.log_slot_bytes);
            let buf = pool.buf(notice.slot(), ENTRY_HEADER_LEN + payload.len());
            cx.links.post(
                h,
                WrId::of(Kind::Notice, h, notice),
                Op::Write { remote: remote.log.at(log_at), imm: Some((seq & 0x7fff_ffff) as u32) },
                buf,
            );
        }
        busy
    }

    /// Records in the outcome table that the holders of `mask` have write `write_seq`'s
    /// decision (or need nothing more of it).
    fn decided_by<Q: RawQp>(cx: &mut WriteCx<'_, Q>, write_seq: u64, mask: u32) {
        for h in (0..NODES_MAX as u8).filter(|h| mask & (1 << h) != 0) {
            match cx.outcomes.set_decided(write_seq, h) {
                Ok(()) | Err(OutcomeError::NotFound { .. }) => {}
                Err(e) => tracing::error!(node = cx.me, write_seq, error = %e, "cannot record a holder's decision"),
            }
        }
    }

    /// Notice `notice` to `peer` was taken, taken but for the rollbacks of writes the
    /// peer keeps frozen, or lost.
    pub fn notice_done<Q: RawQp>(&mut self, cx: &mut WriteCx<'_, Q>, notice: NoticeId, peer: u8, answer: NoticeAnswer) {
        let me = cx.me;
        let Some(mut batch) = self.notices.in_flight.remove(notice) else {
            unreachable!("node {me}: notice {notice:?} to node {peer} settled twice")
        };
        let rollbacks = batch.iter().filter(|p| p.record.outcome == Decision::Aborted).count();
        for p in batch.drain(..) {
            // A fenced peer took every record but the rollbacks of writes it keeps
            // frozen, and does not say which: each rollback of such a notice is sent
            // again alone (its answer then says), its commits count as taken.
            let mut read = read_answer(answer, p.record.outcome, rollbacks);
            if read == RecordAnswer::AskAlone {
                if self.notices.queue_alone(peer, p) {
                    cx.stats.rollbacks_resent_alone += 1;
                    continue;
                }
                // No room: it counts for nothing, and the order decides the write.
                read = RecordAnswer::Frozen;
            }
            let (ok, fenced) = (read == RecordAnswer::Taken, read == RecordAnswer::Frozen);
            if ok {
                // Settles the outcome table entry (also for resynced, long-gone writes).
                match cx.outcomes.set_decided(p.record.write_seq, peer) {
                    // A resynced or repaired write so old that a newer write has taken
                    // its entry (it had settled): nothing left to record.
                    Ok(()) | Err(OutcomeError::NotFound { .. }) => {}
                    Err(e) => panic!("node {me}: recording node {peer}'s decision of a write: {e}"),
                }
                if p.record.outcome == Decision::Aborted {
                    let settled =
                        cx.sequencer.as_deref_mut().and_then(|s| s.rollback_reached(p.record.stamp >> 8, peer));
                    if let Some(fenced_by) = settled {
                        // Its host may be answered `NotDurable` now (if it still waits).
                        let stamp = p.record.stamp;
                        if let Some((_, w)) = self.writes.iter_mut().find(|(_, w)| w.stamp == stamp) {
                            w.rollback_open = false;
                        }
                        // Those that keep it frozen need nothing more: their own order
                        // tells their stores.
                        Self::decided_by(cx, p.record.write_seq, fenced_by);
                    }
                }
            }
            if fenced && !ok {
                cx.stats.rollbacks_fenced += 1;
                // Decided already (by others' rollbacks, or the order): it needs nothing
                // more; else it is remembered for when the stamp settles.
                let waiting = cx.sequencer.as_deref_mut().is_some_and(|s| s.rollback_fenced(p.record.stamp >> 8, peer));
                if !waiting {
                    Self::decided_by(cx, p.record.write_seq, 1 << peer);
                }
            }
            let Some(id) = p.owner else { continue };
            let Some(w) = self.writes.get_mut(id) else { continue };
            w.notified &= !(1 << peer);
            // Only a holder that acknowledged its fragment holds it for sure.
            if ok && p.record.outcome == Decision::Committed && w.acked & (1 << peer) != 0 {
                w.decided |= 1 << peer;
            }
        }
        self.notices.spare.push(batch);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(answer: NoticeAnswer, outcomes: &[Decision]) -> Vec<RecordAnswer> {
        let rollbacks = outcomes.iter().filter(|&&d| d == Decision::Aborted).count();
        outcomes.iter().map(|&d| read_answer(answer, d, rollbacks)).collect()
    }

    #[test]
    fn a_fenced_answer_names_a_rollback_only_when_the_notice_carried_one() {
        use Decision::{Aborted, Committed};
        use RecordAnswer::{AskAlone, Frozen, Lost, Taken};
        assert_eq!(read(NoticeAnswer::Taken, &[Committed, Aborted]), [Taken, Taken]);
        assert_eq!(read(NoticeAnswer::Lost, &[Committed, Aborted]), [Lost, Lost]);
        // One rollback: it is the one left out.
        assert_eq!(read(NoticeAnswer::Fenced, &[Committed, Aborted, Committed]), [Taken, Frozen, Taken]);
        // Several: any of them may be; each is asked again alone.
        assert_eq!(read(NoticeAnswer::Fenced, &[Aborted, Committed, Aborted]), [AskAlone, Taken, AskAlone]);
    }
}
