//! What a partition does when the disk fails one of its syncs or writes: it stops taking writes
//! until the server restarts, counts the failure and says so in the log.
//!
//! Why stop rather than retry: after a failed fsync (or msync) the kernel may have dropped the
//! dirty pages it could not write and marked them clean, so a second fsync succeeds without
//! them (the PostgreSQL "fsyncgate" lesson). Retrying would acknowledge records on top of a log
//! whose tail may not be on disk. What the disk really holds is only known by reading it, which
//! is what the open after a restart does (recovery cuts what is torn, and the records it keeps
//! are served). Until then the partition refuses every write (appends, replicated appends,
//! truncations, record deletions) with [`StorageError::Failed`]; reads of what it published
//! before go on (it was synced under `always`; under `interval` and `never` readers see copies
//! before their sync anyway, which is that policy's documented promise).
//!
//! One flag shared by the append path, the group commit's sync and the seal thread, so each can
//! stop the partition where it meets the failure. Stopping also freezes the recovery point: a
//! seal still queued whose sync succeeds proves nothing about the pages an earlier failed sync
//! lost, so it must not record them durable.

use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::super::durable_file::FileOperation;
use super::super::seal::RecoveryPoint;
use super::super::StorageError;
use crate::metrics::PartitionMetrics;

/// Whether a partition still takes writes, and what counts and reports its disk's failures.
#[derive(Debug)]
pub(super) struct WriteStop {
    /// `topic/partition`, for the log and the errors.
    partition: String,
    stopped: AtomicBool,
    metrics: Arc<PartitionMetrics>,
    /// Frozen when the partition stops: no seal still queued records a segment as durable.
    recovery_point: Arc<RecoveryPoint>,
}

impl WriteStop {
    /// A partition that takes writes.
    pub(super) fn new(
        partition: &str,
        metrics: Arc<PartitionMetrics>,
        recovery_point: Arc<RecoveryPoint>,
    ) -> Self {
        Self {
            partition: partition.to_string(),
            stopped: AtomicBool::new(false),
            metrics,
            recovery_point,
        }
    }

    /// Whether the partition refuses writes until a restart.
    pub(super) fn is_stopped(&self) -> bool {
        self.stopped.load(Ordering::Acquire)
    }

    /// The refusal of a write once stopped.
    pub(super) fn refusal(&self) -> StorageError {
        StorageError::Failed {
            partition: self.partition.clone(),
        }
    }

    /// Stops the partition's writes for a reason already reported (a truncation that failed
    /// half way, whose cause the caller logs).
    pub(super) fn stop(&self) {
        self.recovery_point.freeze();
        self.stopped.store(true, Ordering::Release);
    }

    /// A sync or write of the log's `file` failed with `error`: stops the partition's writes,
    /// counts the failure, logs it (the partition, the file, the OS error) and returns the error
    /// the write that met it answers with.
    pub(super) fn disk_failed(
        &self,
        operation: FileOperation,
        file: &Path,
        error: io::Error,
    ) -> StorageError {
        self.metrics.storage_failed();
        let operation = operation_name(operation);
        self.recovery_point.freeze();
        let first = !self.stopped.swap(true, Ordering::AcqRel);
        tracing::error!(
            partition = %self.partition,
            file = %file.display(),
            operation,
            %error,
            first,
            "{operation} of the partition's log failed; what reached the disk is unknown, so the partition refuses every write until the server restarts and recovers it from what is on disk"
        );
        StorageError::DiskFailed {
            partition: self.partition.clone(),
            operation,
            file: file.display().to_string(),
            source: error,
        }
    }

    /// A sync or write of one of the partition's other files (the epoch checkpoint, the
    /// leader-epoch history, the log start, the recovery point) failed: counted and logged; the
    /// caller refuses what needed it and changes nothing in memory, so the log's writes go on.
    pub(super) fn file_failed(&self, what: &str, file: &Path, error: &io::Error) {
        self.metrics.storage_failed();
        tracing::error!(
            partition = %self.partition,
            file = %file.display(),
            %error,
            "could not write the partition's {what}; nothing was changed"
        );
    }
}

