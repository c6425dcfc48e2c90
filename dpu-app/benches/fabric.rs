//! Fabric benchmark: what emulation costs.
//!
//! In-process figures (emu and its references) are per-op times of batches of 100 (p50,
//! p99 over batches); TCP figures time each round trip.
//!
//! In one run: `emu` in-process WRITE (64 B) and CAS round trips next to a plain 64-byte
//! memcpy and a local atomic CAS; `emu` over TCP loopback WRITE and CAS next to a bare
//! TCP ping-pong of the same request size. Each figure sits next to its reference with
//! the ratio. Targets: in-process CAS within 20x of a local CAS; TCP within 1.5x of the
//! bare ping-pong.
//!
//!   cargo bench -p prescient-dpu --bench fabric

use std::hint::black_box;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use prescient_dpu::fabric::conformance::{connect, Side};
use prescient_dpu::fabric::emu::{EmuNode, ModelConfig, Network, SystemClock};
use prescient_dpu::fabric::{CompletionQueue, Op, QpOptions, WorkRequest};

const PAYLOAD: usize = 64;

struct Stats {
    ops_per_s: f64,
    p50_ns: f64,
    p99_ns: f64,
}

/// Times `n` single operations one by one (after `n / 10` warm-up runs).
fn measure(n: usize, mut op: impl FnMut()) -> Stats {
    for _ in 0..n / 10 {
        op();
    }
    let mut lat = Vec::with_capacity(n);
    let start = Instant::now();
    for _ in 0..n {
        let t = Instant::now();
        op();
        lat.push(t.elapsed().as_nanos() as f64);
    }
    let total = start.elapsed().as_secs_f64();
    lat.sort_by(f64::total_cmp);
    Stats { ops_per_s: n as f64 / total, p50_ns: lat[n / 2], p99_ns: lat[n * 99 / 100] }
}

/// Times `batch` operations per sample, for operations too short to time one by one.
fn measure_batched(samples: usize, batch: usize, mut op: impl FnMut()) -> Stats {
    let mut lat = Vec::with_capacity(samples);
    let start = Instant::now();
    for _ in 0..samples {
        let t = Instant::now();
        for _ in 0..batch {
            op();
        }
        lat.push(t.elapsed().as_nanos() as f64 / batch as f64);
    }
    let total = start.elapsed().as_secs_f64();
    lat.sort_by(f64::total_cmp);
    Stats { ops_per_s: (samples * batch) as f64 / total, p50_ns: lat[samples / 2], p99_ns: lat[samples * 99 / 100] }
}

fn round_trip(a: &Side<EmuNode>, op: Op, len: usize, polite: bool, out: &mut Vec<prescient_dpu::fabric::Completion>) {
    let buf = a.mr.buf(0, len).unwrap();
    a.qp.post(WorkRequest { wr_id: 1, op, buf }).unwrap();
    out.clear();
    while a.cq.poll(out, 1).unwrap() == 0 {
        if polite {
            // Over TCP a helper thread completes the request: on a small machine a
            // poller that never yields takes the core that thread needs.
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
    }
    assert!(out[0].is_ok());
}

fn row(name: &str, s: &Stats, reference: &str, r: &Stats) {
    println!(
        "{name:<28} {:>12.0} {:>9.0} {:>9.0} | {reference:<26} {:>12.0} {:>9.0} {:>9.0} | {:>7.2}x",
        s.ops_per_s,
        s.p50_ns,
        s.p99_ns,
        r.ops_per_s,
        r.p50_ns,
        r.p99_ns,
        s.p50_ns / r.p50_ns
    );
}

fn bare_ping_pong(request: usize, response: usize, n: usize) -> Stats {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let server = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        s.set_nodelay(true).unwrap();
        let mut req = vec![0u8; request];
        let resp = vec![0u8; response];
        while s.read_exact(&mut req).is_ok() {
            if s.write_all(&resp).is_err() {
                break;
            }
        }
    });
    let mut c = TcpStream::connect(addr).unwrap();
    c.set_nodelay(true).unwrap();
    let req = vec![1u8; request];
    let mut resp = vec![0u8; response];
    let stats = measure(n, || {
        c.write_all(&req).unwrap();
        c.read_exact(&mut resp).unwrap();
    });
    drop(c);
    server.join().unwrap();
    stats
}

