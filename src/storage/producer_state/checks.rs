//! The checks: whether a producer's batch is the next one, a retry, a gap or a stale session
//! ([`ProducerStates::check`], [`ProducerStates::check_batch`]), whether a transactional batch is
//! verified open, and what a fenced batch is to the partition
//! ([`ProducerStates::check_resend`]).
//!
//! Why apart: they decide and change nothing (the partition calls `record` once the batch is
//! appended), so every rule of what a producer may append is read here in one place.

use super::{ProducerStates, ResendVerdict, SequenceError, SequenceVerdict, NO_COORDINATOR_EPOCH};
use crate::batch::{control_record, BatchHeader, ProducerStamp, MAX_SEQUENCE};

impl ProducerStates {
    /// Whether a transactional data batch of `stamp` may be appended on a partition that
    /// verifies transactions (see [`super::verification`]): the producer's transaction is
    /// open here at that producer epoch, or `guard` is its pending verification's.
    pub fn check_verified(
        &self,
        stamp: &ProducerStamp,
        guard: Option<u64>,
    ) -> Result<(), SequenceError> {
        let open = self.transactions.open_epoch(stamp.producer_id) == Some(stamp.producer_epoch);
        if open
            || self
                .verifications
                .check(stamp.producer_id, stamp.producer_epoch, guard)
        {
            return Ok(());
        }
        Err(SequenceError::UnverifiedTransaction {
            producer_id: stamp.producer_id,
            producer_epoch: stamp.producer_epoch,
        })
    }

    /// [`check`](Self::check) for any magic-3 batch (`bytes`, the whole batch): a marker
    /// (control batch) is taken without a sequence check unless its producer epoch is older
    /// than the one the partition knows (of the producer's batches or of its open transaction),
    /// or its coordinator epoch older than that of the producer's last marker here.
    pub fn check_batch(
        &self,
        bytes: &[u8],
        stamp: &ProducerStamp,
        header: &BatchHeader,
    ) -> Result<SequenceVerdict, SequenceError> {
        if !header.is_control() {
            return self.check(stamp, header.record_count);
        }
        let known = self
            .producers
            .get(&stamp.producer_id)
            .map(|entry| entry.producer_epoch)
            .into_iter()
            .chain(self.transactions.open_epoch(stamp.producer_id))
            .max();
        if let Some(current) = known.filter(|current| stamp.producer_epoch < *current) {
            return Err(SequenceError::StaleProducerEpoch {
                producer_id: stamp.producer_id,
                got: stamp.producer_epoch,
                current,
            });
        }
        let last_coordinator = self
            .producers
            .get(&stamp.producer_id)
            .map_or(NO_COORDINATOR_EPOCH, |entry| entry.coordinator_epoch);
        match control_record(bytes) {
            Some(control) if control.coordinator_epoch < last_coordinator => {
                Err(SequenceError::StaleCoordinatorEpoch {
                    producer_id: stamp.producer_id,
                    got: control.coordinator_epoch,
                    current: last_coordinator,
                })
            }
            _ => Ok(SequenceVerdict::Append),
        }
    }

    /// Decides what to do with a batch of `record_count` records stamped `stamp`. Changes
    /// nothing: call [`record`](Self::record) once the batch is appended.
    pub fn check(
        &self,
        stamp: &ProducerStamp,
        record_count: u32,
    ) -> Result<SequenceVerdict, SequenceError> {
        let producer_id = stamp.producer_id;
        let got = stamp.base_sequence;
        let Some(entry) = self.producers.get(&producer_id) else {
            return if got == 0 {
                Ok(SequenceVerdict::Append)
            } else {
                Err(SequenceError::UnknownProducer { producer_id, got })
            };
        };
        if stamp.producer_epoch < entry.producer_epoch {
            return Err(SequenceError::StaleProducerEpoch {
                producer_id,
                got: stamp.producer_epoch,
                current: entry.producer_epoch,
            });
        }
        if stamp.producer_epoch > entry.producer_epoch {
            // A new session starts its sequences again.
            return if got == 0 {
                Ok(SequenceVerdict::Append)
            } else {
                Err(SequenceError::OutOfOrder {
                    producer_id,
                    producer_epoch: stamp.producer_epoch,
                    expected: 0,
                    got,
                })
            };
        }
        let last = stamp.last_sequence(record_count);
        if let Some(batch) = entry
            .batches
            .iter()
            .find(|batch| batch.first_sequence == got && batch.last_sequence == last)
        {
            return Ok(SequenceVerdict::Duplicate {
                base_offset: batch.base_offset,
                last_offset: batch.last_offset,
            });
        }
        let expected = entry.next_sequence();
        if got == expected {
            Ok(SequenceVerdict::Append)
        } else if is_before(got, expected) {
            Err(SequenceError::Duplicate {
                producer_id,
                got,
                expected,
            })
        } else {
            Err(SequenceError::OutOfOrder {
                producer_id,
                producer_epoch: entry.producer_epoch,
                expected,
                got,
            })
        }
    }

    /// What a batch of a *fenced* epoch is to this partition (asked under the fence's lock,
    /// before the fence refuses it): an exact resend of a remembered batch (same producer id,
    /// producer epoch, sequence range and `crc`; a batch remembered without its CRC, from a
    /// snapshot, by its sequence range) is [`ResendVerdict::Remembered`] and is answered with
    /// its offsets; sequences before the producer's remembered window were appended
    /// ([`ResendVerdict::AppendedLongAgo`]); any other batch of a remembered producer session
    /// is not in the log ([`ResendVerdict::NotAppended`]). A producer (or session) not
    /// remembered is [`ResendVerdict::NotAppended`] only while the partition has forgotten no
    /// producer; otherwise [`ResendVerdict::Unknowable`]. Changes nothing.
    pub fn check_resend(
        &self,
        stamp: &ProducerStamp,
        record_count: u32,
        crc: u32,
    ) -> ResendVerdict {
        let Some(entry) = self.producers.get(&stamp.producer_id) else {
            return if self.forgotten {
                ResendVerdict::Unknowable
            } else {
                ResendVerdict::NotAppended
            };
        };
        if stamp.producer_epoch < entry.producer_epoch {
            // An earlier session's batches are forgotten when a new session starts.
            return ResendVerdict::Unknowable;
        }
        if stamp.producer_epoch > entry.producer_epoch {
            return ResendVerdict::NotAppended;
        }
        let got = stamp.base_sequence;
        let last = stamp.last_sequence(record_count);
        if let Some(batch) = entry
            .batches
            .iter()
            .find(|batch| batch.first_sequence == got && batch.last_sequence == last)
        {
            return if batch.crc.is_none_or(|known| known == crc) {
                ResendVerdict::Remembered {
                    base_offset: batch.base_offset,
                    last_offset: batch.last_offset,
                }
            } else {
                // Other records under the same sequences: this batch's records are not the
                // ones in the log.
                ResendVerdict::NotAppended
            };
        }
        let expected = entry.next_sequence();
        if is_before(got, expected) {
            ResendVerdict::AppendedLongAgo { expected }
        } else {
            ResendVerdict::NotAppended
        }
    }
}

/// Whether `sequence` comes before `next` in the wrapping sequence space (within half of it).
fn is_before(sequence: i32, next: i32) -> bool {
    let modulus = i64::from(MAX_SEQUENCE) + 1;
    let distance = (i64::from(next) - i64::from(sequence)).rem_euclid(modulus);
    distance > 0 && distance < modulus / 2
}
