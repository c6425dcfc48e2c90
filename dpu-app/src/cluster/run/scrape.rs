//! What `serve --metrics` publishes: a snapshot of every node's counters and
//! histograms, copied by the serving loop, rendered by the metrics thread.
//!
//! The serving loop owns its nodes and never waits for the metrics thread: every
//! [`METRICS_PUBLISH_PERIOD_MS`] it copies each node's figures into its spare
//! snapshot (fixed memory, sized at start: no allocation) and swaps it with the shared
//! one only if the lock is free (`try_lock`); when the metrics thread holds it, the
//! loop tries again next round. The metrics thread copies the shared snapshot out under
//! the lock and renders the page ([`render`]) after releasing it.
//!
//! Every series carries `node` (its id in the cluster file, 0 for a one-node cluster)
//! and `region` (the host region's path), so one page covers `serve --region A
//! --region B` and a cluster node alike.

use std::sync::{Arc, Mutex, PoisonError, TryLockError};

use crate::cluster::order::OrderStats;
use crate::cluster::protocol::apply::ApplyStats;
use crate::cluster::protocol::node::Node;
use crate::cluster::protocol::sequencer::SeqStats;
use crate::cluster::protocol::stall::Stall;
use crate::cluster::protocol::stats::NodeStats;
use crate::exposition::{Exposition, Kind, LATENCY_BOUNDS_NS};
use crate::fabric::Fabric;
use crate::histogram::{Histogram, StageTimes, WriteStage};
use crate::limits::METRICS_PUBLISH_PERIOD_MS;
use crate::metrics::{Metrics, OpKind};

/// A node counter on the page: (name, help, how to read it from the node's stats).
type NodeCounter = (&'static str, &'static str, fn(&NodeStats) -> u64);

/// The node counters on the page, beside the request counts and histograms.
const NODE_COUNTERS: [NodeCounter; 27] = [
    ("prescient_predictor_hits_total", "Writes that found their key leased by the predictor (hits).", |s| {
        s.predictor_hits
    }),
    ("prescient_predictor_leases_total", "Predictor leases marked in the hosts' directories.", |s| s.leases_opened),
    (
        "prescient_predictor_false_positives_total",
        "Predictor leases rolled back unused: no write of the key came (false positives).",
        |s| s.leases_rolled_back,
    ),
    ("prescient_predictor_leases_timed_out_total", "Predictor leases rolled back for age.", |s| s.leases_timed_out),
    ("prescient_predictor_leases_dropped_total", "Predictions not marked for lack of a lease entry.", |s| {
        s.leases_dropped
    }),
    (
        "prescient_predictor_threshold_moves_total",
        "Moves of the predictor's lease threshold, tuned from cost (0 when it is fixed).",
        |s| s.lease_tuning.map_or(0, |t| t.moves_down + t.moves_up),
    ),
    ("prescient_get_retries_total", "GET gather rounds repeated because sets of different ages disagreed.", |s| {
        s.get_retries
    }),
    ("prescient_get_spill_rounds_total", "GETs that also READ their key's spill sets.", |s| s.get_spill_rounds),
    ("prescient_links_lost_total", "Links to peers lost.", |s| s.links_lost),
    ("prescient_suspicions_total", "Suspicions raised: a host directory could not be reached.", |s| s.suspicions),
    ("prescient_directory_revocations_total", "Whole-directory revocations.", |s| s.revocations),
    ("prescient_peers_declared_dead_total", "Peers declared dead.", |s| s.dead_declared),
    ("prescient_dead_marks_cleared_total", "Pending marks of dead writers cleared.", |s| s.marks_cleared),
    ("prescient_fragments_held_total", "Fragments this node persisted for other writers.", |s| s.fragments_held),
    ("prescient_entries_refused_total", "Log entries refused (malformed, inconsistent, tampered).", |s| {
        s.entries_refused
    }),
    ("prescient_entries_replayed_total", "Log entries replayed after a restart.", |s| s.entries_replayed),
    ("prescient_store_full_total", "Fragments refused for lack of store room.", |s| s.store_full),
    ("prescient_holder_refusals_total", "Refusals this node received from holders as a writer.", |s| s.refusals),
    ("prescient_directory_jobs_total", "Directory CAS jobs started on peers' directories.", |s| s.cas_jobs),
    ("prescient_directory_cas_rounds_total", "CAS rounds those directory jobs posted.", |s| s.cas_rounds),
    ("prescient_directory_jobs_contended_total", "Directory jobs whose slot changed under every CAS round.", |s| {
        s.cas_contended
    }),
    ("prescient_directory_jobs_refused_total", "Directory jobs not started: the job table was full.", |s| {
        s.job_table_full
    }),
    (
        "prescient_get_fragments_refused_total",
        "Fragments GETs refused (checksums) and frames that did not open.",
        |s| s.fragments_refused,
    ),
    ("prescient_forged_frames_total", "Rebuilt frames that did not open (a forged fragment).", |s| s.forged),
    ("prescient_notices_resent_total", "Decisions resent to a peer after it reconnected.", |s| s.notices_resent),
    ("prescient_repairs_started_total", "Repairs started: fragments rebuilt for a holder that missed them.", |s| {
        s.repairs_started
    }),
    ("prescient_repairs_done_total", "Repairs the holder acknowledged.", |s| s.repairs_done),
];

