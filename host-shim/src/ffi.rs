//! The C ABI: what a C or C++ key-value store calls. `build.rs` generates
//! `prescient.h` from this file with cbindgen.
//!
//! Every function returns a [`PrescientRc`] (0 on success) and never unwinds; the
//! message of the last failure on the calling thread is at
//! [`prescient_last_error`]. Handles are opaque pointers owned by the caller until the
//! matching `_free`/`_close`. Buffers cross as `(index, generation)` pairs and are
//! checked against the region's ownership words on every call, so a stale, forged or
//! doubly submitted buffer is an error, not corruption.
//!
//! Reads through the cache directory: `prescient_check_read` decides whether a key may
//! be served from the KV store's cache; on a miss the store GETs the value
//! (`prescient_get`, then `prescient_take_value` on its completion), caches it and
//! calls `prescient_refill` with the token the miss came with; only if that returns
//! `PRESCIENT_RC_OK` may the cache entry be marked valid (see `Host::check_read`).
//!
//! Following a node's change feed (see `prescient_shim::feed`): `prescient_feed_open`
//! maps the node's feed log, `prescient_feed_read` returns the entries after a cursor
//! (the version of the last entry taken, 0 from the start), and
//! `PRESCIENT_RC_CURSOR_TOO_OLD` says entries after the cursor were overwritten
//! (`prescient_feed_dropped` gives the newest version overwritten).
#![allow(unsafe_code)]

use std::cell::RefCell;
use std::ffi::{c_char, CStr, CString};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use crate::buffer::Buffer;
use crate::completion::Completion;
use crate::directory::{ReadCheck, RefillToken, SlotState, SlotWord};
use crate::error::ShimError;
use crate::feed::{FeedEntry, FeedReadError, FeedReader};
use crate::host::{Host, HostOptions};
use crate::layout::RegionConfig;
use crate::queue_pair::QueuePair;
use crate::read_sla::ReadSla;
use crate::request::Request;
use crate::status::Status;

/// Result codes of the C ABI.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PrescientRc {
    /// Success.
    Ok = 0,
    /// An argument is null or out of range.
    Invalid = -1,
    /// The region could not be created, opened or mapped.
    Region = -2,
    /// No free buffer.
    ArenaExhausted = -3,
    /// The buffer is not held by this host (freed, in flight, or submitted twice).
    BufferState = -4,
    /// The submission ring is full: reap completions.
    RingFull = -5,
    /// The DPU app is not responding (or did not acknowledge an attach in time).
    DpuNotResponding = -6,
    /// No completion within the timeout.
    Timeout = -7,
    /// The DPU app fenced the queue pair off.
    Fenced = -8,
    /// Any other failure; see `prescient_last_error`.
    Other = -9,
    /// The completion carries no value: not a GET, or its value was taken already.
    NoValue = -10,
    /// The refill did not happen: the slot moved since the token was taken, or the
    /// lease is not valid. Do not mark the cache entry valid.
    SlotChanged = -11,
    /// The feed cursor is older than the feed log holds: entries after it were
    /// overwritten. Rebuild from a snapshot at or after `prescient_feed_dropped`'s
    /// version and follow from the snapshot's version.
    CursorTooOld = -12,
    /// The change-feed log could not be opened or mapped, is not a feed log this build
    /// reads, or is damaged; see `prescient_last_error`.
    Feed = -13,
}

/// Region sizes (see `RegionConfig`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct PrescientRegionConfig {
    /// Queue pairs (one per KV-store thread).
    pub queue_pairs: u32,
    /// Entries per ring (a power of two).
    pub ring_entries: u32,
    /// Host buffers.
    pub host_buffers: u32,
    /// DPU scratch buffers.
    pub dpu_buffers: u32,
    /// Bytes per buffer.
    pub buffer_bytes: u32,
    /// Cache-directory slots.
    pub directory_slots: u32,
}

/// A buffer the host holds: fill `value[0..capacity]`, then submit it.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct PrescientBuffer {
    /// Arena index.
    pub index: u32,
    /// Generation it was taken at.
    pub generation: u32,
    /// The value area.
    pub value: *mut u8,
    /// Bytes in the value area.
    pub capacity: usize,
}

/// One completion.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct PrescientCompletion {
    /// The request's tag.
    pub user_data: u64,
    /// Version given to the write.
    pub version: u64,
    /// Status (0: ok; see `Status`).
    pub status: u16,
    /// Op code of the request.
    pub op: u8,
    /// Error detail; for a GET that completed ok, the value's length.
    pub detail: u32,
    /// The request's submission index (what `prescient_take_value` looks up).
    pub sq_index: u32,
    /// Flags: bit 0 (`FLAG_NEWER_PENDING`) on a GET means a newer write of the key is
    /// being decided - serve the value, but do not refill the cache with it. Bit 1
    /// (`FLAG_LEASED`) on a PUT or DELETE means the key held a predictor lease when the
    /// write arrived (its directory marks were already placed).
    pub flags: u8,
}

/// The state of a cache-directory slot (see `SlotState`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PrescientSlotState {
    /// The cached copy may be served.
    Valid = 0,
    /// A write is being decided.
    Pending = 1,
    /// The cached copy is stale.
    Invalid = 2,
    /// Never written by the rules; read as invalid.
    Reserved = 3,
}

/// A decoded cache-directory slot word.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PrescientSlotWord {
    /// The packed 64-bit word.
    pub packed: u64,
    /// Its version (56 bits).
    pub version: u64,
    /// Its state.
    pub state: PrescientSlotState,
    /// The node that last set it (0..=63).
    pub writer: u8,
}

