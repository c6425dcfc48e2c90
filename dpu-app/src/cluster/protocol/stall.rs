//! What holds an ordered apply back (`ordering = "sequencer"`): the hole at its cursor,
//! how long it has been open, the node the rings say holds its stamp, and the nodes
//! whose fate rings could not be read lately. The metrics page and the node's
//! summary show it, and a warning names the nodes to bring back, once the hole is
//! older than [`ORDER_STALL_WARN_MS`] and again each time its age doubles (a stall of
//! a day logs about 17 lines).
#![forbid(unsafe_code)]

use crate::cluster::sequence::{epoch_of, sequence_of};
use crate::limits::ORDER_STALL_WARN_MS;

/// A hole at the order's cursor: a stamp with no fate yet while a fate or close above
/// it is known, so every committed write after it waits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stall {
    /// The stamp the order waits for.
    pub version: u64,
    /// How long the hole has been open.
    pub open_ns: u64,
    /// The node whose ring records the stamp (a write it has not decided, or a block
    /// it has not said it used): its decision, or its restart, settles it. `None`: no
    /// ring this node read records it (the epoch's end settles it, or a roll).
    pub held_by: Option<u8>,
    /// Nodes (bit `j`: node `j`) whose fate rings this node has not read lately (for
    /// eight of its rereads: down or cut off): the stamp's fate, or its epoch's end,
    /// may be there.
    pub unread: u64,
}

impl Stall {
    /// The nodes in [`Stall::unread`], lowest first.
    pub fn unread_nodes(&self) -> impl Iterator<Item = u8> + '_ {
        (0..64u8).filter(move |j| self.unread >> j & 1 == 1)
    }
}

/// The warnings of one applier: which hole it last warned about, when it warns again,
/// and when it last warned.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct StallWarnings {
    version: u64,
    next_ns: u64,
    last_ns: Option<u64>,
    /// Warnings logged.
    pub(super) warned: u64,
}

impl StallWarnings {
    /// Whether [`StallWarnings::check`] would warn about the hole at `version`, open for
    /// `open_ns`, at `now_ns`: a caller works out the whole [`Stall`] only then.
    pub(super) fn due(&self, version: u64, open_ns: u64, now_ns: u64) -> bool {
        let bound_ns = ORDER_STALL_WARN_MS * 1_000_000;
        let next_ns = if version == self.version { self.next_ns } else { bound_ns };
        open_ns >= next_ns && self.last_ns.is_none_or(|t| now_ns.saturating_sub(t) >= bound_ns)
    }

    /// Logs a warning about `stall` at `now_ns` (monotonic) if it is due: past
    /// [`ORDER_STALL_WARN_MS`] for a new hole, then at each doubling of its age, and
    /// never within [`ORDER_STALL_WARN_MS`] of the last warning (a node back after a
    /// long absence releases a burst of holes, each as old as the stall).
    pub(super) fn check(&mut self, me: u8, stall: Option<Stall>, now_ns: u64) {
        let Some(s) = stall else { return };
        if !self.due(s.version, s.open_ns, now_ns) {
            return;
        }
        self.version = s.version;
        (self.next_ns, self.last_ns) = (s.open_ns.saturating_mul(2), Some(now_ns));
        self.warned += 1;
        let unread: Vec<u8> = s.unread_nodes().collect();
        let (epoch, sequence) = (epoch_of(s.version), sequence_of(s.version));
        let seconds = s.open_ns as f64 / 1e9;
        match (s.held_by, unread.is_empty()) {
            (Some(holder), _) if s.unread >> holder & 1 == 1 => tracing::warn!(
                node = me, epoch, sequence, seconds, holder,
                "the change feed waits for a stamp node {holder} took, and node {holder} cannot be read: every node's feed stays here until node {holder} restarts with its data folder and records the stamp's fate (a node that never comes back holds the order; see dpu-app/src/cluster/README.md, 'Sequencer ordering: what its order does not do')"
            ),
            (Some(holder), _) => tracing::warn!(
                node = me, epoch, sequence, seconds, holder, ?unread,
                "the change feed waits for node {holder} to settle a stamp it took (a write it decides within its write timeout, or a block it says it used): a node stuck longer is stalled or overloaded"
            ),
            (None, false) => tracing::warn!(
                node = me, epoch, sequence, seconds, ?unread,
                "the change feed waits for a stamp no readable fate ring records, and these nodes' rings cannot be read: the stamp's fate, or its epoch's end, waits for them; restart them with their data folders (a node that never comes back holds the order; see dpu-app/src/cluster/README.md, 'Sequencer ordering: what its order does not do')"
            ),
            (None, true) => tracing::warn!(
                node = me, epoch, sequence, seconds,
                "the change feed waits for a stamp no fate ring records; the sequencer claims the next epoch to settle it once every ring was read"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hole_is_warned_about_past_the_bound_and_then_at_each_doubling() {
        let mut w = StallWarnings::default();
        let bound = ORDER_STALL_WARN_MS * 1_000_000;
        let stall = |version, open_ns| Some(Stall { version, open_ns, held_by: Some(4), unread: 1 << 4 });
        // The hole opened at time 0: its age is the time.
        let at = |w: &mut StallWarnings, version, opened, now| w.check(0, stall(version, now - opened), now);
        w.check(0, None, 0);
        at(&mut w, 7, 0, bound - 1);
        assert_eq!(w.warned, 0, "not before the bound");
        for now in [bound, bound + 1, 2 * bound - 1] {
            at(&mut w, 7, 0, now);
        }
        assert_eq!(w.warned, 1, "once at the bound");
        for now in [2 * bound, 3 * bound, 4 * bound, 100 * bound] {
            at(&mut w, 7, 0, now);
        }
        assert_eq!(w.warned, 4, "then at 2x, 4x and a jump to 100x");
        // A burst of holes released one after another, each as old as the stall.
        for (i, version) in (8..40).enumerate() {
            at(&mut w, version, 0, 100 * bound + i as u64);
        }
        assert_eq!(w.warned, 4, "none within the bound of the last warning");
        at(&mut w, 40, 101 * bound, 101 * bound + bound / 2);
        assert_eq!(w.warned, 4, "a new hole younger than the bound");
        at(&mut w, 40, 101 * bound, 102 * bound);
        assert_eq!(w.warned, 5, "a new hole warns at the bound, a bound after the last warning");
    }

    #[test]
    fn unread_nodes_are_listed_lowest_first() {
        let s = Stall { unread: 1 << 31 | 1 << 4 | 1, ..Stall::default() };
        assert_eq!(s.unread_nodes().collect::<Vec<_>>(), vec![0, 4, 31]);
    }
}
