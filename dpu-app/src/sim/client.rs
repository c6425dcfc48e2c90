//! A simulated KV store on one node: it writes and deletes through its queue pair,
//! reads through its cache and the cache directory (GET from the DPU app on a miss),
//! and hands everything it sees to the oracle.
//!
//! Its cache follows the protocol a real KV store must: an entry is filled from a GET
//! issued after a miss, tagged with the Valid word its refill CAS put in the slot, and
//! served only while the slot holds exactly that word (slots are shared by colliding
//! keys, and every transition changes the word).

use std::collections::HashMap;
use std::sync::Arc;

use prescient_shim::directory::{RefillToken, SlotState, SlotWord};
use prescient_shim::Request as ShimRequest;
use prescient_shim::{Completion, Host, QueuePair, ReadCheck, ReadSla, Status};

use super::oracle::{value_of, Fate, Oracle};

/// What one request in flight is.
#[derive(Clone, Copy, Debug)]
enum Request {
    Write { write_id: u64, submitted_ns: u64 },
    Get { key: u32, began_ns: u64, token: Option<RefillToken>, fresh: bool },
}

/// A Fresh read waiting for a Pending slot to resolve.
#[derive(Clone, Copy, Debug)]
struct Waiting {
    key: u32,
    began_ns: u64,
    until_ns: u64,
}

/// Counters of one client.
#[derive(Clone, Copy, Debug, Default)]
pub struct ClientStats {
    /// Reads served from the cache.
    pub cache_hits: u64,
    /// Reads that went to the DPU app.
    pub gets: u64,
    /// GETs that came back Unavailable.
    pub unavailable: u64,
    /// Writes whose completion said their key was leased (`FLAG_LEASED`).
    pub leased_writes: u64,
}

/// One node's simulated KV store.
pub struct Client {
    node: u8,
    host: Arc<Host>,
    qp: QueuePair,
    in_flight: HashMap<u64, Request>,
    cache: HashMap<u32, (u64, u64, Vec<u8>)>,
    waiting: Vec<Waiting>,
    next_tag: u64,
    /// When this node's DPU app last restarted: writes submitted before then may be
    /// failed `DpuRestarted` or held over the restart, and are exempt from the bound.
    restarted_ns: u64,
    /// Counters.
    pub stats: ClientStats,
}

/// The key bytes of key index `key`.
pub fn key_bytes(key: u32) -> [u8; 6] {
    let mut b = *b"k00000";
    let digits = format!("{:05}", key % 100_000);
    b[1..].copy_from_slice(digits.as_bytes());
    b
}

impl Client {
    /// The client of node `node`'s host.
    pub fn new(node: u8, host: Arc<Host>) -> Self {
        let qp = host.queue_pair(0).expect("queue pair 0 of a fresh host");
        Self {
            node,
            host,
            qp,
            in_flight: HashMap::new(),
            cache: HashMap::new(),
            waiting: Vec::new(),
            next_tag: 1,
            restarted_ns: 0,
            stats: ClientStats::default(),
        }
    }

    /// Requests in flight.
    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    fn tag(&mut self) -> u64 {
        self.next_tag += 1;
        self.next_tag
    }

    /// This node's DPU app was restarted at `now_ns`.
    pub fn dpu_restarted(&mut self, now_ns: u64) {
        self.restarted_ns = now_ns;
    }

    /// This node's DPU app went away for good at `now_ns`: the writes its host
    /// submitted before are not held to the liveness bound (as at a restart, which
    /// comes only at the end of the run).
    pub fn dpu_gone(&mut self, now_ns: u64) {
        self.restarted_ns = now_ns + 1;
    }

    /// The liveness bound: a write submitted to a DPU app that has run since must
    /// complete within `bound_ns` (it commits, or fails at its deadline). Returns what
    /// is wrong with the oldest write past it.
    pub fn overdue(&self, now_ns: u64, bound_ns: u64) -> Result<(), String> {
        for (tag, req) in &self.in_flight {
            if let Request::Write { write_id, submitted_ns } = *req {
                if submitted_ns >= self.restarted_ns && now_ns.saturating_sub(submitted_ns) > bound_ns {
                    return Err(format!(
                        "node {}: write {write_id} (tag {tag}) submitted at {submitted_ns} ns has not completed after {} us (bound {} us)",
                        self.node,
                        (now_ns - submitted_ns) / 1000,
                        bound_ns / 1000
                    ));
                }
            }
        }
        Ok(())
    }

