//! A buggy or hostile host against a real `prescient-dpu` process (a one-node
//! cluster): every malformed descriptor gets an error completion that names the
//! problem, a ring index moved backwards or past capacity fences only that queue pair,
//! and the DPU app keeps serving the others. A GET's buffer comes back to the host
//! with its answer, the value that was PUT or "not found".

use std::sync::atomic::Ordering;
use std::time::Duration;

use prescient::host_and_dpu;
use prescient_shim::config::DESCRIPTOR_BYTES;
use prescient_shim::descriptor::{field, ArenaShape, Descriptor, OpCode};
use prescient_shim::{Completion, QueuePair, ReadSla, RegionConfig, Request, ShimError, Status};

const WAIT: Duration = Duration::from_secs(10);

fn config() -> RegionConfig {
    RegionConfig {
        queue_pairs: 3,
        ring_entries: 16,
        host_buffers: 32,
        dpu_buffers: 4,
        buffer_bytes: 4096,
        directory_slots: 0,
    }
}

fn complete_all(qp: &mut QueuePair) -> Vec<Completion> {
    let mut out = Vec::new();
    while qp.in_flight() > 0 {
        qp.wait(WAIT, |c| out.push(c)).expect("completions arrive");
    }
    out
}

fn good_put(qp: &mut QueuePair, host: &prescient_shim::Host, tag: u64) {
    let mut buf = host.take_buffer().unwrap();
    buf.value_mut()[..5].copy_from_slice(b"hello");
    qp.submit(Request::put(b"good-key", buf, 5).user_data(tag)).map_err(|(e, _)| e).unwrap();
}

#[test]
fn malformed_descriptors_get_error_completions_and_other_queue_pairs_keep_serving() {
    let (_region, host, dpu) = host_and_dpu("bad-desc", config(), &[]);
    let mut bad = host.queue_pair(0).unwrap();
    let mut good = host.queue_pair(1).unwrap();
    let shape = ArenaShape { host_buffers: 32, buffer_bytes: 4096 };
    let base = Descriptor {
        op: OpCode::Put,
        sla: ReadSla::Stale,
        key_len: 4,
        value_offset: shape.value_offset(3),
        value_len: 10,
        buffer_gen: 1,
        user_data: 0,
    };
    let mut cases: Vec<([u8; DESCRIPTOR_BYTES], Status)> = Vec::new();
    let mut emit = |d: Descriptor, patch: &dyn Fn(&mut [u8; DESCRIPTOR_BYTES]), status| {
        let mut b = [0u8; DESCRIPTOR_BYTES];
        d.emit(&mut b);
        patch(&mut b);
        cases.push((b, status));
    };
    emit(Descriptor { user_data: 1, ..base }, &|b| b[field::OP] = 0x77, Status::BadOp);
    emit(Descriptor { user_data: 2, value_offset: shape.value_offset(3) + 1, ..base }, &|_| (), Status::BadOffset);
    emit(Descriptor { user_data: 3, value_offset: shape.value_offset(32), ..base }, &|_| (), Status::BadOffset);
    emit(Descriptor { user_data: 4, value_offset: u64::MAX - 7, ..base }, &|_| (), Status::BadOffset);
    emit(Descriptor { user_data: 5, value_len: 4000, ..base }, &|_| (), Status::BadValueLength);
    emit(Descriptor { user_data: 6, key_len: 0, ..base }, &|_| (), Status::BadKeyLength);
    emit(Descriptor { user_data: 7, ..base }, &|b| b[40] = 1, Status::ReservedNotZero);
    // A well-formed descriptor naming a buffer the host never submitted.
    emit(Descriptor { user_data: 8, ..base }, &|_| (), Status::BufferNotSubmitted);
    for (bytes, _) in &cases {
        bad.push_raw(bytes).unwrap();
    }
    bad.flush().unwrap();
    good_put(&mut good, &host, 100);
    let mut got = complete_all(&mut bad);
    got.sort_by_key(|c| c.user_data);
    assert_eq!(got.len(), cases.len());
    for (c, (_, status)) in got.iter().zip(&cases) {
        assert_eq!(c.status, *status, "user_data {}", c.user_data);
    }
    let good_done = complete_all(&mut good);
    assert_eq!(good_done.len(), 1);
    assert_eq!((good_done[0].user_data, good_done[0].status), (100, Status::Ok));
    assert!(good_done[0].version > 0, "writes are stamped with a version");

    // The bad queue pair is still usable for good requests: bad descriptors fail alone.
    good_put(&mut bad, &host, 9);
    assert_eq!(complete_all(&mut bad)[0].status, Status::Ok);
    let (_, stdout, _) = dpu.stop();
    assert!(stdout.contains("fenced 0 queue pairs"), "{stdout}");
}

