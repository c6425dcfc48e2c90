//! Swift: delay-based congestion control for one peer's requests.
//!
//! The window is a number of requests, fractional: at one or more, up to `floor(window)`
//! requests may be outstanding; below one, one at a time, paced so that a request goes
//! out every `rtt / window` (a window of 0.25 sends one request every four round trips).
//! Each completion's fabric round trip ([`PathSignal::rtt_ns`], what a NIC's timestamps
//! measure) is compared against a target: the path's base round trip (its propagation
//! both ways at the jitter's worst, known from the topology, so that a 90 ms
//! inter-region path is not mistaken for a queue), plus a base target, plus a share per
//! switch hop, plus a flow-scaling term that grows as the window shrinks (many flows
//! with small windows each get more room, so together they still fill a port). The
//! request's and response's serialisation at the path's line rate
//! ([`PathSignal::serialise_ns`]) is part of the base too, and on a port slower than
//! [`SwiftConfig::line_rate_ref_bytes_per_s`] the base and per-hop allowances grow with
//! the ratio of the rates, so a slow port allows the same bytes of queue as a fast one
//! (at 16 MB/s one 1.5 KB fragment ahead is 94 us, far above a 7 us allowance: without
//! this every window sat at the floor and writes collapsed). The
//! base is given, not learnt from the least round trip seen: a flow that starts behind
//! a queue would take the queue for its path and hold a larger share for good (the
//! incast test saw shares of 0.57x to 1.78x that way). Below target the window grows additively (`ai` per round trip);
//! above, it shrinks in proportion to how far above, by at most `max_md` and at most
//! once per round trip. A retransmission (a request timed out) shrinks it too, and
//! [`SwiftConfig::retransmit_reset`] in a row reset it to the floor.
//!
//! Time is passed in; the state is a few numbers, nothing allocates. After Kumar et al.,
//! "Swift: Delay is Simple and Effective for Congestion Control in the Datacenter"
//! (SIGCOMM 2020), Algorithm 1.

use crate::fabric::PathSignal;
use crate::limits::SEND_DEPTH_MAX;

/// The control law's parameters.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SwiftConfig {
    /// Additive increase, requests per round trip.
    pub ai: f64,
    /// Multiplicative decrease per unit of relative excess delay.
    pub beta: f64,
    /// Largest decrease in one step (0.5: at most halve).
    pub max_md: f64,
    /// Delay allowed above the base round trip on any path, nanoseconds.
    pub base_target_ns: u64,
    /// Delay allowed per switch hop, nanoseconds.
    pub per_hop_ns: u64,
    /// Most extra delay the flow-scaling term allows (at windows of `fs_min_window`).
    pub fs_range_ns: u64,
    /// Window at or below which flow scaling gives its whole range.
    pub fs_min_window: f64,
    /// Window at or above which flow scaling gives nothing.
    pub fs_max_window: f64,
    /// Smallest window.
    pub min_window: f64,
    /// Largest window (never above the send queue's depth).
    pub max_window: f64,
    /// Window at start.
    pub initial_window: f64,
    /// Retransmissions in a row that reset the window to `min_window`.
    pub retransmit_reset: u32,
    /// The line rate, bytes per second, that `base_target_ns` and `per_hop_ns` were set
    /// for. On a slower path ([`PathSignal::line_bytes_per_s`]) they grow in
    /// proportion, so that the queue they allow holds the same bytes whatever the rate:
    /// without it, at 16 MB/s one 1.5 KB fragment ahead (94 us) is far above 7 us, and
    /// the windows sat at the floor. (Flow scaling is left as it is: it is room for a
    /// number of flows, and scaled it would allow more queue than a small buffer holds.)
    pub line_rate_ref_bytes_per_s: u64,
}

impl SwiftConfig {
    /// Parameters for an RDMA fabric with microsecond hops: 1 request per round trip
    /// increase, beta 0.8, at most halving, 5 us base target plus 2 us per hop, flow
    /// scaling up to 20 us between windows of 0.1 and 64, a floor of 0.01 requests
    /// (one request per hundred round trips), a start at 4 and a reset after 5
    /// retransmissions in a row; the allowances are for 10 Gbit/s ports.
    pub const DATACENTER: SwiftConfig = SwiftConfig {
        ai: 1.0,
        beta: 0.8,
        max_md: 0.5,
        base_target_ns: 5_000,
        per_hop_ns: 2_000,
        fs_range_ns: 20_000,
        fs_min_window: 0.1,
        fs_max_window: 64.0,
        min_window: 0.25,
        max_window: 256.0,
        initial_window: 4.0,
        retransmit_reset: 5,
        line_rate_ref_bytes_per_s: 1_250_000_000,
    };

