//! Congestion control of what a node sends one peer: a Swift window
//! ([`crate::fabric::swift`]) over its fragment WRITEs, outcome notices, directory
//! CASes, store READs and repair WRITEs.
//!
//! A request the window does not let out now is held here, in post order, and posted
//! when a completion opens the window (or, below a window of one, when its pacing time
//! comes): held requests keep their order among themselves, so the log entries a peer
//! must see in sequence still arrive in sequence. Acknowledgements, heartbeat READs and
//! the sequencer's stamp FETCH_ADDs and leader CASes are never held: an acknowledgement
//! returns the peer's credit, a late heartbeat would make a congested peer look dead, a
//! write waits on its stamp and a failover on its claim; none is ordered against what
//! is held.
//! A held request counts in the peer's `sends` like a posted one, so the send queue's
//! limit bounds what is held too; one held across a broken link completes `Flushed`
//! like the queue pair's own requests.

use std::collections::VecDeque;

use super::wr::{Kind, WrId};
use crate::fabric::swift::{Swift, SwiftConfig, SwiftStats};
use crate::fabric::{LocalBuf, Op, PathSignal, WcStatus};

/// Whether requests of `kind` go through the window.
pub fn paced(kind: Kind) -> bool {
    match kind {
        Kind::FragmentBytes
        | Kind::FragmentHeader
        | Kind::Cas
        | Kind::Notice
        | Kind::GetRead
        | Kind::GetSpillRead
        | Kind::RepairRead
        | Kind::RepairSpillRead
        | Kind::RepairWrite => true,
        // Stamp FETCH_ADDs and leader-word CASes are the sequencer's control plane: a
        // write waits on its stamp, a failover on its claim; neither is ordered
        // against log entries.
        Kind::Recv | Kind::Ack | Kind::Heartbeat | Kind::StampFetch | Kind::LeaderCas | Kind::FateRead => false,
    }
}

/// A request waiting for the window.
#[derive(Debug)]
pub struct Held {
    /// Its id.
    pub wr_id: WrId,
    /// What it does.
    pub op: Op,
    /// Its buffer.
    pub buf: LocalBuf,
    /// The connection it was posted on (a later one must not carry it).
    pub conn_gen: u32,
}

/// What one peer's pacer has done.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PacerStats {
    /// The window's own counts.
    pub swift: SwiftStats,
    /// Requests that waited for the window.
    pub held: u64,
    /// Most requests waiting at once.
    pub held_max: u32,
}

/// One peer's window and the requests waiting for it.
#[derive(Debug)]
pub struct Pacer {
    swift: Swift,
    held: VecDeque<Held>,
    /// Paced requests posted and not completed.
    in_flight: u32,
    stats: PacerStats,
}

impl Pacer {
    /// A pacer with `cfg` on a path whose round trip without queues is at most
    /// `base_rtt_ns`, holding at most `depth` requests (the send queue's depth).
    pub fn new(cfg: SwiftConfig, base_rtt_ns: u64, depth: usize) -> Self {
        Self {
            swift: Swift::new(cfg, base_rtt_ns),
            held: VecDeque::with_capacity(depth),
            in_flight: 0,
            stats: PacerStats::default(),
        }
    }

    /// Whether a new request may go straight out at `now_ns` (nothing held ahead of
    /// it and the window open).
    pub fn may_post(&self, now_ns: u64) -> bool {
        self.held.is_empty() && self.swift.may_send(now_ns, self.in_flight)
    }

    /// Whether the oldest held request may go at `now_ns`.
    pub fn may_release(&self, now_ns: u64) -> bool {
        !self.held.is_empty() && self.swift.may_send(now_ns, self.in_flight)
    }

    /// A paced request went to the queue pair at `now_ns`.
    pub fn posted(&mut self, now_ns: u64) {
        self.in_flight += 1;
        self.swift.on_send(now_ns);
    }

    /// Holds `request` until the window lets it out.
    pub fn hold(&mut self, request: Held) {
        debug_assert!(self.held.len() < self.held.capacity(), "held beyond the send queue's depth");
        self.held.push_back(request);
        self.stats.held += 1;
        self.stats.held_max = self.stats.held_max.max(self.held.len() as u32);
    }

    /// The oldest held request.
    pub fn take(&mut self) -> Option<Held> {
        self.held.pop_front()
    }

    /// A paced request that reached the queue pair completed at `now_ns`.
    pub fn completed(&mut self, now_ns: u64, status: WcStatus, path: PathSignal) {
        self.in_flight = self.in_flight.saturating_sub(1);
        match status {
            WcStatus::Success => self.swift.on_ack(now_ns, path),
            WcStatus::RetryExceeded => self.swift.on_retransmit(now_ns),
            _ => {}
        }
    }

    /// Requests waiting.
    pub fn held(&self) -> usize {
        self.held.len()
    }

    /// The window, requests.
    pub fn window(&self) -> f64 {
        self.swift.window()
    }

    /// What the pacer has done.
    pub fn stats(&self) -> PacerStats {
        PacerStats { swift: self.swift.stats(), ..self.stats }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::fabric::emu::{ModelConfig, Network, SystemClock};
    use crate::fabric::{Access, Fabric, Memory};

    fn signal(rtt_ns: u64) -> PathSignal {
        PathSignal { rtt_ns, hops: 1, ..PathSignal::default() }
    }

    #[test]
    fn what_the_window_holds_goes_out_in_post_order_as_completions_open_it() {
        let net = Network::new(ModelConfig::ideal(), Arc::new(SystemClock::new())).unwrap();
        let node = net.node().unwrap();
        let mr = node.register(Arc::new(Memory::anonymous(64).unwrap()), Access::ALL).unwrap();
        let cfg = SwiftConfig { initial_window: 1.0, ..SwiftConfig::DATACENTER };
        let mut p = Pacer::new(cfg, 10_000, 8);
        assert!(p.may_post(0));
        p.posted(0);
        assert!(!p.may_post(0), "a window of one: one outstanding");
        for i in 0..3 {
            let wr_id = WrId::new(Kind::FragmentBytes, 1, i, 0);
            p.hold(Held { wr_id, op: Op::Send, buf: mr.buf(0, 8).unwrap(), conn_gen: 0 });
        }
        assert!(!p.may_release(0));
        p.completed(20_000, WcStatus::Success, signal(10_000));
        assert!(p.may_release(20_000), "the completion opened the window");
        assert_eq!(p.take().map(|h| h.wr_id.a), Some(0), "oldest first");
        p.posted(20_000);
        assert!(!p.may_post(20_000), "held requests go before new ones");
        assert_eq!((p.held(), p.stats().held, p.stats().held_max), (2, 3, 3));
        assert!(paced(Kind::Cas) && paced(Kind::GetRead) && !paced(Kind::Ack) && !paced(Kind::Heartbeat));
    }
}
