//! One DPU app, several hosts, one of them bad: a region that cannot be attached is
//! refused with an error naming it and the others are served; a queue pair whose
//! restart journal is impossible is fenced off alone; and a PUT too large for sealing
//! and striping is refused at the door, never failed in a stage.

use std::sync::atomic::Ordering;
use std::time::Duration;

use prescient::{host_options, wait_served, DpuProcess, TempRegion};
use prescient_shim::layout::header;
use prescient_shim::{Completion, Host, QueuePair, RegionConfig, ShimError, Sla, Status};

const WAIT: Duration = Duration::from_secs(10);

fn config() -> RegionConfig {
    RegionConfig {
        queue_pairs: 2,
        ring_entries: 16,
        host_buffers: 32,
        dpu_buffers: 1,
        buffer_bytes: 4096,
        directory_slots: 0,
    }
}

fn put(qp: &mut QueuePair, host: &Host, value_len: usize, tag: u64) -> Completion {
    let buf = host.take_buffer().unwrap();
    qp.put(b"key", buf, value_len, Sla::Stale, tag).map_err(|(e, _)| e).unwrap();
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
fn puts_too_large_for_sealing_and_striping_are_refused_at_the_door() {
    let dir = std::env::temp_dir().join(format!("prescient-door-keys-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("keys")).unwrap();
    let key = dir.join("keys/1.key");
    std::fs::write(&key, [0x42u8; 32]).unwrap();
    std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let (key_dir, epoch) = (dir.join("keys").display().to_string(), dir.join("epoch").display().to_string());
    let region = TempRegion::new("tenant-door");
    let host = Host::create(&region.0, config(), host_options()).unwrap();
    let dpu = DpuProcess::serve(&[&region.0], &["--key-dir", &key_dir, "--epoch-file", &epoch, "--stripe", "4+2"]);
    assert!(wait_served(&host));
    let mut qp = host.queue_pair(0).unwrap();
    // 4096-byte buffers, RS(4, 2): a sealed frame is the value + 32 bytes, cut into 4
    // fragments of a multiple of 64 that must fit the 3776 bytes after the value's
    // offset: values up to 3552 bytes. The arena alone would take 3712.
    let mut statuses = Vec::new();
    for (tag, len) in [1, 1000, 3552, 3553, 3600, 3712].into_iter().enumerate() {
        let c = put(&mut qp, &host, len, tag as u64);
        assert_eq!(c.user_data, tag as u64);
        statuses.push((len, c.status, c.detail));
    }
    let (_, stdout, stderr) = dpu.stop();
    let _ = std::fs::remove_dir_all(&dir);
    for &(len, status, detail) in &statuses {
        if len <= 3552 {
            assert_eq!(status, Status::Ok, "{len}-byte PUT: {statuses:?}\n{stderr}");
        } else {
            assert_eq!((status, detail), (Status::BadValueLength, len as u32), "{len}-byte PUT: {statuses:?}");
        }
    }
    assert!(!stdout.contains("stage failed") && !stderr.contains("leaves no room"), "{stdout}\n{stderr}");
    assert!(stdout.contains("3 x value length does not fit the buffer"), "{stdout}");
}

#[test]
fn versions_keep_rising_when_the_region_with_the_newest_epoch_is_gone_at_restart() {
    let (a, b) = (TempRegion::new("epoch-a"), TempRegion::new("epoch-b"));
    let host_a = Host::create(&a.0, config(), host_options()).unwrap();
    let host_b = Host::create(&b.0, config(), host_options()).unwrap();
    // B's host writes a far newer DPU epoch into its region than A's has.
    host_b.region().u32_at(header::DPU_EPOCH).store(1000, Ordering::Release);
    // B first: the epoch of the first region once seeded the sequencer alone.
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
