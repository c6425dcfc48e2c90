//! The simulator's sequencer faults and invariants (`sim --sequencer`: the cluster runs
//! with `ordering = "sequencer"`, node 0 sequencing first, nodes 1 and 2 its shadows).
//!
//! Faults aimed at the sequencer, on top of the random crashes, partitions and losses:
//! the node that sequences crashes (and later restarts, a deposed sequencer coming
//! back with its files); a partition isolates it from every other node for a while
//! (it returns deposed, or finds it still sequences if nobody claimed); a partition
//! between it and its first shadow only, so that the shadow claims against a live
//! sequencer that the others still hear (competing claims).
//!
//! Invariants, after every step:
//! - every committed write's version is unique in the cluster (no stamp issued, or
//!   applied, twice) and of an epoch some node won by claim;
//! - a key's versions follow real time: a write submitted after another write of its
//!   key committed commits at a higher version (`Oracle::out_of_order`), blocks of
//!   stamps fetched before included;
//! - no two nodes ever sequence the same epoch;
//! - no node's leader word moves back to a lower epoch, restarts included (it is
//!   persisted);
//! - failover is measured: from the step the sequencer crashed or was cut off to the
//!   first step a live node sequences a newer epoch, and to the first write of that
//!   epoch completing at a host (the report's percentiles).
//!
//! Liveness is the simulator's: every write submitted completes within its bound, so
//! a cluster that stopped stamping after a fault breaks the run.

use std::collections::{HashMap, HashSet};

use crate::cluster::run::inprocess::InProcess;
use crate::cluster::sequence::epoch_of;
use crate::histogram::Histogram;

/// What the sequencer checks keep between steps.
#[derive(Debug, Default)]
pub struct SequencerWatch {
    /// Which node won each epoch.
    leaders: HashMap<u32, u8>,
    /// The highest epoch each node's word has shown.
    epochs: Vec<u32>,
    /// Every committed version.
    versions: HashSet<u64>,
    /// A fault took the sequencer of this epoch away at this time.
    lost: Option<(u32, u64)>,
    /// The new epoch, once claimed after `lost`, and when; waits for its first write.
    claimed: Option<(u32, u64)>,
    /// Sequencer lost to a newer epoch sequencing, ns of simulated time.
    pub to_claim: Histogram,
    /// Sequencer lost to the first write of the newer epoch completing.
    pub to_write: Histogram,
}

impl SequencerWatch {
    /// A watch for a cluster of `nodes`.
    pub fn new(nodes: u8) -> Self {
        Self { epochs: vec![0; nodes.into()], ..Self::default() }
    }

    /// The node sequencing the highest epoch now, and that epoch.
    pub fn sequencer(cluster: &InProcess) -> Option<(u8, u32)> {
        cluster
            .nodes()
            .filter_map(|n| n.sequencer_state().filter(|(_, leading)| *leading).map(|(w, _)| (n.id(), w.epoch)))
            .max_by_key(|&(_, e)| e)
    }

    /// A fault just took the sequencer away at `now` (failover is timed from here),
    /// unless a failover is already being timed.
    pub fn lost(&mut self, epoch: u32, now: u64) {
        if self.lost.is_none() {
            self.lost = Some((epoch, now));
        }
    }

    /// The checks of one step; an error names the broken invariant.
    pub fn check(&mut self, cluster: &InProcess, now: u64) -> Result<(), String> {
        for node in cluster.nodes() {
            let Some((word, leading)) = node.sequencer_state() else { continue };
            let id = node.id();
            let seen = &mut self.epochs[id as usize];
            if word.epoch < *seen {
                return Err(format!("node {id}'s leader word went back from epoch {seen} to {}", word.epoch));
            }
            *seen = word.epoch;
            if leading {
                if let Some(&other) = self.leaders.get(&word.epoch).filter(|&&o| o != id) {
                    return Err(format!("nodes {other} and {id} both sequence epoch {}", word.epoch));
                }
                self.leaders.insert(word.epoch, id);
                if let Some((_, since)) = self.lost.filter(|&(old, _)| word.epoch > old) {
                    if self.claimed.is_none() {
                        self.to_claim.record(now - since);
                        self.claimed = Some((word.epoch, now));
                    }
                }
            }
        }
        Ok(())
    }

    /// A write committed with `stamp`, seen by its host at `now`.
    pub fn committed(&mut self, stamp: u64, now: u64) -> Result<(), String> {
        let version = stamp >> 8;
        if !self.versions.insert(version) {
            return Err(format!("version {version:#x} committed twice (stamp {stamp:#x})"));
        }
        let epoch = epoch_of(version);
        if !self.leaders.contains_key(&epoch) {
            return Err(format!("version {version:#x} committed in epoch {epoch}, which no node won"));
        }
        if let (Some((_, since)), Some((new, _))) = (self.lost, self.claimed) {
            if epoch >= new {
                self.to_write.record(now - since);
                self.lost = None;
                self.claimed = None;
            }
        }
        Ok(())
    }

    /// Epochs won in the run.
    pub fn epochs_won(&self) -> usize {
        self.leaders.len()
    }
}
