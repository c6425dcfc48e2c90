//! The soak's checker: what every write of every key became, and whether a read of
//! the key is one the cluster may return.
//!
//! Each key is written by one writer, one write at a time, so its writes are ordered
//! by their sequence number. A read may return the newest acknowledged write, or a
//! later one whose outcome the writer never learned (the DPU app died with it, or its
//! decision did not reach enough holders in time); a write that failed `NotDurable` or
//! never started (`Overloaded`) must never be seen. Anything older than the newest
//! acknowledged write, or a value no write made, is a lost write.
#![forbid(unsafe_code)]

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use prescient_shim::{Host, QueuePair, Request, ShimError, Status};

/// Bytes of a value's self-describing header: key (u32), sequence (u64), length (u32).
const VALUE_HEADER: usize = 16;

/// The id of writer `node`'s key number `k`.
pub fn key_id(node: u8, k: u32) -> u32 {
    u32::from(node) * 1_000_000 + k
}

/// The bytes of key `key`.
pub fn key_bytes(key: u32) -> [u8; 13] {
    let mut b = *b"soak:00000000";
    b[5..].copy_from_slice(format!("{key:08}").as_bytes());
    b
}

/// The value write `seq` of `key` puts: a header naming both, then a pattern of both.
pub fn value_of(key: u32, seq: u64, len: usize) -> Vec<u8> {
    let len = len.max(VALUE_HEADER);
    let mut v = Vec::with_capacity(len);
    v.extend_from_slice(&key.to_le_bytes());
    v.extend_from_slice(&seq.to_le_bytes());
    v.extend_from_slice(&(len as u32).to_le_bytes());
    let mix = seq.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ u64::from(key);
    v.extend((VALUE_HEADER..len).map(|i| (mix >> (i % 8 * 8)) as u8 ^ i as u8));
    v
}

/// What became of one write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fate {
    /// Submitted, no completion yet.
    InFlight,
    /// Acknowledged Ok with this version.
    Acked(u64),
    /// Failed so that it is never visible.
    Failed,
    /// Completed with a status that does not say whether it committed.
    Unknown,
}

#[derive(Debug, Default)]
struct KeyHistory {
    writer: u8,
    writes: BTreeMap<u64, Fate>,
}

/// What a read of a key was.
#[derive(Debug, PartialEq, Eq)]
pub enum ReadVerdict {
    /// A value the cluster may return.
    Ok,
    /// The cluster could not answer (too few nodes reachable).
    Unavailable,
    /// An acknowledged write was lost, or a value no write made came back: why.
    Lost(String),
}

/// Every key's writes and their fates.
#[derive(Debug, Default)]
pub struct Checker {
    keys: BTreeMap<u32, KeyHistory>,
}

impl Checker {
    /// Writer `node` submitted write `seq` of `key`.
    pub fn issued(&mut self, node: u8, key: u32, seq: u64) {
        let h = self.keys.entry(key).or_default();
        h.writer = node;
        h.writes.insert(seq, Fate::InFlight);
    }

    /// Write `seq` of `key` completed with `status` (and `version` if Ok).
    pub fn completed(&mut self, key: u32, seq: u64, status: Status, version: u64) {
        let fate = match status {
            Status::Ok => Fate::Acked(version),
            // Rolled back, or never started: nothing of it may be seen.
            Status::NotDurable | Status::Overloaded => Fate::Failed,
            _ => Fate::Unknown,
        };
        if let Some(f) = self.keys.get_mut(&key).and_then(|h| h.writes.get_mut(&seq)) {
            *f = fate;
        }
    }

    /// The versions of every acknowledged write as the change feeds hold them (a
    /// completion's version is a stamp, `version << STAMP_NODE_BITS | node`).
    pub fn acked_versions(&self) -> std::collections::BTreeSet<u64> {
        let acked = self.keys.values().flat_map(|h| h.writes.values());
        let version = |stamp: &u64| stamp >> crate::limits::STAMP_NODE_BITS;
        acked.filter_map(|f| if let Fate::Acked(v) = f { Some(version(v)) } else { None }).collect()
    }

