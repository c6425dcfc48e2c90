//! Readers of write traces: each yields the written keys, in order, as `u64`.
//!
//! - CloudPhysics CSV (`version,time,op,size,lbn`): rows with op `2a` (SCSI WRITE(10))
//!   are writes of key `lbn`; reads (`28`) and other ops are skipped.
//! - ARC `.lis` lines (`start_block block_count ignored request_id`), zstd-compressed
//!   when the name ends in `.zst`: each line is one write of key `start_block` (a
//!   request stands for one key-value write; see `models/traces/README.md`).
//! - Plain: one decimal key per line.

use std::io::Read;
use std::path::{Path, PathBuf};

use crate::error::ModelError;

/// Longest trace read, in writes: bounds the memory a trace takes (8 bytes a write).
pub const TRACE_WRITES_MAX: usize = 64 << 20;

/// How a trace file is laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum TraceFormat {
    /// CloudPhysics block-trace CSV; writes are op `2a`.
    Csv,
    /// ARC `.lis` (or `.lis.zst`): one write of `start_block` per line.
    Lis,
    /// One decimal key per line.
    Plain,
}

impl TraceFormat {
    /// The format implied by the file name: `.csv`, `.lis` / `.lis.zst`, else plain.
    pub fn from_path(path: &Path) -> Self {
        let name = path.file_name().map(|n| n.to_string_lossy().to_ascii_lowercase()).unwrap_or_default();
        if name.ends_with(".csv") {
            Self::Csv
        } else if name.ends_with(".lis") || name.ends_with(".lis.zst") {
            Self::Lis
        } else {
            Self::Plain
        }
    }
}

/// Where the traces are: `$PRESCIENT_TRACES`, else the ones shipped in the repository
/// (`models/traces/`, with their sources and citation condition in its README).
pub fn traces_dir() -> PathBuf {
    match std::env::var_os("PRESCIENT_TRACES") {
        Some(dir) => PathBuf::from(dir),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("traces"),
    }
}

/// Reads the whole trace at `path` (zstd-decompressed if its name ends in `.zst`).
pub fn read_trace(path: &Path, format: TraceFormat) -> Result<Vec<u64>, ModelError> {
    let io = |source| ModelError::Io { action: "read", path: path.to_path_buf(), source };
    let raw = std::fs::read(path).map_err(io)?;
    let text = if path.extension().is_some_and(|e| e == "zst") {
        let mut out = Vec::new();
        ruzstd::decoding::StreamingDecoder::new(raw.as_slice())
            .map_err(|e| ModelError::TraceDecode { path: path.to_path_buf(), what: e.to_string() })?
            .read_to_end(&mut out)
            .map_err(|e| ModelError::TraceDecode { path: path.to_path_buf(), what: e.to_string() })?;
        out
    } else {
        raw
    };
    let text = std::str::from_utf8(&text).map_err(|e| ModelError::TraceParse {
        path: path.to_path_buf(),
        line: 1 + text[..e.valid_up_to()].iter().filter(|&&b| b == b'\n').count(),
        what: "not UTF-8 text".into(),
    })?;
    parse_trace(text, format).map_err(|(line, what)| ModelError::TraceParse { path: path.to_path_buf(), line, what })
}

/// Parses trace text; an error names the one-based line and what is wrong with it.
pub fn parse_trace(text: &str, format: TraceFormat) -> Result<Vec<u64>, (usize, String)> {
    let mut keys = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let key = match format {
            TraceFormat::Csv => {
                if n == 1 && line.starts_with("version") {
                    continue;
                }
                let cols: Vec<&str> = line.split(',').collect();
                if cols.len() != 5 {
                    return Err((n, format!("expected 5 comma-separated columns, found {}", cols.len())));
                }
                if !cols[2].eq_ignore_ascii_case("2a") {
                    continue;
                }
                cols[4].parse::<u64>().map_err(|e| (n, format!("lbn {:?}: {e}", cols[4])))?
            }
            TraceFormat::Lis => {
                let first = line.split_ascii_whitespace().next().unwrap_or("");
                first.parse::<u64>().map_err(|e| (n, format!("start_block {first:?}: {e}")))?
            }
            TraceFormat::Plain => line.parse::<u64>().map_err(|e| (n, format!("key {line:?}: {e}")))?,
        };
        if keys.len() == TRACE_WRITES_MAX {
            return Err((n, format!("more than {TRACE_WRITES_MAX} writes; split the trace")));
        }
        keys.push(key);
    }
    Ok(keys)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_keeps_writes_only() {
        let text = "version,time,op,size,lbn\n1,5,2a,512,42\n1,6,28,512,43\n1,7,2A,512,44\n";
        assert_eq!(parse_trace(text, TraceFormat::Csv).unwrap(), [42, 44]);
    }

    #[test]
    fn lis_takes_start_block() {
        assert_eq!(parse_trace("7 8 0 0\n9 1 0 1\n", TraceFormat::Lis).unwrap(), [7, 9]);
    }

    #[test]
    fn errors_name_the_line() {
        assert_eq!(parse_trace("1\n2\nx\n", TraceFormat::Plain).unwrap_err().0, 3);
        assert_eq!(parse_trace("1,2,2a\n", TraceFormat::Csv).unwrap_err().0, 1);
    }

    #[test]
    fn format_from_name() {
        assert_eq!(TraceFormat::from_path(Path::new("a/OLTP.lis.zst")), TraceFormat::Lis);
        assert_eq!(TraceFormat::from_path(Path::new("x.CSV")), TraceFormat::Csv);
        assert_eq!(TraceFormat::from_path(Path::new("keys.txt")), TraceFormat::Plain);
    }
}
