//! `fencelog cluster status`: the brokers and every partition's leader, leader epoch, replicas,
//! in-sync replicas and high watermark, from the metadata of whichever bootstrap broker answers.

use std::collections::BTreeMap;

use clap::{Args, Subcommand};
use serde::Serialize;

use super::common::{self, ClientArgs, Failure, Output};
use super::CliError;
use crate::client::ClusterInfo;
use crate::cluster::NodeId;

/// Arguments of `fencelog cluster`.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  fencelog cluster status --addr 127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003")]
pub struct ClusterArgs {
    /// What to show.
    #[command(subcommand)]
    pub command: ClusterCommand,
}

impl ClusterArgs {
    /// Whether `--json` was given.
    pub fn json(&self) -> bool {
        match &self.command {
            ClusterCommand::Status(args) => args.client.json,
        }
    }
}

/// Cluster subcommands.
#[derive(Debug, Subcommand)]
pub enum ClusterCommand {
    /// Show the brokers and each partition's leader, leader epoch, replicas, ISR and high
    /// watermark.
    Status(StatusArgs),
}

/// Arguments of `fencelog cluster status`.
#[derive(Debug, Args)]
#[command(after_long_help = "\
The answer is the metadata of the first bootstrap broker (--addr A,B,C) that answers, as that
broker knows it; a standalone server shows itself as the one broker, leading every partition in
leader epoch 0.

Brokers: every live broker (alive: true), then any broker named as a replica that is not alive
(alive: false, no address). Partitions: one per partition of every topic, sorted by topic and
partition; leader is empty (null) while the partition has no leader.

Output:
  plain:   a `brokers` table (id, addr, alive) and a `partitions` table (topic, partition,
           leader, leader_epoch, replicas, isr, high_watermark)
  --json:  one object: {\"brokers\":[{\"id\",\"addr\",\"alive\"}],
           \"partitions\":[{\"topic\",\"partition\",\"leader\",\"leader_epoch\",\"replicas\",\"isr\",
           \"high_watermark\"}]}

Exit status: 0 when a broker answered, 1 otherwise.

Examples:
  fencelog cluster status --addr 127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003
  fencelog cluster status --json | jq '.partitions[] | select(.leader == null)'")]
pub struct StatusArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub client: ClientArgs,
}

/// One broker as `cluster status --json` prints it.
#[derive(Debug, Serialize, PartialEq, Eq)]
struct BrokerJson {
    id: NodeId,
    addr: Option<String>,
    alive: bool,
}

/// One partition as `cluster status --json` prints it.
#[derive(Debug, Serialize, PartialEq, Eq)]
struct PartitionJson {
    topic: String,
    partition: u32,
    leader: Option<NodeId>,
    leader_epoch: u32,
    replicas: Vec<NodeId>,
    isr: Vec<NodeId>,
    high_watermark: u64,
}

/// What `cluster status --json` prints.
#[derive(Debug, Serialize, PartialEq, Eq)]
struct StatusJson {
    brokers: Vec<BrokerJson>,
    partitions: Vec<PartitionJson>,
}

/// How long `cluster status` waits for one partition leader's offsets before it shows the
/// answering broker's high watermark instead.
const LEADER_OFFSETS_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// Runs `fencelog cluster ...`.
pub fn run(args: ClusterArgs) -> Result<(), CliError> {
    match args.command {
        ClusterCommand::Status(args) => common::block_on(status(args)),
    }
}

async fn status(args: StatusArgs) -> Result<(), Failure> {
    let client = common::connect(&args.client).await?;
    let info = client.cluster_metadata::<&str>(&[]).await?;
    let mut status = status_json(info);
    // In a cluster the answering broker knows its own high watermarks, and a follower's lags
    // its leader's by up to one fetch: ask each partition's leader (routed), keeping the
    // answer's where it cannot. Standalone (leader epoch 0) the answer is the leader's already.
    for partition in status
        .partitions
        .iter_mut()
        .filter(|p| p.leader.is_some() && p.leader_epoch > 0)
    {
        let asked = tokio::time::timeout(
            LEADER_OFFSETS_TIMEOUT,
            client.list_offsets(&partition.topic, partition.partition),
        )
        .await;
        if let Ok(Ok(offsets)) = asked {
            partition.high_watermark = offsets.latest;
        }
    }
    let mut out = Output::new(args.client.json);
    if out.json() {
        out.emit(&status, "")?;
        return out.flush();
    }
    for line in plain(&status) {
        out.line(line)?;
    }
    out.flush()
}

