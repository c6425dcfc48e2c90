//! Rolled-back writes whose stamps wait to be recorded Aborted (`ordering = "sequencer"`).
//!
//! A writer that rolls a write back records its stamp's fate as Aborted only once fewer
//! than [`holders_rule::threshold`] of the write's other holders can still hold its
//! fragment ([`holders_rule::rollback_settled`]): a quorum less the writer when it holds
//! a fragment itself. A holder counts as not holding it once it persisted the rollback.
//! The writer never counts itself as not holding it, even when its own store never
//! took the fragment or dropped it (see below). Until then the writer's fate ring keeps
//! the stamp Pending and every order waits for it; a holder that was away hears the
//! rollback at its resync, and its acknowledgement settles the stamp.
//!
//! Why wait: once a writer is gone for good, the fates of its last stamps can only be
//! learned from what its other holders hold (`holders_rule.rs`), and there a fragment
//! that `threshold` of them hold is a write. A ring that said Aborted while that many
//! still held the fragment could contradict that; the writer's own ledger is gone with
//! it, so its own rollback cannot count. Committed needs no such wait: the writer
//! commits only once a quorum persisted its fragment, which is `threshold` others.
//!
//! A rollback waits long only while a quorum less one of the write's other holders is
//! away (with RS(3,2) and quorum 3, two nodes), and then the order waits for those
//! nodes' fate rings anyway. Meanwhile the writer's fate ring cannot wrap past the
//! stamp: it stops taking stamps once it has taken a whole ring more.
//!
//! The writer answers its host `NotDurable` only once the stamp is recorded Aborted
//! (`Write::rollback_open`): before, a quorum may still hold the fragment. One that is
//! not by one more `write_timeout` is answered `Unavailable` (outcome unknown).
//!
//! The role is [`Rollbacks`], owned by the sequencer role (which owns the fate ring).
//! Bounded: at most [`ROLLBACKS_MAX`] wait at once. One more stays Pending in the ring
//! with nothing here to settle it, until the next restart finds it again in the
//! outcome table (counted, so the summary shows it).
#![forbid(unsafe_code)]

use crate::limits::ROLLBACKS_MAX;

use crate::cluster::holders_rule;

/// One rollback under way.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Rollback {
    /// The write's stamp (its version).
    version: u64,
    /// Nodes that were sent a fragment.
    holders: u32,
    /// Of those, the ones known not to hold it (any more).
    lacking: u32,
    /// The write quorum.
    quorum: u32,
    /// Holders that answered the rollback `ACK_FENCED` (they fenced this writer and
    /// may keep the write frozen): not lacking, but needing nothing more of the writer
    /// once the stamp is decided (their own order tells their store).
    fenced: u32,
}

/// What became of a rollback handed to [`Rollbacks::begin`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Begun {
    /// Too few holders can hold the fragment already: record Aborted now.
    Settled,
    /// It waits for holders to persist the rollback.
    Waiting,
    /// The table is full: the stamp stays Pending until the next restart.
    Full,
}

/// Rollbacks waiting for enough holders (see the module doc).
#[derive(Debug)]
pub struct Rollbacks {
    /// The writer: this node.
    me: u8,
    waiting: Vec<Rollback>,
}

impl Rollbacks {
    /// Node `me`'s rollbacks, none waiting.
    pub fn new(me: u8) -> Self {
        Self { me, waiting: Vec::with_capacity(ROLLBACKS_MAX) }
    }

    /// The write of stamp `version`, sent to `holders`, rolled back; `lacking` are those
    /// known not to hold its fragment; `quorum` is the write quorum.
    pub fn begin(&mut self, version: u64, holders: u32, lacking: u32, quorum: u32) -> Begun {
        if holders_rule::rollback_settled(quorum, holders, self.me, lacking) {
            return Begun::Settled;
        }
        if let Some(r) = self.waiting.iter_mut().find(|r| r.version == version) {
            r.lacking |= lacking;
            return Begun::Waiting;
        }
        if self.waiting.len() == ROLLBACKS_MAX {
            return Begun::Full;
        }
        self.waiting.push(Rollback { version, holders, lacking, quorum, fenced: 0 });
        Begun::Waiting
    }

