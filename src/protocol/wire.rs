//! The byte-level primitives every message is built from: a bounds-checked reader, the
//! field-level decoding error, and the writers of length-prefixed strings and lengths.
//!
//! Every decoding rule of the protocol rests on this file: no accessor of [`Reader`] can panic or
//! read past the frame, slices are zero-copy views of it, and [`Reader::capped`] keeps a lying
//! count from turning into a large allocation. The per-API files only say which fields come in
//! which order.

use std::fmt;

use bytes::{Buf, BufMut, Bytes, BytesMut};

use super::{ProtocolError, RequestDecodeErrorKind};

/// A field-level decoding failure, converted by the callers into the error
/// type of their side (request or response).
#[derive(Debug)]
pub(in crate::protocol) enum WireError {
    /// The frame ended before the field was complete.
    Truncated {
        /// The field being read.
        field: &'static str,
        /// Bytes the field needed.
        needed: usize,
        /// Bytes left in the frame.
        remaining: usize,
    },
    /// A string field was not valid UTF-8.
    InvalidUtf8 {
        /// The field being read.
        field: &'static str,
    },
    /// A field held a value outside its domain.
    Invalid(String),
    /// The message was complete but bytes were left over.
    Trailing {
        /// How many bytes were left over.
        count: usize,
    },
}

impl WireError {
    /// The request-side classification of this failure.
    pub(in crate::protocol) fn kind(&self) -> RequestDecodeErrorKind {
        match self {
            WireError::Truncated { .. } => RequestDecodeErrorKind::Truncated,
            WireError::InvalidUtf8 { .. } => RequestDecodeErrorKind::InvalidUtf8,
            WireError::Invalid(m) => RequestDecodeErrorKind::Invalid(m.clone()),
            WireError::Trailing { .. } => RequestDecodeErrorKind::TrailingBytes,
        }
    }
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WireError::Truncated {
                field,
                needed,
                remaining,
            } => write!(
                f,
                "field `{field}` needs {needed} bytes but only {remaining} remain"
            ),
            WireError::InvalidUtf8 { field } => write!(f, "field `{field}` is not valid UTF-8"),
            WireError::Invalid(message) => f.write_str(message),
            WireError::Trailing { count } => {
                write!(f, "{count} unexpected bytes after the end of the message")
            }
        }
    }
}

/// Bounds-checked big-endian reader over a frame body. Every accessor checks
/// the remaining length first, so no input can make it panic; slices are
/// zero-copy views of the frame.
pub(in crate::protocol) struct Reader {
    buf: Bytes,
}

impl Reader {
    /// A reader over `buf`, starting at its first byte.
    pub(in crate::protocol) fn new(buf: Bytes) -> Reader {
        Reader { buf }
    }

    fn need(&self, field: &'static str, needed: usize) -> Result<(), WireError> {
        if self.buf.len() < needed {
            return Err(WireError::Truncated {
                field,
                needed,
                remaining: self.buf.len(),
            });
        }
        Ok(())
    }

    /// The next `N` bytes.
    pub(in crate::protocol) fn array<const N: usize>(
        &mut self,
        field: &'static str,
    ) -> Result<[u8; N], WireError> {
        self.need(field, N)?;
        let mut out = [0u8; N];
        self.buf.copy_to_slice(&mut out);
        Ok(out)
    }

    /// A `u8`.
    pub(in crate::protocol) fn u8(&mut self, field: &'static str) -> Result<u8, WireError> {
        Ok(u8::from_be_bytes(self.array(field)?))
    }

    /// A big-endian `u16`.
    pub(in crate::protocol) fn u16(&mut self, field: &'static str) -> Result<u16, WireError> {
        Ok(u16::from_be_bytes(self.array(field)?))
    }

    /// A big-endian `u32`.
    pub(in crate::protocol) fn u32(&mut self, field: &'static str) -> Result<u32, WireError> {
        Ok(u32::from_be_bytes(self.array(field)?))
    }

    /// A big-endian `u64`.
    pub(in crate::protocol) fn u64(&mut self, field: &'static str) -> Result<u64, WireError> {
        Ok(u64::from_be_bytes(self.array(field)?))
    }

    /// A big-endian `u128`.
    pub(in crate::protocol) fn u128(&mut self, field: &'static str) -> Result<u128, WireError> {
        Ok(u128::from_be_bytes(self.array(field)?))
    }

