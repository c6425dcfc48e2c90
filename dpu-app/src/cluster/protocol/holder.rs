//! The holder's side: entries other writers put into this node's fragment logs.
//!
//! Entries arrive in order per writer (one queue pair each), announced by the
//! immediate of the WRITE_WITH_IMM that carried their header. Each is copied out of
//! the log before it is checked (the writer may be hostile and rewrite the slot), its
//! fragment header and payload checksums verified, the fragment persisted into the
//! store (file-backed, so it survives a kill -9 of this process) and the log's applied
//! sequence moved on; only then is it acknowledged, which also returns the log slot to
//! the writer. A bad entry is refused (acknowledged with a refusal) and skipped; an
//! entry out of sequence breaks the link.
//!
//! The role is [`Holder`]: it owns the logs other writers write into and the buffer
//! an entry is copied into; a call borrows the rest (links, store, clock, stats)
//! through a [`HoldCx`], and an entry out of sequence comes back as a
//! [`HolderEffect`] for the node to reset the link.

use std::sync::Arc;

use super::ack::{ACK_FENCED, ACK_FLAG, ACK_FULL, ACK_OK, ACK_REFUSED};
use super::links::Links;
use super::noisy::Noisy;
use super::pool::Pools;
use super::stats::NodeStats;
use super::wr::{Kind, WrId};
use crate::cluster::format::control::ControlBlock;
use crate::cluster::format::entry::{EntryKind, Outcome as Decision, HEADER_LEN as ENTRY_HEADER_LEN};
use crate::cluster::format::ledger::{Ledger, LedgerState};
use crate::cluster::format::log::{EntryBuf, FragmentLog};
use crate::cluster::format::record::RecordRepr;
use crate::cluster::format::store::{Inserted, Store, StoreError};
use crate::cluster::hlc::Hlc;
use crate::cluster::sequence::LeaderWord;
use crate::fabric::{MemoryRegion, Op, RawQp};
use crate::log_limit::LogLimits;
use crate::stripe::HeaderRepr;

/// A log of this node's, for one writer, and its registration.
pub type WriterLog = (FragmentLog, Arc<MemoryRegion>);

/// What the holder leaves for the node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HolderEffect {
    /// Writer `peer`'s entry came out of sequence: its link must be reset.
    LinkFailed {
        /// The writer.
        peer: u8,
    },
}

/// What the holder may use of its node for one call.
pub struct HoldCx<'a, Q: RawQp> {
    pub(super) me: u8,
    pub(super) k: usize,
    pub(super) m: usize,
    pub(super) sync_records: bool,
    pub(super) log_slots: u64,
    pub(super) links: &'a mut Links<Q>,
    pub(super) store: &'a mut Store,
    pub(super) hlc: &'a mut Hlc,
    /// In sequencer mode, this node's control block: fragments stamped in an epoch
    /// below its leader word are refused.
    pub(super) sequencing: Option<&'a ControlBlock>,
    pub(super) stats: &'a mut NodeStats,
    pub(super) noisy: &'a mut LogLimits<{ Noisy::COUNT }>,
    pub(super) pools: &'a Pools,
}

impl<Q: RawQp> HoldCx<'_, Q> {
    /// Whether a log line about `why` may be written now (see `Node::admit_log`).
    fn admit(&mut self, why: Noisy) -> Option<u64> {
        self.noisy.admit(why as usize, prescient_shim::sys::monotonic_ns())
    }
}

/// The holder of other writers' fragments: a log per writer (`None` for this node).
pub struct Holder {
    logs: Vec<Option<WriterLog>>,
    /// In sequencer mode, what this node accepted and rolled back of each writer's
    /// writes (`format/ledger.rs`), recorded before the acknowledgement.
    ledger: Option<Ledger>,
    /// Where an entry is copied out of its log to be checked.
    entry_buf: EntryBuf,
    /// Bytes of the entry read last.
    entry_bytes: u64,
}

impl Holder {
    /// A holder of `logs` (indexed by writer), copying entries into `entry_buf`, and
    /// keeping `ledger` (sequencer mode).
    pub fn new(logs: Vec<Option<WriterLog>>, entry_buf: EntryBuf, ledger: Option<Ledger>) -> Self {
        Self { logs, ledger, entry_buf, entry_bytes: 0 }
    }

