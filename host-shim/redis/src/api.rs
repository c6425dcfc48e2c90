//! The Redis module API calls this module makes, as safe functions. The
//! `redis-module` crate generates the bindings (from Redis's own `redismodule.h`) and
//! runs the module's load; its higher-level wrappers allocate a `Vec` of arguments per
//! command and a reply value per reply, so the data path calls the API directly, here.
//!
//! Every `unsafe` block of the crate is in this file. What they rely on, once:
//! - Redis fills each `RedisModule_*` function pointer before `RedisModule_OnLoad`
//!   returns (the `redis_module!` macro calls `RedisModule_Init` first), and never
//!   changes it again; a pointer this Redis lacks is `None`, and [`api!`] panics with
//!   the Redis version needed instead of calling through it.
//! - Everything here runs on Redis's main thread (commands, filters, blocked-client
//!   callbacks, timers and event-loop callbacks all do), which is the thread the
//!   module API may be called from without a thread-safe context.
//! - The pointers Redis hands a callback (a context, `argv`) are valid for the length
//!   of that callback; nothing here keeps them beyond it, except a blocked client
//!   handle, which Redis keeps valid until it is unblocked, and strings this module
//!   retained itself.
#![allow(unsafe_code)]

use std::ffi::{c_char, c_int, c_longlong, c_void, CStr};
use std::ptr::NonNull;

use redis_module::raw;

/// Redis's command context, as a callback receives it.
pub type RawCtx = *mut raw::RedisModuleCtx;
/// The argument vector a command callback receives.
pub type RawArgv = *mut *mut raw::RedisModuleString;
/// A command filter's context.
pub type RawFilterCtx = *mut raw::RedisModuleCommandFilterCtx;

/// The function pointer `$name`, or a panic that says which Redis provides it.
macro_rules! api {
    ($name:ident) => {{
        // Nested inside the callers' unsafe blocks, this one is redundant there but
        // keeps the read's own justification beside it.
        #[allow(unused_unsafe)]
        // SAFETY: a plain read of a pointer-sized static that Redis wrote once, on this
        // thread, before any callback of the module can run (module header).
        let f = unsafe { raw::$name };
        f.expect(concat!(stringify!($name), " is missing: the Prescient module needs Redis 7.0 or later"))
    }};
}

/// Fails, naming what is missing, if this Redis lacks a call the module makes (the
/// event-loop calls came with Redis 7.0): checked at load, so no callback meets one.
pub fn check_redis_version() -> Result<(), String> {
    // SAFETY: plain reads (copies) of statics Redis wrote before the module's init ran.
    let (event_loop, flags) = unsafe { (raw::RedisModule_EventLoopAdd, raw::RedisModule_GetContextFlags) };
    if event_loop.is_some() && flags.is_some() {
        Ok(())
    } else {
        Err("this Redis lacks RedisModule_EventLoopAdd: the Prescient module needs Redis 7.0 or later".into())
    }
}

/// The status a command callback returns.
pub const OK: c_int = raw::REDISMODULE_OK as c_int;

/// A command callback's context and arguments.
#[derive(Clone, Copy)]
pub struct Call {
    ctx: RawCtx,
    argv: RawArgv,
    argc: usize,
}

impl Call {
    /// Wraps what Redis handed a command (or blocked-client) callback.
    pub fn new(ctx: RawCtx, argv: RawArgv, argc: c_int) -> Self {
        Self { ctx, argv, argc: usize::try_from(argc).unwrap_or(0) }
    }

    /// The number of arguments, the command's name included.
    pub fn argc(&self) -> usize {
        self.argc
    }

    /// Argument `i` (0 is the command's name) as its Redis string.
    pub fn raw_arg(&self, i: usize) -> *mut raw::RedisModuleString {
        assert!(i < self.argc, "argument {i} of {}", self.argc);
        // SAFETY: `argv` holds `argc` valid string pointers for this callback; `i` is
        // in range.
        unsafe { *self.argv.add(i) }
    }

    /// Argument `i` as bytes, valid for this callback.
    pub fn arg(&self, i: usize) -> &[u8] {
        string_bytes(self.raw_arg(i))
    }

