//! `prescient-models`: the online Markov predictor of the write stream.
//!
//! The DPU app feeds every written key to the predictor; keys whose predicted
//! probability of being written next clears a threshold get a pre-invalidation lease
//! before their PUT arrives (see `DESIGN.md`, step 2). This crate holds the model, its
//! versioned file format, the trainer and the small trained models that ship with
//! Prescient. It depends on nothing else of Prescient's.
#![forbid(unsafe_code)]
