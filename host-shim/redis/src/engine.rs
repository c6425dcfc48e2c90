//! The module's one role: it owns the region, the queue pair Redis submits on, the
//! commands waiting on the DPU app and the tags of Redis's own copies. Every method
//! runs on Redis's main thread (the engine lives in a thread-local there), so the
//! queue pair has one user and nothing is locked.
//!
//! - SET: the value is copied once, from the command's argument into a pinned arena
//!   buffer, and PUT; the client blocks until the write completes. On `+OK` Redis's
//!   own copy is set to the same string, and if the slot still holds exactly the
//!   word this write's commit left (`Invalid`, this node, this version), it is
//!   refilled and the copy tagged: nothing else touched the slot since.
//! - GET: the key's directory slot decides ([`Host::check_read`]). `Valid` and Redis's
//!   copy tagged with exactly that word: served from Redis's copy, at once. Anything
//!   else: a Fresh GET through the DPU app, and on a miss with a refill token, Redis's
//!   copy is set to the value, tagged with the token's word turned `Valid`, and the
//!   slot refilled (the tag is dropped if the refill loses a race).
//! - DEL/UNLINK: a DELETE per key; the reply counts the DELETEs that committed.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;

use prescient_shim::completion::Completion;
use prescient_shim::config::KEY_BYTES_MAX;
use prescient_shim::directory::{self, ReadCheck, SlotState, SlotWord};
use prescient_shim::layout::header;
use prescient_shim::{Host, HostOptions, QueuePair, Request, ShimError, Status};

use crate::api::{self, BlockCallbacks, Call};
use crate::errors;
use crate::options::Options;
use crate::requests::{Op, Outcome, Requests};
use crate::stats::Stats;
use crate::waker::Waker;

/// Tag-table capacity kept after a flush emptied it (the rest is given back).
const TAGS_KEPT_AFTER_FLUSH: usize = 1024;

thread_local! {
    static ENGINE: RefCell<Option<Engine>> = const { RefCell::new(None) };
}

/// Runs `f` on the engine (None before the module is loaded or after it unloads).
pub fn with<R>(f: impl FnOnce(&mut Engine) -> R) -> Option<R> {
    ENGINE.with(|e| e.borrow_mut().as_mut().map(f))
}

/// Installs the engine (module load).
pub fn install(engine: Engine) {
    ENGINE.with(|e| *e.borrow_mut() = Some(engine));
}

/// Removes the engine (module unload): the host detaches, the waker stops.
pub fn remove() {
    ENGINE.with(|e| e.borrow_mut().take());
}

/// See the module documentation.
pub struct Engine {
    host: Arc<Host>,
    qp: QueuePair,
    requests: Requests,
    /// The directory word each key's copy in Redis is tagged with: served only while
    /// the slot holds exactly this word.
    tags: HashMap<Box<[u8]>, u64>,
    /// Completions of one poll, reused.
    reaped: Vec<Completion>,
    /// Entries to fail, reused.
    failing: Vec<u64>,
    waker: Waker,
    callbacks: BlockCallbacks,
    options: Options,
    /// Whether the DPU app answered at the last look.
    dpu_ok: bool,
    /// Requests are queued by the commands and published once per event-loop
    /// iteration, before Redis sleeps ([`Engine::before_sleep`]), instead of one
    /// publish (and DPU wake-up) per command. False on a Redis without the event.
    batched: bool,
    stats: Stats,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine").field("region", &self.options.region).finish()
    }
}

