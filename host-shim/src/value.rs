//! A GET's value: the buffer that carried the request, holding exactly the value's
//! bytes as the completion reports them.

use crate::buffer::Buffer;

/// The value a GET brought back, in the buffer that carried its key. Derefs to
/// exactly the value's bytes (none for a GET that did not complete `Ok`); dropping it
/// frees the buffer, [`Value::into_buffer`] keeps it for the next request.
#[derive(Debug)]
pub struct Value {
    buf: Buffer,
    len: usize,
}

impl Value {
    /// `buf` holding `len` value bytes; None (and the buffer freed) if `len` is more
    /// than the buffer's value area holds.
    pub(crate) fn new(buf: Buffer, len: usize) -> Option<Self> {
        (len <= buf.value().len()).then_some(Self { buf, len })
    }

    /// The value's length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the value has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The buffer, to fill and submit again (or drop).
    pub fn into_buffer(self) -> Buffer {
        self.buf
    }
}

impl std::ops::Deref for Value {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.buf.value()[..self.len]
    }
}
