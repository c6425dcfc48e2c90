//! The `prescient-dpu` command's refusals: each names the problem and exits non-zero.

use std::process::Command;

use prescient_shim::layout::{header, LAYOUT_VERSION};
use prescient_shim::{Host, HostOptions, RegionConfig};

fn dpu() -> Command {
    Command::new(env!("CARGO_BIN_EXE_prescient-dpu"))
}

fn stderr_of(cmd: &mut Command) -> String {
    let out = cmd.output().expect("run prescient-dpu");
    assert!(!out.status.success(), "expected failure, got {:?}", out.status);
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn serving_needs_emulation_mode_and_an_existing_region() {
    let err = stderr_of(dpu().args(["serve", "--region", "/nonexistent"]));
    assert!(err.contains("--emulate"), "{err}");
    let err =
        stderr_of(dpu().args(["serve", "--emulate", "--no-pin", "--region", "/dev/shm/prescient-no-such-region"]));
    assert!(err.contains("cannot attach region") && err.contains("no-such-region"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn a_region_of_another_layout_version_is_refused_by_name() {
    let path = std::path::PathBuf::from(format!("/dev/shm/prescient-cli-version-{}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let host = Host::create(&path, RegionConfig::default(), HostOptions { pin: false, ..Default::default() }).unwrap();
    host.region().u32_at(header::LAYOUT_VERSION).store(7, std::sync::atomic::Ordering::Release);
    let err = stderr_of(dpu().args(["serve", "--emulate", "--no-pin", "--region"]).arg(&path));
    std::fs::remove_file(&path).unwrap();
    let speaks = format!("speaks version {LAYOUT_VERSION}");
    assert!(err.contains("layout version 7") && err.contains(&speaks), "{err}");

    // The host side refuses it the same way.
    let _ = std::fs::remove_file(&path);
    let host = Host::create(&path, RegionConfig::default(), HostOptions { pin: false, ..Default::default() }).unwrap();
    host.region().u32_at(header::LAYOUT_VERSION).store(LAYOUT_VERSION + 1, std::sync::atomic::Ordering::Release);
    let err = Host::attach(&path, HostOptions { pin: false, ..Default::default() }).unwrap_err().to_string();
    std::fs::remove_file(&path).unwrap();
    assert!(err.contains(&format!("layout version {}", LAYOUT_VERSION + 1)), "{err}");
}

#[test]
fn a_file_that_is_not_a_region_is_refused() {
    let path = std::env::temp_dir().join(format!("prescient-cli-garbage-{}", std::process::id()));
    std::fs::write(&path, vec![0xAB; 8192]).unwrap();
    let err = stderr_of(dpu().args(["serve", "--emulate", "--no-pin", "--region"]).arg(&path));
    std::fs::remove_file(&path).unwrap();
    assert!(err.contains("not a Prescient region"), "{err}");
}

#[test]
fn the_flags_of_the_old_single_node_pipeline_are_refused_with_what_to_do_instead() {
    let region = ["serve", "--emulate", "--no-pin", "--region", "/dev/shm/prescient-cli-unused"];
    for (flag, value, says) in [
        ("--delay-us", "1000", "stage pipeline"),
        ("--stripe", "4+2", "--config"),
        ("--epoch-file", "/tmp/epoch", "--data-dir"),
    ] {
        let err = stderr_of(dpu().args(region).args([flag, value]));
        assert!(err.contains(flag) && err.contains(says), "{flag}: {err}");
    }
    // --node names a node of a cluster file.
    let err = stderr_of(dpu().args(region).args(["--node", "1"]));
    assert!(err.contains("--config"), "{err}");
    // The one-node options and a cluster file exclude each other.
    let err = stderr_of(dpu().args(region).args(["--config", "c.toml", "--data-dir", "/tmp/d"]));
    assert!(err.contains("--data-dir") && err.contains("--config"), "{err}");
}
