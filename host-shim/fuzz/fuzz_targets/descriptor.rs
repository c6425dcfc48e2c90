//! Fuzzes the submission descriptor check with bytes from a hostile host, against an
//! arena shape taken from the input too.
//!
//! Invariants: checking never panics; an accepted descriptor re-emits to exactly its
//! own bytes and names a host buffer's value that fits the buffer. (The same
//! invariants run on stable as a proptest in `host-shim/src/descriptor.rs`.)
#![no_main]

use libfuzzer_sys::fuzz_target;
use prescient_shim::config::DESCRIPTOR_BYTES;
use prescient_shim::descriptor::{ArenaShape, Checked, Descriptor};

fuzz_target!(|data: &[u8]| {
    if data.len() < DESCRIPTOR_BYTES + 4 {
        return;
    }
    let bytes: [u8; DESCRIPTOR_BYTES] = data[..DESCRIPTOR_BYTES].try_into().unwrap();
    let host_buffers = u32::from(u16::from_le_bytes([data[64], data[65]]));
    let buffer_bytes = 1024 * (1 + u32::from(data[66] % 64));
    let arena = ArenaShape { host_buffers, buffer_bytes };
    if let Ok(Checked { desc, buffer }) = Descriptor::parse_checked(&bytes, &arena) {
        let mut again = [0u8; DESCRIPTOR_BYTES];
        desc.emit(&mut again);
        assert_eq!(again, bytes, "an accepted descriptor is not canonical");
        if let Some(buffer) = buffer {
            assert!(buffer < arena.host_buffers);
            assert_eq!(desc.value_offset, arena.value_offset(buffer));
            assert!(desc.value_len as usize <= arena.value_bytes_max());
        }
    }
});
