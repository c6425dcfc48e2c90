//! The emulated fabric across processes: one TCP connection per connected queue pair
//! and direction. The requester streams request frames in post order; the peer node's
//! responder thread for that connection executes them in order against its memory and
//! answers; the requester's reader thread completes them in order. Per-QP ordering is the
//! stream's order. A closed connection (peer process died, queue pair destroyed, node
//! killed) fails the head request with `RetryExceeded`, moves the queue pair to ERR and
//! flushes the rest. The seeded model still decides each request's delay (the responder
//! holds it that long) and loss (the request is never sent and fails at the head).

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv6Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use super::clock::Clock;
use super::context::{Attachment, NodeInner};
use super::model::{Fate, Model, ModelConfig};
use super::qp::{Link, QpInner, SendQueue, Transit, Waiting};
use super::receive::Payload;
use super::responder::{execute, Incoming, Nak, Sink};
use super::wire::{hello, request, response, Hello, Kind, Request, Response, Status};
use crate::fabric::{Completion, Endpoint, FabricError, Op, RemoteAddr, Result, WcStatus};
use crate::limits::MESSAGE_BYTES_MAX;

static CONNECTIONS: AtomicU64 = AtomicU64::new(1);

fn io(what: &'static str) -> impl Fn(std::io::Error) -> FabricError {
    move |source| FabricError::Io { what, source }
}

fn addr_of(ep: &Endpoint) -> SocketAddr {
    let v6 = Ipv6Addr::from(ep.gid);
    let ip = v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4);
    SocketAddr::new(ip, ep.port)
}

/// The NIC context of a node reachable over TCP at `bind` (port 0 picks one), with node
/// id `id` in the model: its accept thread serves peers until the node is killed or the
/// process exits (see [`EmuNode::tcp`](super::EmuNode::tcp)).
pub(crate) fn listen(id: u32, bind: SocketAddr, model: ModelConfig, clock: Arc<dyn Clock>) -> Result<Arc<NodeInner>> {
    if model.ports.is_some() {
        return Err(FabricError::Topology(
            "ports: switch ports are modelled only on an in-process network (a process sees only its own \
             senders' share of a port); leave them out between processes"
                .into(),
        ));
    }
    let listener = TcpListener::bind(bind).map_err(io("bind"))?;
    let addr = listener.local_addr().map_err(io("local_addr"))?;
    let inner = Arc::new(NodeInner::new(id, id, Arc::new(Model::new(model)?), clock, Attachment::Tcp(addr)));
    let weak = Arc::downgrade(&inner);
    std::thread::Builder::new()
        .name(format!("emu-accept-{id}"))
        .spawn(move || accept_loop(listener, weak))
        .map_err(io("spawn accept thread"))?;
    Ok(inner)
}

/// Wakes the accept thread of a killed node so that it exits.
pub(crate) fn unblock_listener(node: &NodeInner) {
    if let Attachment::Tcp(addr) = node.attachment {
        let _ = TcpStream::connect_timeout(&addr, Duration::from_millis(100));
    }
}

fn accept_loop(listener: TcpListener, node: Weak<NodeInner>) {
    for stream in listener.incoming() {
        let Some(n) = node.upgrade() else { return };
        if !n.is_alive() {
            return;
        }
        let Ok(stream) = stream else { continue };
        let _ = stream.set_nodelay(true);
        if let Ok(clone) = stream.try_clone() {
            n.accepted.lock().expect("accepted lock").push(clone);
        }
        let node = Arc::downgrade(&n);
        let _ = std::thread::Builder::new().name("emu-responder".into()).spawn(move || serve(stream, node));
    }
}

