//! The producer-state snapshot ([`SNAPSHOT_FILE`](super::SNAPSHOT_FILE)): its encoding, its
//! checked decoding, and writing it durably unless a newer one is there.
//!
//! Why apart: the snapshot is a file format (versions 1 to 3 are read), and a damaged one must
//! never become a partial state; its reader and writer sit side by side so they stay each
//! other's inverse.

use std::collections::VecDeque;
use std::io;
use std::path::Path;

use thiserror::Error;

use super::super::durable_file::write_durably;
use super::super::transactions::{AbortedTransaction, OpenTransaction, Transactions};
use super::{
    BatchEntry, ProducerEntry, ProducerStates, NO_COORDINATOR_EPOCH, PRODUCER_BATCH_WINDOW,
    SNAPSHOT_FILE,
};
use crate::batch::MAX_SEQUENCE;

/// First bytes of a snapshot file.
pub(super) const SNAPSHOT_MAGIC: &[u8; 4] = b"FLPS";
/// Snapshot layout version this build writes (it reads 1 and 2 too: version 2 is version 3
/// without coordinator epochs, version 1 is version 2 without transactions).
pub(super) const SNAPSHOT_VERSION: u32 = 3;
/// The snapshot version before coordinator epochs.
pub(super) const SNAPSHOT_VERSION_2: u32 = 2;
/// The snapshot version before transactions.
pub(super) const SNAPSHOT_VERSION_1: u32 = 1;

impl ProducerStates {
    /// The snapshot of this state as of `offset` (it reflects exactly the batches below it).
    ///
    /// Layout (big-endian): `"FLPS"`, `version u32` (3), `offset u64`, `producer_count u32`, then
    /// per producer `producer_id i64, producer_epoch i16, coordinator_epoch i32, batch_count u8`,
    /// and per batch
    /// `first_sequence i32, last_sequence i32, base_offset u64, last_offset u64`; then
    /// `open_count u32` and per open transaction `producer_id i64, producer_epoch i16,
    /// first_offset u64`; then `aborted_count u32` and per aborted transaction (in marker order)
    /// `producer_id i64, first_offset u64, last_offset u64`; finally `crc32 u32` of every byte
    /// before it. Version 2 is the same without `coordinator_epoch`; version 1 is version 2
    /// without the two transaction lists (and no producer with `batch_count` 0).
    pub fn encode_snapshot(&self, offset: u64) -> Vec<u8> {
        let mut out = Vec::with_capacity(20 + self.producers.len() * 64);
        out.extend_from_slice(SNAPSHOT_MAGIC);
        out.extend_from_slice(&SNAPSHOT_VERSION.to_be_bytes());
        out.extend_from_slice(&offset.to_be_bytes());
        out.extend_from_slice(&(self.producers.len() as u32).to_be_bytes());
        let mut ids: Vec<_> = self.producers.keys().copied().collect();
        ids.sort_unstable();
        for id in ids {
            let entry = &self.producers[&id];
            out.extend_from_slice(&id.to_be_bytes());
            out.extend_from_slice(&entry.producer_epoch.to_be_bytes());
            out.extend_from_slice(&entry.coordinator_epoch.to_be_bytes());
            out.push(entry.batches.len() as u8);
            for batch in &entry.batches {
                out.extend_from_slice(&batch.first_sequence.to_be_bytes());
                out.extend_from_slice(&batch.last_sequence.to_be_bytes());
                out.extend_from_slice(&batch.base_offset.to_be_bytes());
                out.extend_from_slice(&batch.last_offset.to_be_bytes());
            }
        }
        let open = self.transactions.open();
        out.extend_from_slice(&(open.len() as u32).to_be_bytes());
        for open in open {
            out.extend_from_slice(&open.producer_id.to_be_bytes());
            out.extend_from_slice(&open.producer_epoch.to_be_bytes());
            out.extend_from_slice(&open.first_offset.to_be_bytes());
        }
        let aborted: Vec<_> = self.transactions.aborted().collect();
        out.extend_from_slice(&(aborted.len() as u32).to_be_bytes());
        for aborted in aborted {
            out.extend_from_slice(&aborted.producer_id.to_be_bytes());
            out.extend_from_slice(&aborted.first_offset.to_be_bytes());
            out.extend_from_slice(&aborted.last_offset.to_be_bytes());
        }
        let crc = crc32fast::hash(&out);
        out.extend_from_slice(&crc.to_be_bytes());
        out
    }

