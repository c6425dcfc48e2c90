//! `emu`: a software NIC with the semantics of RDMA hardware.
//!
//! Registered regions are checked on every remote access (rkey, bounds, rights: remote
//! access error), atomics are 8-byte aligned words atomic against each other, requests
//! run in order per queue pair, SEND and WRITE_WITH_IMM consume posted receives (none
//! posted: receiver-not-ready retries, then an error), and a broken link or a dead peer
//! moves the queue pair to ERR and flushes what was outstanding. Nodes live in one
//! process on a [`Network`] (as threads) or in separate processes over TCP
//! ([`EmuNode::tcp`]). Latency, loss and partitions come from a seeded [`ModelConfig`];
//! time comes from a [`Clock`] passed in, so a run on a [`ManualClock`] replays exactly.

mod clock;
mod cq;
mod model;
mod node;
mod qp;
mod responder;
mod tcp;
pub mod wire;

pub use clock::{Clock, ManualClock, SystemClock};
pub use cq::EmuCq;
pub use model::{Fate, Message, Model, ModelConfig, PartitionWindow};
pub use node::{EmuNode, Network};
pub use qp::EmuQp;

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Arc;

    use super::*;
    use crate::fabric::conformance::{self, Harness};
    use crate::fabric::{Access, CompletionQueue, Fabric, Op, QpOptions, WcStatus, WorkRequest};

    /// In-process nodes on one network with the ideal model and the system clock.
    pub(crate) struct InProcess(Network);

    impl Harness for InProcess {
        type F = EmuNode;
        fn node(&self) -> Arc<EmuNode> {
            Arc::new(self.0.node().unwrap())
        }
    }

    pub(crate) fn in_process() -> InProcess {
        InProcess(Network::new(ModelConfig::ideal(), Arc::new(SystemClock::new())).unwrap())
    }

    /// Nodes that talk over TCP on loopback, in this process.
    pub(crate) struct Loopback;

    static NEXT_ID: AtomicU32 = AtomicU32::new(100);

    impl Harness for Loopback {
        type F = EmuNode;
        fn node(&self) -> Arc<EmuNode> {
            let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
            Arc::new(
                EmuNode::tcp(id, "127.0.0.1:0".parse().unwrap(), ModelConfig::ideal(), Arc::new(SystemClock::new()))
                    .unwrap(),
            )
        }
    }

    mod in_process_conformance {
        crate::conformance_tests!(super::in_process());
    }

    mod tcp_conformance {
        crate::conformance_tests!(super::Loopback);
    }

    /// Runs a fixed workload over a lossy, jittery model on a manual clock and returns the
    /// trace of completions with the clock time each became visible.
    fn trace(seed: u64) -> Vec<(u64, u64, WcStatus)> {
        let clock = Arc::new(ManualClock::new());
        let model = ModelConfig { seed, latency_ns: 2_000, jitter_ns: 3_000, loss_ppm: 300_000, partitions: vec![] }
            .with_random_partitions(2, 2, 400_000, 30_000);
        let net = Network::new(model, clock.clone()).unwrap();
        let opts = QpOptions { retry_count: 2, timeout_us: 10, ..conformance::options() };
        let (a, b) = conformance::connect(Arc::new(net.node().unwrap()), Arc::new(net.node().unwrap()), opts);
        let mut out = Vec::with_capacity(8);
        let mut trace = Vec::new();
        let mut wr = 0u64;
        for _ in 0..400 {
            if a.qp.state() != crate::fabric::QpState::Rts {
                break;
            }
            wr += 1;
            a.post(wr, Op::FetchAdd { remote: b.remote().at(0), add: 1 }, 0, 8);
            loop {
                clock.advance(1_000);
                out.clear();
                if a.cq.poll(&mut out, 8).unwrap() > 0 {
                    break;
                }
            }
            trace.extend(out.drain(..).map(|c| (c.wr_id, clock.now_ns(), c.status)));
        }
        trace
    }

    #[test]
    fn a_seed_replays_exactly() {
        let (t1, t2, t3) = (trace(11), trace(11), trace(12));
        assert_eq!(t1, t2, "same seed, same run");
        assert_ne!(t1, t3, "another seed, another run");
        assert!(t1.iter().any(|&(_, _, s)| s == WcStatus::Success));
    }

    #[test]
    fn latency_holds_completions_until_the_clock_passes() {
        let clock = Arc::new(ManualClock::new());
        let net = Network::new(ModelConfig { latency_ns: 5_000, ..ModelConfig::ideal() }, clock.clone()).unwrap();
        let (a, b) =
            conformance::connect(Arc::new(net.node().unwrap()), Arc::new(net.node().unwrap()), conformance::options());
        a.post(1, Op::Write { remote: b.remote().at(0), imm: None }, 0, 8);
        let mut out = Vec::with_capacity(1);
        clock.advance(9_999);
        assert_eq!(a.cq.poll(&mut out, 1).unwrap(), 0, "a round trip is 10 us");
        clock.advance(1);
        assert_eq!(a.cq.poll(&mut out, 1).unwrap(), 1);
    }

    #[test]
    fn a_partition_breaks_the_connection_and_healing_allows_reconnection() {
        let net = Network::new(ModelConfig::ideal(), Arc::new(SystemClock::new())).unwrap();
        let (a, b) =
            conformance::connect(Arc::new(net.node().unwrap()), Arc::new(net.node().unwrap()), conformance::options());
        net.model().partition(a.node.id(), b.node.id());
        a.post(1, Op::Read { remote: b.remote().at(0) }, 0, 8);
        a.post(2, Op::Read { remote: b.remote().at(0) }, 0, 8);
        assert_eq!(a.next().status, WcStatus::RetryExceeded);
        assert_eq!(a.next().status, WcStatus::Flushed);
        net.model().heal(a.node.id(), b.node.id());
        let (a2, b2) = conformance::connect(Arc::clone(&a.node), Arc::clone(&b.node), conformance::options());
        a2.post(3, Op::Read { remote: b2.remote().at(0) }, 0, 8);
        assert!(a2.next().is_ok());
    }

    #[test]
    fn a_killed_node_stops_answering() {
        let ip = in_process();
        let makers: [&dyn Fn() -> Arc<EmuNode>; 2] = [&|| ip.node(), &|| Loopback.node()];
        for h in makers {
            let (a, b) = conformance::connect(h(), h(), conformance::options());
            b.node.kill();
            a.post(1, Op::Write { remote: b.remote().at(0), imm: None }, 0, 8);
            assert_eq!(a.next().status, WcStatus::RetryExceeded);
        }
    }

    #[test]
    fn registration_checks_rights_and_limits() {
        let node = in_process().node();
        let mem = Arc::new(crate::fabric::Memory::anonymous(64).unwrap());
        assert!(node.register(mem.clone(), Access::REMOTE_WRITE).is_err(), "remote write needs local write");
        let mr = node.register(mem, Access::ALL).unwrap();
        assert_eq!(mr.lkey(), mr.rkey());
        assert!(mr.buf(60, 8).is_err());
        let cq = node.create_cq(16).unwrap();
        let qp = node.create_qp(&cq, &cq, QpOptions::default()).unwrap();
        // A receive may not be posted in RESET; the buffer comes back.
        let raw = qp.raw();
        let refused = crate::fabric::RawQp::post_recv(raw, 1, mr.buf(0, 8).unwrap()).unwrap_err();
        assert_eq!(refused.request.len(), 8);
        let qp = qp.init().unwrap();
        qp.post_recv(2, mr.buf(0, 8).unwrap()).unwrap();
        let _ = WorkRequest { wr_id: 0, op: Op::Send, buf: mr.buf(0, 0).unwrap() };
    }
}
