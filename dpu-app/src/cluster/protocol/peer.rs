//! What one node knows of one peer: the queue pair to it, the regions it advertised,
//! the writer-side log sequence and credits, the heartbeat, and the two halves of
//! directory exclusion (this node's trust in the peer's directory, and the peer's
//! suspicions of this node that it has honored).
//!
//! Every state change goes through one function that logs `from => to`.

use std::collections::VecDeque;

use prescient_shim::directory::{SlotState, SlotWord};

use super::slots::{NoticeId, RepairId, WriteId};
use crate::cluster::format::control::ControlView;
use crate::fabric::{Endpoint, QueuePair, RawQp, RemoteRegion, Reset, Rts};
use crate::limits::{SHADOW_ENTRIES_MAX, SHADOW_ENTRIES_MIN};

/// The queue pair to a peer, in its bring-up state.
#[derive(Debug)]
pub enum Conn<Q: RawQp> {
    /// None (a bring-up step failed; a new one is created on the next offer).
    Gone,
    /// Created or reset, not connected.
    Reset(QueuePair<Q, Reset>),
    /// Connected.
    Ready(QueuePair<Q, Rts>),
}

impl<Q: RawQp> Conn<Q> {
    /// The connected queue pair, if any.
    pub fn ready(&self) -> Option<&QueuePair<Q, Rts>> {
        match self {
            Conn::Ready(qp) => Some(qp),
            _ => None,
        }
    }

    /// The queue pair number, if there is a queue pair.
    pub fn qpn(&self) -> Option<u32> {
        match self {
            Conn::Gone => None,
            Conn::Reset(qp) => Some(qp.qpn()),
            Conn::Ready(qp) => Some(qp.qpn()),
        }
    }
}

/// Where the link to a peer stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Link {
    /// Not connected; this node offers (lower id) or waits for an offer.
    Down,
    /// Offer sent at `at_ns`, no answer yet.
    Offered {
        /// When.
        at_ns: u64,
    },
    /// Queue pair connected; no heartbeat answered yet.
    Connected,
    /// Connected and answering: data may flow.
    Up,
    /// An error completion: waiting for outstanding requests to flush before reset.
    Draining,
}

impl Link {
    /// Whether the link may go from `self` to `to`.
    fn may_become(self, to: Link) -> bool {
        use Link as L;
        match (self, to) {
            // Reset, from anywhere: a drained link, a failed bring-up, a reconnect.
            (_, L::Down) => true,
            // An offer, or its retry.
            (L::Down | L::Offered { .. }, L::Offered { .. }) => true,
            // Brought up against the peer's hello (answering its offer, or answered).
            (L::Down | L::Offered { .. }, L::Connected) => true,
            // Its first heartbeat answered.
            (L::Connected, L::Up) => true,
            // An error completion on a live link (one never up carries no entries).
            (L::Connected | L::Up, L::Draining) => true,
            (L::Connected | L::Up | L::Draining, L::Offered { .. } | L::Connected)
            | (L::Down | L::Offered { .. } | L::Up | L::Draining, L::Up)
            | (L::Down | L::Offered { .. } | L::Draining, L::Draining) => false,
        }
    }
}

/// This node's trust in the peer's cache directory (this node as a writer).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Trust {
    /// Marks reach it.
    Trusted,
    /// A directory operation failed at `since_ns`: writes that need the peer wait until
    /// its lease must have lapsed.
    Suspect {
        /// When.
        since_ns: u64,
    },
    /// Its lease has lapsed: writes go ahead without its directory until it honors
    /// the suspicion.
    Excluded,
}

impl Trust {
    /// Whether trust may go from `self` to `to`.
    fn may_become(self, to: Trust) -> bool {
        use Trust as T;
        match (self, to) {
            // A failure to reach it, again or for the first time: the wait restarts.
            (_, T::Suspect { .. }) => true,
            // Its lease must have lapsed.
            (T::Suspect { .. }, T::Excluded) => true,
            // It honored the suspicion.
            (T::Suspect { .. } | T::Excluded, T::Trusted) => true,
            (T::Trusted, T::Trusted | T::Excluded) | (T::Excluded, T::Excluded) => false,
        }
    }
}

