//! The mapping of a shared region, and the read-only mapping of a file another process
//! writes ([`FileView`], the change-feed log): the only place the shim turns offsets
//! into pointers.
//!
//! Both processes map the same file `MAP_SHARED` and `mlock` it. Words that both
//! sides touch are reached as atomics; bytes are copied in and out with bounds
//! checked against the layout. A peer may scribble anywhere in the region at any
//! time: nothing read from it is trusted until the caller has checked it, and no
//! value read from it ever becomes an offset without such a check.
#![allow(unsafe_code)]

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::OnceLock;

use memmap2::{MmapOptions, MmapRaw};

use crate::config::HEADER_BYTES;
use crate::error::ShimError;
use crate::layout::{Layout, RegionConfig};
use crate::region_guard::Guard;

/// hugetlbfs' `f_type` in `statfs`.
const HUGETLBFS_MAGIC: i64 = 0x958458f6;
/// Huge page size a region on hugetlbfs is rounded up to.
const HUGE_PAGE_BYTES: u64 = 2 << 20;

/// A mapped region.
pub struct Region {
    /// The SIGBUS guard of the mapping, once [`Region::guard`] registered it. Declared
    /// before `map`: fields drop in order, so it unregisters before the unmap.
    guard: OnceLock<Guard>,
    map: MmapRaw,
    layout: Layout,
    path: PathBuf,
    pinned: bool,
    file: File,
}

// SAFETY: the mapping is plain shared memory; every access through `Region` is
// either atomic or a bounds-checked byte copy, so sharing it between threads is as
// sound as sharing it between processes.
unsafe impl Sync for Region {}
// SAFETY: see `Sync`; the mapping is not tied to the creating thread.
unsafe impl Send for Region {}

impl std::fmt::Debug for Region {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Region").field("path", &self.path).field("layout", &self.layout).finish()
    }
}

fn io<'a>(action: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> ShimError + 'a {
    move |source| ShimError::Io { action, path: path.to_path_buf(), source }
}

fn on_hugetlbfs(path: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let Ok(c_dir) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: `statfs` writes only into the zeroed struct we pass; `c_dir` is a valid
    // NUL-terminated string that outlives the call.
    unsafe {
        let mut stat: libc::statfs = std::mem::zeroed();
        libc::statfs(c_dir.as_ptr(), &mut stat) == 0 && stat.f_type as i64 == HUGETLBFS_MAGIC
    }
}

impl Region {
    /// Creates the region file at `path` (it must not exist) with `config`'s sizes,
    /// maps it and, if `pin`, locks it in memory.
    pub fn create(path: &Path, config: RegionConfig, pin: bool) -> Result<Self, ShimError> {
        let layout = Layout::new(config)?;
        let file = OpenOptions::new().read(true).write(true).create_new(true).open(path).map_err(|e| {
            if e.kind() == std::io::ErrorKind::AlreadyExists {
                ShimError::Exists(path.to_path_buf())
            } else {
                ShimError::Io { action: "create", path: path.to_path_buf(), source: e }
            }
        })?;
        let mut size = layout.region_bytes as u64;
        if on_hugetlbfs(path) {
            size = size.div_ceil(HUGE_PAGE_BYTES) * HUGE_PAGE_BYTES;
        }
        let made = (|| {
            file.set_len(size).map_err(io("size", path))?;
            let region = Self::map(file, layout, path, pin)?;
            // The header goes in last: an attacher that sees the magic sees a sized file.
            let mut header = vec![0u8; HEADER_BYTES];
            layout.emit_header(&mut header);
            region.write_bytes(0, &header);
            Ok(region)
        })();
        if made.is_err() {
            let _ = std::fs::remove_file(path);
        }
        made
    }

    /// Maps an existing region and checks its header.
    pub fn open(path: &Path, pin: bool) -> Result<Self, ShimError> {
        let file = OpenOptions::new().read(true).write(true).open(path).map_err(io("open", path))?;
        let file_bytes = file.metadata().map_err(io("stat", path))?.len();
        if file_bytes < HEADER_BYTES as u64 {
            return Err(ShimError::Truncated { bytes: file_bytes, need: HEADER_BYTES as u64 });
        }
        let map = MmapOptions::new().len(HEADER_BYTES).map_raw(&file).map_err(io("map", path))?;
        let mut header = vec![0u8; HEADER_BYTES];
        // SAFETY: the mapping is HEADER_BYTES long and `header` as long; a concurrent
        // writer can only change the values, which are checked next.
        unsafe { std::ptr::copy_nonoverlapping(map.as_ptr(), header.as_mut_ptr(), HEADER_BYTES) };
        drop(map);
        let layout = Layout::parse_header(&header, file_bytes)?;
        Self::map(file, layout, path, pin)
    }

