//! `prescient-shim`: the host side of Prescient and the shared-region layout both
//! sides use.
//!
//! A key-value store links this crate (from Rust, or from C/C++ through the C ABI in
//! [`ffi`] and the generated `prescient.h`). It creates one shared region per process,
//! takes [`Buffer`]s from the region's pinned arena, serialises values straight into
//! them and submits PUT/DELETE/GET requests on one [`QueuePair`] per thread. The DPU app
//! (`prescient-dpu`) maps the same region, consumes the descriptors and posts
//! completions; no value byte is copied on the way.
//!
//! Module map, bottom up: [`config`] (every limit), [`layout`] (offsets), [`region`]
//! (the mapping), [`descriptor`] / [`completion`] / [`status`] (formats),
//! [`directory`] (the cache-directory word and its rules),
//! [`ring`] (the SPSC protocol), [`queue`] (a queue pair in the region),
//! [`arena`] / [`buffer`] (buffer ownership), [`liveness`] (heartbeats),
//! the API: [`host`] (create or attach, buffers, the directory's words),
//! [`read_sla`] (what a read waits for), [`reads`] (the reader protocol over the
//! directory), [`request`] (what one
//! submission asks), [`queue_pair`] (submitting and reaping); [`file_header`] (the
//! common header of every cluster file) and [`feed`] (following a node's change-feed
//! log from its file); then [`ffi`] (the C ABI).
#![deny(unsafe_code)]

pub mod arena;
pub mod buffer;
pub mod completion;
pub mod config;
pub mod descriptor;
pub mod directory;
pub mod error;
pub mod feed;
pub mod ffi;
pub mod file_header;
mod get_table;
pub mod host;
pub mod layout;
pub mod liveness;
pub mod queue;
pub mod queue_pair;
pub mod read_sla;
pub mod reads;
pub mod region;
pub mod region_guard;
pub mod request;
pub mod ring;
pub mod signal;
pub mod status;
mod submitted;
pub mod sys;
pub mod value;

pub use buffer::Buffer;
pub use completion::{Completion, CompletionEntry};
pub use descriptor::OpCode;
pub use directory::{ReadCheck, ReadGuard, RefillToken, SlotState, SlotWord};
pub use error::ShimError;
pub use host::{Host, HostOptions};
pub use layout::RegionConfig;
pub use queue_pair::QueuePair;
pub use read_sla::ReadSla;
pub use request::Request;
pub use signal::CompletionSignal;
pub use status::Status;
pub use value::Value;
