//! Write versions from a hybrid logical clock that only moves forward, across restarts too.
//!
//! A write's version is `max(now_us, last + 1)`: wall-clock microseconds (passed in by
//! the caller, never read here) when the clock is ahead, one more than the last version
//! this node issued or saw otherwise. [`Hlc::observe`] moves `last` up to versions seen
//! from other nodes, so a node's next write orders after every write it has seen. A
//! version has 56 bits (the cache-directory slot word keeps 56 bits of version); the
//! [`Stamp`] carried in fragment headers and completions is `version << 8 | node`, so
//! stamps of different nodes never tie.
//!
//! A restart must never reissue a version, whatever the wall clock does. The node keeps
//! a persisted *floor* ([`HlcFloor`]): no version above it is ever issued. It reserves
//! versions ahead: when the versions (or the clock) come within one second of
//! microseconds of the floor, [`Hlc::reservation_due`] asks the caller to persist a floor
//! two seconds ahead, so persisting happens at most once per second of versions and off
//! the write's critical path; should the floor ever be reached before that is durable,
//! [`Hlc::next`] refuses rather than issue an unreserved version. A restarted node starts
//! from the floor on disk: every version it issues is above every version its
//! predecessor could have issued.
//!
//! Invariants: versions issued by one `Hlc` strictly increase; every issued version is
//! at most the persisted floor and at most [`VERSION_MAX`].

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::limits::VERSION_MAX;
use crate::limits::{NODES_MAX, SLOT_VERSION_BITS, STAMP_NODE_BITS};

/// One step of reservation: versions track microseconds, so this is one second of them.
pub const RESERVE_STEP_US: u64 = 1_000_000;
/// How far ahead of the versions a reservation reaches (two steps: a reservation is due
/// when less than one step is left, so each one buys at least a step of versions).
pub const RESERVE_AHEAD_US: u64 = 2 * RESERVE_STEP_US;

const _: () = assert!(SLOT_VERSION_BITS + STAMP_NODE_BITS == 64, "a stamp is one u64");
const _: () = assert!(NODES_MAX <= 1 << STAMP_NODE_BITS);
const _: () = assert!(RESERVE_AHEAD_US > RESERVE_STEP_US && RESERVE_AHEAD_US < VERSION_MAX);

/// Why a version could not be issued, observed or kept.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HlcError {
    /// The 56-bit version space is used up.
    #[error("node {node}: version {last} is the last of the 56-bit version space; no further write can be ordered (a peer or the clock sent versions to the end of the space: check the node clocks)")]
    Exhausted {
        /// This node.
        node: u8,
        /// The last version issued or observed.
        last: u64,
    },
    /// The next version lies above the persisted floor.
    #[error("node {node}: version {version} lies above the persisted floor {floor}; persist a floor of at least {version} (HlcFloor::persist, then Hlc::floor_persisted) before issuing it")]
    Unreserved {
        /// This node.
        node: u8,
        /// The version that would have been issued.
        version: u64,
        /// The floor known to be durable.
        floor: u64,
    },
    /// A peer sent a version that does not fit the 56-bit field.
    #[error(
        "observed version {version:#x} exceeds the 56-bit version space (max {max:#x}); the sender is misbehaving"
    )]
    VersionOutOfRange {
        /// The version.
        version: u64,
        /// [`VERSION_MAX`].
        max: u64,
    },
    /// The floor file could not be read or written.
    #[error("version floor file {path}: {source}; check the data folder's permissions and free space")]
    FloorIo {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The floor file exists but is damaged.
    #[error("version floor file {path} is damaged ({reason}); refusing to guess a floor, since a floor too low reissues versions: restore the file, or write one with a floor above every version this node issued")]
    FloorCorrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: &'static str,
    },
    /// A floor beyond the version space.
    #[error("version floor {floor:#x} exceeds the 56-bit version space (max {max:#x})")]
    FloorOutOfRange {
        /// The floor.
        floor: u64,
        /// [`VERSION_MAX`].
        max: u64,
    },
}

/// A write's stamp: `version << 8 | node`. Ordered by version, then node, so the stamps
/// of all nodes form one total order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Stamp(u64);

impl Stamp {
    /// The stamp of `version` written by `node`, or `None` if `version` exceeds
    /// [`VERSION_MAX`].
    pub const fn new(version: u64, node: u8) -> Option<Stamp> {
        if version > VERSION_MAX {
            None
        } else {
            Some(Stamp(version << STAMP_NODE_BITS | node as u64))
        }
    }

    /// A stamp as carried on the wire (every u64 is one).
    pub const fn from_raw(raw: u64) -> Stamp {
        Stamp(raw)
    }

