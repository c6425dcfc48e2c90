//! How writes are ordered, as the cluster file says it: `[cluster] ordering = "hlc"`
//! (the default: each writer's hybrid logical clock, `cluster::hlc`) or `ordering =
//! "sequencer"`, with `sequencer = N` (the node that sequences first), `shadows = [..]`
//! (the nodes that take over, in order, when its heartbeat stops) and `stamp_block`
//! (stamps a writer fetches with one FETCH_ADD). See `cluster::sequence`.

use crate::limits::STAMP_BLOCK_MAX;

/// Stamps a writer fetches at once when the file does not say (`cluster.stamp_block`).
pub const DEFAULT_STAMP_BLOCK: u32 = 16;
/// `dead_after`s of silence after which a holder fences a writer when the file does not
/// say (`cluster.fence_after_us`): long enough that a restart or a short partition
/// comes back first, short enough that the orders do not wait long for a node gone for
/// good.
pub const DEFAULT_FENCE_AFTER_DEAD_AFTERS: u64 = 20;

/// How every write of the cluster gets its version.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub enum Ordering {
    /// Each writer's hybrid logical clock: per-key order, no order across keys.
    #[default]
    Hlc,
    /// One sequencer's counter, advanced by RDMA FETCH_ADD: one order of all writes.
    Sequencer(SequencerConfig),
}

impl Ordering {
    /// The sequencer settings, in sequencer mode.
    pub fn sequencer(&self) -> Option<&SequencerConfig> {
        match self {
            Ordering::Hlc => None,
            Ordering::Sequencer(s) => Some(s),
        }
    }
}

/// `ordering = "sequencer"`: who sequences, who takes over, how many stamps at once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SequencerConfig {
    /// The node that claims the first epoch (`cluster.sequencer`).
    pub sequencer: u8,
    /// The nodes that claim, in this order, when the sequencer's heartbeat stops
    /// (`cluster.shadows`); the sequencer itself may be listed to take over again
    /// after a restart of a shadow.
    pub shadows: Vec<u8>,
    /// Most stamps a writer fetches with one FETCH_ADD, as many as writes wait
    /// (`cluster.stamp_block`, 1 to [`STAMP_BLOCK_MAX`]); stamps a writer does not use
    /// become holes.
    pub stamp_block: u32,
    /// Silence after which a holder fences a writer (`cluster.fence_after_us`; 0:
    /// `DEFAULT_FENCE_AFTER_DEAD_AFTERS` `dead_after`s): its stamps are then decided
    /// by the holders' rule, and the orders stop waiting for it (`protocol/fence.rs`).
    pub fence_after_us: u64,
}

impl SequencerConfig {
    /// The silence after which a holder fences a writer, with `dead_after_us` the
    /// cluster's failure-detection bound.
    pub fn fence_after_ns(&self, dead_after_us: u64) -> u64 {
        match self.fence_after_us {
            0 => DEFAULT_FENCE_AFTER_DEAD_AFTERS * dead_after_us * 1_000,
            us => us * 1_000,
        }
    }

    /// The rank of `node` among the claimants (the first sequencer is rank 0, shadows
    /// follow in their order), or `None` if it never claims.
    pub fn rank(&self, node: u8) -> Option<usize> {
        if node == self.sequencer {
            return Some(0);
        }
        self.shadows.iter().position(|&s| s == node).map(|i| i + 1)
    }
}

/// The raw fields, as the file wrote them.
pub(super) struct RawOrdering<'a> {
    pub ordering: Option<&'a str>,
    pub sequencer: Option<i64>,
    pub shadows: Option<&'a [i64]>,
    pub stamp_block: Option<i64>,
    pub fence_after_us: Option<i64>,
}

/// The ordering the raw fields ask for, or `(field, value, what is allowed)`.
pub(super) fn parse(raw: &RawOrdering<'_>) -> Result<Ordering, (&'static str, String, String)> {
    let node = |field: &'static str, v: i64| {
        u8::try_from(v).map_err(|_| (field, v.to_string(), "must be a node id of a [[node]] entry".to_owned()))
    };
    match raw.ordering {
        None | Some("hlc") => {
            let stray = [
                ("cluster.sequencer", raw.sequencer.is_some()),
                ("cluster.shadows", raw.shadows.is_some()),
                ("cluster.stamp_block", raw.stamp_block.is_some()),
                ("cluster.fence_after_us", raw.fence_after_us.is_some()),
            ];
            if let Some((field, _)) = stray.iter().find(|(_, set)| *set) {
                return Err((field, "set".to_owned(), "only applies with cluster.ordering = \"sequencer\"".to_owned()));
            }
            Ok(Ordering::Hlc)
        }
        Some("sequencer") => {
            let sequencer = match raw.sequencer {
                Some(v) => node("cluster.sequencer", v)?,
                None => {
                    return Err((
                        "cluster.sequencer",
                        "missing".to_owned(),
                        "ordering = \"sequencer\" needs the node that sequences first, e.g. sequencer = 0".to_owned(),
                    ))
                }
            };
            let shadows =
                raw.shadows.unwrap_or(&[]).iter().map(|&v| node("cluster.shadows", v)).collect::<Result<_, _>>()?;
            let stamp_block = match raw.stamp_block {
                None => DEFAULT_STAMP_BLOCK,
                Some(v) => u32::try_from(v).ok().filter(|b| (1..=STAMP_BLOCK_MAX).contains(b)).ok_or_else(|| {
                    ("cluster.stamp_block", v.to_string(), format!("must be 1 to {STAMP_BLOCK_MAX} stamps"))
                })?,
            };
            let fence_after_us = match raw.fence_after_us {
                None => 0,
                Some(v) => u64::try_from(v).map_err(|_| {
                    ("cluster.fence_after_us", v.to_string(), "must be 0 (the default) or more microseconds".to_owned())
                })?,
            };
            Ok(Ordering::Sequencer(SequencerConfig { sequencer, shadows, stamp_block, fence_after_us }))
        }
        Some(other) => Err((
            "cluster.ordering",
            format!("{other:?}"),
            "must be \"hlc\" (per-key order by hybrid logical clocks) or \"sequencer\" (one order of all writes, stamped by RDMA FETCH_ADD)".to_owned(),
        )),
    }
}

