//! The cache directory: one 64-bit slot word per slot, the identity of a key, the rules
//! of every transition, and the reader-facing results built on them.
//!
//! ```text
//! bits 63..62  state: 0 Valid, 1 Pending, 2 Invalid, 3 Reserved
//! bits 61..56  writer node id (0..=63): the node that last set the word
//! bits 55..0   version (56 bits), ordered as an unsigned integer
//! ```
//! The word is little-endian when it crosses machines ([`SlotWord::to_bytes`]). The
//! all-zero word is `Valid(version 0, writer 0)`: a fresh region's directory is valid,
//! because nothing is cached yet and so nothing is stale.
//!
//! Remote DPU apps change the words by RDMA compare-and-swap; the host's KV store reads
//! them to decide whether its cached copy of a key may be served, and refills a slot
//! after a miss. Every change is computed by one of the pure transition functions here
//! ([`mark`], [`commit`], [`rollback`], [`refill`], [`revoke`], [`clear_dead`]) from the
//! word currently in the slot, and CASed in against exactly that word; both ends use
//! these functions, so they cannot disagree on a rule.
//!
//! Invariants:
//! - No transition moves a version backwards; a late speculative mark can never
//!   overwrite a newer version.
//! - [`mark`] and [`revoke`] always raise the version (until it saturates at
//!   [`VERSION_MAX`]), so a word seen before either can never be seen again: a refill
//!   token (an `Invalid` word) or a cached reader's word taken before a write can never
//!   match after it (no ABA through `Pending -> Invalid -> Valid`).
//! - A slot whose version saturated at [`VERSION_MAX`] can never be refilled: it stays
//!   a miss, which is always safe.
//! - A `Reserved` word is never written by these rules; a reader treats it as
//!   `Invalid` without refilling it, and the next mark, commit or revoke moves it
//!   forward (to `Pending`, `Invalid`, `Invalid`).
//! - Any 64-bit word decodes; hostile peers can write anything into the directory
//!   and nothing here panics on it.
//!
//! Key identity ([`key_id`]) and slot choice ([`slot_of`]) are part of the layout: the
//! DPU app feeds the same `key_id` to its predictor and uses `slot_of` on every peer's
//! directory to find the slot it CASes, so neither may change without a bump of
//! [`crate::layout::LAYOUT_VERSION`].

/// Highest writer node id a word can carry.
pub const WRITER_MAX: u8 = 63;
/// Highest version a word can carry; versions saturate here.
pub const VERSION_MAX: u64 = (1 << 56) - 1;

/// Bit positions of the fields in the packed word.
pub mod field {
    /// Shift of the 2-bit state.
    pub const STATE_SHIFT: u32 = 62;
    /// Shift of the 6-bit writer node id.
    pub const WRITER_SHIFT: u32 = 56;
    /// Mask of the writer once shifted down.
    pub const WRITER_MASK: u64 = 0x3f;
    /// Mask of the 56-bit version.
    pub const VERSION_MASK: u64 = super::VERSION_MAX;
}

const _: () = assert!(field::WRITER_MASK == WRITER_MAX as u64);
const _: () = assert!(field::WRITER_SHIFT == 56 && field::STATE_SHIFT == field::WRITER_SHIFT + 6);

/// The state half of a slot word.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum SlotState {
    /// The host's cached copy of every key in this slot may be served.
    Valid = 0,
    /// A write is being decided: the cached copy may be stale.
    Pending = 1,
    /// A write committed (or the directory was revoked): the cached copy is stale.
    Invalid = 2,
    /// Never written by the rules; read as `Invalid` and repaired forward.
    Reserved = 3,
}

/// A decoded slot word.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SlotWord {
    /// What a reader may do with its cached copy.
    pub state: SlotState,
    /// The node that last set the word (0..=[`WRITER_MAX`]).
    pub writer: u8,
    /// The slot's version (0..=[`VERSION_MAX`]).
    pub version: u64,
}

impl SlotWord {
    /// The word of a fresh directory: `Valid(version 0, writer 0)`.
    pub const FRESH: Self = Self { state: SlotState::Valid, writer: 0, version: 0 };

    /// Packs the word.
    ///
    /// # Panics
    /// If `writer` or `version` is out of range: words decoded by [`SlotWord::unpack`]
    /// and words the transitions return never are, so this is a bug in the caller.
    pub fn pack(self) -> u64 {
        assert!(self.writer <= WRITER_MAX, "slot word writer {} above {WRITER_MAX}", self.writer);
        assert!(self.version <= VERSION_MAX, "slot word version {} above {VERSION_MAX}", self.version);
        (u64::from(self.state as u8) << field::STATE_SHIFT)
            | (u64::from(self.writer) << field::WRITER_SHIFT)
            | self.version
    }

