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

use super::node::{rewind, Node, Now};
use super::peer::Sent;
use super::wr::{Kind, WrId};
use crate::cluster::format::entry::{EntryKind, EntryRepr, Outcome as Decision, OutcomeRecordRepr};
use crate::cluster::format::record::{gathered_range, KeySets, RecordRepr, RecordState, RecordView};
use crate::cluster::limits::REPAIRS_MAX;
use crate::codec_config::FRAGMENTS_MAX;
use crate::fabric::{Fabric, Op};
use crate::stripe::{decode_stripe, encode_stripe, fragment, Fragment, StripeId, StripeLayout};

/// One repair in flight.
#[derive(Clone, Copy, Debug)]
pub struct Repair {
    generation: u32,
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
    /// The fragment went out; waiting for its acknowledgement.
    sent: bool,
    /// Over (done or given up); freed once `wrs` is 0.
    over: bool,
    /// Two DPU scratch buffers: the frame's data fragments, and headers and parity.
    data: u32,
    side: u32,
    deadline_ns: u64,
}

/// Repairs in flight, with their set copies (per node, the key's home set then its spill
/// set), allocated at start.
#[derive(Debug)]
pub struct RepairTable {
    slots: Vec<Option<Repair>>,
    generations: Vec<u32>,
    sets: Vec<Vec<u8>>,
}

impl RepairTable {
    /// Room for [`REPAIRS_MAX`] repairs in a cluster of `nodes` with sets of
    /// `set_bytes`.
    pub fn new(nodes: usize, set_bytes: usize) -> Self {
        Self {
            slots: (0..REPAIRS_MAX).map(|_| None).collect(),
            generations: vec![0; REPAIRS_MAX as usize],
            sets: (0..REPAIRS_MAX).map(|_| vec![0u8; nodes * 2 * set_bytes]).collect(),
        }
    }

    /// Repairs in flight.
    pub fn in_flight(&self) -> usize {
        self.slots.iter().filter(|s| s.is_some()).count()
    }

    /// The repair of `write_seq` for `target` holding a slot: `Some(over)`.
    fn running(&self, write_seq: u64, target: u8) -> Option<bool> {
        self.slots.iter().flatten().find(|r| r.write_seq == write_seq && r.target == target).map(|r| r.over)
    }
}

impl<F: Fabric> Node<F> {
    /// Starts repairing write `write_seq`'s fragment for `target`; false when there is
    /// no room now (the resync tries again later).
    pub(super) fn start_repair(
        &mut self,
        write_seq: u64,
        key_hash: u64,
        stamp: u64,
        tombstone: bool,
        target: u8,
        now: Now,
    ) -> bool {
        match self.repairs.running(write_seq, target) {
            // It will finish on its own (and come back through the resync if it fails).
            Some(false) => return true,
            // Over but its slot not yet free: it may just have asked to be tried again,
            // so the resync waits for the slot rather than walking past this write
            // (found by the simulator, seed 6311: a repair retried while its old slot
            // lingered was taken as running and never came back).
            Some(true) => return false,
            None => {}
        }
        let Some(slot) = self.repairs.slots.iter().position(Option::is_none) else { return false };
        if self.writer.side_free.len() < 2 + 4 {
            // Leave room for host writes: repairs are background work.
            return false;
        }
        let (data, side) =
            (self.writer.side_free.pop().expect("checked"), self.writer.side_free.pop().expect("checked"));
        let g = &mut self.repairs.generations[slot];
        *g = g.wrapping_add(1) & 0xff_ffff;
        let generation = *g;
        self.repairs.slots[slot] = Some(Repair {
            generation,
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
            sent: false,
            over: false,
            data,
            side,
            deadline_ns: now.mono_ns + self.write_timeout_ns,
        });
        let slot = slot as u32;
        let set_bytes = self.gets.set_bytes();
        // Repairs are background work: they READ the key's spill set (first, on the same
        // queue pair, as a GET's second round does) whether or not it holds anything.
        let (set, spill) = (self.store.home_of(key_hash), self.store.spill_of(key_hash));
        let (mut pending, mut pending_spill) = (0, 0);
        for j in 0..self.n as u8 {
            if j == self.me {
                continue;
            }
            let Some(remote) = self.links.peer(j).filter(|p| p.is_up()).and_then(|p| p.remote) else { continue };
            let staging = self.repair_staging(slot, j);
            let reads = [
                spill.map(|s| (s, self.spill_staging(staging), Kind::RepairSpillRead)),
                Some((set, staging, Kind::RepairRead)),
            ];
            for (set, staging, kind) in reads.into_iter().flatten() {
                let buf = self.pools.sets.buf(staging, set_bytes);
                let at = self.store.set_offset(set) as u64;
                if kind == Kind::RepairRead {
                    pending |= 1 << j;
                } else {
                    pending_spill |= 1 << j;
                }
                if let Some(r) = self.repairs.slots[slot as usize].as_mut() {
                    r.wrs += 1;
                }
                self.links.post(j, WrId::new(kind, j, slot, generation), Op::Read { remote: remote.store.at(at) }, buf);
            }
        }
        if let Some(r) = self.repairs.slots[slot as usize].as_mut() {
            r.pending = pending;
            r.pending_spill = pending_spill;
        }
        self.stats.repairs_started += 1;
        tracing::debug!(node = self.me, write_seq, stamp, target, "repair started");
        true
    }

