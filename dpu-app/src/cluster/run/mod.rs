//! Running nodes: [`rendezvous`] (hello delivery in one process or over TCP),
//! [`inprocess`] (a whole cluster in one process, stepped or threaded, on a real or a
//! manual clock) and [`process`] (`prescient-dpu serve --config`).

pub mod inprocess;
pub mod process;
pub mod rendezvous;
