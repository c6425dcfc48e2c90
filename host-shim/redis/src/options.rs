//! The module's load arguments: `--loadmodule libprescient_redis.so region=PATH
//! [name=value ...]`.

use std::path::PathBuf;
use std::time::Duration;

use prescient_shim::RegionConfig;

/// What the module was loaded with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    /// The shared region file the DPU app serves (created if missing; attached if a
    /// previous Redis left it).
    pub region: PathBuf,
    /// Sizes of a region this module creates (ignored when attaching).
    pub config: RegionConfig,
    /// The queue pair this Redis submits on.
    pub queue_pair: u32,
    /// Silence of the DPU app after which writes fail with `UNAVAILABLE`.
    pub dpu_timeout: Duration,
    /// Longest a client waits for a completion before its reply is `TIMEOUT`.
    pub reply_timeout: Duration,
    /// Lock the region in memory.
    pub pin: bool,
}

/// What the module's arguments say, line by line, for `MODULE LOAD` errors.
pub const USAGE: &str = "region=PATH (required) ring_entries=N host_buffers=N dpu_buffers=N buffer_bytes=N \
                         directory_slots=N queue_pairs=N queue_pair=N dpu_timeout_ms=N reply_timeout_ms=N pin=yes|no";

impl Options {
    /// Parses `name=value` arguments.
    pub fn parse<'a>(args: impl IntoIterator<Item = &'a str>) -> Result<Self, String> {
        let mut config = RegionConfig {
            queue_pairs: 1,
            ring_entries: 1024,
            host_buffers: 2048,
            dpu_buffers: 256,
            buffer_bytes: 8192,
            directory_slots: 65_536,
        };
        let mut region = None;
        let mut queue_pair = 0;
        let mut dpu_timeout = Duration::from_millis(prescient_shim::config::DPU_TIMEOUT_MS_DEFAULT);
        let mut reply_timeout = Duration::from_secs(30);
        let mut pin = false;
        for arg in args {
            let Some((name, value)) = arg.split_once('=') else {
                return Err(format!("argument '{arg}' is not name=value; the module takes {USAGE}"));
            };
            let number = || value.parse::<u32>().map_err(|_| format!("{name}={value}: not a whole number"));
            match name {
                "region" => region = Some(PathBuf::from(value)),
                "ring_entries" => config.ring_entries = number()?,
                "host_buffers" => config.host_buffers = number()?,
                "dpu_buffers" => config.dpu_buffers = number()?,
                "buffer_bytes" => config.buffer_bytes = number()?,
                "directory_slots" => config.directory_slots = number()?,
                "queue_pairs" => config.queue_pairs = number()?,
                "queue_pair" => queue_pair = number()?,
                "dpu_timeout_ms" => dpu_timeout = Duration::from_millis(number()?.into()),
                "reply_timeout_ms" => reply_timeout = Duration::from_millis(number()?.into()),
                "pin" => {
                    pin = match value {
                        "yes" => true,
                        "no" => false,
                        _ => return Err(format!("pin={value}: say yes or no")),
                    }
                }
                _ => return Err(format!("unknown argument '{name}'; the module takes {USAGE}")),
            }
        }
        let region = region.ok_or_else(|| format!("region=PATH is missing; the module takes {USAGE}"))?;
        if queue_pair >= config.queue_pairs {
            return Err(format!("queue_pair={queue_pair}, but the region has queue_pairs={}", config.queue_pairs));
        }
        Ok(Self { region, config, queue_pair, dpu_timeout, reply_timeout, pin })
    }
}
