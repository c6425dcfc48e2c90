//! Fuzzes the fragment-log entry header and outcome-record parsers with bytes a hostile
//! writer could put in a holder's log.
//!
//! Invariants: checking never panics; an accepted header re-emits to exactly its own
//! 64 bytes; the outcome records of any payload parse or fail without panicking.
#![no_main]

use libfuzzer_sys::fuzz_target;
use prescient_dpu::cluster::format::entry::{outcome_records, EntryHeader, EntryRepr, HEADER_LEN};

fuzz_target!(|data: &[u8]| {
    let capacity = 4096;
    if let Ok(header) = EntryHeader::new_checked(data, capacity) {
        let repr = EntryRepr::parse(&header, capacity).expect("a checked header parses");
        let mut again = [0u8; HEADER_LEN];
        repr.emit_into(&mut again);
        assert_eq!(&again[..], &data[..HEADER_LEN], "accepted header is not canonical");
        let _ = header.verify_payload(&data[HEADER_LEN..]);
    }
    for record in outcome_records(data) {
        let _ = record;
    }
});