    /// The database the client has selected.
    pub fn db(&self) -> c_int {
        // SAFETY: valid context for this callback.
        unsafe { api!(RedisModule_GetSelectedDb)(self.ctx) }
    }

    /// Whether the client may not be blocked now (inside MULTI/EXEC, a script, or a
    /// context that denies blocking).
    pub fn cannot_block(&self) -> bool {
        // SAFETY: valid context for this callback.
        let flags = unsafe { api!(RedisModule_GetContextFlags)(self.ctx) } as u32;
        flags
            & (raw::REDISMODULE_CTX_FLAGS_MULTI
                | raw::REDISMODULE_CTX_FLAGS_LUA
                | raw::REDISMODULE_CTX_FLAGS_DENY_BLOCKING)
            != 0
    }

    /// Replies `+msg`.
    pub fn reply_simple(&self, msg: &CStr) {
        // SAFETY: valid context for this callback; `msg` is NUL-terminated.
        unsafe { api!(RedisModule_ReplyWithSimpleString)(self.ctx, msg.as_ptr()) };
    }

    /// Replies with an error; `msg` starts with its code (`NOTDURABLE ...`), without
    /// the `-`. A NUL inside `msg` ends it.
    pub fn reply_error(&self, msg: &str) {
        let mut text: Vec<u8> = msg.bytes().take_while(|&b| b != 0).collect();
        text.push(0);
        // SAFETY: valid context; `text` is NUL-terminated and outlives the call (Redis
        // copies it into the reply).
        unsafe { api!(RedisModule_ReplyWithError)(self.ctx, text.as_ptr().cast::<c_char>()) };
    }

    /// Replies with a bulk string, copied into the reply.
    pub fn reply_bulk(&self, bytes: &[u8]) {
        // SAFETY: valid context; `bytes` is valid for `len` bytes during the call.
        unsafe { api!(RedisModule_ReplyWithStringBuffer)(self.ctx, bytes.as_ptr().cast::<c_char>(), bytes.len()) };
    }

    /// Replies with the null bulk string (a GET of a missing key).
    pub fn reply_null(&self) {
        // SAFETY: valid context.
        unsafe { api!(RedisModule_ReplyWithNull)(self.ctx) };
    }

    /// Replies with an integer.
    pub fn reply_integer(&self, v: i64) {
        // SAFETY: valid context.
        unsafe { api!(RedisModule_ReplyWithLongLong)(self.ctx, v as c_longlong) };
    }

    /// Replies that the command got the wrong number of arguments.
    pub fn wrong_arity(&self) {
        // SAFETY: valid context.
        unsafe { api!(RedisModule_WrongArity)(self.ctx) };
    }

    /// Calls `f` with the string value of key `argv[i]` in Redis's own keyspace (None if
    /// the key is missing or holds another type).
    pub fn with_local_string<R>(&self, i: usize, f: impl FnOnce(Option<&[u8]>) -> R) -> R {
        let name = self.raw_arg(i);
        // SAFETY: valid context and key name; the key is closed below, before the
        // callback returns, and the slice does not outlive it.
        unsafe {
            let key = api!(RedisModule_OpenKey)(self.ctx, name, raw::REDISMODULE_READ as c_int);
            let value = if key.is_null() || api!(RedisModule_KeyType)(key) != raw::REDISMODULE_KEYTYPE_STRING as c_int {
                None
            } else {
                let mut len = 0usize;
                let ptr = api!(RedisModule_StringDMA)(key, &mut len, raw::REDISMODULE_READ as c_int);
                (!ptr.is_null()).then(|| std::slice::from_raw_parts(ptr.cast::<u8>(), len))
            };
            let r = f(value);
            if !key.is_null() {
                api!(RedisModule_CloseKey)(key);
            }
            r
        }
    }

    /// Sets key `argv[key]` in Redis's own keyspace to the string `argv[value]` (shared,
    /// not copied).
    pub fn set_local(&self, key: usize, value: usize) {
        let (name, value) = (self.raw_arg(key), self.raw_arg(value));
        // SAFETY: valid context, key name and value string; the key is closed at once.
        unsafe {
            let key = api!(RedisModule_OpenKey)(self.ctx, name, raw::REDISMODULE_WRITE as c_int);
            if !key.is_null() {
                api!(RedisModule_StringSet)(key, value);
                api!(RedisModule_CloseKey)(key);
            }
        }
    }

