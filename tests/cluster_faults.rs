//! The write path's faults, each with real processes: five `prescient-dpu serve
//! --config` processes over the emulated fabric on loopback TCP, each serving a host
//! region this test process creates and writes through.
//!
//! - a follower killed mid-write: writes commit while a quorum remains, and fail
//!   cleanly (`NotDurable`, marks rolled back, never visible) once it does not;
//! - the writer's DPU app killed mid-write: no mark stays Pending past the bound and the
//!   host gets an error, then a restarted DPU app's verdict, for every request;
//! - a follower restarted from its files rejoins with its fragments intact;
//! - tampered fragments are refused (the value is rebuilt without them, or not at
//!   all), and a truncated store file stops the node with an error naming it.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use prescient::ClusterProcs;
use prescient_shim::directory::SlotState;
use prescient_shim::{Completion, Host, QueuePair, Request, ShimError, Status};

const WAIT: Duration = Duration::from_secs(30);

/// One cluster at a time: four clusters of five processes at once on a 2-core machine
/// starve nodes past the membership timeouts, and the tests would then measure the
/// machine, not the faults they inject.
static ONE_CLUSTER: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_cluster() -> std::sync::MutexGuard<'static, ()> {
    ONE_CLUSTER.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn value_of(key: u32, len: usize) -> Vec<u8> {
    (0..len).map(|i| (i as u32).wrapping_mul(31).wrapping_add(key.wrapping_mul(7)) as u8).collect()
}

fn key_of(key: u32) -> Vec<u8> {
    format!("user:{key:06}").into_bytes()
}

/// PUTs `keys` through `qp`, `depth` in flight; calls `between` after each completion
/// (with the count so far). Returns each key's completion.
fn put_all(
    host: &Arc<Host>,
    qp: &mut QueuePair,
    keys: &[u32],
    depth: u32,
    mut between: impl FnMut(usize),
) -> HashMap<u32, Completion> {
    let mut done = HashMap::new();
    let mut next = 0;
    let deadline = Instant::now() + WAIT;
    while done.len() < keys.len() {
        assert!(Instant::now() < deadline, "PUTs did not complete in {WAIT:?}: {} of {}", done.len(), keys.len());
        while next < keys.len() && qp.in_flight() < depth {
            let key = keys[next];
            let mut buf = host.take_buffer().expect("a free buffer");
            let value = value_of(key, 1000 + (key as usize % 3000));
            buf.value_mut()[..value.len()].copy_from_slice(&value);
            qp.push(Request::put(&key_of(key), buf, value.len()).user_data(u64::from(key)))
                .map_err(|(e, _)| e)
                .expect("push");
            next += 1;
        }
        qp.flush().expect("the DPU app responds");
        let mut got = Vec::new();
        match qp.wait(Duration::from_millis(200), |c| got.push(c)) {
            Ok(_) | Err(ShimError::Timeout(_)) => {}
            Err(e) => panic!("waiting for PUTs: {e}"),
        }
        for c in got {
            assert!(done.insert(c.user_data as u32, c).is_none(), "a second completion for key {}", c.user_data);
            between(done.len());
        }
    }
    done
}

