//! Many threads of one host process against a DPU-app process (a one-node cluster):
//! every submitted descriptor completes exactly once, with its own user data.

use std::sync::Arc;
use std::time::Duration;

use prescient::host_and_dpu;
use prescient_shim::{Host, RegionConfig, Request, ShimError, Status};

const THREADS: u32 = 4;
const PER_THREAD: u64 = 20_000;

fn drive(host: Arc<Host>, qp: u32) -> Vec<u8> {
    let mut qp = host.queue_pair(qp).unwrap();
    let mut seen = vec![0u8; PER_THREAD as usize];
    let mut next = 0u64;
    let mut done = 0u64;
    let me = u64::from(qp.index());
    while done < PER_THREAD {
        while next < PER_THREAD && qp.in_flight() < 32 {
            let tag = me << 32 | next;
            // A full ring (NOPs that completed behind a PUT still in flight keep their
            // slots until it completes) waits for completions, as the error says.
            let pushed = if next % 3 == 0 {
                qp.push_nop(tag)
            } else {
                let Ok(mut buf) = host.take_buffer() else { break };
                buf.value_mut()[..8].copy_from_slice(&tag.to_le_bytes());
                qp.push(Request::put(&tag.to_le_bytes(), buf, 8).user_data(tag)).map_err(|(e, _)| e)
            };
            match pushed {
                Ok(()) => next += 1,
                Err(ShimError::RingFull { in_flight, .. }) if in_flight > 0 => break,
                Err(e) => panic!("push {next}: {e}"),
            }
        }
        qp.flush().unwrap();
        done += qp
            .wait(Duration::from_secs(30), |c| {
                assert_eq!(c.status, Status::Ok, "{c:?}");
                assert_eq!(c.user_data >> 32, me, "completion for another queue pair: {c:?}");
                seen[(c.user_data & 0xffff_ffff) as usize] += 1;
            })
            .unwrap() as u64;
    }
    seen
}

#[test]
fn every_descriptor_completes_exactly_once_with_its_own_user_data() {
    let config = RegionConfig {
        queue_pairs: THREADS,
        ring_entries: 64,
        host_buffers: 256,
        dpu_buffers: 64,
        buffer_bytes: 1024,
        directory_slots: 0,
    };
    // Every PUT is of a new key, and each is kept: 8-byte values in small records keep
    // the 53,000 of them far below where the store refuses.
    let (_region, host, dpu) = host_and_dpu("stress", config, &["--value-bytes-max", "64"]);
    let threads: Vec<_> = (0..THREADS)
        .map(|qp| {
            let host = host.clone();
            std::thread::spawn(move || drive(host, qp))
        })
        .collect();
    for t in threads {
        let seen = t.join().unwrap();
        assert!(
            seen.iter().all(|&n| n == 1),
            "a descriptor completed {} times",
            seen.iter().find(|&&n| n != 1).unwrap()
        );
    }
    let (_, stdout, _) = dpu.stop();
    let total = u64::from(THREADS) * PER_THREAD;
    assert!(stdout.contains(&format!("completed {total} requests ({total} ok)")), "{stdout}");
}
