//! Record compression: the codecs of Kafka's batch attributes (bits 0-2), decompressed with a
//! hard bound on the output and compressed as Kafka's clients compress.
//!
//! Why in the library's core and not in the Kafka listener: a compressed Kafka batch is stored
//! as its producer sent it (magic 2, `batch::stored_kafka`), so every reader of the log (the
//! partition's validation, the client library, the tools) decodes every codec, and the native
//! producer compresses too. The codecs come with the `compression` feature (on by default, and
//! with `kafka`); a build without it reads and writes uncompressed batches and refuses a
//! compressed one with [`CompressionError::NotBuilt`].
//!
//! Bounded: decompressors read to the end of the stream (and snappy allocates the length a block
//! *declares*), so a few kilobytes of hostile input could ask for gigabytes. Here every codec
//! stops after `limit + 1` bytes with [`CompressionError::TooLarge`]: memory stays within about
//! twice the limit whatever the input says.
//!
//! The crates: `zstd` and `lz4` (bindings to the reference C libraries, the fastest codecs and
//! the ones Kafka's own clients bind), `snap` (pure Rust, Kafka's xerial framing handled here)
//! and `flate2` (gzip); the same versions the Kafka codec crate uses, so nothing builds twice.

use std::fmt;
use std::str::FromStr;

use thiserror::Error;

/// A record batch's compression codec: the number in its attributes' bits 0-2, the same in a
/// Kafka record batch v2 and in a native batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Codec {
    /// Uncompressed (0).
    #[default]
    None,
    /// gzip (1).
    Gzip,
    /// snappy, xerial-framed or raw (2).
    Snappy,
    /// LZ4 frame (3).
    Lz4,
    /// zstd (4).
    Zstd,
}

/// The attribute bits that hold the codec.
pub const CODEC_MASK: u8 = 0x07;

impl Codec {
    /// Every codec, uncompressed first.
    pub const ALL: [Codec; 5] = [
        Codec::None,
        Codec::Gzip,
        Codec::Snappy,
        Codec::Lz4,
        Codec::Zstd,
    ];

    /// The codec numbered `codec` in a batch's attributes, or `None` for 5-7.
    pub fn from_attribute(codec: u8) -> Option<Self> {
        match codec {
            0 => Some(Self::None),
            1 => Some(Self::Gzip),
            2 => Some(Self::Snappy),
            3 => Some(Self::Lz4),
            4 => Some(Self::Zstd),
            _ => None,
        }
    }

    /// The codec's number in a batch's attributes.
    pub fn attribute(self) -> u8 {
        match self {
            Self::None => 0,
            Self::Gzip => 1,
            Self::Snappy => 2,
            Self::Lz4 => 3,
            Self::Zstd => 4,
        }
    }

    /// Kafka's name of the codec (`compression.type`), `none` for uncompressed.
    pub fn name(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Gzip => "gzip",
            Self::Snappy => "snappy",
            Self::Lz4 => "lz4",
            Self::Zstd => "zstd",
        }
    }

    /// Whether this build can decompress and compress it (always for [`Codec::None`]).
    pub fn is_built(self) -> bool {
        self == Self::None || cfg!(feature = "compression")
    }
}

impl fmt::Display for Codec {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(self.name())
    }
}

/// A codec name that is not one of Kafka's.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("unknown compression codec {0:?} (expected none, gzip, snappy, lz4 or zstd)")]
pub struct UnknownCodec(pub String);

impl FromStr for Codec {
    type Err = UnknownCodec;

    /// Kafka's names; `uncompressed` (the topic setting's word) is `none` too.
    fn from_str(name: &str) -> Result<Self, Self::Err> {
        match name.to_ascii_lowercase().as_str() {
            "none" | "uncompressed" => Ok(Self::None),
            "gzip" => Ok(Self::Gzip),
            "snappy" => Ok(Self::Snappy),
            "lz4" => Ok(Self::Lz4),
            "zstd" => Ok(Self::Zstd),
            _ => Err(UnknownCodec(name.to_owned())),
        }
    }
}

