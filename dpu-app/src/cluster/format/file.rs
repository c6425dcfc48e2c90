//! A cluster file: a 4096-byte header page naming what the file is and its geometry, then
//! the body (log slots, store sets, outcome entries), created atomically and never reset.
//!
//! The first 64 bytes of the header page have one layout for every kind of cluster file,
//! defined once in the shim ([`prescient_shim::file_header`], re-exported here), where
//! the host's feed reader checks the same header this app writes. Bytes 64.. of the page
//! belong to the file kind (the log keeps its applied sequence there).
//!
//! Creation writes the header page and sizes the file under a temporary name, syncs it,
//! and links it into place: a crash leaves either no file or a whole header, and an
//! existing file is never overwritten, only validated by its owner.
#![forbid(unsafe_code)]

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use crate::limits::HEADER_PAGE_BYTES;

// The common header (magic, format, ids, geometry, CRC32C) is the shim's, so that the
// host's feed reader and these files cannot drift apart.
pub use prescient_shim::file_header::{field, FileHeader, HeaderError, COMMON_BYTES, FORMAT};

pub(super) fn le32(b: &[u8]) -> u32 {
    u32::from_le_bytes(b.try_into().expect("field is 4 bytes"))
}

pub(super) fn le64(b: &[u8]) -> u64 {
    u64::from_le_bytes(b.try_into().expect("field is 8 bytes"))
}

/// A cluster file, opened for reading and writing.
pub(super) enum Opened {
    /// The file did not exist and was created with the given header page and length.
    Created(File),
    /// The file existed: its header page (or as much of it as the file holds) and length,
    /// for the owner to validate.
    Existing {
        /// The open file.
        file: File,
        /// Up to [`HEADER_PAGE_BYTES`] bytes from its start.
        page: Vec<u8>,
        /// Its length in bytes.
        len: u64,
    },
}

/// What failed while opening or creating a cluster file, and the OS error.
#[derive(Debug)]
pub(super) struct FileIoError {
    /// What was being done ("create", "read the header page of", ...).
    pub action: &'static str,
    /// The OS error.
    pub source: io::Error,
}

fn step<T>(action: &'static str, r: io::Result<T>) -> Result<T, FileIoError> {
    r.map_err(|source| FileIoError { action, source })
}

/// Opens the cluster file at `path`, or creates it as `page` followed by a sparse body so
/// that it is `file_bytes` long. An existing file is returned unchanged for validation.
pub(super) fn open_or_create(path: &Path, page: &[u8], file_bytes: u64) -> Result<Opened, FileIoError> {
    debug_assert_eq!(page.len(), HEADER_PAGE_BYTES);
    // Two tries: if another process creates the file between our look and our link, the
    // second try opens what it made.
    for _ in 0..2 {
        match OpenOptions::new().read(true).write(true).open(path) {
            Ok(file) => return existing(file),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return step("open", Err(e)),
        }
        let tmp = temp_path(path);
        let created = create_at(&tmp, page, file_bytes).and_then(|file| match fs::hard_link(&tmp, path) {
            Ok(()) => Ok(Some(file)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(None),
            Err(e) => step("link into place", Err(e)),
        });
        let _ = fs::remove_file(&tmp);
        if let Some(file) = created? {
            sync_dir(path)?;
            return Ok(Opened::Created(file));
        }
    }
    step("open", OpenOptions::new().read(true).write(true).open(path)).and_then(existing)
}

fn existing(mut file: File) -> Result<Opened, FileIoError> {
    let len = step("read the length of", file.metadata())?.len();
    let mut page = Vec::with_capacity(HEADER_PAGE_BYTES);
    step("read the header page of", (&mut file).take(HEADER_PAGE_BYTES as u64).read_to_end(&mut page))?;
    Ok(Opened::Existing { file, page, len })
}

fn create_at(tmp: &Path, page: &[u8], file_bytes: u64) -> Result<File, FileIoError> {
    let mut file = step("create", OpenOptions::new().read(true).write(true).create(true).truncate(true).open(tmp))?;
    step("write the header page of", file.write_all(page))?;
    step("size", file.set_len(file_bytes))?;
    let allocated = super::preallocate::allocate(&file, file_bytes).map_err(|e| {
        if e.raw_os_error() != Some(libc::ENOSPC) {
            return e;
        }
        // A full disk: say how much the file needs, how much there is, and what to change.
        let free = super::preallocate::free_bytes(tmp).map_or("unknown".to_string(), |b| b.to_string());
        io::Error::new(
            e.kind(),
            format!(
                "{e}: the file needs {file_bytes} bytes and its filesystem has {free} free; free space there, \
                 point the node's data_dir elsewhere, or lower store_bytes, log_slots or outcome_entries in the cluster file"
            ),
        )
    });
    step("allocate the blocks of", allocated)?;
    step("sync", file.sync_all())?;
    Ok(file)
}

fn temp_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().map(|n| n.to_os_string()).unwrap_or_default();
    name.push(format!(".creating-{}", std::process::id()));
    path.with_file_name(name)
}

