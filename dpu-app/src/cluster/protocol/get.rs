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
use prescient_shim::region::Region;
use prescient_shim::Status;

use super::links::Links;
use super::noisy::Noisy;
use super::pool::{Pool, Pools};
use super::slots::{GetId, Handle, SlotTable};
use super::stats::NodeStats;
use super::time::Now;
use super::wr::{Kind, WrId};
use crate::cluster::format::record::{gathered_range, key_may_have_spilled, KeySets, RecordState, RecordView};
use crate::cluster::format::store::{Store, StoreGeometry};
use crate::cluster::hlc::Hlc;
use crate::fabric::{Fabric, Op};
use crate::limits::{FRAGMENTS_MAX, GET_CANDIDATES_MAX, GET_ROUNDS_MAX};
use crate::log_limit::LogLimits;
use crate::metrics::Metrics;
use crate::queue::{key_of, Outcome};
use crate::region_server::{RegionServer, Taken};
use crate::seal::{key_hash, open_in_place, Binding, Sealer};
use crate::stripe::{decode_stripe, Fragment, ReedSolomon, StripeError};

/// Where a GET is. A round READs from every reachable peer, and once every READ is in
/// (or the deadline passed) the node adds its own sets and either gathers again with
/// the spill sets, or decodes; a decode that finds nothing it can prove or rebuild
/// gathers again (a bounded number of rounds), else the GET is done.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GetState {
    /// A round READs the key's home set.
    Gathering,
    /// A round READs the key's spill set, then its home set: some node's home set said
    /// the key may have spilled (every later round of the GET reads both).
    GatheringWithSpill,
    /// The round is in: choosing a version, decoding and opening it (`with_spill`: the
    /// round read the spill sets too).
    Decoding {
        /// The round read the spill sets.
        with_spill: bool,
    },
    /// Completed to the host.
    Done,
}

impl GetState {
    /// Whether `from => to` is a transition of a GET.
    pub fn can_become(from: Self, to: Self) -> bool {
        use GetState as S;
        matches!(
            (from, to),
            (S::Gathering, S::GatheringWithSpill)
                | (S::Gathering, S::Decoding { with_spill: false })
                | (S::GatheringWithSpill, S::Decoding { with_spill: true })
                | (S::Decoding { with_spill: false }, S::Gathering)
                | (S::Decoding { with_spill: true }, S::GatheringWithSpill)
                | (S::Decoding { .. }, S::Done)
        )
    }
}

/// One GET in flight.
#[derive(Debug)]
pub struct Get {
    state: GetState,
    taken: Taken,
    key_hash: u64,
    /// The key's home set.
    set: u32,
    /// The key's spill set (None in a store of one set).
    spill: Option<u32>,
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
    /// A `Fresh` GET gathers again until this (its SLA's `max_wait` from the start)
    /// while it cannot prove the newest value, beyond its first `GET_ROUNDS_MAX` rounds.
    wait_until_ns: u64,
}

impl Get {
    /// Where the GET is.
    pub fn state(&self) -> GetState {
        self.state
    }

    /// The one place a GET's state changes.
    fn set_state(&mut self, to: GetState) {
        let from = self.state;
        assert!(GetState::can_become(from, to), "GET of key {:#x}: {from:?} => {to:?} is no transition", self.key_hash);
        tracing::trace!(key_hash = self.key_hash, "GET {from:?} => {to:?}");
        self.state = to;
    }

    /// Whether its rounds READ the spill set.
    fn with_spill(&self) -> bool {
        matches!(self.state, GetState::GatheringWithSpill | GetState::Decoding { with_spill: true })
    }
}

/// What the reader may use of its node: the links to READ over, the staging pools, the
/// store, the host region and its completions, the codec and sealer, the clock,
/// counters and log limits.
pub(super) struct ReadCx<'a, F: Fabric> {
    pub me: u8,
    pub n: usize,
    /// The storage nodes: the ones a GET reads sets from.
    pub placement: &'a crate::cluster::placement::Placement,
    pub k: usize,
    pub m: usize,
    pub write_timeout_ns: u64,
    pub links: &'a mut Links<F::Qp>,
    pub pools: &'a Pools,
    pub store: &'a Store,
    pub region: &'a Region,
    pub host: &'a mut RegionServer,
    pub metrics: &'a mut Metrics,
    pub rs: &'a mut ReedSolomon,
    pub sealer: &'a Sealer,
    pub hlc: &'a mut Hlc,
    pub stats: &'a mut NodeStats,
    pub noisy: &'a mut LogLimits<{ Noisy::COUNT }>,
}

