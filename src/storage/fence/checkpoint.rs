//! The epoch checkpoint file ([`CHECKPOINT_FILE`]): the durable record of installed epochs and
//! of a re-created partition's creation epoch.
//!
//! Why apart: the fence makes an epoch current only after its persist step returned, and this
//! file is what that step writes (fsynced), so an epoch never goes backwards across restarts;
//! its format and its durability are kept together here.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use super::super::durable_file::write_durably;

/// Name of the epoch checkpoint file in a partition directory.
pub const CHECKPOINT_FILE: &str = "epoch-checkpoint";
/// How many `epoch start_offset` lines the checkpoint keeps; older history is dropped.
pub const CHECKPOINT_HISTORY_MAX: usize = 64;

/// First word of the checkpoint line that records a re-created partition's creation epoch.
pub const CREATION_EPOCH_KEYWORD: &str = "created";

/// The durable record of installed epochs: lines of `epoch start_offset`, newest last, after an
/// optional first line `created EPOCH` on a partition re-created under a deleted one's name (its
/// creation epoch, see the module docs; absent means 0).
#[derive(Debug)]
pub struct EpochCheckpoint {
    directory: PathBuf,
    creation_epoch: u64,
    history: Vec<(u64, u64)>,
}

impl EpochCheckpoint {
    /// Loads the checkpoint of the partition in `directory` (empty if there is none).
    pub fn load(directory: &Path) -> io::Result<Self> {
        let path = directory.join(CHECKPOINT_FILE);
        let mut history = Vec::new();
        let mut creation_epoch = 0;
        match fs::read_to_string(&path) {
            Ok(text) => {
                for (number, line) in text.lines().enumerate() {
                    let invalid = || {
                        io::Error::new(
                            io::ErrorKind::InvalidData,
                            format!(
                                "{}: line {} is not `epoch start_offset` (nor a first line `{CREATION_EPOCH_KEYWORD} epoch`)",
                                path.display(),
                                number + 1
                            ),
                        )
                    };
                    if let Some(rest) = line.strip_prefix(CREATION_EPOCH_KEYWORD) {
                        if number != 0 {
                            return Err(invalid());
                        }
                        creation_epoch = rest.trim().parse::<u64>().map_err(|_| invalid())?;
                        continue;
                    }
                    let mut fields = line.split_whitespace().map(str::parse::<u64>);
                    match (fields.next(), fields.next(), fields.next()) {
                        (Some(Ok(epoch)), Some(Ok(start)), None) => history.push((epoch, start)),
                        _ => return Err(invalid()),
                    }
                }
            }
            Err(error) if error.kind() == io::ErrorKind::NotFound => {}
            Err(error) => return Err(error),
        }
        Ok(Self {
            directory: directory.to_path_buf(),
            creation_epoch,
            history,
        })
    }

    /// The highest epoch recorded, the creation epoch included (0 if none).
    pub fn latest_epoch(&self) -> u64 {
        self.history
            .iter()
            .map(|(epoch, _)| *epoch)
            .max()
            .unwrap_or(0)
            .max(self.creation_epoch)
    }

    /// The epoch the partition was created at (0 unless it re-created a deleted one).
    pub fn creation_epoch(&self) -> u64 {
        self.creation_epoch
    }

    /// The recorded `(epoch, start_offset)` pairs, oldest first.
    pub fn history(&self) -> &[(u64, u64)] {
        &self.history
    }

    /// Appends `epoch start_offset` and makes the file durable: write a temp file, fsync it,
    /// rename it over the old one, fsync the directory. Only after this returns may the epoch be
    /// announced to anyone.
    pub fn record(&mut self, epoch: u64, start_offset: u64) -> io::Result<()> {
        let mut history = self.history.clone();
        history.push((epoch, start_offset));
        let excess = history.len().saturating_sub(CHECKPOINT_HISTORY_MAX);
        history.drain(..excess);
        self.write(self.creation_epoch, &history)?;
        self.history = history;
        Ok(())
    }

    /// Records the partition's creation epoch, durably, before the partition is opened (a
    /// partition re-created under the name of a deleted one; see the module docs). Refuses to
    /// lower one already recorded.
    pub fn record_creation(&mut self, creation_epoch: u64) -> io::Result<()> {
        if creation_epoch < self.creation_epoch {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "creation epoch {creation_epoch} is below the recorded {}",
                    self.creation_epoch
                ),
            ));
        }
        self.write(creation_epoch, &self.history)?;
        self.creation_epoch = creation_epoch;
        Ok(())
    }

    fn write(&self, creation_epoch: u64, history: &[(u64, u64)]) -> io::Result<()> {
        let mut text = String::new();
        if creation_epoch > 0 {
            text.push_str(&format!("{CREATION_EPOCH_KEYWORD} {creation_epoch}\n"));
        }
        for (epoch, start) in history {
            text.push_str(&format!("{epoch} {start}\n"));
        }
        write_durably(&self.directory, CHECKPOINT_FILE, text.as_bytes())
    }
}
