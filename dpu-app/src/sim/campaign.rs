//! A campaign: many seeds of one configuration, run on several threads at once. Each
//! seed is its own deterministic simulation (nothing is shared between runs), so the
//! threads change only how soon the campaign ends, never what a seed does.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use super::{run, SimOptions, SimReport, Violation};

/// Runs `base` once per seed of `seeds`, `jobs` at a time (at least one). `progress`
/// is called, under a lock, after each seed that passed, with how many have passed and
/// their merged report. Once a seed fails, only seeds before it in `seeds` still start,
/// and the first failing seed in `seeds` order is reported: the verdict a run of one
/// thread would give, whatever the timing of the threads.
pub fn run_seeds(
    base: &SimOptions,
    seeds: &[u64],
    jobs: usize,
    progress: impl Fn(usize, &SimReport) + Sync,
) -> Result<SimReport, Violation> {
    let (report, violations) = campaign(base, seeds, jobs, false, progress, |_| {});
    match violations.into_iter().next() {
        Some(v) => Err(v),
        None => Ok(report),
    }
}

/// Runs every seed of `seeds`, failing or not (a hunt for failures): `failed` is
/// called, under a lock, with each violation as it is found. Returns the merged report
/// of the seeds that passed and every violation, in `seeds` order.
pub fn run_all_seeds(
    base: &SimOptions,
    seeds: &[u64],
    jobs: usize,
    progress: impl Fn(usize, &SimReport) + Sync,
    failed: impl Fn(&Violation) + Sync,
) -> (SimReport, Vec<Violation>) {
    campaign(base, seeds, jobs, true, progress, failed)
}

fn campaign(
    base: &SimOptions,
    seeds: &[u64],
    jobs: usize,
    keep_going: bool,
    progress: impl Fn(usize, &SimReport) + Sync,
    failed: impl Fn(&Violation) + Sync,
) -> (SimReport, Vec<Violation>) {
    let next = AtomicUsize::new(0);
    // The index in `seeds` of the first seed known to fail.
    let first_failed = AtomicUsize::new(usize::MAX);
    let done = Mutex::new((0usize, SimReport::default()));
    let violations = Mutex::new(Vec::<(usize, Violation)>::new());
    let worker = || loop {
        let i = next.fetch_add(1, Ordering::Relaxed);
        if !keep_going && i > first_failed.load(Ordering::Acquire) {
            return;
        }
        let Some(&seed) = seeds.get(i) else { return };
        let opts = SimOptions { seed, ..base.clone() };
        // A panic is a failure of its seed like any broken invariant: reported with
        // the seed and its replay command, not the end of the campaign.
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(&opts))).unwrap_or_else(|panic| {
            let what = panic
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| panic.downcast_ref::<&str>().copied())
                .unwrap_or("a panic without a message");
            Err(Violation { options: opts.clone(), step: 0, what: format!("panicked (the step is not known): {what}") })
        });
        match outcome {
            Ok(report) => {
                let mut done = done.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                done.0 += 1;
                done.1.merge(&report);
                progress(done.0, &done.1);
            }
            Err(v) => {
                first_failed.fetch_min(i, Ordering::AcqRel);
                let mut violations = violations.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                failed(&v);
                violations.push((i, v));
            }
        }
    };
    let threads = jobs.clamp(1, seeds.len().max(1));
    std::thread::scope(|s| {
        for _ in 1..threads {
            s.spawn(worker);
        }
        worker();
    });
    let mut violations = violations.into_inner().unwrap_or_else(std::sync::PoisonError::into_inner);
    violations.sort_by_key(|(i, _)| *i);
    let report = done.into_inner().unwrap_or_else(std::sync::PoisonError::into_inner).1;
    (report, violations.into_iter().map(|(_, v)| v).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> SimOptions {
        SimOptions { steps: 400, ..SimOptions::new(0, std::env::temp_dir().join("prescient-sim-campaign-test")) }
    }

    #[test]
    fn threads_change_nothing_a_seed_does() {
        let seeds: Vec<u64> = (40..46).collect();
        let one = run_seeds(&base(), &seeds, 1, |_, _| {}).expect("seeds pass");
        let three = run_seeds(&base(), &seeds, 3, |_, _| {}).expect("seeds pass");
        assert_eq!(one.line(), three.line());
        assert_eq!(one.writes, three.writes);
    }

    #[test]
    fn keep_going_runs_and_reports_every_seed() {
        let bad = SimOptions { nodes: 3, ..base() };
        let (report, violations) = run_all_seeds(&bad, &[9, 4, 7, 2], 2, |_, _| {}, |_| {});
        let failed: Vec<u64> = violations.iter().map(|v| v.options.seed).collect();
        assert_eq!(failed, vec![9, 4, 7, 2]);
        assert_eq!(report.writes.0, 0, "no seed ran a write");
    }

    #[test]
    fn the_first_failing_seed_in_order_is_reported() {
        // Three nodes cannot hold RS(3,2): every seed fails at configuration.
        let bad = SimOptions { nodes: 3, ..base() };
        for _ in 0..20 {
            let err = run_seeds(&bad, &[9, 4, 7, 2], 3, |_, _| {}).expect_err("no seed can run");
            assert_eq!(err.options.seed, 9);
        }
    }
}