    /// Checks the parameters (a programmer's configuration: panics with what is wrong).
    fn check(&self) {
        assert!(self.ai > 0.0 && self.beta > 0.0, "swift: ai and beta must be positive");
        assert!(self.max_md > 0.0 && self.max_md < 1.0, "swift: max_md must be in (0, 1)");
        assert!(self.min_window > 0.0 && self.min_window <= self.initial_window, "swift: 0 < min <= initial");
        assert!(self.initial_window <= self.max_window, "swift: initial window above max");
        assert!(self.max_window <= SEND_DEPTH_MAX as f64, "swift: max window above the send depth limit");
        assert!(self.fs_min_window > 0.0 && self.fs_min_window < self.fs_max_window, "swift: fs windows");
        assert!(self.retransmit_reset > 0, "swift: retransmit_reset must be positive");
        assert!(self.line_rate_ref_bytes_per_s > 0, "swift: line_rate_ref_bytes_per_s must be positive");
    }
}

/// One peer's congestion window.
#[derive(Clone, Debug)]
pub struct Swift {
    cfg: SwiftConfig,
    window: f64,
    /// The path's round trip without queues.
    base_rtt_ns: u64,
    /// Smoothed round trip (1/8 gain), for the once-per-round-trip rule and pacing.
    srtt_ns: u64,
    last_decrease_ns: Option<u64>,
    retransmits: u32,
    /// Below a window of one: the earliest time the next request may go.
    next_send_ns: u64,
    stats: SwiftStats,
}

/// What one window has done.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SwiftStats {
    /// Completions fed in.
    pub acks: u64,
    /// Multiplicative decreases on delay.
    pub decreases: u64,
    /// Retransmissions fed in.
    pub retransmits: u64,
    /// Resets to the floor.
    pub resets: u64,
}

impl Swift {
    /// A window with `cfg` for a path whose round trip without queues is at most
    /// `base_rtt_ns` (checked: a bad configuration is a programmer's error).
    pub fn new(cfg: SwiftConfig, base_rtt_ns: u64) -> Self {
        cfg.check();
        Self {
            cfg,
            window: cfg.initial_window,
            base_rtt_ns,
            srtt_ns: 0,
            last_decrease_ns: None,
            retransmits: 0,
            next_send_ns: 0,
            stats: SwiftStats::default(),
        }
    }

    /// The window, requests.
    pub fn window(&self) -> f64 {
        self.window
    }

    /// The smoothed round trip (0 before the first completion).
    pub fn srtt_ns(&self) -> u64 {
        self.srtt_ns
    }

    /// What the window has done.
    pub fn stats(&self) -> SwiftStats {
        self.stats
    }

    /// Whether a request may go to the peer at `now_ns` with `in_flight` outstanding.
    pub fn may_send(&self, now_ns: u64, in_flight: u32) -> bool {
        if self.window >= 1.0 {
            f64::from(in_flight) + 1.0 <= self.window
        } else {
            in_flight == 0 && now_ns >= self.next_send_ns
        }
    }

    /// A request went out at `now_ns`: below a window of one, the next waits
    /// `srtt / window`.
    pub fn on_send(&mut self, now_ns: u64) {
        if self.window < 1.0 {
            self.next_send_ns = now_ns + (self.srtt_ns as f64 / self.window) as u64;
        }
    }

    /// The target round trip for a window of `window` on `path` (its hops, its
    /// messages' serialisation and its line rate, as [`PathSignal`] gives them).
    ///
    /// The request's and response's serialisation at the line rate is the path's even
    /// when it is empty, so it is part of the base, not of the queue the target allows;
    /// and on a path slower than [`SwiftConfig::line_rate_ref_bytes_per_s`] the base
    /// target and the per-hop allowance grow with the ratio of the rates.
    pub fn target_ns(&self, path: &PathSignal, window: f64) -> u64 {
        let c = &self.cfg;
        let alpha = c.fs_range_ns as f64 / (1.0 / c.fs_min_window.sqrt() - 1.0 / c.fs_max_window.sqrt());
        let fs = (alpha / window.sqrt() - alpha / c.fs_max_window.sqrt()).clamp(0.0, c.fs_range_ns as f64);
        let allowed_ns = c.base_target_ns + u64::from(path.hops) * c.per_hop_ns;
        let scale = match path.line_bytes_per_s {
            0 => 1.0,
            rate => (c.line_rate_ref_bytes_per_s as f64 / rate as f64).max(1.0),
        };
        self.base_rtt_ns + path.serialise_ns + (allowed_ns as f64 * scale) as u64 + fs as u64
    }

