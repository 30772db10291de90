//! The log side of transactions at the partition: transactional batches open a producer's
//! transaction, markers close it, the last stable offset and the aborted-transactions index
//! follow, across reopen, truncation and DeleteRecords; and a model-based proptest of random
//! transactional batches, markers, truncations and reopens against a follower.

use crate::support::storage;

use std::path::Path;

use bytes::Bytes;
use fencelog::batch::{control_batch, BatchBuilder, BatchSlices, ControlMarker};
use fencelog::storage::{
    AbortedTransaction, FlushPolicy, OpenTransaction, Partition, PartitionConfig, SequenceError,
    StorageError,
};
use proptest::prelude::*;
use storage::*;

/// A transactional batch of producer `producer_id` (producer epoch `producer_epoch`) with
/// `records` records from `sequence` on, under partition epoch `epoch`.
fn txn_batch(
    epoch: u64,
    producer_id: i64,
    producer_epoch: i16,
    sequence: i32,
    records: u32,
) -> Bytes {
    let mut builder =
        BatchBuilder::with_producer(epoch, producer_id, producer_epoch).transactional();
    for index in 0..records {
        builder.push(
            1_000,
            None,
            Some(format!("p{producer_id} s{}", sequence + index as i32).as_bytes()),
        );
    }
    builder.finish_with_sequence(sequence)
}

fn marker(epoch: u64, producer_id: i64, producer_epoch: i16, commit: bool) -> Bytes {
    let marker = if commit {
        ControlMarker::Commit
    } else {
        ControlMarker::Abort
    };
    control_batch(epoch, producer_id, producer_epoch, marker, 0, 1_000)
}

fn open(directory: &Path, config: PartitionConfig) -> Partition {
    Partition::open("t/0", directory, config, &seal_worker()).expect("open partition")
}

fn aborted(producer_id: i64, first_offset: u64, last_offset: u64) -> AbortedTransaction {
    AbortedTransaction {
        producer_id,
        first_offset,
        last_offset,
    }
}

#[test]
fn markers_close_transactions_and_move_the_last_stable_offset() {
    let dir = tempfile::tempdir().unwrap();
    let partition = fresh(dir.path(), config(1 << 20, FlushPolicy::Never));
    assert_eq!(partition.last_stable_offset(), 0);
    partition.append(&batch(1, 0, 2, 10)).unwrap(); // 0..2, not transactional
    partition.append(&txn_batch(1, 7, 0, 0, 3)).unwrap(); // 2..5
    partition.append(&txn_batch(1, 8, 0, 0, 1)).unwrap(); // 5
    assert_eq!(partition.last_stable_offset(), 2);
    assert_eq!(
        partition.open_transactions(),
        vec![
            OpenTransaction {
                producer_id: 7,
                producer_epoch: 0,
                first_offset: 2
            },
            OpenTransaction {
                producer_id: 8,
                producer_epoch: 0,
                first_offset: 5
            }
        ]
    );
    partition.append(&txn_batch(1, 7, 0, 3, 1)).unwrap(); // 6
    partition.append(&marker(1, 7, 0, false)).unwrap(); // 7: abort
    assert_eq!(partition.last_stable_offset(), 5);
    partition.append(&marker(1, 8, 0, true)).unwrap(); // 8: commit
    assert_eq!(partition.last_stable_offset(), 9);
    assert!(partition.open_transactions().is_empty());
    assert_eq!(partition.aborted_transactions(0, 9), vec![aborted(7, 2, 7)]);
    assert_eq!(partition.aborted_transactions(8, 9), vec![]);
    assert_eq!(partition.aborted_transactions(0, 2), vec![]);
    // The producer goes on with its sequence after the marker, in the same producer epoch.
    partition.append(&txn_batch(1, 7, 0, 4, 1)).unwrap(); // 9
    assert_eq!(partition.last_stable_offset(), 9);
    // A marker of an older producer epoch is refused; a newer one starts that session.
    partition.append(&marker(1, 7, 1, false)).unwrap(); // 10
    assert!(matches!(
        partition.append(&marker(1, 7, 0, true)),
        Err(StorageError::Sequence(SequenceError::StaleProducerEpoch {
            got: 0,
            current: 1,
            ..
        }))
    ));
    partition.append(&txn_batch(1, 7, 1, 0, 1)).unwrap(); // 11
    assert_eq!(
        partition.aborted_transactions(0, 100),
        vec![aborted(7, 2, 7), aborted(7, 9, 10)]
    );
    assert_eq!(partition.last_stable_offset(), 11);
}