/// What `prescient_check_read` decided (see `ReadCheck`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PrescientReadDecision {
    /// Serve the cached copy.
    Cached = 0,
    /// A write is being decided: serve the cached copy only under a stale SLA.
    Pending = 1,
    /// Stale: GET the value, cache it, then `prescient_refill` with the token.
    Miss = 2,
    /// The directory lease is not valid: do not use the cache, do not refill; GET.
    NoLease = 3,
    /// The region has no cache directory: GET.
    NoDirectory = 4,
}

/// What a refill after a miss needs: the slot and the exact word seen.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PrescientRefillToken {
    /// The packed word seen.
    pub word: u64,
    /// The directory slot.
    pub slot: u32,
}

/// The result of `prescient_check_read`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PrescientReadCheck {
    /// The decision.
    pub decision: PrescientReadDecision,
    /// The word seen (for `CACHED`, `PENDING` and `MISS`; all zero otherwise).
    pub word: PrescientSlotWord,
    /// The refill token (for `MISS`; all zero otherwise).
    pub token: PrescientRefillToken,
}

/// One change-feed entry: a committed write, in the feed's order.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PrescientFeedEntry {
    /// Its position in the node's feed (from 1).
    pub position: u64,
    /// Its version: the feed's order, the same on every node. The cursor to pass
    /// after taking it.
    pub version: u64,
    /// Hash of the key written.
    pub key_hash: u64,
    /// 1: the write deleted the key; 0: it set a value.
    pub tombstone: u8,
}

/// An opaque host handle.
pub struct PrescientHost(Arc<Host>);
/// An opaque queue-pair handle.
pub struct PrescientQp(QueuePair);
/// An opaque change-feed reader handle.
pub struct PrescientFeed(FeedReader);

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

fn fail(rc: PrescientRc, message: String) -> PrescientRc {
    let message = CString::new(message.replace('\0', " ")).unwrap_or_default();
    LAST_ERROR.with(|last| *last.borrow_mut() = message);
    rc
}

fn fail_shim(err: ShimError) -> PrescientRc {
    let rc = match &err {
        ShimError::BadConfig { .. }
        | ShimError::BadKey { .. }
        | ShimError::BadValue { .. }
        | ShimError::SlaOnWrite { .. }
        | ShimError::NoQueuePair { .. } => PrescientRc::Invalid,
        ShimError::Io { .. }
        | ShimError::Exists(_)
        | ShimError::Pin { .. }
        | ShimError::BadMagic { .. }
        | ShimError::LayoutVersion { .. }
        | ShimError::UnknownFeatures { .. }
        | ShimError::HeaderMismatch
        | ShimError::Truncated { .. }
        | ShimError::Busy { .. } => PrescientRc::Region,
        ShimError::ArenaExhausted { .. } => PrescientRc::ArenaExhausted,
        ShimError::BufferState { .. } => PrescientRc::BufferState,
        ShimError::RingFull { .. } => PrescientRc::RingFull,
        ShimError::DpuNotResponding { .. } | ShimError::AttachNotAcknowledged { .. } => PrescientRc::DpuNotResponding,
        ShimError::Timeout(_) => PrescientRc::Timeout,
        ShimError::Fenced { .. } => PrescientRc::Fenced,
        ShimError::BadCompletion(_) => PrescientRc::Other,
    };
    fail(rc, err.to_string())
}

/// The message of the last failed call on this thread (empty if none). Valid until
/// the next failing call on the thread.
#[no_mangle]
pub extern "C" fn prescient_last_error() -> *const c_char {
    LAST_ERROR.with(|last| last.borrow().as_ptr())
}

/// # Safety
/// `path` must be null or a NUL-terminated string.
unsafe fn path_arg<'a>(path: *const c_char) -> Option<&'a Path> {
    if path.is_null() {
        return None;
    }
    // SAFETY: non-null and NUL-terminated per the caller's contract.
    let bytes = unsafe { CStr::from_ptr(path) }.to_bytes();
    Some(Path::new(<std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(bytes)))
}

/// Boxes `made` into `*out`, or records its error.
///
/// # Safety
/// `out` must be valid for a write.
unsafe fn hand_out<T>(out: *mut *mut T, made: Result<T, ShimError>) -> PrescientRc {
    match made {
        Ok(handle) => {
            // SAFETY: `out` is valid for a write per this function's contract.
            unsafe { *out = Box::into_raw(Box::new(handle)) };
            PrescientRc::Ok
        }
        Err(e) => fail_shim(e),
    }
}

fn options(pin: i32) -> HostOptions {
    HostOptions { pin: pin != 0, ..HostOptions::default() }
}

/// Creates a region at `path` and becomes its host. `config` may be null for the
/// defaults; `pin` non-zero locks the region in memory.
///
/// # Safety
/// `path` is a NUL-terminated string; `config` is null or valid; `out` is valid for a
/// write.
#[no_mangle]
pub unsafe extern "C" fn prescient_host_create(
    path: *const c_char,
    config: *const PrescientRegionConfig,
    pin: i32,
    out: *mut *mut PrescientHost,
) -> PrescientRc {
    // SAFETY: per this function's contract.
    let Some(path) = (unsafe { path_arg(path) }) else { return fail(PrescientRc::Invalid, "path is null".into()) };
    if out.is_null() {
        return fail(PrescientRc::Invalid, "out is null".into());
    }
    let config = if config.is_null() {
        RegionConfig::default()
    } else {
        // SAFETY: non-null and valid per the contract.
        let c = unsafe { *config };
        RegionConfig {
            queue_pairs: c.queue_pairs,
            ring_entries: c.ring_entries,
            host_buffers: c.host_buffers,
            dpu_buffers: c.dpu_buffers,
            buffer_bytes: c.buffer_bytes,
            directory_slots: c.directory_slots,
        }
    };
    // SAFETY: `out` is valid for a write per the contract.
    unsafe { hand_out(out, Host::create(path, config, options(pin)).map(PrescientHost)) }
}

