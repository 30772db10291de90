//! Model-based test of a partition: random sequences of appends (under stale, current and unknown
//! epochs), epoch installs, reads and reopens run against the real partition and against a small
//! in-memory model; after every step both must agree on results, errors and contents.

use crate::support::storage;

use bytes::Bytes;
use fencelog::batch::BatchBuilder;
use fencelog::batch::{decode_batch, BatchHeader};
use fencelog::storage::{FenceError, FlushPolicy, Partition, PartitionConfig, StorageError};
use proptest::prelude::*;
use storage::*;

/// One step of a test sequence.
#[derive(Debug, Clone)]
enum Op {
    /// Append a batch of these values under `current + epoch_delta` (clamped at 0).
    Append {
        epoch_delta: i8,
        values: Vec<Vec<u8>>,
    },
    /// Install `current + 1`, or a stale epoch `current - back` (which may equal current).
    Install { stale: bool, back: u8 },
    /// Read at `offset_seed % (high watermark + 3)` with this budget.
    Read { offset_seed: u64, budget: usize },
    /// Drop the partition and open it again.
    Reopen,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (
            prop_oneof![1 => Just(-1i8), 6 => Just(0i8), 1 => Just(1i8)],
            prop::collection::vec(prop::collection::vec(any::<u8>(), 0..700), 1..5),
        )
            .prop_map(|(epoch_delta, values)| Op::Append { epoch_delta, values }),
        2 => (any::<bool>(), 0..3u8).prop_map(|(stale, back)| Op::Install { stale, back }),
        3 => (any::<u64>(), 0..3000usize)
            .prop_map(|(offset_seed, budget)| Op::Read { offset_seed, budget }),
        1 => Just(Op::Reopen),
    ]
}

/// A batch as the model knows it.
#[derive(Debug)]
struct ModelBatch {
    base_offset: u64,
    epoch: u64,
    values: Vec<Vec<u8>>,
    bytes: usize,
    segment: usize,
}

/// The partition as a list of batches, with the segment each landed in (a batch goes to the
/// active segment if it fits, else to a new one) and the current epoch.
#[derive(Debug, Default)]
struct Model {
    current_epoch: u64,
    batches: Vec<ModelBatch>,
    /// Bytes used in each segment.
    segments: Vec<usize>,
    log_end_offset: u64,
}

impl Model {
    fn new() -> Self {
        Self {
            segments: vec![0],
            ..Self::default()
        }
    }

    /// The fence table.
    fn check(&self, epoch: u64) -> Result<(), FenceError> {
        let current = self.current_epoch;
        if epoch == 0 || epoch > current {
            Err(FenceError::UnknownEpoch { epoch, current })
        } else if epoch < current {
            Err(FenceError::Fenced { epoch, current })
        } else {
            Ok(())
        }
    }

    fn append(&mut self, epoch: u64, values: &[Vec<u8>], bytes: usize) -> (u64, u64) {
        let active = self.segments.len() - 1;
        let segment = if self.segments[active] + bytes <= SMALL_SEGMENT_BYTES as usize {
            active
        } else {
            self.segments.push(0);
            active + 1
        };
        self.segments[segment] += bytes;
        let base_offset = self.log_end_offset;
        self.log_end_offset += values.len() as u64;
        self.batches.push(ModelBatch {
            base_offset,
            epoch,
            values: values.to_vec(),
            bytes,
            segment,
        });
        (base_offset, self.log_end_offset)
    }

    /// Indexes of the batches a read at `offset` with `budget` returns.
    fn read(&self, offset: u64, budget: usize) -> Vec<usize> {
        let Some(first) = self
            .batches
            .iter()
            .position(|b| offset < b.base_offset + b.values.len() as u64)
        else {
            return Vec::new();
        };
        let segment = self.batches[first].segment;
        let mut chosen = vec![first];
        let mut total = self.batches[first].bytes;
        for (index, batch) in self.batches.iter().enumerate().skip(first + 1) {
            if batch.segment != segment || total + batch.bytes > budget {
                break;
            }
            total += batch.bytes;
            chosen.push(index);
        }
        chosen
    }
}

/// Checks that `batches` (from a read) are exactly the model's batches `expected`.
fn assert_batches(model: &Model, batches: &[Bytes], expected: &[usize]) {
    assert_eq!(batches.len(), expected.len(), "number of batches read");
    for (bytes, index) in batches.iter().zip(expected) {
        let want = &model.batches[*index];
        assert_eq!(bytes.len(), want.bytes);
        let header = BatchHeader::parse(bytes).unwrap();
        assert_eq!(header.base_offset, want.base_offset);
        assert_eq!(header.epoch, want.epoch);
        let records = decode_batch(bytes).unwrap();
        assert_eq!(records.len(), want.values.len());
        for (position, (record, value)) in records.iter().zip(&want.values).enumerate() {
            assert_eq!(record.offset, want.base_offset + position as u64);
            assert_eq!(record.epoch, want.epoch);
            assert_eq!(record.value.as_deref(), Some(&value[..]));
        }
    }
}

