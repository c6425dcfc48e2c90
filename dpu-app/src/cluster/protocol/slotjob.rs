//! The DPU side of the cache-directory protocol: jobs that move one slot word of one
//! host's directory by compare-and-swap, following the rules of
//! `prescient_shim::directory` (versions only move forward).
//!
//! A job knows what it wants ([`Intent`]) but not the word in the slot: it CASes from
//! a guess (the last word this node saw there, and for an Invalid word also the Valid
//! word a reader's refill makes of it, both in one round trip), and when the guesses
//! were wrong it retries from the word the CAS returned. The remote CASes are posted
//! by the node; this module only decides what to post and what the results mean.
//!
//! It also names a job's [`Owner`] and how its start went ([`Started`]): the jobs role
//! (`jobs.rs`) runs the table, and the writer and the leases, whose marks the jobs are,
//! see only these.

use std::sync::atomic::{AtomicU64, Ordering};

use prescient_shim::directory::{self, SlotState, SlotWord};

use super::slots::{JobId, LeaseId, WriteId};
use crate::limits::JOB_ROUNDS_MAX;

/// Who a directory job reports to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Owner {
    /// The mark of a write in the job's host's directory.
    Write(WriteId),
    /// The mark of a lease in the job's host's directory.
    Lease(LeaseId),
    /// Nobody (a commit or rollback whose owner is gone).
    Detached,
}

/// How starting a directory job went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Started {
    /// It finished at once (the local directory, or no room for it).
    Finished(Finished),
    /// It runs as job `0`; the owner hears how it ends when it does.
    Running(JobId),
}

/// What a job wants done to a slot word.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Intent {
    /// Announce a write (or a lease) of `version`: `Pending(max(current, version), me)`.
    Mark {
        /// The write's version.
        version: u64,
    },
    /// The write committed: the word this node placed becomes Invalid.
    Commit {
        /// The Pending word this node's mark placed.
        placed: SlotWord,
    },
    /// The write failed or the lease expired unused: the placed word goes back to
    /// the state it replaced.
    Rollback {
        /// The word this node placed.
        placed: SlotWord,
        /// What the mark replaced.
        prior: SlotState,
    },
    /// Invalidate after commit (the baseline policy): the word always changes, so a
    /// reader's refill from an older Invalid word cannot revalidate a stale copy.
    Invalidate {
        /// The write's version.
        version: u64,
    },
}

impl Intent {
    /// The word to CAS in over `current`, or `None` if nothing needs to change.
    pub fn apply(&self, current: SlotWord, me: u8) -> Option<SlotWord> {
        match *self {
            Intent::Mark { version } => Some(directory::mark(current, version, me)),
            Intent::Commit { placed } => directory::commit(current, placed),
            Intent::Rollback { placed, prior } => directory::rollback(current, placed, prior),
            Intent::Invalidate { version } => Some(SlotWord {
                state: SlotState::Invalid,
                writer: me,
                version: current.version.saturating_add(1).max(version).min(directory::VERSION_MAX),
            }),
        }
    }
}

/// How a job ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Finished {
    /// The CAS took: the slot held `replaced` and now holds `placed`.
    Done {
        /// The word now in the slot.
        placed: SlotWord,
        /// The word it replaced.
        replaced: SlotWord,
    },
    /// The slot already was where the intent wanted it (`current`).
    NotNeeded {
        /// The word seen.
        current: SlotWord,
    },
    /// The peer could not be reached (or the job could not run): the owner must
    /// fence the host off.
    Failed,
    /// The slot changed under every one of [`JOB_ROUNDS_MAX`] rounds: others' CASes took
    /// (the host is reachable). The caller may start again from `current`.
    Contended {
        /// The newest word seen.
        current: SlotWord,
    },
}

/// What to do next for a job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Post CASes `expected -> swap` for each guess (at most two; `None` unused).
    Post([Option<(u64, u64)>; 2]),
    /// More CAS results are due.
    Wait,
    /// The job is over.
    Finished(Finished),
}

/// One slot job.
#[derive(Clone, Copy, Debug)]
pub struct Job {
    intent: Intent,
    me: u8,
    attempts: u8,
    /// CASes of the current round: (expected, swap, result) per guess.
    round: [Option<(u64, u64, Option<u64>)>; 2],
    failed: bool,
    /// What a retry round aims for instead of `intent`, if set (see [`Job::retry_as`]).
    retry_as: Option<Intent>,
}