/// Attaches to an existing region whose previous host is gone.
///
/// # Safety
/// As for `prescient_host_create`.
#[no_mangle]
pub unsafe extern "C" fn prescient_host_attach(
    path: *const c_char,
    pin: i32,
    out: *mut *mut PrescientHost,
) -> PrescientRc {
    // SAFETY: per this function's contract.
    let Some(path) = (unsafe { path_arg(path) }) else { return fail(PrescientRc::Invalid, "path is null".into()) };
    if out.is_null() {
        return fail(PrescientRc::Invalid, "out is null".into());
    }
    // SAFETY: `out` is valid for a write per the contract.
    unsafe { hand_out(out, Host::attach(path, options(pin)).map(PrescientHost)) }
}

/// Releases a host handle (queue pairs opened from it stay valid until closed).
///
/// # Safety
/// `host` is null or a handle from `prescient_host_create`/`_attach`, freed once.
#[no_mangle]
pub unsafe extern "C" fn prescient_host_free(host: *mut PrescientHost) {
    if !host.is_null() {
        // SAFETY: a live handle from Box::into_raw, freed once per the contract.
        drop(unsafe { Box::from_raw(host) });
    }
}

/// Opens queue pair `qp` for the calling thread.
///
/// # Safety
/// `host` is a live host handle; `out` is valid for a write.
#[no_mangle]
pub unsafe extern "C" fn prescient_qp_open(
    host: *mut PrescientHost,
    qp: u32,
    out: *mut *mut PrescientQp,
) -> PrescientRc {
    if host.is_null() || out.is_null() {
        return fail(PrescientRc::Invalid, "host or out is null".into());
    }
    // SAFETY: a live handle per the contract.
    let host = unsafe { &*host };
    // SAFETY: `out` is valid for a write per the contract.
    unsafe { hand_out(out, host.0.queue_pair(qp).map(PrescientQp)) }
}

/// Closes a queue pair handle.
///
/// # Safety
/// `qp` is null or a handle from `prescient_qp_open`, closed once.
#[no_mangle]
pub unsafe extern "C" fn prescient_qp_close(qp: *mut PrescientQp) {
    if !qp.is_null() {
        // SAFETY: a live handle from Box::into_raw, closed once per the contract.
        drop(unsafe { Box::from_raw(qp) });
    }
}

/// Takes a free arena buffer.
///
/// # Safety
/// `host` is a live host handle; `out` is valid for a write.
#[no_mangle]
pub unsafe extern "C" fn prescient_buffer_take(host: *mut PrescientHost, out: *mut PrescientBuffer) -> PrescientRc {
    if host.is_null() || out.is_null() {
        return fail(PrescientRc::Invalid, "host or out is null".into());
    }
    // SAFETY: a live handle per the contract.
    let host = unsafe { &*host };
    match host.0.take_buffer() {
        Ok(buf) => {
            // SAFETY: `out` is valid for a write per the contract.
            unsafe { *out = hand_out_buffer(buf) };
            PrescientRc::Ok
        }
        Err(e) => fail_shim(e),
    }
}

/// Gives a held buffer to C: the caller now holds it by `(index, generation)`.
fn hand_out_buffer(mut buf: Buffer) -> PrescientBuffer {
    let (index, generation) = (buf.index(), buf.generation());
    let value = buf.value_mut();
    let raw = PrescientBuffer { index, generation, value: value.as_mut_ptr(), capacity: value.len() };
    let _ = buf.into_raw();
    raw
}

/// Takes back a buffer C holds, if its ownership word says the host holds it at its
/// generation.
fn buffer_arg(qp: &QueuePair, raw: &PrescientBuffer) -> Result<Buffer, PrescientRc> {
    Buffer::from_raw(qp.region().clone(), raw.index, raw.generation).map_err(|state| {
        fail(
            PrescientRc::BufferState,
            format!(
                "buffer {} (generation {}) is {}, not held by this host: submit each buffer once, after take",
                raw.index,
                raw.generation,
                crate::arena::BufferState::describe(state)
            ),
        )
    })
}

/// Returns a buffer the host holds to the arena. Fails for a buffer in flight.
///
/// # Safety
/// `host` is a live host handle; `buf` is valid for a read.
#[no_mangle]
pub unsafe extern "C" fn prescient_buffer_free(host: *mut PrescientHost, buf: *const PrescientBuffer) -> PrescientRc {
    if host.is_null() || buf.is_null() {
        return fail(PrescientRc::Invalid, "host or buf is null".into());
    }
    // SAFETY: live and valid per the contract.
    let (host, buf) = unsafe { (&*host, &*buf) };
    match host.0.free_raw(buf.index, buf.generation) {
        Ok(()) => PrescientRc::Ok,
        Err(e) => fail_shim(e),
    }
}

/// The read SLA a C caller passed, or the failure to return (with its message set).
fn sla_arg(sla: u8, max_wait_us: u32) -> Result<ReadSla, PrescientRc> {
    match (sla, max_wait_us) {
        (0, 0) => Ok(ReadSla::Stale),
        (0, _) => {
            Err(fail(PrescientRc::Invalid, format!("sla 0 (stale) never waits: pass max_wait_us 0, not {max_wait_us}")))
        }
        (1, us) => Ok(ReadSla::Fresh { max_wait: std::time::Duration::from_micros(u64::from(us)) }),
        _ => Err(fail(PrescientRc::Invalid, format!("sla {sla} is not 0 (stale) or 1 (fresh)"))),
    }
}

