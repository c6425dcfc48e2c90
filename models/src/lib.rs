//! `prescient-models`: the online Markov predictor of the write stream.
//!
//! The DPU app feeds every written key to the predictor; keys whose predicted
//! probability of being written next clears a threshold get a pre-invalidation lease
//! before their PUT arrives (see `DESIGN.md`, step 2). This crate holds the model, its
//! versioned file format, the trainer and the small trained models that ship with
//! Prescient. It depends on nothing else of Prescient's.
//!
//! Layers, bottom up: [`config`] (limits) → `table` (bounded context table) →
//! [`Model`] → [`mod@format`] (model files) and [`lease`] → [`Predictor`] (model + leases,
//! the DPU app's entry point), with [`ledger`], [`threshold`] and [`Tuner`] when its
//! threshold is tuned online from cost; [`trace`] and [`eval`] serve the command line.
#![forbid(unsafe_code)]

pub mod cli;
pub mod config;
mod error;
pub mod eval;
pub mod format;
pub mod lease;
pub mod ledger;
mod model;
mod prediction;
mod predictor;
mod table;
pub mod threshold;
pub mod trace;
mod tuner;

pub use config::ModelConfig;
pub use error::ModelError;
pub use lease::{Lease, LeaseStats, LeaseTracker, OpenOutcome, WriteOutcome};
pub use model::Model;
pub use prediction::{Prediction, Predictions};
pub use predictor::{Predictor, WriteReport};
pub use threshold::TuningConfig;
pub use tuner::Tuner;
