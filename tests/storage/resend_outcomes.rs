//! Honest outcomes under lost answers, resends and lease changes: a property test that drives
//! one idempotent producer against a partition through random lost answers (the request reached
//! the partition, the answer did not), lost requests (it never did), resends, new lease epochs
//! and new producer sessions, classifies every answer it gets with the client's one table
//! (`ErrorCode::outcome`, `covers_earlier_sends`), and checks each reported outcome against the
//! log: written means in the log exactly once at the reported offset, not written means absent,
//! unknown may be either; and no batch is ever in the log twice.

use std::collections::VecDeque;

use bytes::Bytes;
use fencelog::batch::BatchBuilder;
use fencelog::broker::BrokerError;
use fencelog::protocol::{ErrorCode, Outcome};
use fencelog::server::to_error_response;
use fencelog::storage::{FlushPolicy, Partition, StorageError};
use proptest::prelude::*;

use crate::support::storage::{config, fresh, read_all_records};

/// One step of the client or of the lease authority.
#[derive(Debug, Clone)]
enum Step {
    /// A new batch of `records` records; the request may be lost on its way, and its answer on
    /// the way back.
    Send {
        records: u32,
        delivered: bool,
        answered: bool,
    },
    /// The oldest unanswered batch is sent again.
    Resend { delivered: bool, answered: bool },
    /// A newer lease is granted; the client adopts it (writes its *new* batches under it) or
    /// keeps the old one.
    Grant { adopt: bool },
    /// The client gives up its unanswered batches (their outcome stays unknown) and starts a new
    /// producer session.
    NewSession,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (1u32..4, prop::bool::weighted(0.85), prop::bool::weighted(0.6)).prop_map(
            |(records, delivered, answered)| Step::Send { records, delivered, answered }
        ),
        3 => (prop::bool::weighted(0.85), prop::bool::weighted(0.7))
            .prop_map(|(delivered, answered)| Step::Resend { delivered, answered }),
        2 => any::<bool>().prop_map(|adopt| Step::Grant { adopt }),
        1 => Just(Step::NewSession),
    ]
}

/// A batch the client sent and has no answer for.
#[derive(Debug, Clone)]
struct Unanswered {
    id: u32,
    bytes: Bytes,
    /// Whether an earlier send of it may have landed (it was delivered, its answer lost).
    maybe_landed: bool,
}

/// What the client reported for a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reported {
    Written { base_offset: Option<u64> },
    NotWritten,
    Unknown,
}

/// The client's classification of an answer to a send of `batch` (the library producer's rule:
/// the table, and "unknown" for a refusal that does not speak for an earlier send that may have
/// landed).
fn classify(batch: &Unanswered, answer: Result<u64, StorageError>) -> Reported {
    let error = match answer {
        Ok(base_offset) => {
            return Reported::Written {
                base_offset: Some(base_offset),
            }
        }
        Err(error) => error,
    };
    let code = to_error_response(&BrokerError::Storage(error)).code;
    match code.outcome() {
        Outcome::Written => Reported::Written { base_offset: None },
        Outcome::Unknown => Reported::Unknown,
        Outcome::NotWritten if batch.maybe_landed && !code.covers_earlier_sends() => {
            Reported::Unknown
        }
        Outcome::NotWritten => Reported::NotWritten,
    }
}

struct Client {
    producer_epoch: i16,
    next_sequence: i32,
    lease_epoch: u64,
    next_id: u32,
    unanswered: VecDeque<Unanswered>,
    reported: Vec<(u32, Reported)>,
}

impl Client {
    fn batch(&mut self, records: u32) -> Unanswered {
        let id = self.next_id;
        self.next_id += 1;
        let mut builder = BatchBuilder::with_producer(self.lease_epoch, 7, self.producer_epoch);
        for record in 0..records {
            builder.push(1_000, None, Some(format!("b{id} r{record}").as_bytes()));
        }
        let bytes = builder.finish_with_sequence(self.next_sequence);
        self.next_sequence += records as i32;
        Unanswered {
            id,
            bytes,
            maybe_landed: false,
        }
    }

    /// Sends `batch`; returns it back when it stays unanswered.
    fn send(
        &mut self,
        partition: &Partition,
        mut batch: Unanswered,
        delivered: bool,
        answered: bool,
    ) -> Option<Unanswered> {
        if !delivered {
            return Some(batch);
        }
        let answer = partition
            .append(&batch.bytes)
            .map(|appended| appended.base_offset);
        if !answered {
            batch.maybe_landed = true;
            return Some(batch);
        }
        let reported = classify(&batch, answer);
        self.reported.push((batch.id, reported));
        None
    }
}

