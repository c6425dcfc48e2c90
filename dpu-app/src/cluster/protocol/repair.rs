//! Repair: a committed write whose fragment a holder never persisted (it was down, or
//! its link broke) gets that fragment rebuilt and sent once the holder is back, so the
//! write again survives any m nodes down.
//!
//! The writer finds such writes in its outcome table (a holder in the write's holder
//! set but not in its acknowledged set) while it resyncs a reconnected peer. A repair
//! gathers the key's store set from every reachable node (this one included), rebuilds
//! the sealed frame from any k fragments of exactly that version (their checksums
//! checked), encodes the stripe again - byte for byte the fragments the write made,
//! since sealing is not redone - and writes the missing one into the holder's log,
//! flagged as a repair; once the holder acknowledges it, the decision follows. A repair
//! of a version superseded by a newer committed one is dropped: only the newest value
//! of a key must survive.

//!
//! The [`Repairer`] owns the repairs in flight and their scratch; what a repair needs of
//! the writer's side (its outcome table, the notice queue, posting a fragment entry,
//! the resync cursors) it hands to the node as a `RepairEffect`.

use prescient_shim::region::Region;

use super::links::Links;
use super::peer::Sent;
use super::pool::{Pool, Pools};
use super::slots::{Handle, RepairId, SlotTable};
use super::stats::NodeStats;
use super::time::Now;
use super::wr::{Kind, WrId};
use crate::cluster::format::crc_combine::ShiftCache;
use crate::cluster::format::entry::{EntryKind, EntryRepr, Outcome as Decision, OutcomeRecordRepr};
use crate::cluster::format::record::{gathered_range, KeySets, RecordRepr, RecordState, RecordView};
use crate::cluster::format::store::Store;
use crate::fabric::{Fabric, Op};
use crate::limits::FRAGMENTS_MAX;
use crate::limits::REPAIRS_MAX;
use crate::stripe::{decode_stripe, encode_stripe, fragment, Fragment, ReedSolomon, StripeId, StripeLayout};

/// Where a repair is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RepairState {
    /// READing the key's sets from every reachable peer.
    Gathering,
    /// The rebuilt fragment went out; waiting for the target's acknowledgement.
    Sent,
    /// Done or given up; its slot is freed once no work request carries its buffers.
    Over,
}

impl RepairState {
    /// Whether `from => to` is a transition of a repair.
    pub fn can_become(from: Self, to: Self) -> bool {
        use RepairState as S;
        matches!((from, to), (S::Gathering, S::Sent) | (S::Gathering | S::Sent, S::Over))
    }
}

/// One repair in flight.
#[derive(Clone, Copy, Debug)]
pub struct Repair {
    state: RepairState,
    write_seq: u64,
    key_hash: u64,
    stamp: u64,
    tombstone: bool,
    target: u8,
    /// Peers whose home-set READ is outstanding.
    pending: u32,
    /// Peers whose spill-set READ is outstanding.
    pending_spill: u32,
    /// Nodes whose home set arrived.
    arrived: u32,
    /// Nodes whose spill set arrived.
    arrived_spill: u32,
    /// Work requests carrying its buffers, not completed.
    wrs: u32,
    /// Two DPU scratch buffers: the frame's data fragments, and headers and parity.
    data: u32,
    side: u32,
    deadline_ns: u64,
}

impl Repair {
    /// Where the repair is.
    pub fn state(&self) -> RepairState {
        self.state
    }

    /// The one place a repair's state changes.
    fn set_state(&mut self, to: RepairState) {
        let from = self.state;
        assert!(
            RepairState::can_become(from, to),
            "repair of write {} for node {}: {from:?} => {to:?} is no transition",
            self.write_seq,
            self.target
        );
        tracing::trace!(write_seq = self.write_seq, target = self.target, "repair {from:?} => {to:?}");
        self.state = to;
    }

    /// Over, if it is not yet (a repair past its deadline, or acknowledged after it).
    fn end(&mut self) {
        if self.state != RepairState::Over {
            self.set_state(RepairState::Over);
        }
    }
}