/// Opens the connection for a queue pair going to RTR.
pub(crate) fn connect(qp: &Arc<QpInner>, remote: &Endpoint) -> Result<Link> {
    let addr = addr_of(remote);
    let fail = |why: String| FabricError::Connect { peer: format!("{addr} qp {}", remote.qpn), why };
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).map_err(|e| fail(e.to_string()))?;
    stream.set_nodelay(true).map_err(io("set_nodelay"))?;
    let o = &qp.options;
    let h = Hello {
        dst_qpn: remote.qpn,
        src_node: qp.node.id,
        rnr_wait_us: (u32::from(o.rnr_retry_count) + 1).saturating_mul(o.rnr_timer_us),
        ready_wait_us: (u32::from(o.retry_count) + 1).saturating_mul(o.timeout_us),
    };
    let mut b = [0u8; hello::LEN];
    h.emit(&mut b);
    stream.write_all(&b).map_err(|e| fail(e.to_string()))?;
    // The answer: status (0 = the queue pair exists) and the peer's node id for the model.
    let mut ack = [0u8; 8];
    stream.read_exact(&mut ack).map_err(|e| fail(format!("no hello answer: {e}")))?;
    if ack[0..4] != [0; 4] {
        return Err(fail("the peer node has no such queue pair".into()));
    }
    let peer_node = u32::from_le_bytes(ack[4..8].try_into().expect("4 bytes"));
    let conn = CONNECTIONS.fetch_add(1, Ordering::Relaxed);
    let reader = stream.try_clone().map_err(io("clone stream"))?;
    let weak = Arc::downgrade(qp);
    std::thread::Builder::new()
        .name(format!("emu-reader-{}", qp.qpn))
        .spawn(move || read_responses(reader, weak, conn))
        .map_err(io("spawn reader thread"))?;
    Ok(Link::Tcp { stream, conn, peer_node, broken: false })
}

/// Sends one request (called with the send queue locked, so frames leave in post order).
pub(crate) fn send_request(qp: &QpInner, sq: &mut SendQueue, token: u64, op: Op, psn: u32) {
    let Link::Tcp { peer_node, broken, .. } = sq.link else { unreachable!("TCP link") };
    let entry = sq.inflight.get(token).expect("just inserted");
    if let Some(status) = qp.local_check(entry, op) {
        // A local error fails the queue pair after what is already on the wire.
        sq.waiting.push_back(waiting(token, op, psn, Some((status, 0))));
        qp.drain_doomed_head(sq);
        return;
    }
    let o = &qp.options;
    let timeout_ns = u64::from(o.timeout_us) * 1_000;
    let now_ns = qp.node.clock.now_ns();
    let msg = super::qp::message(qp.node.id, peer_node, qp.qpn, psn, op, entry.buf.len());
    if broken {
        let after_ns = (u64::from(o.retry_count) + 1) * timeout_ns;
        sq.waiting.push_back(waiting(token, op, psn, Some((WcStatus::RetryExceeded, after_ns))));
        qp.drain_doomed_head(sq);
        return;
    }
    let doomed_ahead = sq.waiting.iter().any(|w| w.doomed.is_some());
    let delay_ns = match qp.node.model.transmit(msg, now_ns, o.retry_count, timeout_ns) {
        Fate::Delivered { delay_ns, .. } => delay_ns,
        Fate::Lost { after_ns } => {
            sq.waiting.push_back(waiting(token, op, psn, Some((WcStatus::RetryExceeded, after_ns))));
            qp.drain_doomed_head(sq);
            return;
        }
    };
    if doomed_ahead {
        // Behind a lost request nothing more goes out: the queue pair is about to fail.
        sq.waiting.push_back(waiting(token, op, psn, None));
        return;
    }
    let buf = &entry.buf;
    let (kind, imm, remote, arg0, arg1) = match op {
        Op::Write { remote, imm } => (Kind::Write, imm, remote, 0, 0),
        Op::Read { remote } => (Kind::Read, None, remote, 0, 0),
        Op::CompareSwap { remote, compare, swap } => (Kind::CompareSwap, None, remote, compare, swap),
        Op::FetchAdd { remote, add } => (Kind::FetchAdd, None, remote, add, 0),
        Op::Send => (Kind::Send, None, RemoteAddr { addr: 0, rkey: 0 }, 0, 0),
    };
    let req = Request {
        kind,
        imm,
        len: buf.len() as u32,
        psn,
        addr: remote.addr,
        rkey: remote.rkey,
        delay_us: (delay_ns / 1_000).min(u64::from(u32::MAX)) as u32,
        arg0,
        arg1,
    };
    let payload_len = req.payload_len();
    let mut frame = std::mem::take(&mut sq.frame);
    frame.clear();
    frame.resize(request::HEADER_LEN + payload_len, 0);
    req.emit(&mut frame);
    let _ = buf.region().memory().read(buf.offset(), &mut frame[request::HEADER_LEN..]);
    sq.waiting.push_back(waiting(token, op, psn, None));
    let Link::Tcp { stream, .. } = &mut sq.link else { unreachable!("TCP link") };
    let sent = stream.write_all(&frame);
    sq.frame = frame;
    if sent.is_err() {
        // The reader thread sees the same broken connection and fails the queue pair.
        let Link::Tcp { stream, .. } = &sq.link else { unreachable!("TCP link") };
        let _ = stream.shutdown(Shutdown::Both);
    }
}

