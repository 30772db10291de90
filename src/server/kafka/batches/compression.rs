//! Decompression of a Kafka batch's records with a hard bound on the output.
//!
//! kafka-protocol's decompressors read to the end of the stream (and its snappy path allocates
//! the length a block *declares*), so a few kilobytes of hostile input could ask for gigabytes.
//! Here every codec stops after `limit + 1` bytes and the caller gets
//! [`RecordsError::DecompressedTooLarge`]: memory stays within about twice the limit whatever
//! the input says.

use std::io::Read;

use super::records::{KafkaCompression, RecordsError};

/// The 16-byte stream header of xerial's `SnappyOutputStream`, which the Java client writes
/// before its snappy blocks (magic, version 1, compatible version 1).
const XERIAL_SNAPPY_HEADER: &[u8; 16] = b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01";

/// The largest zstd window accepted, as a power of two: the decoder allocates the window the
/// frame declares, so it is bounded too. 2^24 = 16 MiB covers every level up to 19 (and every
/// frame whose content size is known and within the limit); Java clients at levels 20–22 with
/// unknown sizes declare larger windows and are refused with an error.
const ZSTD_WINDOW_LOG_MAX: u32 = 24;

/// Decompresses `input` (a batch's records section) into `out` (cleared first), producing at
/// most `limit` bytes.
pub(crate) fn decompress(
    codec: KafkaCompression,
    input: &[u8],
    limit: usize,
    out: &mut Vec<u8>,
) -> Result<(), RecordsError> {
    out.clear();
    let failed = |error: std::io::Error| decompression_error(codec, error);
    match codec {
        KafkaCompression::None => {
            if input.len() > limit {
                return Err(RecordsError::DecompressedTooLarge { limit });
            }
            out.extend_from_slice(input);
            Ok(())
        }
        KafkaCompression::Gzip => {
            read_bounded(codec, flate2::read::MultiGzDecoder::new(input), limit, out)
        }
        KafkaCompression::Lz4 => {
            let decoder = lz4::Decoder::new(input).map_err(failed)?;
            read_bounded(codec, decoder, limit, out)
        }
        KafkaCompression::Zstd => {
            let mut decoder = zstd::stream::read::Decoder::with_buffer(input).map_err(failed)?;
            decoder
                .window_log_max(ZSTD_WINDOW_LOG_MAX)
                .map_err(failed)?;
            read_bounded(codec, decoder, limit, out)
        }
        KafkaCompression::Snappy => snappy(input, limit, out),
    }
}

fn decompression_error(codec: KafkaCompression, error: std::io::Error) -> RecordsError {
    RecordsError::Decompression {
        codec,
        reason: error.to_string(),
    }
}

/// Reads `reader` to its end into `out`, refusing it as soon as it yields more than `limit`
/// bytes. `Read::take` stops the decoder itself, so a bomb is never expanded further.
fn read_bounded(
    codec: KafkaCompression,
    reader: impl Read,
    limit: usize,
    out: &mut Vec<u8>,
) -> Result<(), RecordsError> {
    let cap = u64::try_from(limit).unwrap_or(u64::MAX).saturating_add(1);
    reader
        .take(cap)
        .read_to_end(out)
        .map_err(|error| decompression_error(codec, error))?;
    if out.len() > limit {
        return Err(RecordsError::DecompressedTooLarge { limit });
    }
    Ok(())
}

/// Kafka's snappy: xerial's framing (a header, then blocks each prefixed by a big-endian `u32`
/// length), or one raw snappy block when the header is absent (what librdkafka may send). Each
/// block's declared length is checked against the limit before anything is allocated for it.
fn snappy(input: &[u8], limit: usize, out: &mut Vec<u8>) -> Result<(), RecordsError> {
    let Some(mut rest) = input.strip_prefix(XERIAL_SNAPPY_HEADER.as_slice()) else {
        return snappy_block(input, limit, out);
    };
    while !rest.is_empty() {
        let (length, tail) = rest
            .split_first_chunk::<4>()
            .ok_or_else(|| snappy_error("a block length is cut short"))?;
        let length = u32::from_be_bytes(*length) as usize;
        if length > tail.len() {
            return Err(snappy_error("a block runs past the end of the batch"));
        }
        let (block, next) = tail.split_at(length);
        snappy_block(block, limit, out)?;
        rest = next;
    }
    Ok(())
}

/// Appends one raw snappy block to `out`, refusing it if `out` would exceed `limit`.
fn snappy_block(block: &[u8], limit: usize, out: &mut Vec<u8>) -> Result<(), RecordsError> {
    let declared =
        snap::raw::decompress_len(block).map_err(|error| snappy_error_owned(error.to_string()))?;
    let start = out.len();
    if declared > limit.saturating_sub(start) {
        return Err(RecordsError::DecompressedTooLarge { limit });
    }
    out.resize(start + declared, 0);
    let written = snap::raw::Decoder::new()
        .decompress(block, &mut out[start..])
        .map_err(|error| snappy_error_owned(error.to_string()))?;
    out.truncate(start + written);
    Ok(())
}

fn snappy_error(reason: &str) -> RecordsError {
    snappy_error_owned(reason.to_owned())
}

fn snappy_error_owned(reason: String) -> RecordsError {
    RecordsError::Decompression {
        codec: KafkaCompression::Snappy,
        reason,
    }
}