impl Engine {
    /// Creates the region (or attaches to one a previous Redis left) and takes the
    /// queue pair.
    pub fn start(options: Options, callbacks: BlockCallbacks) -> Result<Self, String> {
        let host_options = HostOptions { pin: options.pin, dpu_timeout: options.dpu_timeout };
        let path = &options.region;
        let host = if path.exists() {
            Host::attach(path, host_options).map_err(|e| {
                format!(
                    "cannot attach to region {} ({e}); the DPU app must serve it for a restarted Redis to \
                     take it over: start `prescient-dpu serve` on it, or remove the file to start afresh",
                    path.display()
                )
            })?
        } else {
            Host::create(path, options.config, host_options)
                .map_err(|e| format!("cannot create region {}: {e}", path.display()))?
        };
        let qp = host.queue_pair(options.queue_pair).map_err(|e| format!("region {}: {e}", path.display()))?;
        let waker =
            Waker::start(qp.completion_signal()).map_err(|e| format!("cannot start the completion waker: {e}"))?;
        let ring = host.config().ring_entries;
        Ok(Self {
            host,
            qp,
            requests: Requests::new(ring),
            tags: HashMap::new(),
            reaped: Vec::with_capacity(ring as usize),
            failing: Vec::with_capacity(ring as usize),
            waker,
            callbacks,
            options,
            dpu_ok: true,
            batched: false,
            stats: Stats::default(),
        })
    }

    /// Publishes requests once per event-loop iteration from now on (the module
    /// subscribed to Redis's before-sleep event).
    pub fn publish_before_sleep(&mut self) {
        self.batched = true;
    }

    /// Queues `req`: published at once, or with the iteration's batch before Redis
    /// sleeps. Refused at once while the DPU app does not answer.
    fn queue(&mut self, req: Request<'_>) -> Result<(), (ShimError, prescient_shim::Buffer)> {
        if !self.batched {
            return self.qp.submit(req);
        }
        if !self.dpu_ok {
            if let Err(e) = self.qp.flush() {
                return Err((e, req.into_buffer()));
            }
            self.dpu_ok = true;
        }
        self.qp.push(req)
    }

    /// The eventfd the event loop watches.
    pub fn wake_fd(&self) -> std::os::fd::RawFd {
        self.waker.fd()
    }

    /// `reply_timeout_ms`.
    pub fn reply_timeout_ms(&self) -> u128 {
        self.options.reply_timeout.as_millis()
    }

    /// The region's path.
    pub fn region(&self) -> &std::path::Path {
        &self.options.region
    }

    fn own_node(&self) -> u32 {
        self.host.region().u32_at(header::CLUSTER_NODE).load(std::sync::atomic::Ordering::Acquire)
    }

    fn refuse(&mut self, call: &Call, msg: &str) {
        self.stats.refused += 1;
        self.stats.errors += 1;
        call.reply_error(msg);
    }

    fn check_key(&mut self, call: &Call, i: usize) -> bool {
        let len = call.arg(i).len();
        if len == 0 || len > KEY_BYTES_MAX {
            self.refuse(
                call,
                &format!("ERR prescient: a key of {len} bytes; replicated keys are 1 to {KEY_BYTES_MAX} bytes"),
            );
            return false;
        }
        true
    }

    /// `PRESCIENT.SET key value` (what `SET key value` becomes).
    pub fn set(&mut self, call: &Call) {
        if call.db() != 0 {
            return self.refuse(call, errors::OTHER_DB);
        }
        match call.argc() {
            3 => {}
            n if n > 3 => return self.refuse(call, errors::SET_OPTIONS),
            _ => return call.wrong_arity(),
        }
        if call.cannot_block() {
            return self.refuse(call, errors::CANNOT_BLOCK);
        }
        if !self.check_key(call, 1) {
            return;
        }
        let value = call.arg(2);
        let mut buf = match self.host.take_buffer() {
            Ok(buf) => buf,
            Err(e) => return self.refuse(call, &errors::of_shim(&e)),
        };
        let Some(area) = buf.value_mut().get_mut(..value.len()) else {
            let max = buf.capacity();
            return self.refuse(
                call,
                &format!(
                    "ERR prescient: a value of {} bytes; a region buffer carries {max} (load the module with a larger \
                     buffer_bytes=, within the cluster's value_bytes_max)",
                    value.len()
                ),
            );
        };
        area.copy_from_slice(value);
        let Some(user_data) = self.requests.open(Op::Set, 1) else {
            return self.refuse(call, &errors::requests_full(self.requests.len()));
        };
        if let Err((e, _buf)) = self.queue(Request::put(call.arg(1), buf, value.len()).user_data(user_data)) {
            self.requests.abandon(user_data);
            return self.refuse(call, &errors::of_shim(&e));
        }
        self.stats.sets += 1;
        self.block(call, user_data);
    }

