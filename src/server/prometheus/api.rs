//! `GET /api/partitions`: the first read-only JSON view of the console (issue 35, first stage).
//!
//! One object per partition — topic, index, leader epoch, log start, log end, high watermark,
//! and the fenced-write and lease counters — sorted by topic then partition, paged with
//! `?limit=N&offset=M` (at most [`MAX_API_PAGE`] rows a page, [`DEFAULT_API_PAGE`] unless asked)
//! and filtered with `?topic=NAME`, so a broker with 10,000 partitions answers in pages.
//! It reads what the Prometheus scrape reads and nothing else. Under `--auth` every view is given
//! the logged-in user's [`Access`] and shows only the topics it may see (see `super::session`).

use serde_json::{json, Value};

use crate::auth::Access;
use crate::broker::BrokerService;

/// The path of the partitions view.
pub const PARTITIONS_PATH: &str = "/api/partitions";
/// The path of the leases view: per partition the live lease (holder, epoch, time left), the
/// epoch history and the fenced writes.
pub const LEASES_PATH: &str = "/api/leases";
/// Rows of a page when `limit` is not given.
pub const DEFAULT_API_PAGE: usize = 100;
/// Most rows of a page; a larger `limit` is refused with 400.
pub const MAX_API_PAGE: usize = 1_000;

/// The path of the groups view: each consumer group's members and its committed offsets with
/// their lag.
pub const GROUPS_PATH: &str = "/api/groups";

/// The console's page: one HTML document with its script inline, served by the binary (no
/// framework, nothing fetched from elsewhere), reading the JSON views below every 2 s.
pub const CONSOLE_PATH: &str = "/";
/// The page itself.
pub const CONSOLE_HTML: &str = include_str!("console.html");

/// The path of the topics view: each topic's settings, partitions and size.
pub const TOPICS_PATH: &str = "/api/topics";
/// The path of the cluster view: the brokers, and per partition its leader, leader epoch,
/// replicas, ISR and offsets, under-replicated partitions first.
pub const CLUSTER_PATH: &str = "/api/cluster";

/// What a request for a page asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageQuery {
    /// Rows to return.
    pub limit: usize,
    /// Rows to skip.
    pub offset: usize,
    /// Only this topic's partitions.
    pub topic: Option<String>,
}

/// Reads `limit`, `offset` and `topic` from a query string; anything else is an error that says
/// what to send instead.
pub fn parse_query(query: Option<&str>) -> Result<PageQuery, String> {
    let mut page = PageQuery {
        limit: DEFAULT_API_PAGE,
        offset: 0,
        topic: None,
    };
    for pair in query
        .unwrap_or("")
        .split('&')
        .filter(|pair| !pair.is_empty())
    {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        let number = || {
            value
                .parse::<usize>()
                .map_err(|_| format!("{name}={value:?} is not a count; send e.g. {name}=100"))
        };
        match name {
            "limit" => {
                page.limit = number()?;
                if page.limit == 0 || page.limit > MAX_API_PAGE {
                    return Err(format!(
                        "limit={} is out of range; send 1..={MAX_API_PAGE} and page with offset",
                        page.limit
                    ));
                }
            }
            "offset" => page.offset = number()?,
            "topic" => page.topic = Some(value.to_string()),
            _ => {
                return Err(format!(
                    "unknown parameter {name:?}; use limit, offset, topic"
                ))
            }
        }
    }
    Ok(page)
}

/// The page of partitions `page` asks for, as JSON: `{"total": N, "offset": M, "partitions": [...]}`.
pub fn render_partitions(service: &BrokerService, page: &PageQuery, access: &Access) -> Value {
    render_page(service, page, access, |topic, index, partition| {
        let counts = partition.metrics().counts();
        json!({
            "topic": topic,
            "partition": index,
            "available": true,
            "leader_epoch": partition.current_epoch(),
            "log_start_offset": partition.log_start_offset(),
            "log_end_offset": partition.log_end_offset(),
            "high_watermark": partition.high_watermark(),
            "fenced_writes": counts.fenced,
            "unknown_epoch_writes": counts.unknown_epoch,
            "recent_fenced": recent_fenced(partition),
            "lease_grants": counts.lease_grants,
            "lease_expiries": counts.lease_expiries,
        })
    })
}

