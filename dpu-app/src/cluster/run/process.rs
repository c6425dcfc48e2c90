//! The `prescient-dpu serve` process: one loop polling the nodes it runs until
//! SIGTERM, backing off with the idle protocol of [`super::idle`] (spin, then sleep on
//! the host's doorbell, woken by a submission).
//!
//! - [`serve`]: node N of a replicated cluster (`serve --config cluster.toml --node N
//!   --region PATH`). Its NIC is an emulated node over TCP at its `fabric` address and
//!   its hellos go through a TCP mailbox at its `control` address.
//! - [`serve_regions`]: a one-node cluster for each `--region` (`serve --region A
//!   --region B ...`, see [`super::one_node`]), all polled by the one loop.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::idle::Idle;
use super::inprocess::{ClusterClock, MonotonicClock};
use super::one_node::{ServeRegions, ServedRegions};
use super::rendezvous::TcpMailbox;
use crate::cluster::config::ClusterConfig;
use crate::cluster::protocol::node::{Node, NodeSetup};
use crate::fabric::emu::{EmuNode, ModelConfig};
use crate::fabric::Fabric;
use crate::Error;

/// How to serve as a node of a replicated cluster.
#[derive(Debug, Clone)]
pub struct ServeCluster {
    /// The cluster.
    pub config: Arc<ClusterConfig>,
    /// This node.
    pub id: u8,
    /// The host's region.
    pub region: PathBuf,
    /// Lock the region in memory.
    pub pin: bool,
    /// Time without a host heartbeat after which its buffers are reclaimed.
    pub host_timeout: Duration,
}

/// Serves node `opts.id` until `stop`; returns the node's summary.
pub fn serve(opts: &ServeCluster, stop: &AtomicBool) -> Result<String, Error> {
    let cfg = opts.config.node(u32::from(opts.id)).map_err(Error::Config)?.clone();
    let fabric = EmuNode::tcp(u32::from(opts.id), cfg.fabric, ModelConfig::ideal(), Arc::new(MonotonicClock))
        .map_err(Error::Fabric)?;
    let peers = opts.config.nodes.iter().filter(|n| n.id != opts.id).map(|n| (n.id, n.control)).collect();
    let mailbox = TcpMailbox::bind(opts.id, cfg.control, peers).map_err(Error::Rendezvous)?;
    let clock = ClusterClock::Real;
    let node = Node::start(NodeSetup {
        config: Arc::clone(&opts.config),
        id: opts.id,
        fabric: Arc::new(fabric),
        region: opts.region.clone(),
        pin: opts.pin,
        host_timeout: opts.host_timeout,
        mailbox: Box::new(mailbox),
        now: clock.now(),
    })?;
    tracing::info!(node = opts.id, fabric = %cfg.fabric, control = %cfg.control, "serving");
    let heartbeat = Duration::from_micros(opts.config.heartbeat_us);
    let mut idle = Idle::new(heartbeat, 1, opts.config.nodes.len() > 1);
    let mut nodes = [node];
    run(&mut nodes, &clock, &mut idle, stop);
    let [node] = nodes;
    node.detach();
    Ok(format!("{}  loop: slept {} times\n", node.summary(), idle.sleeps()))
}

/// Serves every region of `opts` that can be served, each as a one-node cluster, until
/// `stop`; returns the summary. Fails only if no region can be served.
pub fn serve_regions(opts: &ServeRegions, stop: &AtomicBool) -> Result<String, Error> {
    let clock = ClusterClock::Real;
    let mut served = ServedRegions::start(opts, &clock)?;
    let heartbeat = Duration::from_micros(prescient_shim::config::HEARTBEAT_PERIOD_US);
    let mut idle = Idle::new(heartbeat, served.nodes().len(), false);
    tracing::info!(regions = served.nodes().len(), refused = served.refused().len(), "serving");
    run(served.nodes_mut(), &clock, &mut idle, stop);
    served.detach();
    Ok(served.summary(idle.sleeps()))
}

/// Polls every node once a round at the time of the round until `stop`, backing off
/// through `idle` when a round did nothing.
fn run<F: Fabric>(nodes: &mut [Node<F>], clock: &ClusterClock, idle: &mut Idle, stop: &AtomicBool) {
    while !stop.load(Ordering::Relaxed) {
        let now = clock.now();
        let mut busy = false;
        for node in nodes.iter_mut() {
            busy |= node.poll(now);
        }
        idle.after_round(busy, nodes, now.mono_ns);
    }
}
