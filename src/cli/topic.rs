//! `fencelog topic create|list|describe|alter|add-partitions|delete|delete-records`: create
//! topics, show and change their configuration, add partitions, delete them or the records at
//! their start.

use std::time::Duration;

use clap::{Args, Subcommand};
use serde::Serialize;

use super::common::{self, ClientArgs, Failure, Output};
use super::CliError;
use crate::client::ClientError;
use crate::protocol::{
    ErrorCode, FlushPolicy, Replication, TopicConfig, TopicConfigChange, TopicMetadata,
};

/// Arguments of `fencelog topic`.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  fencelog topic create orders --partitions 3
  fencelog topic list
  fencelog topic describe orders
  fencelog topic alter orders --retention 7d
  fencelog topic add-partitions orders --count 6
  fencelog topic delete orders
  fencelog topic delete-records orders --partition 0 --before 100")]
pub struct TopicArgs {
    /// What to do with topics.
    #[command(subcommand)]
    pub command: TopicCommand,
}

impl TopicArgs {
    /// Whether `--json` was given.
    pub fn json(&self) -> bool {
        match &self.command {
            TopicCommand::Create(args) => args.client.json,
            TopicCommand::Delete(args) => args.client.json,
            TopicCommand::DeleteRecords(args) => args.client.json,
            TopicCommand::List(args) => args.client.json,
            TopicCommand::Describe(args) => args.client.json,
            TopicCommand::Alter(args) => args.client.json,
            TopicCommand::AddPartitions(args) => args.client.json,
        }
    }
}

/// Topic subcommands.
#[derive(Debug, Subcommand)]
pub enum TopicCommand {
    /// Create a topic.
    ///
    /// Prints the topic as created (with --json: the same object `topic list` prints).
    Create(CreateArgs),
    /// Delete a topic with its data, leases and every group's committed offsets for it.
    ///
    /// Exit status 0 when deleted (or, with --if-exists, when there was no such topic), 1
    /// otherwise. With --json: {"topic", "name", "action": "deleted" or "none", "deleted"}
    /// (deleted false, action none: it did not exist).
    Delete(DeleteArgs),
    /// Delete a partition's records before an offset (Kafka's DeleteRecords): its log start
    /// (low watermark) moves up to the offset, durably; consumers can no longer read below it.
    ///
    /// Prints the partition's low watermark after the request (the log start never moves back,
    /// so an offset below it leaves it where it is). Exit status 1 when the offset is past the
    /// high watermark or there is no such partition. With --json: {"topic", "name",
    /// "action": "records_deleted", "partition", "low_watermark"}.
    DeleteRecords(DeleteRecordsArgs),
    /// List every topic with its partitions, flush policy, segment size and retention.
    ///
    /// With --json: one object per topic, {"topic", "name", "partitions", "flush",
    /// "segment_bytes", "retention_bytes", "retention_ms"} (null retention = unlimited;
    /// `name` is the older spelling of `topic`). Commands that change a topic print the same
    /// object with "action": "created", "altered" or "partitions_added".
    List(ListArgs),
    /// Show one topic's settings under the names Kafka tools use (the Kafka listener's
    /// DescribeConfigs reports the same): `retention.ms`, `retention.bytes`, `segment.bytes`,
    /// `cleanup.policy`, `message.timestamp.type`, `fencelog.flush` (-1: unlimited).
    ///
    /// Exit status 1 if there is no such topic. With --json: the object `topic list` prints.
    Describe(DescribeArgs),
    /// Change a topic's retention or segment size while it is served (durable; in a cluster on
    /// every broker). The flush policy is chosen at creation.
    ///
    /// Prints the topic's settings after the change, as `topic describe` does (with --json:
    /// the object `topic list` prints).
    Alter(AlterArgs),
    /// Grow a topic to --count partitions in all (the new total, like Kafka's --partitions;
    /// partitions are only ever added). Durable; in a cluster on every broker, each new
    /// partition with an elected leader when this returns.
    ///
    /// Prints the topic's new partition count (with --json: the object `topic list` prints).
    /// Exit status 1 when the count is not above the current one, or above the limit.
    AddPartitions(AddPartitionsArgs),
}

/// Arguments of `fencelog topic add-partitions`.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  fencelog topic add-partitions orders --count 6 --json")]
pub struct AddPartitionsArgs {
    /// Name of the topic to grow.
    pub name: String,
    /// The partition count wanted in all, above the current one.
    #[arg(long, value_name = "N")]
    pub count: u32,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub client: ClientArgs,
}

