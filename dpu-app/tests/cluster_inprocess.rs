//! The in-process cluster on the real clock: a value written through one node's host
//! is read back through every other node's, and its directory slots are invalidated.

use std::sync::Arc;
use std::time::{Duration, Instant};

use prescient_dpu::cluster::config::ClusterConfig;
use prescient_dpu::cluster::run::inprocess::{region_config_for, ClusterClock, InProcess};
use prescient_dpu::fabric::emu::ModelConfig;
use prescient_shim::directory::SlotState;
use prescient_shim::{Completion, ReadSla, Request, Status};

/// A fresh folder for test `name`'s files, holding key 1 (32 bytes of `key_byte`,
/// readable by the owner only).
fn fresh_dir(name: &str, key_byte: u8) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("prescient-inproc-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("keys")).unwrap();
    let key = dir.join("keys/1.key");
    std::fs::write(&key, [key_byte; 32]).unwrap();
    std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    dir
}

fn cluster(name: &str) -> (InProcess, std::path::PathBuf) {
    let dir = fresh_dir(name, 7);
    let mut config = ClusterConfig::in_process(5, 3, 2, &dir);
    config.key_dir = dir.join("keys");
    config.value_bytes_max = 4096;
    config.store_bytes = prescient_dpu::cluster::protocol::node::store_bytes_for_keys(&config, 4096).unwrap();
    config.log_slots = 64;
    config.outcome_entries = 4096;
    config.validate().unwrap();
    let region = region_config_for(&config, 1, 1024);
    let c = InProcess::start(Arc::new(config), ClusterClock::Real, ModelConfig::ideal(), region, &dir.join("regions"))
        .unwrap();
    (c, dir)
}

/// Steps the cluster until `done` or 20 s.
fn until(c: &mut InProcess, mut done: impl FnMut(&mut InProcess) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !done(c) {
        assert!(Instant::now() < deadline, "the cluster did not get there in 20 s");
        c.step();
    }
}

fn wait_one(c: &mut InProcess, node: u8, qp: &mut prescient_shim::QueuePair) -> Completion {
    let mut got = None;
    until(c, |_| {
        let _ = qp.poll(|x| got = Some(x));
        got.is_some()
    });
    let _ = node;
    got.unwrap()
}

#[test]
fn a_write_on_one_node_is_read_back_on_every_other() {
    let (mut c, dir) = cluster("rw");
    until(&mut c, |c| (0..5).all(|i| (0..5).all(|j| i == j || c.node(i).is_some_and(|n| n.peer_up(j)))));
    let value: Vec<u8> = (0..3000u32).map(|i| (i * 7) as u8).collect();
    let host = Arc::clone(c.host(1));
    let mut qp = host.queue_pair(0).unwrap();
    let mut buf = host.take_buffer().unwrap();
    buf.value_mut()[..value.len()].copy_from_slice(&value);
    qp.submit(Request::put(b"user:42", buf, value.len()).user_data(1)).map_err(|(e, _)| e).unwrap();
    let done = wait_one(&mut c, 1, &mut qp);
    assert_eq!(done.status, Status::Ok, "{done:?}");
    let version = done.version;
    assert_ne!(version, 0);
    for reader in [0u8, 2, 3, 4] {
        let host = Arc::clone(c.host(reader));
        // The write turned every other host's slot for the key Invalid.
        let slot = host.slot_state(b"user:42").unwrap();
        assert_ne!(slot.state, SlotState::Valid, "node {reader}'s slot still says Valid: {slot:?}");
        let mut qp = host.queue_pair(0).unwrap();
        let buf = host.take_buffer().unwrap();
        qp.submit(Request::get(b"user:42", buf).user_data(7)).map_err(|(e, _)| e).unwrap();
        let got = wait_one(&mut c, reader, &mut qp);
        assert_eq!(got.status, Status::Ok, "node {reader}: {got:?}");
        assert_eq!(got.version, version);
        let buf = qp.take_value(&got).expect("a GET hands its buffer back");
        assert_eq!(&*buf, &value[..], "node {reader}");
    }
    // A key never written is not found.
    let host = Arc::clone(c.host(3));
    let mut qp = host.queue_pair(0).unwrap();
    qp.submit(Request::get(b"nobody", host.take_buffer().unwrap()).user_data(9)).map_err(|(e, _)| e).unwrap();
    assert_eq!(wait_one(&mut c, 3, &mut qp).status, Status::NotFound);
    drop(c);
    let _ = std::fs::remove_dir_all(dir);
}

