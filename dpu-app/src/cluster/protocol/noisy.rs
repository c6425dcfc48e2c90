//! The conditions of a node that can repeat once per request, whose log lines are
//! rate-limited.

/// Conditions that can repeat once per request: each is counted in
/// [`NodeStats`](super::stats::NodeStats), and its log line is rate-limited
/// ([`crate::log_limit`]).
#[derive(Clone, Copy, Debug)]
pub(super) enum Noisy {
    /// A write that could not begin (outcome table full, a stage failed).
    WriteRefused,
    /// A holder refused a fragment (store full, malformed).
    HolderRefused,
    /// A committed write whose decision did not reach m + 1 holders in time.
    Undecided,
    /// An entry in a writer's log refused (malformed, tampered, inconsistent).
    EntryRefused,
    /// A GET met a fragment that failed its checks, or a frame that does not open.
    GetFragmentRefused,
    /// The fragment store had no room for a fragment.
    StoreFull,
    /// A peer's resync reached the newest write (repair's progress).
    ResyncDone,
}

impl Noisy {
    /// Number of reasons.
    pub(super) const COUNT: usize = 7;
}