/// Checks sequencer settings against the cluster: `(field, value, what is allowed)`.
pub(super) fn check(
    s: &SequencerConfig,
    nodes: usize,
    quorum: usize,
    dead_after_us: u64,
) -> Result<(), (&'static str, String, String)> {
    if s.fence_after_us != 0 && s.fence_after_us < 2 * dead_after_us {
        return Err((
            "cluster.fence_after_us",
            s.fence_after_us.to_string(),
            format!("must be 0 (the default, {DEFAULT_FENCE_AFTER_DEAD_AFTERS} dead_after_us) or at least twice dead_after_us = {dead_after_us}: a writer is fenced only well after it is declared dead"),
        ));
    }
    if usize::from(s.sequencer) >= nodes {
        return Err(("cluster.sequencer", s.sequencer.to_string(), format!("must be a node id, 0 to {}", nodes - 1)));
    }
    for (i, &shadow) in s.shadows.iter().enumerate() {
        if usize::from(shadow) >= nodes {
            return Err(("cluster.shadows", shadow.to_string(), format!("must be node ids, 0 to {}", nodes - 1)));
        }
        if shadow == s.sequencer || s.shadows[..i].contains(&shadow) {
            return Err((
                "cluster.shadows",
                shadow.to_string(),
                "lists a node twice (or the sequencer itself): each claimant has one rank".to_owned(),
            ));
        }
    }
    if s.stamp_block == 0 || s.stamp_block > STAMP_BLOCK_MAX {
        return Err((
            "cluster.stamp_block",
            s.stamp_block.to_string(),
            format!("must be 1 to {STAMP_BLOCK_MAX} stamps"),
        ));
    }
    // A deposed epoch's stamps must not commit once a claim won: every write quorum
    // must meet every majority (the claim's), so some holder of the write has seen
    // the new epoch and refuses the fragment.
    let majority = nodes / 2 + 1;
    if quorum + majority <= nodes {
        return Err((
            "cluster.quorum",
            quorum.to_string(),
            format!(
                "with ordering = \"sequencer\" must be above {} (nodes - majority) so that every write quorum meets every claim's majority of {majority}; raise the quorum",
                nodes - majority
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw<'a>(ordering: Option<&'a str>, sequencer: Option<i64>, shadows: Option<&'a [i64]>) -> RawOrdering<'a> {
        RawOrdering { ordering, sequencer, shadows, stamp_block: None, fence_after_us: None }
    }

    #[test]
    fn parses_both_modes_and_names_what_is_wrong() {
        assert_eq!(parse(&raw(None, None, None)), Ok(Ordering::Hlc));
        let s = parse(&raw(Some("sequencer"), Some(2), Some(&[3, 0]))).unwrap();
        let s = s.sequencer().unwrap().clone();
        assert_eq!((s.sequencer, s.shadows.clone(), s.stamp_block), (2, vec![3, 0], DEFAULT_STAMP_BLOCK));
        assert_eq!((s.rank(2), s.rank(3), s.rank(0), s.rank(1)), (Some(0), Some(1), Some(2), None));
        assert_eq!(parse(&raw(Some("sequencer"), None, None)).unwrap_err().0, "cluster.sequencer");
        assert_eq!(parse(&raw(Some("hlc"), Some(1), None)).unwrap_err().0, "cluster.sequencer");
        assert_eq!(parse(&raw(Some("paxos"), None, None)).unwrap_err().0, "cluster.ordering");
        let block = RawOrdering { stamp_block: Some(0), ..raw(Some("sequencer"), Some(0), None) };
        assert_eq!(parse(&block).unwrap_err().0, "cluster.stamp_block");
        assert_eq!(check(&s, 5, 3, 1_000), Ok(()));
        assert_eq!(check(&s, 5, 2, 1_000).unwrap_err().0, "cluster.quorum");
        assert_eq!(check(&s, 3, 3, 1_000).unwrap_err().0, "cluster.shadows");
        let twice = SequencerConfig { shadows: vec![1, 1], ..s.clone() };
        assert_eq!(check(&twice, 5, 4, 1_000).unwrap_err().0, "cluster.shadows");
        assert_eq!(s.fence_after_ns(1_000), DEFAULT_FENCE_AFTER_DEAD_AFTERS * 1_000_000);
        let soon = SequencerConfig { fence_after_us: 1_500, ..s.clone() };
        assert_eq!(check(&soon, 5, 4, 1_000).unwrap_err().0, "cluster.fence_after_us");
        let fence = RawOrdering { fence_after_us: Some(-1), ..raw(Some("sequencer"), Some(0), None) };
        assert_eq!(parse(&fence).unwrap_err().0, "cluster.fence_after_us");
        let fence = RawOrdering { fence_after_us: Some(5_000), ..raw(Some("sequencer"), Some(0), None) };
        assert_eq!(parse(&fence).unwrap().sequencer().unwrap().fence_after_ns(1), 5_000_000);
    }
}
