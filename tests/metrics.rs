//! `prescient-dpu serve --metrics ADDR`, scraped over TCP as Prometheus would: the page
//! parses as the text format 0.0.4 (checked by a parser of its own here, not by the
//! writer's code), histograms are cumulative and end in `+Inf` equal to `_count`, and
//! the request counts are what this test sent - for two one-node regions served by one
//! process (series labelled by region) and for the nodes of a three-process cluster
//! (peers up, bytes per peer), and in sequencer mode its order, including what a hole
//! in it waits for. A taken or malformed address stops the start with an error that
//! says what to do.

use std::collections::{BTreeMap, HashMap};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use prescient::{host_options, wait_served, ClusterProcs, DpuProcess, TempRegion};
use prescient_shim::{Host, QueuePair, RegionConfig, Request, Status};

const WAIT: Duration = Duration::from_secs(30);

/// One sample line: its name, labels and value.
#[derive(Debug, Clone)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

/// Parses a page, checking the format's rules on the way; panics naming the line that
/// breaks one.
fn parse(page: &str) -> Vec<Sample> {
    let mut types: HashMap<String, String> = HashMap::new();
    let mut current: Option<(String, String)> = None; // the family samples may go to
    let mut finished: Vec<String> = Vec::new(); // families whose samples are over
    let mut samples = Vec::new();
    for (n, line) in page.lines().enumerate() {
        let at = format!("line {}: {line:?}", n + 1);
        if let Some(rest) = line.strip_prefix("# ") {
            let mut parts = rest.splitn(3, ' ');
            let (word, name) = (parts.next().unwrap(), parts.next().expect(&at));
            assert!(valid_name(name), "{at}: bad metric name");
            match word {
                "HELP" => assert!(parts.next().is_some(), "{at}: HELP without text"),
                "TYPE" => {
                    let kind = parts.next().expect(&at);
                    assert!(["counter", "gauge", "histogram", "summary", "untyped"].contains(&kind), "{at}");
                    assert!(types.insert(name.into(), kind.into()).is_none(), "{at}: family typed twice");
                    assert!(kind != "counter" || name.ends_with("_total"), "{at}: a counter not ending in _total");
                    if let Some((old, _)) = current.replace((name.into(), kind.into())) {
                        finished.push(old);
                    }
                }
                _ => {}
            }
            continue;
        }
        assert!(!line.is_empty() && !line.starts_with('#'), "{at}: not a sample");
        let (name, labels, value) = sample_parts(line).unwrap_or_else(|e| panic!("{at}: {e}"));
        let (family, kind) = current.as_ref().unwrap_or_else(|| panic!("{at}: a sample before any TYPE line"));
        let belongs = match kind.as_str() {
            "histogram" => ["_bucket", "_sum", "_count"].iter().any(|s| name.strip_suffix(s) == Some(family)),
            _ => &name == family,
        };
        assert!(belongs, "{at}: sample of {name} in family {family}: TYPE lines must precede their samples");
        assert!(!finished.contains(&name), "{at}: family {name} continues after another began");
        samples.push(Sample { name, labels, value });
    }
    check_histograms(&samples, &types);
    samples
}

/// `name{a="b",...} value` into its parts, unescaping label values.
fn sample_parts(line: &str) -> Result<(String, BTreeMap<String, String>, f64), String> {
    let name_end = line.find(['{', ' ']).ok_or("no value")?;
    let name = &line[..name_end];
    if !valid_name(name) {
        return Err(format!("bad name {name:?}"));
    }
    let mut labels = BTreeMap::new();
    let mut rest = &line[name_end..];
    if let Some(body) = rest.strip_prefix('{') {
        let mut chars = body.char_indices().peekable();
        loop {
            let start = chars.peek().ok_or("unclosed labels")?.0;
            if body[start..].starts_with('}') {
                rest = &body[start + 1..];
                break;
            }
            let eq = body[start..].find("=\"").ok_or("label without =\"")? + start;
            let key = &body[start..eq];
            if !valid_name(key) {
                return Err(format!("bad label name {key:?}"));
            }
            while chars.next_if(|&(i, _)| i <= eq + 1).is_some() {}
            let mut value = String::new();
            loop {
                match chars.next().ok_or("unclosed label value")?.1 {
                    '"' => break,
                    '\\' => match chars.next().ok_or("dangling escape")?.1 {
                        'n' => value.push('\n'),
                        c @ ('\\' | '"') => value.push(c),
                        c => return Err(format!("bad escape \\{c}")),
                    },
                    '\n' => return Err("raw newline in a label value".into()),
                    c => value.push(c),
                }
            }
            if labels.insert(key.to_owned(), value).is_some() {
                return Err(format!("label {key} twice"));
            }
            chars.next_if(|&(_, c)| c == ',');
        }
    }
    let text = rest.strip_prefix(' ').ok_or("no space before the value")?;
    let value = match text {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        t => t.parse().map_err(|_| format!("bad value {t:?}"))?,
    };
    Ok((name.to_owned(), labels, value))
}

fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

/// Every histogram series: buckets in increasing `le`, counts never decreasing, the
/// last `+Inf` and equal to `_count`; a `_sum` beside each.
fn check_histograms(samples: &[Sample], types: &HashMap<String, String>) {
    for (family, _) in types.iter().filter(|(_, k)| k.as_str() == "histogram") {
        let mut series: BTreeMap<BTreeMap<String, String>, Vec<(f64, f64)>> = BTreeMap::new();
        for s in samples.iter().filter(|s| s.name == format!("{family}_bucket")) {
            let mut key = s.labels.clone();
            let le = key.remove("le").unwrap_or_else(|| panic!("{family}_bucket without le: {s:?}"));
            let le: f64 = if le == "+Inf" { f64::INFINITY } else { le.parse().expect("le is a number") };
            series.entry(key).or_default().push((le, s.value));
        }
        assert!(!series.is_empty(), "histogram {family} has no buckets");
        for (labels, buckets) in &series {
            assert!(buckets.windows(2).all(|w| w[0].0 < w[1].0), "{family}{labels:?}: le not increasing");
            assert!(buckets.windows(2).all(|w| w[0].1 <= w[1].1), "{family}{labels:?}: buckets not cumulative");
            let (le, inf) = *buckets.last().unwrap();
            assert_eq!(le, f64::INFINITY, "{family}{labels:?}: the last bucket is not +Inf");
            let find = |suffix: &str| {
                let name = format!("{family}{suffix}");
                samples.iter().find(|s| s.name == name && &s.labels == labels).map(|s| s.value)
            };
            assert_eq!(find("_count"), Some(inf), "{family}{labels:?}: +Inf is not _count");
            assert!(find("_sum").is_some_and(|v| v >= 0.0), "{family}{labels:?}: no _sum");
        }
    }
}

/// `GET path` over a fresh connection: (status line, head, body).
fn http_get(addr: SocketAddr, path: &str) -> (String, String, String) {
    let mut s = TcpStream::connect(addr).expect("connect to the metrics listener");
    s.set_read_timeout(Some(WAIT)).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\nAccept: text/plain\r\n\r\n").unwrap();
    let mut reply = String::new();
    s.read_to_string(&mut reply).expect("read the answer");
    let (head, body) = reply.split_once("\r\n\r\n").expect("a head and a body");
    let status = head.lines().next().unwrap_or_default().to_owned();
    (status, head.to_owned(), body.to_owned())
}

