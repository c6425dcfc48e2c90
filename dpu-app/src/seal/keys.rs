//! AES-256 keys: loading key files, and the key ring that rotation needs.
//!
//! A key file holds exactly 32 raw bytes and must not be readable by group or
//! others. A key directory holds one file per key, named `<id>.key` with a
//! decimal id; the highest id is the current key (new frames), every other one
//! still opens the frames it sealed. Rotating is adding `<id+1>.key` and
//! restarting.

use std::fs;
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use super::aead::{AeadBackend, AeadKey};
use super::SealError;
use crate::limits::{KEYS_MAX, KEY_LEN};

/// Names a key; every sealed frame carries the id of the key that sealed it.
pub type KeyId = u32;

/// The keys a node seals and opens with, sorted by id; the last is current.
pub struct KeyRing {
    keys: Vec<(KeyId, AeadKey)>,
    backend: AeadBackend,
}

impl std::fmt::Debug for KeyRing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Key ids only; key material never reaches a log.
        f.debug_struct("KeyRing").field("ids", &self.ids().collect::<Vec<_>>()).finish()
    }
}

impl KeyRing {
    /// An empty ring; add keys with [`Self::insert`].
    pub fn new() -> Self {
        Self { keys: Vec::with_capacity(KEYS_MAX), backend: AeadBackend::detect() }
    }

    /// Adds a key under `id`; refuses a duplicate id or more than [`KEYS_MAX`].
    pub fn insert(&mut self, id: KeyId, key: &[u8; KEY_LEN]) -> Result<(), SealError> {
        if self.keys.len() == KEYS_MAX {
            return Err(SealError::KeyRing { reason: format!("more than {KEYS_MAX} keys; retire old keys") });
        }
        let pos = match self.keys.binary_search_by_key(&id, |(i, _)| *i) {
            Ok(_) => return Err(SealError::KeyRing { reason: format!("key id {id} given twice") }),
            Err(pos) => pos,
        };
        let key = AeadKey::new(self.backend, key)?;
        self.keys.insert(pos, (id, key));
        Ok(())
    }

    /// Adds the key in `path` under `id` (see [`read_key_file`]).
    pub fn insert_file(&mut self, id: KeyId, path: &Path) -> Result<(), SealError> {
        let mut key = read_key_file(path)?;
        let result = self.insert(id, &key);
        key.fill(0);
        result
    }

    /// Loads every `<id>.key` file of `dir`.
    pub fn load_dir(dir: &Path) -> Result<Self, SealError> {
        let read_err = |source| SealError::KeyFileRead { path: dir.to_owned(), source };
        let mut ring = Self::new();
        for entry in fs::read_dir(dir).map_err(read_err)? {
            let path = entry.map_err(read_err)?.path();
            let id = path
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.strip_suffix(".key"))
                .and_then(|n| n.parse::<KeyId>().ok())
                .ok_or_else(|| SealError::KeyFileName { path: path.clone() })?;
            ring.insert_file(id, &path)?;
        }
        if ring.keys.is_empty() {
            return Err(SealError::KeyRing { reason: format!("no <id>.key file in {}", dir.display()) });
        }
        Ok(ring)
    }

    /// The current key: the one with the highest id.
    pub fn current(&self) -> Option<(KeyId, &AeadKey)> {
        self.keys.last().map(|(id, k)| (*id, k))
    }

    /// The key named `id`.
    pub fn get(&self, id: KeyId) -> Option<&AeadKey> {
        self.keys.binary_search_by_key(&id, |(i, _)| *i).ok().map(|pos| &self.keys[pos].1)
    }

    /// The AES-GCM implementation the keys use on this CPU.
    pub fn backend(&self) -> AeadBackend {
        self.backend
    }

    /// Ids of all keys, ascending.
    pub fn ids(&self) -> impl Iterator<Item = KeyId> + '_ {
        self.keys.iter().map(|(id, _)| *id)
    }
}

impl Default for KeyRing {
    fn default() -> Self {
        Self::new()
    }
}

/// Reads a key file: exactly 32 bytes, a regular file, no permission bits for
/// group or others.
pub fn read_key_file(path: &Path) -> Result<[u8; KEY_LEN], SealError> {
    let read_err = |source| SealError::KeyFileRead { path: path.to_owned(), source };
    let mut file = fs::File::open(path).map_err(read_err)?;
    let meta = file.metadata().map_err(read_err)?;
    let mode = meta.permissions().mode() & 0o7777;
    if mode & 0o077 != 0 {
        return Err(SealError::KeyFilePermissions { path: path.to_owned(), mode });
    }
    if !meta.is_file() || meta.len() != KEY_LEN as u64 {
        return Err(SealError::KeyFileLength { path: path.to_owned(), len: meta.len() });
    }
    let mut key = [0u8; KEY_LEN];
    file.read_exact(&mut key).map_err(read_err)?;
    Ok(key)
}

