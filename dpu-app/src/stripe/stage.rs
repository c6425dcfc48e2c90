//! The striping stage: erasure-codes every sealed PUT payload in place.

use super::fragments::{encode_stripe, StripeId};
use super::layout::StripeLayout;
use super::rs::ReedSolomon;
use crate::pipeline::{Op, Request, Room, Stage, StageError};

const NAME: &str = "stripe";

/// Cuts every sealed PUT payload into k data fragments (slices of the arena
/// buffer, zero-padded up to `k * fragment_len`) and computes the m parity
/// fragments and all headers into the request's side buffer. Runs after
/// [`crate::seal::SealStage`] configured with the same (k, m).
#[derive(Debug)]
pub struct StripeStage {
    rs: ReedSolomon,
}

impl StripeStage {
    /// A stage striping with `rs`.
    pub fn new(rs: ReedSolomon) -> Self {
        Self { rs }
    }
}

impl Stage for StripeStage {
    fn name(&self) -> &'static str {
        NAME
    }

    fn run(&mut self, req: &mut Request<'_>) -> Result<(), StageError> {
        if req.op != Op::Put {
            return Ok(());
        }
        let failed = |reason: String| StageError::Failed { stage: NAME, reason };
        if !req.codec.sealed {
            return Err(failed("payload is not sealed: put the seal stage before the stripe stage".into()));
        }
        let (k, m) = (self.rs.data_fragments(), self.rs.parity_fragments());
        let len = req.payload.len();
        let layout = StripeLayout::new(k, m, len).map_err(|e| failed(e.to_string()))?;
        let cap = req.buf.len();
        let data = req
            .buf
            .get_mut(req.payload.start..req.payload.start + layout.data_len())
            .ok_or(StageError::NoRoom { stage: NAME, len, need: layout.data_len() - len, cap })?;
        if req.side.len() < layout.side_len() {
            return Err(failed(format!(
                "side buffer of {} bytes is too small: RS({k}, {m}) of a {len}-byte frame needs {}",
                req.side.len(),
                layout.side_len()
            )));
        }
        let id = StripeId { key_hash: req.codec.key_hash, version: req.version };
        encode_stripe(&self.rs, &layout, id, data, req.side).map_err(|e| failed(e.to_string()))?;
        req.codec.k = k as u8;
        req.codec.m = m as u8;
        Ok(())
    }

    fn admits(&self, payload_len: usize, room: Room) -> Option<usize> {
        let (k, m) = (self.rs.data_fragments(), self.rs.parity_fragments());
        let layout = StripeLayout::new(k, m, payload_len).ok()?;
        (layout.data_len() <= room.payload && layout.side_len() <= room.side).then_some(payload_len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::CodecInfo;
    use crate::stripe::{decode_stripe, fragment};

    fn request<'a>(buf: &'a mut [u8], side: &'a mut [u8], payload: std::ops::Range<usize>) -> Request<'a> {
        Request {
            op: Op::Put,
            key: b"k",
            buf,
            payload,
            version: 3,
            side,
            codec: CodecInfo { key_hash: 11, key_id: 1, sealed: true, k: 0, m: 0 },
        }
    }

    #[test]
    fn sealed_payload_is_striped_in_place() {
        let mut stage = StripeStage::new(ReedSolomon::new(4, 2).unwrap());
        let layout = StripeLayout::new(4, 2, 300).unwrap();
        let mut buf: Vec<u8> = (0..16 + layout.data_len()).map(|i| i as u8).collect();
        let frame = buf[16..316].to_vec();
        let mut side = vec![0u8; layout.side_len()];
        let mut req = request(&mut buf, &mut side, 16..316);
        stage.run(&mut req).unwrap();
        assert_eq!((req.codec.k, req.codec.m), (4, 2));
        assert_eq!(&buf[16..316], &frame[..], "data fragments are the frame itself");
        let frags: Vec<_> = (2..6).map(|i| fragment(&layout, &buf[16..], &side, i)).collect();
        let mut out = vec![0u8; layout.data_len()];
        let mut rs = ReedSolomon::new(4, 2).unwrap();
        decode_stripe(&mut rs, &frags, &mut out).unwrap();
        assert_eq!(&out[..300], &frame[..]);
    }

    #[test]
    fn the_door_limit_is_exactly_the_largest_value_sealing_and_striping_process() {
        use crate::pipeline::{Pipeline, Room};
        use crate::seal::{KeyRing, NonceSequence, SealStage, Sealer};
        use prescient_shim::config::{TAILROOM_BYTES, VALUE_OFFSET};
        for (k, m, buffer_bytes) in [(4, 2, 4096), (3, 2, 8192), (1, 1, 1024), (8, 4, 65536)] {
            let mut keys = KeyRing::new();
            keys.insert(1, &[7; 32]).unwrap();
            let mut pipeline = Pipeline::new();
            pipeline.push(Box::new(SealStage::new(Sealer::new(keys, NonceSequence::new(1, 1)).unwrap(), k, m)));
            pipeline.push(Box::new(StripeStage::new(ReedSolomon::new(k.into(), m.into()).unwrap())));
            let room = Room { payload: buffer_bytes - VALUE_OFFSET, side: buffer_bytes };
            let at_most = buffer_bytes - VALUE_OFFSET - TAILROOM_BYTES;
            let max = pipeline.put_value_max(room, at_most).expect("an empty value fits");
            let run = |pipeline: &mut Pipeline, len: usize| {
                let (mut buf, mut side) = (vec![0u8; buffer_bytes], vec![0u8; buffer_bytes]);
                let mut req = Request {
                    op: Op::Put,
                    key: b"key",
                    buf: &mut buf,
                    payload: VALUE_OFFSET..VALUE_OFFSET + len,
                    version: 1,
                    side: &mut side,
                    codec: CodecInfo::default(),
                };
                pipeline.run(&mut req)
            };
            assert_eq!(run(&mut pipeline, max), Ok(()), "RS({k}, {m}), {buffer_bytes}-byte buffers: {max} fits");
            if max < at_most {
                let err = run(&mut pipeline, max + 1).unwrap_err();
                assert!(matches!(err, StageError::NoRoom { .. }), "RS({k}, {m}): {} does not fit: {err}", max + 1);
            }
        }
        // Without sealing and striping, a buffer's whole value room is admitted.
        let room = Room { payload: 3776, side: 0 };
        assert_eq!(Pipeline::new().put_value_max(room, 3712), Some(3712));
    }

    #[test]
    fn unsealed_or_cramped_requests_fail() {
        let mut stage = StripeStage::new(ReedSolomon::new(4, 2).unwrap());
        let layout = StripeLayout::new(4, 2, 300).unwrap();
        let mut buf = vec![0u8; 300];
        let mut side = vec![0u8; layout.side_len()];
        let mut req = request(&mut buf, &mut side, 0..300);
        let err = stage.run(&mut req).unwrap_err();
        assert!(matches!(err, StageError::NoRoom { stage: "stripe", len: 300, .. }), "{err}");
        req.codec.sealed = false;
        assert!(matches!(stage.run(&mut req), Err(StageError::Failed { .. })));
        let mut buf = vec![0u8; layout.data_len()];
        let mut small = vec![0u8; 10];
        let mut req = request(&mut buf, &mut small, 0..300);
        let err = stage.run(&mut req).unwrap_err();
        assert!(err.to_string().contains("side buffer"), "{err}");
    }
}