    /// Holder `h` persisted the rollback of stamp `version`: once the stamp may be
    /// recorded Aborted (it is forgotten here), the holders that answered it
    /// `ACK_FENCED` ([`Self::fenced`]); `None` while it waits, or for a stamp not
    /// waiting here.
    pub fn reached(&mut self, version: u64, h: u8) -> Option<u32> {
        let i = self.waiting.iter().position(|r| r.version == version)?;
        let r = &mut self.waiting[i];
        r.lacking |= 1 << h;
        if !holders_rule::rollback_settled(r.quorum, r.holders, self.me, r.lacking) {
            return None;
        }
        Some(self.waiting.swap_remove(i).fenced)
    }

    /// Holder `h` answered the rollback of stamp `version` `ACK_FENCED`: true if the
    /// stamp still waits (`h` is remembered); false if it does not wait here (decided).
    pub fn fenced(&mut self, version: u64, h: u8) -> bool {
        let Some(r) = self.waiting.iter_mut().find(|r| r.version == version) else { return false };
        r.fenced |= 1 << h;
        true
    }

    /// Stamp `version` was decided otherwise (by the order, from the holders' ledgers):
    /// it waits no more.
    pub fn forget(&mut self, version: u64) {
        if let Some(i) = self.waiting.iter().position(|r| r.version == version) {
            self.waiting.swap_remove(i);
        }
    }

    /// Rollbacks waiting.
    pub fn len(&self) -> usize {
        self.waiting.len()
    }

    /// No rollback waits.
    pub fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stamp_settles_once_fewer_than_needed_can_hold_its_fragment() {
        // Writer 7 holds no fragment: five holders, quorum three.
        let mut r = Rollbacks::new(7);
        assert_eq!(r.begin(7, 0b11111, 0, 3), Begun::Waiting);
        assert_eq!(r.reached(7, 1), None, "four may still hold it");
        assert_eq!(r.reached(7, 1), None, "the same holder twice counts once");
        assert!(r.fenced(7, 3), "node 3 keeps it frozen: remembered, not lacking");
        assert_eq!(r.reached(7, 2), None, "three may still hold it");
        assert_eq!(r.reached(7, 4), Some(1 << 3), "two may: too few; node 3 answered fenced");
        assert!(r.is_empty());
        assert_eq!(r.reached(7, 3), None, "forgotten once settled");
        assert!(!r.fenced(7, 3), "not waiting: decided");
    }

    #[test]
    fn a_rollback_that_reached_enough_already_settles_at_once() {
        let mut r = Rollbacks::new(7);
        // Only three holders were sent a fragment, one of which never took it.
        assert_eq!(r.begin(9, 0b00111, 0b00100, 2), Begun::Waiting);
        assert_eq!(r.begin(10, 0b00111, 0b00110, 2), Begun::Settled);
        assert_eq!(r.len(), 1);
        assert_eq!(r.reached(11, 0), None, "not waiting here");
    }

    #[test]
    fn the_table_is_bounded() {
        let mut r = Rollbacks::new(7);
        for v in 0..ROLLBACKS_MAX as u64 {
            assert_eq!(r.begin(v, 0b111, 0, 2), Begun::Waiting);
        }
        assert_eq!(r.begin(u64::MAX, 0b111, 0, 2), Begun::Full);
        assert_eq!(r.begin(0, 0b111, 0b001, 2), Begun::Waiting, "one already waiting is updated");
        assert_eq!(r.reached(0, 1), Some(0));
        assert_eq!(r.begin(u64::MAX, 0b111, 0, 2), Begun::Waiting, "room again");
    }
}