    /// The sets-pool slot a repair's READ from `j` lands in (after the GETs' slots).
    fn repair_staging(&self, slot: u32, j: u8) -> u32 {
        (self.gets.capacity() + slot) * self.n as u32 + u32::from(j)
    }

    /// A repair's set READ came back (`spill`: of the spill set).
    pub(super) fn on_repair_read(&mut self, id: WrId, ok: bool, spill: bool) {
        let set_bytes = self.gets.set_bytes();
        let staging = self.repair_staging(id.a, id.peer);
        let staging = if spill { self.spill_staging(staging) } else { staging };
        let Some(r) = self.repairs.slots.get_mut(id.a as usize).and_then(Option::as_mut) else { return };
        if r.generation != id.b {
            return;
        }
        r.wrs = r.wrs.saturating_sub(1);
        let bit = 1 << id.peer;
        let (pending, arrived) =
            if spill { (&mut r.pending_spill, &mut r.arrived_spill) } else { (&mut r.pending, &mut r.arrived) };
        *pending &= !bit;
        if ok && !r.over {
            *arrived |= bit;
            let into = gathered_range(id.peer as usize, spill, set_bytes);
            self.pools.sets.read(staging, &mut self.repairs.sets[id.a as usize][into]);
        }
    }

    /// A rebuilt fragment's work request completed.
    pub(super) fn on_repair_write(&mut self, id: WrId, _ok: bool) {
        if let Some(r) = self.repairs.slots.get_mut(id.a as usize).and_then(Option::as_mut) {
            if r.generation == id.b {
                r.wrs = r.wrs.saturating_sub(1);
            }
        }
    }

    /// The target acknowledged (or lost) a rebuilt fragment.
    pub(super) fn repair_acked(&mut self, slot: u32, generation: u32, peer: u8, ok: bool) {
        let Some(r) = self.repairs.slots.get_mut(slot as usize).and_then(Option::as_mut) else { return };
        if r.generation != generation {
            return;
        }
        r.over = true;
        let (write_seq, key_hash, stamp) = (r.write_seq, r.key_hash, r.stamp);
        if ok {
            let _ = self.outcomes.set_acked(write_seq, peer);
            // Its record is Pending there: the decision follows.
            let record = OutcomeRecordRepr { write_seq, key_hash, stamp, outcome: Decision::Committed };
            let _ = self.notices_queue(peer, record);
            self.stats.repairs_done += 1;
            tracing::debug!(node = self.me, write_seq, stamp, peer, "repair acknowledged");
        } else if let Some(p) = self.links.peer_mut(peer) {
            // Lost or refused: the next resync comes back to it.
            rewind(&mut p.resync, write_seq);
        }
    }

    /// Moves every repair forward.
    pub(super) fn advance_repairs(&mut self, now: Now) -> bool {
        let mut busy = false;
        for slot in 0..REPAIRS_MAX {
            let Some(r) = self.repairs.slots[slot as usize] else { continue };
            if r.over || now.mono_ns >= r.deadline_ns {
                if r.wrs == 0 {
                    self.writer.side_free.push(r.data);
                    self.writer.side_free.push(r.side);
                    self.repairs.slots[slot as usize] = None;
                    busy = true;
                } else if let Some(r) = self.repairs.slots[slot as usize].as_mut() {
                    r.over = true;
                }
                continue;
            }
            if !r.sent && r.pending | r.pending_spill == 0 {
                busy = true;
                self.rebuild_and_send(slot);
            }
        }
        busy
    }

