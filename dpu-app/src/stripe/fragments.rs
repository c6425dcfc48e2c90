//! A sealed frame to fragments and back.
//!
//! Encoding works in place: the k data fragments are the frame buffer itself, cut
//! every `fragment_len` bytes (the tail up to `k * fragment_len` zeroed), and only
//! the headers and the m parity fragments are written, into a side buffer. Decoding
//! checks every header and every payload checksum before it decodes anything, so a
//! damaged or foreign fragment is an error, never wrong bytes.

use super::header::{FragmentHeader, HeaderRepr, HEADER_LEN};
use super::layout::StripeLayout;
use super::rs::ReedSolomon;
use super::StripeError;
use crate::limits::FRAGMENTS_MAX;

/// What identifies a stripe besides its layout; bound into every header (and,
/// by the sealing stage, into the frame's associated data).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StripeId {
    /// Hash of the value's key.
    pub key_hash: u64,
    /// Version of the write.
    pub version: u64,
}

/// One fragment as a reader received it: header bytes and payload bytes.
#[derive(Clone, Copy, Debug)]
pub struct Fragment<'b> {
    /// The fragment's header (at least [`HEADER_LEN`] bytes).
    pub header: &'b [u8],
    /// The fragment's payload.
    pub payload: &'b [u8],
}

/// Encodes the sealed frame at the start of `data` into a stripe.
///
/// `data` must hold at least `layout.data_len()` bytes, of which the first
/// `layout.frame_len()` are the frame; the rest of the data span is zeroed (it is
/// the padding of the last data fragments). `side` receives the headers of all
/// k + m fragments and the m parity fragments (`layout.side_len()` bytes).
pub fn encode_stripe(
    rs: &ReedSolomon,
    layout: &StripeLayout,
    id: StripeId,
    data: &mut [u8],
    side: &mut [u8],
) -> Result<(), StripeError> {
    check_code(rs, layout, 0)?;
    if data.len() < layout.data_len() {
        return Err(StripeError::BufferTooSmall { what: "frame", len: data.len(), need: layout.data_len() });
    }
    if side.len() < layout.side_len() {
        return Err(StripeError::BufferTooSmall { what: "side", len: side.len(), need: layout.side_len() });
    }
    let (k, f) = (layout.k(), layout.fragment_len());
    let data = &mut data[..layout.data_len()];
    data[layout.frame_len()..].fill(0);
    let (headers, parity_area) = side[..layout.side_len()].split_at_mut(layout.headers_len());

    if f > 0 {
        let mut sources: [&[u8]; FRAGMENTS_MAX] = [&[]; FRAGMENTS_MAX];
        for (s, chunk) in sources.iter_mut().zip(data.chunks_exact(f)) {
            *s = chunk;
        }
        let mut parity: [&mut [u8]; FRAGMENTS_MAX] = Default::default();
        for (p, chunk) in parity.iter_mut().zip(parity_area.chunks_exact_mut(f)) {
            *p = chunk;
        }
        rs.encode(&sources[..k], &mut parity[..layout.m()]);
    }
    for (i, header) in headers.chunks_exact_mut(HEADER_LEN).take(layout.fragments()).enumerate() {
        let payload = fragment_payload(layout, data, parity_area, i);
        let repr = HeaderRepr {
            layout: *layout,
            index: i as u8,
            key_hash: id.key_hash,
            version: id.version,
            payload_crc: crc32c::crc32c(payload),
        };
        repr.emit(header);
    }
    Ok(())
}

/// Fragment `i` of an encoded stripe: its header and its payload. `data` and
/// `side` are the buffers [`encode_stripe`] filled.
///
/// Panics (programmer error) if `i >= layout.fragments()` or the buffers are
/// shorter than the layout says.
pub fn fragment<'b>(layout: &StripeLayout, data: &'b [u8], side: &'b [u8], i: usize) -> Fragment<'b> {
    assert!(i < layout.fragments(), "fragment {i} of a {}-fragment stripe", layout.fragments());
    let (headers, parity_area) = side[..layout.side_len()].split_at(layout.headers_len());
    Fragment {
        header: &headers[i * HEADER_LEN..][..HEADER_LEN],
        payload: fragment_payload(layout, data, parity_area, i),
    }
}

fn fragment_payload<'b>(layout: &StripeLayout, data: &'b [u8], parity_area: &'b [u8], i: usize) -> &'b [u8] {
    let f = layout.fragment_len();
    if i < layout.k() {
        &data[i * f..][..f]
    } else {
        &parity_area[(i - layout.k()) * f..][..f]
    }
}

