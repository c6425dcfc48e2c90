//! Fuzzes the fragment header parser with arbitrary bytes from a peer.
//!
//! Invariants: parsing never panics; a header that parses re-emits to exactly
//! its own 40 bytes (so every accepted header is canonical); checking any
//! payload against it never panics.
#![no_main]

use libfuzzer_sys::fuzz_target;
use prescient_dpu::stripe::{FragmentHeader, HeaderRepr, HEADER_LEN};

fuzz_target!(|data: &[u8]| {
    let Ok(header) = FragmentHeader::new_checked(data) else {
        return;
    };
    let repr = HeaderRepr::parse(&header).expect("a checked header parses");
    let mut again = [0u8; HEADER_LEN];
    repr.emit(&mut again);
    assert_eq!(
        &again[..],
        &data[..HEADER_LEN],
        "accepted header is not canonical"
    );
    assert!(usize::from(repr.index) < repr.layout.fragments());
    let _ = header.verify_payload(&data[HEADER_LEN..]);
});
