//! The byte layout of a shared region, computed the same way by both sides.
//!
//! ```text
//! 0                 header (4 KiB): identity, sizes, section offsets, and one
//!                   128-byte line per word that only one side writes (host line,
//!                   DPU line, DPU wake line, and the DPU's cluster line: the
//!                   directory lease and this region's cluster node)
//! qp_offset         queue pairs: per pair four index lines, a state line, the
//!                   submission entries and the completion entries
//! state_offset      one u32 ownership word per arena buffer
//! arena_offset      the arena: host buffers, then DPU scratch buffers (page aligned)
//! directory_offset  cache directory: one u64 slot word per slot
//! ```
//!
//! Version 2 added the cluster line at [`header::CLUSTER_LINE`], which only the DPU app
//! writes: `DIRECTORY_LEASE_UNTIL_NS` (`u64`, `CLOCK_MONOTONIC` nanoseconds until which
//! the host may trust its cache directory; 0: never) and `CLUSTER_NODE` (`u32`, this
//! region's cluster node id + 1; 0: not in a cluster). A fresh region has both at 0:
//! no lease, no cluster. Version 2 also fixed the directory's key identity and slot
//! choice ([`crate::directory::key_id`], [`crate::directory::slot_of`]).
//!
//! Version 3 changed the completion entry ([`crate::completion`]): one entry completes
//! a run of consecutive requests with one outcome (`count`), and carries no
//! `user_data` (the host keeps its own).
//!
//! The layout is a pure function of [`RegionConfig`]; an attaching side recomputes it
//! from the sizes in the header and refuses a header whose offsets disagree, so a
//! corrupt or hostile header can never point outside the mapping.

use crate::config::*;
use crate::error::ShimError;

/// Magic at offset 0 of every region: `PRESCNT` and a NUL.
pub const MAGIC: u64 = u64::from_le_bytes(*b"PRESCNT\0");
/// Version of this layout. Both sides refuse any other. 4: a write descriptor's `sla`
/// and `wait_us` must be 0, a GET's `wait_us` is its read SLA's wait; the host line
/// carries the host's pid space.
pub const LAYOUT_VERSION: u32 = 4;
/// Feature bits this build understands (none yet).
pub const FEATURES_KNOWN: u64 = 0;

/// Offsets of header fields (bytes from the region start).
pub mod header {
    /// `u64` magic.
    pub const MAGIC: usize = 0;
    /// `u32` layout version.
    pub const LAYOUT_VERSION: usize = 8;
    /// `u32` header bytes.
    pub const HEADER_BYTES: usize = 12;
    /// `u64` feature bits.
    pub const FEATURES: usize = 16;
    /// `u32` queue pairs.
    pub const QUEUE_PAIRS: usize = 24;
    /// `u32` entries per ring.
    pub const RING_ENTRIES: usize = 28;
    /// `u32` host buffers.
    pub const HOST_BUFFERS: usize = 32;
    /// `u32` DPU scratch buffers.
    pub const DPU_BUFFERS: usize = 36;
    /// `u32` bytes per buffer.
    pub const BUFFER_BYTES: usize = 40;
    /// `u32` cache-directory slots.
    pub const DIRECTORY_SLOTS: usize = 44;
    /// `u64` total region bytes.
    pub const REGION_BYTES: usize = 48;
    /// `u64` offset of the queue pairs.
    pub const QP_OFFSET: usize = 56;
    /// `u64` offset of the buffer ownership words.
    pub const STATE_OFFSET: usize = 64;
    /// `u64` offset of the arena.
    pub const ARENA_OFFSET: usize = 72;
    /// `u64` offset of the cache directory.
    pub const DIRECTORY_OFFSET: usize = 80;
    /// Bytes of the immutable part above, all written once at creation.
    pub const FIXED_END: usize = 88;

    /// Host-written line: `u64` heartbeat counter, `u32` pid, `u32` generation
    /// (bumped by every host that attaches), `u64` pid space (layout version 4).
    pub const HOST_LINE: usize = 128;
    /// `u64` host heartbeat.
    pub const HOST_HEARTBEAT: usize = HOST_LINE;
    /// `u32` host pid.
    pub const HOST_PID: usize = HOST_LINE + 8;
    /// `u32` host generation.
    pub const HOST_GENERATION: usize = HOST_LINE + 12;
    /// `u64` the host's [`crate::liveness::pid_space`]: the DPU app checks the host's
    /// pid only if its own is the same (0: unknown, never checked).
    pub const HOST_PID_SPACE: usize = HOST_LINE + 16;

