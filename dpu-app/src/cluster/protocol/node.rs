//! One node of the cluster: the DPU app of one host, as a single-threaded state machine
//! driven by [`Node::poll`] with the time passed in.
//!
//! A poll drains the completion queues (routing each completion by its work-request
//! id), handles rendezvous messages, takes new requests from the host's rings, moves
//! every write and GET in flight forward, runs the timers (heartbeats, exclusion,
//! leases, dead peers) and publishes the host's completions. Nothing blocks and nothing
//! reads a clock: an in-process simulator on a manual clock replays a run exactly.
//!
//! `Node` holds one field per role - the writer (`replicate.rs`), the holder of other
//! writers' fragments (`holder.rs`), the reader (`get.rs`), the repairer (`repair.rs`),
//! predictor leases (`lease.rs`), directory jobs (`jobs.rs`), membership and connection
//! setup (`membership.rs`, `connect.rs`) - and the equipment they share (links, pools,
//! store, outcome table, host region, codecs, clock, stats). This file starts the node,
//! polls it and routes completions; the dispatch for each role is in a child module,
//! `node/{write,hold,read,repair,leases,jobs,membership}.rs`, which builds the role's
//! context from the node's fields and passes the role's effects on. The types the
//! roles share live below them (`pool.rs`, `noisy.rs`, `ack.rs`, `peer.rs`, `time.rs`,
//! `crate::cluster::config`, `crate::limits`), never here: the roles do not import
//! this file.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use prescient_models::{Model, Predictor, TuningConfig};
use prescient_shim::layout::header;
use prescient_shim::region::Region;

use super::apply::Applier;
use super::get::Reader;
use super::holder::Holder;
use super::jobs::Jobs;
use super::lease::Leases;
use super::links::Links;
use super::membership::Membership;
use super::noisy::Noisy;
use super::peer::{Conn, Peer};
use super::pool::{Pool, Pools};
use super::repair::Repairer;
use super::replicate::Writer;
use super::sequencer::Sequencer;
use super::stats::NodeStats;
use super::wr::{Kind, WrId};
use crate::cluster::config::{ClusterConfig, Congestion, Policy};
use crate::cluster::format::control::{ControlBlock, CONTROL_BYTES};
use crate::cluster::format::entry::HEADER_LEN as ENTRY_HEADER_LEN;
use crate::cluster::format::fates::FateRing;
use crate::cluster::format::feed::FeedLog;
use crate::cluster::format::ledger::Ledger;
use crate::cluster::format::log::{EntryBuf, FragmentLog};
use crate::cluster::format::outcome::OutcomeTable;
use crate::cluster::format::store::{Store, StoreGeometry};
use crate::cluster::hlc::{Hlc, HlcFloor};
use crate::cluster::protocol::ledgers::Ledgers;
use crate::cluster::protocol::mailbox::Mailbox;
use crate::fabric::swift::SwiftConfig;
use crate::fabric::{
    Access, Completion, CompletionQueue, Fabric, LocalBuf, MemoryRegion, QpOptions, WcOpcode, WcStatus,
};
use crate::limits::WR_INDEX_MAX;
use crate::limits::*;
use crate::log_limit::LogLimits;
use crate::metrics::Metrics;
use crate::region_server::{RegionServer, Taken};
use crate::seal::{bump_epoch, Sealer};
use crate::stripe::{ReedSolomon, StripeLayout};
use crate::Error;

pub use super::time::Now;

// The node's dispatch, one file per role: each builds its role's context from the
// node's fields and passes the role's effects on.
mod apply;
mod hold;
mod jobs;
mod leases;
mod membership;
mod read;
mod repair;
mod sequencer;
mod write;

/// What a node needs to start.
pub struct NodeSetup<F: Fabric> {
    /// The cluster.
    pub config: Arc<ClusterConfig>,
    /// This node's id.
    pub id: u8,
    /// Its NIC (an emulated node, or verbs).
    pub fabric: Arc<F>,
    /// The host's region file.
    pub region: PathBuf,
    /// Lock the region in memory.
    pub pin: bool,
    /// Time without a host heartbeat after which its buffers are reclaimed.
    pub host_timeout: Duration,
    /// Where hellos come and go.
    pub mailbox: Box<dyn Mailbox>,
    /// The time at start.
    pub now: Now,
}

