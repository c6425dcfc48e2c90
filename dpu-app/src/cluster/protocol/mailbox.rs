//! The mailbox: the one thing a node needs of the rendezvous (how Hellos travel between
//! nodes before any queue pair exists), and why handing a Hello to it can fail.
//!
//! The node and its membership role send and receive through [`Mailbox`]; the
//! mailboxes themselves (in process, over TCP) are `run::rendezvous`'s, which sits above
//! the protocol and implements this trait.

use std::net::SocketAddr;

use crate::cluster::format::hello::{HelloError, HelloRepr};

/// Why a Hello could not be handed to a mailbox, or a mailbox could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RendezvousError {
    /// The listener could not bind.
    #[error("cannot listen for hellos on {addr}: {source}; pick a free port or another address")]
    Bind {
        /// Address asked for.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// A mailbox thread could not start.
    #[error("cannot start the rendezvous {what} thread: {source}")]
    Spawn {
        /// Which thread.
        what: &'static str,
        /// Why.
        source: std::io::Error,
    },
    /// The peer list is unusable.
    #[error("rendezvous peer list of node {me}: node {node} {reason}; fix the cluster configuration")]
    Peers {
        /// This node.
        me: u8,
        /// The offending entry.
        node: u8,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// No address is known for the node a Hello is sent to.
    #[error("node {me} has no rendezvous address for node {to}; add it to the peer list")]
    UnknownPeer {
        /// This node.
        me: u8,
        /// Destination asked for.
        to: u8,
    },
    /// The Hello does not say it goes from this node to the destination.
    #[error("node {me} was asked to send to node {to} a hello from {from} to {hello_to}; build the hello with from = {me}, to = {to}")]
    Misaddressed {
        /// This node.
        me: u8,
        /// Destination asked for.
        to: u8,
        /// The Hello's `from`.
        from: u8,
        /// The Hello's `to`.
        hello_to: u8,
    },
    /// The Hello would be refused by its receiver.
    #[error("hello not sent, its receiver would refuse it: {0}")]
    Hello(#[from] HelloError),
    /// The sender thread's queue is full.
    #[error("the hello outbox is full ({depth} hellos waiting for the sender thread); retry on the next timer tick")]
    OutboxFull {
        /// Its depth.
        depth: usize,
    },
    /// The sender thread is gone.
    #[error("the rendezvous sender thread has stopped; recreate the mailbox")]
    Stopped,
}

/// Where a node sends and receives Hellos. Both calls return at once: a node polls its
/// mailbox from its single-threaded loop.
pub trait Mailbox: Send {
    /// Hands `hello` over for delivery to node `to`. `Ok` means accepted, not delivered:
    /// the Hello may still be lost, and the node retries its offers on a timer.
    fn send(&mut self, to: u8, hello: &HelloRepr) -> Result<(), RendezvousError>;

    /// The next Hello that has arrived for this node, if any.
    fn try_recv(&mut self) -> Option<HelloRepr>;
}