    /// DPU-written line: `u64` heartbeat, `u32` pid, `u32` epoch (bumped by every
    /// DPU app that attaches), `u32` host generation the DPU serves.
    pub const DPU_LINE: usize = 256;
    /// `u64` DPU heartbeat.
    pub const DPU_HEARTBEAT: usize = DPU_LINE;
    /// `u32` DPU pid (0: none attached).
    pub const DPU_PID: usize = DPU_LINE + 8;
    /// `u32` DPU epoch.
    pub const DPU_EPOCH: usize = DPU_LINE + 12;
    /// `u32` the host generation the DPU app has taken over.
    pub const DPU_SERVED_GENERATION: usize = DPU_LINE + 16;

    /// Futex line the DPU app sleeps on: `u32` doorbell (hosts bump it), `u32`
    /// sleeping flag (the DPU app sets it before sleeping).
    pub const DPU_WAKE_LINE: usize = 384;
    /// `u32` DPU doorbell (futex word).
    pub const DPU_DOORBELL: usize = DPU_WAKE_LINE;
    /// `u32` DPU sleeping flag.
    pub const DPU_SLEEPING: usize = DPU_WAKE_LINE + 4;

    /// DPU-written cluster line (layout version 2): the directory lease and this
    /// region's node in the cluster. Hosts only read it.
    pub const CLUSTER_LINE: usize = 512;
    /// `u64` `CLOCK_MONOTONIC` nanoseconds (see [`crate::sys::monotonic_ns`]) until
    /// which the cache directory may be trusted; 0: never. The DPU app extends it
    /// while it keeps the directory up to date, and revokes the directory before it
    /// extends a lease that lapsed.
    pub const DIRECTORY_LEASE_UNTIL_NS: usize = CLUSTER_LINE;
    /// `u32` this region's cluster node id + 1; 0: not in a cluster.
    pub const CLUSTER_NODE: usize = CLUSTER_LINE + 8;
    /// `u32` bit mask of the cluster nodes this DPU app reaches now (its own bit
    /// included): for operators, and hosts that want to know their node is connected.
    pub const CLUSTER_PEERS_UP: usize = CLUSTER_LINE + 12;

    const _: () = assert!(DPU_WAKE_LINE + crate::config::LINE_BYTES <= CLUSTER_LINE);
    const _: () = assert!(CLUSTER_LINE + crate::config::LINE_BYTES <= crate::config::HEADER_BYTES);
    const _: () = assert!(DIRECTORY_LEASE_UNTIL_NS % 8 == 0 && CLUSTER_NODE % 4 == 0 && CLUSTER_PEERS_UP % 4 == 0);
}

/// Offsets inside one queue pair's block.
pub mod qp {
    use crate::config::LINE_BYTES;
    /// `u32` submission tail: host writes.
    pub const SQ_TAIL: usize = 0;
    /// `u32` submission head: DPU writes; slots before it are free for the host.
    pub const SQ_HEAD: usize = LINE_BYTES;
    /// `u32` completion tail: DPU writes.
    pub const CQ_TAIL: usize = 2 * LINE_BYTES;
    /// `u32` completion head: host writes.
    pub const CQ_HEAD: usize = 3 * LINE_BYTES;
    /// Host wake line: `u32` futex doorbell (the DPU bumps it), `u32` waiting flag
    /// (the host sets it before sleeping).
    pub const CQ_DOORBELL: usize = 4 * LINE_BYTES;
    /// `u32` host waiting flag.
    pub const HOST_WAITING: usize = 4 * LINE_BYTES + 4;
    /// DPU journal line: `u32` taken index (descriptors taken into flight),
    /// written every batch and read by the host never, so it has its own line.
    pub const SQ_TAKEN: usize = 5 * LINE_BYTES;
    /// DPU fence line, which the host reads on every submission: `u32` fence reason
    /// (0: serving; see `FenceReason`), `u64` fence detail (the offending index).
    pub const FENCE_REASON: usize = 6 * LINE_BYTES;
    /// `u64` fence detail (e.g. the offending index).
    pub const FENCE_DETAIL: usize = 6 * LINE_BYTES + 8;
    /// Bytes of the index and state lines before the entries.
    pub const ENTRIES: usize = 7 * LINE_BYTES;
}

