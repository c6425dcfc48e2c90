//! Counters the DPU app keeps while serving, printed as its summary and published on
//! `serve --metrics` (see `cluster::run::scrape`).

use prescient_shim::descriptor::OpCode;
use prescient_shim::Status;

/// Slots of a [`StatusCounts`]: codes at or above the last share it.
const STATUS_SLOTS: usize = 32;

/// Counts by completion status (e.g. one region's refusals).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StatusCounts {
    counts: [u64; STATUS_SLOTS],
}

impl StatusCounts {
    fn slot(status: Status) -> usize {
        (status as u16 as usize).min(STATUS_SLOTS - 1)
    }

    /// Counts one `status`.
    pub fn count(&mut self, status: Status) {
        self.counts[Self::slot(status)] += 1;
    }

    /// How many `status` were counted.
    pub fn get(&self, status: Status) -> u64 {
        self.counts[Self::slot(status)]
    }

    /// Adds `other`'s counts to these.
    pub fn add(&mut self, other: &StatusCounts) {
        for (mine, theirs) in self.counts.iter_mut().zip(&other.counts) {
            *mine += theirs;
        }
    }

    /// `(status, count)` for every status counted at least once, by code.
    pub fn nonzero(&self) -> impl Iterator<Item = (Status, u64)> + '_ {
        (self.counts.iter().enumerate()).filter(|(_, &n)| n > 0).map(|(code, &n)| (Status::from_u16(code as u16), n))
    }

    /// All counted.
    pub fn total(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// `"N x status, ..."` for every status counted, or `None`.
    pub fn describe(&self) -> Option<String> {
        let parts: Vec<String> = (self.counts.iter().enumerate())
            .filter(|(_, &n)| n > 0)
            .map(|(code, n)| format!("{n} x {}", Status::from_u16(code as u16)))
            .collect();
        (!parts.is_empty()).then(|| parts.join(", "))
    }
}

/// The ops completions are counted by: the four op codes, then every other byte a
/// host wrote in a descriptor's op field (refused `BadOp`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpKind {
    /// A NOP.
    Nop,
    /// A PUT.
    Put,
    /// A DELETE.
    Delete,
    /// A GET.
    Get,
    /// An op byte that is no op code.
    Other,
}

impl OpKind {
    /// Every kind, in the order of their slots.
    pub const ALL: [OpKind; 5] = [OpKind::Nop, OpKind::Put, OpKind::Delete, OpKind::Get, OpKind::Other];

    /// The kind of a descriptor's op byte.
    pub fn of_byte(op: u8) -> Self {
        match op {
            b if b == OpCode::Nop as u8 => OpKind::Nop,
            b if b == OpCode::Put as u8 => OpKind::Put,
            b if b == OpCode::Delete as u8 => OpKind::Delete,
            b if b == OpCode::Get as u8 => OpKind::Get,
            _ => OpKind::Other,
        }
    }

    /// The kind's name in reports and metric labels.
    pub const fn name(self) -> &'static str {
        match self {
            OpKind::Nop => "nop",
            OpKind::Put => "put",
            OpKind::Delete => "delete",
            OpKind::Get => "get",
            OpKind::Other => "other",
        }
    }
}

// `ALL` lists each kind at its discriminant, so `kind as usize` indexes it.
const _: () = {
    let mut i = 0;
    while i < OpKind::ALL.len() {
        assert!(OpKind::ALL[i] as usize == i);
        i += 1;
    }
};

/// What happened while serving.
#[derive(Clone, Debug, Default)]
pub struct Metrics {
    /// Requests completed (any status).
    pub completed: u64,
    /// Completions by op and status, `by_op[OpKind as usize]`; also the requests of a
    /// dead predecessor failed at attach (`DpuRestarted`, not in `completed`).
    pub by_op: [StatusCounts; OpKind::ALL.len()],
    /// Completed with `Status::Ok`.
    pub ok: u64,
    /// Error completions, by status code (codes at or above the last bucket share it).
    pub errors: [u64; 32],
    /// Queue pairs fenced off.
    pub fences: u64,
    /// Hosts seen to die.
    pub host_deaths: u64,
    /// Times a live host's heartbeat went silent past the timeout (its buffers kept).
    pub host_stalls: u64,
    /// Buffers reclaimed from dead hosts or a dead predecessor.
    pub buffers_reclaimed: u64,
    /// Requests a predecessor took and this DPU app failed at attach.
    pub restart_failed: u64,
    /// Futex sleeps.
    pub sleeps: u64,
}

impl Metrics {
    /// Counts one completion of a request whose descriptor's op byte was `op`.
    pub fn count(&mut self, op: u8, status: Status) {
        self.completed += 1;
        self.by_op[OpKind::of_byte(op) as usize].count(status);
        if status == Status::Ok {
            self.ok += 1;
        } else {
            let slot = (status as u16 as usize).min(self.errors.len() - 1);
            self.errors[slot] += 1;
        }
    }

    /// Adds `other`'s counts to these (the totals of several regions).
    pub fn add(&mut self, other: &Metrics) {
        self.completed += other.completed;
        for (mine, theirs) in self.by_op.iter_mut().zip(&other.by_op) {
            mine.add(theirs);
        }
        self.ok += other.ok;
        for (mine, theirs) in self.errors.iter_mut().zip(&other.errors) {
            *mine += theirs;
        }
        self.fences += other.fences;
        self.host_deaths += other.host_deaths;
        self.host_stalls += other.host_stalls;
        self.buffers_reclaimed += other.buffers_reclaimed;
        self.restart_failed += other.restart_failed;
        self.sleeps += other.sleeps;
    }

    /// A one-paragraph summary.
    pub fn summary(&self) -> String {
        let mut s = format!(
            "completed {} requests ({} ok); fenced {} queue pairs; {} host deaths; {} host stalls; reclaimed {} buffers; failed {} requests of a dead predecessor; slept {} times",
            self.completed, self.ok, self.fences, self.host_deaths, self.host_stalls, self.buffers_reclaimed, self.restart_failed, self.sleeps
        );
        for (code, &n) in self.errors.iter().enumerate() {
            if n > 0 {
                s.push_str(&format!("\n  {n} x {}", Status::from_u16(code as u16)));
            }
        }
        s
    }
}