/// The page of the leases view `page` asks for, as JSON: `{"total": N, "offset": M,
/// "partitions": [...]}`, each partition with its current `epoch`, the live `lease` (`holder`,
/// `epoch`, `expires_in_ms`; `null` when none is live), its `epoch_history` (`[epoch,
/// start_offset]` pairs, oldest first: where each granted epoch's writes begin), the last grants
/// (`recent_grants`) and expiries (`recent_expiries`, each at the time its lease ran out), and
/// its fenced writes (`fenced_writes`, the latest in `recent_fenced`).
pub fn render_leases(service: &BrokerService, page: &PageQuery, access: &Access) -> Value {
    render_page(service, page, access, |topic, index, partition| {
        let counts = partition.metrics().counts();
        let lease = service
            .leases()
            .authority()
            .lookup(topic, index as u32)
            .map(|lease| {
                json!({
                    "holder": lease.holder,
                    "epoch": lease.epoch,
                    "expires_in_ms": lease.expires_in_ms,
                })
            });
        json!({
            "topic": topic,
            "partition": index,
            "available": true,
            "epoch": partition.current_epoch(),
            "lease": lease,
            "epoch_history": partition.epoch_history(),
            "recent_grants": lease_records(&partition.metrics().recent_grants()),
            "recent_expiries": lease_records(&partition.metrics().recent_expiries()),
            "fenced_writes": counts.fenced,
            "recent_fenced": recent_fenced(partition),
            "lease_grants": counts.lease_grants,
            "lease_expiries": counts.lease_expiries,
        })
    })
}

/// The page of the groups view `page` asks for, as JSON: `{"total": N, "offset": M, "groups":
/// [...]}`, sorted by name: Kafka consumer groups this broker coordinates (classic and KIP-848,
/// members or not) and every group with committed offsets (native `--group`s too). Each has its
/// `kind` (`classic`, `consumer` for KIP-848, `offsets` for a group that only committed), `state`,
/// `generation` (a KIP-848 group's epoch), `protocol_type`, `protocol` (a KIP-848 group's
/// assignor), `members` (`member_id`, `client_id`, `client_host`, `assignment` as
/// `topic-partition` names: a classic consumer's from SyncGroup, `null` for another protocol; a
/// KIP-848 member's owned partitions, with its `member_epoch` and its `target`), its `offsets`
/// (`topic`, `partition`, `committed`,
/// `high_watermark`, `lag` = high watermark − committed, never negative) and their total `lag`.
/// `?topic=NAME` keeps the groups with a committed offset on NAME, and only those offsets.
pub async fn render_groups(service: &BrokerService, page: &PageQuery, access: &Access) -> Value {
    let coordinator = service.groups().coordinator();
    let mut names: Vec<String> = service.groups().group_names();
    names.extend(coordinator.list().into_iter().map(|group| group.group_id));
    let now = std::time::Instant::now();
    names.extend(
        service
            .groups()
            .consumer_groups()
            .list(now)
            .into_iter()
            .map(|(group, _)| group),
    );
    names.sort_unstable();
    names.dedup();
    // Only a filter (a topic, or a user's ACLs) needs every group's offsets to know which rows
    // exist; otherwise the page is cut from the names and only its groups' offsets are read.
    let filtering = page.topic.is_some() || access.principal().is_some();
    let mut groups = Vec::new();
    let total = if filtering {
        for name in names {
            let offsets = visible_offsets(service, page, access, &name).await;
            // Under --auth a group shows through the topics it committed on that the user may
            // see (ACLs on groups are not kept): none visible, no row.
            if !offsets.is_empty() {
                groups.push((name, offsets));
            }
        }
        let total = groups.len();
        groups = groups
            .into_iter()
            .skip(page.offset)
            .take(page.limit)
            .collect();
        total
    } else {
        let total = names.len();
        for name in names.into_iter().skip(page.offset).take(page.limit) {
            let offsets = visible_offsets(service, page, access, &name).await;
            groups.push((name, offsets));
        }
        total
    };
    let rows: Vec<Value> = groups
        .into_iter()
        .map(|(name, mut offsets)| {
            offsets.sort_by(|a, b| {
                (a["topic"].as_str(), a["partition"].as_u64())
                    .cmp(&(b["topic"].as_str(), b["partition"].as_u64()))
            });
            let lag: u64 = offsets.iter().filter_map(|row| row["lag"].as_u64()).sum();
            let mut row = match coordinator.describe(&name) {
                Some(group) => classic_group(&group),
                None => match service.groups().consumer_groups().describe(&name, now) {
                    Some(group) => consumer_group(&group),
                    None => json!({"kind": "offsets", "state": "Empty", "generation": 0,
                                   "protocol_type": "", "protocol": "", "members": []}),
                },
            };
            row["group"] = json!(name);
            row["offsets"] = json!(offsets);
            row["lag"] = json!(lag);
            row
        })
        .collect();
    json!({"total": total, "offset": page.offset, "groups": rows})
}

