//! The emulated fabric across processes: a node per process over TCP on loopback.
//! The node processes are `fabric-node` (src/bin/fabric-node.rs).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use prescient_dpu::fabric::emu::{EmuNode, ModelConfig, SystemClock};
use prescient_dpu::fabric::{
    Access, CompletionQueue, Endpoint, Fabric, Memory, Op, QpOptions, QpState, RemoteRegion, WcStatus, WorkRequest,
};

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("prescient-fabric-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn node(args: &[&str], dir: &Path) -> Child {
    Command::new(env!("CARGO_BIN_EXE_fabric-node"))
        .args(args)
        .args(["--listen", "127.0.0.1:0", "--dir", dir.to_str().unwrap()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn finish(child: Child) -> String {
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "node failed: {text} {}", String::from_utf8_lossy(&out.stderr));
    text
}

#[test]
fn nodes_in_separate_processes_race_cas_increments_exactly() {
    let dir = scratch("race");
    let serve = node(&["serve", "--id", "1", "--peers", "2,3,4"], &dir);
    let clients: Vec<_> =
        (2..=4).map(|id| node(&["client", "--id", &id.to_string(), "--peer", "1", "--rounds", "100"], &dir)).collect();
    for (c, id) in clients.into_iter().zip(2..) {
        assert_eq!(finish(c).trim(), format!("CLIENT {id} OK"));
    }
    assert_eq!(finish(serve).trim(), "FINAL 300 300 300", "3 nodes x 100 CAS increments, FETCH_ADDs, notifications");
    std::fs::remove_dir_all(&dir).unwrap();
}

fn publish(dir: &Path, id: u32, peer: u32, ep: &Endpoint, region: &RemoteRegion) {
    let mut b = ep.to_bytes().to_vec();
    b.extend_from_slice(&region.to_bytes());
    std::fs::write(dir.join(format!(".{id}-{peer}.tmp")), &b).unwrap();
    std::fs::rename(dir.join(format!(".{id}-{peer}.tmp")), dir.join(format!("{id}-{peer}.ep"))).unwrap();
}

fn lookup(dir: &Path, id: u32, peer: u32) -> (Endpoint, RemoteRegion) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(b) = std::fs::read(dir.join(format!("{peer}-{id}.ep"))) {
            return (Endpoint::from_bytes(&b[..28]).unwrap(), RemoteRegion::from_bytes(&b[28..]).unwrap());
        }
        assert!(Instant::now() < deadline, "peer never published its endpoint");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Waits until the peer's queue pair is in RTS (it writes `<peer>-<id>.ready`).
fn wait_ready(dir: &Path, id: u32, peer: u32) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !dir.join(format!("{peer}-{id}.ready")).exists() {
        assert!(Instant::now() < deadline, "peer never became ready");
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[test]
fn a_dead_peer_process_fails_the_queue_pair_and_a_new_one_reconnects() {
    let me =
        EmuNode::tcp(10, "127.0.0.1:0".parse().unwrap(), ModelConfig::ideal(), Arc::new(SystemClock::new())).unwrap();
    let mr = me.register(Arc::new(Memory::anonymous(4096).unwrap()), Access::ALL).unwrap();
    let cq = me.create_cq(256).unwrap();
    let mut out = Vec::with_capacity(4);
    let mut next = || {
        out.clear();
        assert_eq!(cq.wait(&mut out, 1, Duration::from_secs(10)).unwrap(), 1, "no completion");
        out.pop().unwrap()
    };

    let dir = scratch("dead");
    let peer = node(&["serve", "--id", "11", "--peers", "10"], &dir);
    let qp = me.create_qp(&cq, &cq, QpOptions::default()).unwrap().init().unwrap();
    publish(&dir, 10, 11, &qp.endpoint(), &mr.remote());
    let (ep, region) = lookup(&dir, 10, 11);
    let qp = qp.ready_to_receive(&ep).unwrap().ready_to_send().unwrap();
    wait_ready(&dir, 10, 11);
    mr.memory().write(0, b"12345678").unwrap();
    qp.post(WorkRequest { wr_id: 1, op: Op::Write { remote: region.at(0), imm: None }, buf: mr.buf(0, 8).unwrap() })
        .unwrap();
    let c = next();
    assert!(c.is_ok(), "{c:?}");

    let mut peer = peer;
    peer.kill().unwrap();
    peer.wait().unwrap();
    qp.post(WorkRequest { wr_id: 2, op: Op::Read { remote: region.at(0) }, buf: mr.buf(8, 8).unwrap() }).unwrap();
    qp.post(WorkRequest { wr_id: 3, op: Op::Read { remote: region.at(0) }, buf: mr.buf(8, 8).unwrap() }).unwrap();
    let (c2, c3) = (next(), next());
    assert_eq!((c2.wr_id, c2.status), (2, WcStatus::RetryExceeded));
    assert_eq!((c3.wr_id, c3.status), (3, WcStatus::Flushed));
    assert_eq!(qp.state(), QpState::Error);

    let mut leftover = Vec::new();
    let qp = qp.reset(&mut leftover).unwrap().init().unwrap();
    let dir2 = scratch("dead-again");
    let peer = node(&["serve", "--id", "11", "--peers", "10"], &dir2);
    publish(&dir2, 10, 11, &qp.endpoint(), &mr.remote());
    let (ep, region) = lookup(&dir2, 10, 11);
    let qp = qp.ready_to_receive(&ep).unwrap().ready_to_send().unwrap();
    wait_ready(&dir2, 10, 11);
    qp.post(WorkRequest { wr_id: 4, op: Op::FetchAdd { remote: region.at(8), add: 5 }, buf: mr.buf(16, 8).unwrap() })
        .unwrap();
    let c = next();
    assert!(c.is_ok(), "{c:?}");
    qp.post(WorkRequest {
        wr_id: 5,
        op: Op::Write { remote: region.at(0), imm: Some(u32::MAX) },
        buf: mr.buf(0, 0).unwrap(),
    })
    .unwrap();
    let c = next();
    assert!(c.is_ok(), "{c:?}");
    assert_eq!(finish(peer).trim(), "FINAL 0 5 0");
    std::fs::remove_dir_all(&dir).unwrap();
    std::fs::remove_dir_all(&dir2).unwrap();
}
