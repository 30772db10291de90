//! One record of a batch as borrowed bytes ([`RawRecord`]), and the cursor that walks a native
//! batch's records field by field.
//!
//! Why apart: validation and decoding share this one walk (a batch's records are parsed once,
//! checked and decoded together), and the stored Kafka batches hand their records on in the same
//! borrowed form.

use bytes::Bytes;

use super::Record;

/// A header's `value_length` that stands for a null value (no value at all, which Kafka headers
/// may have), apart from an empty one. No real value is that long: a batch is far smaller.
pub const NULL_HEADER_VALUE: u32 = u32::MAX;

/// Borrowed view of one record while walking a batch.
pub(super) struct RawRecord<'a> {
    /// Milliseconds from the batch's `first_timestamp`: never negative in a native batch, and
    /// negative in a stored Kafka batch whose records are out of order.
    pub(super) timestamp_delta: i64,
    pub(super) key: Option<&'a [u8]>,
    pub(super) value: Option<&'a [u8]>,
    pub(super) headers: Vec<(&'a [u8], Option<&'a [u8]>)>,
}

impl RawRecord<'_> {
    /// The record at `offset` of a batch written under `epoch` whose timestamps count from
    /// `first_timestamp`; its key, value and header values are slices of `batch` (which holds
    /// the bytes this view borrows), not copies.
    pub(super) fn into_record(
        self,
        batch: &Bytes,
        offset: u64,
        epoch: u64,
        first_timestamp: i64,
    ) -> Record {
        let to_bytes = |slice: &[u8]| batch.slice_ref(slice);
        Record {
            offset,
            epoch,
            timestamp: first_timestamp.saturating_add(self.timestamp_delta),
            key: self.key.map(to_bytes),
            value: self.value.map(to_bytes),
            headers: self
                .headers
                .into_iter()
                .map(|(name, value)| {
                    (
                        String::from_utf8_lossy(name).into_owned(),
                        value.map(to_bytes),
                    )
                })
                .collect(),
        }
    }
}

/// A walk over the records of a magic-1 or magic-3 batch, from `position` in `bytes`.
pub(super) struct Cursor<'a> {
    pub(super) bytes: &'a [u8],
    pub(super) position: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, len: usize, end: usize) -> Result<&'a [u8], &'static str> {
        let stop = self.position.checked_add(len).ok_or("length overflow")?;
        if stop > end {
            return Err("field runs past the end of the record");
        }
        let slice = &self.bytes[self.position..stop];
        self.position = stop;
        Ok(slice)
    }

    fn optional(&mut self, end: usize) -> Result<Option<&'a [u8]>, &'static str> {
        let length = i32::from_be_bytes(self.take(4, end)?.try_into().expect("4 bytes"));
        match length {
            -1 => Ok(None),
            n if n < -1 => Err("negative length"),
            n => Ok(Some(self.take(n as usize, end)?)),
        }
    }

    pub(super) fn record(&mut self) -> Result<RawRecord<'a>, &'static str> {
        let length =
            u32::from_be_bytes(self.take(4, self.bytes.len())?.try_into().expect("4 bytes"));
        let end = self
            .position
            .checked_add(length as usize)
            .filter(|end| *end <= self.bytes.len())
            .ok_or("record length runs past the end of the batch")?;
        let timestamp_delta = u32::from_be_bytes(self.take(4, end)?.try_into().expect("4 bytes"));
        let key = self.optional(end)?;
        let value = self.optional(end)?;
        let header_count = u16::from_be_bytes(self.take(2, end)?.try_into().expect("2 bytes"));
        let mut headers = Vec::new();
        for _ in 0..header_count {
            let name_length =
                u16::from_be_bytes(self.take(2, end)?.try_into().expect("2 bytes")) as usize;
            let name = self.take(name_length, end)?;
            std::str::from_utf8(name).map_err(|_| "header name is not UTF-8")?;
            let value_length = u32::from_be_bytes(self.take(4, end)?.try_into().expect("4 bytes"));
            let header_value = match value_length {
                NULL_HEADER_VALUE => None,
                length => Some(self.take(length as usize, end)?),
            };
            headers.push((name, header_value));
        }
        if self.position != end {
            return Err("record length does not match its fields");
        }
        Ok(RawRecord {
            timestamp_delta: i64::from(timestamp_delta),
            key,
            value,
            headers,
        })
    }
}
