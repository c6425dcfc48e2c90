//! A host follows a node's change-feed log from another process while the writer
//! appends: every entry exactly once, in order, without a gap, through a writer killed
//! with SIGKILL and restarted and a reader dropped and reopened from its saved cursor;
//! a reader that stops reading is told its cursor is too old, naming the version
//! overwritten. Then a C follower does the same through `prescient.h`.
//!
//! The writer is this test binary run again with `ROLE` set, appending through
//! `prescient-dpu`'s `FeedLog` (the DPU app's writer) the sequence of
//! [`prescient::feed_sequence`] to a 64-entry ring, so it wraps over 1500 times. It
//! never runs more than `AHEAD` positions past the position the reader last wrote to
//! the gate file, so the reader is lapped only when the test means it to be.

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::Duration;

use prescient::{feed_sequence, run_c_feed_follow, run_c_feed_too_old, wait_until};
use prescient_dpu::cluster::format::feed::FeedLog;
use prescient_shim::feed::{FeedEntry, FeedReadError, FeedReader, DROPPED_AT, ENTRY_LEN, HEADER_BYTES};

const ROLE: &str = "PRESCIENT_TEST_FEED_WRITER";
/// Entries in the ring.
const ENTRIES: u32 = 64;
/// How far past the reader's last position the writer may run: a ring less a few
/// slots, so the writer overwrites entries right behind the reader.
const AHEAD: u64 = ENTRIES as u64 - 4;
/// Positions the reader follows before it stops reading.
const FOLLOWED: u64 = 100_000;
/// Positions the writer appends in all: past `FOLLOWED` by four rings.
const LAST: u64 = FOLLOWED + 4 * ENTRIES as u64;
/// Where the test kills the writer, and where it reopens its reader.
const KILL_AT: u64 = 30_000;
const REOPEN_AT: u64 = 60_000;
/// Liveness limit for any one wait: a hang fails, nothing is timed.
const PATIENCE: Duration = Duration::from_secs(120);

/// The feed log in `dir`.
fn feed_in(dir: &Path) -> PathBuf {
    dir.join("feed.prfeed")
}

/// The gate file in `dir`: the last position the writer may append (u64, little-endian).
fn gate_in(dir: &Path) -> PathBuf {
    dir.join("gate")
}

/// A fresh folder for the feed log and the gate, removed on drop.
struct Files {
    dir: PathBuf,
    gate: std::fs::File,
}

impl Files {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("prescient-feed-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("make the test folder");
        let gate = std::fs::File::create(gate_in(&dir)).expect("create the gate");
        let files = Self { dir, gate };
        files.open_gate(AHEAD);
        files
    }

    fn feed(&self) -> PathBuf {
        feed_in(&self.dir)
    }

    /// Lets the writer append up to `position`.
    fn open_gate(&self, position: u64) {
        self.gate.write_all_at(&position.to_le_bytes(), 0).expect("write the gate");
    }
}

impl Drop for Files {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The child's part: open (or reopen) the feed log and append the sequence up to
/// `LAST`, from wherever the log stands, each position only once the gate allows it.
fn writer(dir: &Path) {
    let gate = std::fs::File::open(gate_in(dir)).expect("open the gate file");
    let mut log = FeedLog::open(&feed_in(dir), 5, ENTRIES).expect("open the feed log");
    let mut allowed = 0;
    for position in log.held().end..=LAST {
        while position > allowed {
            let mut word = [0u8; 8];
            gate.read_exact_at(&mut word, 0).expect("read the gate");
            allowed = u64::from_le_bytes(word);
            if position > allowed {
                std::thread::sleep(Duration::from_micros(50));
            }
        }
        let (version, key_hash, tombstone) = feed_sequence(position);
        assert_eq!(log.append(version, key_hash, tombstone).expect("append"), position);
    }
}

/// The writer process, killed on drop.
struct Writer(Child);

impl Writer {
    fn spawn(files: &Files) -> Self {
        let child = Command::new(std::env::current_exe().expect("test binary"))
            .args(["--exact", "a_host_follows_the_feed_through_writer_and_reader_restarts", "--nocapture"])
            .env(ROLE, &files.dir)
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("start the writer");
        Self(child)
    }

