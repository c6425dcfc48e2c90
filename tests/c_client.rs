//! A C client, built by the root build.rs against the generated `prescient.h`, does
//! real PUTs and a GET of one of them through the shim against a real `prescient-dpu`
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
    // The 500 PUTs, and the GET of the first, which the C client checked byte for byte.
    assert!(stdout.contains("completed 501 requests (501 ok)"), "{stdout}");
}
