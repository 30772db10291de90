//! The APIs and versions the Kafka listener implements: the one table that both ApiVersions
//! advertises and the request decoder enforces, so the two cannot disagree.
//!
//! Every range here is implemented and tested (`tests/kafka/kafka_protocol.rs` sends each version);
//! the codec's own "valid versions" are wider and are never advertised as such.

use kafka_protocol::messages::ApiKey;

/// One API and the versions of it the listener implements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SupportedApi {
    /// The API.
    pub key: ApiKey,
    /// Oldest version implemented.
    pub min_version: i16,
    /// Newest version implemented.
    pub max_version: i16,
}

/// Every API the listener answers, in API key order.
pub const SUPPORTED_APIS: &[SupportedApi] = &[
    SupportedApi {
        key: ApiKey::Produce,
        min_version: 3,
        max_version: 11,
    },
    SupportedApi {
        key: ApiKey::Fetch,
        min_version: 4,
        max_version: 12,
    },
    SupportedApi {
        key: ApiKey::ListOffsets,
        min_version: 1,
        max_version: 7,
    },
    SupportedApi {
        key: ApiKey::Metadata,
        min_version: 0,
        max_version: 12,
    },
    SupportedApi {
        key: ApiKey::OffsetCommit,
        min_version: 2,
        max_version: 9,
    },
    SupportedApi {
        key: ApiKey::OffsetFetch,
        min_version: 1,
        max_version: 9,
    },
    SupportedApi {
        key: ApiKey::FindCoordinator,
        min_version: 0,
        max_version: 3,
    },
    SupportedApi {
        key: ApiKey::JoinGroup,
        min_version: 0,
        max_version: 9,
    },
    SupportedApi {
        key: ApiKey::Heartbeat,
        min_version: 0,
        max_version: 4,
    },
    SupportedApi {
        key: ApiKey::LeaveGroup,
        min_version: 0,
        max_version: 5,
    },
    SupportedApi {
        key: ApiKey::SyncGroup,
        min_version: 0,
        max_version: 5,
    },
    SupportedApi {
        key: ApiKey::DescribeGroups,
        min_version: 0,
        max_version: 5,
    },
    SupportedApi {
        key: ApiKey::ListGroups,
        min_version: 0,
        max_version: 5,
    },
    SupportedApi {
        key: ApiKey::SaslHandshake,
        min_version: 0,
        max_version: 1,
    },
    SupportedApi {
        key: ApiKey::ApiVersions,
        min_version: 0,
        max_version: 4,
    },
    SupportedApi {
        key: ApiKey::CreateTopics,
        min_version: 2,
        max_version: 7,
    },
    SupportedApi {
        key: ApiKey::DeleteTopics,
        min_version: 1,
        max_version: 6,
    },
    SupportedApi {
        key: ApiKey::DeleteRecords,
        min_version: 0,
        max_version: 2,
    },
    SupportedApi {
        key: ApiKey::InitProducerId,
        min_version: 0,
        max_version: 4,
    },
    SupportedApi {
        key: ApiKey::OffsetForLeaderEpoch,
        min_version: 2,
        max_version: 4,
    },
    SupportedApi {
        key: ApiKey::AddPartitionsToTxn,
        min_version: 0,
        max_version: 4,
    },
    SupportedApi {
        key: ApiKey::AddOffsetsToTxn,
        min_version: 0,
        max_version: 3,
    },
    SupportedApi {
        key: ApiKey::EndTxn,
        min_version: 0,
        max_version: 3,
    },
    SupportedApi {
        key: ApiKey::TxnOffsetCommit,
        min_version: 0,
        max_version: 3,
    },
    SupportedApi {
        key: ApiKey::DescribeAcls,
        min_version: 1,
        max_version: 3,
    },
    SupportedApi {
        key: ApiKey::CreateAcls,
        min_version: 1,
        max_version: 3,
    },
    SupportedApi {
        key: ApiKey::DeleteAcls,
        min_version: 1,
        max_version: 3,
    },
    SupportedApi {
        key: ApiKey::DescribeConfigs,
        min_version: 1,
        max_version: 4,
    },
    SupportedApi {
        key: ApiKey::AlterConfigs,
        min_version: 0,
        max_version: 2,
    },
    SupportedApi {
        key: ApiKey::DescribeLogDirs,
        min_version: 1,
        max_version: 4,
    },
    SupportedApi {
        key: ApiKey::SaslAuthenticate,
        min_version: 0,
        max_version: 2,
    },
    SupportedApi {
        key: ApiKey::CreatePartitions,
        min_version: 0,
        max_version: 3,
    },
    SupportedApi {
        key: ApiKey::DeleteGroups,
        min_version: 0,
        max_version: 2,
    },
    SupportedApi {
        key: ApiKey::IncrementalAlterConfigs,
        min_version: 0,
        max_version: 1,
    },
    SupportedApi {
        key: ApiKey::OffsetDelete,
        min_version: 0,
        max_version: 0,
    },
    SupportedApi {
        key: ApiKey::DescribeCluster,
        min_version: 0,
        max_version: 2,
    },
    SupportedApi {
        key: ApiKey::DescribeProducers,
        min_version: 0,
        max_version: 0,
    },
    SupportedApi {
        key: ApiKey::DescribeTransactions,
        min_version: 0,
        max_version: 0,
    },
    SupportedApi {
        key: ApiKey::ListTransactions,
        min_version: 0,
        max_version: 1,
    },
    SupportedApi {
        key: ApiKey::ConsumerGroupHeartbeat,
        min_version: 0,
        max_version: 1,
    },
    SupportedApi {
        key: ApiKey::ConsumerGroupDescribe,
        min_version: 0,
        max_version: 1,
    },
];

/// The API's implemented versions, or `None` if the listener does not answer it.
pub fn supported(key: ApiKey) -> Option<SupportedApi> {
    SUPPORTED_APIS.iter().copied().find(|api| api.key == key)
}

/// Whether `version` of `key` is implemented.
pub fn is_supported(key: ApiKey, version: i16) -> bool {
    supported(key).is_some_and(|api| (api.min_version..=api.max_version).contains(&version))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Nothing is advertised that the codec cannot decode and encode.
    #[test]
    fn every_advertised_version_is_one_the_codec_knows() {
        for api in SUPPORTED_APIS {
            let valid = api.key.valid_versions();
            assert!(
                valid.min <= api.min_version && api.max_version <= valid.max,
                "{:?} {}..={} outside the codec's {}..={}",
                api.key,
                api.min_version,
                api.max_version,
                valid.min,
                valid.max
            );
        }
    }

    /// The table is in API key order with one row per API (ApiVersions lists it as is).
    #[test]
    fn the_table_is_sorted_and_unique() {
        let keys: Vec<i16> = SUPPORTED_APIS.iter().map(|api| api.key as i16).collect();
        let mut sorted = keys.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(keys, sorted);
    }
}