    /// Decodes any 64-bit word (state 3 decodes to [`SlotState::Reserved`]).
    pub fn unpack(word: u64) -> Self {
        let state = match word >> field::STATE_SHIFT {
            0 => SlotState::Valid,
            1 => SlotState::Pending,
            2 => SlotState::Invalid,
            _ => SlotState::Reserved,
        };
        Self {
            state,
            writer: ((word >> field::WRITER_SHIFT) & field::WRITER_MASK) as u8,
            version: word & field::VERSION_MASK,
        }
    }

    /// The word's bytes as they cross machines (little-endian).
    pub fn to_bytes(self) -> [u8; 8] {
        self.pack().to_le_bytes()
    }

    /// Decodes bytes that crossed machines (little-endian).
    pub fn from_bytes(bytes: [u8; 8]) -> Self {
        Self::unpack(u64::from_le_bytes(bytes))
    }
}

fn at(state: SlotState, version: u64, writer: u8) -> SlotWord {
    SlotWord { state, writer, version }
}

fn check_node(node: u8) {
    assert!(node <= WRITER_MAX, "node id {node} above {WRITER_MAX}: node ids are checked when a cluster is configured");
}

/// A writer announces a write of `version`: `Pending(max(current.version + 1,
/// version), writer)`, saturating at [`VERSION_MAX`].
///
/// The maximum, not the writer's own version: a slot shared by colliding keys may carry
/// a higher version already, and the mark must still block refills until this writer
/// resolves it. At least `current.version + 1`, so that the word can never return to
/// one a reader saw before the mark (a refill token, or a cached reader's word), even
/// when the writer's version is not above the slot's.
///
/// # Panics
/// If `writer` is above [`WRITER_MAX`] (a local configuration bug).
pub fn mark(current: SlotWord, version: u64, writer: u8) -> SlotWord {
    check_node(writer);
    let above = current.version.saturating_add(1).min(VERSION_MAX);
    at(SlotState::Pending, version.min(VERSION_MAX).max(above), writer)
}

/// The writer that CASed `placed` (the `Pending` word [`mark`] returned) has committed.
///
/// - `current == placed`: `Invalid(placed.version, placed.writer)`.
/// - `current` is `Valid`: `Invalid(current.version, current.writer)`: someone
///   revalidated the slot meanwhile with a value that cannot hold this write.
/// - `current` is `Reserved`: `Invalid(current.version, current.writer)` (repaired).
/// - otherwise (`Pending` of another writer, who will resolve it, or already
///   `Invalid`): `None`.
pub fn commit(current: SlotWord, placed: SlotWord) -> Option<SlotWord> {
    if current == placed {
        return Some(at(SlotState::Invalid, placed.version, placed.writer));
    }
    match current.state {
        SlotState::Valid | SlotState::Reserved => Some(at(SlotState::Invalid, current.version, current.writer)),
        SlotState::Pending | SlotState::Invalid => None,
    }
}

/// The writer's write failed or its lease expired unused: only if `current ==
/// placed`, the slot goes back to `prior` (what [`prior_of`] said of the word the mark
/// replaced) at `(placed.version, placed.writer)`: `Valid` stays `Valid`, anything
/// else becomes `Invalid`. Otherwise `None` (someone else moved the slot on).
pub fn rollback(current: SlotWord, placed: SlotWord, prior: SlotState) -> Option<SlotWord> {
    if current != placed {
        return None;
    }
    let state = if prior == SlotState::Valid { SlotState::Valid } else { SlotState::Invalid };
    Some(at(state, placed.version, placed.writer))
}

/// A reader filled its cache from a GET it issued after reading `current`: only from
/// `Invalid` to `Valid(current.version, current.writer)`; otherwise `None`. A slot at
/// [`VERSION_MAX`] is never refilled (a revoke could not have changed it).
pub fn refill(current: SlotWord) -> Option<SlotWord> {
    (current.state == SlotState::Invalid && current.version < VERSION_MAX)
        .then(|| at(SlotState::Valid, current.version, current.writer))
}

