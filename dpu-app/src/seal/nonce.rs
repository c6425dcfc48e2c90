//! Nonces unique by construction: node id | epoch | counter, 96 bits.
//!
//! A node seals under one epoch per run (the epoch file is bumped at start-up),
//! and counts within it; two nodes differ in node id. So no (key, nonce) pair
//! repeats unless an epoch file is restored from an old copy, which
//! [`super::epoch`] cannot detect and operators must not do.

use super::SealError;
use crate::limits::NONCE_COUNTER_BITS;

/// Bytes of an AES-GCM nonce.
pub const NONCE_LEN: usize = 12;

/// The nonces of one node in one epoch.
#[derive(Debug)]
pub struct NonceSequence {
    node: u16,
    epoch: u32,
    next: u64,
}

impl NonceSequence {
    /// Nonces of `node` in `epoch`, counting from 0.
    pub fn new(node: u16, epoch: u32) -> Self {
        Self { node, epoch, next: 0 }
    }

    /// The next nonce: node (u16), epoch (u32), counter (48 bits), little-endian.
    pub fn advance(&mut self) -> Result<[u8; NONCE_LEN], SealError> {
        if self.next >> NONCE_COUNTER_BITS != 0 {
            return Err(SealError::NoncesExhausted { node: self.node, epoch: self.epoch });
        }
        let mut n = [0u8; NONCE_LEN];
        n[0..2].copy_from_slice(&self.node.to_le_bytes());
        n[2..6].copy_from_slice(&self.epoch.to_le_bytes());
        n[6..12].copy_from_slice(&self.next.to_le_bytes()[..6]);
        self.next += 1;
        Ok(n)
    }

    /// Nonces used so far in this epoch.
    pub fn used(&self) -> u64 {
        self.next
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nonces_carry_node_epoch_counter() {
        let mut s = NonceSequence::new(0x0102, 0x0a0b_0c0d);
        assert_eq!(s.advance().unwrap(), [2, 1, 0x0d, 0x0c, 0x0b, 0x0a, 0, 0, 0, 0, 0, 0]);
        assert_eq!(s.advance().unwrap(), [2, 1, 0x0d, 0x0c, 0x0b, 0x0a, 1, 0, 0, 0, 0, 0]);
        assert_eq!(s.used(), 2);
    }

    #[test]
    fn counter_exhaustion_is_an_error_not_a_wrap() {
        let mut s = NonceSequence::new(1, 1);
        s.next = (1 << NONCE_COUNTER_BITS) - 1;
        assert_eq!(s.advance().unwrap()[6..], [0xff; 6]);
        assert!(matches!(s.advance(), Err(SealError::NoncesExhausted { node: 1, epoch: 1 })));
    }
}
