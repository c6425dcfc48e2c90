//! `prescient-dpu fill`: fills one node's fragment store toward millions of keys, as a
//! holder does (each key's fragment of a real Reed-Solomon stripe, inserted Pending
//! then committed), and reports the write rate as it fills, where the store first
//! refuses a write, and the memory its index takes per key.
//!
//! The store is the one a node of a cluster with these `k`, `m` and value size opens:
//! the same geometry, file and preallocation. Values are random bytes, not sealed
//! frames (sealing is the writer's work, not the store's), striped with the node's code.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::cluster::config::ClusterConfig;
use crate::cluster::format::entry::Outcome;
use crate::cluster::format::record::RecordRepr;
use crate::cluster::format::store::{Inserted, Store, StoreError};
use crate::cluster::protocol::node::{store_bytes_for_keys, store_geometry};
use crate::sim::rng::Rng;
use crate::stripe::{encode_stripe, fragment, ReedSolomon, StripeId, StripeLayout};

/// What to fill.
#[derive(Clone, Debug)]
pub struct FillOptions {
    /// Keys to write (each once).
    pub keys: u64,
    /// Bytes of each value.
    pub value_bytes: usize,
    /// Data and parity fragments of the code.
    pub k: usize,
    /// Parity fragments.
    pub m: usize,
    /// Folder of the store file (created; the file is removed at the end unless `keep`).
    pub dir: PathBuf,
    /// Store file size; None: sized for `keys` at half load, or what the disk allows.
    pub store_bytes: Option<u64>,
    /// Keep the store file.
    pub keep: bool,
}

/// Share of the free disk space a store sized by the fill may take.
const DISK_SHARE: f64 = 0.8;
/// Share of the available memory it may take: a node registers its whole store for
/// RDMA READ, which pins it on a real NIC, and even the emulated fabric's page-cache
/// mapping slows down by orders of magnitude once the store outgrows memory (every
/// insert a random page).
const MEMORY_SHARE: f64 = 0.6;

/// Bytes of memory available (`MemAvailable` of `/proc/meminfo`).
fn available_memory() -> Result<u64, String> {
    let text = std::fs::read_to_string("/proc/meminfo").map_err(|e| format!("cannot read /proc/meminfo: {e}"))?;
    text.lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))
        .and_then(|v| v.trim().strip_suffix("kB"))
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(|kb| kb * 1024)
        .ok_or_else(|| "/proc/meminfo has no MemAvailable line".to_owned())
}
/// Progress lines per fill.
const REPORTS: u64 = 20;

