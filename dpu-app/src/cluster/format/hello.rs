//! The Hello: the one message of the cluster's rendezvous, a checked 256-byte view.
//!
//! Cluster nodes set up one RC queue pair per pair of nodes. The lower node id offers,
//! the higher answers: A creates its queue pair for B and sends an `Offer`; B creates (or
//! resets) its queue pair for A, connects it to A's endpoint and answers with its own
//! Hello (`Answer`); A connects. Besides the queue pair endpoint, a Hello carries every
//! region of `from` that `to` must know, with the geometry needed to address them.
//!
//! All integers are little-endian. A CRC32C of the first 252 bytes ends the frame, so a
//! damaged Hello is refused before any of its fields is trusted; reserved bytes must be
//! zero, so that a later format can use them without being misread by this one.
//!
//! ```text
//!   0..8   magic "PRHELLO\0"   8 format (1)   9 from   10 to
//!  11      kind (1 Offer, 2 Answer, 3 Ready)
//!  12..16  incarnation of `from` (bumped at each restart)
//!  16..24  cluster_hash (refuses a peer with another cluster configuration)
//!  24..52  queue pair endpoint (fabric::Endpoint::to_bytes)
//!  52..72  control block: `from`'s heartbeat block          (fabric::RemoteRegion::to_bytes)
//!  72..92  log for `to`: the fragment log on `from` that `to` writes into as a writer
//!  92..112 acks for `to`: where `to` writes its acknowledgements as a holder of `from`'s fragments
//! 112..132 store: `from`'s fragment store (peers READ sets of it)
//! 132..152 directory: `from`'s host cache directory (peers CAS slot words in it)
//! 152..156 directory slots  156..160 store sets  160..164 store ways
//! 164..168 store record bytes  168..172 log slots  172..176 log slot bytes   (u32 each)
//! 176..184 log applied: `from`'s applied sequence of the log for `to`
//! 184..204 fates: `from`'s fate ring (sequencer mode; zero otherwise)
//! 204..224 feed: `from`'s change feed (sequencer mode; zero otherwise: a node that
//!          fell behind copies the writes it missed from it)
//! 224..244 ledger: `from`'s stamp ledger (sequencer mode; zero otherwise: appliers READ
//!          its fences and entries to decide a fenced writer's stamps)
//! 244..252 next write: the first write number `from` may still take (a holder's fence
//!          of `from` is narrowed to the writes below it, `protocol/fence.rs`)
//! 252..256 crc32c of 0..252
//! ```
//!
//! [`Hello::new_checked`] also refuses a Hello whose geometry does not fit the region it
//! describes (more directory slots than the directory holds, and so on), so a node never
//! computes a remote address outside what its peer registered.

use crate::fabric::{Endpoint, RemoteRegion};

/// Bytes of a Hello.
pub const HELLO_BYTES: usize = 256;
/// The magic that starts every Hello.
pub const MAGIC: [u8; 8] = *b"PRHELLO\0";
/// Format this build writes and reads.
pub const FORMAT: u8 = 1;
/// Bytes of one directory slot word.
const DIRECTORY_SLOT_BYTES: u64 = 8;

