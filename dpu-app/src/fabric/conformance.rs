//! The conformance suite: one set of checks that every backend must pass, so that what
//! holds in emulation holds on hardware. Each check takes a [`Harness`] that makes fresh
//! nodes of one backend; [`conformance_tests!`](crate::conformance_tests) turns the suite
//! into `#[test]` functions for a harness (emu in-process and over TCP in this crate's
//! tests, verbs on Soft-RoCE in `tests/fabric_verbs.rs`).
//!
//! Checks panic with a message on failure (they are test code).

use std::sync::Arc;
use std::time::Duration;

use super::{
    Access, Completion, CompletionQueue, Fabric, Memory, MemoryRegion, Op, QpOptions, QpState, QueuePair, RemoteRegion,
    Rts, WcOpcode, WcStatus, WorkRequest,
};

/// Makes fresh nodes of one backend that can connect to each other.
pub trait Harness: Sync {
    /// The backend.
    type F: Fabric;
    /// A new node (NIC context and protection domain).
    fn node(&self) -> Arc<Self::F>;
}

/// Bytes of the region every side of a check registers.
pub const REGION_BYTES: usize = 64 * 1024;
const WAIT: Duration = Duration::from_secs(10);

/// Options the suite uses: short timeouts so that failure cases finish quickly.
pub fn options() -> QpOptions {
    QpOptions {
        send_depth: 256,
        recv_depth: 64,
        retry_count: 1,
        rnr_retry_count: 1,
        timeout_us: 8_000,
        rnr_timer_us: 1_000,
    }
}

/// One end of a connection: node, completion queue, region, queue pair.
/// Fields drop in declaration order: queue pair first, node last (children before parents).
pub struct Side<F: Fabric> {
    /// The connected queue pair.
    pub qp: QueuePair<F::Qp, Rts>,
    /// A region with every access right.
    pub mr: Arc<MemoryRegion>,
    /// Its completion queue (sends and receives).
    pub cq: F::Cq,
    /// The node.
    pub node: Arc<F>,
}

impl<F: Fabric> Side<F> {
    /// The region as the peer addresses it.
    pub fn remote(&self) -> RemoteRegion {
        self.mr.remote()
    }

    /// Posts `op` with the buffer `offset..offset+len` of this side's region.
    pub fn post(&self, wr_id: u64, op: Op, offset: usize, len: usize) {
        let buf = self.mr.buf(offset, len).expect("buffer inside the region");
        self.qp.post(WorkRequest { wr_id, op, buf }).expect("post accepted");
    }

    /// Posts a receive of `len` bytes at `offset`.
    pub fn recv(&self, wr_id: u64, offset: usize, len: usize) {
        self.qp
            .post_recv(wr_id, self.mr.buf(offset, len).expect("buffer inside the region"))
            .expect("receive accepted");
    }

    /// The next completion, waiting up to 10 s.
    pub fn next(&self) -> Completion {
        next(&self.cq)
    }

    /// Reads `len` bytes of this side's own region.
    pub fn bytes(&self, offset: usize, len: usize) -> Vec<u8> {
        let mut v = vec![0; len];
        self.mr.memory().read(offset, &mut v).expect("inside the region");
        v
    }
}

/// The next completion of `cq`, waiting up to 10 s.
pub fn next<C: CompletionQueue>(cq: &C) -> Completion {
    let mut out = Vec::with_capacity(1);
    let n = cq.wait(&mut out, 1, WAIT).expect("completion queue works");
    assert_eq!(n, 1, "no completion within {WAIT:?}");
    out.pop().expect("one completion")
}

/// A region of `len` bytes on `node` with `access`.
pub fn region<F: Fabric>(node: &F, len: usize, access: Access) -> Arc<MemoryRegion> {
    node.register(Arc::new(Memory::anonymous(len).expect("anonymous memory")), access).expect("registration")
}

/// Two fresh nodes with connected queue pairs.
pub fn pair<H: Harness>(h: &H, opts: QpOptions) -> (Side<H::F>, Side<H::F>) {
    let (na, nb) = (h.node(), h.node());
    connect(na, nb, opts)
}

