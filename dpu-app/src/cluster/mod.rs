//! The cluster's on-file state: the fragment log a writer fills on each holder
//! ([`log`], entries in [`entry`]), the fragment store each node keeps ([`store`], records in
//! [`record`]), and the writer's outcome table ([`outcome`]). Limits are in [`limits`]; the
//! header page and atomic creation all three share are in [`mod@file`].
//!
//! Nothing here talks to the fabric: these are the formats and their logic, which the
//! node wires to RDMA. Every file survives a kill -9 of its process (the page cache keeps
//! the mapping's stores); power-loss durability is a flush the caller asks for.

pub mod entry;
pub mod file;
pub mod limits;
pub mod log;
pub mod outcome;
pub mod record;
pub mod store;