/// Why records could not be decompressed (or compressed).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum CompressionError {
    /// The codec refused the bytes: a corrupt or truncated body.
    #[error("{codec} decompression failed: {reason}")]
    Failed {
        /// The batch's codec.
        codec: Codec,
        /// The codec's complaint.
        reason: String,
    },
    /// Decompression would produce more than the limit: a decompression bomb, or records too
    /// large for one batch.
    #[error("decompressed records exceed the limit of {limit} bytes")]
    TooLarge {
        /// The limit.
        limit: usize,
    },
    /// This build has no codecs (the `compression` feature is off).
    #[error("{codec} batches need the `compression` feature, which this build lacks")]
    NotBuilt {
        /// The batch's codec.
        codec: Codec,
    },
}

/// The 16-byte stream header of xerial's `SnappyOutputStream`, which the Java client writes
/// before its snappy blocks (magic, version 1, compatible version 1).
#[cfg(feature = "compression")]
const XERIAL_SNAPPY_HEADER: &[u8; 16] = b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01";

/// Uncompressed bytes per xerial snappy block written: the Java client's block size.
#[cfg(feature = "compression")]
const SNAPPY_BLOCK_BYTES: usize = 32 * 1024;

/// The largest zstd window accepted, as a power of two: the decoder allocates the window the
/// frame declares, so it is bounded too. 2^24 = 16 MiB covers every level up to 19 (and every
/// frame whose content size is known and within the limit); Java clients at levels 20–22 with
/// unknown sizes declare larger windows and are refused with an error.
#[cfg(feature = "compression")]
const ZSTD_WINDOW_LOG_MAX: u32 = 24;

/// The zstd level written: Kafka's default (`compression.zstd.level` 3), zstd's own default.
#[cfg(feature = "compression")]
const ZSTD_LEVEL: i32 = 3;

/// The LZ4 level written: 0, LZ4's fast mode, as librdkafka and Kafka's Java producer before
/// 3.8 write it. Levels 3 and up are LZ4-HC, five to ten times slower to compress (level 4 ran at
/// 189 MB/s on the bench's JSON values, against over 600 MB/s at 0), for a few percent less.
#[cfg(feature = "compression")]
const LZ4_LEVEL: u32 = 0;

/// Decompresses `input` (a batch's records section, compressed with `codec`) and appends the
/// result to `out`, refusing it once `out` would grow by more than `limit` bytes. On error `out`
/// is left as it was.
pub fn decompress(
    codec: Codec,
    input: &[u8],
    limit: usize,
    out: &mut Vec<u8>,
) -> Result<(), CompressionError> {
    if codec == Codec::None {
        if input.len() > limit {
            return Err(CompressionError::TooLarge { limit });
        }
        out.extend_from_slice(input);
        return Ok(());
    }
    let start = out.len();
    let result = codecs::decompress(codec, input, limit, out);
    if result.is_err() {
        out.truncate(start);
    }
    result
}

/// Compresses `input` with `codec` (as Kafka's clients write it: gzip, xerial-framed snappy,
/// an LZ4 frame of independent blocks, a zstd frame at level 3) and appends the result to
/// `out`.
pub fn compress(codec: Codec, input: &[u8], out: &mut Vec<u8>) -> Result<(), CompressionError> {
    if codec == Codec::None {
        out.extend_from_slice(input);
        return Ok(());
    }
    codecs::compress(codec, input, out)
}

#[cfg(not(feature = "compression"))]
mod codecs {
    use super::{Codec, CompressionError};

    pub(super) fn decompress(
        codec: Codec,
        _: &[u8],
        _: usize,
        _: &mut Vec<u8>,
    ) -> Result<(), CompressionError> {
        Err(CompressionError::NotBuilt { codec })
    }

    pub(super) fn compress(
        codec: Codec,
        _: &[u8],
        _: &mut Vec<u8>,
    ) -> Result<(), CompressionError> {
        Err(CompressionError::NotBuilt { codec })
    }
}

