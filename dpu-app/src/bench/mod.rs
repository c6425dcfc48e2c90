//! `prescient-dpu bench`: measurements that print each figure next to a reference
//! measured in the same run, as a ratio.

pub mod affinity;
pub mod cluster;
pub mod incast;
pub mod report;
pub mod ring;
pub mod scribble;
pub mod sequencer;