/// The DPU app invalidates its whole directory (it may have missed invalidations):
/// `Invalid(current.version + 1, by)`. The +1 changes every word, so a refill token
/// taken before the revocation can never succeed after it. It saturates at
/// [`VERSION_MAX`]; such a slot stays `Invalid` for good ([`refill`] refuses it).
///
/// # Panics
/// If `by` is above [`WRITER_MAX`] (a local configuration bug).
pub fn revoke(current: SlotWord, by: u8) -> SlotWord {
    check_node(by);
    at(SlotState::Invalid, current.version.saturating_add(1).min(VERSION_MAX), by)
}

/// A `Pending` word whose writer `dead` is known dead becomes `Invalid(current.version,
/// current.writer)`; any other word: `None`.
pub fn clear_dead(current: SlotWord, dead: u8) -> Option<SlotWord> {
    (current.state == SlotState::Pending && current.writer == dead)
        .then(|| at(SlotState::Invalid, current.version, current.writer))
}

/// What [`rollback`] should restore for a mark that replaced `current`: `Valid` if
/// `current` is `Valid`, else `Invalid`.
pub fn prior_of(current: SlotWord) -> SlotState {
    if current.state == SlotState::Valid {
        SlotState::Valid
    } else {
        SlotState::Invalid
    }
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// FNV-1a, 64-bit.
fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(FNV_OFFSET, |h, &b| (h ^ u64::from(b)).wrapping_mul(FNV_PRIME))
}

/// MurmurHash3's 64-bit finaliser: a bijection that spreads every input bit.
fn fmix64(mut k: u64) -> u64 {
    k ^= k >> 33;
    k = k.wrapping_mul(0xff51_afd7_ed55_8ccd);
    k ^= k >> 33;
    k = k.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    k ^ (k >> 33)
}

/// The 64-bit identity of `key`: an 8-byte key is its own id (`u64::from_le_bytes`),
/// any other key is FNV-1a 64 of its bytes followed by MurmurHash3's `fmix64`
/// finaliser. Stable across builds and machines; the DPU app's predictor and the
/// directory both use it, so it changes only with the layout version.
pub fn key_id(key: &[u8]) -> u64 {
    match <[u8; 8]>::try_from(key) {
        Ok(bytes) => u64::from_le_bytes(bytes),
        Err(_) => fmix64(fnv1a64(key)),
    }
}

/// The directory slot of `key_id` in a directory of `slots` slots: `fmix64(key_id) %
/// slots`. The id is mixed first because integer keys are dense: a plain `% slots`
/// would put neighbouring keys in neighbouring slots and repeat with the stride.
///
/// # Panics
/// If `slots` is 0 (check that a directory exists first).
pub fn slot_of(key_id: u64, slots: u32) -> u32 {
    assert!(slots > 0, "slot_of on a directory of 0 slots");
    (fmix64(key_id) % u64::from(slots)) as u32
}

/// What a reader needs to refill a slot after a miss: the slot and the exact word it
/// saw. The refill succeeds only if the slot still holds that word.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RefillToken {
    /// The directory slot.
    pub slot: u32,
    /// The packed word read before the GET was issued.
    pub word: u64,
}

/// A non-blocking read decision (see `Host::check_read`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadCheck {
    /// `Valid`: the cached copy may be served.
    Cached(SlotWord),
    /// `Pending`: a write is being decided; serve the cached copy only under a stale
    /// SLA, or wait for the slot to resolve.
    Pending(SlotWord),
    /// `Invalid` (or `Reserved`): the cached copy is stale. GET the value from the DPU
    /// app, cache it, then refill with the token.
    Miss(RefillToken),
    /// The directory lease is not valid now: the cache must not be used at all, and no
    /// refill is allowed. GET from the DPU app.
    NoLease,
    /// The region has no directory slots: nothing cached can be proven fresh.
    NoDirectory,
}

impl ReadCheck {
    /// The decision for packed `word` read from directory slot `slot` under a valid
    /// lease.
    pub fn of_word(slot: u32, word: u64) -> Self {
        let decoded = SlotWord::unpack(word);
        match decoded.state {
            SlotState::Valid => Self::Cached(decoded),
            SlotState::Pending => Self::Pending(decoded),
            SlotState::Invalid | SlotState::Reserved => Self::Miss(RefillToken { slot, word }),
        }
    }
}