    /// Sets key `argv[key]` in Redis's own keyspace to a copy of `bytes`.
    pub fn set_local_bytes(&self, key: usize, bytes: &[u8]) {
        let name = self.raw_arg(key);
        // SAFETY: valid context and key name; the new string is owned by the context's
        // auto-memory-less scope and freed below after StringSet took its reference.
        unsafe {
            let value = api!(RedisModule_CreateString)(self.ctx, bytes.as_ptr().cast::<c_char>(), bytes.len());
            let key = api!(RedisModule_OpenKey)(self.ctx, name, raw::REDISMODULE_WRITE as c_int);
            if !key.is_null() {
                api!(RedisModule_StringSet)(key, value);
                api!(RedisModule_CloseKey)(key);
            }
            api!(RedisModule_FreeString)(self.ctx, value);
        }
    }

    /// Deletes key `argv[i]` from Redis's own keyspace.
    pub fn delete_local(&self, i: usize) {
        let name = self.raw_arg(i);
        // SAFETY: valid context and key name; the key is closed at once.
        unsafe {
            let key = api!(RedisModule_OpenKey)(self.ctx, name, raw::REDISMODULE_WRITE as c_int);
            if !key.is_null() {
                api!(RedisModule_DeleteKey)(key);
                api!(RedisModule_CloseKey)(key);
            }
        }
    }

    /// Blocks the calling client until [`unblock`]: Redis then calls `reply` (with this
    /// command's arguments) unless the client left or timed out, and `free` always,
    /// each with the token passed to [`unblock`]. After `timeout_ms` (0: never) Redis
    /// calls `timeout` instead of `reply`.
    pub fn block(&self, callbacks: &BlockCallbacks, timeout_ms: u64) -> Blocked {
        // SAFETY: valid context of a command callback; the callbacks are `extern "C"`
        // functions with the signatures Redis expects.
        let bc = unsafe {
            api!(RedisModule_BlockClient)(
                self.ctx,
                Some(callbacks.reply),
                Some(callbacks.timeout),
                Some(callbacks.free),
                timeout_ms as c_longlong,
            )
        };
        Blocked(NonNull::new(bc).expect("RedisModule_BlockClient returned NULL"))
    }

    /// In a blocked client's `reply` callback: the token passed to [`unblock`].
    pub fn unblock_token(&self) -> usize {
        // SAFETY: valid context of a blocked client's reply callback.
        unsafe { api!(RedisModule_GetBlockedClientPrivateData)(self.ctx) as usize }
    }
}

/// The callbacks of a blocked client (see [`Call::block`]).
pub struct BlockCallbacks {
    /// Replies once the request completed.
    pub reply: unsafe extern "C" fn(RawCtx, RawArgv, c_int) -> c_int,
    /// Replies when the client's block timed out.
    pub timeout: unsafe extern "C" fn(RawCtx, RawArgv, c_int) -> c_int,
    /// Releases the token, whatever happened to the client.
    pub free: unsafe extern "C" fn(RawCtx, *mut c_void),
}

/// A blocked client's handle: valid until passed to [`unblock`].
#[derive(Debug)]
pub struct Blocked(NonNull<raw::RedisModuleBlockedClient>);

/// Unblocks `client` with `token` (not 0): see [`Call::block`].
pub fn unblock(client: Blocked, token: usize) {
    assert_ne!(token, 0, "Redis calls no free callback for a NULL token");
    // SAFETY: the handle came from RedisModule_BlockClient and is consumed here, once.
    unsafe { api!(RedisModule_UnblockClient)(client.0.as_ptr(), token as *mut c_void) };
}

