//! One-node clusters, one per region: `prescient-dpu serve --emulate --region A
//! --region B ...` without `--config`.
//!
//! Each region is served by a cluster of one node ([`ClusterConfig::single_node`]:
//! RS(1, 0), quorum 1) on the in-process fabric: the same write path, GET path and
//! cache-directory invalidation as a replicated cluster, with the node as the one
//! holder of every value, durable in its own files. Those live in the region's data
//! folder: `<region>.prescient` beside the region file, or `<data-dir>/<region file
//! name>` with `--data-dir`; its sealing keys in `keys/` there (a random key is made on
//! first start) unless `--key-dir` names a folder shared by every region.
//!
//! Regions are failure domains: one whose node cannot start (not a region, served by
//! another live DPU app, its files unusable, ...) is refused with an error naming its
//! path and the others are served; only when none can be does the DPU app exit,
//! listing each ([`Error::NoRegionServed`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use prescient_shim::config::VALUE_OFFSET;
use prescient_shim::descriptor::ArenaShape;
use prescient_shim::region::Region;
use prescient_shim::RegionConfig;

use super::inprocess::{ClusterClock, MonotonicClock};
use super::rendezvous::LocalBoard;
use crate::cluster::config::ClusterConfig;
use crate::cluster::protocol::node::{Node, NodeSetup};
use crate::error::Report;
use crate::fabric::emu::{EmuNode, ModelConfig, Network};
use crate::limits::FRAGMENT_ALIGN;
use crate::metrics::Metrics;
use crate::Error;

/// Default size of each region's fragment store file (`--store-bytes`): 64 MiB, about
/// 17,000 records of the largest value 4 KiB buffers carry (3712 bytes; a record is the
/// value plus 104 bytes, rounded up to 64), so about 8,500 keys at half load.
pub const STORE_BYTES_DEFAULT: usize = 64 << 20;
/// What `<region>` becomes in the name of its default data folder, beside it.
pub const DATA_DIR_SUFFIX: &str = ".prescient";

/// How to serve regions with one-node clusters.
#[derive(Debug, Clone)]
pub struct ServeRegions {
    /// Region files, one per host process.
    pub regions: Vec<PathBuf>,
    /// Folder holding one data folder per region (named for the region file); `None`:
    /// each region's data folder is `<region>.prescient`, beside it.
    pub data_dir: Option<PathBuf>,
    /// Sealing keys of every region (`<id>.key` files); `None`: `keys/` in each
    /// region's data folder, made with one random key on first start.
    pub key_dir: Option<PathBuf>,
    /// A predictor model: predicted keys are pre-invalidated in the host's directory.
    pub model: Option<PathBuf>,
    /// Largest PUT value; `None`: the largest the region's buffers carry sealed.
    pub value_bytes_max: Option<usize>,
    /// Bytes of each region's fragment store file.
    pub store_bytes: usize,
    /// Lock the regions in memory.
    pub pin: bool,
    /// Time without a host heartbeat after which its buffers are reclaimed.
    pub host_timeout: Duration,
    /// Answer `GET /metrics` on this `HOST:PORT` (port 0: a free one, printed).
    pub metrics: Option<String>,
}

/// The data folder of the one-node cluster serving `region`: `<data_dir>/<file name>`,
/// or `<region>.prescient` without a `data_dir`.
pub fn data_dir_for(region: &Path, data_dir: Option<&Path>) -> PathBuf {
    let name = region.file_name().map_or_else(|| "region".into(), |n| n.to_string_lossy().into_owned());
    match data_dir {
        Some(dir) => dir.join(name),
        None => region.with_file_name(format!("{name}{DATA_DIR_SUFFIX}")),
    }
}

/// The largest value a region of `config` carries through a one-node cluster: it fits
/// the buffer with its tailroom (the arena's own limit), and sealed (a 32-byte trailer)
/// and padded to a whole fragment it fits the bytes after the value's offset.
pub fn value_bytes_max_for(config: &RegionConfig) -> usize {
    let arena = ArenaShape { host_buffers: config.host_buffers, buffer_bytes: config.buffer_bytes }.value_bytes_max();
    let room = (config.buffer_bytes as usize).saturating_sub(VALUE_OFFSET);
    let sealed = (room / FRAGMENT_ALIGN * FRAGMENT_ALIGN).saturating_sub(crate::seal::FRAME_OVERHEAD);
    arena.min(sealed)
}

/// The one-node clusters serving the regions that could be served.
pub struct ServedRegions {
    nodes: Vec<Node<EmuNode>>,
    /// Each node's in-process network (it has no peer on it; kept for its lifetime).
    _networks: Vec<Network>,
    refused: Vec<Error>,
}

impl std::fmt::Debug for ServedRegions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServedRegions").field("nodes", &self.nodes.len()).field("refused", &self.refused).finish()
    }
}