/// The serving counters on the page: (name, help, how to read them).
type HostCounter = (&'static str, &'static str, fn(&Metrics) -> u64);

const HOST_COUNTERS: [HostCounter; 5] = [
    ("prescient_queue_pairs_fenced_total", "Queue pairs fenced off for a host's ring violation.", |m| m.fences),
    ("prescient_host_deaths_total", "Hosts seen to die.", |m| m.host_deaths),
    ("prescient_host_stalls_total", "Times a live host's heartbeat went silent past the timeout.", |m| m.host_stalls),
    ("prescient_buffers_reclaimed_total", "Buffers reclaimed from dead hosts or a dead predecessor.", |m| {
        m.buffers_reclaimed
    }),
    ("prescient_predecessor_requests_failed_total", "Requests a dead predecessor took, failed at attach.", |m| {
        m.restart_failed
    }),
];

/// One peer link's figures.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct PeerFigures {
    id: u8,
    up: bool,
    bytes_out: u64,
    bytes_in: u64,
}

/// A node's sequencer and ordered apply figures (`ordering = "sequencer"`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct OrderFigures {
    /// The epoch of the leader word this node follows, and whether it sequences it.
    epoch: u32,
    leading: bool,
    /// The sequencer role's counters: stamps, fetches, holes, rolls.
    seq: SeqStats,
    /// Writes and no-ops released in order.
    released: OrderStats,
    /// Catch-ups, entries copied, stretches marked missing.
    apply: ApplyStats,
    /// The hole holding the order back, if any.
    stall: Option<Stall>,
    /// Rolled-back writes whose stamps wait for enough holders (`rollbacks.rs`).
    rollbacks_waiting: u64,
}

impl OrderFigures {
    fn of<F: Fabric>(node: &Node<F>, now_ns: u64) -> Option<Self> {
        let (word, leading) = node.sequencer_state()?;
        Some(Self {
            epoch: word.epoch,
            leading,
            seq: node.sequencer_stats()?,
            released: node.order_released()?,
            apply: node.apply_stats()?,
            stall: node.order_stall(now_ns),
            rollbacks_waiting: node.rollbacks_waiting() as u64,
        })
    }
}

/// One node's figures at the last publication.
#[derive(Clone, Debug)]
pub struct NodeSnapshot {
    node: String,
    region: String,
    metrics: Metrics,
    writes: StageTimes,
    gets_gather: Histogram,
    gets_total: Histogram,
    invalidated_after: Histogram,
    counters: [u64; NODE_COUNTERS.len()],
    store_live: u64,
    store_records: u64,
    /// Sized at start for every link the node has; refilled within that capacity.
    peers: Vec<PeerFigures>,
    /// Sequencer mode's figures (`None` in HLC mode).
    order: Option<OrderFigures>,
}

impl NodeSnapshot {
    /// An empty snapshot shaped for `node` (all allocation happens here).
    fn for_node<F: Fabric>(node: &Node<F>, now_ns: u64) -> Self {
        let mut s = Self {
            node: node.id().to_string(),
            region: node.region().path().display().to_string(),
            metrics: Metrics::default(),
            writes: StageTimes::new(),
            gets_gather: Histogram::new(),
            gets_total: Histogram::new(),
            invalidated_after: Histogram::new(),
            counters: [0; NODE_COUNTERS.len()],
            store_live: 0,
            store_records: 0,
            peers: Vec::with_capacity(node.bytes_moved().count()),
            order: None,
        };
        s.fill(node, now_ns);
        s
    }