/// A marker under a superseded lease epoch is fenced like any batch, even where its sequence
/// (always 0) matches a batch the producer wrote under that epoch: it is never answered as a
/// resend of that batch.
#[test]
fn a_fenced_marker_is_refused_not_taken_for_a_resend() {
    let dir = tempfile::tempdir().unwrap();
    let partition = fresh(dir.path(), config(1 << 20, FlushPolicy::Never));
    partition.append(&txn_batch(1, 7, 0, 0, 1)).unwrap();
    partition.install_epoch(2).unwrap();
    let fenced = partition.append(&marker(1, 7, 0, true));
    assert!(matches!(fenced, Err(StorageError::Fence(_))), "{fenced:?}");
    assert_eq!(partition.open_transactions().len(), 1, "still open");
    partition.append(&marker(2, 7, 0, true)).unwrap();
    assert!(partition.open_transactions().is_empty());
}

#[test]
fn transactions_survive_a_restart_and_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let small = config(SMALL_SEGMENT_BYTES, FlushPolicy::Always);
    let mut expected_aborted = Vec::new();
    {
        let partition = fresh(dir.path(), small);
        let mut sequence = 0;
        // Enough batches to roll segments (snapshots at each roll), with aborts among them.
        for round in 0..120u64 {
            let base = partition.append(&txn_batch(1, 3, 0, sequence, 4)).unwrap();
            sequence += 4;
            let end = partition.append(&marker(1, 3, 0, round % 3 == 0)).unwrap();
            if round % 3 != 0 {
                expected_aborted.push(aborted(3, base.base_offset, end.base_offset));
            }
        }
        partition.append(&txn_batch(1, 4, 0, 0, 2)).unwrap();
        assert!(segment_bases(dir.path()).len() > 2, "the log rolled");
        // A crash: the directory as it is now, without the close's snapshot.
        let crashed = scratch_dir();
        copy_directory(dir.path(), crashed.path());
        let reopened = open(crashed.path(), small);
        assert_eq!(reopened.aborted_transactions(0, u64::MAX), expected_aborted);
        assert_eq!(reopened.open_transactions().len(), 1);
    }
    let reopened = open(dir.path(), small);
    assert_eq!(reopened.aborted_transactions(0, u64::MAX), expected_aborted);
    let open_now = reopened.open_transactions();
    assert_eq!(open_now.len(), 1);
    assert_eq!(reopened.last_stable_offset(), open_now[0].first_offset);
}

/// A replicated leader takes a transactional batch that opens its producer's transaction only
/// with the guard of a verification still pending (KIP-890; see
/// `fencelog::storage::verification`): none, a stale one (a marker came between) or one of
/// another producer epoch is refused and writes nothing; once open, the transaction's batches
/// need none; a retry of an appended batch is answered as one; a standalone partition (its
/// transactions gated by its own coordinator) asks for nothing.
#[test]
fn a_replicated_leader_takes_a_transactions_first_batch_only_verified() {
    use fencelog::storage::WriteCredential::Unleased;
    let directory = tempfile::tempdir().unwrap();
    let partition = open(directory.path(), PartitionConfig::default());
    partition.become_leader(1).unwrap();
    let unverified = |error: StorageError| {
        assert!(
            matches!(
                error,
                StorageError::Sequence(SequenceError::UnverifiedTransaction { producer_id: 5, .. })
            ),
            "{error}"
        )
    };
    unverified(
        partition
            .append_pending_as(Unleased, &txn_batch(0, 5, 0, 0, 1))
            .unwrap_err(),
    );
    let stale = partition.begin_verification(5, 0).expect("nothing open");
    let _ = partition
        .append_pending_as(Unleased, &marker(0, 5, 0, false))
        .unwrap();
    let guard = partition.begin_verification(5, 0).expect("nothing open");
    assert_ne!(guard, stale);
    unverified(
        partition
            .append_pending_verified(
                Unleased,
                BatchSlices::new(&txn_batch(0, 5, 0, 0, 1)),
                Some(stale),
            )
            .unwrap_err(),
    );
    unverified(
        partition
            .append_pending_verified(
                Unleased,
                BatchSlices::new(&txn_batch(0, 5, 1, 0, 1)),
                Some(guard),
            )
            .unwrap_err(),
    );
    assert_eq!(partition.log_end_offset(), 1, "only the marker");
    let first = partition
        .append_pending_verified(
            Unleased,
            BatchSlices::new(&txn_batch(0, 5, 0, 0, 1)),
            Some(guard),
        )
        .unwrap();
    assert_eq!(
        partition.begin_verification(5, 0),
        None,
        "open: nothing to ask"
    );
    let _ = partition
        .append_pending_as(Unleased, &txn_batch(0, 5, 0, 1, 1))
        .expect("the open transaction's next batch");
    let retry = partition
        .append_pending_as(Unleased, &txn_batch(0, 5, 0, 0, 1))
        .expect("a retry is answered");
    assert_eq!(retry.offsets().base_offset, first.offsets().base_offset);
    let _ = partition
        .append_pending_as(Unleased, &marker(0, 5, 0, true))
        .unwrap();
    unverified(
        partition
            .append_pending_as(Unleased, &txn_batch(0, 5, 0, 2, 1))
            .unwrap_err(),
    );
    assert!(partition.open_transactions().is_empty());

    let standalone = tempfile::tempdir().unwrap();
    let standalone = open(standalone.path(), PartitionConfig::default());
    let _ = standalone
        .append_pending_as(Unleased, &txn_batch(0, 5, 0, 0, 1))
        .expect("a standalone partition verifies nothing");
}

