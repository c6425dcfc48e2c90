//! The command filter that routes Redis's own commands to the module: `SET`, `GET`,
//! `DEL` and `UNLINK` become `PRESCIENT.SET`/`GET`/`DEL`, so clients and
//! `redis-benchmark` need no change; the string writes the module does not replicate
//! become `PRESCIENT.REFUSE`, which says so, rather than changing only this node's copy.

use std::cell::OnceCell;

use crate::api::{Filtered, KeptString, RawFilterCtx};

/// Writes to string keys that would change only this Redis's copy (and SWAPDB, which
/// would swap database 0's copies for another database's).
const NOT_REPLICATED: [&[u8]; 21] = [
    b"append",
    b"incr",
    b"incrby",
    b"incrbyfloat",
    b"decr",
    b"decrby",
    b"getset",
    b"getdel",
    b"getex",
    b"setnx",
    b"setex",
    b"psetex",
    b"mset",
    b"msetnx",
    b"setrange",
    b"rename",
    b"renamenx",
    b"copy",
    b"move",
    b"restore",
    b"swapdb",
];

struct Names {
    set: KeptString,
    get: KeptString,
    del: KeptString,
    refuse: KeptString,
}

thread_local! {
    static NAMES: OnceCell<Names> = const { OnceCell::new() };
}

/// Makes the command names the filter writes (module load).
pub fn init() {
    NAMES.with(|n| {
        let _ = n.set(Names {
            set: KeptString::new("prescient.set"),
            get: KeptString::new("prescient.get"),
            del: KeptString::new("prescient.del"),
            refuse: KeptString::new("prescient.refuse"),
        });
    });
}

/// The filter Redis calls before every command.
pub extern "C" fn filter(ctx: RawFilterCtx) {
    let cmd = Filtered::new(ctx);
    let Some(name) = cmd.name() else { return };
    if name.len() > 11 {
        return;
    }
    NAMES.with(|n| {
        let Some(n) = n.get() else { return };
        if name.eq_ignore_ascii_case(b"set") {
            cmd.rename(&n.set);
        } else if name.eq_ignore_ascii_case(b"get") {
            cmd.rename(&n.get);
        } else if name.eq_ignore_ascii_case(b"del") || name.eq_ignore_ascii_case(b"unlink") {
            cmd.rename(&n.del);
        } else if NOT_REPLICATED.iter().any(|w| name.eq_ignore_ascii_case(w)) {
            cmd.prepend(&n.refuse);
        }
    });
}
