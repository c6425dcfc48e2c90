//! GET and recovery: the committed value of a key, rebuilt from any k fragments.
//!
//! The reader copies the key's home set from its own store and READs the same set
//! from every reachable peer (one RDMA READ each). When some node's set head says the
//! key may have records in its spill set, it gathers again, READing from every peer the
//! spill set and then the home set on one queue pair (executed in that order, as RDMA
//! READs of one queue pair are): a record the holder dropped from one set between the
//! two READs was dropped for a newer committed one, which the other READ sees. It then
//! picks the newest version it
//! can prove committed: a version is committed if some holder's record says so - the
//! writer completes a write only after m + 1 holders persisted that decision, so with
//! at most m nodes unreachable a reader always meets one. A newer version with no
//! such record is a write still in flight (or rolled back) and is passed over; with
//! more than m nodes unreachable that cannot be told apart from a committed one, and a
//! `Fresh` GET then fails (`Unavailable`) rather than risk an older value, while a
//! `Stale` GET returns the newest version it can prove. Every fragment header and
//! payload checksum is checked before decoding, and the frame is opened (AES-GCM)
//! under the version and key it claims, so a tampered or foreign fragment is refused;
//! the reader then tries again without it.

use prescient_shim::completion::FLAG_NEWER_PENDING;
use prescient_shim::config::{KEY_BYTES_MAX, VALUE_OFFSET};
use prescient_shim::descriptor::Sla;
use prescient_shim::Status;

use super::node::{Node, Noisy, Now};
use super::wr::{Kind, WrId};
use crate::cluster::format::record::{gathered_range, key_may_have_spilled, KeySets, RecordState, RecordView};
use crate::cluster::format::store::StoreGeometry;
use crate::fabric::{Fabric, Op};
use crate::histogram::ReadStage;
use crate::limits::FRAGMENTS_MAX;
use crate::queue::{key_of, Outcome};
use crate::region_server::Taken;
use crate::seal::{key_hash, open_in_place, Binding};
use crate::stripe::{decode_stripe, Fragment, StripeError};

/// Gather rounds a GET makes before it reports `Unavailable`.
const GET_ROUNDS_MAX: u32 = 4;

/// One GET in flight.
#[derive(Debug)]
pub struct Get {
    generation: u32,
    taken: Taken,
    key_hash: u64,
    /// The key's home set.
    set: u32,
    /// The key's spill set (None in a store of one set).
    spill: Option<u32>,
    /// Whether rounds READ the spill set too: some node's home set said so.
    with_spill: bool,
    /// Gather rounds made.
    attempts: u32,
    /// Peers whose READ of the home set is outstanding.
    pending: u32,
    /// Peers whose READ of the spill set is outstanding.
    pending_spill: u32,
    /// Nodes whose copy of the home set has arrived (this node's included).
    arrived: u32,
    /// Nodes whose copy of the spill set has arrived.
    arrived_spill: u32,
    started_ns: u64,
    gathered_ns: u64,
    deadline_ns: u64,
    fresh: bool,
}

/// GETs in flight with their set copies (per node, its home set then its spill set) and
/// frame scratch, all allocated at start.
#[derive(Debug)]
pub struct GetTable {
    slots: Vec<Option<Get>>,
    generations: Vec<u32>,
    free: Vec<u32>,
    sets: Vec<Vec<u8>>,
    frames: Vec<Vec<u8>>,
    set_bytes: usize,
}

impl GetTable {
    /// Room for `capacity` GETs in a cluster of `nodes`, for sets of `set_bytes` and
    /// frames of up to `frame_bytes` (data fragments included).
    pub fn new(capacity: u32, nodes: usize, set_bytes: usize, frame_bytes: usize) -> Self {
        Self {
            slots: (0..capacity).map(|_| None).collect(),
            generations: vec![0; capacity as usize],
            free: (0..capacity).rev().collect(),
            sets: (0..capacity).map(|_| vec![0u8; nodes * 2 * set_bytes]).collect(),
            frames: (0..capacity).map(|_| vec![0u8; frame_bytes]).collect(),
            set_bytes,
        }
    }

    /// Free slots.
    pub fn available(&self) -> usize {
        self.free.len()
    }

    /// Bytes of one store set.
    pub fn set_bytes(&self) -> usize {
        self.set_bytes
    }

    /// GET slots in all.
    pub fn capacity(&self) -> u32 {
        self.slots.len() as u32
    }

