//! The `prescient-dpu serve` process: one loop polling the nodes it runs until
//! SIGTERM, backing off with the idle protocol of [`super::idle`] (spin, then sleep on
//! the host's doorbell, woken by a submission).
//!
//! - [`serve`]: node N of a replicated cluster (`serve --config cluster.toml --node N
//!   --region PATH`). Its NIC is an emulated node over TCP at its `fabric` address and
//!   its hellos go through a TCP mailbox at its `control` address.
//! - [`serve_regions`]: a one-node cluster for each `--region` (`serve --region A
//!   --region B ...`, see [`super::one_node`]), all polled by the one loop.
//!
//! Either may also answer `GET /metrics` (`--metrics ADDR`): the listener is opened
//! before any region is attached, so a bad or taken address stops the start; the loop
//! publishes its figures to it as [`super::scrape`] says, never waiting for it.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::idle::Idle;
use super::inprocess::{ClusterClock, MonotonicClock};
use super::one_node::{ServeRegions, ServedRegions};
use super::rendezvous::TcpMailbox;
use super::scrape::{page_renderer, Published, Publisher};
use crate::cluster::config::ClusterConfig;
use crate::cluster::protocol::node::{Node, NodeSetup};
use crate::fabric::emu::{EmuNode, ModelConfig};
use crate::fabric::Fabric;
use crate::metrics_http::MetricsHttp;
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
    /// Answer `GET /metrics` on this `HOST:PORT` (port 0: a free one, printed).
    pub metrics: Option<String>,
}

/// A metrics listener and the snapshot it serves, which the loop publishes into.
type Metrics = (MetricsHttp, Arc<Mutex<Published>>);

/// The metrics listener on `addr`, if one is asked for, with the snapshot it serves.
/// Prints the address it listens on: with port 0 that is how a caller learns it.
fn open_metrics(addr: Option<&str>) -> Result<Option<Metrics>, Error> {
    let Some(addr) = addr else { return Ok(None) };
    let shared = Arc::new(Mutex::new(Published::default()));
    let http = MetricsHttp::start(addr, page_renderer(Arc::clone(&shared)))?;
    println!("prescient-dpu: metrics on http://{}/metrics", http.local_addr());
    tracing::info!(addr = %http.local_addr(), "metrics listener");
    Ok(Some((http, shared)))
}

/// Serves node `opts.id` until `stop`; returns the node's summary.
pub fn serve(opts: &ServeCluster, stop: &AtomicBool) -> Result<String, Error> {
    let metrics = open_metrics(opts.metrics.as_deref())?;
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
    let mut publisher = metrics.as_ref().map(|(_, shared)| Publisher::new(&nodes, 0, Arc::clone(shared)));
    run(&mut nodes, &clock, &mut idle, publisher.as_mut(), stop);
    drop(metrics);
    let [node] = nodes;
    node.detach();
    Ok(format!("{}  loop: slept {} times\n", node.summary(), idle.sleeps()))
}

/// Serves every region of `opts` that can be served, each as a one-node cluster, until
/// `stop`; returns the summary. Fails only if no region can be served.
pub fn serve_regions(opts: &ServeRegions, stop: &AtomicBool) -> Result<String, Error> {
    let metrics = open_metrics(opts.metrics.as_deref())?;
    let clock = ClusterClock::Real;
    let mut served = ServedRegions::start(opts, &clock)?;
    let heartbeat = Duration::from_micros(prescient_shim::config::HEARTBEAT_PERIOD_US);
    let mut idle = Idle::new(heartbeat, served.nodes().len(), false);
    tracing::info!(regions = served.nodes().len(), refused = served.refused().len(), "serving");
    let mut publisher =
        metrics.as_ref().map(|(_, shared)| Publisher::new(served.nodes(), served.refused().len(), Arc::clone(shared)));
    run(served.nodes_mut(), &clock, &mut idle, publisher.as_mut(), stop);
    drop(metrics);
    served.detach();
    Ok(served.summary(idle.sleeps()))
}

/// Polls every node once a round at the time of the round until `stop`, backing off
/// through `idle` when a round did nothing, and hands `publisher` the nodes' figures
/// (it publishes them once a period).
fn run<F: Fabric>(
    nodes: &mut [Node<F>],
    clock: &ClusterClock,
    idle: &mut Idle,
    mut publisher: Option<&mut Publisher>,
    stop: &AtomicBool,
) {
    while !stop.load(Ordering::Relaxed) {
        let now = clock.now();
        let mut busy = false;
        for node in nodes.iter_mut() {
            busy |= node.poll(now);
        }
        if let Some(publisher) = publisher.as_deref_mut() {
            publisher.maybe_publish(nodes, now.mono_ns);
        }
        idle.after_round(busy, nodes, now.mono_ns);
    }
}
