//! An emulated node as the fabric traits see it: [`EmuNode`], a `Fabric` on the NIC
//! context of one participant (`context`: its protection domain, registered regions and
//! queue pairs). Nodes of one process meet in a [`Network`]; nodes in different
//! processes meet over TCP (see `tcp`).

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, RwLock, Weak};

use super::clock::Clock;
use super::context::{Attachment, NetInner, NodeInner};
use super::cq::EmuCq;
use super::model::{Model, ModelConfig};
use super::qp::QpInner;
use super::tcp;
use super::verbs::EmuQp;
use crate::fabric::{Access, Fabric, FabricError, Memory, MemoryRegion, QpOptions, QueuePair, Reset, Result};
use crate::limits::NODES_PER_NETWORK_MAX;

struct Deregister {
    node: Weak<NodeInner>,
    key: u32,
}

impl Drop for Deregister {
    fn drop(&mut self) {
        if let Some(node) = self.node.upgrade() {
            node.regions.deregister(self.key);
        }
    }
}

/// An emulated NIC: one node of the emulated fabric.
#[derive(Clone)]
pub struct EmuNode {
    pub(crate) inner: Arc<NodeInner>,
}

impl std::fmt::Debug for EmuNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmuNode").field("id", &self.inner.id).finish()
    }
}

impl EmuNode {
    /// A node reachable over TCP at `bind` (port 0 picks one), with node id `id` in the
    /// model. Its responder threads serve peers' requests until [`EmuNode::kill`] or exit.
    ///
    /// A model with switch ports is refused: a port's queue is shared by every sender
    /// toward its node, and a process sees only its own; regions and their latency
    /// matrix apply (each delay is a function of the seed and the message alone).
    pub fn tcp(id: u32, bind: SocketAddr, model: ModelConfig, clock: Arc<dyn Clock>) -> Result<EmuNode> {
        Ok(EmuNode { inner: tcp::listen(id, bind, model, clock)? })
    }

    /// This node's id in its network.
    pub fn id(&self) -> u32 {
        self.inner.id
    }

    /// Where the node sits in the model (regions, switch ports, partitions): its id
    /// unless made with [`Network::node_at`].
    pub fn place(&self) -> u32 {
        self.inner.place
    }

    /// Kills the node as a crash would: its peers' requests go unanswered (they time out
    /// with `RetryExceeded`) and its TCP connections close.
    pub fn kill(&self) {
        self.inner.alive.store(false, Ordering::Release);
        for s in self.inner.accepted.lock().expect("accepted lock").drain(..) {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
        tcp::unblock_listener(&self.inner);
    }

    /// The node's model (to cut and heal links at run time).
    pub fn model(&self) -> &Model {
        &self.inner.model
    }

    /// The TCP address peers connect to, for a TCP node.
    pub fn tcp_addr(&self) -> Option<SocketAddr> {
        match self.inner.attachment {
            Attachment::Tcp(a) => Some(a),
            Attachment::InProcess(_) => None,
        }
    }
}

impl Fabric for EmuNode {
    type Cq = EmuCq;
    type Qp = EmuQp;

    fn name(&self) -> &'static str {
        match self.inner.attachment {
            Attachment::InProcess(_) => "emu",
            Attachment::Tcp(_) => "emu-tcp",
        }
    }

    fn register(&self, memory: Arc<Memory>, access: Access) -> Result<Arc<MemoryRegion>> {
        access.validate()?;
        let key = self.inner.regions.register(Arc::clone(&memory), access)?;
        let guard = Deregister { node: Arc::downgrade(&self.inner), key };
        Ok(Arc::new(MemoryRegion::new(memory, access, (key, key), self.inner.domain(), Box::new(guard))))
    }

    fn create_cq(&self, depth: usize) -> Result<EmuCq> {
        EmuCq::new(depth, Arc::clone(&self.inner.clock))
    }