/// What the peer advertised in its hello.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Remote {
    /// Its incarnation.
    pub incarnation: u32,
    /// Its queue pair endpoint.
    pub endpoint: Endpoint,
    /// Its control block.
    pub control: RemoteRegion,
    /// Its fragment log for this node's writes.
    pub log: RemoteRegion,
    /// Its fragment store.
    pub store: RemoteRegion,
    /// Its host's cache directory.
    pub directory: RemoteRegion,
    /// Slots in that directory.
    pub directory_slots: u32,
    /// Slots of its log for this node.
    pub log_slots: u32,
    /// Bytes per log slot.
    pub log_slot_bytes: u32,
    /// Its fate ring (sequencer mode; zero length otherwise).
    pub fates: RemoteRegion,
    /// Its change feed (sequencer mode; zero length otherwise).
    pub feed: RemoteRegion,
    /// Its stamp ledger (sequencer mode; zero otherwise).
    pub ledger: RemoteRegion,
}

/// An entry this node wrote into the peer's log, awaiting its acknowledgement.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sent {
    /// Fragment `fragment` of write `write`.
    Fragment {
        /// The write (a reused slot is a different write).
        write: WriteId,
        /// Fragment index.
        fragment: u8,
    },
    /// Outcome notice `notice`.
    Notice {
        /// The notice.
        notice: NoticeId,
    },
    /// A fragment a repair rebuilt for this peer.
    Repair {
        /// The repair.
        repair: RepairId,
    },
}

/// A direct-mapped cache of the last word seen in each of the peer's slots: the guess a
/// CAS starts from. It covers the whole directory up to [`SHADOW_ENTRIES_MAX`] slots
/// (a guess that misses costs a CAS round trip: measured at 1.4 to 1.8 rounds per job
/// with a fixed 16K entries over a 64K-slot directory and a trace of 187K keys).
#[derive(Debug)]
pub struct Shadow {
    tags: Vec<u32>,
    words: Vec<u64>,
    /// The guess for a slot never seen: what revocations leave in every untouched slot
    /// (`Invalid(revocations, host)`), learned from the first such word a CAS returns.
    default: u64,
}

/// Versions below this are revocation counts, not write versions (those are clock
/// stamps, far above it).
const REVOKED_VERSIONS: u64 = 1 << 32;

impl Shadow {
    fn new() -> Self {
        Self { tags: vec![u32::MAX; SHADOW_ENTRIES_MIN], words: vec![0; SHADOW_ENTRIES_MIN], default: 0 }
    }

    /// The last word seen in `slot` (a fresh directory's words are all zero: Valid).
    pub fn guess(&self, slot: u32) -> u64 {
        let i = slot as usize % self.tags.len();
        if self.tags[i] == slot {
            self.words[i]
        } else {
            self.default
        }
    }

    /// Records `word`, which a CAS on `slot` of host `host`'s directory returned; a
    /// revocation's word in a slot never seen teaches the guess for all such slots.
    pub fn observed(&mut self, slot: u32, word: u64, host: u8) {
        let i = slot as usize % self.tags.len();
        let w = SlotWord::unpack(word);
        if self.tags[i] != slot && w.writer == host && w.version < REVOKED_VERSIONS && w.state != SlotState::Pending {
            self.default = SlotWord { state: SlotState::Invalid, ..w }.pack();
        }
        self.saw(slot, word);
    }

    /// Records `word` as seen in `slot`.
    pub fn saw(&mut self, slot: u32, word: u64) {
        let i = slot as usize % self.tags.len();
        self.tags[i] = slot;
        self.words[i] = word;
    }

