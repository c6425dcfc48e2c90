//! Directory jobs: the table of CAS jobs in flight on the peers' cache directories
//! (a job's rounds are decided by [`super::slotjob`]; this role posts them, routes
//! their results and tells the owner how the job ended).
//!
//! A job on this node's own host directory runs at once ([`slotjob::run_local`]); one
//! on a peer's posts up to two CASes a round, each carrying in its work-request id the
//! job's handle and which guess it is, and its result word lands in the `cas` pool
//! slot of that pair. The owner (a write's mark, a lease's) hears of the end through a
//! [`JobDone`] that `Node` dispatches; the job never calls into its owner, and asks of
//! a write only what [`Writes`] answers.

use prescient_shim::directory::SlotWord;

use super::host_directory::HostDirectory;
use super::links::Links;
use super::pool::Pool;
use super::slotjob::{self, Finished, Intent, Job, Owner, Started, Step};
use super::slots::{Handle, JobId, SlotTable, WriteId};
use super::stats::NodeStats;
use super::time::Now;
use super::wr::{Kind, WrId};
use crate::cluster::hlc::Hlc;
use crate::fabric::{Op, RawQp, WcOpcode};
use crate::limits::{RECENT_JOBS_BITS, WR_INDEX_MAX};
use crate::log_limit::LogLimit;

/// A directory job in flight.
#[derive(Clone, Copy, Debug)]
struct JobEntry {
    /// The job.
    job: Job,
    /// Who hears of its end.
    owner: Owner,
    /// Host node whose directory it works on.
    host: u8,
    /// Slot in that directory.
    slot: u32,
    /// What it is for now (kept to tell the owner).
    intent: Intent,
    /// CASes posted and not completed.
    posted: u8,
}

/// What the jobs role may touch of the node while it starts a job or takes a result.
pub(super) struct JobCx<'a, Q: RawQp> {
    /// This node.
    pub me: u8,
    /// The peers (their shadow directories) and the way CASes leave.
    pub links: &'a mut Links<Q>,
    /// The CAS result words, two per job slot.
    pub cas: &'a Pool,
    /// This node's own host directory (jobs on it run locally).
    pub directory: HostDirectory<'a>,
    /// The clock, which observes every version a CAS returns.
    pub hlc: &'a mut Hlc,
    /// Counters.
    pub stats: &'a mut NodeStats,
}

/// What a job of a write asks of the writer while it runs.
pub(super) trait Writes {
    /// Whether write `id` was decided while its mark is still out: a retry round aims
    /// straight for the commit's Invalid.
    fn is_deciding(&self, id: WriteId) -> bool;
    /// Whether write `id` still has time at `now`: a contended job starts over.
    fn before_deadline(&self, id: WriteId, now: Now) -> bool;
}

/// A job ended: what `Node` passes on to the owner.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct JobDone {
    /// Who hears of it.
    pub owner: Owner,
    /// The host whose directory it worked on.
    pub host: u8,
    /// The slot in that directory.
    pub slot: u32,
    /// What it was for at the end.
    pub intent: Intent,
    /// How it ended.
    pub finished: Finished,
    /// The host must be suspected first (it could not be reached, or a write's mark ran
    /// out of time unplaced).
    pub suspect: bool,
}

/// The directory jobs in flight, and the latest job started on each (host, slot).
#[derive(Debug)]
pub(super) struct Jobs {
    table: SlotTable<JobEntry, JobId>,
    /// The latest job started on each (host, slot), hashed: a job behind it on the same
    /// queue pair expects the word it places.
    recent: Vec<Option<JobId>>,
    /// The rate limit of the "job table full" log line (the condition is counted).
    table_full_log: LogLimit,
}

/// The work-request id of guess `which` (0 or 1) of job `id` on `host`: a = the job's
/// CAS pool word (slot * 2 + which), b = its generation.
fn cas_wr_id(host: u8, id: JobId, which: usize) -> WrId {
    WrId::new(Kind::Cas, host, id.slot() * 2 + which as u32, id.generation())
}

