//! The node's dispatch for the holder (`protocol/holder.rs`): builds its context from
//! the node's fields, hands it the entries writers announce, and resets a link the
//! holder found out of sequence.

use super::Node;
use crate::cluster::protocol::holder::{HoldCx, Holder, HolderEffect};
use crate::cluster::protocol::time::Now;
use crate::fabric::{Fabric, WcStatus};

impl<F: Fabric> Node<F> {
    /// The holder and its context, borrowed from disjoint fields.
    fn hold_cx(&mut self) -> (&mut Holder, HoldCx<'_, F::Qp>) {
        let cx = HoldCx {
            me: self.me,
            k: self.k,
            m: self.m,
            sync_records: self.sync_records,
            log_slots: self.config.log_slots as u64,
            links: &mut self.links,
            store: &mut self.store,
            hlc: &mut self.hlc,
            sequencing: self.sequencer.is_some().then_some(&self.control),
            stats: &mut self.stats,
            noisy: &mut self.noisy,
            pools: &self.pools,
        };
        (&mut self.holder, cx)
    }

    /// Writer `w` announced the entry with sequence (low 31 bits) `imm` in our log.
    pub(in crate::cluster::protocol) fn on_entry(&mut self, w: u8, imm: u32, now: Now) {
        let (holder, mut cx) = self.hold_cx();
        match holder.on_entry(&mut cx, w, imm) {
            Some(HolderEffect::LinkFailed { peer }) => self.link_failed(peer, WcStatus::RemoteOperation, now),
            None => {}
        }
    }

    /// After a restart: applies what the logs hold beyond their applied sequence.
    pub(in crate::cluster::protocol) fn replay_logs(&mut self) {
        let (holder, mut cx) = self.hold_cx();
        holder.replay_logs(&mut cx);
    }
}