    /// Forgets everything: the peer revoked its directory (every slot moved one version
    /// on, the untouched ones too).
    pub fn clear(&mut self) {
        self.tags.fill(u32::MAX);
        let d = SlotWord::unpack(self.default);
        if d.version != 0 {
            self.default = SlotWord { version: d.version + 1, ..d }.pack();
        }
    }

    /// Forgets everything and sizes the cache for a directory of `slots` (at
    /// connection time, never on the data path).
    pub fn reset_for(&mut self, slots: u32) {
        let entries = (slots as usize).clamp(SHADOW_ENTRIES_MIN, SHADOW_ENTRIES_MAX);
        if entries != self.tags.len() {
            self.tags = vec![u32::MAX; entries];
            self.words = vec![0; entries];
        } else {
            self.tags.fill(u32::MAX);
        }
        // A restarted peer revoked an unknown number of times: learn it again.
        self.default = 0;
    }

    /// Entries held.
    pub fn entries(&self) -> usize {
        self.tags.len()
    }
}

/// Everything this node keeps about one peer.
#[derive(Debug)]
pub struct Peer<Q: RawQp> {
    /// The peer's node id.
    pub id: u8,
    /// The queue pair.
    pub conn: Conn<Q>,
    link: Link,
    /// What it advertised.
    pub remote: Option<Remote>,
    /// Send-queue work requests outstanding.
    pub sends: u32,
    /// Receives posted.
    pub recvs: u32,
    /// Next sequence number of this node's log on the peer.
    pub next_seq: u64,
    /// Entries sent and not acknowledged, oldest first (at most the log's slots).
    pub sent: VecDeque<Sent>,
    /// A heartbeat READ is outstanding since this time.
    pub heartbeat_posted_ns: Option<u64>,
    /// This node answered the peer's offer (last at this time) and the peer has not yet
    /// shown that its queue pair is up, by a Ready hello or by anything arriving on the
    /// link: nothing is posted to it until then (a request reaching a queue pair not
    /// ready to receive is dropped, and the link fails once its retries run out).
    pub awaiting_ready: Option<u64>,
    /// When the last answered heartbeat READ was posted (0: never).
    pub last_heard_ns: u64,
    /// The control block last READ.
    pub view: Option<ControlView>,
    trust: Trust,
    /// This node's suspicion epoch of the peer (published in our control block),
    /// from `control::first_epoch` of this incarnation.
    pub suspect_epoch: u64,
    /// The epoch this node readmitted the peer at.
    pub readmitted: u64,
    /// The peer's suspicion epoch of this node that this node has honored.
    pub honored: u64,
    /// Whether the peer has readmitted this node at `honored` (so this node may trust
    /// its own directory with respect to the peer's writes again).
    pub readmitted_by_peer: bool,
    /// Declared dead (silent for `dead_after`): its marks are cleared.
    pub dead: bool,
    /// Guesses for CASes on its directory.
    pub shadow: Shadow,
    /// Connections made so far (receives carry it, so those of an earlier connection,
    /// flushed when it broke, are told apart).
    pub conn_gen: u32,
    /// The next outcome-table entry to resend decisions from (after a reconnect).
    pub resync: Option<u64>,
    /// Bytes this node sent to the peer (fragments, notices).
    pub bytes_out: u64,
    /// Bytes the peer wrote into this node's log.
    pub bytes_in: u64,
}

impl<Q: RawQp> Peer<Q> {
    /// A peer not yet connected, suspected and readmitted at `first_epoch` (this
    /// incarnation's, as its control block starts).
    pub fn new(id: u8, conn: Conn<Q>, first_epoch: u64) -> Self {
        Self {
            id,
            conn,
            link: Link::Down,
            remote: None,
            sends: 0,
            recvs: 0,
            next_seq: 0,
            sent: VecDeque::new(),
            heartbeat_posted_ns: None,
            awaiting_ready: None,
            last_heard_ns: 0,
            view: None,
            trust: Trust::Trusted,
            suspect_epoch: first_epoch,
            readmitted: first_epoch,
            honored: 0,
            readmitted_by_peer: false,
            dead: false,
            shadow: Shadow::new(),
            conn_gen: 0,
            resync: None,
            bytes_out: 0,
            bytes_in: 0,
        }
    }

