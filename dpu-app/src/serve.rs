//! The serving loop: poll every queue pair of every region, keep the heartbeat,
//! watch the hosts, and sleep on the futex when there is nothing to do.
//!
//! Regions are failure domains: one that cannot be attached (not a region, served by
//! another live DPU app, ...) is refused with an error naming its path and the others
//! are served; only when none can be does the DPU app exit, listing each. Each round
//! gives every region one bounded turn ([`crate::limits::REGION_TURN_DESCRIPTORS`])
//! and the clock is read at least every
//! [`crate::limits::CLOCK_CHECK_DESCRIPTORS`] descriptors, so heartbeats are written
//! on time whatever a host submits.

use std::path::PathBuf;
use std::sync::atomic::{fence, AtomicBool, Ordering};
use std::time::{Duration, Instant};

use prescient_shim::config::{HEARTBEAT_PERIOD_US, SPIN_ROUNDS};
use prescient_shim::layout::header;
use prescient_shim::sys;

use crate::error::DpuError;
use crate::limits::{CLOCK_CHECK_DESCRIPTORS, CLOCK_CHECK_ROUNDS};
use crate::metrics::Metrics;
use crate::pipeline::Pipeline;
use crate::region_server::RegionServer;

/// How the DPU app serves.
#[derive(Clone, Debug)]
pub struct ServeOptions {
    /// Region files, one per host process.
    pub regions: Vec<PathBuf>,
    /// Lock the regions in memory.
    pub pin: bool,
    /// Time without a host heartbeat after which its buffers are reclaimed.
    pub host_timeout: Duration,
    /// Longest single sleep when idle (bounded by the heartbeat period).
    pub idle_sleep: Duration,
}

/// The DPU app serving a set of regions.
#[derive(Debug)]
pub struct Server {
    regions: Vec<RegionServer>,
    /// Regions refused at attach, with why.
    refused: Vec<DpuError>,
    pipeline_stages: usize,
    metrics: Metrics,
}

impl Server {
    /// Attaches every region that can be attached; each one that cannot is refused
    /// with an error naming it (logged, and listed in [`Server::refused`]). Fails only
    /// if none can be, listing each one's reason.
    pub fn attach(options: &ServeOptions) -> Result<Self, DpuError> {
        let mut metrics = Metrics::default();
        let mut regions = Vec::with_capacity(options.regions.len());
        let mut refused = Vec::new();
        for path in &options.regions {
            match RegionServer::attach(path, options.pin, options.host_timeout, &mut metrics) {
                Ok(r) => regions.push(r),
                Err(e) => {
                    tracing::error!(region = %path.display(), "{e}; serving the other regions");
                    refused.push(e);
                }
            }
        }
        if regions.is_empty() {
            return Err(DpuError::NoRegionServed { failures: refused });
        }
        // One sequencer serves every region: it starts from the newest epoch, written
        // back to each region so a restart opens a newer one even if the region that
        // held the newest is refused next time (or its host rewrites the word).
        let epoch = regions.iter().map(RegionServer::epoch).max().unwrap_or(1);
        for r in &mut regions {
            r.adopt_epoch(epoch);
            r.beat();
        }
        Ok(Self { regions, refused, pipeline_stages: 0, metrics })
    }

    /// The regions refused at attach, with why.
    pub fn refused(&self) -> &[DpuError] {
        &self.refused
    }

    /// The newest epoch of the regions served (each bumped at every attach and read
    /// once, then; the newest written back to all): seeds the sequencer so a restarted
    /// DPU app never reissues a version.
    pub fn epoch(&self) -> u32 {
        self.regions.iter().map(RegionServer::epoch).max().unwrap_or(1) & 0x00ff_ffff
    }

    /// What has happened so far.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// Checks every PUT value at the door against what `pipeline` can process in each
    /// region's buffers (see [`RegionServer::limit_put_values`]).
    pub fn limit_put_values(&mut self, pipeline: &Pipeline) {
        for r in &mut self.regions {
            let max = r.limit_put_values(pipeline);
            tracing::info!(region = %r.region().path().display(), put_value_max = max, "PUT values checked at the door");
        }
    }

