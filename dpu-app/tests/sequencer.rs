//! `ordering = "sequencer"` in the in-process cluster on a manual clock: every write's
//! version comes from the sequencer's counter (FETCH_ADD), versions stay unique and only
//! move forward per key, a shadow takes over when the sequencer crashes or is cut off,
//! and a deposed sequencer's writes never commit.

use std::collections::BTreeSet;
use std::sync::Arc;

use prescient_dpu::cluster::config::{ClusterConfig, Ordering, SequencerConfig};
use prescient_dpu::cluster::format::fates::FateKind;
use prescient_dpu::cluster::format::feed::{FeedEntry, FeedError};
use prescient_dpu::cluster::format::ledger::LedgerState;
use prescient_dpu::cluster::run::inprocess::{region_config_for, ClusterClock, InProcess};
use prescient_dpu::cluster::sequence::{epoch_of, LeaderWord};
use prescient_dpu::fabric::emu::ModelConfig;
use prescient_shim::{Completion, QueuePair, Request, Status};

const TICK_NS: u64 = 20_000;
const SECOND_NS: u64 = 1_000_000_000;

/// Five nodes, RS(3, 2), quorum 3 (two nodes may be down), sequencer 0, shadows 1 and 2.
fn cluster(name: &str, stamp_block: u32) -> (InProcess, std::path::PathBuf) {
    cluster_with(name, stamp_block, |_| {})
}

