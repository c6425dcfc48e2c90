//! One DPU app, several hosts, one of them bad: a region that cannot be attached is
//! refused with an error naming it and the others are served; a queue pair whose
//! restart journal is impossible is fenced off alone; and a PUT larger than the write
//! path carries (sealed and striped in the region's buffers, or above the limit the
//! DPU app was given) is refused at the door, never failed in a stage.

use std::sync::atomic::Ordering;
use std::time::Duration;

use prescient::{host_options, wait_served, DpuProcess, TempRegion};
use prescient_shim::layout::header;
use prescient_shim::{Completion, Host, QueuePair, RegionConfig, Request, ShimError, Status};

const WAIT: Duration = Duration::from_secs(10);

fn config() -> RegionConfig {
    RegionConfig {
        queue_pairs: 2,
        ring_entries: 16,
        host_buffers: 32,
        dpu_buffers: 4,
        buffer_bytes: 4096,
        directory_slots: 0,
    }
}

fn put(qp: &mut QueuePair, host: &Host, value_len: usize, tag: u64) -> Completion {
    let buf = host.take_buffer().unwrap();
    qp.submit(Request::put(b"key", buf, value_len).user_data(tag)).map_err(|(e, _)| e).unwrap();
    let mut got = Vec::new();
    while got.is_empty() {
        qp.wait(WAIT, |c| got.push(c)).expect("a completion arrives");
    }
    got[0]
}

#[test]
fn a_restart_with_bad_regions_serves_the_good_ones() {
    let (a, b, c) = (TempRegion::new("tenant-a"), TempRegion::new("tenant-b"), TempRegion::new("tenant-c"));
    let hosts: Vec<_> = [&a, &b, &c].iter().map(|r| Host::create(&r.0, config(), host_options()).unwrap()).collect();
    let mut first = DpuProcess::serve(&[&a.0, &b.0, &c.0], &[]);
    assert!(hosts.iter().all(|h| wait_served(h)), "the first DPU app serves all three");
    first.kill9();

    // While no DPU app runs, host B claims 1000 requests taken past its head on queue
    // pair 0, and host C zeroes its magic.
    let mut b0 = hosts[1].queue_pair(0).unwrap();
    let head = b0.words().sq_head().load(Ordering::Acquire);
    b0.words().sq_taken().store(head.wrapping_add(1000), Ordering::Release);
    hosts[2].region().u64_at(header::MAGIC).store(0, Ordering::Release);

    let dpu = DpuProcess::serve(&[&a.0, &b.0, &c.0], &[]);
    assert!(wait_served(&hosts[0]), "A is served");
    let mut a0 = hosts[0].queue_pair(0).unwrap();
    let done = put(&mut a0, &hosts[0], 100, 1);
    assert_eq!((done.user_data, done.status), (1, Status::Ok));
    // B's bad queue pair is fenced, saying why; its other queue pair serves.
    let err = b0.wait(WAIT, |_| ()).unwrap_err();
    assert!(matches!(err, ShimError::Fenced { qp: 0, .. }), "{err}");
    assert!(err.to_string().contains("taken index"), "{err}");
    let mut b1 = hosts[1].queue_pair(1).unwrap();
    assert_eq!(put(&mut b1, &hosts[1], 10, 2).status, Status::Ok);

    let (ok, stdout, stderr) = dpu.stop();
    assert!(ok, "{stderr}");
    let (b_path, c_path) = (b.0.display().to_string(), c.0.display().to_string());
    assert!(stderr.contains(&c_path) && stderr.contains("not a Prescient region"), "{stderr}");
    assert!(stderr.contains(&b_path) && stderr.contains("taken index 1000"), "{stderr}");
    assert!(stdout.contains("refused at attach") && stdout.contains(&c_path), "{stdout}");
    assert!(stdout.contains(&format!("region {b_path}")) && stdout.contains("1 queue pairs fenced"), "{stdout}");
}

#[test]
fn a_restart_with_every_region_bad_exits_listing_each() {
    let (a, b) = (TempRegion::new("tenant-bad-a"), TempRegion::new("tenant-bad-b"));
    std::fs::write(&a.0, vec![0u8; 8192]).unwrap();
    let out = DpuProcess::serve(&[&a.0, &b.0], &[]).wait();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("none of the 2 regions can be served"), "{stderr}");
    assert!(stderr.contains(&a.0.display().to_string()) && stderr.contains("not a Prescient region"), "{stderr}");
    assert!(stderr.contains(&b.0.display().to_string()), "{stderr}");
}

