//! The responder half of the emulated NIC: executes one incoming request against this
//! node's registered memory and the target queue pair's receive queue, with the checks
//! hardware makes - rkey, bounds and access rights (remote access error), 8-byte
//! alignment of atomics (invalid request), a posted receive for SEND and WRITE_WITH_IMM
//! (receiver not ready). The same code serves in-process peers and TCP connections.

use super::context::NodeInner;
use super::receive::{Payload, Publish, Receiver};
use super::region_cache::RegionCache;
use super::regions::RegionEntry;
use crate::fabric::{Access, Completion, Memory, RemoteAddr, WcOpcode};
use crate::limits::ATOMIC_BYTES;

/// Where the bytes of a READ go.
pub(crate) enum Sink<'a> {
    /// The requester's registered memory.
    Memory { memory: &'a Memory, offset: usize },
    /// A response frame.
    Bytes(&'a mut Vec<u8>),
}

/// The queue pair a request is for, as the responder sees it.
pub(crate) struct Target<'a> {
    /// Its node: whether it lives, and the regions registered on it.
    pub(crate) node: &'a NodeInner,
    /// Whether it is in RTR or RTS and not destroyed (else the request goes unanswered).
    pub(crate) accepts_requests: bool,
    /// Its receive queue.
    pub(crate) recv: &'a Receiver,
}

/// One incoming request.
pub(crate) enum Incoming<'a> {
    Write { remote: RemoteAddr, len: usize, imm: Option<u32>, payload: Payload<'a> },
    Read { remote: RemoteAddr, len: usize, sink: Sink<'a> },
    CompareSwap { remote: RemoteAddr, compare: u64, swap: u64 },
    FetchAdd { remote: RemoteAddr, add: u64 },
    Send { len: usize, imm: Option<u32>, payload: Payload<'a> },
}

/// Why the responder did not execute a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Nak {
    /// No answer at all: the queue pair is not in RTR/RTS or the node is dead. The
    /// requester retries and then fails with `RetryExceeded`.
    Silent,
    /// No receive posted.
    ReceiverNotReady,
    /// Bad rkey, out of bounds, or missing rights.
    RemoteAccess,
    /// Misaligned atomic, or a SEND longer than the receive buffer.
    InvalidRequest,
}

/// Resolves `remote..remote+len` to (memory, offset) after the rkey, rights and bounds
/// checks, through the requester's region cache when it has one (in process) or the
/// region table (over TCP).
fn resolve<'a>(
    node: &'a NodeInner,
    cache: Option<&'a mut RegionCache>,
    remote: RemoteAddr,
    len: usize,
    right: Access,
) -> Result<(Resolved<'a>, usize), Nak> {
    let resolved = match cache {
        Some(cache) => {
            let (memory, access) = cache.lookup(&node.regions, remote.rkey).ok_or(Nak::RemoteAccess)?;
            if !access.contains(right) {
                return Err(Nak::RemoteAccess);
            }
            Resolved::Cached(memory)
        }
        None => {
            let regions = node.regions.read();
            let index = (remote.rkey & 0xFFFF) as usize;
            match regions.get(index) {
                Some(Some(e)) if e.key == remote.rkey && e.access.contains(right) => {}
                _ => return Err(Nak::RemoteAccess),
            }
            Resolved::Table { regions, index }
        }
    };
    let offset = remote.addr.checked_sub(resolved.addr()).ok_or(Nak::RemoteAccess)?;
    let end = offset.checked_add(len as u64).ok_or(Nak::RemoteAccess)?;
    if end > resolved.len() as u64 {
        return Err(Nak::RemoteAccess);
    }
    Ok((resolved, offset as usize))
}

/// A checked region: from the requester's cache (which holds the memory alive), or with
/// the region table read-locked so it cannot be deregistered while the access runs.
enum Resolved<'a> {
    Cached(&'a Memory),
    Table { regions: std::sync::RwLockReadGuard<'a, Vec<Option<RegionEntry>>>, index: usize },
}

impl std::ops::Deref for Resolved<'_> {
    type Target = Memory;
    fn deref(&self) -> &Memory {
        match self {
            Resolved::Cached(memory) => memory,
            Resolved::Table { regions, index } => &regions[*index].as_ref().expect("resolved entries exist").memory,
        }
    }
}

