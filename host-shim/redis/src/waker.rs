//! Wakes Redis's event loop when completions arrive. Redis sleeps in `epoll_wait`; the
//! DPU app signals completions on a futex word in the region. A thread of this module
//! sleeps on that word through the queue pair's `CompletionSignal` and, when there are
//! completions it has not reported, writes an eventfd that the event loop watches; the
//! loop's callback then reaps the completions on the main thread, which alone touches
//! the queue pair.

use std::fs::File;
use std::io::Write as _;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use prescient_shim::CompletionSignal;

/// Longest the thread sleeps before it looks again (a lost wake-up costs at most this).
const NAP: Duration = Duration::from_millis(10);

/// The waker thread and the eventfd it writes.
#[derive(Debug)]
pub struct Waker {
    fd: File,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Waker {
    /// Starts watching the completion ring behind `signal`.
    pub fn start(signal: CompletionSignal) -> std::io::Result<Self> {
        let fd = crate::api::eventfd()?;
        // The thread writes through a second descriptor of the same eventfd.
        let writer = fd.try_clone()?;
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let stop = Arc::clone(&stop);
            std::thread::Builder::new().name("prescient-waker".into()).spawn(move || run(signal, writer, &stop))?
        };
        Ok(Self { fd, stop, thread: Some(thread) })
    }

    /// The descriptor the event loop watches.
    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Empties the eventfd (the event loop's callback, before it reaps).
    pub fn drain(&self) {
        let mut count = [0u8; 8];
        let _ = std::io::Read::read(&mut (&self.fd), &mut count);
    }
}

impl Drop for Waker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn run(mut signal: CompletionSignal, mut fd: File, stop: &AtomicBool) {
    while !stop.load(Ordering::Acquire) {
        if signal.wait(NAP) {
            let _ = fd.write(&1u64.to_ne_bytes());
        }
    }
}
