//! Attach and regions without hangs or crashes (issue 35, part 4), against a real
//! `prescient-dpu serve` process:
//!
//! - a host attaching to a region whose generation words were overwritten gives up
//!   after its `dpu_timeout` with an error saying to attach again, which works;
//! - a host that re-attaches to a region whose submission tail was left scribbled is
//!   served (its queue pair is not fenced for a tail it never wrote), while a tail it
//!   moves backwards itself still fences it;
//! - a host that truncates its region file loses that region only: the DPU app
//!   fences it off and keeps serving every other region.
//!
//! Every wait is bounded; nothing asserts on elapsed time.

use std::sync::atomic::Ordering;
use std::time::Duration;

use prescient::{host_and_dpu, host_options, wait_served, wait_until, DpuProcess, TempRegion};
use prescient_shim::layout::header;
use prescient_shim::region::Region;
use prescient_shim::{Host, HostOptions, QueuePair, RegionConfig, Request, ShimError, Status};

const WAIT: Duration = Duration::from_secs(20);

fn config() -> RegionConfig {
    prescient::small_region_config()
}

/// PUTs `key` on `qp` and returns the completion's status, or the error the wait met.
fn put(host: &Host, qp: &mut QueuePair, key: &[u8], tag: u64) -> Result<Status, ShimError> {
    let buf = host.take_buffer()?;
    qp.submit(Request::put(key, buf, 0).user_data(tag)).map_err(|(e, _)| e)?;
    let mut got = None;
    while got.is_none() {
        qp.wait(WAIT, |c| got = Some((c.user_data, c.status)))?;
    }
    let (user_data, status) = got.expect("a completion");
    assert_eq!(user_data, tag);
    Ok(status)
}

/// `Host::attach` run on a thread, waited for at most `limit`: a hang is a failed
/// assertion here, not a test run that never ends.
fn attach_within(
    path: &std::path::Path,
    options: HostOptions,
    limit: Duration,
) -> Result<std::sync::Arc<Host>, ShimError> {
    let (tx, rx) = std::sync::mpsc::channel();
    let path = path.to_path_buf();
    std::thread::spawn(move || {
        let _ = tx.send(Host::attach(&path, options));
    });
    rx.recv_timeout(limit).unwrap_or_else(|_| panic!("Host::attach did not return within {limit:?}"))
}

#[test]
fn attach_to_a_region_with_overwritten_generation_words_gives_up_and_attaching_again_works() {
    let (region, creator, _dpu) = host_and_dpu("attach-scribbled", config(), &[]);
    drop(creator);
    // The DPU app serves generation g. The region's words now say: host generation
    // g - 1 (the next attach claims g, which the DPU app takes for the host it serves
    // already) and a served word that is not g.
    let words = Region::open(&region.0, false).unwrap();
    let g = words.u32_at(header::HOST_GENERATION).load(Ordering::Acquire);
    words.u32_at(header::HOST_GENERATION).store(g.wrapping_sub(1), Ordering::Release);
    words.u32_at(header::DPU_SERVED_GENERATION).store(0xdead_beef, Ordering::Release);

    let options = HostOptions { pin: false, dpu_timeout: Duration::from_millis(300) };
    let err = attach_within(&region.0, options, Duration::from_secs(60)).unwrap_err();
    assert!(matches!(err, ShimError::AttachNotAcknowledged { .. }), "{err}");
    assert!(err.to_string().contains("attach again"), "{err}");

    // As the error says: attaching again claims g + 1, which is taken over.
    let host = attach_within(&region.0, host_options(), Duration::from_secs(60)).expect("the second attach");
    let mut qp = host.queue_pair(0).unwrap();
    assert_eq!(put(&host, &mut qp, b"after", 1).unwrap(), Status::Ok);
}

#[test]
fn a_reattached_host_is_served_past_a_scribbled_tail_and_fenced_for_its_own() {
    let (region, host, _dpu) = host_and_dpu("reattach-tail", config(), &[]);
    let mut qp = host.queue_pair(0).unwrap();
    for tag in 0..3 {
        assert_eq!(put(&host, &mut qp, b"before", tag).unwrap(), Status::Ok);
    }
    // The old incarnation leaves its submission tail moved backwards as it goes
    // (a crash mid-scribble, a bug): the DPU app cannot skip to it.
    let words = qp.words().clone();
    let tail = words.sq_tail().load(Ordering::Acquire);
    drop(qp);
    drop(host);
    words.sq_tail().store(tail.wrapping_sub(2), Ordering::Release);
    drop(words);

    // The re-attached host's honest PUTs are served.
    let host = attach_within(&region.0, host_options(), Duration::from_secs(60)).expect("re-attach");
    let mut qp = host.queue_pair(0).unwrap();
    for tag in 10..14 {
        assert_eq!(put(&host, &mut qp, b"after", tag).unwrap(), Status::Ok, "PUT {tag} after the re-attach");
    }

    // Its own misbehaviour is still fenced: a tail it moves backwards.
    let words = qp.words().clone();
    let tail = words.sq_tail().load(Ordering::Acquire);
    words.sq_tail().store(tail.wrapping_sub(1), Ordering::Release);
    assert!(
        wait_until(WAIT, || words.fence_reason().load(Ordering::Acquire) != 0),
        "a tail moved backwards by the new host is fenced"
    );
    let err = put(&host, &mut qp, b"fenced", 20).unwrap_err();
    assert!(matches!(err, ShimError::Fenced { .. }), "{err}");
    assert!(err.to_string().contains("backwards"), "{err}");
}

#[test]
fn a_host_truncating_its_region_file_loses_its_region_and_the_others_are_served() {
    let (a, b) = (TempRegion::new("truncate-a"), TempRegion::new("truncate-b"));
    let host_a = Host::create(&a.0, config(), host_options()).unwrap();
    let host_b = Host::create(&b.0, config(), host_options()).unwrap();
    let mut dpu = DpuProcess::serve(&[&a.0, &b.0], &[]);
    assert!(wait_served(&host_a) && wait_served(&host_b), "the DPU app serves both");
    let mut qp_a = host_a.queue_pair(0).unwrap();
    assert_eq!(put(&host_a, &mut qp_a, b"a", 1).unwrap(), Status::Ok);

    // B's host goes (its mapping with it: touching it after the truncate would be
    // this process's SIGBUS) and its file is cut to nothing under the DPU app.
    drop(host_b);
    std::fs::OpenOptions::new().write(true).open(&b.0).unwrap().set_len(0).unwrap();

    let fenced = wait_until(WAIT, || {
        let (out, err) = dpu.output();
        out.contains("region fenced off") || err.contains("region fenced off")
    });
    let status = dpu.child.try_wait().unwrap();
    assert!(status.is_none(), "the DPU app died: {status:?}\n{:?}", dpu.output());
    assert!(fenced, "the DPU app fences the truncated region: {:?}", dpu.output());

    // A is served on.
    for tag in 2..6 {
        assert_eq!(put(&host_a, &mut qp_a, b"a", tag).unwrap(), Status::Ok, "A's PUT {tag}");
    }
    assert!(dpu.child.try_wait().unwrap().is_none(), "the DPU app still runs");
}