/// Sizes of a region, chosen by the host at creation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RegionConfig {
    /// Queue pairs, one per KV-store thread.
    pub queue_pairs: u32,
    /// Entries per submission ring and per completion ring (a power of two).
    pub ring_entries: u32,
    /// Arena buffers the host fills.
    pub host_buffers: u32,
    /// Arena buffers reserved for the DPU app (parity fragments, GET results).
    pub dpu_buffers: u32,
    /// Bytes per arena buffer (a multiple of 64).
    pub buffer_bytes: u32,
    /// Cache-directory slots.
    pub directory_slots: u32,
}

impl Default for RegionConfig {
    fn default() -> Self {
        Self {
            queue_pairs: 4,
            ring_entries: 256,
            host_buffers: 1024,
            dpu_buffers: 256,
            buffer_bytes: 8192,
            directory_slots: 65_536,
        }
    }
}

/// Byte offsets of every section, derived from a [`RegionConfig`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// The sizes this layout was computed from.
    pub config: RegionConfig,
    /// Offset of queue pair 0.
    pub qp_offset: usize,
    /// Bytes from one queue pair to the next.
    pub qp_stride: usize,
    /// Offset of the ownership words.
    pub state_offset: usize,
    /// Offset of the arena.
    pub arena_offset: usize,
    /// Offset of the cache directory.
    pub directory_offset: usize,
    /// Total bytes.
    pub region_bytes: usize,
}

const PAGE_BYTES: usize = 4096;

fn align_up(value: usize, to: usize) -> usize {
    value.div_ceil(to) * to
}

impl Layout {
    /// Checks `config` against the limits in [`crate::config`] and computes offsets.
    pub fn new(config: RegionConfig) -> Result<Self, ShimError> {
        let bad =
            |what: &'static str, value: u64, limit: String| Err(ShimError::BadConfig { field: what, value, limit });
        let c = config;
        if c.queue_pairs == 0 || c.queue_pairs > QUEUE_PAIRS_MAX {
            return bad("queue_pairs", c.queue_pairs.into(), format!("1..={QUEUE_PAIRS_MAX}"));
        }
        if !c.ring_entries.is_power_of_two() || !(RING_ENTRIES_MIN..=RING_ENTRIES_MAX).contains(&c.ring_entries) {
            return bad(
                "ring_entries",
                c.ring_entries.into(),
                format!("a power of two in {RING_ENTRIES_MIN}..={RING_ENTRIES_MAX}"),
            );
        }
        let buffers = u64::from(c.host_buffers) + u64::from(c.dpu_buffers);
        if c.host_buffers == 0 || buffers > u64::from(ARENA_BUFFERS_MAX) {
            return bad(
                "host_buffers + dpu_buffers",
                buffers,
                format!("1..={ARENA_BUFFERS_MAX} with at least one host buffer"),
            );
        }
        if c.buffer_bytes % 64 != 0 || !(BUFFER_BYTES_MIN..=BUFFER_BYTES_MAX).contains(&c.buffer_bytes) {
            return bad(
                "buffer_bytes",
                c.buffer_bytes.into(),
                format!("a multiple of 64 in {BUFFER_BYTES_MIN}..={BUFFER_BYTES_MAX}"),
            );
        }
        if c.directory_slots > DIRECTORY_SLOTS_MAX {
            return bad("directory_slots", c.directory_slots.into(), format!("0..={DIRECTORY_SLOTS_MAX}"));
        }
        let entries = c.ring_entries as usize;
        let qp_stride = align_up(qp::ENTRIES + entries * DESCRIPTOR_BYTES + entries * COMPLETION_BYTES, LINE_BYTES);
        let qp_offset = HEADER_BYTES;
        let state_offset = qp_offset + qp_stride * c.queue_pairs as usize;
        let arena_offset = align_up(state_offset + 4 * buffers as usize, PAGE_BYTES);
        let directory_offset = arena_offset + buffers as usize * c.buffer_bytes as usize;
        let region_bytes = align_up(directory_offset + 8 * c.directory_slots as usize, PAGE_BYTES);
        if region_bytes as u64 > REGION_BYTES_MAX {
            return bad("region bytes", region_bytes as u64, format!("at most {REGION_BYTES_MAX}"));
        }
        Ok(Self { config, qp_offset, qp_stride, state_offset, arena_offset, directory_offset, region_bytes })
    }

