//! A region file that shrinks under its mapping fences that region, not the process.
//!
//! A host owns its region file and may truncate it at any time. Touching a page of a
//! `MAP_SHARED` mapping past the file's end is a SIGBUS, whose default action kills
//! the process: for the DPU app, the service of every region. Two defences, since
//! neither suffices alone:
//!
//! - The serving loop `fstat`s each region file every few milliseconds
//!   ([`Region::check_size`](crate::region::Region::check_size)) and fences a region
//!   whose file is shorter than its mapping before it is touched again. That catches
//!   a shrink the DPU app has not run into yet, with a clear log line, but a truncate
//!   can land between the check and any access.
//! - So a guarded mapping is also registered here, and a SIGBUS handler recovers a
//!   fault inside one: it maps zeroed private anonymous memory over the whole mapping
//!   in place (`mmap` with `MAP_FIXED`, a plain system call, safe in a handler),
//!   marks the region lost, and returns. The faulting access then repeats on the new
//!   pages and the serving loop drops the region at its next look. To the code that
//!   reads the region this is the host overwriting it with zeros, which every reader
//!   already survives: nothing read from a region is trusted unchecked.
//!
//! A SIGBUS whose address is in no registered mapping (or one sent by `kill`) goes
//! to the disposition installed before ours (Rust's own stack-guard handler, or the
//! default action), exactly as if ours were not there.
//!
//! Why not `sigsetjmp`/`siglongjmp` back to the serving loop: jumping over Rust frames
//! skips their destructors and leaves whatever they held half-updated, which Rust
//! does not allow; replacing the pages lets the interrupted code finish normally.
//!
//! Registration and the handler share a fixed table of atomics: the handler takes no
//! lock and allocates nothing. A registration is dropped before its mapping is
//! unmapped (the [`Guard`] is a field of the region that drops before the mapping),
//! so the handler never maps over an address the region no longer owns.
#![allow(unsafe_code)]

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::OnceLock;

/// Mappings guarded at once: far more regions than one DPU app serves.
pub const GUARDED_MAPPINGS_MAX: usize = 256;

struct Slot {
    /// The mapping's start; 0 while the slot is free or being filled.
    base: AtomicUsize,
    /// The mapping's length in bytes.
    len: AtomicUsize,
    /// Set once the mapping was replaced by zeroed memory.
    lost: AtomicBool,
    /// Held by a [`Guard`].
    taken: AtomicBool,
}

impl Slot {
    const fn new() -> Self {
        Self {
            base: AtomicUsize::new(0),
            len: AtomicUsize::new(0),
            lost: AtomicBool::new(false),
            taken: AtomicBool::new(false),
        }
    }
}

static SLOTS: [Slot; GUARDED_MAPPINGS_MAX] = [const { Slot::new() }; GUARDED_MAPPINGS_MAX];

/// The SIGBUS disposition before ours (set once, when ours is installed).
static PREVIOUS: OnceLock<Previous> = OnceLock::new();

struct Previous(libc::sigaction);

// SAFETY: a plain C struct of a handler address, flags and a signal mask, written once
// before it is shared and only read after; nothing in it points to thread-local state.
unsafe impl Sync for Previous {}
// SAFETY: as for `Sync`.
unsafe impl Send for Previous {}

/// A registered mapping; unregisters on drop.
#[derive(Debug)]
pub struct Guard {
    slot: usize,
}

impl Guard {
    /// Registers the mapping at `base`, `len` bytes long, installing the SIGBUS handler
    /// on first use. `None` if every slot is taken or the handler cannot be installed
    /// (the mapping is then unguarded).
    ///
    /// # Safety
    /// `base..base + len` must be a mapping the caller owns, for as long as the guard
    /// lives (drop the guard before unmapping it): a fault inside it replaces it with
    /// zeroed private memory, from any thread, at any time.
    pub unsafe fn register(base: *mut u8, len: usize) -> Option<Self> {
        if base.is_null() || len == 0 || !install() {
            return None;
        }
        let slot = SLOTS
            .iter()
            .position(|s| s.taken.compare_exchange(false, true, Ordering::AcqRel, Ordering::Relaxed).is_ok())?;
        let s = &SLOTS[slot];
        s.lost.store(false, Ordering::Relaxed);
        s.len.store(len, Ordering::Relaxed);
        // Release: the handler that sees this base sees the length and flag above.
        s.base.store(base as usize, Ordering::Release);
        Some(Self { slot })
    }

    /// Whether the mapping was replaced by zeroed memory (its file shrank under it).
    pub fn lost(&self) -> bool {
        SLOTS[self.slot].lost.load(Ordering::Acquire)
    }

    /// Replaces the mapping by zeroed memory now (the caller found the file shorter
    /// than the mapping) and marks it lost. False if the replacement failed.
    pub fn fence(&self) -> bool {
        let s = &SLOTS[self.slot];
        let (base, len) = (s.base.load(Ordering::Acquire), s.len.load(Ordering::Relaxed));
        // SAFETY: `register`'s contract: the caller owns this mapping while the guard
        // lives, and replacing it with zeroed memory is what it agreed to.
        let replaced = unsafe { zero_over(base, len) };
        if replaced {
            s.lost.store(true, Ordering::Release);
        }
        replaced
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        let s = &SLOTS[self.slot];
        // Release: the handler stops matching this mapping before the slot is reused
        // (and before the owner unmaps it, which happens after this drop).
        s.base.store(0, Ordering::Release);
        s.len.store(0, Ordering::Relaxed);
        s.taken.store(false, Ordering::Release);
    }
}

