//! What a node counts and times, and the summary it prints.

use prescient_models::Tuner;
use prescient_shim::Status;

use super::write::Write;
use crate::histogram::{Histogram, ReadStage, StageTimes, WriteStage};
use crate::limits::COMMIT_LOG_ENTRIES;

/// Status codes counted apart in [`NodeStats::writes_failed_by`] (the last counts
/// every code at or above it).
pub const STATUS_CODES: usize = 32;

/// The predictor's tuned lease threshold, as of the node's last write.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LeaseTuning {
    /// The threshold leases open at.
    pub threshold: f32,
    /// Decisions the tuner took.
    pub decisions: u64,
    /// Decisions that lowered the threshold.
    pub moves_down: u64,
    /// Decisions that raised it (for precision or for cost).
    pub moves_up: u64,
    /// The windowed precision at the threshold (0 before any lease ended).
    pub precision: f64,
    /// What a hit saved, averaged (the lease's marking round trip), if measured.
    pub hit_saved_ns: Option<f64>,
    /// What a false positive cost, averaged (its marking and rollback rounds), if measured.
    pub false_positive_ns: Option<f64>,
}

impl LeaseTuning {
    /// A snapshot of `tuner`.
    pub fn of(tuner: &Tuner) -> Self {
        let c = tuner.controller();
        let (decisions, down, up_precision, up_cost) = c.decisions();
        let (hit_saved_ns, false_positive_ns) = tuner.measured_costs_ns();
        Self {
            threshold: tuner.threshold(),
            decisions,
            moves_down: down,
            moves_up: up_precision + up_cost,
            precision: c.precision_at(c.level()),
            hit_saved_ns,
            false_positive_ns,
        }
    }
}

/// A node's counters and latency histograms (fixed memory, allocated at start).
#[derive(Debug)]
pub struct NodeStats {
    /// (stamp, time) of this node's latest commit points - when a write's decision
    /// had persisted on m + 1 holders and every mark was settled - a ring of
    /// [`COMMIT_LOG_ENTRIES`], for benchmarks that time invalidation against commits.
    pub commit_log: Vec<(u64, u64)>,
    /// Next position in `commit_log`.
    pub commit_log_next: usize,
    /// Per-stage latencies of writes.
    pub writes: StageTimes,
    /// GET latencies: gather (all sets in), total.
    pub gets_gather: Histogram,
    /// GET latencies, end to end.
    pub gets_total: Histogram,
    /// Writes completed Ok.
    pub writes_ok: u64,
    /// Writes that failed (any status).
    pub writes_failed: u64,
    /// Failed writes by status (indexed by the status code).
    pub writes_failed_by: [u64; STATUS_CODES],
    /// Directory jobs not started for want of a free job entry.
    pub job_table_full: u64,
    /// GETs completed Ok.
    pub gets_ok: u64,
    /// GETs that found nothing.
    pub gets_not_found: u64,
    /// GETs that failed.
    pub gets_failed: u64,
    /// GET gather rounds repeated (sets of different ages disagreed).
    pub get_retries: u64,
    /// GETs that READ their key's spill sets too (a home set said the key may have
    /// records there).
    pub get_spill_rounds: u64,
    /// Arrival to every mark settled (the speculative invalidation).
    pub invalidated_after: Histogram,
    /// Predictor hits (a write found its key leased).
    pub predictor_hits: u64,
    /// Leases marked.
    pub leases_opened: u64,
    /// Leases rolled back unused (false positives).
    pub leases_rolled_back: u64,
    /// Leases rolled back for age.
    pub leases_timed_out: u64,
    /// Leases not marked for lack of room.
    pub leases_dropped: u64,
    /// The tuned lease threshold (None: the model's fixed theta, or no predictor).
    pub lease_tuning: Option<LeaseTuning>,
    /// Suspicions raised (a host directory could not be reached).
    pub suspicions: u64,
    /// Whole-directory revocations.
    pub revocations: u64,
    /// Peers declared dead.
    pub dead_declared: u64,
    /// Queue pair bring-ups that failed (a stale hello's endpoint, mostly).
    pub connects_failed: u64,
    /// Silent peers this node fenced (sequencer mode, `protocol/fence.rs`).
    pub fences: u64,
    /// Fences narrowed when their peer connected again.
    pub fences_narrowed: u64,
    /// Fragments and rollbacks of fenced writers' frozen writes not taken.
    pub fenced_refused: u64,
    /// Rollbacks this writer sent that a holder that fenced it did not take (frozen).
    pub rollbacks_fenced: u64,
    /// Rollbacks sent again alone, after a fencing holder answered a notice carrying
    /// several with `ACK_FENCED` (which does not say which it left out).
    pub rollbacks_resent_alone: u64,
    /// Pending marks of dead writers cleared.
    pub marks_cleared: u64,
    /// Links lost.
    pub links_lost: u64,
    /// Fragments this node holds for others, persisted.
    pub fragments_held: u64,
    /// Entries refused (malformed, inconsistent, tampered).
    pub entries_refused: u64,
    /// Entries replayed from a log after a restart.
    pub entries_replayed: u64,
    /// Fragments refused for lack of store room.
    pub store_full: u64,
    /// Fragments refused for a stamp of a deposed sequencer epoch (as a holder, or the
    /// writer's own fragment).
    pub deposed_refused: u64,
    /// Holders' refusals this node received as a writer.
    pub refusals: u64,
    /// Directory jobs whose slot changed under every CAS round (a hot slot).
    pub cas_contended: u64,
    /// Directory jobs started on peers' directories.
    pub cas_jobs: u64,
    /// CAS rounds those jobs posted (a job whose first guess is right posts one).
    pub cas_rounds: u64,
    /// Outcome records dropped with a lost link.
    pub notices_dropped: u64,
    /// Decisions resent to a peer after it reconnected.
    pub notices_resent: u64,
    /// Repairs started (fragments rebuilt for a holder that missed them).
    pub repairs_started: u64,
    /// Repairs the holder acknowledged.
    pub repairs_done: u64,
    /// Fragments refused by GETs (checksums) and frames that did not open.
    pub fragments_refused: u64,
    /// Rebuilt frames that did not open (a forged fragment).
    pub forged: u64,
}