/// The reader: the GETs in flight, with per GET slot its copies of the key's sets (per
/// node, its home set then its spill set) and the frame it rebuilds into, all allocated
/// at start. A GET's slot also names its READ targets in the sets pool: slot * nodes +
/// peer, in the pool's home half and its spill half.
#[derive(Debug)]
pub struct Reader {
    gets: SlotTable<Get, GetId>,
    sets: Vec<Vec<u8>>,
    frames: Vec<Vec<u8>>,
    nodes: usize,
    set_bytes: usize,
}

impl Reader {
    /// Room for `capacity` GETs in a cluster of `nodes`, for sets of `set_bytes` and
    /// frames of up to `frame_bytes` (data fragments included).
    pub fn new(capacity: u32, nodes: usize, set_bytes: usize, frame_bytes: usize) -> Self {
        Self {
            gets: SlotTable::new(capacity),
            sets: (0..capacity).map(|_| vec![0u8; nodes * 2 * set_bytes]).collect(),
            frames: (0..capacity).map(|_| vec![0u8; frame_bytes]).collect(),
            nodes,
            set_bytes,
        }
    }

    /// Free slots.
    pub fn available(&self) -> usize {
        self.gets.available()
    }

    /// GET slots in all.
    pub fn capacity(&self) -> u32 {
        self.gets.capacity()
    }

    /// GETs in flight.
    pub fn in_flight(&self) -> usize {
        self.gets.in_use()
    }

    /// Starts a GET: copy the key's set locally, READ it from every reachable peer.
    pub(super) fn start<F: Fabric>(&mut self, cx: &mut ReadCx<'_, F>, t: Taken, now: Now) {
        let mut key = [0u8; KEY_BYTES_MAX];
        let key = key_of(cx.region, &t.accepted, &mut key);
        let key_hash = key_hash(key);
        let (set, spill) = (cx.store.home_of(key_hash), cx.store.spill_of(key_hash));
        let wait_ns = t.accepted.desc.sla.max_wait().as_nanos() as u64;
        let get = Get {
            state: GetState::Gathering,
            taken: t,
            key_hash,
            set,
            spill,
            pending: 0,
            pending_spill: 0,
            arrived: 0,
            arrived_spill: 0,
            attempts: 0,
            started_ns: now.mono_ns,
            gathered_ns: 0,
            // A GET waits at most the longer of the write timeout and its SLA's wait.
            deadline_ns: now.mono_ns + cx.write_timeout_ns.max(wait_ns),
            fresh: t.accepted.desc.sla.is_fresh(),
            wait_until_ns: now.mono_ns + wait_ns,
        };
        let id = self.gets.insert(get).expect("take_requests checked room");
        self.gather(cx, id);
    }

    /// READs the key's home set (after its spill set, once some node said so) from every
    /// reachable peer: a new round. It starts only once every READ of the last round is
    /// in (a round ends early only at the deadline, and then no other follows), so the
    /// GET keeps its handle from round to round.
    fn gather<F: Fabric>(&mut self, cx: &mut ReadCx<'_, F>, id: GetId) {
        let set_bytes = self.set_bytes;
        let (nodes, sets_slots) = (self.nodes, cx.pools.sets.slots());
        let staging = move |spill, j| staging(nodes, sets_slots, id.slot(), j, spill);
        let Some(g) = self.gets.get_mut(id) else { return };
        assert_eq!(g.pending | g.pending_spill, 0, "GET {id:?} gathers again with READs outstanding");
        let (set, spill) = (g.set, g.spill.filter(|_| g.with_spill()));
        g.attempts += 1;
        g.arrived = 0;
        g.arrived_spill = 0;
        // From the storage nodes only: a cache-only member holds no fragment, and may
        // be a far region away.
        for &j in cx.placement.storage() {
            if j == cx.me {
                continue;
            }
            let Some(remote) = cx.links.peer(j).filter(|p| p.is_up()).and_then(|p| p.remote) else { continue };
            if let Some(spill) = spill {
                // Posted first on the same queue pair: READ before the home set.
                let buf = cx.pools.sets.buf(staging(true, j), set_bytes);
                let at = cx.store.set_offset(spill) as u64;
                g.pending_spill |= 1 << j;
                cx.links.post(j, WrId::of(Kind::GetSpillRead, j, id), Op::Read { remote: remote.store.at(at) }, buf);
            }
            let buf = cx.pools.sets.buf(staging(false, j), set_bytes);
            let at = cx.store.set_offset(set) as u64;
            g.pending |= 1 << j;
            cx.links.post(j, WrId::of(Kind::GetRead, j, id), Op::Read { remote: remote.store.at(at) }, buf);
        }
    }

