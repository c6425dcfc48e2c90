//! A completion signal: lets another thread sleep until a queue pair has completions,
//! without touching the queue pair itself.
//!
//! An event-loop store (Redis) must not block its loop in [`crate::QueuePair::wait`];
//! it wants a thread that sleeps on the completion ring's futex and tells the loop
//! (an eventfd, a pipe) when there is something to reap, while the loop's thread alone
//! reaps. [`CompletionSignal::wait`] is that thread's half: the same sleeping protocol
//! as `QueuePair::wait` (set the waiting flag, SeqCst fence, look at the tail, sleep on
//! the doorbell), reading only the completion ring's index words.
//!
//! While a signal waits it keeps the queue pair's waiting flag set, so the DPU app
//! wakes it after every completion it publishes; the flag is cleared when the signal
//! drops. Use one signal per queue pair, and do not also block in `QueuePair::wait`
//! on it (that clears the flag on its way out; the signal would then notice
//! completions only at its next nap's end).

use std::sync::atomic::{fence, Ordering};
use std::time::Duration;

use crate::queue::QueueWords;

/// The waiting half of a queue pair's completion ring, for a thread of its own (see
/// the module documentation). Made by [`crate::QueuePair::completion_signal`].
#[derive(Debug)]
pub struct CompletionSignal {
    words: QueueWords,
    /// The completion tail at the last `true` from [`CompletionSignal::wait`].
    signalled: u32,
}

impl CompletionSignal {
    pub(crate) fn new(words: QueueWords) -> Self {
        let signalled = words.cq_head().load(Ordering::Acquire);
        Self { words, signalled }
    }

    /// Waits at most `nap` for completions on the ring that it has not reported
    /// before; true if there are (the queue pair's owner should reap), false if the
    /// nap ended first. Completions published while nobody reaps are reported once.
    pub fn wait(&mut self, nap: Duration) -> bool {
        let seen = self.words.cq_doorbell().load(Ordering::Acquire);
        self.words.host_waiting().store(1, Ordering::Relaxed);
        // SeqCst: the waiting flag is visible before the tail is read; pairs with the
        // DPU app's fence between publishing the tail and reading the flag.
        fence(Ordering::SeqCst);
        if self.fresh() {
            return true;
        }
        crate::sys::wait(self.words.cq_doorbell(), seen, nap);
        self.fresh()
    }

    /// Whether the tail moved since the last report and is ahead of the head.
    fn fresh(&mut self) -> bool {
        let tail = self.words.cq_tail().load(Ordering::Acquire);
        if tail != self.signalled && tail != self.words.cq_head().load(Ordering::Acquire) {
            self.signalled = tail;
            return true;
        }
        false
    }
}

impl Drop for CompletionSignal {
    fn drop(&mut self) {
        self.words.host_waiting().store(0, Ordering::Relaxed);
    }
}
