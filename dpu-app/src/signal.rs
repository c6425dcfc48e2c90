//! SIGINT and SIGTERM set a flag that the serving loop checks, so the DPU app
//! detaches cleanly and prints its summary.
#![allow(unsafe_code)]

use std::sync::atomic::{AtomicBool, Ordering};

use crate::Error;

/// Set when SIGINT or SIGTERM arrives.
pub static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_signal: libc::c_int) {
    // Only an atomic store: async-signal-safe.
    STOP.store(true, Ordering::Relaxed);
}

/// Installs the handler for SIGINT and SIGTERM.
pub fn install() -> Result<&'static AtomicBool, Error> {
    for (signal, name) in [(libc::SIGINT, "SIGINT"), (libc::SIGTERM, "SIGTERM")] {
        // SAFETY: `on_signal` is an `extern "C"` function that only stores to an
        // atomic, which is async-signal-safe; the sigaction struct is fully initialised.
        let rc = unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as usize;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(signal, &action, std::ptr::null_mut())
        };
        if rc != 0 {
            return Err(Error::Signal { signal: name, source: std::io::Error::last_os_error() });
        }
    }
    Ok(&STOP)
}
