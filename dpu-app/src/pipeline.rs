//! The request pipeline: an ordered list of stages every validated request passes.
//!
//! The ring code hands each validated request to [`Pipeline::run`]; stages never see
//! ring indices or descriptors, so sealing, coding, replication and invalidation slot
//! in here without touching the ring.

use std::ops::Range;

/// What a request asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// Store `value` under `key`.
    Put,
    /// Remove `key`.
    Delete,
}

/// One request as the stages see it. `buf` is the whole arena buffer the host filled;
/// `payload` is the part of it that currently holds the value (stages that add a
/// header or a tag in place move it within `buf`).
#[derive(Debug)]
pub struct Request<'a> {
    /// Operation.
    pub op: Op,
    /// Key bytes.
    pub key: &'a [u8],
    /// The arena buffer, owned by the DPU app until the request completes.
    pub buf: &'a mut [u8],
    /// Byte range of `buf` holding the payload.
    pub payload: Range<usize>,
    /// Version assigned to the write (0 until a sequencing stage stamps it).
    pub version: u64,
    /// A second arena buffer for what stages write beside the payload: the
    /// striping stage puts the fragment headers and the parity fragments here.
    /// Empty (`&mut []`) for requests that are not striped.
    pub side: &'a mut [u8],
    /// What the sealing and striping stages recorded, for the stages after them.
    pub codec: CodecInfo,
}

/// What the sealing and striping stages record about a request. After striping,
/// the stripe's layout is `StripeLayout::new(k, m, payload.len())`, data fragment
/// i is `buf[payload.start + i * fragment_len..][..fragment_len]`, and headers and
/// parity are in `side` (see `stripe::fragment`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CodecInfo {
    /// Hash of the request's key, bound into the frame and the headers.
    pub key_hash: u64,
    /// Id of the key that sealed the payload; valid once `sealed`.
    pub key_id: u32,
    /// The payload is a sealed frame.
    pub sealed: bool,
    /// Data fragments; 0 until striped.
    pub k: u8,
    /// Parity fragments; 0 until striped.
    pub m: u8,
}

/// Why a stage failed a request; reported to the host as an error completion.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StageError {
    /// The payload does not fit the room the stage needs in the buffer.
    #[error("stage {stage}: payload of {len} bytes leaves no room for {need} more bytes in a {cap}-byte buffer")]
    NoRoom {
        /// Failing stage.
        stage: &'static str,
        /// Payload length.
        len: usize,
        /// Extra bytes the stage needs.
        need: usize,
        /// Buffer capacity.
        cap: usize,
    },
    /// Any other failure, with the stage's own words.
    #[error("stage {stage}: {reason}")]
    Failed {
        /// Failing stage.
        stage: &'static str,
        /// What went wrong.
        reason: String,
    },
}

/// One step of the write path.
pub trait Stage: Send {
    /// Short name for logs and metrics.
    fn name(&self) -> &'static str;
    /// Processes `req` in place; an error fails the request and skips later stages.
    fn run(&mut self, req: &mut Request<'_>) -> Result<(), StageError>;

    /// A line for the DPU app's summary, if the stage has something to report.
    fn summary(&self) -> Option<String> {
        None
    }

    /// The check at the door: whether a PUT whose payload is `payload_len` bytes when
    /// it reaches this stage can be processed in `room`, and if so the payload's
    /// length after it. `None` means this stage would fail it. Stages that do not
    /// touch the payload's size keep the default.
    fn admits(&self, payload_len: usize, room: Room) -> Option<usize> {
        let _ = room;
        Some(payload_len)
    }
}

/// The room a request has in the region's buffers, for [`Stage::admits`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Room {
    /// Bytes of the request's buffer from the payload's start to the buffer's end.
    pub payload: usize,
    /// Bytes of the side buffer (0 when the region has no DPU buffers).
    pub side: usize,
}

/// An ordered list of stages.
#[derive(Default)]
pub struct Pipeline {
    stages: Vec<Box<dyn Stage>>,
}

impl Pipeline {
    /// An empty pipeline: every request completes as soon as it is validated.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends a stage.
    pub fn push(&mut self, stage: Box<dyn Stage>) -> &mut Self {
        self.stages.push(stage);
        self
    }

    /// Stages in the pipeline.
    pub fn len(&self) -> usize {
        self.stages.len()
    }

    /// Whether the pipeline has no stage.
    pub fn is_empty(&self) -> bool {
        self.stages.is_empty()
    }

    /// Stage names, in order.
    pub fn names(&self) -> Vec<&'static str> {
        self.stages.iter().map(|s| s.name()).collect()
    }

    /// The stages' summary lines.
    pub fn summaries(&self) -> Vec<String> {
        self.stages.iter().filter_map(|s| s.summary()).collect()
    }

    /// The largest PUT value every stage can process in `room` (`None` if not even an
    /// empty one), found once at start so that each descriptor is checked against it
    /// at the door and no accepted PUT fails later for its size. `at_most` bounds the
    /// search (the arena's own value limit).
    pub fn put_value_max(&self, room: Room, at_most: usize) -> Option<usize> {
        let fits = |len: usize| self.stages.iter().try_fold(len, |len, stage| stage.admits(len, room)).is_some();
        if !fits(0) {
            return None;
        }
        // Every stage's need grows with the payload: bisect for the last that fits.
        let (mut lo, mut hi) = (0, at_most);
        while lo < hi {
            let mid = lo + (hi - lo).div_ceil(2);
            if fits(mid) {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        Some(lo)
    }

    /// Runs `req` through every stage in order.
    pub fn run(&mut self, req: &mut Request<'_>) -> Result<(), StageError> {
        for stage in &mut self.stages {
            stage.run(req)?;
        }
        Ok(())
    }
}