/// Scrapes until `done` holds for the parsed page (the loop publishes every 200 ms);
/// returns that page's samples.
fn scrape_until(addr: SocketAddr, mut done: impl FnMut(&[Sample]) -> bool) -> Vec<Sample> {
    let deadline = Instant::now() + WAIT;
    loop {
        let (status, head, body) = http_get(addr, "/metrics");
        assert_eq!(status, "HTTP/1.1 200 OK", "{head}");
        assert!(head.contains("Content-Type: text/plain; version=0.0.4"), "{head}");
        let samples = parse(&body);
        if done(&samples) {
            return samples;
        }
        assert!(Instant::now() < deadline, "the page never showed what was expected:\n{body}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The value of the one sample of `name` whose labels include `want`.
fn value(samples: &[Sample], name: &str, want: &[(&str, &str)]) -> Option<f64> {
    let mut hits = samples
        .iter()
        .filter(|s| s.name == name && want.iter().all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(v)));
    let first = hits.next()?.value;
    assert!(hits.next().is_none(), "more than one {name} with {want:?}");
    Some(first)
}

/// Submits `ops` (`b'p'` PUT, `b'g'` GET, `b'd'` DELETE) of `key_N` one at a time,
/// waiting for each; returns their statuses.
fn run_ops(host: &Arc<Host>, qp: &mut QueuePair, ops: &[(u8, u32)]) -> Vec<Status> {
    let mut out = Vec::new();
    for (tag, &(op, key)) in ops.iter().enumerate() {
        let key = format!("key_{key}").into_bytes();
        let mut buf = host.take_buffer().expect("a free buffer");
        let submitted = match op {
            b'p' => {
                buf.value_mut()[..100].fill(op);
                qp.submit(Request::put(&key, buf, 100).user_data(tag as u64))
            }
            b'g' => qp.submit(Request::get(&key, buf).user_data(tag as u64)),
            b'd' => qp.submit(Request::delete(&key, buf).user_data(tag as u64)),
            _ => unreachable!(),
        };
        submitted.map_err(|(e, _)| e).expect("submit");
        let mut got = None;
        let deadline = Instant::now() + WAIT;
        while got.is_none() {
            assert!(Instant::now() < deadline, "request {tag} did not complete");
            let _ = qp.wait(Duration::from_millis(200), |c| got = Some(c));
        }
        let c = got.unwrap();
        if op == b'g' {
            drop(qp.take_value(&c));
        }
        out.push(c.status);
    }
    out
}

fn small_region() -> RegionConfig {
    RegionConfig {
        queue_pairs: 1,
        ring_entries: 16,
        host_buffers: 16,
        dpu_buffers: 4,
        buffer_bytes: 4096,
        directory_slots: 256,
    }
}

#[test]
fn one_process_serving_two_regions_exposes_each_regions_counts_and_histograms() {
    let (a, b) = (TempRegion::new("metrics-a"), TempRegion::new("metrics-b"));
    let host_a = Host::create(&a.0, small_region(), host_options()).expect("create region a");
    let host_b = Host::create(&b.0, small_region(), host_options()).expect("create region b");
    let dpu = DpuProcess::serve(&[&a.0, &b.0], &["--metrics", "127.0.0.1:0"]);
    let addr = dpu.metrics_addr(WAIT);
    assert!(wait_served(&host_a) && wait_served(&host_b), "the DPU app did not serve both regions");

    let (mut qa, mut qb) = (host_a.queue_pair(0).unwrap(), host_b.queue_pair(0).unwrap());
    let ops_a: Vec<(u8, u32)> =
        (0..7).map(|k| (b'p', k)).chain([(b'g', 1), (b'g', 2), (b'g', 99), (b'd', 3)]).collect();
    let got_a = run_ops(&host_a, &mut qa, &ops_a);
    assert!(got_a[..9].iter().all(|&s| s == Status::Ok), "{got_a:?}");
    assert_eq!((got_a[9], got_a[10]), (Status::NotFound, Status::Ok));
    let got_b = run_ops(&host_b, &mut qb, &[(b'p', 1), (b'p', 1), (b'g', 1)]);
    assert!(got_b.iter().all(|&s| s == Status::Ok), "{got_b:?}");

    let (ra, rb) = (a.0.display().to_string(), b.0.display().to_string());
    let req = "prescient_requests_total";
    let samples = scrape_until(addr, |s| {
        value(s, req, &[("region", &ra), ("op", "delete"), ("status", "ok")]) == Some(1.0)
            && value(s, req, &[("region", &rb), ("op", "get"), ("status", "ok")]) == Some(1.0)
    });
    let count = |region: &str, op: &str, status: &str| {
        value(&samples, req, &[("region", region), ("op", op), ("status", status)])
    };
    assert_eq!(count(&ra, "put", "ok"), Some(7.0), "PUTs sent to region a");
    assert_eq!(count(&ra, "get", "ok"), Some(2.0));
    assert_eq!(count(&ra, "get", "not_found"), Some(1.0));
    assert_eq!(count(&rb, "put", "ok"), Some(2.0), "PUTs sent to region b");
    assert_eq!(count(&rb, "delete", "ok"), Some(0.0));
    // Every PUT and DELETE the node coordinated is in its total write histogram.
    let writes = |region: &str| {
        value(&samples, "prescient_write_stage_seconds_count", &[("region", region), ("stage", "total")])
    };
    assert_eq!((writes(&ra), writes(&rb)), (Some(8.0), Some(2.0)));
    let seal = value(&samples, "prescient_write_stage_seconds_count", &[("region", &ra), ("stage", "seal")]);
    assert!(seal.is_some_and(|n| n >= 7.0), "{seal:?}");
    let gets = value(&samples, "prescient_read_stage_seconds_count", &[("region", &ra), ("stage", "total")]);
    assert_eq!(gets, Some(3.0));
    assert_eq!(value(&samples, "prescient_peers_up", &[("region", &ra)]), Some(0.0), "a one-node cluster");
    assert_eq!(value(&samples, "prescient_regions_refused", &[]), Some(0.0));
    assert!(value(&samples, "prescient_predictor_hits_total", &[("region", &rb)]).is_some());

    // Only /metrics is served; the DPU app stops cleanly with its listener open.
    assert!(http_get(addr, "/").0.starts_with("HTTP/1.1 404"));
    let (clean, _, stderr) = dpu.stop();
    assert!(clean, "{stderr}");
}

#[test]
fn a_cluster_node_exposes_its_peers_and_the_writes_it_coordinated() {
    let cluster = ClusterProcs::start_with("metrics", 3, 2, 1, 2, &["--metrics", "127.0.0.1:0"]);
    let addrs: Vec<SocketAddr> = (0..3).map(|i| cluster.dpu(i).unwrap().metrics_addr(WAIT)).collect();
    assert!(cluster.hosts.iter().all(|h| wait_served(h)), "every node serves its host");
    assert!(cluster.wait_connected(WAIT), "the nodes did not connect");
    let host = &cluster.hosts[0];
    let mut qp = host.queue_pair(0).unwrap();
    let ops: Vec<(u8, u32)> = (0..10).map(|k| (b'p', k)).chain([(b'g', 4)]).collect();
    let got = run_ops(host, &mut qp, &ops);
    assert!(got.iter().all(|&s| s == Status::Ok), "{got:?}");

    let req = "prescient_requests_total";
    let samples = scrape_until(addrs[0], |s| {
        value(s, req, &[("node", "0"), ("op", "get"), ("status", "ok")]) == Some(1.0)
            && value(s, "prescient_peers_up", &[("node", "0")]) == Some(2.0)
    });
    assert_eq!(value(&samples, req, &[("node", "0"), ("op", "put"), ("status", "ok")]), Some(10.0));
    let region = cluster.regions[0].0.display().to_string();
    assert!(samples.iter().filter(|s| s.name == req).all(|s| s.labels["region"] == region));
    for peer in ["1", "2"] {
        assert_eq!(value(&samples, "prescient_peer_up", &[("peer", peer)]), Some(1.0), "peer {peer}");
    }
    // Fragments of ten PUTs went out to the other holders.
    let out: f64 = samples
        .iter()
        .filter(|s| s.name == "prescient_peer_bytes_total" && s.labels["direction"] == "out")
        .map(|s| s.value)
        .sum();
    assert!(out >= 10.0 * 50.0, "bytes out {out}");
    let invalidations = value(&samples, "prescient_invalidation_seconds_count", &[("node", "0")]);
    assert!(invalidations.is_some_and(|n| n >= 1.0), "{invalidations:?}");
    // Node 1 coordinated no write of this test's, but holds fragments of them.
    let other = scrape_until(addrs[1], |s| value(s, "prescient_fragments_held_total", &[]).is_some_and(|n| n > 0.0));
    assert_eq!(value(&other, req, &[("op", "put"), ("status", "ok")]), Some(0.0));
}

/// In sequencer mode the page also has the sequencer's epoch and stamps and the
/// ordered apply's releases: every node's order releases the writes node 0 coordinated
/// (the parser checks the families' format as for every page).
#[test]
fn a_sequencer_mode_node_exposes_its_epoch_stamps_and_order() {
    let lines = "ordering = \"sequencer\"\nsequencer = 0\nshadows = [1]\n";
    let cluster = ClusterProcs::start_configured("metrics-seq", 3, 2, 1, 2, lines, &["--metrics", "127.0.0.1:0"]);
    let addrs: Vec<SocketAddr> = (0..3).map(|i| cluster.dpu(i).unwrap().metrics_addr(WAIT)).collect();
    assert!(cluster.hosts.iter().all(|h| wait_served(h)), "every node serves its host");
    assert!(cluster.wait_connected(WAIT), "the nodes did not connect");
    let host = &cluster.hosts[0];
    let mut qp = host.queue_pair(0).unwrap();
    let ops: Vec<(u8, u32)> = (0..10).map(|k| (b'p', k)).collect();
    let got = run_ops(host, &mut qp, &ops);
    assert!(got.iter().all(|&s| s == Status::Ok), "{got:?}");
    for (i, &addr) in addrs.iter().enumerate() {
        let released = "prescient_order_released_total";
        let samples = scrape_until(addr, |s| value(s, released, &[("fate", "write")]).is_some_and(|n| n >= 10.0));
        let epoch = value(&samples, "prescient_sequencer_epoch", &[]).unwrap();
        assert!(epoch >= 1.0, "node {i} follows an epoch: {epoch}");
        let stamps = value(&samples, "prescient_sequencer_stamps_total", &[]).unwrap();
        assert_eq!(stamps, if i == 0 { 10.0 } else { 0.0 }, "node {i}'s writes took the stamps");
        assert_eq!(value(&samples, "prescient_order_conflicts_total", &[]), Some(0.0), "node {i}");
        assert!(samples.iter().all(|s| s.name != "prescient_order_waiting_for"), "node {i}: no hole waits");
    }
}

/// A node killed while its writes hold stamps holds every node's order at the first of
/// them, and node 0's page says so: the hole's age, and node 2 as what the order waits
/// for, with a warning in node 0's log past a second. Restarted, node 2 settles its
/// stamps and the hole closes.
#[test]
fn a_node_down_holding_stamps_is_what_the_page_says_the_order_waits_for() {
    let lines = "ordering = \"sequencer\"\nsequencer = 0\nshadows = [1]\n";
    let mut cluster = ClusterProcs::start_configured("metrics-stall", 3, 2, 1, 2, lines, &["--metrics", "127.0.0.1:0"]);
    let addr = cluster.dpu(0).unwrap().metrics_addr(WAIT);
    assert!(cluster.hosts.iter().all(|h| wait_served(h)), "every node serves its host");
    assert!(cluster.wait_connected(WAIT), "the nodes did not connect");
    let (one, two) = (Arc::clone(&cluster.hosts[1]), Arc::clone(&cluster.hosts[2]));
    let (mut q1, mut q2) = (one.queue_pair(0).unwrap(), two.queue_pair(0).unwrap());
    let hole = |s: &[Sample]| value(s, "prescient_order_hole_open_seconds", &[]).unwrap_or(0.0);
    let waits_for_2 = |s: &[Sample]| value(s, "prescient_order_waiting_for", &[("peer", "2")]) == Some(1.0);
    let mut stalled = None;
    for attempt in 0..5u32 {
        // Writes through node 2, and node 2 killed while they are under way.
        for k in 0..4u64 {
            let mut buf = two.take_buffer().expect("a free buffer");
            buf.value_mut()[..100].fill(b's');
            let key = format!("held_{attempt}_{k}").into_bytes();
            q2.submit(Request::put(&key, buf, 100).user_data(k)).map_err(|(e, _)| e).unwrap();
        }
        std::thread::sleep(Duration::from_millis(2));
        cluster.kill9(2);
        // Writes through node 1 commit above node 2's stamps.
        let ops: Vec<(u8, u32)> = (0..5).map(|k| (b'p', 100 * attempt + k)).collect();
        let got = run_ops(&one, &mut q1, &ops);
        assert!(got.iter().all(|&s| s == Status::Ok), "{got:?}");
        let deadline = Instant::now() + Duration::from_secs(4);
        while stalled.is_none() && Instant::now() < deadline {
            let samples = parse(&http_get(addr, "/metrics").2);
            if waits_for_2(&samples) && hole(&samples) >= 1.0 {
                stalled = Some(hole(&samples));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        if stalled.is_some() {
            break;
        }
        // Node 2 was killed between two writes, holding no stamp: go again.
        cluster.spawn(2);
        assert!(cluster.wait_connected(WAIT), "node 2 did not rejoin");
    }
    let open = stalled.expect("node 0's page names node 2 as what its order waits for");
    let (_, log) = cluster.dpu(0).unwrap().output();
    assert!(log.contains("the change feed waits for"), "node 0 warned of its order's hole ({open} s open): {log}");
    cluster.spawn(2);
    scrape_until(addr, |s| hole(s) == 0.0 && !waits_for_2(s));
}

#[test]
fn a_taken_or_malformed_address_stops_the_start_and_says_what_to_do() {
    let region = TempRegion::new("metrics-taken");
    let _host = Host::create(&region.0, small_region(), host_options()).expect("create region");
    let holder = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a port");
    let taken = holder.local_addr().unwrap().to_string();
    let out = DpuProcess::serve(&[&region.0], &["--metrics", &taken]).wait();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains(&format!("cannot listen for metrics on {taken}")), "{stderr}");
    assert!(stderr.contains("another port") && stderr.contains("in use"), "{stderr}");
    let out = DpuProcess::serve(&[&region.0], &["--metrics", "9464"]).wait();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains("give HOST:PORT"), "{stderr}");
}