    /// Copies `node`'s figures at `now_ns` (monotonic) in, without allocating.
    fn fill<F: Fabric>(&mut self, node: &Node<F>, now_ns: u64) {
        let stats = node.stats();
        self.metrics.clone_from(node.metrics());
        self.writes.copy_from(&stats.writes);
        self.gets_gather.copy_from(&stats.gets_gather);
        self.gets_total.copy_from(&stats.gets_total);
        self.invalidated_after.copy_from(&stats.invalidated_after);
        for (value, (_, _, read)) in self.counters.iter_mut().zip(NODE_COUNTERS) {
            *value = read(stats);
        }
        let (usage, _) = node.store_usage();
        (self.store_live, self.store_records) = (usage.live, usage.records);
        let room = self.peers.capacity();
        self.peers.clear();
        for (id, bytes_out, bytes_in) in node.bytes_moved().take(room) {
            self.peers.push(PeerFigures { id, up: node.peer_up(id), bytes_out, bytes_in });
        }
        self.order = OrderFigures::of(node, now_ns);
    }

    /// Makes this snapshot equal to `other`, allocating only if their shapes differ.
    fn copy_from(&mut self, other: &NodeSnapshot) {
        if self.peers.capacity() < other.peers.len() || self.node != other.node || self.region != other.region {
            *self = other.clone();
            return;
        }
        self.metrics.clone_from(&other.metrics);
        self.writes.copy_from(&other.writes);
        self.gets_gather.copy_from(&other.gets_gather);
        self.gets_total.copy_from(&other.gets_total);
        self.invalidated_after.copy_from(&other.invalidated_after);
        self.counters = other.counters;
        (self.store_live, self.store_records) = (other.store_live, other.store_records);
        self.peers.clear();
        self.peers.extend_from_slice(&other.peers);
        self.order = other.order;
    }
}

/// What the serving loop last published.
#[derive(Clone, Debug, Default)]
pub struct Published {
    nodes: Vec<NodeSnapshot>,
    regions_refused: u64,
}

impl Published {
    /// Makes this equal to `other` (the metrics thread's copy), reusing its memory.
    pub fn copy_from(&mut self, other: &Published) {
        if self.nodes.len() != other.nodes.len() {
            self.nodes.clone_from(&other.nodes);
        } else {
            self.nodes.iter_mut().zip(&other.nodes).for_each(|(mine, theirs)| mine.copy_from(theirs));
        }
        self.regions_refused = other.regions_refused;
    }
}

/// The serving loop's side: its spare snapshot and when it publishes next.
#[derive(Debug)]
pub struct Publisher {
    shared: Arc<Mutex<Published>>,
    spare: Published,
    next_ns: u64,
}

impl Publisher {
    /// Shapes the snapshots for `nodes` (`regions_refused`: regions refused at attach)
    /// and publishes their figures at `now_ns` (monotonic) into `shared`, so the first
    /// scrape has them.
    pub fn new<F: Fabric>(
        nodes: &[Node<F>],
        regions_refused: usize,
        shared: Arc<Mutex<Published>>,
        now_ns: u64,
    ) -> Self {
        let spare = Published {
            nodes: nodes.iter().map(|node| NodeSnapshot::for_node(node, now_ns)).collect(),
            regions_refused: regions_refused as u64,
        };
        *shared.lock().unwrap_or_else(PoisonError::into_inner) = spare.clone();
        Self { shared, spare, next_ns: 0 }
    }

    /// Publishes the nodes' figures if a period has passed since the last time and the
    /// metrics thread is not reading; never waits.
    pub fn maybe_publish<F: Fabric>(&mut self, nodes: &[Node<F>], now_ns: u64) {
        if now_ns < self.next_ns {
            return;
        }
        debug_assert_eq!(nodes.len(), self.spare.nodes.len(), "the nodes are the ones the publisher was shaped for");
        for (snapshot, node) in self.spare.nodes.iter_mut().zip(nodes) {
            snapshot.fill(node, now_ns);
        }
        let mut shared = match self.shared.try_lock() {
            Ok(shared) => shared,
            Err(TryLockError::WouldBlock) => return,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
        };
        std::mem::swap(&mut *shared, &mut self.spare);
        drop(shared);
        self.next_ns = now_ns.saturating_add(METRICS_PUBLISH_PERIOD_MS * 1_000_000);
    }
}

