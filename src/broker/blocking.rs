//! Blocking broker work (file creation, fsyncs, deletions) run on tokio's blocking pool, its
//! panic reported as an I/O error of the request rather than taking the worker down.

use super::BrokerError;

/// Runs blocking broker work on tokio's blocking pool.
pub(crate) async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, BrokerError> + Send + 'static,
) -> Result<T, BrokerError> {
    tokio::task::spawn_blocking(work)
        .await
        .unwrap_or_else(|join_error| {
            Err(BrokerError::Io {
                context: "broker task failed".into(),
                source: std::io::Error::other(join_error.to_string()),
            })
        })
}
