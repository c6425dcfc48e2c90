//! The soak's check of the stamp ledgers (`soak --ordering sequencer`): once every node
//! has stopped (two of them by `kill -9`), the files each left must agree. For every
//! write a node's fate ring still records decided, the holders' stamp ledgers
//! (`cluster/format/ledger.rs`) must show it Held (accepted, not rolled back) on at
//! least a quorum of the nodes if it is Committed, and on fewer if it is Aborted: what
//! a writer's fate will be learned from once it is gone for good. The holders' rule
//! (`cluster/holders_rule.rs`), applied to every ledger but the writer's own,
//! must take each Committed write for a write and each Aborted one for a no-op. The files are read
//! as bytes, as a peer's READ would see them, after a run that killed nodes every few
//! seconds, so what a node wrote before each acknowledgement is what survived.

use std::path::PathBuf;

use crate::cluster::format::fates::{self, FateEntry, FateKind};
use crate::cluster::format::ledger::{self, Ledger, LedgerEntry, LedgerState};
use crate::cluster::holders_rule::{self, Verdict};

/// The most problems kept for the report (the count is exact).
const PROBLEMS_KEPT: usize = 8;

/// What the check found.
#[derive(Clone, Debug, Default)]
pub struct LedgerCheck {
    /// Writes the rings record Committed, checked.
    pub committed: u64,
    /// Writes the rings record Aborted, checked.
    pub aborted: u64,
    /// Writes the rings still record Pending (a rollback waiting for holders).
    pub pending: u64,
    /// The fewest ledgers holding a Committed write, and the most holding an Aborted
    /// one.
    pub committed_fewest: Option<u64>,
    /// See `committed_fewest`.
    pub aborted_most: u64,
    /// Problems (each a sentence), the first `PROBLEMS_KEPT` (8) of them.
    pub problems: Vec<String>,
    /// Problems in all.
    pub problem_count: usize,
}

impl LedgerCheck {
    fn problem(&mut self, what: String) {
        self.problem_count += 1;
        if self.problems.len() < PROBLEMS_KEPT {
            self.problems.push(what);
        }
    }
}

/// One node's files, read whole.
struct Files {
    ring: Vec<u8>,
    ledger: Vec<u8>,
}

/// Checks the fate rings and stamp ledgers in `dirs` (node `i`'s data folder at `i`)
/// against each other, with `quorum`.
pub fn check(dirs: &[PathBuf], quorum: u64) -> LedgerCheck {
    let mut out = LedgerCheck::default();
    let mut files = Vec::with_capacity(dirs.len());
    for (i, dir) in dirs.iter().enumerate() {
        let read = |name: &str| {
            std::fs::read(dir.join(name)).map_err(|e| format!("node {i}'s {}: {e}", dir.join(name).display()))
        };
        match (read("fates.prfate"), read("ledger.prledger")) {
            (Ok(ring), Ok(ledger)) => files.push(Files { ring, ledger }),
            (Err(e), _) | (_, Err(e)) => {
                out.problem(e);
                return out;
            }
        }
    }
    let entries = (files[0].ring.len().saturating_sub(fates::ENTRIES_AT) / fates::ENTRY_LEN) as u32;
    for (w, f) in files.iter().enumerate() {
        for e in f.ring[fates::ENTRIES_AT..].chunks_exact(fates::ENTRY_LEN).filter_map(FateEntry::parse) {
            match e.kind {
                FateKind::Pending => out.pending += 1,
                FateKind::Committed | FateKind::Aborted => check_write(&mut out, &files, w as u8, &e, entries, quorum),
                _ => {}
            }
        }
    }
    out
}