/// The metrics thread's side: a closure that renders the page from `shared`, keeping
/// its own copy so the lock is held only while copying.
pub fn page_renderer(shared: Arc<Mutex<Published>>) -> impl FnMut() -> String + Send + 'static {
    let mut local = Published::default();
    move || {
        local.copy_from(&shared.lock().unwrap_or_else(PoisonError::into_inner));
        render(&local)
    }
}

/// The page for `published`: every family once, each with the samples of every node.
pub fn render(published: &Published) -> String {
    let mut page = Exposition::new();
    let nodes = &published.nodes;

    let name = "prescient_requests_total";
    page.family(name, Kind::Counter, "Requests completed, by op and status (refusals at the door included).");
    for s in nodes {
        let [node, region] = at(s);
        for op in OpKind::ALL {
            let counts = &s.metrics.by_op[op as usize];
            let ok = counts.get(prescient_shim::Status::Ok);
            // Ok is always on the page for the data ops, so a rate of zero shows as one.
            if ok > 0 || matches!(op, OpKind::Put | OpKind::Get | OpKind::Delete) {
                page.sample(name, &[node, region, ("op", op.name()), ("status", "ok")], ok);
            }
            for (status, n) in counts.nonzero().filter(|(st, _)| *st != prescient_shim::Status::Ok) {
                page.sample(name, &[node, region, ("op", op.name()), ("status", status_label(status))], n);
            }
        }
    }

    let name = "prescient_write_stage_seconds";
    page.family(name, Kind::Histogram, "Latency of each stage of the writes this node coordinated (stage=\"total\": taking the descriptor to posting its completion).");
    for s in nodes {
        let [node, region] = at(s);
        for stage in WriteStage::ALL {
            page.histogram(name, &[node, region, ("stage", stage.name())], s.writes.write(stage), &LATENCY_BOUNDS_NS);
        }
    }

    let name = "prescient_read_stage_seconds";
    page.family(name, Kind::Histogram, "Latency of GETs: gather (every set copy in) and total.");
    for s in nodes {
        let [node, region] = at(s);
        page.histogram(name, &[node, region, ("stage", "gather")], &s.gets_gather, &LATENCY_BOUNDS_NS);
        page.histogram(name, &[node, region, ("stage", "total")], &s.gets_total, &LATENCY_BOUNDS_NS);
    }

    let name = "prescient_invalidation_seconds";
    page.family(name, Kind::Histogram, "From a PUT's arrival until every host's directory slot of its key was marked Pending (speculative invalidation).");
    for s in nodes {
        page.histogram(name, &at(s), &s.invalidated_after, &LATENCY_BOUNDS_NS);
    }

    for (i, (name, help, _)) in NODE_COUNTERS.iter().enumerate() {
        page.family(name, Kind::Counter, help);
        for s in nodes {
            page.sample(name, &at(s), s.counters[i]);
        }
    }
    for (name, help, read) in HOST_COUNTERS {
        page.family(name, Kind::Counter, help);
        for s in nodes {
            page.sample(name, &at(s), read(&s.metrics));
        }
    }

    let name = "prescient_store_records_in_use";
    page.family(name, Kind::Gauge, "Fragment store records in use (Pending or Committed).");
    for s in nodes {
        page.sample(name, &at(s), s.store_live);
    }
    let name = "prescient_store_records";
    page.family(name, Kind::Gauge, "Fragment store records the file has room for.");
    for s in nodes {
        page.sample(name, &at(s), s.store_records);
    }

    let name = "prescient_peer_bytes_total";
    page.family(
        name,
        Kind::Counter,
        "Log-entry bytes (fragments, outcome notices) moved with each peer, by direction.",
    );
    for s in nodes {
        let [node, region] = at(s);
        for p in &s.peers {
            let peer = p.id.to_string();
            page.sample(name, &[node, region, ("peer", &peer), ("direction", "out")], p.bytes_out);
            page.sample(name, &[node, region, ("peer", &peer), ("direction", "in")], p.bytes_in);
        }
    }
    let name = "prescient_peer_up";
    page.family(name, Kind::Gauge, "1 if the peer is connected and answering, else 0.");
    for s in nodes {
        let [node, region] = at(s);
        for p in &s.peers {
            page.sample(name, &[node, region, ("peer", &p.id.to_string())], u64::from(p.up));
        }
    }
    let name = "prescient_peers_up";
    page.family(name, Kind::Gauge, "Peers connected and answering (0 for a one-node cluster).");
    for s in nodes {
        page.sample(name, &at(s), s.peers.iter().filter(|p| p.up).count() as u64);
    }

    render_order(&mut page, nodes);

    let name = "prescient_regions_refused";
    page.family(name, Kind::Gauge, "Regions given that could not be served (refused at attach).");
    page.sample(name, &[], published.regions_refused);
    page.finish()
}

