//! The reader protocol over the cache directory: may this node serve its cached copy
//! of a key now ([`Host::check_read`], [`Host::read_guard`]), and after a miss, may the
//! value it fetched become servable ([`Host::refill`]). The words are decoded whatever
//! they hold (a remote DPU app writes them); this module never writes one except by
//! the refill's compare-and-swap against the token's exact word.

use std::sync::atomic::{fence, AtomicU64, Ordering};
use std::time::Duration;

use crate::config::*;
use crate::directory::{self, ReadCheck, ReadGuard, RefillToken, SlotWord};
use crate::host::Host;
use crate::layout::header;
use crate::read_sla::ReadSla;
use crate::sys::monotonic_ns;

/// Reading through the cache directory. The protocol for a KV store that caches
/// values on this node:
///
/// 1. [`Host::check_read`] (or [`Host::read_guard`]) for the key. Serve the cache
///    only on `Cached` (and, under a stale SLA, on `Pending`).
/// 2. On a miss, GET the value from the DPU app ([`crate::Request::get`]), keeping the
///    [`RefillToken`] the miss came with: the token must be taken *before* the GET is
///    issued, so that a write the GET may not have seen changes the slot after it.
/// 3. Put the value in the cache (not yet servable), then [`Host::refill`] with the
///    token. Only if it returns true may the cache entry be marked valid; if it
///    returns false, a write (or a revocation) moved the slot meanwhile: drop the
///    entry or keep it unservable, and check again on the next read.
///
/// Without a valid lease ([`Host::lease_valid`]) the directory proves nothing: the
/// cache must not be served and no refill is allowed. Every word read from the
/// directory is decoded whatever it holds: a hostile peer can make a read miss, never
/// make it panic.
///
/// ```no_run
/// use prescient_shim::{sys, Host, ReadCheck};
/// # fn cached(_: &[u8]) -> Option<Vec<u8>> { None }
/// # fn get_from_dpu(_: &[u8]) -> Vec<u8> { Vec::new() }
/// # fn cache_fill(_: &[u8], _: &[u8]) {}
/// # fn cache_mark_valid(_: &[u8]) {}
/// # fn read(host: &Host, key: &[u8]) -> Vec<u8> {
/// match host.check_read(key, sys::monotonic_ns()) {
///     ReadCheck::Cached(_) => cached(key).unwrap_or_else(|| get_from_dpu(key)),
///     ReadCheck::Miss(token) => {
///         let value = get_from_dpu(key); // a GET issued after the token was taken
///         cache_fill(key, &value); // in the cache, not servable yet
///         if host.refill(token) {
///             cache_mark_valid(key);
///         }
///         value
///     }
///     ReadCheck::Pending(_) | ReadCheck::NoLease | ReadCheck::NoDirectory => get_from_dpu(key),
/// }
/// # }
/// ```
impl Host {
    /// The slot of `key` and its word (None if the region has no directory slots).
    fn directory_word(&self, key: &[u8]) -> Option<(u32, &AtomicU64)> {
        let slots = self.config().directory_slots;
        if slots == 0 {
            return None;
        }
        let slot = directory::slot_of(directory::key_id(key), slots);
        self.directory_slot(slot).map(|word| (slot, word))
    }

    /// The decoded word of `key`'s directory slot (None if the region has no
    /// directory slots).
    pub fn slot_state(&self, key: &[u8]) -> Option<SlotWord> {
        // Acquire: pairs with the Release of a local refill, so a reader that sees
        // `Valid` sees the cache entry the refilling thread wrote before it.
        self.directory_word(key).map(|(_, word)| SlotWord::unpack(word.load(Ordering::Acquire)))
    }

    /// The cluster nodes this host's DPU app reaches now, as a bit mask (its own bit
    /// included); 0 outside a cluster or while no DPU app runs.
    pub fn cluster_peers_up(&self) -> u32 {
        self.region().u32_at(header::CLUSTER_PEERS_UP).load(Ordering::Acquire)
    }

    /// Whether the DPU app's directory lease covers `now_ns` (`CLOCK_MONOTONIC`
    /// nanoseconds, see [`crate::sys::monotonic_ns`]).
    pub fn lease_valid(&self, now_ns: u64) -> bool {
        now_ns < self.region().u64_at(header::DIRECTORY_LEASE_UNTIL_NS).load(Ordering::Acquire)
    }