    /// A set READ for a GET came back (`spill`: the READ of the spill set); `sets` is
    /// the pool it landed in.
    pub(super) fn on_read(&mut self, sets: &Pool, id: WrId, ok: bool, spill: bool) {
        let get: GetId = id.handle();
        let staging = staging(self.nodes, sets.slots(), get.slot(), id.peer, spill);
        let Some(g) = self.gets.get_mut(get) else { return };
        let bit = 1 << id.peer;
        let (pending, arrived) =
            if spill { (&mut g.pending_spill, &mut g.arrived_spill) } else { (&mut g.pending, &mut g.arrived) };
        *pending &= !bit;
        if ok {
            *arrived |= bit;
            let into = gathered_range(id.peer as usize, spill, self.set_bytes);
            sets.read(staging, &mut self.sets[get.slot() as usize][into]);
        }
    }

    /// Finishes every GET whose reads are all in.
    pub(super) fn advance<F: Fabric>(&mut self, cx: &mut ReadCx<'_, F>, now: Now) -> bool {
        let mut busy = false;
        for slot in 0..self.gets.capacity() {
            let Some(id) = self.gets.current(slot) else { continue };
            let ready =
                self.gets.get(id).is_some_and(|g| g.pending | g.pending_spill == 0 || now.mono_ns >= g.deadline_ns);
            if ready {
                busy = true;
                self.finish(cx, id, now);
            }
        }
        busy
    }

    fn finish<F: Fabric>(&mut self, cx: &mut ReadCx<'_, F>, id: GetId, now: Now) {
        // Our own sets last, so they are no older than the peers' (records are dropped as
        // newer writes commit: sets of different ages can disagree on what is there);
        // the spill set before the home set, as from the peers.
        let set_bytes = self.set_bytes;
        let slot = id.slot() as usize;
        let me = cx.me as usize;
        let g = self.gets.get_mut(id).expect("ready GET");
        let sets = &mut self.sets[slot];
        let with_spill = g.with_spill();
        let (home, spill) = if cx.placement.stores(cx.me) {
            let (home, spill) = cx.store.read_key_sets(g.set, g.spill.filter(|_| with_spill), sets, me);
            (Some(home), spill)
        } else {
            // A cache-only member's store holds nothing: the storage nodes' sets are all.
            (None, None)
        };
        for (result, arrived) in [(home, &mut g.arrived), (spill, &mut g.arrived_spill)] {
            match result {
                Some(Ok(())) => *arrived |= 1 << me,
                Some(Err(e)) => tracing::error!(node = cx.me, error = %e, "cannot read the local store set"),
                None => {}
            }
        }
        g.gathered_ns = now.mono_ns;
        // Some node's home set counts records of this key's slot in the spill set: gather
        // again with the spill sets (once; later rounds keep reading them).
        if !with_spill && g.spill.is_some() && now.mono_ns < g.deadline_ns {
            let spilled = (0..cx.n).any(|j| {
                g.arrived & (1 << j) != 0
                    && key_may_have_spilled(&sets[gathered_range(j, false, set_bytes)], g.key_hash)
            });
            if spilled {
                g.set_state(GetState::GatheringWithSpill);
                g.attempts -= 1;
                cx.stats.get_spill_rounds += 1;
                self.gather(cx, id);
                return;
            }
        }
        g.set_state(GetState::Decoding { with_spill });
        let outcome = rebuild(cx, g, &self.sets[slot], &mut self.frames[slot], set_bytes);
        // Sets READ at different moments may straddle a commit that dropped the older
        // version's fragments: gather again, a bounded number of times, and a `Fresh`
        // GET for as long as its SLA waits (peers may come back, a write resolve).
        let rounds_left = g.attempts < GET_ROUNDS_MAX || (g.fresh && now.mono_ns < g.wait_until_ns);
        if outcome.status == Status::Unavailable && rounds_left && now.mono_ns < g.deadline_ns {
            g.set_state(if with_spill { GetState::GatheringWithSpill } else { GetState::Gathering });
            cx.stats.get_retries += 1;
            self.gather(cx, id);
            return;
        }
        g.set_state(GetState::Done);
        let g = self.gets.remove(id).expect("ready GET");
        cx.stats.record_get(g.started_ns, g.gathered_ns, now.mono_ns, outcome.status);
        cx.host.complete(&g.taken, outcome, cx.metrics);
    }
}