#[cfg(feature = "compression")]
mod codecs {
    use std::cell::RefCell;
    use std::io::{Read, Write};

    use super::*;

    thread_local! {
        /// A zstd decompression context per thread: a new one per batch costs its tables.
        static ZSTD_DECODER: RefCell<Option<zstd::zstd_safe::DCtx<'static>>> =
            const { RefCell::new(None) };
        /// A zstd compression context per thread, at [`ZSTD_LEVEL`].
        static ZSTD_ENCODER: RefCell<Option<zstd::bulk::Compressor<'static>>> =
            const { RefCell::new(None) };
    }

    pub(super) fn decompress(
        codec: Codec,
        input: &[u8],
        limit: usize,
        out: &mut Vec<u8>,
    ) -> Result<(), CompressionError> {
        let failed = |error: std::io::Error| failure(codec, error.to_string());
        match codec {
            Codec::None => unreachable!("handled by the caller"),
            Codec::Gzip => {
                read_bounded(codec, flate2::read::MultiGzDecoder::new(input), limit, out)
            }
            Codec::Lz4 => {
                let decoder = lz4::Decoder::new(input).map_err(failed)?;
                read_bounded(codec, decoder, limit, out)
            }
            Codec::Zstd => ZSTD_DECODER.with(|cell| {
                let mut slot = cell.borrow_mut();
                if slot.is_none() {
                    let mut context = zstd::zstd_safe::DCtx::create();
                    context
                        .set_parameter(zstd::zstd_safe::DParameter::WindowLogMax(
                            ZSTD_WINDOW_LOG_MAX,
                        ))
                        .map_err(|code| failure(codec, zstd_error(code)))?;
                    *slot = Some(context);
                }
                let context = slot.as_mut().expect("just set");
                // A context left mid-frame by an earlier failure starts clean.
                context
                    .reset(zstd::zstd_safe::ResetDirective::SessionOnly)
                    .map_err(|code| failure(codec, zstd_error(code)))?;
                if let Some(size) = single_frame_size(input) {
                    return zstd_in_one_call(context, input, size, limit, out);
                }
                let decoder = zstd::stream::read::Decoder::with_context(input, context);
                read_bounded(codec, decoder, limit, out)
            }),
            Codec::Snappy => snappy(input, limit, out),
        }
    }