/// What one submission call does with the checked key and buffer.
type Submit<'a> = &'a mut dyn FnMut(&mut QueuePair, &[u8], Buffer) -> Result<(), (ShimError, Buffer)>;

/// The common part of every call that submits a buffer: null checks, the key slice,
/// the buffer handle; on failure the buffer stays held by the caller.
///
/// # Safety
/// As for [`prescient_put`].
unsafe fn submit(
    qp: *mut PrescientQp,
    key: *const u8,
    key_len: usize,
    buf: *const PrescientBuffer,
    f: Submit,
) -> PrescientRc {
    if qp.is_null() || key.is_null() || buf.is_null() {
        return fail(PrescientRc::Invalid, "qp, key or buf is null".into());
    }
    // SAFETY: live, exclusive and valid per the caller's contract.
    let (qp, key, raw) = unsafe { (&mut (*qp).0, std::slice::from_raw_parts(key, key_len), &*buf) };
    let buffer = match buffer_arg(qp, raw) {
        Ok(b) => b,
        Err(rc) => return rc,
    };
    match f(qp, key, buffer) {
        Ok(()) => PrescientRc::Ok,
        Err((e, buffer)) => {
            let _ = buffer.into_raw();
            fail_shim(e)
        }
    }
}

/// Submits a PUT of `buf`'s first `value_len` bytes under `key` and publishes it.
/// On failure the buffer stays held by the caller.
///
/// # Safety
/// `qp` is a live queue pair used by one thread; `key` points to `key_len` bytes; `buf`
/// is valid for a read.
#[no_mangle]
pub unsafe extern "C" fn prescient_put(
    qp: *mut PrescientQp,
    key: *const u8,
    key_len: usize,
    buf: *const PrescientBuffer,
    value_len: usize,
    user_data: u64,
) -> PrescientRc {
    // SAFETY: the caller's contract is this function's.
    unsafe {
        submit(qp, key, key_len, buf, &mut |qp, key, b| qp.submit(Request::put(key, b, value_len).user_data(user_data)))
    }
}

/// Queues a PUT like [`prescient_put`] without publishing it: a batch of pushes is
/// published by one [`prescient_flush`].
///
/// # Safety
/// As for [`prescient_put`].
#[no_mangle]
pub unsafe extern "C" fn prescient_push_put(
    qp: *mut PrescientQp,
    key: *const u8,
    key_len: usize,
    buf: *const PrescientBuffer,
    value_len: usize,
    user_data: u64,
) -> PrescientRc {
    // SAFETY: the caller's contract is this function's.
    unsafe {
        submit(qp, key, key_len, buf, &mut |qp, key, b| qp.push(Request::put(key, b, value_len).user_data(user_data)))
    }
}

/// Submits a DELETE of `key`, carried in `buf`, and publishes it. On failure the
/// buffer stays held by the caller.
///
/// # Safety
/// As for [`prescient_put`].
#[no_mangle]
pub unsafe extern "C" fn prescient_delete(
    qp: *mut PrescientQp,
    key: *const u8,
    key_len: usize,
    buf: *const PrescientBuffer,
    user_data: u64,
) -> PrescientRc {
    // SAFETY: the caller's contract is this function's.
    unsafe { submit(qp, key, key_len, buf, &mut |qp, key, b| qp.submit(Request::delete(key, b).user_data(user_data))) }
}

/// Queues a DELETE like [`prescient_delete`] without publishing it.
///
/// # Safety
/// As for [`prescient_put`].
#[no_mangle]
pub unsafe extern "C" fn prescient_push_delete(
    qp: *mut PrescientQp,
    key: *const u8,
    key_len: usize,
    buf: *const PrescientBuffer,
    user_data: u64,
) -> PrescientRc {
    // SAFETY: the caller's contract is this function's.
    unsafe { submit(qp, key, key_len, buf, &mut |qp, key, b| qp.push(Request::delete(key, b).user_data(user_data))) }
}

/// Publishes every request queued by the `prescient_push_*` calls and wakes the DPU
/// app. Fails with `PRESCIENT_RC_DPU_NOT_RESPONDING` if it has stopped answering (the
/// requests stay queued for its successor).
///
/// # Safety
/// `qp` is a live queue pair used by one thread.
#[no_mangle]
pub unsafe extern "C" fn prescient_flush(qp: *mut PrescientQp) -> PrescientRc {
    if qp.is_null() {
        return fail(PrescientRc::Invalid, "qp is null".into());
    }
    // SAFETY: live and exclusive per the contract.
    let qp = unsafe { &mut (*qp).0 };
    match qp.flush() {
        Ok(()) => PrescientRc::Ok,
        Err(e) => fail_shim(e),
    }
}

/// Waits up to `timeout_ms` for completions and copies up to `max` of them into
/// `out`; `*got` receives the count.
///
/// # Safety
/// `qp` is a live queue pair used by one thread; `out` holds `max` entries; `got` is
/// valid for a write.
#[no_mangle]
pub unsafe extern "C" fn prescient_wait(
    qp: *mut PrescientQp,
    timeout_ms: u32,
    out: *mut PrescientCompletion,
    max: usize,
    got: *mut usize,
) -> PrescientRc {
    if qp.is_null() || out.is_null() || got.is_null() || max == 0 {
        return fail(PrescientRc::Invalid, "qp, out or got is null, or max is 0".into());
    }
    // SAFETY: live, exclusive and valid for `max` entries per the contract.
    let (qp, out) = unsafe { (&mut (*qp).0, std::slice::from_raw_parts_mut(out, max)) };
    let mut count = 0usize;
    let take = |c: crate::Completion| {
        out[count] = PrescientCompletion {
            user_data: c.user_data,
            version: c.version,
            status: c.status as u16,
            op: c.op,
            detail: c.detail,
            sq_index: c.sq_index,
            flags: c.flags,
        };
        count += 1;
    };
    // `wait_max` never hands over more than `max`: the rest stay queued (on the ring,
    // or in the entry the queue pair is part-way through).
    let result = qp.wait_max(Duration::from_millis(timeout_ms.into()), max, take);
    // SAFETY: valid for a write per the contract.
    unsafe { *got = count };
    match result {
        Ok(_) => PrescientRc::Ok,
        Err(e) => fail_shim(e),
    }
}

