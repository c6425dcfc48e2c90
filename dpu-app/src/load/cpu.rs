//! CPU time used, from `getrusage`: what a benchmark divides its work by to state it
//! per CPU-second. The only module of `load` that calls the OS directly.
#![allow(unsafe_code)]

/// Whose CPU time to read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Who {
    /// Every thread of this process.
    Process,
    /// The calling thread only.
    Thread,
}

/// User plus system CPU seconds used so far by `who`.
pub fn cpu_seconds(who: Who) -> f64 {
    let which = match who {
        Who::Process => libc::RUSAGE_SELF,
        Who::Thread => libc::RUSAGE_THREAD,
    };
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: `usage` points to writable memory the size of a `rusage`, which
    // getrusage fills on success; `which` is one of the two values the call accepts.
    let rc = unsafe { libc::getrusage(which, usage.as_mut_ptr()) };
    if rc != 0 {
        return 0.0;
    }
    // SAFETY: the call succeeded, so it initialised the whole struct (and it was
    // zeroed before, so every field holds a valid integer either way).
    let usage = unsafe { usage.assume_init() };
    let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    seconds(usage.ru_utime) + seconds(usage.ru_stime)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spinning_uses_cpu_time_and_the_thread_is_part_of_the_process() {
        let (p0, t0) = (cpu_seconds(Who::Process), cpu_seconds(Who::Thread));
        let mut x = 1u64;
        while cpu_seconds(Who::Thread) - t0 < 0.02 {
            for i in 0..10_000u64 {
                x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(i));
            }
        }
        let (p1, t1) = (cpu_seconds(Who::Process), cpu_seconds(Who::Thread));
        assert!(t1 - t0 >= 0.02);
        assert!(p1 - p0 >= t1 - t0 - 0.01, "process {p0} -> {p1}, thread {t0} -> {t1}");
    }
}
