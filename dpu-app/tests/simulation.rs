//! The deterministic simulation in CI: a few hundred seeds of the in-process cluster on
//! a manual clock with random crashes, restarts, delays, losses and partitions, every
//! invariant checked after every step (see `prescient_dpu::sim`). More seeds:
//! `cargo run --release -p prescient-dpu -- sim --seeds 5000`. A failure prints the
//! command that replays its seed.

use prescient_dpu::sim::{run, SimOptions};

fn seeds(from: u64, count: u64, predictive: bool) {
    let dir = std::env::temp_dir().join("prescient-sim-tests");
    let mut total = prescient_dpu::sim::SimReport::default();
    for seed in from..from + count {
        let mut opts = SimOptions::new(seed, dir.clone());
        opts.predictive = predictive;
        match run(&opts) {
            Ok(r) => total.merge(&r),
            Err(v) => panic!("{v}"),
        }
    }
    // The runs did real work: faults happened, writes committed, reads were checked.
    assert!(total.writes.1 > 100 * count as usize, "{}", total.line());
    assert!(total.reads_checked > 100 * count, "{}", total.line());
    assert!(total.crashes > 0 && total.partitions > 0, "{}", total.line());
    if predictive {
        assert!(total.leases.1 > 0, "leases were found by writes: {}", total.line());
    }
    eprintln!("seeds {from}..{}: {}", from + count, total.line());
}

#[test]
fn seeds_0_to_60() {
    seeds(0, 60, false);
}

#[test]
fn seeds_60_to_120() {
    seeds(60, 60, false);
}

#[test]
fn seeds_120_to_180() {
    seeds(120, 60, false);
}

#[test]
fn seeds_180_to_240() {
    seeds(180, 60, false);
}

#[test]
fn predictive_seeds_500_to_560() {
    seeds(500, 60, true);
}

#[test]
fn a_seed_replays_exactly() {
    let dir = std::env::temp_dir().join("prescient-sim-replay");
    let a = run(&SimOptions::new(42, dir.clone())).expect("seed 42");
    let b = run(&SimOptions::new(42, dir)).expect("seed 42 again");
    assert_eq!(a.line(), b.line(), "the same seed, the same run");
}

/// Seeds that once broke an invariant, kept as they were found (a code change moves
/// every run, so they guard the fix only while the run stays close; the seed ranges
/// above do the rest).
#[test]
fn seeds_that_once_failed() {
    // 6311: a repair retried while its finished slot lingered was taken as running,
    // and a committed write was left one fragment short of surviving m crashes.
    // 30133 (predictive): a writer's own store refused its fragment (a set full of
    // undecided versions of a hot key), the write committed on the others, and nothing
    // repaired a writer's own fragment: with two other holders down it was unreadable.
    const ONCE_FAILED: &[(u64, bool)] = &[(6311, false), (30133, true)];
    for &(seed, predictive) in ONCE_FAILED {
        let dir = std::env::temp_dir().join("prescient-sim-regressions");
        let mut opts = SimOptions::new(seed, dir);
        opts.predictive = predictive;
        if let Err(v) = run(&opts) {
            panic!("{v}");
        }
    }
}
