//! Limits of the sealing and striping codecs, in one place.
//!
//! Everything sized from these is allocated when a codec is built, never per request.

/// Most fragments (data + parity) one stripe may have: Reed-Solomon(k, m) with
/// k + m at most this.
pub const FRAGMENTS_MAX: usize = 32;
/// Fragment lengths are multiples of this, so every fragment starts on a cache
/// line when the buffer does, and the SIMD kernels need no tail handling.
pub const FRAGMENT_ALIGN: usize = 64;
/// Largest sealed frame a stripe carries (fits the header's u32 fields).
pub const FRAME_LEN_MAX: usize = 256 << 20;
/// Decode tables cached per Reed-Solomon codec, one per loss pattern seen.
pub const DECODE_CACHE_ENTRIES: usize = 16;
/// AES-256 key length.
pub const KEY_LEN: usize = 32;
/// Most keys a key ring holds (the current one and older ones still opened).
pub const KEYS_MAX: usize = 64;
/// Bits of the per-epoch nonce counter; the other 48 bits of the 96-bit nonce
/// are the node id (16) and the epoch (32).
pub const NONCE_COUNTER_BITS: u32 = 48;

const _: () = assert!(FRAGMENTS_MAX <= 256, "GF(2^8) Cauchy codes need k + m <= 256");
const _: () = assert!(FRAGMENTS_MAX <= 32, "fragment sets are u32 bit masks");
const _: () = assert!(FRAGMENT_ALIGN.is_power_of_two() && FRAGMENT_ALIGN % 64 == 0);
const _: () = assert!(FRAME_LEN_MAX <= u32::MAX as usize);
const _: () = assert!(FRAME_LEN_MAX % FRAGMENT_ALIGN == 0);
const _: () = assert!(16 + 32 + NONCE_COUNTER_BITS == 96, "the GCM nonce is 96 bits");
