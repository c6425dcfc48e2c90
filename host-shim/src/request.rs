//! A request for [`crate::QueuePair::push`] and [`crate::QueuePair::submit`], built in
//! one expression: the kind and what it needs first, then the optional parts.
//!
//! ```
//! use prescient_shim::{Buffer, Request, Sla};
//! # fn build(put_buf: Buffer, get_buf: Buffer, delete_buf: Buffer) {
//! let put = Request::put(b"key-1", put_buf, 5).user_data(42);
//! let get = Request::get(b"key-1", get_buf).sla(Sla::Stale).user_data(43);
//! let delete = Request::delete(b"key-1", delete_buf);
//! # }
//! ```
//!
//! A request owns its buffer until it is queued; a request that is refused hands the
//! buffer back (`Err((ShimError, Buffer))`), never drops it.

use crate::buffer::Buffer;
use crate::descriptor::{OpCode, Sla};

/// One PUT, GET or DELETE with the buffer that carries its key (and a PUT's value, a
/// GET's value on the way back), its SLA and the caller's tag.
///
/// Defaults: `user_data` 0; SLA [`Sla::Fresh`] for a PUT and a GET (a GET then fails
/// rather than risk an older value, so its value may refill a cache) and
/// [`Sla::Stale`] for a DELETE (what a DELETE has always carried).
#[derive(Debug)]
#[must_use = "a request does nothing until it is pushed or submitted"]
pub struct Request<'k> {
    pub(crate) op: OpCode,
    pub(crate) key: &'k [u8],
    pub(crate) buf: Buffer,
    /// Value bytes of a PUT; 0 for the others.
    pub(crate) value_len: usize,
    pub(crate) sla: Sla,
    pub(crate) user_data: u64,
}

impl<'k> Request<'k> {
    fn new(op: OpCode, key: &'k [u8], buf: Buffer, value_len: usize, sla: Sla) -> Self {
        Self { op, key, buf, value_len, sla, user_data: 0 }
    }

    /// A PUT of `buf`'s first `value_len` value bytes under `key` (`value_len` is
    /// checked against the buffer's capacity when the request is pushed).
    pub fn put(key: &'k [u8], buf: Buffer, value_len: usize) -> Self {
        Self::new(OpCode::Put, key, buf, value_len, Sla::Fresh)
    }

    /// A GET of `key`, carried in `buf`. The DPU app reads the value into `buf` at
    /// [`crate::config::VALUE_OFFSET`] and completes with the value's length in
    /// `detail` and its version in `version`; the buffer comes back with
    /// [`crate::QueuePair::take_value`]. The SLA says how the DPU app resolves a value
    /// whose last write is still being decided: `Stale` gives the newest committed
    /// value it can prove, `Fresh` fails rather than risk an older one.
    pub fn get(key: &'k [u8], buf: Buffer) -> Self {
        Self::new(OpCode::Get, key, buf, 0, Sla::Fresh)
    }

    /// A DELETE of `key`, carried in `buf` (which goes back to the arena once the DPU
    /// app is done with it).
    pub fn delete(key: &'k [u8], buf: Buffer) -> Self {
        Self::new(OpCode::Delete, key, buf, 0, Sla::Stale)
    }

    /// Sets the read SLA: for a write, what readers of the key on other nodes may
    /// serve while it is pending; for a GET, see [`Request::get`].
    pub fn sla(self, sla: Sla) -> Self {
        Self { sla, ..self }
    }

    /// Sets the tag its [`crate::Completion`] carries back.
    pub fn user_data(self, user_data: u64) -> Self {
        Self { user_data, ..self }
    }

    /// Gives the buffer back without queuing the request.
    pub fn into_buffer(self) -> Buffer {
        self.buf
    }
}
