//! The node's dispatch for the repairer (`protocol/repair.rs`): builds its context from
//! the node's fields and does what a repair asks of the writer's side (record a holder
//! in the outcome table, queue a notice, rewind a resync, post a rebuilt fragment).

use super::Node;
use crate::cluster::format::outcome::OutcomeError;
use crate::cluster::protocol::peer::rewind;
use crate::cluster::protocol::repair::{RepairCx, RepairEffect, Repairer, Sweep};
use crate::cluster::protocol::slots::RepairId;
use crate::cluster::protocol::time::Now;
use crate::cluster::protocol::wr::WrId;
use crate::fabric::Fabric;

impl<F: Fabric> Node<F> {
    /// The repairer, and what it may use of the node (split borrows of other fields).
    fn repairer_cx(&mut self) -> (&mut Repairer, RepairCx<'_, F>) {
        let cx = RepairCx {
            me: self.me,
            n: self.n,
            placement: &self.placement,
            k: self.k,
            m: self.m,
            incarnation: self.incarnation,
            write_timeout_ns: self.write_timeout_ns,
            links: &mut self.links,
            pools: &self.pools,
            store: &self.store,
            region: &self.region,
            rs: &mut self.rs,
            crc_shift: &mut self.crc_shift,
            stats: &mut self.stats,
            side_free: &mut self.writer.side_free,
        };
        (&mut self.repairer, cx)
    }

    /// Starts repairing write `write_seq`'s fragment for `target` (the writer's resync
    /// finds such writes); false when there is no room now (the resync tries again
    /// later).
    pub(in crate::cluster::protocol) fn start_repair(
        &mut self,
        write_seq: u64,
        key_hash: u64,
        stamp: u64,
        tombstone: bool,
        target: u8,
        now: Now,
    ) -> bool {
        let (repairer, mut cx) = self.repairer_cx();
        repairer.start(&mut cx, write_seq, key_hash, stamp, tombstone, target, now)
    }

    /// A repair's set READ came back (`spill`: of the spill set).
    pub(in crate::cluster::protocol) fn on_repair_read(&mut self, id: WrId, ok: bool, spill: bool) {
        self.repairer.on_read(&self.pools.sets, id, ok, spill);
    }

    /// A rebuilt fragment's work request completed.
    pub(in crate::cluster::protocol) fn on_repair_write(&mut self, id: WrId, ok: bool) {
        self.repairer.on_write(id, ok);
    }

    /// The target acknowledged (or lost) a rebuilt fragment: the entry `Sent::Repair`
    /// settled.
    pub(in crate::cluster::protocol) fn repair_acked(&mut self, id: RepairId, peer: u8, ok: bool) {
        let (repairer, mut cx) = self.repairer_cx();
        if let Some(effect) = repairer.acked(&mut cx, id, peer, ok) {
            self.on_repair_effect(effect);
        }
    }

    /// Moves every repair forward.
    pub(in crate::cluster::protocol) fn advance_repairs(&mut self, now: Now) -> bool {
        let mut sweep = Sweep::default();
        loop {
            let (repairer, mut cx) = self.repairer_cx();
            let Some(effect) = repairer.advance(&mut cx, now, &mut sweep) else { break };
            self.on_repair_effect(effect);
        }
        sweep.busy
    }

    /// Does what a repair asked of the writer's side.
    fn on_repair_effect(&mut self, effect: RepairEffect) {
        match effect {
            RepairEffect::Stored { write_seq, node, decided } => {
                self.repaired_holder(write_seq, node, false);
                if decided {
                    self.repaired_holder(write_seq, node, true);
                }
            }
            RepairEffect::Notify { holder, record, rewind_if_full } => {
                self.repaired_holder(record.write_seq, holder, false);
                if !self.notices_queue(holder, record) && rewind_if_full {
                    self.rewind_resync(holder, record.write_seq);
                }
            }
            RepairEffect::RetryLater { target, write_seq } => self.rewind_resync(target, write_seq),
            RepairEffect::Post(p) => self.post_fragment_entry(
                p.target,
                p.bytes_at,
                &p.frag_header,
                p.entry,
                p.staging,
                (p.tag, p.tag),
                p.sent,
            ),
        }
    }

    /// Records in the outcome table that holder `node` stores write `write_seq`'s
    /// fragment (`decided`: and has its decision).
    fn repaired_holder(&mut self, write_seq: u64, node: u8, decided: bool) {
        let done =
            if decided { self.outcomes.set_decided(write_seq, node) } else { self.outcomes.set_acked(write_seq, node) };
        match done {
            Ok(()) => {}
            // A committed write whose holder never stored its fragment counts as settled,
            // so a newer write may take its outcome entry while the repair runs: nothing
            // is left to record.
            Err(OutcomeError::NotFound { .. }) => {
                tracing::debug!(node = self.me, write_seq, holder = node, "repaired write's outcome entry reused")
            }
            // Repairs are of committed writes, for their holders: anything else is a bug.
            Err(e) => panic!("repair of write {write_seq}: cannot record holder {node} (decided {decided}): {e}"),
        }
    }

    /// The resync of `target` (this node's own when it is this node) comes back to
    /// `write_seq`.
    fn rewind_resync(&mut self, target: u8, write_seq: u64) {
        if target == self.me {
            rewind(&mut self.own_resync, write_seq);
        } else if let Some(p) = self.links.peer_mut(target) {
            rewind(&mut p.resync, write_seq);
        }
    }

    /// What the repairs are doing (for diagnostics).
    pub fn repairs_debug(&self) -> String {
        format!(
            "side_free {} notices {} sent {:?} repairs {:?} resync {:?}",
            self.writer.side_free.len(),
            self.notices_debug(),
            self.links.iter().map(|p| (p.id, p.sent.len(), p.has_credit(), p.sends)).collect::<Vec<_>>(),
            self.repairer.debug_entries().collect::<Vec<_>>(),
            self.links.iter().map(|p| (p.id, p.resync)).collect::<Vec<_>>()
        )
    }

    /// Repairs in flight or waiting in a resync.
    pub fn repairs_pending(&self) -> usize {
        self.repairer.in_flight()
            + self.links.iter().filter(|p| p.resync.is_some()).count()
            + usize::from(self.own_resync.is_some())
    }
}