    fn create_qp(&self, send_cq: &EmuCq, recv_cq: &EmuCq, options: QpOptions) -> Result<QueuePair<EmuQp, Reset>> {
        options.validate()?;
        let qp = QpInner::create(&self.inner, send_cq, recv_cq, options)?;
        Ok(QueuePair::from_raw(EmuQp { inner: qp }))
    }
}

/// The switch of in-process emulated nodes: nodes created here reach each other directly,
/// with the shared model deciding latency, loss and partitions.
///
/// There is no NIC thread: the emulated NIC's DMA - a request acting on the peer's memory
/// and receive queue - runs on the threads that post on a queue pair, poll or wait on a
/// completion queue it reports to, post a receive at its peer that the request found
/// missing (receiver not ready), or call
/// [`Network::progress`]. With the ideal model a request acts at once when posted; with a
/// timed model it acts once the clock has reached its delivery time, on the first of
/// those calls after that.
#[derive(Clone)]
pub struct Network {
    inner: Arc<NetInner>,
}

impl std::fmt::Debug for Network {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Network").field("model", self.inner.model.config()).finish()
    }
}

impl Network {
    /// A network with `model`, reading time from `clock`.
    pub fn new(model: ModelConfig, clock: Arc<dyn Clock>) -> Result<Self> {
        Ok(Self {
            inner: Arc::new(NetInner { nodes: RwLock::new(Vec::new()), model: Arc::new(Model::new(model)?), clock }),
        })
    }

    /// The shared model.
    pub fn model(&self) -> &Model {
        &self.inner.model
    }

    /// Whether places `a` and `b` can reach each other now (no partition cuts them).
    pub fn reachable(&self, a: u32, b: u32) -> bool {
        !self.inner.model.partitioned(a, b, self.inner.clock.now_ns())
    }

    /// A new node; ids count from 0 in creation order, and its place in the model is
    /// its id.
    pub fn node(&self) -> Result<EmuNode> {
        self.node_in(None)
    }

    /// A new node at `place` in the model (a restarted node taking over its
    /// predecessor's region, switch port and partitions).
    pub fn node_at(&self, place: u32) -> Result<EmuNode> {
        self.node_in(Some(place))
    }

    fn node_in(&self, place: Option<u32>) -> Result<EmuNode> {
        let mut nodes = self.inner.nodes.write().expect("nodes lock");
        if nodes.len() >= NODES_PER_NETWORK_MAX {
            return Err(FabricError::Limit { what: "nodes per network", limit: NODES_PER_NETWORK_MAX });
        }
        let id = nodes.len() as u32;
        let inner = Arc::new(NodeInner::new(
            id,
            place.unwrap_or(id),
            Arc::clone(&self.inner.model),
            Arc::clone(&self.inner.clock),
            Attachment::InProcess(Arc::downgrade(&self.inner)),
        ));
        nodes.push(Arc::downgrade(&inner));
        Ok(EmuNode { inner })
    }
}

impl Network {
    /// Performs every request that is due by now on every queue pair of every node of
    /// this network: deliveries whose time has come (memory effects, atomics, receive
    /// completions), receiver-not-ready retries and timeouts. A simulator calls this after
    /// each clock step so that all that is due happens at that step, whoever polls.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use prescient_dpu::fabric::emu::{ManualClock, ModelConfig, Network};
    /// let clock = Arc::new(ManualClock::new());
    /// let net = Network::new(ModelConfig { latency_ns: 1_000, ..ModelConfig::ideal() }, clock.clone())?;
    /// // ... nodes, queue pairs, posts ...
    /// clock.advance(1_000);
    /// net.progress(); // every request posted at 0 has now acted on its peer
    /// # Ok::<(), prescient_dpu::fabric::FabricError>(())
    /// ```
    pub fn progress(&self) {
        let nodes = self.inner.nodes.read().expect("nodes lock");
        for node in nodes.iter().filter_map(Weak::upgrade) {
            node.progress();
        }
    }
}
