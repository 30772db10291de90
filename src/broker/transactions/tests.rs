//! The transaction state machine and its store.

use super::state::*;
use super::store::{TransactionStore, MAX_TRANSACTIONAL_ID_BYTES};

fn partition(topic: &str, partition: i32, lease_epoch: u64) -> TxnPartition {
    TxnPartition {
        topic: topic.to_string(),
        partition,
        lease_epoch,
        client_leased: false,
    }
}

fn no_new_id() -> i64 {
    panic!("a new producer id was not expected")
}

fn ongoing() -> TransactionMetadata {
    TransactionMetadata::new("t", 7, 60_000)
        .add_partitions(7, 0, &[partition("a", 0, 3), partition("a", 1, 4)], 1_000)
        .unwrap()
}

#[test]
fn a_transaction_commits_through_prepare_and_complete() {
    let txn = ongoing();
    assert_eq!(txn.state, TxnState::Ongoing);
    assert_eq!(txn.start_ms, 1_000);
    assert_eq!(txn.produce_epoch(7, 0, "a", 1), Ok(4));
    let txn = txn.add_offsets(7, 0, "g", 2_000).unwrap();
    let offset = PendingOffset {
        offset: 42,
        leader_epoch: -1,
        metadata: None,
    };
    let txn = txn
        .commit_offsets(7, 0, "g", [("a".to_string(), 0, offset.clone())])
        .unwrap();
    assert_eq!(txn.pending_offsets["g"]["a"][&0], offset);
    let EndOutcome::Prepare(prepared) = txn.end(7, 0, true).unwrap() else {
        panic!("expected a prepare")
    };
    assert_eq!(prepared.state, TxnState::PrepareCommit);
    assert_eq!(
        prepared.partitions.len(),
        2,
        "the markers need the partitions"
    );
    assert_eq!(
        prepared.add_partitions(7, 0, &[partition("b", 0, 1)], 3_000),
        Err(TxnError::ConcurrentTransactions {
            state: "PrepareCommit"
        })
    );
    let done = prepared.complete().unwrap();
    assert_eq!(done.state, TxnState::CompleteCommit);
    assert!(done.partitions.is_empty() && done.pending_offsets.is_empty());
    assert_eq!(done.end(7, 0, true), Ok(EndOutcome::AlreadyDone));
    assert!(matches!(
        done.end(7, 0, false),
        Err(TxnError::InvalidTxnState { .. })
    ));
}

#[test]
fn a_partition_added_twice_keeps_its_first_lease_epoch() {
    let txn = ongoing()
        .add_partitions(7, 0, &[partition("a", 0, 9)], 5_000)
        .unwrap();
    assert_eq!(txn.produce_epoch(7, 0, "a", 0), Ok(3));
    assert_eq!(txn.start_ms, 1_000, "the start is the first add");
    assert_eq!(txn.missing_partitions([("a", 0), ("b", 2)]), vec![("b", 2)]);
}

#[test]
fn a_produce_to_a_partition_not_added_is_refused() {
    assert_eq!(
        ongoing().produce_epoch(7, 0, "b", 0),
        Err(TxnError::PartitionNotAdded {
            topic: "b".to_string(),
            partition: 0
        })
    );
}

#[test]
fn a_new_instance_fences_the_old_one_and_aborts_its_transaction() {
    let old = ongoing();
    let InitOutcome::AbortFirst(aborting) = old.init_producer_id(30_000, no_new_id).unwrap() else {
        panic!("an open transaction is aborted first")
    };
    assert_eq!(aborting.state, TxnState::PrepareAbort);
    assert_eq!(aborting.producer_epoch, 1);
    assert_eq!(aborting.producer_id, 7, "the producer id is stable");
    // The zombie (epoch 0) is fenced everywhere.
    let fenced: Result<(), TxnError> = Err(TxnError::ProducerFenced {
        given: 0,
        current: 1,
    });
    assert_eq!(
        aborting.produce_epoch(7, 0, "a", 0).map(|_| ()),
        fenced.clone()
    );
    assert_eq!(aborting.end(7, 0, true).map(|_| ()), fenced.clone());
    assert_eq!(
        aborting.commit_offsets(7, 0, "g", []).map(|_| ()),
        fenced.clone()
    );
    // The new instance retries while the markers are written, then gets the epoch.
    assert!(matches!(
        aborting.init_producer_id(30_000, no_new_id),
        Err(TxnError::ConcurrentTransactions { .. })
    ));
    let aborted = aborting.complete().unwrap();
    assert_eq!(aborted.state, TxnState::CompleteAbort);
    let InitOutcome::Ready(ready) = aborted.init_producer_id(30_000, no_new_id).unwrap() else {
        panic!("nothing open any more")
    };
    assert_eq!((ready.producer_id, ready.producer_epoch), (7, 2));
    assert_eq!(ready.state, TxnState::Empty);
    assert_eq!(ready.timeout_ms, 30_000);
}

#[test]
fn an_exhausted_epoch_gets_a_new_producer_id() {
    let mut txn = TransactionMetadata::new("t", 7, 60_000);
    txn.producer_epoch = MAX_PRODUCER_EPOCH;
    let InitOutcome::Ready(next) = txn.init_producer_id(60_000, || 8).unwrap() else {
        panic!("empty")
    };
    assert_eq!((next.producer_id, next.producer_epoch), (8, 0));
    assert!(matches!(
        next.end(7, MAX_PRODUCER_EPOCH, false),
        Err(TxnError::InvalidProducerIdMapping {
            given: 7,
            current: 8
        })
    ));
}

#[test]
fn a_timed_out_transaction_is_aborted_with_a_bumped_epoch() {
    let txn = ongoing();
    assert!(!txn.is_expired(61_000));
    assert_eq!(txn.expire(61_000, no_new_id), None);
    let aborting = txn.expire(61_001, no_new_id).unwrap();
    assert_eq!(aborting.state, TxnState::PrepareAbort);
    assert_eq!(aborting.producer_epoch, 1);
    assert!(TransactionMetadata::new("t", 7, 1)
        .expire(i64::MAX, no_new_id)
        .is_none());
}

#[test]
fn an_abort_with_nothing_added_is_accepted_and_a_commit_is_not() {
    let txn = TransactionMetadata::new("t", 7, 60_000);
    assert_eq!(txn.end(7, 0, false), Ok(EndOutcome::AlreadyDone));
    assert!(matches!(
        txn.end(7, 0, true),
        Err(TxnError::InvalidTxnState { .. })
    ));
}

#[test]
fn offsets_of_a_group_not_added_are_refused() {
    assert!(matches!(
        ongoing().commit_offsets(7, 0, "g", []),
        Err(TxnError::InvalidTxnState { .. })
    ));
}

#[test]
fn the_store_keeps_each_id_across_a_reopen() {
    let data = tempfile::tempdir().unwrap();
    let store = TransactionStore::open(data.path()).unwrap();
    let first = ongoing();
    let mut second = TransactionMetadata::new("tx/with:odd chars", 9, 1_000);
    store.save(&first).unwrap();
    store.save(&second).unwrap();
    second.producer_epoch = 5;
    store.save(&second).unwrap();
    let mut loaded = TransactionStore::open(data.path()).unwrap().load().unwrap();
    loaded.sort_by_key(|state| state.producer_id);
    assert_eq!(loaded, vec![first, second]);
    let long = TransactionMetadata::new(&"x".repeat(MAX_TRANSACTIONAL_ID_BYTES + 1), 1, 1);
    assert_eq!(
        store.save(&long).unwrap_err().kind(),
        std::io::ErrorKind::InvalidInput
    );
}
