//! Frames of the emulated fabric over TCP: a hello that opens a connection to one queue
//! pair, requests (one per work request) and responses. Little-endian, fixed headers
//! followed by the payload; every frame from a peer is parsed with a checked parse.

use crate::fabric::{FabricError, Result};
use crate::limits::MESSAGE_BYTES_MAX;

/// Byte ranges of the hello frame.
pub mod hello {
    use std::ops::Range;
    /// Magic "PFAB".
    pub const MAGIC: Range<usize> = 0..4;
    /// Protocol version.
    pub const VERSION: Range<usize> = 4..6;
    /// Reserved, zero.
    pub const RESERVED: Range<usize> = 6..8;
    /// Destination queue pair number.
    pub const DST_QPN: Range<usize> = 8..12;
    /// Source node id (for the model).
    pub const SRC_NODE: Range<usize> = 12..16;
    /// How long the responder may wait for a receive (RNR retries), microseconds.
    pub const RNR_WAIT_US: Range<usize> = 16..20;
    /// How long the responder may wait for its queue pair to reach RTR, microseconds.
    pub const READY_WAIT_US: Range<usize> = 20..24;
    /// Frame length.
    pub const LEN: usize = 24;
}

/// Byte ranges of a request header.
pub mod request {
    use std::ops::Range;
    /// Magic "PQ".
    pub const MAGIC: Range<usize> = 0..2;
    /// Operation kind.
    pub const KIND: usize = 2;
    /// Flags: bit 0 = immediate present.
    pub const FLAGS: usize = 3;
    /// Payload length (WRITE, SEND) or requested length (READ).
    pub const LEN: Range<usize> = 4..8;
    /// Packet sequence number.
    pub const PSN: Range<usize> = 8..12;
    /// Immediate data.
    pub const IMM: Range<usize> = 12..16;
    /// Remote address.
    pub const ADDR: Range<usize> = 16..24;
    /// Remote key.
    pub const RKEY: Range<usize> = 24..28;
    /// One-way delay the model chose, microseconds: the responder holds the request that long.
    pub const DELAY_US: Range<usize> = 28..32;
    /// Compare value (CAS) or addend (FETCH_ADD).
    pub const ARG0: Range<usize> = 32..40;
    /// Swap value (CAS).
    pub const ARG1: Range<usize> = 40..48;
    /// Header length.
    pub const HEADER_LEN: usize = 48;
}

/// Byte ranges of a response header.
pub mod response {
    use std::ops::Range;
    /// Magic "PR".
    pub const MAGIC: Range<usize> = 0..2;
    /// Status (see `Status`).
    pub const STATUS: usize = 2;
    /// Reserved, zero.
    pub const RESERVED: usize = 3;
    /// Payload length (READ data).
    pub const LEN: Range<usize> = 4..8;
    /// Packet sequence number being answered.
    pub const PSN: Range<usize> = 8..12;
    /// Reserved, zero.
    pub const RESERVED2: Range<usize> = 12..16;
    /// Old value of an atomic.
    pub const VALUE: Range<usize> = 16..24;
    /// Header length.
    pub const HEADER_LEN: usize = 24;
}

const HELLO_MAGIC: u32 = u32::from_le_bytes(*b"PFAB");
const HELLO_VERSION: u16 = 1;
const REQUEST_MAGIC: u16 = u16::from_le_bytes(*b"PQ");
const RESPONSE_MAGIC: u16 = u16::from_le_bytes(*b"PR");

fn u16_at(b: &[u8], r: std::ops::Range<usize>) -> u16 {
    u16::from_le_bytes(b[r].try_into().expect("range of 2"))
}
fn u32_at(b: &[u8], r: std::ops::Range<usize>) -> u32 {
    u32::from_le_bytes(b[r].try_into().expect("range of 4"))
}
fn u64_at(b: &[u8], r: std::ops::Range<usize>) -> u64 {
    u64::from_le_bytes(b[r].try_into().expect("range of 8"))
}

/// The hello that opens a connection to queue pair `dst_qpn`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hello {
    /// Destination queue pair.
    pub dst_qpn: u32,
    /// Source node id.
    pub src_node: u32,
    /// RNR wait budget, microseconds.
    pub rnr_wait_us: u32,
    /// Wait budget for the responder to reach RTR, microseconds.
    pub ready_wait_us: u32,
}

impl Hello {
    /// Parses a hello from a peer.
    pub fn parse(b: &[u8]) -> Result<Self> {
        if b.len() != hello::LEN {
            return Err(FabricError::Malformed("hello is not 24 bytes"));
        }
        if u32_at(b, hello::MAGIC) != HELLO_MAGIC {
            return Err(FabricError::Malformed("hello magic is not PFAB"));
        }
        if u16_at(b, hello::VERSION) != HELLO_VERSION {
            return Err(FabricError::Malformed("hello protocol version is not 1"));
        }
        Ok(Self {
            dst_qpn: u32_at(b, hello::DST_QPN),
            src_node: u32_at(b, hello::SRC_NODE),
            rnr_wait_us: u32_at(b, hello::RNR_WAIT_US),
            ready_wait_us: u32_at(b, hello::READY_WAIT_US),
        })
    }

