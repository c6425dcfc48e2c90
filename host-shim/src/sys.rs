//! System calls on the shared region: sleeping on a word of it (the slow half of
//! adaptive waiting) and asking whether the peer process exists.
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
