//! A C client, built by the root build.rs against the generated `prescient.h`, does
//! real PUTs (one by one and as a flushed batch), a GET, a DELETE and a GET of the
//! deleted key through the shim against a real `prescient-dpu`
//! process (a one-node cluster), and reads the fresh region's cache directory.

use std::time::Duration;

use prescient::{run_c_client, wait_until, DpuProcess, TempRegion};

#[test]
fn c_client_puts_and_gets_through_the_shim_and_sees_every_completion_once() {
    let region = TempRegion::new("c-client");
    let ready = TempRegion::new("c-client-ready");
    let (region_path, ready_path) = (region.0.clone(), ready.0.clone());
    let client = std::thread::spawn(move || run_c_client(&region_path, &ready_path, 500));
    assert!(wait_until(Duration::from_secs(20), || ready.0.exists()), "the C client never created its region");
    let dpu = DpuProcess::serve(&[&region.0], &[]);
    let rc = client.join().expect("C client thread");
    let (clean, stdout, stderr) = dpu.stop();
    assert_eq!(rc, 0, "C client failed at line {}; DPU stderr:\n{stderr}", -rc);
    assert!(clean, "prescient-dpu exited uncleanly: {stderr}");
    // The 500 PUTs, the GET of the first (checked byte for byte), a batch of 4 PUTs
    // published by one flush, a DELETE, and a GET of the deleted key (not found).
    assert!(stdout.contains("completed 507 requests (506 ok)"), "{stdout}");
}