    /// The stamp ledger (sequencer mode).
    pub fn ledger(&self) -> Option<&Ledger> {
        self.ledger.as_ref()
    }

    /// Writer `w`'s log here.
    pub fn log(&self, w: u8) -> Option<&WriterLog> {
        self.logs.get(w as usize).and_then(Option::as_ref)
    }

    /// Writer `w` announced the entry with sequence (low 31 bits) `imm` in our log.
    pub fn on_entry<Q: RawQp>(&mut self, cx: &mut HoldCx<'_, Q>, w: u8, imm: u32) -> Option<HolderEffect> {
        let me = cx.me;
        let Some((log, _)) = self.log(w) else {
            tracing::warn!(node = me, peer = w, "entry from a node with no log here");
            return None;
        };
        let seq = log.applied_seq();
        if (seq & 0x7fff_ffff) as u32 != imm {
            tracing::warn!(node = me, peer = w, expected = seq, imm, "log entry out of sequence: reconnecting");
            return Some(HolderEffect::LinkFailed { peer: w });
        }
        let (status, bytes) = self.apply_entry(cx, w, seq, true);
        if let Some((log, _)) = self.log(w) {
            log.mark_applied(seq);
        }
        if let Some(p) = cx.links.peer_mut(w) {
            p.bytes_in += bytes;
        }
        Self::send_ack(cx, w, seq, status);
        None
    }

    /// Checks and applies entry `seq` of writer `w`'s log; returns the status to
    /// acknowledge with and the entry's bytes. `live`: a fresh entry (a replay after
    /// a restart is applied the same way but not acknowledged, and logs less).
    fn apply_entry<Q: RawQp>(&mut self, cx: &mut HoldCx<'_, Q>, w: u8, seq: u64, live: bool) -> (u32, u64) {
        let status = self.apply_entry_inner(cx, w, seq, live);
        (status, self.entry_bytes)
    }