/// Submits a GET of `key`, carried in `buf`, and publishes it. The value arrives in
/// the same buffer: on the GET's completion, `prescient_take_value` hands the buffer
/// back (whatever the status; the value, `completion.detail` bytes at `buf.value`, is
/// valid only when the status is 0). `sla` is the read SLA (see `ReadSla`): 0
/// (stale, `max_wait_us` 0) asks for the newest committed value the DPU app can prove;
/// 1 (fresh) gathers again for up to `max_wait_us` (capped at 1 s), then fails rather
/// than risk an older one. On failure the buffer stays held by the caller.
///
/// # Safety
/// `qp` is a live queue pair used by one thread; `key` points to `key_len` bytes; `buf`
/// is valid for a read.
#[no_mangle]
pub unsafe extern "C" fn prescient_get(
    qp: *mut PrescientQp,
    key: *const u8,
    key_len: usize,
    buf: *const PrescientBuffer,
    sla: u8,
    max_wait_us: u32,
    user_data: u64,
) -> PrescientRc {
    if qp.is_null() || key.is_null() || buf.is_null() {
        return fail(PrescientRc::Invalid, "qp, key or buf is null".into());
    }
    let sla = match sla_arg(sla, max_wait_us) {
        Ok(sla) => sla,
        Err(rc) => return rc,
    };
    // SAFETY: live, exclusive and valid per the contract.
    let (qp, key, raw) = unsafe { (&mut (*qp).0, std::slice::from_raw_parts(key, key_len), &*buf) };
    let buffer = match buffer_arg(qp, raw) {
        Ok(b) => b,
        Err(rc) => return rc,
    };
    match qp.submit(Request::get(key, buffer).sla(sla).user_data(user_data)) {
        Ok(()) => PrescientRc::Ok,
        Err((e, buffer)) => {
            let _ = buffer.into_raw();
            fail_shim(e)
        }
    }
}

/// Hands back the buffer of GET completion `completion` into `*out` (the caller holds
/// it then: free it, or fill and submit it). Fails with `PRESCIENT_RC_NO_VALUE` for a
/// completion of any other request, or if its value was taken already.
///
/// # Safety
/// `qp` is a live queue pair used by one thread; `completion` is valid for a read;
/// `out` is valid for a write.
#[no_mangle]
pub unsafe extern "C" fn prescient_take_value(
    qp: *mut PrescientQp,
    completion: *const PrescientCompletion,
    out: *mut PrescientBuffer,
) -> PrescientRc {
    if qp.is_null() || completion.is_null() || out.is_null() {
        return fail(PrescientRc::Invalid, "qp, completion or out is null".into());
    }
    // SAFETY: live, exclusive and valid per the contract.
    let (qp, c) = unsafe { (&mut (*qp).0, *completion) };
    let completion = Completion {
        user_data: c.user_data,
        status: Status::from_u16(c.status),
        op: c.op,
        flags: c.flags,
        sq_index: c.sq_index,
        version: c.version,
        detail: c.detail,
        cq_index: 0,
    };
    match qp.take_value(&completion) {
        Some(buf) => {
            // SAFETY: `out` is valid for a write per the contract.
            unsafe { *out = hand_out_buffer(buf.into_buffer()) };
            PrescientRc::Ok
        }
        None => fail(
            PrescientRc::NoValue,
            format!(
                "completion {} (submission {}) carries no value: it is not a GET's, or its value was taken already",
                c.user_data, c.sq_index
            ),
        ),
    }
}

fn slot_word(w: SlotWord) -> PrescientSlotWord {
    let state = match w.state {
        SlotState::Valid => PrescientSlotState::Valid,
        SlotState::Pending => PrescientSlotState::Pending,
        SlotState::Invalid => PrescientSlotState::Invalid,
        SlotState::Reserved => PrescientSlotState::Reserved,
    };
    PrescientSlotWord { packed: w.pack(), version: w.version, state, writer: w.writer }
}

/// # Safety
/// `host` is null or a live host handle; `key` is null or points to `key_len` bytes.
unsafe fn host_and_key<'a>(
    host: *mut PrescientHost,
    key: *const u8,
    key_len: usize,
) -> Result<(&'a Host, &'a [u8]), PrescientRc> {
    if host.is_null() || key.is_null() {
        return Err(fail(PrescientRc::Invalid, "host or key is null".into()));
    }
    // SAFETY: live and valid per the caller's contract.
    Ok(unsafe { (&(*host).0, std::slice::from_raw_parts(key, key_len)) })
}

