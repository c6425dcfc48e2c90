//! The network as the cluster file describes it (`[network]`): the regions nodes sit
//! in, the one-way delay and jitter between them, and whether each node runs Swift
//! congestion control on its peers' queue pairs.
//!
//! ```toml
//! [network]
//! congestion_control = "swift"        # or "none" (the default)
//! seed = 7                            # the emulated fabric's jitter draws (default 0)
//! regions = ["store", "cache-a", "cache-b"]
//! latency_us = [[500, 40000, 90000], [40000, 500, 90000], [90000, 90000, 500]]
//! jitter_us = [[50, 1000, 1000], [1000, 50, 1000], [1000, 1000, 50]]   # default: none
//!
//! [[node]]
//! id = 0
//! region = "store"
//! ```
//!
//! On the emulated fabric the matrix is the model's, between processes as in one
//! (each delay a function of the seed and the message); on verbs the real network has
//! its own delays and the matrix gives Swift each path's base round trip. Without
//! `[network]` every node is in one region with no modelled delay.

use crate::fabric::emu::{PathDelay, RegionId, Topology};

/// Whether nodes pace their requests to each peer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Congestion {
    /// Requests go out as the send queue allows.
    None,
    /// Swift ([`crate::fabric::swift::SwiftConfig::DATACENTER`]) on every peer's
    /// fragment WRITEs, notices, CASes and READs.
    Swift,
}

impl Congestion {
    /// Both, in report order.
    pub const ALL: [Congestion; 2] = [Congestion::None, Congestion::Swift];

    /// The name in the cluster file, options and reports.
    pub const fn name(self) -> &'static str {
        match self {
            Congestion::None => "none",
            Congestion::Swift => "swift",
        }
    }
}

/// Regions, their delays and congestion control.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NetworkConfig {
    /// Where nodes sit (`None`: one region, no modelled delay).
    pub topology: Option<Topology>,
    /// Congestion control.
    pub congestion: Congestion,
    /// Seed of the emulated fabric's draws (jitter) between processes.
    pub seed: u64,
}

impl Default for NetworkConfig {
    fn default() -> Self {
        Self { topology: None, congestion: Congestion::None, seed: 0 }
    }
}

impl NetworkConfig {
    /// The base round trip Swift allows between two nodes: twice the path's one-way
    /// delay at its jitter's worst (0 without a topology).
    pub fn base_rtt_ns(&self, a: u8, b: u8) -> u64 {
        self.topology
            .as_ref()
            .and_then(|t| t.path(u32::from(a), u32::from(b)))
            .map_or(0, |p| 2 * (p.one_way_ns + p.jitter_ns))
    }
}

/// `[network]` as written.
#[derive(serde::Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawNetwork {
    congestion_control: Option<String>,
    seed: Option<i64>,
    regions: Option<Vec<String>>,
    latency_us: Option<Vec<Vec<i64>>>,
    jitter_us: Option<Vec<Vec<i64>>>,
}

/// A field that is wrong: (field, value, what is allowed).
pub(super) type Refusal = (String, String, String);