/// Sequencer mode's families, if any node runs it: the epoch, the stamps, the order
/// released, catch-ups, and the hole holding the order back with the nodes it waits for.
fn render_order(page: &mut Exposition, nodes: &[NodeSnapshot]) {
    let ordered = || nodes.iter().filter_map(|s| s.order.map(|o| (s, o)));
    if ordered().next().is_none() {
        return;
    }
    type Figure = (&'static str, &'static str, fn(&OrderFigures) -> u64);
    const GAUGES: [Figure; 3] = [
        ("prescient_sequencer_epoch", "The sequencer epoch this node follows (ordering = \"sequencer\").", |o| {
            u64::from(o.epoch)
        }),
        ("prescient_sequencer_leading", "1 if this node sequences its epoch, else 0.", |o| u64::from(o.leading)),
        (
            "prescient_sequencer_rollbacks_waiting",
            "Rolled-back writes whose stamps stay Pending until enough of their holders persisted the rollback (holders down: bring them back).",
            |o| o.rollbacks_waiting,
        ),
    ];
    for (name, help, read) in GAUGES {
        page.family(name, Kind::Gauge, help);
        for (s, o) in ordered() {
            page.sample(name, &at(s), read(&o));
        }
    }
    const COUNTERS: [Figure; 8] = [
        ("prescient_sequencer_stamps_total", "Stamps handed to this node's writes.", |o| o.seq.stamps),
        ("prescient_sequencer_fetches_total", "Stamp blocks fetched by FETCH_ADD on the sequencer's word.", |o| {
            o.seq.fetches
        }),
        ("prescient_sequencer_holes_total", "Stamps this node fetched and never used.", |o| o.seq.holes),
        (
            "prescient_sequencer_rolls_total",
            "Epochs this node claimed as sequencer to settle a hole in the order.",
            |o| o.seq.rolls,
        ),
        (
            "prescient_order_catch_ups_total",
            "Catch-ups from a peer's change feed (this node fell a fate ring behind).",
            |o| o.apply.catch_ups,
        ),
        ("prescient_order_entries_copied_total", "Change feed entries copied from peers by catch-ups.", |o| {
            o.apply.copied
        }),
        (
            "prescient_order_gaps_total",
            "Stretches this node's change feed marked missing (no peer's feed still held them).",
            |o| o.apply.feed_gaps,
        ),
        (
            "prescient_order_conflicts_total",
            "Fates the order refused as contradicting it (a bug; each is logged).",
            |o| o.apply.conflicts,
        ),
    ];
    let name = "prescient_order_released_total";
    page.family(
        name,
        Kind::Counter,
        "Stamps the ordered apply released, by fate: committed writes (into the change feed) and no-ops.",
    );
    for (s, o) in ordered() {
        let [node, region] = at(s);
        page.sample(name, &[node, region, ("fate", "write")], o.released.writes);
        page.sample(name, &[node, region, ("fate", "noop")], o.released.noops);
    }
    for (name, help, read) in COUNTERS {
        page.family(name, Kind::Counter, help);
        for (s, o) in ordered() {
            page.sample(name, &at(s), read(&o));
        }
    }
    let name = "prescient_order_hole_open_seconds";
    page.family(name, Kind::Gauge, "How long the hole holding this node's order back has been open (0: none); every committed write after it waits.");
    for (s, o) in ordered() {
        page.sample(name, &at(s), o.stall.map_or(0.0, |h| h.open_ns as f64 / 1e9));
    }
    let name = "prescient_order_waiting_for";
    page.family(name, Kind::Gauge, "1 for each node the hole holding the order back waits for: the node whose ring records its stamp, and nodes whose fate rings it could not READ lately (down or cut off).");
    for (s, o) in ordered() {
        let Some(h) = o.stall else { continue };
        let [node, region] = at(s);
        let waits = h.unread | h.held_by.map_or(0, |j| 1 << j);
        for j in (0..64u8).filter(|j| waits >> j & 1 == 1) {
            page.sample(name, &[node, region, ("peer", &j.to_string())], 1u64);
        }
    }
}

