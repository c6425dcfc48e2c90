//! Work-request identifiers: every request the node posts carries in its `wr_id` what
//! it belongs to, so a completion is routed without a lookup table.
//!
//! ```text
//! bits 63..56 kind   55..48 peer node   47..24 a   23..0 b
//! ```
//! `a` and `b` are the owner's indices (a write's slot and fragment, a pool slot).

use crate::limits::WR_INDEX_MAX;

/// What a work request is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    /// A receive buffer (WRITE_WITH_IMM notifications land on these).
    Recv = 1,
    /// A fragment's bytes (plain WRITE): a = write slot, b = the write's generation
    /// (low 16 bits) << 8 | fragment index.
    FragmentBytes = 2,
    /// A fragment's entry header (WRITE_WITH_IMM): a and b as for its bytes.
    FragmentHeader = 3,
    /// A compare-and-swap on a directory slot word: a = the job's CAS pool word (job
    /// slot * 2 + guess), b = the job's generation.
    Cas = 4,
    /// An outcome notice (WRITE_WITH_IMM): a = notice slot, b = its generation.
    Notice = 5,
    /// An acknowledgement to a writer (WRITE_WITH_IMM): a = ack slot.
    Ack = 6,
    /// A heartbeat READ of a peer's control block.
    Heartbeat = 7,
    /// A READ of a peer's store set for a GET: a = get slot.
    GetRead = 8,
    /// A READ of a peer's store set for a repair: a = repair slot, b = generation.
    RepairRead = 9,
    /// A rebuilt fragment's WRITE (bytes or header): a = repair slot, b = generation.
    RepairWrite = 10,
    /// A READ of a peer's spill set for a GET: a = get slot.
    GetSpillRead = 11,
    /// A READ of a peer's spill set for a repair: a = repair slot, b = generation.
    RepairSpillRead = 12,
    /// A FETCH_ADD of stamps on the sequencer's counter: a = the fetch's generation.
    StampFetch = 13,
    /// A claim's CAS on a node's leader word: a = the claim's generation.
    LeaderCas = 14,
    /// A READ of a peer's fate ring (header words or a chunk) or, catching up, of its
    /// cursor or change feed: a = the read's generation.
    FateRead = 15,
}

impl Kind {
    fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            1 => Self::Recv,
            2 => Self::FragmentBytes,
            3 => Self::FragmentHeader,
            4 => Self::Cas,
            5 => Self::Notice,
            6 => Self::Ack,
            7 => Self::Heartbeat,
            8 => Self::GetRead,
            9 => Self::RepairRead,
            10 => Self::RepairWrite,
            11 => Self::GetSpillRead,
            12 => Self::RepairSpillRead,
            13 => Self::StampFetch,
            14 => Self::LeaderCas,
            15 => Self::FateRead,
            _ => return None,
        })
    }
}

/// A decoded work-request identifier.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WrId {
    /// What it is for.
    pub kind: Kind,
    /// The peer it went to (or came from).
    pub peer: u8,
    /// First index.
    pub a: u32,
    /// Second index.
    pub b: u32,
}

impl WrId {
    /// A work-request id.
    pub fn new(kind: Kind, peer: u8, a: u32, b: u32) -> Self {
        debug_assert!(a <= WR_INDEX_MAX && b <= WR_INDEX_MAX, "wr_id index out of range");
        Self { kind, peer, a, b }
    }

    /// A work-request id for the entry `id` names: a = its slot, b = its generation.
    pub fn of<H: super::slots::Handle>(kind: Kind, peer: u8, id: H) -> Self {
        Self::new(kind, peer, id.slot(), id.generation())
    }

    /// The handle in a and b (the inverse of [`WrId::of`]).
    pub fn handle<H: super::slots::Handle>(self) -> H {
        H::from_parts(self.a, self.b)
    }

    /// The 64-bit form posted with the request.
    pub fn encode(self) -> u64 {
        (self.kind as u64) << 56
            | u64::from(self.peer) << 48
            | u64::from(self.a & WR_INDEX_MAX) << 24
            | u64::from(self.b & WR_INDEX_MAX)
    }

    /// Decodes a completion's `wr_id`; `None` for one this node never posted.
    pub fn decode(v: u64) -> Option<Self> {
        let kind = Kind::from_u8((v >> 56) as u8)?;
        Some(Self { kind, peer: (v >> 48) as u8, a: (v >> 24) as u32 & WR_INDEX_MAX, b: v as u32 & WR_INDEX_MAX })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_refuses_unknown_kinds() {
        let w = WrId::new(Kind::FragmentHeader, 31, 12345, WR_INDEX_MAX);
        assert_eq!(WrId::decode(w.encode()), Some(w));
        assert_eq!(w.encode() >> 56, 3);
        assert_eq!(WrId::decode(0), None);
        assert_eq!(WrId::decode(0xff << 56), None);
    }
}
