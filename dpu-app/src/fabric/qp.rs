//! Queue pairs: the connection endpoint exchanged with a peer, the backend interface, and
//! the typestate wrapper that makes a half-built queue pair unusable: only a
//! `QueuePair<_, Rts>` can post sends, only `Rtr`/`Rts` can post receives.

use std::marker::PhantomData;

use super::error::{FabricError, Result};
use super::qp_state::QpState;
use super::region::LocalBuf;
use super::work::{PostError, WorkRequest};

/// What a peer needs to connect to a queue pair: where (GID, LID or emulated address and
/// port), which queue pair, and the first packet sequence number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// GID (verbs) or IPv4-mapped address / in-process node id (emu).
    pub gid: [u8; 16],
    /// Queue pair number.
    pub qpn: u32,
    /// First packet sequence number.
    pub psn: u32,
    /// Port LID (InfiniBand; 0 on RoCE and emu).
    pub lid: u16,
    /// TCP port of the emulated node (0 for in-process and verbs).
    pub port: u16,
}

impl Endpoint {
    /// Bytes of [`Endpoint::to_bytes`].
    pub const WIRE_BYTES: usize = 28;

    /// Little-endian wire form for a side channel: gid, qpn, psn, lid, port.
    pub fn to_bytes(&self) -> [u8; Self::WIRE_BYTES] {
        let mut b = [0u8; Self::WIRE_BYTES];
        b[0..16].copy_from_slice(&self.gid);
        b[16..20].copy_from_slice(&self.qpn.to_le_bytes());
        b[20..24].copy_from_slice(&self.psn.to_le_bytes());
        b[24..26].copy_from_slice(&self.lid.to_le_bytes());
        b[26..28].copy_from_slice(&self.port.to_le_bytes());
        b
    }

    /// Parses [`Endpoint::to_bytes`].
    pub fn from_bytes(b: &[u8]) -> Result<Self> {
        if b.len() != Self::WIRE_BYTES {
            return Err(FabricError::Malformed("endpoint is not 28 bytes"));
        }
        Ok(Self {
            gid: b[0..16].try_into().expect("16 bytes"),
            qpn: u32::from_le_bytes(b[16..20].try_into().expect("4 bytes")),
            psn: u32::from_le_bytes(b[20..24].try_into().expect("4 bytes")),
            lid: u16::from_le_bytes(b[24..26].try_into().expect("2 bytes")),
            port: u16::from_le_bytes(b[26..28].try_into().expect("2 bytes")),
        })
    }
}

/// Sizes and retry behaviour of a queue pair.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpOptions {
    /// Send queue depth (outstanding requests).
    pub send_depth: usize,
    /// Receive queue depth.
    pub recv_depth: usize,
    /// Transport retries before `RetryExceeded` (0..=7).
    pub retry_count: u8,
    /// Receiver-not-ready retries before `RnrRetryExceeded` (0..=6).
    pub rnr_retry_count: u8,
    /// Transport timeout per attempt, microseconds (verbs rounds up to 4.096 us * 2^n).
    pub timeout_us: u32,
    /// Receiver-not-ready back-off per retry, microseconds (verbs rounds to its table).
    pub rnr_timer_us: u32,
}

impl Default for QpOptions {
    fn default() -> Self {
        Self {
            send_depth: 128,
            recv_depth: 128,
            retry_count: 2,
            rnr_retry_count: 3,
            timeout_us: 4_000,
            rnr_timer_us: 1_000,
        }
    }
}

impl QpOptions {
    /// Checks the options against `crate::limits`.
    pub fn validate(&self) -> Result<()> {
        use crate::limits::*;
        if self.send_depth == 0 || self.send_depth > SEND_DEPTH_MAX {
            return Err(FabricError::Limit { what: "send queue depth", limit: SEND_DEPTH_MAX });
        }
        if self.recv_depth == 0 || self.recv_depth > RECV_DEPTH_MAX {
            return Err(FabricError::Limit { what: "receive queue depth", limit: RECV_DEPTH_MAX });
        }
        if self.retry_count > RETRY_COUNT_MAX {
            return Err(FabricError::Limit { what: "retry count", limit: RETRY_COUNT_MAX as usize });
        }
        if self.rnr_retry_count > RNR_RETRY_COUNT_MAX {
            return Err(FabricError::Limit { what: "RNR retry count", limit: RNR_RETRY_COUNT_MAX as usize });
        }
        Ok(())
    }
}

/// What a backend implements for a queue pair. Programs use [`QueuePair`], which calls
/// these only in the states where they are valid.
pub trait RawQp: Send + Sync {
    /// Queue pair number.
    fn qpn(&self) -> u32;
    /// The endpoint to give the peer.
    fn endpoint(&self) -> Endpoint;
    /// Current state (RTS may have turned into ERR asynchronously).
    fn state(&self) -> QpState;
    /// RESET -> INIT.
    fn modify_to_init(&mut self) -> Result<()>;
    /// INIT -> RTR, connected to `remote`.
    fn modify_to_rtr(&mut self, remote: &Endpoint) -> Result<()>;
    /// RTR -> RTS.
    fn modify_to_rts(&mut self) -> Result<()>;
    /// Any -> RESET; every buffer still owned by the queue pair is pushed to `out`.
    fn modify_to_reset(&mut self, out: &mut Vec<LocalBuf>) -> Result<()>;
    /// Posts a send-queue request.
    fn post_send(&self, request: WorkRequest) -> Result<(), PostError>;
    /// Posts a receive buffer.
    fn post_recv(&self, wr_id: u64, buf: LocalBuf) -> Result<(), PostError<LocalBuf>>;
}

