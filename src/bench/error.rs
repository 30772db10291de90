//! Why a benchmark run fails: one error type for every part of the bench, in a module of its own
//! so that the parts take it from here rather than from the bench's root module (which declares
//! them, and would otherwise make every part and the root depend on each other).

use crate::broker::BrokerError;
use crate::client::ClientError;

use super::kafka_transport::KafkaError;

/// Why a benchmark run failed.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// The settings are out of bounds.
    #[error("{0}")]
    Config(String),
    /// A client call failed.
    #[error("{context}: {source}")]
    Client {
        /// What was being done.
        context: String,
        /// The client's error.
        source: ClientError,
    },
    /// A call on the Kafka listener failed (`--protocol kafka`).
    #[error("{context}: {source}")]
    Kafka {
        /// What was being done.
        context: String,
        /// The Kafka connection's error.
        source: KafkaError,
    },
    /// The in-process server did not start.
    #[error("start the in-process server: {0}")]
    Server(#[from] BrokerError),
    /// The in-process server's runtime (its own threads) could not be started.
    #[error("start the in-process server's runtime: {0}")]
    Runtime(std::io::Error),
    /// A check of the results failed.
    #[error("{0}")]
    Check(String),
    /// The loopback ping-pong's sockets failed (`--mode loopback`).
    #[error("loopback round trips: {what}: {source}")]
    Loopback {
        /// What was being done.
        what: &'static str,
        /// The socket's error.
        source: std::io::Error,
    },
    /// A load generator task panicked or was cancelled.
    #[error("load generator task failed: {0}")]
    Task(String),
}

impl BenchError {
    /// The error of a load generator task that panicked or was cancelled.
    pub(super) fn task(error: tokio::task::JoinError) -> BenchError {
        BenchError::Task(error.to_string())
    }
}