/// Byte ranges of the Hello fields.
pub mod field {
    use std::ops::Range;
    /// Magic "PRHELLO\0".
    pub const MAGIC: Range<usize> = 0..8;
    /// Format version.
    pub const FORMAT: usize = 8;
    /// Sending node id.
    pub const FROM: usize = 9;
    /// Receiving node id.
    pub const TO: usize = 10;
    /// 1 Offer, 2 Answer, 3 Ready.
    pub const KIND: usize = 11;
    /// Incarnation of the sender.
    pub const INCARNATION: Range<usize> = 12..16;
    /// Hash of the cluster configuration.
    pub const CLUSTER_HASH: Range<usize> = 16..24;
    /// The sender's queue pair endpoint for the receiver.
    pub const ENDPOINT: Range<usize> = 24..52;
    /// The sender's heartbeat (control) block.
    pub const CONTROL: Range<usize> = 52..72;
    /// The fragment log on the sender that the receiver writes into.
    pub const LOG: Range<usize> = 72..92;
    /// The words on the sender where the receiver writes its acknowledgements.
    pub const ACKS: Range<usize> = 92..112;
    /// The sender's fragment store.
    pub const STORE: Range<usize> = 112..132;
    /// The sender's host cache directory.
    pub const DIRECTORY: Range<usize> = 132..152;
    /// Slot words in the directory.
    pub const DIRECTORY_SLOTS: Range<usize> = 152..156;
    /// Sets of the store.
    pub const STORE_SETS: Range<usize> = 156..160;
    /// Ways per store set.
    pub const STORE_WAYS: Range<usize> = 160..164;
    /// Bytes per store record.
    pub const STORE_RECORD_BYTES: Range<usize> = 164..168;
    /// Slots of the log.
    pub const LOG_SLOTS: Range<usize> = 168..172;
    /// Bytes per log slot.
    pub const LOG_SLOT_BYTES: Range<usize> = 172..176;
    /// The sender's applied sequence of its log for the receiver: where the receiver,
    /// as a writer, continues (entries below it are persisted; above it, lost).
    pub const LOG_APPLIED: Range<usize> = 176..184;
    /// The sender's fate ring (sequencer mode; zero otherwise).
    pub const FATES: Range<usize> = 184..204;
    /// The sender's change feed (sequencer mode; zero otherwise).
    pub const FEED: Range<usize> = 204..224;
    /// The sender's stamp ledger (sequencer mode; zero otherwise).
    pub const LEDGER: Range<usize> = 224..244;
    /// The first write number the sender may still take.
    pub const NEXT_WRITE: Range<usize> = 244..252;
    /// Reserved, zero (none left in format 1).
    pub const RESERVED: Range<usize> = 252..252;
    /// CRC32C of bytes 0..252.
    pub const CRC: Range<usize> = 252..256;
}

const _: () = assert!(field::CRC.end == HELLO_BYTES);
const _: () = assert!(field::ENDPOINT.end - field::ENDPOINT.start == Endpoint::WIRE_BYTES);
const _: () = assert!(field::DIRECTORY.end - field::DIRECTORY.start == RemoteRegion::WIRE_BYTES);
const _: () = assert!(
    field::LOG_SLOT_BYTES.end == field::LOG_APPLIED.start
        && field::LOG_APPLIED.end == field::FATES.start
        && field::FATES.end - field::FATES.start == RemoteRegion::WIRE_BYTES
        && field::FATES.end == field::FEED.start
        && field::FEED.end - field::FEED.start == RemoteRegion::WIRE_BYTES
        && field::FEED.end == field::LEDGER.start
        && field::LEDGER.end - field::LEDGER.start == RemoteRegion::WIRE_BYTES
        && field::LEDGER.end == field::NEXT_WRITE.start
        && field::NEXT_WRITE.end == field::RESERVED.start
        && field::RESERVED.end == field::CRC.start
);

/// Why a Hello was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HelloError {
    /// Fewer bytes than a Hello.
    #[error("hello truncated: {len} bytes, a hello is {need}; the peer sent a partial frame")]
    Truncated {
        /// Bytes given.
        len: usize,
        /// Bytes of a Hello.
        need: usize,
    },
    /// Not a Hello at all.
    #[error(
        "not a hello: magic {found:02x?}, expected \"PRHELLO\\0\"; something else is talking to the rendezvous port"
    )]
    Magic {
        /// The first 8 bytes.
        found: [u8; 8],
    },
    /// A format this build does not read.
    #[error("hello format {found} is not supported (this build reads format {supported}); run one release across the cluster")]
    Format {
        /// Format found.
        found: u8,
        /// Format this build reads.
        supported: u8,
    },
    /// The checksum does not match: the frame was damaged.
    #[error("hello checksum mismatch (stored {stored:#010x}, computed {computed:#010x}): frame damaged, the peer will retry")]
    Checksum {
        /// Checksum in the frame.
        stored: u32,
        /// Checksum of the bytes.
        computed: u32,
    },
    /// A reserved byte is not zero (a newer format, or damage the checksum missed).
    #[error("hello reserved byte {offset} is {value:#04x}, must be 0; the peer runs another format")]
    Reserved {
        /// Offset of the first non-zero reserved byte.
        offset: usize,
        /// Its value.
        value: u8,
    },
    /// A field holds a value no valid Hello has.
    #[error("hello field {field} = {value} is invalid: {reason}")]
    Field {
        /// Field name.
        field: &'static str,
        /// Its value.
        value: u64,
        /// Why it is invalid.
        reason: &'static str,
    },
}