/// Rebuilds a sealed frame from any k fragments of its stripe.
///
/// Every header is checked (format, its own checksum, agreement with the others
/// and with `rs`'s code), every payload against its header checksum, and
/// duplicates are refused, all before anything is decoded. The frame is written
/// to the start of `out` (which needs `layout.data_len()` bytes); the returned
/// layout says how long it is, and the id which write it belongs to.
pub fn decode_stripe(
    rs: &mut ReedSolomon,
    fragments: &[Fragment<'_>],
    out: &mut [u8],
) -> Result<(StripeLayout, StripeId), StripeError> {
    let Some(first) = fragments.first() else {
        return Err(StripeError::TooFewFragments { have: 0, need: rs.data_fragments() });
    };
    let first = HeaderRepr::parse(&FragmentHeader::new_checked(first.header)?)?;
    let layout = first.layout;
    check_code(rs, &layout, first.index)?;
    let id = StripeId { key_hash: first.key_hash, version: first.version };

    // by_index[i] = position in `fragments` of fragment i.
    let mut by_index = [usize::MAX; FRAGMENTS_MAX];
    for (pos, frag) in fragments.iter().enumerate() {
        let header = FragmentHeader::new_checked(frag.header)?;
        let repr = HeaderRepr::parse(&header)?;
        let index = repr.index;
        let agree = |field: &'static str, found: u64, expected: u64| {
            if found == expected {
                Ok(())
            } else {
                Err(StripeError::Inconsistent { index, field, found, expected })
            }
        };
        agree("k", repr.layout.k() as u64, layout.k() as u64)?;
        agree("m", repr.layout.m() as u64, layout.m() as u64)?;
        agree("frame_len", repr.layout.frame_len() as u64, layout.frame_len() as u64)?;
        agree("key_hash", repr.key_hash, id.key_hash)?;
        agree("version", repr.version, id.version)?;
        let slot = &mut by_index[usize::from(index)];
        if *slot != usize::MAX {
            return Err(StripeError::Duplicate { index });
        }
        *slot = pos;
        header.verify_payload(frag.payload)?;
    }
    let have = by_index.iter().filter(|&&p| p != usize::MAX).count();
    if have < layout.k() {
        return Err(StripeError::TooFewFragments { have, need: layout.k() });
    }
    if out.len() < layout.data_len() {
        return Err(StripeError::BufferTooSmall { what: "output", len: out.len(), need: layout.data_len() });
    }

    let (k, f) = (layout.k(), layout.fragment_len());
    if f == 0 {
        return Ok((layout, id));
    }
    let out = &mut out[..layout.data_len()];
    for (i, chunk) in out.chunks_exact_mut(f).enumerate() {
        if by_index[i] != usize::MAX {
            chunk.copy_from_slice(fragments[by_index[i]].payload);
        }
    }
    if by_index[..k].iter().all(|&p| p != usize::MAX) {
        return Ok((layout, id));
    }

    // Sources: the first k fragments present, in index order; targets: the
    // missing data fragments, rebuilt straight into `out`.
    let mut source_ids = [0u8; FRAGMENTS_MAX];
    let mut sources: [&[u8]; FRAGMENTS_MAX] = [&[]; FRAGMENTS_MAX];
    let mut target_ids = [0u8; FRAGMENTS_MAX];
    let mut targets: [&mut [u8]; FRAGMENTS_MAX] = Default::default();
    let (mut ns, mut nt) = (0, 0);
    for (i, chunk) in out.chunks_exact_mut(f).enumerate() {
        if by_index[i] != usize::MAX {
            source_ids[ns] = i as u8;
            sources[ns] = chunk;
            ns += 1;
        } else {
            target_ids[nt] = i as u8;
            targets[nt] = chunk;
            nt += 1;
        }
    }
    for i in k..layout.fragments() {
        if ns == k {
            break;
        }
        if by_index[i] != usize::MAX {
            source_ids[ns] = i as u8;
            sources[ns] = fragments[by_index[i]].payload;
            ns += 1;
        }
    }
    rs.reconstruct(&source_ids[..ns], &sources[..ns], &target_ids[..nt], &mut targets[..nt])?;
    Ok((layout, id))
}