/// One node.
pub struct Node<F: Fabric> {
    pub(super) me: u8,
    pub(super) n: usize,
    /// The storage nodes and each key's holders.
    pub(super) placement: crate::cluster::placement::Placement,
    pub(super) k: usize,
    pub(super) m: usize,
    pub(super) quorum: u32,
    pub(super) policy: Policy,
    pub(super) config: Arc<ClusterConfig>,
    pub(super) incarnation: u32,
    pub(super) write_timeout_ns: u64,
    pub(super) sync_records: bool,
    pub(super) fabric: Arc<F>,
    pub(super) send_cq: F::Cq,
    pub(super) recv_cq: F::Cq,
    pub(super) host: RegionServer,
    pub(super) region: Arc<Region>,
    pub(super) arena_mr: Arc<MemoryRegion>,
    pub(super) directory_mr: Option<Arc<MemoryRegion>>,
    pub(super) directory_slots: u32,
    pub(super) control: ControlBlock,
    pub(super) store: Store,
    pub(super) store_mr: Arc<MemoryRegion>,
    /// The holder of other writers' fragments (their logs here).
    pub(super) holder: Holder,
    pub(super) outcomes: OutcomeTable,
    pub(super) links: Links<F::Qp>,
    pub(super) membership: Membership,
    /// The writer: this node's writes in flight, held and notified.
    pub(super) writer: Writer,
    pub(super) jobs: Jobs,
    pub(super) reader: Reader,
    pub(super) leases: Leases,
    pub(super) repairer: Repairer,
    pub(super) sealer: Sealer,
    pub(super) rs: ReedSolomon,
    /// Extends a fragment header's CRC by its payload's (log entry checksums).
    pub(super) crc_shift: crate::cluster::format::crc_combine::ShiftCache,
    pub(super) predictor: Option<Predictor>,
    pub(super) hlc: Hlc,
    pub(super) hlc_floor: HlcFloor,
    /// Where versions come from with `ordering = "sequencer"` (`None`: the HLC).
    pub(super) sequencer: Option<Sequencer>,
    /// The ordered apply and change feed (sequencer mode).
    pub(super) applier: Option<Applier>,
    pub(super) pools: Pools,
    pub(super) taken: Vec<Taken>,
    pub(super) wc: Vec<Completion>,
    pub(super) expired: Vec<u64>,
    /// Rate limits of the log lines of [`Noisy`] conditions.
    pub(super) noisy: LogLimits<{ Noisy::COUNT }>,
    pub(super) stats: NodeStats,
    pub(super) metrics: Metrics,
    /// When this node first polled: a peer it has never heard from is judged dead only
    /// `dead_after` from here (a node that was slow to open its files, or whose peers
    /// were, does not call them dead before it has even looked).
    pub(super) started_ns: Option<u64>,
    /// Whether the node takes requests from its host's rings: once it reaches a
    /// quorum of nodes after starting, or `write_timeout` after starting without one.
    pub(super) serving: bool,
    /// Where the walk for committed writes whose own fragment this node (a holder of
    /// them, as their writer) failed to store resumes; None: nothing to look for.
    pub(super) own_resync: Option<u64>,
}

impl<F: Fabric> std::fmt::Debug for Node<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node").field("id", &self.me).field("incarnation", &self.incarnation).finish()
    }
}

/// Bytes of the files one node of `config` keeps (its store, a log per writer, its
/// outcome table; in sequencer mode its fate ring, change feed and stamp ledger), all
/// allocated when they are created: what a node's data folder needs free.
pub fn files_bytes(config: &ClusterConfig) -> Result<u64, Error> {
    let (k, m) = (config.k, config.m);
    let stripe_max =
        StripeLayout::new(k, m, config.value_bytes_max + crate::seal::FRAME_OVERHEAD).map_err(Error::Stripe)?;
    let store = store_geometry(config)?;
    let payload_max = ((crate::stripe::HEADER_LEN + stripe_max.fragment_len()) as u32).max(NOTICE_PAYLOAD_BYTES as u32);
    let log =
        crate::cluster::format::log::LogGeometry::new(config.log_slots as u32, payload_max).map_err(Error::Log)?;
    let outcomes =
        HEADER_PAGE_BYTES as u64 + config.outcome_entries as u64 * crate::cluster::format::outcome::ENTRY_LEN as u64;
    let sequencing = match config.ordering.sequencer() {
        None => 0,
        Some(_) => {
            let fates = config.fate_entries as u32;
            FateRing::file_bytes(fates)
                + FeedLog::file_bytes(config.feed_entries as u32)
                + Ledger::file_bytes(config.nodes.len(), fates)
        }
    };
    Ok(store.file_bytes() + (config.nodes.len() as u64 - 1) * log.file_bytes() + outcomes + sequencing)
}