/// Converts `[network]` and each node's `region` (in node id order) into a
/// [`NetworkConfig`], or names the field that is wrong.
pub(super) fn parse(raw: Option<RawNetwork>, node_regions: &[(u8, Option<String>)]) -> Result<NetworkConfig, Refusal> {
    let raw = raw.unwrap_or_default();
    let refuse = |field: &str, value: String, allowed: String| Err((format!("network.{field}"), value, allowed));
    let congestion = match raw.congestion_control.as_deref() {
        None | Some("none") => Congestion::None,
        Some("swift") => Congestion::Swift,
        Some(other) => {
            return refuse("congestion_control", format!("{other:?}"), "must be \"swift\" or \"none\"".into())
        }
    };
    let seed = match raw.seed.map(u64::try_from) {
        None => 0,
        Some(Ok(seed)) => seed,
        Some(Err(_)) => return refuse("seed", format!("{:?}", raw.seed), "must not be negative".into()),
    };
    let Some(names) = raw.regions else {
        if raw.latency_us.is_some() || raw.jitter_us.is_some() {
            return refuse("regions", "missing".into(), "latency_us and jitter_us need the regions they index".into());
        }
        if let Some((id, Some(region))) = node_regions.iter().find(|(_, r)| r.is_some()) {
            return Err((
                format!("[[node]] id = {id}: region"),
                format!("{region:?}"),
                "names a region, but [network] lists none; add network.regions".into(),
            ));
        }
        return Ok(NetworkConfig { topology: None, congestion, seed });
    };
    let r = names.len();
    let matrix = |field: &str, rows: Option<Vec<Vec<i64>>>| -> Result<Vec<Vec<u64>>, Refusal> {
        let Some(rows) = rows else { return Ok(vec![vec![0; r]; r]) };
        if rows.len() != r || rows.iter().any(|row| row.len() != r) {
            return Err((
                format!("network.{field}"),
                format!("{rows:?}"),
                format!("must be {r} rows of {r} microsecond figures, one per region in network.regions order"),
            ));
        }
        rows.into_iter()
            .map(|row| {
                row.into_iter()
                    .map(|us| {
                        u64::try_from(us).ok().and_then(|us| us.checked_mul(1_000)).ok_or_else(|| {
                            (format!("network.{field}"), us.to_string(), "must not be negative".to_string())
                        })
                    })
                    .collect()
            })
            .collect()
    };
    if raw.latency_us.is_none() {
        return refuse("latency_us", "missing".into(), format!("give {r} rows of {r} one-way delays with the regions"));
    }
    let latency = matrix("latency_us", raw.latency_us)?;
    let jitter = matrix("jitter_us", raw.jitter_us)?;
    let delay: Vec<Vec<PathDelay>> = (0..r)
        .map(|a| (0..r).map(|b| PathDelay { one_way_ns: latency[a][b], jitter_ns: jitter[a][b] }).collect())
        .collect();
    let mut placed = Vec::with_capacity(node_regions.len());
    for (id, region) in node_regions {
        let field = format!("[[node]] id = {id}: region");
        let Some(region) = region else {
            return Err((
                field,
                "missing".into(),
                format!("every node names its region when regions are given: {names:?}"),
            ));
        };
        let Some(index) = names.iter().position(|n| n == region) else {
            return Err((field, format!("{region:?}"), format!("must be one of network.regions: {names:?}")));
        };
        placed.push(RegionId(index as u8));
    }
    let topology = Topology::new(names, delay, placed)
        .map_err(|e| ("network.latency_us".to_string(), "(the matrix and regions)".to_string(), e.to_string()))?;
    Ok(NetworkConfig { topology: Some(topology), congestion, seed })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(text: &str) -> RawNetwork {
        toml::from_str(text).unwrap()
    }

    fn nodes(regions: &[Option<&str>]) -> Vec<(u8, Option<String>)> {
        regions.iter().enumerate().map(|(i, r)| (i as u8, r.map(String::from))).collect()
    }

    #[test]
    fn regions_place_nodes_and_give_each_pair_its_base_round_trip() {
        let n = parse(
            Some(raw(r#"congestion_control = "swift"
                regions = ["store", "far"]
                latency_us = [[500, 90000], [90000, 500]]
                jitter_us = [[10, 100], [100, 10]]"#)),
            &nodes(&[Some("store"), Some("store"), Some("far")]),
        )
        .unwrap();
        assert_eq!(n.congestion, Congestion::Swift);
        assert_eq!(n.base_rtt_ns(0, 1), 2 * 510_000);
        assert_eq!(n.base_rtt_ns(0, 2), 2 * 90_100_000);
        assert_eq!(parse(None, &nodes(&[None, None])).unwrap(), NetworkConfig::default());
    }

    #[test]
    fn each_wrong_field_is_named() {
        let err = |text: &str, regions: &[Option<&str>]| {
            let (field, value, allowed) = parse(Some(raw(text)), &nodes(regions)).unwrap_err();
            format!("{field} = {value}: {allowed}")
        };
        let two = r#"regions = ["a", "b"]
            latency_us = [[1, 5], [5, 1]]"#;
        let e = err(two, &[Some("a"), Some("c")]);
        assert!(e.starts_with("[[node]] id = 1: region = \"c\""), "{e}");
        let e = err(two, &[Some("a"), None]);
        assert!(e.starts_with("[[node]] id = 1: region = missing"), "{e}");
        let e = err(
            r#"regions = ["a", "b"]
            latency_us = [[1, 5]]"#,
            &[Some("a"), Some("b")],
        );
        assert!(e.starts_with("network.latency_us") && e.contains("2 rows of 2"), "{e}");
        let e = err(
            r#"regions = ["a", "b"]
            latency_us = [[1, 5], [6, 1]]"#,
            &[Some("a"), Some("b")],
        );
        assert!(e.starts_with("network.latency_us") && e.contains("symmetric"), "{e}");
        let e = err(
            r#"regions = ["a"]
            latency_us = [[-1]]"#,
            &[Some("a")],
        );
        assert!(e.contains("must not be negative"), "{e}");
        let e = err(r#"congestion_control = "reno""#, &[None]);
        assert!(e.starts_with("network.congestion_control = \"reno\""), "{e}");
        let e = err(r#"latency_us = [[1]]"#, &[None]);
        assert!(e.starts_with("network.regions"), "{e}");
        let e = err("", &[Some("a")]);
        assert!(e.contains("lists none"), "{e}");
        let e = err(r#"regions = ["a"]"#, &[Some("a")]);
        assert!(e.starts_with("network.latency_us = missing"), "{e}");
    }
}
