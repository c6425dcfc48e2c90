//! The key epoch, bumped and persisted at every start so that a restarted node
//! never reuses a nonce.
//!
//! The file holds 8 bytes: the epoch (u32 LE) and its CRC32C (u32 LE). It is
//! replaced atomically (write a temporary file, fsync, rename, fsync the
//! directory), so a crash leaves either the old or the new epoch, both safe
//! because the new epoch is on disk before any nonce of it is used.

use std::fs;
use std::io::Write;
use std::path::Path;

use super::SealError;

/// Reads the epoch in `path` (none yet counts as 0), writes back the next one
/// durably and returns it. A damaged file is an error, never a reset.
pub fn bump_epoch(path: &Path) -> Result<u32, SealError> {
    let io = |source| SealError::EpochIo { path: path.to_owned(), source };
    let previous = match fs::read(path) {
        Ok(bytes) => parse(path, &bytes)?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
        Err(e) => return Err(io(e)),
    };
    let next = previous.checked_add(1).ok_or_else(|| SealError::EpochExhausted { path: path.to_owned() })?;
    let mut bytes = [0u8; 8];
    bytes[..4].copy_from_slice(&next.to_le_bytes());
    let crc = crc32c::crc32c(&bytes[..4]);
    bytes[4..].copy_from_slice(&crc.to_le_bytes());

    let tmp = path.with_extension("tmp");
    let mut file = fs::File::create(&tmp).map_err(io)?;
    file.write_all(&bytes).map_err(io)?;
    file.sync_all().map_err(io)?;
    drop(file);
    fs::rename(&tmp, path).map_err(io)?;
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    fs::File::open(dir).and_then(|d| d.sync_all()).map_err(io)?;
    Ok(next)
}

fn parse(path: &Path, bytes: &[u8]) -> Result<u32, SealError> {
    let corrupt = |reason| SealError::EpochCorrupt { path: path.to_owned(), reason };
    let bytes: [u8; 8] = bytes.try_into().map_err(|_| corrupt("not 8 bytes long"))?;
    let epoch = u32::from_le_bytes(bytes[..4].try_into().expect("4 bytes"));
    let crc = u32::from_le_bytes(bytes[4..].try_into().expect("4 bytes"));
    if crc != crc32c::crc32c(&bytes[..4]) {
        return Err(corrupt("checksum mismatch"));
    }
    Ok(epoch)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("prescient-epoch-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn every_start_gets_a_new_persisted_epoch() {
        let dir = temp_dir("bump");
        let path = dir.join("epoch");
        assert_eq!(bump_epoch(&path).unwrap(), 1);
        assert_eq!(bump_epoch(&path).unwrap(), 2);
        assert_eq!(bump_epoch(&path).unwrap(), 3);
        let bytes = fs::read(&path).unwrap();
        assert_eq!(&bytes[..4], &3u32.to_le_bytes());
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn damaged_or_exhausted_epoch_files_are_refused() {
        let dir = temp_dir("bad");
        let path = dir.join("epoch");
        fs::write(&path, [1, 2, 3]).unwrap();
        assert!(matches!(bump_epoch(&path), Err(SealError::EpochCorrupt { reason: "not 8 bytes long", .. })));
        bump_epoch(&dir.join("fresh")).unwrap();
        let mut good = fs::read(dir.join("fresh")).unwrap();
        good[0] ^= 4;
        fs::write(&path, &good).unwrap();
        assert!(matches!(bump_epoch(&path), Err(SealError::EpochCorrupt { reason: "checksum mismatch", .. })));
        let mut last = [0xffu8; 8];
        let crc = crc32c::crc32c(&last[..4]);
        last[4..].copy_from_slice(&crc.to_le_bytes());
        fs::write(&path, last).unwrap();
        assert!(matches!(bump_epoch(&path), Err(SealError::EpochExhausted { .. })));
        fs::remove_dir_all(dir).unwrap();
    }
}