/// The outcome of a blocking read check (see `Host::read_guard`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadGuard {
    /// Serve the cached copy. Seqlock-style readers confirm after copying it with
    /// `ReadGuard::still_valid`.
    Cached {
        /// The directory slot.
        slot: u32,
        /// The word seen.
        word: SlotWord,
    },
    /// Do not serve the cache: GET from the DPU app. With a token, refill the slot
    /// after caching the value; without one, do not refill.
    Miss {
        /// The refill token, if a refill is allowed.
        token: Option<RefillToken>,
    },
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const V: SlotState = SlotState::Valid;
    const P: SlotState = SlotState::Pending;
    const I: SlotState = SlotState::Invalid;
    const R: SlotState = SlotState::Reserved;

    #[test]
    fn golden_words_and_bytes() {
        assert_eq!(SlotWord::unpack(0), SlotWord::FRESH);
        assert_eq!(SlotWord::FRESH.pack(), 0);
        let w = at(P, 0x0012_3456_789a_bcde, 5);
        assert_eq!(w.pack(), 0x4512_3456_789a_bcde);
        assert_eq!(w.to_bytes(), [0xde, 0xbc, 0x9a, 0x78, 0x56, 0x34, 0x12, 0x45]);
        assert_eq!(SlotWord::from_bytes(w.to_bytes()), w);
        assert_eq!(at(I, 1, 63).pack(), 0xbf00_0000_0000_0001);
        assert_eq!(at(V, VERSION_MAX, 0).pack(), 0x00ff_ffff_ffff_ffff);
        assert_eq!(SlotWord::unpack(u64::MAX), at(R, VERSION_MAX, 63));
        assert_eq!(SlotWord::unpack(0xc000_0000_0000_0007), at(R, 7, 0));
    }

    #[test]
    #[should_panic(expected = "writer 64")]
    fn an_out_of_range_writer_is_a_loud_bug() {
        at(V, 0, 64).pack();
    }

    #[test]
    fn key_ids_and_slots_are_stable() {
        // FNV-1a 64 reference vectors.
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x8594_4171_f739_67e8);
        assert_eq!(fmix64(0), 0);
        assert_eq!(key_id(&42u64.to_le_bytes()), 42);
        assert_eq!(key_id(b"12345678"), u64::from_le_bytes(*b"12345678"));
        // Pinned: these values are part of the layout (see the module doc).
        assert_eq!(key_id(b"key-1"), 0xa002_e14b_20bb_64ec);
        assert_eq!(key_id(b""), 0xefd0_1f60_ba99_2926);
        assert_eq!(slot_of(0, 1024), 0);
        assert_eq!(slot_of(1, 1024), 812);
        assert_eq!(slot_of(key_id(b"key-1"), 65_536), 22_338);
    }

    #[test]
    fn dense_integer_keys_spread_over_the_slots() {
        let slots = 64u32;
        let mut count = [0u32; 64];
        for k in 0..64 * 64u64 {
            count[slot_of(key_id(&k.to_le_bytes()), slots) as usize] += 1;
        }
        // A plain `% slots` would give exactly 64 each; so would a good hash, roughly.
        // What it must not do is put consecutive keys in consecutive slots.
        assert!(count.iter().all(|&c| (24..=112).contains(&c)), "{count:?}");
        let consecutive = (0..1000u64).filter(|k| slot_of(k + 1, slots) == (slot_of(*k, slots) + 1) % slots).count();
        assert!(consecutive < 100, "{consecutive} of 1000 neighbours are in neighbouring slots");
    }

    #[test]
    fn mark_takes_the_higher_version_and_always_moves_the_word() {
        assert_eq!(mark(at(V, 5, 1), 9, 2), at(P, 9, 2));
        // A colliding key carries a higher version already: the mark still blocks.
        assert_eq!(mark(at(V, 12, 1), 9, 2), at(P, 13, 2));
        assert_eq!(mark(at(I, 9, 2), 9, 2), at(P, 10, 2));
        assert_eq!(mark(at(P, 4, 3), 5, 2), at(P, 5, 2));
        assert_eq!(mark(at(V, VERSION_MAX, 1), 3, 2), at(P, VERSION_MAX, 2));
        assert_eq!(mark(at(V, 1, 1), u64::MAX, 2), at(P, VERSION_MAX, 2), "a version above the range saturates");
    }

    #[test]
    fn a_token_cannot_come_back_through_a_mark_that_is_not_above_the_slot() {
        // The reader's token; then the same writer marks with a version not above
        // the slot's (a colliding key) and commits. With `Pending(max(current,
        // version))` the slot would return to the token's exact word and the reader's
        // refill of a value read before the write would succeed.
        let token = at(I, 1, 0);
        let placed = mark(token, 0, 0);
        let committed = commit(placed, placed).unwrap();
        assert_ne!(committed, token);
        assert_eq!(committed, at(I, 2, 0));
        // Likewise a cached reader's word cannot come back through a rollback.
        let cached = at(V, 4, 1);
        let placed = mark(cached, 4, 1);
        assert_ne!(rollback(placed, placed, prior_of(cached)), Some(cached));
    }

    #[test]
    fn commit_invalidates_what_it_placed_or_a_revalidated_slot() {
        let placed = mark(at(V, 5, 1), 9, 2);
        assert_eq!(commit(placed, placed), Some(at(I, 9, 2)));
        assert_eq!(commit(at(V, 11, 4), placed), Some(at(I, 11, 4)));
        assert_eq!(commit(at(R, 11, 4), placed), Some(at(I, 11, 4)));
        assert_eq!(commit(at(P, 11, 4), placed), None, "another writer resolves its own mark");
        assert_eq!(commit(at(I, 11, 4), placed), None);
    }

    #[test]
    fn rollback_restores_the_prior_state_only_over_its_own_mark() {
        let valid = at(V, 5, 1);
        let placed = mark(valid, 9, 2);
        assert_eq!(rollback(placed, placed, prior_of(valid)), Some(at(V, 9, 2)));
        for prior in [at(P, 5, 1), at(I, 5, 1), at(R, 5, 1)] {
            let placed = mark(prior, 9, 2);
            assert_eq!(prior_of(prior), I);
            assert_eq!(rollback(placed, placed, prior_of(prior)), Some(at(I, 9, 2)));
        }
        assert_eq!(rollback(at(P, 10, 3), placed, V), None);
        assert_eq!(rollback(at(I, 9, 2), placed, V), None);
    }

    #[test]
    fn refill_only_from_invalid_and_never_at_the_top() {
        assert_eq!(refill(at(I, 7, 3)), Some(at(V, 7, 3)));
        for s in [V, P, R] {
            assert_eq!(refill(at(s, 7, 3)), None, "{s:?}");
        }
        assert_eq!(refill(at(I, VERSION_MAX, 3)), None);
    }

    #[test]
    fn revoke_moves_every_word_and_saturates_invalid() {
        assert_eq!(revoke(at(V, 7, 3), 1), at(I, 8, 1));
        assert_eq!(revoke(at(I, 7, 3), 3), at(I, 8, 3));
        assert_eq!(revoke(at(R, 7, 3), 3), at(I, 8, 3));
        assert_eq!(revoke(at(P, VERSION_MAX, 3), 1), at(I, VERSION_MAX, 1));
    }

    #[test]
    fn clear_dead_resolves_only_the_dead_writers_marks() {
        assert_eq!(clear_dead(at(P, 7, 3), 3), Some(at(I, 7, 3)));
        assert_eq!(clear_dead(at(P, 7, 3), 4), None);
        for s in [V, I, R] {
            assert_eq!(clear_dead(at(s, 7, 3), 3), None, "{s:?}");
        }
    }

    #[test]
    fn read_checks_of_every_state() {
        assert_eq!(ReadCheck::of_word(3, 0), ReadCheck::Cached(SlotWord::FRESH));
        let pending = at(P, 4, 1);
        assert_eq!(ReadCheck::of_word(3, pending.pack()), ReadCheck::Pending(pending));
        for w in [at(I, 4, 1).pack(), u64::MAX] {
            assert_eq!(ReadCheck::of_word(3, w), ReadCheck::Miss(RefillToken { slot: 3, word: w }));
        }
    }

    /// One step of the slot's life, as the CAS loops of writers and readers drive it.
    #[derive(Clone, Debug)]
    enum Step {
        Mark { version: u64, writer: u8 },
        Commit(usize),
        Rollback(usize),
        Refill,
        Revoke(u8),
        ClearDead(u8),
    }

    // Small versions and few writers make the dangerous coincidences (a writer
    // marking a slot it last set, with a version not above it) common.
    fn version() -> impl Strategy<Value = u64> {
        prop_oneof![0..4u64, any::<u64>(), VERSION_MAX - 2..=VERSION_MAX]
    }

    fn node() -> impl Strategy<Value = u8> {
        prop_oneof![0..2u8, 0..=WRITER_MAX]
    }

    fn write() -> impl Strategy<Value = Step> {
        prop_oneof![
            (version(), node()).prop_map(|(version, writer)| Step::Mark { version, writer }),
            node().prop_map(Step::Revoke),
        ]
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            write(),
            any::<usize>().prop_map(Step::Commit),
            any::<usize>().prop_map(Step::Rollback),
            Just(Step::Refill),
            node().prop_map(Step::ClearDead),
        ]
    }

    /// A word a reader takes a refill token from: `Invalid` or `Reserved`.
    fn miss_word() -> impl Strategy<Value = u64> {
        (2..4u64, prop_oneof![0..2u64, 0..64u64], version())
            .prop_map(|(s, w, v)| s << 62 | w << 56 | v.min(VERSION_MAX))
    }

    fn word() -> impl Strategy<Value = u64> {
        prop_oneof![any::<u64>(), (0..4u64, 0..2u64, 0..4u64).prop_map(|(s, w, v)| s << 62 | w << 56 | v)]
    }

    /// Applies `step` to `current`; `marks` holds each mark placed and the prior state
    /// it replaced. Returns the new word, or `None` if nothing changes.
    fn apply(current: SlotWord, step: &Step, marks: &mut Vec<(SlotWord, SlotState)>) -> Option<SlotWord> {
        match *step {
            Step::Mark { version, writer } => {
                let placed = mark(current, version, writer);
                marks.push((placed, prior_of(current)));
                Some(placed)
            }
            Step::Commit(i) if !marks.is_empty() => commit(current, marks[i % marks.len()].0),
            Step::Rollback(i) if !marks.is_empty() => {
                let (placed, prior) = marks[i % marks.len()];
                rollback(current, placed, prior)
            }
            Step::Commit(_) | Step::Rollback(_) => None,
            Step::Refill => refill(current),
            Step::Revoke(by) => Some(revoke(current, by)),
            Step::ClearDead(dead) => clear_dead(current, dead),
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2048))]

        #[test]
        fn versions_never_decrease(start in word(), steps in proptest::collection::vec(step(), 0..40)) {
            let mut current = SlotWord::unpack(start);
            let mut marks = Vec::new();
            for s in &steps {
                if let Some(next) = apply(current, s, &mut marks) {
                    prop_assert!(next.version >= current.version, "{s:?}: {current:?} -> {next:?}");
                    prop_assert_eq!(SlotWord::unpack(next.pack()), next);
                    prop_assert_ne!(next.state, SlotState::Reserved);
                    current = next;
                }
            }
        }

        #[test]
        fn a_refill_token_never_survives_a_mark_or_revoke(
            token in miss_word(),
            older in proptest::collection::vec((version(), node(), any::<bool>()), 0..3),
            writes in write(),
            after in proptest::collection::vec(step(), 0..24),
        ) {
            // Marks other writers placed before the reader took its token.
            let mut marks: Vec<_> = older
                .iter()
                .map(|&(v, w, valid)| (at(SlotState::Pending, v.min(VERSION_MAX), w), if valid { V } else { I }))
                .collect();
            let mut current = SlotWord::unpack(token);
            for (i, s) in std::iter::once(&writes).chain(&after).enumerate() {
                current = apply(current, s, &mut marks).unwrap_or(current);
                // The reader may try its refill at any moment: the CAS succeeds only if
                // the slot holds the token's word and the rule allows a refill from it.
                let refilled = current.pack() == token && refill(current).is_some();
                prop_assert!(!refilled, "token {:?} refilled after {writes:?} {:?}", SlotWord::unpack(token), &after[..i]);
            }
        }

        #[test]
        fn rollback_never_revalidates_a_slot_that_was_not_valid(
            start in word(), version in any::<u64>(), writer in 0..=WRITER_MAX
        ) {
            let current = SlotWord::unpack(start);
            let placed = mark(current, version, writer);
            let back = rollback(placed, placed, prior_of(current)).expect("over its own mark");
            prop_assert_eq!(back.state == SlotState::Valid, current.state == SlotState::Valid);
        }

        #[test]
        fn no_word_makes_a_rule_panic(a in any::<u64>(), b in any::<u64>(), node in 0..=WRITER_MAX, v in any::<u64>()) {
            let (a, b) = (SlotWord::unpack(a), SlotWord::unpack(b));
            for next in [Some(mark(a, v, node)), commit(a, b), rollback(a, b, b.state), refill(a),
                         Some(revoke(a, node)), clear_dead(a, node)].into_iter().flatten() {
                prop_assert!(next.version >= a.version);
                next.pack();
            }
            let _ = ReadCheck::of_word(0, a.pack());
        }
    }
}