    /// The u64 carried on the wire (little-endian in fragment headers and completions).
    pub const fn raw(self) -> u64 {
        self.0
    }

    /// The version (at most [`VERSION_MAX`]).
    pub const fn version(self) -> u64 {
        self.0 >> STAMP_NODE_BITS
    }

    /// The node that issued it.
    pub const fn node(self) -> u8 {
        self.0 as u8
    }
}

impl std::fmt::Display for Stamp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "v{}@n{}", self.version(), self.node())
    }
}

/// One node's hybrid logical clock.
///
/// ```
/// use prescient_dpu::cluster::hlc::Hlc;
/// let mut hlc = Hlc::new(2, 0);
/// let due = hlc.reservation_due(1_000).unwrap(); // persist it with HlcFloor::persist, then:
/// hlc.floor_persisted(due);
/// let a = hlc.next(1_000).unwrap();
/// let b = hlc.next(900).unwrap(); // the clock went backwards; the version did not
/// assert!(b > a && b.version() == 1_001 && b.node() == 2);
/// ```
#[derive(Debug)]
pub struct Hlc {
    node: u8,
    /// The last version issued or observed.
    last: u64,
    /// The highest floor known to be durable: no issued version exceeds it.
    persisted: u64,
    /// The highest floor handed out by `reservation_due` (>= `persisted`).
    requested: u64,
}

impl Hlc {
    /// A clock for `node` starting from `floor`, the floor persisted by the previous run
    /// (0 for a new node): its first version is above `floor` and at least the clock's
    /// time, as if `last` started at `max(floor, now)`.
    ///
    /// # Panics
    /// If `node` is not below [`NODES_MAX`] or `floor` exceeds [`VERSION_MAX`]: both come
    /// from a checked configuration and a checked floor file.
    pub fn new(node: u8, floor: u64) -> Self {
        assert!(usize::from(node) < NODES_MAX, "node id {node} out of range");
        assert!(floor <= VERSION_MAX, "floor {floor} beyond the version space");
        Self { node, last: floor, persisted: floor, requested: floor }
    }

    /// The version of the next write at wall-clock time `now_us`: `max(now_us, last + 1)`.
    /// Fails when that is above the persisted floor (persist first; see
    /// [`Hlc::reservation_due`]) or past the 56-bit space.
    pub fn next(&mut self, now_us: u64) -> Result<Stamp, HlcError> {
        if self.last >= VERSION_MAX {
            return Err(HlcError::Exhausted { node: self.node, last: self.last });
        }
        let version = now_us.min(VERSION_MAX).max(self.last + 1);
        if version > self.persisted {
            return Err(HlcError::Unreserved { node: self.node, version, floor: self.persisted });
        }
        self.last = version;
        Ok(Stamp(version << STAMP_NODE_BITS | u64::from(self.node)))
    }

    /// Moves `last` up to `version`, seen from another node, so that this node's next
    /// version orders after it. A version outside the 56-bit space is refused.
    pub fn observe(&mut self, version: u64) -> Result<(), HlcError> {
        if version > VERSION_MAX {
            return Err(HlcError::VersionOutOfRange { version, max: VERSION_MAX });
        }
        self.last = self.last.max(version);
        Ok(())
    }

    /// The floor to persist now, if one is due: when `max(last, now_us)` is within
    /// [`RESERVE_STEP_US`] of the highest floor already persisted or requested, the
    /// floor `max(last, now_us) + RESERVE_AHEAD_US`. Returns each floor once; persist it
    /// with [`HlcFloor::persist`] and report it with [`Hlc::floor_persisted`]. Call it
    /// after each write or on a timer: it costs two comparisons when nothing is due.
    pub fn reservation_due(&mut self, now_us: u64) -> Option<u64> {
        let reached = self.last.max(now_us.min(VERSION_MAX));
        if self.requested == VERSION_MAX || reached.saturating_add(RESERVE_STEP_US) < self.requested {
            return None;
        }
        self.requested = reached.saturating_add(RESERVE_AHEAD_US).min(VERSION_MAX);
        Some(self.requested)
    }

    /// Reports that `floor` is durable: versions up to it may now be issued.
    pub fn floor_persisted(&mut self, floor: u64) {
        self.persisted = self.persisted.max(floor.min(VERSION_MAX));
        self.requested = self.requested.max(self.persisted);
    }

    /// The last version issued or observed.
    pub fn last(&self) -> u64 {
        self.last
    }

    /// The floor known to be durable.
    pub fn persisted_floor(&self) -> u64 {
        self.persisted
    }

