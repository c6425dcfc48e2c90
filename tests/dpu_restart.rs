//! The DPU app killed with requests in flight: host calls fail with "DPU app not
//! responding" within the host's timeout, and a restarted DPU app completes or fails
//! every submitted request, exactly once, and hands every GET's buffer back to the
//! host.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::time::Duration;

use prescient::{host_and_dpu, DpuProcess};
use prescient_shim::{Completion, HostOptions, RegionConfig, Request, ShimError, Status};

#[test]
fn requests_survive_a_dpu_crash_completed_or_failed_exactly_once() {
    let config = RegionConfig {
        queue_pairs: 1,
        ring_entries: 1024,
        host_buffers: 1024,
        dpu_buffers: 4,
        buffer_bytes: 4096,
        directory_slots: 0,
    };
    let (region, _creator, mut dpu) = host_and_dpu("dpu-restart", config, &[]);
    drop(_creator);
    // Re-attach as a host with a short DPU timeout, as a KV store would configure it.
    let options = HostOptions { pin: false, dpu_timeout: Duration::from_millis(300) };
    let host = prescient_shim::Host::attach(&region.0, options).unwrap();
    let mut qp = host.queue_pair(0).unwrap();
    // Every fifth request is a GET (of a key never written): a crash must hand its
    // buffer back to the host.
    let is_get = |tag: u64| tag % 5 == 4;
    let mut outcomes: HashMap<u64, Status> = HashMap::new();
    let mut values = 0;
    // Records a batch of completions; every GET's buffer must come back.
    let mut record = |qp: &mut prescient_shim::QueuePair, batch: Vec<Completion>| {
        for c in batch {
            assert!(outcomes.insert(c.user_data, c.status).is_none(), "duplicate {c:?}");
            let back = qp.take_value(&c);
            assert_eq!(back.is_some(), is_get(c.user_data), "{c:?}");
            values += usize::from(back.is_some());
        }
    };
    // Rounds of requests, each submitted while the DPU app is frozen so it meets them
    // all at once; then it runs in ever longer slices, frozen after each, until one
    // leaves it with requests taken and not completed (a frozen process changes
    // nothing, so what the words say is what the kill finds). A round it finishes
    // without being caught is drained and another submitted: how long a slice must be
    // depends on the machine's load.
    const ROUND: u64 = 1000;
    let words = qp.words().clone();
    let mut submitted = 0u64;
    let mut caught = false;
    for _round in 0..20 {
        dpu.pause();
        for tag in submitted..submitted + ROUND {
            let mut buf = host.take_buffer().unwrap();
            let key = format!("key-{tag}");
            if is_get(tag) {
                qp.push(Request::get(key.as_bytes(), buf).user_data(tag)).map_err(|(e, _)| e).unwrap();
            } else {
                buf.value_mut()[..8].copy_from_slice(&tag.to_le_bytes());
                qp.push(Request::put(key.as_bytes(), buf, 8).user_data(tag)).map_err(|(e, _)| e).unwrap();
            }
        }
        submitted += ROUND;
        qp.flush().unwrap();
        let tail = words.sq_tail().load(Ordering::Acquire);
        for slice in 0..20_000u32 {
            dpu.resume();
            let until = std::time::Instant::now() + Duration::from_micros(u64::from(slice % 200));
            while std::time::Instant::now() < until {
                std::hint::spin_loop();
            }
            dpu.pause();
            let taken = words.sq_taken().load(Ordering::Acquire);
            let head = words.sq_head().load(Ordering::Acquire);
            if taken != head {
                caught = true;
                break;
            }
            if head == tail {
                break; // the whole round is done: drain it and submit another
            }
        }
        if caught {
            break;
        }
        dpu.resume();
        while qp.in_flight() > 0 {
            let mut batch = Vec::new();
            qp.wait(Duration::from_secs(30), |c| batch.push(c)).expect("completions of a round");
            record(&mut qp, batch);
        }
    }
    assert!(caught, "the DPU app never stopped with requests taken and not completed");
    dpu.kill9();

    // Host calls now fail with a clear error (after draining what was completed).
    let err = loop {
        let mut batch = Vec::new();
        let result = qp.wait(Duration::from_secs(30), |c| batch.push(c));
        record(&mut qp, batch);
        if let Err(e) = result {
            break e;
        }
    };
    assert!(matches!(err, ShimError::DpuNotResponding { .. }), "{err}");
    assert!(err.to_string().contains("DPU app not responding"), "{err}");
    let buf = host.take_buffer().unwrap();
    let refused = qp.submit(Request::put(b"late", buf, 0).user_data(999)).unwrap_err();
    assert!(matches!(refused.0, ShimError::DpuNotResponding { .. }));
    drop(refused);

    // A restarted DPU app finishes the job.
    let _dpu = DpuProcess::serve(&[&region.0], &[]);
    host.wait_for_dpu(Duration::from_secs(20)).expect("the restarted DPU app serves");
    while qp.in_flight() > 0 {
        let mut batch = Vec::new();
        qp.wait(Duration::from_secs(30), |c| batch.push(c)).expect("completions after restart");
        record(&mut qp, batch);
    }
    assert_eq!(outcomes.len(), submitted as usize);
    assert_eq!(values, (0..submitted).filter(|t| is_get(*t)).count(), "every GET's buffer came back");
    let failed = outcomes.values().filter(|s| **s == Status::DpuRestarted).count();
    assert!(failed >= 1, "the crash caught requests in flight: {outcomes:?}");
    // Every other PUT committed, and every other GET found nothing to read.
    for (tag, status) in &outcomes {
        let answered = if is_get(*tag) { Status::NotFound } else { Status::Ok };
        assert!(*status == answered || *status == Status::DpuRestarted, "request {tag}: {status:?}");
    }
    // Every buffer is back in the arena.
    let all: Vec<_> = (0..1024).map(|_| host.take_buffer().unwrap()).collect();
    assert_eq!(all.len(), 1024);
}
