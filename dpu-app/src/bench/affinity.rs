//! CPU affinity for the benchmarks: each side of a two-party measurement on its own
//! core, so that neither the scheduler nor another process's load puts both on one
//! core (which turns a spinning producer/consumer pair into a time-sliced one and
//! swings the figures by orders of magnitude on a small machine).
#![allow(unsafe_code)]

/// The CPUs this process may run on, lowest first.
pub fn allowed() -> Vec<usize> {
    // SAFETY: `set` is a zeroed cpu_set_t that sched_getaffinity only writes, with its
    // exact size passed; pid 0 is the calling thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Vec::new();
        }
        (0..libc::CPU_SETSIZE as usize).filter(|&cpu| libc::CPU_ISSET(cpu, &set)).collect()
    }
}

/// Runs thread or process `pid` (0: the calling thread) on `cpu` only.
pub fn pin(pid: u32, cpu: usize) -> std::io::Result<()> {
    // SAFETY: `set` is a zeroed cpu_set_t; CPU_SET writes bit `cpu`, which is below
    // CPU_SETSIZE (checked); sched_setaffinity only reads the set of the size passed.
    let rc = unsafe {
        if cpu >= libc::CPU_SETSIZE as usize {
            return Err(std::io::Error::from_raw_os_error(libc::EINVAL));
        }
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(pid as libc::pid_t, std::mem::size_of::<libc::cpu_set_t>(), &set)
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}
