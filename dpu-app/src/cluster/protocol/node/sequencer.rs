//! The node's dispatch for the sequencer role (`protocol/sequencer.rs`): builds its
//! context from the node's fields, runs it each round, routes its completions and the
//! heartbeat blocks it learns from, and tells the writer whether a stamp is in hand.

use super::Node;
use crate::cluster::format::fates::FateRing;
use crate::cluster::format::ledger::Ledger;
use crate::cluster::protocol::sequencer::{SeqCx, SeqStats, Sequencer};
use crate::cluster::protocol::time::Now;
use crate::cluster::sequence::LeaderWord;
use crate::fabric::Fabric;

impl<F: Fabric> Node<F> {
    /// The sequencer role and its context, borrowed from disjoint fields.
    fn seq_cx(&mut self) -> Option<(&mut Sequencer, SeqCx<'_, F::Qp>)> {
        let sequencer = self.sequencer.as_mut()?;
        let waiting = self.writer.held_len();
        Some((sequencer, SeqCx { links: &mut self.links, control: &self.control, pool: &self.pools.seq, waiting }))
    }

    /// One round of the sequencer role. A leader word that cannot be persisted stops
    /// the node: it could not refuse a deposed epoch after a restart.
    pub(in crate::cluster::protocol) fn poll_sequencer(&mut self, now: Now) -> bool {
        let me = self.me;
        let Some((s, mut cx)) = self.seq_cx() else { return false };
        s.poll(&mut cx, now).unwrap_or_else(|e| panic!("node {me}: {e}"))
    }

    /// Posts the block FETCH_ADD that writes taken in this round wait for.
    pub(in crate::cluster::protocol) fn fetch_wanted_stamps(&mut self, now: Now) -> bool {
        let Some((s, mut cx)) = self.seq_cx() else { return false };
        s.fetch_wanted(&mut cx, now)
    }

    /// A stamp FETCH_ADD came back.
    pub(in crate::cluster::protocol) fn on_stamp_fetch(&mut self, generation: u32, ok: bool, now: Now) {
        if let Some((s, mut cx)) = self.seq_cx() {
            s.on_fetch(&mut cx, generation, ok, now);
        }
    }

    /// A claim CAS at node `j` came back.
    pub(in crate::cluster::protocol) fn on_leader_cas(&mut self, j: u8, generation: u32, ok: bool, now: Now) {
        if let Some((s, mut cx)) = self.seq_cx() {
            s.on_cas(&mut cx, j, generation, ok, now);
        }
    }

    /// Peer `j`'s heartbeat block was READ and believed: its leader word and counter
    /// go to the sequencer role.
    pub(in crate::cluster::protocol) fn sequencer_heard(&mut self, j: u8, now: Now) {
        let me = self.me;
        let Some(view) = self.links.peer(j).and_then(|p| p.view) else { return };
        let Some((s, mut cx)) = self.seq_cx() else { return };
        s.heard(&mut cx, j, &view, now).unwrap_or_else(|e| panic!("node {me}: {e}"));
    }

    /// The sequencer's leader word as this node knows it, and whether this node
    /// sequences; `None` in HLC mode.
    pub fn sequencer_state(&self) -> Option<(LeaderWord, bool)> {
        self.sequencer.as_ref().map(|s| (s.leader(), s.leading().is_some()))
    }

    /// The leader word in this node's control block now; `None` in HLC mode. A
    /// claimant's CAS shows here at once, before this node's next round notices it
    /// ([`Node::sequencer_state`]); holders refuse by this word.
    pub fn leader_word_in_block(&self) -> Option<LeaderWord> {
        self.sequencer.as_ref().map(|_| LeaderWord::unpack(self.control.leader()))
    }

    /// This node's fate ring; `None` in HLC mode.
    pub fn fate_ring(&self) -> Option<&FateRing> {
        self.sequencer.as_ref().map(|s| s.fates())
    }

    /// Rolled-back writes whose stamps wait for enough holders before they are
    /// recorded Aborted (`rollbacks.rs`); 0 in HLC mode.
    pub fn rollbacks_waiting(&self) -> usize {
        self.sequencer.as_ref().map_or(0, |s| s.rollbacks_waiting())
    }

    /// This node's stamp ledger (`format/ledger.rs`); `None` in HLC mode.
    pub fn ledger(&self) -> Option<&Ledger> {
        self.holder.ledger()
    }

    /// What the sequencer role counted; `None` in HLC mode.
    pub fn sequencer_stats(&self) -> Option<SeqStats> {
        self.sequencer.as_ref().map(|s| s.stats)
    }
}
