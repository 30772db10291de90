//! proptest strategies for protocol values, shared by the codec round-trip tests and the fuzz
//! property tests so both generate requests the same way.

use bytes::Bytes;
use fencelog::protocol::{
    Acks, FlushPolicy, LeaderEpochQuery, ReplicaFetch, ReplicaFetchPartition, Replication, Request,
    TopicConfig, TransactionPartition, TransactionProducer, TxnOffset,
};
use proptest::prelude::*;

/// Short names, including empty and non-ASCII ones.
pub fn arb_string() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z0-9._-]{0,12}",
        any::<String>().prop_map(|s| s.chars().take(8).collect()),
    ]
}

/// Any flush policy, including intervals a server would refuse.
pub fn arb_flush() -> impl Strategy<Value = FlushPolicy> {
    prop_oneof![
        Just(FlushPolicy::Never),
        Just(FlushPolicy::Always),
        any::<u64>().prop_map(|interval_ms| FlushPolicy::Interval { interval_ms }),
    ]
}

/// Any encodable topic config (retention `Some(0)` cannot be encoded: 0 means unlimited).
pub fn arb_config() -> impl Strategy<Value = TopicConfig> {
    (
        any::<u64>(),
        arb_flush(),
        proptest::option::of(1..=u64::MAX),
        proptest::option::of(1..=u64::MAX),
    )
        .prop_map(
            |(segment_bytes, flush, retention_bytes, retention_ms)| TopicConfig {
                segment_bytes,
                flush,
                retention_bytes,
                retention_ms,
            },
        )
}

/// A request of every API; produces carry batches from `batch`.
pub fn arb_request_with(batch: BoxedStrategy<Bytes>) -> impl Strategy<Value = Request> {
    prop_oneof![
        Just(Request::ApiVersions),
        (
            arb_string(),
            any::<u32>(),
            arb_config(),
            proptest::option::of(arb_replication())
        )
            .prop_map(|(name, partitions, config, replication)| {
                Request::CreateTopic {
                    name,
                    partitions,
                    config,
                    replication,
                }
            }),
        (proptest::collection::vec(arb_string(), 0..5), any::<bool>())
            .prop_map(|(topics, cluster)| Request::Metadata { topics, cluster }),
        (arb_string(), any::<u32>(), arb_string(), any::<u64>()).prop_map(
            |(topic, partition, holder, ttl_ms)| Request::AcquireLease {
                topic,
                partition,
                holder,
                ttl_ms,
            }
        ),
        (arb_string(), any::<u32>(), any::<u128>()).prop_map(|(topic, partition, lease_id)| {
            Request::RenewLease {
                topic,
                partition,
                lease_id,
            }
        }),
        (arb_string(), any::<u32>(), any::<u128>()).prop_map(|(topic, partition, lease_id)| {
            Request::ReleaseLease {
                topic,
                partition,
                lease_id,
            }
        }),
        (
            arb_string(),
            any::<u32>(),
            batch,
            proptest::option::of(arb_acks())
        )
            .prop_map(|(topic, partition, batch, acks)| Request::Produce {
                topic,
                partition,
                batch,
                acks,
            }),
        (
            arb_string(),
            any::<u32>(),
            any::<u64>(),
            any::<u32>(),
            any::<u32>(),
            proptest::option::of(any::<bool>())
        )
            .prop_map(
                |(topic, partition, offset, max_bytes, max_wait_ms, read_committed)| {
                    Request::Fetch {
                        topic,
                        partition,
                        offset,
                        max_bytes,
                        max_wait_ms,
                        read_committed,
                    }
                }
            ),
        (
            arb_string(),
            any::<u32>(),
            proptest::option::of(any::<i64>())
        )
            .prop_map(|(topic, partition, timestamp)| Request::ListOffsets {
                topic,
                partition,
                timestamp,
            }),
        (arb_string(), any::<u32>(), any::<u64>()).prop_map(|(topic, partition, offset)| {
            Request::DeleteRecords {
                topic,
                partition,
                offset,
            }
        }),
        arb_replica_fetch().prop_map(Request::ReplicaFetch),
        proptest::collection::vec(arb_leader_epoch_query(), 0..4)
            .prop_map(|partitions| Request::LeaderEpochEnd { partitions }),
        (arb_string(), any::<u32>()).prop_map(|(transactional_id, timeout_ms)| {
            Request::InitTransaction {
                transactional_id,
                timeout_ms,
            }
        }),
        (
            arb_transaction_producer(),
            proptest::collection::vec(
                (arb_string(), any::<u32>(), any::<u64>()).prop_map(|(topic, partition, epoch)| {
                    TransactionPartition {
                        topic,
                        partition,
                        epoch,
                    }
                }),
                0..4
            )
        )
            .prop_map(|(producer, partitions)| Request::AddToTransaction {
                producer,
                partitions
            }),
        (arb_transaction_producer(), any::<bool>())
            .prop_map(|(producer, commit)| Request::EndTransaction { producer, commit }),
        (arb_transaction_producer(), arb_string(), any::<u32>()).prop_map(
            |(producer, topic, partition)| Request::VerifyTransaction {
                producer,
                topic,
                partition
            }
        ),
        (
            arb_transaction_producer(),
            arb_string(),
            proptest::collection::vec(arb_txn_offset(), 0..4)
        )
            .prop_map(|(producer, group, offsets)| Request::TxnOffsetCommit {
                producer,
                group,
                offsets
            }),
        (
            arb_string(),
            arb_string(),
            any::<bool>(),
            proptest::collection::vec(arb_txn_offset(), 0..4)
        )
            .prop_map(|(group, transactional_id, commit, offsets)| {
                Request::EndTxnOffsets {
                    group,
                    transactional_id,
                    commit,
                    offsets,
                }
            }),
    ]
}

