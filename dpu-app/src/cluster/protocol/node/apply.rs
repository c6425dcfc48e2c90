//! The node's dispatch for the ordered apply (`protocol/apply.rs`): runs it each round
//! with its context, routes its READ completions, and asks the sequencer role to roll
//! the epoch over a hole no ring records.

use super::Node;
use crate::cluster::format::feed::{FeedEntry, FeedError};
use crate::cluster::protocol::apply::{ApplyCx, ApplyStats};
use crate::cluster::protocol::sequencer::SeqCx;
use crate::cluster::protocol::time::Now;
use crate::fabric::Fabric;
use crate::limits::HOLE_ROLL_DEAD_AFTERS;

impl<F: Fabric> Node<F> {
    /// One round of the ordered apply (sequencer mode).
    pub(in crate::cluster::protocol) fn poll_apply(&mut self, now: Now) -> bool {
        let (Some(applier), Some(sequencer)) = (self.applier.as_mut(), self.sequencer.as_mut()) else { return false };
        let mut cx = ApplyCx { links: &mut self.links, pool: &self.pools.fates, own: sequencer.fates() };
        let busy = applier.poll(&mut cx, now);
        if let Some(leading) = sequencer.leading() {
            let after_ns = HOLE_ROLL_DEAD_AFTERS * self.config.dead_after_us * 1_000;
            if applier.wants_roll(leading, after_ns, now) {
                let waiting = self.writer.held_len();
                let mut cx = SeqCx { links: &mut self.links, control: &self.control, pool: &self.pools.seq, waiting };
                sequencer.roll(&mut cx, now);
            }
        }
        busy
    }

    /// A READ of peer `j`'s fate ring (or, catching up, its change feed) came back.
    pub(in crate::cluster::protocol) fn on_fate_read(&mut self, j: u8, generation: u32, ok: bool, now: Now) {
        if let (Some(applier), Some(sequencer)) = (self.applier.as_mut(), self.sequencer.as_ref()) {
            applier.on_read(&self.pools.fates, sequencer.fates(), j, generation, ok, now);
        }
    }

    /// The next stamp this node's order releases, and what it released (writes,
    /// no-ops); `None` in HLC mode.
    pub fn order_state(&self) -> Option<(u64, u64, u64)> {
        self.applier.as_ref().map(|a| (a.cursor(), a.order_stats().writes, a.order_stats().noops))
    }

    /// What the ordered apply counts; `None` in HLC mode.
    pub fn apply_stats(&self) -> Option<ApplyStats> {
        self.applier.as_ref().map(|a| a.stats)
    }

    /// The version of the newest entry of this node's change feed (0: none; also in
    /// HLC mode).
    pub fn feed_last_version(&self) -> u64 {
        self.applier.as_ref().map_or(0, |a| a.feed().last_version())
    }

    /// The newest version this node's change feed dropped or marked missing (0: none,
    /// also in HLC mode): a host reading from a cursor below it is told it is too old.
    pub fn feed_dropped(&self) -> u64 {
        self.applier.as_ref().map_or(0, |a| a.feed().dropped())
    }

    /// Up to `out.len()` entries of this node's change feed after version `after`
    /// (0: from the start); `Ok(0)` in HLC mode.
    pub fn read_feed(&self, after: u64, out: &mut [FeedEntry]) -> Result<usize, FeedError> {
        self.applier.as_ref().map_or(Ok(0), |a| a.read_feed(after, out))
    }
}