/// Reads `key`'s cache-directory slot into `*out`. Fails with `PRESCIENT_RC_INVALID`
/// if the region has no directory slots. A fresh region's words are all zero:
/// `VALID`, version 0, writer 0.
///
/// # Safety
/// `host` is a live host handle; `key` points to `key_len` bytes; `out` is valid for a
/// write.
#[no_mangle]
pub unsafe extern "C" fn prescient_slot_state(
    host: *mut PrescientHost,
    key: *const u8,
    key_len: usize,
    out: *mut PrescientSlotWord,
) -> PrescientRc {
    // SAFETY: per this function's contract.
    let (host, key) = match unsafe { host_and_key(host, key, key_len) } {
        Ok(args) => args,
        Err(rc) => return rc,
    };
    if out.is_null() {
        return fail(PrescientRc::Invalid, "out is null".into());
    }
    match host.slot_state(key) {
        Some(word) => {
            // SAFETY: `out` is valid for a write per the contract.
            unsafe { *out = slot_word(word) };
            PrescientRc::Ok
        }
        None => fail(
            PrescientRc::Invalid,
            "the region has no cache-directory slots: create it with directory_slots > 0".into(),
        ),
    }
}

/// Decides, without blocking, whether `key` may be served from the KV store's cache
/// at `now_ns` (`prescient_monotonic_ns()`), into `*out`. Always `PRESCIENT_RC_OK` for
/// valid arguments: the decision is in `out->decision`.
///
/// # Safety
/// `host` is a live host handle; `key` points to `key_len` bytes; `out` is valid for a
/// write.
#[no_mangle]
pub unsafe extern "C" fn prescient_check_read(
    host: *mut PrescientHost,
    key: *const u8,
    key_len: usize,
    now_ns: u64,
    out: *mut PrescientReadCheck,
) -> PrescientRc {
    // SAFETY: per this function's contract.
    let (host, key) = match unsafe { host_and_key(host, key, key_len) } {
        Ok(args) => args,
        Err(rc) => return rc,
    };
    if out.is_null() {
        return fail(PrescientRc::Invalid, "out is null".into());
    }
    let none = slot_word(SlotWord::FRESH);
    let (decision, word, token) = match host.check_read(key, now_ns) {
        ReadCheck::Cached(w) => (PrescientReadDecision::Cached, slot_word(w), PrescientRefillToken::default()),
        ReadCheck::Pending(w) => (PrescientReadDecision::Pending, slot_word(w), PrescientRefillToken::default()),
        ReadCheck::Miss(t) => (
            PrescientReadDecision::Miss,
            slot_word(SlotWord::unpack(t.word)),
            PrescientRefillToken { word: t.word, slot: t.slot },
        ),
        ReadCheck::NoLease => (PrescientReadDecision::NoLease, none, PrescientRefillToken::default()),
        ReadCheck::NoDirectory => (PrescientReadDecision::NoDirectory, none, PrescientRefillToken::default()),
    };
    // SAFETY: `out` is valid for a write per the contract.
    unsafe { *out = PrescientReadCheck { decision, word, token } };
    PrescientRc::Ok
}

/// Refills the slot of `token` after a miss (the value is in the cache, not yet
/// servable). `PRESCIENT_RC_OK`: the slot is valid again, mark the cache entry valid.
/// `PRESCIENT_RC_SLOT_CHANGED`: a write or revocation moved the slot since the token
/// was taken, or the lease is not valid: keep the entry unservable.
///
/// # Safety
/// `host` is a live host handle; `token` is valid for a read.
#[no_mangle]
pub unsafe extern "C" fn prescient_refill(host: *mut PrescientHost, token: *const PrescientRefillToken) -> PrescientRc {
    if host.is_null() || token.is_null() {
        return fail(PrescientRc::Invalid, "host or token is null".into());
    }
    // SAFETY: live and valid per the contract.
    let (host, t) = unsafe { (&(*host).0, *token) };
    if host.refill(RefillToken { slot: t.slot, word: t.word }) {
        PrescientRc::Ok
    } else {
        fail(
            PrescientRc::SlotChanged,
            format!(
                "slot {} no longer holds word {:#018x} that can be refilled, or the lease is not valid: do not serve the cached value",
                t.slot, t.word
            ),
        )
    }
}

/// `CLOCK_MONOTONIC` in nanoseconds: the clock of the directory lease (the `now_ns`
/// of `prescient_check_read`).
#[no_mangle]
pub extern "C" fn prescient_monotonic_ns() -> u64 {
    crate::sys::monotonic_ns()
}

fn fail_feed(err: FeedReadError) -> PrescientRc {
    let rc = match &err {
        FeedReadError::CursorTooOld { .. } => PrescientRc::CursorTooOld,
        _ => PrescientRc::Feed,
    };
    fail(rc, err.to_string())
}

/// Opens the change-feed log at `path` read-only and checks its header; the handle
/// follows it with `prescient_feed_read` while the node appends.
///
/// # Safety
/// `path` is a NUL-terminated string; `out` is valid for a write.
#[no_mangle]
pub unsafe extern "C" fn prescient_feed_open(path: *const c_char, out: *mut *mut PrescientFeed) -> PrescientRc {
    // SAFETY: per this function's contract.
    let Some(path) = (unsafe { path_arg(path) }) else { return fail(PrescientRc::Invalid, "path is null".into()) };
    if out.is_null() {
        return fail(PrescientRc::Invalid, "out is null".into());
    }
    match FeedReader::open(path) {
        Ok(reader) => {
            // SAFETY: `out` is valid for a write per the contract.
            unsafe { *out = Box::into_raw(Box::new(PrescientFeed(reader))) };
            PrescientRc::Ok
        }
        Err(e) => fail_feed(e),
    }
}

