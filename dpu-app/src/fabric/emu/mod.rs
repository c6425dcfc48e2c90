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
//!
//! The files, top down, each importing only files below it (`ci/import_cycles.py`):
//! `node` ([`EmuNode`], [`Network`]) and `verbs` ([`EmuQp`]) on top; `tcp` (the transport
//! between processes); `qp` (a queue pair: its send queue and the in-process requester);
//! `responder` (an incoming request executed against a node's memory) over `receive` (a
//! queue pair's receive queue) and `region_cache` over `regions` (a node's registered
//! regions); `context` (a node's NIC context and its table of queue pairs) and `cq`, which
//! know a queue pair only as `driven` (what the NIC's timers drive); and the leaves:
//! `model`, `port`, `topology`, `wire`, `clock`, `spin`.

mod clock;
mod context;
mod cq;
mod driven;
mod model;
mod node;
mod port;
mod qp;
mod receive;
mod region_cache;
mod regions;
mod responder;
mod spin;
mod tcp;
mod topology;
mod verbs;
pub mod wire;

pub use clock::{Clock, ManualClock, SystemClock};
pub use cq::EmuCq;
pub use model::{Fate, Message, Model, ModelConfig, PartitionWindow, WIRE_HEADER_BYTES};
pub use node::{EmuNode, Network};
pub use port::{Admission, Port, PortConfig, PortStats};
pub use topology::{PathDelay, RegionId, Topology, HOPS_BETWEEN_REGIONS, HOPS_INSIDE_REGION};
pub use verbs::EmuQp;

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Arc;

    use super::*;
    use crate::fabric::conformance::{self, Harness, Side};
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

    /// In-process nodes on a network whose model delays every message (20-30 us one way)
    /// on the system clock: remote effects happen at delivery time, and the whole suite
    /// must still hold.
    pub(crate) fn timed() -> InProcess {
        let model = ModelConfig { seed: 5, latency_ns: 20_000, jitter_ns: 10_000, ..ModelConfig::ideal() };
        InProcess(Network::new(model, Arc::new(SystemClock::new())).unwrap())
    }

    mod timed_conformance {
        crate::conformance_tests!(super::timed());
    }

    /// Two connected nodes on a network with `latency_ns` (plus up to `jitter_ns`) one way
    /// and a manual clock at 0.
    fn delayed(latency_ns: u64, jitter_ns: u64) -> (Arc<ManualClock>, Network, Side<EmuNode>, Side<EmuNode>) {
        let clock = Arc::new(ManualClock::new());
        let model = ModelConfig { seed: 3, latency_ns, jitter_ns, ..ModelConfig::ideal() };
        let net = Network::new(model, clock.clone()).unwrap();
        let (a, b) =
            conformance::connect(Arc::new(net.node().unwrap()), Arc::new(net.node().unwrap()), conformance::options());
        (clock, net, a, b)
    }

    /// Posts a WRITE of "delivered" to `b`'s offset 0 and a CAS 5 -> 9 on its word at 64.
    fn post_write_and_cas(a: &Side<EmuNode>, b: &Side<EmuNode>) {
        a.mr.memory().write(0, b"delivered").unwrap();
        b.mr.memory().store_u64(64, 5).unwrap();
        a.post(1, Op::Write { remote: b.remote().at(0), imm: None }, 0, 9);
        a.post(2, Op::CompareSwap { remote: b.remote().at(64), compare: 5, swap: 9 }, 16, 8);
    }

    /// True once both effects of [`post_write_and_cas`] are in `b`'s memory; panics on a
    /// half-done state (the WRITE was posted first and must land first).
    fn effects_landed(b: &Side<EmuNode>) -> bool {
        let (bytes, word) = (b.bytes(0, 9), b.mr.memory().load_u64(64).unwrap());
        match (bytes.as_slice(), word) {
            (b"delivered", 9) => true,
            ([0, 0, 0, 0, 0, 0, 0, 0, 0], 5) => false,
            other => panic!("half-delivered: {other:?}"),
        }
    }

    /// Polls `a`'s completion queue at `clock`'s `at_ns` and after: the WRITE and the CAS
    /// complete in order at one round trip.
    fn completes_at(clock: &ManualClock, a: &Side<EmuNode>, at_ns: u64) {
        let mut out = Vec::with_capacity(2);
        clock.advance(at_ns - 1 - clock.now_ns());
        assert_eq!(a.cq.poll(&mut out, 2).unwrap(), 0, "the responses are still on their way");
        clock.advance(1);
        assert_eq!(a.cq.poll(&mut out, 2).unwrap(), 2);
        assert_eq!(
            (out[0].wr_id, out[0].status, out[1].wr_id, out[1].status),
            (1, WcStatus::Success, 2, WcStatus::Success)
        );
        assert_eq!(out[1].buf.as_ref().unwrap().read_u64().unwrap(), 5, "the CAS saw the old word");
    }

    #[test]
    fn remote_effects_wait_for_delivery_when_the_requester_polls() {
        const L: u64 = 5_000;
        let (clock, _net, a, b) = delayed(L, 0);
        post_write_and_cas(&a, &b);
        let mut out = Vec::with_capacity(2);
        clock.advance(L - 1);
        assert_eq!(a.cq.poll(&mut out, 2).unwrap(), 0);
        assert!(!effects_landed(&b), "nothing reaches the peer before the one-way latency");
        clock.advance(1);
        assert_eq!(a.cq.poll(&mut out, 2).unwrap(), 0, "the responses are still on their way");
        assert!(effects_landed(&b), "a poll at the delivery time performs the requests");
        completes_at(&clock, &a, 2 * L);
    }

    #[test]
    fn remote_effects_wait_for_delivery_when_the_network_progresses() {
        const L: u64 = 5_000;
        let (clock, net, a, b) = delayed(L, 0);
        post_write_and_cas(&a, &b);
        clock.advance(L - 1);
        net.progress();
        assert!(!effects_landed(&b), "nothing reaches the peer before the one-way latency");
        clock.advance(1);
        assert!(!effects_landed(&b), "the clock alone moves nothing");
        net.progress();
        assert!(effects_landed(&b), "progress at the delivery time performs the requests");
        completes_at(&clock, &a, 2 * L);
    }

    #[test]
    fn a_post_performs_what_has_come_due_on_its_queue_pair() {
        const L: u64 = 5_000;
        let (clock, _net, a, b) = delayed(L, 0);
        post_write_and_cas(&a, &b);
        clock.advance(L);
        assert!(!effects_landed(&b));
        a.post(3, Op::Read { remote: b.remote().at(0) }, 1024, 8);
        assert!(effects_landed(&b), "the post performed the two requests ahead of it");
    }

    #[test]
    fn jitter_never_reorders_the_requests_of_one_queue_pair() {
        const N: u64 = 64;
        const STEP_NS: u64 = 500;
        let (clock, net, a, b) = delayed(1_000, 50_000);
        let opts = conformance::options();
        let first_psn = a.qp.endpoint().psn;
        // The model's raw draws would deliver these out of order: the test can fail.
        let arrivals: Vec<u64> = (0..N)
            .map(|i| {
                let msg = Message {
                    src_node: a.node.id(),
                    dst_node: b.node.id(),
                    src_qpn: a.qp.qpn(),
                    psn: (first_psn + i as u32) & 0x00FF_FFFF,
                    bytes: WIRE_HEADER_BYTES + 8,
                    response_bytes: WIRE_HEADER_BYTES,
                };
                match net.model().transmit(msg, i * STEP_NS, opts.retry_count, u64::from(opts.timeout_us) * 1_000) {
                    Fate::Delivered { delay_ns, .. } => i * STEP_NS + delay_ns,
                    Fate::Lost { .. } => unreachable!("no loss configured"),
                }
            })
            .collect();
        assert!(arrivals.windows(2).any(|w| w[0] > w[1]), "the jitter reorders raw arrivals");
        // WRITE i puts i + 1 into b's word 0; posts are STEP_NS apart.
        for i in 0..N {
            a.mr.memory().store_u64(i as usize * 8, i + 1).unwrap();
            a.post(i, Op::Write { remote: b.remote().at(0), imm: None }, i as usize * 8, 8);
            clock.advance(STEP_NS);
        }
        let (mut seen, mut changes) = (b.mr.memory().load_u64(0).unwrap(), 0);
        while seen < N {
            clock.advance(STEP_NS);
            net.progress();
            let now = b.mr.memory().load_u64(0).unwrap();
            assert!(now >= seen, "WRITE {} landed after WRITE {}", seen, now);
            changes += usize::from(now != seen);
            seen = now;
        }
        assert!(changes > 1, "deliveries spread over time");
        let mut out = Vec::with_capacity(N as usize);
        clock.advance(100_000);
        assert_eq!(a.cq.poll(&mut out, N as usize).unwrap(), N as usize);
        assert!(out.iter().enumerate().all(|(i, c)| c.wr_id == i as u64 && c.is_ok()), "completions in post order");
    }

    #[test]
    fn a_receive_completion_is_not_visible_before_delivery() {
        const L: u64 = 5_000;
        let (clock, _net, a, b) = delayed(L, 0);
        b.recv(7, 0, 8);
        a.mr.memory().write(0, b"fragment").unwrap();
        a.post(1, Op::Write { remote: b.remote().at(1024), imm: Some(42) }, 0, 8);
        let mut out = Vec::with_capacity(1);
        clock.advance(L - 1);
        assert_eq!(a.cq.poll(&mut out, 1).unwrap(), 0);
        assert_eq!(b.cq.poll(&mut out, 1).unwrap(), 0, "not delivered yet");
        assert_eq!(b.bytes(1024, 8), [0; 8]);
        clock.advance(1);
        assert_eq!(a.cq.poll(&mut out, 1).unwrap(), 0, "this poll delivers; the response is on its way");
        assert_eq!(b.cq.poll(&mut out, 1).unwrap(), 1);
        assert_eq!((out[0].wr_id, out[0].status, out[0].imm), (7, WcStatus::Success, Some(42)));
        assert_eq!(b.bytes(1024, 8), b"fragment");
    }

    #[test]
    fn a_lost_request_fails_at_its_retry_budget_and_flushes_what_follows() {
        let clock = Arc::new(ManualClock::new());
        let cut = PartitionWindow { a: 0, b: 1, from_ns: 0, until_ns: u64::MAX };
        let net = Network::new(
            ModelConfig { latency_ns: 1_000, partitions: vec![cut], ..ModelConfig::ideal() },
            clock.clone(),
        )
        .unwrap();
        let opts = QpOptions { retry_count: 1, timeout_us: 10, ..conformance::options() };
        let (a, b) = conformance::connect(Arc::new(net.node().unwrap()), Arc::new(net.node().unwrap()), opts);
        a.post(1, Op::Write { remote: b.remote().at(0), imm: None }, 0, 8);
        a.post(2, Op::Write { remote: b.remote().at(0), imm: None }, 0, 8);
        let mut out = Vec::with_capacity(2);
        clock.advance(19_999);
        assert_eq!(a.cq.poll(&mut out, 2).unwrap(), 0, "two attempts of 10 us each");
        clock.advance(1);
        assert_eq!(a.cq.poll(&mut out, 2).unwrap(), 2);
        assert_eq!((out[0].wr_id, out[0].status), (1, WcStatus::RetryExceeded));
        assert_eq!((out[1].wr_id, out[1].status), (2, WcStatus::Flushed));
        assert_eq!(a.qp.state(), crate::fabric::QpState::Error);
    }

    /// Runs a fixed workload over a lossy, jittery model on a manual clock and returns the
    /// trace of completions with the clock time each became visible.
    fn trace(seed: u64) -> Vec<(u64, u64, WcStatus)> {
        let clock = Arc::new(ManualClock::new());
        let model =
            ModelConfig { seed, latency_ns: 2_000, jitter_ns: 3_000, loss_ppm: 300_000, ..ModelConfig::ideal() }
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