/// Arguments of `fencelog topic alter`.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  fencelog topic alter orders --retention 12h --retention-bytes 1000000000
  fencelog topic alter orders --retention 0    # unlimited")]
#[command(group(clap::ArgGroup::new("change").required(true).multiple(true)
    .args(["retention", "retention_bytes", "segment_bytes"])))]
pub struct AlterArgs {
    /// Name of the topic to change.
    pub name: String,
    /// Delete segments whose newest record is older than this, e.g. `7d`, `12h`; 0 means
    /// unlimited.
    #[arg(long, value_parser = parse_retention)]
    pub retention: Option<Duration>,
    /// Delete the oldest segments once a partition holds more than this many bytes; 0 means
    /// unlimited.
    #[arg(long, value_name = "BYTES")]
    pub retention_bytes: Option<u64>,
    /// Segment file size in bytes, 4096 to 1073741824, for segments rolled from now on.
    #[arg(long, value_name = "BYTES")]
    pub segment_bytes: Option<u64>,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub client: ClientArgs,
}

/// The change `topic alter` sends (0 retention: unlimited, as on the wire).
fn config_change(args: &AlterArgs) -> TopicConfigChange {
    TopicConfigChange {
        segment_bytes: args.segment_bytes,
        retention_bytes: args
            .retention_bytes
            .map(|bytes| (bytes != 0).then_some(bytes)),
        retention_ms: args.retention.map(|retention| {
            (!retention.is_zero()).then(|| u64::try_from(retention.as_millis()).unwrap_or(u64::MAX))
        }),
    }
}

/// Arguments of `fencelog topic describe`.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  fencelog topic describe orders
  fencelog topic describe orders --json --addr 10.0.0.5:7171")]
pub struct DescribeArgs {
    /// Name of the topic to describe.
    pub name: String,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub client: ClientArgs,
}

/// Arguments of `fencelog topic create`.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  fencelog topic create orders --partitions 3
  fencelog topic create events --flush interval:250ms --retention 7d --retention-bytes 1000000000
  fencelog topic create orders --partitions 3 --replication-factor 3 --addr A:7171,B:7171,C:7171")]
pub struct CreateArgs {
    /// Topic name: 1 to 200 ASCII letters, digits, `.`, `_` and `-`.
    pub name: String,
    /// Number of partitions, numbered 0..N: 1 to 10000.
    #[arg(long, default_value_t = 1)]
    pub partitions: u32,
    /// When appends are fsynced: `always` (before each ack), `never` (left to the OS),
    /// `interval` (every 100ms) or `interval:<N>ms` / `interval:<N>s`.
    #[arg(long, default_value = "always", value_parser = parse_flush)]
    pub flush: FlushPolicy,
    /// Segment file size in bytes, 4096 to 1073741824 (1 GiB); a new segment starts when the
    /// next batch does not fit.
    #[arg(long, default_value_t = TopicConfig::DEFAULT_SEGMENT_BYTES)]
    pub segment_bytes: u64,
    /// Delete the oldest segments once a partition holds more than this many bytes; 0 means
    /// unlimited, as on the wire (default: unlimited).
    #[arg(long, value_name = "BYTES")]
    pub retention_bytes: Option<u64>,
    /// Delete segments whose newest record is older than this, e.g. `7d`, `12h`, `30s`; 0 means
    /// unlimited, as on the wire, and anything else must be at least 1ms (default: unlimited).
    #[arg(long, value_parser = parse_retention)]
    pub retention: Option<Duration>,
    /// How many brokers hold a copy of each partition (default: 1, no replication). Above 1
    /// needs a cluster (brokers started with --etcd); a standalone server refuses it.
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..))]
    pub replication_factor: Option<u16>,
    /// The fewest in-sync replicas with which `acks=all` produces are accepted, at most the
    /// replication factor (default: min(2, replication factor)).
    #[arg(long, requires = "replication_factor", value_parser = clap::value_parser!(u16).range(1..))]
    pub min_insync: Option<u16>,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub client: ClientArgs,
}

/// Arguments of `fencelog topic delete`.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  fencelog topic delete orders
  fencelog topic delete orders --if-exists --json")]
pub struct DeleteArgs {
    /// Name of the topic to delete.
    pub name: String,
    /// Succeed when there is no such topic (exit status 0, nothing deleted).
    #[arg(long)]
    pub if_exists: bool,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub client: ClientArgs,
}