/// The labels every series of node `s` carries.
fn at(s: &NodeSnapshot) -> [(&'static str, &str); 2] {
    [("node", s.node.as_str()), ("region", s.region.as_str())]
}

/// A status as a label value: its name in snake case (`NotDurable` -> `not_durable`).
fn status_label(status: prescient_shim::Status) -> &'static str {
    use prescient_shim::Status as S;
    match status {
        S::Ok => "ok",
        S::BadOp => "bad_op",
        S::BadSla => "bad_sla",
        S::ReservedNotZero => "reserved_not_zero",
        S::BadKeyLength => "bad_key_length",
        S::BadOffset => "bad_offset",
        S::BadValueLength => "bad_value_length",
        S::BufferNotSubmitted => "buffer_not_submitted",
        S::BufferInFlight => "buffer_in_flight",
        S::DpuRestarted => "dpu_restarted",
        S::StageFailed => "stage_failed",
        S::NotFound => "not_found",
        S::NotDurable => "not_durable",
        S::Unavailable => "unavailable",
        S::Overloaded => "overloaded",
        S::Unsupported => "unsupported",
        // Status::Unknown, and any status a newer shim adds.
        _ => "unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prescient_shim::Status;

    fn snapshot(node: &str, region: &str) -> NodeSnapshot {
        NodeSnapshot {
            node: node.into(),
            region: region.into(),
            metrics: Metrics::default(),
            writes: StageTimes::new(),
            gets_gather: Histogram::new(),
            gets_total: Histogram::new(),
            invalidated_after: Histogram::new(),
            counters: [0; NODE_COUNTERS.len()],
            store_live: 0,
            store_records: 0,
            peers: Vec::with_capacity(4),
            order: None,
        }
    }

    #[test]
    fn every_series_is_labelled_by_node_and_region_and_counts_by_op_and_status() {
        let mut a = snapshot("0", "/dev/shm/kv-a");
        for _ in 0..3 {
            a.metrics.count(prescient_shim::descriptor::OpCode::Put as u8, Status::Ok);
        }
        a.metrics.count(prescient_shim::descriptor::OpCode::Get as u8, Status::NotFound);
        a.metrics.count(0xee, Status::BadOp);
        a.writes.record_write(WriteStage::Seal, 1_500);
        a.counters[0] = 7;
        let mut b = snapshot("3", "/dev/shm/kv-b");
        b.peers.push(PeerFigures { id: 1, up: true, bytes_out: 10, bytes_in: 20 });
        b.peers.push(PeerFigures { id: 2, up: false, bytes_out: 0, bytes_in: 0 });
        let page = render(&Published { nodes: vec![a, b], regions_refused: 1 });
        let has = |line: &str| assert!(page.lines().any(|l| l == line), "no line {line:?} in\n{page}");
        has(r#"prescient_requests_total{node="0",region="/dev/shm/kv-a",op="put",status="ok"} 3"#);
        has(r#"prescient_requests_total{node="0",region="/dev/shm/kv-a",op="get",status="not_found"} 1"#);
        has(r#"prescient_requests_total{node="0",region="/dev/shm/kv-a",op="other",status="bad_op"} 1"#);
        has(r#"prescient_requests_total{node="3",region="/dev/shm/kv-b",op="delete",status="ok"} 0"#);
        has(r#"prescient_write_stage_seconds_bucket{node="0",region="/dev/shm/kv-a",stage="seal",le="0.000002"} 1"#);
        has(r#"prescient_write_stage_seconds_count{node="3",region="/dev/shm/kv-b",stage="total"} 0"#);
        has(r#"prescient_predictor_hits_total{node="0",region="/dev/shm/kv-a"} 7"#);
        has(r#"prescient_peer_bytes_total{node="3",region="/dev/shm/kv-b",peer="1",direction="in"} 20"#);
        has(r#"prescient_peer_up{node="3",region="/dev/shm/kv-b",peer="2"} 0"#);
        has(r#"prescient_peers_up{node="3",region="/dev/shm/kv-b"} 1"#);
        has(r#"prescient_peers_up{node="0",region="/dev/shm/kv-a"} 0"#);
        has("prescient_regions_refused 1");
        assert_eq!(page.matches("# TYPE prescient_write_stage_seconds histogram").count(), 1);
        // No op NOP line without NOPs.
        assert!(!page.contains(r#"op="nop""#), "{page}");
    }

    #[test]
    fn sequencer_mode_shows_the_order_and_what_its_hole_waits_for() {
        let hlc = snapshot("0", "a");
        let page = render(&Published { nodes: vec![hlc.clone()], regions_refused: 0 });
        assert!(!page.contains("prescient_order_") && !page.contains("prescient_sequencer_"), "HLC mode: none\n{page}");
        let mut seq = snapshot("1", "b");
        seq.order = Some(OrderFigures {
            epoch: 3,
            leading: true,
            seq: SeqStats { stamps: 40, rolls: 2, ..SeqStats::default() },
            released: OrderStats { writes: 38, noops: 5, repeats: 0 },
            apply: ApplyStats { catch_ups: 1, copied: 64, ..ApplyStats::default() },
            stall: Some(Stall {
                version: 3 << 32 | 9,
                open_ns: 2_500_000_000,
                held_by: Some(4),
                unread: 1 << 4 | 1 << 2,
            }),
            rollbacks_waiting: 1,
        });
        let page = render(&Published { nodes: vec![hlc, seq], regions_refused: 0 });
        let has = |line: &str| assert!(page.lines().any(|l| l == line), "no line {line:?} in\n{page}");
        has(r#"prescient_sequencer_epoch{node="1",region="b"} 3"#);
        has(r#"prescient_sequencer_leading{node="1",region="b"} 1"#);
        has(r#"prescient_sequencer_rollbacks_waiting{node="1",region="b"} 1"#);
        has(r#"prescient_sequencer_stamps_total{node="1",region="b"} 40"#);
        has(r#"prescient_sequencer_rolls_total{node="1",region="b"} 2"#);
        has(r#"prescient_order_released_total{node="1",region="b",fate="write"} 38"#);
        has(r#"prescient_order_released_total{node="1",region="b",fate="noop"} 5"#);
        has(r#"prescient_order_entries_copied_total{node="1",region="b"} 64"#);
        has(r#"prescient_order_hole_open_seconds{node="1",region="b"} 2.5"#);
        has(r#"prescient_order_waiting_for{node="1",region="b",peer="2"} 1"#);
        has(r#"prescient_order_waiting_for{node="1",region="b",peer="4"} 1"#);
        assert_eq!(page.matches("prescient_order_waiting_for{").count(), 2, "{page}");
        assert!(!page.contains(r#"prescient_order_released_total{node="0""#), "the HLC node has no order series");
    }

    #[test]
    fn a_copy_reuses_its_memory_and_equals_the_original() {
        let mut src = snapshot("1", "r");
        src.writes.record_write(WriteStage::Total, 42);
        src.peers.push(PeerFigures { id: 4, up: true, bytes_out: 1, bytes_in: 2 });
        let mut dst = snapshot("1", "r");
        let peers_at = dst.peers.as_ptr();
        dst.copy_from(&src);
        assert_eq!(dst.peers.as_ptr(), peers_at, "no new peer array");
        assert_eq!((dst.peers.clone(), dst.writes.clone()), (src.peers.clone(), src.writes.clone()));
        let one = Published { nodes: vec![src], regions_refused: 2 };
        let mut copy = Published::default();
        copy.copy_from(&one);
        assert_eq!(render(&copy), render(&one));
    }

    #[test]
    fn status_labels_are_distinct() {
        let labels: std::collections::HashSet<_> = (0..=16).map(|c| status_label(Status::from_u16(c))).collect();
        assert_eq!(labels.len(), 17);
    }
}
