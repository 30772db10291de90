//! `fencelog consume`: print a partition's records, optionally as a consumer group that resumes
//! where it stopped.
//!
//! With `--group` the position lives on the server (`OffsetCommit`/`OffsetFetch`), committed
//! after each poll's records are printed: printing first means a crash can repeat records but
//! never skip one.

use std::str::FromStr;
use std::time::Duration;

use clap::Args;
use serde::Serialize;

use super::common::{self, ClientArgs, Failure, Output};
use super::error;
use super::CliError;
use crate::client::{Client, Consumer, Offsets, Record};

/// How long one long poll waits with `--follow` before asking again.
const FOLLOW_WAIT: Duration = Duration::from_secs(10);

/// With `--follow`, how long one poll keeps reconnecting to a server that went away before it
/// gives up and the loss is reported (then the polls go on, quietly, until it is back).
const FOLLOW_RECONNECT: Duration = Duration::from_secs(2);

/// With `--follow`, the pause after a poll that failed transiently, before the next.
const FOLLOW_RETRY_PAUSE: Duration = Duration::from_millis(500);

/// Where to start reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartAt {
    /// The oldest offset still stored.
    Earliest,
    /// The end of the log: only records appended from now on.
    Latest,
    /// A given offset.
    Offset(u64),
}

impl FromStr for StartAt {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        match text {
            "earliest" => Ok(StartAt::Earliest),
            "latest" => Ok(StartAt::Latest),
            number => number
                .parse()
                .map(StartAt::Offset)
                .map_err(|_| format!("expected `earliest`, `latest` or an offset, got {number:?}")),
        }
    }
}