fn sync_dir(path: &Path) -> Result<(), FileIoError> {
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    step("sync the directory of", File::open(dir).and_then(|d| d.sync_all()))
}

/// Rounds `n` up to a multiple of `align` (a power of two), or `None` on overflow.
pub(super) fn round_up(n: u64, align: u64) -> Option<u64> {
    debug_assert!(align.is_power_of_two());
    Some(n.checked_add(align - 1)? & !(align - 1))
}

#[cfg(test)]
pub(crate) mod testing {
    //! A temporary directory per test, removed when the test ends.
    use std::path::{Path, PathBuf};

    /// A fresh directory under the system's temporary directory.
    pub struct TempDir(PathBuf);

    impl TempDir {
        /// Creates (after removing any leftover) a directory named for the test.
        pub fn new(name: &str) -> Self {
            let dir = std::env::temp_dir().join(format!("prescient-cluster-{name}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            Self(dir)
        }

        /// A path inside the directory.
        pub fn file(&self, name: &str) -> PathBuf {
            self.0.join(name)
        }

        /// The directory.
        pub fn path(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::testing::TempDir;
    use super::*;

    /// A header page to create a file with (open_or_create does not validate it).
    fn header_page() -> [u8; HEADER_PAGE_BYTES] {
        let mut page = [0u8; HEADER_PAGE_BYTES];
        FileHeader { ids: [3, 1], params: [64, 4160] }.emit(b"PRSCTEST", &mut page);
        page
    }

    #[test]
    fn creates_once_then_opens_what_exists() {
        let dir = TempDir::new("file-create");
        let path = dir.file("table");
        let page = header_page();
        let Opened::Created(file) = open_or_create(&path, &page, 3 * 4096).unwrap() else {
            panic!("a missing file is created");
        };
        assert_eq!(file.metadata().unwrap().len(), 3 * 4096);
        // A second open finds the file and its header, and leaves no temporary file.
        match open_or_create(&path, &[0u8; HEADER_PAGE_BYTES], 5 * 4096).unwrap() {
            Opened::Existing { page: found, len, .. } => {
                assert_eq!(found, page.to_vec());
                assert_eq!(len, 3 * 4096);
            }
            Opened::Created(_) => panic!("an existing file is never recreated"),
        }
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
        // A short file is reported as it is, not grown or reset.
        std::fs::write(&path, b"short").unwrap();
        match open_or_create(&path, &page, 3 * 4096).unwrap() {
            Opened::Existing { page: found, len, .. } => assert_eq!((found.as_slice(), len), (&b"short"[..], 5)),
            Opened::Created(_) => panic!("an existing file is never recreated"),
        }
    }

    #[test]
    fn round_up_rounds_to_the_alignment() {
        assert_eq!(round_up(0, 64), Some(0));
        assert_eq!(round_up(1, 64), Some(64));
        assert_eq!(round_up(4160, 64), Some(4160));
        assert_eq!(round_up(u64::MAX, 64), None);
    }
}