/// Runs the fill and prints its progress and summary.
pub fn run(opts: &FillOptions) -> Result<(), String> {
    std::fs::create_dir_all(&opts.dir).map_err(|e| format!("cannot create {}: {e}", opts.dir.display()))?;
    let path = opts.dir.join("store.prstore");
    let _ = std::fs::remove_file(&path);
    let mut config = ClusterConfig::in_process(opts.k + opts.m, opts.k, opts.m, &opts.dir);
    config.value_bytes_max = opts.value_bytes;
    let wanted = store_bytes_for_keys(&config, opts.keys).map_err(|e| e.to_string())? as u64;
    let free = crate::cluster::format::preallocate::free_bytes(&opts.dir)
        .map_err(|e| format!("cannot read the free space of {}: {e}", opts.dir.display()))?;
    let memory = available_memory()?;
    let (disk_cap, memory_cap) = ((free as f64 * DISK_SHARE) as u64, (memory as f64 * MEMORY_SHARE) as u64);
    let store_bytes = match opts.store_bytes {
        Some(b) => b,
        None if wanted <= disk_cap.min(memory_cap) => wanted,
        None => {
            let (cap, what, share, have) = if memory_cap < disk_cap {
                (memory_cap, "memory available", MEMORY_SHARE, memory)
            } else {
                (disk_cap, "disk space free", DISK_SHARE, free)
            };
            println!(
                "{:.1} GB of {what}: the store gets {:.1} GB ({:.0} % of it), not the {:.1} GB that {} keys at \
                 half load need; the fill goes on until the store refuses (--store-bytes sets the size)",
                have as f64 / 1e9,
                cap as f64 / 1e9,
                share * 100.0,
                wanted as f64 / 1e9,
                opts.keys
            );
            cap
        }
    };
    config.store_bytes = usize::try_from(store_bytes).map_err(|_| "store_bytes does not fit usize".to_owned())?;
    let geometry = store_geometry(&config).map_err(|e| e.to_string())?;
    let layout =
        StripeLayout::new(opts.k, opts.m, opts.value_bytes + crate::seal::FRAME_OVERHEAD).map_err(|e| e.to_string())?;
    let rs = ReedSolomon::new(opts.k, opts.m).map_err(|e| e.to_string())?;
    let opened = Instant::now();
    let store = Store::open(&path, 0, geometry).map_err(|e| e.to_string())?;
    let usage = store.usage();
    println!(
        "store {}: {:.2} GB, {} sets x {} ways = {} records of {} bytes (one {}-byte fragment of a {}-byte \
         value, RS({}, {})); created in {:.1} s",
        path.display(),
        geometry.file_bytes() as f64 / 1e9,
        geometry.sets(),
        geometry.ways(),
        usage.records,
        geometry.record_bytes(),
        layout.fragment_len(),
        opts.value_bytes,
        opts.k,
        opts.m,
        opened.elapsed().as_secs_f64()
    );

    let mut data = vec![0u8; layout.data_len()];
    let mut side = vec![0u8; layout.side_len()];
    // Keys as SHA-256 prefixes are, uniform in every bit: SplitMix64 outputs are distinct
    // for distinct states, so no key repeats. Values: another stream.
    let (mut keys, mut bytes) = (Rng::new(0x5eed), Rng::new(0x2545_f491_4f6c_dd1d));
    let every = (opts.keys / REPORTS).max(1);
    let start = Instant::now();
    let (mut window_start, mut window_store) = (start, Duration::ZERO);
    let mut store_time = Duration::ZERO;
    let mut written = 0u64;
    let mut refusal = None;
    println!(
        "{:>12} {:>8} {:>12} {:>12} {:>11} {:>9} {:>9}",
        "keys", "seconds", "keys/s", "store us/key", "records in use", "spilled", "index B/key"
    );
    for i in 0..opts.keys {
        let key_hash = keys.next_u64();
        for chunk in data[..layout.frame_len()].chunks_mut(8) {
            chunk.copy_from_slice(&bytes.next_u64().to_le_bytes()[..chunk.len()]);
        }
        let stamp = (i + 1) << 8;
        encode_stripe(&rs, &layout, StripeId { key_hash, version: stamp }, &mut data, &mut side)
            .map_err(|e| e.to_string())?;
        let frag = fragment(&layout, &data, &side, 0);
        let record = RecordRepr {
            writer: 1,
            fragment_index: 0,
            key_hash,
            stamp,
            write_seq: i + 1,
            fragment_len: frag.payload.len() as u32,
            tombstone: false,
            incarnation: 1,
        };
        let t = Instant::now();
        match store.insert(&record, frag.header, frag.payload) {
            Ok(Inserted::Stored { .. }) => {}
            Ok(other) => return Err(format!("key {i}: the store answered {other:?} to a new key")),
            Err(e @ StoreError::Full { .. }) => {
                refusal = Some(e);
                break;
            }
            Err(e) => return Err(e.to_string()),
        }
        store.resolve(key_hash, stamp, Outcome::Committed).map_err(|e| e.to_string())?;
        let spent = t.elapsed();
        store_time += spent;
        window_store += spent;
        written += 1;
        if written % every == 0 || written == opts.keys {
            let now = Instant::now();
            let keys = every.min(written) as f64;
            let u = store.usage();
            println!(
                "{:>12} {:>8.1} {:>12.0} {:>12.2} {:>13.1} % {:>8.2} % {:>9.1}",
                written,
                (now - start).as_secs_f64(),
                keys / (now - window_start).as_secs_f64(),
                window_store.as_secs_f64() * 1e6 / keys,
                100.0 * u.live as f64 / u.records as f64,
                100.0 * u.spilled as f64 / u.live.max(1) as f64,
                u.index_bytes as f64 / written as f64
            );
            (window_start, window_store) = (now, Duration::ZERO);
        }
    }
    let elapsed = start.elapsed();
    let u = store.usage();
    println!(
        "\nwrote {written} keys in {:.1} s: {:.0} keys/s ({:.2} us of store time a key, {:.0} MB/s of records)",
        elapsed.as_secs_f64(),
        written as f64 / elapsed.as_secs_f64(),
        store_time.as_secs_f64() * 1e6 / written.max(1) as f64,
        written as f64 * f64::from(geometry.record_bytes()) / elapsed.as_secs_f64() / 1e6
    );
    println!(
        "index in memory: {:.1} MB (record heads and set heads) = {:.1} bytes a key written, {:.1} a record of room",
        u.index_bytes as f64 / 1e6,
        u.index_bytes as f64 / written.max(1) as f64,
        u.index_bytes as f64 / u.records as f64
    );
    match refusal {
        Some(e) => println!(
            "first refusal after {written} keys, at {:.1} % of the records in use ({:.2} % of them in spill sets):\n  {e}",
            100.0 * u.live as f64 / u.records as f64,
            100.0 * u.spilled as f64 / u.live.max(1) as f64
        ),
        None => println!(
            "no refusal: {:.1} % of the records in use, {:.2} % of them in spill sets",
            100.0 * u.live as f64 / u.records as f64,
            100.0 * u.spilled as f64 / u.live.max(1) as f64
        ),
    }
    drop(store);
    if opts.keep {
        println!("kept {}", path.display());
    } else {
        std::fs::remove_file(&path).map_err(|e| format!("cannot remove {}: {e}", path.display()))?;
    }
    Ok(())
}