impl NodeStats {
    /// Zeroed stats for a cluster of `nodes`.
    pub fn new(_nodes: usize) -> Self {
        Self {
            commit_log: Vec::with_capacity(COMMIT_LOG_ENTRIES),
            commit_log_next: 0,
            writes: StageTimes::new(),
            gets_gather: Histogram::new(),
            gets_total: Histogram::new(),
            writes_ok: 0,
            writes_failed: 0,
            writes_failed_by: [0; STATUS_CODES],
            job_table_full: 0,
            gets_ok: 0,
            gets_not_found: 0,
            gets_failed: 0,
            get_retries: 0,
            get_spill_rounds: 0,
            invalidated_after: Histogram::new(),
            predictor_hits: 0,
            leases_opened: 0,
            leases_rolled_back: 0,
            leases_timed_out: 0,
            leases_dropped: 0,
            lease_tuning: None,
            suspicions: 0,
            revocations: 0,
            dead_declared: 0,
            connects_failed: 0,
            fences: 0,
            fences_narrowed: 0,
            fenced_refused: 0,
            rollbacks_fenced: 0,
            rollbacks_resent_alone: 0,
            marks_cleared: 0,
            links_lost: 0,
            fragments_held: 0,
            deposed_refused: 0,
            entries_refused: 0,
            entries_replayed: 0,
            store_full: 0,
            refusals: 0,
            cas_contended: 0,
            cas_jobs: 0,
            cas_rounds: 0,
            notices_dropped: 0,
            notices_resent: 0,
            repairs_started: 0,
            repairs_done: 0,
            fragments_refused: 0,
            forged: 0,
        }
    }

    /// Records a write that failed before it started (nothing of it went out).
    pub fn record_failure(&mut self, status: Status) {
        self.writes_failed += 1;
        self.writes_failed_by[(status as usize).min(STATUS_CODES - 1)] += 1;
    }

    /// Records a finished write.
    pub fn record_write(&mut self, w: &Write, now_ns: u64, status: Status) {
        if status != Status::Ok {
            self.record_failure(status);
            return;
        }
        self.writes_ok += 1;
        let mut last = w.arrived_ns;
        for stage in WriteStage::ALL {
            let t = w.times[stage as usize];
            match stage {
                // Replication and invalidation run side by side from the end of encoding.
                WriteStage::Replicate | WriteStage::Invalidate => {
                    let from = w.times[WriteStage::Encode as usize];
                    if t >= from && t > 0 {
                        self.writes.record_write(stage, t - from);
                    }
                }
                WriteStage::Complete => self.writes.record_write(stage, now_ns.saturating_sub(last)),
                WriteStage::Total => self.writes.record_write(stage, now_ns.saturating_sub(w.arrived_ns)),
                _ => {
                    if t >= last && t > 0 {
                        self.writes.record_write(stage, t - last);
                        last = t;
                    }
                }
            }
        }
        let inv = w.times[WriteStage::Invalidate as usize];
        if inv > 0 {
            self.invalidated_after.record(inv.saturating_sub(w.arrived_ns));
        }
    }

    /// Records that the write stamped `stamp` reached its commit point at `now_ns`.
    pub fn record_commit(&mut self, stamp: u64, now_ns: u64) {
        if self.commit_log.len() < COMMIT_LOG_ENTRIES {
            self.commit_log.push((stamp, now_ns));
        } else {
            self.commit_log[self.commit_log_next] = (stamp, now_ns);
        }
        self.commit_log_next = (self.commit_log_next + 1) % COMMIT_LOG_ENTRIES;
    }

    /// Records a finished GET.
    pub fn record_get(&mut self, started_ns: u64, gathered_ns: u64, now_ns: u64, status: Status) {
        match status {
            Status::Ok => self.gets_ok += 1,
            Status::NotFound => self.gets_not_found += 1,
            _ => self.gets_failed += 1,
        }
        self.gets_gather.record(gathered_ns.saturating_sub(started_ns));
        self.gets_total.record(now_ns.saturating_sub(started_ns));
        let _ = ReadStage::Total;
    }
}