    fn kill9(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// Writes the first half of the append after the writer's last entry (found by a second
/// reader from `cursor`, the version of position `taken`), as a writer killed in the
/// middle of it leaves it.
fn tear_next_append(files: &Files, cursor: u64, taken: u64) {
    let mut reader = FeedReader::open(&files.feed()).expect("open the feed log");
    let (mut cursor, mut out) = (cursor, [FeedEntry::default(); 16]);
    let mut last = taken;
    loop {
        let n = reader.read(cursor, &mut out).expect("read to the end");
        if n == 0 {
            break;
        }
        (cursor, last) = (out[n - 1].version, out[n - 1].position);
    }
    let torn = expected(last + 1);
    let file = std::fs::OpenOptions::new().write(true).open(files.feed()).expect("open the feed log to tear it");
    let dropped = expected(torn.position - ENTRIES as u64).version;
    file.write_all_at(&dropped.to_le_bytes(), DROPPED_AT as u64).expect("write dropped");
    let slot = HEADER_BYTES as u64 + (torn.position % ENTRIES as u64) * ENTRY_LEN as u64;
    file.write_all_at(&torn.emit()[..ENTRY_LEN / 2], slot).expect("write half an entry");
}

fn expected(position: u64) -> FeedEntry {
    let (version, key_hash, tombstone) = feed_sequence(position);
    FeedEntry { position, version, key_hash, tombstone }
}

/// Follows the feed from `*cursor` until position `until` is taken, checking each entry
/// is the next of the sequence; opens the gate as it goes.
fn follow(reader: &mut FeedReader, files: &Files, cursor: &mut u64, next: &mut u64, until: u64) {
    let mut out = [FeedEntry::default(); 16];
    while *next <= until {
        let cap = out.len().min((until - *next + 1) as usize);
        let mut n = 0;
        let progressed = wait_until(PATIENCE, || {
            n = reader.read(*cursor, &mut out[..cap]).unwrap_or_else(|e| panic!("read from {:#x}: {e}", *cursor));
            n > 0
        });
        assert!(progressed, "no entry after position {} came", *next - 1);
        for e in &out[..n] {
            assert_eq!(*e, expected(*next), "the entry after position {}", *next - 1);
            *next += 1;
        }
        *cursor = out[n - 1].version;
        files.open_gate(*next - 1 + AHEAD);
    }
}

#[test]
fn a_host_follows_the_feed_through_writer_and_reader_restarts() {
    if let Ok(dir) = std::env::var(ROLE) {
        writer(Path::new(&dir));
        return;
    }
    let files = Files::new("follow");
    let mut writer = Writer::spawn(&files);
    assert!(wait_until(PATIENCE, || files.feed().exists()), "the writer never created the feed log");
    let mut reader = FeedReader::open(&files.feed()).expect("open the feed log");
    assert_eq!((reader.node(), reader.entries()), (5, ENTRIES));
    let (mut cursor, mut next) = (0, 1);

    follow(&mut reader, &files, &mut cursor, &mut next, KILL_AT);
    // A crash of the writer wherever it is, made one in the middle of an append: the
    // next entry's overwritten version already in `dropped`, the entry half written.
    // A new writer process reopens the file and goes on from what it holds.
    writer.kill9();
    tear_next_append(&files, cursor, next - 1);
    let mut writer = Writer::spawn(&files);
    follow(&mut reader, &files, &mut cursor, &mut next, REOPEN_AT);

    // The reader restarts with only its saved cursor.
    drop(reader);
    let mut reader = FeedReader::open(&files.feed()).expect("reopen the feed log");
    follow(&mut reader, &files, &mut cursor, &mut next, FOLLOWED);

    // The reader stops; the writer runs on to the end, four rings past it.
    files.open_gate(u64::MAX);
    let status = wait_until(PATIENCE, || writer.0.try_wait().expect("poll the writer").is_some());
    assert!(status, "the writer did not finish");
    assert!(writer.0.wait().expect("writer status").success(), "the writer failed");
    let dropped = expected(LAST - ENTRIES as u64).version;
    let mut out = [FeedEntry::default(); 16];
    match reader.read(cursor, &mut out) {
        Err(FeedReadError::CursorTooOld { after, dropped: named }) => {
            assert_eq!((after, named), (cursor, dropped), "CursorTooOld names the newest overwritten version")
        }
        other => panic!("a reader four rings behind read {other:?}"),
    }
    assert_eq!(reader.dropped(), dropped);
    // From the dropped version, the whole ring that is left.
    let (mut cursor, mut next) = (dropped, LAST - ENTRIES as u64 + 1);
    follow(&mut reader, &files, &mut cursor, &mut next, LAST);
}

/// A feed log written by Rust, followed from C: every entry checked, from the start, from
/// a saved cursor in a new handle, and a cursor that fell behind refused with
/// `PRESCIENT_RC_CURSOR_TOO_OLD` naming the dropped version.
#[test]
fn a_c_follower_reads_the_feed_and_is_told_when_its_cursor_is_too_old() {
    if std::env::var(ROLE).is_ok() {
        return;
    }
    let files = Files::new("c-follow");
    let mut log = FeedLog::open(&files.feed(), 2, ENTRIES).expect("create the feed log");
    let mut append_to = |last: u64| {
        for position in log.held().end..=last {
            let (version, key_hash, tombstone) = feed_sequence(position);
            log.append(version, key_hash, tombstone).expect("append");
        }
    };
    append_to(50);
    let mut cursor = 0;
    assert_eq!(run_c_feed_follow(&files.feed(), &mut cursor, 50, 7), 0, "see the C follower's stderr");
    assert_eq!(cursor, feed_sequence(50).0);
    // Wrapped, yet still covering the cursor: a new handle resumes from it.
    append_to(100);
    assert_eq!(run_c_feed_follow(&files.feed(), &mut cursor, 100, 16), 0, "see the C follower's stderr");
    assert_eq!(cursor, feed_sequence(100).0);
    // Three rings on, the cursor is too old; from the dropped version the rest is whole.
    append_to(300);
    let dropped = feed_sequence(300 - ENTRIES as u64).0;
    assert_eq!(run_c_feed_too_old(&files.feed(), cursor, dropped), 0, "see the C follower's stderr");
    let mut cursor = dropped;
    assert_eq!(run_c_feed_follow(&files.feed(), &mut cursor, 300, 5), 0, "see the C follower's stderr");
}