/// The brokers (live ones from the answer, then replicas that are not live) and the partitions,
/// sorted.
fn status_json(info: ClusterInfo) -> StatusJson {
    let mut brokers: BTreeMap<NodeId, BrokerJson> = info
        .brokers
        .into_iter()
        .map(|broker| {
            let json = BrokerJson {
                id: broker.node_id,
                addr: Some(broker.address),
                alive: true,
            };
            (broker.node_id, json)
        })
        .collect();
    let mut partitions: Vec<PartitionJson> = info
        .partitions
        .into_iter()
        .map(|partition| PartitionJson {
            topic: partition.topic,
            partition: partition.partition,
            leader: partition.leader,
            leader_epoch: partition.leader_epoch,
            replicas: partition.replicas,
            isr: partition.isr,
            high_watermark: partition.high_watermark,
        })
        .collect();
    partitions.sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
    for replica in partitions.iter().flat_map(|p| p.replicas.iter()) {
        brokers.entry(*replica).or_insert(BrokerJson {
            id: *replica,
            addr: None,
            alive: false,
        });
    }
    StatusJson {
        brokers: brokers.into_values().collect(),
        partitions,
    }
}

fn node_list(nodes: &[NodeId]) -> String {
    let names: Vec<String> = nodes.iter().map(NodeId::to_string).collect();
    format!("[{}]", names.join(","))
}

/// The plain output: two aligned tables.
fn plain(status: &StatusJson) -> Vec<String> {
    let mut lines = vec!["brokers".to_owned()];
    let broker_rows: Vec<[String; 3]> = status
        .brokers
        .iter()
        .map(|broker| {
            [
                broker.id.to_string(),
                broker.addr.clone().unwrap_or_else(|| "-".to_owned()),
                if broker.alive { "alive" } else { "not alive" }.to_owned(),
            ]
        })
        .collect();
    lines.extend(aligned(
        ["id", "addr", "alive"].map(str::to_owned),
        &broker_rows,
    ));
    lines.push(String::new());
    lines.push("partitions".to_owned());
    let partition_rows: Vec<[String; 7]> = status
        .partitions
        .iter()
        .map(|partition| {
            [
                partition.topic.clone(),
                partition.partition.to_string(),
                partition
                    .leader
                    .map_or_else(|| "none".to_owned(), |leader| leader.to_string()),
                partition.leader_epoch.to_string(),
                node_list(&partition.replicas),
                node_list(&partition.isr),
                partition.high_watermark.to_string(),
            ]
        })
        .collect();
    let header = [
        "topic",
        "partition",
        "leader",
        "leader_epoch",
        "replicas",
        "isr",
        "high_watermark",
    ]
    .map(str::to_owned);
    lines.extend(aligned(header, &partition_rows));
    lines
}

/// A header and rows, each column as wide as its widest cell.
fn aligned<const N: usize>(header: [String; N], rows: &[[String; N]]) -> Vec<String> {
    let mut widths = header.clone().map(|cell| cell.len());
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.len());
        }
    }
    std::iter::once(&header)
        .chain(rows)
        .map(|row| {
            let cells: Vec<String> = row
                .iter()
                .zip(widths)
                .map(|(cell, width)| format!("{cell:<width$}"))
                .collect();
            format!("  {}", cells.join("  ").trim_end())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{BrokerMetadata, PartitionMetadata};

    #[test]
    fn replicas_that_are_not_live_are_listed_as_not_alive() {
        let info = ClusterInfo {
            topics: vec![],
            brokers: vec![BrokerMetadata {
                node_id: 1,
                address: "b1:7171".into(),
            }],
            partitions: vec![
                PartitionMetadata {
                    topic: "orders".into(),
                    partition: 1,
                    leader: None,
                    leader_epoch: 4,
                    replicas: vec![2, 1],
                    isr: vec![1],
                    high_watermark: 9,
                },
                PartitionMetadata {
                    topic: "orders".into(),
                    partition: 0,
                    leader: Some(1),
                    leader_epoch: 3,
                    replicas: vec![1],
                    isr: vec![1],
                    high_watermark: 5,
                },
            ],
        };
        let status = status_json(info);
        assert_eq!(
            status.brokers,
            [
                BrokerJson {
                    id: 1,
                    addr: Some("b1:7171".into()),
                    alive: true
                },
                BrokerJson {
                    id: 2,
                    addr: None,
                    alive: false
                }
            ]
        );
        assert_eq!(status.partitions[0].partition, 0);
        let json = serde_json::to_string(&status).unwrap();
        assert!(json.contains(r#""leader":null,"leader_epoch":4"#), "{json}");
        let text = plain(&status).join("\n");
        assert!(text.contains("none"), "{text}");
        assert!(text.contains("[2,1]"), "{text}");
    }
}
