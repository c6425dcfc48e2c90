//! A host-held arena buffer: the only way host code reaches arena bytes.
//!
//! Holding a [`Buffer`] means the buffer's ownership word says `Host` with this
//! handle's generation, so no other thread of this host and no DPU app touches it:
//! that is what makes the mutable view sound. Submitting consumes the handle;
//! dropping it unsubmitted frees the buffer.
#![allow(unsafe_code)]

use std::sync::Arc;

use crate::arena::{self, BufferState};
use crate::config::{KEY_BYTES_MAX, TAILROOM_BYTES, VALUE_OFFSET};
use crate::region::Region;

/// An arena buffer the host holds.
pub struct Buffer {
    region: Option<Arc<Region>>,
    index: u32,
    generation: u32,
}

impl std::fmt::Debug for Buffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Buffer").field("index", &self.index).field("generation", &self.generation).finish()
    }
}

impl Buffer {
    pub(crate) fn new(region: Arc<Region>, index: u32, generation: u32) -> Self {
        Self { region: Some(region), index, generation }
    }

    /// Rebuilds the handle for a buffer the C ABI handed out, if the ownership word
    /// says the host holds it at `generation`.
    pub(crate) fn from_raw(region: Arc<Region>, index: u32, generation: u32) -> Result<Self, Option<BufferState>> {
        if index >= region.layout().config.host_buffers {
            return Err(None);
        }
        let found = region.u32_at(region.layout().buffer_state(index)).load(std::sync::atomic::Ordering::Acquire);
        if found != arena::word(generation, BufferState::Host) {
            return Err(BufferState::of(found));
        }
        Ok(Self::new(region, index, generation))
    }

    fn region(&self) -> &Region {
        self.region.as_ref().expect("a live buffer has its region")
    }

    /// The buffer's index in the arena.
    pub fn index(&self) -> u32 {
        self.index
    }

    /// The generation the buffer was taken at.
    pub fn generation(&self) -> u32 {
        self.generation
    }

    /// Most value bytes this buffer holds.
    pub fn capacity(&self) -> usize {
        self.region().layout().config.buffer_bytes as usize - VALUE_OFFSET - TAILROOM_BYTES
    }

    /// The value area: after a GET, the value the DPU app read (see
    /// `QueuePair::take_value`).
    pub fn value(&self) -> &[u8] {
        let region = self.region();
        let offset = region.layout().buffer(self.index) + VALUE_OFFSET;
        // SAFETY: as in `value_mut`: this handle holds the buffer, and the shared
        // borrow of `self` excludes a `value_mut` view for the slice's life.
        unsafe { region.bytes_mut(offset, self.capacity()) }
    }

    /// The value area, to serialise the value straight into.
    pub fn value_mut(&mut self) -> &mut [u8] {
        let region = self.region();
        let offset = region.layout().buffer(self.index) + VALUE_OFFSET;
        let len = self.capacity();
        // SAFETY: this handle holds the buffer (ownership word `Host` at our
        // generation), so no other handle, thread or DPU app uses it until we submit or
        // drop; the borrow of `self` keeps the slice from outliving the handle.
        unsafe { region.bytes_mut(offset, len) }
    }

    /// Writes `key` into the key area. Callers check the length first.
    pub(crate) fn write_key(&mut self, key: &[u8]) {
        assert!(!key.is_empty() && key.len() <= KEY_BYTES_MAX);
        let region = self.region();
        region.write_bytes(region.layout().buffer(self.index), key);
    }

    /// Gives up the handle without freeing the buffer (it was submitted, or goes back to C).
    pub(crate) fn into_raw(mut self) -> (u32, u32) {
        self.region = None;
        (self.index, self.generation)
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        if let Some(region) = self.region.take() {
            let cell = region.u32_at(region.layout().buffer_state(self.index));
            // A handle always holds its buffer; a failure means a peer scribbled on
            // the word, and then the DPU app's reclaim will sort it out.
            let _ = arena::transition(cell, self.generation, BufferState::Host, BufferState::Free);
        }
    }
}
