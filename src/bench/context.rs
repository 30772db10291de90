//! What every part of a run shares: the server's address, the bench topic, the settings and the
//! live counters. The roles ([`super::failover`] and the runner) take it; it depends only on the
//! settings ([`super::config`]), the counters ([`super::progress`]) and the error type.

use std::sync::Arc;

use super::config::BenchConfig;
use super::error::BenchError;
use super::progress::Counters;
use crate::client::Client;

/// What every part of a run shares.
#[derive(Clone)]
pub struct RunContext {
    /// The server's address.
    pub addr: String,
    /// The bench topic.
    pub topic: Arc<str>,
    /// The run's settings.
    pub config: Arc<BenchConfig>,
    /// Live counters for the progress bar.
    pub counters: Arc<Counters>,
}

impl RunContext {
    /// A new connection to the server.
    pub async fn connect(&self) -> Result<Client, BenchError> {
        Client::connect(self.addr.as_str())
            .await
            .map_err(|source| BenchError::Client {
                context: format!("connect to {}", self.addr),
                source,
            })
    }
}
