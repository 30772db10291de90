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
use super::produce_transaction;
use super::{CliError, EXIT_OUTCOME_UNKNOWN};
use crate::client::{ClientError, Outcome, Producer, ProducerStats};
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
  --json:  {\"topic\":T,\"partition\":P,\"offset\":N}
If batches had to be resent, a summary goes to stderr at the end:
  plain:   resent N batches after M connection failures; every line was appended once
  --json:  {\"resends\":M,\"batches_resent\":N}

A resend is answered with its original offsets even when a newer lease was granted meanwhile:
a line written while its epoch was current counts as appended (exit 0), whatever the epoch is
by the time the answer comes back. Only lines the partition never wrote are refused as fenced.

Every line ends in one of three outcomes, and the exit status says which:
  0  every line was appended (its offset printed).
  3  fenced: a newer lease exists, and the first line not printed was NOT appended, nor any
     line after it (stderr names both epochs, exactly `error: fenced: epoch A < current B`).
  1  another error, and the first line not printed was NOT appended, nor any line after it
     (a line too large for a batch, ...; stderr: `line N was not appended: ...`).
  4  outcome unknown: the first line not printed may or may not be in the log, and so may the
     lines after it (stderr: `outcome unknown for line N: ...`): the server stayed unreachable
     past --delivery-timeout, the write reached the leader but not enough replicas
     (NOT_ENOUGH_REPLICAS_AFTER_APPEND), the partition no longer remembers this producer, ...
     Read the partition before sending those lines again. Also when a line is known to be
     appended but its offset is not (`line N was appended, but its offset is no longer known`).
In every case the lines before it were appended, with their offsets printed. After exit 1 or 3,
rerun from the failed line to continue; after exit 4, from the first line not in the log.
With --json the error is one object on stderr, {\"error\":{\"code\",\"message\",\"line\":N,
\"outcome\":\"not_written\"|\"written\"|\"unknown\", ...}} (a fenced one adds \"epoch\" and
\"current_epoch\").

With --transaction ID, the lines are one atomic append over several partitions (a native
transaction, see docs/protocol.md section 5.19): each line is PARTITION:VALUE (the partition
index, a colon, the record's value), --epochs gives the lease epoch of every partition named
(P=E,P=E), and --partition and --epoch are not used. The lines are appended as they are read;
at the end of input the transaction commits, and read_committed readers see every line at once,
or none of them. Offsets are printed after the commit, one line per input line in input order
(plain: `partition P offset N`; --json: {\"topic\",\"partition\",\"offset\"}). The exit status says:
  0  committed: every line is published.
  3  fenced: a partition was granted to another writer (or the epoch given is stale); the
     transaction was aborted and NO line is published.
  1  another error; the transaction was aborted and NO line is published.
  4  outcome unknown: the commit's answer was lost; read the partitions before sending again.
At most 1000000 lines per transaction (MAX_TRANSACTION_LINES).

Examples:
  fencelog lease acquire orders 0 --holder me          # prints the epoch, say 1
  printf 'order 1\\norder 2\\n' | fencelog produce orders --partition 0 --epoch 1
  fencelog produce orders --partition 0 --epoch 1 --json < lines.txt
  printf '0:debit 10\\n1:credit 10\\n' | fencelog produce ledger --transaction transfer --epochs 0=3,1=5")]
pub struct ProduceArgs {
    /// Topic name.
    pub topic: String,
    /// Partition index.
    #[arg(long, default_value_t = 0)]
    pub partition: u32,
    /// The fencing epoch to write under (from `fencelog lease acquire`).
    #[arg(long, required_unless_present = "transaction")]
    pub epoch: Option<u64>,
    /// Append every line as one atomic transaction over several partitions under this
    /// transactional id: each line is `PARTITION:VALUE`, and the lines are published (to
    /// read_committed readers) all at once at the end of input, or none of them. See below.
    #[arg(long, value_name = "TRANSACTIONAL_ID", requires = "epochs")]
    pub transaction: Option<String>,
    /// With --transaction: the lease epoch of each partition the lines name, `P=E,P=E`
    /// (from `fencelog lease acquire` on each).
    #[arg(long, value_name = "P=E,...", value_parser = produce_transaction::parse_epochs, requires = "transaction")]
    pub epochs: Option<std::collections::BTreeMap<u32, u64>>,
    /// With --transaction: the server aborts the transaction if it is still open after this
    /// long, e.g. `1m`.
    #[arg(long, default_value = "1m", value_parser = common::parse_duration)]
    pub transaction_timeout: Duration,
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
    /// included, e.g. `2m`. The command exits at the first line given up: with lines pending,
    /// within this plus --linger (and about 0.1 s) of losing its server.
    #[arg(long, default_value = "2m", value_parser = common::parse_duration)]
    pub delivery_timeout: Duration,
    /// When a batch counts as appended: `all` (every in-sync replica has it) or `leader` (the
    /// partition's leader has it). Default: `all` on a replicated partition, else `leader`.
    /// A standalone server treats both alike.
    #[arg(long)]
    pub acks: Option<Acks>,
    /// How batches are compressed: none (the default), gzip, snappy, lz4 or zstd. A compressed
    /// batch is stored and served as it was sent; Kafka consumers read it too.
    #[arg(long, default_value = "none", conflicts_with = "transaction")]
    pub compression: crate::compression::Codec,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub client: ClientArgs,
}

#[derive(Serialize)]
pub(crate) struct OffsetJson<'a> {
    pub(crate) topic: &'a str,
    pub(crate) partition: u32,
    pub(crate) offset: u64,
}

/// Runs `fencelog produce`.
pub fn run(args: ProduceArgs) -> Result<(), CliError> {
    if args.transaction.is_some() {
        return common::block_on(produce_transaction::produce(args));
    }
    common::block_on(produce(args))
}

/// Reads stdin on a plain thread (stdin is blocking) and hands lines over, with backpressure.
pub(crate) fn read_lines(lines: mpsc::Sender<std::io::Result<Bytes>>) {
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
    let topic = args.topic.clone();
    let mut builder = Producer::builder(client, args.topic, args.partition);
    if let Some(acks) = args.acks {
        builder = builder.acks(acks);
    }
    let epoch = args
        .epoch
        .ok_or_else(|| CliError::invalid_argument("--epoch is required"))?;
    let producer = builder
        .epoch(epoch)
        .linger(args.linger)
        .batch_records(args.batch_records)
        .batch_bytes(args.batch_bytes)
        .max_in_flight(args.max_in_flight)
        .max_pending_records(max_pending)
        .delivery_timeout(args.delivery_timeout)
        .compression(args.compression)
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
                Some(Err(error)) => break Err(CliError::io(format!("read stdin after line {lines_read}: {error}")).detail("line", lines_read + 1).detail("outcome", "not_written")),
                None => input_open = false,
            },
            Some(acked) = pending.next(), if !pending.is_empty() => {
                let offset = match acked {
                    Ok(offset) => offset,
                    Err(failed) => break Err(line_failed(line_answered, failed.error)),
                };
                line_answered += 1;
                let json = OffsetJson { topic: &topic, partition: args.partition, offset };
                out.emit(&json, format_args!("offset {offset}"))?;
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

/// The error for line `line` (1-based), the first line not reported appended, classified by the
/// one outcome table ([`ClientError::outcome`]): not written (exit 3 when fenced, else 1; no
/// line after it was written either), written without a known offset, or unknown (both exit
/// 4, and never called "not appended").
pub(crate) fn line_failed(line: u64, error: ClientError) -> CliError {
    let outcome = error.outcome();
    let fenced = error.is_fenced();
    let mut failure = common::client_error(error).detail("line", line).detail(
        "outcome",
        match outcome {
            Outcome::NotWritten => "not_written",
            Outcome::Written => "written",
            Outcome::Unknown => "unknown",
        },
    );
    match outcome {
        // The fenced message is a contract scripts match on (`error: fenced: epoch A < current B`).
        Outcome::NotWritten if fenced => {}
        Outcome::NotWritten => {
            failure.message = format!(
                "line {line} was not appended: {}; lines before it were (their offsets are printed), no line after it was",
                failure.message
            );
        }
        Outcome::Written => {
            failure.status = EXIT_OUTCOME_UNKNOWN;
            failure.message = format!(
                "line {line} was appended, but its offset is no longer known: {}; lines before it were appended (their offsets are printed), the lines after it may or may not have been",
                failure.message
            );
        }
        Outcome::Unknown => {
            failure.status = EXIT_OUTCOME_UNKNOWN;
            failure.message = format!(
                "outcome unknown for line {line}: {}; lines before it were appended (their offsets are printed), it and the lines after it may or may not have been: read the partition before sending them again",
                failure.message
            );
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::{EXIT_ERROR, EXIT_FENCED};
    use crate::protocol::ErrorCode;

    fn server(code: ErrorCode) -> ClientError {
        ClientError::Server {
            code,
            message: "the server's message".into(),
        }
    }

    /// A line written on the leader but not on enough replicas (NOT_ENOUGH_REPLICAS_AFTER_APPEND)
    /// is reported with an unknown outcome (exit 4), never as "not appended"; so is a line whose
    /// answer never came, and a line behind one of those.
    #[test]
    fn a_line_that_may_be_in_the_log_is_never_reported_not_appended() {
        for error in [
            server(ErrorCode::NotEnoughReplicasAfterAppend),
            server(ErrorCode::UnknownProducer),
            ClientError::Timeout {
                after: Duration::from_secs(1),
            },
            ClientError::OutcomeUnknown {
                cause: Box::new(ClientError::Fenced {
                    epoch: 1,
                    current: 2,
                }),
            },
            ClientError::ProducerHalted {
                cause: Box::new(server(ErrorCode::NotEnoughReplicasAfterAppend)),
            },
        ] {
            let failure = line_failed(3, error.clone());
            assert_eq!(failure.status, EXIT_OUTCOME_UNKNOWN, "{error:?}");
            assert!(
                failure.message.starts_with("outcome unknown for line 3: ")
                    && !failure.message.contains("not appended"),
                "{}",
                failure.message
            );
        }
        let written = line_failed(3, server(ErrorCode::DuplicateSequence));
        assert_eq!(written.status, EXIT_OUTCOME_UNKNOWN);
        assert!(written.message.starts_with("line 3 was appended"));
    }

    /// What certainly was not written says so: fenced (exit 3, the message scripts match on)
    /// and other refusals (exit 1).
    #[test]
    fn a_line_that_is_not_in_the_log_is_reported_not_appended() {
        let fenced = line_failed(
            3,
            ClientError::Fenced {
                epoch: 1,
                current: 2,
            },
        );
        assert_eq!(fenced.status, EXIT_FENCED);
        assert_eq!(fenced.message, "fenced: epoch 1 < current 2");
        let refused = line_failed(3, server(ErrorCode::BatchTooLarge));
        assert_eq!(refused.status, EXIT_ERROR);
        assert!(refused.message.starts_with("line 3 was not appended: "));
    }
}
