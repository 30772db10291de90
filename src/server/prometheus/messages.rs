//! `GET /api/messages`: the console's message browser (issue 35). One partition's records from
//! an offset (or the first at or after a timestamp), each with its offset, timestamp, the epoch
//! it was written under, its producer id and sequence (idempotent and transactional producers),
//! key, value and headers shown as text, hex or JSON.
//!
//! `?topic=T&partition=P` (required), then `offset=N` or `timestamp=MS` (default: the log
//! start), `limit=N` (at most [`MAX_MESSAGES_PAGE`], [`DEFAULT_MESSAGES_PAGE`] unless asked) and
//! `format=text|hex|json` (default text). The answer: `{"topic", "partition", "log_start_offset",
//! "high_watermark", "next_offset", "messages": [...]}`; page on with `offset=next_offset`.
//! Transaction markers are not messages and are left out. Bad parameters are `400` with what to
//! send instead; an unknown topic or partition `404`.

use bytes::Bytes;
use serde_json::{json, Value};

use crate::batch::{self, BatchHeader, ProducerStamp};
use crate::broker::BrokerService;

/// The path of the message browser.
pub const MESSAGES_PATH: &str = "/api/messages";
/// Messages of a page when `limit` is not given.
pub const DEFAULT_MESSAGES_PAGE: usize = 50;
/// Most messages of a page; a larger `limit` is refused with 400.
pub const MAX_MESSAGES_PAGE: usize = 500;
/// Bytes read from the log for one page (a page ends early rather than read more).
const PAGE_READ_BYTES: usize = 4 * 1024 * 1024;

/// How keys, values and header values are shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// UTF-8 text (invalid bytes replaced).
    Text,
    /// Lowercase hex.
    Hex,
    /// Parsed JSON where the bytes are JSON, else text.
    Json,
}

/// Where a page starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// The log start.
    Beginning,
    /// This offset.
    Offset(u64),
    /// The first record at or after this timestamp (ms since the Unix epoch).
    Timestamp(i64),
}

/// What a request for messages asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessagesQuery {
    /// The topic.
    pub topic: String,
    /// The partition.
    pub partition: u32,
    /// Where to start.
    pub start: Start,
    /// Most messages.
    pub limit: usize,
    /// How to show bytes.
    pub format: Format,
}

/// Reads a messages query; an error says what to send instead.
pub fn parse_query(query: Option<&str>) -> Result<MessagesQuery, String> {
    let mut topic = None;
    let mut partition = None;
    let mut start = Start::Beginning;
    let mut limit = DEFAULT_MESSAGES_PAGE;
    let mut format = Format::Text;
    for pair in query
        .unwrap_or("")
        .split('&')
        .filter(|pair| !pair.is_empty())
    {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        let number = |what: &str| {
            value
                .parse::<u64>()
                .map_err(|_| format!("{name}={value:?} is not {what}; send e.g. {name}=0"))
        };
        match name {
            "topic" => topic = Some(value.to_string()),
            "partition" => {
                partition = Some(
                    u32::try_from(number("a partition index")?)
                        .map_err(|_| format!("partition={value} is too large"))?,
                )
            }
            "offset" => start = Start::Offset(number("an offset")?),
            "timestamp" => {
                start = Start::Timestamp(
                    i64::try_from(number("milliseconds since 1970")?)
                        .map_err(|_| format!("timestamp={value} is too large"))?,
                )
            }
            "limit" => {
                let asked = number("a count")?;
                if asked == 0 || asked > MAX_MESSAGES_PAGE as u64 {
                    return Err(format!(
                        "limit={asked} is out of range; send 1..={MAX_MESSAGES_PAGE} and page on with offset=next_offset"
                    ));
                }
                limit = asked as usize;
            }
            "format" => {
                format = match value {
                    "text" => Format::Text,
                    "hex" => Format::Hex,
                    "json" => Format::Json,
                    other => {
                        return Err(format!(
                            "format={other:?} is not known; send text, hex or json"
                        ))
                    }
                }
            }
            _ => {
                return Err(format!(
                    "unknown parameter {name:?}; use topic, partition, offset or timestamp, limit, format"
                ))
            }
        }
    }
    let (Some(topic), Some(partition)) = (topic, partition) else {
        return Err("send topic=NAME&partition=N (and offset=N or timestamp=MS)".to_string());
    };
    Ok(MessagesQuery {
        topic,
        partition,
        start,
        limit,
        format,
    })
}

/// Why a page could not be read.
#[derive(Debug)]
pub enum MessagesError {
    /// No such topic or partition (404).
    NotFound(String),
    /// The start is outside the log, or the read failed (400 with the reason).
    Refused(String),
}