/// Offer and Ready (from the lower node id) or Answer (from the higher): the three
/// steps of InfiniBand's connection manager (REQ, REP, RTU).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HelloKind {
    /// "Here is my queue pair for you": sent by the lower node id.
    Offer,
    /// "Here is mine, connected to yours": sent by the higher node id.
    Answer,
    /// "Mine is connected to yours too": sent by the lower node id once the answer
    /// brought its queue pair up; its endpoint is the answer's, echoed. Until it
    /// arrives the higher id posts nothing on the link: a request reaching a queue pair
    /// not yet ready to receive is dropped, and retried only until the retry count runs
    /// out.
    Ready,
}

impl HelloKind {
    /// The wire value.
    pub fn to_u8(self) -> u8 {
        match self {
            Self::Offer => 1,
            Self::Answer => 2,
            Self::Ready => 3,
        }
    }

    /// The kind of a wire value.
    pub fn from_u8(v: u8) -> Option<Self> {
        match v {
            1 => Some(Self::Offer),
            2 => Some(Self::Answer),
            3 => Some(Self::Ready),
            _ => None,
        }
    }
}

/// A view of a Hello over `T`'s bytes.
#[derive(Clone, Copy, Debug)]
pub struct Hello<T: AsRef<[u8]>> {
    buffer: T,
}

fn le32(b: &[u8]) -> u32 {
    u32::from_le_bytes(b.try_into().expect("field is 4 bytes"))
}

fn le64(b: &[u8]) -> u64 {
    u64::from_le_bytes(b.try_into().expect("field is 8 bytes"))
}

fn region(b: &[u8]) -> RemoteRegion {
    RemoteRegion::from_bytes(b).expect("field is RemoteRegion::WIRE_BYTES long")
}

impl<T: AsRef<[u8]>> Hello<T> {
    /// A view without any check; accessors panic if `buffer` is shorter than
    /// [`HELLO_BYTES`]. Use [`Self::new_checked`] for bytes from a peer.
    pub const fn new_unchecked(buffer: T) -> Self {
        Self { buffer }
    }

    /// A view of bytes that came from anywhere: checks length, magic, format, checksum,
    /// reserved bytes, kind, and that every field is in range (see [`Self::check`]).
    pub fn new_checked(buffer: T) -> Result<Self, HelloError> {
        let hello = Self::new_unchecked(buffer);
        hello.check()?;
        Ok(hello)
    }

    /// Checks what [`Self::new_checked`] promises.
    pub fn check(&self) -> Result<(), HelloError> {
        let b = self.buffer.as_ref();
        if b.len() < HELLO_BYTES {
            return Err(HelloError::Truncated { len: b.len(), need: HELLO_BYTES });
        }
        if self.magic() != MAGIC {
            return Err(HelloError::Magic { found: self.magic() });
        }
        if self.format() != FORMAT {
            return Err(HelloError::Format { found: self.format(), supported: FORMAT });
        }
        let computed = crc32c::crc32c(&b[..field::CRC.start]);
        if computed != self.crc() {
            return Err(HelloError::Checksum { stored: self.crc(), computed });
        }
        if let Some(i) = b[field::RESERVED].iter().position(|&v| v != 0) {
            let offset = field::RESERVED.start + i;
            return Err(HelloError::Reserved { offset, value: b[offset] });
        }
        if self.kind().is_none() {
            return Err(HelloError::Field {
                field: "kind",
                value: b[field::KIND].into(),
                reason: "not 1 (Offer), 2 (Answer) or 3 (Ready)",
            });
        }
        if self.from() == self.to() {
            return Err(HelloError::Field {
                field: "to",
                value: self.to().into(),
                reason: "a node does not greet itself",
            });
        }
        let regions = [
            ("control", self.control()),
            ("log", self.log()),
            ("acks", self.acks()),
            ("store", self.store()),
            ("directory", self.directory()),
            ("fates", self.fates()),
            ("feed", self.feed()),
            ("ledger", self.ledger()),
        ];
        for (name, r) in regions {
            if r.addr.checked_add(r.len).is_none() {
                return Err(HelloError::Field {
                    field: name,
                    value: r.len,
                    reason: "region wraps past the end of the address space",
                });
            }
        }
        let fits = |field, need: Option<u64>, region: RemoteRegion| match need {
            Some(n) if n <= region.len => Ok(()),
            _ => Err(HelloError::Field { field, value: region.len, reason: "region is smaller than its geometry" }),
        };
        let (slots, sets, ways) = (self.directory_slots(), self.store_sets(), self.store_ways());
        fits("directory", u64::from(slots).checked_mul(DIRECTORY_SLOT_BYTES), self.directory())?;
        let store_bytes = u64::from(sets)
            .checked_mul(u64::from(ways))
            .and_then(|n| n.checked_mul(u64::from(self.store_record_bytes())));
        fits("store", store_bytes, self.store())?;
        fits("log", u64::from(self.log_slots()).checked_mul(u64::from(self.log_slot_bytes())), self.log())?;
        Ok(())
    }