    /// Decides, without blocking, whether `key` may be served from this node's cache
    /// at `now_ns`. See the protocol above.
    pub fn check_read(&self, key: &[u8], now_ns: u64) -> ReadCheck {
        match self.directory_word(key) {
            Some((slot, word)) => self.check_slot(slot, word, now_ns),
            None => ReadCheck::NoDirectory,
        }
    }

    fn check_slot(&self, slot: u32, word: &AtomicU64, now_ns: u64) -> ReadCheck {
        if !self.lease_valid(now_ns) {
            return ReadCheck::NoLease;
        }
        // Acquire: as in `slot_state`.
        ReadCheck::of_word(slot, word.load(Ordering::Acquire))
    }

    /// The blocking form of [`Host::check_read`], on the clock
    /// [`crate::sys::monotonic_ns`].
    ///
    /// - [`ReadSla::Stale`] never waits: `Cached` and `Pending` give
    ///   [`ReadGuard::Cached`], a miss gives its token, no lease or no directory gives
    ///   a miss without one.
    /// - [`ReadSla::Fresh`]: `Cached` gives `Cached`; `Pending` spins, then sleeps
    ///   briefly between rechecks of the slot and the lease, until the slot resolves or
    ///   `max_wait` passes (capped at [`READ_WAIT_US_MAX`]); still `Pending` then gives a
    ///   miss without a token (ask the DPU app with a GET, do not refill). A miss gives
    ///   its token; no lease or no directory a miss without one.
    pub fn read_guard(&self, key: &[u8], sla: ReadSla) -> ReadGuard {
        let Some((slot, word)) = self.directory_word(key) else { return ReadGuard::Miss { token: None } };
        let first = self.check_slot(slot, word, monotonic_ns());
        let wait_ns = match (sla, first) {
            (ReadSla::Fresh { .. }, ReadCheck::Pending(_)) => sla.max_wait().as_nanos() as u64,
            (_, check) => return ReadGuard::of_check(slot, check),
        };
        let deadline = monotonic_ns().saturating_add(wait_ns);
        let mut spins = 0u32;
        loop {
            let now = monotonic_ns();
            match self.check_slot(slot, word, now) {
                ReadCheck::Pending(_) if now < deadline => {}
                ReadCheck::Pending(_) => return ReadGuard::Miss { token: None },
                check => return ReadGuard::of_check(slot, check),
            }
            if spins < READ_SPIN_ROUNDS {
                spins += 1;
                std::hint::spin_loop();
            } else {
                std::thread::sleep(Duration::from_micros(READ_SLEEP_US));
            }
        }
    }

    /// Marks the slot of `token` valid again after a miss: CASes the token's exact
    /// word to its [`directory::refill`] result. True if the slot is now `Valid`: the
    /// caller may then mark its cache entry valid. False if the slot moved since the
    /// token was taken, refilling is not allowed from its word, the lease is not valid
    /// now, or the token names no slot.
    pub fn refill(&self, token: RefillToken) -> bool {
        self.refill_at(token, monotonic_ns())
    }

    /// [`Host::refill`] with the lease checked at `now_ns` (a simulator's clock).
    pub fn refill_at(&self, token: RefillToken, now_ns: u64) -> bool {
        let Some(word) = self.directory_slot(token.slot) else { return false };
        if !self.lease_valid(now_ns) {
            return false;
        }
        let Some(next) = directory::refill(SlotWord::unpack(token.word)) else { return false };
        // AcqRel: Release publishes the cache entry this thread wrote before the refill
        // to readers that Acquire the Valid word.
        word.compare_exchange(token.word, next.pack(), Ordering::AcqRel, Ordering::Relaxed).is_ok()
    }
}

impl ReadGuard {
    /// The guard for `check` of directory slot `slot`; a `Pending` check reaches here
    /// only under a stale SLA, which serves it.
    fn of_check(slot: u32, check: ReadCheck) -> Self {
        match check {
            ReadCheck::Cached(word) | ReadCheck::Pending(word) => ReadGuard::Cached { slot, word },
            ReadCheck::Miss(token) => ReadGuard::Miss { token: Some(token) },
            ReadCheck::NoLease | ReadCheck::NoDirectory => ReadGuard::Miss { token: None },
        }
    }

