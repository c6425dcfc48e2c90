//! Memory the NIC may touch: an anonymous mapping, a shared mapping of a file (fragment
//! logs survive a crash), or a region mapped by someone else (the host's shared region).
//!
//! This is the one module of the fabric with `unsafe`: registered memory is DMA memory,
//! read and written by the NIC (or the emulated NIC's threads) while the program runs, so
//! it is reached only through raw pointers here, never through `&[u8]`. Which bytes may be
//! touched concurrently is the protocol's business, as it is with hardware: a buffer posted
//! to the NIC belongs to the in-flight table until its completion, and remote peers write
//! only where the protocol lets them. Atomics go through `AtomicU64` on aligned words, so
//! they are atomic against each other. A file mapping can be flushed to its file
//! ([`Memory::flush_range`]) for durability against power loss; a process crash needs no
//! flush, the page cache keeps every store.
#![allow(unsafe_code)]

use std::any::Any;
use std::fs::File;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

use memmap2::{MmapMut, MmapOptions};

use super::error::{FabricError, Result};
use crate::limits::{ATOMIC_BYTES, REGION_BYTES_MAX};

/// A span of memory that can be registered with the fabric.
pub struct Memory {
    ptr: NonNull<u8>,
    len: usize,
    backing: Backing,
    /// Keeps the mapping alive; dropped (unmapped) with the `Memory`. A `MmapMut` for
    /// [`Backing::Anonymous`] and [`Backing::File`].
    owner: Box<dyn Any + Send + Sync>,
}

/// What lies behind a [`Memory`]: decides what [`Memory::flush_range`] does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Backing {
    /// Anonymous pages: nothing to flush.
    Anonymous,
    /// A shared mapping of a file: flushed with `msync`.
    File,
    /// Mapped by someone else ([`Memory::from_raw`]): its owner flushes it.
    Foreign,
}

// SAFETY: `Memory` is a pointer to a mapping it keeps alive; all access goes through the
// methods below, which use raw copies (DMA semantics) or atomics, never references.
unsafe impl Send for Memory {}
// SAFETY: as above; shared use only performs raw copies and atomic operations.
unsafe impl Sync for Memory {}

impl std::fmt::Debug for Memory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Memory").field("addr", &self.addr()).field("len", &self.len).finish()
    }
}

impl Memory {
    /// Anonymous, zeroed, page-aligned memory of `len` bytes.
    pub fn anonymous(len: usize) -> Result<Self> {
        check_len(len)?;
        let map = MmapOptions::new().len(len.max(1)).map_anon().map_err(|source| FabricError::Map { len, source })?;
        Ok(Self::from_mmap(map, len, Backing::Anonymous))
    }

    /// A shared, writable mapping of `len` bytes of `file` from `offset` (a multiple of the
    /// page size): writes land in the file, so a fragment log survives a crash. Its pages
    /// are faulted in at once (`MAP_POPULATE`), as registering memory with a NIC pins
    /// them: no page fault lands on the data path later.
    pub fn map_file(file: &File, offset: u64, len: usize) -> Result<Self> {
        check_len(len)?;
        // SAFETY: a shared file mapping may change under us if another process writes the
        // file; we never form references into it (raw copies and atomics only), so that
        // is the same as a peer writing by RDMA.
        let map = unsafe { MmapOptions::new().offset(offset).len(len).populate().map_mut(file) }
            .map_err(|source| FabricError::Map { len, source })?;
        Ok(Self::from_mmap(map, len, Backing::File))
    }

    fn from_mmap(mut map: MmapMut, len: usize, backing: Backing) -> Self {
        let ptr = NonNull::new(map.as_mut_ptr()).expect("mmap never returns null");
        Self { ptr, len, backing, owner: Box::new(map) }
    }

