//! The submission descriptor: 64 little-endian bytes the host writes and the DPU app
//! checks before it believes any of them.
//!
//! ```text
//!  0 op u8          1 sla u8         2 flags u16 (0)   4 key_len u16   6 reserved u16 (0)
//!  8 value_offset u64: bytes from the arena start to the value
//! 16 value_len u32  20 buffer_gen u32 (the generation the host took the buffer at)
//! 24 user_data u64  32 wait_us u32   36..64 reserved (0)
//! ```
//! The key sits at the start of the value's buffer; the value at
//! [`crate::config::VALUE_OFFSET`] inside it, so `value_offset` must be exactly
//! `buffer * buffer_bytes + VALUE_OFFSET` for a host buffer.
//!
//! A GET names a host buffer the same way: the buffer carries the key at its start and
//! receives the value at `VALUE_OFFSET`; its `value_len` must be 0 (the DPU app reports
//! the value's length in the completion). Its `sla` and `wait_us` are its
//! [`ReadSla`]; every other descriptor carries both as 0 (see [`crate::read_sla`]). On
//! completion the DPU app leaves a GET's buffer held by the host (`Host`, same
//! generation), not `Free` (see [`crate::completion`]).

use crate::config::{DESCRIPTOR_BYTES, KEY_BYTES_MAX, TAILROOM_BYTES, VALUE_OFFSET};
use crate::read_sla::ReadSla;
use crate::status::Status;

/// Byte ranges of the fields.
pub mod field {
    use std::ops::Range;
    /// Op code.
    pub const OP: usize = 0;
    /// Read SLA of a GET: 0 `Stale`, 1 `Fresh`; 0 for every other op.
    pub const SLA: usize = 1;
    /// Flags (none defined; must be 0).
    pub const FLAGS: Range<usize> = 2..4;
    /// Key length.
    pub const KEY_LEN: Range<usize> = 4..6;
    /// Reserved (0).
    pub const RESERVED0: Range<usize> = 6..8;
    /// Value offset from the arena start.
    pub const VALUE_OFFSET: Range<usize> = 8..16;
    /// Value length.
    pub const VALUE_LEN: Range<usize> = 16..20;
    /// Buffer generation.
    pub const BUFFER_GEN: Range<usize> = 20..24;
    /// Caller's tag. The host keeps its own copy and hands that to the caller with the
    /// completion; the DPU app only logs this one.
    pub const USER_DATA: Range<usize> = 24..32;
    /// Longest wait a `Fresh` GET accepts, in microseconds; 0 for every other op.
    pub const WAIT_US: Range<usize> = 32..36;
    /// Reserved (0).
    pub const RESERVED1: Range<usize> = 36..64;
}

/// What a descriptor asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum OpCode {
    /// Completes at once: measures the ring, pings the DPU app. Names no buffer.
    Nop = 0,
    /// Stores the buffer's value under its key.
    Put = 1,
    /// Removes the buffer's key.
    Delete = 2,
    /// Reads the key's value into the buffer; the buffer comes back to the host.
    Get = 3,
}

impl OpCode {
    /// The name users know it by.
    pub fn name(self) -> &'static str {
        match self {
            Self::Nop => "NOP",
            Self::Put => "PUT",
            Self::Delete => "DELETE",
            Self::Get => "GET",
        }
    }
}

/// A descriptor's fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Descriptor {
    /// Operation.
    pub op: OpCode,
    /// Read SLA of a GET (`sla` and `wait_us` on the wire); `Stale` for every other op.
    pub sla: ReadSla,
    /// Key length in bytes.
    pub key_len: u16,
    /// Value offset from the arena start.
    pub value_offset: u64,
    /// Value length in bytes.
    pub value_len: u32,
    /// Generation of the buffer when the host took it.
    pub buffer_gen: u32,
    /// Caller's tag.
    pub user_data: u64,
}

/// The arena's shape, which a descriptor is checked against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArenaShape {
    /// Buffers the host may name.
    pub host_buffers: u32,
    /// Bytes per buffer.
    pub buffer_bytes: u32,
}

impl ArenaShape {
    /// Most value bytes one buffer holds.
    pub fn value_bytes_max(&self) -> usize {
        self.buffer_bytes as usize - VALUE_OFFSET - TAILROOM_BYTES
    }

    /// Offset from the arena start of `buffer`'s value.
    pub fn value_offset(&self, buffer: u32) -> u64 {
        u64::from(buffer) * u64::from(self.buffer_bytes) + VALUE_OFFSET as u64
    }
}

/// A descriptor that passed every check, with the buffer it names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Checked {
    /// The fields.
    pub desc: Descriptor,
    /// The host buffer, for `Put`, `Delete` and `Get`.
    pub buffer: Option<u32>,
}