fn operation_name(operation: FileOperation) -> &'static str {
    match operation {
        FileOperation::Write => "write",
        FileOperation::Sync => "sync",
    }
}

/// Whether a failed write into a segment means the device failed (the partition must stop), as
/// opposed to a refusal that wrote nothing the log counts: a full disk or quota (`ENOSPC`,
/// `EDQUOT`: the bytes that did land lie past the written mark and are overwritten by the next
/// append or cut by recovery), a descriptor or memory shortage, or the socket a spliced batch
/// comes from failing.
pub(super) fn device_failed(error: &io::Error) -> bool {
    matches!(
        error.raw_os_error(),
        Some(libc::EIO | libc::EROFS | libc::EUCLEAN | libc::ENXIO | libc::ENODEV)
    )
}

#[cfg(all(test, not(fencelog_loom)))]
mod tests {
    use std::path::Path;
    use std::time::{Duration, Instant};

    use super::super::super::durable_file::faults;
    use super::super::super::fence::CHECKPOINT_FILE;
    use super::*;
    use crate::batch::BatchBuilder;
    use crate::storage::config::{FlushPolicy, PartitionConfig};
    use crate::storage::seal::SealWorker;
    use crate::storage::segment::log_file_name;
    use crate::storage::Partition;

    fn open(directory: &Path, flush: FlushPolicy, seal: &SealWorker) -> Partition {
        let config = PartitionConfig {
            flush,
            segment_bytes: 4096,
            ..PartitionConfig::default()
        };
        Partition::open("t/0", directory, config, seal).unwrap()
    }

    /// A batch of one record of 200 bytes of `value` under the partition's epoch.
    fn batch(partition: &Partition, value: u8) -> bytes::Bytes {
        let mut builder = BatchBuilder::new(partition.current_epoch());
        builder.push(1_000, None, Some(&[value; 200]));
        builder.finish()
    }

    /// The first byte of each record's value below the high watermark, in offset order.
    fn values(partition: &Partition) -> Vec<u8> {
        let mut values = Vec::new();
        let mut offset = partition.log_start_offset();
        while offset < partition.high_watermark() {
            let read = partition.read(offset, 1 << 20).unwrap();
            for stored in &read.batches {
                let records = crate::batch::decode_batch(stored).unwrap();
                values.extend(
                    records
                        .iter()
                        .map(|record| record.value.as_ref().unwrap()[0]),
                );
                offset = crate::batch::BatchHeader::parse(stored)
                    .unwrap()
                    .next_offset();
            }
        }
        values
    }

    /// A partition with epoch 1 and `count` records, values 1 to `count`.
    fn with_records(
        directory: &Path,
        flush: FlushPolicy,
        seal: &SealWorker,
        count: u8,
    ) -> Partition {
        let partition = open(directory, flush, seal);
        partition.install_epoch(1).unwrap();
        for value in 1..=count {
            partition.append(&batch(&partition, value)).unwrap();
        }
        partition
    }

