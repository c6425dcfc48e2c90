//! The door of one region: every check a descriptor passes before the DPU app accepts
//! it, and the region's bookkeeping those checks need (the private in-flight table,
//! refusal counts, rate limits of the lines a host can make the DPU app log).
//!
//! Every check is made here, at the door: a descriptor that is accepted can be
//! processed. Beside the descriptor's own fields (checked against the arena's shape)
//! and its buffer's ownership, a PUT's value must fit what the write path needs in
//! this region's buffers (sealing adds a trailer, striping pads to k fragments and
//! writes parity into a side buffer): [`Door::limit_put_values`] is set once at start
//! from the cluster's `value_bytes_max`, which the node checked against the buffers.
//!
//! One door per region, kept across host take-overs: a host that re-attaches over and
//! over does not get a fresh log budget each time.

use prescient_shim::arena::{self, BufferState};
use prescient_shim::descriptor::{ArenaShape, Checked, Descriptor, OpCode};
use prescient_shim::layout::RegionConfig;
use prescient_shim::region::Region;
use prescient_shim::{sys, CompletionEntry, Status};

use crate::inflight::InFlight;
use crate::log_limit::LogLimits;
use crate::metrics::StatusCounts;

/// The lines about one region that a host can make repeat as often as it likes; each
/// is written at most once per [`crate::log_limit::LOG_INTERVAL_NS`] per region.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Line {
    /// A descriptor field failed its check.
    Malformed,
    /// A descriptor named a buffer in flight already.
    BufferInFlight,
    /// A descriptor named a buffer whose ownership word does not say Submitted.
    BufferNotSubmitted,
    /// A PUT's value is larger than the write path can process in this region.
    ValueTooLarge,
    /// A queue pair was fenced off.
    Fence,
    /// A new host generation was taken over.
    TakeOver,
    /// The host was found dead.
    HostGone,
    /// The host's heartbeat stopped while its process lives.
    HostStalled,
}

impl Line {
    /// Number of lines.
    pub const COUNT: usize = 8;
}

/// One region's door.
#[derive(Debug)]
pub struct Door {
    shape: ArenaShape,
    put_value_max: u32,
    inflight: InFlight,
    refused: StatusCounts,
    fences: u64,
    logs: LogLimits<{ Line::COUNT }>,
}

impl Door {
    /// The door of a region of `config`, admitting any PUT value its buffers hold until
    /// [`Door::limit_put_values`] says less.
    pub fn new(config: &RegionConfig) -> Self {
        let shape = ArenaShape { host_buffers: config.host_buffers, buffer_bytes: config.buffer_bytes };
        Self {
            put_value_max: shape.value_bytes_max() as u32,
            shape,
            inflight: InFlight::new(config.host_buffers),
            refused: StatusCounts::default(),
            fences: 0,
            logs: LogLimits::default(),
        }
    }

    /// The arena's shape.
    pub fn shape(&self) -> &ArenaShape {
        &self.shape
    }

    /// Admits PUT values of at most `max` bytes (never more than a buffer holds).
    pub fn limit_put_values(&mut self, max: u32) {
        self.put_value_max = self.put_value_max.min(max);
    }

    /// The largest PUT value admitted.
    pub fn put_value_max(&self) -> u32 {
        self.put_value_max
    }

    /// The private table of buffers this DPU app holds.
    pub fn inflight(&self) -> &InFlight {
        &self.inflight
    }

    /// The private table of buffers this DPU app holds, to change.
    pub fn inflight_mut(&mut self) -> &mut InFlight {
        &mut self.inflight
    }

    /// Descriptors refused at this door, by status.
    pub fn refused(&self) -> &StatusCounts {
        &self.refused
    }

    /// Counts one queue pair of this region fenced off.
    pub fn count_fence(&mut self) {
        self.fences += 1;
    }

    /// Queue pairs of this region fenced off since attach.
    pub fn fences(&self) -> u64 {
        self.fences
    }

    /// Whether `line` may be written now: `Some(left_out)` with the count of those
    /// left out since the last one, or `None`.
    pub fn log(&mut self, line: Line) -> Option<u64> {
        self.logs.admit(line as usize, sys::monotonic_ns())
    }