/// Microseconds, for tables.
fn us(ns: u64) -> f64 {
    ns as f64 / 1e3
}

impl NodeStats {
    /// A readable summary of node `me`; `bytes` are (peer, out, in) per peer.
    pub fn render(&self, me: u8, bytes: &[(u8, u64, u64)]) -> String {
        let mut s = format!(
            "node {me}: {} writes ok, {} failed; GETs {} ok, {} not found, {} failed\n",
            self.writes_ok, self.writes_failed, self.gets_ok, self.gets_not_found, self.gets_failed
        );
        if self.writes_failed > 0 {
            let by: Vec<String> = (0..STATUS_CODES)
                .filter(|&c| self.writes_failed_by[c] > 0)
                .map(|c| format!("{} {:?}", self.writes_failed_by[c], Status::from_u16(c as u16)))
                .collect();
            s.push_str(&format!("  failed writes: {}\n", by.join(", ")));
        }
        s.push_str(&self.writes.render());
        if self.gets_total.count() > 0 {
            s.push_str(&format!(
                "  GET: gather p50 {:.1} us, total p50 {:.1} us, p99 {:.1} us\n",
                us(self.gets_gather.percentile(0.5)),
                us(self.gets_total.percentile(0.5)),
                us(self.gets_total.percentile(0.99))
            ));
        }
        if self.invalidated_after.count() > 0 {
            s.push_str(&format!(
                "  invalidation: every directory marked {:.1} us (p50) / {:.1} us (p99) after the PUT arrived\n",
                us(self.invalidated_after.percentile(0.5)),
                us(self.invalidated_after.percentile(0.99))
            ));
        }
        if self.leases_opened > 0 || self.predictor_hits > 0 {
            s.push_str(&format!(
                "  predictor: {} hits, {} leases marked, {} rolled back unused (false positives), {} timed out\n",
                self.predictor_hits, self.leases_opened, self.leases_rolled_back, self.leases_timed_out
            ));
        }
        if let Some(t) = self.lease_tuning {
            let us = |ns: Option<f64>| ns.map_or("-".to_string(), |ns| format!("{:.1} us", ns / 1e3));
            s.push_str(&format!(
                "  lease threshold: {:.2}, tuned from cost (windowed precision {:.4}; {} decisions, {} down, {} up; a hit saved {}, a false positive cost {})\n",
                t.threshold,
                t.precision,
                t.decisions,
                t.moves_down,
                t.moves_up,
                us(t.hit_saved_ns),
                us(t.false_positive_ns)
            ));
        }
        s.push_str("  bytes moved:");
        for (peer, out, inn) in bytes {
            s.push_str(&format!(" ->{peer} {:.1} MB / <-{peer} {:.1} MB;", *out as f64 / 1e6, *inn as f64 / 1e6));
        }
        s.push('\n');
        let faults = [
            ("links lost", self.links_lost),
            ("connection set-ups failed (stale hellos)", self.connects_failed),
            ("suspicions", self.suspicions),
            ("directory revocations", self.revocations),
            ("peers declared dead", self.dead_declared),
            ("dead writers' marks cleared", self.marks_cleared),
            ("silent writers fenced", self.fences),
            ("fences narrowed (writer back)", self.fences_narrowed),
            ("frozen writes' fragments and rollbacks not taken", self.fenced_refused),
            ("rollbacks a fencing holder did not take", self.rollbacks_fenced),
            ("rollbacks sent again alone to a fencing holder", self.rollbacks_resent_alone),
            ("entries refused", self.entries_refused),
            ("entries replayed after restart", self.entries_replayed),
            ("store full", self.store_full),
            ("refusals from holders", self.refusals),
            ("directory jobs on peers", self.cas_jobs),
            ("directory CAS rounds", self.cas_rounds),
            ("directory jobs contended", self.cas_contended),
            ("directory jobs refused (job table full)", self.job_table_full),
            ("fragments refused by GETs", self.fragments_refused),
            ("forged frames", self.forged),
            ("decisions resent", self.notices_resent),
            ("fragments repaired", self.repairs_done),
        ];
        let shown: Vec<String> = faults.iter().filter(|(_, n)| *n > 0).map(|(w, n)| format!("{n} {w}")).collect();
        if !shown.is_empty() {
            s.push_str(&format!("  faults: {}\n", shown.join(", ")));
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_shows_the_tuned_threshold_only_when_tuned() {
        let mut s = NodeStats::new(3);
        assert!(!s.render(0, &[]).contains("lease threshold"));
        s.lease_tuning = Some(LeaseTuning {
            threshold: 0.65,
            decisions: 12,
            moves_down: 2,
            moves_up: 1,
            precision: 0.97,
            hit_saved_ns: Some(12_500.0),
            false_positive_ns: None,
        });
        let text = s.render(0, &[]);
        assert!(
            text.contains("lease threshold: 0.65, tuned from cost (windowed precision 0.9700; 12 decisions, 2 down, 1 up; a hit saved 12.5 us, a false positive cost -)"),
            "{text}"
        );
    }
}