/// Connects queue pairs on two given nodes.
pub fn connect<F: Fabric>(na: Arc<F>, nb: Arc<F>, opts: QpOptions) -> (Side<F>, Side<F>) {
    let (ca, cb) = (na.create_cq(4096).expect("cq"), nb.create_cq(4096).expect("cq"));
    let (ma, mb) = (region(&*na, REGION_BYTES, Access::ALL), region(&*nb, REGION_BYTES, Access::ALL));
    let qa = na.create_qp(&ca, &ca, opts).expect("qp").init().expect("init");
    let qb = nb.create_qp(&cb, &cb, opts).expect("qp").init().expect("init");
    let (ea, eb) = (qa.endpoint(), qb.endpoint());
    let qa = qa.ready_to_receive(&eb).expect("rtr");
    let qb = qb.ready_to_receive(&ea).expect("rtr");
    let qa = qa.ready_to_send().expect("rts");
    let qb = qb.ready_to_send().expect("rts");
    (Side { node: na, cq: ca, mr: ma, qp: qa }, Side { node: nb, cq: cb, mr: mb, qp: qb })
}

fn expect(c: &Completion, wr_id: u64, status: WcStatus, opcode: WcOpcode) {
    assert_eq!((c.wr_id, c.status, c.opcode), (wr_id, status, opcode), "unexpected completion {c:?}");
}

/// WRITE lands in the peer's memory, READ brings it back; completions carry wr_id,
/// opcode, length and the buffer.
pub fn write_and_read<H: Harness>(h: &H) {
    let (a, b) = pair(h, options());
    let data: Vec<u8> = (0..200u32).map(|i| (i * 7) as u8).collect();
    a.mr.memory().write(0, &data).unwrap();
    a.post(1, Op::Write { remote: b.remote().at(1000), imm: None }, 0, data.len());
    let c = a.next();
    expect(&c, 1, WcStatus::Success, WcOpcode::Write);
    assert_eq!(c.byte_len, 200);
    let buf = c.buf.expect("buffer handed back");
    assert_eq!((buf.offset(), buf.len()), (0, 200));
    assert_eq!(b.bytes(1000, 200), data);
    a.post(2, Op::Read { remote: b.remote().at(1000) }, 4096, 200);
    let c = a.next();
    expect(&c, 2, WcStatus::Success, WcOpcode::Read);
    assert_eq!(c.byte_len, 200);
    assert_eq!(a.bytes(4096, 200), data);
}

/// Polls that ask for many completions when fewer are ready lose none of those that
/// come after: on rxe, sideway's poller once ran ibv_end_poll after an ibv_next_poll
/// that had found the queue empty, and the next completion vanished (a cluster node's
/// heartbeat READs stopped completing); one at a time, as [`next`] polls, never showed it.
pub fn polls_for_many_lose_none<H: Harness>(h: &H) {
    let (a, b) = pair(h, options());
    let mut out = Vec::with_capacity(64);
    for round in 0..20u64 {
        let count = 1 + round % 3;
        for i in 0..count {
            a.post(round * 8 + i, Op::Write { remote: b.remote().at(0), imm: None }, 0, 64);
        }
        let mut got = Vec::new();
        let deadline = std::time::Instant::now() + WAIT;
        while got.len() < count as usize {
            assert!(std::time::Instant::now() < deadline, "round {round}: {got:?} of {count} completions");
            out.clear();
            a.cq.poll(&mut out, 64).expect("completion queue works");
            for c in out.drain(..) {
                expect(&c, c.wr_id, WcStatus::Success, WcOpcode::Write);
                got.push(c.wr_id);
            }
            std::hint::spin_loop();
        }
        got.sort_unstable();
        assert_eq!(got, (0..count).map(|i| round * 8 + i).collect::<Vec<_>>(), "round {round}");
    }
}

