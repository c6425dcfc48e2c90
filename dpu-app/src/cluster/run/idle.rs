//! The idle protocol of a serving loop: spin for a while after the last work, then
//! sleep on the host's doorbell until a host submits or the nap ends.
//!
//! To sleep, the loop reads the first region's `DPU_DOORBELL`, sets `DPU_SLEEPING` in
//! every region, fences (SeqCst), looks at every ring once more and, only if none has
//! work, waits on that doorbell's futex for the value it read (a ring in between
//! returns at once). A host publishes its tail, fences, and rings the doorbell when it
//! sees the flag: either the loop's last look sees the tail or the host sees the flag,
//! so a submission is never left waiting for the nap to end.
//!
//! The nap is capped by the heartbeat period (the nodes' timers, the host's DPU
//! heartbeat among them, run between naps); with several regions by
//! [`NAP_SEVERAL_REGIONS`] (one futex wait hears one region's doorbell only); and for
//! nodes with peers by [`NAP_WITH_PEERS`] (a peer's message rings no doorbell). No
//! clock is read here: a node's poll takes the time from its loop.

use std::sync::atomic::{fence, Ordering};
use std::time::Duration;

use prescient_shim::layout::header;
use prescient_shim::region::Region;
use prescient_shim::sys;

use crate::cluster::protocol::node::Node;
use crate::fabric::Fabric;
use crate::limits::{NAP_SEVERAL_REGIONS, NAP_WITH_PEERS, SPIN_AFTER_WORK};

/// Where a serving loop stands between work: its last busy round, its nap, its sleeps.
#[derive(Debug, Clone)]
pub struct Idle {
    /// When the last busy round ended (the loop's clock, nanoseconds).
    last_busy_ns: u64,
    nap: Duration,
    sleeps: u64,
}

impl Idle {
    /// The idle protocol of a loop over `regions` regions whose nodes run timers every
    /// `heartbeat`, with or without `peers`.
    pub fn new(heartbeat: Duration, regions: usize, peers: bool) -> Self {
        let mut nap = heartbeat;
        if regions > 1 {
            nap = nap.min(NAP_SEVERAL_REGIONS);
        }
        if peers {
            nap = nap.min(NAP_WITH_PEERS);
        }
        Self { last_busy_ns: 0, nap, sleeps: 0 }
    }

    /// The longest single sleep.
    pub fn nap(&self) -> Duration {
        self.nap
    }

    /// Futex sleeps so far.
    pub fn sleeps(&self) -> u64 {
        self.sleeps
    }

    /// After one round of polls over `nodes` at `now_ns` (the loop's monotonic clock):
    /// `busy` says whether any did work. Spins until [`SPIN_AFTER_WORK`] has passed
    /// since the last busy round, then sleeps (see the module doc).
    pub fn after_round<F: Fabric>(&mut self, busy: bool, nodes: &[Node<F>], now_ns: u64) {
        if busy {
            self.last_busy_ns = now_ns;
            return;
        }
        if now_ns.saturating_sub(self.last_busy_ns) < SPIN_AFTER_WORK.as_nanos() as u64 {
            std::hint::spin_loop();
            return;
        }
        let regions = nodes.iter().map(|n| &**n.region());
        if sleep_until_rung(regions, || nodes.iter().any(Node::has_host_work), self.nap) {
            self.sleeps += 1;
        }
    }
}

/// Sleeps at most `nap` on the first of `regions`' doorbell, with `DPU_SLEEPING` set in
/// each, unless `has_work` finds work after the flags are up. Returns whether it slept.
/// With no region at all it sleeps the nap.
pub fn sleep_until_rung<'r>(
    regions: impl Iterator<Item = &'r Region> + Clone,
    has_work: impl Fn() -> bool,
    nap: Duration,
) -> bool {
    let Some(first) = regions.clone().next() else {
        std::thread::sleep(nap);
        return true;
    };
    let doorbell = first.u32_at(header::DPU_DOORBELL);
    let seen = doorbell.load(Ordering::Acquire);
    for r in regions.clone() {
        r.u32_at(header::DPU_SLEEPING).store(1, Ordering::Relaxed);
    }
    // SeqCst: the sleeping flags are visible before our last look at the rings; pairs
    // with the host's fence between publishing its tail and reading the flag.
    fence(Ordering::SeqCst);
    let slept = !has_work();
    if slept {
        sys::wait(doorbell, seen, nap);
    }
    for r in regions {
        r.u32_at(header::DPU_SLEEPING).store(0, Ordering::Relaxed);
    }
    slept
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::Metrics;
    use crate::region_server::RegionServer;
    use prescient_shim::{Host, HostOptions, RegionConfig};
    use std::time::Instant;

    #[test]
    fn the_nap_is_capped_by_the_heartbeat_several_regions_and_peers() {
        let beat = Duration::from_millis(5);
        assert_eq!(Idle::new(beat, 1, false).nap(), beat);
        assert_eq!(Idle::new(beat, 3, false).nap(), NAP_SEVERAL_REGIONS);
        assert_eq!(Idle::new(beat, 1, true).nap(), NAP_WITH_PEERS);
        assert_eq!(Idle::new(Duration::from_micros(100), 1, true).nap(), Duration::from_micros(100));
    }

    #[test]
    fn a_host_that_submits_while_the_dpu_app_sleeps_wakes_it_long_before_the_nap_ends() {
        let path = std::env::temp_dir().join(format!("prescient-idle-wake-{}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let config = RegionConfig {
            queue_pairs: 1,
            ring_entries: 16,
            host_buffers: 4,
            dpu_buffers: 2,
            buffer_bytes: 4096,
            directory_slots: 0,
        };
        let host = Host::create(&path, config, HostOptions { pin: false, ..HostOptions::default() }).unwrap();
        let mut metrics = Metrics::default();
        let server = RegionServer::attach(&path, false, Duration::from_secs(10), &mut metrics).unwrap();
        let region = std::sync::Arc::clone(server.region());
        let mut qp = host.queue_pair(0).unwrap();
        let nap = Duration::from_secs(60);
        std::thread::scope(|s| {
            let sleeper = s.spawn(|| {
                let started = Instant::now();
                let slept = sleep_until_rung(std::iter::once(&*region), || server.has_work(), nap);
                (slept, started.elapsed())
            });
            let sleeping = host.region().u32_at(header::DPU_SLEEPING);
            let deadline = Instant::now() + Duration::from_secs(20);
            while sleeping.load(Ordering::Acquire) == 0 {
                assert!(Instant::now() < deadline, "the sleeper never set DPU_SLEEPING");
                std::thread::yield_now();
            }
            // The host's flush publishes, sees the flag and rings the doorbell (its check
            // of the DPU app's heartbeat, which nobody beats here, is not the point).
            qp.push_nop(1).unwrap();
            let _ = qp.flush();
            let (slept, took) = sleeper.join().unwrap();
            assert!(took < nap / 2, "woken after {took:?} of a {nap:?} nap (slept: {slept})");
        });
        assert_eq!(host.region().u32_at(header::DPU_SLEEPING).load(Ordering::Acquire), 0, "the flag is down again");
        drop(server);
        let _ = std::fs::remove_file(&path);
    }
}