/// GETs `key` (Fresh) through `qp`: (status, version, value). `Unavailable` (too few
/// nodes reachable at that moment: on a loaded machine a link can drop and come back)
/// is asked again, as a client would, until `WAIT`.
fn get(host: &Arc<Host>, qp: &mut QueuePair, key: u32) -> (Status, u64, Vec<u8>) {
    let deadline = Instant::now() + WAIT;
    loop {
        let got = get_once(host, qp, key);
        if got.0 != Status::Unavailable || Instant::now() >= deadline {
            return got;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn get_once(host: &Arc<Host>, qp: &mut QueuePair, key: u32) -> (Status, u64, Vec<u8>) {
    let buf = host.take_buffer().expect("a free buffer");
    qp.submit(Request::get(&key_of(key), buf).user_data(u64::from(key))).map_err(|(e, _)| e).expect("GET");
    let mut got = None;
    let deadline = Instant::now() + WAIT;
    while got.is_none() {
        assert!(Instant::now() < deadline, "GET of key {key} did not complete");
        let _ = qp.wait(Duration::from_millis(200), |c| got = Some(c));
    }
    let c = got.unwrap();
    let buf = qp.take_value(&c).expect("a GET hands its buffer back");
    let value = buf.to_vec();
    (c.status, c.version, value)
}

fn connected(c: &ClusterProcs) {
    assert!(c.wait_connected(WAIT), "the cluster did not connect");
}

#[test]
fn a_follower_killed_mid_write_commits_while_a_quorum_remains_and_fails_cleanly_after() {
    let _one = one_cluster();
    let mut c = ClusterProcs::start("follower", 5, 3, 2, 4);
    connected(&c);
    let host = Arc::clone(&c.hosts[0]);
    let mut qp = host.queue_pair(0).unwrap();
    // Kill node 3 after 40 of 200 writes have completed: the rest commit on 4 of 5.
    let keys: Vec<u32> = (0..200).collect();
    let mut killed = false;
    let done = put_all(&host, &mut qp, &keys, 24, |n| {
        if n == 40 && !killed {
            c.kill9(3);
            killed = true;
        }
    });
    let ok = done.values().filter(|d| d.status == Status::Ok).count();
    let not_durable = done.values().filter(|d| d.status == Status::NotDurable).count();
    assert_eq!(
        ok + not_durable,
        200,
        "every write committed or failed cleanly: {:?}",
        done.values().map(|d| d.status).collect::<Vec<_>>()
    );
    assert!(ok >= 150, "the quorum of 4 remained: most writes commit ({ok} of 200)");
    // Every committed value reads back, from another node.
    let reader = Arc::clone(&c.hosts[2]);
    let mut rq = reader.queue_pair(0).unwrap();
    for (key, d) in done.iter().filter(|(_, d)| d.status == Status::Ok) {
        let (status, version, value) = get(&reader, &mut rq, *key);
        assert_eq!((status, version), (Status::Ok, d.version), "key {key}");
        assert_eq!(value, value_of(*key, value.len().max(1)), "key {key}'s value");
    }
    // A second follower down: no quorum is left. Writes fail cleanly and leave nothing.
    c.kill9(4);
    let keys: Vec<u32> = (1000..1020).collect();
    let done = put_all(&host, &mut qp, &keys, 8, |_| {});
    for (key, d) in &done {
        assert_eq!(d.status, Status::NotDurable, "key {key}: {d:?}");
    }
    // Their marks rolled back (none stays Pending), and nothing of them is visible.
    for key in &keys {
        for h in [0usize, 1, 2] {
            assert!(
                prescient::wait_until(WAIT, || c.hosts[h].slot_state(&key_of(*key)).unwrap().state
                    != SlotState::Pending),
                "host {h} keeps key {key} Pending"
            );
        }
        let (status, _, _) = get(&reader, &mut rq, *key);
        assert_eq!(status, Status::NotFound, "a failed write of key {key} is not visible");
    }
}

#[test]
fn the_writers_dpu_app_killed_mid_write_leaves_no_pending_mark_and_fails_its_requests() {
    let _one = one_cluster();
    let mut c = ClusterProcs::start("writer", 5, 3, 2, 4);
    connected(&c);
    let host = Arc::clone(&c.hosts[0]);
    let mut qp = host.queue_pair(0).unwrap();
    // Three times what the DPU app takes in at once (64 writes in flight): the writes
    // complete in waves. A loaded machine may wake the host only after all three, so a
    // last wave goes in once the first completions show, just before the kill: those
    // are in the ring or in flight when it lands.
    let keys: Vec<u32> = (0..256).collect();
    let push = |qp: &mut prescient_shim::QueuePair, keys: &[u32]| {
        for key in keys {
            let mut buf = host.take_buffer().unwrap();
            let value = value_of(*key, 4000);
            buf.value_mut()[..value.len()].copy_from_slice(&value);
            qp.push(Request::put(&key_of(*key), buf, value.len()).user_data(u64::from(*key)))
                .map_err(|(e, _)| e)
                .unwrap();
        }
        qp.flush().unwrap();
    };
    push(&mut qp, &keys[..192]);
    // Kill the writer's DPU app as soon as the first completions show it is mid-stream.
    let mut outcomes: HashMap<u64, Status> = HashMap::new();
    while outcomes.is_empty() {
        qp.wait(WAIT, |c| assert!(outcomes.insert(c.user_data, c.status).is_none())).unwrap();
    }
    // The last wave goes in while the DPU app is frozen; then it runs in ever longer
    // slices, frozen after each, until one leaves it with requests taken and not
    // completed, which is what the kill must find (on an idle machine it can finish a
    // whole wave between two looks).
    let dpu = c.dpu(0).expect("node 0 runs");
    dpu.pause();
    push(&mut qp, &keys[192..]);
    let words = qp.words().clone();
    let mid_request = (0..20_000u32).any(|slice| {
        dpu.resume();
        let until = Instant::now() + Duration::from_micros(u64::from(slice % 200));
        while Instant::now() < until {
            std::hint::spin_loop();
        }
        dpu.pause();
        let (taken, head) = (words.sq_taken().load(Ordering::Acquire), words.sq_head().load(Ordering::Acquire));
        taken != head
    });
    assert!(mid_request, "the writer's DPU app never stopped with requests taken and not completed");
    c.kill9(0);
    let killed_at = Instant::now();
    let err = loop {
        match qp.wait(WAIT, |c| assert!(outcomes.insert(c.user_data, c.status).is_none())) {
            Ok(_) => continue,
            Err(e) => break e,
        }
    };
    assert!(matches!(err, ShimError::DpuNotResponding { .. }), "{err}");
    // No other host keeps a Pending mark of node 0 past the bound (dead_after 500 ms,
    // heartbeats of 1 ms: 2 s is far past it, and far from any timing of the machine).
    for h in 1..5 {
        for key in &keys {
            let ok = prescient::wait_until(Duration::from_secs(2), || {
                let w = c.hosts[h].slot_state(&key_of(*key)).unwrap();
                !(w.state == SlotState::Pending && w.writer == 0)
            });
            assert!(ok, "host {h} keeps node 0's mark on key {key} {:?} after its death", killed_at.elapsed());
        }
    }
    // A restarted DPU app answers every request the dead one did not: exactly once.
    c.spawn(0);
    host.wait_for_dpu(WAIT).expect("the restarted DPU app serves");
    while outcomes.len() < keys.len() {
        qp.wait(WAIT, |c| assert!(outcomes.insert(c.user_data, c.status).is_none(), "duplicate {c:?}")).unwrap();
    }
    let restarted = outcomes.values().filter(|s| **s == Status::DpuRestarted).count();
    // Requests the dead app had taken and not completed come back DpuRestarted.
    assert!(restarted >= 1, "the crash caught requests in flight: {outcomes:?}");
    // The restarted app serves what the ring still held once it reaches a quorum; a
    // write whose links flapped while they came back may still fail, cleanly.
    assert!(
        outcomes.values().all(|s| matches!(s, Status::Ok | Status::DpuRestarted | Status::NotDurable)),
        "{outcomes:?}"
    );
    let failed = outcomes.values().filter(|s| **s == Status::NotDurable).count();
    assert!(failed <= keys.len() / 4, "the restarted DPU app failed {failed} of the writes it took: {outcomes:?}");
    for (key, _) in outcomes.iter().filter(|(_, s)| **s == Status::NotDurable) {
        for h in 0..5 {
            let ok = prescient::wait_until(WAIT, || {
                c.hosts[h].slot_state(&key_of(*key as u32)).unwrap().state != SlotState::Pending
            });
            assert!(ok, "host {h} keeps failed key {key} Pending");
        }
    }
}

#[test]
fn a_follower_restarted_from_its_files_rejoins_with_its_fragments() {
    let _one = one_cluster();
    let mut c = ClusterProcs::start("rejoin", 5, 3, 2, 5);
    connected(&c);
    let host = Arc::clone(&c.hosts[0]);
    let mut qp = host.queue_pair(0).unwrap();
    let keys: Vec<u32> = (0..100).collect();
    let done = put_all(&host, &mut qp, &keys, 16, |_| {});
    assert!(done.values().all(|d| d.status == Status::Ok), "quorum 5: every holder has every fragment");
    // Node 2 crashes and comes back from its files.
    c.kill9(2);
    c.spawn(2);
    connected(&c);
    // With nodes 3 and 4 down, only 0, 1 and 2 are left: k = 3 fragments, so every
    // value needs node 2's, which came back from its store file.
    c.kill9(3);
    c.kill9(4);
    let reader = Arc::clone(&c.hosts[1]);
    let mut rq = reader.queue_pair(0).unwrap();
    for (key, d) in &done {
        let (status, version, value) = get(&reader, &mut rq, *key);
        assert_eq!((status, version), (Status::Ok, d.version), "key {key}");
        assert_eq!(value, value_of(*key, value.len().max(1)));
    }
}

/// Flips a byte inside the fragment payload of every record of the store file.
fn tamper_store(path: &std::path::Path) -> usize {
    let mut bytes = std::fs::read(path).expect("read the store file");
    let mut flipped = 0;
    let mut at = 4096;
    while at + 200 < bytes.len() {
        if &bytes[at..at + 4] == b"PRSR" && bytes[at + 5] != 0 {
            bytes[at + 150] ^= 0x40;
            flipped += 1;
        }
        at += 64;
    }
    std::fs::write(path, bytes).expect("write the store file");
    flipped
}

#[test]
fn tampered_fragments_are_refused_and_a_truncated_store_stops_its_node() {
    let _one = one_cluster();
    let mut c = ClusterProcs::start("tamper", 5, 3, 2, 5);
    connected(&c);
    let host = Arc::clone(&c.hosts[0]);
    let mut qp = host.queue_pair(0).unwrap();
    let keys: Vec<u32> = (0..40).collect();
    let done = put_all(&host, &mut qp, &keys, 16, |_| {});
    assert!(done.values().all(|d| d.status == Status::Ok), "{:?}", done.values().map(|d| d.status).collect::<Vec<_>>());
    // Node 1's fragments are damaged on disk while it is stopped.
    let (ok, _, _) = c.stop(1);
    assert!(ok, "node 1 stops cleanly");
    let flipped = tamper_store(&c.data_dir(1).join("store.prstore"));
    assert!(flipped >= 40, "damaged {flipped} records");
    c.spawn(1);
    connected(&c);
    // With everyone up, every value is rebuilt from the good fragments.
    let reader = Arc::clone(&c.hosts[2]);
    let mut rq = reader.queue_pair(0).unwrap();
    for (key, d) in &done {
        let (status, version, value) = get(&reader, &mut rq, *key);
        assert_eq!((status, version), (Status::Ok, d.version), "key {key}");
        assert_eq!(value, value_of(*key, value.len().max(1)));
    }
    // With two good nodes down, the damaged fragments are all that is left: no value,
    // rather than a wrong one.
    c.kill9(3);
    c.kill9(4);
    for key in keys.iter().take(10) {
        let (status, _, _) = get_once(&reader, &mut rq, *key);
        assert_eq!(status, Status::Unavailable, "key {key} from damaged fragments");
    }
    // A truncated store file: the node refuses to start, naming the file.
    let (_, _, _) = c.stop(2);
    let store = c.data_dir(2).join("store.prstore");
    let len = std::fs::metadata(&store).unwrap().len();
    std::fs::OpenOptions::new().write(true).open(&store).unwrap().set_len(len - 8192).unwrap();
    c.spawn(2);
    let out = c.dpus[2].take().unwrap().wait();
    assert!(!out.status.success(), "a node with a truncated store must not start");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("store.prstore"), "the error names the store file: {stderr}");
}