/// What the repairer may use of its node: the links, the staging pools, the store, the
/// host region (its DPU buffers), the codec, the checksum cache, counters, and the
/// node's free DPU side buffers (shared with the writer).
pub(super) struct RepairCx<'a, F: Fabric> {
    pub me: u8,
    pub n: usize,
    /// The storage nodes and each key's holders.
    pub placement: &'a crate::cluster::placement::Placement,
    pub k: usize,
    pub m: usize,
    pub incarnation: u32,
    pub write_timeout_ns: u64,
    pub links: &'a mut Links<F::Qp>,
    pub pools: &'a Pools,
    pub store: &'a Store,
    pub region: &'a Region,
    pub rs: &'a mut ReedSolomon,
    pub crc_shift: &'a mut ShiftCache,
    pub stats: &'a mut NodeStats,
    pub side_free: &'a mut Vec<u32>,
}

/// What a repair needs the node to do on the writer's side.
#[derive(Clone, Copy, Debug)]
pub(super) enum RepairEffect {
    /// `node` stores write `write_seq`'s fragment (or a newer value of its key): record
    /// that in the outcome table, and when `decided` that it has the decision too (this
    /// node's own record, resolved at once).
    Stored {
        /// The write.
        write_seq: u64,
        /// The holder.
        node: u8,
        /// It has the decision too.
        decided: bool,
    },
    /// Holder `holder` stores the fragment (or a newer value) but needs the decision:
    /// record it as stored and queue `record` for it. With the notice queue full,
    /// `rewind_if_full` rewinds its resync to the write; otherwise the decision waits
    /// for the holder's next resync.
    Notify {
        /// The holder.
        holder: u8,
        /// The decision.
        record: OutcomeRecordRepr,
        /// Rewind the holder's resync when the decision finds no room.
        rewind_if_full: bool,
    },
    /// Not now (too few fragments reachable, the target gone, the fragment lost): the
    /// target's resync (this node's own when it is the target) comes back to the write.
    RetryLater {
        /// The holder that misses the fragment.
        target: u8,
        /// The write.
        write_seq: u64,
    },
    /// Write the rebuilt fragment into the target's log.
    Post(FragmentPost),
}

/// A rebuilt fragment for the writer's `Node::post_fragment_entry`.
#[derive(Clone, Copy, Debug)]
pub(super) struct FragmentPost {
    pub(super) target: u8,
    /// Where its bytes are in the arena.
    pub(super) bytes_at: usize,
    pub(super) frag_header: [u8; crate::stripe::HEADER_LEN],
    pub(super) entry: EntryRepr,
    /// Its header-pool staging slot.
    pub(super) staging: u32,
    pub(super) tag: WrId,
    pub(super) sent: Sent,
}

/// A walk over the repairs ([`Repairer::advance`]): where it is, and whether anything
/// happened.
#[derive(Debug, Default)]
pub(super) struct Sweep {
    next: u32,
    /// Something moved.
    pub busy: bool,
}

/// The repairer: the repairs in flight with their set copies (per slot and node, the
/// key's home set then its spill set), allocated at start. A repair's slot also names
/// its READ targets in the sets pool (after the reader's) and its header staging slot
/// in the header pool (after the writer's).
#[derive(Debug)]
pub struct Repairer {
    repairs: SlotTable<Repair, RepairId>,
    sets: Vec<Vec<u8>>,
    nodes: usize,
    set_bytes: usize,
    /// Sets-pool slots (per peer) before the repairer's.
    sets_base: u32,
    /// Header-pool slots before the repairer's.
    headers_base: u32,
}

impl Repairer {
    /// Room for [`REPAIRS_MAX`] repairs in a cluster of `nodes` with sets of
    /// `set_bytes`; its staging follows `sets_base` slots (times `nodes`) of the sets
    /// pool and `headers_base` slots of the header pool.
    pub fn new(nodes: usize, set_bytes: usize, sets_base: u32, headers_base: u32) -> Self {
        Self {
            repairs: SlotTable::new(REPAIRS_MAX),
            sets: (0..REPAIRS_MAX).map(|_| vec![0u8; nodes * 2 * set_bytes]).collect(),
            nodes,
            set_bytes,
            sets_base,
            headers_base,
        }
    }

    /// Repairs in flight.
    pub fn in_flight(&self) -> usize {
        self.repairs.in_use()
    }