    /// `PRESCIENT.GET key`.
    pub fn get(&mut self, call: &Call) {
        if call.db() != 0 {
            return self.refuse(call, errors::OTHER_DB);
        }
        if call.argc() != 2 {
            return call.wrong_arity();
        }
        if !self.check_key(call, 1) {
            return;
        }
        let key = call.arg(1);
        let token = match self.host.check_read(key, prescient_shim::sys::monotonic_ns()) {
            ReadCheck::Cached(word) => {
                if self.tags.get(key) == Some(&word.pack())
                    && call.with_local_string(1, |v| v.map(|v| call.reply_bulk(v)).is_some())
                {
                    self.stats.gets_local += 1;
                    return;
                }
                // Valid, but Redis's copy is not from a refill of this word: a miss
                // without a token (refilling needs an Invalid word).
                None
            }
            ReadCheck::Miss(token) => Some(token),
            ReadCheck::Pending(_) | ReadCheck::NoLease | ReadCheck::NoDirectory => None,
        };
        if call.cannot_block() {
            return self.refuse(call, errors::CANNOT_BLOCK);
        }
        let buf = match self.host.take_buffer() {
            Ok(buf) => buf,
            Err(e) => return self.refuse(call, &errors::of_shim(&e)),
        };
        let Some(user_data) = self.requests.open(Op::Get { token }, 1) else {
            return self.refuse(call, &errors::requests_full(self.requests.len()));
        };
        if let Err((e, _buf)) = self.queue(Request::get(key, buf).user_data(user_data)) {
            self.requests.abandon(user_data);
            return self.refuse(call, &errors::of_shim(&e));
        }
        self.stats.gets_fetched += 1;
        self.block(call, user_data);
    }

    /// `PRESCIENT.DEL key [key ...]` (what `DEL` and `UNLINK` become).
    pub fn del(&mut self, call: &Call) {
        if call.db() != 0 {
            return self.refuse(call, errors::OTHER_DB);
        }
        if call.argc() < 2 {
            return call.wrong_arity();
        }
        if call.cannot_block() {
            return self.refuse(call, errors::CANNOT_BLOCK);
        }
        for i in 1..call.argc() {
            if !self.check_key(call, i) {
                return;
            }
        }
        let keys = (call.argc() - 1) as u32;
        let Some(user_data) = self.requests.open(Op::Del { done: 0 }, 0) else {
            return self.refuse(call, &errors::requests_full(self.requests.len()));
        };
        let mut failure = None;
        for i in 1..call.argc() {
            let pushed = self.host.take_buffer().map_err(|e| errors::of_shim(&e)).and_then(|buf| {
                self.qp
                    .push(Request::delete(call.arg(i), buf).user_data(user_data))
                    .map_err(|(e, _buf)| errors::of_shim(&e))
            });
            match pushed {
                Ok(()) => self.requests.get_mut(user_data).expect("just opened").in_flight += 1,
                Err(e) => {
                    failure = Some(e);
                    break;
                }
            }
        }
        let pushed = self.requests.get_mut(user_data).expect("just opened").in_flight;
        if !self.batched || !self.dpu_ok {
            if let Err(e) = self.qp.flush() {
                failure.get_or_insert(errors::of_shim(&e));
            }
        }
        self.stats.deletes += u64::from(pushed);
        if pushed == 0 {
            self.requests.abandon(user_data);
            return self.refuse(call, &failure.expect("no DELETE pushed without a reason"));
        }
        if pushed < keys {
            self.requests.get_mut(user_data).expect("open").failure = failure;
        }
        self.block(call, user_data);
    }

    fn block(&mut self, call: &Call, user_data: u64) {
        let timeout = self.options.reply_timeout.as_millis() as u64;
        let client = call.block(&self.callbacks, timeout);
        self.requests.get_mut(user_data).expect("open").client = Some(client);
    }

    /// The waker's eventfd is readable: empties it and reaps.
    pub fn on_wake(&mut self) {
        self.waker.drain();
        self.reap();
    }

    /// Before Redis sleeps, every event-loop iteration: reaps what completed (so a
    /// busy loop needs no wake-up for it) and publishes the iteration's requests with
    /// one wake-up of the DPU app.
    pub fn before_sleep(&mut self) {
        self.reap();
        self.publish();
        self.forget_dropped();
    }