    /// A `u32` length or count, as `usize`.
    pub(in crate::protocol) fn len32(&mut self, field: &'static str) -> Result<usize, WireError> {
        let value = self.u32(field)?;
        usize::try_from(value)
            .map_err(|_| WireError::Invalid(format!("field `{field}` ({value}) is too large")))
    }

    fn slice(&mut self, field: &'static str, len: usize) -> Result<Bytes, WireError> {
        self.need(field, len)?;
        Ok(self.buf.split_to(len))
    }

    /// A `string16`: `u16` length, then that many bytes of UTF-8.
    pub(in crate::protocol) fn string16(
        &mut self,
        field: &'static str,
    ) -> Result<String, WireError> {
        let len = usize::from(self.u16(field)?);
        let raw = self.slice(field, len)?;
        std::str::from_utf8(&raw)
            .map(str::to_owned)
            .map_err(|_| WireError::InvalidUtf8 { field })
    }

    /// A `bytes32`: `u32` length, then that many bytes, as a zero-copy slice of the frame.
    pub(in crate::protocol) fn bytes32(&mut self, field: &'static str) -> Result<Bytes, WireError> {
        let len = self.len32(field)?;
        self.slice(field, len)
    }

    /// Capacity to pre-allocate for `count` entries of at least `min_entry`
    /// bytes each: never more than the remaining bytes could hold, so a lying
    /// count cannot trigger a large allocation.
    pub(in crate::protocol) fn capped(&self, count: usize, min_entry: usize) -> usize {
        count.min(self.buf.len() / min_entry.max(1))
    }

    /// A big-endian two's-complement `i64`.
    pub(in crate::protocol) fn i64(&mut self, field: &'static str) -> Result<i64, WireError> {
        self.u64(field).map(|value| value as i64)
    }

    /// Whether every byte has been read.
    pub(in crate::protocol) fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// Ends the message: fails if any bytes are left over.
    pub(in crate::protocol) fn finish(self) -> Result<(), WireError> {
        match self.buf.len() {
            0 => Ok(()),
            count => Err(WireError::Trailing { count }),
        }
    }
}

/// Encoded size of `s` as a `string16`.
pub(in crate::protocol) fn str16_len(s: &str) -> usize {
    2 + s.len()
}

/// Writes `s` as a `string16`; fails, writing nothing, if it is longer than 65535 bytes.
pub(in crate::protocol) fn put_str16(
    dst: &mut BytesMut,
    field: &str,
    s: &str,
) -> Result<(), ProtocolError> {
    let len = u16::try_from(s.len()).map_err(|_| {
        ProtocolError::Unencodable(format!(
            "{field} is {} bytes long; a string16 holds at most 65535",
            s.len()
        ))
    })?;
    dst.put_u16(len);
    dst.put_slice(s.as_bytes());
    Ok(())
}

/// Writes a `u32` length or count; fails, writing nothing, if `len` does not fit.
pub(in crate::protocol) fn put_len32(
    dst: &mut BytesMut,
    field: &str,
    len: usize,
) -> Result<(), ProtocolError> {
    let len = u32::try_from(len).map_err(|_| {
        ProtocolError::Unencodable(format!(
            "{field} has length {len}; a u32 length holds at most {}",
            u32::MAX
        ))
    })?;
    dst.put_u32(len);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reader_checks_lengths_before_slicing() {
        // string16 claiming 0xffff bytes with only 3 present.
        let mut r = Reader::new(Bytes::from_static(&[0xff, 0xff, b'a', b'b', b'c']));
        assert!(matches!(
            r.string16("topic"),
            Err(WireError::Truncated {
                needed: 0xffff,
                remaining: 3,
                ..
            })
        ));
        let mut r = Reader::new(Bytes::from_static(&[0, 2, 0xc3, 0x28]));
        assert!(matches!(
            r.string16("topic"),
            Err(WireError::InvalidUtf8 { .. })
        ));
        let mut r = Reader::new(Bytes::from_static(&[0xff, 0xff, 0xff, 0xff, 1]));
        assert!(matches!(
            r.bytes32("batch"),
            Err(WireError::Truncated { .. })
        ));
        assert_eq!(r.capped(usize::MAX, 0), 1);
    }
}
