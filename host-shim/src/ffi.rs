//! The C ABI: what a C or C++ key-value store calls. `build.rs` generates
//! `prescient.h` from this file with cbindgen.
//!
//! Every function returns a [`PrescientRc`] (0 on success) and never unwinds; the
//! message of the last failure on the calling thread is at
//! [`prescient_last_error`]. Handles are opaque pointers owned by the caller until the
//! matching `_free`/`_close`. Buffers cross as `(index, generation)` pairs and are
//! checked against the region's ownership words on every call, so a stale, forged or
//! doubly submitted buffer is an error, not corruption.
#![allow(unsafe_code)]

use std::cell::RefCell;
use std::ffi::{c_char, CStr, CString};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use crate::buffer::Buffer;
use crate::descriptor::Sla;
use crate::error::ShimError;
use crate::host::{Host, HostOptions, QueuePair};
use crate::layout::RegionConfig;

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
    /// The DPU app is not responding.
    DpuNotResponding = -6,
    /// No completion within the timeout.
    Timeout = -7,
    /// The DPU app fenced the queue pair off.
    Fenced = -8,
    /// Any other failure; see `prescient_last_error`.
    Other = -9,
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
    /// Error detail.
    pub detail: u32,
}

/// An opaque host handle.
pub struct PrescientHost(Arc<Host>);
/// An opaque queue-pair handle.
pub struct PrescientQp(QueuePair);

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
        ShimError::DpuNotResponding { .. } => PrescientRc::DpuNotResponding,
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
        Ok(mut buf) => {
            let (index, generation) = (buf.index(), buf.generation());
            let value = buf.value_mut();
            let raw = PrescientBuffer { index, generation, value: value.as_mut_ptr(), capacity: value.len() };
            let _ = buf.into_raw();
            // SAFETY: `out` is valid for a write per the contract.
            unsafe { *out = raw };
            PrescientRc::Ok
        }
        Err(e) => fail_shim(e),
    }
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

fn sla_arg(sla: u8) -> Option<Sla> {
    match sla {
        0 => Some(Sla::Stale),
        1 => Some(Sla::Fresh),
        _ => None,
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
    sla: u8,
    user_data: u64,
) -> PrescientRc {
    if qp.is_null() || key.is_null() || buf.is_null() {
        return fail(PrescientRc::Invalid, "qp, key or buf is null".into());
    }
    let Some(sla) = sla_arg(sla) else {
        return fail(PrescientRc::Invalid, format!("sla {sla} is not 0 (stale) or 1 (fresh)"));
    };
    // SAFETY: live, exclusive and valid per the contract.
    let (qp, key, raw) = unsafe { (&mut (*qp).0, std::slice::from_raw_parts(key, key_len), &*buf) };
    let buffer = match Buffer::from_raw(qp.words().region().clone(), raw.index, raw.generation) {
        Ok(b) => b,
        Err(state) => {
            return fail(
                PrescientRc::BufferState,
                format!(
                    "buffer {} (generation {}) is {}, not held by this host: submit each buffer once, after take",
                    raw.index,
                    raw.generation,
                    crate::arena::BufferState::describe(state)
                ),
            )
        }
    };
    match qp.put(key, buffer, value_len, sla, user_data) {
        Ok(()) => PrescientRc::Ok,
        Err((e, buffer)) => {
            let _ = buffer.into_raw();
            fail_shim(e)
        }
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
        };
        count += 1;
    };
    // `wait_max` never hands over more than `max`: the rest stay on the ring.
    let result = qp.wait_max(Duration::from_millis(timeout_ms.into()), max, take);
    // SAFETY: valid for a write per the contract.
    unsafe { *got = count };
    match result {
        Ok(_) => PrescientRc::Ok,
        Err(e) => fail_shim(e),
    }
}
