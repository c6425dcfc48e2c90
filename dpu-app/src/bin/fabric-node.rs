//! `fabric-node`: one emulated fabric node per process, for the cross-process tests
//! (`tests/fabric_processes.rs`) and the network-namespace script (`ci/fabric-netns.sh`).
//! Not a product command.
//!
//! Nodes exchange endpoints and region descriptors through files in a shared directory
//! (`<dir>/<id>.ep`), the side channel a real deployment would replace.
//!
//!   fabric-node serve  --id 1 --listen 127.0.0.1:0 --dir D --peers 2,3
//!       registers a 64 KiB region, connects one queue pair per peer, counts the
//!       WRITE_WITH_IMM notifications each peer sends, and when every peer has sent its
//!       final one (immediate 0xFFFFFFFF) prints `FINAL <word 0> <word 1> <notifications>`.
//!   fabric-node client --id 2 --listen 127.0.0.1:0 --dir D --peer 1 --rounds N
//!       WRITE + READ back, N CAS increments of word 0 (retrying on a lost race),
//!       N FETCH_ADDs on word 1, N WRITE_WITH_IMM notifications, then the final one.
#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use prescient_dpu::fabric::emu::{EmuNode, ModelConfig, SystemClock};
use prescient_dpu::fabric::{
    Access, CompletionQueue, Endpoint, Fabric, Memory, Op, QpOptions, RemoteRegion, WcOpcode, WorkRequest,
};

const REGION_BYTES: usize = 64 * 1024;
const DONE_IMM: u32 = u32::MAX;
const WAIT: Duration = Duration::from_secs(30);

struct Args {
    role: String,
    id: u32,
    listen: String,
    dir: PathBuf,
    peers: Vec<u32>,
    rounds: u64,
}