/// The bytes of a Redis string, valid while the string is.
pub fn string_bytes<'a>(s: *const raw::RedisModuleString) -> &'a [u8] {
    let mut len = 0usize;
    // SAFETY: `s` is a valid string (an argument of the running callback, or one this
    // module retained); Redis returns a pointer to its `len` bytes.
    unsafe {
        let ptr = api!(RedisModule_StringPtrLen)(s, &mut len);
        if ptr.is_null() {
            &[]
        } else {
            std::slice::from_raw_parts(ptr.cast::<u8>(), len)
        }
    }
}

/// A string this module keeps for its whole life (command names a filter writes).
#[derive(Debug)]
pub struct KeptString(NonNull<raw::RedisModuleString>);

impl KeptString {
    /// Creates it, outside any context (never freed automatically).
    pub fn new(text: &str) -> Self {
        // SAFETY: a NULL context makes a string Redis never frees on its own.
        let s =
            unsafe { api!(RedisModule_CreateString)(std::ptr::null_mut(), text.as_ptr().cast::<c_char>(), text.len()) };
        Self(NonNull::new(s).expect("RedisModule_CreateString returned NULL"))
    }

    /// A new reference to it, for an API that takes ownership of one.
    fn retained(&self) -> *mut raw::RedisModuleString {
        // SAFETY: the string is alive (this module holds a reference); retaining adds one.
        unsafe { api!(RedisModule_RetainString)(std::ptr::null_mut(), self.0.as_ptr()) };
        self.0.as_ptr()
    }
}

/// A command callback's signature.
pub type CommandFn = unsafe extern "C" fn(RawCtx, RawArgv, c_int) -> c_int;

/// Registers command `name` (`flags` as Redis spells them, key positions 1-based).
pub fn create_command(ctx: RawCtx, name: &CStr, f: CommandFn, flags: &CStr, keys: (c_int, c_int, c_int)) -> bool {
    // SAFETY: valid load-time context; the strings are NUL-terminated.
    unsafe {
        api!(RedisModule_CreateCommand)(ctx, name.as_ptr(), Some(f), flags.as_ptr(), keys.0, keys.1, keys.2) == OK
    }
}

/// Registers a command filter that does not see the module's own calls.
pub fn register_filter(ctx: RawCtx, f: unsafe extern "C" fn(RawFilterCtx)) -> bool {
    // SAFETY: valid load-time context; `f` has the filter signature.
    let filter =
        unsafe { api!(RedisModule_RegisterCommandFilter)(ctx, Some(f), raw::REDISMODULE_CMDFILTER_NOSELF as c_int) };
    !filter.is_null()
}

/// A command filter's view of one command.
pub struct Filtered(RawFilterCtx);

impl Filtered {
    /// Wraps what Redis handed the filter.
    pub fn new(ctx: RawFilterCtx) -> Self {
        Self(ctx)
    }

    /// The command's name as sent (any case); None for an empty command.
    pub fn name(&self) -> Option<&[u8]> {
        // SAFETY: valid filter context for this callback.
        let s = unsafe { api!(RedisModule_CommandFilterArgGet)(self.0, 0) };
        (!s.is_null()).then(|| string_bytes(s))
    }

    /// Replaces the command's name with `name`.
    pub fn rename(&self, name: &KeptString) {
        // SAFETY: valid filter context; the filter takes the retained reference.
        unsafe { api!(RedisModule_CommandFilterArgReplace)(self.0, 0, name.retained()) };
    }

    /// Puts `name` before the command's name (which becomes its first argument).
    pub fn prepend(&self, name: &KeptString) {
        // SAFETY: valid filter context; the filter takes the retained reference.
        unsafe { api!(RedisModule_CommandFilterArgInsert)(self.0, 0, name.retained()) };
    }
}

/// Calls `f` on Redis's main thread whenever `fd` is readable.
pub fn watch_readable(fd: c_int, f: unsafe extern "C" fn(c_int, *mut c_void, c_int)) -> bool {
    // SAFETY: `fd` is an open descriptor this module owns for its whole life; `f` has
    // the event-loop callback signature.
    unsafe {
        api!(RedisModule_EventLoopAdd)(fd, raw::REDISMODULE_EVENTLOOP_READABLE as c_int, Some(f), std::ptr::null_mut())
            == OK
    }
}

