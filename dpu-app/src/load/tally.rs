//! What the nodes of a cluster counted, summed or merged across nodes for a report:
//! predictor counters, fault counters, per-stage write latencies, GET latencies on the
//! DPU side and bytes moved. Read-only: it reads `Node::stats` and nothing else.

use crate::cluster::run::inprocess::InProcess;
use crate::histogram::{Histogram, StageTimes};

/// The predictor's counters, summed over the nodes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PredictorCounts {
    /// Writes that found their key leased.
    pub hits: u64,
    /// Leases marked.
    pub leases: u64,
    /// Leases rolled back unused (false positives).
    pub rolled_back: u64,
    /// Leases rolled back for age.
    pub timed_out: u64,
    /// Leases not marked for lack of room.
    pub dropped: u64,
}

impl PredictorCounts {
    /// The sums over `cluster`'s running nodes now.
    pub fn of(cluster: &InProcess) -> Self {
        cluster.nodes().fold(Self::default(), |a, n| {
            let s = n.stats();
            Self {
                hits: a.hits + s.predictor_hits,
                leases: a.leases + s.leases_opened,
                rolled_back: a.rolled_back + s.leases_rolled_back,
                timed_out: a.timed_out + s.leases_timed_out,
                dropped: a.dropped + s.leases_dropped,
            }
        })
    }

    /// What was counted since `before` (taken from the same cluster).
    pub fn since(self, before: Self) -> Self {
        Self {
            hits: self.hits.saturating_sub(before.hits),
            leases: self.leases.saturating_sub(before.leases),
            rolled_back: self.rolled_back.saturating_sub(before.rolled_back),
            timed_out: self.timed_out.saturating_sub(before.timed_out),
            dropped: self.dropped.saturating_sub(before.dropped),
        }
    }
}

/// The lowest and highest tuned lease threshold over `cluster`'s running nodes now
/// (None: no node tunes one).
pub fn lease_thresholds(cluster: &InProcess) -> Option<(f32, f32)> {
    cluster.nodes().filter_map(|n| n.stats().lease_tuning.map(|t| t.threshold)).fold(None, |range, t| match range {
        None => Some((t, t)),
        Some((low, high)) => Some((low.min(t), high.max(t))),
    })
}

/// The fault counters of every node, summed, as (what, count), in a fixed order.
/// Each node's revocation at its own start is not counted.
pub fn faults(cluster: &InProcess) -> Vec<(&'static str, u64)> {
    let mut out: Vec<(&'static str, u64)> = vec![
        ("links lost", 0),
        ("suspicions", 0),
        ("directory revocations after start", 0),
        ("peers declared dead", 0),
        ("dead writers' marks cleared", 0),
        ("entries refused", 0),
        ("store full", 0),
        ("refusals from holders", 0),
        ("notices dropped", 0),
        ("fragments refused by GETs", 0),
        ("forged frames", 0),
        ("writes failed", 0),
        ("GETs failed", 0),
    ];
    for n in cluster.nodes() {
        let s = n.stats();
        let values = [
            s.links_lost,
            s.suspicions,
            s.revocations.saturating_sub(1),
            s.dead_declared,
            s.marks_cleared,
            s.entries_refused,
            s.store_full,
            s.refusals,
            s.notices_dropped,
            s.fragments_refused,
            s.forged,
            s.writes_failed,
            s.gets_failed,
        ];
        for (slot, v) in out.iter_mut().zip(values) {
            slot.1 += v;
        }
    }
    out
}

/// The counts of `now` minus those of `before` (both from [`faults`] of one cluster).
pub fn faults_since(now: &[(&'static str, u64)], before: &[(&'static str, u64)]) -> Vec<(&'static str, u64)> {
    now.iter()
        .map(|&(what, n)| (what, n.saturating_sub(before.iter().find(|b| b.0 == what).map_or(0, |b| b.1))))
        .collect()
}

/// The faults that happened, as one line ("none" if none did).
pub fn faults_line(faults: &[(&'static str, u64)]) -> String {
    let shown: Vec<String> = faults.iter().filter(|(_, n)| *n > 0).map(|(what, n)| format!("{n} {what}")).collect();
    if shown.is_empty() {
        "none".into()
    } else {
        shown.join(", ")
    }
}

/// Every node's per-stage write latencies, merged.
pub fn stage_times(cluster: &InProcess) -> StageTimes {
    let mut times = StageTimes::new();
    for n in cluster.nodes() {
        times.merge(&n.stats().writes);
    }
    times
}

/// Every node's DPU-side GET latencies, merged: (gather, total).
pub fn get_times(cluster: &InProcess) -> (Histogram, Histogram) {
    let (mut gather, mut total) = (Histogram::new(), Histogram::new());
    for n in cluster.nodes() {
        gather.merge(&n.stats().gets_gather);
        total.merge(&n.stats().gets_total);
    }
    (gather, total)
}

/// Per node: (node, bytes out, bytes in) summed over its peers.
pub fn bytes_per_node(cluster: &InProcess) -> Vec<(u8, u64, u64)> {
    cluster
        .nodes()
        .map(|n| {
            let (out, inn) = n.bytes_moved().fold((0, 0), |(o, i), (_, po, pi)| (o + po, i + pi));
            (n.id(), out, inn)
        })
        .collect()
}

/// One line on the nodes' fragment stores: size, the fullest one's records in use, the
/// share in spill sets, GETs that READ spill sets and fragments refused for room.
pub fn stores_line(cluster: &InProcess) -> String {
    let (mut fullest, mut bytes, mut spill_reads, mut refused) = (None, 0, 0, 0);
    for n in cluster.nodes() {
        let (usage, file_bytes) = n.store_usage();
        bytes = file_bytes;
        spill_reads += n.stats().get_spill_rounds;
        refused += n.stats().store_full;
        let share = usage.live as f64 / usage.records.max(1) as f64;
        if fullest.is_none_or(|(s, _, _)| share > s) {
            fullest = Some((share, n.id(), usage));
        }
    }
    let Some((share, node, usage)) = fullest else { return "stores: no node up".to_owned() };
    format!(
        "stores: {:.0} MB a node; fullest node {node}: {:.1} % of {} records in use, {:.2} % of them in spill sets; \
         {spill_reads} GETs READ spill sets, {refused} fragments refused for room",
        bytes as f64 / 1e6,
        100.0 * share,
        usage.records,
        100.0 * usage.spilled as f64 / usage.live.max(1) as f64
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_since_a_snapshot_never_underflow() {
        let before = PredictorCounts { hits: 5, leases: 9, rolled_back: 2, timed_out: 1, dropped: 0 };
        let after = PredictorCounts { hits: 8, leases: 20, rolled_back: 2, timed_out: 3, dropped: 1 };
        assert_eq!(
            after.since(before),
            PredictorCounts { hits: 3, leases: 11, rolled_back: 0, timed_out: 2, dropped: 1 }
        );
        assert_eq!(before.since(after).hits, 0);
    }

    #[test]
    fn faults_since_a_snapshot_subtract_by_name() {
        let before = [("links lost", 1), ("store full", 0)];
        let now = [("links lost", 3), ("store full", 2)];
        assert_eq!(faults_since(&now, &before), vec![("links lost", 2), ("store full", 2)]);
    }

    #[test]
    fn the_faults_line_names_only_what_happened() {
        assert_eq!(faults_line(&[("links lost", 0), ("store full", 0)]), "none");
        assert_eq!(
            faults_line(&[("links lost", 2), ("store full", 0), ("suspicions", 1)]),
            "2 links lost, 1 suspicions"
        );
    }
}