/// A cluster on a manual clock with logs of 8 slots and quorum 5: every holder must
/// persist every fragment.
fn tight_cluster(name: &str) -> (InProcess, std::path::PathBuf) {
    let dir = fresh_dir(name, 9);
    let mut config = ClusterConfig::in_process(5, 3, 2, &dir);
    config.key_dir = dir.join("keys");
    config.quorum = 5;
    config.value_bytes_max = 1024;
    config.store_bytes = prescient_dpu::cluster::protocol::node::store_bytes_for_keys(&config, 1024).unwrap();
    config.log_slots = 8;
    config.outcome_entries = 1024;
    config.heartbeat_us = 100;
    config.lease_us = 500;
    config.dead_after_us = 100_000;
    config.write_timeout_us = 200_000;
    config.validate().unwrap();
    let region = region_config_for(&config, 1, 256);
    let clock = ClusterClock::manual(1_000_000);
    let c = InProcess::start(Arc::new(config), clock, ModelConfig::ideal(), region, &dir.join("regions")).unwrap();
    (c, dir)
}

fn submit(c: &InProcess, qp: &mut prescient_shim::QueuePair, keys: std::ops::Range<u32>) {
    let host = c.host(0);
    for k in keys {
        let mut buf = host.take_buffer().unwrap();
        buf.value_mut()[..100].fill(k as u8);
        qp.push(Request::put(format!("k{k}").as_bytes(), buf, 100).user_data(u64::from(k)))
            .map_err(|(e, _)| e)
            .unwrap();
    }
    qp.flush().unwrap();
}

#[test]
fn a_full_log_makes_writes_wait_for_credit_and_a_stalled_holder_fails_them_in_time() {
    let (mut c, dir) = tight_cluster("credit");
    assert!(c.run_until(10_000, 100_000_000, |c| (1..5).all(|j| c.node(0).is_some_and(|n| n.peer_up(j)))));
    let host = Arc::clone(c.host(0));
    let mut qp = host.queue_pair(0).unwrap();
    // Node 4 stalls: it persists nothing, so its log of 8 slots fills up.
    c.pause(4, true);
    submit(&c, &mut qp, 0..20);
    let mut done = Vec::new();
    c.run_until(10_000, 20_000_000, |_| false);
    let _ = qp.poll(|x| done.push(x));
    assert!(done.is_empty(), "quorum 5: nothing commits while a holder stalls ({done:?})");
    assert!(c.node(0).unwrap().log_outstanding(4) <= 8, "never more entries than the log has slots");
    // It comes back: every write completes, none was dropped.
    c.pause(4, false);
    assert!(c.run_until(10_000, 100_000_000, |_| {
        let _ = qp.poll(|x| done.push(x));
        done.len() == 20
    }));
    assert!(done.iter().all(|d| d.status == Status::Ok), "{done:?}");
    // Stalled for longer than the write timeout: the writes fail, with a clear status.
    c.pause(4, true);
    submit(&c, &mut qp, 100..104);
    let mut failed = Vec::new();
    assert!(c.run_until(10_000, 2_000_000_000, |_| {
        let _ = qp.poll(|x| failed.push(x));
        failed.len() == 4
    }));
    assert!(failed.iter().all(|d| d.status == Status::NotDurable), "{failed:?}");
    drop(c);
    let _ = std::fs::remove_dir_all(dir);
}

type Statuses = std::collections::BTreeMap<String, u32>;