#[test]
fn delete_records_past_an_open_transaction_does_not_hold_the_log_back() {
    let dir = tempfile::tempdir().unwrap();
    let partition = fresh(dir.path(), config(SMALL_SEGMENT_BYTES, FlushPolicy::Never));
    partition.append(&txn_batch(1, 5, 0, 0, 2)).unwrap(); // 0..2
    partition.append(&marker(1, 5, 0, false)).unwrap(); // 2
    partition.append(&txn_batch(1, 6, 0, 0, 2)).unwrap(); // 3..5
    assert_eq!(partition.last_stable_offset(), 3);
    partition.delete_records_before(4).unwrap();
    assert_eq!(partition.last_stable_offset(), 4);
    // The aborted transaction below the log start is no longer asked for by any read.
    assert!(partition.aborted_transactions(4, 5).is_empty());
}

/// One step of the model test.
#[derive(Debug, Clone)]
enum Op {
    /// A batch of `producer` (transactional or not) with this many records.
    Data {
        producer: i64,
        transactional: bool,
        records: u32,
    },
    /// A marker of `producer`.
    Marker { producer: i64, commit: bool },
    /// Truncate to `seed % (log end - high watermark + 1)` above the high watermark.
    Truncate { seed: u64 },
    /// Advance the high watermark by `seed % (log end - high watermark + 1)`.
    Advance { seed: u64 },
    /// Drop the partition and open it again.
    Reopen,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..3i64, any::<bool>(), 1..4u32).prop_map(|(producer, transactional, records)| Op::Data {
            producer,
            transactional,
            records
        }),
        3 => (0..3i64, any::<bool>()).prop_map(|(producer, commit)| Op::Marker { producer, commit }),
        1 => any::<u64>().prop_map(|seed| Op::Truncate { seed }),
        2 => any::<u64>().prop_map(|seed| Op::Advance { seed }),
        1 => Just(Op::Reopen),
    ]
}

/// A batch of the model log.
#[derive(Debug, Clone, Copy)]
struct ModelBatch {
    producer: i64,
    base: u64,
    records: u32,
    /// `None` for data; `Some(commit)` for a marker.
    marker: Option<bool>,
    transactional: bool,
}

/// The open transactions and aborted ones of a model log, replayed from its start.
fn replay(
    log: &[ModelBatch],
) -> (
    Vec<OpenTransaction>,
    Vec<AbortedTransaction>,
    Vec<(u64, u64)>,
) {
    let mut open = std::collections::BTreeMap::new();
    let mut aborted_list = Vec::new();
    let mut closed = Vec::new();
    for batch in log {
        match batch.marker {
            None if batch.transactional => {
                open.entry(batch.producer).or_insert(batch.base);
            }
            None => {}
            Some(commit) => {
                if let Some(first) = open.remove(&batch.producer) {
                    closed.push((first, batch.base));
                    if !commit {
                        aborted_list.push(aborted(batch.producer, first, batch.base));
                    }
                }
            }
        }
    }
    let open = open
        .into_iter()
        .map(|(producer_id, first_offset)| OpenTransaction {
            producer_id,
            producer_epoch: 0,
            first_offset,
        })
        .collect();
    (open, aborted_list, closed)
}