    #[test]
    fn a_failed_sync_under_always_stops_that_partition_until_a_restart_recovers_it() {
        // Proves: the produce whose sync fails answers DiskFailed (naming the segment and the OS
        // error), every later one Failed without syncing again (a second sync is never trusted),
        // the failure is counted once and the partition says it refuses writes; another
        // partition goes on; what was acknowledged stays readable; a restart recovers every
        // acknowledged record and takes writes again.
        let seal = SealWorker::start().unwrap();
        let failing = tempfile::tempdir().unwrap();
        let healthy = tempfile::tempdir().unwrap();
        let partition = with_records(failing.path(), FlushPolicy::Always, &seal, 5);
        let other = with_records(healthy.path(), FlushPolicy::Always, &seal, 5);

        let fault = faults::inject(FileOperation::Sync, failing.path(), libc::EIO);
        let error = partition.append(&batch(&partition, 6)).unwrap_err();
        match &error {
            StorageError::DiskFailed {
                operation, file, ..
            } => {
                assert_eq!(*operation, "sync");
                assert!(file.ends_with(&log_file_name(0)), "{file}");
            }
            other => panic!("expected DiskFailed, got {other:?}"),
        }
        assert!(error.to_string().contains("os error 5"), "{error}");
        assert_eq!(
            error.exhausted_resource(),
            None,
            "never answered as nothing written"
        );
        assert_eq!(fault.hits(), 1);
        drop(fault);

        // The disk answers again, but nothing is synced or written any more.
        let watching = faults::inject(FileOperation::Sync, failing.path(), libc::EIO);
        for value in 7..10 {
            assert!(matches!(
                partition.append(&batch(&partition, value)),
                Err(StorageError::Failed { .. })
            ));
        }
        assert!(matches!(partition.sync(), Err(StorageError::Failed { .. })));
        assert_eq!(watching.hits(), 0, "no sync after the failed one");
        drop(watching);
        assert!(partition.refuses_writes());
        assert_eq!(partition.metrics().counts().storage_failures, 1);
        assert_eq!(values(&partition), [1, 2, 3, 4, 5], "reads go on");

        other.append(&batch(&other, 6)).unwrap();
        assert!(!other.refuses_writes());
        assert_eq!(other.metrics().counts().storage_failures, 0);

        drop(partition);
        let reopened = open(failing.path(), FlushPolicy::Always, &seal);
        assert!(!reopened.refuses_writes());
        let recovered = values(&reopened);
        assert_eq!(recovered[..5], [1, 2, 3, 4, 5], "{recovered:?}");
        assert!(
            recovered.len() <= 6,
            "at most the batch whose sync failed: {recovered:?}"
        );
        let appended = reopened.append(&batch(&reopened, 11)).unwrap();
        assert_eq!(appended.base_offset, recovered.len() as u64);
    }

    #[test]
    fn a_device_error_on_a_segment_write_stops_writes_a_full_disk_does_not() {
        // Proves: EIO from the write into the segment stops the partition (its bytes past the
        // written mark may have landed); ENOSPC is answered as a full disk (nothing the log
        // counts was written) and the next append, once there is room, gets the next offset.
        let seal = SealWorker::start().unwrap();
        let directory = tempfile::tempdir().unwrap();
        let partition = with_records(directory.path(), FlushPolicy::Always, &seal, 2);
        let full = faults::inject(FileOperation::Write, directory.path(), libc::ENOSPC);
        let error = partition.append(&batch(&partition, 3)).unwrap_err();
        assert_eq!(
            error.exhausted_resource(),
            Some("the disk is full"),
            "{error}"
        );
        drop(full);
        assert!(!partition.refuses_writes());
        assert_eq!(
            partition.append(&batch(&partition, 3)).unwrap().base_offset,
            2
        );

        let failing = faults::inject(FileOperation::Write, directory.path(), libc::EIO);
        let error = partition.append(&batch(&partition, 4)).unwrap_err();
        assert!(
            matches!(
                error,
                StorageError::DiskFailed {
                    operation: "write",
                    ..
                }
            ),
            "{error:?}"
        );
        drop(failing);
        assert!(matches!(
            partition.append(&batch(&partition, 4)),
            Err(StorageError::Failed { .. })
        ));
        assert_eq!(partition.metrics().counts().storage_failures, 1);
        assert_eq!(values(&partition), [1, 2, 3]);
    }

