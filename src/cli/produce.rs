//! `fencelog produce`: append stdin lines to a partition under a fencing epoch.

use std::io::BufRead;
use std::time::Duration;

use bytes::Bytes;
use clap::Args;
use futures::stream::FuturesOrdered;
use futures::StreamExt;
use serde::Serialize;
use tokio::sync::mpsc;

use super::common::{self, ClientArgs, Failure, Output};
use super::CliError;
use crate::client::{ClientError, Producer, ProducerStats};
use crate::protocol::Acks;

/// Arguments of `fencelog produce`.
#[derive(Debug, Args)]
#[command(after_long_help = "\
Each line of stdin becomes one record (its value is the line without the trailing \\n, or \\r\\n);
lines are bytes, not necessarily UTF-8. Lines are gathered into batches (up to --batch-records
lines or --batch-bytes bytes, or whatever arrived within --linger) and each batch is one produce
request, sent while the next batch is being read.

Every line is appended exactly once, in input order. The producer is idempotent: when the
connection breaks or a request times out, it reconnects and resends every batch not yet
acknowledged; the server recognises the batches it already has (by producer id and sequence
number) and answers them with their original offsets. It keeps trying for --delivery-timeout.

Output: one line per record, in input order, once its batch is acknowledged:
  plain:   offset N
  --json:  {\"offset\":N}
If batches had to be resent, a summary goes to stderr at the end:
  plain:   resent N batches after M connection failures; every line was appended once
  --json:  {\"resends\":M,\"batches_resent\":N}

Exit status: 0 when every line was appended; 3 when the server rejected the epoch as fenced (a
newer lease exists; stderr names both epochs, e.g. `error: fenced: epoch 1 < current 2`); 1 for
any other error. When a line cannot be appended (a line too large for a batch, fenced, ...),
the lines before it are printed with their offsets, the failed line is not appended, and no
line after it is appended either: to continue, rerun from the failed line. Stderr names the
line and why (a fenced write says exactly `error: fenced: epoch A < current B`). Only when the
server stays unreachable past --delivery-timeout is the outcome of the unacknowledged lines
unknown; stderr then says so.")]
pub struct ProduceArgs {
    /// Topic name.
    pub topic: String,
    /// Partition index.
    #[arg(long, default_value_t = 0)]
    pub partition: u32,
    /// The fencing epoch to write under (from `fencelog lease acquire`).
    #[arg(long)]
    pub epoch: u64,
    /// Key given to every record (default: no key).
    #[arg(long)]
    pub key: Option<String>,
    /// Most lines in one batch.
    #[arg(long, default_value_t = 1000)]
    pub batch_records: usize,
    /// Most bytes in one batch.
    #[arg(long, default_value_t = 1024 * 1024)]
    pub batch_bytes: usize,
    /// How long a batch waits for more lines before it is sent, e.g. `5ms`.
    #[arg(long, default_value = "5ms", value_parser = common::parse_duration)]
    pub linger: Duration,
    /// Most produce requests in flight (pipelined; batches are still appended in input order).
    /// At most 8 (the batches the server remembers per producer for deduplication).
    #[arg(long, default_value_t = 4)]
    pub max_in_flight: usize,
    /// How long a line may take to be acknowledged, resends after connection failures
    /// included, e.g. `2m`.
    #[arg(long, default_value = "2m", value_parser = common::parse_duration)]
    pub delivery_timeout: Duration,
    /// When a batch counts as appended: `all` (every in-sync replica has it) or `leader` (the
    /// partition's leader has it). Default: `all` on a replicated partition, else `leader`.
    /// A standalone server treats both alike.
    #[arg(long)]
    pub acks: Option<Acks>,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub client: ClientArgs,
}

#[derive(Serialize)]
struct OffsetJson {
    offset: u64,
}

/// Runs `fencelog produce`.
pub fn run(args: ProduceArgs) -> Result<(), CliError> {
    common::block_on(produce(args))
}

/// Reads stdin on a plain thread (stdin is blocking) and hands lines over, with backpressure.
fn read_lines(lines: mpsc::Sender<std::io::Result<Bytes>>) {
    let stdin = std::io::stdin();
    let mut input = stdin.lock();
    loop {
        let mut line = Vec::new();
        match input.read_until(b'\n', &mut line) {
            Ok(0) => return,
            Ok(_) => {
                if line.last() == Some(&b'\n') {
                    line.pop();
                    if line.last() == Some(&b'\r') {
                        line.pop();
                    }
                }
                if lines.blocking_send(Ok(Bytes::from(line))).is_err() {
                    return;
                }
            }
            Err(error) if error.kind() == std::io::ErrorKind::Interrupted => {}
            Err(error) => {
                let _ = lines.blocking_send(Err(error));
                return;
            }
        }
    }
}

async fn produce(args: ProduceArgs) -> Result<(), Failure> {
    let client = common::connect(&args.client).await?;
    // Enough records in flight to fill a batch while the previous ones are acknowledged.
    let max_pending = args
        .batch_records
        .saturating_mul(args.max_in_flight.max(1) + 2)
        .clamp(64, 1 << 20);
    let mut builder = Producer::builder(client, args.topic, args.partition);
    if let Some(acks) = args.acks {
        builder = builder.acks(acks);
    }
    let producer = builder
        .epoch(args.epoch)
        .linger(args.linger)
        .batch_records(args.batch_records)
        .batch_bytes(args.batch_bytes)
        .max_in_flight(args.max_in_flight)
        .max_pending_records(max_pending)
        .delivery_timeout(args.delivery_timeout)
        .build()
        .await?;
    let key = args.key.map(Bytes::from);

    let (lines_tx, mut lines) = mpsc::channel(1024);
    std::thread::spawn(move || read_lines(lines_tx));

    let mut out = Output::new(args.client.json);
    let mut pending = FuturesOrdered::new();
    let mut input_open = true;
    // 1-based number of the next line read, and of the next line answered.
    let mut lines_read = 0u64;
    let mut line_answered = 1u64;
    let outcome = loop {
        tokio::select! {
            line = lines.recv(), if input_open && pending.len() < max_pending => match line {
                Some(Ok(value)) => {
                    lines_read += 1;
                    pending.push_back(producer.send(key.clone(), value));
                }
                Some(Err(error)) => break Err(CliError::new(format!("read stdin after line {lines_read}: {error}"))),
                None => input_open = false,
            },
            Some(acked) = pending.next(), if !pending.is_empty() => {
                let offset = match acked {
                    Ok(offset) => offset,
                    Err(failed) => break Err(line_failed(line_answered, failed.error)),
                };
                line_answered += 1;
                out.emit(&OffsetJson { offset }, format_args!("offset {offset}"))?;
                if pending.is_empty() {
                    out.flush()?;
                }
            },
            else => break Ok(()),
        }
    };
    out.flush()?;
    report_resends(&producer.stats(), outcome.is_ok(), args.client.json);
    outcome.map_err(Failure::from)
}

/// The error for line `line` (1-based), which was not appended; neither was any line after it.
fn line_failed(line: u64, error: ClientError) -> CliError {
    // A transport failure that outlasted the delivery timeout leaves the outcome unknown.
    let unknown = error.is_retriable();
    let fenced = error.is_fenced();
    let mut failure = common::client_error(error);
    // The fenced message is a contract scripts match on (`error: fenced: epoch A < current B`).
    failure.message = if fenced {
        failure.message
    } else if unknown {
        format!(
            "line {line} was not acknowledged within the delivery timeout: {}; lines before it were appended (their offsets are printed), it and the lines after it may or may not have been",
            failure.message
        )
    } else {
        format!(
            "line {line} was not appended: {}; lines before it were (their offsets are printed), no line after it was",
            failure.message
        )
    };
    failure
}

/// Says on stderr what it took to deliver the lines, if anything beyond sending each batch once.
fn report_resends(stats: &ProducerStats, succeeded: bool, json: bool) {
    if stats.resends == 0 {
        return;
    }
    if json {
        if let Ok(line) = serde_json::to_string(stats) {
            eprintln!("{line}");
        }
    } else {
        eprintln!(
            "resent {} batches after {} connection failures{}",
            stats.batches_resent,
            stats.resends,
            if succeeded {
                "; every line was appended once"
            } else {
                ""
            }
        );
    }
}
