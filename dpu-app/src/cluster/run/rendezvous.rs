//! The rendezvous: how Hellos travel between cluster nodes before any queue pair exists.
//!
//! A node polls its [`Mailbox`] from its single-threaded loop, so both ends are
//! non-blocking: [`Mailbox::send`] hands a Hello over or fails at once, and
//! [`Mailbox::try_recv`] returns what has arrived. Delivery is best effort - a full queue,
//! an unreachable peer or a damaged frame loses the Hello - and the node retries its
//! offers on a timer, so nothing here retries.
//!
//! - [`LocalBoard`]: in-process delivery through one bounded FIFO queue per node, with no
//!   threads, so an in-process cluster or the simulator replays exactly.
//! - [`TcpMailbox`]: a listener thread takes whole 256-byte frames from short-lived
//!   connections and forwards the Hellos that pass [`Hello::new_checked`]; a sender thread
//!   connects, writes one frame and closes. Every queue, connection count, frame count and
//!   wait is bounded by its limit (`limits/rendezvous.rs`); both threads stop when the
//!   mailbox drops.
//!
//! Outgoing Hellos are checked too ([`HelloRepr::to_frame`]): a Hello its receiver would
//! refuse is an error at the sender.

use std::collections::VecDeque;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

use crossbeam_channel::{Receiver, Sender, TrySendError};

use crate::cluster::format::hello::{Hello, HelloRepr, HELLO_BYTES};
pub use crate::cluster::protocol::mailbox::{Mailbox, RendezvousError};
use crate::limits::{
    INBOX_HELLOS, LOCAL_QUEUE_HELLOS, NODES_MAX, OUTBOX_HELLOS, RENDEZVOUS_CONNECTIONS_MAX, RENDEZVOUS_CONNECT_TIMEOUT,
    RENDEZVOUS_FRAMES_PER_CONNECTION_MAX, RENDEZVOUS_FRAME_TIMEOUT, RENDEZVOUS_POLL_SLICE, RENDEZVOUS_WRITE_TIMEOUT,
};

/// Checks that `hello` goes from `me` to `to` and would pass its receiver's checks.
fn outgoing(me: u8, to: u8, hello: &HelloRepr) -> Result<[u8; HELLO_BYTES], RendezvousError> {
    if hello.from != me || hello.to != to {
        return Err(RendezvousError::Misaddressed { me, to, from: hello.from, hello_to: hello.to });
    }
    Ok(hello.to_frame()?)
}

/// Whether a hello from one node reaches another (false: the network between them is
/// cut, and the hello is lost as the rendezvous's connection would be).
pub type Reachable = Arc<dyn Fn(u8, u8) -> bool + Send + Sync>;

/// In-process delivery: one bounded FIFO queue per node, shared by every node's
/// [`LocalMailbox`]. No threads and no clock: the same sends give the same receives.
pub struct LocalBoard {
    queues: Vec<Mutex<VecDeque<HelloRepr>>>,
    /// Each queue's length as of its last change: an empty mailbox, which a serving
    /// loop looks at every round, is seen without taking its lock.
    lengths: Vec<AtomicUsize>,
    reachable: Reachable,
}

impl std::fmt::Debug for LocalBoard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalBoard").field("queues", &self.queues).finish_non_exhaustive()
    }
}

impl LocalBoard {
    /// The mailboxes of nodes `0..nodes`, in node order.
    ///
    /// # Panics
    /// If `nodes` exceeds [`NODES_MAX`] (node ids are one byte): a programmer error.
    #[allow(clippy::new_ret_no_self)] // The board itself is only ever reached through its mailboxes.
    pub fn new(nodes: usize) -> Vec<LocalMailbox> {
        Self::with_links(nodes, Arc::new(|_, _| true))
    }