/// The sets-pool slot (of `sets_slots`) the READ of GET `slot`'s set from `peer` lands
/// in: the pool's first half holds home sets, its second half spill sets.
fn staging(nodes: usize, sets_slots: u32, slot: u32, peer: u8, spill: bool) -> u32 {
    let home = slot * nodes as u32 + u32::from(peer);
    if spill {
        home + sets_slots / 2
    } else {
        home
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
/// a node that could not be reached) for the code RS(`k`, `m`); a fragment is named by (node, way), ways of the
/// spill set following the home set's ([`KeySets::record`]). Only the nodes of
/// `storage` (a bit mask of node ids) count as unreachable when their sets are `None`:
/// a cache-only member holds nothing to miss. Pure, so the rules are tested on their
/// own.
pub fn choose(
    sets: &[Option<KeySets<'_>>],
    geometry: &StoreGeometry,
    key_hash: u64,
    (k, m): (usize, usize),
    skip: &[(u8, u8)],
    fresh: bool,
    storage: u32,
) -> Choice {
    let mut candidates = [Candidate {
        stamp: 0,
        committed: false,
        tombstone: false,
        have: 0,
        fragments: [(0, 0); FRAGMENTS_MAX],
        count: 0,
    }; GET_CANDIDATES_MAX];
    let mut used = 0;
    // Only storage nodes count: a cache-only member holds nothing to miss.
    let unreachable =
        sets.iter().enumerate().filter(|(j, s)| s.is_none() && *j < 32 && storage & (1 << j) != 0).count();
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
                None if used < GET_CANDIDATES_MAX => {
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

/// Chooses, decodes and opens the value of GET `g` from the sets it gathered
/// (`sets_buf`) into its host buffer, using `frame` as scratch.
fn rebuild<F: Fabric>(cx: &mut ReadCx<'_, F>, g: &Get, sets_buf: &[u8], frame: &mut [u8], set_bytes: usize) -> Outcome {
    let geometry = cx.store.geometry();
    let mut skip = [(u8::MAX, u8::MAX); FRAGMENTS_MAX];
    let mut skipped = 0;
    let with_spill = g.with_spill() && g.spill.is_some();
    loop {
        // A node counts once what this round READ of it arrived: its home set, and its
        // spill set when the round READ that too.
        let sets: [Option<KeySets<'_>>; crate::limits::NODES_MAX] = std::array::from_fn(|j| {
            let home_in = j < cx.n && cx.placement.stores(j as u8) && g.arrived & (1 << j) != 0;
            let spill_in = !with_spill || g.arrived_spill & (1 << j) != 0;
            (home_in && spill_in).then(|| KeySets::gathered(sets_buf, j, set_bytes, with_spill))
        });
        let choice =
            choose(&sets[..cx.n], &geometry, g.key_hash, (cx.k, cx.m), &skip[..skipped], g.fresh, cx.placement.mask());
        tracing::trace!(node = cx.me, key_hash = g.key_hash, arrived = g.arrived, ?choice, skipped, "GET choice");
        if tracing::enabled!(tracing::Level::TRACE) && matches!(choice, Choice::Unavailable { .. }) {
            for (j, set) in sets[..cx.n].iter().enumerate() {
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
            return match choice {
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
        match decode_stripe(cx.rs, &frags[..used], frame) {
            Ok((layout, id)) => {
                let frame_len = layout.frame_len();
                let binding =
                    Binding { key_hash: g.key_hash, version: id.version, k: cx.k as u8, m: cx.m as u8, tombstone };
                debug_assert_eq!(id.version, stamp);
                match open_in_place(cx.sealer.keys(), &mut frame[..frame_len], &binding) {
                    // A deletion: found, as deleted at `stamp`.
                    Ok(_) if tombstone => {
                        return Outcome { status: Status::NotFound, version: stamp, detail: 0, flags };
                    }
                    Ok(plain) => {
                        let len = plain.len();
                        let buffer = g.taken.accepted.buffer;
                        let cap = cx.region.layout().config.buffer_bytes as usize - VALUE_OFFSET;
                        if len > cap {
                            return Outcome::failed(Status::BadValueLength, len as u32);
                        }
                        let at = cx.region.layout().buffer(buffer) + VALUE_OFFSET;
                        cx.region.write_bytes(at, &frame[..len]);
                        // A stamp's version always fits the clock's range.
                        let _ = cx.hlc.observe(stamp >> 8);
                        return Outcome { status: Status::Ok, version: stamp, detail: len as u32, flags };
                    }
                    Err(e) => {
                        // Every checksum held but the frame does not open: some
                        // fragment was forged. Try again without one of them.
                        if let Some(left_out) = admit_log(cx.noisy) {
                            tracing::warn!(node = cx.me, error = %e, left_out, "rebuilt frame does not open");
                        }
                        cx.stats.forged += 1;
                        if used <= cx.k || skipped >= FRAGMENTS_MAX {
                            return Outcome::failed(Status::Unavailable, used as u32);
                        }
                        skip[skipped] = ways[skipped % used];
                        skipped += 1;
                    }
                }
            }
            Err(e) => {
                let bad = match e {
                    StripeError::PayloadChecksum { index, .. } | StripeError::Inconsistent { index, .. } => Some(index),
                    StripeError::Duplicate { index } => Some(index),
                    _ => None,
                };
                if let Some(left_out) = admit_log(cx.noisy) {
                    tracing::warn!(node = cx.me, error = %e, left_out, "a fragment was refused; rebuilding without it");
                }
                cx.stats.fragments_refused += 1;
                let pos = bad.and_then(|i| frags[..used].iter().position(|f| f.header.get(7) == Some(&i)));
                match pos {
                    Some(p) if skipped < FRAGMENTS_MAX => {
                        skip[skipped] = ways[p];
                        skipped += 1;
                    }
                    _ => return Outcome::failed(Status::Unavailable, used as u32),
                }
            }
        }
    }
}

/// Whether a log line about a refused fragment may be written now (as
/// `Node::admit_log`): `Some(lines left out since the last one)`.
fn admit_log(noisy: &mut LogLimits<{ Noisy::COUNT }>) -> Option<u64> {
    noisy.admit(Noisy::GetFragmentRefused as usize, prescient_shim::sys::monotonic_ns())
}

#[cfg(test)]
mod tests {
    use super::GetState as S;

    const ALL: [S; 5] = [
        S::Gathering,
        S::GatheringWithSpill,
        S::Decoding { with_spill: false },
        S::Decoding { with_spill: true },
        S::Done,
    ];

    #[test]
    fn a_get_keeps_reading_the_spill_sets_once_it_started_and_ends_only_after_decoding() {
        let legal: Vec<(S, S)> =
            ALL.iter().flat_map(|&a| ALL.iter().map(move |&b| (a, b))).filter(|&(a, b)| S::can_become(a, b)).collect();
        assert_eq!(
            legal,
            [
                (S::Gathering, S::GatheringWithSpill),
                (S::Gathering, S::Decoding { with_spill: false }),
                (S::GatheringWithSpill, S::Decoding { with_spill: true }),
                (S::Decoding { with_spill: false }, S::Gathering),
                (S::Decoding { with_spill: false }, S::Done),
                (S::Decoding { with_spill: true }, S::GatheringWithSpill),
                (S::Decoding { with_spill: true }, S::Done),
            ]
        );
    }
}
