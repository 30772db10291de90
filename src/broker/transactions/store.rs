//! A standalone broker's durable copy of transaction state: `DATA/transactions/HEX.json`, one
//! file per transactional id (HEX: the id's bytes in hex, so any id is a valid file name),
//! written temp + fsync + rename before the coordinator answers (the rule of group state).
//!
//! One file per id keeps a write proportional to one transaction; the ids a broker knows are
//! loaded once at start. A cluster will keep this state in an internal topic instead (see
//! `offsets_topic`), so the coordinator moves with its partition's leader.

use std::io;
use std::path::{Path, PathBuf};

use super::TransactionMetadata;
use crate::storage::durable_file::write_durably;

/// The directory under the data directory.
pub const TRANSACTIONS_DIRECTORY: &str = "transactions";
pub use crate::broker::transaction_state::MAX_TRANSACTIONAL_ID_BYTES;

/// The transaction states of one data directory.
#[derive(Debug)]
pub struct TransactionStore {
    directory: PathBuf,
}

impl TransactionStore {
    /// Opens (creating) `DATA/transactions/`.
    pub fn open(data: &Path) -> io::Result<Self> {
        let directory = data.join(TRANSACTIONS_DIRECTORY);
        std::fs::create_dir_all(&directory)?;
        Ok(Self { directory })
    }

    /// Every stored transactional id's state. A file that does not parse is an error naming it
    /// (a server must not start and forget a producer epoch it handed out).
    pub fn load(&self) -> io::Result<Vec<TransactionMetadata>> {
        let mut states = Vec::new();
        for entry in std::fs::read_dir(&self.directory)? {
            let path = entry?.path();
            if path.extension().and_then(|extension| extension.to_str()) != Some("json") {
                continue; // a leftover `.tmp` of an interrupted write
            }
            let text = std::fs::read(&path)?;
            let state: TransactionMetadata = serde_json::from_slice(&text).map_err(|error| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("{}: not a transaction state: {error}", path.display()),
                )
            })?;
            states.push(state);
        }
        Ok(states)
    }

    /// Forgets `transactional_id` (an expired id): its file is removed, then the directory
    /// synced. Blocking.
    pub fn remove(&self, transactional_id: &str) -> io::Result<()> {
        let path = self.directory.join(file_name(transactional_id)?);
        match std::fs::remove_file(&path) {
            Ok(()) => {}
            Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(error) => return Err(error),
        }
        std::fs::File::open(&self.directory)?.sync_all()
    }

    /// Stores `state` durably, replacing the id's previous state. Blocking (fsync).
    pub fn save(&self, state: &TransactionMetadata) -> io::Result<()> {
        let name = file_name(&state.transactional_id)?;
        let contents = serde_json::to_vec(state).map_err(io::Error::other)?;
        write_durably(&self.directory, &name, &contents)
    }
}

/// `HEX.json` for a transactional id, or an error if the id is too long.
fn file_name(transactional_id: &str) -> io::Result<String> {
    if transactional_id.len() > MAX_TRANSACTIONAL_ID_BYTES {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "transactional id of {} bytes is longer than {MAX_TRANSACTIONAL_ID_BYTES}: use a shorter transactional.id",
                transactional_id.len()
            ),
        ));
    }
    let mut name = String::with_capacity(transactional_id.len() * 2 + 5);
    for byte in transactional_id.bytes() {
        name.push_str(&format!("{byte:02x}"));
    }
    name.push_str(".json");
    Ok(name)
}
