//! Where nodes sit: regions and the one-way delay between them.
//!
//! Every node of a modelled network is in one region; each ordered pair of regions
//! (a region with itself included) has a one-way delay and a jitter bound. The matrix
//! is symmetric (a path's delay does not depend on its direction) and checked at
//! construction, so a bad cluster file or bench option is refused with the field that
//! is wrong. Hops count the switches on a path (one inside a region, three between:
//! the two regions' switches and the wide-area link), the figure a delay-based
//! congestion control scales its target with.

use crate::fabric::{FabricError, Result};
use crate::limits::{NETWORK_NODES_MAX, NETWORK_REGIONS_MAX, PATH_HOPS_MAX};

/// A region's index in its topology.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RegionId(pub u8);

/// The delay of messages from one region to another.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct PathDelay {
    /// Fixed one-way delay, nanoseconds.
    pub one_way_ns: u64,
    /// Uniform extra one-way delay in `0..jitter_ns`.
    pub jitter_ns: u64,
}

/// Switch hops between two nodes of one region.
pub const HOPS_INSIDE_REGION: u8 = 1;
/// Switch hops between two regions: each region's switch and the wide-area link.
pub const HOPS_BETWEEN_REGIONS: u8 = 3;
const _: () = assert!(HOPS_INSIDE_REGION <= HOPS_BETWEEN_REGIONS && HOPS_BETWEEN_REGIONS <= PATH_HOPS_MAX);

/// Regions, the region of every node, and the delay matrix between regions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Topology {
    names: Vec<String>,
    /// Region of node id `i` (node ids follow creation order on a [`super::Network`]).
    node_region: Vec<RegionId>,
    /// `delay[from * regions + to]`.
    delay: Vec<PathDelay>,
}

impl Topology {
    /// A topology of `names.len()` regions with `delay[from][to]`, and node `i` in region
    /// `node_region[i]`. Refused, naming the field: no region, more than
    /// [`NETWORK_REGIONS_MAX`] regions or [`NETWORK_NODES_MAX`] nodes, a matrix that is
    /// not square or not symmetric, a node in a region that does not exist, a region no
    /// node is in, a delay between regions below the delay inside either region.
    pub fn new(names: Vec<String>, delay: Vec<Vec<PathDelay>>, node_region: Vec<RegionId>) -> Result<Self> {
        let bad = |what: String| Err(FabricError::Topology(what));
        let r = names.len();
        if r == 0 || r > NETWORK_REGIONS_MAX {
            return bad(format!("regions: {r} given; name between 1 and {NETWORK_REGIONS_MAX}"));
        }
        if node_region.is_empty() || node_region.len() > NETWORK_NODES_MAX {
            return bad(format!(
                "node regions: {} nodes placed; place between 1 and {NETWORK_NODES_MAX}",
                node_region.len()
            ));
        }
        if delay.len() != r || delay.iter().any(|row| row.len() != r) {
            return bad(format!("latency matrix: must be {r} rows of {r} delays, one per region, in region order"));
        }
        for (i, name) in names.iter().enumerate() {
            if name.is_empty() || names[..i].contains(name) {
                return bad(format!("regions: name {name:?} is empty or given twice"));
            }
        }
        for from in 0..r {
            for to in 0..r {
                if delay[from][to] != delay[to][from] {
                    return bad(format!(
                        "latency matrix: {} -> {} is {:?} but {} -> {} is {:?}; the matrix must be symmetric",
                        names[from], names[to], delay[from][to], names[to], names[from], delay[to][from]
                    ));
                }
                let inside = delay[from][from].one_way_ns.max(delay[to][to].one_way_ns);
                if from != to && delay[from][to].one_way_ns < inside {
                    return bad(format!(
                        "latency matrix: {} <-> {} ({} ns) is shorter than inside one of them ({inside} ns)",
                        names[from], names[to], delay[from][to].one_way_ns
                    ));
                }
            }
        }
        if let Some((node, region)) = node_region.iter().enumerate().find(|(_, g)| usize::from(g.0) >= r) {
            return bad(format!("node {node}: region {} does not exist ({r} regions)", region.0));
        }
        if let Some(empty) = (0..r).find(|&g| !node_region.iter().any(|n| usize::from(n.0) == g)) {
            return bad(format!("regions: no node is in region {:?}; remove it or place a node there", names[empty]));
        }
        Ok(Self { names, node_region, delay: delay.into_iter().flatten().collect() })
    }