    /// This clock's node.
    pub fn node(&self) -> u8 {
        self.node
    }
}

/// Byte ranges of the 16-byte floor file.
mod field {
    use std::ops::Range;
    /// `b"PHLC"`.
    pub const MAGIC: Range<usize> = 0..4;
    /// The floor (u64 LE).
    pub const FLOOR: Range<usize> = 4..12;
    /// CRC32C of bytes 0..12 (u32 LE).
    pub const CRC: Range<usize> = 12..16;
    /// File length.
    pub const LEN: usize = 16;
}

const MAGIC: &[u8; 4] = b"PHLC";

/// The persisted version floor of one node: a 16-byte file (magic `PHLC`, the floor as
/// u64 LE, CRC32C of both as u32 LE), replaced atomically (write a temporary file, fsync,
/// rename, fsync the folder), so a crash leaves the old floor or the new one, and a
/// version is issued only after a floor at least as high is on disk.
#[derive(Debug)]
pub struct HlcFloor {
    path: PathBuf,
    floor: u64,
}

impl HlcFloor {
    /// Reads the floor in `path`; no file yet means a new node (floor 0). A damaged file
    /// is an error, never a reset.
    pub fn open(path: &Path) -> Result<Self, HlcError> {
        let floor = match fs::read(path) {
            Ok(bytes) => parse(path, &bytes)?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
            Err(source) => return Err(HlcError::FloorIo { path: path.to_owned(), source }),
        };
        Ok(Self { path: path.to_owned(), floor })
    }