    fn can_decrease(&self, now_ns: u64) -> bool {
        self.last_decrease_ns.is_none_or(|at| now_ns.saturating_sub(at) >= self.srtt_ns)
    }

    /// A request completed at `now_ns` with the fabric's `signal`. A signal without a
    /// round trip (nothing measured) counts as an empty fabric.
    pub fn on_ack(&mut self, now_ns: u64, signal: PathSignal) {
        self.stats.acks += 1;
        self.retransmits = 0;
        let rtt = signal.rtt_ns;
        if rtt > 0 {
            self.srtt_ns = if self.srtt_ns == 0 { rtt } else { (7 * self.srtt_ns + rtt) / 8 };
        }
        let target = self.target_ns(&signal, self.window);
        let c = self.cfg;
        if rtt < target {
            // Below one request, acknowledgements come one per `srtt / window`: each
            // adds `ai` (Algorithm 1).
            self.window += if self.window >= 1.0 { c.ai / self.window } else { c.ai };
        } else if self.can_decrease(now_ns) {
            let excess = (rtt - target) as f64 / rtt as f64;
            self.window *= (1.0 - c.beta * excess).max(1.0 - c.max_md);
            self.last_decrease_ns = Some(now_ns);
            self.stats.decreases += 1;
        }
        self.window = self.window.clamp(c.min_window, c.max_window);
    }

