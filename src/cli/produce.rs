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
use crate::client::{Producer, ProducerConfig};

/// Arguments of `fencelog produce`.
#[derive(Debug, Args)]
#[command(after_long_help = "\
Each line of stdin becomes one record (its value is the line without the trailing \\n, or \\r\\n);
lines are bytes, not necessarily UTF-8. Lines are gathered into batches (up to --batch-records
lines or --batch-bytes bytes, or whatever arrived within --linger) and each batch is one produce
request, sent while the next batch is being read.

Output: one line per record, in input order, once its batch is acknowledged:
  plain:   offset N
  --json:  {\"offset\":N}

Exit status: 0 when every line was appended; 3 when the server rejected the epoch as fenced (a
newer lease exists; stderr names both epochs, e.g. `error: fenced: epoch 1 < current 2`); 1 for
any other error. Lines before the failure that were acknowledged are printed; none after it
are appended.")]
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
    #[arg(long, default_value_t = 4)]
    pub max_in_flight: usize,
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
    let config = ProducerConfig {
        linger: args.linger,
        batch_records: args.batch_records,
        batch_bytes: args.batch_bytes,
        max_in_flight: args.max_in_flight,
        max_pending_records: max_pending,
    };
    let producer = Producer::with_epoch(client, args.topic, args.partition, args.epoch, config)?;
    let key = args.key.map(Bytes::from);

    let (lines_tx, mut lines) = mpsc::channel(1024);
    std::thread::spawn(move || read_lines(lines_tx));

    let mut out = Output::new(args.client.json);
    let mut pending = FuturesOrdered::new();
    let mut input_open = true;
    loop {
        tokio::select! {
            line = lines.recv(), if input_open && pending.len() < max_pending => match line {
                Some(Ok(value)) => pending.push_back(producer.send(key.clone(), value)),
                Some(Err(error)) => {
                    out.flush()?;
                    return Err(CliError::new(format!("read stdin: {error}")).into());
                }
                None => input_open = false,
            },
            Some(acked) = pending.next(), if !pending.is_empty() => {
                let offset = match acked {
                    Ok(offset) => offset,
                    Err(error) => {
                        out.flush()?;
                        return Err(error.into());
                    }
                };
                out.emit(&OffsetJson { offset }, format_args!("offset {offset}"))?;
                if pending.is_empty() {
                    out.flush()?;
                }
            },
            else => break,
        }
    }
    out.flush()
}
