//! A switch's egress port toward one node: a line rate and a bounded buffer.
//!
//! Messages toward a node leave the switch one after another at the port's rate, so a
//! message that arrives while earlier ones are still being sent waits: its queueing
//! delay is the backlog ahead of it divided by the rate, and it grows with load. The
//! buffer is bounded. When a message would overflow it, the port **pauses the sender,
//! as PFC does**, instead of dropping: the message is held upstream until enough of the
//! backlog has drained, and the pause is counted. RDMA's reliable connection recovers
//! a lost packet only by a transport timeout and go-back-N (the emulated queue pair's
//! `timeout_us` is milliseconds), so RoCE fabrics run lossless; a drop here would model
//! a fabric nobody runs RDMA on. The price of PFC is shown instead: paused time and
//! pause counts (a congestion control that works keeps them at zero).
//!
//! The port also marks a message (ECN) that arrives to a backlog above the marking
//! threshold. Messages are admitted in the order the model is asked about them, which
//! in process is post order under one clock: deterministic from the seed and the
//! program.

use crate::fabric::{FabricError, Result};
use crate::limits::{PORT_BUFFER_BYTES_MIN, PORT_BYTES_PER_S_MIN};

const NS_PER_S: u128 = 1_000_000_000;

/// Every switch port's line rate, buffer and marking threshold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PortConfig {
    /// Line rate, bytes per second.
    pub bytes_per_s: u64,
    /// Egress buffer, bytes: a message that would overflow it pauses its sender.
    pub buffer_bytes: u64,
    /// A message arriving to more than this backlog is ECN-marked.
    pub ecn_bytes: u64,
}

impl PortConfig {
    /// Checks the rate and sizes, naming the field that is wrong.
    pub fn validate(&self) -> Result<()> {
        let bad = |what: String| Err(FabricError::Topology(what));
        if self.bytes_per_s < PORT_BYTES_PER_S_MIN {
            return bad(format!(
                "port bandwidth: {} bytes/s is below the least modelled, {PORT_BYTES_PER_S_MIN}",
                self.bytes_per_s
            ));
        }
        if self.buffer_bytes < PORT_BUFFER_BYTES_MIN {
            return bad(format!(
                "port buffer: {} bytes is below one jumbo frame ({PORT_BUFFER_BYTES_MIN})",
                self.buffer_bytes
            ));
        }
        if self.ecn_bytes > self.buffer_bytes {
            return bad(format!(
                "port ECN threshold: {} bytes is above the buffer ({} bytes); it would never mark",
                self.ecn_bytes, self.buffer_bytes
            ));
        }
        Ok(())
    }

    /// Nanoseconds the port takes to send `bytes` (rounded up).
    pub fn serialise_ns(&self, bytes: u64) -> u64 {
        (u128::from(bytes) * NS_PER_S).div_ceil(u128::from(self.bytes_per_s)) as u64
    }

    /// Bytes the port sends in `ns` (rounded down).
    pub fn bytes_in(&self, ns: u64) -> u64 {
        (u128::from(ns) * u128::from(self.bytes_per_s) / NS_PER_S) as u64
    }
}

/// What the port did with one message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Admission {
    /// When its last byte leaves the port (clock nanoseconds).
    pub depart_ns: u64,
    /// Time it waited behind earlier messages in the buffer.
    pub queue_ns: u64,
    /// Time its sender was paused before the buffer took it.
    pub paused_ns: u64,
    /// It arrived to a backlog above the marking threshold.
    pub marked: bool,
}

/// What one port has seen.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PortStats {
    /// Messages admitted.
    pub messages: u64,
    /// Bytes admitted.
    pub bytes: u64,
    /// Sum of every message's queueing delay.
    pub queue_ns_total: u64,
    /// Largest backlog any message found plus its own size.
    pub queue_bytes_max: u64,
    /// Messages whose sender was paused (PFC).
    pub pauses: u64,
    /// Total time senders were paused.
    pub paused_ns: u64,
    /// Messages ECN-marked.
    pub marks: u64,
}

impl PortStats {
    /// What the port saw since `before` (an earlier reading of the same port); the
    /// largest queue is this reading's.
    pub fn since(&self, before: &PortStats) -> PortStats {
        PortStats {
            messages: self.messages - before.messages,
            bytes: self.bytes - before.bytes,
            queue_ns_total: self.queue_ns_total - before.queue_ns_total,
            queue_bytes_max: self.queue_bytes_max,
            pauses: self.pauses - before.pauses,
            paused_ns: self.paused_ns - before.paused_ns,
            marks: self.marks - before.marks,
        }
    }
}