    /// Writes the hello.
    pub fn emit(&self, b: &mut [u8; hello::LEN]) {
        b[hello::MAGIC].copy_from_slice(&HELLO_MAGIC.to_le_bytes());
        b[hello::VERSION].copy_from_slice(&HELLO_VERSION.to_le_bytes());
        b[hello::RESERVED].fill(0);
        b[hello::DST_QPN].copy_from_slice(&self.dst_qpn.to_le_bytes());
        b[hello::SRC_NODE].copy_from_slice(&self.src_node.to_le_bytes());
        b[hello::RNR_WAIT_US].copy_from_slice(&self.rnr_wait_us.to_le_bytes());
        b[hello::READY_WAIT_US].copy_from_slice(&self.ready_wait_us.to_le_bytes());
    }
}

/// Operation kinds on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// RDMA WRITE (with immediate when the flag says so).
    Write = 1,
    /// RDMA READ.
    Read = 2,
    /// Compare-and-swap.
    CompareSwap = 3,
    /// Fetch-and-add.
    FetchAdd = 4,
    /// SEND.
    Send = 5,
}

/// A request header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request {
    /// Operation.
    pub kind: Kind,
    /// Immediate data.
    pub imm: Option<u32>,
    /// Payload length (WRITE, SEND) or requested length (READ).
    pub len: u32,
    /// Packet sequence number.
    pub psn: u32,
    /// Remote address.
    pub addr: u64,
    /// Remote key.
    pub rkey: u32,
    /// Model delay, microseconds.
    pub delay_us: u32,
    /// Compare or addend.
    pub arg0: u64,
    /// Swap.
    pub arg1: u64,
}

impl Request {
    /// Parses a request header from a peer; the length is checked against the limit.
    pub fn parse(b: &[u8]) -> Result<Self> {
        if b.len() != request::HEADER_LEN {
            return Err(FabricError::Malformed("request header is not 48 bytes"));
        }
        if u16_at(b, request::MAGIC) != REQUEST_MAGIC {
            return Err(FabricError::Malformed("request magic is not PQ"));
        }
        let kind = match b[request::KIND] {
            1 => Kind::Write,
            2 => Kind::Read,
            3 => Kind::CompareSwap,
            4 => Kind::FetchAdd,
            5 => Kind::Send,
            _ => return Err(FabricError::Malformed("unknown request kind")),
        };
        let flags = b[request::FLAGS];
        if flags & !1 != 0 {
            return Err(FabricError::Malformed("unknown request flags"));
        }
        let len = u32_at(b, request::LEN);
        if len as usize > MESSAGE_BYTES_MAX {
            return Err(FabricError::Malformed("request length above MESSAGE_BYTES_MAX"));
        }
        Ok(Self {
            kind,
            imm: (flags & 1 == 1).then(|| u32_at(b, request::IMM)),
            len,
            psn: u32_at(b, request::PSN),
            addr: u64_at(b, request::ADDR),
            rkey: u32_at(b, request::RKEY),
            delay_us: u32_at(b, request::DELAY_US),
            arg0: u64_at(b, request::ARG0),
            arg1: u64_at(b, request::ARG1),
        })
    }

    /// Writes the header into `b`.
    pub fn emit(&self, b: &mut [u8]) {
        let b = &mut b[..request::HEADER_LEN];
        b[request::MAGIC].copy_from_slice(&REQUEST_MAGIC.to_le_bytes());
        b[request::KIND] = self.kind as u8;
        b[request::FLAGS] = u8::from(self.imm.is_some());
        b[request::LEN].copy_from_slice(&self.len.to_le_bytes());
        b[request::PSN].copy_from_slice(&self.psn.to_le_bytes());
        b[request::IMM].copy_from_slice(&self.imm.unwrap_or(0).to_le_bytes());
        b[request::ADDR].copy_from_slice(&self.addr.to_le_bytes());
        b[request::RKEY].copy_from_slice(&self.rkey.to_le_bytes());
        b[request::DELAY_US].copy_from_slice(&self.delay_us.to_le_bytes());
        b[request::ARG0].copy_from_slice(&self.arg0.to_le_bytes());
        b[request::ARG1].copy_from_slice(&self.arg1.to_le_bytes());
    }

    /// Bytes of payload that follow the header.
    pub fn payload_len(&self) -> usize {
        match self.kind {
            Kind::Write | Kind::Send => self.len as usize,
            Kind::Read | Kind::CompareSwap | Kind::FetchAdd => 0,
        }
    }
}

/// Response status on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// Done.
    Ok = 0,
    /// Remote access error (rkey, bounds, rights).
    RemoteAccess = 1,
    /// Invalid request (misaligned atomic, SEND longer than the receive).
    InvalidRequest = 2,
    /// Receiver not ready after the RNR budget.
    RnrExceeded = 3,
    /// Other remote failure.
    RemoteOperation = 4,
}

/// A response header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Response {
    /// Outcome.
    pub status: Status,
    /// Payload length (READ data).
    pub len: u32,
    /// Packet sequence number answered.
    pub psn: u32,
    /// Old value of an atomic.
    pub value: u64,
}