    /// Submits a PUT (or DELETE) of `key` as write `write_id` at `now_ns`; false if there
    /// is no room.
    #[allow(clippy::too_many_arguments)]
    pub fn write(
        &mut self,
        key: u32,
        write_id: u64,
        len: usize,
        delete: bool,
        now_ns: u64,
        oracle: &mut Oracle,
    ) -> bool {
        let Ok(mut buf) = self.host.take_buffer() else { return false };
        let tag = self.tag();
        let kb = key_bytes(key);
        let result = if delete {
            self.qp.push(ShimRequest::delete(&kb, buf).user_data(tag))
        } else {
            let len = len.min(buf.capacity());
            value_of(key, write_id, len, buf.value_mut());
            self.qp.push(ShimRequest::put(&kb, buf, len.max(super::oracle::VALUE_HEADER)).user_data(tag))
        };
        match result {
            Ok(()) => {
                tracing::debug!(node = self.node, key, write_id, delete, "write");
                self.in_flight.insert(tag, Request::Write { write_id, submitted_ns: now_ns });
                oracle.issue(write_id, key, delete, now_ns);
                true
            }
            Err((_, buf)) => {
                drop(buf);
                false
            }
        }
    }

    /// Reads `key` at `now_ns`: from the cache when the directory allows, else with a
    /// GET. Cached reads are checked at once.
    pub fn read(
        &mut self,
        key: u32,
        fresh: bool,
        now_ns: u64,
        max_wait_ns: u64,
        oracle: &mut Oracle,
    ) -> Result<(), String> {
        let check = self.host.check_read(&key_bytes(key), now_ns);
        tracing::debug!(node = self.node, key, fresh, now_ns, ?check, "read");
        match check {
            ReadCheck::Cached(word) => self.serve_cached(key, word, now_ns, fresh, oracle),
            ReadCheck::Pending(_) if !fresh => {
                // Stale: the cached copy, if there is one, unchecked for freshness.
                if let Some((_, stamp, value)) = self.cache.get(&key) {
                    let (stamp, value) = (*stamp, value.clone());
                    self.stats.cache_hits += 1;
                    return oracle.check_read(key, now_ns, stamp, (!value.is_empty()).then_some(&value[..]), false);
                }
                self.get(key, now_ns, None, fresh);
                Ok(())
            }
            ReadCheck::Pending(_) => {
                self.waiting.push(Waiting { key, began_ns: now_ns, until_ns: now_ns + max_wait_ns });
                Ok(())
            }
            ReadCheck::Miss(token) => {
                self.get(key, now_ns, Some(token), fresh);
                Ok(())
            }
            ReadCheck::NoLease | ReadCheck::NoDirectory => {
                self.get(key, now_ns, None, fresh);
                Ok(())
            }
        }
    }

    fn serve_cached(
        &mut self,
        key: u32,
        word: SlotWord,
        now_ns: u64,
        fresh: bool,
        oracle: &mut Oracle,
    ) -> Result<(), String> {
        match self.cache.get(&key) {
            Some((tagged, stamp, value)) if *tagged == word.pack() => {
                let (stamp, value) = (*stamp, value.clone());
                self.stats.cache_hits += 1;
                oracle.check_read(key, now_ns, stamp, (!value.is_empty()).then_some(&value[..]), fresh)
            }
            // Valid, but not from our refill for this key: a miss without a token
            // (refilling needs an Invalid word).
            _ => {
                self.get(key, now_ns, None, fresh);
                Ok(())
            }
        }
    }

    fn get(&mut self, key: u32, began_ns: u64, token: Option<RefillToken>, fresh: bool) {
        let Ok(buf) = self.host.take_buffer() else { return };
        let tag = self.tag();
        let sla = if fresh { ReadSla::FRESH_NOW } else { ReadSla::Stale };
        if self.qp.push(ShimRequest::get(&key_bytes(key), buf).sla(sla).user_data(tag)).is_ok() {
            self.in_flight.insert(tag, Request::Get { key, began_ns, token, fresh });
            self.stats.gets += 1;
        }
    }