    /// The link state.
    pub fn link(&self) -> Link {
        self.link
    }

    /// Whether data may flow.
    pub fn is_up(&self) -> bool {
        self.link == Link::Up && self.conn.ready().is_some()
    }

    /// Whether this node may answer on the link: connected, whether or not its first
    /// heartbeat has come back. The peer may be up already and writing into our log;
    /// an acknowledgement it never gets makes the next one out of order, and the link
    /// starts over (under jitter, again and again).
    pub fn can_answer(&self) -> bool {
        matches!(self.link, Link::Connected | Link::Up) && self.conn.ready().is_some()
    }

    /// Changes the link state (checked, logged).
    pub fn set_link(&mut self, me: u8, to: Link) {
        assert!(self.link.may_become(to), "node {me}: link to {}: {:?} => {to:?}", self.id, self.link);
        if self.link != to {
            tracing::debug!(node = me, peer = self.id, from = ?self.link, to = ?to, "link");
            self.link = to;
        }
    }

    /// This node's trust in the peer's directory.
    pub fn trust(&self) -> Trust {
        self.trust
    }

    /// Changes the trust state (checked, logged).
    pub fn set_trust(&mut self, me: u8, to: Trust) {
        assert!(self.trust.may_become(to), "node {me}: trust in {}: {:?} => {to:?}", self.id, self.trust);
        if self.trust != to {
            tracing::info!(node = me, peer = self.id, from = ?self.trust, to = ?to, "directory trust");
            self.trust = to;
        }
    }

    /// Whether the log on the peer has a free slot for one more entry.
    pub fn has_credit(&self) -> bool {
        self.remote.is_some_and(|r| (self.sent.len() as u64) < u64::from(r.log_slots))
    }

    /// The shadow guess for `slot`, as a word.
    pub fn guess(&self, slot: u32) -> SlotWord {
        SlotWord::unpack(self.shadow.guess(slot))
    }
}

/// Moves a resync cursor back to `write_seq`, or starts it there: the walk of the
/// outcome table comes back to that write.
pub(super) fn rewind(cursor: &mut Option<u64>, write_seq: u64) {
    *cursor = Some(cursor.map_or(write_seq, |c| c.min(write_seq)));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_link_comes_up_in_order_and_drains_only_once_connected() {
        let offered = Link::Offered { at_ns: 1 };
        for (from, to) in [
            (Link::Down, offered),
            (offered, Link::Offered { at_ns: 2 }),
            (offered, Link::Connected),
            (Link::Down, Link::Connected),
            (Link::Connected, Link::Up),
            (Link::Up, Link::Draining),
            (Link::Draining, Link::Down),
            (offered, Link::Down),
        ] {
            assert!(from.may_become(to), "{from:?} => {to:?}");
        }
        for (from, to) in [
            (Link::Down, Link::Up),
            (Link::Draining, Link::Connected),
            (Link::Down, Link::Draining),
            (Link::Up, Link::Connected),
        ] {
            assert!(!from.may_become(to), "{from:?} => {to:?}");
        }
    }

    #[test]
    fn a_trusted_directory_is_suspected_before_it_is_excluded() {
        let suspect = Trust::Suspect { since_ns: 5 };
        assert!(Trust::Trusted.may_become(suspect));
        assert!(suspect.may_become(Trust::Excluded));
        assert!(Trust::Excluded.may_become(suspect));
        assert!(Trust::Excluded.may_become(Trust::Trusted));
        assert!(!Trust::Trusted.may_become(Trust::Excluded));
    }
}