/// Most fragment bytes a store record of a node of `config` holds: one fragment of the
/// largest value.
fn store_payload_max(config: &ClusterConfig) -> Result<u32, Error> {
    let stripe_max = StripeLayout::new(config.k, config.m, config.value_bytes_max + crate::seal::FRAME_OVERHEAD)
        .map_err(Error::Stripe)?;
    Ok(stripe_max.fragment_len() as u32)
}

/// The fragment store of a node of `config`: as many sets as fit in `store_bytes`, each
/// record holding one fragment of the largest value.
pub fn store_geometry(config: &ClusterConfig) -> Result<StoreGeometry, Error> {
    StoreGeometry::for_bytes(config.store_bytes as u64, STORE_WAYS, store_payload_max(config)?)
        .map_err(|e| Error::Store(e.into()))
}

/// `store_bytes` for a node of `config` (its k, m and value_bytes_max) to hold `keys`
/// keys at half load (at least [`crate::limits::STORE_BYTES_MIN`]).
pub fn store_bytes_for_keys(config: &ClusterConfig, keys: u64) -> Result<usize, Error> {
    let one = StoreGeometry::new(1, STORE_WAYS, store_payload_max(config)?).map_err(|e| Error::Store(e.into()))?;
    let sets = (keys * STORE_RECORDS_PER_KEY).div_ceil(u64::from(one.ways())).max(1);
    let bytes = HEADER_PAGE_BYTES as u64 + sets * one.set_bytes() as u64;
    Ok((bytes as usize).clamp(crate::limits::STORE_BYTES_MIN, crate::limits::STORE_BYTES_LIMIT))
}