/// The whole log agrees with the model, and epochs never decrease with offset.
fn assert_agrees(partition: &Partition, model: &Model) {
    assert_eq!(partition.current_epoch(), model.current_epoch);
    assert_eq!(partition.high_watermark(), model.log_end_offset);
    assert_eq!(partition.log_start_offset(), 0);
    let batches = read_all_batches(partition);
    let all: Vec<usize> = (0..model.batches.len()).collect();
    assert_batches(model, &batches, &all);
    let records = read_all_records(partition);
    assert_dense_and_monotonic(&records, 0);
}

fn open(directory: &std::path::Path, config: PartitionConfig) -> Partition {
    Partition::open("t/0", directory, config, &seal_worker()).expect("open partition")
}

fn run(ops: &[Op], flush: FlushPolicy, install_first: bool) {
    let dir = scratch_dir();
    let config = config(SMALL_SEGMENT_BYTES, flush);
    let mut partition = open(dir.path(), config);
    let mut model = Model::new();
    if install_first {
        partition.install_epoch(1).unwrap();
        model.current_epoch = 1;
    }
    for op in ops {
        match op {
            Op::Append {
                epoch_delta,
                values,
            } => {
                let epoch = model
                    .current_epoch
                    .saturating_add_signed((*epoch_delta).into());
                let mut builder = BatchBuilder::new(epoch);
                for value in values {
                    builder.push(1_000, None, Some(value));
                }
                let bytes = builder.finish();
                let result = partition.append(&bytes);
                match model.check(epoch) {
                    Ok(()) => {
                        let appended = result.expect("the model accepts this append");
                        let (base, end) = model.append(epoch, values, bytes.len());
                        assert_eq!(appended.base_offset, base);
                        assert_eq!(appended.last_offset, end - 1);
                        assert_eq!(appended.log_end_offset, end);
                    }
                    Err(expected) => match result {
                        Err(StorageError::Fence(error)) => assert_eq!(error, expected),
                        other => panic!("expected {expected:?}, got {other:?}"),
                    },
                }
            }
            Op::Install { stale, back } => {
                let epoch = if *stale {
                    model.current_epoch.saturating_sub((*back).into())
                } else {
                    model.current_epoch + 1
                };
                let result = partition.install_epoch(epoch);
                if epoch > model.current_epoch {
                    result.expect("a newer epoch installs");
                    model.current_epoch = epoch;
                } else {
                    match result {
                        Err(StorageError::Fence(FenceError::EpochNotNewer {
                            epoch: e,
                            current,
                        })) => {
                            assert_eq!((e, current), (epoch, model.current_epoch));
                        }
                        other => panic!("install {epoch}: expected EpochNotNewer, got {other:?}"),
                    }
                }
            }
            Op::Read {
                offset_seed,
                budget,
            } => {
                let offset = offset_seed % (model.log_end_offset + 3);
                let result = partition.read(offset, *budget);
                if offset > model.log_end_offset {
                    match result {
                        Err(StorageError::OffsetOutOfRange {
                            offset: asked,
                            earliest,
                            latest,
                            ..
                        }) => {
                            assert_eq!((asked, earliest, latest), (offset, 0, model.log_end_offset))
                        }
                        other => panic!("read {offset}: expected out of range, got {other:?}"),
                    }
                } else {
                    let result = result.expect("read inside the log");
                    assert_eq!(result.high_watermark, model.log_end_offset);
                    assert_eq!(result.log_start_offset, 0);
                    assert_batches(&model, &result.batches, &model.read(offset, *budget));
                }
            }
            Op::Reopen => {
                drop(partition);
                partition = open(dir.path(), config);
            }
        }
        assert_agrees(&partition, &model);
    }
}

proptest! {
    #![proptest_config(crate::support::proptest_config(64))]

    #[test]
    fn partition_agrees_with_the_model_after_every_step(
        ops in prop::collection::vec(op(), 1..40),
        always in any::<bool>(),
        install_first in prop::bool::weighted(0.8),
    ) {
        // Proves: for random sequences of appends (stale, current and unknown epochs), installs
        // (newer and stale), reads (any offset up to past the end, any budget) and reopens, the
        // partition returns what the model predicts (offsets, errors, batches read, segment
        // boundaries of reads), keeps every accepted batch across reopens, and its epochs never
        // decrease with offset; under both flush `never` and `always`, from a fresh partition (epoch 0)
        // or one with epoch 1 installed.
        let flush = if always { FlushPolicy::Always } else { FlushPolicy::Never };
        run(&ops, flush, install_first);
    }
}

proptest! {
    #![proptest_config(crate::support::proptest_config(2_000))]

    #[test]
    #[ignore = "long: 2000 cases of up to 120 steps (run with --ignored)"]
    fn partition_agrees_with_the_model_on_long_runs(
        ops in prop::collection::vec(op(), 1..120),
        always in any::<bool>(),
        install_first in prop::bool::weighted(0.8),
    ) {
        // Proves the same as partition_agrees_with_the_model_after_every_step, over many more and
        // longer sequences (logs of a dozen segments).
        let flush = if always { FlushPolicy::Always } else { FlushPolicy::Never };
        run(&ops, flush, install_first);
    }
}