    /// Reads a snapshot written by [`encode_snapshot`](Self::encode_snapshot): the offset it is
    /// as of and the state. Any damage (wrong CRC, lengths, values) is an error, never a
    /// partial state.
    pub fn decode_snapshot(
        bytes: &[u8],
        max_producers: usize,
    ) -> Result<(u64, ProducerStates), SnapshotError> {
        let body_len = bytes
            .len()
            .checked_sub(4)
            .ok_or(SnapshotError("shorter than its checksum"))?;
        let (body, crc) = bytes.split_at(body_len);
        if crc32fast::hash(body).to_be_bytes() != crc {
            return Err(SnapshotError("checksum mismatch"));
        }
        let mut reader = SnapshotReader { bytes: body };
        if reader.take(4)? != SNAPSHOT_MAGIC {
            return Err(SnapshotError("not a producer-state snapshot"));
        }
        let version = reader.u32()?;
        if ![SNAPSHOT_VERSION, SNAPSHOT_VERSION_2, SNAPSHOT_VERSION_1].contains(&version) {
            return Err(SnapshotError("unknown snapshot version"));
        }
        let offset = reader.u64()?;
        let count = reader.u32()?;
        let mut state = ProducerStates::new(max_producers);
        for _ in 0..count {
            let producer_id = i64::from_be_bytes(reader.array()?);
            let producer_epoch = i16::from_be_bytes(reader.array()?);
            let coordinator_epoch = match version {
                SNAPSHOT_VERSION => i32::from_be_bytes(reader.array()?),
                _ => NO_COORDINATOR_EPOCH,
            };
            if coordinator_epoch < NO_COORDINATOR_EPOCH {
                return Err(SnapshotError("coordinator epoch below -1"));
            }
            let batch_count = usize::from(reader.take(1)?[0]);
            if producer_id < 0 || producer_epoch < 0 {
                return Err(SnapshotError("negative producer id or epoch"));
            }
            let fewest = usize::from(version == SNAPSHOT_VERSION_1);
            if batch_count < fewest || batch_count > PRODUCER_BATCH_WINDOW {
                return Err(SnapshotError("batch count outside 1..=window"));
            }
            let mut batches = VecDeque::with_capacity(batch_count);
            for _ in 0..batch_count {
                let batch = BatchEntry {
                    first_sequence: i32::from_be_bytes(reader.array()?),
                    last_sequence: i32::from_be_bytes(reader.array()?),
                    base_offset: reader.u64()?,
                    last_offset: reader.u64()?,
                    crc: None,
                };
                let sequences_valid = (0..=MAX_SEQUENCE).contains(&batch.first_sequence)
                    && (0..=MAX_SEQUENCE).contains(&batch.last_sequence);
                if !sequences_valid || batch.last_offset < batch.base_offset {
                    return Err(SnapshotError("batch entry out of range"));
                }
                if batch.last_offset >= offset {
                    return Err(SnapshotError("batch entry at or past the snapshot offset"));
                }
                batches.push_back(batch);
            }
            let entry = ProducerEntry {
                producer_epoch,
                coordinator_epoch,
                batches,
            };
            if state.producers.insert(producer_id, entry).is_some() {
                return Err(SnapshotError("producer listed twice"));
            }
        }
        if version != SNAPSHOT_VERSION_1 {
            state.transactions = decode_transactions(&mut reader, offset)?;
        }
        if !reader.bytes.is_empty() {
            return Err(SnapshotError("bytes after the last producer"));
        }
        while state.producers.len() > state.max_producers {
            state.evict_least_recent(-1);
        }
        // A snapshot does not say whether producers were forgotten before it; at the limit,
        // some may have been.
        if state.producers.len() >= state.max_producers {
            state.forgotten = true;
        }
        Ok((offset, state))
    }

    /// Loads the partition's snapshot: `None` when there is none, or when it is unreadable
    /// (logged: the state is then rebuilt from the whole log, which is always correct).
    pub fn load_snapshot(
        directory: &Path,
        max_producers: usize,
    ) -> io::Result<Option<(u64, ProducerStates)>> {
        let path = directory.join(SNAPSHOT_FILE);
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(error) => return Err(error),
        };
        match Self::decode_snapshot(&bytes, max_producers) {
            Ok(loaded) => Ok(Some(loaded)),
            Err(error) => {
                tracing::warn!(path = %path.display(), %error, "ignoring damaged producer-state snapshot; rebuilding from the log");
                Ok(None)
            }
        }
    }
}