/// A server event's identity, as an event callback receives it.
pub type RawEvent = raw::RedisModuleEvent;
/// The event loop's before-sleep subevent.
pub const BEFORE_SLEEP: u64 = raw::REDISMODULE_SUBEVENT_EVENTLOOP_BEFORE_SLEEP;

/// Calls `f` on the main thread at each of the event loop's sleeps and wake-ups (the
/// subevent says which); false if this Redis has no such event (before 7.0).
pub fn on_event_loop(ctx: RawCtx, f: unsafe extern "C" fn(RawCtx, RawEvent, u64, *mut c_void)) -> bool {
    let event = raw::RedisModuleEvent { id: raw::REDISMODULE_EVENT_EVENTLOOP, dataver: 1 };
    // SAFETY: valid context; `f` has the server-event callback signature and keeps
    // nothing Redis passes it.
    unsafe { api!(RedisModule_SubscribeToServerEvent)(ctx, event, Some(f)) == OK }
}

/// A Redis string, as a callback receives it.
pub type RawString = raw::RedisModuleString;
/// The flush event's subevent at its end.
pub const FLUSH_END: u64 = raw::REDISMODULE_SUBEVENT_FLUSHDB_END;

/// Calls `f` on the main thread for the keyspace events that drop a key's copy
/// (expired, evicted, and the generic class, whose `del` is one).
pub fn on_keyspace_drops(
    ctx: RawCtx,
    f: unsafe extern "C" fn(RawCtx, c_int, *const c_char, *mut RawString) -> c_int,
) -> bool {
    let types = raw::REDISMODULE_NOTIFY_GENERIC | raw::REDISMODULE_NOTIFY_EXPIRED | raw::REDISMODULE_NOTIFY_EVICTED;
    // SAFETY: valid context; `f` has the notification signature and keeps nothing
    // Redis passes it beyond the call.
    unsafe { api!(RedisModule_SubscribeToKeyspaceEvents)(ctx, types as c_int, Some(f)) == OK }
}

/// Whether keyspace event `event` (a NUL-terminated name Redis passes) removed the key.
pub fn is_drop_event(event: *const c_char) -> bool {
    if event.is_null() {
        return false;
    }
    // SAFETY: Redis passes a NUL-terminated static event name, valid for the callback.
    let name = unsafe { CStr::from_ptr(event) }.to_bytes();
    matches!(name, b"del" | b"expired" | b"evicted")
}

/// Calls `f` on the main thread at the start and end of every flush (`FLUSHDB`,
/// `FLUSHALL`).
pub fn on_flush(ctx: RawCtx, f: unsafe extern "C" fn(RawCtx, RawEvent, u64, *mut c_void)) -> bool {
    let event = raw::RedisModuleEvent { id: raw::REDISMODULE_EVENT_FLUSHDB, dataver: 1 };
    // SAFETY: valid context; `f` has the server-event callback signature and keeps
    // nothing Redis passes it.
    unsafe { api!(RedisModule_SubscribeToServerEvent)(ctx, event, Some(f)) == OK }
}

/// Calls `f` once, on the main thread, after `ms` milliseconds.
pub fn timer(ctx: RawCtx, ms: i64, f: unsafe extern "C" fn(RawCtx, *mut c_void)) {
    // SAFETY: valid context; `f` has the timer signature and ignores its data.
    unsafe { api!(RedisModule_CreateTimer)(ctx, ms, Some(f), std::ptr::null_mut()) };
}

/// Logs `msg` at `level` ("notice", "warning", ...) to Redis's log.
pub fn log(ctx: RawCtx, level: &CStr, msg: &str) {
    let mut text: Vec<u8> = msg.bytes().filter(|&b| b != 0).collect();
    text.push(0);
    // SAFETY: the format is "%s" and its one argument a NUL-terminated string that
    // outlives the call.
    unsafe { api!(RedisModule_Log)(ctx, level.as_ptr(), c"%s".as_ptr(), text.as_ptr().cast::<c_char>()) };
}

/// A new non-blocking eventfd.
pub fn eventfd() -> std::io::Result<std::fs::File> {
    // SAFETY: eventfd takes no pointers.
    let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` is a new descriptor that nothing else owns.
    Ok(unsafe { <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(fd) })
}