    /// The underlying bytes.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Magic.
    pub fn magic(&self) -> [u8; 8] {
        self.buffer.as_ref()[field::MAGIC].try_into().expect("field is 8 bytes")
    }

    /// Format version.
    pub fn format(&self) -> u8 {
        self.buffer.as_ref()[field::FORMAT]
    }

    /// Sending node id.
    pub fn from(&self) -> u8 {
        self.buffer.as_ref()[field::FROM]
    }

    /// Receiving node id.
    pub fn to(&self) -> u8 {
        self.buffer.as_ref()[field::TO]
    }

    /// Offer or Answer; `None` for any other wire value.
    pub fn kind(&self) -> Option<HelloKind> {
        HelloKind::from_u8(self.buffer.as_ref()[field::KIND])
    }

    /// Incarnation of the sender.
    pub fn incarnation(&self) -> u32 {
        le32(&self.buffer.as_ref()[field::INCARNATION])
    }

    /// Hash of the sender's cluster configuration.
    pub fn cluster_hash(&self) -> u64 {
        le64(&self.buffer.as_ref()[field::CLUSTER_HASH])
    }

    /// The sender's queue pair endpoint for the receiver.
    pub fn endpoint(&self) -> Endpoint {
        Endpoint::from_bytes(&self.buffer.as_ref()[field::ENDPOINT]).expect("field is Endpoint::WIRE_BYTES long")
    }

    /// The sender's heartbeat block.
    pub fn control(&self) -> RemoteRegion {
        region(&self.buffer.as_ref()[field::CONTROL])
    }

    /// The fragment log on the sender that the receiver writes into.
    pub fn log(&self) -> RemoteRegion {
        region(&self.buffer.as_ref()[field::LOG])
    }

    /// The words on the sender where the receiver writes its acknowledgements.
    pub fn acks(&self) -> RemoteRegion {
        region(&self.buffer.as_ref()[field::ACKS])
    }

    /// The sender's fragment store.
    pub fn store(&self) -> RemoteRegion {
        region(&self.buffer.as_ref()[field::STORE])
    }

    /// The sender's host cache directory.
    pub fn directory(&self) -> RemoteRegion {
        region(&self.buffer.as_ref()[field::DIRECTORY])
    }

    /// Slot words in the directory.
    pub fn directory_slots(&self) -> u32 {
        le32(&self.buffer.as_ref()[field::DIRECTORY_SLOTS])
    }

    /// Sets of the store.
    pub fn store_sets(&self) -> u32 {
        le32(&self.buffer.as_ref()[field::STORE_SETS])
    }

    /// Ways per store set.
    pub fn store_ways(&self) -> u32 {
        le32(&self.buffer.as_ref()[field::STORE_WAYS])
    }

    /// Bytes per store record.
    pub fn store_record_bytes(&self) -> u32 {
        le32(&self.buffer.as_ref()[field::STORE_RECORD_BYTES])
    }

    /// Slots of the log.
    pub fn log_slots(&self) -> u32 {
        le32(&self.buffer.as_ref()[field::LOG_SLOTS])
    }

    /// Bytes per log slot.
    pub fn log_slot_bytes(&self) -> u32 {
        le32(&self.buffer.as_ref()[field::LOG_SLOT_BYTES])
    }