    fn apply_entry_inner<Q: RawQp>(&mut self, cx: &mut HoldCx<'_, Q>, w: u8, seq: u64, live: bool) -> u32 {
        let me = cx.me;
        let Some((log, _)) = self.logs.get(w as usize).and_then(Option::as_ref) else { return ACK_REFUSED };
        let entry = match log.read_entry(seq, &mut self.entry_buf) {
            Ok(e) => e,
            Err(e) => {
                if let Some(left_out) = live.then(|| cx.admit(Noisy::EntryRefused)).flatten() {
                    tracing::warn!(node = me, peer = w, seq, error = %e, left_out, "refused a log entry");
                }
                cx.stats.entries_refused += 1;
                return ACK_REFUSED;
            }
        };
        let header = *entry.repr();
        self.entry_bytes = (ENTRY_HEADER_LEN + entry.payload().len()) as u64;
        match header.kind {
            EntryKind::Fragment => {
                let frag = match entry.fragment() {
                    Ok(f) => f,
                    Err(e) => {
                        if let Some(left_out) = cx.admit(Noisy::EntryRefused) {
                            tracing::warn!(node = me, peer = w, seq, error = %e, left_out, "refused a fragment");
                        }
                        cx.stats.entries_refused += 1;
                        return ACK_REFUSED;
                    }
                };
                let checked =
                    HeaderRepr::parse(&frag.header).and_then(|r| frag.header.verify_payload(frag.payload).map(|()| r));
                let repr = match checked {
                    Ok(r) => r,
                    Err(e) => {
                        if let Some(left_out) = cx.admit(Noisy::EntryRefused) {
                            tracing::warn!(node = me, peer = w, seq, error = %e, left_out, "refused a fragment");
                        }
                        cx.stats.entries_refused += 1;
                        return ACK_REFUSED;
                    }
                };
                let consistent = repr.version == header.stamp
                    && repr.layout.k() == cx.k
                    && repr.layout.m() == cx.m
                    && header.writer == w
                    && (header.stamp & 0xff) as u8 == w;
                if !consistent {
                    if let Some(left_out) = cx.admit(Noisy::EntryRefused) {
                        tracing::warn!(
                            node = me,
                            peer = w,
                            seq,
                            left_out,
                            "refused a fragment whose header disagrees with its entry"
                        );
                    }
                    cx.stats.entries_refused += 1;
                    return ACK_REFUSED;
                }
                // A fenced writer's frozen writes take no fragment (`fence.rs`); a
                // repair's is of a committed write, and stays out of the ledger.
                if !header.repair && frozen(self.ledger.as_ref(), w, header.write_seq) {
                    cx.stats.fenced_refused += 1;
                    return ACK_FENCED;
                }
                // A repair's fragment is of a write its writer decided Committed, which
                // a deposed epoch may have done before the claim: only the writes' own
                // fragments are refused.
                if let Some(control) = cx.sequencing.filter(|_| !header.repair) {
                    let leader = LeaderWord::unpack(control.leader());
                    if leader.refuses(header.stamp >> 8) {
                        // Stamped by a sequencer this node has seen deposed: with every
                        // write quorum meeting the claim's majority, it cannot commit.
                        if let Some(left_out) = cx.admit(Noisy::EntryRefused) {
                            tracing::warn!(node = me, peer = w, seq, stamp = header.stamp, %leader, left_out, "refused a fragment of a deposed sequencer epoch");
                        }
                        cx.stats.deposed_refused += 1;
                        return ACK_REFUSED;
                    }
                }
                // Order this node's next writes after what it has seen (HLC).
                let _ = cx.hlc.observe(header.stamp >> 8);
                let record = RecordRepr {
                    writer: w,
                    fragment_index: repr.index,
                    key_hash: header.key_hash,
                    stamp: header.stamp,
                    write_seq: header.write_seq,
                    fragment_len: frag.payload.len() as u32,
                    tombstone: header.tombstone,
                    incarnation: header.incarnation,
                };
                let inserted = cx.store.insert(&record, frag.header.into_inner(), frag.payload);
                tracing::trace!(
                    node = me,
                    writer = w,
                    stamp = header.stamp,
                    write_seq = header.write_seq,
                    index = repr.index,
                    ?inserted,
                    "fragment stored"
                );
                let status = Self::stored_status(cx, w, inserted);
                // Acknowledged as persisted: the ledger says so first. A repair's
                // fragment is of a write already committed, and not the write's own.
                if let Some(ledger) = self.ledger.as_ref().filter(|_| status == ACK_OK && !header.repair) {
                    let changed = ledger.accept(w, header.write_seq, header.stamp, header.key_hash, header.tombstone);
                    if !Self::ledger_kept(cx, ledger, changed, w, header.write_seq) {
                        return ACK_FULL;
                    }
                }
                status
            }
            EntryKind::Outcomes => {
                let records = match entry.outcomes() {
                    Ok(r) => r,
                    Err(_) => {
                        cx.stats.entries_refused += 1;
                        return ACK_REFUSED;
                    }
                };
                let mut status = ACK_OK;
                for r in records {
                    let Ok(r) = r else {
                        cx.stats.entries_refused += 1;
                        return ACK_REFUSED;
                    };
                    // The rollback of a frozen write held here is not taken: the order
                    // decides it by the holders' rule, and this node's store learns
                    // the fate from its own order (`node/apply.rs`).
                    if r.outcome == Decision::Aborted && frozen_held(self.ledger.as_ref(), w, r.write_seq, r.stamp) {
                        cx.stats.fenced_refused += 1;
                        status = ACK_FENCED;
                        continue;
                    }
                    let res = cx.store.resolve(r.key_hash, r.stamp, r.outcome);
                    tracing::trace!(node = me, writer = w, stamp = r.stamp, write_seq = r.write_seq, outcome = ?r.outcome, ?res, "outcome applied");
                    let Some(ledger) = self.ledger.as_ref().filter(|_| r.outcome == Decision::Aborted) else {
                        continue;
                    };
                    let changed = ledger.roll_back(w, r.write_seq, r.stamp, r.key_hash);
                    if !Self::ledger_kept(cx, ledger, changed, w, r.write_seq) {
                        return ACK_FULL;
                    }
                }
                status
            }
        }
    }

    /// Whether writer `w`'s ledger entry for `write_seq`, `changed` just now, is as
    /// durable as the store's records (flushed with `durability = "sync"`); false, and
    /// logged, if the flush failed: the entry must not be acknowledged.
    fn ledger_kept<Q: RawQp>(cx: &HoldCx<'_, Q>, ledger: &Ledger, changed: bool, w: u8, write_seq: u64) -> bool {
        if !(changed && cx.sync_records) {
            return true;
        }
        match ledger.sync(w, write_seq) {
            Ok(()) => true,
            Err(e) => {
                tracing::error!(node = cx.me, error = %e, "cannot flush the stamp ledger to disk");
                false
            }
        }
    }