    /// Checks one descriptor (a private copy) and takes ownership of its buffer.
    /// `Ok(None)` for a NOP (completes at once), `Err` with the error completion for a
    /// refused one (counted, and logged at most once per reason every few seconds,
    /// naming the region).
    pub fn accept(
        &mut self,
        region: &Region,
        qp: u32,
        sq_index: u32,
        bytes: &[u8; 64],
    ) -> Result<Option<(Descriptor, u32)>, CompletionEntry> {
        let refused = match self.check(region, bytes) {
            Ok(accepted) => return Ok(accepted),
            Err(refused) => refused,
        };
        self.refused.count(refused.status);
        let line = match refused.status {
            Status::BufferInFlight => Line::BufferInFlight,
            Status::BufferNotSubmitted => Line::BufferNotSubmitted,
            _ if refused.too_large => Line::ValueTooLarge,
            _ => Line::Malformed,
        };
        if let Some(left_out) = self.log(line) {
            tracing::warn!(
                region = %region.path().display(),
                qp,
                sq_index,
                status = %refused.status,
                detail = refused.detail,
                user_data = refused.user_data,
                put_value_max = self.put_value_max,
                left_out,
                "refused descriptor"
            );
        }
        Err(CompletionEntry {
            detail: refused.detail.min(u32::MAX.into()) as u32,
            ..CompletionEntry::one(sq_index, refused.status, bytes[0])
        })
    }

    fn check(&mut self, region: &Region, bytes: &[u8; 64]) -> Result<Option<(Descriptor, u32)>, Refusal> {
        let Checked { desc, buffer } = Descriptor::parse_checked(bytes, &self.shape).map_err(|r| Refusal {
            status: r.status,
            detail: r.detail,
            user_data: r.user_data,
            too_large: false,
        })?;
        let refuse = |status, detail: u64| Refusal { status, detail, user_data: desc.user_data, too_large: false };
        let Some(buffer) = buffer else {
            debug_assert_eq!(desc.op, OpCode::Nop);
            return Ok(None);
        };
        if desc.op == OpCode::Put && desc.value_len > self.put_value_max {
            return Err(Refusal { too_large: true, ..refuse(Status::BadValueLength, desc.value_len.into()) });
        }
        if !self.inflight.insert(buffer) {
            return Err(refuse(Status::BufferInFlight, buffer.into()));
        }
        let cell = region.u32_at(region.layout().buffer_state(buffer));
        if let Err(found) = arena::transition(cell, desc.buffer_gen, BufferState::Submitted, BufferState::Dpu) {
            self.inflight.remove(buffer);
            return Err(refuse(Status::BufferNotSubmitted, found.into()));
        }
        Ok(Some((desc, buffer)))
    }
}

/// Why a descriptor was refused.
struct Refusal {
    status: Status,
    detail: u64,
    user_data: u64,
    /// A well-formed PUT whose value the write path cannot process in this region.
    too_large: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use prescient_shim::ReadSla;

    fn config() -> RegionConfig {
        RegionConfig {
            queue_pairs: 1,
            ring_entries: 4,
            host_buffers: 4,
            dpu_buffers: 1,
            buffer_bytes: 4096,
            directory_slots: 0,
        }
    }

    #[test]
    fn a_put_larger_than_the_write_path_can_process_is_refused_at_the_door() {
        let path = std::env::temp_dir().join(format!("prescient-door-{}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let region = Region::create(&path, config(), false).unwrap();
        let mut door = Door::new(&config());
        door.limit_put_values(1000);
        let put = |value_len| {
            let mut b = [0u8; 64];
            Descriptor {
                op: OpCode::Put,
                sla: ReadSla::Stale,
                key_len: 1,
                value_offset: door.shape().value_offset(1),
                value_len,
                buffer_gen: 0,
                user_data: 5,
            }
            .emit(&mut b);
            b
        };
        let (big, fits) = (put(1001), put(1000));
        let refused = door.accept(&region, 0, 0, &big).unwrap_err();
        assert_eq!(
            (refused.status, refused.detail, refused.sq_index, refused.count),
            (Status::BadValueLength, 1001, 0, 1)
        );
        assert_eq!(door.refused().get(Status::BadValueLength), 1);
        // The one that fits passes the size check and stops at the ownership word
        // (nobody submitted the buffer): the size is checked before anything is taken.
        let refused = door.accept(&region, 0, 1, &fits).unwrap_err();
        assert_eq!(refused.status, Status::BufferNotSubmitted);
        assert_eq!(door.inflight().len(), 0);
        drop(region);
        let _ = std::fs::remove_file(&path);
    }
}
