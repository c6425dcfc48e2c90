//! What the module counts, reported by `PRESCIENT.STATS` (one `name:value` line each,
//! as `INFO` prints).

use std::fmt::Write as _;

/// Counters, each a `u64` bumped on Redis's main thread.
#[derive(Debug, Default, Clone)]
pub struct Stats {
    /// SETs submitted to the DPU app.
    pub sets: u64,
    /// SETs that committed (`+OK`).
    pub sets_ok: u64,
    /// SETs whose refill made Redis's own copy servable at once.
    pub sets_refilled: u64,
    /// GETs served from Redis's own copy (slot `Valid` and tagged with its word).
    pub gets_local: u64,
    /// GETs sent to the DPU app.
    pub gets_fetched: u64,
    /// Fetched GETs whose value was cached and the slot refilled.
    pub gets_refilled: u64,
    /// Refills that lost a race with a write (the slot moved): nothing cached.
    pub refills_lost: u64,
    /// Fetched GETs that found no value.
    pub gets_missing: u64,
    /// DELETEs submitted (one per key of a DEL).
    pub deletes: u64,
    /// Commands answered with an error.
    pub errors: u64,
    /// Commands refused before reaching the DPU app (arguments, ring or arena full,
    /// DPU app not responding).
    pub refused: u64,
    /// Commands failed because the DPU app stopped answering while they waited.
    pub failed_dpu_lost: u64,
    /// Completions that named no waiting command (a DPU app that broke the protocol).
    pub stray_completions: u64,
    /// Failed polls of the completion ring.
    pub poll_errors: u64,
}

impl Stats {
    /// `name:value` lines, with the commands waiting now, the keys whose Redis copy is
    /// tagged (servable while their slot holds the tag), whether the DPU app answers,
    /// the cluster nodes it reaches (a bit mask) and whether the directory lease holds.
    pub fn render(&self, waiting: usize, tags: usize, dpu_ok: bool, peers_up: u32, lease_valid: bool) -> String {
        let mut out = String::new();
        let fields: [(&str, u64); 14] = [
            ("sets", self.sets),
            ("sets_ok", self.sets_ok),
            ("sets_refilled", self.sets_refilled),
            ("gets_local", self.gets_local),
            ("gets_fetched", self.gets_fetched),
            ("gets_refilled", self.gets_refilled),
            ("refills_lost", self.refills_lost),
            ("gets_missing", self.gets_missing),
            ("deletes", self.deletes),
            ("errors", self.errors),
            ("refused", self.refused),
            ("failed_dpu_lost", self.failed_dpu_lost),
            ("stray_completions", self.stray_completions),
            ("poll_errors", self.poll_errors),
        ];
        for (name, value) in fields {
            let _ = writeln!(out, "{name}:{value}");
        }
        let _ = writeln!(out, "waiting:{waiting}");
        let _ = writeln!(out, "tags:{tags}");
        let _ = writeln!(out, "dpu_responding:{}", u8::from(dpu_ok));
        let _ = writeln!(out, "peers_up:{peers_up}");
        let _ = writeln!(out, "lease_valid:{}", u8::from(lease_valid));
        out
    }
}