impl ServedRegions {
    /// Starts a one-node cluster for every region of `opts` that can be served; each
    /// one that cannot is refused with an error naming it (logged, and listed in the
    /// summary). Fails only if none can be, listing each one's reason.
    pub fn start(opts: &ServeRegions, clock: &ClusterClock) -> Result<Self, Error> {
        let mut served = Self { nodes: Vec::new(), _networks: Vec::new(), refused: Vec::new() };
        let mut dirs: Vec<(PathBuf, &Path)> = Vec::with_capacity(opts.regions.len());
        for path in &opts.regions {
            let dir = data_dir_for(path, opts.data_dir.as_deref());
            let started = match dirs.iter().find(|(d, _)| *d == dir) {
                Some((_, other)) => {
                    Err(Error::SharedDataDir { path: path.clone(), dir: dir.clone(), other: other.into() })
                }
                None => start_one(opts, path, &dir, clock)
                    .map_err(|source| Error::RegionStart { path: path.clone(), source: Box::new(source) }),
            };
            dirs.push((dir, path));
            match started {
                Ok((node, network)) => {
                    served.nodes.push(node);
                    served._networks.push(network);
                }
                Err(e) => {
                    tracing::error!(region = %path.display(), "{}; serving the other regions", Report(&e));
                    served.refused.push(e);
                }
            }
        }
        if served.nodes.is_empty() {
            return Err(Error::NoRegionServed { failures: served.refused });
        }
        Ok(served)
    }

    /// The nodes, one per region served.
    pub fn nodes(&self) -> &[Node<EmuNode>] {
        &self.nodes
    }

    /// The nodes, to poll.
    pub fn nodes_mut(&mut self) -> &mut [Node<EmuNode>] {
        &mut self.nodes
    }

    /// The regions refused, with why.
    pub fn refused(&self) -> &[Error] {
        &self.refused
    }

    /// Detaches from every region cleanly.
    pub fn detach(&self) {
        for node in &self.nodes {
            node.detach();
        }
    }

    /// The serve summary: the totals over every region (with `sleeps`, the loop's futex
    /// sleeps), then a line for every region refused at attach and for every region
    /// that had descriptors refused or queue pairs fenced, then each node's figures.
    pub fn summary(&self, sleeps: u64) -> String {
        let mut total = Metrics::default();
        for node in &self.nodes {
            total.add(node.metrics());
        }
        total.sleeps = sleeps;
        let mut s = total.summary();
        for e in &self.refused {
            s.push_str(&format!("\n  refused at attach: {}", Report(e)));
        }
        for node in &self.nodes {
            let door = node.door();
            if door.refused().total() == 0 && door.fences() == 0 {
                continue;
            }
            s.push_str(&format!(
                "\n  region {}: {} descriptors refused ({}); {} queue pairs fenced",
                node.region().path().display(),
                door.refused().total(),
                door.refused().describe().unwrap_or_else(|| "none".into()),
                door.fences()
            ));
        }
        for node in &self.nodes {
            let figures = node.stats().render(node.id(), &[]);
            s.push_str(&format!("\n  region {}, one-node cluster:", node.region().path().display()));
            for line in figures.lines() {
                s.push_str(&format!("\n    {line}"));
            }
        }
        s
    }
}

