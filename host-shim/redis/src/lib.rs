//! `prescient-redis`: a Redis module that makes Redis a Prescient host.
//!
//! Loaded with `redis-server --loadmodule libprescient_redis.so region=PATH`, it
//! creates (or, after a Redis restart, takes over) the shared region at `PATH` that a
//! `prescient-dpu serve` process serves, and routes Redis's own commands through it
//! (see `filter.rs`): `SET key value` becomes a replicated Prescient PUT whose `+OK`
//! comes only once the write committed, `DEL`/`UNLINK` DELETEs, and `GET` is served from
//! Redis's own copy only while the key's cache-directory slot says that copy is the
//! newest (see `engine.rs`), else fetched fresh through the DPU app. Clients block while
//! their command is with the DPU app; Redis's event loop does not: completions wake it
//! through an eventfd (`waker.rs`). Errors are Redis error replies that say what
//! happened (`errors.rs`): `-NOTDURABLE`, `-UNAVAILABLE`, `-OVERLOADED`,
//! `-DPURESTARTED`, `-TIMEOUT`. `PRESCIENT.STATS` prints the module's counters.
//!
//! The binary `prescient-redis` starts and stops a cluster of such Redis servers, each
//! with its DPU app, and benchmarks it with `redis-benchmark`.
//!
//! The modules are the crate's own (nothing here is a Rust API): `api.rs` wraps the
//! Redis module API, and its functions take the raw pointers Redis hands the running
//! callback, on the contract its header states.
#![deny(unsafe_code)]

mod api;
mod commands;
mod engine;
mod errors;
mod filter;
mod forget;
mod options;
mod requests;
mod stats;
mod waker;

use redis_module::{Context, RedisString, Status};

use crate::api::BlockCallbacks;

/// One command the module registers.
struct Registration {
    name: &'static std::ffi::CStr,
    f: api::CommandFn,
    /// Redis's command flags.
    flags: &'static std::ffi::CStr,
    /// First key, last key (-1: the last argument), step.
    keys: (i32, i32, i32),
}

const COMMANDS: [Registration; 5] = [
    Registration { name: c"prescient.set", f: commands::set, flags: c"write deny-oom", keys: (1, 1, 1) },
    Registration { name: c"prescient.get", f: commands::get, flags: c"readonly", keys: (1, 1, 1) },
    Registration { name: c"prescient.del", f: commands::del, flags: c"write", keys: (1, -1, 1) },
    Registration { name: c"prescient.refuse", f: commands::refuse, flags: c"", keys: (0, 0, 0) },
    Registration { name: c"prescient.stats", f: commands::stats, flags: c"readonly", keys: (0, 0, 0) },
];

fn init(ctx: &Context, args: &[RedisString]) -> Status {
    let raw = ctx.ctx;
    if let Err(e) = api::check_redis_version() {
        api::log(raw, c"warning", &format!("prescient: {e}"));
        return Status::Err;
    }
    let args: Vec<String> = args.iter().map(|a| a.to_string_lossy()).collect();
    let options = match options::Options::parse(args.iter().map(String::as_str)) {
        Ok(o) => o,
        Err(e) => {
            api::log(raw, c"warning", &format!("prescient: {e}"));
            return Status::Err;
        }
    };
    let callbacks = BlockCallbacks { reply: commands::reply, timeout: commands::timeout, free: commands::free };
    let engine = match engine::Engine::start(options, callbacks) {
        Ok(e) => e,
        Err(e) => {
            api::log(raw, c"warning", &format!("prescient: {e}"));
            return Status::Err;
        }
    };
    let fd = engine.wake_fd();
    let region = engine.region().display().to_string();
    engine::install(engine);
    filter::init();
    for c in COMMANDS {
        if !api::create_command(raw, c.name, c.f, c.flags, c.keys) {
            api::log(raw, c"warning", &format!("prescient: cannot register {}", c.name.to_string_lossy()));
            return Status::Err;
        }
    }
    if !api::register_filter(raw, filter::filter) || !api::watch_readable(fd, commands::on_wake) {
        api::log(raw, c"warning", "prescient: cannot register the command filter or the completion eventfd");
        return Status::Err;
    }
    // One publish per event-loop iteration where Redis says when it sleeps.
    if api::on_event_loop(raw, commands::before_sleep) {
        engine::with(engine::Engine::publish_before_sleep);
    }
    if !api::on_keyspace_drops(raw, commands::on_key_dropped) || !api::on_flush(raw, commands::on_flush) {
        api::log(raw, c"warning", "prescient: cannot subscribe to key expiry, eviction and flush events");
        return Status::Err;
    }
    commands::start_tick(raw);
    api::log(raw, c"notice", &format!("prescient: serving SET/GET/DEL through region {region}"));
    Status::Ok
}

fn deinit(_ctx: &Context) -> Status {
    engine::remove();
    Status::Ok
}

/// The module's entry points (`RedisModule_OnLoad`, `RedisModule_OnUnload`), as the
/// `redis-module` crate generates them.
#[allow(missing_docs)]
mod entry {
    use super::{deinit, init};
    use redis_module::redis_module;

    redis_module! {
        name: "prescient",
        version: 1,
        allocator: (redis_module::alloc::RedisAlloc, redis_module::alloc::RedisAlloc),
        data_types: [],
        init: init,
        deinit: deinit,
    }
}