    fn rebuild_and_send(&mut self, slot: u32) {
        let me = self.me;
        let set_bytes = self.gets.set_bytes();
        let geometry = self.store.geometry();
        let mut sets = std::mem::take(&mut self.repairs.sets[slot as usize]);
        let mut r = self.repairs.slots[slot as usize].expect("running repair");
        let (set, spill) = (self.store.home_of(r.key_hash), self.store.spill_of(r.key_hash));
        let (home_read, spill_read) = self.store.read_key_sets(set, spill, &mut sets, me as usize);
        if home_read.is_ok() {
            r.arrived |= 1 << me;
        }
        if spill_read.is_some_and(|read| read.is_ok()) {
            r.arrived_spill |= 1 << me;
        }
        let mut frags = [Fragment { header: &[], payload: &[] }; FRAGMENTS_MAX];
        let (mut used, mut have, mut superseded, mut present) = (0, 0u32, false, false);
        for j in 0..self.n {
            if r.arrived & (1 << j) == 0 || (spill.is_some() && r.arrived_spill & (1 << j) == 0) {
                continue;
            }
            let key_sets = KeySets::gathered(&sets, j, set_bytes, spill.is_some());
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
        r.sent = true;
        let config = self.region.layout().config;
        let rl = *self.region.layout();
        let done = |node: &mut Self, r: Repair, sets: Vec<u8>| {
            node.repairs.slots[slot as usize] = Some(Repair { over: true, ..r });
            node.repairs.sets[slot as usize] = sets;
        };
        // Not now (too few fragments reachable, the target gone): the next resync of
        // the target comes back to this write.
        let retry_later = |node: &mut Self, r: Repair, sets: Vec<u8>| {
            if r.target == node.me {
                rewind(&mut node.own_resync, r.write_seq);
            } else if let Some(p) = node.links.peer_mut(r.target) {
                rewind(&mut p.resync, r.write_seq);
            }
            done(node, r, sets)
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
            let _ = self.outcomes.set_acked(r.write_seq, me);
            if self.store.resolve(r.key_hash, r.stamp, Decision::Committed).is_ok() {
                let _ = self.outcomes.set_decided(r.write_seq, me);
            }
            return done(self, r, sets);
        }
        if superseded || present {
            let _ = self.outcomes.set_acked(r.write_seq, r.target);
            // It holds the fragment (or a newer value): it still needs the decision.
            let record = OutcomeRecordRepr {
                write_seq: r.write_seq,
                key_hash: r.key_hash,
                stamp: r.stamp,
                outcome: Decision::Committed,
            };
            if !self.notices_queue(r.target, record) {
                return retry_later(self, r, sets);
            }
            return done(self, r, sets);
        }
        // Rebuild the sealed frame into the data buffer, then the whole stripe.
        let data = super::host_memory::buffer_mut(&self.region, rl.buffer(r.data), config.buffer_bytes as usize);
        let layout = match decode_stripe(&mut self.rs, &frags[..used], data) {
            Ok((layout, _)) => layout,
            Err(e) => {
                tracing::debug!(node = me, write_seq = r.write_seq, error = %e, "repair cannot rebuild the frame now");
                return retry_later(self, r, sets);
            }
        };
        let side = super::host_memory::buffer_mut(&self.region, rl.buffer(r.side), config.buffer_bytes as usize);
        let id = StripeId { key_hash: r.key_hash, version: r.stamp };
        let relaid = StripeLayout::new(self.k, self.m, layout.frame_len());
        if relaid.is_err() || encode_stripe(&self.rs, &layout, id, data, side).is_err() {
            return done(self, r, sets);
        }
        let home = (r.key_hash % self.n as u64) as usize;
        let index = (r.target as usize + self.n - home) % self.n;
        if index >= layout.fragments() {
            return done(self, r, sets);
        }
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
                incarnation: self.incarnation,
            };
            let stored = self.store.insert(&record, frag.header, frag.payload).is_ok()
                && self.store.resolve(r.key_hash, r.stamp, Decision::Committed).is_ok();
            if !stored {
                return retry_later(self, r, sets);
            }
            let _ = self.outcomes.set_acked(r.write_seq, me);
            let _ = self.outcomes.set_decided(r.write_seq, me);
            self.stats.repairs_done += 1;
            tracing::debug!(node = me, write_seq = r.write_seq, stamp = r.stamp, "own fragment repaired");
            return done(self, r, sets);
        }
        let mut frag_header = [0u8; crate::stripe::HEADER_LEN];
        frag_header.copy_from_slice(frag.header);
        let payload_crc = self.crc_shift.combine(
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
        let up =
            self.links.peer(target).is_some_and(|p| p.is_up() && p.has_credit()) && self.links.send_room(target, 2);
        if !up {
            return retry_later(self, r, sets);
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
            incarnation: self.incarnation,
        };
        r.wrs += if f > 0 { 2 } else { 1 };
        self.repairs.slots[slot as usize] = Some(r);
        self.repairs.sets[slot as usize] = sets;
        let staging = self.writer.capacity() * (self.k + self.m) as u32 + slot;
        let tag = WrId::new(Kind::RepairWrite, target, slot, r.generation);
        self.post_fragment_entry(
            target,
            bytes_at,
            &frag_header,
            entry,
            staging,
            (tag, tag),
            Sent::Repair { repair: slot, generation: r.generation },
        );
    }

    /// What the repairs are doing (for diagnostics).
    pub fn repairs_debug(&self) -> String {
        format!(
            "side_free {} notices {} sent {:?} repairs {:?} resync {:?}",
            self.writer.side_free.len(),
            self.notices_debug(),
            self.links.iter().map(|p| (p.id, p.sent.len(), p.has_credit(), p.sends)).collect::<Vec<_>>(),
            self.repairs
                .slots
                .iter()
                .flatten()
                .map(|r| (r.write_seq, r.target, r.pending, r.wrs, r.sent, r.over))
                .collect::<Vec<_>>(),
            self.links.iter().map(|p| (p.id, p.resync)).collect::<Vec<_>>()
        )
    }

    /// Repairs in flight or waiting in a resync.
    pub fn repairs_pending(&self) -> usize {
        self.repairs.in_flight()
            + self.links.iter().filter(|p| p.resync.is_some()).count()
            + usize::from(self.own_resync.is_some())
    }
}
