//! Incast on the emulated fabric's modelled switch port (see `bench::incast`): four
//! writers WRITE 4 KiB to one holder at twice the port's rate. With Swift on every
//! writer the port's queue stays far below its buffer, no writer is ever paused, the
//! writers share the port within 20 % and fill at least 90 % of it; without congestion
//! control the same load fills the buffer and PFC pauses every message. Modelled time
//! on a manual clock: every figure here is a function of the seed, never of the
//! machine.

use prescient_dpu::bench::incast::{run, IncastOptions, IncastReport};

fn with_swift(seed: u64) -> IncastReport {
    run(&IncastOptions::four_to_one(seed)).expect("incast runs")
}

#[test]
fn with_swift_the_queue_stays_short_nobody_pauses_and_the_port_is_shared_and_full() {
    for seed in [1, 2] {
        let r = with_swift(seed);
        assert_eq!(r.failed, 0, "{r:#?}");
        assert!(r.utilisation >= 0.9, "throughput {:.3}x the port: {r:#?}", r.utilisation);
        assert!(r.share_min >= 0.8 && r.share_max <= 1.2, "shares {:.3}-{:.3}: {r:#?}", r.share_min, r.share_max);
        assert_eq!((r.port.pauses, r.port.paused_ns), (0, 0), "no PFC pause: {r:#?}");
        assert!(r.queue_bytes_max <= r.buffer_bytes / 4, "queue bounded well inside the buffer: {r:#?}");
        assert!(r.rtt.p999 <= 2 * r.rtt.p50, "round trip p99.9 {} vs p50 {}", r.rtt.p999, r.rtt.p50);
        assert_eq!(r.windows.len(), 4);
        // Demand stopped with a backlog (it ran at twice the port): the run ends only
        // once every request completed, at about the port's rate.
        assert!(r.drain_ns > 0);
    }
}

#[test]
fn without_congestion_control_the_buffer_fills_and_pfc_pauses_the_writers() {
    let cc = with_swift(1);
    let r = run(&IncastOptions { swift: None, ..IncastOptions::four_to_one(1) }).expect("incast runs");
    assert_eq!(r.failed, 0, "lossless: {r:#?}");
    assert!(r.port.pauses >= r.port.messages / 2, "a pause storm: {r:#?}");
    assert!(r.queue_bytes_max * 10 >= r.buffer_bytes * 9, "the buffer fills: {r:#?}");
    assert!(r.rtt.p50 >= 10 * cc.rtt.p50, "queueing: p50 {} vs {} with Swift", r.rtt.p50, cc.rtt.p50);
}

#[test]
fn a_seed_replays_exactly() {
    let short =
        |seed| IncastOptions { warmup_ns: 1_000_000, measure_ns: 5_000_000, ..IncastOptions::four_to_one(seed) };
    let (a, b, c) = (run(&short(7)).unwrap(), run(&short(7)).unwrap(), run(&short(8)).unwrap());
    assert_eq!(format!("{a:?}"), format!("{b:?}"));
    assert_ne!(format!("{a:?}"), format!("{c:?}"), "another seed, other jitter");
}