    /// Memory that someone else mapped (the shared host region, a hugetlbfs mapping).
    ///
    /// # Safety
    /// `ptr..ptr+len` must be readable and writable memory that stays mapped for as long as
    /// `owner` lives, and must be accessed by others only as DMA memory (raw copies,
    /// atomics), never through Rust references.
    pub unsafe fn from_raw(ptr: NonNull<u8>, len: usize, owner: Box<dyn Any + Send + Sync>) -> Result<Self> {
        check_len(len)?;
        Ok(Self { ptr, len, backing: Backing::Foreign, owner })
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when the memory has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The virtual address of the first byte: what RDMA peers use as a remote address.
    pub fn addr(&self) -> u64 {
        self.ptr.as_ptr() as u64
    }

    /// The first byte as a raw pointer, for registering with a real NIC.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    fn check(&self, offset: usize, len: usize) -> Result<()> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(FabricError::OutOfRange { offset: offset as u64, len: len as u64, region_len: self.len as u64 }),
        }
    }

    /// Copies `dst.len()` bytes starting at `offset` into `dst`.
    pub fn read(&self, offset: usize, dst: &mut [u8]) -> Result<()> {
        self.check(offset, dst.len())?;
        // SAFETY: the range was checked to lie inside the live mapping; `dst` is a distinct
        // Rust buffer, so the ranges do not overlap.
        unsafe { std::ptr::copy_nonoverlapping(self.ptr.as_ptr().add(offset), dst.as_mut_ptr(), dst.len()) };
        Ok(())
    }

    /// Copies `src` into the memory at `offset`.
    pub fn write(&self, offset: usize, src: &[u8]) -> Result<()> {
        self.check(offset, src.len())?;
        // SAFETY: the range was checked; `src` is a Rust slice, so it cannot alias DMA
        // memory that we only reach through raw pointers.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), self.ptr.as_ptr().add(offset), src.len()) };
        Ok(())
    }

    /// Copies `len` bytes from `self` at `offset` to `dst` at `dst_offset` (a NIC's DMA from
    /// one region into another; the regions may be the same).
    pub fn copy_to(&self, offset: usize, dst: &Memory, dst_offset: usize, len: usize) -> Result<()> {
        self.check(offset, len)?;
        dst.check(dst_offset, len)?;
        // SAFETY: both ranges were checked against live mappings; `copy` allows overlap.
        unsafe { std::ptr::copy(self.ptr.as_ptr().add(offset), dst.ptr.as_ptr().add(dst_offset), len) };
        Ok(())
    }

    /// Writes the bytes `offset..offset + len` of a file mapping back to the file and waits
    /// for the write (`msync(MS_SYNC)` of the pages covering the span), so they survive a
    /// power loss, not only a process crash. Anonymous memory has no file: `Ok(())`, as has
    /// memory mapped by someone else ([`Memory::from_raw`]), which its owner flushes.
    pub fn flush_range(&self, offset: usize, len: usize) -> Result<()> {
        self.check(offset, len)?;
        if self.backing != Backing::File || len == 0 {
            return Ok(());
        }
        let map = self.owner.downcast_ref::<MmapMut>().expect("a file-backed Memory owns its MmapMut");
        // memmap2 rounds the start down to a page boundary and calls msync(MS_SYNC) on the
        // span; it forms no reference to the bytes, so DMA semantics hold.
        map.flush_range(offset, len).map_err(|source| FabricError::Flush {
            offset: offset as u64,
            len: len as u64,
            source,
        })
    }

    fn word(&self, offset: usize) -> Result<&AtomicU64> {
        self.check(offset, ATOMIC_BYTES)?;
        let addr = self.addr() + offset as u64;
        if addr % ATOMIC_BYTES as u64 != 0 {
            return Err(FabricError::Misaligned { offset: offset as u64, len: ATOMIC_BYTES as u64 });
        }
        // SAFETY: the word is inside the live mapping and 8-byte aligned; every atomic access
        // to it goes through `AtomicU64`, so atomics are atomic against each other.
        Ok(unsafe { AtomicU64::from_ptr(self.ptr.as_ptr().add(offset).cast::<u64>()) })
    }

    /// Atomic compare-and-swap of the aligned word at `offset`; returns the old value.
    pub fn compare_swap(&self, offset: usize, compare: u64, swap: u64) -> Result<u64> {
        let w = self.word(offset)?;
        Ok(match w.compare_exchange(compare, swap, Ordering::AcqRel, Ordering::Acquire) {
            Ok(v) | Err(v) => v,
        })
    }

    /// Atomic fetch-and-add on the aligned word at `offset`; returns the old value.
    pub fn fetch_add(&self, offset: usize, add: u64) -> Result<u64> {
        Ok(self.word(offset)?.fetch_add(add, Ordering::AcqRel))
    }

    /// Atomic load of the aligned word at `offset`.
    pub fn load_u64(&self, offset: usize) -> Result<u64> {
        Ok(self.word(offset)?.load(Ordering::Acquire))
    }

    /// Atomic store to the aligned word at `offset`.
    pub fn store_u64(&self, offset: usize, value: u64) -> Result<()> {
        self.word(offset)?.store(value, Ordering::Release);
        Ok(())
    }
}

