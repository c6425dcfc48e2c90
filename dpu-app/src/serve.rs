//! The serving loop: poll every queue pair of every region, keep the heartbeat,
//! watch the hosts, and sleep on the futex when there is nothing to do.

use std::path::PathBuf;
use std::sync::atomic::{fence, AtomicBool, Ordering};
use std::time::{Duration, Instant};

use prescient_shim::config::{HEARTBEAT_PERIOD_US, SPIN_ROUNDS};
use prescient_shim::layout::header;
use prescient_shim::sys;

use crate::error::DpuError;
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
    pipeline_stages: usize,
    metrics: Metrics,
}

impl Server {
    /// Attaches every region. Fails if any cannot be attached.
    pub fn attach(options: &ServeOptions) -> Result<Self, DpuError> {
        let mut metrics = Metrics::default();
        let mut regions = Vec::with_capacity(options.regions.len());
        for path in &options.regions {
            regions.push(RegionServer::attach(path, options.pin, options.host_timeout, &mut metrics)?);
        }
        for r in &regions {
            r.beat();
        }
        Ok(Self { regions, pipeline_stages: 0, metrics })
    }

    /// The epoch of the first region (bumped at every attach): seeds the sequencer
    /// so a restarted DPU app never reissues a version.
    pub fn epoch(&self) -> u32 {
        self.regions.first().map_or(1, |r| r.region().u32_at(header::DPU_EPOCH).load(Ordering::Acquire)) & 0x00ff_ffff
    }

    /// What has happened so far.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// Serves until `stop` is set. Returns the metrics.
    pub fn run(&mut self, pipeline: &mut Pipeline, options: &ServeOptions, stop: &AtomicBool) -> Metrics {
        self.pipeline_stages = pipeline.len();
        let period = Duration::from_micros(HEARTBEAT_PERIOD_US);
        let nap = options.idle_sleep.min(period);
        let mut last_beat = Instant::now();
        let mut idle_rounds = 0u32;
        let mut rounds = 0u32;
        while !stop.load(Ordering::Relaxed) {
            rounds = rounds.wrapping_add(1);
            let mut done = 0;
            for r in &mut self.regions {
                done += r.serve(pipeline, &mut self.metrics);
            }
            idle_rounds = if done == 0 { idle_rounds.saturating_add(1) } else { 0 };
            // Clock reads cost tens of nanoseconds: only every 64 rounds, or when idle.
            // (Counted in rounds, not requests: a busy DPU app must still beat.)
            if idle_rounds > 0 || rounds % 64 == 0 {
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
