//! [`EmuQp`]: the queue pair of the emulated NIC as its owner holds it, with the `RawQp`
//! verbs. Connecting and posting reach the peer through the transport of the node: in
//! process, the queue pair's own requester (`qp`); between processes, TCP (`tcp`), whose
//! calls are passed in from here, above both.

use std::sync::Arc;

use super::qp::QpInner;
use super::tcp;
use crate::fabric::{Endpoint, LocalBuf, PostError, QpState, RawQp, Result, WorkRequest};

/// A queue pair of the emulated NIC.
pub struct EmuQp {
    pub(crate) inner: Arc<QpInner>,
}

impl std::fmt::Debug for EmuQp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmuQp").field("qpn", &self.inner.qpn).field("state", &self.inner.state()).finish()
    }
}

impl Drop for EmuQp {
    fn drop(&mut self) {
        self.inner.destroy();
    }
}

impl RawQp for EmuQp {
    fn qpn(&self) -> u32 {
        self.inner.qpn
    }

    fn endpoint(&self) -> Endpoint {
        self.inner.endpoint()
    }

    fn state(&self) -> QpState {
        self.inner.state()
    }

    fn modify_to_init(&mut self) -> Result<()> {
        self.inner.modify_to_init()
    }

    fn modify_to_rtr(&mut self, remote: &Endpoint) -> Result<()> {
        self.inner.modify_to_rtr(remote, tcp::connect)
    }

    fn modify_to_rts(&mut self) -> Result<()> {
        self.inner.modify_to_rts()
    }

    fn modify_to_reset(&mut self, out: &mut Vec<LocalBuf>) -> Result<()> {
        self.inner.modify_to_reset(out)
    }

    fn post_send(&self, request: WorkRequest) -> Result<(), PostError> {
        self.inner.post(request, tcp::send_request)
    }

    fn post_recv(&self, wr_id: u64, buf: LocalBuf) -> Result<(), PostError<LocalBuf>> {
        self.inner.post_receive(wr_id, buf)
    }
}
