//! Raw verbs calls that sideway only offers at a cost: its receive guard collects work
//! requests and scatter entries in two `Vec`s, two allocations for every receive a
//! node reposts. [`post_recv`](crate::verbs::post_recv) posts one receive from the stack instead.
//!
//! The one `unsafe` surface of the crate: each function states its contract, and the
//! FFI call inside it why the contract makes it sound.
#![allow(unsafe_code)]

use std::ptr::null_mut;

use rdma_mummy_sys::{ibv_post_recv, ibv_recv_wr, ibv_sge};
use sideway::ibverbs::queue_pair::{GenericQueuePair, QueuePair as _};

/// Posts one receive of `len` bytes at `addr` (in the region of `lkey`) with `wr_id` on
/// `qp`, without allocating. The error is the provider's (ENOMEM: the receive queue is
/// full; EINVAL: a bad argument or a queue pair in a state that takes no receives).
///
/// # Safety
/// `addr..addr + len` must lie in a memory region registered with `lkey` (with local
/// write) on `qp`'s protection domain, and stay mapped and registered, untouched by
/// anyone else, until this receive's completion is polled or the queue pair is reset
/// or destroyed: the NIC writes into it at any time until then.
pub unsafe fn post_recv(qp: &GenericQueuePair, wr_id: u64, lkey: u32, addr: u64, len: u32) -> std::io::Result<()> {
    let mut sge = ibv_sge { addr, length: len, lkey };
    let mut wr = ibv_recv_wr { wr_id, next: null_mut(), sg_list: &mut sge, num_sge: 1 };
    let mut bad = null_mut();
    // SAFETY: `qp.qp()` is the live ibv_qp that `qp` owns (it outlives this call);
    // `wr` and `sge` are valid for the call, which copies them into the receive queue
    // before it returns (verbs never keeps a pointer to a posted work request); the
    // buffer they name is the caller's contract above.
    let rc = unsafe { ibv_post_recv(qp.qp().as_ptr(), &mut wr, &mut bad) };
    match rc {
        0 => Ok(()),
        // Providers return the errno, some of them negated.
        e => Err(std::io::Error::from_raw_os_error(e.abs())),
    }
}
