//! The soak's check of the change feeds (`soak --ordering sequencer`): once the writers
//! drained and every node is up, every node's feed, read through the shim's
//! `FeedReader` as a host would, must be one order: versions rising, the same entries
//! as every other node's where their windows overlap, and every acknowledged write
//! inside its window.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use prescient_shim::feed::{FeedEntry, FeedReadError, FeedReader};

/// The most problems kept for the report (the count is exact).
const PROBLEMS_KEPT: usize = 8;

/// What the check found.
#[derive(Clone, Debug, Default)]
pub struct FeedCheck {
    /// Entries each node's feed holds (its window: above its `dropped`).
    pub entries: Vec<usize>,
    /// Versions of the window every feed holds, compared entry by entry.
    pub common: usize,
    /// Acknowledged writes found in each feed whose window covers them, summed over
    /// the feeds.
    pub acked_found: u64,
    /// Acknowledged writes below a feed's window (it marked them missing: its order
    /// stalled longer than the fate rings keep, or no peer's feed held them; or it
    /// wrapped), summed over the feeds.
    pub acked_below: u64,
    /// Problems (each a sentence), the first `PROBLEMS_KEPT` (8) of them.
    pub problems: Vec<String>,
    /// Problems in all.
    pub problem_count: usize,
}

impl FeedCheck {
    fn problem(&mut self, what: String) {
        self.problem_count += 1;
        if self.problems.len() < PROBLEMS_KEPT {
            self.problems.push(what);
        }
    }
}

/// One node's feed as read: its entries (rising versions) and the version below which
/// it no longer holds any.
struct Feed {
    entries: Vec<FeedEntry>,
    dropped: u64,
}

