//! `prescient-bindings`: foreign-function interfaces for the real hardware.
//!
//! RDMA verbs (through a maintained libibverbs wrapper) and, behind a cargo feature,
//! DOCA (bindgen against an installed DOCA SDK). The default build needs neither
//! rdma-core nor DOCA, so that CPU-emulation mode builds anywhere.
#![deny(unsafe_code)]

/// libibverbs through `sideway` (feature `verbs`): loaded at run time, so a binary built
/// with it starts on hosts without rdma-core and reports the missing device itself.
#[cfg(feature = "verbs")]
pub use sideway;

/// What sideway does not give without cost: raw verbs behind a small surface.
#[cfg(feature = "verbs")]
pub mod verbs;
