//! The holder's side: entries other writers put into this node's fragment logs.
//!
//! Entries arrive in order per writer (one queue pair each), announced by the
//! immediate of the WRITE_WITH_IMM that carried their header. Each is copied out of
//! the log before it is checked (the writer may be hostile and rewrite the slot), its
//! fragment header and payload checksums verified, the fragment persisted into the
//! store (file-backed, so it survives a kill -9 of this process) and the log's applied
//! sequence moved on; only then is it acknowledged, which also returns the log slot to
//! the writer. A bad entry is refused (acknowledged with a refusal) and skipped; an
//! entry out of sequence breaks the link.

use super::node::{Node, Noisy, Now};
use super::wr::{Kind, WrId};
use crate::cluster::format::entry::{EntryKind, HEADER_LEN as ENTRY_HEADER_LEN};
use crate::cluster::format::record::RecordRepr;
use crate::cluster::format::store::{Inserted, StoreError};
use crate::fabric::{Fabric, Op, WcStatus};
use crate::stripe::HeaderRepr;

/// Set in the immediate of an acknowledgement (entries' immediates are sequence
/// numbers below 2^31).
pub const ACK_FLAG: u32 = 1 << 31;
/// Acknowledgement status: persisted.
pub const ACK_OK: u32 = 0;
/// Acknowledgement status: the entry was malformed or inconsistent, and skipped.
pub const ACK_REFUSED: u32 = 1;
/// Acknowledgement status: the store has no room for the fragment.
pub const ACK_FULL: u32 = 2;

impl<F: Fabric> Node<F> {
    /// Writer `w` announced the entry with sequence (low 31 bits) `imm` in our log.
    pub(super) fn on_entry(&mut self, w: u8, imm: u32, now: Now) {
        let me = self.me;
        let Some((log, _)) = self.logs.get(w as usize).and_then(Option::as_ref) else {
            tracing::warn!(node = me, peer = w, "entry from a node with no log here");
            return;
        };
        let seq = log.applied_seq();
        if (seq & 0x7fff_ffff) as u32 != imm {
            tracing::warn!(node = me, peer = w, expected = seq, imm, "log entry out of sequence: reconnecting");
            self.link_failed(w, WcStatus::RemoteOperation, now);
            return;
        }
        let (status, bytes) = self.apply_entry(w, seq, true);
        if let Some((log, _)) = self.logs[w as usize].as_ref() {
            log.mark_applied(seq);
        }
        if let Some(p) = self.links.peer_mut(w) {
            p.bytes_in += bytes;
        }
        self.send_ack(w, seq, status);
    }

    /// Checks and applies entry `seq` of writer `w`'s log; returns the status to
    /// acknowledge with and the entry's bytes. `live`: a fresh entry (a replay after
    /// a restart is applied the same way but not acknowledged, and logs less).
    pub(super) fn apply_entry(&mut self, w: u8, seq: u64, live: bool) -> (u32, u64) {
        let status = self.apply_entry_inner(w, seq, live);
        (status, self.entry_bytes)
    }