    /// Total arena buffers.
    pub fn buffers(&self) -> u32 {
        self.config.host_buffers + self.config.dpu_buffers
    }

    /// Offset of queue pair `qp`'s block.
    pub fn qp(&self, qp: u32) -> usize {
        assert!(qp < self.config.queue_pairs, "queue pair {qp} out of range");
        self.qp_offset + self.qp_stride * qp as usize
    }

    /// Offset of submission entry `slot` of queue pair `qp`.
    pub fn sq_entry(&self, qp: u32, slot: u32) -> usize {
        assert!(slot < self.config.ring_entries);
        self.qp(qp) + qp::ENTRIES + slot as usize * DESCRIPTOR_BYTES
    }

    /// Offset of completion entry `slot` of queue pair `qp`.
    pub fn cq_entry(&self, qp: u32, slot: u32) -> usize {
        assert!(slot < self.config.ring_entries);
        let entries = self.config.ring_entries as usize;
        self.qp(qp) + qp::ENTRIES + entries * DESCRIPTOR_BYTES + slot as usize * COMPLETION_BYTES
    }

    /// Offset of buffer `index`'s ownership word.
    pub fn buffer_state(&self, index: u32) -> usize {
        assert!(index < self.buffers());
        self.state_offset + 4 * index as usize
    }

    /// Offset of buffer `index`.
    pub fn buffer(&self, index: u32) -> usize {
        assert!(index < self.buffers());
        self.arena_offset + index as usize * self.config.buffer_bytes as usize
    }

    /// Offset of cache-directory slot `slot`.
    pub fn directory_slot(&self, slot: u32) -> usize {
        assert!(slot < self.config.directory_slots);
        self.directory_offset + 8 * slot as usize
    }

    /// Writes the immutable header fields into `header` (at least
    /// [`header::FIXED_END`] bytes).
    pub fn emit_header(&self, out: &mut [u8]) {
        let c = &self.config;
        let put32 = |out: &mut [u8], at: usize, v: u32| out[at..at + 4].copy_from_slice(&v.to_le_bytes());
        let put64 = |out: &mut [u8], at: usize, v: u64| out[at..at + 8].copy_from_slice(&v.to_le_bytes());
        put64(out, header::MAGIC, MAGIC);
        put32(out, header::LAYOUT_VERSION, LAYOUT_VERSION);
        put32(out, header::HEADER_BYTES, HEADER_BYTES as u32);
        put64(out, header::FEATURES, FEATURES_KNOWN);
        put32(out, header::QUEUE_PAIRS, c.queue_pairs);
        put32(out, header::RING_ENTRIES, c.ring_entries);
        put32(out, header::HOST_BUFFERS, c.host_buffers);
        put32(out, header::DPU_BUFFERS, c.dpu_buffers);
        put32(out, header::BUFFER_BYTES, c.buffer_bytes);
        put32(out, header::DIRECTORY_SLOTS, c.directory_slots);
        put64(out, header::REGION_BYTES, self.region_bytes as u64);
        put64(out, header::QP_OFFSET, self.qp_offset as u64);
        put64(out, header::STATE_OFFSET, self.state_offset as u64);
        put64(out, header::ARENA_OFFSET, self.arena_offset as u64);
        put64(out, header::DIRECTORY_OFFSET, self.directory_offset as u64);
    }

