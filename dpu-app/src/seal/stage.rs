//! The sealing stage: seals every PUT's payload in place.

use super::binding::{key_hash, Binding};
use super::sealer::Sealer;
use super::SealError;
use crate::limits::FRAME_LEN_MAX;
use crate::pipeline::{Op, Request, Room, Stage, StageError};
use crate::seal::FRAME_OVERHEAD;

const NAME: &str = "seal";

/// Seals the payload of every PUT in place, bound to the key, the version and
/// the RS(k, m) layout the striping stage will use; other requests pass.
#[derive(Debug)]
pub struct SealStage {
    sealer: Sealer,
    k: u8,
    m: u8,
}

impl SealStage {
    /// A stage sealing with `sealer` for stripes of RS(k, m).
    pub fn new(sealer: Sealer, k: u8, m: u8) -> Self {
        Self { sealer, k, m }
    }
}

impl Stage for SealStage {
    fn name(&self) -> &'static str {
        NAME
    }

    fn run(&mut self, req: &mut Request<'_>) -> Result<(), StageError> {
        if req.op != Op::Put {
            return Ok(());
        }
        let start = req.payload.start;
        let len = req.payload.len();
        let key_hash = key_hash(req.key);
        let binding = Binding { key_hash, version: req.version, k: self.k, m: self.m, tombstone: req.op == Op::Delete };
        let cap = req.buf.len();
        let buf = req.buf.get_mut(start..).ok_or(StageError::NoRoom { stage: NAME, len, need: 0, cap })?;
        let frame_len = self.sealer.seal_in_place(buf, len, &binding).map_err(|e| match e {
            SealError::NoRoom { need, .. } => StageError::NoRoom { stage: NAME, len, need: need - len, cap },
            other => StageError::Failed { stage: NAME, reason: other.to_string() },
        })?;
        req.payload = start..start + frame_len;
        req.codec.key_hash = key_hash;
        req.codec.key_id = self.sealer.key_id();
        req.codec.sealed = true;
        Ok(())
    }

    fn admits(&self, payload_len: usize, room: Room) -> Option<usize> {
        let frame_len = payload_len.checked_add(FRAME_OVERHEAD)?;
        (frame_len <= room.payload && frame_len <= FRAME_LEN_MAX).then_some(frame_len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::seal::{open_in_place, KeyRing, NonceSequence, FRAME_OVERHEAD};

    fn stage() -> SealStage {
        let mut keys = KeyRing::new();
        keys.insert(2, &[1; 32]).unwrap();
        SealStage::new(Sealer::new(keys, NonceSequence::new(1, 1)).unwrap(), 4, 2)
    }

    #[test]
    fn put_is_sealed_in_place_and_opens_under_its_binding() {
        let mut s = stage();
        let mut buf = vec![0u8; 8 + 5 + FRAME_OVERHEAD];
        buf[8..13].copy_from_slice(b"hello");
        let mut req = Request {
            op: Op::Put,
            key: b"k1",
            buf: &mut buf,
            payload: 8..13,
            version: 4,
            side: &mut [],
            codec: Default::default(),
        };
        s.run(&mut req).unwrap();
        assert_eq!(req.payload, 8..8 + 5 + FRAME_OVERHEAD);
        assert_eq!((req.codec.key_id, req.codec.sealed, req.codec.key_hash), (2, true, key_hash(b"k1")));
        let binding = Binding { key_hash: key_hash(b"k1"), version: 4, k: 4, m: 2, tombstone: false };
        let range = req.payload.clone();
        assert_eq!(open_in_place(s.sealer.keys(), &mut buf[range], &binding).unwrap(), b"hello");
    }

    #[test]
    fn no_room_fails_and_other_ops_pass_untouched() {
        let mut s = stage();
        let mut buf = vec![9u8; 40];
        let mut req = Request {
            op: Op::Put,
            key: b"k",
            buf: &mut buf,
            payload: 0..10,
            version: 1,
            side: &mut [],
            codec: Default::default(),
        };
        let err = s.run(&mut req).unwrap_err();
        assert_eq!(err, StageError::NoRoom { stage: "seal", len: 10, need: FRAME_OVERHEAD, cap: 40 });
        req.op = Op::Delete;
        s.run(&mut req).unwrap();
        assert!(!req.codec.sealed);
        assert!(buf.iter().all(|&b| b == 9));
    }
}