fn copy_in(payload: &Payload<'_>, dst: &Memory, dst_offset: usize, len: usize) -> Result<(), Nak> {
    match payload {
        Payload::Memory { memory, offset } => memory.copy_to(*offset, dst, dst_offset, len),
        Payload::Bytes(b) => dst.write(dst_offset, &b[..len]),
    }
    .map_err(|_| Nak::InvalidRequest)
}

fn publish(ready_ns: u64, defer: Option<&mut Option<Completion>>) -> Publish<'_> {
    defer.map_or(Publish::At(ready_ns), Publish::Defer)
}

/// Executes `incoming` at `target`, resolving remote keys through `cache` when the requester
/// has one; receive completions become visible at `ready_ns`, or,
/// with `defer`, are handed back to be published after the response is on its way (over
/// TCP, so that a process that exits on seeing the receive has answered first, as a NIC
/// would have). Returns the old value of an atomic (0 for other operations).
pub(crate) fn execute(
    target: Target<'_>,
    cache: Option<&mut RegionCache>,
    incoming: Incoming<'_>,
    ready_ns: u64,
    defer: Option<&mut Option<Completion>>,
) -> Result<u64, Nak> {
    if !target.node.is_alive() || !target.accepts_requests {
        return Err(Nak::Silent);
    }
    let Target { node, recv, .. } = target;
    match incoming {
        Incoming::Write { remote, len, imm: None, payload } => {
            // A zero-length WRITE checks no key (IB spec 9.4.1.1.4... and hardware agrees).
            if len > 0 {
                let (memory, offset) = resolve(node, cache, remote, len, Access::REMOTE_WRITE)?;
                copy_in(&payload, &memory, offset, len)?;
            }
            Ok(0)
        }
        Incoming::Write { remote, len, imm: Some(imm), payload } => {
            let mut rq = recv.lock();
            if !rq.has_receive() {
                recv.note_receiver_not_ready();
                return Err(Nak::ReceiverNotReady);
            }
            if len > 0 {
                let (memory, offset) = resolve(node, cache, remote, len, Access::REMOTE_WRITE)?;
                copy_in(&payload, &memory, offset, len)?;
            }
            recv.complete(&mut rq, WcOpcode::RecvWithImm, len, Some(imm), None, publish(ready_ns, defer));
            Ok(0)
        }
        Incoming::Send { len, imm, payload } => {
            let mut rq = recv.lock();
            if !rq.has_receive() {
                recv.note_receiver_not_ready();
                return Err(Nak::ReceiverNotReady);
            }
            if recv.complete(&mut rq, WcOpcode::Recv, len, imm, Some(&payload), publish(ready_ns, defer)) {
                Ok(0)
            } else {
                Err(Nak::InvalidRequest)
            }
        }
        Incoming::Read { remote, len, sink } => {
            let (memory, offset) = if len > 0 {
                resolve(node, cache, remote, len, Access::REMOTE_READ)?
            } else {
                return Ok(0);
            };
            match sink {
                Sink::Memory { memory: dst, offset: dst_offset } => memory.copy_to(offset, dst, dst_offset, len),
                Sink::Bytes(v) => {
                    let start = v.len();
                    v.resize(start + len, 0);
                    memory.read(offset, &mut v[start..])
                }
            }
            .map_err(|_| Nak::InvalidRequest)?;
            Ok(0)
        }
        Incoming::CompareSwap { remote, compare, swap } => {
            if remote.addr % ATOMIC_BYTES as u64 != 0 {
                return Err(Nak::InvalidRequest);
            }
            let (memory, offset) = resolve(node, cache, remote, ATOMIC_BYTES, Access::REMOTE_ATOMIC)?;
            memory.compare_swap(offset, compare, swap).map_err(|_| Nak::InvalidRequest)
        }
        Incoming::FetchAdd { remote, add } => {
            if remote.addr % ATOMIC_BYTES as u64 != 0 {
                return Err(Nak::InvalidRequest);
            }
            let (memory, offset) = resolve(node, cache, remote, ATOMIC_BYTES, Access::REMOTE_ATOMIC)?;
            memory.fetch_add(offset, add).map_err(|_| Nak::InvalidRequest)
        }
    }
}
