//! Every limit of `prescient-dpu`, each defined once, with the relations between them
//! checked at compile time (`const _: () = assert!(..)`). Queues, tables, files and
//! messages are sized from these at start-up; nothing on the data path grows past them.
//!
//! One namespace: every limit is `crate::limits::NAME`, so two definitions of one
//! name cannot compile. The files below only group them by what they bound:
//! - `serving`: the serving loop's turns, clock checks and naps;
//! - `fabric`: queue depths, message and region sizes, retry counts of the fabric;
//! - `codec`: the sealing and striping codecs;
//! - `cluster_config`: ranges of the cluster file's settings and the bit fields node ids
//!   and versions fit (cross-checked against `prescient_shim::directory`);
//! - `cluster_files`: sizes of the fragment logs, the store and the outcome table;
//! - `node`: the tables a cluster node keeps in flight, and its roles' rounds, retries
//!   and timers;
//! - `sequencer`: sequencer versions, stamp blocks and claims, and the ordered applier;
//! - `rendezvous`: the hello mailboxes' queues, connections and waits.
#![forbid(unsafe_code)]

mod cluster_config;
mod cluster_files;
mod codec;
mod fabric;
mod node;
mod rendezvous;
mod sequencer;
mod serving;

pub use cluster_config::*;
pub use cluster_files::*;
pub use codec::*;
pub use fabric::*;
pub use node::*;
pub use rendezvous::*;
pub use sequencer::*;
pub use serving::*;