/// Installs the SIGBUS handler once; whether it is installed.
fn install() -> bool {
    static INSTALLED: OnceLock<bool> = OnceLock::new();
    *INSTALLED.get_or_init(|| {
        // SAFETY: both sigaction structs are fully initialised (zeroed, then the
        // handler, flags and an empty mask); `on_sigbus` is an `extern "C"` function of
        // the SA_SIGINFO shape that only makes async-signal-safe calls.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction =
                on_sigbus as extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) as libc::sighandler_t;
            action.sa_flags = libc::SA_SIGINFO;
            libc::sigemptyset(&mut action.sa_mask);
            let mut previous: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(libc::SIGBUS, &action, &mut previous) != 0 {
                return false;
            }
            let _ = PREVIOUS.set(Previous(previous));
            true
        }
    })
}

/// Maps zeroed private anonymous memory over `base..base + len` in place.
///
/// # Safety
/// The range must be a mapping the caller owns and no Rust reference may rely on its
/// contents staying put (every region access is atomic or a checked copy).
unsafe fn zero_over(base: usize, len: usize) -> bool {
    if base == 0 || len == 0 {
        return false;
    }
    // SAFETY: MAP_FIXED over a range the caller owns (the contract above); the kernel
    // replaces the old pages atomically with respect to other threads' accesses.
    let at = unsafe {
        libc::mmap(
            base as *mut libc::c_void,
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
            -1,
            0,
        )
    };
    at as usize == base
}

extern "C" fn on_sigbus(signal: libc::c_int, info: *mut libc::siginfo_t, _context: *mut libc::c_void) {
    // SAFETY: errno is this thread's; the handler saves it and puts it back, so the
    // interrupted code never sees the handler's system calls in it.
    let errno = unsafe { *libc::__errno_location() };
    // SAFETY: the kernel passes a valid siginfo for an SA_SIGINFO handler; `si_addr`
    // is the faulting address for a fault's SIGBUS (checked by the code first).
    let (code, addr) = unsafe { ((*info).si_code, (*info).si_addr() as usize) };
    let mut recovered = false;
    // BUS_ADRERR: the kernel's "nonexistent physical address", a page past the file's
    // end. A SIGBUS from `kill` or of another cause is not ours to swallow.
    if code == libc::BUS_ADRERR {
        for s in &SLOTS {
            let base = s.base.load(Ordering::Acquire);
            if base == 0 || addr < base {
                continue;
            }
            let len = s.len.load(Ordering::Relaxed);
            if addr - base < len {
                // SAFETY: a registered mapping, owned by its guard's region while the
                // slot holds its base; a thread is inside it now, so it is not being
                // dropped. The access repeats on the zeroed pages after we return.
                recovered = unsafe { zero_over(base, len) };
                if recovered {
                    s.lost.store(true, Ordering::Release);
                }
                break;
            }
        }
    }
    if !recovered {
        // Not ours: give the fault to the disposition before ours. It repeats when we
        // return, and the previous handler (or the default action) takes it.
        // SAFETY: sigaction is async-signal-safe; the struct was saved at install (or,
        // if it was never saved, the default action is restored).
        unsafe {
            match PREVIOUS.get() {
                Some(Previous(previous)) => libc::sigaction(signal, previous, std::ptr::null_mut()),
                None => {
                    let mut default: libc::sigaction = std::mem::zeroed();
                    default.sa_sigaction = libc::SIG_DFL;
                    libc::sigaction(signal, &default, std::ptr::null_mut())
                }
            };
        }
    }
    // SAFETY: as above: put back the interrupted code's errno.
    unsafe { *libc::__errno_location() = errno };
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// A file mapped shared, then truncated to nothing: touching the mapping reads
    /// zeros (and is marked lost) instead of killing the test process.
    #[test]
    fn a_fault_past_the_end_of_a_truncated_file_is_recovered_and_marked_lost() {
        let path = std::env::temp_dir().join(format!("prescient-guard-{}", std::process::id()));
        let mut file =
            std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(true).open(&path).unwrap();
        file.write_all(&[7u8; 3 * 4096]).unwrap();
        let map = memmap2::MmapOptions::new().len(3 * 4096).map_raw(&file).unwrap();
        // SAFETY: `map` is ours and outlives the guard (dropped first, below).
        let guard = unsafe { Guard::register(map.as_mut_ptr(), map.len()) }.expect("a free slot");
        let word = |offset: usize| {
            // SAFETY: in bounds and aligned; accessed only atomically.
            unsafe { &*map.as_ptr().add(offset).cast::<std::sync::atomic::AtomicU64>() }
        };
        assert_eq!(word(4096).load(Ordering::Relaxed), 0x0707_0707_0707_0707);
        assert!(!guard.lost());
        file.set_len(0).unwrap();
        assert_eq!(word(4096).load(Ordering::Relaxed), 0, "the fault was recovered with zeroed memory");
        assert!(guard.lost());
        word(8192).store(5, Ordering::Relaxed);
        assert_eq!(word(8192).load(Ordering::Relaxed), 5, "the replacement is ordinary memory");
        drop(guard);
        drop(map);
        let _ = std::fs::remove_file(&path);
    }
}
