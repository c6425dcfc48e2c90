//! Registered memory: access flags, the region with its keys, a local buffer that a work
//! request owns while it is posted, and the remote address a peer is told about.

use std::sync::Arc;

use super::error::{FabricError, Result};
use super::memory::Memory;

/// Access rights of a memory region (the `ibv_access_flags` bit values).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Access(u32);

impl Access {
    /// No remote access, NIC may only read (sources of WRITE and SEND).
    pub const NONE: Access = Access(0);
    /// The NIC may write the region locally (destinations of READ and atomics, receives).
    pub const LOCAL_WRITE: Access = Access(1);
    /// Peers may RDMA WRITE into the region.
    pub const REMOTE_WRITE: Access = Access(2);
    /// Peers may RDMA READ the region.
    pub const REMOTE_READ: Access = Access(4);
    /// Peers may perform atomics on the region.
    pub const REMOTE_ATOMIC: Access = Access(8);
    /// Everything.
    pub const ALL: Access = Access(15);

    /// The raw bits.
    pub fn bits(self) -> u32 {
        self.0
    }

    /// True when every bit of `other` is set in `self`.
    pub fn contains(self, other: Access) -> bool {
        self.0 & other.0 == other.0
    }

    /// Checks the rule hardware enforces at registration: remote write or atomic access
    /// needs local write.
    pub fn validate(self) -> Result<()> {
        if self.0 & !Self::ALL.0 != 0 {
            return Err(FabricError::BadAccess { access: self.0, why: "unknown access bits" });
        }
        if (self.contains(Self::REMOTE_WRITE) || self.contains(Self::REMOTE_ATOMIC))
            && !self.contains(Self::LOCAL_WRITE)
        {
            return Err(FabricError::BadAccess {
                access: self.0,
                why: "remote write or remote atomic access needs LOCAL_WRITE too",
            });
        }
        Ok(())
    }
}

impl std::ops::BitOr for Access {
    type Output = Access;
    fn bitor(self, rhs: Access) -> Access {
        Access(self.0 | rhs.0)
    }
}

/// Keeps a backend's registration alive; dropping it deregisters.
pub trait Registration: Send + Sync {}
impl<T: Send + Sync> Registration for T {}

/// Memory registered with a fabric: its local key (for work requests) and remote key (for
/// peers). Shared as `Arc<MemoryRegion>`; deregistered when the last `Arc` goes.
pub struct MemoryRegion {
    // Field order matters: fields drop in declaration order, and the registration must
    // go (deregister) before the memory is unmapped.
    _registration: Box<dyn Registration>,
    memory: Arc<Memory>,
    access: Access,
    lkey: u32,
    rkey: u32,
    domain: u64,
}

impl std::fmt::Debug for MemoryRegion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryRegion")
            .field("addr", &self.memory.addr())
            .field("len", &self.memory.len())
            .field("lkey", &self.lkey)
            .field("rkey", &self.rkey)
            .field("access", &self.access)
            .finish()
    }
}

impl MemoryRegion {
    /// Assembles a region; used by backends once the NIC has accepted the registration.
    /// `domain` identifies the protection domain (a buffer of another domain posted to a
    /// queue pair is a local protection error).
    pub fn new(
        memory: Arc<Memory>,
        access: Access,
        keys: (u32, u32),
        domain: u64,
        registration: Box<dyn Registration>,
    ) -> Self {
        let (lkey, rkey) = keys;
        Self { _registration: registration, memory, access, lkey, rkey, domain }
    }

    /// The protection domain that registered the region.
    pub fn domain(&self) -> u64 {
        self.domain
    }

    /// The registered memory.
    pub fn memory(&self) -> &Memory {
        &self.memory
    }

    /// Local key.
    pub fn lkey(&self) -> u32 {
        self.lkey
    }

    /// Remote key.
    pub fn rkey(&self) -> u32 {
        self.rkey
    }

    /// Access rights.
    pub fn access(&self) -> Access {
        self.access
    }

    /// What a peer needs to reach this region: address, length and rkey.
    pub fn remote(&self) -> RemoteRegion {
        RemoteRegion { addr: self.memory.addr(), len: self.memory.len() as u64, rkey: self.rkey }
    }

    /// A local buffer over `offset..offset+len` of this region, to post in a work request.
    pub fn buf(self: &Arc<Self>, offset: usize, len: usize) -> Result<LocalBuf> {
        match offset.checked_add(len) {
            Some(end) if end <= self.memory.len() => Ok(LocalBuf { mr: Arc::clone(self), offset, len }),
            _ => Err(FabricError::OutOfRange {
                offset: offset as u64,
                len: len as u64,
                region_len: self.memory.len() as u64,
            }),
        }
    }
}