    /// The mailboxes of nodes `0..nodes`, where a hello from `a` to `b` is lost while
    /// `reachable(a, b)` is false: an emulated network's partitions cut the rendezvous
    /// too, as a cut cable would.
    ///
    /// # Panics
    /// As [`LocalBoard::new`].
    pub fn with_links(nodes: usize, reachable: Reachable) -> Vec<LocalMailbox> {
        assert!(nodes <= NODES_MAX, "a cluster has at most {NODES_MAX} nodes, not {nodes}");
        let board = Arc::new(LocalBoard {
            queues: (0..nodes).map(|_| Mutex::new(VecDeque::with_capacity(LOCAL_QUEUE_HELLOS))).collect(),
            lengths: (0..nodes).map(|_| AtomicUsize::new(0)).collect(),
            reachable,
        });
        (0..nodes).map(|me| LocalMailbox { me: me as u8, board: Arc::clone(&board), dropped: 0 }).collect()
    }

    fn queue(&self, node: u8) -> Option<std::sync::MutexGuard<'_, VecDeque<HelloRepr>>> {
        Some(self.queues.get(usize::from(node))?.lock().expect("local board lock"))
    }
}

/// One node's mailbox on a [`LocalBoard`].
#[derive(Debug)]
pub struct LocalMailbox {
    me: u8,
    board: Arc<LocalBoard>,
    dropped: u64,
}

impl LocalMailbox {
    /// This node's id.
    pub fn me(&self) -> u8 {
        self.me
    }

    /// Hellos this mailbox sent that were dropped because the destination's queue was
    /// full or the network to it was cut.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }
}

impl Mailbox for LocalMailbox {
    fn send(&mut self, to: u8, hello: &HelloRepr) -> Result<(), RendezvousError> {
        let mut queue = self.board.queue(to).ok_or(RendezvousError::UnknownPeer { me: self.me, to })?;
        outgoing(self.me, to, hello)?;
        if queue.len() >= LOCAL_QUEUE_HELLOS || !(self.board.reachable)(self.me, to) {
            // A full queue or a cut link is a lost message, as on a network: the
            // sender retries.
            self.dropped += 1;
            return Ok(());
        }
        queue.push_back(*hello);
        self.board.lengths[usize::from(to)].store(queue.len(), Ordering::Release);
        Ok(())
    }

    fn try_recv(&mut self) -> Option<HelloRepr> {
        // Acquire: pairs with the sender's store, made under the queue's lock after its push.
        if self.board.lengths[usize::from(self.me)].load(Ordering::Acquire) == 0 {
            return None;
        }
        let mut queue = self.board.queue(self.me).expect("a mailbox's own queue exists");
        let hello = queue.pop_front();
        self.board.lengths[usize::from(self.me)].store(queue.len(), Ordering::Release);
        hello
    }
}

/// What a [`TcpMailbox`] has done so far (counts since it was bound).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TcpMailboxStats {
    /// Frames written whole to a peer.
    pub sent: u64,
    /// Frames not delivered: the connection or the write failed (logged at debug).
    pub send_failures: u64,
    /// Hellos received and queued for [`Mailbox::try_recv`].
    pub received: u64,
    /// Frames refused: damaged, foreign, partial, or addressed to another node.
    pub refused_frames: u64,
    /// Valid Hellos dropped because the inbox was full.
    pub inbox_full: u64,
    /// Connections closed unread because [`RENDEZVOUS_CONNECTIONS_MAX`] were being read.
    pub refused_connections: u64,
}

#[derive(Default)]
struct Counters {
    sent: AtomicU64,
    send_failures: AtomicU64,
    received: AtomicU64,
    refused_frames: AtomicU64,
    inbox_full: AtomicU64,
    refused_connections: AtomicU64,
}

fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

struct Shared {
    stop: AtomicBool,
    counters: Counters,
}

/// A frame on its way to a peer.
type Outgoing = (SocketAddr, [u8; HELLO_BYTES]);

/// Hellos over TCP: each Hello is one short connection carrying one 256-byte frame.
pub struct TcpMailbox {
    me: u8,
    local_addr: SocketAddr,
    peers: Vec<(u8, SocketAddr)>,
    inbox: Receiver<HelloRepr>,
    /// `None` only while dropping: closing it stops the sender thread.
    outbox: Option<Sender<Outgoing>>,
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
}

impl std::fmt::Debug for TcpMailbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TcpMailbox").field("me", &self.me).field("local_addr", &self.local_addr).finish()
    }
}

