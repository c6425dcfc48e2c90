//! Fuzzes what a GET does with a store set READ from a hostile peer: the record views
//! and the choice of the version to rebuild.
//!
//! Invariants: nothing panics; a chosen version has at least k fragments, all of it.
#![no_main]

use libfuzzer_sys::fuzz_target;
use prescient_dpu::cluster::protocol::get::{choose, Choice};
use prescient_dpu::cluster::format::record::{parse_set, StoreGeometry};

fuzz_target!(|data: &[u8]| {
    let Ok(geometry) = StoreGeometry::new(1, 4, 256) else { return };
    for record in parse_set(data, &geometry) {
        let _ = record;
    }
    let key_hash = data.get(8..16).map_or(0, |b| u64::from_le_bytes(b.try_into().unwrap()));
    let sets = [Some(data), None, Some(data)];
    if let Choice::Value { count, .. } = choose(&sets, &geometry, key_hash, 2, 1, &[], true) {
        assert!(count >= 2);
    }
});