/// Why a descriptor was refused: the status of its error completion and the
/// offending value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Refused {
    /// Status to complete with.
    pub status: Status,
    /// The offending value.
    pub detail: u64,
    /// The caller's tag, so the error completion reaches the right request.
    pub user_data: u64,
}

fn u16_at(b: &[u8; DESCRIPTOR_BYTES], r: std::ops::Range<usize>) -> u16 {
    u16::from_le_bytes(b[r].try_into().expect("2 bytes"))
}
fn u32_at(b: &[u8; DESCRIPTOR_BYTES], r: std::ops::Range<usize>) -> u32 {
    u32::from_le_bytes(b[r].try_into().expect("4 bytes"))
}
fn u64_at(b: &[u8; DESCRIPTOR_BYTES], r: std::ops::Range<usize>) -> u64 {
    u64::from_le_bytes(b[r].try_into().expect("8 bytes"))
}

impl Descriptor {
    /// Writes the descriptor's bytes.
    pub fn emit(&self, out: &mut [u8; DESCRIPTOR_BYTES]) {
        *out = [0; DESCRIPTOR_BYTES];
        let (sla, wait_us) = self.sla.to_wire();
        out[field::OP] = self.op as u8;
        out[field::SLA] = sla;
        out[field::KEY_LEN].copy_from_slice(&self.key_len.to_le_bytes());
        out[field::VALUE_OFFSET].copy_from_slice(&self.value_offset.to_le_bytes());
        out[field::VALUE_LEN].copy_from_slice(&self.value_len.to_le_bytes());
        out[field::BUFFER_GEN].copy_from_slice(&self.buffer_gen.to_le_bytes());
        out[field::USER_DATA].copy_from_slice(&self.user_data.to_le_bytes());
        out[field::WAIT_US].copy_from_slice(&wait_us.to_le_bytes());
    }