/// Reads node `node`'s feed at `path` whole, waiting (up to `within`) until it holds
/// a version at or above `top`.
fn read_feed(node: usize, path: &Path, top: u64, within: Duration) -> Result<Feed, String> {
    let deadline = Instant::now() + within;
    let mut reader = loop {
        match FeedReader::open(path) {
            Ok(r) => break r,
            Err(e) if Instant::now() >= deadline => return Err(format!("node {node}'s feed: {e}")),
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    };
    let mut feed = Feed { entries: Vec::new(), dropped: reader.dropped() };
    let mut out = [FeedEntry::default(); 256];
    loop {
        let after = feed.entries.last().map_or(feed.dropped, |e| e.version);
        match reader.read(after, &mut out) {
            Ok(0) if after >= top => return Ok(feed),
            Ok(0) if Instant::now() >= deadline => {
                return Err(format!(
                    "node {node}'s feed reached version {after:#x}, not the newest acknowledged write's {top:#x}, within {:.0} s",
                    within.as_secs_f64()
                ))
            }
            Ok(0) => std::thread::sleep(Duration::from_millis(50)),
            Ok(got) => feed.entries.extend_from_slice(&out[..got]),
            // The feed wrapped past what was read meanwhile: read its window afresh.
            Err(FeedReadError::CursorTooOld { dropped, .. }) => {
                feed.entries.retain(|e| e.version > dropped);
                feed.dropped = dropped;
            }
            Err(e) => return Err(format!("node {node}'s feed: {e}")),
        }
    }
}

/// Checks the feeds at `paths` (node `i`'s at `paths[i]`) against `acked`, the
/// versions of the acknowledged writes as feeds hold them, waiting up to `within` for
/// every feed to reach the newest.
pub fn check(paths: &[PathBuf], acked: &BTreeSet<u64>, within: Duration) -> FeedCheck {
    let mut check = FeedCheck::default();
    let top = acked.last().copied().unwrap_or(0);
    let mut feeds = Vec::new();
    for (i, path) in paths.iter().enumerate() {
        match read_feed(i, path, top, within) {
            Ok(feed) => feeds.push(feed),
            Err(e) => check.problem(e),
        }
    }
    if feeds.len() < paths.len() {
        return check;
    }
    for (i, feed) in feeds.iter().enumerate() {
        check.entries.push(feed.entries.len());
        if let Some(w) = feed.entries.windows(2).find(|w| w[0].version >= w[1].version) {
            check.problem(format!("node {i}'s feed does not rise: {:#x} then {:#x}", w[0].version, w[1].version));
        }
        let last = feed.entries.last().map_or(feed.dropped, |e| e.version);
        let held: BTreeSet<u64> = feed.entries.iter().map(|e| e.version).collect();
        check.acked_below += acked.range(..=feed.dropped).count() as u64;
        // A feed that marked missing everything it had holds nothing above its mark.
        let above = if last > feed.dropped { acked.range(feed.dropped + 1..=last) } else { acked.range(0..0) };
        for &v in above {
            if held.contains(&v) {
                check.acked_found += 1;
            } else {
                check.problem(format!("node {i}'s feed lacks the acknowledged write {v:#x}"));
            }
        }
    }
    // The window every feed holds: above every `dropped`, up to the lowest last.
    let low = feeds.iter().map(|f| f.dropped).max().unwrap_or(0);
    let high = feeds.iter().map(|f| f.entries.last().map_or(f.dropped, |e| e.version)).min().unwrap_or(0);
    let window = |f: &Feed| -> Vec<(u64, u64, bool)> {
        f.entries
            .iter()
            .filter(|e| e.version > low && e.version <= high)
            .map(|e| (e.version, e.key_hash, e.tombstone))
            .collect()
    };
    let first = window(&feeds[0]);
    check.common = first.len();
    for (i, feed) in feeds.iter().enumerate().skip(1) {
        let mine = window(feed);
        if mine != first {
            let at = mine.iter().zip(&first).position(|(a, b)| a != b).unwrap_or(mine.len().min(first.len()));
            check.problem(format!(
                "node {i}'s feed differs from node 0's in the window ({low:#x}, {high:#x}] at entry {at} of {} / {}: {:x?} / {:x?}",
                mine.len(),
                first.len(),
                mine.get(at),
                first.get(at)
            ));
        }
    }
    check
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::format::feed::FeedLog;

    /// Feeds of nodes 0..n in a fresh folder, each holding `versions[i]` (key hash: the
    /// version times 3), node `i`'s marked missing up to `marks[i]`.
    fn feeds(name: &str, versions: &[&[u64]], marks: &[u64]) -> (PathBuf, Vec<PathBuf>) {
        let dir = std::env::temp_dir().join(format!("prescient-soak-feeds-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mut paths = Vec::new();
        for (i, (held, &mark)) in versions.iter().zip(marks).enumerate() {
            let path = dir.join(format!("feed{i}.prfeed"));
            let mut log = FeedLog::open(&path, i as u8, 64).unwrap();
            for &v in held.iter() {
                log.append(v, v * 3, false).unwrap();
            }
            log.skip_to(mark).unwrap();
            paths.push(path);
        }
        (dir, paths)
    }

    #[test]
    fn one_order_holding_every_acknowledged_write_passes() {
        let (dir, paths) = feeds("same", &[&[1, 2, 4, 5], &[1, 2, 4, 5], &[4, 5]], &[0, 0, 3]);
        let acked: BTreeSet<u64> = [1, 4, 5].into();
        let c = check(&paths, &acked, Duration::from_millis(10));
        assert_eq!((c.problem_count, c.common, c.acked_found, c.acked_below), (0, 2, 8, 1), "{c:?}");
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn a_feed_that_marked_everything_missing_holds_nothing_to_check() {
        // A 600 s soak's check panicked on such a feed (an empty range turned around).
        let (dir, paths) = feeds("marked", &[&[1, 2, 4, 5], &[1, 2]], &[0, 5]);
        let acked: BTreeSet<u64> = [1, 4, 5].into();
        let c = check(&paths, &acked, Duration::from_millis(10));
        assert_eq!((c.problem_count, c.common, c.acked_found, c.acked_below), (0, 0, 3, 3), "{c:?}");
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn a_missing_write_a_different_order_and_a_short_feed_are_each_found() {
        let acked: BTreeSet<u64> = [1, 4, 5].into();
        let (dir, paths) = feeds("lacks", &[&[1, 2, 4, 5], &[1, 2, 5]], &[0, 0]);
        let c = check(&paths, &acked, Duration::from_millis(10));
        assert!(c.problems.iter().any(|p| p.contains("node 1's feed lacks the acknowledged write 0x4")), "{c:?}");
        assert!(c.problems.iter().any(|p| p.contains("differs from node 0's")), "{c:?}");
        let _ = std::fs::remove_dir_all(dir);
        let (dir, paths) = feeds("short", &[&[1, 2, 4, 5], &[1, 2, 4]], &[0, 0]);
        let c = check(&paths, &acked, Duration::from_millis(10));
        assert_eq!(c.problem_count, 1, "{c:?}");
        assert!(c.problems[0].contains("node 1's feed reached version 0x4, not the newest"), "{c:?}");
        let _ = std::fs::remove_dir_all(dir);
    }
}
