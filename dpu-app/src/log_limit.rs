//! Rate limits for log lines about conditions that can repeat once per request (a
//! refused descriptor, a holder refusing a fragment, a write that cannot begin). Such a
//! condition is counted where it happens (the node's summary and metrics show the
//! counts); its log line is written at most once per [`LOG_INTERVAL_NS`] per reason and
//! says how many were left out since the last one, so a flood of bad requests cannot
//! turn the log into the problem.
#![forbid(unsafe_code)]

/// At most one line per reason in this many nanoseconds.
pub const LOG_INTERVAL_NS: u64 = 5_000_000_000;

/// The state of one reason's limit.
#[derive(Clone, Copy, Debug, Default)]
pub struct LogLimit {
    /// No line before this time (0: none written yet).
    next_ns: u64,
    /// Lines left out since the last one written.
    suppressed: u64,
}

impl LogLimit {
    /// A limit that admits its first line at once.
    pub const fn new() -> Self {
        Self { next_ns: 0, suppressed: 0 }
    }

    /// Whether a line may be written at `now_ns`: `Some(left_out)` with the number of
    /// lines left out since the previous one, or `None` (counted as left out).
    pub fn admit(&mut self, now_ns: u64) -> Option<u64> {
        if self.next_ns != 0 && now_ns < self.next_ns {
            self.suppressed += 1;
            return None;
        }
        self.next_ns = now_ns.saturating_add(LOG_INTERVAL_NS).max(1);
        Some(std::mem::take(&mut self.suppressed))
    }
}

/// Limits for a fixed set of reasons, indexed by an enum's discriminant.
#[derive(Clone, Debug)]
pub struct LogLimits<const N: usize> {
    limits: [LogLimit; N],
}

impl<const N: usize> Default for LogLimits<N> {
    fn default() -> Self {
        Self { limits: [LogLimit::new(); N] }
    }
}

impl<const N: usize> LogLimits<N> {
    /// [`LogLimit::admit`] for reason `reason` (an index below `N`).
    pub fn admit(&mut self, reason: usize, now_ns: u64) -> Option<u64> {
        self.limits[reason].admit(now_ns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_interval_and_the_count_of_those_left_out() {
        let mut l = LogLimit::new();
        assert_eq!(l.admit(1_000), Some(0));
        for i in 0..999 {
            assert_eq!(l.admit(2_000 + i), None);
        }
        assert_eq!(l.admit(1_000 + LOG_INTERVAL_NS - 1), None);
        assert_eq!(l.admit(1_000 + LOG_INTERVAL_NS), Some(1000));
        assert_eq!(l.admit(1_000 + LOG_INTERVAL_NS + 1), None);
    }

    #[test]
    fn a_first_line_at_time_zero_still_limits_the_next() {
        let mut l = LogLimit::new();
        assert_eq!(l.admit(0), Some(0));
        assert_eq!(l.admit(1), None);
        assert_eq!(l.admit(LOG_INTERVAL_NS), Some(1));
    }

    #[test]
    fn reasons_are_limited_apart() {
        let mut l = LogLimits::<2>::default();
        assert_eq!(l.admit(0, 10), Some(0));
        assert_eq!(l.admit(1, 10), Some(0));
        assert_eq!(l.admit(0, 11), None);
        assert_eq!(l.admit(1, 11), None);
    }
}