/// A classic group's row: its members with what SyncGroup assigned them (read for protocol type
/// `consumer`, Kafka's consumers; `null` for another protocol).
fn classic_group(group: &crate::broker::coordinator::GroupDescription) -> Value {
    let members: Vec<Value> = group
        .members
        .iter()
        .map(|member| {
            let assignment = (group.protocol_type == "consumer")
                .then(|| super::assignment::consumer_assignment(&member.assignment))
                .flatten();
            json!({
                "member_id": member.member_id,
                "client_id": member.client_id,
                "client_host": member.client_host,
                "assignment": assignment,
            })
        })
        .collect();
    json!({
        "kind": "classic",
        "state": group.state.kafka_name(),
        "generation": group.generation,
        "protocol_type": group.protocol_type,
        "protocol": group.protocol,
        "members": members,
    })
}

/// A consumer-protocol (KIP-848) group's row: the group epoch as its generation, the assignor
/// as its protocol, each member with what it owns now (`assignment`) and will own once
/// reconciled (`target`).
fn consumer_group(group: &crate::broker::consumer_groups::ConsumerGroupDescription) -> Value {
    let names = |assignment: &crate::broker::consumer_groups::Assignment| -> Vec<String> {
        crate::broker::consumer_groups::assignment::pairs(assignment)
            .map(|(topic, partition)| format!("{topic}-{partition}"))
            .collect()
    };
    let members: Vec<Value> = group
        .members
        .iter()
        .map(|member| {
            json!({
                "member_id": member.member_id,
                "client_id": member.client_id,
                "client_host": member.client_host,
                "member_epoch": member.member_epoch,
                "assignment": names(&member.assignment),
                "target": names(&member.target),
            })
        })
        .collect();
    json!({
        "kind": "consumer",
        "state": group.state.kafka_name(),
        "generation": group.group_epoch,
        "protocol_type": "consumer",
        "protocol": group.assignor.name(),
        "members": members,
    })
}

/// The page of the topics view `page` asks for, as JSON: `{"total": N, "offset": M, "topics":
/// [...]}`, sorted by name, each with its `partitions` count, `replication_factor`, `flush`, the
/// live `segment_bytes`, `retention_bytes` and `retention_ms` (`null`: unlimited), `size_bytes`
/// (log data on this broker's disk) and `records` (log end minus log start, summed).
/// `?topic=NAME` keeps that topic.
pub fn render_topics(service: &BrokerService, page: &PageQuery, access: &Access) -> Value {
    let topics = page_topics(service, page, access);
    let replicas = service.replica_manager();
    let rows: Vec<Value> = topics
        .iter()
        .skip(page.offset)
        .take(page.limit)
        .map(|topic| {
            let open: Vec<_> = topic.open_partitions().collect();
            let limits = open.first().map(|partition| partition.limits());
            let config = topic.config();
            json!({
                "topic": topic.name(),
                "partitions": topic.partitions().len(),
                "replication_factor": replicas.partition_state(topic.name(), 0).replicas.len(),
                "flush": config.flush.to_string(),
                "segment_bytes": limits.map_or(config.segment_bytes, |limits| limits.segment_bytes),
                "retention_bytes": limits.map_or(config.retention_bytes, |limits| limits.retention_bytes),
                "retention_ms": limits.map_or(config.retention_ms, |limits| limits.retention_ms),
                "size_bytes": open.iter().map(|partition| partition.size_bytes()).sum::<u64>(),
                "records": open.iter().map(|partition| {
                    partition.log_end_offset().saturating_sub(partition.log_start_offset())
                }).sum::<u64>(),
                "unavailable_partitions": topic.partitions().len() - open.len(),
            })
        })
        .collect();
    json!({"total": topics.len(), "offset": page.offset, "topics": rows})
}