impl<F: Fabric> Node<F> {
    /// Starts node `setup.id`: maps the host region, opens (or creates) its logs, store
    /// and outcome table under its data folder, replays what a crash left unapplied,
    /// registers everything with the fabric and creates a queue pair per peer.
    pub fn start(setup: NodeSetup<F>) -> Result<Self, Error> {
        let NodeSetup { config, id: me, fabric, region: region_path, pin, host_timeout, mailbox, now } = setup;
        let node_cfg = config.node(u32::from(me)).map_err(Error::Config)?.clone();
        let n = config.nodes.len();
        let (k, m) = (config.k, config.m);
        let data_dir = node_cfg.data_dir.clone();
        std::fs::create_dir_all(&data_dir).map_err(|source| Error::Io {
            what: "create the data folder",
            path: data_dir.clone(),
            source,
        })?;
        let incarnation = bump_epoch(&data_dir.join("incarnation")).map_err(Error::Seal)?;

        let mut metrics = Metrics::default();
        let mut host = RegionServer::attach(&region_path, pin, host_timeout, &mut metrics)?;
        // Every check at the door: a PUT above the cluster's value limit is refused
        // when taken, not failed after sealing.
        host.limit_put_values_to(u32::try_from(config.value_bytes_max).unwrap_or(u32::MAX));
        let region = Arc::clone(host.region());
        let rc = region.layout().config;
        let value_max = config.value_bytes_max;
        let frame_max = value_max + crate::seal::FRAME_OVERHEAD;
        let stripe_max = StripeLayout::new(k, m, frame_max).map_err(Error::Stripe)?;
        let buffer_value_room = rc.buffer_bytes as usize - prescient_shim::config::VALUE_OFFSET;
        if stripe_max.data_len() > buffer_value_room || stripe_max.side_len() > rc.buffer_bytes as usize {
            return Err(Error::Region {
                path: region_path,
                why: format!(
                    "its {}-byte buffers cannot carry a {value_max}-byte value striped RS({k}, {m}) in place \
                     ({} bytes of data fragments, {} of headers and parity): create the region with \
                     buffer_bytes >= {} or lower value_bytes_max",
                    rc.buffer_bytes,
                    stripe_max.data_len(),
                    stripe_max.side_len(),
                    (stripe_max.data_len() + prescient_shim::config::VALUE_OFFSET).max(stripe_max.side_len()),
                ),
            });
        }
        if rc.dpu_buffers < 2 {
            return Err(Error::Region {
                path: region_path,
                why: format!(
                    "it has {} DPU buffers; a cluster node needs one per write in flight: create it with dpu_buffers >= {WRITES_MAX}",
                    rc.dpu_buffers
                ),
            });
        }
        let writes_max = (rc.dpu_buffers).min(WRITES_MAX);
        region.u32_at(header::CLUSTER_NODE).store(u32::from(me) + 1, std::sync::atomic::Ordering::Release);
        region.u64_at(header::DIRECTORY_LEASE_UNTIL_NS).store(0, std::sync::atomic::Ordering::Release);

        let peers_n = n - 1;
        let send_depth = (crate::limits::CQ_DEPTH_MAX / peers_n.max(1)).min(crate::limits::SEND_DEPTH_MAX);
        let recv_depth = (crate::limits::CQ_DEPTH_MAX / peers_n.max(1)).min(crate::limits::RECV_DEPTH_MAX);
        // A lost message is retransmitted well within `dead_after`, so one loss never
        // looks like a dead peer (hardware rounds the timeout up to 4.096 us * 2^n).
        let timeout_us = match config.transport_timeout_us {
            0 => (config.dead_after_us / 8).clamp(50, 4_000),
            set => set.min(u64::from(u32::MAX)),
        } as u32;
        let qp_options = QpOptions {
            send_depth,
            recv_depth,
            timeout_us,
            rnr_timer_us: (timeout_us / 2).max(20),
            retry_count: config.retry_count,
            rnr_retry_count: config.rnr_retry_count,
        };
        let fab = |e| Error::Fabric(e);
        let send_cq = fabric.create_cq(crate::limits::CQ_DEPTH_MAX).map_err(fab)?;
        let recv_cq = fabric.create_cq(crate::limits::CQ_DEPTH_MAX).map_err(fab)?;

        // What each region lets the NIC do, and no more: the arena is only ever the source
        // of fragment WRITEs (values are sealed, striped and rebuilt in it by the CPU); peers
        // CAS the directory's slot words (remote atomics need local write), READ the store
        // and the control block, and WRITE the logs.
        let arena_mr =
            fabric.register(Arc::new(super::host_memory::arena(&region).map_err(fab)?), Access::NONE).map_err(fab)?;
        let directory_mr = match super::host_memory::directory(&region).map_err(fab)? {
            Some(mem) => {
                Some(fabric.register(Arc::new(mem), Access::LOCAL_WRITE | Access::REMOTE_ATOMIC).map_err(fab)?)
            }
            None => None,
        };
        // File-backed: a claimant's CAS into the leader word outlives a crash before this
        // node notices it (`format/control.rs`).
        let (control, carried) =
            ControlBlock::open(&*fabric, me, incarnation, &data_dir.join("control.prctl")).map_err(Error::Control)?;

        let payload_max = (crate::stripe::HEADER_LEN + stripe_max.fragment_len()) as u32;
        let geometry = store_geometry(&config)?;
        let store = Store::open(&data_dir.join("store.prstore"), me, geometry).map_err(Error::Store)?;
        let store_mr = fabric.register(Arc::clone(store.memory()), Access::REMOTE_READ).map_err(fab)?;
        let mut logs = Vec::with_capacity(n);
        for w in 0..n as u8 {
            if w == me {
                logs.push(None);
                continue;
            }
            let log = FragmentLog::open(
                &data_dir.join(format!("log-from-{w}.prlog")),
                w,
                me,
                config.log_slots as u32,
                payload_max.max(NOTICE_PAYLOAD_BYTES as u32),
            )
            .map_err(Error::Log)?;
            let mr =
                fabric.register(Arc::clone(log.memory()), Access::LOCAL_WRITE | Access::REMOTE_WRITE).map_err(fab)?;
            logs.push(Some((log, mr)));
        }
        let mut outcomes = OutcomeTable::open(&data_dir.join("outcomes.prout"), me, config.outcome_entries as u32)
            .map_err(Error::Outcome)?;
        if config.ordering.sequencer().is_some() {
            outcomes.keep_rollbacks(config.quorum as u32);
        }
        let next_write_seq = outcomes.next_write_seq();

        let sealer = Sealer::start(&config.key_dir, &data_dir.join("key-epoch"), u16::from(me)).map_err(Error::Seal)?;
        let rs = ReedSolomon::new(k, m).map_err(Error::Stripe)?;
        let predictor = match &config.model {
            Some(path) => {
                let model = Model::load(path).map_err(|e| Error::Model { path: path.clone(), source: e })?;
                Some(Predictor::from_model(model).map_err(|e| Error::Model { path: path.clone(), source: e })?)
            }
            None if config.predictive => Some(
                Predictor::new(prescient_models::ModelConfig::default())
                    .map_err(|e| Error::Model { path: PathBuf::from("(online)"), source: e })?,
            ),
            None => None,
        };
        // One tuning setting for every node and trace (`TuningConfig::default`).
        let predictor = match predictor {
            Some(p) if config.tunes_leases() => {
                let path = config.model.clone().unwrap_or_else(|| PathBuf::from("(online)"));
                Some(p.tuned(TuningConfig::default()).map_err(|e| Error::Model { path, source: e })?)
            }
            p => p,
        };
        let hlc_floor = HlcFloor::open(&data_dir.join("hlc-floor")).map_err(Error::Hlc)?;
        let hlc = Hlc::new(me, hlc_floor.floor().max(now.wall_us));
        // Sequencer mode: what this node accepted and rolled back of every writer's
        // stamped writes, for the holders' rule on a writer gone for good.
        let ledger = match config.ordering.sequencer() {
            None => None,
            Some(_) => Some(
                Ledger::open(&*fabric, &data_dir.join("ledger.prledger"), me, n, config.fate_entries as u32)
                    .map_err(Error::Ledger)?,
            ),
        };
        let sequencer = match config.ordering.sequencer() {
            None => None,
            Some(s) => {
                let file = HlcFloor::open(&data_dir.join("leader-word")).map_err(Error::Hlc)?;
                let fates = FateRing::open(&*fabric, &data_dir.join("fates.prfate"), me, config.fate_entries as u32)
                    .map_err(Error::Fates)?;
                let seq =
                    Sequencer::new(me, n, s, config.dead_after_us, config.heartbeat_us, file, fates, &control, now)
                        .map_err(Error::Hlc)?;
                if carried.counter != 0 {
                    let was = crate::cluster::sequence::LeaderWord::unpack(carried.leader);
                    tracing::info!(node = me, leader = %was, counter = carried.counter, "the last run left its sequencer counter here; it starts from 0 (a new claim starts above it)");
                }
                Some(seq)
            }
        };
        // Sequencer mode: the ordered apply and its change feed, resuming where the last
        // run stopped.
        let applier = match &sequencer {
            None => None,
            Some(s) => {
                let mut feed = FeedLog::open(&data_dir.join("feed.prfeed"), me, config.feed_entries as u32)
                    .map_err(Error::Feed)?;
                // Peers that fell behind copy from it.
                feed.register(&*fabric).map_err(Error::Feed)?;
                // The ledgers are asked once an order has stood a failure-detection bound.
                let rule_after_ns = config.dead_after_us * 1_000;
                let ledgers =
                    Ledgers::new(me, n, config.quorum as u32, config.k + config.m, config.placement(), rule_after_ns);
                let reread_ns = config.heartbeat_us * 1_000;
                let applier = Applier::new(me, n, s.fates(), feed, reread_ns, ledgers, now);
                Some(applier.map_err(Error::Order)?)
            }
        };

        let gets_max = GETS_MAX;
        let jobs_max = (writes_max as usize + LEASES_MAX) * n * 2;
        let pools = Pools {
            // Sources of entry-header WRITEs only.
            header: Pool::new(&*fabric, writes_max * (k + m) as u32 + REPAIRS_MAX, FRAGMENT_HEAD_BYTES, Access::NONE)
                .map_err(fab)?,
            // CAS results and heartbeat READs land here.
            cas: Pool::new(&*fabric, 2 * jobs_max as u32, 8, Access::LOCAL_WRITE).map_err(fab)?,
            control: Pool::new(&*fabric, n as u32, CONTROL_BYTES, Access::LOCAL_WRITE).map_err(fab)?,
            // The empty buffer of every receive (which needs local write) and acknowledgement.
            zero: Pool::new(&*fabric, 1, 8, Access::LOCAL_WRITE).map_err(fab)?,
            // Per GET or repair and peer, a home set (the pool's first half) and a spill set
            // (its second half).
            sets: Pool::new(&*fabric, 2 * (gets_max + REPAIRS_MAX) * n as u32, store.set_bytes(), Access::LOCAL_WRITE)
                .map_err(fab)?,
            // Sources of outcome-notice WRITEs only.
            notices: Pool::new(&*fabric, NOTICES_MAX * n as u32, ENTRY_HEADER_LEN + NOTICE_PAYLOAD_BYTES, Access::NONE)
                .map_err(fab)?,
            // The stamp FETCH_ADD's and the claim CASes' results.
            seq: Pool::new(&*fabric, super::sequencer::POOL_WORDS, 8, Access::LOCAL_WRITE).map_err(fab)?,
            // A chunk of a peer's fate ring, or of its stamp ledger, per peer (sequencer
            // mode; one slot otherwise).
            fates: Pool::new(
                &*fabric,
                if sequencer.is_some() { n as u32 } else { 1 },
                (FATE_READ_ENTRIES as usize * FATE_ENTRY_BYTES).max(LEDGER_SCAN_ENTRIES as usize * LEDGER_ENTRY_BYTES),
                Access::LOCAL_WRITE,
            )
            .map_err(fab)?,
        };
        let mut peers = Vec::with_capacity(n);
        for j in 0..n as u8 {
            if j == me {
                peers.push(None);
                continue;
            }
            let qp = fabric.create_qp(&send_cq, &recv_cq, qp_options).map_err(fab)?;
            peers.push(Some(Peer::new(j, Conn::Reset(qp), crate::cluster::format::control::first_epoch(incarnation))));
        }
        let side_free = (0..writes_max).map(|i| rc.host_buffers + i).rev().collect();
        let directory_slots = rc.directory_slots;
        // Every log has this geometry; a one-node cluster has none, and a buffer anyway.
        let entry_buf = EntryBuf::new(
            crate::cluster::format::log::LogGeometry::new(
                config.log_slots as u32,
                payload_max.max(NOTICE_PAYLOAD_BYTES as u32),
            )
            .map_err(Error::Log)?,
        );
        let mut node = Self {
            me,
            n,
            placement: config.placement(),
            k,
            m,
            quorum: config.quorum as u32,
            policy: Policy { invalidation: config.invalidation, predictive: config.predictive },
            incarnation,
            write_timeout_ns: config.write_timeout_us * 1_000,
            sync_records: config.durability == crate::cluster::config::Durability::Sync,
            fabric,
            send_cq,
            recv_cq,
            host,
            region,
            arena_mr,
            directory_mr,
            directory_slots,
            control,
            store,
            store_mr,
            holder: Holder::new(logs, entry_buf, ledger),
            outcomes,
            links: {
                let links = Links::new(me, peers, qp_options, config.log_slots as u32 + 8, POLL_BATCH);
                match config.network.congestion {
                    Congestion::None => links,
                    Congestion::Swift => {
                        links.with_pacing(SwiftConfig::DATACENTER, |j| config.network.base_rtt_ns(me, j))
                    }
                }
            },
            membership: Membership::new(&config, mailbox, now),
            writer: Writer::new(writes_max, side_free, next_write_seq, n),
            jobs: Jobs::new(jobs_max as u32),
            reader: Reader::new(gets_max, n, geometry.set_bytes(), stripe_max.data_len()),
            leases: Leases::new(
                LEASES_MAX as u32,
                super::lease::lease_mark_max_ns(
                    (0..n as u8).map(|j| config.network.base_rtt_ns(me, j)).max().unwrap_or(0),
                ),
            ),
            // Its staging follows the reader's in the sets pool, the writer's in the header pool.
            repairer: Repairer::new(n, geometry.set_bytes(), gets_max, writes_max * (k + m) as u32),
            sealer,
            rs,
            crc_shift: crate::cluster::format::crc_combine::ShiftCache::default(),
            predictor,
            hlc,
            hlc_floor,
            sequencer,
            applier,
            pools,
            taken: Vec::with_capacity(prescient_shim::config::BATCH_MAX as usize),
            wc: Vec::with_capacity(POLL_BATCH),
            expired: Vec::with_capacity(64),
            noisy: LogLimits::default(),
            stats: NodeStats::new(n),
            metrics,
            started_ns: None,
            serving: false,
            // A previous incarnation may have committed writes whose own fragment it
            // could not store: look through the whole outcome table once.
            own_resync: (next_write_seq > 0)
                .then(|| next_write_seq.saturating_sub(u64::from(config.outcome_entries as u32))),
            config,
        };
        // A restarted node may have missed invalidations while it was down.
        node.revoke_directory();
        node.replay_logs();
        node.recover_outcomes(now);
        tracing::info!(node = me, incarnation, nodes = n, k, m, quorum = node.quorum, "node started");
        Ok(node)
    }