    /// Parses bytes that came from the host and checks every field against `arena`.
    /// The bytes must already be a private copy: nothing is read twice.
    pub fn parse_checked(b: &[u8; DESCRIPTOR_BYTES], arena: &ArenaShape) -> Result<Checked, Refused> {
        let user_data = u64_at(b, field::USER_DATA);
        let refuse = |status, detail: u64| Err(Refused { status, detail, user_data });
        let op = match b[field::OP] {
            0 => OpCode::Nop,
            1 => OpCode::Put,
            2 => OpCode::Delete,
            3 => OpCode::Get,
            other => return refuse(Status::BadOp, other.into()),
        };
        // Only a GET carries a read SLA; a write or a NOP carries 0 in both fields.
        let wait_us = u32_at(b, field::WAIT_US);
        let sla = match ReadSla::from_wire(b[field::SLA], wait_us) {
            Some(sla) if op == OpCode::Get || sla == ReadSla::Stale => sla,
            _ => return refuse(Status::BadSla, b[field::SLA].into()),
        };
        let flags = u16_at(b, field::FLAGS);
        // The reserved bytes as words (RESERVED1 is 28 bytes: 36..40, then 40..64 as
        // three u64s), one branch for all of them: this runs for every descriptor.
        let reserved = u64::from(u16_at(b, field::RESERVED0))
            | u64::from(u32_at(b, 36..40))
            | u64_at(b, 40..48)
            | u64_at(b, 48..56)
            | u64_at(b, 56..64);
        const _: () = assert!(field::RESERVED1.start == 36 && field::RESERVED1.end == 64);
        if flags != 0 || reserved != 0 {
            return refuse(Status::ReservedNotZero, flags.into());
        }
        let desc = Descriptor {
            op,
            sla,
            key_len: u16_at(b, field::KEY_LEN),
            value_offset: u64_at(b, field::VALUE_OFFSET),
            value_len: u32_at(b, field::VALUE_LEN),
            buffer_gen: u32_at(b, field::BUFFER_GEN),
            user_data,
        };
        if op == OpCode::Nop {
            if desc.key_len != 0 || desc.value_len != 0 || desc.value_offset != 0 {
                return refuse(Status::BadValueLength, desc.value_len.into());
            }
            return Ok(Checked { desc, buffer: None });
        }
        if desc.key_len == 0 || usize::from(desc.key_len) > KEY_BYTES_MAX {
            return refuse(Status::BadKeyLength, desc.key_len.into());
        }
        let bytes = u64::from(arena.buffer_bytes);
        let in_buffer = desc.value_offset % bytes;
        let buffer = desc.value_offset / bytes;
        if in_buffer != VALUE_OFFSET as u64 || buffer >= u64::from(arena.host_buffers) {
            return refuse(Status::BadOffset, desc.value_offset);
        }
        // A DELETE carries no value and a GET receives one: both name 0 bytes.
        let value_max = if op == OpCode::Put { arena.value_bytes_max() } else { 0 };
        if desc.value_len as usize > value_max {
            return refuse(Status::BadValueLength, desc.value_len.into());
        }
        Ok(Checked { desc, buffer: Some(buffer as u32) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ARENA: ArenaShape = ArenaShape { host_buffers: 4, buffer_bytes: 1024 };

    fn put() -> Descriptor {
        Descriptor {
            op: OpCode::Put,
            sla: ReadSla::Stale,
            key_len: 3,
            value_offset: ARENA.value_offset(2),
            value_len: 100,
            buffer_gen: 7,
            user_data: 0xdead_beef,
        }
    }

    #[test]
    fn golden_bytes() {
        let mut b = [0u8; 64];
        put().emit(&mut b);
        let mut expected = [0u8; 64];
        expected[..36].copy_from_slice(&[
            1, 0, 0, 0, 3, 0, 0, 0, // op, sla (none), flags, key_len, reserved
            0x40, 0x09, 0, 0, 0, 0, 0, 0, // value_offset 2*1024+320 = 0x940
            100, 0, 0, 0, 7, 0, 0, 0, // value_len, buffer_gen
            0xef, 0xbe, 0xad, 0xde, 0, 0, 0, 0, // user_data
            0, 0, 0, 0, // wait_us (none)
        ]);
        assert_eq!(b, expected);
        assert_eq!(Descriptor::parse_checked(&b, &ARENA), Ok(Checked { desc: put(), buffer: Some(2) }));
    }

    #[test]
    fn every_bad_field_is_refused_with_its_status() {
        let mut good = [0u8; 64];
        put().emit(&mut good);
        type Mutation = Box<dyn Fn(&mut [u8; 64])>;
        let cases: Vec<(Mutation, Status)> = vec![
            (Box::new(|b| b[field::OP] = 9), Status::BadOp),
            (Box::new(|b| b[field::SLA] = 2), Status::BadSla),
            // A write carries no read SLA.
            (Box::new(|b| b[field::SLA] = 1), Status::BadSla),
            (Box::new(|b| b[field::WAIT_US.start] = 1), Status::BadSla),
            (Box::new(|b| b[field::FLAGS.start] = 1), Status::ReservedNotZero),
            (Box::new(|b| b[63] = 1), Status::ReservedNotZero),
            (Box::new(|b| b[field::KEY_LEN].copy_from_slice(&0u16.to_le_bytes())), Status::BadKeyLength),
            (Box::new(|b| b[field::KEY_LEN].copy_from_slice(&257u16.to_le_bytes())), Status::BadKeyLength),
            (
                Box::new(|b| b[field::VALUE_OFFSET].copy_from_slice(&(ARENA.value_offset(2) + 8).to_le_bytes())),
                Status::BadOffset,
            ),
            (
                Box::new(|b| b[field::VALUE_OFFSET].copy_from_slice(&ARENA.value_offset(4).to_le_bytes())),
                Status::BadOffset,
            ),
            (Box::new(|b| b[field::VALUE_OFFSET].copy_from_slice(&u64::MAX.to_le_bytes())), Status::BadOffset),
            (Box::new(|b| b[field::VALUE_LEN].copy_from_slice(&1000u32.to_le_bytes())), Status::BadValueLength),
            (Box::new(|b| b[field::OP] = OpCode::Delete as u8), Status::BadValueLength),
        ];
        for (i, (mutate, status)) in cases.iter().enumerate() {
            let mut b = good;
            mutate(&mut b);
            let refused = Descriptor::parse_checked(&b, &ARENA).expect_err(&format!("case {i}"));
            assert_eq!(refused.status, *status, "case {i}");
            assert_eq!(refused.user_data, 0xdead_beef, "case {i}");
        }
    }

    fn get() -> Descriptor {
        Descriptor { op: OpCode::Get, sla: ReadSla::Stale, value_len: 0, ..put() }
    }

    #[test]
    fn a_get_names_its_buffer_like_a_put_and_carries_no_value() {
        let mut b = [0u8; 64];
        get().emit(&mut b);
        let mut expected = [0u8; 64];
        expected[..32].copy_from_slice(&[
            3, 0, 0, 0, 3, 0, 0, 0, // op GET, sla stale, flags, key_len, reserved
            0x40, 0x09, 0, 0, 0, 0, 0, 0, // value_offset: buffer 2's value
            0, 0, 0, 0, 7, 0, 0, 0, // value_len 0, buffer_gen
            0xef, 0xbe, 0xad, 0xde, 0, 0, 0, 0, // user_data
        ]);
        assert_eq!(b, expected);
        assert_eq!(Descriptor::parse_checked(&b, &ARENA), Ok(Checked { desc: get(), buffer: Some(2) }));
        let fresh = Descriptor { sla: ReadSla::Fresh { max_wait: std::time::Duration::from_micros(50) }, ..get() };
        fresh.emit(&mut b);
        assert_eq!((b[field::SLA], &b[field::WAIT_US]), (1, &[50, 0, 0, 0][..]));
        assert_eq!(Descriptor::parse_checked(&b, &ARENA).unwrap().desc, fresh);
        let mut stale_with_wait = b;
        stale_with_wait[field::SLA] = 0;
        assert_eq!(Descriptor::parse_checked(&stale_with_wait, &ARENA).unwrap_err().status, Status::BadSla);
        let mut too_long = b;
        too_long[field::WAIT_US].copy_from_slice(&(crate::config::READ_WAIT_US_MAX as u32 + 1).to_le_bytes());
        assert_eq!(Descriptor::parse_checked(&too_long, &ARENA).unwrap_err().status, Status::BadSla);

        let refused = |d: Descriptor| {
            let mut b = [0u8; 64];
            d.emit(&mut b);
            Descriptor::parse_checked(&b, &ARENA).unwrap_err().status
        };
        assert_eq!(refused(Descriptor { value_len: 1, ..get() }), Status::BadValueLength);
        assert_eq!(refused(Descriptor { key_len: 0, ..get() }), Status::BadKeyLength);
        assert_eq!(refused(Descriptor { key_len: 257, ..get() }), Status::BadKeyLength);
        assert_eq!(refused(Descriptor { value_offset: ARENA.value_offset(4), ..get() }), Status::BadOffset);
        assert_eq!(refused(Descriptor { value_offset: ARENA.value_offset(1) - 1, ..get() }), Status::BadOffset);
        b[field::OP] = 4;
        assert_eq!(Descriptor::parse_checked(&b, &ARENA).unwrap_err().status, Status::BadOp);
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(4096))]

        /// Any 64 bytes from a hostile host, against any arena shape: checking never
        /// panics, and what it accepts is canonical (re-emits to the same bytes) and
        /// names a host buffer's value that fits the buffer.
        #[test]
        fn random_bytes_never_panic_and_what_is_accepted_is_canonical(
            raw in proptest::collection::vec(proptest::prelude::any::<u8>(), DESCRIPTOR_BYTES),
            host_buffers in 0u32..2048,
            buffer_kib in 1u32..64,
            op in 0u8..6,
            zero_reserved in proptest::prelude::any::<bool>(),
        ) {
            let mut b: [u8; DESCRIPTOR_BYTES] = raw.try_into().expect("64 bytes");
            let arena = ArenaShape { host_buffers, buffer_bytes: buffer_kib * 1024 };
            // Steer half the cases past the first checks, so the later ones run too.
            if zero_reserved {
                b[field::OP] = op;
                b[field::SLA] &= 1;
                b[field::FLAGS].fill(0);
                b[field::RESERVED0].fill(0);
                b[field::RESERVED1].fill(0);
                let buffer = u64::from(b[9]) % u64::from(host_buffers.max(1) + 1);
                b[field::VALUE_OFFSET].copy_from_slice(&arena.value_offset(buffer as u32).to_le_bytes());
            }
            match Descriptor::parse_checked(&b, &arena) {
                Ok(Checked { desc, buffer }) => {
                    let mut again = [0u8; DESCRIPTOR_BYTES];
                    desc.emit(&mut again);
                    proptest::prop_assert_eq!(again, b);
                    if let Some(buffer) = buffer {
                        proptest::prop_assert!(buffer < arena.host_buffers);
                        proptest::prop_assert_eq!(desc.value_offset, arena.value_offset(buffer));
                        proptest::prop_assert!(desc.value_len as usize <= arena.value_bytes_max());
                        proptest::prop_assert!(desc.key_len >= 1 && usize::from(desc.key_len) <= KEY_BYTES_MAX);
                    } else {
                        proptest::prop_assert_eq!(desc.op, OpCode::Nop);
                    }
                }
                Err(refused) => {
                    proptest::prop_assert_ne!(refused.status, Status::Ok);
                    proptest::prop_assert_eq!(refused.user_data, u64_at(&b, field::USER_DATA));
                }
            }
        }
    }

    #[test]
    fn nop_names_no_buffer() {
        let nop = Descriptor {
            op: OpCode::Nop,
            sla: ReadSla::Stale,
            key_len: 0,
            value_offset: 0,
            value_len: 0,
            buffer_gen: 0,
            user_data: 1,
        };
        let mut b = [0u8; 64];
        nop.emit(&mut b);
        assert_eq!(Descriptor::parse_checked(&b, &ARENA).unwrap().buffer, None);
        b[field::VALUE_LEN.start] = 1;
        assert!(Descriptor::parse_checked(&b, &ARENA).is_err());
    }
}