#[test]
fn a_buffer_submitted_twice_or_freed_in_flight_is_refused() {
    let (_region, host, dpu) = host_and_dpu("double", config(), &[]);
    let mut qp = host.queue_pair(0).unwrap();
    // The DPU app frozen, the PUT stays submitted while the host misbehaves.
    dpu.pause();
    let mut buf = host.take_buffer().unwrap();
    let (index, generation) = (buf.index(), buf.generation());
    buf.value_mut()[0] = 1;
    qp.submit(Request::put(b"k", buf, 1).user_data(1)).map_err(|(e, _)| e).unwrap();
    // Freeing a buffer in flight: the shim refuses and names its state.
    let err = host.free_raw(index, generation).unwrap_err();
    assert!(matches!(err, ShimError::BufferState { .. }), "{err}");
    // A hostile host publishes a second descriptor for the same buffer while the first
    // is in flight: the DPU app takes both in one batch once it runs again.
    let shape = ArenaShape { host_buffers: 32, buffer_bytes: 4096 };
    let again = Descriptor {
        op: OpCode::Put,
        sla: ReadSla::Stale,
        key_len: 1,
        value_offset: shape.value_offset(index),
        value_len: 1,
        buffer_gen: generation,
        user_data: 2,
    };
    let mut bytes = [0u8; DESCRIPTOR_BYTES];
    again.emit(&mut bytes);
    qp.push_raw(&bytes).unwrap();
    qp.flush().unwrap();
    dpu.resume();
    let mut got = complete_all(&mut qp);
    got.sort_by_key(|c| c.user_data);
    assert_eq!(got[0].status, Status::Ok);
    assert!(
        matches!(got[1].status, Status::BufferInFlight | Status::BufferNotSubmitted),
        "second submission of buffer {index}: {:?}",
        got[1]
    );
}

#[test]
fn ring_indices_moved_backwards_or_past_capacity_fence_only_that_queue_pair() {
    let (_region, host, dpu) = host_and_dpu("fence", config(), &[]);
    let mut q0 = host.queue_pair(0).unwrap();
    let mut q1 = host.queue_pair(1).unwrap();
    let mut q2 = host.queue_pair(2).unwrap();
    for i in 0..3 {
        q0.push_nop(i).unwrap();
    }
    q0.flush().unwrap();
    assert_eq!(complete_all(&mut q0).len(), 3);
    // Backwards: from 3 to 1.
    q0.words().sq_tail().store(1, Ordering::Release);
    // Past capacity: 1000 entries claimed in a 16-entry ring.
    q1.words().sq_tail().store(1000, Ordering::Release);
    let err0 = q0.wait(WAIT, |_| ()).unwrap_err();
    assert!(matches!(err0, ShimError::Fenced { reason: "submission tail moved backwards", detail: 1, .. }), "{err0}");
    let err1 = loop {
        match q1.wait(Duration::from_millis(50), |_| ()) {
            Err(ShimError::Timeout(_)) => continue,
            other => break other.unwrap_err(),
        }
    };
    assert!(
        matches!(err1, ShimError::Fenced { reason: "submission tail past ring capacity", detail: 1000, .. }),
        "{err1}"
    );
    assert!(err1.to_string().contains("fenced off by the DPU app"), "{err1}");
    // The third queue pair is served as before.
    good_put(&mut q2, &host, 5);
    assert_eq!(complete_all(&mut q2)[0].status, Status::Ok);
    let (_, stdout, _) = dpu.stop();
    assert!(stdout.contains("fenced 2 queue pairs"), "{stdout}");
}

#[test]
fn a_get_returns_what_was_put_and_its_buffer_comes_back() {
    let (_region, host, dpu) = host_and_dpu("get", config(), &[]);
    let mut qp = host.queue_pair(0).unwrap();
    let buf = host.take_buffer().unwrap();
    let (index, generation) = (buf.index(), buf.generation());
    qp.submit(Request::get(b"some-key", buf).user_data(7)).map_err(|(e, _)| e).unwrap();
    // (Whether the host may free it now depends on whether the DPU app has already
    // answered: a race, so not checked here; the arena's tests check the states.)
    let got = complete_all(&mut qp);
    assert_eq!(got.len(), 1);
    let c = got[0];
    // Nothing was written under the key yet.
    assert_eq!((c.user_data, c.status, c.op), (7, Status::NotFound, OpCode::Get as u8));
    let back = qp.take_value(&c).expect("the GET's buffer comes back");
    assert!(back.is_empty(), "a GET that found nothing carries no value bytes");
    let back = back.into_buffer();
    assert_eq!((back.index(), back.generation()), (index, generation));
    assert!(qp.take_value(&c).is_none(), "once");
    // The buffer is the host's again: it can carry a PUT, which a GET then reads back.
    let mut back = back;
    back.value_mut()[..2].copy_from_slice(b"ok");
    qp.submit(Request::put(b"some-key", back, 2).user_data(8)).map_err(|(e, _)| e).unwrap();
    let put = complete_all(&mut qp)[0];
    assert_eq!(put.status, Status::Ok);
    qp.submit(Request::get(b"some-key", host.take_buffer().unwrap()).user_data(10)).map_err(|(e, _)| e).unwrap();
    let c = complete_all(&mut qp)[0];
    assert_eq!((c.user_data, c.status, c.version, c.detail), (10, Status::Ok, put.version, 2), "{c:?}");
    assert_eq!(&qp.take_value(&c).expect("the value comes back in the buffer")[..2], b"ok");

    // A raw GET that names a value length is refused like any bad descriptor.
    let shape = ArenaShape { host_buffers: 32, buffer_bytes: 4096 };
    let raw = Descriptor {
        op: OpCode::Get,
        sla: ReadSla::Stale,
        key_len: 3,
        value_offset: shape.value_offset(5),
        value_len: 10,
        buffer_gen: 1,
        user_data: 9,
    };
    let mut bytes = [0u8; DESCRIPTOR_BYTES];
    raw.emit(&mut bytes);
    qp.push_raw(&bytes).unwrap();
    qp.flush().unwrap();
    assert_eq!(complete_all(&mut qp)[0].status, Status::BadValueLength);
    let (_, stdout, _) = dpu.stop();
    assert!(stdout.contains("completed 4 requests (2 ok)"), "{stdout}");
    assert!(stdout.contains("1 x no committed value for the key"), "{stdout}");
}