/// Reads up to `cap` entries with versions above `after` (0: from the start) into
/// `entries`, in order, each exactly once; `*n` is how many (0: none yet, poll again).
/// Pass the last entry's version as `after` next time, and keep it across restarts.
/// `PRESCIENT_RC_CURSOR_TOO_OLD`: entries after `after` were overwritten
/// (`prescient_feed_dropped` and the last error name the newest one); `*n` is 0 on
/// every failure.
///
/// # Safety
/// `feed` is a live feed handle used by one thread at a time; `entries` points to
/// `cap` writable entries (or is null with `cap` 0); `n` is valid for a write.
#[no_mangle]
pub unsafe extern "C" fn prescient_feed_read(
    feed: *mut PrescientFeed,
    after: u64,
    entries: *mut PrescientFeedEntry,
    cap: usize,
    n: *mut usize,
) -> PrescientRc {
    if n.is_null() {
        return fail(PrescientRc::Invalid, "n is null".into());
    }
    // SAFETY: `n` is valid for a write per the contract.
    unsafe { *n = 0 };
    if feed.is_null() || (entries.is_null() && cap > 0) {
        return fail(PrescientRc::Invalid, "feed or entries is null".into());
    }
    // SAFETY: live and used by this thread only, per the contract.
    let reader = unsafe { &mut (*feed).0 };
    let put = |i: usize, e: FeedEntry| {
        let entry = PrescientFeedEntry {
            position: e.position,
            version: e.version,
            key_hash: e.key_hash,
            tombstone: u8::from(e.tombstone),
        };
        // SAFETY: `read_each` hands out `i < cap`, and `entries` points to `cap`
        // writable entries per the contract.
        unsafe { entries.add(i).write(entry) };
    };
    match reader.read_each(after, cap, put) {
        Ok(count) => {
            // SAFETY: as above.
            unsafe { *n = count };
            PrescientRc::Ok
        }
        Err(e) => fail_feed(e),
    }
}

/// The version of the newest entry the feed log has overwritten (0: none) into
/// `*dropped`: a cursor below it is too old.
///
/// # Safety
/// `feed` is a live feed handle; `dropped` is valid for a write.
#[no_mangle]
pub unsafe extern "C" fn prescient_feed_dropped(feed: *const PrescientFeed, dropped: *mut u64) -> PrescientRc {
    if feed.is_null() || dropped.is_null() {
        return fail(PrescientRc::Invalid, "feed or dropped is null".into());
    }
    // SAFETY: live and valid per the contract.
    unsafe { *dropped = (*feed).0.dropped() };
    PrescientRc::Ok
}