    fn apply_entry_inner(&mut self, w: u8, seq: u64, live: bool) -> u32 {
        let me = self.me;
        let Some((log, _)) = self.logs.get(w as usize).and_then(Option::as_ref) else { return ACK_REFUSED };
        let entry = match log.read_entry(seq, &mut self.entry_buf) {
            Ok(e) => e,
            Err(e) => {
                if let Some(left_out) = live.then(|| self.admit_log(Noisy::EntryRefused)).flatten() {
                    tracing::warn!(node = me, peer = w, seq, error = %e, left_out, "refused a log entry");
                }
                self.stats.entries_refused += 1;
                return ACK_REFUSED;
            }
        };
        let header = *entry.repr();
        self.entry_bytes = (ENTRY_HEADER_LEN + entry.payload().len()) as u64;
        match header.kind {
            EntryKind::Fragment => {
                let frag = match entry.fragment() {
                    Ok(f) => f,
                    Err(e) => {
                        if let Some(left_out) = self.admit_log(Noisy::EntryRefused) {
                            tracing::warn!(node = me, peer = w, seq, error = %e, left_out, "refused a fragment");
                        }
                        self.stats.entries_refused += 1;
                        return ACK_REFUSED;
                    }
                };
                let checked =
                    HeaderRepr::parse(&frag.header).and_then(|r| frag.header.verify_payload(frag.payload).map(|()| r));
                let repr = match checked {
                    Ok(r) => r,
                    Err(e) => {
                        if let Some(left_out) = self.admit_log(Noisy::EntryRefused) {
                            tracing::warn!(node = me, peer = w, seq, error = %e, left_out, "refused a fragment");
                        }
                        self.stats.entries_refused += 1;
                        return ACK_REFUSED;
                    }
                };
                let consistent = repr.version == header.stamp
                    && repr.layout.k() == self.k
                    && repr.layout.m() == self.m
                    && header.writer == w
                    && (header.stamp & 0xff) as u8 == w;
                if !consistent {
                    if let Some(left_out) = self.admit_log(Noisy::EntryRefused) {
                        tracing::warn!(
                            node = me,
                            peer = w,
                            seq,
                            left_out,
                            "refused a fragment whose header disagrees with its entry"
                        );
                    }
                    self.stats.entries_refused += 1;
                    return ACK_REFUSED;
                }
                // Order this node's next writes after what it has seen (HLC).
                let _ = self.hlc.observe(header.stamp >> 8);
                let record = RecordRepr {
                    writer: w,
                    fragment_index: repr.index,
                    key_hash: header.key_hash,
                    stamp: header.stamp,
                    write_seq: header.write_seq,
                    fragment_len: frag.payload.len() as u32,
                    tombstone: header.tombstone,
                    incarnation: header.incarnation,
                };
                let inserted = self.store.insert(&record, frag.header.into_inner(), frag.payload);
                tracing::trace!(
                    node = me,
                    writer = w,
                    stamp = header.stamp,
                    write_seq = header.write_seq,
                    index = repr.index,
                    ?inserted,
                    "fragment stored"
                );
                match inserted {
                    Ok(Inserted::Stored { set, way }) => {
                        if self.sync_records {
                            if let Err(e) = self.store.sync_record(set, way) {
                                tracing::error!(node = me, error = %e, "cannot flush a fragment to disk");
                                return ACK_FULL;
                            }
                        }
                        self.stats.fragments_held += 1;
                        ACK_OK
                    }
                    Ok(Inserted::Duplicate { .. } | Inserted::Superseded) => ACK_OK,
                    Err(e @ (StoreError::Full { .. } | StoreError::KeyFull { .. })) => {
                        self.stats.store_full += 1;
                        if let Some(left_out) = self.admit_log(Noisy::StoreFull) {
                            tracing::warn!(node = me, peer = w, error = %e, left_out, "fragment refused for room");
                        }
                        ACK_FULL
                    }
                    Err(e) => {
                        self.stats.entries_refused += 1;
                        if let Some(left_out) = self.admit_log(Noisy::EntryRefused) {
                            tracing::warn!(node = me, peer = w, error = %e, left_out, "fragment not stored");
                        }
                        ACK_REFUSED
                    }
                }
            }
            EntryKind::Outcomes => {
                let records = match entry.outcomes() {
                    Ok(r) => r,
                    Err(_) => {
                        self.stats.entries_refused += 1;
                        return ACK_REFUSED;
                    }
                };
                for r in records {
                    let Ok(r) = r else {
                        self.stats.entries_refused += 1;
                        return ACK_REFUSED;
                    };
                    let res = self.store.resolve(r.key_hash, r.stamp, r.outcome);
                    tracing::trace!(node = me, writer = w, stamp = r.stamp, write_seq = r.write_seq, outcome = ?r.outcome, ?res, "outcome applied");
                }
                ACK_OK
            }
        }
    }

    fn send_ack(&mut self, w: u8, seq: u64, status: u32) {
        let Some(remote) = self.links.peer(w).filter(|p| p.can_answer()).and_then(|p| p.remote) else { return };
        let imm = ACK_FLAG | (status & 0x7f) << 24 | (seq & 0xff_ffff) as u32;
        let buf = self.zero_buf();
        // A zero-length WRITE_WITH_IMM touches no memory: any address of the peer does.
        self.links.post(
            w,
            WrId::new(Kind::Ack, w, 0, 0),
            Op::Write { remote: remote.control.at(0), imm: Some(imm) },
            buf,
        );
    }

    /// After a restart: applies what the logs hold beyond their applied sequence
    /// (entries written before the crash, not yet persisted into the store).
    pub(super) fn replay_logs(&mut self) {
        for w in 0..self.n as u8 {
            let mut replayed = 0u64;
            while let Some((log, _)) = self.logs.get(w as usize).and_then(Option::as_ref) {
                let seq = log.applied_seq();
                if log.read_entry(seq, &mut self.entry_buf).is_err() {
                    break;
                }
                self.apply_entry(w, seq, false);
                if let Some((log, _)) = self.logs[w as usize].as_ref() {
                    log.mark_applied(seq);
                }
                replayed += 1;
                if replayed >= self.config.log_slots as u64 {
                    break;
                }
            }
            if replayed > 0 {
                tracing::info!(node = self.me, writer = w, replayed, "replayed log entries left by a crash");
                self.stats.entries_replayed += replayed;
            }
        }
    }
}