/// Runs `steps` and checks every report against the log.
fn run(steps: Vec<Step>) -> Result<(), TestCaseError> {
    let dir = tempfile::tempdir().unwrap();
    let partition = fresh(dir.path(), config(1 << 20, FlushPolicy::Never));
    let mut current_epoch = 1;
    let mut client = Client {
        producer_epoch: 0,
        next_sequence: 0,
        lease_epoch: 1,
        next_id: 0,
        unanswered: VecDeque::new(),
        reported: Vec::new(),
    };
    for step in steps {
        match step {
            Step::Send {
                records,
                delivered,
                answered,
            } => {
                let batch = client.batch(records);
                if let Some(batch) = client.send(&partition, batch, delivered, answered) {
                    client.unanswered.push_back(batch);
                }
            }
            Step::Resend {
                delivered,
                answered,
            } => {
                if let Some(batch) = client.unanswered.pop_front() {
                    if let Some(batch) = client.send(&partition, batch, delivered, answered) {
                        client.unanswered.push_front(batch);
                    }
                }
            }
            Step::Grant { adopt } => {
                current_epoch += 1;
                partition.install_epoch(current_epoch).unwrap();
                if adopt {
                    client.lease_epoch = current_epoch;
                }
            }
            Step::NewSession => {
                for batch in client.unanswered.drain(..) {
                    client.reported.push((batch.id, Reported::Unknown));
                }
                client.producer_epoch += 1;
                client.next_sequence = 0;
            }
        }
    }
    for batch in client.unanswered.drain(..) {
        client.reported.push((batch.id, Reported::Unknown));
    }
    // Where each batch's first record is in the log, and how often it is there.
    let records = read_all_records(&partition);
    let mut found: Vec<Vec<u64>> = vec![Vec::new(); client.next_id as usize];
    for record in &records {
        let value = String::from_utf8(record.value.clone().unwrap().to_vec()).unwrap();
        let (id, index) = value[1..].split_once(" r").unwrap();
        if index == "0" {
            found[id.parse::<usize>().unwrap()].push(record.offset);
        }
    }
    for (id, copies) in found.iter().enumerate() {
        prop_assert!(
            copies.len() <= 1,
            "batch {id} is in the log {} times",
            copies.len()
        );
    }
    for (id, reported) in &client.reported {
        let copies = &found[*id as usize];
        match reported {
            Reported::Written { base_offset } => {
                prop_assert_eq!(
                    copies.len(),
                    1,
                    "batch {} reported written is not in the log",
                    id
                );
                if let Some(offset) = base_offset {
                    prop_assert_eq!(copies[0], *offset, "batch {} is not where reported", id);
                }
            }
            Reported::NotWritten => {
                prop_assert!(
                    copies.is_empty(),
                    "batch {id} reported not written is in the log"
                )
            }
            Reported::Unknown => {}
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(crate::support::proptest_config(256))]

    /// Every outcome the client reports (written, not written, unknown) is true of the log.
    #[test]
    fn reported_outcomes_match_the_log(steps in prop::collection::vec(step(), 1..40)) {
        run(steps)?;
    }
}

/// The issue's case, deterministically: a batch lands, its answer is lost, a newer lease is
/// granted, the resend is reported written at its offset, and the batch is in the log once.
#[test]
fn a_resend_across_a_newer_lease_of_a_batch_in_the_log_is_reported_written() {
    run(vec![
        Step::Send {
            records: 2,
            delivered: true,
            answered: false,
        },
        Step::Grant { adopt: false },
        Step::Resend {
            delivered: true,
            answered: true,
        },
    ])
    .unwrap();
}

/// The classification of `ErrorCode`s the storage answers a resend with.
#[test]
fn a_duplicate_sequence_is_written_and_a_forgotten_producer_unknown() {
    assert_eq!(ErrorCode::DuplicateSequence.outcome(), Outcome::Written);
    assert_eq!(ErrorCode::UnknownProducer.outcome(), Outcome::Unknown);
    assert!(ErrorCode::Fenced.covers_earlier_sends());
    assert!(!ErrorCode::NotLeader.covers_earlier_sends());
}