    /// Every node in one region with `delay` inside it.
    pub fn flat(nodes: usize, delay: PathDelay) -> Result<Self> {
        Self::new(vec!["all".into()], vec![vec![delay]], vec![RegionId(0); nodes])
    }

    /// Region names, in index order.
    pub fn region_names(&self) -> &[String] {
        &self.names
    }

    /// Nodes placed.
    pub fn nodes(&self) -> usize {
        self.node_region.len()
    }

    /// The region of `node`; `None` for a node the topology does not place.
    pub fn region_of(&self, node: u32) -> Option<RegionId> {
        self.node_region.get(node as usize).copied()
    }

    /// The delay from region `from` to region `to`.
    pub fn delay(&self, from: RegionId, to: RegionId) -> PathDelay {
        self.delay[usize::from(from.0) * self.names.len() + usize::from(to.0)]
    }

    /// The delay between two placed nodes; `None` when either is not placed.
    pub fn path(&self, src: u32, dst: u32) -> Option<PathDelay> {
        Some(self.delay(self.region_of(src)?, self.region_of(dst)?))
    }

    /// Switch hops between two nodes ([`HOPS_INSIDE_REGION`] for unplaced ones).
    pub fn hops(&self, src: u32, dst: u32) -> u8 {
        match (self.region_of(src), self.region_of(dst)) {
            (Some(a), Some(b)) if a != b => HOPS_BETWEEN_REGIONS,
            _ => HOPS_INSIDE_REGION,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(one_way_ns: u64) -> PathDelay {
        PathDelay { one_way_ns, jitter_ns: 0 }
    }

    fn geo() -> Topology {
        let m = vec![
            vec![d(500), d(40_000), d(90_000)],
            vec![d(40_000), d(500), d(90_000)],
            vec![d(90_000), d(90_000), d(500)],
        ];
        let names = vec!["store".into(), "near".into(), "far".into()];
        Topology::new(names, m, vec![RegionId(0), RegionId(0), RegionId(1), RegionId(2)]).unwrap()
    }

    #[test]
    fn paths_and_hops_follow_the_regions() {
        let t = geo();
        assert_eq!(t.path(0, 1), Some(d(500)));
        assert_eq!(t.path(1, 2), Some(d(40_000)));
        assert_eq!(t.path(3, 0), Some(d(90_000)));
        assert_eq!(t.path(0, 9), None);
        assert_eq!((t.hops(0, 1), t.hops(0, 3)), (HOPS_INSIDE_REGION, HOPS_BETWEEN_REGIONS));
    }

    #[test]
    fn a_bad_matrix_is_refused_naming_what_is_wrong() {
        let err = |names: Vec<&str>, m: Vec<Vec<PathDelay>>, nodes: Vec<u8>| {
            let names = names.into_iter().map(String::from).collect();
            Topology::new(names, m, nodes.into_iter().map(RegionId).collect()).unwrap_err().to_string()
        };
        let e = err(vec!["a", "b"], vec![vec![d(1), d(5)], vec![d(6), d(1)]], vec![0, 1]);
        assert!(e.contains("symmetric") && e.contains("a -> b"), "{e}");
        let e = err(vec!["a", "b"], vec![vec![d(1), d(5)]], vec![0, 1]);
        assert!(e.contains("2 rows of 2"), "{e}");
        let e = err(vec!["a", "b"], vec![vec![d(10), d(5)], vec![d(5), d(1)]], vec![0, 1]);
        assert!(e.contains("shorter than inside"), "{e}");
        let e = err(vec!["a", "b"], vec![vec![d(1), d(5)], vec![d(5), d(1)]], vec![0, 0]);
        assert!(e.contains("no node is in region \"b\""), "{e}");
        let e = err(vec!["a"], vec![vec![d(1)]], vec![0, 3]);
        assert!(e.contains("node 1: region 3"), "{e}");
        let e = err(vec!["a", "a"], vec![vec![d(1), d(1)], vec![d(1), d(1)]], vec![0, 1]);
        assert!(e.contains("given twice"), "{e}");
        assert!(Topology::flat(0, d(1)).is_err());
    }
}