/// Writes an encoded snapshot (as of `offset`) durably (temp file, fsync, rename, directory
/// fsync), unless the partition already has one as of a later offset: the seal thread writes a
/// roll's snapshot after the segment is durable, possibly after the close wrote a newer one.
/// Writes are serialized process-wide (they are rare), so two never share the temporary file.
pub fn write_snapshot_if_newer(directory: &Path, offset: u64, snapshot: &[u8]) -> io::Result<()> {
    static WRITES: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _serialized = WRITES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let existing = match std::fs::read(directory.join(SNAPSHOT_FILE)) {
        Ok(bytes) => snapshot_offset(&bytes),
        Err(error) if error.kind() == io::ErrorKind::NotFound => None,
        Err(error) => return Err(error),
    };
    // One as of the same offset describes the same log prefix: rewriting it would only cost
    // an fsync (every idle partition at every close).
    if existing.is_some_and(|existing| existing >= offset) {
        return Ok(());
    }
    write_durably(directory, SNAPSHOT_FILE, snapshot)
}

/// The offset a snapshot file says it is as of, if its header is one (the rest is checked when
/// it is loaded).
fn snapshot_offset(bytes: &[u8]) -> Option<u64> {
    let header = bytes.get(..16)?;
    let version = u32::from_be_bytes(header[4..8].try_into().expect("4 bytes"));
    (&header[..4] == SNAPSHOT_MAGIC
        && (version == SNAPSHOT_VERSION || version == SNAPSHOT_VERSION_1))
        .then(|| u64::from_be_bytes(header[8..16].try_into().expect("8 bytes")))
}

/// The transaction lists of a version-2 snapshot as of `offset`.
fn decode_transactions(
    reader: &mut SnapshotReader<'_>,
    offset: u64,
) -> Result<Transactions, SnapshotError> {
    let open_count = reader.u32()?;
    let mut open: Vec<OpenTransaction> = Vec::new();
    for _ in 0..open_count {
        let transaction = OpenTransaction {
            producer_id: i64::from_be_bytes(reader.array()?),
            producer_epoch: i16::from_be_bytes(reader.array()?),
            first_offset: reader.u64()?,
        };
        if transaction.producer_id < 0 || transaction.producer_epoch < 0 {
            return Err(SnapshotError(
                "negative producer id or epoch in a transaction",
            ));
        }
        if transaction.first_offset >= offset {
            return Err(SnapshotError(
                "open transaction at or past the snapshot offset",
            ));
        }
        if open
            .last()
            .is_some_and(|last| last.producer_id >= transaction.producer_id)
        {
            return Err(SnapshotError("open transactions out of order"));
        }
        open.push(transaction);
    }
    let aborted_count = reader.u32()?;
    let mut aborted: Vec<AbortedTransaction> = Vec::new();
    for _ in 0..aborted_count {
        let transaction = AbortedTransaction {
            producer_id: i64::from_be_bytes(reader.array()?),
            first_offset: reader.u64()?,
            last_offset: reader.u64()?,
        };
        if transaction.producer_id < 0
            || transaction.first_offset >= transaction.last_offset
            || transaction.last_offset >= offset
        {
            return Err(SnapshotError("aborted transaction out of range"));
        }
        if aborted
            .last()
            .is_some_and(|last| last.last_offset >= transaction.last_offset)
        {
            return Err(SnapshotError("aborted transactions out of order"));
        }
        aborted.push(transaction);
    }
    Ok(Transactions::restore(open, aborted))
}

/// A snapshot file that cannot be trusted.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[error("producer-state snapshot is damaged: {0}")]
pub struct SnapshotError(&'static str);

struct SnapshotReader<'a> {
    bytes: &'a [u8],
}

impl<'a> SnapshotReader<'a> {
    fn take(&mut self, len: usize) -> Result<&'a [u8], SnapshotError> {
        if self.bytes.len() < len {
            return Err(SnapshotError("truncated"));
        }
        let (head, rest) = self.bytes.split_at(len);
        self.bytes = rest;
        Ok(head)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], SnapshotError> {
        Ok(self.take(N)?.try_into().expect("N bytes"))
    }

    fn u32(&mut self) -> Result<u32, SnapshotError> {
        Ok(u32::from_be_bytes(self.array()?))
    }

    fn u64(&mut self) -> Result<u64, SnapshotError> {
        Ok(u64::from_be_bytes(self.array()?))
    }
}
