//! The error type of `prescient-dpu`: every entry point (serving regions, starting a
//! node, the in-process cluster and its runs, the soak, the benchmarks) returns
//! [`Error`]. A variant says what was being done and with what (a path, a node, an
//! option); its source, where it has one, says what went wrong underneath, in the
//! error type of the layer that found it (a file format, a codec, the fabric, the
//! shim). The binary prints the whole chain, one cause a line ([`Report`]).
//!
//! The layers' own error enums stay typed because callers act on them: a full store
//! (`StoreError::Full`) turns into an `Overloaded` completion, a refused hello is
//! counted, a tampered fragment is skipped by a GET. Only what stops a run travels up
//! as an [`Error`].

use std::fmt;
use std::path::PathBuf;

use crate::cluster::config::ConfigError;
use crate::cluster::format::control::ControlFileError;
use crate::cluster::format::fates::FateError;
use crate::cluster::format::feed::FeedError;
use crate::cluster::format::ledger::LedgerError;
use crate::cluster::format::log::LogError;
use crate::cluster::format::outcome::OutcomeError;
use crate::cluster::format::store::StoreError;
use crate::cluster::hlc::HlcError;
use crate::cluster::order::OrderError;
use crate::cluster::protocol::mailbox::RendezvousError;
use crate::fabric::FabricError;
use crate::seal::SealError;
use crate::stripe::StripeError;