impl TcpMailbox {
    /// Node `me`'s mailbox, listening on `listen` (port 0 picks a free port: see
    /// [`Self::local_addr`]) and sending to `peers` (node id, listening address).
    pub fn bind(me: u8, listen: SocketAddr, peers: Vec<(u8, SocketAddr)>) -> Result<Self, RendezvousError> {
        for (i, &(node, _)) in peers.iter().enumerate() {
            if node == me {
                return Err(RendezvousError::Peers { me, node, reason: "is this node itself" });
            }
            if peers[..i].iter().any(|&(n, _)| n == node) {
                return Err(RendezvousError::Peers { me, node, reason: "is listed twice" });
            }
        }
        let bind_err = |source| RendezvousError::Bind { addr: listen, source };
        let listener = TcpListener::bind(listen).map_err(bind_err)?;
        let local_addr = listener.local_addr().map_err(bind_err)?;
        // Non-blocking accepts let the listener notice the stop flag.
        listener.set_nonblocking(true).map_err(bind_err)?;
        let (inbox_tx, inbox) = crossbeam_channel::bounded(INBOX_HELLOS);
        let (outbox, outbox_rx) = crossbeam_channel::bounded(OUTBOX_HELLOS);
        let shared = Arc::new(Shared { stop: AtomicBool::new(false), counters: Counters::default() });
        let mut mailbox = Self {
            me,
            local_addr,
            peers,
            inbox,
            outbox: Some(outbox),
            shared: Arc::clone(&shared),
            threads: Vec::new(),
        };
        let spawn_err = |what| move |source| RendezvousError::Spawn { what, source };
        let s = Arc::clone(&shared);
        let listen_thread = std::thread::Builder::new()
            .name(format!("rendezvous-listen-{me}"))
            .spawn(move || listen_loop(listener, me, inbox_tx, s))
            .map_err(spawn_err("listener"))?;
        mailbox.threads.push(listen_thread);
        let send_thread = std::thread::Builder::new()
            .name(format!("rendezvous-send-{me}"))
            .spawn(move || send_loop(outbox_rx, shared))
            .map_err(spawn_err("sender"))?;
        mailbox.threads.push(send_thread);
        Ok(mailbox)
    }

    /// The address the listener is bound to (the real port after a port-0 bind).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// This node's id.
    pub fn me(&self) -> u8 {
        self.me
    }

    /// Sets (or replaces: a restarted peer may listen elsewhere) the address of node
    /// `node`.
    pub fn set_peer(&mut self, node: u8, addr: SocketAddr) -> Result<(), RendezvousError> {
        if node == self.me {
            return Err(RendezvousError::Peers { me: self.me, node, reason: "is this node itself" });
        }
        match self.peers.iter_mut().find(|(n, _)| *n == node) {
            Some(entry) => entry.1 = addr,
            None => self.peers.push((node, addr)),
        }
        Ok(())
    }

    /// Counts since the mailbox was bound.
    pub fn stats(&self) -> TcpMailboxStats {
        let c = &self.shared.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        TcpMailboxStats {
            sent: get(&c.sent),
            send_failures: get(&c.send_failures),
            received: get(&c.received),
            refused_frames: get(&c.refused_frames),
            inbox_full: get(&c.inbox_full),
            refused_connections: get(&c.refused_connections),
        }
    }
}

impl Mailbox for TcpMailbox {
    fn send(&mut self, to: u8, hello: &HelloRepr) -> Result<(), RendezvousError> {
        let me = self.me;
        let &(_, addr) = self.peers.iter().find(|(n, _)| *n == to).ok_or(RendezvousError::UnknownPeer { me, to })?;
        let frame = outgoing(me, to, hello)?;
        let outbox = self.outbox.as_ref().ok_or(RendezvousError::Stopped)?;
        outbox.try_send((addr, frame)).map_err(|e| match e {
            TrySendError::Full(_) => RendezvousError::OutboxFull { depth: OUTBOX_HELLOS },
            TrySendError::Disconnected(_) => RendezvousError::Stopped,
        })
    }

    fn try_recv(&mut self) -> Option<HelloRepr> {
        self.inbox.try_recv().ok()
    }
}

