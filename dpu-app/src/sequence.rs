//! The ordering stage: stamps every write with a version that only moves forward.
//!
//! A version is `epoch << 40 | counter`: the epoch is the DPU app's attach count
//! for the region (bumped at every start), so a restarted DPU app never reissues a
//! version its predecessor gave out, and within an epoch the counter moves forward
//! with every write. The write-path work replaces this with a cluster sequencer; the
//! ordering rule stays the same.

use crate::pipeline::{Request, Stage, StageError};

/// Bits of a version given to the counter.
pub const COUNTER_BITS: u32 = 40;

/// Stamps versions.
#[derive(Debug)]
pub struct Sequencer {
    epoch: u64,
    counter: u64,
}

impl Sequencer {
    /// A sequencer for `epoch` (at most 2^24 - 1).
    pub fn new(epoch: u32) -> Self {
        assert!(epoch < 1 << (64 - COUNTER_BITS), "epoch {epoch} overflows the version");
        Self { epoch: u64::from(epoch), counter: 0 }
    }
}

impl Stage for Sequencer {
    fn name(&self) -> &'static str {
        "sequence"
    }

    fn run(&mut self, req: &mut Request<'_>) -> Result<(), StageError> {
        if self.counter + 1 >= 1 << COUNTER_BITS {
            return Err(StageError::Failed {
                stage: "sequence",
                reason: format!("epoch {} ran out of versions: restart the DPU app to open a new epoch", self.epoch),
            });
        }
        self.counter += 1;
        req.version = self.epoch << COUNTER_BITS | self.counter;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::Op;

    #[test]
    fn versions_move_forward_and_a_new_epoch_is_above_the_old() {
        let mut buf = [0u8; 16];
        let mut stamp = |seq: &mut Sequencer| {
            let mut req = Request {
                op: Op::Put,
                key: b"k",
                buf: &mut buf,
                payload: 0..0,
                version: 0,
                side: &mut [],
                codec: Default::default(),
            };
            seq.run(&mut req).unwrap();
            req.version
        };
        let mut old = Sequencer::new(1);
        let a = stamp(&mut old);
        let b = stamp(&mut old);
        assert!(b > a);
        let mut new = Sequencer::new(2);
        assert!(stamp(&mut new) > b);
    }
}
