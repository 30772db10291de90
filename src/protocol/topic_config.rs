//! The native wire encoding of a topic's configuration (`crate::domain::TopicConfig`), which
//! travels in `CreateTopic` requests and `Metadata` responses.
//!
//! The domain type knows nothing of bytes; this file is the one place that says how the native
//! protocol writes it: `segment_bytes u64, flush_policy u8, flush_interval_ms u64,
//! retention_bytes u64, retention_ms u64`, with 0 meaning "unlimited" for the retention limits.

use bytes::{BufMut, BytesMut};

use super::wire::{Reader, WireError};
use crate::domain::{FlushPolicy, TopicConfig};

/// Wire size of an encoded [`TopicConfig`]: four `u64`s and one `u8`.
pub(in crate::protocol) const TOPIC_CONFIG_BYTES: usize = 8 + 1 + 8 + 8 + 8;

/// The `flush_policy` byte: 0 = never, 1 = interval, 2 = always.
fn flush_policy_tag(policy: FlushPolicy) -> u8 {
    match policy {
        FlushPolicy::Never => 0,
        FlushPolicy::Interval { .. } => 1,
        FlushPolicy::Always => 2,
    }
}

/// The `flush_interval_ms` field: the interval, or 0 for policies without one.
fn flush_interval_ms(policy: FlushPolicy) -> u64 {
    match policy {
        FlushPolicy::Interval { interval_ms } => interval_ms,
        FlushPolicy::Never | FlushPolicy::Always => 0,
    }
}

/// Writes `config` ([`TOPIC_CONFIG_BYTES`] bytes). `Some(0)` retention is written as 0, which
/// reads back as `None`.
pub(in crate::protocol) fn put_topic_config(dst: &mut BytesMut, config: &TopicConfig) {
    dst.put_u64(config.segment_bytes);
    dst.put_u8(flush_policy_tag(config.flush));
    dst.put_u64(flush_interval_ms(config.flush));
    dst.put_u64(config.retention_bytes.unwrap_or(0));
    dst.put_u64(config.retention_ms.unwrap_or(0));
}

/// Reads a topic configuration; an unknown `flush_policy` byte is [`WireError::Invalid`].
pub(in crate::protocol) fn read_topic_config(r: &mut Reader) -> Result<TopicConfig, WireError> {
    let segment_bytes = r.u64("segment_bytes")?;
    let tag = r.u8("flush_policy")?;
    // Read the interval unconditionally: it is always on the wire, and is
    // ignored for policies that have no interval.
    let interval_ms = r.u64("flush_interval_ms")?;
    let flush = match tag {
        0 => FlushPolicy::Never,
        1 => FlushPolicy::Interval { interval_ms },
        2 => FlushPolicy::Always,
        other => {
            return Err(WireError::Invalid(format!(
                "unknown flush_policy {other} (expected 0 = never, 1 = interval, 2 = always)"
            )))
        }
    };
    let nonzero = |v: u64| (v != 0).then_some(v);
    let retention_bytes = nonzero(r.u64("retention_bytes")?);
    let retention_ms = nonzero(r.u64("retention_ms")?);
    Ok(TopicConfig {
        segment_bytes,
        flush,
        retention_bytes,
        retention_ms,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topic_config_default_and_wire_size() {
        let config = TopicConfig::default();
        let mut buf = BytesMut::new();
        put_topic_config(&mut buf, &config);
        assert_eq!(buf.len(), TOPIC_CONFIG_BYTES);
        let mut r = Reader::new(buf.freeze());
        assert_eq!(read_topic_config(&mut r).ok(), Some(config));
    }

    #[test]
    fn unknown_flush_policy_is_rejected() {
        let mut buf = BytesMut::new();
        put_topic_config(&mut buf, &TopicConfig::default());
        buf[8] = 3;
        let err = read_topic_config(&mut Reader::new(buf.freeze())).unwrap_err();
        assert!(matches!(err, WireError::Invalid(_)), "{err:?}");
    }

    #[test]
    fn every_policy_round_trips_and_zero_retention_reads_as_unlimited() {
        for flush in [
            FlushPolicy::Never,
            FlushPolicy::Always,
            FlushPolicy::Interval { interval_ms: 250 },
        ] {
            let config = TopicConfig {
                segment_bytes: 4096,
                flush,
                retention_bytes: Some(0),
                retention_ms: Some(7),
            };
            let mut buf = BytesMut::new();
            put_topic_config(&mut buf, &config);
            let decoded = read_topic_config(&mut Reader::new(buf.freeze())).unwrap();
            let expected = TopicConfig {
                retention_bytes: None,
                ..config
            };
            assert_eq!(decoded, expected);
        }
    }
}