    /// Drops the tags of keys whose copy Redis removed on its own (see
    /// [`crate::forget`]).
    fn forget_dropped(&mut self) {
        crate::forget::drain(|f| {
            if f.all {
                self.tags.clear();
                self.tags.shrink_to(TAGS_KEPT_AFTER_FLUSH);
            } else {
                for key in &f.keys {
                    self.tags.remove(key);
                }
            }
        });
    }

    /// Reaps every completion ready now and unblocks the clients whose commands are
    /// done.
    fn reap(&mut self) {
        loop {
            let reaped = &mut self.reaped;
            reaped.clear();
            let cap = reaped.capacity();
            match self.qp.poll_max(cap, |c| reaped.push(c)) {
                Ok(_) => {}
                Err(e) => {
                    self.stats.poll_errors += 1;
                    api::log(std::ptr::null_mut(), c"warning", &format!("prescient: polling completions: {e}"));
                }
            }
            if self.reaped.is_empty() {
                return;
            }
            for i in 0..self.reaped.len() {
                let c = self.reaped[i];
                self.complete(&c);
            }
        }
    }

    fn complete(&mut self, c: &Completion) {
        let value = if c.op == prescient_shim::OpCode::Get as u8 { self.qp.take_value(c) } else { None };
        let Some(entry) = self.requests.get_mut(c.user_data) else {
            self.stats.stray_completions += 1;
            return;
        };
        entry.in_flight = entry.in_flight.saturating_sub(1);
        let outcome = match &mut entry.op {
            Op::Set if c.status == Status::Ok => Some(Outcome::Stored { version: c.version }),
            Op::Set => Some(Outcome::Failed(errors::of_status(c.status, c.detail, "write"))),
            Op::Get { token } => Some(match (c.status, value) {
                (Status::Ok, Some(value)) => {
                    let refill = token.filter(|_| c.may_refill());
                    Outcome::Value { value, refill }
                }
                (Status::Ok, None) => Outcome::Failed(
                    "ERR prescient: the DPU app completed a GET without handing back its buffer, or with a value longer than the buffer (protocol error)"
                        .into(),
                ),
                (Status::NotFound, _) => Outcome::Missing,
                (status, _) => Outcome::Failed(errors::of_status(status, c.detail, "read")),
            }),
            Op::Del { done } => {
                if c.status == Status::Ok {
                    *done += 1;
                } else {
                    entry.failure.get_or_insert_with(|| errors::of_status(c.status, c.detail, "delete"));
                }
                let done = *done;
                (entry.in_flight == 0).then(|| entry.failure.take().map_or(Outcome::Deleted(done), Outcome::Failed))
            }
        };
        if entry.in_flight > 0 {
            return;
        }
        let token = Requests::token_of(c.user_data);
        match entry.client.take() {
            Some(client) => {
                entry.outcome = outcome;
                api::unblock(client, token);
            }
            // Answered already (the DPU app had stopped answering): the outcome is
            // dropped, its buffer with it.
            None => self.requests.close_if_done(token),
        }
    }

    /// Every 100 ms: reaps (in case a wake-up was lost) and publishes, as before each
    /// sleep.
    pub fn tick(&mut self) {
        self.reap();
        self.publish();
        self.forget_dropped();
    }

    /// Publishes what is queued and checks that the DPU app answers; when it stops,
    /// every waiting client is answered `UNAVAILABLE` at once (the requests stay on
    /// the ring for its successor, which completes or fails them; their entries wait
    /// for that).
    fn publish(&mut self) {
        match self.qp.flush() {
            Ok(()) => self.dpu_ok = true,
            Err(e @ ShimError::DpuNotResponding { .. }) => {
                if self.dpu_ok {
                    api::log(std::ptr::null_mut(), c"warning", &format!("prescient: {e}; waiting commands fail"));
                }
                self.dpu_ok = false;
                self.failing.clear();
                self.failing.extend(self.requests.blocked());
                for i in 0..self.failing.len() {
                    let user_data = self.failing[i];
                    let entry = self.requests.get_mut(user_data).expect("listed as blocked");
                    let client = entry.client.take().expect("listed as blocked");
                    entry.outcome = Some(Outcome::Failed(errors::dpu_lost(&e)));
                    self.stats.failed_dpu_lost += 1;
                    api::unblock(client, Requests::token_of(user_data));
                }
            }
            Err(e) => api::log(std::ptr::null_mut(), c"warning", &format!("prescient: {e}")),
        }
    }