/// Arguments of `fencelog consume`.
#[derive(Debug, Args)]
#[command(after_long_help = "\
Output: one line per record, in offset order.
  plain:   the record's value (UTF-8; invalid bytes shown as U+FFFD), a line break after it
  --json:  {\"topic\":T,\"partition\":P,\"offset\":N,\"epoch\":E,\"timestamp\":MS,\"key\":K,
            \"value\":V,\"headers\":[{\"key\":HK,\"value\":HV},...]}
           key, value and header values are strings (null when absent); bytes that are not
           valid UTF-8 are replaced by U+FFFD (lossy), so use plain output of text values only.

Without --follow, consume stops at the end of the log as it was when consume started (its high
watermark then) and exits 0. With --follow it keeps long-polling for new records until
interrupted (Ctrl-C ends it cleanly, exit status 0). --count N stops after N records.

Consumer groups: with --group G, consume resumes from the offset the group committed for the
partition (--from applies only when the group has committed nothing there yet), and commits as
it goes: after the records of each poll are printed, it commits the offset of the next record to
read, and it commits again on exit. So `consume --group G` run twice prints each record once
across the two runs. Printing comes before committing: a consume killed between the two prints
those records again next time (at least once, never skipped). A committed offset that retention
has since removed resumes at the earliest offset still stored, with a warning on stderr (with
--json: {\"warning\":{\"code\",\"message\",...}}). Errors with --json: one object on stderr,
{\"error\":{\"code\",\"message\",...}}.

Examples:
  fencelog consume orders --partition 0 --from 0
  fencelog consume orders --partition 0 --group billing --count 10 --json")]
pub struct ConsumeArgs {
    /// Topic name.
    pub topic: String,
    /// Partition index.
    #[arg(long, default_value_t = 0)]
    pub partition: u32,
    /// First record: `earliest`, `latest` (only new records) or an offset. With --group, only
    /// used when the group has no committed offset for the partition.
    #[arg(long, default_value = "earliest")]
    pub from: StartAt,
    /// Consumer group: resume from its committed offset and commit the position as records are
    /// printed.
    #[arg(long)]
    pub group: Option<String>,
    /// Stop after this many records.
    #[arg(long)]
    pub count: Option<u64>,
    /// Keep waiting for new records instead of stopping at the end of the log.
    #[arg(long)]
    pub follow: bool,
    /// Soft limit on the bytes fetched per request.
    #[arg(long, default_value_t = crate::client::DEFAULT_CONSUMER_MAX_BYTES)]
    pub max_bytes: u32,
    /// Which records to show: `read-uncommitted` (every record, the default) or
    /// `read-committed` (records of committed transactions and records outside any; stops
    /// before a transaction still open and skips aborted ones).
    #[arg(long, value_enum, default_value = "read-uncommitted")]
    pub isolation: Isolation,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub client: ClientArgs,
}

/// `consume --isolation`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Isolation {
    /// Every record up to the high watermark.
    ReadUncommitted,
    /// Committed records only, up to the last stable offset.
    ReadCommitted,
}

#[derive(Serialize)]
struct RecordJson<'a> {
    topic: &'a str,
    partition: u32,
    offset: u64,
    epoch: u64,
    timestamp: i64,
    key: Option<String>,
    value: Option<String>,
    /// In the record's order; a header may repeat a key, so a list rather than a map.
    headers: Vec<HeaderJson>,
}

/// One header of a record under `--json`: its value is null when the header has none (Kafka
/// headers may be null), apart from an empty one.
#[derive(Serialize)]
struct HeaderJson {
    key: String,
    value: Option<String>,
}

impl<'a> RecordJson<'a> {
    fn new(topic: &'a str, partition: u32, record: &Record) -> Self {
        let text = |bytes: &Option<bytes::Bytes>| {
            bytes
                .as_ref()
                .map(|bytes| String::from_utf8_lossy(bytes).into_owned())
        };
        Self {
            topic,
            partition,
            offset: record.offset,
            epoch: record.epoch,
            timestamp: record.timestamp,
            key: text(&record.key),
            value: text(&record.value),
            headers: record
                .headers
                .iter()
                .map(|(key, value)| HeaderJson {
                    key: key.clone(),
                    value: text(value),
                })
                .collect(),
        }
    }
}

/// Runs `fencelog consume`.
pub fn run(args: ConsumeArgs) -> Result<(), CliError> {
    common::block_on(consume(args))
}

async fn consume(args: ConsumeArgs) -> Result<(), Failure> {
    let mut builder = common::client_builder(&args.client)?;
    if args.follow {
        builder = builder.reconnect_timeout(FOLLOW_RECONNECT);
    }
    let client = common::connect_builder(&args.client, builder).await?;
    let offsets = client.list_offsets(&args.topic, args.partition).await?;
    let mut group = match &args.group {
        Some(name) => Some(GroupPosition::load(&client, name, &args).await?),
        None => None,
    };
    let start = match group.as_ref().and_then(|group| group.committed) {
        Some(committed) => resume_at(committed, &offsets, &args),
        None => match args.from {
            StartAt::Earliest => offsets.earliest,
            StartAt::Latest => offsets.latest,
            StartAt::Offset(offset) => offset,
        },
    };
    // The end of the log when we started; without --follow we stop there.
    let end = offsets.latest;
    if !args.follow && start > end {
        return Err(CliError::with_code(
            "OFFSET_OUT_OF_RANGE",
            format!(
                "offset {start} is beyond the end of {}/{} (latest {end}): give --from {end} or lower, or --follow to wait for it",
                args.topic, args.partition
            ),
        )
        .detail("topic", &args.topic)
        .detail("partition", args.partition)
        .detail("offset", start)
        .detail("earliest", offsets.earliest)
        .detail("latest", end)
        .into());
    }
    let read_committed = args.isolation == Isolation::ReadCommitted;
    let mut consumer = Consumer::new(client, args.topic.clone(), args.partition, start)
        .with_max_bytes(args.max_bytes)
        .with_read_committed(read_committed);
    let mut out = Output::new(args.client.json);
    let mut remaining = args.count.unwrap_or(u64::MAX);
    // Ctrl-C ends a --follow consume between polls, after a last commit.
    let mut interrupted = std::pin::pin!(tokio::signal::ctrl_c());
    // The offset of the next record to print (and to commit).
    let mut next = start;
    let mut link = Link::new(args.client.json);
    loop {
        if remaining == 0 || (!args.follow && next >= end) {
            break;
        }
        let wait = if args.follow {
            FOLLOW_WAIT
        } else {
            Duration::ZERO
        };
        let position_before = consumer.position();
        let polled = tokio::select! {
            records = consumer.poll(wait) => records,
            _ = &mut interrupted, if args.follow => break,
        };
        let records = match polled {
            Ok(records) => {
                link.up(next);
                records
            }
            // Following, a server that went away is waited for, not a reason to stop.
            Err(error) if args.follow && error.is_retriable() => {
                link.down(&error);
                tokio::select! {
                    () = tokio::time::sleep(FOLLOW_RETRY_PAUSE) => continue,
                    _ = &mut interrupted => break,
                }
            }
            Err(error) => return Err(error.into()),
        };
        let shown = records
            .len()
            .min(usize::try_from(remaining).unwrap_or(usize::MAX));
        for record in &records[..shown] {
            if out.json() {
                out.emit(&RecordJson::new(&args.topic, args.partition, record), "")?;
            } else {
                out.line(String::from_utf8_lossy(
                    record.value.as_deref().unwrap_or_default(),
                ))?;
            }
        }
        out.flush()?;
        if let Some(last) = records[..shown].last() {
            next = last.offset + 1;
            remaining -= shown as u64;
        }
        if let Some(group) = &mut group {
            match group.commit(next).await {
                Ok(()) => {}
                // Committed after the next poll that succeeds (the position is still ahead).
                Err(error) if args.follow && error.is_retriable() => link.down(&error),
                Err(error) => return Err(error.into()),
            }
        }
        if records.is_empty() && read_committed && consumer.position() > position_before {
            // Only aborted transactions and markers were there: go on past them.
            next = next.max(consumer.position());
            continue;
        }
        if records.is_empty() && !args.follow {
            // Nothing below the starting high watermark came back: read_committed, a
            // transaction still open holds the rest back (stop at what is committed now);
            // otherwise it cannot happen with a correct server. Stop rather than spin.
            break;
        }
    }
    if let Some(group) = &mut group {
        group.commit(next).await?;
    }
    out.flush()
}

/// Whether `consume --follow` has the server, and the one stderr line for each change: when it
/// is lost (not one per retry) and when it is back.
struct Link {
    json: bool,
    lost: bool,
}

#[derive(Serialize)]
struct LinkJson<'a> {
    connection: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    offset: Option<u64>,
}

impl Link {
    fn new(json: bool) -> Self {
        Self { json, lost: false }
    }

    /// A poll failed transiently: says so the first time.
    fn down(&mut self, error: &crate::client::ClientError) {
        if std::mem::replace(&mut self.lost, true) {
            return;
        }
        let error = common::one_line(&error.to_string());
        if self.json {
            self.print(&LinkJson {
                connection: "lost",
                error: Some(error),
                offset: None,
            });
        } else {
            eprintln!("warning: lost the server ({error}); waiting for it to come back");
        }
    }

    /// A poll succeeded: says so if the server had been lost.
    fn up(&mut self, next: u64) {
        if !std::mem::replace(&mut self.lost, false) {
            return;
        }
        if self.json {
            self.print(&LinkJson {
                connection: "restored",
                error: None,
                offset: Some(next),
            });
        } else {
            eprintln!("the server is back; following from offset {next}");
        }
    }

    fn print(&self, line: &LinkJson<'_>) {
        if let Ok(line) = serde_json::to_string(line) {
            eprintln!("{line}");
        }
    }
}

/// Where a group resumes: its committed offset, unless the log no longer has it (retention
/// removed it, or the log lost records the group had read); the user is told on stderr.
fn resume_at(committed: u64, offsets: &Offsets, args: &ConsumeArgs) -> u64 {
    let partition = format!("{}/{}", args.topic, args.partition);
    let warning = |code: &str, message: String, resumed: u64| {
        let warning = CliError::with_code(code, message)
            .detail("topic", &args.topic)
            .detail("partition", args.partition)
            .detail("committed", committed)
            .detail("offset", resumed);
        error::warn(args.client.json, "warning", &warning);
    };
    if committed < offsets.earliest {
        warning(
            "COMMITTED_OFFSET_NOT_STORED",
            format!(
                "the committed offset {committed} of {partition} is no longer stored; \
                 resuming at the earliest offset {}",
                offsets.earliest
            ),
            offsets.earliest,
        );
        return offsets.earliest;
    }
    if committed > offsets.latest {
        warning(
            "COMMITTED_OFFSET_PAST_END",
            format!(
                "the committed offset {committed} of {partition} is past the end of the \
                 log ({}); resuming there",
                offsets.latest
            ),
            offsets.latest,
        );
        return offsets.latest;
    }
    committed
}

/// A consumer group's position in the partition: what it had committed, and commits of the
/// offsets printed since.
struct GroupPosition {
    client: Client,
    name: String,
    topic: String,
    partition: u32,
    /// The last offset committed (by an earlier run or this one).
    committed: Option<u64>,
}

impl GroupPosition {
    async fn load(client: &Client, name: &str, args: &ConsumeArgs) -> Result<Self, Failure> {
        let committed = client
            .committed_offset(name, &args.topic, args.partition)
            .await?;
        Ok(Self {
            client: client.clone(),
            name: name.to_string(),
            topic: args.topic.clone(),
            partition: args.partition,
            committed: committed.map(|committed| committed.offset),
        })
    }

    /// Commits `next` (the offset of the next record to read) unless it is already committed.
    async fn commit(&mut self, next: u64) -> Result<(), crate::client::ClientError> {
        if self.committed == Some(next) {
            return Ok(());
        }
        self.client
            .commit_offset(&self.name, &self.topic, self.partition, next, "")
            .await?;
        self.committed = Some(next);
        Ok(())
    }
}
