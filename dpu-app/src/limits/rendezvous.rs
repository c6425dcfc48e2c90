//! The rendezvous (`cluster/run/rendezvous.rs`): how many Hellos its mailboxes queue, how
//! many connections and frames a listener reads, and how long each of its waits lasts.
//! Hellos are best effort and offers are sent again on a timer (`OFFER_RETRY_NS`), so
//! these bound what a flood or a stalled peer costs a node, not whether a link forms.
#![forbid(unsafe_code)]

use std::time::Duration;

use super::NODES_MAX;

/// Hellos one node's queue on a
/// [`LocalBoard`](crate::cluster::run::rendezvous::LocalBoard) holds; more are dropped
/// and counted. Every other node's Hello fits at once (checked below), and several
/// rounds of offers more while a node's loop is busy elsewhere.
pub const LOCAL_QUEUE_HELLOS: usize = 256;
/// Received Hellos a [`TcpMailbox`](crate::cluster::run::rendezvous::TcpMailbox) holds
/// until [`Mailbox::try_recv`](crate::cluster::protocol::mailbox::Mailbox::try_recv)
/// takes them; more are dropped and counted. As [`LOCAL_QUEUE_HELLOS`]: a round of every
/// other node's offers fits, and several more.
pub const INBOX_HELLOS: usize = 256;
/// Hellos a [`TcpMailbox`](crate::cluster::run::rendezvous::TcpMailbox) holds for its
/// sender thread; more are refused with
/// [`RendezvousError::OutboxFull`](crate::cluster::protocol::mailbox::RendezvousError::OutboxFull).
/// The one sender writes them in turn, each within [`RENDEZVOUS_CONNECT_TIMEOUT`] and
/// [`RENDEZVOUS_WRITE_TIMEOUT`]; one round of offers to every other node fits at once.
pub const OUTBOX_HELLOS: usize = 256;
/// Connections a [`TcpMailbox`](crate::cluster::run::rendezvous::TcpMailbox) listener
/// reads at once, each on its own thread; more are closed unread. A sender connects,
/// writes one frame and closes, so connections are short: 16 threads take the peers'
/// offers as they come, and a flood of idle connections costs at most 16 threads.
pub const RENDEZVOUS_CONNECTIONS_MAX: usize = 16;
/// Frames read from one connection before it is closed: a sender writes one, so a peer
/// that keeps writing holds a reader thread for at most 16 frames.
pub const RENDEZVOUS_FRAMES_PER_CONNECTION_MAX: usize = 16;
/// Longest wait for the whole of one 256-byte frame on a connection: far longer than a
/// frame takes on any network, so only a stalled or hostile peer reaches it, and it
/// frees its reader thread after a second.
pub const RENDEZVOUS_FRAME_TIMEOUT: Duration = Duration::from_secs(1);
/// How often the listener and connection threads look at the stop flag (they read and
/// accept in slices this long): how late they stop after their mailbox drops.
pub const RENDEZVOUS_POLL_SLICE: Duration = Duration::from_millis(20);
/// Longest wait to connect to a peer's listener: the one sender thread sends in turn,
/// so an unreachable peer delays the Hellos queued behind it by at most this (the lost
/// Hello is offered again on the node's timer).
pub const RENDEZVOUS_CONNECT_TIMEOUT: Duration = Duration::from_millis(250);
/// Longest wait to write one frame to a peer, for the same reason as
/// [`RENDEZVOUS_CONNECT_TIMEOUT`].
pub const RENDEZVOUS_WRITE_TIMEOUT: Duration = Duration::from_millis(250);

// Every other node's Hello fits a node's queue at once: one round of offers is never lost.
const _: () = assert!(LOCAL_QUEUE_HELLOS >= NODES_MAX - 1 && INBOX_HELLOS >= NODES_MAX - 1);
const _: () = assert!(OUTBOX_HELLOS >= NODES_MAX - 1);
const _: () = assert!(RENDEZVOUS_CONNECTIONS_MAX >= 1 && RENDEZVOUS_FRAMES_PER_CONNECTION_MAX >= 1);
const _: () = assert!(RENDEZVOUS_POLL_SLICE.as_nanos() < RENDEZVOUS_FRAME_TIMEOUT.as_nanos());
