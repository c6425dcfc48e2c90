//! The fabric a cluster runs on, as the cluster file says it: `[cluster] fabric = "emu"`
//! (the default: the emulated NIC over TCP, each `[[node]]` giving its listener in
//! `fabric = "IP:PORT"`) or `fabric = "verbs"` (libibverbs: each `[[node]]` names its
//! RDMA `device`, and optionally its `device_port` and `gid_index`), and the queue
//! pairs' retry counts (`retry_count`, `rnr_retry_count`).
//!
//! Which device exists is only known on the node's machine: the file is checked here for
//! what it says, the device when the node opens it (`fabric::verbs::VerbsNode::open_device`).

use std::net::SocketAddr;

use crate::limits::{NAME_BYTES_MAX, RETRY_COUNT_MAX, RNR_RETRY_COUNT_MAX};

/// Transport retries before a request fails with `RetryExceeded` and the link is lost
/// (`[cluster] retry_count`): three tries in all, each after the transport timeout.
pub const DEFAULT_RETRY_COUNT: u8 = 2;
/// Receiver-not-ready retries (`[cluster] rnr_retry_count`): a node refills its
/// receives as it polls, so a few back-offs cover a busy peer and a stopped one still
/// fails the link rather than stalling it forever (7, "infinite" on hardware, is refused).
pub const DEFAULT_RNR_RETRY_COUNT: u8 = 3;
/// The RDMA port a `[[node]]` without `device_port` uses.
pub const DEFAULT_DEVICE_PORT: u8 = 1;

/// Which fabric every node of the cluster reaches its peers through.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FabricKind {
    /// The emulated NIC over TCP (`emu`).
    Emu,
    /// Real RDMA through libibverbs (`verbs`): a build with `--features verbs`.
    Verbs,
}

impl FabricKind {
    /// The name in the configuration file.
    pub const fn name(self) -> &'static str {
        match self {
            FabricKind::Emu => "emu",
            FabricKind::Verbs => "verbs",
        }
    }
}

/// One node's RDMA device (`fabric = "verbs"`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerbsDevice {
    /// The device as `ibv_get_device_list` names it (`ibv_devices`), e.g. `mlx5_0`, `rxe0`.
    pub name: String,
    /// Its port (from 1).
    pub port: u8,
    /// The GID table entry to use (`show_gids`); `None`: the first RoCEv2 GID with an
    /// IPv4 address, else the first non-zero one.
    pub gid_index: Option<u8>,
}

/// How one node reaches the fabric.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NodeFabric {
    /// The emulated NIC over TCP, listening on this address.
    Emu(SocketAddr),
    /// An RDMA device.
    Verbs(VerbsDevice),
}

impl NodeFabric {
    /// The emulated NIC's listener, on an `emu` cluster.
    pub fn emu_listener(&self) -> Option<SocketAddr> {
        match self {
            NodeFabric::Emu(a) => Some(*a),
            NodeFabric::Verbs(_) => None,
        }
    }

    /// The RDMA device, on a `verbs` cluster.
    pub fn verbs_device(&self) -> Option<&VerbsDevice> {
        match self {
            NodeFabric::Emu(_) => None,
            NodeFabric::Verbs(d) => Some(d),
        }
    }

    /// Which kind it is.
    pub fn kind(&self) -> FabricKind {
        match self {
            NodeFabric::Emu(_) => FabricKind::Emu,
            NodeFabric::Verbs(_) => FabricKind::Verbs,
        }
    }
}

impl std::fmt::Display for NodeFabric {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NodeFabric::Emu(a) => write!(f, "emu {a}"),
            NodeFabric::Verbs(d) => match d.gid_index {
                Some(g) => write!(f, "verbs {} port {} gid index {g}", d.name, d.port),
                None => write!(f, "verbs {} port {}", d.name, d.port),
            },
        }
    }
}

/// The `[cluster] fabric` value: `None` is emu.
pub(super) fn parse_kind(text: Option<&str>) -> Result<FabricKind, (String, String)> {
    match text {
        None | Some("emu") => Ok(FabricKind::Emu),
        Some("verbs") => Ok(FabricKind::Verbs),
        Some(other) => Err((
            format!("{other:?}"),
            "must be \"emu\" (the emulated NIC over TCP) or \"verbs\" (an RDMA device through libibverbs)".to_owned(),
        )),
    }
}