/// What stopped `prescient-dpu` (or one of its regions, nodes or runs).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The region could not be mapped or is not one this build speaks.
    #[error("cannot attach region {path}")]
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
    /// The host region does not fit the cluster.
    #[error("region {path} does not fit this cluster: {why}")]
    Region {
        /// The region.
        path: PathBuf,
        /// What is wrong and what to do.
        why: String,
    },
    /// A region's node could not start (the others are served).
    #[error("{}", start_failed(.path, .source))]
    RegionStart {
        /// The region.
        path: PathBuf,
        /// Why.
        #[source]
        source: Box<Error>,
    },
    /// A region's data folder would be another region's.
    #[error(
        "region {path}: its data folder {dir} is also that of region {other}, given before; give the region files different names"
    )]
    SharedDataDir {
        /// The region refused.
        path: PathBuf,
        /// The folder.
        dir: PathBuf,
        /// The region that has it.
        other: PathBuf,
    },
    /// No region given could be served; each one's reason.
    #[error("none of the {} regions can be served; fix or remove each:{}", .failures.len(), list(.failures))]
    NoRegionServed {
        /// Why each region was refused.
        failures: Vec<Error>,
    },
    /// Installing the signal handler failed.
    #[error("cannot install the {signal} handler")]
    Signal {
        /// Which.
        signal: &'static str,
        /// Why.
        source: std::io::Error,
    },
    /// `serve --metrics ADDR`: ADDR is not an address to listen on.
    #[error(
        "--metrics {addr} is not an address to listen on; give HOST:PORT, e.g. 127.0.0.1:9464 (port 0 picks a free port)"
    )]
    MetricsAddress {
        /// What was given.
        addr: String,
        /// Why it does not resolve.
        source: std::io::Error,
    },
    /// `serve --metrics ADDR`: the listener could not be opened there.
    #[error(
        "cannot listen for metrics on {addr}; stop what listens there, or give --metrics another port (port 0 picks a free one) or an address of this machine"
    )]
    MetricsBind {
        /// The address.
        addr: std::net::SocketAddr,
        /// The OS error (e.g. address in use).
        source: std::io::Error,
    },
    /// A file or folder could not be used.
    #[error("cannot {what} {path}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// The path.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The cluster configuration is wrong.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The fabric refused a resource.
    #[error("the fabric refused a resource")]
    Fabric(#[source] FabricError),
    /// Keys or the key epoch.
    #[error(transparent)]
    Seal(#[from] SealError),
    /// The erasure code.
    #[error(transparent)]
    Stripe(#[from] StripeError),
    /// A fragment log.
    #[error(transparent)]
    Log(#[from] LogError),
    /// The fragment store.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The outcome table.
    #[error(transparent)]
    Outcome(#[from] OutcomeError),
    /// The version floor.
    #[error(transparent)]
    Hlc(#[from] HlcError),
    /// The node's control block file.
    #[error(transparent)]
    Control(#[from] ControlFileError),
    /// The node's fate ring (sequencer mode).
    #[error(transparent)]
    Fates(#[from] FateError),
    /// The node's stamp ledger (sequencer mode).
    #[error(transparent)]
    Ledger(#[from] LedgerError),
    /// The node's change feed (sequencer mode).
    #[error(transparent)]
    Feed(#[from] FeedError),
    /// The applied cursor kept in the fate ring is no stamp.
    #[error("the applied cursor in the fate ring is wrong ({0}): the file was damaged; move the node's data folder away to start it afresh")]
    Order(OrderError),
    /// Connection setup.
    #[error(transparent)]
    Rendezvous(#[from] RendezvousError),
    /// The predictor model.
    #[error("predictor model {path}")]
    Model {
        /// The file.
        path: PathBuf,
        /// Why.
        source: prescient_models::ModelError,
    },
    /// An access trace is unreadable (a missing one is not an error: a run falls back
    /// to a synthetic stream).
    #[error("trace {path}")]
    Trace {
        /// The trace.
        path: PathBuf,
        /// Why.
        source: prescient_models::ModelError,
    },
    /// A host call of a run failed (queue pair, arena, ring).
    #[error("node {node}'s host")]
    Host {
        /// The node.
        node: u8,
        /// The shim's error.
        source: prescient_shim::ShimError,
    },
    /// The nodes did not all connect in time.
    #[error("the cluster's nodes did not all connect within {seconds} s (network model: {network}); the machine may be overloaded, or the timings do not fit the latency")]
    NotConnected {
        /// Seconds waited.
        seconds: u64,
        /// The network model's name.
        network: &'static str,
    },
    /// The nodes never granted their hosts a directory lease, so readers could not use
    /// the cache directory.
    #[error("node {node} never granted its host a directory lease within {seconds} s; lease_us may be too short for the network model's latency")]
    NoLease {
        /// The node.
        node: u8,
        /// Seconds waited.
        seconds: u64,
    },
    /// An option is out of range.
    #[error("{option} = {value}: {allowed}")]
    Option {
        /// The option.
        option: &'static str,
        /// The value given.
        value: String,
        /// What is allowed.
        allowed: String,
    },
    /// The soak's cluster of processes could not be set up or did not come back.
    #[error("soak: {what}")]
    Soak {
        /// What failed, with the processes' last log lines.
        what: String,
    },
    /// A benchmark's cluster did not get where the measurement needs it.
    #[error("bench: {0}; the machine may be overloaded: run it again on a quieter one")]
    Bench(String),
}

impl Error {
    /// The soak's cluster failed: `what`, with the processes' last log lines.
    pub fn soak(what: String) -> Self {
        Self::Soak { what }
    }
}

impl From<FabricError> for Error {
    fn from(e: FabricError) -> Self {
        Self::Fabric(e)
    }
}

/// A region's start failure: an attach error names the region already; every other is
/// prefixed with it.
fn start_failed(path: &std::path::Path, e: &Error) -> String {
    match e {
        Error::Attach { .. } | Error::AlreadyServed { .. } | Error::Region { .. } => Report(e).to_string(),
        _ => format!("region {}: {}", path.display(), Report(e)),
    }
}

fn list(failures: &[Error]) -> String {
    failures.iter().map(|e| format!("\n  {}", Report(e))).collect()
}

/// An error and every cause beneath it, for people: `Display` writes them on one line
/// joined by `: `; the alternate form (`{:#}`) writes one cause a line.
pub struct Report<'a>(pub &'a (dyn std::error::Error + 'static));

impl fmt::Display for Report<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)?;
        let mut shown = self.0.to_string();
        let mut cause = self.0.source();
        while let Some(c) = cause {
            let text = c.to_string();
            // Layers whose message already quotes their source (`{source}`) would
            // otherwise print it twice.
            if !shown.contains(&text) {
                if f.alternate() {
                    write!(f, "\n  caused by: {text}")?;
                } else {
                    write!(f, ": {text}")?;
                }
                shown = text;
            }
            cause = c.source();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_names_every_cause_once() {
        let e = Error::Io {
            what: "create",
            path: "/nowhere/x".into(),
            source: std::io::Error::new(std::io::ErrorKind::NotFound, "no such folder"),
        };
        assert_eq!(e.to_string(), "cannot create /nowhere/x");
        assert_eq!(Report(&e).to_string(), "cannot create /nowhere/x: no such folder");
        assert_eq!(format!("{:#}", Report(&e)), "cannot create /nowhere/x\n  caused by: no such folder");
    }
}
