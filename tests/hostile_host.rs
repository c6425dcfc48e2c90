//! A hostile host B sharing one `prescient-dpu serve` process with an honest host A,
//! scribbling over B's whole region (random bytes, ring index words, malicious
//! descriptors, liveness words, re-attaching), against the same run with B idle.
//! A's every request completes exactly once, Ok, with its own user data (checked by
//! the bench's honest loop, which errors otherwise); A's longest gap stays within a
//! generous multiple of the reference measured in the same run; the DPU app's memory
//! and log volume stay bounded. The longer run is `prescient-dpu bench scribble`.

use prescient_dpu::bench::scribble::{run, ScribbleBench};

/// Seconds of each phase: the whole test is a few seconds.
const PHASE_SECONDS: f64 = 1.5;
/// A's longest gap under attack is within this multiple of the reference's longest
/// gap (or p99.9, whichever is larger). The stall this guards against was seconds
/// long; scheduling noise on a shared machine is a few times the reference.
const GAP_FACTOR: u64 = 50;
/// The DPU app's resident memory grows by at most this much during the attack, KiB
/// (nothing is allocated per request; B's region is 1 MiB, A's 0.5 MiB).
const RSS_GROWTH_KIB_MAX: u64 = 16 << 10;
/// Bytes the DPU app may log during the attack: a few rate-limited lines per
/// region (one per reason every few seconds), not one per refused descriptor.
const LOG_BYTES_MAX: u64 = 16 << 10;

#[test]
fn a_scribbling_host_cannot_stall_flood_or_lock_out_an_honest_one() {
    let bench = ScribbleBench { seconds: PHASE_SECONDS, seed: 0x5eed, dpu_binary: prescient::dpu_binary() };
    let report = run(&bench).unwrap_or_else(|e| panic!("{e}"));
    let (r, a) = (&report.reference, &report.attack);
    let summary = report.render();
    assert!(report.dpu_exit_ok, "the DPU app exits cleanly at SIGTERM\n{summary}");
    assert!(r.completions > 0 && a.completions > 0, "{summary}");
    assert!(a.scribbles > 1000, "the scribbler ran: {summary}");
    // Count-based: A keeps a fair share of its pace under attack.
    assert!(a.completions * 20 >= r.completions, "A's pace under attack: {summary}");
    let reference_gap = r.longest_gap_ns.max(r.latency.p999);
    assert!(a.longest_gap_ns <= GAP_FACTOR * reference_gap, "A's longest gap under attack: {summary}");
    assert!(a.rss_kib <= report.rss_kib_start + RSS_GROWTH_KIB_MAX, "DPU app memory: {summary}");
    assert!(a.log_bytes <= LOG_BYTES_MAX, "DPU app log volume under attack: {summary}");
    // The attack was seen and counted, per region.
    assert!(report.dpu_summary.contains("queue pairs fenced"), "{summary}");
}
