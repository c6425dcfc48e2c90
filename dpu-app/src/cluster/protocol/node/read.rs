//! The node's dispatch for the reader (`protocol/get.rs`): builds its context from the
//! node's fields and hands it GETs and their set READs.

use super::Node;
use crate::cluster::protocol::get::ReadCx;
use crate::cluster::protocol::get::Reader;
use crate::cluster::protocol::time::Now;
use crate::cluster::protocol::wr::WrId;
use crate::fabric::Fabric;
use crate::region_server::Taken;

impl<F: Fabric> Node<F> {
    /// The reader, and what it may use of the node (split borrows of other fields).
    fn reader_cx(&mut self) -> (&mut Reader, ReadCx<'_, F>) {
        let cx = ReadCx {
            me: self.me,
            n: self.n,
            placement: &self.placement,
            k: self.k,
            m: self.m,
            write_timeout_ns: self.write_timeout_ns,
            links: &mut self.links,
            pools: &self.pools,
            store: &self.store,
            region: &self.region,
            host: &mut self.host,
            metrics: &mut self.metrics,
            rs: &mut self.rs,
            sealer: &self.sealer,
            hlc: &mut self.hlc,
            stats: &mut self.stats,
            noisy: &mut self.noisy,
        };
        (&mut self.reader, cx)
    }

    /// Starts a GET of request `t` (the writer's intake takes it from the host).
    pub(in crate::cluster::protocol) fn start_get(&mut self, t: Taken, now: Now) {
        let (reader, mut cx) = self.reader_cx();
        reader.start(&mut cx, t, now);
    }

    /// A set READ for a GET came back (`spill`: the READ of the spill set).
    pub(in crate::cluster::protocol) fn on_get_read(&mut self, id: WrId, ok: bool, spill: bool) {
        self.reader.on_read(&self.pools.sets, id, ok, spill);
    }

    /// Finishes every GET whose reads are all in.
    pub(in crate::cluster::protocol) fn advance_gets(&mut self, now: Now) -> bool {
        let (reader, mut cx) = self.reader_cx();
        reader.advance(&mut cx, now)
    }
}