    fn map(file: File, layout: Layout, path: &Path, pin: bool) -> Result<Self, ShimError> {
        let map = MmapOptions::new().len(layout.region_bytes).map_raw(&file).map_err(io("map", path))?;
        if pin {
            // SAFETY: the range is exactly the live mapping.
            let rc = unsafe { libc::mlock(map.as_ptr().cast(), layout.region_bytes) };
            if rc != 0 {
                return Err(ShimError::Pin {
                    bytes: layout.region_bytes as u64,
                    source: std::io::Error::last_os_error(),
                });
            }
        }
        Ok(Self { guard: OnceLock::new(), map, layout, path: path.to_path_buf(), pinned: pin, file })
    }

    /// Guards the mapping against its file shrinking (see [`crate::region_guard`]): an
    /// access past the file's end then meets zeroed private memory, not a SIGBUS that
    /// kills the process, and [`Region::lost`] turns true. For a process that serves
    /// regions other processes own (the DPU app). False if it could not be guarded
    /// (every guard slot taken, or the handler not installed).
    pub fn guard(&self) -> bool {
        if self.guard.get().is_none() {
            let mut len = self.layout.region_bytes;
            if on_hugetlbfs(&self.path) {
                // A hugetlbfs mapping is replaced whole huge pages at a time.
                len = (len as u64).div_ceil(HUGE_PAGE_BYTES) as usize * HUGE_PAGE_BYTES as usize;
            }
            // SAFETY: the mapping is ours for as long as `self`, and the guard, a field
            // declared before `map`, drops (unregisters) before the mapping is unmapped.
            // Every access through `Region` is atomic or a copy, so pages replaced by
            // zeros under it are, to its readers, a peer's scribble.
            if let Some(guard) = unsafe { Guard::register(self.map.as_mut_ptr(), len) } {
                let _ = self.guard.set(guard);
            }
        }
        self.guard.get().is_some()
    }

    /// Whether the guarded mapping was replaced by zeroed memory because its file
    /// shrank under it: nothing in it is the peer's any more.
    pub fn lost(&self) -> bool {
        self.guard.get().is_some_and(Guard::lost)
    }

    /// Compares the file's size (`fstat`) with the mapping. A file shorter than the
    /// mapping is fenced now, before the next access faults (a guarded mapping is
    /// replaced by zeroed memory and marked lost), and its size returned; `Ok(None)`
    /// if the file still covers the mapping.
    pub fn check_size(&self) -> std::io::Result<Option<u64>> {
        let bytes = self.file.metadata()?.len();
        if bytes >= self.layout.region_bytes as u64 {
            return Ok(None);
        }
        if let Some(guard) = self.guard.get() {
            guard.fence();
        }
        Ok(Some(bytes))
    }

    /// The region's layout.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The region's file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether the mapping is locked in memory.
    pub fn pinned(&self) -> bool {
        self.pinned
    }

    fn check(&self, offset: usize, len: usize, align: usize) {
        assert!(
            offset % align == 0 && offset.checked_add(len).is_some_and(|end| end <= self.layout.region_bytes),
            "region access {offset}+{len} (align {align}) outside {} bytes",
            self.layout.region_bytes
        );
    }

    /// The `u32` word at `offset` (4-byte aligned, inside the region).
    pub fn u32_at(&self, offset: usize) -> &AtomicU32 {
        self.check(offset, 4, 4);
        // SAFETY: in bounds and aligned (checked above); the mapping lives as long as
        // `self`; AtomicU32 has the layout of u32 and every access to shared words is
        // atomic, on both sides.
        unsafe { &*self.map.as_ptr().add(offset).cast::<AtomicU32>() }
    }

    /// The `u64` word at `offset` (8-byte aligned, inside the region).
    pub fn u64_at(&self, offset: usize) -> &AtomicU64 {
        self.check(offset, 8, 8);
        // SAFETY: as for `u32_at`, with 8-byte alignment checked.
        unsafe { &*self.map.as_ptr().add(offset).cast::<AtomicU64>() }
    }

    /// Copies `out.len()` bytes from `offset` into `out`.
    pub fn read_bytes(&self, offset: usize, out: &mut [u8]) {
        self.check(offset, out.len(), 1);
        // SAFETY: the source range is inside the mapping (checked); `out` is a distinct
        // local buffer. A peer writing concurrently can only change the bytes copied,
        // which the caller validates after the copy, never before.
        unsafe { std::ptr::copy_nonoverlapping(self.map.as_ptr().add(offset), out.as_mut_ptr(), out.len()) };
    }

    /// Copies `src` into the region at `offset`.
    pub fn write_bytes(&self, offset: usize, src: &[u8]) {
        self.check(offset, src.len(), 1);
        // SAFETY: the target range is inside the mapping (checked) and not aliased by
        // any Rust reference: the region hands out only atomics and copies, except
        // through `bytes_mut`, whose caller owns the range exclusively.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), self.map.as_mut_ptr().add(offset), src.len()) };
    }