/// Writer `w`'s decided write `e` against every node's ledger.
fn check_write(out: &mut LedgerCheck, files: &[Files], w: u8, e: &FateEntry, entries: u32, quorum: u64) {
    let stamp = e.version << 8 | u64::from(w);
    let at = Ledger::offset(entries, w, u64::from(e.write_seq));
    let mut held_by = 0u32;
    for (i, f) in files.iter().enumerate() {
        let l = f.ledger.get(at..at + ledger::ENTRY_LEN).and_then(LedgerEntry::parse);
        if l.is_some_and(|l| l.is_of(e.write_seq, stamp) && l.state == LedgerState::Held) {
            held_by |= 1 << i;
        }
    }
    let held = u64::from(held_by.count_ones());
    // The soak's RS(k, m) spans its k + m nodes: every node holds a fragment of every
    // write. The holders' rule, as the others would apply it were w gone for good.
    let all = (1u32 << files.len()) - 1;
    let verdict = holders_rule::verdict(quorum as u32, all, w, all & !(1 << w), held_by);
    let want = if e.kind == FateKind::Committed { Verdict::Write } else { Verdict::NoOp };
    if verdict != want {
        out.problem(format!(
            "node {w} recorded stamp {:#x} {:?}, but the holders' rule takes it for {verdict:?} were node {w} gone (held by {held_by:#b}, quorum {quorum})",
            e.version, e.kind
        ));
    }
    if e.kind == FateKind::Committed {
        out.committed += 1;
        out.committed_fewest = Some(out.committed_fewest.map_or(held, |f| f.min(held)));
        // The writer counted whatever its own ledger says: a write it took from the
        // order (the holders' rule decided it, `protocol/ledgers.rs`) after rolling its
        // own record back is held by the rule's threshold of others.
        let with_writer = u64::from((held_by | 1 << w).count_ones());
        if with_writer < quorum {
            out.problem(format!(
                "node {w} recorded stamp {:#x} Committed, but only {held} ledgers hold it (quorum {quorum})",
                e.version
            ));
        }
    } else {
        out.aborted += 1;
        out.aborted_most = out.aborted_most.max(held);
        if held >= quorum {
            out.problem(format!(
                "node {w} recorded stamp {:#x} Aborted, but {held} ledgers still hold it (quorum {quorum})",
                e.version
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::cluster::format::fates::FateRing;
    use crate::cluster::sequence::version;
    use crate::fabric::emu::{ModelConfig, Network, SystemClock};

    #[test]
    fn a_decided_write_the_ledgers_contradict_is_a_problem() {
        let root = std::env::temp_dir().join(format!("prescient-soak-ledgers-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let dirs: Vec<PathBuf> = (0..3).map(|i| root.join(format!("node{i}"))).collect();
        let net = Network::new(ModelConfig::ideal(), Arc::new(SystemClock::new())).unwrap();
        let fabric = net.node().unwrap();
        let mut ledgers = Vec::new();
        let mut rings = Vec::new();
        for (i, d) in dirs.iter().enumerate() {
            std::fs::create_dir_all(d).unwrap();
            ledgers.push(Ledger::open(&fabric, &d.join("ledger.prledger"), i as u8, 3, 8).unwrap());
            rings.push(FateRing::open(&fabric, &d.join("fates.prfate"), i as u8, 8).unwrap());
        }
        // Node 0's writes 1 (committed, held by two of three: a quorum of 2) and 2
        // (aborted, yet still held by two), and 3 (Pending).
        let stamp = |s: u64| version(1, s).unwrap() << 8;
        for (seq, s) in [(1, 1), (2, 2)] {
            rings[0].append_write(version(1, s).unwrap(), 7, false, seq).unwrap();
            for l in &ledgers[..2] {
                l.accept(0, seq, stamp(s), 7, false);
            }
        }
        rings[0].append_write(version(1, 3).unwrap(), 7, false, 3).unwrap();
        assert!(rings[0].settle(version(1, 1).unwrap(), FateKind::Committed));
        assert!(rings[0].settle(version(1, 2).unwrap(), FateKind::Aborted));
        drop((ledgers, rings));
        let found = check(&dirs, 2);
        assert_eq!((found.committed, found.aborted, found.pending), (1, 1, 1));
        assert_eq!((found.committed_fewest, found.aborted_most), (Some(2), 2));
        assert_eq!(found.problem_count, 2, "{:?}", found.problems);
        assert!(
            found.problems[0].contains("Aborted, but the holders' rule takes it for Write"),
            "{:?}",
            found.problems
        );
        assert!(found.problems[1].contains("Aborted, but 2 ledgers still hold it"), "{:?}", found.problems);
        let _ = std::fs::remove_dir_all(&root);
    }
}
