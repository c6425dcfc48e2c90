//! Sequencer versions and the leader word (`ordering = "sequencer"`).
//!
//! In sequencer mode a write's version is `epoch << SEQUENCE_BITS | sequence`, fetched
//! by one-sided RDMA FETCH_ADD on the sequencer node's counter word: the NIC stamps, no
//! CPU of the sequencer runs. The epoch sits above the sequence, so every stamp of a
//! later epoch orders after every stamp of an earlier one: a new sequencer starts above
//! every stamp the old one could have issued without knowing how far it got, and per-key
//! versions only move forward across a failover. The stamp a write carries is still
//! `version << 8 | writer` ([`crate::cluster::hlc::Stamp`]), so the directory protocol,
//! the fragment headers and the store see versions as in HLC mode.
//!
//! The leader word ([`LeaderWord`], `epoch << 8 | sequencer`) lives in every node's
//! control block. A claimant wins an epoch by CAS on a majority of the words, each from
//! a word of a lower epoch; a node refuses fragments stamped in an epoch below its word's
//! ([`LeaderWord::refuses`]), and since every write quorum meets every majority
//! (`quorum + majority > nodes`, checked in the cluster file), a deposed sequencer's
//! stamps cannot commit once the claim has won.

use crate::limits::{EPOCH_MAX, SEQUENCE_BITS, VERSION_MAX};

/// The version of stamp `sequence` of `epoch`, or `None` past the version space.
pub const fn version(epoch: u32, sequence: u64) -> Option<u64> {
    if epoch > EPOCH_MAX || sequence >= 1 << SEQUENCE_BITS {
        return None;
    }
    Some((epoch as u64) << SEQUENCE_BITS | sequence)
}

/// The epoch of a sequencer version.
pub const fn epoch_of(version: u64) -> u32 {
    (version >> SEQUENCE_BITS) as u32
}

/// The sequence of a sequencer version within its epoch.
pub const fn sequence_of(version: u64) -> u64 {
    version & ((1 << SEQUENCE_BITS) - 1)
}

/// The first version the sequencer of `epoch` issues: sequence 1 (sequence 0 is never
/// issued, so a version of 0 always means "none").
pub const fn first_of(epoch: u32) -> u64 {
    (epoch as u64) << SEQUENCE_BITS | 1
}

const _: () = assert!(((EPOCH_MAX as u64) << SEQUENCE_BITS | ((1 << SEQUENCE_BITS) - 1)) == VERSION_MAX);

/// Who sequences, and since which epoch: `epoch << 8 | sequencer` in one u64, so that
/// words compare by epoch first. Epoch 0 is "no sequencer yet" (every node's word at
/// its first start); the first claim takes epoch 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct LeaderWord {
    /// The epoch (at most [`EPOCH_MAX`]).
    pub epoch: u32,
    /// The node that sequences it.
    pub sequencer: u8,
}

impl LeaderWord {
    /// The word as stored (and CASed) in a control block.
    pub const fn pack(self) -> u64 {
        (self.epoch as u64) << 8 | self.sequencer as u64
    }

    /// A word read from a control block (a peer's or this node's own).
    pub const fn unpack(word: u64) -> Self {
        Self { epoch: (word >> 8) as u32, sequencer: word as u8 }
    }

    /// Whether there is a sequencer at all (epoch 0 has none).
    pub const fn is_set(self) -> bool {
        self.epoch != 0
    }

    /// Whether a node holding this word refuses a fragment of sequencer version
    /// `version`: it was stamped in an epoch this node has seen deposed.
    pub const fn refuses(self, version: u64) -> bool {
        epoch_of(version) < self.epoch
    }

    /// The word a claimant over this one takes: the next epoch, sequenced by
    /// `claimant`; `None` once the epochs are used up.
    pub fn next(self, claimant: u8) -> Option<Self> {
        let epoch = self.epoch.checked_add(1).filter(|&e| e <= EPOCH_MAX)?;
        Some(Self { epoch, sequencer: claimant })
    }
}

impl std::fmt::Display for LeaderWord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.is_set() {
            write!(f, "epoch {} (sequencer n{})", self.epoch, self.sequencer)
        } else {
            f.write_str("epoch 0 (no sequencer)")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_of_a_later_epoch_order_after_every_earlier_one() {
        let last_of_one = version(1, (1 << SEQUENCE_BITS) - 1).unwrap();
        assert!(first_of(2) > last_of_one);
        assert_eq!((epoch_of(last_of_one), sequence_of(last_of_one)), (1, (1 << SEQUENCE_BITS) - 1));
        assert_eq!(version(1, 1 << SEQUENCE_BITS), None);
        assert_eq!(version(EPOCH_MAX + 1, 0), None);
        assert_eq!(version(EPOCH_MAX, (1 << SEQUENCE_BITS) - 1), Some(VERSION_MAX));
        assert_eq!(sequence_of(first_of(7)), 1);
    }

    #[test]
    fn leader_words_order_by_epoch_and_refuse_deposed_stamps() {
        let w = LeaderWord { epoch: 3, sequencer: 4 };
        assert_eq!(LeaderWord::unpack(w.pack()), w);
        assert!(LeaderWord { epoch: 4, sequencer: 0 }.pack() > w.pack());
        assert!(w.refuses(first_of(2) + 99));
        assert!(!w.refuses(first_of(3)));
        assert!(!w.refuses(first_of(4)));
        assert_eq!(w.next(1), Some(LeaderWord { epoch: 4, sequencer: 1 }));
        assert_eq!(LeaderWord { epoch: EPOCH_MAX, sequencer: 0 }.next(1), None);
        assert!(!LeaderWord::default().is_set());
        assert_eq!(LeaderWord::unpack(0), LeaderWord::default());
    }
}