/// The page of the cluster view `page` asks for, as JSON: `{"brokers": [...], "total": N,
/// "offset": M, "partitions": [...]}`. Brokers, by node id: `node_id`, `alive`, `native_addr`,
/// `kafka_addr` (as the cluster registered them; a standalone server is one broker),
/// `registered_at_ms` and `registration_age_ms` (by the registering broker's clock, so skewed
/// clocks skew it; `null` standalone); a broker named as a replica but not registered is listed
/// with `alive: false` and nothing else known. Partitions, under-replicated
/// ones (fewer in-sync replicas than replicas) first, then by topic and partition: `leader`
/// (`null`: offline), `leader_epoch`, `replicas`, `isr`, `under_replicated`, and this broker's
/// `high_watermark`, `log_start_offset` and `log_end_offset` of its copy.
pub fn render_cluster(service: &BrokerService, page: &PageQuery, access: &Access) -> Value {
    let replicas = service.replica_manager();
    let now_ms = u64::try_from(crate::batch::now_ms()).unwrap_or(0);
    let mut brokers: std::collections::BTreeMap<crate::cluster::NodeId, Value> = replicas
        .brokers("")
        .into_iter()
        .map(|broker| {
            let age = broker.registered_at_ms.map(|at| now_ms.saturating_sub(at));
            let row = json!({
                "node_id": broker.node_id,
                "alive": true,
                "native_addr": (!broker.native_addr.is_empty()).then_some(broker.native_addr),
                "kafka_addr": broker.kafka_addr,
                "registered_at_ms": broker.registered_at_ms,
                "registration_age_ms": age,
            });
            (broker.node_id, row)
        })
        .collect();
    for node_id in replicas.replica_node_ids() {
        brokers.entry(node_id).or_insert_with(|| {
            json!({"node_id": node_id, "alive": false, "native_addr": null, "kafka_addr": null,
                   "registered_at_ms": null, "registration_age_ms": null})
        });
    }
    let brokers: Vec<Value> = brokers.into_values().collect();
    let topics = page_topics(service, page, access);
    let mut rows: Vec<(bool, String, usize, Value)> = Vec::new();
    for topic in &topics {
        for (index, slot) in topic.partitions().iter().enumerate() {
            let state = replicas.partition_state(topic.name(), index as u32);
            let under_replicated = state.isr.len() < state.replicas.len();
            let (high_watermark, log_start, log_end) =
                slot.open().map_or((None, None, None), |partition| {
                    (
                        Some(partition.high_watermark()),
                        Some(partition.log_start_offset()),
                        Some(partition.log_end_offset()),
                    )
                });
            rows.push((
                !under_replicated,
                topic.name().to_string(),
                index,
                json!({
                    "topic": topic.name(),
                    "partition": index,
                    "leader": state.leader,
                    "leader_epoch": state.leader_epoch,
                    "replicas": state.replicas,
                    "isr": state.isr,
                    "under_replicated": under_replicated,
                    "high_watermark": high_watermark,
                    "log_start_offset": log_start,
                    "log_end_offset": log_end,
                }),
            ));
        }
    }
    rows.sort_by(|a, b| (a.0, &a.1, a.2).cmp(&(b.0, &b.1, b.2)));
    let total = rows.len();
    let partitions: Vec<Value> = rows
        .into_iter()
        .skip(page.offset)
        .take(page.limit)
        .map(|(_, _, _, row)| row)
        .collect();
    json!({"brokers": brokers, "total": total, "offset": page.offset, "partitions": partitions})
}

/// The broker's topics `page` keeps (`?topic=`) among those `access` may see, sorted by name.
fn page_topics(
    service: &BrokerService,
    page: &PageQuery,
    access: &Access,
) -> Vec<std::sync::Arc<crate::broker::Topic>> {
    let mut topics = service.broker().topics();
    topics.retain(|topic| {
        page.topic
            .as_deref()
            .is_none_or(|name| topic.name() == name)
            && access.may_see(topic.name())
    });
    topics.sort_by(|a, b| a.name().cmp(b.name()));
    topics
}

