//! The node's dispatch for the ordered apply (`protocol/apply.rs`): runs it each round
//! with its context, routes its READ completions, and asks the sequencer role to roll
//! the epoch over a hole no ring records.

use super::Node;
use crate::cluster::format::entry::Outcome as Decision;
use crate::cluster::format::feed::{FeedEntry, FeedError};
use crate::cluster::protocol::apply::{ApplyCx, ApplyStats};
use crate::cluster::protocol::peer::rewind;
use crate::cluster::protocol::sequencer::SeqCx;
use crate::cluster::protocol::stall::Stall;
use crate::cluster::protocol::time::Now;
use crate::cluster::sequence::{epoch_of, sequence_of};
use crate::fabric::Fabric;
use crate::limits::HOLE_ROLL_DEAD_AFTERS;

impl<F: Fabric> Node<F> {
    /// One round of the ordered apply (sequencer mode).
    pub(in crate::cluster::protocol) fn poll_apply(&mut self, now: Now) -> bool {
        let (Some(applier), Some(sequencer)) = (self.applier.as_mut(), self.sequencer.as_mut()) else { return false };
        let ledger = self.holder.ledger();
        let mut cx = ApplyCx { links: &mut self.links, pool: &self.pools.fates, own: sequencer.fates(), ledger };
        let busy = applier.poll(&mut cx, now);
        // What the order decided from the holders' ledgers, and fates of writers this
        // node fences: this node's store takes each (a frozen fragment's rollback was
        // not taken), and its own ring and writes take their own stamps' fates.
        for r in applier.take_decided() {
            let stamp = r.version << 8 | u64::from(r.w);
            if let Some((key_hash, _)) = r.key {
                let decision = if r.write { Decision::Committed } else { Decision::Aborted };
                let _ = self.store.resolve(key_hash, stamp, decision);
            }
            if r.w == self.me {
                tracing::debug!(
                    node = self.me,
                    version = r.version,
                    write = r.write,
                    held = r.held,
                    "the order decided a stamp of this node's from the holders' ledgers"
                );
            }
            if r.w == self.me && sequencer.take_ordered_fate(r.version, r.write) {
                if let Some(seq) = self.writer.adopted(&mut self.outcomes, stamp, r.write, r.held) {
                    // A write after all: every holder without its fragment gets it
                    // repaired, then the decision (this node's own too).
                    for p in self.links.iter_mut() {
                        rewind(&mut p.resync, seq);
                    }
                    rewind(&mut self.own_resync, seq);
                }
            }
        }
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

    /// The next stamp this node's order releases (what it released so far is
    /// [`Self::order_released`]); `None` in HLC mode.
    pub fn order_cursor(&self) -> Option<u64> {
        self.applier.as_ref().map(|a| a.cursor())
    }

    /// The summary's lines for sequencer mode: stamps and epochs, the order released,
    /// catch-ups and marks (`None` in HLC mode).
    pub(in crate::cluster::protocol) fn order_summary(&self) -> Option<String> {
        let (sequencer, applier) = (self.sequencer.as_ref()?, self.applier.as_ref()?);
        let (q, a, o) = (sequencer.stats, applier.stats, applier.order_stats());
        let cursor = applier.cursor();
        Some(format!(
            "  sequencer: {}, {}; {} stamps taken in {} fetches, {} unused (holes), {} epochs rolled over holes, {} claims won, {} lost, {} rollbacks waiting for their holders ({} left to a restart)\n  \
             order: released {} writes and {} no-ops, next epoch {} sequence {}; {} catch-ups from peers' feeds ({} entries copied), {} stretches marked missing, {} warnings of a stalled order\n",
            sequencer.leader(),
            if sequencer.leading().is_some() { "sequenced here" } else { "followed" },
            q.stamps,
            q.fetches,
            q.holes,
            q.rolls,
            q.claims_won,
            q.claims_failed,
            sequencer.rollbacks_waiting(),
            q.rollbacks_full,
            o.writes,
            o.noops,
            epoch_of(cursor),
            sequence_of(cursor),
            a.catch_ups,
            a.copied,
            a.feed_gaps,
            applier.stall_warnings(),
        ))
    }

    /// The hole holding this node's order back at `now_ns` (monotonic), if one does
    /// (see `protocol/stall.rs`); `None` also in HLC mode.
    pub fn order_stall(&self, now_ns: u64) -> Option<Stall> {
        self.applier.as_ref().and_then(|a| a.stall(now_ns))
    }

    /// The ordered apply's state with each ring (for a failure's message; `None` in HLC
    /// mode).
    pub fn order_debug(&self) -> Option<String> {
        self.applier.as_ref().map(|a| a.debug_state())
    }

    /// Warnings this node logged about holes that stayed open (0 in HLC mode).
    pub fn order_stall_warnings(&self) -> u64 {
        self.applier.as_ref().map_or(0, |a| a.stall_warnings())
    }

    /// What the order released (writes, no-ops); `None` in HLC mode.
    pub fn order_released(&self) -> Option<crate::cluster::order::OrderStats> {
        self.applier.as_ref().map(|a| a.order_stats())
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
