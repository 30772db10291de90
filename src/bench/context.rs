//! What every part of a run shares: the server's addresses, the bench topic, the settings and
//! the live counters. The roles ([`super::failover`] and the runner) take it; it depends only on
//! the settings ([`super::config`]), the counters ([`super::progress`]), the Kafka connection
//! ([`super::kafka_transport`]) and the error type.

use std::sync::Arc;

use super::config::BenchConfig;
use super::error::BenchError;
use super::kafka_transport::KafkaConnection;
use super::progress::Counters;
use crate::client::Client;

/// What every part of a run shares.
#[derive(Clone)]
pub struct RunContext {
    /// The server's address.
    pub addr: String,
    /// Its Kafka listener's address (`--protocol kafka`).
    pub kafka_addr: Option<String>,
    /// The bench topic.
    pub topic: Arc<str>,
    /// The run's settings.
    pub config: Arc<BenchConfig>,
    /// Live counters for the progress bar.
    pub counters: Arc<Counters>,
    /// Where the server runs, for its CPU accounting.
    pub server_process: super::cpu::ServerProcess,
}

impl RunContext {
    /// A new connection to the server.
    pub async fn connect(&self) -> Result<Client, BenchError> {
        // `--addr A,B,C`: a cluster's brokers; requests go to each partition's leader.
        let builder = Client::builder().addrs(
            self.addr
                .split(',')
                .map(str::trim)
                .filter(|addr| !addr.is_empty())
                .map(str::to_owned),
        );
        let connected = match &self.config.tls {
            None => builder.connect().await,
            Some(tls) => builder.tls(tls.clone()).connect().await,
        };
        connected.map_err(|source| BenchError::Client {
            context: format!("connect to {}", self.addr),
            source,
        })
    }

    /// A new connection to the server's Kafka listener.
    pub async fn connect_kafka(&self) -> Result<KafkaConnection, BenchError> {
        let addr = self.kafka_addr.as_deref().ok_or_else(|| {
            BenchError::Config("--protocol kafka without a Kafka listener address".into())
        })?;
        KafkaConnection::connect(addr)
            .await
            .map_err(|source| BenchError::Kafka {
                context: format!("connect to the Kafka listener at {addr}"),
                source,
            })
    }
}