/// Submits the next 32 writes from node 0 and runs until all complete, counting their
/// statuses (a batch fails as soon as the holders are known down).
fn batch(c: &mut InProcess, qp: &mut prescient_shim::QueuePair, next: &mut u32, statuses: &mut Statuses) {
    submit(c, qp, *next..*next + 32);
    *next += 32;
    let mut done = 0;
    assert!(c.run_until(10_000, 3_000_000_000, |_| {
        let _ = qp.poll(|x| {
            done += 1;
            *statuses.entry(format!("{:?}", x.status)).or_default() += 1;
        });
        done == 32
    }));
}

/// Aborted writes drain from the outcome table: with two of five holders down every
/// write fails `NotDurable` at once (quorum 4 is out of reach), three times as many as
/// the table has entries; the writer holds a fragment of each, so each entry settles
/// only once the writer's own record has the decision. Before that was recorded, the
/// table filled with them and, once it wrapped, every write failed `Overloaded` for
/// good, even with every node back.
#[test]
fn aborted_writes_settle_and_the_outcome_table_never_wedges() {
    let (mut c, dir) = tight_cluster("wedge");
    assert!(c.run_until(10_000, 100_000_000, |c| (1..5).all(|j| c.node(0).is_some_and(|n| n.peer_up(j)))));
    let host = Arc::clone(c.host(0));
    let mut qp = host.queue_pair(0).unwrap();
    let entries = c.config().outcome_entries as u32;
    c.crash(3);
    c.crash(4);
    assert!(c.run_until(10_000, 2_000_000_000, |c| !c.node(0).unwrap().peer_up(3) && !c.node(0).unwrap().peer_up(4)));
    let mut next = 0u32;
    let mut statuses = Statuses::new();
    while next < 3 * entries {
        batch(&mut c, &mut qp, &mut next, &mut statuses);
    }
    assert_eq!(statuses.get("NotDurable").copied(), Some(3 * entries), "{statuses:?}");
    assert!(
        c.node(0).unwrap().unsettled_writes() < 64,
        "aborted writes must settle: {} unsettled",
        c.node(0).unwrap().unsettled_writes()
    );
    // Both come back: the next writes commit.
    c.restart(3).unwrap();
    c.restart(4).unwrap();
    assert!(c.run_until(10_000, 2_000_000_000, |c| (1..5).all(|j| c.node(0).is_some_and(|n| n.peer_up(j)))));
    statuses.clear();
    for _ in 0..8 {
        batch(&mut c, &mut qp, &mut next, &mut statuses);
    }
    assert_eq!(statuses.get("Ok").copied(), Some(8 * 32), "{statuses:?}");
    drop(c);
    let _ = std::fs::remove_dir_all(dir);
}

/// A cluster whose stores hold 32 records a node (two sets of 16): a few dozen keys fill
/// them.
fn tiny_store_cluster(name: &str) -> (InProcess, std::path::PathBuf) {
    let dir = fresh_dir(name, 3);
    let mut config = ClusterConfig::in_process(5, 3, 2, &dir);
    config.key_dir = dir.join("keys");
    config.value_bytes_max = 1024;
    config.store_bytes = prescient_dpu::cluster::protocol::node::store_bytes_for_keys(&config, 16).unwrap();
    config.log_slots = 64;
    config.outcome_entries = 1024;
    config.validate().unwrap();
    assert_eq!(prescient_dpu::cluster::protocol::node::store_geometry(&config).unwrap().sets(), 2);
    let region = region_config_for(&config, 1, 64);
    let c = InProcess::start(Arc::new(config), ClusterClock::Real, ModelConfig::ideal(), region, &dir.join("regions"))
        .unwrap();
    (c, dir)
}