    /// Writes every key's history to `path` as text (a line a write: key, writer,
    /// sequence, fate, version), through a temporary file renamed into place, so a
    /// site that reads it (`soak --nodes-here`) never sees half of it.
    pub fn save(&self, path: &Path) -> std::io::Result<()> {
        let mut text = String::new();
        for (key, h) in &self.keys {
            for (seq, fate) in &h.writes {
                let (name, version) = match fate {
                    Fate::InFlight => ("in-flight", 0),
                    Fate::Acked(v) => ("acked", *v),
                    Fate::Failed => ("failed", 0),
                    Fate::Unknown => ("unknown", 0),
                };
                text.push_str(&format!("{key} {} {seq} {name} {version}\n", h.writer));
            }
        }
        let partial = path.with_extension("partial");
        std::fs::write(&partial, text)?;
        std::fs::rename(&partial, path)
    }

    /// Adds the histories [`Checker::save`] wrote to `path` (another site's keys).
    pub fn load_into(&mut self, path: &Path) -> Result<(), String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        for (n, line) in text.lines().enumerate() {
            let bad = || format!("{} line {}: not `key writer seq fate version`: {line:?}", path.display(), n + 1);
            let f: Vec<&str> = line.split(' ').collect();
            let [key, writer, seq, fate, version] = f[..] else { return Err(bad()) };
            let (key, writer, seq, version) = (key.parse(), writer.parse(), seq.parse(), version.parse());
            let (Ok(key), Ok(writer), Ok(seq), Ok(version)) = (key, writer, seq, version) else { return Err(bad()) };
            let fate = match fate {
                "in-flight" => Fate::InFlight,
                "acked" => Fate::Acked(version),
                "failed" => Fate::Failed,
                "unknown" => Fate::Unknown,
                _ => return Err(bad()),
            };
            let h = self.keys.entry(key).or_default();
            h.writer = writer;
            h.writes.insert(seq, fate);
        }
        Ok(())
    }

    /// Keys written.
    pub fn keys(&self) -> usize {
        self.keys.len()
    }

    /// Every key written, in order.
    pub fn iter_keys(&self) -> impl Iterator<Item = u32> + '_ {
        self.keys.keys().copied()
    }

    /// The node whose writer owns `key`.
    pub fn writer_of(&self, key: u32) -> u8 {
        self.keys.get(&key).map_or(0, |h| h.writer)
    }

    /// Judges a Fresh GET of `key` that came back `status` with `version` and `value`.
    pub fn judge(&self, key: u32, status: Status, version: u64, value: &[u8]) -> ReadVerdict {
        let Some(h) = self.keys.get(&key) else { return ReadVerdict::Lost(format!("key {key} was never written")) };
        let newest_acked = h.writes.iter().rev().find_map(|(&s, f)| match f {
            Fate::Acked(v) => Some((s, *v)),
            _ => None,
        });
        match status {
            Status::Unavailable => ReadVerdict::Unavailable,
            Status::NotFound => match newest_acked {
                None => ReadVerdict::Ok,
                Some((seq, v)) => {
                    ReadVerdict::Lost(format!("key {key}: NotFound, but write {seq} (version {v:#x}) was acknowledged"))
                }
            },
            Status::Ok => {
                if value.len() < VALUE_HEADER {
                    return ReadVerdict::Lost(format!("key {key}: a {}-byte value no write made", value.len()));
                }
                let seq = u64::from_le_bytes(value[4..12].try_into().expect("8 bytes"));
                let len = u32::from_le_bytes(value[12..16].try_into().expect("4 bytes")) as usize;
                if value != value_of(key, seq, len).as_slice() {
                    return ReadVerdict::Lost(format!("key {key}: a value no write made (claims write {seq})"));
                }
                let fate = h.writes.get(&seq).copied();
                match (fate, newest_acked) {
                    (None, _) => ReadVerdict::Lost(format!("key {key}: write {seq} was never issued")),
                    (Some(Fate::Failed), _) => {
                        ReadVerdict::Lost(format!("key {key}: write {seq} failed cleanly, yet it is visible"))
                    }
                    (Some(_), Some((acked, v))) if seq < acked => ReadVerdict::Lost(format!(
                        "key {key}: read write {seq} (version {version:#x}), older than acknowledged write {acked} (version {v:#x})"
                    )),
                    (Some(Fate::Acked(v)), _) if v != version => ReadVerdict::Lost(format!(
                        "key {key}: write {seq} was acknowledged as version {v:#x} but reads as {version:#x}"
                    )),
                    _ => ReadVerdict::Ok,
                }
            }
            other => ReadVerdict::Lost(format!("key {key}: the GET failed {other:?}")),
        }
    }
}

