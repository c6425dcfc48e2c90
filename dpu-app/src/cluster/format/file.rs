//! A cluster file: a 4096-byte header page naming what the file is and its geometry, then
//! the body (log slots, store sets, outcome entries), created atomically and never reset.
//!
//! The first 64 bytes of the header page have one layout for every kind of cluster file
//! (all integers little-endian):
//!
//! ```text
//!  0..8   magic (8 bytes, names the kind of file)
//!  8..12  format (u32, 1)
//! 12      first id (node, or writer of a log)   13  second id (holder of a log, or 0)
//! 14..16  zero
//! 16..    the geometry: `N` u32 parameters
//! 16+4N.. CRC32C of bytes 0..16+4N
//! ..64    zero
//! ```
//!
//! Bytes 64.. of the page belong to the file kind (the log keeps its applied sequence
//! there). Creation writes the header page and sizes the file under a temporary name, syncs
//! it, and links it into place: a crash leaves either no file or a whole header, and an
//! existing file is never overwritten, only validated by its owner.
#![forbid(unsafe_code)]

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use crate::limits::HEADER_PAGE_BYTES;

/// Format of the header page this build writes and reads.
pub const FORMAT: u32 = 1;
/// Bytes of the common part of the header page.
pub const COMMON_BYTES: usize = 64;

/// Byte ranges of the common header fields.
pub mod field {
    use std::ops::Range;
    /// Magic naming the kind of file.
    pub const MAGIC: Range<usize> = 0..8;
    /// Format version.
    pub const FORMAT: Range<usize> = 8..12;
    /// First id (node, or a log's writer).
    pub const ID0: usize = 12;
    /// Second id (a log's holder, else 0).
    pub const ID1: usize = 13;
    /// Zero.
    pub const ZERO: Range<usize> = 14..16;
    /// First geometry parameter; parameter `i` is at `PARAMS + 4 * i`.
    pub const PARAMS: usize = 16;
}

/// Why a header page is not a valid header of the expected kind.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HeaderError {
    /// The file is shorter than a header page.
    #[error("it is {len} bytes long, shorter than its {need}-byte header page")]
    Truncated {
        /// Bytes in the file.
        len: usize,
        /// Bytes of a header page.
        need: usize,
    },
    /// The magic is not the expected one: another kind of file.
    #[error("its magic is {found:?}, expected {expected:?}: it is another kind of file")]
    Magic {
        /// Magic found.
        found: [u8; 8],
        /// Magic expected.
        expected: [u8; 8],
    },
    /// A header of a format this build does not read.
    #[error("its header format is {found}; this build reads format {FORMAT}")]
    Format {
        /// Format found.
        found: u32,
    },
    /// The header checksum does not match: the header was damaged.
    #[error("its header checksum is {stored:#010x}, the bytes give {computed:#010x}: the header is damaged")]
    Checksum {
        /// Checksum in the header.
        stored: u32,
        /// Checksum of the bytes.
        computed: u32,
    },
    /// A byte that must be zero is not.
    #[error("its header byte {offset} is {value:#04x}, must be zero: the header is damaged or of a newer format")]
    NonZero {
        /// Offset of the byte.
        offset: usize,
        /// Its value.
        value: u8,
    },
}

/// The common header of a cluster file with `N` geometry parameters: what
/// [`FileHeader::emit`] writes and [`FileHeader::parse`] reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileHeader<const N: usize> {
    /// The two id bytes.
    pub ids: [u8; 2],
    /// The geometry parameters.
    pub params: [u32; N],
}

impl<const N: usize> FileHeader<N> {
    const CRC_AT: usize = field::PARAMS + 4 * N;
    const FITS: () = assert!(field::PARAMS + 4 * N + 4 <= COMMON_BYTES, "parameters fit the first line");

    /// Writes the header into the first [`COMMON_BYTES`] of `page`, zero-filling the rest of
    /// that line; panics (programmer error) if `page` is shorter.
    pub fn emit(&self, magic: &[u8; 8], page: &mut [u8]) {
        let () = Self::FITS;
        let b = &mut page[..COMMON_BYTES];
        b.fill(0);
        b[field::MAGIC].copy_from_slice(magic);
        b[field::FORMAT].copy_from_slice(&FORMAT.to_le_bytes());
        b[field::ID0] = self.ids[0];
        b[field::ID1] = self.ids[1];
        for (i, p) in self.params.iter().enumerate() {
            b[field::PARAMS + 4 * i..field::PARAMS + 4 * i + 4].copy_from_slice(&p.to_le_bytes());
        }
        let crc = crc32c::crc32c(&b[..Self::CRC_AT]);
        b[Self::CRC_AT..Self::CRC_AT + 4].copy_from_slice(&crc.to_le_bytes());
    }