    /// GETs in flight.
    pub fn in_flight(&self) -> usize {
        self.slots.len() - self.free.len()
    }
}

/// What the sets say of a key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Choice {
    /// Rebuild version `stamp` from these fragments: (node, way) of each.
    Value {
        /// The version.
        stamp: u64,
        /// Whether it is a deletion.
        tombstone: bool,
        /// Where its fragments are.
        fragments: [(u8, u8); FRAGMENTS_MAX],
        /// How many.
        count: usize,
        /// A newer version was seen, not proven committed (still being decided).
        newer_pending: bool,
    },
    /// No committed version.
    NotFound {
        /// Versions were seen, none proven committed.
        newer_pending: bool,
    },
    /// No version can be proven or rebuilt now.
    Unavailable {
        /// Fragments reachable of the version that was wanted.
        have: usize,
    },
}

/// A version of the key seen in the sets.
#[derive(Clone, Copy, Debug)]
struct Candidate {
    stamp: u64,
    committed: bool,
    tombstone: bool,
    have: u32,
    fragments: [(u8, u8); FRAGMENTS_MAX],
    count: usize,
}

/// Picks the version to return from the sets that arrived (`sets[node]`, `None` for
/// a node that could not be reached); a fragment is named by (node, way), ways of the
/// spill set following the home set's ([`KeySets::record`]). Pure, so the rules are
/// tested on their own.
pub fn choose(
    sets: &[Option<KeySets<'_>>],
    geometry: &StoreGeometry,
    key_hash: u64,
    k: usize,
    m: usize,
    skip: &[(u8, u8)],
    fresh: bool,
) -> Choice {
    const CANDIDATES_MAX: usize = 8;
    let mut candidates = [Candidate {
        stamp: 0,
        committed: false,
        tombstone: false,
        have: 0,
        fragments: [(0, 0); FRAGMENTS_MAX],
        count: 0,
    }; CANDIDATES_MAX];
    let mut used = 0;
    let unreachable = sets.iter().filter(|s| s.is_none()).count();
    for (node, set) in sets.iter().enumerate() {
        let Some(set) = set else { continue };
        for way in 0..set.ways(geometry) {
            let Some(bytes) = set.record(geometry, way) else { break };
            // Other keys' records are skipped unchecked (a full check of every way of
            // every set was most of a GET's CPU).
            if RecordView::<&[u8]>::claimed_key_hash(bytes) != Some(key_hash) {
                continue;
            }
            let Ok(r) = RecordView::new_checked(bytes, geometry.payload_max()) else { continue };
            if r.key_hash() != key_hash || r.state() == RecordState::Empty {
                continue;
            }
            if skip.contains(&(node as u8, way as u8)) {
                continue;
            }
            let stamp = r.stamp();
            let c = match candidates[..used].iter_mut().position(|c| c.stamp == stamp) {
                Some(i) => &mut candidates[i],
                None if used < CANDIDATES_MAX => {
                    candidates[used].stamp = stamp;
                    used += 1;
                    &mut candidates[used - 1]
                }
                None => continue,
            };
            c.committed |= r.state() == RecordState::Committed;
            c.tombstone |= r.tombstone();
            let bit = 1u32 << r.fragment_index();
            if c.have & bit == 0 && c.count < FRAGMENTS_MAX {
                c.have |= bit;
                c.fragments[c.count] = (node as u8, way as u8);
                c.count += 1;
            }
        }
    }
    candidates[..used].sort_unstable_by_key(|c| std::cmp::Reverse(c.stamp));
    tracing::trace!(key_hash, unreachable, candidates = ?&candidates[..used].iter().map(|c| (c.stamp, c.committed, c.count)).collect::<Vec<_>>(), "GET candidates");
    for c in &candidates[..used] {
        if c.committed {
            if c.count >= k {
                let newer_pending = candidates[0].stamp > c.stamp;
                return Choice::Value {
                    stamp: c.stamp,
                    tombstone: c.tombstone,
                    fragments: c.fragments,
                    count: c.count,
                    newer_pending,
                };
            }
            if fresh {
                return Choice::Unavailable { have: c.count };
            }
        } else if unreachable > m && fresh {
            // Its decision may sit on the nodes we cannot reach.
            return Choice::Unavailable { have: c.count };
        }
    }
    // Nothing proven committed. With at most m nodes unreachable that means nothing
    // committed (the decision of every committed write sits on m + 1 holders); with
    // more, the newest value may be on the nodes we cannot reach.
    if fresh && unreachable > m {
        return Choice::Unavailable { have: 0 };
    }
    Choice::NotFound { newer_pending: used > 0 }
}

impl<F: Fabric> Node<F> {
    /// Starts a GET: copy the key's set locally, READ it from every reachable peer.
    pub(super) fn start_get(&mut self, t: Taken, now: Now) {
        let mut key = [0u8; KEY_BYTES_MAX];
        let key = key_of(&self.region, &t.accepted, &mut key);
        let key_hash = key_hash(key);
        let (set, spill) = (self.store.home_of(key_hash), self.store.spill_of(key_hash));
        let slot = self.gets.free.pop().expect("take_requests checked room");
        self.gets.slots[slot as usize] = Some(Get {
            generation: 0,
            taken: t,
            key_hash,
            set,
            spill,
            with_spill: false,
            pending: 0,
            pending_spill: 0,
            arrived: 0,
            arrived_spill: 0,
            attempts: 0,
            started_ns: now.mono_ns,
            gathered_ns: 0,
            deadline_ns: now.mono_ns + self.write_timeout_ns,
            fresh: t.accepted.desc.sla == Sla::Fresh,
        });
        self.gather(slot);
    }

    /// READs the key's home set (after its spill set, once some node said so) from every
    /// reachable peer (a new round: answers to an earlier one are ignored).
    fn gather(&mut self, slot: u32) {
        let gen = &mut self.gets.generations[slot as usize];
        *gen = gen.wrapping_add(1) & 0xff_ffff;
        let generation = *gen;
        let set_bytes = self.gets.set_bytes;
        let Some(g) = self.gets.slots[slot as usize].as_mut() else { return };
        let (set, spill) = (g.set, g.spill.filter(|_| g.with_spill));
        g.generation = generation;
        g.attempts += 1;
        g.arrived = 0;
        g.arrived_spill = 0;
        g.pending = 0;
        g.pending_spill = 0;
        let (mut pending, mut pending_spill) = (0u32, 0u32);
        for j in 0..self.n as u8 {
            if j == self.me {
                continue;
            }
            let Some(remote) = self.links.peer(j).filter(|p| p.is_up()).and_then(|p| p.remote) else { continue };
            let staging = slot * self.n as u32 + u32::from(j);
            if let Some(spill) = spill {
                // Posted first on the same queue pair: READ before the home set.
                let buf = self.pools.sets.buf(self.spill_staging(staging), set_bytes);
                let at = self.store.set_offset(spill) as u64;
                pending_spill |= 1 << j;
                let id = WrId::new(Kind::GetSpillRead, j, slot, generation);
                self.links.post(j, id, Op::Read { remote: remote.store.at(at) }, buf);
            }
            let buf = self.pools.sets.buf(staging, set_bytes);
            let at = self.store.set_offset(set) as u64;
            pending |= 1 << j;
            self.links.post(
                j,
                WrId::new(Kind::GetRead, j, slot, generation),
                Op::Read { remote: remote.store.at(at) },
                buf,
            );
        }
        if let Some(g) = self.gets.slots[slot as usize].as_mut() {
            g.pending |= pending;
            g.pending_spill |= pending_spill;
        }
    }

    /// A set READ for a GET came back (`spill`: the READ of the spill set).
    pub(super) fn on_get_read(&mut self, id: WrId, ok: bool, spill: bool) {
        let set_bytes = self.gets.set_bytes;
        let staging = id.a * self.n as u32 + u32::from(id.peer);
        let staging = if spill { self.spill_staging(staging) } else { staging };
        let Some(g) = self.gets.slots.get_mut(id.a as usize).and_then(Option::as_mut) else { return };
        if g.generation != id.b {
            return;
        }
        let bit = 1 << id.peer;
        let (pending, arrived) =
            if spill { (&mut g.pending_spill, &mut g.arrived_spill) } else { (&mut g.pending, &mut g.arrived) };
        *pending &= !bit;
        if ok {
            *arrived |= bit;
            let into = gathered_range(id.peer as usize, spill, set_bytes);
            self.pools.sets.read(staging, &mut self.gets.sets[id.a as usize][into]);
        }
    }

    /// Finishes every GET whose reads are all in.
    pub(super) fn advance_gets(&mut self, now: Now) -> bool {
        let mut busy = false;
        for slot in 0..self.gets.slots.len() {
            let ready = self.gets.slots[slot]
                .as_ref()
                .is_some_and(|g| g.pending | g.pending_spill == 0 || now.mono_ns >= g.deadline_ns);
            if ready {
                busy = true;
                self.finish_get(slot as u32, now);
            }
        }
        busy
    }

    fn finish_get(&mut self, slot: u32, now: Now) {
        // Our own sets last, so they are no older than the peers' (records are dropped as
        // newer writes commit: sets of different ages can disagree on what is there);
        // the spill set before the home set, as from the peers.
        let set_bytes = self.gets.set_bytes;
        let me = self.me as usize;
        let g = self.gets.slots[slot as usize].as_mut().expect("ready GET");
        let sets = &mut self.gets.sets[slot as usize];
        let (home, spill) = self.store.read_key_sets(g.set, g.spill.filter(|_| g.with_spill), sets, me);
        for (result, arrived) in [(Some(home), &mut g.arrived), (spill, &mut g.arrived_spill)] {
            match result {
                Some(Ok(())) => *arrived |= 1 << me,
                Some(Err(e)) => tracing::error!(node = self.me, error = %e, "cannot read the local store set"),
                None => {}
            }
        }
        g.gathered_ns = now.mono_ns;
        // Some node's home set counts records of this key's slot in the spill set: gather
        // again with the spill sets (once; later rounds keep reading them).
        if !g.with_spill && g.spill.is_some() && now.mono_ns < g.deadline_ns {
            let spilled = (0..self.n).any(|j| {
                g.arrived & (1 << j) != 0
                    && key_may_have_spilled(&sets[gathered_range(j, false, set_bytes)], g.key_hash)
            });
            if spilled {
                g.with_spill = true;
                g.attempts -= 1;
                self.stats.get_spill_rounds += 1;
                self.gather(slot);
                return;
            }
        }
        let g = self.gets.slots[slot as usize].take().expect("ready GET");
        let outcome = self.rebuild(slot, &g);
        // Sets READ at different moments may straddle a commit that dropped the older
        // version's fragments: gather again, a bounded number of times.
        if outcome.status == Status::Unavailable && g.attempts < GET_ROUNDS_MAX && now.mono_ns < g.deadline_ns {
            self.gets.slots[slot as usize] = Some(g);
            self.stats.get_retries += 1;
            self.gather(slot);
            return;
        }
        self.gets.free.push(slot);
        self.stats.record_get(g.started_ns, g.gathered_ns, now.mono_ns, outcome.status);
        self.host.complete(&g.taken, outcome, &mut self.metrics);
    }

    /// Chooses, decodes and opens the value of GET `slot` into its host buffer.
    fn rebuild(&mut self, slot: u32, g: &Get) -> Outcome {
        let geometry = self.store.geometry();
        let set_bytes = self.gets.set_bytes;
        let sets_buf = std::mem::take(&mut self.gets.sets[slot as usize]);
        let mut frame = std::mem::take(&mut self.gets.frames[slot as usize]);
        let mut skip = [(u8::MAX, u8::MAX); FRAGMENTS_MAX];
        let mut skipped = 0;
        let with_spill = g.with_spill && g.spill.is_some();
        let outcome = loop {
            // A node counts once what this round READ of it arrived: its home set, and its
            // spill set when the round READ that too.
            let sets: [Option<KeySets<'_>>; crate::limits::NODES_MAX] = std::array::from_fn(|j| {
                let home_in = j < self.n && g.arrived & (1 << j) != 0;
                let spill_in = !with_spill || g.arrived_spill & (1 << j) != 0;
                (home_in && spill_in).then(|| KeySets::gathered(&sets_buf, j, set_bytes, with_spill))
            });
            let choice = choose(&sets[..self.n], &geometry, g.key_hash, self.k, self.m, &skip[..skipped], g.fresh);
            tracing::trace!(node = self.me, key_hash = g.key_hash, arrived = g.arrived, ?choice, skipped, "GET choice");
            if tracing::enabled!(tracing::Level::TRACE) && matches!(choice, Choice::Unavailable { .. }) {
                for (j, set) in sets[..self.n].iter().enumerate() {
                    let Some(set) = set else { continue };
                    for way in 0..set.ways(&geometry) {
                        let Some(bytes) = set.record(&geometry, way) else { break };
                        if let Ok(r) = RecordView::new_checked(bytes, geometry.payload_max()) {
                            if r.key_hash() == g.key_hash {
                                tracing::trace!(holder = j, way, stamp = r.stamp(), state = ?r.state(), index = r.fragment_index(), write_seq = r.write_seq(), "record");
                            }
                        }
                    }
                }
            }
            let Choice::Value { stamp, tombstone, fragments, count, newer_pending } = choice else {
                break match choice {
                    Choice::NotFound { newer_pending } => Outcome {
                        flags: if newer_pending { FLAG_NEWER_PENDING } else { 0 },
                        ..Outcome::failed(Status::NotFound, 0)
                    },
                    Choice::Unavailable { have } => Outcome::failed(Status::Unavailable, have as u32),
                    Choice::Value { .. } => unreachable!(),
                };
            };
            // A newer write still being decided: serve this value, but no refill.
            let flags = if newer_pending { FLAG_NEWER_PENDING } else { 0 };
            let mut frags = [Fragment { header: &[], payload: &[] }; FRAGMENTS_MAX];
            let mut ways = [(0u8, 0u8); FRAGMENTS_MAX];
            let mut used = 0;
            for &(node, way) in &fragments[..count] {
                let Some(set) = sets[node as usize] else { continue };
                let Some(record) = set.record(&geometry, way as usize) else { continue };
                let Ok(view) = RecordView::new_checked(record, geometry.payload_max()) else { continue };
                let len = view.fragment_len() as usize;
                let (header, payload) = (&record[64..104], &record[104..104 + len]);
                frags[used] = Fragment { header, payload };
                ways[used] = (node, way);
                used += 1;
            }
            match decode_stripe(&mut self.rs, &frags[..used], &mut frame) {
                Ok((layout, id)) => {
                    let frame_len = layout.frame_len();
                    let binding = Binding {
                        key_hash: g.key_hash,
                        version: id.version,
                        k: self.k as u8,
                        m: self.m as u8,
                        tombstone,
                    };
                    debug_assert_eq!(id.version, stamp);
                    match open_in_place(self.sealer.keys(), &mut frame[..frame_len], &binding) {
                        // A deletion: found, as deleted at `stamp`.
                        Ok(_) if tombstone => {
                            break Outcome { status: Status::NotFound, version: stamp, detail: 0, flags };
                        }
                        Ok(plain) => {
                            let len = plain.len();
                            let buffer = g.taken.accepted.buffer;
                            let cap = self.region.layout().config.buffer_bytes as usize - VALUE_OFFSET;
                            if len > cap {
                                break Outcome::failed(Status::BadValueLength, len as u32);
                            }
                            let at = self.region.layout().buffer(buffer) + VALUE_OFFSET;
                            self.region.write_bytes(at, &frame[..len]);
                            let _ = self.hlc.observe(stamp >> 8);
                            break Outcome { status: Status::Ok, version: stamp, detail: len as u32, flags };
                        }
                        Err(e) => {
                            // Every checksum held but the frame does not open: some
                            // fragment was forged. Try again without one of them.
                            if let Some(left_out) = self.admit_log(Noisy::GetFragmentRefused) {
                                tracing::warn!(node = self.me, error = %e, left_out, "rebuilt frame does not open");
                            }
                            self.stats.forged += 1;
                            if used <= self.k || skipped >= FRAGMENTS_MAX {
                                break Outcome::failed(Status::Unavailable, used as u32);
                            }
                            skip[skipped] = ways[skipped % used];
                            skipped += 1;
                        }
                    }
                }
                Err(e) => {
                    let bad = match e {
                        StripeError::PayloadChecksum { index, .. } | StripeError::Inconsistent { index, .. } => {
                            Some(index)
                        }
                        StripeError::Duplicate { index } => Some(index),
                        _ => None,
                    };
                    if let Some(left_out) = self.admit_log(Noisy::GetFragmentRefused) {
                        tracing::warn!(node = self.me, error = %e, left_out, "a fragment was refused; rebuilding without it");
                    }
                    self.stats.fragments_refused += 1;
                    let pos = bad.and_then(|i| frags[..used].iter().position(|f| f.header.get(7) == Some(&i)));
                    match pos {
                        Some(p) if skipped < FRAGMENTS_MAX => {
                            skip[skipped] = ways[p];
                            skipped += 1;
                        }
                        _ => break Outcome::failed(Status::Unavailable, used as u32),
                    }
                }
            }
        };
        self.gets.sets[slot as usize] = sets_buf;
        self.gets.frames[slot as usize] = frame;
        let _ = ReadStage::Total;
        outcome
    }
}
