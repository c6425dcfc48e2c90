//! A spin lock for the emulated NIC's short critical sections: a completion queue's
//! entries and attached queue pairs, a queue pair's receive queue. (The send queue keeps
//! a `Mutex`: over TCP it is held across a socket write that may block, and a reader
//! thread spinning on it cost more than the atomic it saved.)
//!
//! Why not `std::sync::Mutex`: its unlock is an atomic swap (it must learn whether a
//! sleeper needs waking), so every uncontended lock and unlock costs two atomic
//! read-modify-writes; an in-process round trip takes several such locks, and those
//! atomics were most of its cost. Here the unlock is a plain release store: one atomic
//! read-modify-write per critical section. Nothing ever sleeps on this lock: the emulated
//! NIC never sleeps while holding one (blocking waits use their own mutex and condition
//! variable next to it), so a contender spins briefly and then yields its core, which on a
//! machine with fewer cores than threads lets the holder run. A holder that takes long
//! (a multi-megabyte SEND copied into a receive buffer) makes a
//! contender that has yielded [`SPIN_LOCK_YIELDS`] times back off in short sleeps instead
//! of burning the core the holder's peer may need.
//!
//! Invariant: `value` is only reached through a [`SpinGuard`], and a guard exists only
//! while `locked` is true and was set by the thread that made the guard.
#![allow(unsafe_code)]

use std::cell::UnsafeCell;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::limits::{SPIN_LOCK_BACKOFF_US, SPIN_LOCK_SPINS, SPIN_LOCK_YIELDS};

/// A lock whose uncontended acquire is one compare-and-swap and whose release is a store.
pub(crate) struct SpinLock<T> {
    locked: AtomicBool,
    value: UnsafeCell<T>,
}

// SAFETY: the lock hands out access to `value` to one thread at a time (see the module
// invariant), so sharing the lock shares `T` only as a `Mutex<T>` would: `T: Send` suffices.
unsafe impl<T: Send> Sync for SpinLock<T> {}
// SAFETY: moving the lock moves the `T` it owns.
unsafe impl<T: Send> Send for SpinLock<T> {}

impl<T> SpinLock<T> {
    pub(crate) fn new(value: T) -> Self {
        Self { locked: AtomicBool::new(false), value: UnsafeCell::new(value) }
    }

    /// Takes the lock, spinning and then yielding while another thread holds it.
    pub(crate) fn lock(&self) -> SpinGuard<'_, T> {
        let mut spins = 0u32;
        // Acquire: pairs with the Release store of the previous holder's unlock, so its
        // writes to `value` are visible to us.
        while self.locked.compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed).is_err() {
            // Wait on a plain load, so the line stays shared until the holder lets go.
            while self.locked.load(Ordering::Relaxed) {
                if spins < SPIN_LOCK_SPINS {
                    std::hint::spin_loop();
                } else if spins < SPIN_LOCK_SPINS + SPIN_LOCK_YIELDS {
                    std::thread::yield_now();
                } else {
                    std::thread::sleep(Duration::from_micros(SPIN_LOCK_BACKOFF_US));
                }
                spins = spins.saturating_add(1);
            }
        }
        SpinGuard { lock: self }
    }
}

/// Access to a [`SpinLock`]'s value; dropping it releases the lock.
pub(crate) struct SpinGuard<'a, T> {
    lock: &'a SpinLock<T>,
}

impl<T> Deref for SpinGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: this guard's thread holds the lock (module invariant), so no other
        // reference to `value` exists while this one lives.
        unsafe { &*self.lock.value.get() }
    }
}

impl<T> DerefMut for SpinGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as in `deref`; `&mut self` makes this the only reference from this guard.
        unsafe { &mut *self.lock.value.get() }
    }
}

impl<T> Drop for SpinGuard<'_, T> {
    fn drop(&mut self) {
        // Release: our writes to `value` happen before the next holder's Acquire.
        self.lock.locked.store(false, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn increments_from_several_threads_are_not_lost() {
        let lock = Arc::new(SpinLock::new(0u64));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let lock = Arc::clone(&lock);
                std::thread::spawn(move || {
                    for _ in 0..10_000 {
                        *lock.lock() += 1;
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(*lock.lock(), 40_000);
    }
}