    /// The status to acknowledge writer `w`'s fragment with, from what the store made
    /// of it (flushed first with `durability = "sync"`).
    fn stored_status<Q: RawQp>(cx: &mut HoldCx<'_, Q>, w: u8, inserted: Result<Inserted, StoreError>) -> u32 {
        let me = cx.me;
        match inserted {
            Ok(Inserted::Stored { set, way }) => {
                if cx.sync_records {
                    if let Err(e) = cx.store.sync_record(set, way) {
                        tracing::error!(node = me, error = %e, "cannot flush a fragment to disk");
                        return ACK_FULL;
                    }
                }
                cx.stats.fragments_held += 1;
                ACK_OK
            }
            Ok(Inserted::Duplicate { .. } | Inserted::Superseded) => ACK_OK,
            Err(e @ (StoreError::Full { .. } | StoreError::KeyFull { .. })) => {
                cx.stats.store_full += 1;
                if let Some(left_out) = cx.admit(Noisy::StoreFull) {
                    tracing::warn!(node = me, peer = w, error = %e, left_out, "fragment refused for room");
                }
                ACK_FULL
            }
            Err(e) => {
                cx.stats.entries_refused += 1;
                if let Some(left_out) = cx.admit(Noisy::EntryRefused) {
                    tracing::warn!(node = me, peer = w, error = %e, left_out, "fragment not stored");
                }
                ACK_REFUSED
            }
        }
    }

    fn send_ack<Q: RawQp>(cx: &mut HoldCx<'_, Q>, w: u8, seq: u64, status: u32) {
        let Some(remote) = cx.links.peer(w).filter(|p| p.can_answer()).and_then(|p| p.remote) else { return };
        let imm = ACK_FLAG | (status & 0x7f) << 24 | (seq & 0xff_ffff) as u32;
        let buf = cx.pools.zero.buf(0, 0);
        // A zero-length WRITE_WITH_IMM touches no memory: any address of the peer does.
        cx.links.post(
            w,
            WrId::new(Kind::Ack, w, 0, 0),
            Op::Write { remote: remote.control.at(0), imm: Some(imm) },
            buf,
        );
    }

    /// After a restart: applies what the logs hold beyond their applied sequence
    /// (entries written before the crash, not yet persisted into the store).
    pub fn replay_logs<Q: RawQp>(&mut self, cx: &mut HoldCx<'_, Q>) {
        for w in 0..self.logs.len() as u8 {
            let mut replayed = 0u64;
            while let Some((log, _)) = self.logs.get(w as usize).and_then(Option::as_ref) {
                let seq = log.applied_seq();
                if log.read_entry(seq, &mut self.entry_buf).is_err() {
                    break;
                }
                self.apply_entry(cx, w, seq, false);
                if let Some((log, _)) = self.log(w) {
                    log.mark_applied(seq);
                }
                replayed += 1;
                if replayed >= cx.log_slots {
                    break;
                }
            }
            if replayed > 0 {
                tracing::info!(node = cx.me, writer = w, replayed, "replayed log entries left by a crash");
                cx.stats.entries_replayed += replayed;
            }
        }
    }
}

/// Writer `w`'s write `write_seq` is frozen in `ledger`: this node fenced `w` and the
/// fence covers it (`fence.rs`).
fn frozen(ledger: Option<&Ledger>, w: u8, write_seq: u64) -> bool {
    ledger.and_then(|l| l.fence_of(w)).is_some_and(|f| f.freezes(write_seq))
}

/// Writer `w`'s write `write_seq` (stamp `stamp`) is frozen in `ledger` and its fragment
/// held there (accepted, not rolled back).
fn frozen_held(ledger: Option<&Ledger>, w: u8, write_seq: u64, stamp: u64) -> bool {
    frozen(ledger, w, write_seq)
        && ledger.and_then(|l| l.at(w, write_seq)).is_some_and(|e| e.stamp == stamp && e.state == LedgerState::Held)
}
