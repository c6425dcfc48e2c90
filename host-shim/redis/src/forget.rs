//! Keys whose copy Redis dropped on its own, so the module forgets their tags.
//!
//! Redis can remove its copy of a key without a command this module runs: a TTL set
//! with `EXPIRE` runs out, `maxmemory` evicts it, `FLUSHDB`/`FLUSHALL` empty the
//! database. A tag left behind is harmless to reads (a GET serves Redis's copy only if
//! there is one), but the tag table would grow with every key ever dropped that way.
//! Redis tells the module (keyspace notifications, the flush event) inside whatever it
//! is doing - possibly one of the module's own calls, while the engine is borrowed - so
//! the callbacks only note the key here, and the engine drops the tags before Redis's
//! next sleep ([`crate::engine::Engine::before_sleep`]).

use std::cell::RefCell;

/// What to forget.
#[derive(Debug, Default)]
pub struct Forget {
    /// Keys whose copy went.
    pub keys: Vec<Box<[u8]>>,
    /// A flush emptied a database: every tag goes.
    pub all: bool,
}

thread_local! {
    static FORGET: RefCell<Forget> = RefCell::new(Forget::default());
}

/// Notes that Redis dropped its copy of `key`.
pub fn key(key: &[u8]) {
    FORGET.with(|f| {
        let mut f = f.borrow_mut();
        if !f.all {
            f.keys.push(key.into());
        }
    });
}

/// Notes that a database was flushed.
pub fn all() {
    FORGET.with(|f| {
        let mut f = f.borrow_mut();
        f.all = true;
        f.keys.clear();
    });
}

/// Hands what was noted since the last call to `apply`, emptied.
pub fn drain(apply: impl FnOnce(&mut Forget)) {
    FORGET.with(|f| {
        let mut taken = std::mem::take(&mut *f.borrow_mut());
        if taken.all || !taken.keys.is_empty() {
            apply(&mut taken);
        }
    });
}
