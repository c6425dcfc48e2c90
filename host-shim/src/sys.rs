//! System calls on the shared region: sleeping on a word of it (the slow half of
//! adaptive waiting), asking whether the peer process exists, and the monotonic clock
//! both sides measure the directory lease with.
//!
//! Waiters spin first (see [`crate::QueuePair::wait`]), then sleep here. The futex is the
//! process-shared kind (no `FUTEX_PRIVATE_FLAG`), keyed by the mapped file's page,
//! so a wake from the other process reaches the sleeper.
#![allow(unsafe_code)]

use std::sync::atomic::AtomicU32;
use std::time::Duration;

/// Sleeps while `word` still holds `expected`, for at most `timeout`. Returns on a
/// wake, a changed word, a timeout or a signal alike: callers recheck their condition.
pub fn wait(word: &AtomicU32, expected: u32, timeout: Duration) {
    let ts =
        libc::timespec { tv_sec: timeout.as_secs() as libc::time_t, tv_nsec: timeout.subsec_nanos() as libc::c_long };
    // SAFETY: `word` is a live, 4-byte aligned u32 (an AtomicU32) for the whole call;
    // `ts` outlives the call; FUTEX_WAIT reads the word and the timeout only.
    unsafe {
        libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAIT, expected, &ts as *const libc::timespec);
    }
}

/// Wakes every process sleeping on `word`.
pub fn wake_all(word: &AtomicU32) {
    // SAFETY: `word` is a live, aligned u32; FUTEX_WAKE does not touch its memory.
    unsafe {
        libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE, i32::MAX);
    }
}

/// `kill(pid, 0)`: asks whether `pid` exists without sending anything. Returns the
/// errno on failure (`ESRCH`: no such process).
pub fn kill0(pid: i32) -> Result<(), i32> {
    // SAFETY: signal 0 delivers nothing; kill only looks the process up.
    let rc = unsafe { libc::kill(pid, 0) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
    }
}

/// Sends SIGTERM to `pid`.
pub fn terminate(pid: u32) -> std::io::Result<()> {
    let pid = i32::try_from(pid).map_err(|_| std::io::Error::from_raw_os_error(libc::ESRCH))?;
    // SAFETY: kill only signals the process; no memory is passed.
    if unsafe { libc::kill(pid, libc::SIGTERM) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// `CLOCK_MONOTONIC` in nanoseconds: the clock of the directory lease
/// ([`crate::layout::header::DIRECTORY_LEASE_UNTIL_NS`]). The DPU app in emulation runs
/// on the same kernel and uses the same clock, so host and DPU agree on it.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a live timespec that clock_gettime only writes; CLOCK_MONOTONIC
    // exists on every Linux kernel, so the call cannot fail on a valid pointer.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    debug_assert_eq!(rc, 0, "clock_gettime(CLOCK_MONOTONIC)");
    (ts.tv_sec as u64).saturating_mul(1_000_000_000).saturating_add(ts.tv_nsec as u64)
}

/// `CLOCK_MONOTONIC_COARSE` in nanoseconds: the monotonic clock as of the kernel's last
/// tick (a few ms of resolution), read from the vDSO without the time stamp counter.
pub fn coarse_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a live timespec that clock_gettime only writes;
    // CLOCK_MONOTONIC_COARSE exists on every Linux kernel since 2.6.32.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut ts) };
    debug_assert_eq!(rc, 0, "clock_gettime(CLOCK_MONOTONIC_COARSE)");
    (ts.tv_sec as u64).saturating_mul(1_000_000_000).saturating_add(ts.tv_nsec as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_monotonic_clock_never_goes_back_and_matches_instant() {
        let before = std::time::Instant::now();
        let a = monotonic_ns();
        std::thread::sleep(std::time::Duration::from_millis(2));
        let b = monotonic_ns();
        let elapsed = before.elapsed();
        assert!(a > 0 && b > a);
        // Instant is CLOCK_MONOTONIC on Linux too: what passed between the two
        // readings cannot exceed what Instant saw around them.
        assert!(b - a <= elapsed.as_nanos() as u64, "{} ns > {elapsed:?}", b - a);
    }
}
