//! The read SLA: how long a read accepts to wait for a write that is still being
//! decided, and what it may return meanwhile. One concept for both places a read is
//! decided:
//!
//! - on the host, [`crate::Host::read_guard`] checks the key's cache-directory slot:
//!   on `Pending`, `Stale` serves the cached copy, `Fresh` waits up to `max_wait` for
//!   the slot to resolve and then asks the DPU app;
//! - in the DPU app, a GET ([`crate::Request::get`]) gathers the key's records:
//!   when it cannot prove the newest committed value (a write in flight whose decision
//!   sits on nodes it cannot reach, or records that straddle a commit), `Stale` returns
//!   the newest value it can prove, `Fresh` gathers again until `max_wait` has passed
//!   (after a few immediate rounds, whatever `max_wait` says) and then fails
//!   `Unavailable` rather than risk an older value.
//!
//! Writes carry no SLA: what a reader of the key may see while the write is pending is
//! that reader's choice, made with its own read SLA. On the wire a GET's descriptor
//! carries it as the `sla` byte (0 `Stale`, 1 `Fresh`) and `wait_us`; every other
//! descriptor carries both as 0, and the DPU app refuses one that does not (`BadSla`).

use std::time::Duration;

use crate::config::READ_WAIT_US_MAX;

/// How a read treats a write of its key that is still being decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadSla {
    /// Never wait: the host serves its cached copy while a write is pending; a GET
    /// returns the newest committed value the DPU app can prove.
    Stale,
    /// Wait up to `max_wait` (capped at [`READ_WAIT_US_MAX`] microseconds) for the
    /// newest value: the host for a `Pending` slot to resolve, the DPU app for the
    /// records that prove it. `Duration::ZERO`: never wait, fail (or miss) at once.
    Fresh {
        /// Longest wait.
        max_wait: Duration,
    },
}

impl ReadSla {
    /// `Fresh` that fails at once rather than wait: a GET's default.
    pub const FRESH_NOW: Self = Self::Fresh { max_wait: Duration::ZERO };

    /// The longest wait, capped at [`READ_WAIT_US_MAX`] (zero for `Stale`).
    pub fn max_wait(self) -> Duration {
        match self {
            Self::Stale => Duration::ZERO,
            Self::Fresh { max_wait } => max_wait.min(Duration::from_micros(READ_WAIT_US_MAX)),
        }
    }

    /// Whether an older value may be returned rather than fail.
    pub fn is_fresh(self) -> bool {
        matches!(self, Self::Fresh { .. })
    }

    /// The descriptor's `sla` byte and `wait_us` (capped).
    pub fn to_wire(self) -> (u8, u32) {
        match self {
            Self::Stale => (0, 0),
            Self::Fresh { .. } => (1, self.max_wait().as_micros() as u32),
        }
    }

    /// Parses a descriptor's `sla` byte and `wait_us`. `None` for an unknown SLA, a
    /// `Stale` one with a wait, or a wait over [`READ_WAIT_US_MAX`].
    pub fn from_wire(sla: u8, wait_us: u32) -> Option<Self> {
        match (sla, wait_us) {
            (0, 0) => Some(Self::Stale),
            (1, us) if u64::from(us) <= READ_WAIT_US_MAX => {
                Some(Self::Fresh { max_wait: Duration::from_micros(u64::from(us)) })
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_form_round_trips_and_caps_the_wait() {
        for sla in [ReadSla::Stale, ReadSla::FRESH_NOW, ReadSla::Fresh { max_wait: Duration::from_micros(250) }] {
            let (b, us) = sla.to_wire();
            assert_eq!(ReadSla::from_wire(b, us), Some(sla));
        }
        let long = ReadSla::Fresh { max_wait: Duration::from_secs(3600) };
        assert_eq!(long.to_wire(), (1, READ_WAIT_US_MAX as u32));
        assert_eq!(long.max_wait(), Duration::from_micros(READ_WAIT_US_MAX));
    }

    #[test]
    fn malformed_wire_forms_are_refused() {
        assert_eq!(ReadSla::from_wire(2, 0), None);
        assert_eq!(ReadSla::from_wire(0, 1), None, "a stale read names no wait");
        assert_eq!(ReadSla::from_wire(1, READ_WAIT_US_MAX as u32 + 1), None);
    }
}