fn waiting(token: u64, op: Op, psn: u32, doomed: Option<(WcStatus, u64)>) -> Waiting {
    Waiting { token, op, psn, deadline_ns: 0, doomed, transit: Transit::Now }
}

/// The requester's reader: completes requests in order from the peer's responses.
fn read_responses(stream: TcpStream, qp: Weak<QpInner>, conn: u64) {
    // Buffered: a response header and its READ data arrive together, so read them with
    // one syscall (a partial read of a segment costs a whole extra wake-up).
    let mut stream = std::io::BufReader::with_capacity(64 * 1024, stream);
    let mut header = [0u8; response::HEADER_LEN];
    let mut data = Vec::new();
    loop {
        let got = stream
            .read_exact(&mut header)
            .map_err(io("read response"))
            .and_then(|()| Response::parse(&header))
            .and_then(|r| {
                data.resize(r.len as usize, 0);
                stream.read_exact(&mut data).map_err(io("read response data"))?;
                Ok(r)
            });
        let Some(qp) = qp.upgrade() else { return };
        let mut sq = qp.lock_sq();
        if !matches!(sq.link, Link::Tcp { conn: c, .. } if c == conn) {
            return; // the queue pair was reset or reconnected: this connection is stale
        }
        let Ok(resp) = got else {
            // Connection lost: the head request times out, the rest are flushed; with
            // nothing outstanding, the next request will.
            match sq.waiting.pop_front() {
                Some(head) => {
                    qp.complete_send(&mut sq, head.token, WcStatus::RetryExceeded, 0, 0);
                    qp.fail(&mut sq);
                }
                None => {
                    if let Link::Tcp { broken, .. } = &mut sq.link {
                        *broken = true;
                    }
                }
            }
            return;
        };
        let Some(head) = sq.waiting.pop_front() else {
            qp.fail(&mut sq);
            return;
        };
        if head.psn != resp.psn {
            qp.complete_send(&mut sq, head.token, WcStatus::Other(u32::MAX), 0, 0);
            qp.fail(&mut sq);
            return;
        }
        let status = match resp.status {
            Status::Ok => WcStatus::Success,
            Status::RemoteAccess => WcStatus::RemoteAccess,
            Status::InvalidRequest => WcStatus::RemoteInvalidRequest,
            Status::RnrExceeded => WcStatus::RnrRetryExceeded,
            Status::RemoteOperation => WcStatus::RemoteOperation,
        };
        if let (Op::Read { .. }, WcStatus::Success) = (head.op, status) {
            if let Some(entry) = sq.inflight.get(head.token) {
                let fits = data.len() == entry.buf.len();
                let _ = fits && entry.buf.region().memory().write(entry.buf.offset(), &data).is_ok();
            }
        }
        qp.complete_send(&mut sq, head.token, status, resp.value, 0);
        if status != WcStatus::Success {
            qp.fail(&mut sq);
            return;
        }
        qp.drain_doomed_head(&mut sq);
    }
}

