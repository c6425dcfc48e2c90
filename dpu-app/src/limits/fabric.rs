//! Every limit of the fabric in one place, with the relations between them checked at
//! compile time. Queues, tables and messages are sized from these at start-up; nothing on
//! the data path grows past them.

/// Most work requests one queue pair may have outstanding on its send queue.
pub const SEND_DEPTH_MAX: usize = 1024;
/// Most receives one queue pair may have posted.
pub const RECV_DEPTH_MAX: usize = 1024;
/// Most completions one completion queue holds.
pub const CQ_DEPTH_MAX: usize = 16 * 1024;
/// Largest single message (WRITE, READ, SEND) in bytes.
pub const MESSAGE_BYTES_MAX: usize = 4 * 1024 * 1024;
/// Largest memory region one registration may cover (1 TiB: file-backed logs are large).
pub const REGION_BYTES_MAX: u64 = 1 << 40;
/// Most memory regions one emulated node may have registered at once.
pub const REGIONS_PER_NODE_MAX: usize = 4096;
/// Regions of its peer one emulated queue pair keeps resolved (a cluster peer exposes
/// four: log, control, directory, store).
pub const REGION_CACHE_ENTRIES: usize = 8;
/// Most queue pairs one emulated node may have at once.
pub const QPS_PER_NODE_MAX: usize = 4096;
/// Most nodes in one in-process emulated network.
pub const NODES_PER_NETWORK_MAX: usize = 1024;
/// Most queue pairs that may share one completion queue.
pub const QPS_PER_CQ_MAX: usize = 256;
/// Most transport retries a queue pair may be configured with (the IB field is 3 bits).
pub const RETRY_COUNT_MAX: u8 = 7;
/// Most receiver-not-ready retries (7 means "infinite" on IB hardware; we stop at 6).
pub const RNR_RETRY_COUNT_MAX: u8 = 6;
/// Spins (pause hints) of a contender for an emulated queue's lock before it yields.
pub const SPIN_LOCK_SPINS: u32 = 64;
/// Yields of a contender for an emulated queue's lock before it backs off in sleeps.
pub const SPIN_LOCK_YIELDS: u32 = 256;
/// One back-off sleep of a contender whose lock's holder takes long, microseconds.
pub const SPIN_LOCK_BACKOFF_US: u64 = 20;
/// Spins of a blocking completion wait before it parks the thread.
pub const WAIT_SPINS: u32 = 2_000;
/// Size of the atomic operand: RDMA atomics work on one aligned 64-bit word.
pub const ATOMIC_BYTES: usize = 8;
/// Most partition windows one emulation model may schedule.
pub const PARTITION_WINDOWS_MAX: usize = 64;

const _: () = assert!(SEND_DEPTH_MAX + RECV_DEPTH_MAX <= CQ_DEPTH_MAX);
const _: () = assert!(SEND_DEPTH_MAX <= u16::MAX as usize && RECV_DEPTH_MAX <= u16::MAX as usize);
const _: () = assert!(MESSAGE_BYTES_MAX <= u32::MAX as usize);
const _: () = assert!((MESSAGE_BYTES_MAX as u64) <= REGION_BYTES_MAX);
const _: () = assert!(RNR_RETRY_COUNT_MAX < 7 && RETRY_COUNT_MAX <= 7);
const _: () = assert!(REGIONS_PER_NODE_MAX <= 1 << 16 && QPS_PER_NODE_MAX <= 1 << 16);
const _: () = assert!(REGION_CACHE_ENTRIES > 0 && REGION_CACHE_ENTRIES <= REGIONS_PER_NODE_MAX);
// Atomic words are interpreted in the responder's byte order; the wire says little-endian.
const _: () = assert!(cfg!(target_endian = "little"));

/// Most regions (sites) one emulation model may place nodes in.
pub const NETWORK_REGIONS_MAX: usize = 16;
/// Most nodes one emulation model's topology may place in regions (and so the most
/// switch ports it models).
pub const NETWORK_NODES_MAX: usize = 256;
/// Smallest bandwidth of a modelled switch port, bytes per second (1 Mbit/s): below it a
/// single 4 MiB message would hold a port for over half a minute.
pub const PORT_BYTES_PER_S_MIN: u64 = 125_000;
/// Smallest egress buffer of a modelled switch port: one jumbo frame. A message larger
/// than the buffer is let in only when the queue is empty (a NIC sends it as frames the
/// port drains as they come), so a pause always ends.
pub const PORT_BUFFER_BYTES_MIN: u64 = 9_216;
/// Most switch hops a path is counted as (Swift's target delay grows per hop).
pub const PATH_HOPS_MAX: u8 = 8;

const _: () = assert!(NETWORK_NODES_MAX <= NODES_PER_NETWORK_MAX);
const _: () = assert!(NETWORK_REGIONS_MAX <= u8::MAX as usize && NETWORK_REGIONS_MAX <= NETWORK_NODES_MAX);
