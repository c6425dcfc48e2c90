//! Giving a cluster file all of its blocks when it is created.
//!
//! The fragment store, logs and outcome table are mapped and written in place. Left
//! sparse, a write into a hole on a full disk is a SIGBUS rather than an error, and every
//! first touch of a hole faults in a fresh page on the data path (measured: about a
//! third of a loaded node's CPU on a new store). `posix_fallocate` settles both at
//! creation, where a full disk is a clear error.
#![allow(unsafe_code)]

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;

/// Allocates `len` bytes of blocks for `file` (a filesystem that cannot preallocate
/// leaves it sparse).
pub(super) fn allocate(file: &File, len: u64) -> io::Result<()> {
    let len = libc::off_t::try_from(len).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: posix_fallocate reads and writes no memory of ours; the descriptor stays
    // open, owned by `file`, for the whole call.
    let rc = unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, len) };
    match rc {
        0 => Ok(()),
        libc::EOPNOTSUPP | libc::EINVAL => Ok(()),
        e => Err(io::Error::from_raw_os_error(e)),
    }
}

/// Bytes free to an unprivileged writer on the filesystem holding `path`: where a
/// run's files fit.
pub(crate) fn free_bytes(path: &std::path::Path) -> io::Result<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c_path = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path holds a NUL byte"))?;
    let mut stat = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: `c_path` is a NUL-terminated string alive for the call, and `stat` points
    // to writable memory of the size statvfs fills; it is read only after success.
    let rc = unsafe { libc::statvfs(c_path.as_ptr(), stat.as_mut_ptr()) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: statvfs returned 0, so it initialised the whole struct.
    let stat = unsafe { stat.assume_init() };
    Ok(stat.f_bavail.saturating_mul(stat.f_frsize))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn a_preallocated_file_has_its_blocks() {
        let dir = std::env::temp_dir().join(format!("prescient-prealloc-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("f");
        let file = std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(true).open(&path).unwrap();
        file.set_len(1 << 20).unwrap();
        allocate(&file, 1 << 20).unwrap();
        let meta = std::fs::metadata(&path).unwrap();
        // st_blocks counts 512-byte units; a filesystem that cannot preallocate is the
        // one case left sparse (none of the ones CI runs on).
        assert!(meta.blocks() * 512 >= 1 << 20, "blocks {} for 1 MiB", meta.blocks());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn free_bytes_reads_the_filesystem_and_refuses_a_missing_path() {
        let dir = std::env::temp_dir().join(format!("prescient-free-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        assert!(free_bytes(&dir).unwrap() > 0);
        assert!(free_bytes(&dir.join("absent/deeper")).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