fn main() {
    let opts = QpOptions { send_depth: 16, recv_depth: 16, ..QpOptions::default() };
    let mut out = Vec::with_capacity(4);
    println!("fabric bench: {PAYLOAD}-byte WRITE and 8-byte CAS round trips (post, then poll to completion)");
    println!(
        "{:<28} {:>12} {:>9} {:>9} | {:<26} {:>12} {:>9} {:>9} | {:>8}",
        "operation", "ops/s", "p50 ns", "p99 ns", "reference", "ops/s", "p50 ns", "p99 ns", "p50 ratio"
    );

    // In process.
    let net = Network::new(ModelConfig::ideal(), Arc::new(SystemClock::new())).unwrap();
    let (a, b) = connect(Arc::new(net.node().unwrap()), Arc::new(net.node().unwrap()), opts);
    let src = vec![7u8; PAYLOAD];
    let mut dst = vec![0u8; PAYLOAD];
    let memcpy = measure_batched(20_000, 100, || {
        dst.copy_from_slice(black_box(&src));
        black_box(&mut dst);
    });
    let word = AtomicU64::new(0);
    let mut v = 0u64;
    let local_cas = measure_batched(20_000, 100, || {
        let _ = black_box(&word).compare_exchange(v, v + 1, Ordering::AcqRel, Ordering::Acquire);
        v += 1;
    });
    let remote = b.remote();
    // Same method as the references: time batches of 100 and take per-op figures.
    let write = measure_batched(5_000, 100, || {
        round_trip(&a, Op::Write { remote: remote.at(0), imm: None }, PAYLOAD, false, &mut out)
    });
    let mut g = 0u64;
    let cas = measure_batched(5_000, 100, || {
        round_trip(&a, Op::CompareSwap { remote: remote.at(64), compare: g, swap: g + 1 }, 8, false, &mut out);
        g += 1;
    });
    row("emu in-process WRITE 64B", &write, "memcpy 64B", &memcpy);
    row("emu in-process CAS", &cas, "local atomic CAS", &local_cas);

    // Over TCP loopback: requests are a 48-byte header (+ payload), responses 24 bytes.
    let tcp = |id| {
        Arc::new(
            EmuNode::tcp(id, "127.0.0.1:0".parse().unwrap(), ModelConfig::ideal(), Arc::new(SystemClock::new()))
                .unwrap(),
        )
    };
    let (ta, tb) = connect(tcp(1), tcp(2), opts);
    let remote = tb.remote();
    let n = 20_000;
    let twrite = measure(n, || round_trip(&ta, Op::Write { remote: remote.at(0), imm: None }, PAYLOAD, true, &mut out));
    let bare_write = bare_ping_pong(48 + PAYLOAD, 24, n);
    let mut g = 0u64;
    let tcas = measure(n, || {
        round_trip(&ta, Op::CompareSwap { remote: remote.at(64), compare: g, swap: g + 1 }, 8, true, &mut out);
        g += 1;
    });
    let bare_cas = bare_ping_pong(48, 24, n);
    row("emu TCP WRITE 64B", &twrite, "bare TCP 112B/24B", &bare_write);
    row("emu TCP CAS", &tcas, "bare TCP 48B/24B", &bare_cas);

    let cas_ratio = cas.p50_ns / local_cas.p50_ns;
    let tcp_ratio = tcas.p50_ns.max(twrite.p50_ns / bare_write.p50_ns * bare_cas.p50_ns) / bare_cas.p50_ns;
    println!(
        "targets: in-process CAS {:.1}x local CAS (target <= 20x: {}); TCP {:.2}x bare ping-pong (worst of WRITE, CAS; target <= 1.5x: {})",
        cas_ratio,
        if cas_ratio <= 20.0 { "met" } else { "missed" },
        tcp_ratio,
        if tcp_ratio <= 1.5 { "met" } else { "missed" }
    );
    drop((ta, tb, a, b));
    std::thread::sleep(Duration::from_millis(10));
}
