//! The time a poll runs at, passed in (nothing in the protocol reads a clock).

/// The time a poll runs at: a monotonic clock (leases, timers; the same clock the
/// host's directory lease is read against) and wall-clock microseconds (versions).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Now {
    /// Monotonic nanoseconds.
    pub mono_ns: u64,
    /// Wall-clock microseconds since the Unix epoch.
    pub wall_us: u64,
}