fn encode(batch: &ModelBatch, sequence: i32) -> Bytes {
    let mut bytes = match batch.marker {
        Some(commit) => marker(1, batch.producer, 0, commit).to_vec(),
        None => {
            let mut builder = BatchBuilder::with_producer(1, batch.producer, 0);
            if batch.transactional {
                builder = builder.transactional();
            }
            for _ in 0..batch.records {
                builder.push(1_000, None, Some(b"v"));
            }
            builder.finish_with_sequence(sequence).to_vec()
        }
    };
    fencelog::batch::stamp_base_offset(&mut bytes, batch.base);
    Bytes::from(bytes)
}

fn follower(directory: &Path) -> Partition {
    let partition = open(directory, config(SMALL_SEGMENT_BYTES, FlushPolicy::Never));
    partition.become_follower(1).unwrap();
    partition
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, .. ProptestConfig::default() })]

    /// After every step the partition's open transactions, aborted transactions and last
    /// stable offset are those of the model's log (as a replay from its start computes them).
    #[test]
    fn transactions_follow_the_log(ops in prop::collection::vec(op(), 1..40)) {
        let dir = tempfile::tempdir().unwrap();
        let mut partition = follower(dir.path());
        let mut log: Vec<ModelBatch> = Vec::new();
        let mut sequences = [0i32; 3];
        for op in ops {
            let end = log.last().map_or(0, |b| b.base + u64::from(b.records));
            let high_watermark = partition.high_watermark();
            match op {
                Op::Data { producer, transactional, records } => {
                    let batch = ModelBatch { producer, base: end, records, marker: None, transactional };
                    let bytes = encode(&batch, sequences[producer as usize]);
                    sequences[producer as usize] += records as i32;
                    partition.append_replicated(&bytes, 1, 1).unwrap();
                    log.push(batch);
                }
                Op::Marker { producer, commit } => {
                    let batch = ModelBatch { producer, base: end, records: 1, marker: Some(commit), transactional: true };
                    partition.append_replicated(&encode(&batch, 0), 1, 1).unwrap();
                    log.push(batch);
                }
                Op::Truncate { seed } => {
                    // Only at batch boundaries at or above the high watermark.
                    let boundaries: Vec<u64> = log.iter().map(|b| b.base).filter(|base| *base >= high_watermark).collect();
                    if let Some(&cut) = boundaries.get((seed % (boundaries.len() as u64 + 1)) as usize) {
                        partition.truncate_to(cut).unwrap();
                        log.retain(|b| b.base < cut);
                    }
                }
                Op::Advance { seed } => {
                    let to = high_watermark + seed % (end - high_watermark + 1);
                    partition.advance_high_watermark(to);
                }
                Op::Reopen => {
                    drop(partition);
                    partition = follower(dir.path());
                }
            }
            let end = log.last().map_or(0, |b| b.base + u64::from(b.records));
            prop_assert_eq!(partition.log_end_offset(), end);
            let (open, aborted_list, closed) = replay(&log);
            prop_assert_eq!(partition.open_transactions(), open.clone());
            prop_assert_eq!(partition.aborted_transactions(0, u64::MAX), aborted_list.clone());
            let from = end / 2;
            let expected_range: Vec<_> = aborted_list.iter().copied().filter(|a| a.last_offset >= from && a.first_offset < end).collect();
            prop_assert_eq!(partition.aborted_transactions(from, end), expected_range);
            // The last stable offset: never past an open transaction nor the high watermark;
            // held at a closed transaction's start while the high watermark has not passed its
            // marker (after a reopen, only markers replayed since the last snapshot still hold it).
            let high_watermark = partition.high_watermark();
            let open_bound = open.iter().map(|o| o.first_offset).fold(high_watermark, u64::min);
            let strict = closed
                .iter()
                .filter(|(_, marker)| *marker >= high_watermark)
                .map(|(first, _)| *first)
                .fold(open_bound, u64::min);
            let lso = partition.last_stable_offset();
            prop_assert!(strict <= lso && lso <= open_bound, "lso {} not in {}..={}", lso, strict, open_bound);
        }
    }
}