impl Drop for TcpMailbox {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        // Closing the outbox wakes the sender thread if it waits for work.
        self.outbox = None;
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// The listener thread: accepts connections and reads each on its own thread, at most
/// [`RENDEZVOUS_CONNECTIONS_MAX`] at once; on stop, waits for them.
fn listen_loop(listener: TcpListener, me: u8, inbox: Sender<HelloRepr>, shared: Arc<Shared>) {
    let mut readers: Vec<JoinHandle<()>> = Vec::with_capacity(RENDEZVOUS_CONNECTIONS_MAX);
    while !shared.stop.load(Ordering::Acquire) {
        let (stream, peer) = match listener.accept() {
            Ok(accepted) => accepted,
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                std::thread::sleep(RENDEZVOUS_POLL_SLICE);
                continue;
            }
            Err(e) => {
                // Out of descriptors, a connection reset before accept: wait and go on.
                tracing::debug!(error = %e, "rendezvous accept failed");
                std::thread::sleep(RENDEZVOUS_POLL_SLICE);
                continue;
            }
        };
        readers.retain(|r| !r.is_finished());
        if readers.len() >= RENDEZVOUS_CONNECTIONS_MAX {
            bump(&shared.counters.refused_connections);
            tracing::warn!(%peer, limit = RENDEZVOUS_CONNECTIONS_MAX, "rendezvous connection refused: too many at once");
            continue;
        }
        let (inbox, s) = (inbox.clone(), Arc::clone(&shared));
        let spawned = std::thread::Builder::new()
            .name(format!("rendezvous-read-{me}"))
            .spawn(move || read_connection(stream, peer, me, &inbox, &s));
        match spawned {
            Ok(r) => readers.push(r),
            Err(e) => {
                bump(&shared.counters.refused_connections);
                tracing::warn!(%peer, error = %e, "rendezvous connection refused: cannot start its reader");
            }
        }
    }
    for r in readers {
        let _ = r.join();
    }
}

/// What reading one frame came to.
enum Frame {
    /// A whole frame is in the buffer.
    Whole,
    /// The connection ended (or the mailbox stops) before the first byte of a frame.
    End,
    /// The connection broke off inside a frame, or the frame took too long.
    Broken(&'static str),
}

/// Reads one whole frame, waiting at most [`RENDEZVOUS_FRAME_TIMEOUT`] for it.
fn read_frame(stream: &mut TcpStream, frame: &mut [u8; HELLO_BYTES], stop: &AtomicBool) -> Frame {
    let deadline = Instant::now() + RENDEZVOUS_FRAME_TIMEOUT;
    let mut filled = 0;
    while filled < HELLO_BYTES {
        if stop.load(Ordering::Acquire) {
            return Frame::End;
        }
        match stream.read(&mut frame[filled..]) {
            Ok(0) if filled == 0 => return Frame::End,
            Ok(0) => return Frame::Broken("connection closed inside a frame"),
            Ok(n) => filled += n,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted) => {
                if Instant::now() >= deadline {
                    return if filled == 0 { Frame::End } else { Frame::Broken("no whole frame within the timeout") };
                }
            }
            Err(_) => return Frame::Broken("read failed"),
        }
    }
    Frame::Whole
}

/// One connection: up to [`RENDEZVOUS_FRAMES_PER_CONNECTION_MAX`] frames, each checked; the first
/// bad frame closes it (its stream can no longer be trusted to be framed).
fn read_connection(mut stream: TcpStream, peer: SocketAddr, me: u8, inbox: &Sender<HelloRepr>, shared: &Shared) {
    let c = &shared.counters;
    // Short reads, so that the thread notices the stop flag; the frame deadline bounds the
    // whole wait. Accepted sockets may inherit the listener's non-blocking mode.
    if stream.set_nonblocking(false).and_then(|()| stream.set_read_timeout(Some(RENDEZVOUS_POLL_SLICE))).is_err() {
        return;
    }
    let mut frame = [0u8; HELLO_BYTES];
    for _ in 0..RENDEZVOUS_FRAMES_PER_CONNECTION_MAX {
        match read_frame(&mut stream, &mut frame, &shared.stop) {
            Frame::Whole => {}
            Frame::End => return,
            Frame::Broken(why) => {
                bump(&c.refused_frames);
                tracing::warn!(%peer, why, "dropped a partial hello frame");
                return;
            }
        }
        let hello = match Hello::new_checked(&frame[..]).and_then(|h| HelloRepr::parse(&h)) {
            Ok(h) => h,
            Err(error) => {
                bump(&c.refused_frames);
                tracing::warn!(%peer, %error, "dropped a bad hello frame");
                return;
            }
        };
        if hello.to != me {
            bump(&c.refused_frames);
            tracing::warn!(%peer, from = hello.from, to = hello.to, me, "dropped a hello addressed to another node");
            continue;
        }
        match inbox.try_send(hello) {
            Ok(()) => bump(&c.received),
            Err(TrySendError::Full(_)) => {
                bump(&c.inbox_full);
                tracing::warn!(%peer, from = hello.from, depth = INBOX_HELLOS, "hello inbox full; dropped a hello");
            }
            Err(TrySendError::Disconnected(_)) => return,
        }
    }
    tracing::debug!(%peer, limit = RENDEZVOUS_FRAMES_PER_CONNECTION_MAX, "rendezvous connection closed at its frame limit");
}