/// What `topic delete --json` prints: `name` and `deleted` as they always were, `topic` and
/// `action` (`deleted`, or `none` when --if-exists found nothing) as every command has them.
#[derive(Debug, Serialize)]
struct DeletedJson<'a> {
    topic: &'a str,
    name: &'a str,
    action: &'static str,
    deleted: bool,
}

/// Arguments of `fencelog topic list`.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  fencelog topic list
  fencelog topic list --json --addr 10.0.0.5:7171")]
pub struct ListArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub client: ClientArgs,
}

fn parse_flush(text: &str) -> Result<FlushPolicy, String> {
    text.parse().map_err(|error| format!("{error}"))
}

/// Reads `--retention`: a duration of 0 (unlimited) or of at least 1ms. A shorter non-zero one
/// is refused, because the wire counts whole milliseconds and would read it as 0 = unlimited,
/// the opposite of what was asked.
fn parse_retention(text: &str) -> Result<Duration, String> {
    let retention = common::parse_duration(text)?;
    if !retention.is_zero() && retention < Duration::from_millis(1) {
        return Err("must be 0 (unlimited) or at least 1ms".to_owned());
    }
    Ok(retention)
}

/// The configuration `topic create` sends. Zero retention limits are sent as unlimited (`None`),
/// which is what the wire's 0 means, so the command prints what the server will report.
fn topic_config(args: &CreateArgs) -> TopicConfig {
    TopicConfig {
        segment_bytes: args.segment_bytes,
        flush: args.flush,
        retention_bytes: args.retention_bytes.filter(|bytes| *bytes != 0),
        retention_ms: args
            .retention
            .filter(|retention| !retention.is_zero())
            .map(|retention| u64::try_from(retention.as_millis()).unwrap_or(u64::MAX)),
    }
}

/// A topic as printed with `--json`: `topic` (and `name`, its older spelling, kept for
/// scripts), the configuration, and for a command that changed it the `action`.
#[derive(Debug, Serialize)]
struct TopicJson<'a> {
    topic: &'a str,
    name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    action: Option<&'static str>,
    partitions: u32,
    flush: String,
    segment_bytes: u64,
    retention_bytes: Option<u64>,
    retention_ms: Option<u64>,
}

impl<'a> TopicJson<'a> {
    fn new(name: &'a str, partitions: u32, config: &TopicConfig) -> Self {
        Self {
            topic: name,
            name,
            action: None,
            partitions,
            flush: config.flush.to_string(),
            segment_bytes: config.segment_bytes,
            retention_bytes: config.retention_bytes,
            retention_ms: config.retention_ms,
        }
    }

    /// The same object, saying what the command did.
    fn action(mut self, action: &'static str) -> Self {
        self.action = Some(action);
        self
    }
}

fn retention_bytes_text(config: &TopicConfig) -> String {
    config
        .retention_bytes
        .map_or_else(|| "unlimited".to_owned(), |bytes| bytes.to_string())
}

fn retention_text(config: &TopicConfig) -> String {
    config.retention_ms.map_or_else(
        || "unlimited".to_owned(),
        |ms| common::format_duration(Duration::from_millis(ms)),
    )
}

/// Runs `fencelog topic ...`.
pub fn run(args: TopicArgs) -> Result<(), CliError> {
    match args.command {
        TopicCommand::Create(args) => common::block_on(create(args)),
        TopicCommand::List(args) => common::block_on(list(args)),
        TopicCommand::Delete(args) => common::block_on(delete(args)),
        TopicCommand::DeleteRecords(args) => common::block_on(delete_records(args)),
        TopicCommand::Describe(args) => common::block_on(describe(args)),
        TopicCommand::Alter(args) => common::block_on(alter(args)),
        TopicCommand::AddPartitions(args) => common::block_on(add_partitions(args)),
    }
}

/// `key=value` lines of a topic's settings under Kafka's names.
fn kafka_named(config: &TopicConfig) -> Vec<String> {
    let unlimited = |value: Option<u64>| value.map_or_else(|| "-1".to_owned(), |v| v.to_string());
    vec![
        "cleanup.policy=delete".to_owned(),
        format!("fencelog.flush={}", config.flush),
        "message.timestamp.type=CreateTime".to_owned(),
        format!("retention.bytes={}", unlimited(config.retention_bytes)),
        format!("retention.ms={}", unlimited(config.retention_ms)),
        format!("segment.bytes={}", config.segment_bytes),
    ]
}

