//! The DPU app's error type for serving regions.

use std::path::PathBuf;

/// What can stop the DPU app from serving a region.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DpuError {
    /// The region could not be mapped or is not one this build speaks.
    #[error("cannot attach region {path}: {source}")]
    Attach {
        /// The region.
        path: PathBuf,
        /// Why.
        source: prescient_shim::ShimError,
    },
    /// Another live DPU app serves the region.
    #[error("region {path} is already served by live prescient-dpu process {pid}: stop it first")]
    AlreadyServed {
        /// The region.
        path: PathBuf,
        /// The other DPU app.
        pid: u32,
    },
    /// Installing the signal handler failed.
    #[error("cannot install the {signal} handler: {source}")]
    Signal {
        /// Which.
        signal: &'static str,
        /// Why.
        source: std::io::Error,
    },
}