/// A transaction's consumer position.
pub fn arb_txn_offset() -> impl Strategy<Value = TxnOffset> {
    (
        arb_string(),
        any::<u32>(),
        any::<u64>(),
        any::<i32>(),
        arb_string(),
    )
        .prop_map(
            |(topic, partition, offset, leader_epoch, metadata)| TxnOffset {
                topic,
                partition,
                offset,
                leader_epoch,
                metadata,
            },
        )
}

/// A transaction's producer, with any producer id and epoch.
pub fn arb_transaction_producer() -> impl Strategy<Value = TransactionProducer> {
    (arb_string(), any::<i64>(), any::<i16>()).prop_map(
        |(transactional_id, producer_id, producer_epoch)| TransactionProducer {
            transactional_id,
            producer_id,
            producer_epoch,
        },
    )
}

/// Either `acks` a Produce version 1 may carry.
pub fn arb_acks() -> impl Strategy<Value = Acks> {
    prop_oneof![Just(Acks::Leader), Just(Acks::All)]
}

/// Any encodable replication setting (`min_insync` `Some(0)` cannot be encoded: 0 means the
/// default), including ones a server refuses.
pub fn arb_replication() -> impl Strategy<Value = Replication> {
    (any::<u16>(), proptest::option::of(1..=u16::MAX))
        .prop_map(|(factor, min_insync)| Replication { factor, min_insync })
}

/// Any replica fetch with a few partitions, in version 0 (no partition names its log end) or
/// version 1 (every partition does: a decoded version 1 entry always has it).
pub fn arb_replica_fetch() -> impl Strategy<Value = ReplicaFetch> {
    let partition = (arb_string(), any::<u32>(), any::<u64>(), any::<u64>()).prop_map(
        |(topic, partition, fetch_offset, log_end_offset)| ReplicaFetchPartition {
            topic,
            partition,
            fetch_offset,
            log_end_offset: Some(log_end_offset),
        },
    );
    (
        (any::<u32>(), any::<u64>(), any::<u32>()),
        (any::<u32>(), any::<u32>(), any::<u32>()),
        proptest::collection::vec(partition, 0..4),
        any::<bool>(),
    )
        .prop_map(
            |(
                (follower, follower_incarnation, leader_epoch),
                (max_wait_ms, min_bytes, max_bytes),
                mut partitions,
                version_1,
            )| {
                if !version_1 {
                    for partition in &mut partitions {
                        partition.log_end_offset = None;
                    }
                }
                ReplicaFetch {
                    follower,
                    follower_incarnation,
                    leader_epoch,
                    max_wait_ms,
                    min_bytes,
                    max_bytes,
                    partitions,
                }
            },
        )
}

/// Any question of a `LeaderEpochEnd` request.
pub fn arb_leader_epoch_query() -> impl Strategy<Value = LeaderEpochQuery> {
    (arb_string(), any::<u32>(), any::<u32>(), any::<u32>()).prop_map(
        |(topic, partition, current_leader_epoch, epoch)| LeaderEpochQuery {
            topic,
            partition,
            current_leader_epoch,
            epoch,
        },
    )
}
