//! System tests of Redis on Prescient: real `redis-server` processes loading the
//! module, each served by its own `prescient-dpu serve --config` process, started and
//! stopped by `prescient-redis cluster`, driven by a real client (the `redis` crate).
//!
//! Needs `redis-server` on PATH (`apt-get install redis-server redis-tools`; `.ci/run`
//! installs it) and the module and `prescient-dpu` built beside this test, which
//! `cargo test --workspace` does.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The target folder's profile directory (`target/debug`).
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    exe.parent().and_then(Path::parent).expect("target/<profile>/deps/..").to_path_buf()
}

/// A cluster in a temporary folder, stopped on drop.
struct Cluster {
    dir: PathBuf,
    ports: Vec<u16>,
}

fn launcher() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_prescient-redis"));
    let dir = profile_dir();
    c.arg("cluster")
        .arg("--dpu")
        .arg(dir.join("prescient-dpu"))
        .arg("--module")
        .arg(dir.join("deps/libprescient_redis.so"));
    c
}

impl Cluster {
    fn start(name: &str, nodes: usize) -> Self {
        assert!(
            Command::new("redis-server").arg("--version").output().is_ok(),
            "redis-server is not installed: `apt-get install redis-server redis-tools` (.ci/run does)"
        );
        let dir = std::env::temp_dir().join(format!("prescient-redis-test-{name}-{}", std::process::id()));
        let out = launcher()
            .args(["start", "--port", "0", "--nodes", &nodes.to_string(), "--store-bytes", "67108864"])
            .arg("--dir")
            .arg(&dir)
            .output()
            .expect("run prescient-redis");
        let mut c = Self { ports: Vec::new(), dir };
        assert!(
            out.status.success(),
            "cluster start failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let nodes = std::fs::read_to_string(c.dir.join("nodes")).expect("nodes file");
        c.ports = nodes.lines().map(|l| l.split_whitespace().nth(1).expect("port").parse().expect("port")).collect();
        c
    }

    fn conn(&self, node: usize) -> redis::Connection {
        let client = redis::Client::open(format!("redis://127.0.0.1:{}/", self.ports[node])).expect("client");
        let con = client.get_connection_with_timeout(Duration::from_secs(10)).expect("connect");
        con.set_read_timeout(Some(Duration::from_secs(40))).expect("timeout");
        con
    }

    fn dpu_pid(&self, node: usize) -> u32 {
        std::fs::read_to_string(self.dir.join(format!("dpu{node}.pid"))).expect("pid file").trim().parse().expect("pid")
    }

    fn stat(&self, node: usize, name: &str) -> u64 {
        let text: String = redis::cmd("PRESCIENT.STATS").query(&mut self.conn(node)).expect("stats");
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{name}:")))
            .and_then(|v| v.trim().parse().ok())
            .expect("stat")
    }

    fn logs(&self) -> String {
        let mut out = String::new();
        for i in 0..self.ports.len() {
            for f in [format!("dpu{i}.log"), format!("redis{i}.log")] {
                let text = std::fs::read_to_string(self.dir.join(&f)).unwrap_or_default();
                let tail: Vec<&str> = text.lines().rev().take(15).collect();
                out.push_str(&format!("--- {f}\n{}\n", tail.into_iter().rev().collect::<Vec<_>>().join("\n")));
            }
        }
        out
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("{}", self.logs());
        }
        let out = launcher().arg("stop").arg("--dir").arg(&self.dir).output();
        if let Ok(out) = out {
            if !out.status.success() {
                eprintln!("cluster stop: {}", String::from_utf8_lossy(&out.stderr));
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// What one key may read back as at the end.
#[derive(Default)]
struct Expect {
    /// The last acknowledged value.
    acked: Option<String>,
    /// Values of SETs after it that failed: they may or may not have happened.
    unknown: Vec<String>,
}

fn get(con: &mut redis::Connection, key: &str) -> Option<String> {
    redis::cmd("GET").arg(key).query(con).expect("GET")
}

#[test]
fn a_set_on_one_node_is_read_back_fresh_on_every_other_and_a_del_everywhere() {
    let c = Cluster::start("fresh", 3);
    let mut cons: Vec<_> = (0..3).map(|i| c.conn(i)).collect();
    for round in 0..3 {
        for k in 0..40 {
            let key = format!("key-{k}");
            let value = format!("value-{k}-round-{round}");
            let writer = (k + round) % 3;
            let ok: String = redis::cmd("SET").arg(&key).arg(&value).query(&mut cons[writer]).expect("SET");
            assert_eq!(ok, "OK");
            for (reader, con) in cons.iter_mut().enumerate() {
                // Twice: the second read of an unchanged key is served from Redis's copy.
                for _ in 0..2 {
                    assert_eq!(
                        get(con, &key).as_deref(),
                        Some(value.as_str()),
                        "node {reader} after a SET on {writer}"
                    );
                }
            }
        }
    }
    for node in 0..3 {
        assert!(c.stat(node, "gets_local") >= 40, "node {node} served repeated reads from its own copy");
        assert!(c.stat(node, "gets_fetched") >= 40, "node {node} fetched other nodes' writes");
    }
    let deleted: i64 = redis::cmd("DEL").arg("key-0").arg("key-1").query(&mut cons[1]).expect("DEL");
    assert_eq!(deleted, 2);
    for con in cons.iter_mut() {
        assert_eq!(get(con, "key-0"), None);
        assert_eq!(get(con, "key-1"), None);
        assert_eq!(get(con, "key-2").as_deref(), Some("value-2-round-2"));
    }
    // Writes the module does not replicate are refused, not applied to one copy.
    let err = redis::cmd("INCR").arg("counter").query::<i64>(&mut cons[0]).expect_err("INCR is refused");
    assert!(err.to_string().contains("not replicated"), "{err}");
    let err = redis::cmd("SET").arg("k").arg("v").arg("NX").query::<String>(&mut cons[0]).expect_err("SET NX");
    assert!(err.to_string().contains("SET with options"), "{err}");
}

#[test]
fn a_killed_dpu_app_turns_its_nodes_writes_into_errors_the_others_go_on_and_no_acknowledged_set_is_lost() {
    let c = Cluster::start("kill", 3);
    let stop = Arc::new(AtomicBool::new(false));
    let acked_after_kill = Arc::new(AtomicU64::new(0));
    let killed = Arc::new(AtomicBool::new(false));
    // One writer per node over its own 2,000 keys, each SET a new value. A key's
    // final value must be its last acknowledged one, or one of the SETs after it that
    // failed with an outcome unknown (the client cannot know whether those happened).
    let writers: Vec<_> = (0..3)
        .map(|node| {
            let mut con = c.conn(node);
            let (stop, killed, acked_after_kill) = (stop.clone(), killed.clone(), acked_after_kill.clone());
            std::thread::spawn(move || {
                let mut keys: HashMap<String, Expect> = HashMap::new();
                let mut seq = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let key = format!("w{node}-{}", seq % 2000);
                    let value = format!("v{node}-{seq}-{}", "x".repeat((seq % 200) as usize));
                    seq += 1;
                    let was_killed = killed.load(Ordering::Relaxed);
                    let expect = keys.entry(key.clone()).or_default();
                    match redis::cmd("SET").arg(&key).arg(&value).query::<String>(&mut con) {
                        Ok(ok) => {
                            assert_eq!(ok, "OK");
                            if was_killed && node != 0 {
                                acked_after_kill.fetch_add(1, Ordering::Relaxed);
                            }
                            expect.acked = Some(value);
                            expect.unknown.clear();
                        }
                        Err(e) => {
                            let _ = e;
                            expect.unknown.push(value);
                            std::thread::sleep(Duration::from_millis(20));
                        }
                    }
                }
                (keys, seq)
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs(2));
    let pid = c.dpu_pid(0);
    assert!(Command::new("kill").args(["-9", &pid.to_string()]).status().expect("kill").success());
    killed.store(true, Ordering::Relaxed);
    // Node 0's writes now fail with -UNAVAILABLE; the other nodes' go on.
    let mut con0 = c.conn(0);
    let deadline = Instant::now() + Duration::from_secs(20);
    let refusal = loop {
        match redis::cmd("SET").arg("probe").arg("p").query::<String>(&mut con0) {
            Err(e) => break e.to_string(),
            Ok(_) => assert!(Instant::now() < deadline, "node 0 still acknowledged writes 20 s after its DPU app died"),
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(refusal.contains("UNAVAILABLE"), "{refusal}");
    let before = acked_after_kill.load(Ordering::Relaxed);
    let deadline = Instant::now() + Duration::from_secs(30);
    while acked_after_kill.load(Ordering::Relaxed) < before + 50 {
        assert!(Instant::now() < deadline, "nodes 1 and 2 stopped acknowledging writes while node 0 was down");
        std::thread::sleep(Duration::from_millis(50));
    }
    // Restarted, node 0 rejoins and writes again.
    let out = launcher().args(["restart-dpu", "--node", "0"]).arg("--dir").arg(&c.dir).output().expect("restart");
    assert!(out.status.success(), "restart-dpu: {}", String::from_utf8_lossy(&out.stderr));
    let deadline = Instant::now() + Duration::from_secs(30);
    while redis::cmd("SET").arg("probe").arg("back").query::<String>(&mut con0).is_err() {
        assert!(Instant::now() < deadline, "node 0 did not take writes after its DPU app restarted");
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_secs(1));
    stop.store(true, Ordering::Relaxed);
    let mut all = HashMap::new();
    let mut sets = 0;
    for w in writers {
        let (keys, seq) = w.join().expect("writer");
        sets += seq;
        all.extend(keys.into_iter().filter(|(_, e)| e.acked.is_some()));
    }
    assert!(all.len() > 100, "only {} keys had an acknowledged write (of {sets} SETs)", all.len());
    let mut cons: Vec<_> = (0..3).map(|i| c.conn(i)).collect();
    for (key, expect) in &all {
        for (node, con) in cons.iter_mut().enumerate() {
            let got = get(con, key);
            let acked = expect.acked.as_deref();
            let fine = got.as_deref() == acked || got.as_ref().is_some_and(|g| expect.unknown.contains(g));
            assert!(
                fine,
                "{key} on node {node}: read {got:?}, last acknowledged {acked:?}, unknown {:?}",
                expect.unknown
            );
        }
    }
    assert_eq!(get(&mut cons[2], "probe").as_deref(), Some("back"));
}

#[test]
fn the_module_refuses_bad_arguments_at_load_with_what_to_do() {
    let module = profile_dir().join("deps/libprescient_redis.so");
    let log = std::env::temp_dir().join(format!("prescient-redis-badargs-{}.log", std::process::id()));
    let port = std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port();
    let status = Command::new("redis-server")
        .args(["--port", &port.to_string(), "--save", ""])
        .arg("--logfile")
        .arg(&log)
        .arg("--loadmodule")
        .arg(&module)
        .arg("ring=8")
        .status()
        .expect("run redis-server");
    assert!(!status.success(), "redis-server started with a module that has no region");
    let text = std::fs::read_to_string(&log).expect("log");
    let _ = std::fs::remove_file(&log);
    assert!(text.contains("unknown argument 'ring'") && text.contains("region=PATH"), "{text}");
}

/// Redis's copy is a cache of the cluster's value: when Redis drops it on its own (a
/// TTL runs out, a flush) the module forgets its tag (the tag table does not grow with
/// dropped keys) and the next GET fetches the value from the cluster. What would
/// change only this node's copies is refused: replicated commands in another database,
/// SWAPDB.
#[test]
fn keys_redis_drops_on_its_own_leave_no_tags_and_other_databases_are_refused() {
    let c = Cluster::start("forget", 3);
    let mut con = c.conn(0);
    for k in 0..50 {
        let ok: String = redis::cmd("SET").arg(format!("key-{k}")).arg(format!("v-{k}")).query(&mut con).expect("SET");
        assert_eq!(ok, "OK");
    }
    let tagged = c.stat(0, "tags");
    assert!(tagged >= 40, "most of 50 committed SETs leave a servable, tagged copy: {tagged}");

    let set: i64 = redis::cmd("PEXPIRE").arg("key-0").arg(50).query(&mut con).expect("PEXPIRE");
    assert_eq!(set, 1);
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while c.stat(0, "tags") >= tagged {
        assert!(std::time::Instant::now() < deadline, "the expired key's tag stayed");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(get(&mut con, "key-0").as_deref(), Some("v-0"), "fetched from the cluster again");

    let ok: String = redis::cmd("FLUSHALL").query(&mut con).expect("FLUSHALL");
    assert_eq!(ok, "OK");
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while c.stat(0, "tags") != 0 {
        assert!(std::time::Instant::now() < deadline, "tags stayed after FLUSHALL");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(get(&mut con, "key-7").as_deref(), Some("v-7"), "fetched from the cluster after the flush");

    let err = redis::cmd("SWAPDB").arg(0).arg(1).query::<String>(&mut con).expect_err("SWAPDB is refused");
    assert!(err.to_string().contains("SWAPDB"), "{err}");
    let ok: String = redis::cmd("SELECT").arg(1).query(&mut con).expect("SELECT");
    assert_eq!(ok, "OK");
    let err = redis::cmd("SET").arg("key-1").arg("x").query::<String>(&mut con).expect_err("SET in database 1");
    assert!(err.to_string().contains("only database 0"), "{err}");
    let err = redis::cmd("GET").arg("key-1").query::<Option<String>>(&mut con).expect_err("GET in database 1");
    assert!(err.to_string().contains("only database 0"), "{err}");
}