/// Closes a feed handle.
///
/// # Safety
/// `feed` is null or a handle from `prescient_feed_open`, closed once.
#[no_mangle]
pub unsafe extern "C" fn prescient_feed_close(feed: *mut PrescientFeed) {
    if !feed.is_null() {
        // SAFETY: a live handle from Box::into_raw, closed once per the contract.
        drop(unsafe { Box::from_raw(feed) });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::header;
    use std::sync::atomic::Ordering;

    /// A host handle on a fresh region, and the region's path.
    fn host(name: &str, directory_slots: u32) -> (*mut PrescientHost, std::path::PathBuf) {
        let path = std::env::temp_dir().join(format!("prescient-ffi-{name}-{}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let c_path = CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
        let config = PrescientRegionConfig {
            queue_pairs: 1,
            ring_entries: 8,
            host_buffers: 8,
            dpu_buffers: 0,
            buffer_bytes: 1024,
            directory_slots,
        };
        let mut out = std::ptr::null_mut();
        // SAFETY: a NUL-terminated path, a live config and a valid out pointer.
        assert_eq!(unsafe { prescient_host_create(c_path.as_ptr(), &config, 0, &mut out) }, PrescientRc::Ok);
        (out, path)
    }

    // The wrappers below take `h` from `host` (live until `free`), a key slice and
    // local out values: exactly the contracts of the functions they call.

    fn slot_state(h: *mut PrescientHost, key: *const u8, key_len: usize) -> (PrescientRc, PrescientSlotWord) {
        let mut word = PrescientSlotWord { packed: 1, version: 1, state: PrescientSlotState::Reserved, writer: 9 };
        // SAFETY: see above.
        (unsafe { prescient_slot_state(h, key, key_len, &mut word) }, word)
    }

    fn check_read(h: *mut PrescientHost, key: &[u8], now_ns: u64) -> PrescientReadCheck {
        let word = PrescientSlotWord { packed: 1, version: 1, state: PrescientSlotState::Reserved, writer: 9 };
        let mut out = PrescientReadCheck { decision: PrescientReadDecision::Cached, word, token: Default::default() };
        // SAFETY: see above.
        assert_eq!(unsafe { prescient_check_read(h, key.as_ptr(), key.len(), now_ns, &mut out) }, PrescientRc::Ok);
        out
    }

    fn refill(h: *mut PrescientHost, token: Option<&PrescientRefillToken>) -> PrescientRc {
        // SAFETY: see above; a null token is refused.
        unsafe { prescient_refill(h, token.map_or(std::ptr::null(), |t| t)) }
    }

    fn free(h: *mut PrescientHost, path: &std::path::Path) {
        // SAFETY: `h` is live and freed once.
        unsafe { prescient_host_free(h) };
        std::fs::remove_file(path).unwrap();
    }

    fn last_error() -> String {
        // SAFETY: prescient_last_error returns a live NUL-terminated string.
        unsafe { CStr::from_ptr(prescient_last_error()) }.to_string_lossy().into_owned()
    }

    #[test]
    fn the_directory_through_the_c_abi() {
        let (h, path) = host("directory", 16);
        let key = b"c-key";
        let (rc, word) = slot_state(h, key.as_ptr(), key.len());
        assert_eq!(rc, PrescientRc::Ok);
        assert_eq!(word, PrescientSlotWord { packed: 0, version: 0, state: PrescientSlotState::Valid, writer: 0 });
        let now = prescient_monotonic_ns();
        assert_eq!(check_read(h, key, now).decision, PrescientReadDecision::NoLease, "a fresh region has no lease");

        // A lease, and a slot a remote writer invalidated: a miss whose token refills once.
        // SAFETY: `h` is live until `free` below.
        let inner = unsafe { &(*h).0 };
        inner.region().u64_at(header::DIRECTORY_LEASE_UNTIL_NS).store(u64::MAX, Ordering::Release);
        let invalid = SlotWord { state: SlotState::Invalid, writer: 3, version: 8 };
        let slot = crate::directory::slot_of(crate::directory::key_id(key), 16);
        inner.directory_slot(slot).unwrap().store(invalid.pack(), Ordering::Release);
        let check = check_read(h, key, now);
        assert_eq!(check.decision, PrescientReadDecision::Miss);
        assert_eq!((check.token.slot, check.token.word), (slot, invalid.pack()));
        assert_eq!((check.word.state, check.word.writer, check.word.version), (PrescientSlotState::Invalid, 3, 8));
        assert_eq!(refill(h, Some(&check.token)), PrescientRc::Ok);
        assert_eq!(refill(h, Some(&check.token)), PrescientRc::SlotChanged);
        assert!(last_error().contains("do not serve"), "{}", last_error());
        assert_eq!(check_read(h, key, now).decision, PrescientReadDecision::Cached);

        assert_eq!(slot_state(h, std::ptr::null(), 0).0, PrescientRc::Invalid);
        assert_eq!(refill(h, None), PrescientRc::Invalid);
        free(h, &path);

        let (h, path) = host("no-directory", 0);
        assert_eq!(slot_state(h, key.as_ptr(), key.len()).0, PrescientRc::Invalid);
        assert!(last_error().contains("directory_slots"), "{}", last_error());
        assert_eq!(check_read(h, key, now).decision, PrescientReadDecision::NoDirectory);
        free(h, &path);
    }

    #[test]
    fn a_feed_through_the_c_abi_and_its_cursor_too_old_rc() {
        let mut log = crate::feed::testing::TestLog::create("ffi", 8);
        let c_path = CString::new(log.path.as_os_str().as_encoded_bytes()).unwrap();
        let mut feed = std::ptr::null_mut();
        // SAFETY: a NUL-terminated path and a local out pointer.
        assert_eq!(unsafe { prescient_feed_open(c_path.as_ptr(), &mut feed) }, PrescientRc::Ok);
        let read = |feed: *mut PrescientFeed, after: u64, entries: &mut [PrescientFeedEntry]| {
            let mut n = usize::MAX;
            // SAFETY: `feed` is live until closed below; `entries` and `n` are locals.
            let rc = unsafe { prescient_feed_read(feed, after, entries.as_mut_ptr(), entries.len(), &mut n) };
            (rc, n)
        };
        let mut entries = [PrescientFeedEntry::default(); 4];
        assert_eq!(read(feed, 0, &mut entries), (PrescientRc::Ok, 0));
        for s in 1..=3 {
            log.append(s * 10, s, s == 2);
        }
        assert_eq!(read(feed, 0, &mut entries), (PrescientRc::Ok, 3));
        assert_eq!(entries[1], PrescientFeedEntry { position: 2, version: 20, key_hash: 2, tombstone: 1 });
        for s in 4..=12 {
            log.append(s * 10, s, false);
        }
        assert_eq!(read(feed, 30, &mut entries), (PrescientRc::CursorTooOld, 0));
        assert!(last_error().contains("up to version 0x28"), "{}", last_error());
        let mut dropped = 0;
        // SAFETY: `feed` is live; `dropped` is a local.
        assert_eq!(unsafe { prescient_feed_dropped(feed, &mut dropped) }, PrescientRc::Ok);
        assert_eq!(dropped, 40);
        assert_eq!(read(feed, 40, &mut entries), (PrescientRc::Ok, 4));
        assert_eq!(read(std::ptr::null_mut(), 0, &mut entries), (PrescientRc::Invalid, 0));
        // SAFETY: closed once.
        unsafe { prescient_feed_close(feed) };

        let missing = CString::new("/nonexistent/prescient-feed").unwrap();
        // SAFETY: as above.
        assert_eq!(unsafe { prescient_feed_open(missing.as_ptr(), &mut feed) }, PrescientRc::Feed);
        assert!(last_error().contains("/nonexistent/prescient-feed"), "{}", last_error());
        // SAFETY: a null path is refused.
        assert_eq!(unsafe { prescient_feed_open(std::ptr::null(), &mut feed) }, PrescientRc::Invalid);
    }

    #[test]
    fn a_completion_that_is_not_a_gets_has_no_value() {
        let (h, path) = host("take-value", 0);
        let mut qp = std::ptr::null_mut();
        // SAFETY: `h` is live; the out pointer is a local.
        assert_eq!(unsafe { prescient_qp_open(h, 0, &mut qp) }, PrescientRc::Ok);
        let c = PrescientCompletion { user_data: 5, sq_index: 0, ..Default::default() };
        let mut buf = PrescientBuffer { index: 0, generation: 0, value: std::ptr::null_mut(), capacity: 0 };
        // SAFETY: `qp` is live and used by this thread only; `c` and `buf` are locals.
        assert_eq!(unsafe { prescient_take_value(qp, &c, &mut buf) }, PrescientRc::NoValue);
        assert!(last_error().contains("carries no value"), "{}", last_error());
        // SAFETY: as above; a null completion is refused.
        assert_eq!(unsafe { prescient_take_value(qp, std::ptr::null(), &mut buf) }, PrescientRc::Invalid);
        // SAFETY: the queue pair is live and closed once, before its host.
        unsafe { prescient_qp_close(qp) };
        free(h, &path);
    }
}
