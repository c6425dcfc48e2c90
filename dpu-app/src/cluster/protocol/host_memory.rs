//! The host's shared region as fabric memory: the arena (sources of fragment WRITEs,
//! registered for local access only) and the cache directory (registered for remote
//! atomics, so peers CAS its slot words), and its buffers as slices for the writer and the
//! repairer to seal and stripe in place: `unsafe fn`s whose contract says when a buffer is
//! the caller's, each call stating why it is.
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

/// `len` bytes of the region from `offset`, to seal and stripe in place: an arena
/// buffer this node holds.
///
/// # Safety
/// The caller must hold the buffer, and no one else may touch it while the slice lives:
/// - it is a host buffer of a request this DPU app accepted (the in-flight table says
///   `Dpu`; the host handed it over at submission and, by the ring's contract, does not
///   write it again until the completion gives it back), or a DPU buffer this node took
///   from its free list;
/// - no work request carries it (the NIC reads fragment sources only after this
///   returns and the slice is dropped);
/// - no other slice of it is alive.
///
/// A host that breaks the ring's contract and writes a buffer it handed over races
/// only with its own request's bytes: everything derived from them is checksummed and
/// sealed afterwards, and nothing the DPU app decides (lengths, keys, indices) is read
/// from the buffer after it was accepted (the key is copied out once, at the door).
#[allow(clippy::mut_from_ref)]
pub unsafe fn buffer_mut(region: &Region, offset: usize, len: usize) -> &mut [u8] {
    // SAFETY: the range lies inside the mapping (checked by `bytes_mut`), which the
    // region keeps alive for at least the borrow of `region`; exclusivity is the
    // caller's, per the contract above.
    unsafe { region.bytes_mut(offset, len) }
}

/// `len` bytes of the region from `offset`, read only: a buffer this node holds whose
/// bytes the NIC may be reading (a fragment in flight) but nobody writes.
///
/// # Safety
/// As for [`buffer_mut`], except that work requests may read it and other shared
/// slices of it may be alive: no `&mut` slice of it may exist while this one lives.
pub unsafe fn buffer(region: &Region, offset: usize, len: usize) -> &[u8] {
    // SAFETY: as above; nobody writes the range while the slice lives (the caller's
    // contract), so a shared slice over it is sound.
    unsafe { region.bytes_mut(offset, len) }
}