async fn alter(args: AlterArgs) -> Result<(), Failure> {
    let client = common::connect(&args.client).await?;
    let config = client
        .alter_topic_config(&args.name, config_change(&args))
        .await?;
    let topics = client.metadata(&[args.name.as_str()]).await?;
    let partitions = topics.first().map_or(0, |topic| topic.partitions);
    let mut out = Output::new(args.client.json);
    if out.json() {
        let json = TopicJson::new(&args.name, partitions, &config).action("altered");
        out.emit(&json, "")?;
        return out.flush();
    }
    out.line(format!("altered topic {}", args.name))?;
    for line in kafka_named(&config) {
        out.line(line)?;
    }
    out.flush()
}

async fn add_partitions(args: AddPartitionsArgs) -> Result<(), Failure> {
    let client = common::connect(&args.client).await?;
    let partitions = client.create_partitions(&args.name, args.count).await?;
    let topics = client.metadata(&[args.name.as_str()]).await?;
    let config = topics
        .first()
        .map_or_else(TopicConfig::default, |topic| topic.config);
    let mut out = Output::new(args.client.json);
    if out.json() {
        let json = TopicJson::new(&args.name, partitions, &config).action("partitions_added");
        out.emit(&json, "")?;
        return out.flush();
    }
    out.line(format!(
        "topic {} now has {partitions} partitions",
        args.name
    ))?;
    out.flush()
}

async fn describe(args: DescribeArgs) -> Result<(), Failure> {
    let client = common::connect(&args.client).await?;
    let topics = client.metadata(&[args.name.as_str()]).await?;
    let mut out = Output::new(args.client.json);
    for topic in &topics {
        if out.json() {
            out.emit(
                &TopicJson::new(&topic.name, topic.partitions, &topic.config),
                "",
            )?;
            continue;
        }
        out.line(format!(
            "topic {} ({} partition{})",
            topic.name,
            topic.partitions,
            if topic.partitions == 1 { "" } else { "s" }
        ))?;
        for line in kafka_named(&topic.config) {
            out.line(line)?;
        }
    }
    out.flush()
}

async fn delete(args: DeleteArgs) -> Result<(), Failure> {
    let client = common::connect(&args.client).await?;
    let deleted = match client.delete_topic(&args.name).await {
        Ok(()) => true,
        Err(ClientError::Server {
            code: ErrorCode::UnknownTopic,
            ..
        }) if args.if_exists => false,
        Err(error) => return Err(error.into()),
    };
    let mut out = Output::new(args.client.json);
    let json = DeletedJson {
        topic: &args.name,
        name: &args.name,
        action: if deleted { "deleted" } else { "none" },
        deleted,
    };
    if deleted {
        out.emit(&json, format_args!("deleted topic {}", args.name))?;
    } else {
        out.emit(
            &json,
            format_args!("topic {} does not exist; nothing deleted", args.name),
        )?;
    }
    out.flush()
}

async fn create(args: CreateArgs) -> Result<(), Failure> {
    let config = topic_config(&args);
    let client = common::connect(&args.client).await?;
    match args.replication_factor {
        // Without the flag, CreateTopic version 0: servers from before replication accept it.
        None => {
            client
                .create_topic(&args.name, args.partitions, config)
                .await?
        }
        Some(factor) => {
            let replication = Replication {
                factor,
                min_insync: args.min_insync,
            };
            client
                .create_replicated_topic(&args.name, args.partitions, config, replication)
                .await?
        }
    }
    let mut out = Output::new(args.client.json);
    out.emit(
        &TopicJson::new(&args.name, args.partitions, &config).action("created"),
        format_args!(
            "created topic {} with {} partition{} (flush {}, segment_bytes {}, retention_bytes {}, retention {})",
            args.name,
            args.partitions,
            if args.partitions == 1 { "" } else { "s" },
            config.flush,
            config.segment_bytes,
            retention_bytes_text(&config),
            retention_text(&config),
        ),
    )?;
    out.flush()
}

async fn list(args: ListArgs) -> Result<(), Failure> {
    let client = common::connect(&args.client).await?;
    let topics = client.list_topics().await?;
    let mut out = Output::new(args.client.json);
    if out.json() {
        for topic in &topics {
            out.emit(
                &TopicJson::new(&topic.name, topic.partitions, &topic.config),
                "",
            )?;
        }
        return out.flush();
    }
    for line in table(&topics) {
        out.line(line)?;
    }
    out.flush()
}