/// One egress port's state: when it is done with what it holds.
#[derive(Clone, Copy, Debug, Default)]
pub struct Port {
    free_at_ns: u64,
    stats: PortStats,
}

impl Port {
    /// Admits a message of `bytes` arriving at the port at `arrive_ns`.
    pub fn admit(&mut self, cfg: &PortConfig, arrive_ns: u64, bytes: u64) -> Admission {
        let backlog = |at_ns: u64, free_at_ns: u64| cfg.bytes_in(free_at_ns.saturating_sub(at_ns));
        let mut at_ns = arrive_ns;
        let mut paused_ns = 0;
        let queued = backlog(at_ns, self.free_at_ns);
        if queued > 0 && queued + bytes > cfg.buffer_bytes {
            // Paused until the backlog leaves room (or drains, for a message larger than
            // the whole buffer).
            let excess = (queued + bytes - cfg.buffer_bytes).min(queued);
            paused_ns = cfg.serialise_ns(excess);
            at_ns += paused_ns;
            self.stats.pauses += 1;
            self.stats.paused_ns += paused_ns;
        }
        let queued = backlog(at_ns, self.free_at_ns);
        let start_ns = at_ns.max(self.free_at_ns);
        let queue_ns = start_ns - at_ns;
        self.free_at_ns = start_ns + cfg.serialise_ns(bytes);
        let marked = queued > cfg.ecn_bytes;
        let s = &mut self.stats;
        s.messages += 1;
        s.bytes += bytes;
        s.queue_ns_total += queue_ns;
        s.queue_bytes_max = s.queue_bytes_max.max(queued + bytes);
        s.marks += u64::from(marked);
        Admission { depart_ns: self.free_at_ns, queue_ns, paused_ns, marked }
    }

    /// What the port has seen so far.
    pub fn stats(&self) -> PortStats {
        self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 1 byte per ns, a buffer of 16 KiB, marking above 8 KiB.
    const CFG: PortConfig = PortConfig { bytes_per_s: 1_000_000_000, buffer_bytes: 16_384, ecn_bytes: 8_192 };

    #[test]
    fn queueing_delay_grows_with_the_backlog_and_drains() {
        let mut p = Port::default();
        let a = p.admit(&CFG, 0, 4_096);
        assert_eq!(a, Admission { depart_ns: 4_096, queue_ns: 0, paused_ns: 0, marked: false });
        let b = p.admit(&CFG, 0, 4_096);
        assert_eq!((b.queue_ns, b.depart_ns), (4_096, 8_192));
        let c = p.admit(&CFG, 1_000, 4_096);
        assert_eq!(c.queue_ns, 7_192, "behind what is left of the two ahead of it");
        let d = p.admit(&CFG, 100_000, 4_096);
        assert_eq!(d.queue_ns, 0, "an idle port has drained");
        assert_eq!(p.stats().pauses, 0);
    }

    #[test]
    fn a_full_buffer_pauses_the_sender_instead_of_dropping() {
        let mut p = Port::default();
        for _ in 0..4 {
            assert_eq!(p.admit(&CFG, 0, 4_096).paused_ns, 0, "16 KiB fit");
        }
        let e = p.admit(&CFG, 0, 4_096);
        assert_eq!(e.paused_ns, 4_096, "held until one message has left");
        assert!(e.marked);
        assert_eq!(e.queue_ns, 12_288);
        assert_eq!(e.depart_ns, 20_480, "nothing lost: it leaves after the four ahead");
        let s = p.stats();
        assert_eq!((s.pauses, s.paused_ns, s.messages, s.bytes), (1, 4_096, 5, 20_480));
        assert!(s.queue_bytes_max <= CFG.buffer_bytes, "{s:?}");
    }

    #[test]
    fn a_message_larger_than_the_buffer_waits_for_an_empty_queue() {
        let mut p = Port::default();
        p.admit(&CFG, 0, 1_000);
        let big = p.admit(&CFG, 0, 100_000);
        assert_eq!((big.paused_ns, big.queue_ns, big.depart_ns), (1_000, 0, 101_000));
    }

    #[test]
    fn bad_ports_are_refused_naming_the_field() {
        let e = |c: PortConfig| c.validate().unwrap_err().to_string();
        assert!(e(PortConfig { bytes_per_s: 10, ..CFG }).contains("port bandwidth"));
        assert!(e(PortConfig { buffer_bytes: 100, ecn_bytes: 0, ..CFG }).contains("port buffer"));
        assert!(e(PortConfig { ecn_bytes: 1 << 20, ..CFG }).contains("ECN threshold"));
        CFG.validate().unwrap();
    }
}