    /// Whether a log line about `why` may be written now: `Some(lines left out since
    /// the last one)`. The condition itself is counted by the caller.
    pub(super) fn admit_log(&mut self, why: Noisy) -> Option<u64> {
        self.noisy.admit(why as usize, prescient_shim::sys::monotonic_ns())
    }

    /// This node's id.
    pub fn id(&self) -> u8 {
        self.me
    }

    /// This node's incarnation (bumped at every start).
    pub fn incarnation(&self) -> u32 {
        self.incarnation
    }

    /// The host region.
    pub fn region(&self) -> &Arc<Region> {
        &self.region
    }

    /// Counters and histograms so far.
    pub fn stats(&self) -> &NodeStats {
        &self.stats
    }

    /// Congestion control toward each peer: its pacer's counts and window (none
    /// without congestion control).
    pub fn pacing(&self) -> impl Iterator<Item = (u8, super::pacer::PacerStats, f64)> + '_ {
        self.links.pacing()
    }

    /// How full this node's fragment store is, and its file's size.
    pub fn store_usage(&self) -> (crate::cluster::format::store::StoreUsage, u64) {
        (self.store.usage(), self.store.geometry().file_bytes())
    }

    /// The serving counters (completions by status, host deaths).
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// A readable summary: completions, per-stage latencies, predictor, invalidation
    /// timing, bytes moved per peer, faults seen.
    pub fn summary(&self) -> String {
        let bytes: Vec<(u8, u64, u64)> = self.links.iter().map(|p| (p.id, p.bytes_out, p.bytes_in)).collect();
        let mut s = self.stats.render(self.me, &bytes);
        if let Some(order) = self.order_summary() {
            s.push_str(&order);
        }
        s.push_str(&format!("  host: {}\n", self.metrics.summary().replace('\n', "\n  ")));
        s
    }

    /// Bytes moved with each peer this node has a link to: (peer, bytes out, bytes in),
    /// counting the log entries (fragments, outcome notices) this node wrote into the
    /// peer's log and the peer wrote into this node's; GET reads and directory CASes
    /// are not counted.
    pub fn bytes_moved(&self) -> impl Iterator<Item = (u8, u64, u64)> + '_ {
        self.links.iter().map(|p| (p.id, p.bytes_out, p.bytes_in))
    }

    /// Writes (held ones included) and GETs in flight.
    pub fn in_flight(&self) -> usize {
        self.writer.in_flight() + self.reader.in_flight()
    }

    /// Writes in this node's outcome table that are not settled yet (undecided, or
    /// decided but some holder that stored a fragment has not persisted the decision).
    /// Each must drain: a table full of them refuses new writes `Overloaded`. Scans the
    /// whole table: for tests and summaries, not the data path.
    pub fn unsettled_writes(&self) -> usize {
        self.outcomes.unsettled(|_| {}).unwrap_or(0)
    }

    /// Entries this node wrote into `peer`'s log that the peer has not acknowledged
    /// (never more than the log's slots: the credits).
    pub fn log_outstanding(&self, peer: u8) -> usize {
        self.links.peer(peer).map_or(0, |p| p.sent.len())
    }

    /// Whether the host has published requests this node has not taken (one shared
    /// read per queue pair, no clock): a serving loop checks it before it sleeps.
    pub fn has_host_work(&self) -> bool {
        self.host.has_work()
    }

    /// The host region's door: descriptors refused, queue pairs fenced.
    pub fn door(&self) -> &crate::door::Door {
        self.host.door()
    }

    /// Whether node `peer` is connected and answering.
    pub fn peer_up(&self, peer: u8) -> bool {
        self.links.peer(peer).is_some_and(Peer::is_up)
    }

    /// One round of work at `now`; returns whether anything happened (the caller may
    /// back off when nothing did).
    pub fn poll(&mut self, now: Now) -> bool {
        self.started_ns.get_or_insert(now.mono_ns);
        self.links.pump(now.mono_ns);
        let mut busy = self.poll_completions(now);
        busy |= self.poll_mailbox(now);
        if self.sequencer.is_some() {
            busy |= self.poll_sequencer(now);
            busy |= self.poll_apply(now);
        }
        busy |= self.take_requests(now);
        busy |= self.advance_writes(now);
        if self.writer.has_held() {
            busy |= self.start_held(now);
        }
        if self.sequencer.is_some() {
            busy |= self.fetch_wanted_stamps(now);
        }
        busy |= self.advance_gets(now);
        busy |= self.advance_repairs(now);
        busy |= self.run_timers(now);
        busy |= self.flush_notices(now);
        // What completions opened each window for, posted in this poll.
        self.links.pump(now.mono_ns);
        self.host.flush();
        busy
    }

    /// Drops the node as a crash would (no cleanup) and hands back its mailbox, the
    /// network endpoint a restarted node takes over.
    pub fn into_mailbox(self) -> Box<dyn Mailbox> {
        self.membership.into_mailbox()
    }

    /// Detaches from the host region cleanly (its successor need not wait out the
    /// heartbeat) and says so in the header.
    pub fn detach(&self) {
        self.region.u64_at(header::DIRECTORY_LEASE_UNTIL_NS).store(0, std::sync::atomic::Ordering::Release);
        self.region.u32_at(header::CLUSTER_PEERS_UP).store(0, std::sync::atomic::Ordering::Release);
        self.host.detach();
    }

    // ---- completion routing ----------------------------------------------------------

    fn poll_completions(&mut self, now: Now) -> bool {
        let mut any = false;
        let mut wc = std::mem::take(&mut self.wc);
        for _ in 0..POLL_ROUNDS_MAX {
            wc.clear();
            let deferred = self.links.take_deferred(&mut wc);
            let room = POLL_BATCH.saturating_sub(wc.len());
            let sends = self.send_cq.poll(&mut wc, room).unwrap_or_else(|e| {
                tracing::error!(node = self.me, error = %e, "send completion queue failed");
                0
            });
            let room = POLL_BATCH.saturating_sub(wc.len());
            let recvs = self.recv_cq.poll(&mut wc, room).unwrap_or_else(|e| {
                tracing::error!(node = self.me, error = %e, "receive completion queue failed");
                0
            });
            if wc.is_empty() {
                break;
            }
            any = true;
            for (i, c) in wc.drain(..).enumerate() {
                self.on_completion(c, i >= deferred, now);
            }
            if sends + recvs < POLL_BATCH / 2 {
                break;
            }
        }
        self.wc = wc;
        any
    }

    /// Routes completion `c` to its owner; `posted`: it came from a queue pair (not a
    /// request [`Links`] failed before posting).
    fn on_completion(&mut self, c: Completion, posted: bool, now: Now) {
        let Some(id) = WrId::decode(c.wr_id) else {
            tracing::error!(node = self.me, wr_id = c.wr_id, "completion of a request this node never posted");
            return;
        };
        if posted {
            self.links.completed(id.peer, id, c.status, c.path, now.mono_ns);
        }
        let ok = c.status == WcStatus::Success;
        if id.kind == Kind::Recv && self.links.peer(id.peer).is_none_or(|p| p.conn_gen & WR_INDEX_MAX != id.a) {
            // A receive of an earlier connection to this peer, flushed when that one
            // broke: nothing of the current link.
            return;
        }
        if let Some(p) = self.links.peer_mut(id.peer) {
            if c.opcode == WcOpcode::Recv || c.opcode == WcOpcode::RecvWithImm || id.kind == Kind::Recv {
                p.recvs = p.recvs.saturating_sub(1);
            } else {
                p.sends = p.sends.saturating_sub(1);
            }
        }
        if !ok {
            self.link_failed(id.peer, c.status, now);
        }
        match id.kind {
            Kind::Recv => {
                if ok {
                    // The peer sent on this connection: its queue pair is up.
                    if let Some(p) = self.links.peer_mut(id.peer) {
                        p.awaiting_ready = None;
                    }
                    self.repost_receive(id.peer);
                    match c.imm {
                        Some(imm) => self.on_immediate(id.peer, imm, now),
                        None => tracing::warn!(node = self.me, peer = id.peer, "receive without an immediate"),
                    }
                }
            }
            Kind::FragmentBytes | Kind::FragmentHeader => self.on_fragment_sent(id, ok, now),
            Kind::Cas => self.on_cas_completion(id, ok, now),
            Kind::Notice => self.on_notice_sent(id, ok),
            Kind::Ack => {}
            Kind::Heartbeat => self.on_heartbeat(id.peer, ok, now),
            Kind::GetRead => self.on_get_read(id, ok, false),
            Kind::GetSpillRead => self.on_get_read(id, ok, true),
            Kind::RepairRead => self.on_repair_read(id, ok, false),
            Kind::RepairSpillRead => self.on_repair_read(id, ok, true),
            Kind::RepairWrite => self.on_repair_write(id, ok),
            Kind::StampFetch => self.on_stamp_fetch(id.a, ok, now),
            Kind::LeaderCas => self.on_leader_cas(id.peer, id.a, ok, now),
            Kind::FateRead => self.on_fate_read(id.peer, id.a, ok, now),
        }
    }

    pub(super) fn zero_buf(&self) -> LocalBuf {
        self.pools.zero.buf(0, 0)
    }

    fn repost_receive(&mut self, peer: u8) {
        let buf = self.zero_buf();
        let Some(p) = self.links.peer_mut(peer) else { return };
        let Some(qp) = p.conn.ready() else { return };
        match qp.post_recv(WrId::new(Kind::Recv, peer, p.conn_gen & WR_INDEX_MAX, 0).encode(), buf) {
            Ok(()) => p.recvs += 1,
            Err(e) => tracing::debug!(peer, error = %e.error, "receive not reposted"),
        }
    }

    /// An immediate from `peer`: an entry it wrote into our log (we hold its
    /// fragments), or an acknowledgement of one we wrote into its log.
    fn on_immediate(&mut self, peer: u8, imm: u32, now: Now) {
        if imm & super::ack::ACK_FLAG != 0 {
            self.on_ack(peer, imm, now);
        } else {
            self.on_entry(peer, imm, now);
        }
    }
}
