//! What the simulator knows happened, and the checks against it.
//!
//! Every value the simulated KV stores write carries its own identity (key, write id)
//! and a pattern derived from the write id, so any value a read returns is checked for
//! integrity and traced to the write that made it. A write that completed Ok is
//! committed at that moment; one that completed `NotDurable` was rolled back and must
//! never be seen; anything else (the writer's DPU app died, the decision did not reach
//! enough holders in time) may or may not have taken effect.

use std::collections::HashMap;

/// Bytes at the start of every simulated value: key index (u32), write id (u64),
/// length (u32).
pub const VALUE_HEADER: usize = 16;

/// The value of write `write_id` to key `key`, `len` bytes (at least the header).
pub fn value_of(key: u32, write_id: u64, len: usize, out: &mut [u8]) {
    let len = len.max(VALUE_HEADER);
    out[0..4].copy_from_slice(&key.to_le_bytes());
    out[4..12].copy_from_slice(&write_id.to_le_bytes());
    out[12..16].copy_from_slice(&(len as u32).to_le_bytes());
    let mut x = write_id.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    for b in &mut out[VALUE_HEADER..len] {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = x as u8;
    }
}

/// Checks a value read back: its header and pattern. Returns (key, write id).
pub fn check_value(bytes: &[u8]) -> Result<(u32, u64), String> {
    if bytes.len() < VALUE_HEADER {
        return Err(format!("value of {} bytes is shorter than its header", bytes.len()));
    }
    let key = u32::from_le_bytes(bytes[0..4].try_into().expect("4 bytes"));
    let write_id = u64::from_le_bytes(bytes[4..12].try_into().expect("8 bytes"));
    let len = u32::from_le_bytes(bytes[12..16].try_into().expect("4 bytes")) as usize;
    if len != bytes.len() {
        return Err(format!("value of write {write_id} says {len} bytes but {} came back", bytes.len()));
    }
    let mut expect = vec![0u8; len];
    value_of(key, write_id, len, &mut expect);
    if expect != bytes {
        return Err(format!("value of write {write_id} (key {key}) came back corrupted"));
    }
    Ok((key, write_id))
}

/// How a write ended, as its host saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fate {
    /// Not completed yet.
    InFlight,
    /// Completed Ok at `at_ns` with `stamp`.
    Committed {
        /// Its version stamp.
        stamp: u64,
        /// When the host saw the completion.
        at_ns: u64,
    },
    /// Rolled back: must never be visible.
    RolledBack,
    /// Failed in a way that leaves it undetermined.
    Unknown,
}

/// One write the simulator issued.
#[derive(Clone, Copy, Debug)]
pub struct Issued {
    /// Key index.
    pub key: u32,
    /// A DELETE.
    pub delete: bool,
    /// How it ended.
    pub fate: Fate,
    /// When its host submitted it.
    pub submitted_ns: u64,
}

/// The history of the run.
#[derive(Debug, Default)]
pub struct Oracle {
    issued: HashMap<u64, Issued>,
    /// Per key: (commit time, stamp, write id) of committed writes, in commit order.
    committed: HashMap<u32, Vec<(u64, u64, u64)>>,
    /// Checks made.
    pub reads_checked: u64,
    /// (stamp, completion time) of the writes committed since the caller last took
    /// them (the sequencer checks), when `track_commits` is set.
    pub new_commits: Vec<(u64, u64)>,
    /// Keep `new_commits`, and check that a key's versions follow real time: a write
    /// submitted after another of its key committed commits at a higher version (with
    /// a sequencer; HLC versions only promise that as far as the clocks agree).
    pub track_commits: bool,
    /// The first write found out of real-time order, when `track_commits`.
    pub out_of_order: Option<String>,
}

impl Oracle {
    /// Records that write `write_id` was submitted.
    pub fn issue(&mut self, write_id: u64, key: u32, delete: bool, submitted_ns: u64) {
        self.issued.insert(write_id, Issued { key, delete, fate: Fate::InFlight, submitted_ns });
    }

