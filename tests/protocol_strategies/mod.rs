//! proptest strategies for protocol values, shared by the codec round-trip tests and the fuzz
//! property tests so both generate requests the same way.
#![allow(dead_code)]

use bytes::Bytes;
use fencelog::protocol::{FlushPolicy, Request, TopicConfig};
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
        (arb_string(), any::<u32>(), arb_config()).prop_map(|(name, partitions, config)| {
            Request::CreateTopic {
                name,
                partitions,
                config,
            }
        }),
        proptest::collection::vec(arb_string(), 0..5)
            .prop_map(|topics| Request::Metadata { topics }),
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
        (arb_string(), any::<u32>(), batch).prop_map(|(topic, partition, batch)| {
            Request::Produce {
                topic,
                partition,
                batch,
            }
        }),
        (
            arb_string(),
            any::<u32>(),
            any::<u64>(),
            any::<u32>(),
            any::<u32>()
        )
            .prop_map(|(topic, partition, offset, max_bytes, max_wait_ms)| {
                Request::Fetch {
                    topic,
                    partition,
                    offset,
                    max_bytes,
                    max_wait_ms,
                }
            }),
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
    ]
}
