//! This node's own host's cache directory, as the DPU app sees it: slot words in the
//! host region, moved by local compare-and-swap (the peers' directories are moved by
//! remote CASes, in `jobs.rs`). The directory jobs run on it when the host is this
//! node's own; membership sweeps it whole (revocation, a dead writer's marks).

use std::sync::atomic::{AtomicU64, Ordering};

use prescient_shim::directory::{self, SlotWord};
use prescient_shim::region::Region;

use super::stats::NodeStats;
use crate::limits::JOB_ROUNDS_MAX;

/// The host's directory: `slots` words in `region` (none when `slots` is 0).
#[derive(Clone, Copy, Debug)]
pub struct HostDirectory<'a> {
    region: &'a Region,
    slots: u32,
}

impl<'a> HostDirectory<'a> {
    /// The directory of `region`, of `slots` slots.
    pub fn new(region: &'a Region, slots: u32) -> Self {
        Self { region, slots }
    }

    /// The word of `slot` (taken modulo the directory's size), or `None` when the host
    /// has no directory.
    pub fn word(&self, slot: u32) -> Option<&'a AtomicU64> {
        (self.slots != 0).then(|| self.region.u64_at(self.region.layout().directory_slot(slot % self.slots)))
    }

    /// Moves every slot word with `f` (`None`: leave it); returns how many changed.
    pub fn sweep(&self, f: impl Fn(SlotWord) -> Option<SlotWord>) -> u64 {
        let mut changed = 0;
        for slot in 0..self.slots {
            let word = self.region.u64_at(self.region.layout().directory_slot(slot));
            let mut current = word.load(Ordering::Acquire);
            for _ in 0..JOB_ROUNDS_MAX {
                let Some(next) = f(SlotWord::unpack(current)) else { break };
                match word.compare_exchange(current, next.pack(), Ordering::AcqRel, Ordering::Acquire) {
                    Ok(_) => {
                        changed += 1;
                        break;
                    }
                    Err(seen) => current = seen,
                }
            }
        }
        changed
    }

    /// Revokes the whole directory for node `me`: every word changes to Invalid (at a
    /// higher version), so no reader's refill from before can succeed.
    pub fn revoke(&self, me: u8, stats: &mut NodeStats) {
        let changed = self.sweep(|w| Some(directory::revoke(w, me)));
        stats.revocations += 1;
        tracing::info!(node = me, slots = changed, "revoked the host's cache directory");
    }
}
