//! The commands waiting on the DPU app: one entry per blocked client, found again by
//! the `user_data` its requests carry (index and generation, so a completion that names
//! a reused entry is told apart). Sized once, to the ring: nothing is allocated per
//! command.

use prescient_shim::{RefillToken, Value};

use crate::api::Blocked;

/// What a command is waiting for.
#[derive(Debug)]
pub enum Op {
    /// A SET: a PUT.
    Set,
    /// A GET through the DPU app; refill the directory with the token if the value may
    /// be cached.
    Get {
        /// From the miss that caused it.
        token: Option<RefillToken>,
    },
    /// A DEL of several keys: one DELETE each.
    Del {
        /// DELETEs that committed.
        done: u32,
    },
}

/// How a command ended, for its reply.
#[derive(Debug)]
pub enum Outcome {
    /// A SET committed at `version`.
    Stored {
        /// The write's version.
        version: u64,
    },
    /// A GET's value, in the buffer that carried the request.
    Value {
        /// The value, in its buffer.
        value: Value,
        /// Refill the directory with this token after caching the value.
        refill: Option<RefillToken>,
    },
    /// A GET found no value.
    Missing,
    /// A DEL: how many keys' DELETEs committed.
    Deleted(u32),
    /// An error reply (its code first, no `-`).
    Failed(String),
}

/// One command waiting on the DPU app.
#[derive(Debug)]
pub struct Entry {
    generation: u32,
    /// The blocked client, until it is unblocked.
    pub client: Option<Blocked>,
    /// What it waits for.
    pub op: Op,
    /// Its requests on the ring not completed yet.
    pub in_flight: u32,
    /// Its outcome, from unblocking to its reply.
    pub outcome: Option<Outcome>,
    /// Redis ran the free callback: the client side is done with the entry.
    pub released: bool,
    /// The first failure among its requests.
    pub failure: Option<String>,
}

/// Every command waiting on the DPU app.
#[derive(Debug)]
pub struct Requests {
    entries: Vec<Option<Entry>>,
    generations: Vec<u32>,
    free: Vec<u32>,
}

impl Requests {
    /// Room for `capacity` commands at once.
    pub fn new(capacity: u32) -> Self {
        Self {
            entries: (0..capacity).map(|_| None).collect(),
            generations: vec![0; capacity as usize],
            free: (0..capacity).rev().collect(),
        }
    }

    /// Commands waiting now.
    #[allow(clippy::len_without_is_empty)]
    pub fn len(&self) -> usize {
        self.entries.len() - self.free.len()
    }

    /// Opens an entry (its client is set once its requests are submitted); returns its
    /// `user_data`, None if every entry is taken.
    pub fn open(&mut self, op: Op, in_flight: u32) -> Option<u64> {
        let index = self.free.pop()?;
        let generation = self.generations[index as usize].wrapping_add(1);
        self.generations[index as usize] = generation;
        self.entries[index as usize] =
            Some(Entry { generation, client: None, op, in_flight, outcome: None, released: false, failure: None });
        Some(user_data(index as usize, generation))
    }

    /// Closes the entry of `user_data` whose requests were never submitted.
    pub fn abandon(&mut self, user_data: u64) {
        if self.get_mut(user_data).is_some() {
            let index = (user_data & u64::from(u32::MAX)) as usize;
            self.entries[index] = None;
            self.free.push(index as u32);
        }
    }

    /// The entry `user_data` names, if it is still open at that generation.
    pub fn get_mut(&mut self, user_data: u64) -> Option<&mut Entry> {
        let index = (user_data & u64::from(u32::MAX)) as usize;
        let generation = (user_data >> 32) as u32;
        self.entries.get_mut(index)?.as_mut().filter(|e| e.generation == generation)
    }

    /// The entry a blocked client's token (index + 1) names.
    pub fn by_token(&mut self, token: usize) -> Option<&mut Entry> {
        self.entries.get_mut(token.checked_sub(1)?)?.as_mut()
    }

    /// The token a blocked client is unblocked with, for the entry of `user_data`.
    pub fn token_of(user_data: u64) -> usize {
        (user_data & u64::from(u32::MAX)) as usize + 1
    }

    /// Closes the entry of `token` if both sides are done with it (its requests
    /// completed and Redis released the client).
    pub fn close_if_done(&mut self, token: usize) {
        let Some(index) = token.checked_sub(1) else { return };
        let done = matches!(self.entries.get(index), Some(Some(e)) if e.released && e.in_flight == 0);
        if done {
            self.entries[index] = None;
            self.free.push(index as u32);
        }
    }

    /// The user_data of every entry whose client is still blocked.
    pub fn blocked(&self) -> impl Iterator<Item = u64> + '_ {
        self.entries.iter().enumerate().filter_map(|(i, e)| {
            let e = e.as_ref()?;
            e.client.is_some().then_some(user_data(i, e.generation))
        })
    }
}

/// The `user_data` of entry `index` at `generation`.
fn user_data(index: usize, generation: u32) -> u64 {
    u64::from(generation) << 32 | index as u64
}