impl Response {
    /// Parses a response header from a peer.
    pub fn parse(b: &[u8]) -> Result<Self> {
        if b.len() != response::HEADER_LEN {
            return Err(FabricError::Malformed("response header is not 24 bytes"));
        }
        if u16_at(b, response::MAGIC) != RESPONSE_MAGIC {
            return Err(FabricError::Malformed("response magic is not PR"));
        }
        let status = match b[response::STATUS] {
            0 => Status::Ok,
            1 => Status::RemoteAccess,
            2 => Status::InvalidRequest,
            3 => Status::RnrExceeded,
            4 => Status::RemoteOperation,
            _ => return Err(FabricError::Malformed("unknown response status")),
        };
        let len = u32_at(b, response::LEN);
        if len as usize > MESSAGE_BYTES_MAX {
            return Err(FabricError::Malformed("response length above MESSAGE_BYTES_MAX"));
        }
        Ok(Self { status, len, psn: u32_at(b, response::PSN), value: u64_at(b, response::VALUE) })
    }

    /// Writes the header into `b`.
    pub fn emit(&self, b: &mut [u8]) {
        let b = &mut b[..response::HEADER_LEN];
        b[response::MAGIC].copy_from_slice(&RESPONSE_MAGIC.to_le_bytes());
        b[response::STATUS] = self.status as u8;
        b[response::RESERVED] = 0;
        b[response::LEN].copy_from_slice(&self.len.to_le_bytes());
        b[response::PSN].copy_from_slice(&self.psn.to_le_bytes());
        b[response::RESERVED2].fill(0);
        b[response::VALUE].copy_from_slice(&self.value.to_le_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn request_golden_bytes() {
        let r = Request {
            kind: Kind::Write,
            imm: Some(0x0A0B_0C0D),
            len: 16,
            psn: 2,
            addr: 0x1000,
            rkey: 0x0001_0002,
            delay_us: 3,
            arg0: 0,
            arg1: 0,
        };
        let mut b = [0u8; request::HEADER_LEN];
        r.emit(&mut b);
        #[rustfmt::skip]
        let want: [u8; 48] = [
            b'P', b'Q', 1, 1, 16, 0, 0, 0, 2, 0, 0, 0, 0x0D, 0x0C, 0x0B, 0x0A,
            0, 0x10, 0, 0, 0, 0, 0, 0, 2, 0, 1, 0, 3, 0, 0, 0,
            0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        ];
        assert_eq!(b, want);
        assert_eq!(Request::parse(&b).unwrap(), r);
    }

    #[test]
    fn response_and_hello_golden_bytes() {
        let r = Response { status: Status::RemoteAccess, len: 0, psn: 9, value: 0x0102 };
        let mut b = [0u8; response::HEADER_LEN];
        r.emit(&mut b);
        assert_eq!(b, [b'P', b'R', 1, 0, 0, 0, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0, 2, 1, 0, 0, 0, 0, 0, 0]);
        assert_eq!(Response::parse(&b).unwrap(), r);
        let h = Hello { dst_qpn: 5, src_node: 6, rnr_wait_us: 7, ready_wait_us: 8 };
        let mut hb = [0u8; hello::LEN];
        h.emit(&mut hb);
        assert_eq!(hb, [b'P', b'F', b'A', b'B', 1, 0, 0, 0, 5, 0, 0, 0, 6, 0, 0, 0, 7, 0, 0, 0, 8, 0, 0, 0]);
        assert_eq!(Hello::parse(&hb).unwrap(), h);
    }

    #[test]
    fn bad_frames_are_typed_errors() {
        let mut b = [0u8; request::HEADER_LEN];
        assert!(Request::parse(&b).is_err());
        Request { kind: Kind::Read, imm: None, len: 8, psn: 0, addr: 0, rkey: 0, delay_us: 0, arg0: 0, arg1: 0 }
            .emit(&mut b);
        b[request::KIND] = 9;
        assert!(Request::parse(&b).is_err());
        b[request::KIND] = 2;
        b[request::LEN].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(Request::parse(&b).is_err());
        assert!(Response::parse(&[0u8; 5]).is_err());
        assert!(Hello::parse(&[0u8; 24]).is_err());
    }

    proptest! {
        #[test]
        fn parsers_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = Request::parse(&bytes);
            let _ = Response::parse(&bytes);
            let _ = Hello::parse(&bytes);
        }

        #[test]
        fn requests_round_trip(kind in 1u8..=5, imm in any::<Option<u32>>(), len in 0u32..1024, psn in any::<u32>(),
                               addr in any::<u64>(), rkey in any::<u32>(), arg0 in any::<u64>(), arg1 in any::<u64>()) {
            let kind = [Kind::Write, Kind::Read, Kind::CompareSwap, Kind::FetchAdd, Kind::Send][kind as usize - 1];
            let r = Request { kind, imm, len, psn, addr, rkey, delay_us: 0, arg0, arg1 };
            let mut b = [0u8; request::HEADER_LEN];
            r.emit(&mut b);
            prop_assert_eq!(Request::parse(&b).unwrap(), r);
        }
    }
}