/// One Fresh GET of `key` through `qp`: (status, version, value), or the shim's error
/// if the DPU app does not answer within ten seconds.
pub fn get(host: &Host, qp: &mut QueuePair, key: u32) -> Result<(Status, u64, Vec<u8>), ShimError> {
    let buf = host.take_buffer()?;
    qp.submit(Request::get(&key_bytes(key), buf).user_data(u64::from(key))).map_err(|(e, _)| e)?;
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut got = None;
    while got.is_none() {
        match qp.wait(Duration::from_millis(100), |c| got = Some(c)) {
            Ok(_) | Err(ShimError::Timeout(_)) => {}
            Err(e) if Instant::now() >= deadline => return Err(e),
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
        if got.is_none() && Instant::now() >= deadline {
            return Err(ShimError::Timeout(Duration::from_secs(10)));
        }
    }
    let c = got.expect("loop ends with a completion");
    let buf = qp.take_value(&c);
    let value = match (c.status, buf) {
        (Status::Ok, Some(v)) => v.to_vec(),
        _ => Vec::new(),
    };
    Ok((c.status, c.version, value))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn checker() -> Checker {
        let mut c = Checker::default();
        for seq in 1..=4 {
            c.issued(2, 7, seq);
        }
        c.completed(7, 1, Status::Ok, 0x100);
        c.completed(7, 2, Status::NotDurable, 0);
        c.completed(7, 3, Status::Ok, 0x300);
        c.completed(7, 4, Status::DpuRestarted, 0);
        c
    }

    #[test]
    fn the_newest_acknowledged_or_a_later_unknown_write_is_a_good_read() {
        let c = checker();
        assert_eq!(c.judge(7, Status::Ok, 0x300, &value_of(7, 3, 900)), ReadVerdict::Ok);
        assert_eq!(c.judge(7, Status::Ok, 0x400, &value_of(7, 4, 100)), ReadVerdict::Ok);
        assert_eq!(c.judge(7, Status::Unavailable, 0, &[]), ReadVerdict::Unavailable);
    }

    #[test]
    fn older_failed_forged_or_missing_values_are_lost_writes() {
        let c = checker();
        let lost = |v: ReadVerdict| matches!(v, ReadVerdict::Lost(_));
        assert!(lost(c.judge(7, Status::Ok, 0x100, &value_of(7, 1, 900))), "older than acknowledged");
        assert!(lost(c.judge(7, Status::Ok, 0x200, &value_of(7, 2, 900))), "rolled back");
        assert!(lost(c.judge(7, Status::NotFound, 0, &[])), "acknowledged, then gone");
        assert!(lost(c.judge(7, Status::Ok, 0x301, &value_of(7, 3, 900))), "another version");
        let mut forged = value_of(7, 3, 900);
        forged[500] ^= 1;
        assert!(lost(c.judge(7, Status::Ok, 0x300, &forged)), "a flipped byte");
        assert!(lost(c.judge(7, Status::Ok, 0x300, &value_of(8, 3, 900))), "another key's value");
    }

    /// What one site saves another loads to the same verdicts; a damaged file is
    /// refused naming its line.
    #[test]
    fn a_saved_checker_loads_to_the_same_judgements() {
        let dir = std::env::temp_dir().join(format!("prescient-checker-save-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("site0.txt");
        checker().save(&path).unwrap();
        let mut loaded = Checker::default();
        loaded.load_into(&path).unwrap();
        assert_eq!(loaded.keys(), 1);
        assert_eq!(loaded.writer_of(7), 2);
        assert_eq!(loaded.judge(7, Status::Ok, 0x300, &value_of(7, 3, 900)), ReadVerdict::Ok);
        assert!(matches!(loaded.judge(7, Status::Ok, 0x100, &value_of(7, 1, 900)), ReadVerdict::Lost(_)));
        assert!(matches!(loaded.judge(7, Status::Ok, 0x200, &value_of(7, 2, 900)), ReadVerdict::Lost(_)));
        assert_eq!(loaded.judge(7, Status::Ok, 0x400, &value_of(7, 4, 100)), ReadVerdict::Ok);
        std::fs::write(&path, "7 2 1 acked 256\n7 2 x failed 0\n").unwrap();
        let err = Checker::default().load_into(&path).unwrap_err();
        assert!(err.contains("line 2"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_key_never_acknowledged_may_read_as_not_found() {
        let mut c = Checker::default();
        c.issued(0, 1, 1);
        c.completed(1, 1, Status::NotDurable, 0);
        assert_eq!(c.judge(1, Status::NotFound, 0, &[]), ReadVerdict::Ok);
    }
}
