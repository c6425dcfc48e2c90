//! The NIC context of an emulated node: what its queue pairs, its responder and its TCP
//! threads share. Its id and place in the model, whether it lives, the model and clock,
//! where it lives (on an in-process network, or over TCP), the regions registered on it
//! and its table of queue pairs (qpn -> queue pair); and the nodes of an in-process
//! network, by id.
//!
//! The queue pairs (`qp`) sit above this and the node as the fabric traits see it
//! (`node`: `EmuNode`, `Network`) above them; here a queue pair is only what the NIC's
//! timers drive ([`Driven`]).

use std::any::Any;
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};

use super::clock::Clock;
use super::driven::Driven;
use super::model::Model;
use super::regions::Regions;
use crate::fabric::{FabricError, Result};
use crate::limits::QPS_PER_NODE_MAX;

/// Where a node lives.
pub(crate) enum Attachment {
    /// In this process, on a [`Network`](super::Network).
    InProcess(Weak<NetInner>),
    /// Reachable over TCP at this address.
    Tcp(SocketAddr),
}

/// One node's NIC context.
pub(crate) struct NodeInner {
    pub(crate) id: u32,
    /// Where the node sits in the model (its region, its switch port): its id, or the
    /// place a restarted node takes over ([`Network::node_at`](super::Network::node_at)).
    pub(crate) place: u32,
    pub(crate) alive: AtomicBool,
    pub(crate) model: Arc<Model>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) attachment: Attachment,
    /// The regions registered on the node.
    pub(crate) regions: Regions,
    /// The queue pairs, by number - 1, known only as what the NIC's timers drive.
    qps: RwLock<Vec<Option<Weak<dyn Driven>>>>,
    /// Accepted connections, shut down when the node dies.
    pub(crate) accepted: Mutex<Vec<TcpStream>>,
}

impl NodeInner {
    pub(crate) fn new(id: u32, place: u32, model: Arc<Model>, clock: Arc<dyn Clock>, attachment: Attachment) -> Self {
        Self {
            id,
            place,
            alive: AtomicBool::new(true),
            model,
            clock,
            attachment,
            regions: Regions::default(),
            qps: RwLock::new(Vec::new()),
            accepted: Mutex::new(Vec::new()),
        }
    }

    pub(crate) fn is_alive(&self) -> bool {
        self.alive.load(Ordering::Acquire)
    }

    /// This node's protection-domain identity (its address, unique while it lives).
    pub(crate) fn domain(&self) -> u64 {
        self as *const Self as u64
    }

    /// Numbers and records a new queue pair built by `make` from its number.
    pub(crate) fn add_qp<Q: Driven>(&self, make: impl FnOnce(u32) -> Arc<Q>) -> Result<Arc<Q>> {
        let mut qps = self.qps.write().expect("qps lock");
        let index = match qps.iter().position(|q| q.as_ref().is_none_or(|w| w.strong_count() == 0)) {
            Some(i) => i,
            None if qps.len() < QPS_PER_NODE_MAX => {
                qps.push(None);
                qps.len() - 1
            }
            None => return Err(FabricError::Limit { what: "queue pairs per node", limit: QPS_PER_NODE_MAX }),
        };
        // Queue pair numbers start at 1 (0 is special on hardware).
        let qp = make(index as u32 + 1);
        let weak: Weak<Q> = Arc::downgrade(&qp);
        qps[index] = Some(weak);
        Ok(qp)
    }

    /// Drives every pending queue pair of this node (see
    /// [`Network::progress`](super::Network::progress)).
    pub(crate) fn progress(&self) {
        let qps = self.qps.read().expect("qps lock");
        for qp in qps.iter().flatten().filter_map(Weak::upgrade) {
            if qp.is_pending() {
                qp.progress();
            }
        }
    }

    /// The live queue pair numbered `qpn` (`None` too if it is no `Q`: every queue pair
    /// is one `QpInner`).
    pub(crate) fn qp<Q: Driven>(&self, qpn: u32) -> Option<Arc<Q>> {
        let qps = self.qps.read().expect("qps lock");
        let qp: Arc<dyn Any + Send + Sync> = qps.get(qpn.checked_sub(1)? as usize)?.as_ref()?.upgrade()?;
        qp.downcast().ok()
    }
}

/// The nodes of one in-process network (see [`Network`](super::Network)), by id.
pub(crate) struct NetInner {
    pub(crate) nodes: RwLock<Vec<Weak<NodeInner>>>,
    pub(crate) model: Arc<Model>,
    pub(crate) clock: Arc<dyn Clock>,
}

impl NetInner {
    pub(crate) fn node(&self, id: u32) -> Option<Arc<NodeInner>> {
        self.nodes.read().expect("nodes lock").get(id as usize)?.upgrade()
    }
}

/// The GID an in-process node's endpoints carry: fe80::<id>.
pub(crate) fn in_process_gid(id: u32) -> [u8; 16] {
    let mut g = [0u8; 16];
    g[0] = 0xfe;
    g[1] = 0x80;
    g[12..16].copy_from_slice(&id.to_be_bytes());
    g
}

/// The node id inside an in-process GID.
pub(crate) fn in_process_id(gid: &[u8; 16]) -> Option<u32> {
    (gid[0] == 0xfe && gid[1] == 0x80 && gid[2..12].iter().all(|&b| b == 0))
        .then(|| u32::from_be_bytes(gid[12..16].try_into().expect("4 bytes")))
}

/// The GID of a TCP endpoint: the IPv4-mapped (or plain IPv6) address.
pub(crate) fn gid_of(ip: IpAddr) -> [u8; 16] {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    }
}