    /// Rechecks the reads waiting on Pending slots.
    pub fn recheck(&mut self, now_ns: u64, oracle: &mut Oracle) -> Result<(), String> {
        let mut i = 0;
        while i < self.waiting.len() {
            let w = self.waiting[i];
            let check = self.host.check_read(&key_bytes(w.key), now_ns);
            let resolved = match check {
                ReadCheck::Pending(_) if now_ns < w.until_ns => None,
                ReadCheck::Pending(_) => Some(None),
                ReadCheck::Cached(word) => Some(Some(word)),
                ReadCheck::Miss(token) => {
                    self.waiting.swap_remove(i);
                    self.get(w.key, w.began_ns, Some(token), true);
                    continue;
                }
                _ => Some(None),
            };
            match resolved {
                None => i += 1,
                Some(Some(word)) => {
                    self.waiting.swap_remove(i);
                    self.serve_cached_from(w, word, oracle)?;
                }
                Some(None) => {
                    self.waiting.swap_remove(i);
                    self.get(w.key, w.began_ns, None, true);
                }
            }
        }
        Ok(())
    }

    fn serve_cached_from(&mut self, w: Waiting, word: SlotWord, oracle: &mut Oracle) -> Result<(), String> {
        match self.cache.get(&w.key) {
            Some((tagged, stamp, value)) if *tagged == word.pack() => {
                let (stamp, value) = (*stamp, value.clone());
                self.stats.cache_hits += 1;
                oracle.check_read(w.key, w.began_ns, stamp, (!value.is_empty()).then_some(&value[..]), true)
            }
            _ => {
                self.get(w.key, w.began_ns, None, true);
                Ok(())
            }
        }
    }

    /// Publishes what was pushed.
    pub fn flush(&mut self) {
        let _ = self.qp.flush();
    }

    /// Reaps completions, checking each read; `now_ns` is the completion time.
    pub fn reap(&mut self, now_ns: u64, oracle: &mut Oracle) -> Result<(), String> {
        let mut done: Vec<Completion> = Vec::new();
        let _ = self.qp.poll(|c| done.push(c));
        for c in done {
            let Some(req) = self.in_flight.remove(&c.user_data) else {
                return Err(format!("node {}: a completion for a request never made: {c:?}", self.node));
            };
            tracing::debug!(node = self.node, ?req, status = ?c.status, version = c.version, detail = c.detail, now_ns, "completion");
            match req {
                Request::Write { write_id, .. } => {
                    self.stats.leased_writes += u64::from(c.leased());
                    if c.status == Status::Overloaded {
                        // The simulated load (a few writes in flight per node) is far
                        // below every table's size: a refusal for room is a leak.
                        return Err(format!(
                            "node {}: write {write_id} was refused Overloaded below the configured load (detail {})",
                            self.node, c.detail
                        ));
                    }
                    let fate = match c.status {
                        Status::Ok => Fate::Committed { stamp: c.version, at_ns: now_ns },
                        Status::NotDurable => Fate::RolledBack,
                        _ => Fate::Unknown,
                    };
                    oracle.finish(write_id, fate);
                }
                Request::Get { key, began_ns, token, fresh } => {
                    let buf = self.qp.take_value(&c);
                    match c.status {
                        Status::Ok => {
                            let value = buf.as_deref().map(<[u8]>::to_vec).unwrap_or_default();
                            oracle.check_read(key, began_ns, c.version, Some(&value), fresh)?;
                            if fresh && c.may_refill() {
                                self.fill(key, token, c.version, value, now_ns);
                            }
                        }
                        Status::NotFound => {
                            oracle.check_read(key, began_ns, c.version, None, fresh)?;
                            if fresh && c.may_refill() {
                                self.fill(key, token, c.version, Vec::new(), now_ns);
                            }
                        }
                        Status::Unavailable => self.stats.unavailable += 1,
                        _ => {}
                    }
                }
            }
        }
        Ok(())
    }

    /// Caches a value fetched after a miss, valid once the refill takes. Only a Fresh
    /// GET's value may refill: a Stale one may be older than a committed write, and a
    /// Valid slot would then serve it to Fresh readers too.
    fn fill(&mut self, key: u32, token: Option<RefillToken>, stamp: u64, value: Vec<u8>, now_ns: u64) {
        let Some(token) = token else { return };
        let valid = SlotWord { state: SlotState::Valid, ..SlotWord::unpack(token.word) };
        // The entry first, then the refill (a concurrent reader seeing Valid finds it).
        self.cache.insert(key, (valid.pack(), stamp, value));
        if !self.host.refill_at(token, now_ns) {
            self.cache.remove(&key);
        }
    }
}
