//! Sequencer failover with real processes: five `prescient-dpu serve --config`
//! processes with `ordering = "sequencer"` (node 0 sequences, nodes 1 and 2 are its
//! shadows). The sequencer is SIGKILLed while a host has writes in flight: each of
//! those commits (in the old epoch or the new) or fails cleanly, the writes after it
//! commit in the epoch the first shadow claimed, every acknowledged write reads back,
//! and the restarted first sequencer follows the new one.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use prescient::ClusterProcs;
use prescient_dpu::cluster::hlc::HlcFloor;
use prescient_dpu::cluster::sequence::{epoch_of, LeaderWord};
use prescient_shim::{Completion, Host, QueuePair, Request, ShimError, Status};

const WAIT: Duration = Duration::from_secs(30);

/// One cluster at a time: two clusters of five processes at once on a 2-core machine
/// starve nodes past the membership timeouts.
static ONE_CLUSTER: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_cluster() -> std::sync::MutexGuard<'static, ()> {
    ONE_CLUSTER.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

const SEQUENCER: &str = "ordering = \"sequencer\"\nsequencer = 0\nshadows = [1, 2]\nstamp_block = 16\n";

fn value_of(key: u32) -> Vec<u8> {
    (0..600 + key as usize % 900).map(|i| (i as u32).wrapping_mul(13).wrapping_add(key) as u8).collect()
}

fn key_of(key: u32) -> Vec<u8> {
    format!("seq:{key:05}").into_bytes()
}