/// Makes `dir` a key folder if it is not one yet: creates it (mode 700) with one key,
/// `1.key`, of 32 random bytes from `/dev/urandom` (mode 600). Returns whether it made
/// one; a folder that exists is left as it is, for [`KeyRing::load_dir`] to check.
pub fn create_key_dir(dir: &Path) -> Result<bool, SealError> {
    use std::os::unix::fs::OpenOptionsExt;
    if dir.exists() {
        return Ok(false);
    }
    let err = |what, path: &Path| {
        let path = path.to_owned();
        move |source| SealError::KeyCreate { what, path, source }
    };
    fs::create_dir_all(dir).map_err(err("create the key folder", dir))?;
    fs::set_permissions(dir, fs::Permissions::from_mode(0o700)).map_err(err("restrict the key folder", dir))?;
    let mut key = [0u8; KEY_LEN];
    let urandom = Path::new("/dev/urandom");
    fs::File::open(urandom).and_then(|mut f| f.read_exact(&mut key)).map_err(err("read", urandom))?;
    let file = dir.join("1.key");
    let written = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&file)
        .and_then(|mut out| std::io::Write::write_all(&mut out, &key));
    key.fill(0);
    written.map_err(err("write the key file", &file))?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("prescient-keys-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn write_key(path: &Path, byte: u8, mode: u32) {
        fs::write(path, [byte; KEY_LEN]).unwrap();
        fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
    }

    #[test]
    fn a_missing_key_folder_is_created_with_one_private_random_key_and_an_existing_one_kept() {
        let dir = temp_dir("create").join("keys");
        assert!(create_key_dir(&dir).unwrap());
        let ring = KeyRing::load_dir(&dir).unwrap();
        assert_eq!(ring.ids().collect::<Vec<_>>(), vec![1]);
        assert_eq!(fs::metadata(dir.join("1.key")).unwrap().permissions().mode() & 0o777, 0o600);
        let key = fs::read(dir.join("1.key")).unwrap();
        assert!(!create_key_dir(&dir).unwrap(), "an existing folder is left alone");
        assert_eq!(fs::read(dir.join("1.key")).unwrap(), key);
        fs::remove_dir_all(dir.parent().unwrap()).unwrap();
    }

    #[test]
    fn key_dir_loads_and_newest_is_current() {
        let dir = temp_dir("ok");
        write_key(&dir.join("1.key"), 1, 0o600);
        write_key(&dir.join("7.key"), 7, 0o400);
        let ring = KeyRing::load_dir(&dir).unwrap();
        assert_eq!(ring.ids().collect::<Vec<_>>(), [1, 7]);
        assert_eq!(ring.current().unwrap().0, 7);
        assert!(ring.get(1).is_some() && ring.get(2).is_none());
        assert_eq!(format!("{ring:?}"), "KeyRing { ids: [1, 7] }");
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn readable_short_or_misnamed_key_files_are_refused() {
        let dir = temp_dir("bad");
        let path = dir.join("1.key");
        write_key(&path, 1, 0o644);
        let err = read_key_file(&path).unwrap_err();
        assert!(matches!(err, SealError::KeyFilePermissions { mode: 0o644, .. }), "{err}");
        assert!(err.to_string().contains("chmod 600"), "{err}");
        fs::write(&path, [0u8; 31]).unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).unwrap();
        assert!(matches!(read_key_file(&path), Err(SealError::KeyFileLength { len: 31, .. })));
        assert!(matches!(read_key_file(&dir.join("none.key")), Err(SealError::KeyFileRead { .. })));
        fs::remove_file(&path).unwrap();
        assert!(matches!(KeyRing::load_dir(&dir), Err(SealError::KeyRing { .. })));
        write_key(&dir.join("current.key"), 1, 0o600);
        assert!(matches!(KeyRing::load_dir(&dir), Err(SealError::KeyFileName { .. })));
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn duplicate_ids_and_overfull_rings_are_refused() {
        let mut ring = KeyRing::new();
        ring.insert(3, &[3; KEY_LEN]).unwrap();
        assert!(matches!(ring.insert(3, &[4; KEY_LEN]), Err(SealError::KeyRing { .. })));
        for id in 4..KEYS_MAX as u32 + 3 {
            ring.insert(id, &[0; KEY_LEN]).unwrap();
        }
        assert!(matches!(ring.insert(0, &[0; KEY_LEN]), Err(SealError::KeyRing { .. })));
    }
}
