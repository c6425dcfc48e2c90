//! The `prescient-dpu serve` process: one loop polling the nodes it runs until
//! SIGTERM, backing off with the idle protocol of [`super::idle`] (spin, then sleep on
//! the host's doorbell, woken by a submission).
//!
//! - [`serve`]: node N of a replicated cluster (`serve --config cluster.toml --node N
//!   --region PATH`). Its NIC is the one the cluster file names: on `fabric = "emu"` an
//!   emulated node over TCP at the node's `fabric` address, on `fabric = "verbs"` the
//!   node's RDMA device (a build with `--features verbs`). Either way its hellos, which
//!   carry its queue pairs' endpoints (GID, QPN, PSN) and its regions' addresses and
//!   rkeys, go through a TCP mailbox at its `control` address.
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
use crate::cluster::config::{ClusterConfig, NodeFabric};
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

/// Serves node `opts.id` until `stop` on the fabric its cluster file names; returns the
/// node's summary.
pub fn serve(opts: &ServeCluster, stop: &AtomicBool) -> Result<String, Error> {
    let cfg = opts.config.node(u32::from(opts.id)).map_err(Error::Config)?;
    match &cfg.fabric {
        NodeFabric::Emu(listen) => {
            // The cluster file's regions delay each message by its path (a function of
            // the cluster's seed and the message, the same in every process).
            let model = ModelConfig {
                seed: opts.config.network.seed,
                topology: opts.config.network.topology.clone(),
                ..ModelConfig::ideal()
            };
            let fabric =
                EmuNode::tcp(u32::from(opts.id), *listen, model, Arc::new(MonotonicClock)).map_err(Error::Fabric)?;
            serve_on(opts, Arc::new(fabric), stop)
        }
        NodeFabric::Verbs(device) => serve_verbs(opts, device, stop),
    }
}

/// Serves on the node's RDMA device.
#[cfg(feature = "verbs")]
fn serve_verbs(
    opts: &ServeCluster,
    device: &crate::cluster::config::VerbsDevice,
    stop: &AtomicBool,
) -> Result<String, Error> {
    let fabric = crate::fabric::verbs::VerbsNode::open_port(Some(&device.name), device.port, device.gid_index)
        .map_err(|e| Error::Fabric(with_node(e, opts, device)))?;
    tracing::info!(node = opts.id, device = %device.name, port = device.port, gid_index = fabric.gid_index(), "verbs device open");
    serve_on(opts, Arc::new(fabric), stop)
}

/// A device error, saying which device of which node of which file it came from.
#[cfg(feature = "verbs")]
fn with_node(
    e: crate::fabric::FabricError,
    opts: &ServeCluster,
    device: &crate::cluster::config::VerbsDevice,
) -> crate::fabric::FabricError {
    match e {
        crate::fabric::FabricError::Device(why) => crate::fabric::FabricError::Device(format!(
            "{} (node {} of {}): {why}",
            device.name, opts.id, opts.config.origin
        )),
        other => other,
    }
}

/// A build without the verbs backend cannot serve a verbs cluster: says how to get one.
#[cfg(not(feature = "verbs"))]
fn serve_verbs(
    opts: &ServeCluster,
    device: &crate::cluster::config::VerbsDevice,
    _stop: &AtomicBool,
) -> Result<String, Error> {
    Err(Error::Fabric(crate::fabric::FabricError::Device(format!(
        "{} says fabric = \"verbs\" (node {} on RDMA device {}), but this prescient-dpu was built without the \
         verbs backend: rebuild it with `cargo build --release -p prescient-dpu --features verbs` (needs cmake and \
         libclang), or run the cluster on fabric = \"emu\"",
        opts.config.origin, opts.id, device.name
    ))))
}

/// Serves node `opts.id` on `fabric` until `stop`; returns the node's summary.
fn serve_on<F: Fabric>(opts: &ServeCluster, fabric: Arc<F>, stop: &AtomicBool) -> Result<String, Error> {
    let metrics = open_metrics(opts.metrics.as_deref())?;
    let cfg = opts.config.node(u32::from(opts.id)).map_err(Error::Config)?.clone();
    let peers = opts.config.nodes.iter().filter(|n| n.id != opts.id).map(|n| (n.id, n.control)).collect();
    let mailbox = TcpMailbox::bind(opts.id, cfg.control, peers).map_err(Error::Rendezvous)?;
    let clock = ClusterClock::Real;
    let node = Node::start(NodeSetup {
        config: Arc::clone(&opts.config),
        id: opts.id,
        fabric,
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
    let mut publisher =
        metrics.as_ref().map(|(_, shared)| Publisher::new(&nodes, 0, Arc::clone(shared), clock.now().mono_ns));
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
    let mut publisher = metrics.as_ref().map(|(_, shared)| {
        Publisher::new(served.nodes(), served.refused().len(), Arc::clone(shared), clock.now().mono_ns)
    });
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::config::{FabricKind, VerbsDevice};

    /// A verbs cluster file is refused before anything is attached: by a build without
    /// the backend with how to get one, by one with it (on a machine without the
    /// device) with what `ibv_get_device_list` said; both name the device.
    #[test]
    fn a_verbs_cluster_needs_the_verbs_backend_and_its_device() {
        let base = std::env::temp_dir().join(format!("prescient-serve-verbs-{}", std::process::id()));
        std::fs::create_dir_all(base.join("keys")).unwrap();
        let mut config = ClusterConfig::in_process(3, 2, 1, &base);
        config.fabric = FabricKind::Verbs;
        for node in &mut config.nodes {
            let name = "prescient-absent-dev0".to_owned();
            node.fabric = NodeFabric::Verbs(VerbsDevice { name, port: 1, gid_index: None });
        }
        config.validate().unwrap();
        let opts = ServeCluster {
            config: Arc::new(config),
            id: 1,
            region: base.join("no-such-region"),
            pin: false,
            host_timeout: Duration::from_secs(1),
            metrics: None,
        };
        let err = serve(&opts, &AtomicBool::new(false)).unwrap_err();
        let text = crate::error::Report(&err).to_string();
        std::fs::remove_dir_all(&base).unwrap();
        assert!(text.contains("prescient-absent-dev0"), "{text}");
        assert!(!text.contains("no-such-region"), "refused before the region is attached: {text}");
        if cfg!(feature = "verbs") {
            assert!(text.contains("ibv_get_device_list"), "{text}");
        } else {
            assert!(text.contains("--features verbs"), "{text}");
        }
    }
}
