//! The holders' rule: a stamp's fate read from its holders' stamp ledgers
//! (`format/ledger.rs`), for when its writer's fate ring cannot be read (`ordering =
//! "sequencer"`; `dpu-app/src/cluster/README.md`, "The ordered apply and the change
//! feed": a node that never comes back).
//!
//! A writer commits a write once a quorum of its holders persisted the fragment, the
//! writer itself counted when it is one of them. Once the writer is gone for good its
//! own ledger cannot be read, so the rule must decide from the other holders alone,
//! and what it decides must agree with whatever the writer's ring recorded before it
//! went:
//! - **Write** when at least [`threshold`] of the other holders hold the fragment
//!   (Held, not rolled back). The writer records a rolled-back write Aborted only once
//!   fewer than that many others can still hold it (`protocol/rollbacks.rs`), never counting
//!   itself as lacking, so a write the rule takes was never recorded Aborted (it was
//!   Committed, or still Pending when its writer went, and nobody was told it failed).
//! - **No-op** when the holders that hold it, with every holder whose ledger was not
//!   read and the writer itself, are fewer than a quorum: it cannot have committed.
//! - **Undecided** otherwise: more holders must be read.
//!
//! The two never both hold (a write's `threshold` others plus the writer make a
//! quorum). A stamp no ledger mentions has no known key, so its holders are every
//! storage node and nobody holds it: a no-op once all but fewer than a quorum of them
//! were read.
//!
//! The order protocol's model (`dpu-app/tests/order_model.rs`) calls [`threshold`],
//! [`rollback_settled`] and [`verdict`] themselves, so what it checks exhaustively at
//! small bounds is these rules as shipped.
//!
//! The ledgers read must be frozen for the writer (a fence that stops them taking its
//! fragments and rollbacks; not built yet): the simulator checks the rule against every
//! fate ring as each write is decided, and the soak against the files its processes
//! left.
#![forbid(unsafe_code)]

/// What the holders' ledgers say of a stamp.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// A committed write (or one whose writer went before deciding it, which nobody
    /// was told failed): apply it.
    Write,
    /// It cannot have committed: apply it as a no-op.
    NoOp,
    /// Too few holders were read to tell.
    Undecided,
}

/// The fewest holders other than the writer that must hold a fragment for the rule to
/// take it for a write: a quorum less the writer when it holds one of the fragments
/// itself, and never fewer than one (a write no other ledger mentions has no known
/// key).
pub fn threshold(quorum: u32, writer_holds: bool) -> u32 {
    quorum.saturating_sub(u32::from(writer_holds)).max(1)
}

/// Whether writer `writer` may record its rolled-back write Aborted: fewer than
/// [`threshold`] of the other `holders` can still hold the fragment, `lacking` being
/// those known not to (they persisted the rollback). The writer never counts itself as
/// lacking, whatever its own store did: its ledger is gone with it should it go for
/// good, so the rule could not count it either (`protocol/rollbacks.rs`).
pub fn rollback_settled(quorum: u32, holders: u32, writer: u8, lacking: u32) -> bool {
    let me = 1u32 << writer;
    (holders & !me & !lacking).count_ones() < threshold(quorum, holders & me != 0)
}

/// The rule for a stamp of writer `writer`, whose fragments went to the nodes of
/// `holders` (every storage node for a stamp no ledger mentions): `read` are the nodes
/// whose ledgers were read (frozen for the writer), `held` those of them that hold the
/// fragment. The writer's own ledger is never counted, read or not.
pub fn verdict(quorum: u32, holders: u32, writer: u8, read: u32, held: u32) -> Verdict {
    let me = 1u32 << writer;
    let writer_holds = holders & me != 0;
    let others = holders & !me;
    let holding = (others & read & held).count_ones();
    if holding >= threshold(quorum, writer_holds) {
        return Verdict::Write;
    }
    let unread = (others & !read).count_ones();
    if holding + unread + u32::from(writer_holds) < quorum {
        return Verdict::NoOp;
    }
    Verdict::Undecided
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Five nodes, RS(3,2): every node holds a fragment of every write.
    const ALL: u32 = 0b11111;

    #[test]
    fn with_only_the_writer_unread_every_stamp_is_decided() {
        // Writer 2, quorum 4: it needs three others besides itself.
        for held in 0..=ALL {
            let v = verdict(4, ALL, 2, ALL & !(1 << 2), held);
            let others = (held & !(1 << 2)).count_ones();
            let want = if others >= 3 { Verdict::Write } else { Verdict::NoOp };
            assert_eq!(v, want, "held {held:#07b}");
        }
    }

    #[test]
    fn a_writer_that_holds_no_fragment_needs_a_whole_quorum_of_others() {
        // Seven nodes, writes to five of them; writer 6 holds none.
        let holders = 0b0011111;
        assert_eq!(threshold(4, false), 4);
        assert_eq!(verdict(4, holders, 6, 0b0111111, 0b0001111), Verdict::Write);
        assert_eq!(verdict(4, holders, 6, 0b0111111, 0b0000111), Verdict::NoOp);
        // Two holders unread: three held and two unknown could still be a quorum.
        assert_eq!(verdict(4, holders, 6, 0b0100111, 0b0000111), Verdict::Undecided);
    }

    #[test]
    fn unread_holders_leave_it_undecided_until_the_answer_cannot_change() {
        // Writer 0 and node 4 unread; quorum 4.
        let read = 0b01110;
        assert_eq!(verdict(4, ALL, 0, read, 0b01110), Verdict::Write, "three others hold it");
        assert_eq!(verdict(4, ALL, 0, read, 0b00110), Verdict::Undecided, "node 4 and the writer could make four");
        assert_eq!(verdict(4, ALL, 0, read, 0b00010), Verdict::NoOp, "one, node 4 and the writer: three");
        // The writer's own ledger never counts, even when read.
        assert_eq!(verdict(4, ALL, 0, ALL, 0b00111), Verdict::NoOp);
    }

    #[test]
    fn a_rollback_settles_where_the_rule_can_no_longer_take_the_write() {
        // Writer 2, quorum 4: settled once fewer than three of the other four can hold
        // it, whatever its own store did.
        assert!(!rollback_settled(4, ALL, 2, 0b00001));
        assert!(!rollback_settled(4, ALL, 2, 0b00101), "its own bit does not count");
        assert!(rollback_settled(4, ALL, 2, 0b00011));
        for lacking in 0..=ALL {
            let held = ALL & !lacking;
            let settled = rollback_settled(4, ALL, 2, lacking);
            assert_eq!(settled, verdict(4, ALL, 2, ALL & !(1 << 2), held) != Verdict::Write, "lacking {lacking:#07b}");
        }
        // A writer that holds no fragment needs fewer than a whole quorum.
        assert!(!rollback_settled(3, 0b00111, 7, 0b00000));
        assert!(rollback_settled(3, 0b00111, 7, 0b00100));
    }

    #[test]
    fn a_stamp_no_ledger_mentions_is_never_a_write() {
        assert_eq!(verdict(4, ALL, 3, ALL & !(1 << 3), 0), Verdict::NoOp);
        assert_eq!(verdict(4, ALL, 3, 0b00011, 0), Verdict::NoOp, "two unread and the writer: three");
        assert_eq!(verdict(4, ALL, 3, 0b00001, 0), Verdict::Undecided, "three unread and the writer: four");
        // One node, RS(1,0), quorum 1: the writer alone made a quorum, and no other
        // ledger can say what it did.
        assert_eq!(threshold(1, true), 1);
        assert_eq!(verdict(1, 0b1, 0, 0, 0), Verdict::Undecided);
    }
}