/// Where the latest job on (`host`, `slot`) is remembered.
fn recent_index(host: u8, slot: u32) -> usize {
    let h = (u64::from(slot) << 8 | u64::from(host)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    (h >> (64 - RECENT_JOBS_BITS)) as usize
}

impl Jobs {
    /// Room for `capacity` jobs (two CAS pool words each).
    pub(super) fn new(capacity: u32) -> Self {
        assert!(capacity * 2 <= WR_INDEX_MAX + 1, "{capacity} jobs' CAS words do not fit a work-request index");
        Self {
            table: SlotTable::new(capacity),
            recent: vec![None; 1 << RECENT_JOBS_BITS],
            table_full_log: LogLimit::new(),
        }
    }

    /// Starts `intent` on slot `slot` of host `host`'s directory for `owner`, from
    /// `guess` if given (else the shadow's, or the word a job still flying on the slot
    /// places). The local host's directory is worked on at once; a remote one through
    /// CASes, whose end comes back from [`Jobs::on_cas_result`].
    pub(super) fn start<Q: RawQp>(
        &mut self,
        cx: &mut JobCx<'_, Q>,
        owner: Owner,
        host: u8,
        slot: u32,
        intent: Intent,
        guess: Option<u64>,
    ) -> Started {
        if host == cx.me {
            let Some(word) = cx.directory.word(slot) else {
                return Started::Finished(Finished::NotNeeded { current: SlotWord::unpack(0) });
            };
            return Started::Finished(match slotjob::run_local(word, intent, cx.me) {
                // Only this host's readers race a local CAS: rounds of losses to them
                // leave the write to fence its own host.
                Finished::Contended { .. } => Finished::Failed,
                f => f,
            });
        }
        let shadow = cx.links.peer(host).map_or(0, |p| p.shadow.guess(slot));
        // A job of ours on the same slot still flying (a hot key, written again before
        // the last write's CAS came back): ours runs after it on the same queue pair, so
        // expect the word it places, and the shadow's in case it misses.
        let recent = recent_index(host, slot);
        let behind = match (guess, intent) {
            (None, Intent::Mark { .. } | Intent::Invalidate { .. }) => self.recent[recent]
                .and_then(|id| self.table.get(id))
                .filter(|e| e.host == host && e.slot == slot)
                .and_then(|e| e.job.expected_result())
                .map(SlotWord::pack),
            _ => None,
        };
        let Some(id) = self.table.reserve() else {
            cx.stats.job_table_full += 1;
            if let Some(left_out) = self.table_full_log.admit(prescient_shim::sys::monotonic_ns()) {
                tracing::warn!(node = cx.me, left_out, "directory job table full");
            }
            return Started::Finished(Finished::Failed);
        };
        self.recent[recent] = Some(id);
        let (job, step) = match behind {
            Some(expected) => Job::start_guessing(intent, cx.me, [Some(expected), Some(shadow)]),
            None => Job::start(intent, cx.me, guess.unwrap_or(shadow)),
        };
        self.table.put(id, JobEntry { job, owner, host, slot, intent, posted: 0 });
        cx.stats.cas_jobs += 1;
        match step {
            Step::Post(cases) => {
                self.post_cases(cx, id, cases);
                Started::Running(id)
            }
            Step::Finished(f) => {
                self.free(id);
                Started::Finished(f)
            }
            Step::Wait => Started::Running(id),
        }
    }

    /// Frees job `id`, whose CASes have all come back.
    fn free(&mut self, id: JobId) {
        let entry = self.table.remove(id).expect("freeing a job that runs");
        assert_eq!(entry.posted, 0, "job {id:?} freed with CASes in flight");
    }

    fn post_cases<Q: RawQp>(&mut self, cx: &mut JobCx<'_, Q>, id: JobId, cases: [Option<(u64, u64)>; 2]) {
        let entry = self.table.get_mut(id).expect("posting for a job that runs");
        cx.stats.cas_rounds += 1;
        let host = entry.host;
        let Some(remote) = cx.links.peer(host).and_then(|p| p.remote) else {
            // No link: both guesses fail at once.
            for (b, c) in cases.iter().enumerate() {
                if c.is_some() {
                    cx.links.fail(host, cas_wr_id(host, id, b), WcOpcode::CompareSwap, None);
                    entry.posted += 1;
                }
            }
            return;
        };
        let slot = entry.slot % remote.directory_slots.max(1);
        for (b, c) in cases.iter().enumerate() {
            let Some((compare, swap)) = *c else { continue };
            let buf = cx.cas.buf(id.slot() * 2 + b as u32, 8);
            let op = Op::CompareSwap { remote: remote.directory.at(u64::from(slot) * 8), compare, swap };
            entry.posted += 1;
            cx.links.post(host, cas_wr_id(host, id, b), op, buf);
        }
    }

    /// The CAS `wr_id` came back (`ok`: with the slot's old word in its pool word; else
    /// failed on the fabric). `writes` says how a write that owns a job stands. Returns
    /// the job's end, if this was its last result.
    pub(super) fn on_cas_result<Q: RawQp>(
        &mut self,
        cx: &mut JobCx<'_, Q>,
        wr_id: WrId,
        ok: bool,
        now: Now,
        writes: &impl Writes,
    ) -> Option<JobDone> {
        let (id, which) = (JobId::from_parts(wr_id.a / 2, wr_id.b), (wr_id.a % 2) as usize);
        let old = ok.then(|| cx.cas.word(wr_id.a));
        // A job is freed only once every CAS it posted is back.
        let entry = self.table.get_mut(id).unwrap_or_else(|| panic!("CAS completion of job {id:?}, which is gone"));
        entry.posted = entry.posted.checked_sub(1).expect("a CAS completion per CAS posted");
        let (host, slot) = (entry.host, entry.slot);
        if let (Intent::Mark { version }, Owner::Write(w)) = (entry.job.intent(), entry.owner) {
            // Decided while this mark still looks for the slot's word: a retry goes
            // straight to the commit's Invalid (one round trip, not two).
            if writes.is_deciding(w) {
                entry.job.retry_as(Intent::Invalidate { version });
            }
        }
        let step = entry.job.on_result(which, old);
        entry.intent = entry.job.intent();
        if let Some(v) = old {
            // The word CAS returned is the freshest this node knows; our own swap, if
            // it took, is fresher still (recorded below when the job finishes).
            if let Some(p) = cx.links.peer_mut(host) {
                p.shadow.observed(slot, v, host);
            }
            cx.hlc.observe(SlotWord::unpack(v).version).expect("a slot word's version fits the clock's (56 bits)");
        }
        match step {
            Step::Wait => None,
            Step::Post(cases) => {
                self.post_cases(cx, id, cases);
                None
            }
            Step::Finished(mut f) => {
                let entry = *self.table.get(id).expect("job exists");
                if let Finished::Done { placed, .. } = f {
                    if let Some(p) = cx.links.peer_mut(host) {
                        p.shadow.saw(slot, placed.pack());
                    }
                }
                let mut suspect = f == Finished::Failed;
                if let Finished::Contended { current } = f {
                    // A hot slot, not an unreachable host: a write's job starts over from
                    // the newest word while the write has time (the others' CASes took,
                    // so someone progresses); a lease's gives up quietly.
                    let retry = match entry.owner {
                        Owner::Write(w) => writes.before_deadline(w, now),
                        Owner::Lease(_) | Owner::Detached => false,
                    };
                    cx.stats.cas_contended += 1;
                    if retry {
                        let (job, step) = Job::start(entry.intent, cx.me, current.pack());
                        self.table.get_mut(id).expect("job exists").job = job;
                        if let Step::Post(cases) = step {
                            self.post_cases(cx, id, cases);
                        }
                        return None;
                    }
                    f = Finished::Failed;
                    // Out of time with its mark unplaced: the host must be fenced.
                    suspect = matches!(entry.owner, Owner::Write(_));
                }
                self.free(id);
                Some(JobDone { owner: entry.owner, host, slot, intent: entry.intent, finished: f, suspect })
            }
        }
    }
}