/// The codec must be the one the stripe was made with.
fn check_code(rs: &ReedSolomon, layout: &StripeLayout, index: u8) -> Result<(), StripeError> {
    for (field, found, expected) in [("k", layout.k(), rs.data_fragments()), ("m", layout.m(), rs.parity_fragments())] {
        if found != expected {
            return Err(StripeError::Inconsistent { index, field, found: found as u64, expected: expected as u64 });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: StripeId = StripeId { key_hash: 7, version: 9 };

    fn encoded(k: usize, m: usize, frame_len: usize) -> (ReedSolomon, StripeLayout, Vec<u8>, Vec<u8>) {
        let rs = ReedSolomon::new(k, m).unwrap();
        let layout = StripeLayout::new(k, m, frame_len).unwrap();
        let mut data: Vec<u8> = (0..layout.data_len()).map(|i| (i * 13 + 1) as u8).collect();
        let mut side = vec![0u8; layout.side_len()];
        encode_stripe(&rs, &layout, ID, &mut data, &mut side).unwrap();
        (rs, layout, data, side)
    }

    #[test]
    fn any_k_fragments_rebuild_the_frame() {
        let (mut rs, layout, data, side) = encoded(6, 3, 1000);
        let frame = data[..1000].to_vec();
        assert!(data[1000..].iter().all(|&b| b == 0), "padding is zeroed");
        for drop in [[0usize, 1, 2], [3, 7, 8], [0, 5, 6], [6, 7, 8]] {
            let frags: Vec<Fragment<'_>> =
                (0..9).filter(|i| !drop.contains(i)).map(|i| fragment(&layout, &data, &side, i)).collect();
            let mut out = vec![0xffu8; layout.data_len()];
            let (got, id) = decode_stripe(&mut rs, &frags, &mut out).unwrap();
            assert_eq!((got, id), (layout, ID));
            assert_eq!(&out[..1000], &frame[..], "dropped {drop:?}");
        }
    }

    #[test]
    fn too_few_duplicate_foreign_and_damaged_fragments_are_refused() {
        let (mut rs, layout, data, side) = encoded(4, 2, 300);
        let frag = |i| fragment(&layout, &data, &side, i);
        let mut out = vec![0u8; layout.data_len()];
        let err = decode_stripe(&mut rs, &[frag(0), frag(1), frag(5)], &mut out).unwrap_err();
        assert_eq!(err, StripeError::TooFewFragments { have: 3, need: 4 });
        let err = decode_stripe(&mut rs, &[frag(0), frag(1), frag(1), frag(5)], &mut out).unwrap_err();
        assert_eq!(err, StripeError::Duplicate { index: 1 });
        assert_eq!(
            decode_stripe(&mut rs, &[], &mut out).unwrap_err(),
            StripeError::TooFewFragments { have: 0, need: 4 }
        );

        // A fragment of another version of the same key.
        let mut other_data = data.clone();
        let mut other_side = side.clone();
        encode_stripe(&rs, &layout, StripeId { version: 10, ..ID }, &mut other_data, &mut other_side).unwrap();
        let foreign = fragment(&layout, &other_data, &other_side, 2);
        let err = decode_stripe(&mut rs, &[frag(0), frag(1), foreign, frag(5)], &mut out).unwrap_err();
        assert!(matches!(err, StripeError::Inconsistent { field: "version", index: 2, .. }), "{err}");

        // A damaged payload.
        let mut bad = frag(4).payload.to_vec();
        bad[3] ^= 1;
        let damaged = Fragment { header: frag(4).header, payload: &bad };
        let err = decode_stripe(&mut rs, &[frag(0), frag(1), frag(2), damaged], &mut out).unwrap_err();
        assert!(matches!(err, StripeError::PayloadChecksum { index: 4, .. }), "{err}");

        // A decoder of another code.
        let mut rs63 = ReedSolomon::new(6, 3).unwrap();
        let err = decode_stripe(&mut rs63, &[frag(0), frag(1), frag(2), frag(3)], &mut out).unwrap_err();
        assert!(matches!(err, StripeError::Inconsistent { field: "k", .. }), "{err}");
    }

    #[test]
    fn small_buffers_are_errors() {
        let rs = ReedSolomon::new(4, 2).unwrap();
        let layout = StripeLayout::new(4, 2, 300).unwrap();
        let mut data = vec![0u8; layout.data_len() - 1];
        let mut side = vec![0u8; layout.side_len()];
        let err = encode_stripe(&rs, &layout, ID, &mut data, &mut side).unwrap_err();
        assert!(matches!(err, StripeError::BufferTooSmall { what: "frame", .. }));
        let mut data = vec![0u8; layout.data_len()];
        let err = encode_stripe(&rs, &layout, ID, &mut data, &mut side[..10]).unwrap_err();
        assert!(matches!(err, StripeError::BufferTooSmall { what: "side", .. }));
    }
}
