//! `prescient-dpu serve` without `--config`: each region is served by a cluster of one
//! node. A GET reads back what a PUT wrote, also after the DPU app was killed and
//! restarted from its data folder; a DPU app that has gone to sleep on the host's
//! doorbell is woken by the next submission; and `--model` feeds the predictor.

use std::sync::atomic::Ordering;
use std::time::Duration;

use prescient::{host_and_dpu, wait_until, DpuProcess};
use prescient_shim::layout::header;
use prescient_shim::{Completion, Host, QueuePair, RegionConfig, Request, Status};

const WAIT: Duration = Duration::from_secs(10);

fn config() -> RegionConfig {
    RegionConfig {
        queue_pairs: 1,
        ring_entries: 16,
        host_buffers: 16,
        dpu_buffers: 4,
        buffer_bytes: 4096,
        directory_slots: 256,
    }
}

fn one(qp: &mut QueuePair) -> Completion {
    let mut got = None;
    while got.is_none() {
        qp.wait(WAIT, |c| got = Some(c)).expect("a completion arrives");
    }
    got.unwrap()
}

fn put(host: &Host, qp: &mut QueuePair, key: &[u8], value: &[u8], tag: u64) -> Completion {
    let mut buf = host.take_buffer().unwrap();
    buf.value_mut()[..value.len()].copy_from_slice(value);
    qp.submit(Request::put(key, buf, value.len()).user_data(tag)).map_err(|(e, _)| e).unwrap();
    one(qp)
}

/// GETs `key`: the completion and the value it carried back.
fn get(host: &Host, qp: &mut QueuePair, key: &[u8], tag: u64) -> (Completion, Vec<u8>) {
    qp.submit(Request::get(key, host.take_buffer().unwrap()).user_data(tag)).map_err(|(e, _)| e).unwrap();
    let c = one(qp);
    let buf = qp.take_value(&c).expect("a GET's buffer comes back");
    let value = buf.to_vec();
    (c, value)
}

#[test]
fn a_get_reads_back_what_a_put_wrote_also_after_a_crash_and_restart() {
    let (region, host, mut dpu) = host_and_dpu("one-node-get", config(), &[]);
    let mut qp = host.queue_pair(0).unwrap();
    let value: Vec<u8> = (0..3000u32).map(|i| (i * 7) as u8).collect();
    let written = put(&host, &mut qp, b"user:42", &value, 1);
    assert_eq!((written.user_data, written.status), (1, Status::Ok));
    let (c, got) = get(&host, &mut qp, b"user:42", 2);
    assert_eq!((c.user_data, c.status, c.version), (2, Status::Ok, written.version));
    assert_eq!(got, value);
    // A newer write wins; a key never written is not found.
    let newer = put(&host, &mut qp, b"user:42", b"second", 3);
    assert!(newer.status == Status::Ok && newer.version > written.version, "{newer:?}");
    assert_eq!(get(&host, &mut qp, b"user:42", 4).1, b"second");
    assert_eq!(get(&host, &mut qp, b"user:43", 5).0.status, Status::NotFound);
    // The value is in the region's data folder: a DPU app started after a crash has it.
    dpu.kill9();
    assert!(region.data_dir().join("store.prstore").exists(), "{}", region.data_dir().display());
    let again = DpuProcess::serve(&[&region.0], &[]);
    host.wait_for_dpu(Duration::from_secs(20)).expect("the restarted DPU app serves");
    let (c, got) = get(&host, &mut qp, b"user:42", 6);
    assert_eq!((c.status, c.version, got.as_slice()), (Status::Ok, newer.version, &b"second"[..]));
    let (clean, stdout, stderr) = again.stop();
    assert!(clean, "{stderr}");
    assert!(stdout.contains("completed 1 requests (1 ok)"), "{stdout}");
    assert!(stdout.contains("one-node cluster") && stdout.contains("GETs 1 ok"), "{stdout}");
}

#[test]
fn a_dpu_app_asleep_on_the_doorbell_is_woken_by_a_submission() {
    let (_region, host, dpu) = host_and_dpu("one-node-sleep", config(), &[]);
    let mut qp = host.queue_pair(0).unwrap();
    for round in 0..3u64 {
        // Idle long enough to have gone to sleep: its flag says so.
        let sleeping = host.region().u32_at(header::DPU_SLEEPING);
        assert!(
            wait_until(Duration::from_secs(20), || sleeping.load(Ordering::Acquire) != 0),
            "the idle DPU app never set DPU_SLEEPING"
        );
        // The host's flush sees the flag and rings the doorbell; the PUT completes
        // well within the wait (a missed ring would cost at most a nap of a few ms,
        // which no wall-clock bound here could tell on a noisy machine: the idle
        // protocol's unit test shows a ring ending a minute-long nap at once).
        let c = put(&host, &mut qp, format!("key-{round}").as_bytes(), b"awake", round);
        assert_eq!((c.user_data, c.status), (round, Status::Ok));
    }
    let (_, stdout, _) = dpu.stop();
    let slept: u64 = stdout
        .split("slept ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no sleep count in the summary: {stdout}"));
    assert!(slept >= 3, "slept {slept} times: {stdout}");
}

#[test]
fn a_model_feeds_the_predictor_with_every_write() {
    let model = concat!(env!("CARGO_MANIFEST_DIR"), "/models/shipped/OLTP.model");
    let (_region, host, dpu) = host_and_dpu("one-node-model", config(), &["--model", model]);
    let mut qp = host.queue_pair(0).unwrap();
    // A write stream that repeats itself: the predictor learns which key follows which.
    for round in 0..20u64 {
        for key in 0..8u64 {
            let c = put(&host, &mut qp, format!("k{key}").as_bytes(), b"v", round * 8 + key);
            assert_eq!(c.status, Status::Ok);
        }
    }
    let (clean, stdout, stderr) = dpu.stop();
    assert!(clean, "{stderr}");
    assert!(stdout.contains("completed 160 requests (160 ok)"), "{stdout}");
    assert!(stdout.contains("predictor:") && stdout.contains("hits"), "{stdout}");
}