#[test]
fn puts_larger_than_the_write_path_carries_are_refused_at_the_door() {
    let dir = std::env::temp_dir().join(format!("prescient-door-keys-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("keys")).unwrap();
    let key = dir.join("keys/1.key");
    std::fs::write(&key, [0x42u8; 32]).unwrap();
    std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let key_dir = dir.join("keys").display().to_string();
    // One region with a limit below what its buffers carry, one without: 4096-byte
    // buffers carry 3712 bytes (the arena keeps 64 of tailroom; a value sealed, 32
    // bytes more, and padded to a whole fragment fits the 3776 after the value's
    // offset), the largest the shim lets a host submit: all of it goes through.
    let (limited, default) = (TempRegion::new("tenant-door"), TempRegion::new("tenant-door-default"));
    let hosts = [&limited, &default].map(|r| Host::create(&r.0, config(), host_options()).unwrap());
    let dpu = DpuProcess::serve(&[&limited.0], &["--key-dir", &key_dir, "--value-bytes-max", "3000"]);
    let other = DpuProcess::serve(&[&default.0], &["--key-dir", &key_dir]);
    assert!(hosts.iter().all(|h| wait_served(h)));
    let mut statuses = Vec::new();
    for (host, max, lens) in
        [(&hosts[0], 3000, [1, 1000, 3000, 3001, 3600, 3712]), (&hosts[1], 3712, [1, 1000, 3000, 3001, 3600, 3712])]
    {
        let mut qp = host.queue_pair(0).unwrap();
        for (tag, len) in lens.into_iter().enumerate() {
            let c = put(&mut qp, host, len, tag as u64);
            assert_eq!(c.user_data, tag as u64);
            statuses.push((max, len, c.status, c.detail));
        }
    }
    let outputs = [dpu.stop(), other.stop()];
    let _ = std::fs::remove_dir_all(&dir);
    for &(max, len, status, detail) in &statuses {
        if len <= max {
            assert_eq!(status, Status::Ok, "{len}-byte PUT, limit {max}: {statuses:?}\n{outputs:?}");
        } else {
            assert_eq!((status, detail), (Status::BadValueLength, len as u32), "{len}-byte PUT: {statuses:?}");
        }
    }
    for (_, stdout, stderr) in &outputs {
        assert!(!stdout.contains("stage failed") && !stderr.contains("write refused"), "{stdout}\n{stderr}");
    }
    assert!(outputs[0].1.contains("3 x value length does not fit the buffer"), "{}", outputs[0].1);
    assert!(!outputs[1].1.contains("value length does not fit the buffer"), "{}", outputs[1].1);
}

#[test]
fn versions_keep_rising_when_the_region_with_the_newest_epoch_is_gone_at_restart() {
    let (a, b) = (TempRegion::new("epoch-a"), TempRegion::new("epoch-b"));
    let host_a = Host::create(&a.0, config(), host_options()).unwrap();
    let host_b = Host::create(&b.0, config(), host_options()).unwrap();
    // B's host writes a far newer DPU epoch into its region than A's has.
    host_b.region().u32_at(header::DPU_EPOCH).store(1000, Ordering::Release);
    // B first. (Versions once came from one sequencer seeded by the regions' epoch
    // words; each region's node now stamps them from its clock, above the floor it
    // keeps in its data folder, so a word a host writes cannot move them back.)
    let mut first = DpuProcess::serve(&[&b.0, &a.0], &[]);
    assert!(wait_served(&host_a));
    let mut qp = host_a.queue_pair(0).unwrap();
    let before = put(&mut qp, &host_a, 10, 1);
    assert_eq!(before.status, Status::Ok);
    first.kill9();
    // The restart serves A alone: its versions must still be newer than any given out.
    let second = DpuProcess::serve(&[&a.0], &[]);
    assert!(wait_served(&host_a));
    let after = put(&mut qp, &host_a, 10, 2);
    assert_eq!(after.status, Status::Ok);
    assert!(after.version > before.version, "version {} after {} from the previous run", after.version, before.version);
    drop(second);
}