    /// The sender's fate ring (zero in HLC mode).
    pub fn fates(&self) -> RemoteRegion {
        region(&self.buffer.as_ref()[field::FATES])
    }

    /// The sender's change feed (sequencer mode; zero otherwise).
    pub fn feed(&self) -> RemoteRegion {
        region(&self.buffer.as_ref()[field::FEED])
    }

    /// The sender's stamp ledger (sequencer mode; zero otherwise).
    pub fn ledger(&self) -> RemoteRegion {
        region(&self.buffer.as_ref()[field::LEDGER])
    }

    /// The first write number the sender may still take.
    pub fn next_write(&self) -> u64 {
        le64(&self.buffer.as_ref()[field::NEXT_WRITE])
    }

    /// The sender's applied sequence of its log for the receiver.
    pub fn log_applied(&self) -> u64 {
        u64::from_le_bytes(self.buffer.as_ref()[field::LOG_APPLIED].try_into().expect("8 bytes"))
    }

    /// Stored checksum.
    pub fn crc(&self) -> u32 {
        le32(&self.buffer.as_ref()[field::CRC])
    }
}

/// The decoded fields of a Hello, what [`HelloRepr::emit`] writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HelloRepr {
    /// Sending node id.
    pub from: u8,
    /// Receiving node id (not `from`).
    pub to: u8,
    /// Offer or Answer.
    pub kind: HelloKind,
    /// Incarnation of `from`, bumped at each restart.
    pub incarnation: u32,
    /// Hash of the cluster configuration; a node refuses a peer whose hash differs.
    pub cluster_hash: u64,
    /// `from`'s queue pair endpoint for `to`.
    pub endpoint: Endpoint,
    /// `from`'s heartbeat block.
    pub control: RemoteRegion,
    /// The fragment log on `from` that `to` writes into as a writer.
    pub log: RemoteRegion,
    /// The words on `from` where `to` writes its acknowledgements as a holder of
    /// `from`'s fragments.
    pub acks: RemoteRegion,
    /// `from`'s fragment store (peers READ sets of it).
    pub store: RemoteRegion,
    /// `from`'s host cache directory (peers CAS slot words in it).
    pub directory: RemoteRegion,
    /// Slot words (8 bytes each) in `directory`.
    pub directory_slots: u32,
    /// Sets of `store`.
    pub store_sets: u32,
    /// Ways per set of `store`.
    pub store_ways: u32,
    /// Bytes per record of `store`.
    pub store_record_bytes: u32,
    /// Slots of `log`.
    pub log_slots: u32,
    /// Bytes per slot of `log`.
    pub log_slot_bytes: u32,
    /// `from`'s applied sequence of `log`: where `to` continues writing.
    pub applied: u64,
    /// `from`'s fate ring (peers READ it in sequencer mode; zero otherwise).
    pub fates: RemoteRegion,
    /// `from`'s change feed (a peer that fell behind READs it; zero otherwise).
    pub feed: RemoteRegion,
    /// `from`'s stamp ledger (appliers READ it; zero otherwise).
    pub ledger: RemoteRegion,
    /// The first write number `from` may still take.
    pub next_write: u64,
}

impl HelloRepr {
    /// Reads a checked Hello.
    pub fn parse<T: AsRef<[u8]>>(hello: &Hello<T>) -> Result<Self, HelloError> {
        hello.check()?;
        Ok(Self {
            from: hello.from(),
            to: hello.to(),
            kind: hello.kind().expect("checked"),
            incarnation: hello.incarnation(),
            cluster_hash: hello.cluster_hash(),
            endpoint: hello.endpoint(),
            control: hello.control(),
            log: hello.log(),
            acks: hello.acks(),
            store: hello.store(),
            directory: hello.directory(),
            directory_slots: hello.directory_slots(),
            store_sets: hello.store_sets(),
            store_ways: hello.store_ways(),
            store_record_bytes: hello.store_record_bytes(),
            log_slots: hello.log_slots(),
            log_slot_bytes: hello.log_slot_bytes(),
            applied: hello.log_applied(),
            fates: hello.fates(),
            feed: hello.feed(),
            ledger: hello.ledger(),
            next_write: hello.next_write(),
        })
    }

