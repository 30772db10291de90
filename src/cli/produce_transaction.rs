//! `fencelog produce --transaction`: stdin lines `PARTITION:VALUE` appended to several partitions
//! as one native atomic append, published at the end of input all at once or not at all.

use std::collections::{BTreeMap, HashMap};

use bytes::Bytes;
use tokio::sync::mpsc;

use super::common::{self, Failure, Output};
use super::produce::{read_lines, OffsetJson, ProduceArgs};
use super::{CliError, EXIT_FENCED, EXIT_OUTCOME_UNKNOWN};
use crate::client::{ClientError, Outcome, TransactionalProducer};

/// The most lines one transaction takes: their offsets are kept until the commit to be printed
/// in input order. Past it, the transaction is aborted (exit 1).
pub const MAX_TRANSACTION_LINES: u64 = 1_000_000;

/// Parses `--epochs`: `P=E` pairs separated by commas.
pub fn parse_epochs(text: &str) -> Result<BTreeMap<u32, u64>, String> {
    let mut epochs = BTreeMap::new();
    for pair in text
        .split(',')
        .map(str::trim)
        .filter(|pair| !pair.is_empty())
    {
        let (partition, epoch) = pair
            .split_once('=')
            .ok_or_else(|| format!("{pair:?} is not PARTITION=EPOCH"))?;
        let partition: u32 = partition
            .trim()
            .parse()
            .map_err(|_| format!("{partition:?} is not a partition index"))?;
        let epoch: u64 = epoch
            .trim()
            .parse()
            .map_err(|_| format!("{epoch:?} is not an epoch"))?;
        if epochs.insert(partition, epoch).is_some() {
            return Err(format!("partition {partition} is given twice"));
        }
    }
    if epochs.is_empty() {
        return Err("no PARTITION=EPOCH given".into());
    }
    Ok(epochs)
}

/// A line's partition and value (`PARTITION:VALUE`).
fn split_line(line: &Bytes) -> Option<(u32, Bytes)> {
    let colon = line.iter().position(|byte| *byte == b':')?;
    let partition = std::str::from_utf8(&line[..colon]).ok()?.parse().ok()?;
    Some((partition, line.slice(colon + 1..)))
}

/// Runs `fencelog produce --transaction`.
pub async fn produce(args: ProduceArgs) -> Result<(), Failure> {
    let (Some(transactional_id), Some(epochs)) = (args.transaction.clone(), args.epochs.clone())
    else {
        return Err(CliError::invalid_argument("--transaction needs --epochs").into());
    };
    let client = common::connect(&args.client).await?;
    let mut producer = client
        .init_transaction(&transactional_id, args.transaction_timeout)
        .await?;
    let (lines_tx, mut lines) = mpsc::channel(1024);
    std::thread::spawn(move || read_lines(lines_tx));
    let written = append_lines(&args, &epochs, &mut producer, &mut lines).await;
    let offsets = match written {
        Ok(offsets) => offsets,
        Err(failure) => {
            // Nothing of the transaction may be published: abort it (the server aborts it at
            // its timeout anyway if this does not get through).
            let _ = producer.abort().await;
            return Err(aborted(failure).into());
        }
    };
    if let Err(error) = producer.commit().await {
        return Err(commit_failed(error).into());
    }
    let mut out = Output::new(args.client.json);
    for (partition, offset) in offsets {
        let json = OffsetJson {
            topic: &args.topic,
            partition,
            offset,
        };
        out.emit(&json, format_args!("partition {partition} offset {offset}"))?;
    }
    out.flush()
}