/// `group`'s committed offsets on the topics `page` and `access` keep, with each partition's
/// high watermark and lag.
async fn visible_offsets(
    service: &BrokerService,
    page: &PageQuery,
    access: &Access,
    group: &str,
) -> Vec<Value> {
    let commits = service
        .groups()
        .committed_offsets(group)
        .await
        .unwrap_or_default();
    commits
        .into_iter()
        .filter(|((topic, _), _)| {
            page.topic.as_deref().is_none_or(|wanted| topic == wanted) && access.may_see(topic)
        })
        .map(|((topic, partition), committed)| {
            let high_watermark = service.reads().local_high_watermark(&topic, partition);
            json!({
                "topic": topic,
                "partition": partition,
                "committed": committed.offset,
                "high_watermark": high_watermark,
                "lag": high_watermark.saturating_sub(committed.offset),
            })
        })
        .collect()
}

/// Grants or expiries kept by a partition's metrics, as `{"epoch", "holder", "at_ms"}` rows.
fn lease_records(records: &[crate::metrics::LeaseGrantRecord]) -> Vec<Value> {
    records
        .iter()
        .map(
            |record| json!({"epoch": record.epoch, "holder": record.holder, "at_ms": record.at_ms}),
        )
        .collect()
}

/// The writes the fence turned away lately, newest last, each with the holder its stale epoch
/// was granted to when the partition still remembers that grant (`null` otherwise, and for a
/// writer without a lease).
fn recent_fenced(partition: &crate::storage::Partition) -> Vec<Value> {
    let grants = partition.metrics().recent_grants();
    partition
        .metrics()
        .recent_fenced()
        .iter()
        .map(|write| {
            let holder = grants
                .iter()
                .rev()
                .find(|grant| grant.epoch == write.stale_epoch)
                .map(|grant| grant.holder.clone());
            json!({
                "stale_epoch": write.stale_epoch,
                "current_epoch": write.current_epoch,
                "stale_holder": holder,
                "at_ms": write.at_ms,
            })
        })
        .collect()
}

/// A page of per-partition rows, sorted by topic then partition, each open partition's row made
/// by `row` (topic, index, partition); a partition that could not be opened is
/// `{"topic", "partition", "available": false}`.
fn render_page(
    service: &BrokerService,
    page: &PageQuery,
    access: &Access,
    row: impl Fn(&str, usize, &crate::storage::Partition) -> Value,
) -> Value {
    let topics = page_topics(service, page, access);
    let total: usize = topics.iter().map(|topic| topic.partitions().len()).sum();
    let rows: Vec<Value> = topics
        .iter()
        .flat_map(|topic| {
            topic
                .partitions()
                .iter()
                .enumerate()
                .map(move |(index, slot)| (topic, index, slot))
        })
        .skip(page.offset)
        .take(page.limit)
        .map(|(topic, index, slot)| match slot.open() {
            Some(partition) => row(topic.name(), index, partition),
            None => json!({"topic": topic.name(), "partition": index, "available": false}),
        })
        .collect();
    json!({"total": total, "offset": page.offset, "partitions": rows})
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Defaults, every parameter, and refusals that say what to send.
    #[test]
    fn queries_are_read_and_bad_ones_refused() {
        assert_eq!(
            parse_query(None).unwrap(),
            PageQuery {
                limit: DEFAULT_API_PAGE,
                offset: 0,
                topic: None
            }
        );
        let page = parse_query(Some("limit=5&offset=10&topic=t")).unwrap();
        assert_eq!((page.limit, page.offset), (5, 10));
        assert_eq!(page.topic.as_deref(), Some("t"));
        assert!(parse_query(Some("limit=0")).unwrap_err().contains("1..="));
        assert!(parse_query(Some("limit=100000")).is_err());
        assert!(parse_query(Some("offset=x"))
            .unwrap_err()
            .contains("not a count"));
        assert!(parse_query(Some("color=red"))
            .unwrap_err()
            .contains("unknown"));
    }
}