/// Starts the one-node cluster of `region`, its files in `dir`.
fn start_one(
    opts: &ServeRegions,
    region: &Path,
    dir: &Path,
    clock: &ClusterClock,
) -> Result<(Node<EmuNode>, Network), Error> {
    // The value limit follows from the region's buffers: a look at its header first.
    let shape =
        Region::open(region, false).map_err(|source| Error::Attach { path: region.into(), source })?.layout().config;
    let key_dir = match &opts.key_dir {
        Some(keys) => keys.clone(),
        None => {
            let keys = dir.join("keys");
            if crate::seal::keys::create_key_dir(&keys).map_err(Error::Seal)? {
                tracing::info!(region = %region.display(), keys = %keys.display(), "made a sealing key");
            }
            keys
        }
    };
    let value_bytes_max = opts.value_bytes_max.unwrap_or_else(|| value_bytes_max_for(&shape));
    let config =
        ClusterConfig::single_node(dir.to_owned(), key_dir, opts.model.clone(), value_bytes_max, opts.store_bytes);
    config.validate().map_err(Error::Config)?;
    let network = Network::new(ModelConfig::ideal(), Arc::new(MonotonicClock)).map_err(Error::Fabric)?;
    let fabric = Arc::new(network.node().map_err(Error::Fabric)?);
    let mailbox = LocalBoard::new(1).pop().expect("a board of one node has its mailbox");
    let node = Node::start(NodeSetup {
        config: Arc::new(config),
        id: 0,
        fabric,
        region: region.to_owned(),
        pin: opts.pin,
        host_timeout: opts.host_timeout,
        mailbox: Box::new(mailbox),
        now: clock.now(),
    })?;
    tracing::info!(region = %region.display(), data_dir = %dir.display(), value_bytes_max, "serving as a one-node cluster");
    Ok((node, network))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stripe::StripeLayout;

    #[test]
    fn a_regions_data_folder_is_beside_it_or_named_for_it_under_data_dir() {
        let region = Path::new("/dev/shm/kv-0");
        assert_eq!(data_dir_for(region, None), PathBuf::from("/dev/shm/kv-0.prescient"));
        assert_eq!(data_dir_for(region, Some(Path::new("/var/lib/p"))), PathBuf::from("/var/lib/p/kv-0"));
    }

    #[test]
    fn the_value_limit_is_the_largest_value_the_buffers_carry_sealed_and_striped() {
        for buffer_bytes in [1024u32, 4096, 4096 + 40, 8192, 65536] {
            let config = RegionConfig { buffer_bytes, ..RegionConfig::default() };
            let max = value_bytes_max_for(&config);
            let fits = |v: usize| {
                let layout = StripeLayout::new(1, 0, v + crate::seal::FRAME_OVERHEAD).unwrap();
                VALUE_OFFSET + layout.data_len() <= buffer_bytes as usize
                    && layout.side_len() <= buffer_bytes as usize
                    && v <= ArenaShape { host_buffers: 1, buffer_bytes }.value_bytes_max()
            };
            assert!(fits(max) && !fits(max + 1), "{buffer_bytes}-byte buffers: {max}");
        }
        assert_eq!(value_bytes_max_for(&RegionConfig { buffer_bytes: 4096, ..RegionConfig::default() }), 3712);
    }

    #[test]
    fn the_default_store_holds_what_its_doc_says() {
        let dir = PathBuf::from("/nonexistent");
        let config = ClusterConfig::single_node(dir.clone(), dir, None, 3712, STORE_BYTES_DEFAULT);
        let geometry = crate::cluster::protocol::node::store_geometry(&config).unwrap();
        let records = geometry.sets() * geometry.ways();
        assert!((16_000..=18_000).contains(&records), "{records} records of {} bytes", geometry.record_bytes());
    }

    #[test]
    fn a_one_node_cluster_gets_back_what_was_put_and_refuses_a_region_it_cannot_serve() {
        use prescient_shim::{Host, HostOptions, Request, Status};
        use std::sync::atomic::{AtomicBool, Ordering};
        let base = std::env::temp_dir().join(format!("prescient-one-node-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(&base).unwrap();
        let config = RegionConfig {
            queue_pairs: 1,
            ring_entries: 16,
            host_buffers: 16,
            dpu_buffers: 4,
            buffer_bytes: 4096,
            directory_slots: 64,
        };
        let path = base.join("region");
        let host = Host::create(&path, config, HostOptions { pin: false, ..HostOptions::default() }).unwrap();
        let garbage = base.join("not-a-region");
        std::fs::write(&garbage, vec![0u8; 8192]).unwrap();
        let opts = ServeRegions {
            regions: vec![garbage.clone(), path.clone()],
            data_dir: Some(base.join("data")),
            key_dir: None,
            model: None,
            value_bytes_max: None,
            store_bytes: 1 << 20,
            pin: false,
            host_timeout: Duration::from_secs(10),
            metrics: None,
        };
        let stop = AtomicBool::new(false);
        let summary = std::thread::scope(|s| {
            let dpu = s.spawn(|| super::super::process::serve_regions(&opts, &stop));
            host.wait_for_dpu(Duration::from_secs(20)).expect("served");
            let mut qp = host.queue_pair(0).unwrap();
            let wait_one = |qp: &mut prescient_shim::QueuePair| {
                let mut got = None;
                while got.is_none() {
                    qp.wait(Duration::from_secs(10), |c| got = Some(c)).unwrap();
                }
                got.unwrap()
            };
            let mut buf = host.take_buffer().unwrap();
            buf.value_mut()[..11].copy_from_slice(b"hello world");
            qp.submit(Request::put(b"greeting", buf, 11).user_data(1)).map_err(|(e, _)| e).unwrap();
            let put = wait_one(&mut qp);
            assert_eq!((put.user_data, put.status), (1, Status::Ok));
            qp.submit(Request::get(b"greeting", host.take_buffer().unwrap()).user_data(2)).map_err(|(e, _)| e).unwrap();
            let got = wait_one(&mut qp);
            assert_eq!((got.user_data, got.status, got.version), (2, Status::Ok, put.version));
            let value = qp.take_value(&got).unwrap();
            assert_eq!(&*value, b"hello world");
            stop.store(true, Ordering::Relaxed);
            dpu.join().unwrap().unwrap()
        });
        assert!(summary.contains("completed 2 requests (2 ok)"), "{summary}");
        assert!(summary.contains("refused at attach") && summary.contains("not-a-region"), "{summary}");
        assert!(base.join("data/region/keys/1.key").exists() && base.join("data/region/store.prstore").exists());
        std::fs::remove_dir_all(&base).unwrap();
    }
}