/// WRITE_WITH_IMM writes the data and consumes a receive carrying the immediate.
pub fn write_with_imm<H: Harness>(h: &H) {
    let (a, b) = pair(h, options());
    b.recv(77, 0, 16);
    a.mr.memory().write(0, b"fragment-payload-32-bytes-long!!").unwrap();
    a.post(5, Op::Write { remote: b.remote().at(2048), imm: Some(0xDEAD_BEEF) }, 0, 32);
    expect(&a.next(), 5, WcStatus::Success, WcOpcode::Write);
    let r = b.next();
    expect(&r, 77, WcStatus::Success, WcOpcode::RecvWithImm);
    assert_eq!((r.imm, r.byte_len), (Some(0xDEAD_BEEF), 32));
    assert_eq!(b.bytes(2048, 32), b"fragment-payload-32-bytes-long!!");
    // A zero-length WRITE_WITH_IMM carries only the immediate.
    b.recv(78, 0, 16);
    a.post(6, Op::Write { remote: b.remote().at(0), imm: Some(7) }, 0, 0);
    expect(&a.next(), 6, WcStatus::Success, WcOpcode::Write);
    let r = b.next();
    expect(&r, 78, WcStatus::Success, WcOpcode::RecvWithImm);
    assert_eq!((r.imm, r.byte_len), (Some(7), 0));
}

/// SEND lands in the posted receive buffer.
pub fn send_and_receive<H: Harness>(h: &H) {
    let (a, b) = pair(h, options());
    b.recv(9, 512, 64);
    a.mr.memory().write(0, b"hello, peer").unwrap();
    a.post(3, Op::Send, 0, 11);
    expect(&a.next(), 3, WcStatus::Success, WcOpcode::Send);
    let r = b.next();
    expect(&r, 9, WcStatus::Success, WcOpcode::Recv);
    assert_eq!((r.byte_len, r.imm), (11, None));
    assert_eq!(b.bytes(512, 11), b"hello, peer");
}

/// CAS swaps only on a match and returns the old value; FETCH_ADD returns the old value.
pub fn atomics<H: Harness>(h: &H) {
    let (a, b) = pair(h, options());
    b.mr.memory().store_u64(64, 5).unwrap();
    a.post(1, Op::CompareSwap { remote: b.remote().at(64), compare: 5, swap: 9 }, 0, 8);
    let c = a.next();
    expect(&c, 1, WcStatus::Success, WcOpcode::CompareSwap);
    assert_eq!((c.byte_len, c.buf.unwrap().read_u64().unwrap()), (8, 5));
    assert_eq!(b.mr.memory().load_u64(64).unwrap(), 9);
    a.post(2, Op::CompareSwap { remote: b.remote().at(64), compare: 5, swap: 1 }, 8, 8);
    let c = a.next();
    expect(&c, 2, WcStatus::Success, WcOpcode::CompareSwap);
    assert_eq!(c.buf.unwrap().read_u64().unwrap(), 9);
    assert_eq!(b.mr.memory().load_u64(64).unwrap(), 9, "no swap on a mismatch");
    a.post(3, Op::FetchAdd { remote: b.remote().at(64), add: 100 }, 16, 8);
    let c = a.next();
    expect(&c, 3, WcStatus::Success, WcOpcode::FetchAdd);
    assert_eq!(c.buf.unwrap().read_u64().unwrap(), 9);
    assert_eq!(b.mr.memory().load_u64(64).unwrap(), 109);
}

/// Requests on one queue pair execute and complete in post order.
pub fn ordering<H: Harness>(h: &H) {
    let (a, b) = pair(h, options());
    for i in 0..100u64 {
        a.mr.memory().write(i as usize * 8, &(i + 1).to_le_bytes()).unwrap();
        a.post(i, Op::Write { remote: b.remote().at(0), imm: None }, i as usize * 8, 8);
    }
    a.post(100, Op::Read { remote: b.remote().at(0) }, 2048, 8);
    for i in 0..=100u64 {
        let c = a.next();
        assert!(c.is_ok(), "{c:?}");
        assert_eq!(c.wr_id, i, "completions come in post order");
    }
    assert_eq!(a.bytes(2048, 8), 100u64.to_le_bytes(), "the READ sees the last WRITE before it");
    // Data written before a WRITE_WITH_IMM is visible when its receive completes.
    b.recv(1, 0, 8);
    a.mr.memory().write(4096, &[0xAB; 512]).unwrap();
    a.post(200, Op::Write { remote: b.remote().at(8192), imm: None }, 4096, 512);
    a.post(201, Op::Write { remote: b.remote().at(0), imm: Some(1) }, 0, 0);
    assert!(a.next().is_ok() && a.next().is_ok());
    assert!(b.next().is_ok());
    assert_eq!(b.bytes(8192, 512), vec![0xAB; 512]);
}