    /// The serve summary: the totals, then a line for every region refused at attach
    /// and for every region that had descriptors refused or queue pairs fenced.
    pub fn summary(&self) -> String {
        let mut s = self.metrics.summary();
        for e in &self.refused {
            s.push_str(&format!("\n  refused at attach: {e}"));
        }
        for r in &self.regions {
            let door = r.door();
            if door.refused().total() == 0 && door.fences() == 0 {
                continue;
            }
            s.push_str(&format!(
                "\n  region {}: {} descriptors refused ({}); {} queue pairs fenced",
                r.region().path().display(),
                door.refused().total(),
                door.refused().describe().unwrap_or_else(|| "none".into()),
                door.fences()
            ));
        }
        s
    }

    /// Serves until `stop` is set. Returns the metrics.
    pub fn run(&mut self, pipeline: &mut Pipeline, options: &ServeOptions, stop: &AtomicBool) -> Metrics {
        self.pipeline_stages = pipeline.len();
        self.limit_put_values(pipeline);
        let period = Duration::from_micros(HEARTBEAT_PERIOD_US);
        let nap = options.idle_sleep.min(period);
        let mut last_beat = Instant::now();
        let mut idle_rounds = 0u32;
        let mut rounds = 0u32;
        let mut since_clock = 0u32;
        while !stop.load(Ordering::Relaxed) {
            rounds = rounds.wrapping_add(1);
            let mut done = 0;
            for r in &mut self.regions {
                done += r.serve(pipeline, &mut self.metrics);
            }
            idle_rounds = if done == 0 { idle_rounds.saturating_add(1) } else { 0 };
            since_clock = since_clock.saturating_add(done);
            // Clock reads cost tens of nanoseconds: only every CLOCK_CHECK_ROUNDS rounds
            // or CLOCK_CHECK_DESCRIPTORS descriptors (a round's work is bounded by the
            // regions' turns, so a busy DPU app still beats on time). Not every idle
            // round: an idle round is a look at every ring, and a clock read in each
            // would double the time a new descriptor waits to be seen.
            if rounds % CLOCK_CHECK_ROUNDS == 0 || since_clock >= CLOCK_CHECK_DESCRIPTORS {
                since_clock = 0;
                let now = Instant::now();
                if now.duration_since(last_beat) >= period {
                    last_beat = now;
                    for r in &mut self.regions {
                        r.beat();
                        r.watch_host(now, &mut self.metrics);
                    }
                }
            }
            if idle_rounds > SPIN_ROUNDS {
                self.sleep(nap);
                idle_rounds = 0;
            } else if idle_rounds > 0 {
                std::hint::spin_loop();
            }
        }
        for r in &self.regions {
            r.detach();
        }
        self.metrics.clone()
    }

    fn sleep(&mut self, nap: Duration) {
        let Some(first) = self.regions.first() else {
            std::thread::sleep(nap);
            return;
        };
        let doorbell = first.region().u32_at(header::DPU_DOORBELL);
        let seen = doorbell.load(Ordering::Acquire);
        for r in &self.regions {
            r.region().u32_at(header::DPU_SLEEPING).store(1, Ordering::Relaxed);
        }
        // SeqCst: the sleeping flag is visible before our last look at the rings;
        // pairs with the host's fence between publishing its tail and reading the flag.
        fence(Ordering::SeqCst);
        if !self.regions.iter().any(RegionServer::has_work) {
            self.metrics.sleeps += 1;
            // With several regions we can sleep on one futex only: nap briefly.
            let nap = if self.regions.len() > 1 { nap.min(Duration::from_millis(1)) } else { nap };
            sys::wait(doorbell, seen, nap);
        }
        for r in &self.regions {
            r.region().u32_at(header::DPU_SLEEPING).store(0, Ordering::Relaxed);
        }
    }
}
