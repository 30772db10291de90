//! [`SendError`]: what a failed send resolves to, the error together with the record.
//!
//! A send's record goes back to its caller on failure so that nothing is lost silently: the
//! caller may send it again (after [`Producer::resume`](super::Producer::resume), say) or keep it.

use bytes::Bytes;

use crate::client::{ClientError, Outcome};

/// A send that failed, with its record given back so the caller can decide what to do with it.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{error}")]
pub struct SendError {
    /// Why the record was not acknowledged.
    #[source]
    pub error: ClientError,
    /// The record, boxed so that a `Result` of a send stays small.
    record: Box<(Option<Bytes>, Bytes)>,
}

impl SendError {
    pub(super) fn new(error: ClientError, key: Option<Bytes>, value: Bytes) -> Self {
        Self {
            error,
            record: Box::new((key, value)),
        }
    }

    /// Whether the record is in the log: [`Outcome::NotWritten`] (send it again if it should
    /// be), [`Outcome::Written`] (it is, once; its offset is no longer known) or
    /// [`Outcome::Unknown`] (read the partition to find out before sending it again).
    pub fn outcome(&self) -> Outcome {
        self.error.outcome()
    }

    /// The record's key.
    pub fn key(&self) -> Option<&Bytes> {
        self.record.0.as_ref()
    }

    /// The record's value.
    pub fn value(&self) -> &Bytes {
        &self.record.1
    }

    /// The record, `(key, value)`, to send again or keep.
    pub fn into_record(self) -> (Option<Bytes>, Bytes) {
        *self.record
    }

    /// The error alone.
    pub fn into_error(self) -> ClientError {
        self.error
    }
}

impl From<SendError> for ClientError {
    fn from(error: SendError) -> Self {
        error.error
    }
}