fn fails_then_flushes<F: Fabric>(a: &Side<F>, first: WcStatus, opcode: WcOpcode) {
    let c = a.next();
    expect(&c, 1, first, opcode);
    assert!(c.buf.is_some(), "a failed request hands its buffer back");
    for i in 2..5 {
        let c = a.next();
        assert_eq!((c.wr_id, c.status), (i, WcStatus::Flushed), "{c:?}");
    }
    assert_eq!(a.qp.state(), QpState::Error);
    a.post(9, Op::Write { remote: RemoteRegion { addr: 0, len: 0, rkey: 0 }.at(0), imm: None }, 0, 8);
    let c = a.next();
    assert_eq!((c.wr_id, c.status), (9, WcStatus::Flushed), "posts in ERR are flushed: {c:?}");
}

fn post_after<F: Fabric>(a: &Side<F>, b: &Side<F>) {
    for i in 2..5 {
        a.post(i, Op::Write { remote: b.remote().at(0), imm: None }, 0, 8);
    }
}

/// A bad rkey gives a remote access error, moves the QP to ERR and flushes what follows.
pub fn bad_rkey<H: Harness>(h: &H) {
    let (a, b) = pair(h, options());
    let mut remote = b.remote();
    remote.rkey ^= 0x5A5A_0000;
    a.post(1, Op::Write { remote: remote.at(0), imm: None }, 0, 8);
    post_after(&a, &b);
    fails_then_flushes(&a, WcStatus::RemoteAccess, WcOpcode::Write);
}

/// An access past the end of the region gives a remote access error.
pub fn out_of_bounds<H: Harness>(h: &H) {
    let (a, b) = pair(h, options());
    a.post(1, Op::Read { remote: b.remote().at(REGION_BYTES as u64 - 4) }, 0, 8);
    post_after(&a, &b);
    fails_then_flushes(&a, WcStatus::RemoteAccess, WcOpcode::Read);
}

/// Missing rights (a WRITE into a read-only region) give a remote access error.
pub fn missing_access<H: Harness>(h: &H) {
    let (a, b) = pair(h, options());
    let read_only = region(&*b.node, 4096, Access::LOCAL_WRITE | Access::REMOTE_READ);
    a.post(1, Op::Write { remote: read_only.remote().at(0), imm: None }, 0, 8);
    post_after(&a, &b);
    fails_then_flushes(&a, WcStatus::RemoteAccess, WcOpcode::Write);
    let (a, _b2) = pair(h, options());
    a.post(1, Op::FetchAdd { remote: read_only.remote().at(0), add: 1 }, 0, 8);
    let c = a.next();
    assert_ne!(c.status, WcStatus::Success, "an atomic needs REMOTE_ATOMIC: {c:?}");
}

/// An atomic on a word that is not 8-byte aligned is refused.
pub fn misaligned_atomic<H: Harness>(h: &H) {
    let (a, b) = pair(h, options());
    a.post(1, Op::CompareSwap { remote: b.remote().at(4), compare: 0, swap: 1 }, 0, 8);
    post_after(&a, &b);
    fails_then_flushes(&a, WcStatus::RemoteInvalidRequest, WcOpcode::CompareSwap);
    assert_eq!(b.mr.memory().load_u64(0).unwrap(), 0, "nothing changed");
}

/// READ into a buffer without LOCAL_WRITE is a local protection error.
pub fn local_protection<H: Harness>(h: &H) {
    let (a, b) = pair(h, options());
    let ro = region(&*a.node, 4096, Access::REMOTE_READ);
    a.qp.post(WorkRequest { wr_id: 1, op: Op::Read { remote: b.remote().at(0) }, buf: ro.buf(0, 8).unwrap() }).unwrap();
    post_after(&a, &b);
    fails_then_flushes(&a, WcStatus::LocalProtection, WcOpcode::Read);
}

