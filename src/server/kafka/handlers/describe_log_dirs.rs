//! DescribeLogDirs (key 35), v1..=4: where this broker keeps its partitions and how large they
//! are (Kafka's `kafka-log-dirs --describe`, the AdminClient's `describeLogDirs`).
//!
//! What a client sees:
//! - One log directory: the data directory, as an absolute path.
//! - Per partition this broker holds a copy of (on a cluster, its own replicas only, as each
//!   Kafka broker answers for its own): the bytes of log data in its segments (what retention
//!   counts, not the preallocated size of the active segment's file), `offset_lag` 0 and
//!   `is_future_key` false (fencelog never moves a partition between directories).
//! - `topics` null: every partition; named topics and partitions: those this broker holds
//!   (the others are left out, as Kafka leaves them out).
//! - v4's `total_bytes` and `usable_bytes`: the data directory's filesystem (statvfs), or -1
//!   when it cannot be read (Kafka's "unknown").
//! - ACL: Kafka asks DESCRIBE on the cluster; fencelog asks `admin` on some topic (as for a
//!   broker's configs). Refused: `CLUSTER_AUTHORIZATION_FAILED` at the top (v3+) with no
//!   directories (v1 and v2 have no top-level error: an empty answer, as Kafka's).

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use kafka_protocol::messages::describe_log_dirs_response::{
    DescribeLogDirsPartition, DescribeLogDirsResult, DescribeLogDirsTopic,
};
use kafka_protocol::messages::{
    ApiKey, DescribeLogDirsRequest, DescribeLogDirsResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use super::super::response::{KafkaResponse, ResponseBody};
use super::api::{Call, KafkaApi};
use crate::auth::{Access, Operation};
use crate::broker::BrokerService;
use crate::server::protocol::Started;

/// DescribeLogDirs as the listener serves it: checked by its handler (`admin` on some topic).
pub struct DescribeLogDirs;

impl KafkaApi for DescribeLogDirs {
    type Request = DescribeLogDirsRequest;
    const KEY: ApiKey = ApiKey::DescribeLogDirs;
    const MIN_VERSION: i16 = 1;
    const MAX_VERSION: i16 = 4;

    fn start(call: Call<'_>, request: DescribeLogDirsRequest) -> Started<KafkaResponse> {
        Started::later(handle(
            Arc::clone(call.service),
            call.access,
            call.correlation_id,
            call.version,
            request,
        ))
    }
}

/// Space of the filesystem holding the data directory, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct DiskSpace {
    total_bytes: i64,
    usable_bytes: i64,
}

/// Total and available (to an unprivileged user) bytes of the filesystem holding `path`, or
/// -1 each when statvfs fails (Kafka's "unknown").
fn disk_space(path: &Path) -> DiskSpace {
    match rustix::fs::statvfs(path) {
        Ok(stat) => {
            let bytes = |blocks: u64| {
                i64::try_from(blocks.saturating_mul(stat.f_frsize)).unwrap_or(i64::MAX)
            };
            DiskSpace {
                total_bytes: bytes(stat.f_blocks),
                usable_bytes: bytes(stat.f_bavail),
            }
        }
        Err(error) => {
            tracing::warn!(path = %path.display(), %error, "statvfs of the data directory failed; reporting its space as unknown");
            DiskSpace {
                total_bytes: -1,
                usable_bytes: -1,
            }
        }
    }
}

/// Which partitions were asked for: `None` every one, else per topic the partitions.
type Wanted = Option<HashMap<String, Vec<i32>>>;

/// The sizes of the partitions asked for, off the async workers (a sealed segment's size may
/// have to be read from its index).
fn describe(service: &BrokerService, wanted: &Wanted) -> DescribeLogDirsResult {
    let broker = service.broker();
    let data_dir =
        std::path::absolute(broker.data_dir()).unwrap_or_else(|_| broker.data_dir().to_path_buf());
    let space = disk_space(&data_dir);
    let mut topics = Vec::new();
    for topic in broker.topics() {
        let asked = match wanted {
            None => None,
            Some(wanted) => match wanted.get(topic.name()) {
                Some(partitions) => Some(partitions),
                None => continue,
            },
        };
        let partitions: Vec<DescribeLogDirsPartition> = topic
            .partitions()
            .iter()
            .enumerate()
            .filter_map(|(index, slot)| {
                let index = i32::try_from(index).ok()?;
                if asked.is_some_and(|asked| !asked.contains(&index)) {
                    return None;
                }
                let partition = slot.open()?;
                Some(
                    DescribeLogDirsPartition::default()
                        .with_partition_index(index)
                        .with_partition_size(
                            i64::try_from(partition.size_bytes()).unwrap_or(i64::MAX),
                        )
                        .with_offset_lag(0)
                        .with_is_future_key(false),
                )
            })
            .collect();
        if partitions.is_empty() {
            continue;
        }
        topics.push(
            DescribeLogDirsTopic::default()
                .with_name(TopicName(StrBytes::from_string(topic.name().to_owned())))
                .with_partitions(partitions),
        );
    }
    DescribeLogDirsResult::default()
        .with_log_dir(StrBytes::from_string(data_dir.display().to_string()))
        .with_topics(topics)
        .with_total_bytes(space.total_bytes)
        .with_usable_bytes(space.usable_bytes)
}

/// Answers a DescribeLogDirs request.
pub async fn handle(
    service: Arc<BrokerService>,
    access: Access,
    correlation_id: i32,
    version: i16,
    request: DescribeLogDirsRequest,
) -> KafkaResponse {
    let answer = |body: DescribeLogDirsResponse| KafkaResponse {
        correlation_id,
        api_key: ApiKey::DescribeLogDirs,
        api_version: version,
        body: ResponseBody::message(body),
    };
    if let Err(refused) = access.check_somewhere(Operation::Admin) {
        tracing::info!(%refused, "Kafka DescribeLogDirs refused by ACL");
        return answer(
            DescribeLogDirsResponse::default()
                .with_error_code(ResponseError::ClusterAuthorizationFailed.code()),
        );
    }
    let wanted: Wanted = request.topics.map(|topics| {
        let mut wanted: HashMap<String, Vec<i32>> = HashMap::new();
        for topic in topics {
            wanted
                .entry(topic.topic.0.to_string())
                .or_default()
                .extend(topic.partitions);
        }
        wanted
    });
    let result = tokio::task::spawn_blocking(move || describe(&service, &wanted)).await;
    match result {
        Ok(result) => answer(DescribeLogDirsResponse::default().with_results(vec![result])),
        Err(join) => {
            tracing::error!(%join, "DescribeLogDirs task failed");
            answer(
                DescribeLogDirsResponse::default()
                    .with_error_code(ResponseError::UnknownServerError.code()),
            )
        }
    }
}