fn check_len(len: usize) -> Result<()> {
    if len as u64 > REGION_BYTES_MAX {
        return Err(FabricError::Limit { what: "region bytes", limit: REGION_BYTES_MAX as usize });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_write_and_bounds() {
        let m = Memory::anonymous(64).unwrap();
        m.write(8, b"abcd").unwrap();
        let mut out = [0u8; 4];
        m.read(8, &mut out).unwrap();
        assert_eq!(&out, b"abcd");
        assert!(matches!(m.write(62, b"abc"), Err(FabricError::OutOfRange { offset: 62, len: 3, region_len: 64 })));
        assert!(m.read(usize::MAX, &mut out).is_err());
    }

    #[test]
    fn atomics_need_alignment() {
        let m = Memory::anonymous(64).unwrap();
        assert_eq!(m.compare_swap(8, 0, 5).unwrap(), 0);
        assert_eq!(m.compare_swap(8, 0, 6).unwrap(), 5);
        assert_eq!(m.fetch_add(8, 10).unwrap(), 5);
        assert_eq!(m.load_u64(8).unwrap(), 15);
        assert!(matches!(m.fetch_add(4, 1), Err(FabricError::Misaligned { offset: 4, .. })));
        assert!(m.fetch_add(60, 1).is_err());
    }

    #[test]
    fn flush_range_checks_bounds_and_succeeds_on_file_mappings() {
        let anon = Memory::anonymous(8192).unwrap();
        anon.flush_range(0, 8192).unwrap();
        assert!(matches!(anon.flush_range(8000, 200), Err(FabricError::OutOfRange { offset: 8000, len: 200, .. })));

        let path = std::env::temp_dir().join(format!("prescient-fabric-flush-{}", std::process::id()));
        let file = std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(true).open(&path).unwrap();
        file.set_len(3 * 4096).unwrap();
        // Mapped from a page offset, so the mapping's first byte is the file's byte 4096.
        let m = Memory::map_file(&file, 4096, 2 * 4096).unwrap();
        m.write(4100, b"durable").unwrap();
        // A span that starts inside a page and crosses into the next.
        m.flush_range(4100, 7).unwrap();
        m.flush_range(10, 8000).unwrap();
        m.flush_range(8192, 0).unwrap();
        assert!(m.flush_range(8190, 3).is_err());
        assert!(m.flush_range(usize::MAX, 2).is_err());
        drop(m);
        let bytes = std::fs::read(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(&bytes[4096 + 4100..4096 + 4107], b"durable");
    }

    #[test]
    fn file_mapping_writes_reach_the_file() {
        let path = std::env::temp_dir().join(format!("prescient-fabric-mem-{}", std::process::id()));
        let file = std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(true).open(&path).unwrap();
        file.set_len(4096).unwrap();
        let m = Memory::map_file(&file, 0, 4096).unwrap();
        m.write(100, b"log").unwrap();
        drop(m);
        let bytes = std::fs::read(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(&bytes[100..103], b"log");
    }
}