    /// A mutable view of `len` bytes at `offset`.
    ///
    /// # Safety
    /// The caller must own the range exclusively for the life of the slice: no other
    /// slice from `bytes_mut` over it may exist in this process, and the protocol must
    /// give this side ownership (an arena buffer this side holds). A peer that breaks
    /// the protocol and writes the range anyway changes only the bytes seen, which
    /// every consumer validates.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn bytes_mut(&self, offset: usize, len: usize) -> &mut [u8] {
        self.check(offset, len, 1);
        // SAFETY: in bounds (checked); exclusivity is the caller's contract above.
        unsafe { std::slice::from_raw_parts_mut(self.map.as_mut_ptr().add(offset), len) }
    }
}

/// A whole file mapped read-only and shared, which another process may write at any
/// time (the change-feed log `prescient-dpu` appends to). It is read only by aligned
/// 8-byte atomic loads: no reference to its bytes is ever handed out, so a concurrent
/// writer changes only the values loaded, which the caller checks.
pub struct FileView {
    map: MmapRaw,
    len: usize,
}

// SAFETY: the mapping is read-only shared memory reached only through atomic loads in
// `load_u64`; loading from several threads at once is as sound as from several
// processes.
unsafe impl Sync for FileView {}
// SAFETY: see `Sync`; the mapping is not tied to the creating thread.
unsafe impl Send for FileView {}

impl std::fmt::Debug for FileView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileView").field("len", &self.len).finish()
    }
}

impl FileView {
    /// Maps the first `len` bytes of `file` (opened for reading) read-only and shared.
    /// `len` must be non-zero and at most the file's length: the caller checked it,
    /// since an access past the end of the file would be a SIGBUS, not an error.
    pub fn map(file: &File, len: usize) -> std::io::Result<Self> {
        assert!(len > 0, "an empty mapping has nothing to read");
        let map = MmapOptions::new().len(len).map_raw_read_only(file)?;
        Ok(Self { map, len })
    }

    /// Bytes mapped.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing is mapped (never: [`FileView::map`] refuses an empty mapping).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The `u64` word at `offset` (8-byte aligned, inside the mapping; a programmer
    /// error otherwise), loaded atomically with `order` (`Relaxed` or `Acquire`).
    pub fn load_u64(&self, offset: usize, order: Ordering) -> u64 {
        assert!(
            offset % 8 == 0 && offset.checked_add(8).is_some_and(|end| end <= self.len),
            "file view access {offset}+8 outside {} bytes or misaligned",
            self.len
        );
        // SAFETY: in bounds and 8-byte aligned (checked above; the mapping starts on a
        // page); the mapping lives as long as `self` and the caller checked the file
        // is at least `len` long. The memory is read-only: an atomic load of a word no
        // larger than a pointer, Relaxed or Acquire, is allowed on read-only memory
        // (std::sync::atomic, "Atomic accesses to read-only memory"); nothing here
        // stores to it. The writer's plain stores race with this load only as a peer
        // process's would: the value may be any mix, which the caller validates.
        unsafe { AtomicU64::from_ptr(self.map.as_ptr().add(offset).cast::<u64>().cast_mut()).load(order) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_then_open_sees_the_same_layout_and_words() {
        let dir = std::env::temp_dir().join(format!("prescient-region-{}", std::process::id()));
        let _ = std::fs::remove_file(&dir);
        let a = Region::create(&dir, RegionConfig::default(), false).unwrap();
        let b = Region::open(&dir, false).unwrap();
        assert_eq!(a.layout(), b.layout());
        a.u64_at(crate::layout::header::HOST_HEARTBEAT).store(42, std::sync::atomic::Ordering::Release);
        assert_eq!(b.u64_at(crate::layout::header::HOST_HEARTBEAT).load(std::sync::atomic::Ordering::Acquire), 42);
        assert!(matches!(Region::create(&dir, RegionConfig::default(), false), Err(ShimError::Exists(_))));
        std::fs::remove_file(&dir).unwrap();
    }

    #[test]
    fn a_pinned_region_is_locked_or_the_error_says_how_to_allow_it() {
        let path = std::env::temp_dir().join(format!("prescient-region-pin-{}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let locked_kb = || {
            let status = std::fs::read_to_string("/proc/self/status").unwrap();
            let line = status.lines().find(|l| l.starts_with("VmLck:")).unwrap().to_owned();
            line.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap()
        };
        let before = locked_kb();
        match Region::create(&path, RegionConfig::default(), true) {
            Ok(region) => {
                assert!(region.pinned());
                assert!(locked_kb() >= before + region.layout().region_bytes as u64 / 1024 / 2);
                std::fs::remove_file(&path).unwrap();
            }
            Err(e) => {
                assert!(matches!(e, ShimError::Pin { .. }), "{e}");
                assert!(e.to_string().contains("ulimit -l"), "{e}");
                assert!(!path.exists(), "a failed create leaves no file");
            }
        }
    }

    #[test]
    #[should_panic(expected = "outside")]
    fn an_access_past_the_end_is_a_loud_bug() {
        let path = std::env::temp_dir().join(format!("prescient-region-oob-{}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let region = Region::create(&path, RegionConfig::default(), false).unwrap();
        std::fs::remove_file(&path).unwrap();
        let end = region.layout().region_bytes;
        region.u32_at(end);
    }
}