    pub(super) fn compress(
        codec: Codec,
        input: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<(), CompressionError> {
        let failed = |error: std::io::Error| failure(codec, error.to_string());
        match codec {
            Codec::None => unreachable!("handled by the caller"),
            Codec::Gzip => {
                let mut encoder = flate2::write::GzEncoder::new(
                    std::mem::take(out),
                    flate2::Compression::default(),
                );
                encoder.write_all(input).map_err(failed)?;
                *out = encoder.finish().map_err(failed)?;
                Ok(())
            }
            Codec::Lz4 => {
                let mut encoder = lz4::EncoderBuilder::new()
                    .level(LZ4_LEVEL)
                    .block_mode(lz4::BlockMode::Independent)
                    .build(std::mem::take(out))
                    .map_err(failed)?;
                encoder.write_all(input).map_err(failed)?;
                let (written, result) = encoder.finish();
                *out = written;
                result.map_err(failed)
            }
            Codec::Zstd => ZSTD_ENCODER.with(|cell| {
                let mut slot = cell.borrow_mut();
                if slot.is_none() {
                    *slot = Some(zstd::bulk::Compressor::new(ZSTD_LEVEL).map_err(failed)?);
                }
                let encoder = slot.as_mut().expect("just set");
                // Straight into `out`'s spare capacity, after what it holds (a batch's header):
                // no second buffer, no copy.
                let start = out.len();
                out.reserve(zstd::zstd_safe::compress_bound(input.len()));
                let mut cursor = std::io::Cursor::new(std::mem::take(out));
                cursor.set_position(start as u64);
                let compressed = encoder.compress_to_buffer(input, &mut cursor);
                *out = cursor.into_inner();
                compressed.map(|_| ()).map_err(failed)
            }),
            Codec::Snappy => {
                out.extend_from_slice(XERIAL_SNAPPY_HEADER);
                let mut encoder = snap::raw::Encoder::new();
                for block in input.chunks(SNAPPY_BLOCK_BYTES) {
                    let length_at = out.len();
                    out.extend_from_slice(&[0; 4]);
                    let start = out.len();
                    out.resize(start + snap::raw::max_compress_len(block.len()), 0);
                    let written = encoder
                        .compress(block, &mut out[start..])
                        .map_err(|error| failure(codec, error.to_string()))?;
                    out.truncate(start + written);
                    out[length_at..start].copy_from_slice(&(written as u32).to_be_bytes());
                }
                Ok(())
            }
        }
    }

    /// The content size `input` declares when it is exactly one zstd frame that declares one
    /// (what the native producer and librdkafka write; Java's streams do not declare it).
    fn single_frame_size(input: &[u8]) -> Option<u64> {
        let size = zstd::zstd_safe::get_frame_content_size(input).ok()??;
        (zstd::zstd_safe::find_frame_compressed_size(input).ok()? == input.len()).then_some(size)
    }

    /// Decompresses a single frame of declared content `size` in one call, straight into
    /// `out`'s spare capacity: no stream buffer, no zeroing, about a fifth faster than the
    /// stream. A size above `limit` is refused before anything is allocated; a frame whose
    /// content is not the size it declares is refused by zstd.
    fn zstd_in_one_call(
        context: &mut zstd::zstd_safe::DCtx<'static>,
        input: &[u8],
        size: u64,
        limit: usize,
        out: &mut Vec<u8>,
    ) -> Result<(), CompressionError> {
        let size = match usize::try_from(size) {
            Ok(size) if size <= limit => size,
            _ => return Err(CompressionError::TooLarge { limit }),
        };
        let start = out.len();
        out.reserve(size);
        let mut cursor = std::io::Cursor::new(std::mem::take(out));
        cursor.set_position(start as u64);
        let decompressed = context.decompress(&mut cursor, input);
        *out = cursor.into_inner();
        let written = decompressed.map_err(|code| failure(Codec::Zstd, zstd_error(code)))?;
        if written != size || out.len() != start + size {
            return Err(failure(
                Codec::Zstd,
                "the frame's content differs from the size it declares".to_owned(),
            ));
        }
        Ok(())
    }

    fn zstd_error(code: usize) -> String {
        zstd::zstd_safe::get_error_name(code).to_owned()
    }

    /// Reads `reader` to its end onto `out`, refusing it as soon as it yields more than `limit`
    /// bytes. `Read::take` stops the decoder itself, so a bomb is never expanded further.
    fn read_bounded(
        codec: Codec,
        reader: impl Read,
        limit: usize,
        out: &mut Vec<u8>,
    ) -> Result<(), CompressionError> {
        let start = out.len();
        let cap = u64::try_from(limit).unwrap_or(u64::MAX).saturating_add(1);
        reader
            .take(cap)
            .read_to_end(out)
            .map_err(|error| failure(codec, error.to_string()))?;
        if out.len() - start > limit {
            return Err(CompressionError::TooLarge { limit });
        }
        Ok(())
    }

    /// Kafka's snappy: xerial's framing (a header, then blocks each prefixed by a big-endian
    /// `u32` length), or one raw snappy block when the header is absent (what librdkafka may
    /// send). Each block's declared length is checked against the limit before anything is
    /// allocated for it.
    fn snappy(input: &[u8], limit: usize, out: &mut Vec<u8>) -> Result<(), CompressionError> {
        let start = out.len();
        let Some(mut rest) = input.strip_prefix(XERIAL_SNAPPY_HEADER.as_slice()) else {
            return snappy_block(input, start, limit, out);
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
            snappy_block(block, start, limit, out)?;
            rest = next;
        }
        Ok(())
    }

    /// Appends one raw snappy block to `out`, refusing it if `out` would grow past `limit`
    /// bytes after `start`.
    fn snappy_block(
        block: &[u8],
        start: usize,
        limit: usize,
        out: &mut Vec<u8>,
    ) -> Result<(), CompressionError> {
        let declared =
            snap::raw::decompress_len(block).map_err(|error| snappy_error(&error.to_string()))?;
        let at = out.len();
        if declared > limit.saturating_sub(at - start) {
            return Err(CompressionError::TooLarge { limit });
        }
        out.resize(at + declared, 0);
        let written = snap::raw::Decoder::new()
            .decompress(block, &mut out[at..])
            .map_err(|error| snappy_error(&error.to_string()))?;
        out.truncate(at + written);
        Ok(())
    }

    fn snappy_error(reason: &str) -> CompressionError {
        failure(Codec::Snappy, reason.to_owned())
    }

    fn failure(codec: Codec, reason: String) -> CompressionError {
        CompressionError::Failed { codec, reason }
    }
}

#[cfg(all(test, feature = "compression"))]
mod tests {
    use super::*;

