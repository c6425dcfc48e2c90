//! Fuzzes the completion entry parser with bytes from a hostile (or newer) DPU app.
//!
//! Invariants: parsing never panics; an accepted entry names 1..=COMPLETION_RUN_MAX
//! requests and survives emit and parse again unchanged.
#![no_main]

use libfuzzer_sys::fuzz_target;
use prescient_shim::config::{COMPLETION_BYTES, COMPLETION_RUN_MAX};
use prescient_shim::CompletionEntry;

fuzz_target!(|data: &[u8]| {
    if data.len() < COMPLETION_BYTES {
        return;
    }
    let bytes: [u8; COMPLETION_BYTES] = data[..COMPLETION_BYTES].try_into().unwrap();
    if let Ok(e) = CompletionEntry::parse_checked(&bytes) {
        assert!(e.count >= 1 && u32::from(e.count) <= COMPLETION_RUN_MAX);
        let mut again = [0u8; COMPLETION_BYTES];
        e.emit(&mut again);
        assert_eq!(CompletionEntry::parse_checked(&again), Ok(e));
    }
});