/// The page `query` asks for.
pub fn render_messages(
    service: &BrokerService,
    query: &MessagesQuery,
) -> Result<Value, MessagesError> {
    let partition = service
        .broker()
        .partition(&query.topic, query.partition)
        .map_err(|error| MessagesError::NotFound(error.to_string()))?;
    let log_start = partition.log_start_offset();
    let high_watermark = partition.high_watermark();
    let first = match query.start {
        Start::Beginning => log_start,
        Start::Offset(offset) => offset,
        Start::Timestamp(timestamp) => partition
            .offset_for_timestamp(timestamp)
            .map_err(|error| MessagesError::Refused(error.to_string()))?
            .unwrap_or(high_watermark),
    };
    if first < log_start || first > high_watermark {
        return Err(MessagesError::Refused(format!(
            "offset {first} is outside the log: {log_start}..={high_watermark}"
        )));
    }
    let read = partition
        .read(first, PAGE_READ_BYTES)
        .map_err(|error| MessagesError::Refused(error.to_string()))?;
    let mut messages = Vec::new();
    let mut next_offset = first;
    'batches: for stored in &read.batches {
        let Some(header) = BatchHeader::parse(stored) else {
            break;
        };
        if header.is_control() {
            next_offset = next_offset.max(header.next_offset());
            continue;
        }
        let stamp = ProducerStamp::parse(stored);
        let records = batch::decode_batch(stored).map_err(|error| {
            MessagesError::Refused(format!("a stored batch did not decode: {error}"))
        })?;
        for record in records {
            if record.offset < first || record.offset >= read.high_watermark {
                continue;
            }
            if messages.len() == query.limit {
                break 'batches;
            }
            let sequence = stamp.map(|stamp| {
                batch::add_sequence(
                    stamp.base_sequence,
                    (record.offset - header.base_offset) as u32,
                )
            });
            messages.push(json!({
                "offset": record.offset,
                "timestamp": record.timestamp,
                "epoch": record.epoch,
                "producer_id": stamp.map(|stamp| stamp.producer_id),
                "sequence": sequence,
                "transactional": header.is_transactional(),
                "key": show(record.key.as_ref(), query.format),
                "value": show(record.value.as_ref(), query.format),
                "headers": record.headers.iter().map(|(name, value)| json!({
                    "name": name,
                    "value": show(value.as_ref(), query.format),
                })).collect::<Vec<Value>>(),
            }));
            next_offset = record.offset + 1;
        }
    }
    Ok(json!({
        "topic": query.topic,
        "partition": query.partition,
        "log_start_offset": read.log_start_offset,
        "high_watermark": read.high_watermark,
        "next_offset": next_offset,
        "messages": messages,
    }))
}

/// Bytes as `format` shows them; `null` for none.
fn show(bytes: Option<&Bytes>, format: Format) -> Value {
    let Some(bytes) = bytes else {
        return Value::Null;
    };
    match format {
        Format::Text => Value::String(String::from_utf8_lossy(bytes).into_owned()),
        Format::Hex => Value::String(bytes.iter().map(|byte| format!("{byte:02x}")).collect()),
        Format::Json => serde_json::from_slice(bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(bytes).into_owned())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_are_read_and_bad_ones_refused_with_what_to_send() {
        let query = parse_query(Some("topic=t&partition=2&offset=5&limit=3&format=hex")).unwrap();
        assert_eq!(
            query,
            MessagesQuery {
                topic: "t".into(),
                partition: 2,
                start: Start::Offset(5),
                limit: 3,
                format: Format::Hex,
            }
        );
        assert_eq!(
            parse_query(Some("topic=t&partition=0&timestamp=1700000000000"))
                .unwrap()
                .start,
            Start::Timestamp(1_700_000_000_000)
        );
        assert!(parse_query(Some("topic=t"))
            .unwrap_err()
            .contains("partition=N"));
        assert!(parse_query(Some("topic=t&partition=0&limit=501"))
            .unwrap_err()
            .contains("1..=500"));
        assert!(parse_query(Some("topic=t&partition=0&format=xml"))
            .unwrap_err()
            .contains("text, hex or json"));
        assert!(parse_query(Some("topic=t&partition=0&color=red"))
            .unwrap_err()
            .contains("unknown"));
    }

    #[test]
    fn bytes_are_shown_as_asked() {
        let bytes = Bytes::from_static(br#"{"a":1}"#);
        assert_eq!(show(Some(&bytes), Format::Text), json!(r#"{"a":1}"#));
        assert_eq!(show(Some(&bytes), Format::Json), json!({"a": 1}));
        assert_eq!(
            show(Some(&Bytes::from_static(b"\x01\xff")), Format::Hex),
            json!("01ff")
        );
        assert_eq!(show(None, Format::Text), Value::Null);
    }
}
