//! Why a frame was refused ([`FrameRefusal`], answered with the frame's correlation id) and
//! why reading stopped ([`ReadError`]).
//!
//! Why apart: a connection turns each into its protocol's error answer or a log line; these
//! are the reader's whole vocabulary towards it.

use thiserror::Error;

use super::super::memory_budget::BudgetError;
use super::FrameHeader;
use crate::protocol::wrong_port::Foreign;

/// Why a frame was refused; the connection closes after it.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum FrameRefusal {
    /// The declared length is over `max_frame_bytes`.
    #[error("frame of {declared} bytes exceeds the maximum of {max}; raise max_frame_bytes on both ends or send smaller requests")]
    TooLarge {
        /// The declared length.
        declared: usize,
        /// The limit.
        max: usize,
    },
    /// A length of 0: no frame holds nothing.
    #[error("received a frame of length 0; every frame holds at least a header")]
    Empty,
    /// A frame over the limit for connections that have not authenticated.
    #[error("a frame of {declared} bytes before authentication: until a connection authenticates, its frames may be at most {max} bytes (serve --max-unauthenticated-frame-bytes); authenticate first (FENCELOG_USER and FENCELOG_PASSWORD, or --user and --password-file)")]
    Unauthenticated {
        /// The declared length.
        declared: usize,
        /// The limit.
        max: usize,
    },
    /// The frame did not arrive whole within `partial_frame_timeout`.
    #[error("the request frame was not complete {timeout_ms} ms after its first byte ({received} bytes received) (serve --partial-frame-timeout-ms); send each frame without pausing in the middle")]
    Incomplete {
        /// Bytes of the frame received (its length prefix included).
        received: usize,
        /// The limit.
        timeout_ms: u64,
    },
    /// No memory for the frame's bytes.
    #[error(transparent)]
    Budget(#[from] BudgetError),
}

/// Why reading stopped (other than a clean end of the stream between frames).
#[derive(Debug, Error)]
pub enum ReadError {
    /// The stream failed (a reset, TLS without close_notify, ...).
    #[error("reading from the connection failed: {0}")]
    Io(#[from] std::io::Error),
    /// The stream ended in the middle of a frame.
    #[error("the client closed the connection in the middle of a frame ({received} bytes of it received)")]
    ClosedMidFrame {
        /// Bytes of the unfinished frame received.
        received: usize,
    },
    /// The client speaks another protocol.
    #[error("the client speaks {}, not this listener's protocol", .0.name())]
    Foreign(Foreign),
    /// A frame was refused: answer it (with its header's correlation id) and close.
    #[error("{refusal}")]
    Refused {
        /// The refused frame's header, when it arrived.
        header: Option<FrameHeader>,
        /// Why.
        refusal: FrameRefusal,
    },
}

impl ReadError {
    /// Whether this is an ordinary departure of a client (it closed or was killed), not worth
    /// more than a debug line.
    pub fn is_departure(&self) -> bool {
        match self {
            ReadError::Io(error) => matches!(
                error.kind(),
                std::io::ErrorKind::UnexpectedEof
                    | std::io::ErrorKind::ConnectionReset
                    | std::io::ErrorKind::ConnectionAborted
                    | std::io::ErrorKind::BrokenPipe
            ),
            ReadError::ClosedMidFrame { .. } => true,
            ReadError::Foreign(_) | ReadError::Refused { .. } => false,
        }
    }
}