    #[test]
    fn a_failed_interval_sync_stops_writes() {
        // Proves: under `interval` the background sync that fails stops the partition's writes
        // (the records it did not make durable were acknowledged already, which is that policy's
        // promise; later ones are refused rather than acknowledged on top of an unknown disk).
        let seal = SealWorker::start().unwrap();
        let directory = tempfile::tempdir().unwrap();
        let interval = FlushPolicy::Interval { interval_ms: 50 };
        let partition = with_records(directory.path(), interval, &seal, 3);
        let fault = faults::inject(FileOperation::Sync, directory.path(), libc::EIO);
        assert!(matches!(
            partition.sync(),
            Err(StorageError::DiskFailed {
                operation: "sync",
                ..
            })
        ));
        drop(fault);
        assert!(partition.refuses_writes());
        assert!(matches!(
            partition.append(&batch(&partition, 4)),
            Err(StorageError::Failed { .. })
        ));
        assert_eq!(values(&partition), [1, 2, 3]);
    }

    /// Waits for `condition`, generously: the seal thread runs on its own time.
    fn eventually(condition: impl Fn() -> bool) -> bool {
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            if condition() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        false
    }

    #[test]
    fn a_failed_seal_of_a_full_segment_stops_writes() {
        // Proves: under `never`, whose roll leaves the sync of the full segment to the seal
        // thread, a failed seal stops the partition's writes, counts and leaves the recovery
        // point before the segment.
        let seal = SealWorker::start().unwrap();
        let directory = tempfile::tempdir().unwrap();
        let partition = with_records(directory.path(), FlushPolicy::Never, &seal, 1);
        let first_segment = directory.path().join(log_file_name(0));
        let fault = faults::inject(FileOperation::Sync, &first_segment, libc::EIO);
        let mut value = 2;
        while partition.epoch_history().is_empty() || partition.log_end_offset() < 40 {
            match partition.append(&batch(&partition, value)) {
                Ok(_) => value += 1,
                Err(StorageError::Failed { .. }) => break,
                Err(other) => panic!("{other:?}"),
            }
        }
        assert!(eventually(|| partition.refuses_writes()), "the seal failed");
        assert!(fault.hits() >= 1);
        assert!(matches!(
            partition.append(&batch(&partition, 0)),
            Err(StorageError::Failed { .. })
        ));
        assert_eq!(partition.metrics().counts().storage_failures, 1);
        assert_eq!(partition.shared.recovery_point.offset(), 0);
    }

    #[test]
    fn a_failed_epoch_checkpoint_refuses_the_grant_and_installs_nothing() {
        // Proves: a grant whose checkpoint cannot be made durable fails, the epoch stays, the
        // file keeps its contents, the failure is counted, and the log's writes go on under the
        // old epoch; once the disk answers, the same grant succeeds and survives a restart.
        let seal = SealWorker::start().unwrap();
        let directory = tempfile::tempdir().unwrap();
        let partition = with_records(directory.path(), FlushPolicy::Always, &seal, 1);
        let checkpoint = directory.path().join(CHECKPOINT_FILE);
        let before = std::fs::read_to_string(&checkpoint).unwrap();
        for (operation, errno) in [
            (FileOperation::Sync, libc::EIO),
            (FileOperation::Write, libc::ENOSPC),
        ] {
            let fault = faults::inject(operation, &checkpoint, errno);
            let error = partition.install_epoch(2).unwrap_err();
            assert!(matches!(error, StorageError::Io { .. }), "{error:?}");
            assert_eq!(fault.hits(), 1);
            assert_eq!(partition.current_epoch(), 1);
            assert_eq!(std::fs::read_to_string(&checkpoint).unwrap(), before);
        }
        assert_eq!(partition.metrics().counts().storage_failures, 2);
        assert!(!partition.refuses_writes());
        partition.append(&batch(&partition, 2)).unwrap();
        partition.install_epoch(2).unwrap();
        drop(partition);
        let reopened = open(directory.path(), FlushPolicy::Always, &seal);
        assert_eq!(reopened.current_epoch(), 2);
        assert_eq!(values(&reopened), [1, 2]);
    }
}