    /// A blocked client's reply callback: replies with its command's outcome.
    pub fn reply(&mut self, call: &Call) {
        let token = call.unblock_token();
        let outcome = self.requests.by_token(token).and_then(|e| e.outcome.take());
        match outcome {
            Some(Outcome::Stored { version }) => {
                self.stats.sets_ok += 1;
                call.set_local(1, 2);
                self.refill_own_write(call, version);
                call.reply_simple(c"OK");
            }
            Some(Outcome::Value { value, refill }) => {
                call.reply_bulk(&value);
                if let Some(token) = refill {
                    call.set_local_bytes(1, &value);
                    let tag = directory::refill(SlotWord::unpack(token.word)).map(SlotWord::pack);
                    let refilled = tag.is_some_and(|tag| {
                        self.tag(call.arg(1), tag);
                        self.host.refill(token)
                    });
                    if refilled {
                        self.stats.gets_refilled += 1;
                    } else {
                        self.tags.remove(call.arg(1));
                        self.stats.refills_lost += 1;
                    }
                }
            }
            Some(Outcome::Missing) => {
                self.stats.gets_missing += 1;
                self.tags.remove(call.arg(1));
                call.delete_local(1);
                call.reply_null();
            }
            Some(Outcome::Deleted(n)) => {
                for i in 1..call.argc() {
                    self.tags.remove(call.arg(i));
                    call.delete_local(i);
                }
                call.reply_integer(i64::from(n));
            }
            Some(Outcome::Failed(msg)) => {
                self.stats.errors += 1;
                call.reply_error(&msg);
            }
            None => {
                self.stats.errors += 1;
                call.reply_error("ERR prescient: the command was unblocked without an outcome (module bug)");
            }
        }
    }

    /// After this node's SET of the key committed at stamp `version`: if the slot holds
    /// exactly the word that commit left, no other write touched it since, and Redis's
    /// copy (just set) is the newest value: refill and tag it.
    fn refill_own_write(&mut self, call: &Call, version: u64) {
        let key = call.arg(1);
        let ReadCheck::Miss(token) = self.host.check_read(key, prescient_shim::sys::monotonic_ns()) else {
            self.tags.remove(key);
            return;
        };
        let word = SlotWord::unpack(token.word);
        // A completion's version is the write's stamp: its directory version above
        // the writer's node id (8 bits). CLUSTER_NODE holds the node id + 1.
        let (slot_version, writer) = (version >> 8, (version & 0xff) as u8);
        let own = word.writer == writer && u32::from(writer) + 1 == self.own_node();
        let Some(tag) = directory::refill(word).map(SlotWord::pack) else { return };
        if word.state == SlotState::Invalid && own && word.version == slot_version {
            self.tag(key, tag);
            if self.host.refill(token) {
                self.stats.sets_refilled += 1;
                return;
            }
        }
        self.tags.remove(key);
    }

    fn tag(&mut self, key: &[u8], tag: u64) {
        match self.tags.get_mut(key) {
            Some(t) => *t = tag,
            None => {
                self.tags.insert(key.into(), tag);
            }
        }
    }

    /// A blocked client's free callback: the client side is done with the entry.
    pub fn release(&mut self, token: usize) {
        if let Some(entry) = self.requests.by_token(token) {
            entry.released = true;
            entry.outcome = None;
        }
        self.requests.close_if_done(token);
    }

    /// `PRESCIENT.STATS`.
    pub fn stats(&self, call: &Call) {
        let lease = self.host.lease_valid(prescient_shim::sys::monotonic_ns());
        let text =
            self.stats.render(self.requests.len(), self.tags.len(), self.dpu_ok, self.host.cluster_peers_up(), lease);
        call.reply_bulk(text.as_bytes());
    }
}
