//! A stage that holds each request for a fixed time. It stands in for the latency of
//! work done elsewhere (a remote acknowledgement, a slow device) when measuring, and
//! lets fault tests catch requests inside the pipeline. Off unless asked for.

use std::time::Duration;

use crate::pipeline::{Request, Stage, StageError};

/// Longest delay accepted: anything longer is a misconfiguration.
pub const DELAY_MAX: Duration = Duration::from_secs(1);

/// Holds each request for `delay`.
#[derive(Debug)]
pub struct Delay {
    delay: Duration,
}

impl Delay {
    /// A delay stage; `None` if `delay` exceeds [`DELAY_MAX`].
    pub fn new(delay: Duration) -> Option<Self> {
        (delay <= DELAY_MAX).then_some(Self { delay })
    }
}

impl Stage for Delay {
    fn name(&self) -> &'static str {
        "delay"
    }

    fn run(&mut self, _req: &mut Request<'_>) -> Result<(), StageError> {
        std::thread::sleep(self.delay);
        Ok(())
    }
}