fn parse() -> Result<Args, String> {
    let mut it = std::env::args().skip(1);
    let role = it
        .next()
        .ok_or("usage: fabric-node serve|client --id N --listen ADDR --dir D --peers A,B | --peer A --rounds N")?;
    let mut a = Args { role, id: 0, listen: "127.0.0.1:0".into(), dir: PathBuf::from("."), peers: vec![], rounds: 100 };
    while let Some(flag) = it.next() {
        let v = it.next().ok_or(format!("{flag} needs a value"))?;
        let num = |v: &str| v.parse::<u64>().map_err(|e| format!("{flag} {v}: {e}"));
        match flag.as_str() {
            "--id" => a.id = num(&v)? as u32,
            "--listen" => a.listen = v,
            "--dir" => a.dir = PathBuf::from(v),
            "--peers" | "--peer" => {
                a.peers = v.split(',').map(|p| num(p).map(|n| n as u32)).collect::<Result<_, _>>()?
            }
            "--rounds" => a.rounds = num(&v)?,
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    Ok(a)
}

/// Publishes `<dir>/<id>-<peer>.ep`: our endpoint for `peer` and our region.
fn publish(dir: &Path, id: u32, peer: u32, ep: &Endpoint, region: &RemoteRegion) -> Result<(), String> {
    let mut bytes = ep.to_bytes().to_vec();
    bytes.extend_from_slice(&region.to_bytes());
    let tmp = dir.join(format!(".{id}-{peer}.tmp"));
    std::fs::write(&tmp, &bytes).map_err(|e| format!("write {tmp:?}: {e}"))?;
    std::fs::rename(&tmp, dir.join(format!("{id}-{peer}.ep"))).map_err(|e| format!("publish: {e}"))
}

/// Waits for `<dir>/<peer>-<id>.ep`.
fn lookup(dir: &Path, id: u32, peer: u32) -> Result<(Endpoint, RemoteRegion), String> {
    let path = dir.join(format!("{peer}-{id}.ep"));
    let deadline = Instant::now() + WAIT;
    loop {
        if let Ok(b) = std::fs::read(&path) {
            if b.len() == Endpoint::WIRE_BYTES + RemoteRegion::WIRE_BYTES {
                let ep = Endpoint::from_bytes(&b[..Endpoint::WIRE_BYTES]).map_err(|e| e.to_string())?;
                let region = RemoteRegion::from_bytes(&b[Endpoint::WIRE_BYTES..]).map_err(|e| e.to_string())?;
                return Ok((ep, region));
            }
        }
        if Instant::now() > deadline {
            return Err(format!("peer {peer} never published {path:?}"));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Waits for `<dir>/<peer>-<id>.ready`: the peer's queue pair is in RTS.
fn wait_ready(dir: &Path, id: u32, peer: u32) -> Result<(), String> {
    let path = dir.join(format!("{peer}-{id}.ready"));
    let deadline = Instant::now() + WAIT;
    while !path.exists() {
        if Instant::now() > deadline {
            return Err(format!("peer {peer} never became ready"));
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    Ok(())
}

fn run(a: Args) -> Result<(), String> {
    let listen = a.listen.parse().map_err(|e| format!("--listen {}: {e}", a.listen))?;
    let node =
        EmuNode::tcp(a.id, listen, ModelConfig::ideal(), Arc::new(SystemClock::new())).map_err(|e| e.to_string())?;
    let mr = node
        .register(Arc::new(Memory::anonymous(REGION_BYTES).map_err(|e| e.to_string())?), Access::ALL)
        .map_err(|e| e.to_string())?;
    let cq = node.create_cq(4096).map_err(|e| e.to_string())?;
    let opts = QpOptions { recv_depth: 256, ..QpOptions::default() };
    let mut qps = Vec::new();
    for &peer in &a.peers {
        let qp = node.create_qp(&cq, &cq, opts).map_err(|e| e.to_string())?.init().map_err(|e| e.to_string())?;
        publish(&a.dir, a.id, peer, &qp.endpoint(), &mr.remote())?;
        let (ep, region) = lookup(&a.dir, a.id, peer)?;
        // Receives go up before RTR, so no peer request ever finds the queue empty.
        for i in 0..opts.recv_depth {
            qp.post_recv(i as u64, mr.buf(0, 0).map_err(|e| e.to_string())?).map_err(|e| e.to_string())?;
        }
        let qp = qp.ready_to_receive(&ep).map_err(|e| e.to_string())?;
        qps.push((qp.ready_to_send().map_err(|e| e.to_string())?, region));
        // Tell the peer we answer requests now (a request that reaches a queue pair
        // before RTR is dropped, on hardware as here).
        std::fs::write(a.dir.join(format!("{}-{peer}.ready", a.id)), b"")
            .map_err(|e| format!("write ready marker: {e}"))?;
    }
    let mut out = Vec::with_capacity(16);
    let mut next = || -> Result<prescient_dpu::fabric::Completion, String> {
        out.clear();
        if cq.wait(&mut out, 1, WAIT).map_err(|e| e.to_string())? == 0 {
            return Err("no completion within 30 s".into());
        }
        let c = out.pop().expect("one completion");
        if !c.is_ok() {
            return Err(format!("completion failed: {:?} {:?} wr_id {}", c.opcode, c.status, c.wr_id));
        }
        Ok(c)
    };
    match a.role.as_str() {
        "serve" => {
            let (mut done, mut notes) = (0, 0u64);
            while done < qps.len() {
                let c = next()?;
                if c.opcode != WcOpcode::RecvWithImm {
                    return Err(format!("unexpected completion {c:?}"));
                }
                let qp = &qps.iter().find(|(q, _)| q.qpn() == c.qp_num).ok_or("completion of an unknown queue pair")?.0;
                qp.post_recv(c.wr_id, c.buf.ok_or("receive buffer missing")?).map_err(|e| e.to_string())?;
                if c.imm == Some(DONE_IMM) {
                    done += 1;
                } else {
                    notes += 1;
                }
            }
            let m = mr.memory();
            println!(
                "FINAL {} {} {notes}",
                m.load_u64(0).map_err(|e| e.to_string())?,
                m.load_u64(8).map_err(|e| e.to_string())?
            );
        }
        "client" => {
            let (qp, region) = qps.first().ok_or("client needs --peer")?;
            wait_ready(&a.dir, a.id, a.peers[0])?;
            let post = |wr_id, op, off, len| {
                qp.post(WorkRequest { wr_id, op, buf: mr.buf(off, len).map_err(|e| e.to_string())? })
                    .map_err(|e| e.error.to_string())
            };
            let text = format!("hello from node {}", a.id);
            let slot = 1024 + 64 * u64::from(a.id);
            mr.memory().write(4096, text.as_bytes()).map_err(|e| e.to_string())?;
            post(1, Op::Write { remote: region.at(slot), imm: None }, 4096, text.len())?;
            next()?;
            post(2, Op::Read { remote: region.at(slot) }, 8192, text.len())?;
            next()?;
            let mut back = vec![0; text.len()];
            mr.memory().read(8192, &mut back).map_err(|e| e.to_string())?;
            if back != text.as_bytes() {
                return Err("READ did not return what WRITE wrote".into());
            }
            let (mut guess, mut done) = (0u64, 0);
            while done < a.rounds {
                post(3, Op::CompareSwap { remote: region.at(0), compare: guess, swap: guess + 1 }, 0, 8)?;
                let old = next()?.buf.ok_or("buffer missing")?.read_u64().map_err(|e| e.to_string())?;
                if old == guess {
                    done += 1;
                    guess += 1;
                } else {
                    guess = old;
                }
            }
            for _ in 0..a.rounds {
                post(4, Op::FetchAdd { remote: region.at(8), add: 1 }, 16, 8)?;
                next()?;
                post(5, Op::Write { remote: region.at(slot), imm: Some(a.id) }, 4096, 8)?;
                next()?;
            }
            post(6, Op::Write { remote: region.at(slot), imm: Some(DONE_IMM) }, 4096, 0)?;
            next()?;
            println!("CLIENT {} OK", a.id);
        }
        other => return Err(format!("unknown role {other}")),
    }
    Ok(())
}

fn main() -> ExitCode {
    match parse().and_then(run) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("fabric-node: {e}");
            ExitCode::FAILURE
        }
    }
}