/// PUTs `keys` through `qp`, `depth` in flight, calling `between` with the count of
/// completions after each; returns every key's completion.
fn put_all(
    host: &Arc<Host>,
    qp: &mut QueuePair,
    keys: std::ops::Range<u32>,
    depth: u32,
    mut between: impl FnMut(usize),
) -> HashMap<u32, Completion> {
    let keys: Vec<u32> = keys.collect();
    let mut done = HashMap::new();
    let mut next = 0;
    let deadline = Instant::now() + WAIT;
    while done.len() < keys.len() {
        assert!(Instant::now() < deadline, "PUTs did not complete in {WAIT:?}: {} of {}", done.len(), keys.len());
        while next < keys.len() && qp.in_flight() < depth {
            let key = keys[next];
            let mut buf = host.take_buffer().expect("a free buffer");
            let value = value_of(key);
            buf.value_mut()[..value.len()].copy_from_slice(&value);
            qp.push(Request::put(&key_of(key), buf, value.len()).user_data(u64::from(key)))
                .map_err(|(e, _)| e)
                .unwrap();
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

/// GETs `key` through `qp`, asking again while too few nodes answer.
fn get(host: &Arc<Host>, qp: &mut QueuePair, key: u32) -> (Status, u64, Vec<u8>) {
    let deadline = Instant::now() + WAIT;
    loop {
        let buf = host.take_buffer().expect("a free buffer");
        qp.submit(Request::get(&key_of(key), buf).user_data(u64::from(key))).map_err(|(e, _)| e).unwrap();
        let mut got = None;
        while got.is_none() {
            assert!(Instant::now() < deadline, "GET of key {key} did not complete");
            let _ = qp.wait(Duration::from_millis(200), |c| got = Some(c));
        }
        let c = got.unwrap();
        let value = qp.take_value(&c).expect("a GET hands its buffer back").to_vec();
        if c.status != Status::Unavailable || Instant::now() >= deadline {
            return (c.status, c.version, value);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The node that sequences `epoch`, from the leader words the nodes persisted.
fn sequencer_of(c: &ClusterProcs, epoch: u32) -> usize {
    let words: Vec<LeaderWord> = (0..5)
        .filter_map(|i| HlcFloor::open(&c.data_dir(i).join("leader-word")).ok())
        .map(|f| LeaderWord::unpack(f.floor()))
        .collect();
    let word =
        words.iter().find(|w| w.epoch == epoch).unwrap_or_else(|| panic!("no node names epoch {epoch}: {words:?}"));
    usize::from(word.sequencer)
}

/// The newest leader word any node persisted.
fn newest_word(c: &ClusterProcs) -> LeaderWord {
    (0..5)
        .filter_map(|i| HlcFloor::open(&c.data_dir(i).join("leader-word")).ok())
        .map(|f| LeaderWord::unpack(f.floor()))
        .max_by_key(|w| w.epoch)
        .expect("leader-word files")
}

#[test]
fn killing_the_sequencer_mid_write_hands_the_order_to_its_shadow() {
    let _one = one_cluster();
    let mut c = ClusterProcs::start_configured("seqfail", 5, 3, 2, 3, SEQUENCER, &[]);
    assert!(c.wait_connected(WAIT), "the cluster did not connect");
    let host = Arc::clone(&c.hosts[3]);
    let mut qp = host.queue_pair(0).unwrap();

    // Node 0 sequencing (epoch 1, or later if its first claim met links still coming up):
    // stamps fetched from it by FETCH_ADD.
    let first = put_all(&host, &mut qp, 0..40, 8, |_| {});
    let old = epoch_of(first[&0].version >> 8);
    for (key, done) in &first {
        assert_eq!(done.status, Status::Ok, "key {key}: {done:?}");
        assert_eq!(epoch_of(done.version >> 8), old, "key {key}: version {:#x}", done.version);
    }

    // Whoever sequences that epoch (node 0, unless a slow start let a shadow claim
    // first, as under TCG) dies with writes in flight.
    let seq = sequencer_of(&c, old);
    let mut killed = None;
    let during = put_all(&host, &mut qp, 40..120, 8, |n| {
        if n >= 10 && killed.is_none() {
            c.kill9(seq);
            killed = Some(Instant::now());
        }
    });
    // Writes committed in the old epoch, in a newer one, and (never) in an older one.
    let mut epochs = [0u32; 3];
    for (key, done) in &during {
        match done.status {
            Status::Ok => epochs[(1 + epoch_of(done.version >> 8)).saturating_sub(old).min(2) as usize] += 1,
            // Stamped by the dead sequencer and cut off with it, or refused once the
            // new epoch was claimed: failed, never visible.
            Status::NotDurable | Status::Unavailable => {}
            other => panic!("key {key}: {other:?} ({done:?})"),
        }
    }
    // Whether writes in flight reach the new epoch depends on the fabric: on the emulated
    // one a killed node stops answering at once, so the writes after the kill wait for
    // the shadow's claim; on Soft-RoCE under TCG the 80 writes can all finish on the old
    // sequencer's counter before the kill lands. Either is allowed; the writes below,
    // submitted after the kill, must be of the new epoch.
    assert_eq!(epochs[0], 0, "no write in an epoch older than the killed sequencer's ({epochs:?})");
    eprintln!(
        "sequencer killed: {} writes committed in its epoch, {} in the next, {} failed cleanly; \
         the last completed {:?} after the kill",
        epochs[1],
        epochs[2],
        during.len() - epochs[1] as usize - epochs[2] as usize,
        killed.map(|k| k.elapsed())
    );
    // Every later write commits in a newer epoch, every stamp once. (The sequencer may
    // roll its epoch over a hole in the order, so later writes may be of later epochs
    // still, of the same sequencer.)
    let after = put_all(&host, &mut qp, 120..160, 8, |_| {});
    let new = epoch_of(after[&120].version >> 8);
    assert!(new > old, "epoch {new} after the kill, {old} before");
    let mut versions = BTreeSet::new();
    for (key, done) in first.iter().chain(&during).chain(&after) {
        if done.status == Status::Ok {
            assert!(versions.insert(done.version >> 8), "key {key}: version {:#x} twice", done.version);
        }
    }
    for (key, done) in &after {
        assert_eq!(done.status, Status::Ok, "key {key}: {done:?}");
        assert!(epoch_of(done.version >> 8) >= new, "key {key}: {done:?} below epoch {new}");
    }

    // Every acknowledged write reads back, from another node.
    let reader = Arc::clone(&c.hosts[4]);
    let mut rq = reader.queue_pair(0).unwrap();
    for (key, done) in first.iter().chain(&during).chain(&after) {
        let (status, version, value) = get(&reader, &mut rq, *key);
        if done.status == Status::Ok {
            assert_eq!((status, version), (Status::Ok, done.version), "key {key}");
            assert_eq!(value, value_of(*key), "key {key}");
        } else {
            assert_eq!(status, Status::NotFound, "key {key}: a failed write is never visible");
        }
    }

    // The killed sequencer, restarted from its files, follows the new sequencer: its
    // writes commit in the new epoch or a later one of the same sequencer (a roll), and
    // it never claims one itself.
    c.spawn(seq);
    assert!(c.wait_connected(WAIT), "node {seq} did not rejoin");
    let host0 = Arc::clone(&c.hosts[seq]);
    let mut q0 = host0.queue_pair(0).unwrap();
    let rejoined = put_all(&host0, &mut q0, 160..176, 4, |_| {});
    for (key, done) in &rejoined {
        assert_eq!(done.status, Status::Ok, "key {key}: {done:?}");
        assert!(epoch_of(done.version >> 8) >= new, "key {key}: {done:?} below epoch {new}");
        versions.insert(done.version >> 8);
    }
    let latest = newest_word(&c);
    assert_ne!(
        usize::from(latest.sequencer),
        seq,
        "the restarted node {seq} claimed {latest}: it deposed its successor"
    );

    // Every node's change feed, followed from this process through the shim as a host
    // would: the acknowledged writes, every one, in version order, the same on every
    // node (the old epoch ends once the restarted node's fate ring is read again).
    feeds_hold(&c, &versions);
}

/// Follows every node's change feed from this process through the shim, as a host
/// would, until each holds every version in `versions` (the acknowledged writes); checks
/// that each is in version order and that all are one order.
fn feeds_hold(c: &ClusterProcs, versions: &BTreeSet<u64>) {
    let deadline = Instant::now() + WAIT;
    let mut feeds: Vec<Vec<prescient_shim::feed::FeedEntry>> = vec![Vec::new(); c.hosts.len()];
    for (i, feed) in feeds.iter_mut().enumerate() {
        let path = c.data_dir(i).join("feed.prfeed");
        let mut reader = loop {
            match prescient_shim::feed::FeedReader::open(&path) {
                Ok(r) => break r,
                Err(e) => assert!(Instant::now() < deadline, "node {i}'s feed: {e}"),
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        let mut out = [prescient_shim::feed::FeedEntry::default(); 64];
        while !versions.iter().all(|v| feed.iter().any(|e| e.version == *v)) {
            let after = feed.last().map_or(0, |e| e.version);
            let got = reader.read(after, &mut out).unwrap_or_else(|e| panic!("node {i}'s feed: {e}"));
            feed.extend_from_slice(&out[..got]);
            if got == 0 {
                let have = feed.iter().filter(|e| versions.contains(&e.version)).count();
                assert!(
                    Instant::now() < deadline,
                    "node {i}'s feed holds {have} of the {} acknowledged writes",
                    versions.len()
                );
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        assert!(feed.windows(2).all(|w| w[0].version < w[1].version), "node {i}'s feed is in version order");
    }
    let shortest = feeds.iter().map(Vec::len).min().unwrap();
    for (i, feed) in feeds.iter().enumerate() {
        assert_eq!(feed[..shortest], feeds[0][..shortest], "node {i}'s feed is the order node 0's is");
    }
}

/// A node killed while the writers' fate rings (64 entries here) wrap several times:
/// restarted, it finds entries it needed overwritten, copies what it missed from a
/// peer's change feed (READs over the fabric: Soft-RoCE in CI's VM), and its feed,
/// followed through the shim, then holds every acknowledged write, before, during and
/// after its absence, in the order every other node's feed does.
#[test]
fn a_node_killed_while_the_fate_rings_wrap_catches_up_from_a_peers_feed() {
    let _one = one_cluster();
    let lines = format!("{SEQUENCER}fate_entries = 64\n");
    let mut c = ClusterProcs::start_configured("seqcatch", 5, 3, 2, 3, &lines, &[]);
    assert!(c.wait_connected(WAIT), "the cluster did not connect");
    let host = Arc::clone(&c.hosts[3]);
    let mut qp = host.queue_pair(0).unwrap();
    let mut versions = BTreeSet::new();
    let mut acknowledged = |done: HashMap<u32, Completion>| {
        for (key, done) in done {
            assert_eq!(done.status, Status::Ok, "key {key}: {done:?}");
            assert!(versions.insert(done.version >> 8), "key {key}: version {:#x} twice", done.version);
        }
    };
    acknowledged(put_all(&host, &mut qp, 0..20, 4, |_| {}));
    c.kill9(4);
    // Each write leaves a Pending entry (and a share of a block and its rest) in node
    // 3's ring: 200 writes wrap its 64 entries at least three times.
    acknowledged(put_all(&host, &mut qp, 20..220, 8, |_| {}));
    c.spawn(4);
    assert!(c.wait_connected(WAIT), "node 4 did not rejoin");
    acknowledged(put_all(&host, &mut qp, 220..240, 4, |_| {}));
    // Node 4's feed holds what it could no longer read from the rings: it copied it.
    let (stdout, stderr) = c.dpu(4).expect("node 4 runs").output();
    assert!(
        (stdout + &stderr).contains("it catches up from a peer's change feed"),
        "node 4 found a ring overwritten: {stderr}"
    );
    feeds_hold(&c, &versions);
}