/// WRITE_WITH_IMM with no receive posted: receiver-not-ready retries, then an error.
pub fn no_posted_receive<H: Harness>(h: &H) {
    let (a, b) = pair(h, options());
    a.post(1, Op::Write { remote: b.remote().at(0), imm: Some(1) }, 0, 8);
    post_after(&a, &b);
    fails_then_flushes(&a, WcStatus::RnrRetryExceeded, WcOpcode::Write);
}

/// A receive posted during the receiver-not-ready retries lets the request through.
pub fn receive_posted_in_time<H: Harness>(h: &H) {
    // The transport timeout stays well above the RNR window: Soft-RoCE keeps its
    // retransmission timer running while it waits out RNR NAKs.
    let opts = QpOptions { rnr_retry_count: 6, rnr_timer_us: 2_000, retry_count: 3, timeout_us: 65_000, ..options() };
    let (a, b) = pair(h, opts);
    a.post(1, Op::Write { remote: b.remote().at(0), imm: Some(3) }, 0, 8);
    std::thread::sleep(Duration::from_millis(2));
    b.recv(4, 0, 8);
    expect(&a.next(), 1, WcStatus::Success, WcOpcode::Write);
    let r = b.next();
    assert_eq!((r.wr_id, r.imm), (4, Some(3)));
}

/// A destroyed peer: the request times out, the QP goes to ERR, the rest is flushed.
pub fn peer_gone<H: Harness>(h: &H) {
    let (a, b) = pair(h, options());
    let remote = b.remote();
    drop(b);
    a.post(1, Op::Write { remote: remote.at(0), imm: None }, 0, 8);
    for i in 2..5 {
        a.post(i, Op::Write { remote: remote.at(0), imm: None }, 0, 8);
    }
    fails_then_flushes(&a, WcStatus::RetryExceeded, WcOpcode::Write);
}

/// A queue pair in ERR flushes its posted receives too.
pub fn error_flushes_receives<H: Harness>(h: &H) {
    let (a, b) = pair(h, options());
    a.recv(50, 0, 8);
    a.recv(51, 8, 8);
    let mut remote = b.remote();
    remote.rkey ^= 0x0101_0000;
    a.post(1, Op::Write { remote: remote.at(0), imm: None }, 0, 8);
    let mut seen = Vec::new();
    for _ in 0..3 {
        let c = a.next();
        seen.push((c.wr_id, c.status));
    }
    seen.sort_by_key(|s| s.0);
    assert_eq!(seen, vec![(1, WcStatus::RemoteAccess), (50, WcStatus::Flushed), (51, WcStatus::Flushed)]);
}

/// After ERR, both ends reset and reconnect, and work again.
pub fn reconnect<H: Harness>(h: &H) {
    let (a, b) = pair(h, options());
    let mut remote = b.remote();
    remote.rkey ^= 0x0202_0000;
    a.post(1, Op::Write { remote: remote.at(0), imm: None }, 0, 8);
    assert_eq!(a.next().status, WcStatus::RemoteAccess);
    let Side { node: na, cq: ca, mr: ma, qp: qa } = a;
    let Side { node: nb, cq: cb, mr: mb, qp: qb } = b;
    let mut leftover = Vec::new();
    let qa = qa.reset(&mut leftover).expect("reset").init().expect("init");
    let qb = qb.reset(&mut leftover).expect("reset").init().expect("init");
    let (ea, eb) = (qa.endpoint(), qb.endpoint());
    let qa = qa.ready_to_receive(&eb).unwrap().ready_to_send().unwrap();
    let qb = qb.ready_to_receive(&ea).unwrap().ready_to_send().unwrap();
    let (a, b) = (Side { node: na, cq: ca, mr: ma, qp: qa }, Side { node: nb, cq: cb, mr: mb, qp: qb });
    a.mr.memory().write(0, b"again!!!").unwrap();
    a.post(2, Op::Write { remote: b.remote().at(16), imm: None }, 0, 8);
    expect(&a.next(), 2, WcStatus::Success, WcOpcode::Write);
    assert_eq!(b.bytes(16, 8), b"again!!!");
}

