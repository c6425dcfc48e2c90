//! Fuzzes the completion parser with bytes from a hostile (or newer) DPU app.
//!
//! Invariants: parsing never panics; a parsed completion survives emit and parse
//! again unchanged.
#![no_main]

use libfuzzer_sys::fuzz_target;
use prescient_shim::config::COMPLETION_BYTES;
use prescient_shim::Completion;

fuzz_target!(|data: &[u8]| {
    if data.len() < COMPLETION_BYTES {
        return;
    }
    let bytes: [u8; COMPLETION_BYTES] = data[..COMPLETION_BYTES].try_into().unwrap();
    let c = Completion::parse(&bytes);
    let mut again = [0u8; COMPLETION_BYTES];
    c.emit(&mut again);
    assert_eq!(Completion::parse(&again), c);
});
