//! Connection set-up on the in-process cluster on a manual clock: the node that answers
//! an offer posts nothing on the link until the offerer has brought its own queue pair
//! up, however long the offerer takes to read the answer.

use std::sync::Arc;

use prescient_dpu::cluster::config::ClusterConfig;
use prescient_dpu::cluster::run::inprocess::{region_config_for, ClusterClock, InProcess};
use prescient_dpu::fabric::emu::ModelConfig;

const TICK_NS: u64 = 20_000;
const SECOND_NS: u64 = 1_000_000_000;

/// Three nodes, RS(2, 1), on a manual clock.
fn cluster(name: &str) -> (InProcess, std::path::PathBuf) {
    let dir = std::env::temp_dir().join(format!("prescient-connect-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut config = ClusterConfig::in_process(3, 2, 1, &dir);
    prescient_dpu::seal::keys::create_key_dir(&config.key_dir).unwrap();
    config.value_bytes_max = 512;
    config.store_bytes = prescient_dpu::cluster::protocol::node::store_bytes_for_keys(&config, 256).unwrap();
    config.log_slots = 64;
    config.outcome_entries = 1024;
    config.heartbeat_us = 200;
    config.lease_us = 2_000;
    config.dead_after_us = 20_000;
    config.validate().unwrap();
    let region = region_config_for(&config, 1, 256);
    let c = InProcess::start(Arc::new(config), ClusterClock::manual(SECOND_NS), ModelConfig::ideal(), region, &dir)
        .unwrap();
    (c, dir)
}

fn all_up(c: &mut InProcess) -> bool {
    c.nodes().all(|n| (0..3).filter(|j| *j != n.id()).all(|j| n.peer_up(j)))
}

#[test]
fn an_offerer_slow_to_read_the_answers_gets_its_links_at_the_first_try() {
    let (mut c, dir) = cluster("slow-offerer");
    // Node 0 (the lowest id) offers to both peers, which do not read them yet.
    c.pause(1, true);
    c.pause(2, true);
    c.run_until(TICK_NS, 10 * TICK_NS, |_| false);
    // They answer while node 0 is stalled, for far longer than the transport's retries
    // last (its timeout is dead_after / 8, retried twice): any request they posted on the
    // link now would reach a queue pair not yet ready to receive, and fail the link.
    c.pause(0, true);
    c.pause(1, false);
    c.pause(2, false);
    c.run_until(TICK_NS, 200_000_000, |_| false);
    c.pause(0, false);
    assert!(c.run_until(TICK_NS, SECOND_NS, all_up), "every link comes up once node 0 reads its answers");
    for n in c.nodes() {
        assert_eq!(n.stats().links_lost, 0, "node {} lost a link while connecting", n.id());
    }
    drop(c);
    let _ = std::fs::remove_dir_all(dir);
}