    /// Writes the Hello, reserved zeros and checksum included, into the first
    /// [`HELLO_BYTES`] of `buffer`; panics (programmer error) if it is shorter. Emitting
    /// does not validate: check the result with [`Hello::new_checked`] before sending.
    pub fn emit(&self, buffer: &mut [u8]) {
        let b = &mut buffer[..HELLO_BYTES];
        b[field::MAGIC].copy_from_slice(&MAGIC);
        b[field::FORMAT] = FORMAT;
        b[field::FROM] = self.from;
        b[field::TO] = self.to;
        b[field::KIND] = self.kind.to_u8();
        b[field::INCARNATION].copy_from_slice(&self.incarnation.to_le_bytes());
        b[field::CLUSTER_HASH].copy_from_slice(&self.cluster_hash.to_le_bytes());
        b[field::ENDPOINT].copy_from_slice(&self.endpoint.to_bytes());
        b[field::CONTROL].copy_from_slice(&self.control.to_bytes());
        b[field::LOG].copy_from_slice(&self.log.to_bytes());
        b[field::ACKS].copy_from_slice(&self.acks.to_bytes());
        b[field::STORE].copy_from_slice(&self.store.to_bytes());
        b[field::DIRECTORY].copy_from_slice(&self.directory.to_bytes());
        b[field::DIRECTORY_SLOTS].copy_from_slice(&self.directory_slots.to_le_bytes());
        b[field::STORE_SETS].copy_from_slice(&self.store_sets.to_le_bytes());
        b[field::STORE_WAYS].copy_from_slice(&self.store_ways.to_le_bytes());
        b[field::STORE_RECORD_BYTES].copy_from_slice(&self.store_record_bytes.to_le_bytes());
        b[field::LOG_SLOTS].copy_from_slice(&self.log_slots.to_le_bytes());
        b[field::LOG_SLOT_BYTES].copy_from_slice(&self.log_slot_bytes.to_le_bytes());
        b[field::LOG_APPLIED].copy_from_slice(&self.applied.to_le_bytes());
        b[field::FATES].copy_from_slice(&self.fates.to_bytes());
        b[field::FEED].copy_from_slice(&self.feed.to_bytes());
        b[field::LEDGER].copy_from_slice(&self.ledger.to_bytes());
        b[field::NEXT_WRITE].copy_from_slice(&self.next_write.to_le_bytes());
        b[field::RESERVED].fill(0);
        let crc = crc32c::crc32c(&b[..field::CRC.start]);
        b[field::CRC].copy_from_slice(&crc.to_le_bytes());
    }

