//! Formats and files: what a node keeps on disk and in registered memory, and the
//! bytes that cross the wire, each with its own parser and checks. Nothing here posts
//! a work request or knows about peers.

pub mod control;
pub mod crc_combine;
pub mod entry;
pub mod fates;
pub mod feed;
pub mod file;
pub mod hello;
pub mod ledger;
pub mod log;
pub mod outcome;
pub(crate) mod preallocate;
pub mod record;
pub mod store;