impl Job {
    /// A job for `intent` by node `me` starting from the guessed word `guess`.
    /// Returns the job and its first step (always a post).
    pub fn start(intent: Intent, me: u8, guess: u64) -> (Self, Step) {
        let guessed = SlotWord::unpack(guess);
        let mut guesses = [Some(guess), None];
        // An Invalid word is what a reader refills into Valid at the same version:
        // guess both in one round trip (the second CAS runs after the first on the
        // same queue pair, so at most one of them takes).
        if guessed.state == SlotState::Invalid {
            guesses[1] = Some(SlotWord { state: SlotState::Valid, ..guessed }.pack());
        }
        Self::start_guessing(intent, me, guesses)
    }

    /// A job whose first round tries both `guesses` (in order, on one queue pair: at
    /// most one takes, as the first's swap is never the second's expected word).
    pub fn start_guessing(intent: Intent, me: u8, guesses: [Option<u64>; 2]) -> (Self, Step) {
        let mut job = Self { intent, me, attempts: 0, round: [None, None], failed: false, retry_as: None };
        let guesses = match guesses {
            [Some(a), Some(b)] if a == b => [Some(a), None],
            [None, b] => [b, None],
            g => g,
        };
        let step = job.post(guesses);
        (job, step)
    }

    /// The word the slot holds once the current round's first changing CAS takes: what
    /// a CAS posted behind it on the same queue pair should expect.
    pub fn expected_result(&self) -> Option<SlotWord> {
        self.round
            .iter()
            .flatten()
            .find(|(expected, swap, _)| expected != swap)
            .map(|(_, swap, _)| SlotWord::unpack(*swap))
    }

    /// The intent the job works for now (it changes when a retry takes up
    /// [`Job::retry_as`]).
    pub fn intent(&self) -> Intent {
        self.intent
    }

    /// Makes the next retry round, if one is needed, aim for `intent` instead: a round
    /// that already flew keeps its own. A write decided while its mark was still
    /// missing the slot's word retries as the commit's invalidation, saving the round
    /// trip of placing Pending only to turn it Invalid.
    pub fn retry_as(&mut self, intent: Intent) {
        self.retry_as = Some(intent);
    }

    fn post(&mut self, guesses: [Option<u64>; 2]) -> Step {
        self.attempts += 1;
        let mut out = [None, None];
        for (i, g) in guesses.iter().enumerate() {
            self.round[i] = None;
            // A second guess equal to the first's swap would take too, right after it:
            // never post it.
            if i == 1 && self.round[0].is_some_and(|(_, swap, _)| Some(swap) == *g) {
                continue;
            }
            if let Some(expected) = *g {
                let current = SlotWord::unpack(expected);
                // A guess the intent would not change is still posted as an identity
                // CAS: its result tells us the real word.
                let swap = self.intent.apply(current, self.me).map_or(expected, SlotWord::pack);
                self.round[i] = Some((expected, swap, None));
                out[i] = Some((expected, swap));
            }
        }
        Step::Post(out)
    }

    /// The CAS of guess `which` came back with the word the slot held (`old`), or
    /// failed on the fabric (`None`).
    pub fn on_result(&mut self, which: usize, old: Option<u64>) -> Step {
        let Some(entry) = self.round.get_mut(which).and_then(Option::as_mut) else {
            return Step::Wait;
        };
        match old {
            Some(v) => entry.2 = Some(v),
            None => {
                self.failed = true;
                entry.2 = Some(entry.0 ^ u64::MAX);
            }
        }
        if self.round.iter().flatten().any(|e| e.2.is_none()) {
            return Step::Wait;
        }
        if self.failed {
            return Step::Finished(Finished::Failed);
        }
        // Did one take?
        for (expected, swap, got) in self.round.iter().flatten() {
            if *got == Some(*expected) {
                let replaced = SlotWord::unpack(*expected);
                return Step::Finished(if swap == expected {
                    Finished::NotNeeded { current: replaced }
                } else {
                    Finished::Done { placed: SlotWord::unpack(*swap), replaced }
                });
            }
        }
        // Neither: retry from the newest word seen (the later CAS ran last).
        let latest = self.round.iter().flatten().last().and_then(|e| e.2).expect("a result per posted CAS");
        let current = SlotWord::unpack(latest);
        if let Some(intent) = self.retry_as.take() {
            self.intent = intent;
        }
        if self.intent.apply(current, self.me).is_none() {
            return Step::Finished(Finished::NotNeeded { current });
        }
        if self.attempts >= JOB_ROUNDS_MAX {
            return Step::Finished(Finished::Contended { current });
        }
        self.post([Some(latest), None])
    }
}

