//! The sparse offset index of one segment: every `index_interval_bytes` of log, one entry
//! `(offset relative to the segment's base, byte position)`, so a read seeks close to its offset
//! and walks at most one interval of batch headers.
//!
//! On disk the index is a file of 8-byte entries (`relative_offset u32`, `position u32`,
//! big-endian) beside the segment. It is a cache: recovery rebuilds it from the validated log and
//! rewrites the file when it is missing or disagrees, so it is never trusted over the log.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

/// Bytes per index entry on disk.
pub const ENTRY_BYTES: usize = 8;

/// One index entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexEntry {
    /// Offset minus the segment's base offset.
    pub relative_offset: u32,
    /// Byte position of the batch that starts at that offset.
    pub position: u32,
}

/// Entries shared between the writer and readers.
pub type SharedEntries = Arc<RwLock<Vec<IndexEntry>>>;

/// The largest entry at or before `relative_offset` (the position to start walking from), or 0.
pub fn lookup(entries: &SharedEntries, relative_offset: u32) -> usize {
    let entries = entries.read().expect("index lock poisoned");
    let at = entries.partition_point(|entry| entry.relative_offset <= relative_offset);
    at.checked_sub(1)
        .map_or(0, |i| entries[i].position as usize)
}

/// Decodes an index file's bytes; `None` if its length is not a multiple of an entry.
pub fn decode(bytes: &[u8]) -> Option<Vec<IndexEntry>> {
    if !bytes.len().is_multiple_of(ENTRY_BYTES) {
        return None;
    }
    Some(
        bytes
            .chunks_exact(ENTRY_BYTES)
            .map(|chunk| IndexEntry {
                relative_offset: u32::from_be_bytes(chunk[..4].try_into().expect("4 bytes")),
                position: u32::from_be_bytes(chunk[4..].try_into().expect("4 bytes")),
            })
            .collect(),
    )
}

fn encode(entries: &[IndexEntry]) -> Vec<u8> {
    let mut out = Vec::with_capacity(entries.len() * ENTRY_BYTES);
    for entry in entries {
        out.extend_from_slice(&entry.relative_offset.to_be_bytes());
        out.extend_from_slice(&entry.position.to_be_bytes());
    }
    out
}

/// The writer's side of a segment index.
#[derive(Debug)]
pub struct IndexWriter {
    path: PathBuf,
    /// Opened on the first entry written, so an idle partition holds no descriptor.
    file: Option<File>,
    entries: SharedEntries,
    interval_bytes: usize,
    bytes_since_entry: usize,
}

impl IndexWriter {
    /// Opens the index at `path` with the entries recovery found in the log. If the file does not
    /// hold exactly those entries (missing, torn, stale) it is rewritten; returns whether it was.
    pub fn open(
        path: &Path,
        entries: Vec<IndexEntry>,
        interval_bytes: usize,
        bytes_since_entry: usize,
    ) -> io::Result<(Self, bool)> {
        let on_disk = std::fs::read(path).ok().and_then(|bytes| decode(&bytes));
        let rewritten = on_disk.as_deref() != Some(&entries[..]);
        if rewritten {
            std::fs::write(path, encode(&entries))?;
        }
        Ok((
            Self {
                path: path.to_path_buf(),
                file: None,
                entries: Arc::new(RwLock::new(entries)),
                interval_bytes: interval_bytes.max(1),
                bytes_since_entry,
            },
            rewritten,
        ))
    }

    /// The entries, for readers.
    pub fn shared(&self) -> SharedEntries {
        Arc::clone(&self.entries)
    }

    /// Notes a batch of `batch_bytes` appended at `position`; adds an entry when an interval of
    /// log has passed since the last one (the first batch of a segment needs none: position 0).
    ///
    /// Never fails: the index is a cache of the log. The entry always reaches the in-memory index
    /// that readers use; if writing it to the file fails, the file is stale, and the next open
    /// notices (it compares the file with the entries rebuilt from the log) and rewrites it. An
    /// append whose batch is already in the segment must not be reported as failed because of it.
    pub fn on_append(&mut self, relative_offset: u32, position: usize, batch_bytes: usize) {
        if self.bytes_since_entry >= self.interval_bytes {
            let entry = IndexEntry {
                relative_offset,
                position: u32::try_from(position).expect("segment positions fit in u32"),
            };
            self.entries
                .write()
                .expect("index lock poisoned")
                .push(entry);
            if let Err(error) = self
                .file()
                .and_then(|file| file.write_all(&encode(&[entry])))
            {
                tracing::warn!(index = %self.path.display(), %error, "could not write index entry; the index file will be rebuilt on the next open");
            }
            self.bytes_since_entry = 0;
        }
        self.bytes_since_entry += batch_bytes;
    }

    /// The index file, opened for appending on first use.
    fn file(&mut self) -> io::Result<&mut File> {
        if self.file.is_none() {
            self.file = Some(OpenOptions::new().append(true).open(&self.path)?);
        }
        Ok(self.file.as_mut().expect("opened above"))
    }

    /// Makes the index file durable (on seal and close; recovery rebuilds it otherwise). Nothing
    /// to do when no entry was written through this writer.
    pub fn sync(&self) -> io::Result<()> {
        match &self.file {
            Some(file) => {
                super::durable_file::before(super::durable_file::FileOperation::Sync, &self.path)?;
                file.sync_data()
            }
            None => Ok(()),
        }
    }
}

/// Builds entries while scanning a segment during recovery, with the same spacing rule as
/// [`IndexWriter::on_append`]. Returns the entries and the bytes since the last one.
#[derive(Debug, Default)]
pub struct IndexBuilder {
    /// Entries so far.
    pub entries: Vec<IndexEntry>,
    /// Bytes appended since the last entry.
    pub bytes_since_entry: usize,
    interval_bytes: usize,
}

impl IndexBuilder {
    /// A builder with the given spacing.
    pub fn new(interval_bytes: usize) -> Self {
        Self {
            entries: Vec::new(),
            bytes_since_entry: 0,
            interval_bytes: interval_bytes.max(1),
        }
    }

    /// Same rule as the writer's.
    pub fn on_batch(&mut self, relative_offset: u32, position: usize, batch_bytes: usize) {
        if self.bytes_since_entry >= self.interval_bytes {
            self.entries.push(IndexEntry {
                relative_offset,
                position: position as u32,
            });
            self.bytes_since_entry = 0;
        }
        self.bytes_since_entry += batch_bytes;
    }
}
