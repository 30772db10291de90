//! `fencelog serve`: run the server until SIGINT or SIGTERM, then drain and sync.

use std::path::PathBuf;
use std::sync::Arc;

use clap::Args;

use super::CliError;
use crate::broker::{Broker, BrokerConfig, BrokerService};
use crate::server::{self, ServerConfig, DEFAULT_LISTEN};

/// Default data directory, relative to where the server starts.
pub const DEFAULT_DATA_DIR: &str = "fencelog-data";

/// Arguments of `fencelog serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Directory holding topics, segments and epoch checkpoints.
    #[arg(long, env = "FENCELOG_DATA_DIR", default_value = DEFAULT_DATA_DIR)]
    pub data_dir: PathBuf,
    /// Address to listen on (loopback by default; clients default to the same address).
    #[arg(long, env = "FENCELOG_LISTEN", default_value = DEFAULT_LISTEN)]
    pub listen: String,
    /// Most open connections.
    #[arg(long, default_value_t = server::DEFAULT_MAX_CONNECTIONS)]
    pub max_connections: usize,
    /// Most pipelined requests in flight per connection.
    #[arg(long, default_value_t = server::DEFAULT_MAX_IN_FLIGHT)]
    pub max_in_flight: usize,
    /// Largest frame accepted, in bytes.
    #[arg(long, default_value_t = crate::protocol::DEFAULT_MAX_FRAME_BYTES)]
    pub max_frame_bytes: usize,
    /// Log filter (overrides RUST_LOG), e.g. `info` or `fencelog=debug`.
    #[arg(long)]
    pub log: Option<String>,
}

/// Runs the server.
pub fn run(args: ServeArgs) -> Result<(), CliError> {
    if let Some(filter) = &args.log {
        std::env::set_var("RUST_LOG", filter);
    }
    super::init_tracing("info");
    let runtime = tokio::runtime::Runtime::new()
        .map_err(|error| CliError::new(format!("start runtime: {error}")))?;
    runtime.block_on(async move {
        let directory = args.data_dir.clone();
        let broker = tokio::task::spawn_blocking(move || Broker::open(&directory))
            .await
            .map_err(|error| CliError::new(error.to_string()))?
            .map_err(|error| CliError::new(format!("open {}: {error}", args.data_dir.display())))?;
        let listener = tokio::net::TcpListener::bind(&args.listen)
            .await
            .map_err(|error| CliError::new(format!("listen on {}: {error}", args.listen)))?;
        let config = ServerConfig {
            max_connections: args.max_connections,
            max_in_flight: args.max_in_flight.max(1),
            max_frame_bytes: args.max_frame_bytes,
            ..ServerConfig::default()
        };
        let service = Arc::new(BrokerService::standalone(
            Arc::new(broker),
            BrokerConfig::default().lease,
        ));
        server::run(listener, service, config, shutdown_signal())
            .await
            .map_err(|error| CliError::new(format!("server: {error}")))
    })
}

/// Completes on SIGINT (Ctrl-C) or SIGTERM.
async fn shutdown_signal() {
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("install SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = terminate.recv() => {}
    }
    tracing::info!("shutdown signal received");
}