    /// A request to the peer timed out and was sent again (or failed) at `now_ns`.
    pub fn on_retransmit(&mut self, now_ns: u64) {
        self.stats.retransmits += 1;
        self.retransmits += 1;
        let c = self.cfg;
        if self.retransmits >= c.retransmit_reset {
            self.window = c.min_window;
            self.stats.resets += 1;
        } else if self.can_decrease(now_ns) {
            self.window = (self.window * (1.0 - c.max_md)).max(c.min_window);
            self.last_decrease_ns = Some(now_ns);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RTT: u64 = 10_000;

    fn signal(rtt_ns: u64) -> PathSignal {
        PathSignal { rtt_ns, hops: 1, ..PathSignal::default() }
    }

    fn swift(initial_window: f64) -> Swift {
        Swift::new(SwiftConfig { initial_window, ..SwiftConfig::DATACENTER }, RTT)
    }

    #[test]
    fn below_target_the_window_grows_by_ai_per_round_trip() {
        let mut s = swift(4.0);
        let mut now = 0;
        // Ten round trips, each acknowledging a full window.
        for _ in 0..10 {
            let acks = s.window().floor() as u32;
            for _ in 0..acks {
                now += RTT / u64::from(acks);
                s.on_ack(now, signal(RTT));
            }
        }
        assert!((13.0..=14.5).contains(&s.window()), "4 + about 1 a round trip: {}", s.window());
        assert_eq!(s.stats().decreases, 0);
    }

    #[test]
    fn above_target_it_decreases_at_most_once_per_round_trip_and_at_most_by_max_md() {
        let mut s = swift(32.0);
        s.on_ack(0, signal(RTT)); // the base round trip
        let w0 = s.window();
        let far = 100 * RTT; // far above target: the decrease is capped at halving
        for i in 1..=20 {
            s.on_ack(i * 100, signal(far));
        }
        assert_eq!(s.stats().decreases, 1, "20 late acks inside one round trip: one decrease");
        assert!((s.window() - w0 * 0.5).abs() < 1e-9, "capped at max_md: {} vs {w0}", s.window());
        s.on_ack(100 + far, signal(far));
        assert_eq!(s.stats().decreases, 2, "a round trip later, another");
    }

    #[test]
    fn the_decrease_is_proportional_to_the_excess_delay() {
        let mut s = swift(32.0);
        s.on_ack(0, signal(RTT));
        let target = s.target_ns(&signal(RTT), s.window());
        let w0 = s.window();
        let rtt = target + target / 10;
        s.on_ack(1, signal(rtt));
        let expect = w0 * (1.0 - 0.8 * (rtt - target) as f64 / rtt as f64);
        assert!((s.window() - expect).abs() < 1e-6, "{} vs {expect}", s.window());
    }

    #[test]
    fn the_target_scales_with_hops_and_with_smaller_windows() {
        let mut s = swift(4.0);
        s.on_ack(0, signal(RTT));
        let three = PathSignal { hops: 3, ..signal(RTT) };
        assert!(s.target_ns(&three, 4.0) == s.target_ns(&signal(RTT), 4.0) + 4_000, "2 us per hop");
        assert!(s.target_ns(&signal(RTT), 0.5) > s.target_ns(&signal(RTT), 4.0), "small windows get more room");
        assert!(s.target_ns(&signal(RTT), 4.0) > s.target_ns(&signal(RTT), 64.0));
        assert_eq!(s.target_ns(&signal(RTT), 64.0), RTT + 5_000 + 2_000, "no flow scaling at fs_max_window");
        assert_eq!(s.target_ns(&signal(RTT), 0.01), RTT + 5_000 + 2_000 + 20_000, "the whole range at the floor");
    }

    #[test]
    fn serialisation_is_part_of_the_base_and_a_slow_port_allows_the_same_bytes_of_queue() {
        let s = swift(4.0);
        let fast = s.target_ns(&signal(RTT), 64.0);
        // At the reference rate (or unknown): only the serialisation is added.
        let at_ref = PathSignal { serialise_ns: 3_000, line_bytes_per_s: 1_250_000_000, ..signal(RTT) };
        assert_eq!(s.target_ns(&at_ref, 64.0), fast + 3_000);
        assert_eq!(s.target_ns(&PathSignal { line_bytes_per_s: 0, ..at_ref }, 64.0), fast + 3_000);
        // A 1.5 KB fragment at 16 MB/s: 94 us; the 7 us allowed (5 base, 2 a hop) grow
        // 78-fold, to the 8.75 KB they hold at 10 Gbit/s.
        let slow = PathSignal { serialise_ns: 94_000, line_bytes_per_s: 16_000_000, ..signal(RTT) };
        assert_eq!(s.target_ns(&slow, 64.0), RTT + 94_000 + 546_875);
        // So a round trip with two such fragments queued ahead is below target: the
        // window grows where, without the line rate, it shrank.
        let mut s = swift(4.0);
        let two_ahead = PathSignal { rtt_ns: RTT + 3 * 94_000, ..slow };
        s.on_ack(0, two_ahead);
        assert!(s.window() > 4.0 && s.stats().decreases == 0, "{}", s.window());
        s.on_ack(1, PathSignal { line_bytes_per_s: 0, serialise_ns: 0, ..two_ahead });
        assert_eq!(s.stats().decreases, 1, "without the path's rate the same round trip is a queue");
    }

    #[test]
    fn a_far_path_is_not_a_queue() {
        let far = 180_000_000; // 90 ms each way
        let mut s = Swift::new(SwiftConfig::DATACENTER, far + 2_000);
        for i in 0..50 {
            s.on_ack(i * far, signal(far + (i % 3) * 1_000));
        }
        assert_eq!(s.stats().decreases, 0, "its base round trip is the path, not congestion");
        assert!(s.window() > 4.0);
    }

    #[test]
    fn the_window_has_a_floor_and_below_one_it_paces() {
        let mut s = swift(1.0);
        s.on_ack(0, signal(RTT));
        let mut now = 0;
        for _ in 0..200 {
            now += 10 * RTT;
            s.on_ack(now, signal(100 * RTT));
        }
        assert_eq!(s.window(), SwiftConfig::DATACENTER.min_window, "held at the floor");
        assert!(s.may_send(now, 0));
        assert!(!s.may_send(now, 1), "below one window, one request at a time");
        s.on_send(now);
        let gap = (s.srtt_ns() as f64 / s.window()) as u64;
        assert!(!s.may_send(now + gap - 1, 0), "paced: the next waits srtt / window");
        assert!(s.may_send(now + gap, 0));
    }

    #[test]
    fn at_and_above_one_the_window_bounds_what_is_outstanding() {
        let s = swift(2.5);
        assert!(s.may_send(0, 0) && s.may_send(0, 1));
        assert!(!s.may_send(0, 2), "floor(2.5) outstanding at most");
    }

    #[test]
    fn retransmissions_decrease_and_a_run_of_them_resets_to_the_floor() {
        let mut s = swift(32.0);
        s.on_ack(0, signal(RTT));
        s.on_retransmit(1);
        assert_eq!(s.window(), (32.0 + 1.0 / 32.0) / 2.0, "a retransmission halves");
        s.on_ack(2, signal(RTT));
        for i in 0..4 {
            s.on_retransmit(3 + i);
        }
        assert!(s.window() > 1.0, "four in a row after an ack: no reset yet");
        s.on_retransmit(10);
        assert_eq!(s.window(), SwiftConfig::DATACENTER.min_window, "the fifth in a row resets");
        assert_eq!(s.stats().resets, 1);
    }
}