/// Typestate: created or reset.
#[derive(Debug)]
pub enum Reset {}
/// Typestate: initialised.
#[derive(Debug)]
pub enum Init {}
/// Typestate: ready to receive.
#[derive(Debug)]
pub enum Rtr {}
/// Typestate: ready to send.
#[derive(Debug)]
pub enum Rts {}

/// A reliable-connection queue pair in bring-up state `S`.
#[derive(Debug)]
pub struct QueuePair<Q: RawQp, S> {
    raw: Q,
    _state: PhantomData<fn() -> S>,
}

impl<Q: RawQp, S> QueuePair<Q, S> {
    fn into_state<T>(self) -> QueuePair<Q, T> {
        QueuePair { raw: self.raw, _state: PhantomData }
    }

    /// Queue pair number.
    pub fn qpn(&self) -> u32 {
        self.raw.qpn()
    }

    /// The endpoint to hand the peer.
    pub fn endpoint(&self) -> Endpoint {
        self.raw.endpoint()
    }

    /// The state the NIC reports (an RTS queue pair may have moved to ERR).
    pub fn state(&self) -> QpState {
        self.raw.state()
    }

    /// Back to RESET from any state, for reconnection; returns the buffers the queue pair
    /// still owned (requests and receives that never completed).
    pub fn reset(mut self, out: &mut Vec<LocalBuf>) -> Result<QueuePair<Q, Reset>> {
        self.raw.modify_to_reset(out)?;
        Ok(self.into_state())
    }

    /// The backend queue pair (for backend-specific calls).
    pub fn raw(&self) -> &Q {
        &self.raw
    }
}

impl<Q: RawQp> QueuePair<Q, Reset> {
    /// Wraps a backend queue pair fresh from creation.
    pub fn from_raw(raw: Q) -> Self {
        Self { raw, _state: PhantomData }
    }

    /// RESET -> INIT.
    pub fn init(mut self) -> Result<QueuePair<Q, Init>> {
        self.raw.modify_to_init()?;
        Ok(self.into_state())
    }

    /// The whole bring-up: INIT, RTR to `remote`, RTS.
    pub fn connect(self, remote: &Endpoint) -> Result<QueuePair<Q, Rts>> {
        self.init()?.ready_to_receive(remote)?.ready_to_send()
    }
}

impl<Q: RawQp> QueuePair<Q, Init> {
    /// INIT -> RTR, connected to `remote`.
    pub fn ready_to_receive(mut self, remote: &Endpoint) -> Result<QueuePair<Q, Rtr>> {
        self.raw.modify_to_rtr(remote)?;
        Ok(self.into_state())
    }

    /// Posts a receive buffer (allowed from INIT on).
    pub fn post_recv(&self, wr_id: u64, buf: LocalBuf) -> Result<(), PostError<LocalBuf>> {
        self.raw.post_recv(wr_id, buf)
    }
}

impl<Q: RawQp> QueuePair<Q, Rtr> {
    /// RTR -> RTS.
    pub fn ready_to_send(mut self) -> Result<QueuePair<Q, Rts>> {
        self.raw.modify_to_rts()?;
        Ok(self.into_state())
    }

    /// Posts a receive buffer.
    pub fn post_recv(&self, wr_id: u64, buf: LocalBuf) -> Result<(), PostError<LocalBuf>> {
        self.raw.post_recv(wr_id, buf)
    }
}

impl<Q: RawQp> QueuePair<Q, Rts> {
    /// Posts a work request. The buffer belongs to the queue pair until its completion;
    /// a refused post hands it back in the error.
    pub fn post(&self, request: WorkRequest) -> Result<(), PostError> {
        self.raw.post_send(request)
    }

    /// Posts a receive buffer.
    pub fn post_recv(&self, wr_id: u64, buf: LocalBuf) -> Result<(), PostError<LocalBuf>> {
        self.raw.post_recv(wr_id, buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoint_golden_bytes() {
        let e = Endpoint { gid: [0xAB; 16], qpn: 0x11, psn: 0x2233, lid: 0x0405, port: 0x0607 };
        let b = e.to_bytes();
        let mut want = vec![0xAB; 16];
        want.extend_from_slice(&[0x11, 0, 0, 0, 0x33, 0x22, 0, 0, 0x05, 0x04, 0x07, 0x06]);
        assert_eq!(b.to_vec(), want);
        assert_eq!(Endpoint::from_bytes(&b).unwrap(), e);
        assert!(Endpoint::from_bytes(&b[1..]).is_err());
    }

    #[test]
    fn options_are_bounded() {
        assert!(QpOptions::default().validate().is_ok());
        assert!(QpOptions { send_depth: 0, ..QpOptions::default() }.validate().is_err());
        assert!(QpOptions { rnr_retry_count: 7, ..QpOptions::default() }.validate().is_err());
    }
}