    /// The state of the repair of `write_seq` for `target` holding a slot.
    fn running(&self, write_seq: u64, target: u8) -> Option<RepairState> {
        self.repairs.iter().find(|(_, r)| r.write_seq == write_seq && r.target == target).map(|(_, r)| r.state)
    }

    /// The sets-pool slot (of `sets_slots`) a READ of repair `slot` from `peer` lands
    /// in: the pool's first half holds home sets, its second half spill sets.
    fn staging(&self, sets_slots: u32, slot: u32, peer: u8, spill: bool) -> u32 {
        let home = (self.sets_base + slot) * self.nodes as u32 + u32::from(peer);
        if spill {
            home + sets_slots / 2
        } else {
            home
        }
    }

    /// Starts repairing write `write_seq`'s fragment for `target`; false when there is
    /// no room now (the resync tries again later).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn start<F: Fabric>(
        &mut self,
        cx: &mut RepairCx<'_, F>,
        write_seq: u64,
        key_hash: u64,
        stamp: u64,
        tombstone: bool,
        target: u8,
        now: Now,
    ) -> bool {
        match self.running(write_seq, target) {
            // It will finish on its own (and come back through the resync if it fails).
            Some(RepairState::Gathering | RepairState::Sent) => return true,
            // Over but its slot not yet free: it may just have asked to be tried again,
            // so the resync waits for the slot rather than walking past this write
            // (found by the simulator, seed 6311: a repair retried while its old slot
            // lingered was taken as running and never came back).
            Some(RepairState::Over) => return false,
            None => {}
        }
        if self.repairs.available() == 0 {
            return false;
        }
        if cx.side_free.len() < 2 + 4 {
            // Leave room for host writes: repairs are background work.
            return false;
        }
        let (data, side) = (cx.side_free.pop().expect("checked"), cx.side_free.pop().expect("checked"));
        let repair = Repair {
            state: RepairState::Gathering,
            write_seq,
            key_hash,
            stamp,
            tombstone,
            target,
            pending: 0,
            pending_spill: 0,
            arrived: 0,
            arrived_spill: 0,
            wrs: 0,
            data,
            side,
            deadline_ns: now.mono_ns + cx.write_timeout_ns,
        };
        let id = self.repairs.insert(repair).expect("checked room");
        let set_bytes = self.set_bytes;
        let sets_slots = cx.pools.sets.slots();
        // Repairs are background work: they READ the key's spill set (first, on the same
        // queue pair, as a GET's second round does) whether or not it holds anything.
        let (set, spill) = (cx.store.home_of(key_hash), cx.store.spill_of(key_hash));
        // From the storage nodes only: a cache-only member holds no fragment.
        for &j in cx.placement.storage() {
            if j == cx.me {
                continue;
            }
            let Some(remote) = cx.links.peer(j).filter(|p| p.is_up()).and_then(|p| p.remote) else { continue };
            let reads = [spill.map(|s| (s, true, Kind::RepairSpillRead)), Some((set, false, Kind::RepairRead))];
            for (set, is_spill, kind) in reads.into_iter().flatten() {
                let buf = cx.pools.sets.buf(self.staging(sets_slots, id.slot(), j, is_spill), set_bytes);
                let at = cx.store.set_offset(set) as u64;
                let r = self.repairs.get_mut(id).expect("just inserted");
                if is_spill {
                    r.pending_spill |= 1 << j;
                } else {
                    r.pending |= 1 << j;
                }
                r.wrs += 1;
                cx.links.post(j, WrId::of(kind, j, id), Op::Read { remote: remote.store.at(at) }, buf);
            }
        }
        cx.stats.repairs_started += 1;
        tracing::debug!(node = cx.me, write_seq, stamp, target, "repair started");
        true
    }

    /// A repair's set READ came back (`spill`: of the spill set); `sets` is the pool it
    /// landed in.
    pub(super) fn on_read(&mut self, sets: &Pool, id: WrId, ok: bool, spill: bool) {
        let repair: RepairId = id.handle();
        let staging = self.staging(sets.slots(), repair.slot(), id.peer, spill);
        let Some(r) = self.repairs.get_mut(repair) else { return };
        r.wrs = r.wrs.saturating_sub(1);
        let bit = 1 << id.peer;
        let (pending, arrived) =
            if spill { (&mut r.pending_spill, &mut r.arrived_spill) } else { (&mut r.pending, &mut r.arrived) };
        *pending &= !bit;
        if ok && r.state != RepairState::Over {
            *arrived |= bit;
            let into = gathered_range(id.peer as usize, spill, self.set_bytes);
            sets.read(staging, &mut self.sets[repair.slot() as usize][into]);
        }
    }

    /// A rebuilt fragment's work request completed.
    pub(super) fn on_write(&mut self, id: WrId, _ok: bool) {
        if let Some(r) = self.repairs.get_mut(id.handle()) {
            r.wrs = r.wrs.saturating_sub(1);
        }
    }

    /// Target `peer` acknowledged (or lost) repair `id`'s rebuilt fragment.
    pub(super) fn acked<F: Fabric>(
        &mut self,
        cx: &mut RepairCx<'_, F>,
        id: RepairId,
        peer: u8,
        ok: bool,
    ) -> Option<RepairEffect> {
        let r = self.repairs.get_mut(id)?;
        // Only a sent fragment is acknowledged; the repair may have run out of time
        // since (over, its WRITEs not all completed).
        assert_ne!(r.state, RepairState::Gathering, "repair {id:?} acknowledged before it sent anything");
        r.end();
        let (write_seq, key_hash, stamp) = (r.write_seq, r.key_hash, r.stamp);
        if !ok {
            // Lost or refused: the next resync comes back to it.
            return Some(RepairEffect::RetryLater { target: peer, write_seq });
        }
        cx.stats.repairs_done += 1;
        tracing::debug!(node = cx.me, write_seq, stamp, peer, "repair acknowledged");
        // Its record is Pending there: the decision follows.
        let record = OutcomeRecordRepr { write_seq, key_hash, stamp, outcome: Decision::Committed };
        Some(RepairEffect::Notify { holder: peer, record, rewind_if_full: false })
    }

    /// Moves the repairs forward from where `sweep` is, returning at the first that
    /// needs the node to act (call again with the same `sweep` after acting on it);
    /// `None` once every repair has been seen.
    pub(super) fn advance<F: Fabric>(
        &mut self,
        cx: &mut RepairCx<'_, F>,
        now: Now,
        sweep: &mut Sweep,
    ) -> Option<RepairEffect> {
        while sweep.next < self.repairs.capacity() {
            let slot = sweep.next;
            sweep.next += 1;
            let Some(id) = self.repairs.current(slot) else { continue };
            let r = self.repairs.get_mut(id).expect("current");
            if r.state == RepairState::Over || now.mono_ns >= r.deadline_ns {
                if r.wrs == 0 {
                    r.end();
                    let r = self.repairs.remove(id).expect("current");
                    cx.side_free.push(r.data);
                    cx.side_free.push(r.side);
                    sweep.busy = true;
                } else {
                    r.end();
                }
                continue;
            }
            if r.state == RepairState::Gathering && r.pending | r.pending_spill == 0 {
                sweep.busy = true;
                if let Some(effect) = self.rebuild_and_send(cx, id) {
                    return Some(effect);
                }
            }
        }
        None
    }

    /// Rebuilds repair `id`'s fragment from the sets it gathered and this node's own,
    /// and sends it (or finds it needs nothing, or cannot be done now).
    fn rebuild_and_send<F: Fabric>(&mut self, cx: &mut RepairCx<'_, F>, id: RepairId) -> Option<RepairEffect> {
        let (me, n) = (cx.me, cx.n);
        let set_bytes = self.set_bytes;
        let geometry = cx.store.geometry();
        let slot = id.slot();
        let sets = &mut self.sets[slot as usize];
        let r = self.repairs.get_mut(id).expect("running repair");
        let (set, spill) = (cx.store.home_of(r.key_hash), cx.store.spill_of(r.key_hash));
        let (home_read, spill_read) = cx.store.read_key_sets(set, spill, sets, me as usize);
        if home_read.is_ok() {
            r.arrived |= 1 << me;
        }
        if spill_read.is_some_and(|read| read.is_ok()) {
            r.arrived_spill |= 1 << me;
        }
        let sets = &*sets;
        let mut frags = [Fragment { header: &[], payload: &[] }; FRAGMENTS_MAX];
        let (mut used, mut have, mut superseded, mut present) = (0, 0u32, false, false);
        for j in 0..n {
            if r.arrived & (1 << j) == 0 || (spill.is_some() && r.arrived_spill & (1 << j) == 0) {
                continue;
            }
            let key_sets = KeySets::gathered(sets, j, set_bytes, spill.is_some());
            for way in 0..key_sets.ways(&geometry) {
                let Some(record) = key_sets.record(&geometry, way) else { break };
                if RecordView::<&[u8]>::claimed_key_hash(record) != Some(r.key_hash) {
                    continue;
                }
                let Ok(v) = RecordView::new_checked(record, geometry.payload_max()) else { continue };
                if v.key_hash() != r.key_hash || v.state() == RecordState::Empty {
                    continue;
                }
                if v.state() == RecordState::Committed && v.stamp() > r.stamp {
                    superseded = true;
                }
                if v.stamp() != r.stamp {
                    continue;
                }
                if j == r.target as usize {
                    present = true;
                }
                let bit = 1u32 << v.fragment_index();
                if have & bit == 0 && used < FRAGMENTS_MAX {
                    have |= bit;
                    let len = v.fragment_len() as usize;
                    frags[used] = Fragment { header: &record[64..104], payload: &record[104..104 + len] };
                    used += 1;
                }
            }
        }
        let config = cx.region.layout().config;
        let rl = *cx.region.layout();
        // Not now (too few fragments reachable, the target gone): the next resync of
        // the target comes back to this write.
        let retry_later = |r: &mut Repair| {
            r.set_state(RepairState::Over);
            Some(RepairEffect::RetryLater { target: r.target, write_seq: r.write_seq })
        };
        tracing::debug!(
            node = me,
            write_seq = r.write_seq,
            stamp = r.stamp,
            target = r.target,
            used,
            superseded,
            present,
            "repair gathered"
        );
        // A holder that has the fragment, or a newer committed version of the key, needs
        // nothing rebuilt: it counts as stored (the outcome table's `acked`), so the
        // resync stops coming back to the write and its entry settles once the holder
        // has the decision. (Without this, every reconnection re-ran a repair for every
        // superseded write in the table: thousands of set READs per link flap.)
        if (superseded || present) && r.target == me {
            r.set_state(RepairState::Over);
            let decided = cx.store.resolve(r.key_hash, r.stamp, Decision::Committed).is_ok();
            return Some(RepairEffect::Stored { write_seq: r.write_seq, node: me, decided });
        }
        if superseded || present {
            r.set_state(RepairState::Over);
            // It holds the fragment (or a newer value): it still needs the decision.
            let record = OutcomeRecordRepr {
                write_seq: r.write_seq,
                key_hash: r.key_hash,
                stamp: r.stamp,
                outcome: Decision::Committed,
            };
            return Some(RepairEffect::Notify { holder: r.target, record, rewind_if_full: true });
        }
        // Rebuild the sealed frame into the data buffer, then the whole stripe.
        // SAFETY: `r.data` and `r.side` are two DPU buffers this repair took from the
        // free list; no work request carries them until the rebuilt fragment is posted,
        // after both slices end.
        #[allow(unsafe_code)]
        let (data, side) = unsafe {
            (
                super::host_memory::buffer_mut(cx.region, rl.buffer(r.data), config.buffer_bytes as usize),
                super::host_memory::buffer_mut(cx.region, rl.buffer(r.side), config.buffer_bytes as usize),
            )
        };
        let layout = match decode_stripe(cx.rs, &frags[..used], data) {
            Ok((layout, _)) => layout,
            Err(e) => {
                tracing::debug!(node = me, write_seq = r.write_seq, error = %e, "repair cannot rebuild the frame now");
                return retry_later(r);
            }
        };
        let stripe = StripeId { key_hash: r.key_hash, version: r.stamp };
        let relaid = StripeLayout::new(cx.k, cx.m, layout.frame_len());
        if relaid.is_err() || encode_stripe(cx.rs, &layout, stripe, data, side).is_err() {
            r.set_state(RepairState::Over);
            return None;
        }
        let Some(index) = cx.placement.fragment_of(r.key_hash, layout.fragments(), r.target) else {
            r.set_state(RepairState::Over);
            return None;
        };
        let f = layout.fragment_len();
        let frag = fragment(&layout, data, side, index);
        if r.target == me {
            // A local repair: into this node's own store, committed at once.
            let record = RecordRepr {
                writer: me,
                fragment_index: index as u8,
                key_hash: r.key_hash,
                stamp: r.stamp,
                write_seq: r.write_seq,
                fragment_len: f as u32,
                tombstone: r.tombstone,
                incarnation: cx.incarnation,
            };
            let stored = cx.store.insert(&record, frag.header, frag.payload).is_ok()
                && cx.store.resolve(r.key_hash, r.stamp, Decision::Committed).is_ok();
            if !stored {
                return retry_later(r);
            }
            r.set_state(RepairState::Over);
            cx.stats.repairs_done += 1;
            tracing::debug!(node = me, write_seq = r.write_seq, stamp = r.stamp, "own fragment repaired");
            return Some(RepairEffect::Stored { write_seq: r.write_seq, node: me, decided: true });
        }
        let mut frag_header = [0u8; crate::stripe::HEADER_LEN];
        frag_header.copy_from_slice(frag.header);
        let payload_crc = cx.crc_shift.combine(
            crc32c::crc32c(&frag_header),
            u32::from_le_bytes(frag_header[32..36].try_into().expect("4 bytes")),
            f,
        );
        let bytes_at = if index < layout.k() {
            rl.buffer(r.data) + index * f
        } else {
            rl.buffer(r.side) + layout.headers_len() + (index - layout.k()) * f
        } - rl.arena_offset;
        let target = r.target;
        let up = cx.links.peer(target).is_some_and(|p| p.is_up() && p.has_credit()) && cx.links.send_room(target, 2);
        if !up {
            return retry_later(r);
        }
        let entry = EntryRepr {
            kind: EntryKind::Fragment,
            writer: me,
            holder: target,
            seq: 0,
            write_seq: r.write_seq,
            key_hash: r.key_hash,
            stamp: r.stamp,
            payload_len: (crate::stripe::HEADER_LEN + f) as u32,
            tombstone: r.tombstone,
            repair: true,
            payload_crc,
            incarnation: cx.incarnation,
        };
        r.wrs += if f > 0 { 2 } else { 1 };
        r.set_state(RepairState::Sent);
        Some(RepairEffect::Post(FragmentPost {
            target,
            bytes_at,
            frag_header,
            entry,
            staging: self.headers_base + slot,
            tag: WrId::of(Kind::RepairWrite, target, id),
            sent: Sent::Repair { repair: id },
        }))
    }

    /// Each repair in flight: (write, target, READs outstanding, work requests, state).
    pub(super) fn debug_entries(&self) -> impl Iterator<Item = (u64, u8, u32, u32, RepairState)> + '_ {
        self.repairs.iter().map(|(_, r)| (r.write_seq, r.target, r.pending, r.wrs, r.state))
    }
}

#[cfg(test)]
mod tests {
    use super::RepairState as S;

    #[test]
    fn a_repair_is_sent_at_most_once_and_over_is_final() {
        let all = [S::Gathering, S::Sent, S::Over];
        let legal: Vec<(S, S)> =
            all.iter().flat_map(|&a| all.iter().map(move |&b| (a, b))).filter(|&(a, b)| S::can_become(a, b)).collect();
        assert_eq!(legal, [(S::Gathering, S::Sent), (S::Gathering, S::Over), (S::Sent, S::Over)]);
    }

    #[test]
    #[should_panic(expected = "Over => Sent is no transition")]
    fn sending_an_over_repair_is_a_programmer_error() {
        let mut r = super::Repair {
            state: S::Gathering,
            write_seq: 7,
            key_hash: 1,
            stamp: 2,
            tombstone: false,
            target: 1,
            pending: 0,
            pending_spill: 0,
            arrived: 0,
            arrived_spill: 0,
            wrs: 0,
            data: 0,
            side: 1,
            deadline_ns: 0,
        };
        r.end();
        r.end();
        r.set_state(S::Sent);
    }
}
