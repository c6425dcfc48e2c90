//! Striping: Reed-Solomon(k, m) erasure coding of sealed frames into fragments.
//!
//! Layers, lowest first: [`gf`] (field and matrices), [`kernel`] (SIMD dot
//! products, the only `unsafe` here), [`rs`] (the code over equal-length
//! fragments), [`layout`] and [`header`] (the stripe's shape and the checked
//! on-wire header), and [`fragments`] (frame to fragments and back, in place in a
//! write's buffers).
//!
//! Kernels ([`kernel`]): GFNI `vgf2p8affineqb` on zmm or ymm, split-table
//! `vpshufb` on zmm or ymm (x86-64), NEON `tbl` (aarch64), portable table look-ups
//! elsewhere; chosen at start-up from CPUID by [`Backend::detect`].

mod error;
pub mod fragments;
pub mod gf;
pub mod header;
pub mod kernel;
pub mod layout;
pub mod rs;

pub use error::StripeError;
pub use fragments::{decode_stripe, encode_stripe, fragment, Fragment, StripeId};
pub use header::{FragmentHeader, HeaderRepr, HEADER_LEN};
pub use kernel::Backend;
pub use layout::StripeLayout;
pub use rs::ReedSolomon;
