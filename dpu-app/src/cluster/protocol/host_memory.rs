//! The host's shared region as fabric memory: the arena (sources of fragment WRITEs,
//! registered for local access only) and the cache directory (registered for remote
//! atomics, so peers CAS its slot words). The one module of the cluster with `unsafe`.
#![allow(unsafe_code)]

use std::ptr::NonNull;
use std::sync::Arc;

use prescient_shim::region::Region;

use crate::fabric::{FabricError, Memory};

/// `len` bytes of `region` from `offset` as fabric memory kept alive by the region.
fn span(region: &Arc<Region>, offset: usize, len: usize) -> Result<Memory, FabricError> {
    assert!(offset + len <= region.layout().region_bytes, "span outside the region");
    // SAFETY: `bytes_mut` only computes the address of a range inside the live mapping
    // (checked above); we keep the pointer, never the slice, so no reference outlives
    // this line.
    let ptr = unsafe { region.bytes_mut(offset, len) }.as_mut_ptr();
    let ptr = NonNull::new(ptr).expect("a mapping is never at address 0");
    // SAFETY: the range lies inside the region's mapping, which the `Arc<Region>` given
    // as owner keeps mapped for as long as the `Memory` lives. The fabric touches it with
    // raw copies (WRITE sources) and aligned atomics (directory words); the DPU app
    // reads and writes arena buffers it owns through slices only while no work request
    // carries them, and the directory only through atomics.
    unsafe { Memory::from_raw(ptr, len, Box::new(Arc::clone(region))) }
}

/// The arena: every host and DPU buffer.
pub fn arena(region: &Arc<Region>) -> Result<Memory, FabricError> {
    let layout = region.layout();
    span(region, layout.arena_offset, layout.directory_offset - layout.arena_offset)
}

/// The cache directory (`None` when the region has no slots).
pub fn directory(region: &Arc<Region>) -> Result<Option<Memory>, FabricError> {
    let layout = region.layout();
    let slots = layout.config.directory_slots as usize;
    if slots == 0 {
        return Ok(None);
    }
    span(region, layout.directory_offset, 8 * slots).map(Some)
}

/// `len` bytes of the region from `offset` as a slice: an arena buffer this node holds.
///
/// The caller must own the buffer: a host buffer accepted by this DPU app (ownership
/// `Dpu`, private in-flight table) or a DPU scratch buffer it took from its pool, with
/// no work request carrying it and no other slice of it alive.
#[allow(clippy::mut_from_ref)]
pub fn buffer_mut(region: &Region, offset: usize, len: usize) -> &mut [u8] {
    // SAFETY: per the contract above, nobody else (the host, another slice, the NIC)
    // touches these bytes while the slice lives; the range lies inside the mapping,
    // which the region keeps alive for at least the borrow of `region`.
    unsafe { region.bytes_mut(offset, len) }
}
