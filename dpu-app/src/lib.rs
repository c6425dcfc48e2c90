//! `prescient-dpu`: the offload engine.
//!
//! Runs on the Arm cores of a BlueField DPU, or as an ordinary process in
//! CPU-emulation mode. It polls the host's submission rings, validates every
//! descriptor, and passes each request through a [`pipeline::Pipeline`] of stages.
#![deny(unsafe_code)]

pub mod fabric;
pub mod pipeline;