/// The responder for one incoming connection.
fn serve(mut stream: TcpStream, node: Weak<NodeInner>) {
    let mut hb = [0u8; hello::LEN];
    let Ok(h) = stream.read_exact(&mut hb).map_err(io("read hello")).and_then(|()| Hello::parse(&hb)) else {
        return;
    };
    let Some(n) = node.upgrade() else { return };
    let found = n.qp::<QpInner>(h.dst_qpn).map(|qp| Arc::downgrade(&qp));
    let mut ack = [0u8; 8];
    ack[0..4].copy_from_slice(&u32::from(found.is_none()).to_le_bytes());
    ack[4..8].copy_from_slice(&n.id.to_le_bytes());
    drop(n);
    let _ = stream.write_all(&ack);
    let Some(target) = found else { return };
    let mut header = [0u8; request::HEADER_LEN];
    let mut payload = Vec::new();
    let mut out = Vec::with_capacity(response::HEADER_LEN);
    // One read syscall per request where header and payload arrive together.
    let Ok(mut reader) = stream.try_clone().map(|s| std::io::BufReader::with_capacity(64 * 1024, s)) else {
        return;
    };
    while reader.read_exact(&mut header).is_ok() {
        let Ok(req) = Request::parse(&header) else {
            break;
        };
        payload.resize(req.payload_len(), 0);
        if reader.read_exact(&mut payload).is_err() {
            break;
        }
        if req.delay_us > 0 {
            std::thread::sleep(Duration::from_micros(u64::from(req.delay_us)));
        }
        let Some(qp) = target.upgrade() else { break };
        if !qp.wait_until_ready(Duration::from_micros(u64::from(h.ready_wait_us))) {
            break; // silence: the requester's retries run out
        }
        out.clear();
        out.resize(response::HEADER_LEN, 0);
        let mut received = None;
        let mut result = run(&qp, &req, &payload, &mut out, &mut received);
        if result == Err(Nak::ReceiverNotReady) && qp.wait_for_receive(Duration::from_micros(u64::from(h.rnr_wait_us)))
        {
            out.truncate(response::HEADER_LEN);
            result = run(&qp, &req, &payload, &mut out, &mut received);
        }
        let (status, value) = match result {
            Ok(v) => (Status::Ok, v),
            Err(Nak::Silent) => break,
            Err(Nak::ReceiverNotReady) => (Status::RnrExceeded, 0),
            Err(Nak::RemoteAccess) => (Status::RemoteAccess, 0),
            Err(Nak::InvalidRequest) => (Status::InvalidRequest, 0),
        };
        if status != Status::Ok {
            out.truncate(response::HEADER_LEN);
        }
        let len = (out.len() - response::HEADER_LEN) as u32;
        debug_assert!(len as usize <= MESSAGE_BYTES_MAX);
        Response { status, len, psn: req.psn, value }.emit(&mut out);
        let sent = stream.write_all(&out);
        if let Some(c) = received.take() {
            qp.recv.publish(c);
        }
        if sent.is_err() {
            break;
        }
    }
    let _ = stream.shutdown(Shutdown::Both);
}

fn run(
    qp: &QpInner,
    req: &Request,
    payload: &[u8],
    out: &mut Vec<u8>,
    received: &mut Option<Completion>,
) -> std::result::Result<u64, Nak> {
    let remote = RemoteAddr { addr: req.addr, rkey: req.rkey };
    let len = req.len as usize;
    let incoming = match req.kind {
        Kind::Write => Incoming::Write { remote, len, imm: req.imm, payload: Payload::Bytes(payload) },
        Kind::Read => Incoming::Read { remote, len, sink: Sink::Bytes(out) },
        Kind::CompareSwap => Incoming::CompareSwap { remote, compare: req.arg0, swap: req.arg1 },
        Kind::FetchAdd => Incoming::FetchAdd { remote, add: req.arg0 },
        Kind::Send => Incoming::Send { len, imm: req.imm, payload: Payload::Bytes(payload) },
    };
    execute(qp.target(), None, incoming, 0, Some(received))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fabric::emu::context::gid_of;
    use std::net::Ipv4Addr;

    #[test]
    fn endpoint_addresses_round_trip() {
        let ep = Endpoint { gid: gid_of(IpAddr::V4(Ipv4Addr::LOCALHOST)), qpn: 1, psn: 0, lid: 0, port: 4242 };
        assert_eq!(addr_of(&ep), "127.0.0.1:4242".parse().unwrap());
    }
}