    /// Parses and checks a header written by the other side. `file_bytes` is the
    /// size of the mapping, which the layout must fit.
    pub fn parse_header(bytes: &[u8], file_bytes: u64) -> Result<Self, ShimError> {
        if bytes.len() < header::FIXED_END {
            return Err(ShimError::Truncated { bytes: bytes.len() as u64, need: header::FIXED_END as u64 });
        }
        let get32 = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"));
        let get64 = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
        let magic = get64(header::MAGIC);
        if magic != MAGIC {
            return Err(ShimError::BadMagic { found: magic });
        }
        let version = get32(header::LAYOUT_VERSION);
        if version != LAYOUT_VERSION {
            return Err(ShimError::LayoutVersion { found: version, expected: LAYOUT_VERSION });
        }
        let features = get64(header::FEATURES);
        if features & !FEATURES_KNOWN != 0 {
            return Err(ShimError::UnknownFeatures { bits: features & !FEATURES_KNOWN });
        }
        let config = RegionConfig {
            queue_pairs: get32(header::QUEUE_PAIRS),
            ring_entries: get32(header::RING_ENTRIES),
            host_buffers: get32(header::HOST_BUFFERS),
            dpu_buffers: get32(header::DPU_BUFFERS),
            buffer_bytes: get32(header::BUFFER_BYTES),
            directory_slots: get32(header::DIRECTORY_SLOTS),
        };
        let layout = Self::new(config)?;
        let recorded = [
            (get32(header::HEADER_BYTES) as u64, HEADER_BYTES as u64),
            (get64(header::REGION_BYTES), layout.region_bytes as u64),
            (get64(header::QP_OFFSET), layout.qp_offset as u64),
            (get64(header::STATE_OFFSET), layout.state_offset as u64),
            (get64(header::ARENA_OFFSET), layout.arena_offset as u64),
            (get64(header::DIRECTORY_OFFSET), layout.directory_offset as u64),
        ];
        if recorded.iter().any(|(found, computed)| found != computed) {
            return Err(ShimError::HeaderMismatch);
        }
        if file_bytes < layout.region_bytes as u64 {
            return Err(ShimError::Truncated { bytes: file_bytes, need: layout.region_bytes as u64 });
        }
        Ok(layout)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trips_and_golden_bytes() {
        let layout = Layout::new(RegionConfig {
            queue_pairs: 2,
            ring_entries: 8,
            host_buffers: 4,
            dpu_buffers: 2,
            buffer_bytes: 1024,
            directory_slots: 16,
        })
        .unwrap();
        let mut bytes = vec![0u8; HEADER_BYTES];
        layout.emit_header(&mut bytes);
        assert_eq!(&bytes[0..8], b"PRESCNT\0");
        assert_eq!(&bytes[8..12], &[4, 0, 0, 0]);
        // The cluster line is the DPU's to write: a fresh header leaves it zero (no
        // lease, not in a cluster).
        assert!(bytes[header::CLUSTER_LINE..header::CLUSTER_LINE + LINE_BYTES].iter().all(|&b| b == 0));
        assert_eq!(&bytes[24..32], &[2, 0, 0, 0, 8, 0, 0, 0]);
        assert_eq!(Layout::parse_header(&bytes, layout.region_bytes as u64).unwrap(), layout);
        // Every section is inside the region, in order, and the arena is page aligned.
        assert!(layout.qp(1) + layout.qp_stride <= layout.state_offset);
        assert_eq!(layout.arena_offset % 4096, 0);
        assert!(layout.directory_slot(15) + 8 <= layout.region_bytes);
    }

    #[test]
    fn wrong_version_magic_and_sizes_are_refused() {
        let layout = Layout::new(RegionConfig::default()).unwrap();
        let mut bytes = vec![0u8; HEADER_BYTES];
        layout.emit_header(&mut bytes);
        let size = layout.region_bytes as u64;

        // 2: the completion entry before runs; 3: PUTs that carry an SLA (a DPU app or
        // host of an earlier release must not read this release's rings as its own).
        for version in [1u8, 2, 3, 5] {
            let mut other = bytes.clone();
            other[header::LAYOUT_VERSION] = version;
            assert!(
                matches!(
                    Layout::parse_header(&other, size),
                    Err(ShimError::LayoutVersion { found, expected: 4 }) if found == u32::from(version)
                ),
                "version {version}"
            );
        }
        let mut magic = bytes.clone();
        magic[0] ^= 1;
        assert!(matches!(Layout::parse_header(&magic, size), Err(ShimError::BadMagic { .. })));
        let mut offset = bytes.clone();
        offset[header::ARENA_OFFSET] ^= 0x40;
        assert!(matches!(Layout::parse_header(&offset, size), Err(ShimError::HeaderMismatch)));
        let mut ring = bytes.clone();
        ring[header::RING_ENTRIES] = 3;
        assert!(matches!(Layout::parse_header(&ring, size), Err(ShimError::BadConfig { field: "ring_entries", .. })));
        assert!(matches!(Layout::parse_header(&bytes, size - 1), Err(ShimError::Truncated { .. })));
    }
}
