//! Fuzzes the rendezvous Hello and the heartbeat control block with bytes from a
//! hostile peer.
//!
//! Invariants: checking never panics; an accepted Hello re-emits to exactly its own
//! bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use prescient_dpu::cluster::format::control::{ControlView, CONTROL_BYTES};
use prescient_dpu::cluster::format::hello::{Hello, HelloRepr, HELLO_BYTES};

fuzz_target!(|data: &[u8]| {
    if let Ok(hello) = Hello::new_checked(data) {
        let repr = HelloRepr::parse(&hello).expect("a checked hello parses");
        let frame = repr.to_frame().expect("an accepted hello emits");
        assert_eq!(&frame[..], &data[..HELLO_BYTES], "accepted hello is not canonical");
    }
    if data.len() >= CONTROL_BYTES {
        let bytes: [u8; CONTROL_BYTES] = data[..CONTROL_BYTES].try_into().unwrap();
        if let Ok(view) = ControlView::new_checked(bytes, data[9]) {
            let _ = (view.heartbeat(), view.suspect(3), view.readmitted(3), view.honored(3));
        }
    }
});