/// Runs `intent` on a slot word of this node's own host directory (no fabric).
pub fn run_local(word: &AtomicU64, intent: Intent, me: u8) -> Finished {
    let mut current = word.load(Ordering::Acquire);
    for _ in 0..JOB_ROUNDS_MAX {
        let Some(next) = intent.apply(SlotWord::unpack(current), me) else {
            return Finished::NotNeeded { current: SlotWord::unpack(current) };
        };
        let next = next.pack();
        match word.compare_exchange(current, next, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return Finished::Done { placed: SlotWord::unpack(next), replaced: SlotWord::unpack(current) },
            Err(seen) => current = seen,
        }
    }
    Finished::Contended { current: SlotWord::unpack(current) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(state: SlotState, writer: u8, version: u64) -> SlotWord {
        SlotWord { state, writer, version }
    }

    /// Plays a job against a slot held in `slot`, executing its CASes in order.
    fn play(intent: Intent, me: u8, guess: u64, slot: &mut u64) -> (Finished, u8) {
        let (mut job, mut step) = Job::start(intent, me, guess);
        let mut rounds = 0;
        loop {
            match step {
                Step::Post(cases) => {
                    rounds += 1;
                    let mut results = [None, None];
                    for (i, c) in cases.iter().enumerate() {
                        if let Some((expected, swap)) = c {
                            let old = *slot;
                            if old == *expected {
                                *slot = *swap;
                            }
                            results[i] = Some(old);
                        }
                    }
                    step = Step::Wait;
                    for (i, r) in results.iter().enumerate() {
                        if r.is_some() {
                            step = job.on_result(i, *r);
                        }
                    }
                }
                Step::Finished(f) => return (f, rounds),
                Step::Wait => unreachable!("all results were delivered"),
            }
        }
    }

    #[test]
    fn a_right_guess_marks_in_one_round_and_a_refilled_slot_too() {
        let mut slot = w(SlotState::Invalid, 2, 10).pack();
        let (f, rounds) = play(Intent::Mark { version: 20 }, 1, slot, &mut slot);
        assert_eq!(rounds, 1);
        assert_eq!(f, Finished::Done { placed: w(SlotState::Pending, 1, 20), replaced: w(SlotState::Invalid, 2, 10) });
        // The reader refilled the Invalid word we last saw: the second guess takes.
        let guess = w(SlotState::Invalid, 1, 20).pack();
        let mut slot = w(SlotState::Valid, 1, 20).pack();
        let (f, rounds) = play(Intent::Mark { version: 30 }, 1, guess, &mut slot);
        assert_eq!(rounds, 1);
        assert!(matches!(f, Finished::Done { replaced, .. } if replaced.state == SlotState::Valid));
    }

    #[test]
    fn a_wrong_guess_retries_from_the_word_seen_and_versions_never_drop() {
        let mut slot = w(SlotState::Pending, 3, 50).pack();
        let (f, rounds) = play(Intent::Mark { version: 20 }, 1, 0, &mut slot);
        assert_eq!(rounds, 2);
        // max(current + 1, version): every mark changes the word's version.
        assert_eq!(f, Finished::Done { placed: w(SlotState::Pending, 1, 51), replaced: w(SlotState::Pending, 3, 50) });
        // Invalidate always moves the word.
        let mut slot = w(SlotState::Invalid, 3, 50).pack();
        let (f, _) = play(Intent::Invalidate { version: 20 }, 1, slot, &mut slot);
        assert_eq!(f, Finished::Done { placed: w(SlotState::Invalid, 1, 51), replaced: w(SlotState::Invalid, 3, 50) });
    }

    #[test]
    fn commit_and_rollback_only_touch_what_they_placed() {
        let placed = w(SlotState::Pending, 1, 20);
        let mut slot = placed.pack();
        let (f, _) = play(Intent::Commit { placed }, 1, slot, &mut slot);
        assert!(matches!(f, Finished::Done { placed, .. } if placed.state == SlotState::Invalid));
        // Another writer's newer mark is left alone by our rollback.
        let mut slot = w(SlotState::Pending, 4, 90).pack();
        let (f, _) = play(Intent::Rollback { placed, prior: SlotState::Valid }, 1, placed.pack(), &mut slot);
        assert!(matches!(f, Finished::NotNeeded { .. }));
        assert_eq!(SlotWord::unpack(slot), w(SlotState::Pending, 4, 90));
    }

    #[test]
    fn a_fabric_failure_fails_the_job() {
        let (mut job, _) = Job::start(Intent::Mark { version: 1 }, 0, 0);
        assert_eq!(job.on_result(0, None), Step::Finished(Finished::Failed));
    }

    #[test]
    fn a_slot_that_changes_under_every_round_is_contended_not_failed() {
        let (mut job, mut step) = Job::start(Intent::Mark { version: 1 }, 0, 0);
        let mut rounds = 0u64;
        let f = loop {
            match step {
                Step::Post(cases) => {
                    rounds += 1;
                    // Another writer's CAS lands just before each of ours.
                    let (expected, _) = cases[0].expect("one guess");
                    let moved = SlotWord::unpack(expected).version + 10;
                    step = job.on_result(0, Some(w(SlotState::Pending, 3, moved).pack()));
                }
                Step::Finished(f) => break f,
                Step::Wait => unreachable!("one CAS per round"),
            }
        };
        assert_eq!(rounds, u64::from(JOB_ROUNDS_MAX));
        assert!(matches!(f, Finished::Contended { current } if current.writer == 3), "{f:?}");
    }

    #[test]
    fn a_retry_can_aim_for_another_intent_but_a_round_in_flight_keeps_its_own() {
        // The first round misses (the slot moved): the retry invalidates instead.
        let (mut job, _) = Job::start(Intent::Mark { version: 20 }, 1, w(SlotState::Valid, 2, 10).pack());
        job.retry_as(Intent::Invalidate { version: 20 });
        let step = job.on_result(0, Some(w(SlotState::Valid, 3, 15).pack()));
        let Step::Post([Some((expected, swap)), None]) = step else { panic!("{step:?}") };
        assert_eq!(expected, w(SlotState::Valid, 3, 15).pack());
        assert_eq!(SlotWord::unpack(swap), w(SlotState::Invalid, 1, 20));
        assert_eq!(job.intent(), Intent::Invalidate { version: 20 });
        // A first round that took stays a mark: its owner commits it as usual.
        let guess = w(SlotState::Valid, 2, 10).pack();
        let (mut job, _) = Job::start(Intent::Mark { version: 20 }, 1, guess);
        job.retry_as(Intent::Invalidate { version: 20 });
        let f = job.on_result(0, Some(guess));
        assert!(matches!(f, Step::Finished(Finished::Done { placed, .. }) if placed.state == SlotState::Pending));
        assert_eq!(job.intent(), Intent::Mark { version: 20 });
    }

    #[test]
    fn a_job_behind_another_expects_its_word_and_never_takes_twice() {
        // The job in flight will place Pending(11) over Valid(10).
        let (first, _) = Job::start(Intent::Mark { version: 11 }, 1, w(SlotState::Valid, 2, 10).pack());
        let expected = first.expected_result().unwrap();
        assert_eq!(expected, w(SlotState::Pending, 1, 11));
        let shadow = w(SlotState::Valid, 2, 10).pack();
        let (_, step) = Job::start_guessing(Intent::Mark { version: 12 }, 1, [Some(expected.pack()), Some(shadow)]);
        let Step::Post([Some((e1, s1)), Some((e2, _))]) = step else { panic!("{step:?}") };
        assert_eq!((e1, SlotWord::unpack(s1)), (expected.pack(), w(SlotState::Pending, 1, 12)));
        assert_eq!(e2, shadow);
        // A second guess that is the first's swap is dropped.
        let g = w(SlotState::Valid, 2, 10);
        let swap = Intent::Mark { version: 11 }.apply(g, 1).unwrap().pack();
        let (_, step) = Job::start_guessing(Intent::Mark { version: 11 }, 1, [Some(g.pack()), Some(swap)]);
        assert!(matches!(step, Step::Post([Some(_), None])), "{step:?}");
    }

    #[test]
    fn local_jobs_run_to_the_end() {
        let word = AtomicU64::new(w(SlotState::Valid, 0, 5).pack());
        let f = run_local(&word, Intent::Mark { version: 9 }, 2);
        assert_eq!(f, Finished::Done { placed: w(SlotState::Pending, 2, 9), replaced: w(SlotState::Valid, 0, 5) });
        let f = run_local(&word, Intent::Rollback { placed: w(SlotState::Pending, 2, 9), prior: SlotState::Valid }, 2);
        assert!(matches!(f, Finished::Done { placed, .. } if placed == w(SlotState::Valid, 2, 9)));
    }
}
