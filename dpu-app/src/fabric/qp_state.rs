//! The queue-pair state machine, RESET -> INIT -> RTR -> RTS, with ERR reachable from
//! every state and RESET from every state (reconnection). One exhaustive `match` says
//! which transitions exist; [`StateCell::apply`] is the only place a state changes.

/// State of a queue pair.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QpState {
    /// Just created or reset: nothing may be posted.
    Reset,
    /// Initialised: receives may be posted.
    Init,
    /// Ready to receive: connected to its peer, answers incoming requests.
    Rtr,
    /// Ready to send: the working state.
    Rts,
    /// Error: posts complete at once with a flush error; reset to reuse.
    Error,
}

/// What drives a transition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QpEvent {
    /// Modify to INIT.
    Init,
    /// Modify to RTR (the peer's endpoint is known).
    Rtr,
    /// Modify to RTS.
    Rts,
    /// A fatal completion error, a broken link or a dead peer.
    Fail,
    /// Modify to RESET.
    Reset,
}

/// The state after `event` in `state`, or `None` when the transition does not exist.
pub fn next(state: QpState, event: QpEvent) -> Option<QpState> {
    use QpEvent as E;
    use QpState as S;
    match (state, event) {
        (S::Reset, E::Init) => Some(S::Init),
        (S::Init, E::Rtr) => Some(S::Rtr),
        (S::Rtr, E::Rts) => Some(S::Rts),
        (_, E::Fail) => Some(S::Error),
        (_, E::Reset) => Some(S::Reset),
        (S::Init | S::Rtr | S::Rts | S::Error, E::Init)
        | (S::Reset | S::Rtr | S::Rts | S::Error, E::Rtr)
        | (S::Reset | S::Init | S::Rts | S::Error, E::Rts) => None,
    }
}

/// A queue pair's state with logged transitions.
#[derive(Debug)]
pub struct StateCell {
    qpn: u32,
    state: QpState,
}

impl StateCell {
    /// A new queue pair in RESET.
    pub fn new(qpn: u32) -> Self {
        Self { qpn, state: QpState::Reset }
    }

    /// The current state.
    pub fn get(&self) -> QpState {
        self.state
    }

    /// Applies `event`; returns the new state, or the unchanged state as the error.
    pub fn apply(&mut self, event: QpEvent) -> Result<QpState, QpState> {
        let to = next(self.state, event).ok_or(self.state)?;
        if to != self.state {
            tracing::debug!(qpn = self.qpn, "qp state {:?} => {:?}", self.state, to);
        }
        self.state = to;
        Ok(to)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bring_up_order_is_enforced() {
        let mut s = StateCell::new(1);
        assert_eq!(s.apply(QpEvent::Rtr), Err(QpState::Reset));
        assert_eq!(s.apply(QpEvent::Init), Ok(QpState::Init));
        assert_eq!(s.apply(QpEvent::Rts), Err(QpState::Init));
        assert_eq!(s.apply(QpEvent::Rtr), Ok(QpState::Rtr));
        assert_eq!(s.apply(QpEvent::Rts), Ok(QpState::Rts));
        assert_eq!(s.apply(QpEvent::Fail), Ok(QpState::Error));
        assert_eq!(s.apply(QpEvent::Rts), Err(QpState::Error));
        assert_eq!(s.apply(QpEvent::Reset), Ok(QpState::Reset));
        assert_eq!(s.apply(QpEvent::Init), Ok(QpState::Init));
    }
}
