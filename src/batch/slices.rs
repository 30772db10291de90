//! A batch's bytes in one slice or two: how a Kafka batch reaches the log without a copy.
//!
//! Why: a Kafka batch kept as it arrived (magic 2, see `stored_kafka`) is its producer's bytes
//! behind a 64-byte native header. Joining the two in one buffer before the append cost a copy
//! of every produced byte (about a tenth of the Kafka produce path's CPU); the segment writer
//! writes several slices with one `pwritev` anyway. So the header (the *envelope*) and the
//! Kafka batch may travel apart, the Kafka batch as a slice of the request that carried it,
//! and are checked and written as the one batch they make. Any other batch is one slice.

use bytes::Bytes;

use super::stored_kafka::{kafka_batch, KAFKA_ENVELOPE_BYTES};

/// A batch's bytes, borrowed: the whole batch, or a magic-2 batch's envelope and Kafka batch.
/// What validation, the producer state and the segment writer read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchSlices<'a> {
    /// The whole batch, or a magic-2 batch's envelope (its native header).
    head: &'a [u8],
    /// A magic-2 batch's Kafka batch; empty for every other batch.
    kafka: &'a [u8],
}

impl<'a> BatchSlices<'a> {
    /// One contiguous batch (a magic-2 one is seen as its envelope and Kafka batch, as if it
    /// had arrived in two parts).
    pub fn new(bytes: &'a [u8]) -> Self {
        match kafka_batch(bytes) {
            Some(kafka) => Self {
                head: &bytes[..KAFKA_ENVELOPE_BYTES],
                kafka,
            },
            None => Self {
                head: bytes,
                kafka: &[],
            },
        }
    }

    /// A magic-2 batch in two parts: its `envelope` (the native header) and the `kafka` batch
    /// behind it. Validation refuses the pair unless the envelope is a whole magic-2 header.
    pub fn kept_kafka(envelope: &'a [u8], kafka: &'a [u8]) -> Self {
        Self {
            head: envelope,
            kafka,
        }
    }

    /// The batch's size: the bytes it takes in the log.
    pub fn len(&self) -> usize {
        self.head.len() + self.kafka.len()
    }

    /// Whether there are no bytes at all.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The slice the native header starts: the whole batch, or a magic-2 batch's envelope.
    pub fn head(&self) -> &'a [u8] {
        self.head
    }

    /// The Kafka batch behind a magic-2 envelope (empty for other batches).
    pub fn kafka(&self) -> &'a [u8] {
        self.kafka
    }

    /// The batch in one buffer (a copy: for tests and rare paths).
    pub fn to_vec(&self) -> Vec<u8> {
        [self.head, self.kafka].concat()
    }
}

/// A batch's bytes, owned: what a produce request carries to the partition. See
/// [`BatchSlices`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BatchParts {
    head: Bytes,
    kafka: Bytes,
}

impl BatchParts {
    /// A magic-2 batch as its envelope and the Kafka batch it fronts (typically a slice of the
    /// request that carried it).
    pub fn kept_kafka(envelope: Bytes, kafka: Bytes) -> Self {
        Self {
            head: envelope,
            kafka,
        }
    }

    /// The bytes, borrowed.
    pub fn slices(&self) -> BatchSlices<'_> {
        if self.kafka.is_empty() {
            BatchSlices::new(&self.head)
        } else {
            BatchSlices::kept_kafka(&self.head, &self.kafka)
        }
    }

    /// The batch's size.
    pub fn len(&self) -> usize {
        self.head.len() + self.kafka.len()
    }

    /// Whether there are no bytes at all.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The batch in one buffer (no copy when it is one part already).
    pub fn to_bytes(&self) -> Bytes {
        if self.kafka.is_empty() {
            self.head.clone()
        } else {
            Bytes::from(self.slices().to_vec())
        }
    }
}

impl From<Bytes> for BatchParts {
    fn from(whole: Bytes) -> Self {
        Self {
            head: whole,
            kafka: Bytes::new(),
        }
    }
}