/// Reads every line and appends it (batched per partition) to the open transaction; each
/// line's partition and offset, in input order.
async fn append_lines(
    args: &ProduceArgs,
    epochs: &BTreeMap<u32, u64>,
    producer: &mut TransactionalProducer,
    lines: &mut mpsc::Receiver<std::io::Result<Bytes>>,
) -> Result<Vec<(u32, u64)>, CliError> {
    let key = args.key.clone().map(Bytes::from);
    let batch_records = args.batch_records.max(1);
    // Per partition: the input positions and values of its lines not sent yet.
    let mut pending: HashMap<u32, Vec<(usize, Bytes)>> = HashMap::new();
    let mut placed: Vec<(u32, u64)> = Vec::new();
    let mut line_number = 0u64;
    while let Some(line) = lines.recv().await {
        line_number += 1;
        let line = line
            .map_err(|error| CliError::io(format!("read stdin at line {line_number}: {error}")))?;
        if line_number > MAX_TRANSACTION_LINES {
            return Err(CliError::invalid_argument(format!(
                "more than {MAX_TRANSACTION_LINES} lines in one transaction (MAX_TRANSACTION_LINES)"
            )));
        }
        let (partition, value) = split_line(&line).ok_or_else(|| {
            CliError::invalid_argument(format!("line {line_number} is not PARTITION:VALUE"))
        })?;
        if !epochs.contains_key(&partition) {
            return Err(CliError::invalid_argument(format!(
                "line {line_number} names partition {partition}, which --epochs does not give"
            )));
        }
        placed.push((partition, u64::MAX));
        let queue = pending.entry(partition).or_default();
        queue.push((placed.len() - 1, value));
        if queue.len() >= batch_records {
            let lines = std::mem::take(queue);
            send(args, epochs, producer, &key, partition, lines, &mut placed).await?;
        }
    }
    let mut partitions: Vec<u32> = pending.keys().copied().collect();
    partitions.sort_unstable();
    for partition in partitions {
        let lines = pending.remove(&partition).unwrap_or_default();
        if !lines.is_empty() {
            send(args, epochs, producer, &key, partition, lines, &mut placed).await?;
        }
    }
    Ok(placed)
}

/// Sends one partition's lines as one transactional batch and records their offsets.
async fn send(
    args: &ProduceArgs,
    epochs: &BTreeMap<u32, u64>,
    producer: &mut TransactionalProducer,
    key: &Option<Bytes>,
    partition: u32,
    lines: Vec<(usize, Bytes)>,
    placed: &mut [(u32, u64)],
) -> Result<(), CliError> {
    let records: Vec<(Option<Bytes>, Bytes)> = lines
        .iter()
        .map(|(_, value)| (key.clone(), value.clone()))
        .collect();
    let ack = producer
        .send(&args.topic, partition, epochs[&partition], &records)
        .await
        .map_err(common::client_error)?;
    for (offset, (position, _)) in (ack.base_offset..).zip(&lines) {
        placed[*position] = (partition, offset);
    }
    Ok(())
}

/// A failure before the commit: the transaction is aborted, no line is published. A fenced
/// refusal keeps its message (`fenced: epoch A < current B`, a contract) and exit 3.
fn aborted(failure: CliError) -> CliError {
    let mut failure = failure.detail("outcome", "not_written");
    if failure.status != EXIT_FENCED {
        failure.message = format!(
            "{}; the transaction was aborted: no line is published",
            failure.message
        );
    }
    failure
}

/// The commit's refusal or lost answer, classified by the outcome table: not written (the
/// transaction was aborted; exit 3 when fenced, else 1) or unknown (exit 4).
fn commit_failed(error: ClientError) -> CliError {
    let outcome = error.outcome();
    let fenced = error.is_fenced();
    let mut failure = common::client_error(error);
    match outcome {
        Outcome::NotWritten => {
            failure = failure.detail("outcome", "not_written");
            if !fenced {
                failure.message = format!(
                    "the transaction was not committed: {}; no line is published",
                    failure.message
                );
            }
        }
        Outcome::Written | Outcome::Unknown => {
            failure = failure.detail("outcome", "unknown");
            failure.status = EXIT_OUTCOME_UNKNOWN;
            failure.message = format!(
                "outcome unknown for the transaction: {}; read the partitions before sending the lines again",
                failure.message
            );
        }
    }
    failure
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn epochs_and_lines_parse() {
        assert_eq!(
            parse_epochs("0=3, 1=5").unwrap(),
            BTreeMap::from([(0, 3), (1, 5)])
        );
        assert!(parse_epochs("0=3,0=4").is_err());
        assert!(parse_epochs("0").is_err());
        assert!(parse_epochs("").is_err());
        assert_eq!(
            split_line(&Bytes::from_static(b"12:a:b")),
            Some((12, Bytes::from_static(b"a:b")))
        );
        assert_eq!(split_line(&Bytes::from_static(b"x:a")), None);
        assert_eq!(split_line(&Bytes::from_static(b"no colon")), None);
    }
}