    /// The Hello as a frame, checked: a Hello that its receiver would refuse (`from` equal
    /// to `to`, a geometry larger than its region) is an error here, before it is sent.
    pub fn to_frame(&self) -> Result<[u8; HELLO_BYTES], HelloError> {
        let mut frame = [0u8; HELLO_BYTES];
        self.emit(&mut frame);
        Hello::new_checked(&frame[..])?;
        Ok(frame)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use proptest::prelude::*;

    use super::*;

    /// A Hello with a distinct value in every field.
    pub(crate) fn repr() -> HelloRepr {
        let region = |addr, len, rkey| RemoteRegion { addr, len, rkey };
        HelloRepr {
            from: 1,
            to: 2,
            kind: HelloKind::Offer,
            incarnation: 0x0A0B_0C0D,
            cluster_hash: 0x1122_3344_5566_7788,
            endpoint: Endpoint {
                gid: core::array::from_fn(|i| 0x10 + i as u8),
                qpn: 0x21,
                psn: 0x00AB_CDEF,
                lid: 0x0102,
                port: 0x0304,
            },
            control: region(0x1000, 0x40, 0x0001_0001),
            log: region(0x2000_0000, 0x1_0000, 0x0002_0002),
            acks: region(0x3000, 0x100, 0x0003_0003),
            store: region(0x4000_0000, 0x10_0000, 0x0004_0004),
            directory: region(0x5000_0000, 0x8000, 0x0005_0005),
            directory_slots: 4096,
            store_sets: 256,
            store_ways: 4,
            store_record_bytes: 1024,
            log_slots: 16,
            log_slot_bytes: 4096,
            applied: 0,
            fates: region(0x6000_0000, 0x2000, 0x0006_0006),
            feed: region(0x7000_0000, 0x3000, 0x0007_0007),
            ledger: region(0x8000_0000, 0x4000, 0x0008_0008),
            next_write: 0x1234,
        }
    }

    #[rustfmt::skip]
    const GOLDEN: [u8; 176] = [
        // magic, format 1, from 1, to 2, kind Offer; incarnation
        b'P', b'R', b'H', b'E', b'L', b'L', b'O', 0, 1, 1, 2, 1, 0x0d, 0x0c, 0x0b, 0x0a,
        // cluster hash; endpoint gid
        0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11, 0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17,
        0x18, 0x19, 0x1a, 0x1b, 0x1c, 0x1d, 0x1e, 0x1f,
        // qpn, psn, lid, port
        0x21, 0, 0, 0, 0xef, 0xcd, 0xab, 0, 0x02, 0x01, 0x04, 0x03,
        // control: addr, len, rkey
        0x00, 0x10, 0, 0, 0, 0, 0, 0, 0x40, 0, 0, 0, 0, 0, 0, 0, 0x01, 0, 0x01, 0,
        // log
        0, 0, 0, 0x20, 0, 0, 0, 0, 0, 0, 0x01, 0, 0, 0, 0, 0, 0x02, 0, 0x02, 0,
        // acks
        0, 0x30, 0, 0, 0, 0, 0, 0, 0, 0x01, 0, 0, 0, 0, 0, 0, 0x03, 0, 0x03, 0,
        // store
        0, 0, 0, 0x40, 0, 0, 0, 0, 0, 0, 0x10, 0, 0, 0, 0, 0, 0x04, 0, 0x04, 0,
        // directory
        0, 0, 0, 0x50, 0, 0, 0, 0, 0, 0x80, 0, 0, 0, 0, 0, 0, 0x05, 0, 0x05, 0,
        // directory slots 4096, store sets 256, ways 4, record bytes 1024, log slots 16, slot bytes 4096
        0, 0x10, 0, 0, 0, 0x01, 0, 0, 4, 0, 0, 0, 0, 0x04, 0, 0, 16, 0, 0, 0, 0, 0x10, 0, 0,
    ];
    /// The fate ring's region (addr, len, rkey), after 8 zero bytes of the log's applied
    /// sequence.
    const GOLDEN_FATES: [u8; 20] = [0, 0, 0, 0x60, 0, 0, 0, 0, 0, 0x20, 0, 0, 0, 0, 0, 0, 0x06, 0, 0x06, 0];
    /// The change feed's region (addr, len, rkey).
    const GOLDEN_FEED: [u8; 20] = [0, 0, 0, 0x70, 0, 0, 0, 0, 0, 0x30, 0, 0, 0, 0, 0, 0, 0x07, 0, 0x07, 0];
    /// The stamp ledger's region (addr, len, rkey) and the next write number.
    const GOLDEN_LEDGER: [u8; 28] =
        [0, 0, 0, 0x80, 0, 0, 0, 0, 0, 0x40, 0, 0, 0, 0, 0, 0, 0x08, 0, 0x08, 0, 0x34, 0x12, 0, 0, 0, 0, 0, 0];
    /// CRC32C of GOLDEN, 8 zero bytes, GOLDEN_FATES, GOLDEN_FEED and GOLDEN_LEDGER,
    /// computed independently (a bitwise CRC32C in Python).
    const GOLDEN_CRC: u32 = 0xc895_1e4c;

    /// Re-seals `frame` after a test edits it, so that a later check is what refuses it.
    fn reseal(frame: &mut [u8; HELLO_BYTES]) {
        let crc = crc32c::crc32c(&frame[..field::CRC.start]);
        frame[field::CRC].copy_from_slice(&crc.to_le_bytes());
    }

    #[test]
    fn golden_bytes() {
        let frame = repr().to_frame().unwrap();
        assert_eq!(frame[..176], GOLDEN);
        assert_eq!(frame[176..184], [0u8; 8]);
        assert_eq!(frame[184..204], GOLDEN_FATES);
        assert_eq!(frame[204..224], GOLDEN_FEED);
        assert_eq!(frame[224..252], GOLDEN_LEDGER);
        assert_eq!(frame[252..], GOLDEN_CRC.to_le_bytes());
        let view = Hello::new_checked(&frame[..]).unwrap();
        assert_eq!(HelloRepr::parse(&view).unwrap(), repr());
        assert_eq!(view.kind(), Some(HelloKind::Offer));
    }

    #[test]
    fn every_bit_flip_is_refused() {
        let frame = repr().to_frame().unwrap();
        for byte in 0..HELLO_BYTES {
            for bit in 0..8 {
                let mut damaged = frame;
                damaged[byte] ^= 1 << bit;
                assert!(Hello::new_checked(&damaged[..]).is_err(), "flip of bit {bit} of byte {byte} accepted");
            }
        }
    }

    #[test]
    fn short_and_foreign_frames_are_refused() {
        let frame = repr().to_frame().unwrap();
        for len in 0..HELLO_BYTES {
            assert_eq!(
                Hello::new_checked(&frame[..len]).unwrap_err(),
                HelloError::Truncated { len, need: HELLO_BYTES }
            );
        }
        let mut f = frame;
        f[field::MAGIC].copy_from_slice(b"GET / HT");
        reseal(&mut f);
        assert!(matches!(Hello::new_checked(&f[..]), Err(HelloError::Magic { .. })));
        let mut f = frame;
        f[field::FORMAT] = 2;
        reseal(&mut f);
        assert_eq!(Hello::new_checked(&f[..]).unwrap_err(), HelloError::Format { found: 2, supported: FORMAT });
        let mut f = frame;
        f[field::KIND] = 4;
        reseal(&mut f);
        assert!(matches!(Hello::new_checked(&f[..]), Err(HelloError::Field { field: "kind", .. })));
    }

    #[test]
    fn a_hello_that_its_receiver_would_refuse_is_not_emitted() {
        let to_self = HelloRepr { to: 1, ..repr() };
        assert!(matches!(to_self.to_frame(), Err(HelloError::Field { field: "to", .. })));
        let mut big = repr();
        big.directory_slots += 1;
        assert!(matches!(big.to_frame(), Err(HelloError::Field { field: "directory", .. })));
        let mut big = repr();
        big.store_ways = u32::MAX;
        big.store_record_bytes = u32::MAX;
        assert!(matches!(big.to_frame(), Err(HelloError::Field { field: "store", .. })));
        let mut big = repr();
        big.log_slot_bytes += 1;
        assert!(matches!(big.to_frame(), Err(HelloError::Field { field: "log", .. })));
        let mut wraps = repr();
        wraps.acks.addr = u64::MAX - 8;
        assert!(matches!(wraps.to_frame(), Err(HelloError::Field { field: "acks", .. })));
        let answer = HelloRepr { kind: HelloKind::Answer, from: 2, to: 1, ..repr() };
        let frame = answer.to_frame().unwrap();
        assert_eq!(HelloRepr::parse(&Hello::new_unchecked(&frame[..])).unwrap(), answer);
    }

    proptest! {
        #[test]
        fn checking_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            if let Ok(view) = Hello::new_checked(&bytes[..]) {
                let _ = HelloRepr::parse(&view).unwrap();
            }
        }

        #[test]
        fn hellos_round_trip(from in any::<u8>(), to in any::<u8>(), kind in 1u8..=3, incarnation in any::<u32>(),
                             cluster_hash in any::<u64>(), qpn in any::<u32>(), psn in any::<u32>(),
                             addr in 0u64..1 << 48, slots in 0u32..1 << 20, ways in 0u32..64) {
            prop_assume!(from != to);
            let kind = HelloKind::from_u8(kind).unwrap();
            let r = HelloRepr {
                from, to, kind, incarnation, cluster_hash,
                endpoint: Endpoint { qpn, psn, ..repr().endpoint },
                directory: RemoteRegion { addr, len: u64::from(slots) * 8, rkey: qpn },
                directory_slots: slots,
                store_ways: ways,
                store: RemoteRegion { addr, len: 256 * u64::from(ways) * 1024, rkey: psn },
                ..repr()
            };
            let frame = r.to_frame().unwrap();
            prop_assert_eq!(HelloRepr::parse(&Hello::new_checked(&frame[..]).unwrap()).unwrap(), r);
        }
    }
}