    fn json_like(records: usize) -> Vec<u8> {
        (0..records)
            .flat_map(|index| {
                format!(
                    r#"{{"id":{index},"user":"user-{}","event":"click"}}"#,
                    index % 17
                )
                .into_bytes()
            })
            .collect()
    }

    /// Proves: every codec's output decompresses to its input (appended after what `out`
    /// held), shrinks a repetitive input, and names parse both ways.
    #[test]
    fn every_codec_round_trips() {
        let plain = json_like(2_000);
        for codec in Codec::ALL {
            let mut compressed = b"prefix".to_vec();
            compress(codec, &plain, &mut compressed).unwrap();
            assert_eq!(&compressed[..6], b"prefix");
            if codec != Codec::None {
                assert!(compressed.len() < plain.len() / 3, "{codec}");
            }
            let mut inflated = b"kept".to_vec();
            decompress(codec, &compressed[6..], plain.len(), &mut inflated).unwrap();
            assert_eq!(&inflated[..4], b"kept");
            assert_eq!(&inflated[4..], &plain[..], "{codec}");
            assert_eq!(codec.name().parse::<Codec>(), Ok(codec));
            assert_eq!(Codec::from_attribute(codec.attribute()), Some(codec));
        }
        assert_eq!("uncompressed".parse::<Codec>(), Ok(Codec::None));
        assert!("brotli".parse::<Codec>().is_err());
    }

    /// Proves: a flipped bit anywhere in a frame of any codec (a zstd frame's declared size
    /// included) gives an error or bytes within the limit, never a panic or more.
    #[test]
    fn damaged_frames_are_refused_or_bounded() {
        let plain = json_like(300);
        for codec in [Codec::Gzip, Codec::Snappy, Codec::Lz4, Codec::Zstd] {
            let mut compressed = Vec::new();
            compress(codec, &plain, &mut compressed).unwrap();
            for at in 0..compressed.len() {
                for mask in [0x01, 0x80] {
                    let mut damaged = compressed.clone();
                    damaged[at] ^= mask;
                    let mut out = Vec::new();
                    if decompress(codec, &damaged, plain.len(), &mut out).is_ok() {
                        assert!(out.len() <= plain.len(), "{codec} at {at}");
                    } else {
                        assert!(out.is_empty(), "{codec} at {at}");
                    }
                }
            }
        }
    }

    /// Proves: output one byte over the limit is refused with `out` as it was, for every
    /// codec, and exactly the limit is accepted.
    #[test]
    fn the_limit_is_exact() {
        let plain = json_like(500);
        for codec in Codec::ALL {
            let mut compressed = Vec::new();
            compress(codec, &plain, &mut compressed).unwrap();
            let mut out = b"kept".to_vec();
            assert_eq!(
                decompress(codec, &compressed, plain.len() - 1, &mut out),
                Err(CompressionError::TooLarge {
                    limit: plain.len() - 1
                }),
                "{codec}"
            );
            assert_eq!(out, b"kept", "{codec}");
            out.truncate(4);
            decompress(codec, &compressed, plain.len(), &mut out).unwrap();
        }
    }
}
