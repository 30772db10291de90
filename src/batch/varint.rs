//! Kafka's variable-length integers: zigzag-encoded base-128 varints, at most 5 bytes for an
//! `i32` and 10 for an `i64` (as `ByteUtils.readVarint` / `readVarlong` in Kafka's Java
//! client). Reading is bounds-checked and refuses over-long encodings; writing goes straight into
//! the output buffer. The [`Reader`] also reads the native format's big-endian fields.

use bytes::BufMut;

/// Bytes an `i32` takes as a zigzag varint.
pub(crate) fn varint_len(value: i32) -> usize {
    unsigned_len(u64::from(zigzag32(value)))
}

/// Bytes an `i64` takes as a zigzag varlong.
pub(crate) fn varlong_len(value: i64) -> usize {
    unsigned_len(zigzag64(value))
}

fn unsigned_len(value: u64) -> usize {
    // 7 payload bits per byte; 0 still takes one byte.
    let bits = 64 - (value | 1).leading_zeros() as usize;
    bits.div_ceil(7)
}

fn zigzag32(value: i32) -> u32 {
    ((value << 1) ^ (value >> 31)) as u32
}

fn zigzag64(value: i64) -> u64 {
    ((value << 1) ^ (value >> 63)) as u64
}

/// Writes an `i32` as a zigzag varint.
#[inline]
pub(crate) fn put_varint(out: &mut impl BufMut, value: i32) {
    put_unsigned_varint(out, u64::from(zigzag32(value)));
}

/// Writes an `i64` as a zigzag varlong.
#[inline]
pub(crate) fn put_varlong(out: &mut impl BufMut, value: i64) {
    put_unsigned_varint(out, zigzag64(value));
}

/// Writes Kafka's unsigned varint (7 bits per byte, low first; no zigzag): the lengths of
/// compact strings, arrays and bytes, and tagged-field counts, in flexible message versions.
#[inline]
pub(crate) fn put_unsigned_varint(out: &mut impl BufMut, mut value: u64) {
    if value < 0x80 {
        out.put_u8(value as u8);
        return;
    }
    let mut scratch = [0u8; 10];
    let mut len = 0;
    while value >= 0x80 {
        scratch[len] = (value as u8) | 0x80;
        value >>= 7;
        len += 1;
    }
    scratch[len] = value as u8;
    out.put_slice(&scratch[..=len]);
}

/// A bounds-checked reader over borrowed bytes. Every read fails with a static reason instead
/// of panicking, so hostile input can only produce an error.
#[derive(Debug, Clone)]
pub(crate) struct Reader<'a> {
    bytes: &'a [u8],
    position: usize,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        Self { bytes, position: 0 }
    }

    pub(crate) fn position(&self) -> usize {
        self.position
    }

    pub(crate) fn remaining(&self) -> usize {
        self.bytes.len() - self.position
    }

    /// The next `len` bytes.
    pub(crate) fn take(&mut self, len: usize) -> Result<&'a [u8], &'static str> {
        if len > self.remaining() {
            return Err("a field runs past the end of its record");
        }
        let slice = &self.bytes[self.position..self.position + len];
        self.position += len;
        Ok(slice)
    }

    pub(crate) fn u8(&mut self) -> Result<u8, &'static str> {
        Ok(self.take(1)?[0])
    }

    /// A big-endian `u16`.
    pub(crate) fn be_u16(&mut self) -> Result<u16, &'static str> {
        Ok(u16::from_be_bytes(self.array()?))
    }

    /// A big-endian `u32`.
    pub(crate) fn be_u32(&mut self) -> Result<u32, &'static str> {
        Ok(u32::from_be_bytes(self.array()?))
    }

    /// A big-endian `i32`.
    pub(crate) fn be_i32(&mut self) -> Result<i32, &'static str> {
        Ok(i32::from_be_bytes(self.array()?))
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], &'static str> {
        Ok(self.take(N)?.try_into().expect("N bytes"))
    }

    fn unsigned(&mut self, max_bytes: usize) -> Result<u64, &'static str> {
        let mut value = 0u64;
        for index in 0..max_bytes {
            let byte = self.u8()?;
            value |= u64::from(byte & 0x7f) << (7 * index);
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err("a varint is longer than its type allows")
    }

    /// A zigzag varint (`i32`, at most 5 bytes).
    pub(crate) fn varint(&mut self) -> Result<i32, &'static str> {
        let raw = self.unsigned(5)? as u32;
        Ok(((raw >> 1) as i32) ^ -((raw & 1) as i32))
    }

    /// A zigzag varlong (`i64`, at most 10 bytes).
    pub(crate) fn varlong(&mut self) -> Result<i64, &'static str> {
        let raw = self.unsigned(10)?;
        Ok(((raw >> 1) as i64) ^ -((raw & 1) as i64))
    }

    /// A varint length then that many bytes; `-1` is null, other negatives an error.
    pub(crate) fn nullable_bytes(&mut self) -> Result<Option<&'a [u8]>, &'static str> {
        match self.varint()? {
            -1 => Ok(None),
            length if length < -1 => Err("a length is negative"),
            length => Ok(Some(self.take(length as usize)?)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Every `i32` and `i64` reads back as written, in exactly the predicted length.
        #[test]
        fn varints_round_trip(small in any::<i32>(), large in any::<i64>()) {
            let mut out = Vec::new();
            put_varint(&mut out, small);
            prop_assert_eq!(out.len(), varint_len(small));
            put_varlong(&mut out, large);
            prop_assert_eq!(out.len(), varint_len(small) + varlong_len(large));
            let mut reader = Reader::new(&out);
            prop_assert_eq!(reader.varint().unwrap(), small);
            prop_assert_eq!(reader.varlong().unwrap(), large);
            prop_assert_eq!(reader.remaining(), 0);
        }
    }

    /// Known encodings from Kafka's `ByteUtilsTest`, and over-long or cut varints are errors.
    #[test]
    fn known_encodings_and_malformed_varints() {
        let mut out = Vec::new();
        put_varint(&mut out, -1);
        put_varint(&mut out, 300);
        assert_eq!(out, [0x01, 0xd8, 0x04]);
        assert!(Reader::new(&[0xff; 6]).varint().is_err());
        assert!(Reader::new(&[0xff; 11]).varlong().is_err());
        assert!(Reader::new(&[0x80]).varint().is_err());
    }
}