/// What a `[[node]]` entry says about its fabric, as written.
pub(super) struct RawNodeFabric<'a> {
    pub fabric: Option<&'a str>,
    pub device: Option<&'a str>,
    pub device_port: Option<i64>,
    pub gid_index: Option<i64>,
}

/// One node's fabric from its entry: `Err((field, value, allowed))`.
pub(super) fn node_fabric(kind: FabricKind, raw: &RawNodeFabric<'_>) -> Result<NodeFabric, (String, String, String)> {
    let err = |field: &str, value: String, allowed: &str| Err((field.to_owned(), value, allowed.to_owned()));
    match kind {
        FabricKind::Emu => {
            for (field, given) in [
                ("device", raw.device.is_some()),
                ("device_port", raw.device_port.is_some()),
                ("gid_index", raw.gid_index.is_some()),
            ] {
                if given {
                    return err(
                        field,
                        "(given)".to_owned(),
                        "is for cluster.fabric = \"verbs\"; this cluster runs on the emulated fabric (cluster.fabric = \"emu\", the default): remove it, or set fabric = \"verbs\" in [cluster]",
                    );
                }
            }
            let Some(text) = raw.fabric else {
                return err(
                    "fabric",
                    "(missing)".to_owned(),
                    "an emu cluster needs each node's emulated-NIC listener, such as fabric = \"127.0.0.1:7100\"; or set fabric = \"verbs\" in [cluster] and name the node's RDMA device",
                );
            };
            text.parse::<SocketAddr>().map(NodeFabric::Emu).or_else(|_| {
                err(
                    "fabric",
                    format!("{text:?}"),
                    "must be an IP address and port such as \"127.0.0.1:7100\" or \"[::1]:7100\" (host names are not resolved)",
                )
            })
        }
        FabricKind::Verbs => {
            if let Some(text) = raw.fabric {
                return err(
                    "fabric",
                    format!("{text:?}"),
                    "is the emulated NIC's listener; on cluster.fabric = \"verbs\" a node reaches its peers through its RDMA device: remove it and give device = \"NAME\" (see ibv_devices)",
                );
            }
            let Some(name) = raw.device else {
                return err(
                    "device",
                    "(missing)".to_owned(),
                    "a verbs cluster needs each node's RDMA device as ibv_devices lists it, such as device = \"mlx5_0\" or \"rxe0\"",
                );
            };
            if name.is_empty() || name.len() > NAME_BYTES_MAX || !name.bytes().all(|b| b.is_ascii_graphic()) {
                return err(
                    "device",
                    format!("{name:?}"),
                    &format!(
                        "must be a device name as ibv_devices lists it (1 to {NAME_BYTES_MAX} printable characters)"
                    ),
                );
            }
            let port = match raw.device_port {
                None => DEFAULT_DEVICE_PORT,
                Some(p) => match u8::try_from(p) {
                    Ok(p) if p >= 1 => p,
                    _ => {
                        return err(
                            "device_port",
                            p.to_string(),
                            "RDMA ports are numbered from 1 to 255 (ibv_devinfo lists them)",
                        )
                    }
                },
            };
            let gid_index = match raw.gid_index {
                None => None,
                Some(g) => match u8::try_from(g) {
                    Ok(g) => Some(g),
                    Err(_) => {
                        return err("gid_index", g.to_string(), "must be 0 to 255, an entry of the port's GID table (show_gids, or /sys/class/infiniband/DEV/ports/PORT/gids)")
                    }
                },
            };
            Ok(NodeFabric::Verbs(VerbsDevice { name: name.to_owned(), port, gid_index }))
        }
    }
}

/// A `[cluster]` retry count: `Err((value, allowed))` outside `0..=max`.
pub(super) fn retry(v: Option<i64>, default: u8, max: u8, what: &str) -> Result<u8, (String, String)> {
    match v {
        None => Ok(default),
        Some(v) => u8::try_from(v)
            .ok()
            .filter(|&c| c <= max)
            .ok_or_else(|| (v.to_string(), format!("must be 0 to {max}: {what}"))),
    }
}

/// What `retry` says about `retry_count`.
pub(super) const RETRY_COUNT_RULE: (u8, &str) =
    (RETRY_COUNT_MAX, "transport retries before a request fails and its link is lost (the IB field has 3 bits)");
/// What `retry` says about `rnr_retry_count`.
pub(super) const RNR_RETRY_COUNT_RULE: (u8, &str) = (
    RNR_RETRY_COUNT_MAX,
    "receiver-not-ready retries; 7 would mean retry forever on hardware, which lets a stopped peer stall a link instead of failing it",
);