#[test]
fn a_full_store_refuses_writes_cleanly_and_keeps_every_acknowledged_one() {
    let (mut c, dir) = tiny_store_cluster("store-full");
    until(&mut c, |c| (0..5).all(|i| (0..5).all(|j| i == j || c.node(i).is_some_and(|n| n.peer_up(j)))));
    let host = Arc::clone(c.host(0));
    let mut qp = host.queue_pair(0).unwrap();
    let value = |k: u32| -> Vec<u8> { (0..500u32).map(|i| (i ^ k.wrapping_mul(31)) as u8).collect() };
    // Distinct keys, one at a time, until the stores have refused a few.
    let (mut acked, mut refused) = (Vec::new(), 0);
    for k in 0..60u32 {
        let mut buf = host.take_buffer().unwrap();
        buf.value_mut()[..500].copy_from_slice(&value(k));
        qp.submit(Request::put(format!("full{k}").as_bytes(), buf, 500).user_data(u64::from(k)))
            .map_err(|(e, _)| e)
            .unwrap();
        let done = wait_one(&mut c, 0, &mut qp);
        match done.status {
            Status::Ok => acked.push((k, done.version)),
            // Holders refused the fragment for room: the write never reached its quorum.
            Status::NotDurable => refused += 1,
            other => panic!("key {k}: {other:?} ({done:?})"),
        }
    }
    assert!(refused > 0, "60 keys fit 32 records a node");
    // Near full before the first refusal (32 records, one a key at every node).
    assert!(acked.len() >= 20, "only {} keys fit before the first refusal", acked.len());
    let full: u64 = c.nodes().map(|n| n.stats().store_full).sum();
    assert!(full > 0);
    // Every acknowledged write reads back, from another node, with two nodes stopped.
    c.pause(3, true);
    c.pause(4, true);
    let reader = Arc::clone(c.host(1));
    let mut rq = reader.queue_pair(0).unwrap();
    for &(k, version) in &acked {
        rq.submit(
            Request::get(format!("full{k}").as_bytes(), reader.take_buffer().unwrap())
                .sla(ReadSla::Stale)
                .user_data(u64::from(k)),
        )
        .map_err(|(e, _)| e)
        .unwrap();
        let got = wait_one(&mut c, 1, &mut rq);
        assert_eq!((got.status, got.version), (Status::Ok, version), "key {k}: {got:?}");
        let buf = rq.take_value(&got).unwrap();
        assert_eq!(&*buf, &value(k)[..], "key {k}");
    }
    drop(c);
    let _ = std::fs::remove_dir_all(dir);
}

