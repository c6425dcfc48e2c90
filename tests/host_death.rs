//! A host process that dies holding buffers: the DPU app notices, reclaims every
//! buffer it held, and keeps serving another host's region; a restarted host attaches
//! to the region and finds its arena whole.

use std::process::{Command, Stdio};
use std::sync::atomic::Ordering;
use std::time::Duration;

use prescient::{host_options, wait_served, wait_until, DpuProcess, TempRegion};
use prescient_shim::arena::BufferState;
use prescient_shim::region::Region;
use prescient_shim::{Host, RegionConfig, Request, Status};

const ROLE: &str = "PRESCIENT_TEST_DYING_HOST";

fn config() -> RegionConfig {
    prescient::small_region_config()
}

/// The child's part: become the host of the region named in the environment, do a
/// few PUTs, take 10 buffers and hold them, say so, and wait to be killed.
fn dying_host(path: &str) {
    let host = Host::create(path.as_ref(), config(), host_options()).unwrap();
    assert!(wait_served(&host));
    let mut qp = host.queue_pair(0).unwrap();
    for i in 0..4 {
        let buf = host.take_buffer().unwrap();
        qp.submit(Request::put(b"k", buf, 0).user_data(i)).map_err(|(e, _)| e).unwrap();
    }
    let mut done = 0;
    while done < 4 {
        done += qp.wait(Duration::from_secs(10), |c| assert_eq!(c.status, Status::Ok)).unwrap();
    }
    let held: Vec<_> = (0..10).map(|_| host.take_buffer().unwrap()).collect();
    println!("holding {}", held.len());
    std::thread::sleep(Duration::from_secs(60));
}

/// Runs test `test` of this binary as the dying host of the region at `path` (it
/// creates the region and takes 10 buffers), until the guard drops.
fn spawn_host(test: &str, path: &std::path::Path) -> Killed {
    let child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", test, "--nocapture"])
        .env(ROLE, path)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    Killed(child)
}

/// How many of the region's 16 buffers are in `state`.
fn buffers_in(region: &Region, state: BufferState) -> usize {
    (0..16)
        .filter(|&i| {
            BufferState::of(region.u32_at(region.layout().buffer_state(i)).load(Ordering::Acquire)) == Some(state)
        })
        .count()
}

#[test]
fn a_dead_hosts_buffers_are_reclaimed_and_other_hosts_keep_being_served() {
    if let Ok(path) = std::env::var(ROLE) {
        dying_host(&path);
        return;
    }
    let dying = TempRegion::new("dying-host");
    let other = TempRegion::new("other-host");
    let other_host = Host::create(&other.0, config(), host_options()).unwrap();
    let child = spawn_host("a_dead_hosts_buffers_are_reclaimed_and_other_hosts_keep_being_served", &dying.0);
    assert!(wait_until(Duration::from_secs(20), || dying.0.exists()), "child never created its region");
    std::thread::sleep(Duration::from_millis(50));
    let dpu = DpuProcess::serve(&[&dying.0, &other.0], &["--host-timeout-ms", "300"]);
    assert!(wait_served(&other_host));

    // Wait until the child holds its buffers, then kill it (no clean detach).
    let region = Region::open(&dying.0, false).unwrap();
    let held = |state| buffers_in(&region, state);
    assert!(wait_until(Duration::from_secs(20), || held(BufferState::Host) == 10), "child never took its buffers");
    drop(child);

    // The DPU app notices and reclaims all ten.
    assert!(wait_until(Duration::from_secs(10), || held(BufferState::Free) == 16), "buffers not reclaimed");

    // The other host is served throughout.
    let mut qp = other_host.queue_pair(0).unwrap();
    let buf = other_host.take_buffer().unwrap();
    qp.submit(Request::put(b"still-here", buf, 0).user_data(7)).map_err(|(e, _)| e).unwrap();
    let mut status = None;
    qp.wait(Duration::from_secs(10), |c| status = Some(c.status)).unwrap();
    assert_eq!(status, Some(Status::Ok));

    // A restarted host attaches to the dead one's region and gets served.
    let again = Host::attach(&dying.0, host_options()).unwrap();
    let mut qp = again.queue_pair(0).unwrap();
    let taken: Vec<_> = (0..16).map(|_| again.take_buffer().unwrap()).collect();
    assert_eq!(taken.len(), 16, "the whole arena is free again");
    drop(taken);
    let buf = again.take_buffer().unwrap();
    qp.submit(Request::put(b"reborn", buf, 0).user_data(8)).map_err(|(e, _)| e).unwrap();
    let mut seen = Vec::new();
    qp.wait(Duration::from_secs(10), |c| seen.push((c.user_data, c.status))).unwrap();
    assert_eq!(seen, vec![(8, Status::Ok)]);

    let (_, stdout, _) = dpu.stop();
    assert!(stdout.contains("1 host deaths"), "{stdout}");
}

/// A host whose heartbeat stops while its process lives (stopped with SIGSTOP: how a
/// host whose heartbeat thread is starved looks) keeps its buffers past the DPU app's
/// host timeout and is counted as a stall, not a death. The same silence from a host
/// whose pid the DPU app cannot check (another pid space, as for a host beside a
/// BlueField, whose pids are another kernel's) is a death: its buffers are reclaimed.
#[test]
fn a_silent_host_whose_process_lives_keeps_its_buffers_unless_its_pid_cannot_be_checked() {
    if let Ok(path) = std::env::var(ROLE) {
        dying_host(&path);
        return;
    }
    let stalled = TempRegion::new("stalled-host");
    let child =
        spawn_host("a_silent_host_whose_process_lives_keeps_its_buffers_unless_its_pid_cannot_be_checked", &stalled.0);
    assert!(wait_until(Duration::from_secs(20), || stalled.0.exists()), "child never created its region");
    std::thread::sleep(Duration::from_millis(50));
    let dpu = DpuProcess::serve(&[&stalled.0], &["--host-timeout-ms", "300"]);
    let region = Region::open(&stalled.0, false).unwrap();
    let held = |state| buffers_in(&region, state);
    assert!(wait_until(Duration::from_secs(20), || held(BufferState::Host) == 10), "child never took its buffers");
    let pid = child.0.id() as i32;
    // SAFETY: kill(2) with a pid this test spawned and has not reaped; it only signals.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0);

    // Five host timeouts of silence: the process lives, so nothing is reclaimed.
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(held(BufferState::Host), 10, "a stalled host's buffers were reclaimed");

    // The same host as seen from another pid space: its heartbeat is all there is.
    let foreign = !prescient_shim::liveness::pid_space() | 1;
    region.u64_at(prescient_shim::layout::header::HOST_PID_SPACE).store(foreign, Ordering::Release);
    assert!(wait_until(Duration::from_secs(10), || held(BufferState::Free) == 16), "buffers not reclaimed");

    drop(child);
    let (_, stdout, _) = dpu.stop();
    assert!(stdout.contains("1 host deaths; 1 host stalls"), "{stdout}");
}

/// A child process killed (SIGKILL, which also ends a stopped one) and reaped when
/// dropped: a failed assertion must not leave a stopped host behind.
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