    /// The floor on disk.
    pub fn floor(&self) -> u64 {
        self.floor
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Makes `floor` durable. A floor at or below the one on disk is already durable and
    /// writes nothing: the floor never moves backwards.
    pub fn persist(&mut self, floor: u64) -> Result<(), HlcError> {
        if floor > VERSION_MAX {
            return Err(HlcError::FloorOutOfRange { floor, max: VERSION_MAX });
        }
        if floor <= self.floor {
            return Ok(());
        }
        let io = |source| HlcError::FloorIo { path: self.path.clone(), source };
        let bytes = emit(floor);
        let tmp = self.path.with_extension("tmp");
        let mut file = fs::File::create(&tmp).map_err(io)?;
        file.write_all(&bytes).map_err(io)?;
        file.sync_all().map_err(io)?;
        drop(file);
        fs::rename(&tmp, &self.path).map_err(io)?;
        let dir = self.path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
        fs::File::open(dir).and_then(|d| d.sync_all()).map_err(io)?;
        self.floor = floor;
        Ok(())
    }
}

fn emit(floor: u64) -> [u8; field::LEN] {
    let mut bytes = [0u8; field::LEN];
    bytes[field::MAGIC].copy_from_slice(MAGIC);
    bytes[field::FLOOR].copy_from_slice(&floor.to_le_bytes());
    let crc = crc32c::crc32c(&bytes[..field::CRC.start]);
    bytes[field::CRC].copy_from_slice(&crc.to_le_bytes());
    bytes
}

fn parse(path: &Path, bytes: &[u8]) -> Result<u64, HlcError> {
    let corrupt = |reason| HlcError::FloorCorrupt { path: path.to_owned(), reason };
    let bytes: &[u8; field::LEN] = bytes.try_into().map_err(|_| corrupt("not 16 bytes long"))?;
    if &bytes[field::MAGIC] != MAGIC {
        return Err(corrupt("no PHLC magic: not a version floor file"));
    }
    let mut crc = [0u8; 4];
    crc.copy_from_slice(&bytes[field::CRC]);
    if u32::from_le_bytes(crc) != crc32c::crc32c(&bytes[..field::CRC.start]) {
        return Err(corrupt("checksum mismatch"));
    }
    let mut floor = [0u8; 8];
    floor.copy_from_slice(&bytes[field::FLOOR]);
    let floor = u64::from_le_bytes(floor);
    if floor > VERSION_MAX {
        return Err(corrupt("floor beyond the 56-bit version space"));
    }
    Ok(floor)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("prescient-hlc-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// Issues a version at `now`, persisting a floor first whenever one is due, as a
    /// node's write path does.
    fn issue(hlc: &mut Hlc, floor: &mut HlcFloor, now: u64) -> Stamp {
        if let Some(due) = hlc.reservation_due(now) {
            floor.persist(due).unwrap();
            hlc.floor_persisted(due);
        }
        hlc.next(now).unwrap()
    }

    #[test]
    fn stamps_pack_version_and_node() {
        let s = Stamp::new(0x12_3456, 7).unwrap();
        assert_eq!(s.raw(), 0x1234_5607);
        assert_eq!((s.version(), s.node()), (0x12_3456, 7));
        assert_eq!(Stamp::from_raw(s.raw()), s);
        assert_eq!(Stamp::new(VERSION_MAX, 255).unwrap().raw(), u64::MAX);
        assert!(Stamp::new(VERSION_MAX + 1, 0).is_none());
        // Version first, then node.
        assert!(Stamp::new(5, 0).unwrap() > Stamp::new(4, 31).unwrap());
        assert!(Stamp::new(5, 1).unwrap() > Stamp::new(5, 0).unwrap());
        assert_eq!(s.to_string(), "v1193046@n7");
    }

    #[test]
    fn versions_strictly_increase_under_a_clock_that_goes_backwards() {
        let mut hlc = Hlc::new(3, 0);
        hlc.floor_persisted(VERSION_MAX);
        let clock = [1_000u64, 1_005, 900, 900, 0, 2_000, 1_999, 2_000, 5, 10_000];
        let stamps: Vec<Stamp> = clock.iter().map(|&now| hlc.next(now).unwrap()).collect();
        let versions: Vec<u64> = stamps.iter().map(|s| s.version()).collect();
        assert_eq!(versions, [1_000, 1_005, 1_006, 1_007, 1_008, 2_000, 2_001, 2_002, 2_003, 10_000]);
        assert!(stamps.windows(2).all(|w| w[0] < w[1]));
        assert!(stamps.iter().all(|s| s.node() == 3));
    }

    #[test]
    fn observing_a_peer_orders_the_next_write_after_it() {
        let mut hlc = Hlc::new(1, 0);
        hlc.floor_persisted(VERSION_MAX);
        assert_eq!(hlc.next(100).unwrap().version(), 100);
        hlc.observe(50_000).unwrap();
        assert_eq!(hlc.next(200).unwrap().version(), 50_001);
        hlc.observe(10).unwrap(); // an older version moves nothing
        assert_eq!(hlc.next(300).unwrap().version(), 50_002);
        assert!(matches!(hlc.observe(VERSION_MAX + 1), Err(HlcError::VersionOutOfRange { .. })));
        assert_eq!(hlc.last(), 50_002);
    }

    #[test]
    fn no_version_above_the_persisted_floor_is_issued() {
        let mut hlc = Hlc::new(0, 0);
        let err = hlc.next(1_000).unwrap_err();
        assert!(matches!(err, HlcError::Unreserved { version: 1_000, floor: 0, .. }), "{err}");
        assert!(err.to_string().contains("persist a floor of at least 1000"), "{err}");
        // The first reservation reaches two steps past the clock, and is handed out once.
        assert_eq!(hlc.reservation_due(1_000), Some(1_000 + RESERVE_AHEAD_US));
        assert_eq!(hlc.reservation_due(1_000), None);
        assert!(hlc.next(1_000).is_err(), "requested is not persisted");
        hlc.floor_persisted(1_000 + RESERVE_AHEAD_US);
        assert_eq!(hlc.next(1_000).unwrap().version(), 1_000);
        // Nothing is due until the versions come within a step of the floor.
        assert_eq!(hlc.reservation_due(1_000 + RESERVE_STEP_US - 1), None);
        assert_eq!(hlc.reservation_due(1_000 + RESERVE_STEP_US), Some(1_000 + RESERVE_STEP_US + RESERVE_AHEAD_US));
        // A peer's version beyond the floor stops issuing until the floor catches up.
        hlc.observe(10 * RESERVE_AHEAD_US).unwrap();
        assert!(matches!(hlc.next(2_000), Err(HlcError::Unreserved { .. })));
        let due = hlc.reservation_due(2_000).unwrap();
        assert_eq!(due, 11 * RESERVE_AHEAD_US);
        hlc.floor_persisted(due);
        assert_eq!(hlc.next(2_000).unwrap().version(), 10 * RESERVE_AHEAD_US + 1);
    }

    #[test]
    fn reservations_come_at_most_once_per_step_of_versions() {
        let dir = temp_dir("rate");
        let mut floor = HlcFloor::open(&dir.join("floor")).unwrap();
        let mut hlc = Hlc::new(4, floor.floor());
        let mut persisted = 0;
        let mut now = 0;
        // Ten seconds of writes every 10 us.
        while now < 10 * RESERVE_STEP_US {
            if let Some(due) = hlc.reservation_due(now) {
                floor.persist(due).unwrap();
                hlc.floor_persisted(due);
                persisted += 1;
            }
            hlc.next(now).unwrap();
            now += 10;
        }
        assert_eq!(persisted, 10, "one reservation per second of versions");
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn the_end_of_the_version_space_is_an_error() {
        let mut hlc = Hlc::new(9, VERSION_MAX - 1);
        assert_eq!(hlc.reservation_due(0), Some(VERSION_MAX));
        hlc.floor_persisted(VERSION_MAX);
        assert_eq!(hlc.reservation_due(u64::MAX), None);
        assert_eq!(hlc.next(u64::MAX).unwrap().version(), VERSION_MAX);
        let err = hlc.next(u64::MAX).unwrap_err();
        assert!(matches!(err, HlcError::Exhausted { node: 9, last: VERSION_MAX }), "{err}");
        assert!(matches!(hlc.next(0), Err(HlcError::Exhausted { .. })));
    }

    #[test]
    fn a_restart_from_the_floor_file_never_repeats_a_version() {
        let dir = temp_dir("restart");
        let path = dir.join("hlc.floor");
        let mut issued = Vec::new();
        // First run: the clock runs at 5 s, versions race ahead of it at several per us.
        let mut floor = HlcFloor::open(&path).unwrap();
        assert_eq!(floor.floor(), 0);
        let mut hlc = Hlc::new(2, floor.floor());
        for i in 0..3_000_000u64 {
            issued.push(issue(&mut hlc, &mut floor, 5_000_000 + i / 4));
        }
        let last = issued.last().unwrap().version();
        assert!(last > 5_000_000 + 2 * RESERVE_STEP_US, "versions ran ahead of the clock");
        drop((hlc, floor)); // crash: nothing more is written

        // Second run: the wall clock went back to 1 s.
        let mut floor = HlcFloor::open(&path).unwrap();
        assert!(floor.floor() >= last, "floor {} below issued {last}", floor.floor());
        let mut hlc = Hlc::new(2, floor.floor());
        let first = issue(&mut hlc, &mut floor, 1_000_000);
        assert!(first.version() > last);
        issued.push(first);
        issued.push(issue(&mut hlc, &mut floor, 1_000_001));
        assert!(issued.windows(2).all(|w| w[0] < w[1]), "versions repeat or go back");
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn the_floor_file_has_a_fixed_checked_layout() {
        assert_eq!(
            emit(0x0001_0203_0405_0607),
            [
                b'P', b'H', b'L', b'C', 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01, 0x00, // magic, floor
                0xfc, 0xcd, 0x7b, 0x15, // crc32c (computed independently)
            ]
        );
        let dir = temp_dir("layout");
        let path = dir.join("floor");
        let mut floor = HlcFloor::open(&path).unwrap();
        floor.persist(1234).unwrap();
        floor.persist(1000).unwrap(); // backwards: nothing written
        assert_eq!(fs::read(&path).unwrap(), emit(1234));
        assert_eq!(HlcFloor::open(&path).unwrap().floor(), 1234);
        assert!(!path.with_extension("tmp").exists());
        assert!(matches!(floor.persist(VERSION_MAX + 1), Err(HlcError::FloorOutOfRange { .. })));
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_damaged_floor_file_is_refused() {
        let dir = temp_dir("damaged");
        let path = dir.join("floor");
        let refused = |bytes: &[u8]| {
            fs::write(&path, bytes).unwrap();
            match HlcFloor::open(&path) {
                Err(HlcError::FloorCorrupt { reason, .. }) => reason,
                other => panic!("{bytes:?} accepted: {other:?}"),
            }
        };
        assert_eq!(refused(&[]), "not 16 bytes long");
        assert_eq!(refused(&emit(77)[..15]), "not 16 bytes long");
        let mut flipped = emit(77);
        flipped[5] ^= 0x10;
        assert_eq!(refused(&flipped), "checksum mismatch");
        let mut magic = emit(77);
        magic[0] = b'X';
        assert_eq!(refused(&magic), "no PHLC magic: not a version floor file");
        let mut beyond = emit(0);
        beyond[field::FLOOR].copy_from_slice(&(VERSION_MAX + 1).to_le_bytes());
        let crc = crc32c::crc32c(&beyond[..field::CRC.start]);
        beyond[field::CRC].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(refused(&beyond), "floor beyond the 56-bit version space");
        let err = HlcFloor::open(&path).unwrap_err().to_string();
        assert!(err.contains("refusing to guess a floor"), "{err}");
        // A folder where the file should be is an I/O error, not a fresh floor.
        assert!(matches!(HlcFloor::open(&dir), Err(HlcError::FloorIo { .. })));
        fs::remove_dir_all(dir).unwrap();
    }
}