/// A queue pair reset after carrying traffic offers another endpoint than before: a
/// peer that never saw the old connection fail can tell the new offer from a
/// retransmission of the old one (the cluster reconnects on that difference), and its
/// queue pair, which expects the old connection's next PSN, is replaced rather than
/// fed packets it drops.
pub fn reset_gives_a_new_endpoint<H: Harness>(h: &H) {
    let (a, b) = pair(h, options());
    let before = a.qp.endpoint();
    a.mr.memory().write(0, b"one pass").unwrap();
    a.post(1, Op::Write { remote: b.remote().at(0), imm: None }, 0, 8);
    expect(&a.next(), 1, WcStatus::Success, WcOpcode::Write);
    let mut leftover = Vec::new();
    let qa = a.qp.reset(&mut leftover).expect("reset").init().expect("init");
    let after = qa.endpoint();
    assert_eq!(after.qpn, before.qpn, "the queue pair is the same one");
    assert_ne!(after, before, "a reset queue pair must start a new sequence (PSN)");
}

/// A region that maps a file: remote writes land in the file (fragment logs).
pub fn file_backed_region<H: Harness>(h: &H) {
    let (a, b) = pair(h, options());
    let path = std::env::temp_dir().join(format!("prescient-conformance-{}-{}", std::process::id(), b.qp.qpn()));
    let file = std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(true).open(&path).unwrap();
    file.set_len(8192).unwrap();
    let log = b.node.register(Arc::new(Memory::map_file(&file, 0, 8192).unwrap()), Access::ALL).unwrap();
    a.mr.memory().write(0, b"persisted fragment").unwrap();
    a.post(1, Op::Write { remote: log.remote().at(4096), imm: None }, 0, 18);
    assert!(a.next().is_ok());
    drop(log);
    let bytes = std::fs::read(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    assert_eq!(&bytes[4096..4114], b"persisted fragment");
}

/// Several nodes increment one word by CAS retries, and by FETCH_ADD: the totals are exact.
pub fn cas_increment_race<H: Harness>(h: &H) {
    const NODES: usize = 4;
    const ROUNDS: u64 = 150;
    let target = h.node();
    let sides: Vec<_> = (0..NODES).map(|_| connect(h.node(), Arc::clone(&target), options())).collect();
    let remote = sides[0].1.remote();
    std::thread::scope(|s| {
        for (a, _) in &sides {
            s.spawn(move || {
                let mut guess = 0u64;
                let mut done = 0;
                while done < ROUNDS {
                    a.post(done, Op::CompareSwap { remote: remote.at(0), compare: guess, swap: guess + 1 }, 0, 8);
                    let c = a.next();
                    assert!(c.is_ok(), "{c:?}");
                    let old = c.buf.unwrap().read_u64().unwrap();
                    if old == guess {
                        done += 1;
                        guess += 1;
                    } else {
                        guess = old;
                    }
                }
                for i in 0..ROUNDS {
                    a.post(i, Op::FetchAdd { remote: remote.at(8), add: 1 }, 8, 8);
                    assert!(a.next().is_ok());
                }
            });
        }
    });
    // Every side registered its own region on the target; the first one holds the counters.
    let word = sides[0].1.mr.memory().load_u64(0).unwrap();
    let sum = sides[0].1.mr.memory().load_u64(8).unwrap();
    assert_eq!((word, sum), (NODES as u64 * ROUNDS, NODES as u64 * ROUNDS));
}

/// Expands to one `#[test]` per conformance check, run against `$harness`.
#[macro_export]
macro_rules! conformance_tests {
    ($harness:expr) => {
        $crate::conformance_tests!(@each $harness;
            write_and_read, polls_for_many_lose_none, write_with_imm, send_and_receive, atomics, ordering, bad_rkey, out_of_bounds,
            missing_access, misaligned_atomic, local_protection, no_posted_receive, receive_posted_in_time,
            peer_gone, error_flushes_receives, reconnect, reset_gives_a_new_endpoint, file_backed_region,
            cas_increment_race);
    };
    (@each $harness:expr; $($name:ident),*) => {
        $(
            #[test]
            fn $name() {
                $crate::fabric::conformance::$name(&$harness);
            }
        )*
    };
}
