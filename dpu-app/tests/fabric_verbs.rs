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

/// What a node's cluster file may get wrong about its device is named at start with
/// what there is: the devices found, the ports, the GID indexes with a GID.
#[test]
fn a_wrong_device_port_or_gid_index_is_named_with_what_there_is() {
    let absent = VerbsNode::open_port(Some("prescient-absent0"), 1, None).unwrap_err().to_string();
    assert!(absent.contains("ibv_get_device_list"), "{absent}");
    let Some(name) = device() else {
        return;
    };
    assert!(absent.contains("prescient-absent0") && absent.contains(&format!("found: {name}")), "{absent}");
    let port = VerbsNode::open_port(Some(&name), 9, None).unwrap_err().to_string();
    assert!(port.contains(&format!("{name} has no port 9")) && port.contains("ports are 1 to"), "{port}");
    let gid = VerbsNode::open_port(Some(&name), 1, Some(250)).unwrap_err().to_string();
    assert!(gid.contains("no GID at index 250") && gid.contains("entries with a GID: "), "{gid}");
    // The GID chosen without an index is the one asked for by its index.
    let chosen = VerbsNode::open_port(Some(&name), 1, None).unwrap().gid_index();
    let node = VerbsNode::open_port(Some(&name), 1, Some(chosen)).unwrap();
    assert_eq!((node.device_name(), node.gid_index()), (name.as_str(), chosen));
}
