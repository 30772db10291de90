//! `fencelog consume`: print a partition's records.

use std::str::FromStr;
use std::time::Duration;

use clap::Args;
use serde::Serialize;

use super::common::{self, ClientArgs, Failure, Output};
use super::CliError;
use crate::client::{Consumer, Record};

/// How long one long poll waits with `--follow` before asking again.
const FOLLOW_WAIT: Duration = Duration::from_secs(10);

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
  --json:  {\"offset\":N,\"epoch\":E,\"timestamp\":MS,\"key\":K,\"value\":V}
           key and value are strings (null when absent); bytes that are not valid UTF-8 are
           replaced by U+FFFD (lossy), so use plain output of text values only.

Without --follow, consume stops at the end of the log as it was when consume started (its high
watermark then) and exits 0. With --follow it keeps long-polling for new records until
interrupted.")]
pub struct ConsumeArgs {
    /// Topic name.
    pub topic: String,
    /// Partition index.
    #[arg(long, default_value_t = 0)]
    pub partition: u32,
    /// First record: `earliest`, `latest` (only new records) or an offset.
    #[arg(long, default_value = "earliest")]
    pub from: StartAt,
    /// Keep waiting for new records instead of stopping at the end of the log.
    #[arg(long)]
    pub follow: bool,
    /// Soft limit on the bytes fetched per request.
    #[arg(long, default_value_t = crate::client::DEFAULT_CONSUMER_MAX_BYTES)]
    pub max_bytes: u32,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub client: ClientArgs,
}

#[derive(Serialize)]
struct RecordJson {
    offset: u64,
    epoch: u64,
    timestamp: i64,
    key: Option<String>,
    value: Option<String>,
}

impl From<&Record> for RecordJson {
    fn from(record: &Record) -> Self {
        let text = |bytes: &Option<bytes::Bytes>| {
            bytes
                .as_ref()
                .map(|bytes| String::from_utf8_lossy(bytes).into_owned())
        };
        Self {
            offset: record.offset,
            epoch: record.epoch,
            timestamp: record.timestamp,
            key: text(&record.key),
            value: text(&record.value),
        }
    }
}

/// Runs `fencelog consume`.
pub fn run(args: ConsumeArgs) -> Result<(), CliError> {
    common::block_on(consume(args))
}

async fn consume(args: ConsumeArgs) -> Result<(), Failure> {
    let client = common::connect(&args.client).await?;
    let offsets = client.list_offsets(&args.topic, args.partition).await?;
    let start = match args.from {
        StartAt::Earliest => offsets.earliest,
        StartAt::Latest => offsets.latest,
        StartAt::Offset(offset) => offset,
    };
    // The end of the log when we started; without --follow we stop there.
    let end = offsets.latest;
    if !args.follow && start > end {
        return Err(CliError::new(format!(
            "offset {start} is beyond the end of {}/{} (latest {end})",
            args.topic, args.partition
        ))
        .into());
    }
    let mut consumer =
        Consumer::new(client, args.topic, args.partition, start).with_max_bytes(args.max_bytes);
    let mut out = Output::new(args.client.json);
    loop {
        if !args.follow && consumer.position() >= end {
            break;
        }
        let wait = if args.follow {
            FOLLOW_WAIT
        } else {
            Duration::ZERO
        };
        let records = consumer.poll(wait).await?;
        for record in &records {
            if out.json() {
                out.emit(&RecordJson::from(record), "")?;
            } else {
                out.line(String::from_utf8_lossy(
                    record.value.as_deref().unwrap_or_default(),
                ))?;
            }
        }
        out.flush()?;
        if records.is_empty() && !args.follow {
            // Nothing below the starting high watermark came back (cannot happen with a
            // correct server); stop rather than spin.
            break;
        }
    }
    out.flush()
}