/// [`cluster`] with `change` made to its configuration first.
fn cluster_with(
    name: &str,
    stamp_block: u32,
    change: impl FnOnce(&mut ClusterConfig),
) -> (InProcess, std::path::PathBuf) {
    let dir = std::env::temp_dir().join(format!("prescient-seq-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("keys")).unwrap();
    let key = dir.join("keys/1.key");
    std::fs::write(&key, [9u8; 32]).unwrap();
    std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let mut config = ClusterConfig::in_process(5, 3, 2, &dir);
    config.quorum = 3;
    config.key_dir = dir.join("keys");
    config.value_bytes_max = 512;
    config.store_bytes = prescient_dpu::cluster::protocol::node::store_bytes_for_keys(&config, 1024).unwrap();
    config.log_slots = 64;
    config.outcome_entries = 1024;
    config.predictive = false;
    config.heartbeat_us = 200;
    config.lease_us = 2_000;
    config.dead_after_us = 4_000;
    config.write_timeout_us = 200_000;
    config.ordering =
        Ordering::Sequencer(SequencerConfig { sequencer: 0, shadows: vec![1, 2], stamp_block, fence_after_us: 0 });
    change(&mut config);
    config.validate().unwrap();
    let region = region_config_for(&config, 2, 256);
    let c = InProcess::start(Arc::new(config), ClusterClock::manual(SECOND_NS), ModelConfig::ideal(), region, &dir)
        .unwrap();
    (c, dir)
}

/// Every running node knows `word`, and exactly its sequencer sequences.
fn settled_on(c: &InProcess, word: LeaderWord) -> bool {
    c.nodes().all(|n| n.sequencer_state() == Some((word, n.id() == word.sequencer)))
}

fn run(c: &mut InProcess, what: &str, limit_ns: u64, done: impl FnMut(&mut InProcess) -> bool) {
    assert!(c.run_until(TICK_NS, limit_ns, done), "{what}: not within {} ms of cluster time", limit_ns / 1_000_000);
}

/// Runs until node 0, the configured sequencer, has claimed epoch 1 and every node
/// knows it; returns that word.
fn claim_epoch_1(c: &mut InProcess) -> LeaderWord {
    let first = LeaderWord { epoch: 1, sequencer: 0 };
    run(c, "node 0 claims epoch 1", SECOND_NS, |c| settled_on(c, first));
    first
}

/// PUTs `value` to `key` through node `node`'s host and runs the cluster until it
/// completes.
fn put(c: &mut InProcess, node: u8, key: &[u8], value: &[u8]) -> Completion {
    let host = Arc::clone(c.host(node));
    let mut qp = host.queue_pair(0).unwrap();
    let mut buf = host.take_buffer().unwrap();
    buf.value_mut()[..value.len()].copy_from_slice(value);
    qp.submit(Request::put(key, buf, value.len()).user_data(1)).map_err(|(e, _)| e).unwrap();
    let mut got = None;
    run(c, "a PUT", SECOND_NS, |_| {
        let _ = qp.poll(|x| got = Some(x));
        got.is_some()
    });
    got.unwrap()
}

/// Runs until every running node's order has released past every version in
/// `committed` (the versions, without the writer byte, of writes that completed Ok),
/// then checks each node's change feed: the same writes in the same order, and every
/// committed one there (the test's writes all complete, so nothing else is).
fn feeds_hold(c: &mut InProcess, committed: &BTreeSet<u64>) {
    let top = *committed.last().unwrap();
    let released = c.run_until(TICK_NS, SECOND_NS, |c| c.nodes().all(|n| n.order_cursor().unwrap() > top));
    let states: Vec<_> = c.nodes().map(|n| (n.id(), n.order_cursor(), n.order_released(), n.apply_stats())).collect();
    assert!(released, "every node's order releases past {top:#x}: {states:?}");
    for n in c.nodes() {
        let mut out = vec![FeedEntry::default(); 1024];
        let got = n.read_feed(0, &mut out).unwrap();
        let versions: Vec<u64> = out[..got].iter().map(|e| e.version).filter(|&v| v <= top).collect();
        let want: Vec<u64> = committed.iter().copied().collect();
        assert_eq!(versions, want, "node {}'s feed", n.id());
        assert_eq!(n.apply_stats().unwrap().conflicts, 0);
    }
}

/// GETs `key` through node `node`'s host: its status, version and value.
fn get(c: &mut InProcess, node: u8, key: &[u8]) -> (Status, u64, Vec<u8>) {
    let host = Arc::clone(c.host(node));
    let mut qp = host.queue_pair(0).unwrap();
    let buf = host.take_buffer().unwrap();
    qp.submit(Request::get(key, buf).user_data(2)).map_err(|(e, _)| e).unwrap();
    let mut got = None;
    run(c, "a GET", SECOND_NS, |_| {
        let _ = qp.poll(|x| got = Some(x));
        got.is_some()
    });
    let got = got.unwrap();
    let value = qp.take_value(&got).map(|b| b.to_vec()).unwrap_or_default();
    (got.status, got.version, value)
}

#[test]
fn every_write_is_stamped_by_the_sequencer_once_and_per_key_versions_move_forward() {
    let (mut c, dir) = cluster("stamps", 4);
    claim_epoch_1(&mut c);
    let mut seen = BTreeSet::new();
    let mut last_of_key = [0u64; 3];
    for round in 0..12u32 {
        for node in 0..5u8 {
            let k = (round as usize + node as usize) % 3;
            let key = format!("key-{k}");
            let value = format!("{round}-{node}");
            let done = put(&mut c, node, key.as_bytes(), value.as_bytes());
            assert_eq!(done.status, Status::Ok, "round {round} node {node}: {done:?}");
            let version = done.version >> 8;
            assert_eq!(epoch_of(version), 1, "round {round} node {node}: version {version:#x}");
            assert!(seen.insert(version), "version {version:#x} issued twice");
            assert!(version > last_of_key[k], "{key}: version {version:#x} after {:#x}", last_of_key[k]);
            last_of_key[k] = version;
        }
    }
    for (k, &version) in last_of_key.iter().enumerate() {
        let (status, got, _) = get(&mut c, 4, format!("key-{k}").as_bytes());
        assert_eq!((status, got >> 8), (Status::Ok, version), "key-{k}");
    }
    let fetched: u64 = c.nodes().filter_map(|n| n.sequencer_stats()).map(|s| s.fetches).sum();
    let stamps: u64 = c.nodes().filter_map(|n| n.sequencer_stats()).map(|s| s.stamps).sum();
    assert_eq!(stamps, 60, "one stamp per write");
    assert!(fetched > 0, "the writers other than the sequencer fetched blocks by FETCH_ADD");
    // Blocks of 4 left unused rests (holes): the order releases past them as no-ops.
    feeds_hold(&mut c, &seen);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_shadow_takes_over_a_crashed_sequencer_and_the_restarted_one_follows() {
    let (mut c, dir) = cluster("crash", 8);
    run(&mut c, "node 0 claims epoch 1", SECOND_NS, |c| settled_on(c, LeaderWord { epoch: 1, sequencer: 0 }));
    let before = put(&mut c, 3, b"k", b"before").version >> 8;
    c.crash(0);
    let crashed_at = c.now().mono_ns;
    let second = LeaderWord { epoch: 2, sequencer: 1 };
    run(&mut c, "shadow 1 claims epoch 2", SECOND_NS, |c| settled_on(c, second));
    // dead_after (4 ms) of silence, then one round of CASes.
    let took_ns = c.now().mono_ns - crashed_at;
    assert!(took_ns < 10_000_000, "failover took {took_ns} ns of cluster time");
    let after = put(&mut c, 3, b"k", b"after");
    assert_eq!(after.status, Status::Ok, "{after:?}");
    assert_eq!(epoch_of(after.version >> 8), 2);
    assert!(after.version >> 8 > before, "the new epoch's stamps order after every stamp of the old one");
    // The restarted first sequencer remembers nothing of its counter: it follows.
    c.restart(0).unwrap();
    run(&mut c, "node 0 rejoins epoch 2", SECOND_NS, |c| settled_on(c, second) && c.node(0).unwrap().peer_up(1));
    let from_zero = put(&mut c, 0, b"k", b"from zero");
    assert_eq!(from_zero.status, Status::Ok, "{from_zero:?}");
    assert_eq!(epoch_of(from_zero.version >> 8), 2);
    assert!(from_zero.version > after.version);
    let (status, version, value) = get(&mut c, 2, b"k");
    assert_eq!((status, version, &value[..]), (Status::Ok, from_zero.version, &b"from zero"[..]));
    // Both shadows down at once: the second shadow waits for the first, then claims.
    c.crash(1);
    c.crash(0);
    run(&mut c, "shadow 2 claims epoch 3", SECOND_NS, |c| settled_on(c, LeaderWord { epoch: 3, sequencer: 2 }));
    let third = put(&mut c, 4, b"k", b"third");
    assert_eq!((third.status, epoch_of(third.version >> 8)), (Status::Ok, 3), "{third:?}");
    // Epoch 2 ends only once every node's fate ring is read past it: the order waits
    // for nodes 0 and 1, and the restarted ones catch up from their own files.
    c.restart(0).unwrap();
    c.restart(1).unwrap();
    let committed = [before, after.version >> 8, from_zero.version >> 8, third.version >> 8].into_iter().collect();
    feeds_hold(&mut c, &committed);
    let _ = std::fs::remove_dir_all(dir);
}

/// Node 0 sequences epoch 1 and commits "old" to `key`; then it stalls and is cut off
/// from the shadows, which see it silent and elect shadow 1 with nodes 3 and 4 (whose
/// links to node 0 stay up). Returns the cluster, its folder and epoch 1's word.
fn stall_the_sequencer(name: &str, key: &[u8]) -> (InProcess, std::path::PathBuf, LeaderWord) {
    let (mut c, dir) = cluster(name, 2);
    let first = claim_epoch_1(&mut c);
    assert_eq!(put(&mut c, 0, key, b"old").status, Status::Ok);
    // A write completes before its marks move to the committed version, and the next
    // write of its key waits for that: let it finish first.
    run(&mut c, "node 0's write leaves its table", SECOND_NS, |c| c.node(0).unwrap().in_flight() == 0);
    c.pause(0, true);
    c.partition(0, 1);
    c.partition(0, 2);
    (c, dir, first)
}

/// After [`stall_the_sequencer`]: nodes 3 and 4 stall just before shadow 1's claim is
/// due (dead_after is 4 ms), so their NICs take its CAS but their rounds never see it;
/// runs until it has landed at both.
fn stall_3_and_4_until_shadow_1s_claim_lands(c: &mut InProcess) {
    let paused_at = c.now().mono_ns;
    run(c, "3 ms pass", SECOND_NS, |c| c.now().mono_ns >= paused_at + 3_000_000);
    c.pause(3, true);
    c.pause(4, true);
    run(c, "shadow 1's claim lands at nodes 3 and 4", SECOND_NS, |c| {
        [3u8, 4].iter().all(|&j| c.node(j).unwrap().leader_word_in_block().unwrap().epoch >= 2)
    });
}

#[test]
fn a_deposed_sequencer_that_has_not_heard_of_the_new_epoch_commits_nothing_of_its_own() {
    let (mut c, dir, first) = stall_the_sequencer("deposed", b"p");
    let second = LeaderWord { epoch: 2, sequencer: 1 };
    run(&mut c, "shadow 1 claims epoch 2 without node 0", SECOND_NS, |c| {
        c.nodes().filter(|n| n.id() != 0).all(|n| n.sequencer_state() == Some((second, n.id() == 1)))
    });
    assert_eq!(c.node(0).unwrap().sequencer_state(), Some((first, true)));
    // Node 0 comes back and takes a write before it has READ anyone's heartbeat: it
    // stamps it in its deposed epoch, and nodes 3 and 4 refuse the fragments.
    let host = Arc::clone(c.host(0));
    let mut qp = host.queue_pair(1).unwrap();
    let mut buf = host.take_buffer().unwrap();
    buf.value_mut()[..5].copy_from_slice(b"stale");
    qp.submit(Request::put(b"p", buf, 5).user_data(9)).map_err(|(e, _)| e).unwrap();
    c.pause(0, false);
    let mut got = None;
    run(&mut c, "node 0's write ends", SECOND_NS, |_| {
        let _ = qp.poll(|x| got = Some(x));
        got.is_some()
    });
    let got = got.unwrap();
    // Its rollback reached nodes 3 and 4, but for all node 0 knows nodes 1 and 2, cut
    // off, hold the fragment: two others, which with node 0 itself make a quorum of 3,
    // so were node 0 gone for good its holders would take the write for committed
    // (`holders_rule.rs`). Its stamp stays Pending, and the host is told the outcome
    // is unknown, not that the write failed.
    assert_eq!(got.status, Status::Unavailable, "a write of a deposed epoch, half rolled back: {got:?}");
    assert_eq!(pending_fates(&c, 0).len(), 1, "recorded Aborted with two holders unheard");
    let refused: u64 = [3u8, 4].iter().map(|&j| c.node(j).unwrap().stats().deposed_refused).sum();
    assert!(refused >= 2, "nodes 3 and 4 refused the deposed epoch's fragments ({refused})");
    // Node 0 learned of epoch 2 (and, unable to hear node 1's heartbeat, may since
    // have claimed later epochs through nodes 3 and 4, with node 1 claiming back: an
    // extra failover each time: dpu-app/src/cluster/README.md, "Not built").
    assert!(c.node(0).unwrap().sequencer_stats().unwrap().deposed >= 1, "node 0 learned of epoch 2");
    c.heal(0, 1);
    c.heal(0, 2);
    let now = |c: &InProcess| c.node(1).unwrap().sequencer_state().unwrap().0;
    run(&mut c, "node 0 follows the sequencer", SECOND_NS, |c| settled_on(c, now(c)) && c.node(0).unwrap().peer_up(1));
    // The resync takes the rollback to nodes 1 and 2: the stamp is recorded Aborted.
    run(&mut c, "node 0 records its deposed stamp Aborted", SECOND_NS, |c| pending_fates(c, 0).is_empty());
    let (status, _, value) = get(&mut c, 3, b"p");
    assert_eq!((status, &value[..]), (Status::Ok, &b"old"[..]), "the deposed write is never visible");
    let fresh = put(&mut c, 0, b"p", b"new");
    assert_eq!(fresh.status, Status::Ok, "{fresh:?}");
    assert!(epoch_of(fresh.version >> 8) >= second.epoch, "{fresh:?}");
    let _ = std::fs::remove_dir_all(dir);
}

/// A claimant's CAS into a node's leader word binds that node from the moment it
/// lands (the claim counts it once the node persisted it: see the power-loss test
/// below). Nodes 3 and 4 crash after the CAS landed and before their next round
/// noticed it, so their `leader-word` files still say epoch 1; restarted, cut off from
/// the nodes that know epoch 2, they must still hold epoch 2 (the control block is
/// file-backed and carries the word through a process crash). With an anonymous block
/// they came back in epoch 1, and with the deposed sequencer they made a quorum for its
/// writes.
#[test]
fn nodes_restarted_after_voting_in_a_claim_they_never_noticed_still_refuse_the_deposed_epoch() {
    let (mut c, dir, first) = stall_the_sequencer("voted", b"v");
    // Nodes 3 and 4 never see shadow 1's CAS; they crash then.
    stall_3_and_4_until_shadow_1s_claim_lands(&mut c);
    for j in [3u8, 4] {
        assert_eq!(c.node(j).unwrap().sequencer_state().unwrap().0, first, "node {j} stalled, so it never noticed");
        c.crash(j);
        c.pause(j, false);
    }
    for j in [3u8, 4] {
        c.partition(j, 1);
        c.partition(j, 2);
        c.restart(j).unwrap();
        let (word, _) = c.node(j).unwrap().sequencer_state().unwrap();
        assert!(word.epoch >= 2, "node {j} restarted with {word}: it forgot the epoch it voted for");
        assert_eq!(c.node(j).unwrap().leader_word_in_block(), Some(word));
    }
    // Holders refuse by the word in their block (the deposed-sequencer test above shows
    // that refusal): the restarted voters refuse epoch 1 from their first round on.
    c.pause(0, false);
    for (a, b) in [(0, 1), (0, 2), (3, 1), (3, 2), (4, 1), (4, 2)] {
        c.heal(a, b);
    }
    run(&mut c, "the cluster settles on one sequencer of epoch 2 or later", SECOND_NS, |c| {
        let Some((word, _)) = c.node(1).unwrap().sequencer_state() else { return false };
        word.epoch >= 2 && settled_on(c, word) && c.node(0).unwrap().peer_up(1)
    });
    let (status, _, value) = get(&mut c, 2, b"v");
    assert_eq!((status, &value[..]), (Status::Ok, &b"old"[..]));
    let fresh = put(&mut c, 0, b"v", b"new");
    assert!(fresh.status == Status::Ok && epoch_of(fresh.version >> 8) >= 2, "{fresh:?}");
    let _ = std::fs::remove_dir_all(dir);
}

/// A claimant's CAS lands in a node's file-backed control block, which a power loss
/// forgets until the node's next poll persists the word with fsync: a vote counts only
/// once the node publishes that it persisted it. Here shadow 1 claims epoch 2 with
/// nodes 3 and 4, stalled so they never notice (node 2 is cut off from all three);
/// both lose power and come back in epoch 1, and shadow 2 claims epoch 2 through them.
/// When a landed CAS counted at once, shadow 1 had won epoch 2 and shadow 2 won it
/// again: two sequencers of one epoch.
#[test]
fn a_vote_a_power_loss_forgot_never_counted_for_a_claim() {
    let (mut c, dir, first) = stall_the_sequencer("power", b"w");
    for (a, b) in [(1, 2), (2, 3), (2, 4)] {
        c.partition(a, b);
    }
    stall_3_and_4_until_shadow_1s_claim_lands(&mut c);
    // Let shadow 1's claim run past its wait for their persisted words.
    let landed_at = c.now().mono_ns;
    // Every (epoch, node) seen sequencing.
    fn watch(c: &InProcess, leaders: &mut Vec<(u32, u8)>) {
        for n in c.nodes() {
            if let Some((word, true)) = n.sequencer_state() {
                if !leaders.contains(&(word.epoch, n.id())) {
                    leaders.push((word.epoch, n.id()));
                }
            }
        }
    }
    let mut leaders: Vec<(u32, u8)> = Vec::new();
    run(&mut c, "10 ms pass", SECOND_NS, |c| {
        watch(c, &mut leaders);
        c.now().mono_ns >= landed_at + 10_000_000
    });
    for j in [3u8, 4] {
        assert_eq!(c.node(j).unwrap().sequencer_state().unwrap().0, first, "node {j} stalled, so it never noticed");
        c.lose_power(j).unwrap();
        c.pause(j, false);
    }
    for (a, b) in [(1, 3), (1, 4)] {
        c.partition(a, b);
    }
    for (a, b) in [(2, 3), (2, 4)] {
        c.heal(a, b);
    }
    for j in [3u8, 4] {
        c.restart(j).unwrap();
        let (word, _) = c.node(j).unwrap().sequencer_state().unwrap();
        assert_eq!(word, first, "node {j} came back with what it persisted");
    }
    run(&mut c, "shadow 2 sequences an epoch with nodes 3 and 4", SECOND_NS, |c| {
        watch(c, &mut leaders);
        leaders.iter().any(|&(_, j)| j == 2)
    });
    let mut epochs: Vec<u32> = leaders.iter().map(|&(e, _)| e).collect();
    epochs.sort_unstable();
    epochs.dedup();
    assert_eq!(epochs.len(), leaders.len(), "two nodes sequenced one epoch: {leaders:?}");
    let _ = std::fs::remove_dir_all(dir);
}

/// Shadows 1 and 2 claim epoch 2 in the same round (both stalled past their waits for
/// the crashed sequencer): each CAS lands first in its own block, so each holds a word
/// of epoch 2 naming itself, and one wins the majority. The loser, and every node that
/// voted for it, follows the winner: without that, the loser believed the word in its
/// own block, found itself named without a counter, and claimed epoch 3 a dead_after
/// later, deposing the winner for nothing.
#[test]
fn a_claimant_that_lost_a_competing_claim_of_its_epoch_follows_the_winner() {
    let (mut c, dir) = cluster("competing", 2);
    claim_epoch_1(&mut c);
    assert_eq!(put(&mut c, 0, b"c", b"old").status, Status::Ok);
    c.pause(1, true);
    c.pause(2, true);
    c.crash(0);
    // Both shadows' waits (4 and 6 ms) pass while they stall; then they poll in one step.
    let crashed_at = c.now().mono_ns;
    run(&mut c, "8 ms pass", SECOND_NS, |c| c.now().mono_ns >= crashed_at + 8_000_000);
    // Shadow 2's CASes cannot reach nodes 3 and 4 (cut for the claim only), so shadow
    // 1 wins them and the race is decided, not a split vote; nor can the shadows reach
    // each other, so each claims in its own block before the other's CAS can land
    // there (whichever polls first in a round would otherwise take the other's vote).
    c.partition(2, 3);
    c.partition(2, 4);
    c.partition(1, 2);
    c.pause(1, false);
    c.pause(2, false);
    run(&mut c, "both shadows claim epoch 2", SECOND_NS, |c| {
        [1u8, 2]
            .iter()
            .all(|&j| c.node(j).unwrap().leader_word_in_block() == Some(LeaderWord { epoch: 2, sequencer: j }))
    });
    let won = |c: &InProcess| -> Vec<u8> {
        c.nodes().filter(|n| n.sequencer_stats().unwrap().claims_won > 0).map(|n| n.id()).collect()
    };
    run(&mut c, "shadow 1 wins", SECOND_NS, |c| !won(c).is_empty());
    assert_eq!(won(&c), vec![1]);
    run(&mut c, "shadow 2's claim ends", SECOND_NS, |c| {
        c.node(2).unwrap().sequencer_stats().unwrap().claims_failed > 0
    });
    c.heal(2, 3);
    c.heal(2, 4);
    c.heal(1, 2);
    let second = LeaderWord { epoch: 2, sequencer: 1 };
    run(&mut c, "every node follows the winner", SECOND_NS, |c| settled_on(c, second));
    assert_eq!(
        c.node(2).unwrap().leader_word_in_block(),
        Some(LeaderWord { epoch: 2, sequencer: 2 }),
        "its own word stays in its block"
    );
    // Ten dead_afters with writes: nobody claims again.
    let writes = |c: &mut InProcess| {
        let from = c.now().mono_ns;
        let mut i = 0u8;
        while c.now().mono_ns < from + 40_000_000 {
            let done = put(c, 3 + i % 2, b"c", &[b'a' + i % 26]);
            assert_eq!((done.status, epoch_of(done.version >> 8)), (Status::Ok, 2), "write {i}: {done:?}");
            i = i.wrapping_add(1);
        }
    };
    writes(&mut c);
    assert!(settled_on(&c, second), "the cluster left {second}");
    assert_eq!(won(&c), vec![1], "one claim won");
    assert_eq!(c.node(2).unwrap().sequencer_stats().unwrap().claims_failed, 1, "shadow 2 lost once");
    // Restarted, shadow 2 starts from the word in its block, which names it: it must
    // learn from shadow 1's heartbeat block (its counter is of epoch 2) who won.
    c.crash(2);
    c.restart(2).unwrap();
    assert_eq!(c.node(2).unwrap().sequencer_state(), Some((LeaderWord { epoch: 2, sequencer: 2 }, false)));
    run(&mut c, "the restarted loser follows the winner", SECOND_NS, |c| settled_on(c, second));
    writes(&mut c);
    assert!(settled_on(&c, second), "the cluster left {second} after the loser's restart");
    assert_eq!(c.node(1).unwrap().sequencer_stats().unwrap().deposed, 0, "shadow 1 was never deposed");
    let _ = std::fs::remove_dir_all(dir);
}

/// Takes node 4 down after the first write, and makes 30 more (through nodes 1 and 2)
/// while it is down: each write leaves a Block and a Pending entry and a dropped rest,
/// so 16-entry fate rings wrap several times. Returns the committed versions (without
/// the writer byte), the first one first.
fn writes_while_node_4_is_down(c: &mut InProcess) -> BTreeSet<u64> {
    claim_epoch_1(c);
    let mut committed = BTreeSet::new();
    let v = put(c, 1, b"a", b"before").version >> 8;
    committed.insert(v);
    run(c, "node 4 releases the first write", SECOND_NS, |c| c.node(4).unwrap().order_cursor().unwrap() > v);
    c.crash(4);
    for i in 0..30u8 {
        let done = put(c, 1 + i % 2, b"a", &[b'a' + i % 26]);
        assert_eq!(done.status, Status::Ok, "write {i}: {done:?}");
        committed.insert(done.version >> 8);
    }
    committed
}

/// Node `j`'s change feed after version `after`, as versions.
fn feed_after(c: &InProcess, j: u8, after: u64) -> Result<Vec<u64>, FeedError> {
    let mut out = vec![FeedEntry::default(); 256];
    let got = c.node(j).unwrap().read_feed(after, &mut out)?;
    Ok(out[..got].iter().map(|e| e.version).collect())
}

/// A node down while the writers' fate rings wrap past what it had read: restarted, it
/// finds the entries it needed overwritten, copies the writes it missed from a peer's
/// change feed (which still holds them), and its order goes on from the peer's cursor:
/// its feed holds every committed write in order, the ones before, during and after its
/// absence, like every other node's.
#[test]
fn a_node_that_fell_a_whole_fate_ring_behind_catches_up_from_a_peers_feed() {
    let (mut c, dir) = cluster_with("behind", 2, |config| config.fate_entries = 16);
    let mut committed = writes_while_node_4_is_down(&mut c);
    c.restart(4).unwrap();
    run(&mut c, "node 4 catches up", SECOND_NS, |c| c.node(4).unwrap().apply_stats().unwrap().catch_ups > 0);
    let stats = c.node(4).unwrap().apply_stats().unwrap();
    assert!(stats.lost > 0 && stats.copied > 0 && stats.feed_gaps == 0, "{stats:?}");
    // Writes after the catch-up reach its feed through the rings again.
    for i in 0..10u8 {
        let done = put(&mut c, i % 5, b"b", &[i]);
        assert_eq!(done.status, Status::Ok, "write {i} after: {done:?}");
        committed.insert(done.version >> 8);
    }
    feeds_hold(&mut c, &committed);
    let stats = c.node(4).unwrap().apply_stats().unwrap();
    assert!(stats.catch_ups >= 1 && (stats.feed_gaps, stats.conflicts) == (0, 0), "{stats:?}");
    let _ = std::fs::remove_dir_all(dir);
}

/// As above, but every peer's change feed (8 entries) has wrapped past what node 4
/// misses too: its feed marks those versions missing, so a host following it from
/// before is told its cursor is too old (never handed a feed with a gap), and from the
/// mark on it holds every later write, like every other node's.
#[test]
fn a_node_whose_missing_writes_left_every_peers_feed_marks_them_missing() {
    let (mut c, dir) = cluster_with("behind-gap", 2, |config| {
        config.fate_entries = 16;
        config.feed_entries = 8;
    });
    let before = writes_while_node_4_is_down(&mut c);
    c.restart(4).unwrap();
    run(&mut c, "node 4 gives up copying", SECOND_NS, |c| c.node(4).unwrap().apply_stats().unwrap().catch_ups > 0);
    let stats = c.node(4).unwrap().apply_stats().unwrap();
    assert_eq!((stats.feed_gaps, stats.copied), (1, 0), "{stats:?}");
    // (The mark is the peer's cursor then, which may not have passed all 30 writes yet.)
    match feed_after(&c, 4, *before.first().unwrap()) {
        Err(FeedError::CursorTooOld { dropped, .. }) => assert!(dropped > *before.first().unwrap(), "{dropped:#x}"),
        other => panic!("a host at the first write is told its cursor is too old: {other:?}"),
    }
    let mut after = BTreeSet::new();
    for i in 0..6u8 {
        let done = put(&mut c, i % 5, b"b", &[i]);
        assert_eq!(done.status, Status::Ok, "write {i} after: {done:?}");
        after.insert(done.version >> 8);
    }
    let top = *after.last().unwrap();
    run(&mut c, "every order releases the later writes", SECOND_NS, |c| {
        c.nodes().all(|n| n.order_cursor().unwrap() > top)
    });
    // Every feed after the newest mark (node 4's, or an 8-entry feed's own wrap) is the
    // same, and ends with the later writes.
    let from = c.nodes().map(|n| n.feed_dropped()).max().unwrap();
    let tail = feed_after(&c, 0, from).unwrap();
    assert!(
        tail.ends_with(&after.iter().copied().collect::<Vec<_>>()),
        "{tail:x?} {after:x?} {from:#x} {:x?}",
        c.nodes().map(|n| n.feed_dropped()).collect::<Vec<_>>()
    );
    for j in 1..5u8 {
        assert_eq!(feed_after(&c, j, from).unwrap(), tail, "node {j}'s feed after {from:#x}");
    }
    assert_eq!(c.node(4).unwrap().apply_stats().unwrap().conflicts, 0);
    let _ = std::fs::remove_dir_all(dir);
}

/// A node that goes down holding a stamp (its write taken, not decided) holds every
/// node's order at that stamp, and the order says so: while node 4 is only stalled,
/// each node's stall names node 4 as the stamp's holder with every ring read; once it
/// is down, also as the ring it cannot read, with how long the hole has been open,
/// and a warning past a second. Node 4's restart decides the write, and every feed
/// goes on.
#[test]
fn a_node_down_holding_a_stamp_is_named_as_what_the_order_waits_for() {
    // No fence within the test (see the next test for one): the order waits.
    let (mut c, dir) = cluster_with("stall", 4, never_fence);
    claim_epoch_1(&mut c);
    let mut committed = BTreeSet::new();
    committed.insert(put(&mut c, 1, b"a", b"before").version >> 8);
    // Node 4 takes a stamp for a write and goes down before it decides.
    let _qp = node_4_stamps_a_write(&mut c);
    // Stalled first, its ring still answers READs: the others see whose stamp it is.
    c.pause(4, true);
    for i in 0..5u8 {
        let done = put(&mut c, 1 + i % 2, b"a", &[i]);
        assert_eq!(done.status, Status::Ok, "write {i}: {done:?}");
        committed.insert(done.version >> 8);
    }
    let top = *committed.last().unwrap();
    let held = |c: &mut InProcess| {
        let now = c.now().mono_ns;
        c.nodes().filter(|n| n.id() != 4).all(|n| n.order_stall(now).is_some_and(|s| s.held_by == Some(4)))
    };
    run(&mut c, "the others read node 4's stamp in its ring", SECOND_NS, held);
    let now = c.now().mono_ns;
    let others = |c: &InProcess| c.nodes().filter(|n| n.id() != 4).map(|n| n.order_stall(now)).collect::<Vec<_>>();
    assert!(others(&c).iter().all(|s| s.is_some_and(|s| s.unread == 0)), "every ring is read: {:?}", others(&c));
    c.crash(4);
    // A second and a half of cluster time: nothing can settle node 4's stamp.
    assert!(!c.run_until(100_000, 1_500 * 1_000_000, |c| c.nodes().any(|n| n.order_cursor().unwrap() > top)));
    let now = c.now().mono_ns;
    for n in c.nodes() {
        let stall = n.order_stall(now).unwrap_or_else(|| panic!("node {}'s order names its hole", n.id()));
        assert_eq!(epoch_of(stall.version), 1);
        assert!(stall.version < top << 8 | 0xff && stall.open_ns >= SECOND_NS, "node {}: {stall:?}", n.id());
        assert_eq!(stall.unread_nodes().collect::<Vec<_>>(), vec![4], "node {}: only node 4 is unread", n.id());
        assert_eq!(stall.held_by, Some(4), "node {}: {stall:?}", n.id());
        assert!(n.order_stall_warnings() >= 1, "node {} warned", n.id());
        assert!(n.summary().contains("warnings of a stalled order"), "{}", n.summary());
    }
    c.pause(4, false);
    c.restart(4).unwrap();
    feeds_hold(&mut c, &committed);
    let now = c.now().mono_ns;
    assert!(c.nodes().all(|n| n.order_stall(now).is_none()), "no hole once node 4 decided its write");
    let _ = std::fs::remove_dir_all(dir);
}

/// Node 4's host submits a PUT of key "h" and node 4 takes a stamp for it; the queue
/// pair is handed back so the request stays outstanding (its completion is never read).
fn node_4_stamps_a_write(c: &mut InProcess) -> QueuePair {
    let host = Arc::clone(c.host(4));
    let mut qp = host.queue_pair(0).unwrap();
    let mut buf = host.take_buffer().unwrap();
    buf.value_mut()[..4].copy_from_slice(b"held");
    qp.submit(Request::put(b"h", buf, 4).user_data(3)).map_err(|(e, _)| e).unwrap();
    run(c, "node 4 stamps its write", SECOND_NS, |c| c.node(4).unwrap().sequencer_stats().unwrap().stamps > 0);
    qp
}

/// Holders never fence a silent writer within a test (`cluster.fence_after_us` of an
/// hour).
fn never_fence(config: &mut ClusterConfig) {
    if let Ordering::Sequencer(s) = &mut config.ordering {
        s.fence_after_us = 3_600 * 1_000_000;
    }
}

/// A node that goes down for good holding a stamp (its write taken, not decided) holds
/// the orders only until its holders fence it (`fence_after`, 20 `dead_after`s here):
/// then every order decides its stamps from the holders' ledgers and releases every
/// write committed since. When it comes back long after, its fences are narrowed, its
/// own order decides the write it left Pending, and its ring records that, so its
/// ring moves on and every feed holds every committed write.
#[test]
fn a_node_gone_for_good_is_fenced_and_every_order_goes_on_without_it() {
    let (mut c, dir) = cluster("gone", 4);
    claim_epoch_1(&mut c);
    let mut committed = BTreeSet::new();
    committed.insert(put(&mut c, 1, b"a", b"before").version >> 8);
    let _qp = node_4_stamps_a_write(&mut c);
    let left = pending_fates(&c, 4);
    assert_eq!(left.len(), 1, "node 4 goes with its write's stamp Pending");
    c.crash(4);
    for i in 0..5u8 {
        let done = put(&mut c, 1 + i % 2, b"a", &[i]);
        assert_eq!(done.status, Status::Ok, "write {i}: {done:?}");
        committed.insert(done.version >> 8);
    }
    let top = *committed.last().unwrap();
    // Fenced after 80 ms of silence; a second of cluster time is plenty.
    run(&mut c, "every order passes the gone node's stamps", SECOND_NS, |c| {
        c.nodes().all(|n| n.order_cursor().unwrap() > top)
    });
    for n in c.nodes() {
        assert!(n.stats().fences >= 1, "node {} fenced node 4: {}", n.id(), n.summary());
        assert!(n.apply_stats().unwrap().scans >= 1, "node {} scanned node 4's ledgers", n.id());
    }
    // Node 4's write is in the order if a quorum of holders took its fragment (the
    // holders' rule), and then in every feed; else a no-op in every feed.
    let mut out = vec![FeedEntry::default(); 1024];
    let got = c.node(0).unwrap().read_feed(0, &mut out).unwrap();
    if out[..got].iter().any(|e| e.version == left[0]) {
        committed.insert(left[0]);
    }
    feeds_hold(&mut c, &committed);
    // Back long after: its Pending stamp is decided by its own order, from the ledgers.
    c.restart(4).unwrap();
    run(&mut c, "node 4's ring decides the stamp it left", SECOND_NS, |c| pending_fates(c, 4).is_empty());
    let ring = c.node(4).unwrap().fate_ring().unwrap();
    let fate =
        (1..ring.next()).filter_map(|p| ring.at(p)).find(|e| e.version == left[0] && e.is_write()).map(|e| e.kind);
    let want = if committed.contains(&left[0]) { FateKind::Committed } else { FateKind::Aborted };
    assert_eq!(fate, Some(want), "node 4's ring records what every order released");
    assert!(c.nodes().all(|n| n.id() == 4 || n.stats().fences_narrowed >= 1), "every fence of node 4 narrowed");
    committed.insert(put(&mut c, 3, b"a", b"after").version >> 8);
    feeds_hold(&mut c, &committed);
    let _ = std::fs::remove_dir_all(dir);
}

/// The stamps node `j`'s fate ring still holds Pending.
fn pending_fates(c: &InProcess, j: u8) -> Vec<u64> {
    c.node(j).unwrap().fate_ring().unwrap().pending().collect()
}

/// A rolled-back write answers its host `NotDurable` only once its stamp is recorded
/// Aborted: node 1, cut off from nodes 2-4, rolls its write back at its deadline, but
/// the rollback reaches only node 0 and itself, and the host hears nothing; once the cut
/// heals within a further write timeout, the resync takes the rollback to the others,
/// the stamp is recorded Aborted, and the host is told the write failed. (Had the
/// writer answered at once, or at the bound, the host would see `Unavailable`.)
#[test]
fn a_rolled_back_write_answers_not_durable_once_its_rollback_reached_enough_holders() {
    let (mut c, dir) = cluster("rollback-answer", 4);
    claim_epoch_1(&mut c);
    for j in 2..5 {
        c.partition(1, j);
    }
    let host = Arc::clone(c.host(1));
    let mut qp = host.queue_pair(1).unwrap();
    let mut buf = host.take_buffer().unwrap();
    buf.value_mut()[..2].copy_from_slice(b"rb");
    qp.submit(Request::put(b"r", buf, 2).user_data(7)).map_err(|(e, _)| e).unwrap();
    run(&mut c, "node 1 rolls its write back", SECOND_NS, |c| c.node(1).unwrap().rollbacks_waiting() == 1);
    let mut got = None;
    assert!(!c.run_until(TICK_NS, 20_000_000, |_| {
        let _ = qp.poll(|x| got = Some(x));
        got.is_some()
    }));
    assert_eq!(got, None, "answered while its rollback waits for holders");
    assert_eq!(pending_fates(&c, 1).len(), 1);
    for j in 2..5 {
        c.heal(1, j);
    }
    run(&mut c, "node 1's write ends", SECOND_NS, |_| {
        let _ = qp.poll(|x| got = Some(x));
        got.is_some()
    });
    let got = got.unwrap();
    assert_eq!((got.status, got.user_data), (Status::NotDurable, 7), "{got:?}");
    assert_eq!(pending_fates(&c, 1), Vec::<u64>::new(), "its stamp is recorded Aborted");
    let _ = std::fs::remove_dir_all(dir);
}

/// What each node's stamp ledger says of writer `w`'s write of stamp `version` (its
/// write number read from `w`'s fate ring); `None` for a node that is down or has no
/// entry of it.
fn ledger_states(c: &InProcess, w: u8, version: u64) -> Vec<Option<LedgerState>> {
    let ring = c.node(w).unwrap().fate_ring().unwrap();
    let e = (1..ring.next()).filter_map(|p| ring.at(p)).find(|e| e.version == version && e.is_write()).unwrap();
    (0..5)
        .map(|j| c.node(j)?.ledger()?.for_stamp(w, e.write_seq, version << 8 | u64::from(w)).map(|l| l.state))
        .collect()
}

#[test]
fn a_rolled_back_stamp_is_recorded_aborted_only_once_enough_holders_dropped_its_fragment() {
    // Quorum 3 of 5 holders: node 1, the writer, always counts as holding the fragment
    // (its own ledger is gone with it should it go for good), so the stamp may be
    // recorded Aborted once fewer than two of the four others can hold it. Node 1
    // reaches only node 0 (the sequencer), so its write cannot commit, and of the
    // others only node 0 can persist the rollback.
    // No fence within the test: the rollback waits for its holders.
    let (mut c, dir) = cluster_with("rollback", 4, never_fence);
    claim_epoch_1(&mut c);
    let mut committed = BTreeSet::new();
    committed.insert(put(&mut c, 2, b"a", b"before").version >> 8);
    for j in 2..5 {
        c.partition(1, j);
    }
    let failed = put(&mut c, 1, b"r", b"rolled back");
    // Its rollback cannot reach enough holders while they are cut off (a quorum may
    // still hold the fragment): after a further write timeout the host is told the
    // outcome is unknown, not that the write failed.
    assert_eq!(failed.status, Status::Unavailable, "{failed:?}");
    let stuck = pending_fates(&c, 1);
    assert_eq!(stuck.len(), 1, "the rolled-back write's stamp stays Pending: {stuck:?}");
    assert_eq!(c.node(1).unwrap().rollbacks_waiting(), 1);
    // The holders' ledgers: the committed write is Held by a quorum; the rolled-back
    // one is rolled back where the writer and node 0 persisted that, and unknown to
    // the three cut off.
    let before = *committed.first().unwrap();
    let held = ledger_states(&c, 2, before);
    assert!(held.iter().filter(|s| **s == Some(LedgerState::Held)).count() >= 3, "{held:?}");
    let rolled = Some(LedgerState::RolledBack);
    let want = vec![rolled, rolled, None, None, None];
    run(&mut c, "nodes 0 and 1 persist the rollback", SECOND_NS, |c| ledger_states(c, 1, stuck[0]) == want);
    // A restart (still cut off) finds it again from the outcome table, and keeps waiting.
    c.crash(1);
    c.restart(1).unwrap();
    run(&mut c, "node 1 serves again", SECOND_NS, |c| c.node(1).is_some_and(|n| n.sequencer_state().is_some()));
    assert!(!c.run_until(TICK_NS, 200 * 1_000_000, |c| pending_fates(c, 1).is_empty()));
    assert_eq!(pending_fates(&c, 1), stuck, "still Pending after the restart");
    assert_eq!(ledger_states(&c, 1, stuck[0]), want, "the ledgers are files: a restart keeps them");
    assert_eq!(c.node(1).unwrap().rollbacks_waiting(), 1);
    assert!(
        c.node(1).unwrap().summary().contains("1 rollbacks waiting for their holders"),
        "{}",
        c.node(1).unwrap().summary()
    );
    // Every order waits at it meanwhile (a write through node 0, which reaches every
    // node's directory).
    let after = put(&mut c, 0, b"a", b"after");
    assert_eq!(after.status, Status::Ok, "{after:?}");
    committed.insert(after.version >> 8);
    let stall_at = |c: &InProcess, j: u8| c.node(j).unwrap().order_cursor().unwrap();
    assert!(
        c.nodes().all(|n| n.order_cursor().unwrap() <= stuck[0]),
        "{:?}",
        (0..5).map(|j| stall_at(&c, j)).collect::<Vec<_>>()
    );
    // Healed: the resync tells nodes 2-4 of the rollback, and the stamp is a no-op.
    for j in 2..5 {
        c.heal(1, j);
    }
    run(&mut c, "node 1 records the stamp Aborted", 2 * SECOND_NS, |c| pending_fates(c, 1).is_empty());
    let ring = c.node(1).unwrap().fate_ring().unwrap();
    let kinds: Vec<FateKind> =
        (1..ring.next()).filter_map(|p| ring.at(p)).filter(|e| e.version == stuck[0]).map(|e| e.kind).collect();
    assert!(kinds.contains(&FateKind::Aborted) && !kinds.contains(&FateKind::Committed), "{kinds:?}");
    let states = ledger_states(&c, 1, stuck[0]);
    let others = states.iter().enumerate().filter(|&(j, s)| j != 1 && *s == rolled).count();
    assert!(others >= 3, "the rollback reached enough of the other ledgers: {states:?}");
    assert!(!states.contains(&Some(LedgerState::Held)), "{states:?}");
    assert_eq!(c.node(1).unwrap().rollbacks_waiting(), 0);
    feeds_hold(&mut c, &committed);
    let _ = std::fs::remove_dir_all(dir);
}