    /// Records how write `write_id` ended.
    pub fn finish(&mut self, write_id: u64, fate: Fate) {
        let Some(w) = self.issued.get_mut(&write_id) else { return };
        w.fate = fate;
        if let Fate::Committed { stamp, at_ns } = fate {
            let (key, submitted) = (w.key, w.submitted_ns);
            let earlier = self.committed.entry(key).or_default();
            if self.track_commits && self.out_of_order.is_none() {
                if let Some(&(at, s, id)) = earlier.iter().find(|&&(at, s, _)| at < submitted && s >> 8 >= stamp >> 8) {
                    self.out_of_order = Some(format!(
                        "key {key}: write {write_id}, submitted at {submitted} ns, committed as version {:#x}, not above write {id}'s {:#x} committed at {at} ns",
                        stamp >> 8,
                        s >> 8
                    ));
                }
            }
            earlier.push((at_ns, stamp, write_id));
            if self.track_commits {
                self.new_commits.push((stamp, at_ns));
            }
        }
    }

    /// The newest stamp of `key` committed before `at_ns` (0 if none).
    pub fn newest_before(&self, key: u32, at_ns: u64) -> u64 {
        self.committed
            .get(&key)
            .map_or(0, |c| c.iter().filter(|(t, _, _)| *t < at_ns).map(|(_, s, _)| *s).max().unwrap_or(0))
    }

    /// The newest committed write of `key`: (stamp, write id, is a delete).
    pub fn newest(&self, key: u32) -> Option<(u64, u64, bool)> {
        let (_, stamp, id) = *self.committed.get(&key)?.iter().max_by_key(|(_, s, _)| *s)?;
        Some((stamp, id, self.issued[&id].delete))
    }

    /// Checks a read of `key` that began at `began_ns` and returned `stamp` with
    /// `value` (`None`: the key was found deleted or never written).
    pub fn check_read(
        &mut self,
        key: u32,
        began_ns: u64,
        stamp: u64,
        value: Option<&[u8]>,
        fresh: bool,
    ) -> Result<(), String> {
        self.reads_checked += 1;
        if let Some(v) = value {
            let (vkey, write_id) = check_value(v)?;
            if vkey != key {
                return Err(format!("a read of key {key} returned write {write_id}, a value of key {vkey}"));
            }
            let Some(w) = self.issued.get(&write_id) else {
                return Err(format!("a read of key {key} returned write {write_id}, which was never issued"));
            };
            match w.fate {
                Fate::RolledBack => {
                    return Err(format!(
                        "a read of key {key} returned write {write_id}, which was rolled back (NotDurable)"
                    ))
                }
                Fate::Committed { stamp: s, .. } if s != stamp => {
                    return Err(format!("write {write_id} committed as version {s:#x} but was read as {stamp:#x}"))
                }
                _ => {}
            }
        }
        if fresh {
            let need = self.newest_before(key, began_ns);
            if stamp < need {
                return Err(format!(
                    "a Fresh read of key {key} began at {began_ns} ns and returned version {stamp:#x}, \
                     older than version {need:#x} committed before it began"
                ));
            }
        }
        Ok(())
    }

    /// Writes issued, and of those committed, rolled back, undetermined.
    pub fn counts(&self) -> (usize, usize, usize, usize) {
        let mut c = (self.issued.len(), 0, 0, 0);
        for w in self.issued.values() {
            match w.fate {
                Fate::Committed { .. } => c.1 += 1,
                Fate::RolledBack => c.2 += 1,
                Fate::Unknown => c.3 += 1,
                Fate::InFlight => {}
            }
        }
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_carry_their_identity_and_damage_is_caught() {
        let mut v = vec![0u8; 100];
        value_of(3, 77, 100, &mut v);
        assert_eq!(check_value(&v), Ok((3, 77)));
        v[50] ^= 1;
        assert!(check_value(&v).is_err());
        assert!(check_value(&v[..99]).is_err());
    }

    #[test]
    fn a_fresh_read_older_than_a_commit_before_it_is_caught() {
        let mut o = Oracle::default();
        o.issue(1, 0, false, 0);
        o.finish(1, Fate::Committed { stamp: 0x500, at_ns: 10 });
        o.issue(2, 0, false, 0);
        o.finish(2, Fate::RolledBack);
        let mut v = vec![0u8; 20];
        value_of(0, 1, 20, &mut v);
        assert!(o.check_read(0, 20, 0x500, Some(&v), true).is_ok());
        assert!(o.check_read(0, 20, 0x400, None, true).is_err(), "older than the commit");
        assert!(o.check_read(0, 5, 0x400, None, true).is_ok(), "began before the commit");
        value_of(0, 2, 20, &mut v);
        assert!(o.check_read(0, 20, 0x600, Some(&v), false).is_err(), "a rolled-back write");
    }
}
