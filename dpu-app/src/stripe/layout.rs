//! Where a stripe's pieces lie: the k data fragments cut from the sealed frame,
//! zero-padded to k equal 64-byte-multiple fragments, and the side buffer holding
//! the k + m fragment headers followed by the m parity fragments.

use super::StripeError;
use crate::limits::{FRAGMENTS_MAX, FRAGMENT_ALIGN, FRAME_LEN_MAX};

/// Bytes of a fragment header (its fields: `header::field`). The side buffer holds
/// k + m of them before the parity fragments.
pub const HEADER_LEN: usize = 40;

/// The shape of one stripe. Built only through [`StripeLayout::new`], so its
/// fields always satisfy 1 <= k, k + m <= 32, frame_len <= [`FRAME_LEN_MAX`] and
/// `fragment_len == round_up(ceil(frame_len / k), 64)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StripeLayout {
    k: u8,
    m: u8,
    frame_len: u32,
    fragment_len: u32,
}

impl StripeLayout {
    /// The layout of a `frame_len`-byte sealed frame under RS(k, m).
    pub fn new(k: usize, m: usize, frame_len: usize) -> Result<Self, StripeError> {
        if k == 0 || k + m > FRAGMENTS_MAX {
            return Err(StripeError::Shape { k, m, max: FRAGMENTS_MAX });
        }
        if frame_len > FRAME_LEN_MAX {
            return Err(StripeError::FrameTooLarge { len: frame_len, max: FRAME_LEN_MAX });
        }
        let fragment_len = frame_len.div_ceil(k).next_multiple_of(FRAGMENT_ALIGN);
        // Casts are lossless: k + m <= 32 and fragment_len <= FRAME_LEN_MAX < 2^32.
        Ok(Self { k: k as u8, m: m as u8, frame_len: frame_len as u32, fragment_len: fragment_len as u32 })
    }

    /// Data fragments.
    pub fn k(&self) -> usize {
        usize::from(self.k)
    }

    /// Parity fragments.
    pub fn m(&self) -> usize {
        usize::from(self.m)
    }

    /// All fragments, k + m.
    pub fn fragments(&self) -> usize {
        self.k() + self.m()
    }

    /// Bytes of the sealed frame.
    pub fn frame_len(&self) -> usize {
        self.frame_len as usize
    }

    /// Bytes of every fragment (a multiple of 64).
    pub fn fragment_len(&self) -> usize {
        self.fragment_len as usize
    }

    /// Bytes the k data fragments cover in the frame buffer: the frame plus its
    /// zero padding.
    pub fn data_len(&self) -> usize {
        self.k() * self.fragment_len()
    }

    /// Bytes at the start of the side buffer for the k + m headers (rounded up
    /// to 64 so parity fragments start aligned).
    pub fn headers_len(&self) -> usize {
        (self.fragments() * HEADER_LEN).next_multiple_of(FRAGMENT_ALIGN)
    }

    /// Bytes of side buffer a stripe needs: headers, then m parity fragments.
    pub fn side_len(&self) -> usize {
        self.headers_len() + self.m() * self.fragment_len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fragments_are_aligned_and_cover_the_frame() {
        let l = StripeLayout::new(4, 2, 1000).unwrap();
        assert_eq!(l.fragment_len(), 256);
        assert_eq!(l.data_len(), 1024);
        assert_eq!(l.headers_len(), 256);
        assert_eq!(l.side_len(), 256 + 512);
        let l = StripeLayout::new(10, 4, 32).unwrap();
        assert_eq!((l.fragment_len(), l.data_len()), (64, 640));
        let l = StripeLayout::new(3, 0, 0).unwrap();
        assert_eq!((l.fragment_len(), l.side_len()), (0, 128));
    }

    #[test]
    fn out_of_range_layouts_are_errors() {
        assert!(matches!(StripeLayout::new(0, 1, 10), Err(StripeError::Shape { .. })));
        assert!(matches!(StripeLayout::new(20, 13, 10), Err(StripeError::Shape { .. })));
        assert!(matches!(StripeLayout::new(4, 2, FRAME_LEN_MAX + 1), Err(StripeError::FrameTooLarge { .. })));
    }
}
