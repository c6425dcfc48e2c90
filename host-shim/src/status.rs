//! Completion status codes: what the DPU app tells the host about one request.

/// The outcome of one request, as carried in its completion.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u16)]
#[non_exhaustive]
pub enum Status {
    /// Done.
    Ok = 0,
    /// Unknown op code.
    BadOp = 1,
    /// Unknown SLA.
    BadSla = 2,
    /// A flag or reserved byte is not zero.
    ReservedNotZero = 3,
    /// Key length 0 or above the limit.
    BadKeyLength = 4,
    /// The value offset names no host buffer's value.
    BadOffset = 5,
    /// The value length does not fit the buffer (or is not 0 where it must be).
    BadValueLength = 6,
    /// The named buffer was not submitted by the host (wrong state or generation).
    BufferNotSubmitted = 7,
    /// The named buffer is already in flight: submitted twice.
    BufferInFlight = 8,
    /// The DPU app that took the request died; its successor fails it.
    DpuRestarted = 9,
    /// A stage of the write path (versioning, sealing, striping) failed the request.
    StageFailed = 10,
    /// A GET found no committed value for the key.
    NotFound = 11,
    /// The write reached fewer holders than the quorum and was rolled back: nothing of
    /// it is visible. `detail` is the number of holders reached.
    NotDurable = 12,
    /// The value cannot be rebuilt or proven now (fewer than k fragments reachable, or
    /// too many nodes unreachable).
    Unavailable = 13,
    /// A bounded queue, log or store of the DPU app is full.
    Overloaded = 14,
    /// This DPU app does not serve this op (an op code it knows of but does not
    /// implement).
    Unsupported = 15,
    /// A status this build does not know (from a newer DPU app).
    Unknown = u16::MAX,
}

impl Status {
    /// Decodes a status word.
    pub fn from_u16(v: u16) -> Self {
        match v {
            0 => Self::Ok,
            1 => Self::BadOp,
            2 => Self::BadSla,
            3 => Self::ReservedNotZero,
            4 => Self::BadKeyLength,
            5 => Self::BadOffset,
            6 => Self::BadValueLength,
            7 => Self::BufferNotSubmitted,
            8 => Self::BufferInFlight,
            9 => Self::DpuRestarted,
            10 => Self::StageFailed,
            11 => Self::NotFound,
            12 => Self::NotDurable,
            13 => Self::Unavailable,
            14 => Self::Overloaded,
            15 => Self::Unsupported,
            _ => Self::Unknown,
        }
    }

    /// A short description for logs and error messages.
    pub fn describe(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::BadOp => "unknown op code",
            Self::BadSla => "unknown SLA",
            Self::ReservedNotZero => "flags or reserved bytes not zero",
            Self::BadKeyLength => "key length out of range",
            Self::BadOffset => "value offset names no host buffer",
            Self::BadValueLength => "value length does not fit the buffer",
            Self::BufferNotSubmitted => "buffer not submitted by the host",
            Self::BufferInFlight => "buffer already in flight (submitted twice)",
            Self::DpuRestarted => "the DPU app restarted while the request was in flight",
            Self::StageFailed => "a stage of the write path (versioning, sealing, striping) failed the request",
            Self::NotFound => "no committed value for the key",
            Self::NotDurable => {
                "the write reached fewer holders than the quorum and was rolled back: nothing of it is visible; retry it"
            }
            Self::Unavailable => {
                "the value cannot be rebuilt or proven now (too few fragments or nodes reachable): retry later"
            }
            Self::Overloaded => {
                "a bounded queue, log or store of the DPU app is full: retry, or raise the limit its log names"
            }
            Self::Unsupported => {
                "this DPU app does not serve this op: use the KV store's own path for it"
            }
            Self::Unknown => "unknown status",
        }
    }
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.describe())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_stable_and_round_trip() {
        let all = [
            (Status::Ok, 0),
            (Status::BadOp, 1),
            (Status::BadSla, 2),
            (Status::ReservedNotZero, 3),
            (Status::BadKeyLength, 4),
            (Status::BadOffset, 5),
            (Status::BadValueLength, 6),
            (Status::BufferNotSubmitted, 7),
            (Status::BufferInFlight, 8),
            (Status::DpuRestarted, 9),
            (Status::StageFailed, 10),
            (Status::NotFound, 11),
            (Status::NotDurable, 12),
            (Status::Unavailable, 13),
            (Status::Overloaded, 14),
            (Status::Unsupported, 15),
        ];
        for (status, code) in all {
            assert_eq!(status as u16, code);
            assert_eq!(Status::from_u16(code), status);
            assert!(!status.describe().is_empty());
        }
        assert_eq!(Status::from_u16(16), Status::Unknown);
        assert_eq!(Status::from_u16(u16::MAX), Status::Unknown);
    }
}
