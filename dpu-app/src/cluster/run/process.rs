//! One node per process: `prescient-dpu serve --config cluster.toml --node N --region
//! PATH`. The node's NIC is an emulated node over TCP at its `fabric` address, its
//! hellos go through a TCP mailbox at its `control` address, and it polls until
//! SIGTERM, backing off when idle (spin, then sleeps of at most `IDLE_SLEEP`).

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::inprocess::{ClusterClock, MonotonicClock};
use super::rendezvous::TcpMailbox;
use crate::cluster::config::ClusterConfig;
use crate::cluster::protocol::node::{Node, NodeSetup};
use crate::cluster::NodeError;
use crate::fabric::emu::{EmuNode, ModelConfig};

/// Longest idle sleep between polls.
const IDLE_SLEEP: Duration = Duration::from_micros(200);
/// Idle polls before the first sleep.
const IDLE_SPINS: u32 = 2_000;

/// How to serve.
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
pub fn serve(opts: &ServeCluster, stop: &AtomicBool) -> Result<String, NodeError> {
    let cfg = opts.config.node(u32::from(opts.id)).map_err(NodeError::Config)?.clone();
    let fabric = EmuNode::tcp(u32::from(opts.id), cfg.fabric, ModelConfig::ideal(), Arc::new(MonotonicClock))
        .map_err(NodeError::Fabric)?;
    let peers = opts.config.nodes.iter().filter(|n| n.id != opts.id).map(|n| (n.id, n.control)).collect();
    let mailbox = TcpMailbox::bind(opts.id, cfg.control, peers).map_err(NodeError::Rendezvous)?;
    let clock = ClusterClock::Real;
    let mut node = Node::start(NodeSetup {
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
    let mut idle = 0u32;
    while !stop.load(Ordering::Relaxed) {
        if node.poll(clock.now()) {
            idle = 0;
        } else {
            idle = idle.saturating_add(1);
            if idle > IDLE_SPINS {
                std::thread::sleep(IDLE_SLEEP);
            } else {
                std::hint::spin_loop();
            }
        }
    }
    node.detach();
    Ok(node.summary())
}