/// Five storage nodes and a cache-only member (node 5, `role = "cache"`): it holds no
/// fragment of anything written, from a storage node or from itself; its host's
/// directory slot is invalidated by every write; its GETs read the storage nodes; and
/// with it down, a storage node's `Fresh` GET still succeeds with m storage nodes down
/// (m + 1 nodes unreachable, but only m of them store).
#[test]
fn a_cache_only_member_holds_nothing_is_invalidated_and_reads_through() {
    use prescient_dpu::cluster::config::Role;
    let dir = fresh_dir("cache-member", 5);
    let mut config = ClusterConfig::in_process(6, 3, 2, &dir);
    config.key_dir = dir.join("keys");
    config.nodes[5].role = Role::Cache;
    config.value_bytes_max = 4096;
    config.store_bytes = prescient_dpu::cluster::protocol::node::store_bytes_for_keys(&config, 4096).unwrap();
    config.log_slots = 64;
    config.outcome_entries = 4096;
    config.validate().unwrap();
    assert_eq!(config.placement().storage(), &[0, 1, 2, 3, 4]);
    let region = region_config_for(&config, 1, 1024);
    let mut c =
        InProcess::start(Arc::new(config), ClusterClock::Real, ModelConfig::ideal(), region, &dir.join("regions"))
            .unwrap();
    until(&mut c, |c| (0..6).all(|i| (0..6).all(|j| i == j || c.node(i).is_some_and(|n| n.peer_up(j)))));
    let now = || prescient_shim::sys::monotonic_ns();
    until(&mut c, |c| (0..6).all(|i| c.host(i).lease_valid(now())));

    let put = |c: &mut InProcess, node: u8, key: &[u8], fill: u8| {
        let host = Arc::clone(c.host(node));
        let mut qp = host.queue_pair(0).unwrap();
        let mut buf = host.take_buffer().unwrap();
        buf.value_mut()[..2000].fill(fill);
        qp.submit(Request::put(key, buf, 2000).user_data(1)).map_err(|(e, _)| e).unwrap();
        let done = wait_one(c, node, &mut qp);
        assert_eq!(done.status, Status::Ok, "PUT at node {node}: {done:?}");
        done.version
    };
    let get = |c: &mut InProcess, node: u8, key: &[u8], sla: ReadSla| {
        let host = Arc::clone(c.host(node));
        let mut qp = host.queue_pair(0).unwrap();
        let buf = host.take_buffer().unwrap();
        qp.submit(Request::get(key, buf).sla(sla).user_data(2)).map_err(|(e, _)| e).unwrap();
        let got = wait_one(c, node, &mut qp);
        let value = (got.status == Status::Ok).then(|| qp.take_value(&got).expect("a GET's buffer").to_vec());
        (got.status, got.version, value)
    };

    // Twenty keys from storage nodes and twenty from the cache-only member itself.
    let mut written = Vec::new();
    for i in 0..40u32 {
        let writer = if i < 20 { (i % 5) as u8 } else { 5 };
        let key = format!("member:{i}").into_bytes();
        let version = put(&mut c, writer, &key, i as u8);
        written.push((key, version, i as u8));
    }
    let (usage, _) = c.node(5).unwrap().store_usage();
    assert_eq!(usage.live, 0, "the cache-only member holds no fragment");
    let held: u64 = (0..5).map(|i| c.node(i).unwrap().store_usage().0.live).sum();
    assert!(held >= 40 * 4, "every write's fragments went to the storage nodes ({held} records)");
    for (key, version, fill) in &written {
        let (status, got, value) = get(&mut c, 5, key, ReadSla::FRESH_NOW);
        assert_eq!((status, got), (Status::Ok, *version), "the cache-only member reads {key:?} through");
        assert!(value.unwrap()[..2000].iter().all(|b| b == fill));
    }

    // The member's host caches a key (miss, GET, refill); a storage node's write
    // invalidates it.
    let (key, _, _) = &written[3];
    let member = Arc::clone(c.host(5));
    let prescient_shim::ReadCheck::Miss(token) = member.check_read(key, now()) else {
        panic!("nothing cached yet, so the first read misses")
    };
    assert_eq!(get(&mut c, 5, key, ReadSla::FRESH_NOW).0, Status::Ok);
    assert!(member.refill(token), "no write since the token was taken");
    assert_eq!(member.slot_state(key).unwrap().state, SlotState::Valid);
    let newer = put(&mut c, 2, key, 0xee);
    let slot = member.slot_state(key).unwrap();
    assert_ne!(slot.state, SlotState::Valid, "a write must invalidate the cache-only member's slot: {slot:?}");
    assert_eq!(get(&mut c, 5, key, ReadSla::FRESH_NOW).1, newer);

    // The member down and two storage nodes down: three nodes unreachable, but only m =
    // 2 of them store, so a Fresh GET still proves what is committed.
    c.crash(5);
    c.crash(3);
    c.crash(4);
    until(&mut c, |c| {
        !c.node(0).unwrap().peer_up(3) && !c.node(0).unwrap().peer_up(4) && !c.node(0).unwrap().peer_up(5)
    });
    let (key, version, fill) = &written[25];
    let (status, got, value) = get(&mut c, 0, key, ReadSla::FRESH_NOW);
    assert_eq!((status, got), (Status::Ok, *version), "with m storage nodes down a Fresh GET still answers");
    assert!(value.unwrap()[..2000].iter().all(|b| b == fill));
    // And a key never written is proven absent, not Unavailable: the member's missing
    // sets are not ones that could hold its decision.
    assert_eq!(get(&mut c, 0, b"member:never", ReadSla::FRESH_NOW).0, Status::NotFound);
    drop(c);
    let _ = std::fs::remove_dir_all(dir);
}
