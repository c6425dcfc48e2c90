//! The fabric conformance suite against the `verbs` backend (real libibverbs).
//!
//! Runs where an RDMA device exists: `ci/softroce.sh` runs it inside a qemu VM with
//! Soft-RoCE, with `RDMA_TEST_DEVICE=rxe0`. Built only with `--features verbs`.
#![cfg(feature = "verbs")]

use std::sync::Arc;

use prescient_dpu::fabric::conformance::Harness;
use prescient_dpu::fabric::verbs::VerbsNode;

struct Verbs;

fn device() -> Option<String> {
    std::env::var("RDMA_TEST_DEVICE").ok()
}

impl Harness for Verbs {
    type F = VerbsNode;
    fn node(&self) -> Arc<VerbsNode> {
        let name = device().expect("RDMA_TEST_DEVICE names the device to test (ci/softroce.sh sets it)");
        Arc::new(VerbsNode::open(Some(&name)).unwrap_or_else(|e| panic!("{e}")))
    }
}

prescient_dpu::conformance_tests!(Verbs);

/// Without a device the error names the problem; with one, the device opens.
#[test]
fn opening_reports_a_missing_device_clearly() {
    match device() {
        Some(name) => {
            VerbsNode::open(Some(&name)).unwrap();
        }
        None => {
            let e = VerbsNode::open(None).unwrap_err().to_string();
            assert!(e.contains("RDMA") && (e.contains("ENOSYS") || e.contains("no RDMA device")), "{e}");
        }
    }
}
