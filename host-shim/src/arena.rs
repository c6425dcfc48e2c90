//! Ownership of arena buffers, one `u32` word per buffer in the region.
//!
//! A word is `generation << 8 | state`. The host takes a free buffer (bumping its
//! generation), fills it in place and marks it submitted; the DPU app moves it to
//! `Dpu` when it accepts the descriptor, and back to `Free` when the request
//! completes. Every move is a compare-and-swap from the exact word expected, so a
//! stale handle (an old generation) or a buffer in the wrong state cannot be moved.
//! The DPU app never trusts the word alone: it also keeps its own in-flight table.

use std::sync::atomic::{AtomicU32, Ordering};

/// The state half of an ownership word.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum BufferState {
    /// In the arena, nobody's.
    Free = 0,
    /// Taken by the host, being filled.
    Host = 1,
    /// Named by a descriptor the host published.
    Submitted = 2,
    /// Accepted by the DPU app, in flight there.
    Dpu = 3,
}

impl BufferState {
    /// Decodes the state half of `word` (None for garbage a peer wrote).
    pub fn of(word: u32) -> Option<Self> {
        match word & 0xff {
            0 => Some(Self::Free),
            1 => Some(Self::Host),
            2 => Some(Self::Submitted),
            3 => Some(Self::Dpu),
            _ => None,
        }
    }

    /// Words for messages.
    pub fn describe(state: Option<Self>) -> &'static str {
        match state {
            Some(Self::Free) => "free",
            Some(Self::Host) => "held by the host",
            Some(Self::Submitted) => "submitted",
            Some(Self::Dpu) => "in flight in the DPU app",
            None => "in an invalid state",
        }
    }
}

/// Builds an ownership word.
pub fn word(generation: u32, state: BufferState) -> u32 {
    (generation << 8) | state as u32
}

/// The generation half of `word` (24 bits).
pub fn generation(word: u32) -> u32 {
    word >> 8
}

/// Moves `cell` from `from` to `to` for `generation`. Returns the word found on
/// failure.
pub fn transition(cell: &AtomicU32, generation: u32, from: BufferState, to: BufferState) -> Result<(), u32> {
    // AcqRel: taking ownership acquires the previous owner's writes to the buffer;
    // giving it up releases ours.
    cell.compare_exchange(word(generation, from), word(generation, to), Ordering::AcqRel, Ordering::Acquire).map(|_| ())
}

/// Takes `cell` if it is free, bumping its generation. Returns the new generation.
pub fn take(cell: &AtomicU32) -> Option<u32> {
    let current = cell.load(Ordering::Relaxed);
    if BufferState::of(current) != Some(BufferState::Free) {
        return None;
    }
    let next = generation(current).wrapping_add(1) & 0x00ff_ffff;
    cell.compare_exchange(current, word(next, BufferState::Host), Ordering::Acquire, Ordering::Relaxed)
        .ok()
        .map(|_| next)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_buffer_cycles_and_stale_generations_cannot_move_it() {
        let cell = AtomicU32::new(0);
        let g = take(&cell).unwrap();
        assert_eq!(take(&cell), None, "taken twice");
        transition(&cell, g, BufferState::Host, BufferState::Submitted).unwrap();
        assert!(transition(&cell, g, BufferState::Host, BufferState::Free).is_err(), "freed while submitted");
        transition(&cell, g, BufferState::Submitted, BufferState::Dpu).unwrap();
        assert!(transition(&cell, g, BufferState::Submitted, BufferState::Dpu).is_err(), "accepted twice");
        transition(&cell, g, BufferState::Dpu, BufferState::Free).unwrap();
        let g2 = take(&cell).unwrap();
        assert_ne!(g, g2);
        assert!(transition(&cell, g, BufferState::Host, BufferState::Submitted).is_err(), "stale handle");
    }
}
