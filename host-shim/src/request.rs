//! A request for [`crate::QueuePair::push`] and [`crate::QueuePair::submit`], built in
//! one expression: the kind and what it needs first, then the optional parts.
//!
//! ```
//! use prescient_shim::{Buffer, ReadSla, Request};
//! # fn build(put_buf: Buffer, get_buf: Buffer, delete_buf: Buffer) {
//! let put = Request::put(b"key-1", put_buf, 5).user_data(42);
//! let get = Request::get(b"key-1", get_buf).sla(ReadSla::Stale).user_data(43);
//! let delete = Request::delete(b"key-1", delete_buf);
//! # }
//! ```
//!
//! A request owns its buffer until it is queued; a request that is refused hands the
//! buffer back (`Err((ShimError, Buffer))`), never drops it.

use crate::buffer::Buffer;
use crate::descriptor::OpCode;
use crate::read_sla::ReadSla;

/// One PUT, GET or DELETE with the buffer that carries its key (and a PUT's value, a
/// GET's value on the way back), a GET's read SLA and the caller's tag.
///
/// Defaults: `user_data` 0; a GET's SLA [`ReadSla::FRESH_NOW`] (it fails at once rather
/// than risk an older value, so its value may refill a cache). Writes carry no SLA:
/// readers of the key elsewhere decide with their own (see [`crate::read_sla`]).
#[derive(Debug)]
#[must_use = "a request does nothing until it is pushed or submitted"]
pub struct Request<'k> {
    pub(crate) op: OpCode,
    pub(crate) key: &'k [u8],
    pub(crate) buf: Buffer,
    /// Value bytes of a PUT; 0 for the others.
    pub(crate) value_len: usize,
    /// Set by [`Request::sla`]; only a GET may have one.
    pub(crate) sla: Option<ReadSla>,
    pub(crate) user_data: u64,
}

impl<'k> Request<'k> {
    fn new(op: OpCode, key: &'k [u8], buf: Buffer, value_len: usize) -> Self {
        Self { op, key, buf, value_len, sla: None, user_data: 0 }
    }

    /// A PUT of `buf`'s first `value_len` value bytes under `key` (`value_len` is
    /// checked against the buffer's capacity when the request is pushed).
    pub fn put(key: &'k [u8], buf: Buffer, value_len: usize) -> Self {
        Self::new(OpCode::Put, key, buf, value_len)
    }

    /// A GET of `key`, carried in `buf`. The DPU app reads the value into `buf` at
    /// [`crate::config::VALUE_OFFSET`] and completes with the value's length in
    /// `detail` and its version in `version`; the buffer comes back with
    /// [`crate::QueuePair::take_value`]. Its read SLA ([`Request::sla`]) says how the
    /// DPU app resolves a value whose last write is still being decided: `Stale` gives
    /// the newest committed value it can prove, `Fresh` gathers again for up to its
    /// `max_wait` and then fails rather than risk an older one.
    pub fn get(key: &'k [u8], buf: Buffer) -> Self {
        Self::new(OpCode::Get, key, buf, 0)
    }

    /// A DELETE of `key`, carried in `buf` (which goes back to the arena once the DPU
    /// app is done with it).
    pub fn delete(key: &'k [u8], buf: Buffer) -> Self {
        Self::new(OpCode::Delete, key, buf, 0)
    }

    /// Sets a GET's read SLA (see [`Request::get`]). A PUT or DELETE carries none:
    /// pushing one given an SLA fails with [`crate::ShimError::SlaOnWrite`].
    pub fn sla(self, sla: ReadSla) -> Self {
        Self { sla: Some(sla), ..self }
    }

    /// The SLA its descriptor carries, or the refusal of a write given one.
    pub(crate) fn wire_sla(&self) -> Result<ReadSla, crate::ShimError> {
        match (self.op, self.sla) {
            (OpCode::Get, sla) => Ok(sla.unwrap_or(ReadSla::FRESH_NOW)),
            (_, None) => Ok(ReadSla::Stale),
            (op, Some(_)) => Err(crate::ShimError::SlaOnWrite { op: op.name() }),
        }
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
