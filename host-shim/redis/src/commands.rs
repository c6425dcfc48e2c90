//! The module's commands and its blocked-client, timer and event-loop callbacks: each
//! wraps what Redis hands it and calls the engine.

use std::ffi::{c_int, c_void};

use crate::api::{self, Call, RawArgv, RawCtx, OK};
use crate::engine;
use crate::errors;

/// How often the engine checks the DPU app and reaps, in milliseconds.
const TICK_MS: i64 = 100;

fn run(ctx: RawCtx, argv: RawArgv, argc: c_int, f: impl FnOnce(&mut engine::Engine, &Call)) -> c_int {
    let call = Call::new(ctx, argv, argc);
    if engine::with(|e| f(e, &call)).is_none() {
        call.reply_error("ERR prescient: the module is not started");
    }
    OK
}

/// `PRESCIENT.SET key value`.
pub extern "C" fn set(ctx: RawCtx, argv: RawArgv, argc: c_int) -> c_int {
    run(ctx, argv, argc, |e, call| e.set(call))
}

/// `PRESCIENT.GET key`.
pub extern "C" fn get(ctx: RawCtx, argv: RawArgv, argc: c_int) -> c_int {
    run(ctx, argv, argc, |e, call| e.get(call))
}

/// `PRESCIENT.DEL key [key ...]`.
pub extern "C" fn del(ctx: RawCtx, argv: RawArgv, argc: c_int) -> c_int {
    run(ctx, argv, argc, |e, call| e.del(call))
}

/// `PRESCIENT.STATS`: the module's counters.
pub extern "C" fn stats(ctx: RawCtx, argv: RawArgv, argc: c_int) -> c_int {
    run(ctx, argv, argc, |e, call| e.stats(call))
}

/// `PRESCIENT.REFUSE command ...`: what a write the module does not replicate becomes.
pub extern "C" fn refuse(ctx: RawCtx, argv: RawArgv, argc: c_int) -> c_int {
    let call = Call::new(ctx, argv, argc);
    let name = if call.argc() > 1 { call.arg(1) } else { b"?" };
    call.reply_error(&errors::not_replicated(name));
    OK
}

/// A blocked client's reply, once its command is done.
pub extern "C" fn reply(ctx: RawCtx, argv: RawArgv, argc: c_int) -> c_int {
    run(ctx, argv, argc, |e, call| e.reply(call))
}

/// A blocked client's reply when it waited longer than `reply_timeout_ms`.
pub extern "C" fn timeout(ctx: RawCtx, argv: RawArgv, argc: c_int) -> c_int {
    let call = Call::new(ctx, argv, argc);
    let ms = engine::with(|e| e.reply_timeout_ms()).unwrap_or(0);
    call.reply_error(&errors::reply_timeout(ms));
    OK
}

/// A blocked client's free callback.
pub extern "C" fn free(_ctx: RawCtx, token: *mut c_void) {
    let token = token as usize;
    engine::with(|e| e.release(token));
}

/// The eventfd of the waker became readable: completions are ready.
pub extern "C" fn on_wake(_fd: c_int, _data: *mut c_void, _mask: c_int) {
    engine::with(engine::Engine::on_wake);
}

/// A keyspace notification: Redis dropped its copy of a key (expired, evicted,
/// deleted).
pub extern "C" fn on_key_dropped(
    _ctx: RawCtx,
    _type: c_int,
    event: *const std::ffi::c_char,
    key: *mut api::RawString,
) -> c_int {
    if api::is_drop_event(event) {
        crate::forget::key(api::string_bytes(key));
    }
    OK
}

/// A flush event: at its end, every tag goes.
pub extern "C" fn on_flush(_ctx: RawCtx, _event: api::RawEvent, subevent: u64, _data: *mut c_void) {
    if subevent == api::FLUSH_END {
        crate::forget::all();
    }
}

/// Redis's event loop is about to sleep (the before-sleep event).
pub extern "C" fn before_sleep(_ctx: RawCtx, _event: api::RawEvent, subevent: u64, _data: *mut c_void) {
    if subevent == api::BEFORE_SLEEP {
        engine::with(engine::Engine::before_sleep);
    }
}

/// The periodic tick; re-arms itself.
pub extern "C" fn on_tick(ctx: RawCtx, _data: *mut c_void) {
    engine::with(engine::Engine::tick);
    api::timer(ctx, TICK_MS, on_tick);
}

/// Starts the periodic tick.
pub fn start_tick(ctx: RawCtx) {
    api::timer(ctx, TICK_MS, on_tick);
}