/// The plain listing: a header and one aligned row per topic.
fn table(topics: &[TopicMetadata]) -> Vec<String> {
    let header = [
        "NAME",
        "PARTITIONS",
        "FLUSH",
        "SEGMENT_BYTES",
        "RETENTION_BYTES",
        "RETENTION",
    ]
    .map(str::to_owned);
    let mut rows = vec![header];
    for topic in topics {
        rows.push([
            topic.name.clone(),
            topic.partitions.to_string(),
            topic.config.flush.to_string(),
            topic.config.segment_bytes.to_string(),
            retention_bytes_text(&topic.config),
            retention_text(&topic.config),
        ]);
    }
    let mut widths = [0usize; 6];
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.len());
        }
    }
    rows.iter()
        .map(|row| {
            let cells: Vec<String> = row
                .iter()
                .zip(widths)
                .map(|(cell, width)| format!("{cell:<width$}"))
                .collect();
            cells.join("  ").trim_end().to_owned()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    /// `fencelog topic create` parsed from `args`.
    #[derive(Debug, Parser)]
    struct Command {
        #[command(flatten)]
        create: CreateArgs,
    }

    fn create_args(args: &[&str]) -> Result<CreateArgs, clap::Error> {
        Command::try_parse_from(["create", "t"].iter().chain(args)).map(|command| command.create)
    }

    /// Zero retention limits mean unlimited, as on the wire; omitted ones too.
    #[test]
    fn zero_retention_is_unlimited_like_the_wire() {
        for args in [
            &["--retention-bytes", "0", "--retention", "0"][..],
            &["--retention-bytes", "0", "--retention", "0s"][..],
            &[][..],
        ] {
            let config = topic_config(&create_args(args).unwrap());
            assert_eq!((config.retention_bytes, config.retention_ms), (None, None));
        }
        let config =
            topic_config(&create_args(&["--retention-bytes", "1", "--retention", "1ms"]).unwrap());
        assert_eq!(
            (config.retention_bytes, config.retention_ms),
            (Some(1), Some(1))
        );
    }

    /// A non-zero retention below 1ms would travel as 0 (unlimited): it is refused instead.
    #[test]
    fn sub_millisecond_retention_is_refused() {
        let error = create_args(&["--retention", "500us"]).unwrap_err();
        assert!(error.to_string().contains("at least 1ms"), "{error}");
    }
}

/// Arguments of `fencelog topic delete-records`.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  fencelog topic delete-records orders --partition 0 --before 100
  fencelog topic delete-records orders --partition 0 --before high-watermark")]
pub struct DeleteRecordsArgs {
    /// Name of the topic.
    pub name: String,
    /// The partition whose records are deleted.
    #[arg(long)]
    pub partition: u32,
    /// Delete every record below this offset; at most the partition's high watermark, or
    /// `high-watermark` for every record consumers can see now.
    #[arg(long, value_name = "OFFSET", value_parser = parse_before)]
    pub before: u64,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub client: ClientArgs,
}

/// Reads `--before`: an offset, or `high-watermark`.
fn parse_before(text: &str) -> Result<u64, String> {
    match text {
        "high-watermark" => Ok(crate::domain::DELETE_UP_TO_HIGH_WATERMARK),
        offset => offset
            .parse()
            .map_err(|_| "must be an offset (a whole number) or `high-watermark`".to_owned()),
    }
}

/// What `topic delete-records --json` prints (`name`, the older spelling of `topic`, kept).
#[derive(Debug, Serialize)]
struct DeletedRecordsJson<'a> {
    topic: &'a str,
    name: &'a str,
    action: &'static str,
    partition: u32,
    low_watermark: u64,
}

async fn delete_records(args: DeleteRecordsArgs) -> Result<(), Failure> {
    let client = common::connect(&args.client).await?;
    let low_watermark = client
        .delete_records(&args.name, args.partition, args.before)
        .await?;
    let mut out = Output::new(args.client.json);
    let json = DeletedRecordsJson {
        topic: &args.name,
        name: &args.name,
        action: "records_deleted",
        partition: args.partition,
        low_watermark,
    };
    out.emit(
        &json,
        format_args!(
            "deleted records of {}/{}; low watermark {low_watermark}",
            args.name, args.partition
        ),
    )?;
    out.flush()
}