    /// For seqlock-style readers that copied a cached value under this guard: true iff
    /// the slot still holds the word the guard saw and the lease is still valid, so
    /// nothing moved while the value was copied. Always false for a miss.
    pub fn still_valid(&self, host: &Host) -> bool {
        let ReadGuard::Cached { slot, word } = *self else { return false };
        let Some(current) = host.directory_slot(slot) else { return false };
        // Acquire fence: the caller's reads of the cached copy happen before this
        // reread of the word (the seqlock reader's fence). Every transition below the
        // saturated version changes the word, so a word equal to the guard's now was
        // unchanged throughout.
        fence(Ordering::Acquire);
        current.load(Ordering::Relaxed) == word.pack() && host.lease_valid(monotonic_ns())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::directory::{SlotState, VERSION_MAX};
    use crate::host::tests::{fixture, Fixture};

    impl Fixture {
        /// The word of `key`'s slot, as a remote DPU app would CAS it.
        fn word(&self, key: &[u8]) -> &AtomicU64 {
            let slot = directory::slot_of(directory::key_id(key), self.host.config().directory_slots);
            self.host.directory_slot(slot).unwrap()
        }

        fn set(&self, key: &[u8], word: SlotWord) {
            self.word(key).store(word.pack(), Ordering::Release);
        }

        fn lease_until(&self, ns: u64) {
            self.host.region().u64_at(header::DIRECTORY_LEASE_UNTIL_NS).store(ns, Ordering::Release);
        }
    }

    fn w(state: SlotState, version: u64, writer: u8) -> SlotWord {
        SlotWord { state, writer, version }
    }

    #[test]
    fn a_fresh_directory_is_valid_but_unleased() {
        let f = fixture("fresh", 16);
        assert_eq!(f.host.slot_state(b"k"), Some(SlotWord::FRESH));
        assert!(!f.host.lease_valid(0), "a lease of 0 is never valid");
        assert_eq!(f.host.check_read(b"k", monotonic_ns()), ReadCheck::NoLease);
        f.lease_until(u64::MAX);
        assert_eq!(f.host.check_read(b"k", monotonic_ns()), ReadCheck::Cached(SlotWord::FRESH));

        let none = fixture("no-directory", 0);
        assert_eq!(none.host.slot_state(b"k"), None);
        assert_eq!(none.host.check_read(b"k", 0), ReadCheck::NoDirectory);
        assert_eq!(none.host.read_guard(b"k", ReadSla::Stale), ReadGuard::Miss { token: None });
        assert!(!none.host.refill(RefillToken { slot: 0, word: w(SlotState::Invalid, 1, 0).pack() }));
    }

    #[test]
    fn the_lease_ends_at_its_deadline() {
        let f = fixture("lease", 16);
        f.lease_until(1_000);
        assert!(f.host.lease_valid(999));
        assert!(!f.host.lease_valid(1_000));
        f.set(b"k", w(SlotState::Invalid, 3, 1));
        assert_eq!(f.host.check_read(b"k", 1_000), ReadCheck::NoLease);
        let ReadCheck::Miss(token) = f.host.check_read(b"k", 999) else { panic!("a miss") };
        // The lease (on the real clock, far past 1000 ns) is over: no refill.
        assert!(!f.host.refill(token));
        assert_eq!(f.host.slot_state(b"k").unwrap().state, SlotState::Invalid);
    }

    #[test]
    fn miss_then_refill_makes_the_slot_cached_once() {
        let f = fixture("refill", 16);
        f.lease_until(u64::MAX);
        f.set(b"k", w(SlotState::Invalid, 5, 2));
        let ReadCheck::Miss(token) = f.host.check_read(b"k", monotonic_ns()) else { panic!("a miss") };
        assert!(f.host.refill(token));
        assert_eq!(f.host.check_read(b"k", monotonic_ns()), ReadCheck::Cached(w(SlotState::Valid, 5, 2)));
        assert!(!f.host.refill(token), "a token refills once");
        assert!(!f.host.refill(RefillToken { slot: 16, ..token }), "a slot out of range");
    }

    #[test]
    fn a_write_between_the_miss_and_the_refill_fails_the_refill() {
        let f = fixture("race", 16);
        f.lease_until(u64::MAX);
        f.set(b"k", w(SlotState::Invalid, 5, 2));
        let ReadCheck::Miss(token) = f.host.check_read(b"k", monotonic_ns()) else { panic!("a miss") };
        // A remote writer marks and commits while the reader's GET is out.
        let placed = directory::mark(SlotWord::unpack(token.word), 5, 2);
        f.set(b"k", placed);
        assert!(!f.host.refill(token));
        f.set(b"k", directory::commit(placed, placed).unwrap());
        assert!(!f.host.refill(token), "the committed word is not the token's");
        // A revocation likewise.
        let ReadCheck::Miss(token) = f.host.check_read(b"k", monotonic_ns()) else { panic!("a miss") };
        f.set(b"k", directory::revoke(SlotWord::unpack(token.word), 0));
        assert!(!f.host.refill(token));
    }

    #[test]
    fn hostile_words_are_misses_never_panics() {
        let f = fixture("hostile", 16);
        f.lease_until(u64::MAX);
        for word in [u64::MAX, 0xc000_0000_0000_0000, 0x8000_0000_0000_0000 | VERSION_MAX, 0x7fff_ffff_ffff_ffff] {
            f.word(b"k").store(word, Ordering::Release);
            let check = f.host.check_read(b"k", monotonic_ns());
            match SlotWord::unpack(word).state {
                SlotState::Valid => assert!(matches!(check, ReadCheck::Cached(_))),
                SlotState::Pending => assert!(matches!(check, ReadCheck::Pending(_))),
                SlotState::Invalid | SlotState::Reserved => {
                    let ReadCheck::Miss(token) = check else { panic!("{word:#x}: {check:?}") };
                    // Reserved is never refilled; nor is a saturated Invalid.
                    assert!(!f.host.refill(token), "{word:#x}");
                }
            }
        }
    }

    #[test]
    fn stale_reads_serve_pending_slots_and_never_wait() {
        let f = fixture("stale", 16);
        f.lease_until(u64::MAX);
        let pending = w(SlotState::Pending, 9, 3);
        f.set(b"k", pending);
        let guard = f.host.read_guard(b"k", ReadSla::Stale);
        assert!(matches!(guard, ReadGuard::Cached { word, .. } if word == pending), "{guard:?}");
        assert!(guard.still_valid(&f.host));
        f.set(b"k", w(SlotState::Invalid, 9, 3));
        assert!(!guard.still_valid(&f.host), "the slot moved while the value was copied");
        let ReadGuard::Miss { token: Some(token) } = f.host.read_guard(b"k", ReadSla::Stale) else { panic!() };
        assert!(!ReadGuard::Miss { token: Some(token) }.still_valid(&f.host));
        f.lease_until(0);
        assert_eq!(f.host.read_guard(b"k", ReadSla::Stale), ReadGuard::Miss { token: None });
    }

    #[test]
    fn a_cached_guard_is_no_longer_valid_once_the_lease_lapses() {
        let f = fixture("guard-lease", 16);
        f.lease_until(u64::MAX);
        let guard = f.host.read_guard(b"k", ReadSla::Fresh { max_wait: Duration::ZERO });
        assert!(matches!(guard, ReadGuard::Cached { word: SlotWord::FRESH, .. }), "{guard:?}");
        assert!(guard.still_valid(&f.host));
        f.lease_until(1);
        assert!(!guard.still_valid(&f.host));
    }

    #[test]
    fn fresh_reads_wait_for_a_pending_slot_to_resolve() {
        let f = fixture("fresh-wait", 16);
        f.lease_until(u64::MAX);
        let placed = directory::mark(SlotWord::FRESH, 4, 1);
        f.set(b"k", placed);
        // Nobody resolves it: the wait ends at max_wait with a miss that may not refill.
        let guard = f.host.read_guard(b"k", ReadSla::Fresh { max_wait: Duration::from_micros(200) });
        assert_eq!(guard, ReadGuard::Miss { token: None });
        // A writer commits while the reader waits: the reader sees the miss and may refill.
        let region = f.host.region().clone();
        let slot = directory::slot_of(directory::key_id(b"k"), 16);
        let committer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(5));
            let word = region.u64_at(region.layout().directory_slot(slot));
            word.store(directory::commit(placed, placed).unwrap().pack(), Ordering::Release);
        });
        let guard = f.host.read_guard(b"k", ReadSla::Fresh { max_wait: Duration::from_secs(20) });
        committer.join().unwrap();
        let ReadGuard::Miss { token: Some(token) } = guard else { panic!("{guard:?}") };
        assert_eq!(SlotWord::unpack(token.word), w(SlotState::Invalid, 4, 1));
        assert!(f.host.refill(token));
        // A lease that lapses while the reader waits ends the wait without a token.
        f.set(b"k", directory::mark(SlotWord::unpack(f.word(b"k").load(Ordering::Acquire)), 6, 1));
        let region = f.host.region().clone();
        let revoker = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(5));
            region.u64_at(header::DIRECTORY_LEASE_UNTIL_NS).store(0, Ordering::Release);
        });
        let guard = f.host.read_guard(b"k", ReadSla::Fresh { max_wait: Duration::from_secs(20) });
        revoker.join().unwrap();
        assert_eq!(guard, ReadGuard::Miss { token: None });
    }
}