/// The sender thread: one short connection per frame, until the outbox closes or the
/// mailbox stops.
fn send_loop(outbox: Receiver<Outgoing>, shared: Arc<Shared>) {
    let c = &shared.counters;
    for (addr, frame) in outbox.iter() {
        if shared.stop.load(Ordering::Acquire) {
            return;
        }
        let written = TcpStream::connect_timeout(&addr, RENDEZVOUS_CONNECT_TIMEOUT).and_then(|mut s| {
            s.set_write_timeout(Some(RENDEZVOUS_WRITE_TIMEOUT))?;
            s.set_nodelay(true)?;
            s.write_all(&frame)
        });
        match written {
            Ok(()) => bump(&c.sent),
            Err(error) => {
                bump(&c.send_failures);
                tracing::debug!(peer = %addr, %error, "hello not delivered; the node retries its offers");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::cluster::format::hello::tests::repr;
    use crate::cluster::format::hello::{HelloError, HelloKind};

    const ARRIVAL: Duration = Duration::from_secs(10);

    fn hello(from: u8, to: u8, incarnation: u32) -> HelloRepr {
        let kind = if from < to { HelloKind::Offer } else { HelloKind::Answer };
        HelloRepr { from, to, kind, incarnation, ..repr() }
    }

    fn loopback() -> SocketAddr {
        "127.0.0.1:0".parse().unwrap()
    }

    /// The next Hello at `mailbox`, waiting up to 10 s (a generous bound, not a timing).
    fn next(mailbox: &mut TcpMailbox) -> HelloRepr {
        let deadline = Instant::now() + ARRIVAL;
        loop {
            if let Some(h) = mailbox.try_recv() {
                return h;
            }
            assert!(Instant::now() < deadline, "no hello within {ARRIVAL:?}: {:?}", mailbox.stats());
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Waits up to 10 s for `done` to hold of `mailbox`'s stats.
    fn eventually(mailbox: &TcpMailbox, done: impl Fn(&TcpMailboxStats) -> bool) {
        let deadline = Instant::now() + ARRIVAL;
        while !done(&mailbox.stats()) {
            assert!(Instant::now() < deadline, "stats never got there: {:?}", mailbox.stats());
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn a_local_board_loses_hellos_across_a_cut_both_ways_until_it_heals() {
        let cut = Arc::new(AtomicBool::new(true));
        let c = Arc::clone(&cut);
        let reachable: Reachable = Arc::new(move |a, b| !(c.load(Ordering::Relaxed) && a.min(b) == 0 && a.max(b) == 1));
        let mut boxes = LocalBoard::with_links(3, reachable);
        boxes[0].send(1, &hello(0, 1, 1)).unwrap();
        boxes[1].send(0, &hello(1, 0, 1)).unwrap();
        boxes[0].send(2, &hello(0, 2, 1)).unwrap();
        assert_eq!((boxes[0].dropped(), boxes[1].dropped()), (1, 1), "lost and counted, as a full queue's");
        assert_eq!(boxes[1].try_recv(), None);
        assert_eq!(boxes[0].try_recv(), None);
        assert_eq!(boxes[2].try_recv(), Some(hello(0, 2, 1)), "an uncut link delivers");
        cut.store(false, Ordering::Relaxed);
        boxes[0].send(1, &hello(0, 1, 2)).unwrap();
        assert_eq!(boxes[1].try_recv(), Some(hello(0, 1, 2)), "healed");
    }

    #[test]
    fn local_board_is_fifo_and_bounded() {
        let mut boxes = LocalBoard::new(3);
        let total = LOCAL_QUEUE_HELLOS as u32 + 5;
        for i in 1..=total {
            boxes[0].send(2, &hello(0, 2, i)).unwrap();
        }
        assert_eq!(boxes[0].dropped(), 5, "a full queue drops and counts");
        boxes[1].send(2, &hello(1, 2, 99)).unwrap();
        assert_eq!(boxes[1].dropped(), 1);
        assert_eq!(boxes[1].try_recv(), None, "nothing for node 1");
        for i in 1..=LOCAL_QUEUE_HELLOS as u32 {
            assert_eq!(boxes[2].try_recv().map(|h| (h.from, h.incarnation)), Some((0, i)), "in send order");
        }
        assert_eq!(boxes[2].try_recv(), None);
        boxes[1].send(2, &hello(1, 2, 100)).unwrap();
        boxes[2].send(1, &hello(2, 1, 7)).unwrap();
        assert_eq!(boxes[2].try_recv(), Some(hello(1, 2, 100)), "room again once drained");
        assert_eq!(boxes[1].try_recv(), Some(hello(2, 1, 7)));
        assert_eq!(boxes.iter().map(LocalMailbox::me).collect::<Vec<_>>(), [0, 1, 2]);
    }

    #[test]
    fn mailboxes_refuse_what_they_cannot_deliver() {
        let mut boxes = LocalBoard::new(2);
        assert!(matches!(boxes[0].send(2, &hello(0, 2, 1)), Err(RendezvousError::UnknownPeer { me: 0, to: 2 })));
        assert!(matches!(boxes[0].send(1, &hello(1, 0, 1)), Err(RendezvousError::Misaddressed { .. })));
        let too_big = HelloRepr { directory_slots: u32::MAX, ..hello(0, 1, 1) };
        assert!(matches!(boxes[0].send(1, &too_big), Err(RendezvousError::Hello(HelloError::Field { .. }))));
        assert_eq!(boxes[1].try_recv(), None, "nothing refused was queued");

        let mut tcp = TcpMailbox::bind(1, loopback(), vec![(2, loopback())]).unwrap();
        assert!(matches!(tcp.send(3, &hello(1, 3, 1)), Err(RendezvousError::UnknownPeer { me: 1, to: 3 })));
        assert!(matches!(tcp.send(2, &hello(1, 3, 1)), Err(RendezvousError::Misaddressed { .. })));
        assert!(matches!(
            TcpMailbox::bind(1, loopback(), vec![(1, loopback())]),
            Err(RendezvousError::Peers { node: 1, .. })
        ));
        assert!(matches!(
            TcpMailbox::bind(1, loopback(), vec![(2, loopback()), (2, loopback())]),
            Err(RendezvousError::Peers { node: 2, .. })
        ));
        assert!(matches!(tcp.set_peer(1, loopback()), Err(RendezvousError::Peers { .. })));
    }

    #[test]
    fn two_tcp_mailboxes_exchange_hellos_both_ways() {
        let mut a = TcpMailbox::bind(1, loopback(), vec![]).unwrap();
        let mut b = TcpMailbox::bind(2, loopback(), vec![(1, a.local_addr())]).unwrap();
        a.set_peer(2, b.local_addr()).unwrap();
        let offer = hello(1, 2, 11);
        a.send(2, &offer).unwrap();
        assert_eq!(next(&mut b), offer);
        let answer = hello(2, 1, 22);
        b.send(1, &answer).unwrap();
        assert_eq!(next(&mut a), answer);
        // Several in a row, both ways at once.
        for i in 0..8 {
            a.send(2, &hello(1, 2, 100 + i)).unwrap();
            b.send(1, &hello(2, 1, 200 + i)).unwrap();
        }
        let mut at_b: Vec<u32> = (0..8).map(|_| next(&mut b).incarnation).collect();
        let mut at_a: Vec<u32> = (0..8).map(|_| next(&mut a).incarnation).collect();
        at_b.sort_unstable();
        at_a.sort_unstable();
        assert_eq!(at_b, (100..108).collect::<Vec<_>>());
        assert_eq!(at_a, (200..208).collect::<Vec<_>>());
        eventually(&a, |s| s.sent == 9 && s.received == 9 && s.refused_frames == 0);
        eventually(&b, |s| s.sent == 9 && s.received == 9 && s.send_failures == 0);
    }

    #[test]
    fn garbage_clients_do_not_stop_the_listener() {
        let mut a = TcpMailbox::bind(1, loopback(), vec![]).unwrap();
        let mut b = TcpMailbox::bind(2, loopback(), vec![(1, a.local_addr())]).unwrap();
        // Not a hello at all, a whole frame's worth.
        let mut garbage = TcpStream::connect(a.local_addr()).unwrap();
        garbage.write_all(&[b'G'; HELLO_BYTES + 44]).unwrap();
        // A hello cut short.
        let mut short = TcpStream::connect(a.local_addr()).unwrap();
        short.write_all(&hello(2, 1, 1).to_frame().unwrap()[..100]).unwrap();
        drop(short);
        // A hello damaged in flight.
        let mut damaged = hello(2, 1, 2).to_frame().unwrap();
        damaged[30] ^= 0x40;
        TcpStream::connect(a.local_addr()).unwrap().write_all(&damaged).unwrap();
        // A hello for another node, and a connection that says nothing.
        TcpStream::connect(a.local_addr()).unwrap().write_all(&hello(2, 3, 3).to_frame().unwrap()).unwrap();
        drop(TcpStream::connect(a.local_addr()).unwrap());
        eventually(&a, |s| s.refused_frames == 4);
        assert_eq!(a.try_recv(), None, "nothing bad got through");
        b.send(1, &hello(2, 1, 4)).unwrap();
        assert_eq!(next(&mut a), hello(2, 1, 4), "the listener still serves");
        drop(garbage);
    }

    #[test]
    fn the_listener_reads_a_bounded_number_of_connections_at_once() {
        let mut a = TcpMailbox::bind(1, loopback(), vec![]).unwrap();
        // Connections that stay silent hold a reader each until their frame times out.
        let idle: Vec<TcpStream> =
            (0..RENDEZVOUS_CONNECTIONS_MAX).map(|_| TcpStream::connect(a.local_addr()).unwrap()).collect();
        let extra = TcpStream::connect(a.local_addr()).unwrap();
        eventually(&a, |s| s.refused_connections == 1);
        drop((idle, extra));
        // Once their readers have seen them go, hellos get through again; until then a
        // hello may be refused, so send as a node would, again on a timer.
        let mut b = TcpMailbox::bind(2, loopback(), vec![(1, a.local_addr())]).unwrap();
        let deadline = Instant::now() + ARRIVAL;
        let got = loop {
            b.send(1, &hello(2, 1, 5)).unwrap();
            std::thread::sleep(Duration::from_millis(20));
            if let Some(h) = a.try_recv() {
                break h;
            }
            assert!(Instant::now() < deadline, "no hello within {ARRIVAL:?}: {:?}", a.stats());
        };
        assert_eq!(got, hello(2, 1, 5));
    }

    #[test]
    fn an_unreachable_peer_is_counted_not_fatal() {
        // A port that nobody listens on: bind one, note it, close it.
        let closed = TcpListener::bind(loopback()).unwrap().local_addr().unwrap();
        let mut a = TcpMailbox::bind(1, loopback(), vec![(2, closed)]).unwrap();
        a.send(2, &hello(1, 2, 1)).unwrap();
        eventually(&a, |s| s.send_failures == 1);
        let mut b = TcpMailbox::bind(2, loopback(), vec![]).unwrap();
        a.set_peer(2, b.local_addr()).unwrap();
        a.send(2, &hello(1, 2, 2)).unwrap();
        assert_eq!(next(&mut b), hello(1, 2, 2), "the peer's new address is used");
    }
}
