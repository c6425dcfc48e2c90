//! Running nodes: [`rendezvous`] (hello delivery in one process or over TCP),
//! [`inprocess`] (a whole cluster in one process, stepped or threaded, on a real or a
//! manual clock), [`one_node`] (a one-node cluster per region, `prescient-dpu serve`
//! without `--config`), [`idle`] (how a serving loop sleeps and is woken),
//! [`process`] (the `prescient-dpu serve` loop) and [`scrape`] (what that loop
//! publishes for `serve --metrics`).

pub mod idle;
pub mod inprocess;
pub mod one_node;
pub mod process;
pub mod rendezvous;
pub mod scrape;