    /// Reads and checks a header page from a file: its length, magic, format, checksum and
    /// zero bytes. Whether the ids and geometry are the expected ones is the caller's check.
    pub fn parse(magic: &[u8; 8], page: &[u8]) -> Result<Self, HeaderError> {
        let () = Self::FITS;
        if page.len() < HEADER_PAGE_BYTES {
            return Err(HeaderError::Truncated { len: page.len(), need: HEADER_PAGE_BYTES });
        }
        let found: [u8; 8] = page[field::MAGIC].try_into().expect("field is 8 bytes");
        if &found != magic {
            return Err(HeaderError::Magic { found, expected: *magic });
        }
        let format = le32(&page[field::FORMAT]);
        if format != FORMAT {
            return Err(HeaderError::Format { found: format });
        }
        let stored = le32(&page[Self::CRC_AT..Self::CRC_AT + 4]);
        let computed = crc32c::crc32c(&page[..Self::CRC_AT]);
        if stored != computed {
            return Err(HeaderError::Checksum { stored, computed });
        }
        let mut zero = field::ZERO.chain(Self::CRC_AT + 4..COMMON_BYTES);
        if let Some(offset) = zero.find(|&i| page[i] != 0) {
            return Err(HeaderError::NonZero { offset, value: page[offset] });
        }
        let mut params = [0u32; N];
        for (i, p) in params.iter_mut().enumerate() {
            *p = le32(&page[field::PARAMS + 4 * i..field::PARAMS + 4 * i + 4]);
        }
        Ok(Self { ids: [page[field::ID0], page[field::ID1]], params })
    }
}

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
pub(super) mod testing {
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

    const MAGIC: &[u8; 8] = b"PRSCTEST";

    /// The exact bytes before the checksum of a header with ids (3, 1) and parameters
    /// (64, 4160); the checksum (CRC32C of these 24 bytes) follows, then zeros.
    const GOLDEN: [u8; 24] = [
        b'P', b'R', b'S', b'C', b'T', b'E', b'S', b'T', // magic
        1, 0, 0, 0, // format
        3, 1, 0, 0, // ids, zero
        0x40, 0, 0, 0, // 64
        0x40, 0x10, 0, 0, // 4160
    ];

    fn golden() -> [u8; HEADER_PAGE_BYTES] {
        let mut page = [0u8; HEADER_PAGE_BYTES];
        page[..24].copy_from_slice(&GOLDEN);
        let crc = crc32c::crc32c(&GOLDEN);
        page[24..28].copy_from_slice(&crc.to_le_bytes());
        page
    }

    #[test]
    fn emit_writes_the_golden_bytes_and_parse_reads_them() {
        let header = FileHeader { ids: [3, 1], params: [64, 4160] };
        let mut page = [0xffu8; HEADER_PAGE_BYTES];
        header.emit(MAGIC, &mut page);
        assert_eq!(page[..COMMON_BYTES], golden()[..COMMON_BYTES]);
        assert_eq!(FileHeader::<2>::parse(MAGIC, &golden()).unwrap(), header);
    }

    #[test]
    fn damaged_headers_are_refused_with_the_matching_error() {
        let g = golden();
        assert!(matches!(FileHeader::<2>::parse(MAGIC, &g[..100]), Err(HeaderError::Truncated { len: 100, .. })));
        assert!(matches!(FileHeader::<2>::parse(b"PRSCOTHR", &g), Err(HeaderError::Magic { .. })));
        let mut b = g;
        b[8] = 2;
        assert_eq!(FileHeader::<2>::parse(MAGIC, &b), Err(HeaderError::Format { found: 2 }));
        for offset in 12..28 {
            let mut b = g;
            b[offset] ^= 0x01;
            assert!(matches!(FileHeader::<2>::parse(MAGIC, &b), Err(HeaderError::Checksum { .. })), "byte {offset}");
        }
        let mut b = g;
        b[40] = 7;
        assert_eq!(FileHeader::<2>::parse(MAGIC, &b), Err(HeaderError::NonZero { offset: 40, value: 7 }));
        // Bytes past the common line belong to the file kind.
        let mut b = g;
        b[64] = 7;
        assert!(FileHeader::<2>::parse(MAGIC, &b).is_ok());
    }

    #[test]
    fn creates_once_then_opens_what_exists() {
        let dir = TempDir::new("file-create");
        let path = dir.file("table");
        let page = golden();
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