/// A slice of a registered region that a work request carries. Posting moves it into the
/// queue pair's in-flight table; its completion hands it back. While the NIC owns it, the
/// program must not touch those bytes (the type cannot stop another `LocalBuf` over the
/// same bytes: that is the caller's discipline, as with hardware).
#[derive(Debug)]
pub struct LocalBuf {
    mr: Arc<MemoryRegion>,
    offset: usize,
    len: usize,
}

impl LocalBuf {
    /// The region.
    pub fn region(&self) -> &Arc<MemoryRegion> {
        &self.mr
    }

    /// Offset of the buffer inside its region.
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for a zero-length buffer (a WRITE_WITH_IMM that carries only the immediate).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Virtual address of the first byte.
    pub fn addr(&self) -> u64 {
        self.mr.memory.addr() + self.offset as u64
    }

    /// Copies the buffer's bytes into `dst` (which must be the buffer's length).
    pub fn read(&self, dst: &mut [u8]) -> Result<()> {
        self.fit(dst.len())?;
        self.mr.memory.read(self.offset, dst)
    }

    /// Fills the buffer's first `src.len()` bytes from `src`.
    pub fn write(&self, src: &[u8]) -> Result<()> {
        self.fit(src.len())?;
        self.mr.memory.write(self.offset, src)
    }

    /// The first 8 bytes as a little-endian word (the result of a CAS or FETCH_ADD).
    pub fn read_u64(&self) -> Result<u64> {
        let mut b = [0u8; 8];
        self.read(&mut b)?;
        Ok(u64::from_le_bytes(b))
    }

    fn fit(&self, len: usize) -> Result<()> {
        if len > self.len {
            return Err(FabricError::OutOfRange {
                offset: self.offset as u64,
                len: len as u64,
                region_len: self.len as u64,
            });
        }
        Ok(())
    }
}

/// A peer's region as advertised to us: address, length, rkey.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RemoteRegion {
    /// Virtual address of the first byte in the peer.
    pub addr: u64,
    /// Length in bytes.
    pub len: u64,
    /// Remote key.
    pub rkey: u32,
}

impl RemoteRegion {
    /// Bytes of [`RemoteRegion::to_bytes`].
    pub const WIRE_BYTES: usize = 20;

    /// The address `offset` bytes into the region. Not bounds-checked here on purpose: the
    /// responder checks, and a bad address must give a remote access error, as on hardware.
    pub fn at(&self, offset: u64) -> RemoteAddr {
        RemoteAddr { addr: self.addr.wrapping_add(offset), rkey: self.rkey }
    }

    /// Little-endian wire form (addr u64, len u64, rkey u32), for a side channel.
    pub fn to_bytes(&self) -> [u8; Self::WIRE_BYTES] {
        let mut b = [0u8; Self::WIRE_BYTES];
        b[0..8].copy_from_slice(&self.addr.to_le_bytes());
        b[8..16].copy_from_slice(&self.len.to_le_bytes());
        b[16..20].copy_from_slice(&self.rkey.to_le_bytes());
        b
    }

    /// Parses [`RemoteRegion::to_bytes`].
    pub fn from_bytes(b: &[u8]) -> Result<Self> {
        if b.len() != Self::WIRE_BYTES {
            return Err(FabricError::Malformed("remote region descriptor is not 20 bytes"));
        }
        Ok(Self {
            addr: u64::from_le_bytes(b[0..8].try_into().expect("8 bytes")),
            len: u64::from_le_bytes(b[8..16].try_into().expect("8 bytes")),
            rkey: u32::from_le_bytes(b[16..20].try_into().expect("4 bytes")),
        })
    }
}

/// A remote address: where a one-sided operation lands in the peer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RemoteAddr {
    /// Virtual address in the peer.
    pub addr: u64,
    /// Remote key of the region holding it.
    pub rkey: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn access_rules() {
        assert!((Access::LOCAL_WRITE | Access::REMOTE_WRITE).validate().is_ok());
        assert!(Access::REMOTE_WRITE.validate().is_err());
        assert!(Access::REMOTE_ATOMIC.validate().is_err());
        assert!(Access::REMOTE_READ.validate().is_ok());
        assert!(Access(64).validate().is_err());
    }

    #[test]
    fn remote_region_golden_bytes() {
        let r = RemoteRegion { addr: 0x0102_0304_0506_0708, len: 0x10, rkey: 0xAABB_CCDD };
        let b = r.to_bytes();
        assert_eq!(b, [8, 7, 6, 5, 4, 3, 2, 1, 0x10, 0, 0, 0, 0, 0, 0, 0, 0xDD, 0xCC, 0xBB, 0xAA]);
        assert_eq!(RemoteRegion::from_bytes(&b).unwrap(), r);
        assert!(RemoteRegion::from_bytes(&b[..19]).is_err());
    }
}
