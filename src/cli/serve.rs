//! `fencelog serve`: run the server until SIGINT or SIGTERM, then drain and sync.

use std::path::PathBuf;
use std::sync::Arc;

use clap::Args;

use super::address::{check_host_port, AddressKind};
use super::CliError;
use crate::broker::BrokerError;
use crate::server::kafka::{KafkaConfig, KafkaConfigError};
use crate::server::{
    self, ClusterMembership, KafkaListener, Listeners, Node, NodeConfig, ServerConfig,
    DEFAULT_LISTEN,
};

/// Default data directory, relative to where the server starts.
pub const DEFAULT_DATA_DIR: &str = "fencelog-data";

/// Arguments of `fencelog serve`.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  fencelog serve                                  # data in ./fencelog-data, on 127.0.0.1:7171
  fencelog serve --data-dir /var/lib/fencelog --listen 0.0.0.0:7171 --advertise HOST:7171
  fencelog serve --kafka-listen 127.0.0.1:9092 --metrics-listen 127.0.0.1:9464
  fencelog serve --auth --super-user admin --data-dir /var/lib/fencelog
  fencelog serve --node-id 1 --etcd http://127.0.0.1:2379 --listen 127.0.0.1:7001 --data-dir node1")]
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
    /// Memory for request frames beyond each connection's own share, all connections
    /// together, in bytes; paid as bytes arrive: a frame waits for its share (up to 10 s) and
    /// is then refused with RESOURCE_EXHAUSTED.
    #[arg(long, default_value_t = server::memory_budget::DEFAULT_MAX_BUFFER_BYTES)]
    pub max_buffer_bytes: usize,
    /// Memory each connection reads request frames into before it draws on
    /// --max-buffer-bytes, in bytes: requests this small never wait for memory others hold.
    #[arg(long, default_value_t = server::memory_budget::DEFAULT_CONNECTION_BUFFER_BYTES)]
    pub connection_buffer_bytes: usize,
    /// With --auth: largest frame a connection may send before it authenticates, in bytes
    /// (like Kafka's sasl.server.max.receive.size); a larger one is refused and the connection
    /// closed.
    #[arg(long, default_value_t = server::frame_reader::DEFAULT_MAX_UNAUTHENTICATED_FRAME_BYTES)]
    pub max_unauthenticated_frame_bytes: usize,
    /// Longest a request frame may take to arrive whole once its first byte has, in
    /// milliseconds; a half-sent frame is then refused and its connection closed.
    #[arg(long, default_value_t = server::frame_reader::DEFAULT_PARTIAL_FRAME_TIMEOUT_MS)]
    pub partial_frame_timeout_ms: u64,
    /// Smallest native Produce request, in bytes, whose batch goes from a plain-TCP socket
    /// into the log without passing through the server's memory (splice); 0 (the default):
    /// never. 262144 is the threshold measured to pay off where splicing does; whether it does
    /// depends on the machine: compare with `fencelog bench --server-splice-min-bytes 0|262144`.
    /// Standalone servers only; TLS and the Kafka listener always read requests whole.
    #[arg(long, default_value_t = server::DEFAULT_SPLICE_MIN_FRAME_BYTES)]
    pub splice_min_bytes: usize,
    /// Also serve Kafka's wire protocol on this address (off unless given), e.g. `127.0.0.1:9092`.
    #[arg(long, env = "FENCELOG_KAFKA_LISTEN")]
    pub kafka_listen: Option<String>,
    /// HOST:PORT Kafka clients are told to connect to (Metadata); defaults to the Kafka listen
    /// address, and must be set when that is 0.0.0.0 or [::].
    #[arg(long, env = "FENCELOG_KAFKA_ADVERTISE", requires = "kafka_listen")]
    pub kafka_advertise: Option<String>,
    /// Kept for scripts that set it: the Kafka broker id is the node id (`--node-id`), and a
    /// different value is refused.
    #[arg(long, hide = true)]
    pub kafka_node_id: Option<i32>,
    /// Largest Kafka request frame accepted, in bytes (Kafka's socket.request.max.bytes).
    #[arg(long, default_value_t = server::kafka::DEFAULT_KAFKA_MAX_FRAME_BYTES)]
    pub kafka_max_frame_bytes: usize,
    /// Serve HTTP here (off unless given), e.g. `127.0.0.1:9464`: Prometheus metrics at
    /// `/metrics`, the console at `/` and its read-only JSON views under `/api/` (a login under
    /// --auth; HTTPS under --tls-cert). `--metrics-listen` is the same flag under its old name.
    #[arg(
        long = "http-listen",
        alias = "metrics-listen",
        env = "FENCELOG_METRICS_LISTEN",
        value_name = "ADDR"
    )]
    pub metrics_listen: Option<String>,
    /// Require authentication (SCRAM-SHA-256, users from `fencelog user add`) and enforce the
    /// ACLs of `fencelog acl add` on every listener. Off by default. Standalone the users and
    /// ACLs are the data directory's; with --etcd they are the cluster's, in etcd.
    #[arg(long)]
    pub auth: bool,
    /// A user the ACLs do not restrict (repeatable), like Kafka's super.users.
    #[arg(long = "super-user", value_name = "NAME", requires = "auth")]
    pub super_users: Vec<String>,
    /// In a cluster with `--auth`: the user brokers authenticate to each other as (add it once
    /// with `fencelog user add NAME --etcd URL`). It may replicate every topic and nothing else
    /// unless granted. Its password comes from FENCELOG_BROKER_PASSWORD or
    /// `--broker-password-file`.
    #[arg(long = "broker-user", value_name = "NAME", requires = "auth")]
    pub broker_user: Option<String>,
    /// File whose first line is the broker user's password (instead of
    /// FENCELOG_BROKER_PASSWORD).
    #[arg(
        long = "broker-password-file",
        value_name = "FILE",
        requires = "broker_user"
    )]
    pub broker_password_file: Option<std::path::PathBuf>,
    /// This broker's node id in a cluster, stable across restarts (`fencelog cluster status`
    /// and cluster metadata show it); standalone it only labels the one broker.
    #[arg(long, env = "FENCELOG_NODE_ID", default_value_t = 0, value_parser = clap::value_parser!(u32).range(..u32::MAX as i64))]
    pub node_id: u32,
    /// HOST:PORT clients are told to reach this broker's native listener at (cluster
    /// metadata); defaults to the --listen address, and must be set when that is 0.0.0.0 or
    /// [::] in a cluster.
    #[arg(long, env = "FENCELOG_ADVERTISE")]
    pub advertise: Option<String>,
    /// Join a cluster whose metadata lives in etcd at these client URLs (comma-separated, any
    /// members), e.g. `http://127.0.0.1:2379`. Without it the server runs standalone.
    #[arg(long, env = "FENCELOG_ETCD", value_delimiter = ',')]
    pub etcd: Vec<String>,
    /// The cluster's name in etcd (every key lives under `/fencelog/NAME/`).
    #[arg(
        long,
        env = "FENCELOG_CLUSTER",
        default_value = crate::cluster::meta::layout::DEFAULT_CLUSTER_NAME,
        requires = "etcd"
    )]
    pub cluster_name: String,
    /// TTL of this broker's registration in etcd, in milliseconds: its partitions are taken over
    /// this long after it stops renewing (it stops acknowledging earlier, by its own clock).
    #[arg(long, default_value_t = crate::broker::cluster::DEFAULT_REGISTRATION_TTL.as_millis() as u64, requires = "etcd")]
    pub registration_ttl_ms: u64,
    /// A follower that has not caught up with its leader for this long (milliseconds) leaves
    /// the partition's in-sync replicas.
    #[arg(long, default_value_t = crate::cluster::replication::DEFAULT_REPLICA_LAG_MAX_MS, requires = "etcd")]
    pub replica_lag_max_ms: u64,
    /// Pipeline this broker's replica fetches: a follower asks for the next records while it
    /// appends the last ones, and reports its log end once they are in. Pays off when the
    /// brokers have cores of their own; costs more CPU per byte replicated (off by default).
    #[arg(long, requires = "etcd")]
    pub replica_fetch_pipelining: bool,
    /// Most bytes of batches one replica fetch carries (this broker's fetches as a follower,
    /// and the cap on its answers as a leader; at least one whole batch is always sent). Small
    /// enough that a follower writes what it received while it is still in its CPU's cache.
    #[arg(long, default_value_t = crate::broker::cluster::DEFAULT_REPLICA_FETCH_MAX_BYTES, value_parser = clap::value_parser!(u32).range(65_536..=8_388_608), requires = "etcd")]
    pub replica_fetch_max_bytes: u32,
    /// Reach broker NODE's native listener at HOST:PORT instead of the address it advertises
    /// (repeatable, `NODE=HOST:PORT`): a NAT between brokers, or a fault-injection proxy on one
    /// broker-to-broker link.
    #[arg(long = "peer-addr", value_name = "NODE=HOST:PORT", value_parser = parse_peer_addr, requires = "etcd")]
    pub peer_addrs: Vec<(u32, String)>,
    /// Partitions of the cluster's offsets topic (`__consumer_offsets`: committed offsets and
    /// group membership), used by whichever broker creates it first.
    #[arg(long, default_value_t = crate::broker::offsets_topic::DEFAULT_OFFSETS_PARTITIONS, requires = "etcd")]
    pub offsets_partitions: u32,
    /// Replication factor of the cluster's offsets topic: it is created (and groups work) only
    /// once this many brokers are live.
    #[arg(long, default_value_t = crate::broker::offsets_topic::DEFAULT_OFFSETS_REPLICATION_FACTOR, requires = "etcd")]
    pub offsets_replication_factor: u16,
    /// Log filter (overrides RUST_LOG), e.g. `info` or `fencelog=debug`.
    #[arg(long)]
    pub log: Option<String>,
    /// TLS on every listener.
    #[command(flatten)]
    pub tls: super::tls::ServeTlsArgs,
    /// Testing only (hidden): a file holding a number of milliseconds the lease clock runs
    /// ahead of the system's, re-read every 20 ms and only ever increased (the nemesis's
    /// `clock-jump` fault, docs/reliability.md).
    #[arg(long, hide = true, value_name = "PATH")]
    pub test_clock_skew_file: Option<std::path::PathBuf>,
}

/// Runs the server.
///
/// Order matters: every flag is checked and every listener bound before anything touches the
/// data directory, so a mistyped address or a port in use fails without creating or locking
/// `--data-dir` (a newcomer's `serve --listen nonsense` leaves the directory it ran in empty).
pub fn run(args: ServeArgs) -> Result<(), CliError> {
    if let Some(filter) = &args.log {
        std::env::set_var("RUST_LOG", filter);
    }
    super::init_tracing("info");
    check_addresses(&args)?;
    let tls = args.tls.server_tls()?;
    let in_cluster = !args.etcd.is_empty();
    if in_cluster {
        check_cluster_args(&args)?;
    }
    let runtime = tokio::runtime::Runtime::new()
        .map_err(|error| CliError::new(format!("start runtime: {error}")))?;
    runtime.block_on(async move {
        let listener = bind("--listen", &args.listen).await?;
        let kafka = kafka_listener(&args).await?;
        let metrics = match &args.metrics_listen {
            Some(addr) => Some(bind("--metrics-listen", addr).await?),
            None => None,
        };
        // Only now may the data directory be created: every listener is bound.
        // On a cluster the users and ACLs are the cluster's, read from etcd below.
        let security = if args.auth && !in_cluster {
            let security = crate::auth::Security::open(&args.data_dir, args.super_users.clone())
                .map_err(|error| CliError::new(format!("--auth: {error}")))?;
            let users = crate::auth::users::list_users(&args.data_dir)
                .map_err(|error| CliError::new(format!("--auth: {error}")))?;
            warn_if_no_users(
                users.is_empty(),
                &format!("--data-dir {}", args.data_dir.display()),
            );
            Some(Arc::new(security))
        } else {
            None
        };
        let mut config = NodeConfig::new(&args.data_dir);
        config.broker.node_id = args.node_id;
        config.server = ServerConfig {
            security,
            max_connections: args.max_connections,
            max_in_flight: args.max_in_flight.max(1),
            max_frame_bytes: args.max_frame_bytes,
            tls,
            memory_budget: server::memory_budget::MemoryBudget::new(args.max_buffer_bytes),
            connection_buffer_bytes: args.connection_buffer_bytes,
            max_unauthenticated_frame_bytes: args.max_unauthenticated_frame_bytes,
            partial_frame_timeout: std::time::Duration::from_millis(args.partial_frame_timeout_ms),
            advertised_addr: args.advertise.clone(),
            splice_min_frame_bytes: args.splice_min_bytes,
            ..ServerConfig::default()
        };
        if let Some(path) = &args.test_clock_skew_file {
            config.clock = super::test_clock::follow_skew_file(path.clone());
        }
        if in_cluster {
            let advertised = match &args.advertise {
                Some(advertise) => advertise.clone(),
                None => listener
                    .local_addr()
                    .map_err(|error| CliError::new(format!("listen address: {error}")))?
                    .to_string(),
            };
            let (membership, security) =
                cluster_membership(&args, advertised, Arc::clone(&config.clock)).await?;
            config.cluster = Some(membership);
            config.server.security = security;
        }
        let listeners = Listeners {
            native: listener,
            kafka,
            metrics,
        };
        let node = Node::start(config, listeners)
            .await
            .map_err(|error| match error {
                BrokerError::Cluster(_) | BrokerError::InvalidConfig(_) => {
                    CliError::new(format!("cluster: {error}"))
                }
                BrokerError::Config(_) => CliError::new(error.to_string()),
                other => CliError::new(format!("open {}: {other}", args.data_dir.display())),
            })?;
        // On the signal the node leaves first (leaders step down and the registration is
        // revoked, so the others take over at once), then the listeners drain.
        node.serve_until(shutdown_signal())
            .await
            .map_err(|error| CliError::new(format!("server: {error}")))
    })
}

/// With `--auth` and no user yet, every client is refused: say so at start, with the command
/// that adds one (`store` is the `--data-dir DIR` or `--etcd URL` the users live in). Users
/// added while the server runs are picked up, hence a warning, not an error.
fn warn_if_no_users(no_users: bool, store: &str) {
    if no_users {
        tracing::warn!(
            "--auth is on and there are no users yet, so every client will be refused: add one with `FENCELOG_PASSWORD=... fencelog user add NAME {store}` (the server picks it up while it runs) and grant it topics with `fencelog acl add`, or give it --super-user NAME"
        );
    }
}

/// Checks the shape of every address flag, before anything is bound or created.
fn check_addresses(args: &ServeArgs) -> Result<(), CliError> {
    check_host_port("--listen", &args.listen, AddressKind::Native)?;
    if let Some(advertise) = &args.advertise {
        check_host_port("--advertise", advertise, AddressKind::Native)?;
    }
    if let Some(listen) = &args.kafka_listen {
        check_host_port("--kafka-listen", listen, AddressKind::Kafka)?;
    }
    if let Some(advertise) = &args.kafka_advertise {
        check_host_port("--kafka-advertise", advertise, AddressKind::Kafka)?;
    }
    if let Some(listen) = &args.metrics_listen {
        check_host_port("--metrics-listen", listen, AddressKind::Metrics)?;
    }
    Ok(())
}

/// Binds the listener `flag` names; a host that does not resolve or a port in use is an error
/// naming the flag and the value.
async fn bind(flag: &str, addr: &str) -> Result<tokio::net::TcpListener, CliError> {
    tokio::net::TcpListener::bind(addr).await.map_err(|error| {
        let hint = if error.kind() == std::io::ErrorKind::AddrInUse {
            "another process listens there (another fencelog serve?): stop it or pick another port"
        } else {
            "pick another address"
        };
        CliError::new(format!("{flag} {addr}: cannot listen: {error}; {hint}"))
    })
}

/// Parses `--peer-addr NODE=HOST:PORT`.
fn parse_peer_addr(text: &str) -> Result<(u32, String), String> {
    let (node, address) = text
        .split_once('=')
        .ok_or_else(|| format!("{text:?} is not NODE=HOST:PORT"))?;
    let node = node
        .trim()
        .parse::<u32>()
        .map_err(|error| format!("node id {node:?}: {error}"))?;
    let address = address.trim();
    if address
        .rsplit_once(':')
        .is_none_or(|(host, port)| host.is_empty() || port.parse::<u16>().is_err())
    {
        return Err(format!("address {address:?} is not HOST:PORT"));
    }
    Ok((node, address.to_owned()))
}

/// Refuses the combinations cluster mode does not serve yet, before anything starts.
fn check_cluster_args(args: &ServeArgs) -> Result<(), CliError> {
    if args.auth && args.broker_user.is_none() {
        return Err(CliError::new(
            "--auth with --etcd needs --broker-user NAME: followers authenticate to their leaders as that user (add it once with `fencelog user add NAME --etcd URL`, its password in FENCELOG_BROKER_PASSWORD or --broker-password-file)",
        ));
    }
    if args.tls.tls_cert.is_some()
        && args.tls.peer_tls_ca.is_none()
        && args.tls.tls_client_ca.is_none()
    {
        return Err(CliError::new(
            "--tls-cert with --etcd needs --peer-tls-ca FILE (or --tls-client-ca FILE): followers connect to their leaders over TLS and check each leader's certificate against that CA",
        ));
    }
    if args.node_id > crate::broker::producer_ids::CLUSTER_NODE_ID_MAX {
        return Err(CliError::new(format!(
            "--node-id {} is above {} in a cluster (producer ids carry the node id)",
            args.node_id,
            crate::broker::producer_ids::CLUSTER_NODE_ID_MAX
        )));
    }
    let unreachable = ["0.0.0.0", "[::]", "::"];
    if args.advertise.is_none()
        && unreachable
            .iter()
            .any(|host| args.listen.starts_with(&format!("{host}:")))
    {
        return Err(CliError::new(format!(
            "--listen {} listens on every interface, which is no address other brokers and clients can connect to: set --advertise HOST:PORT",
            args.listen
        )));
    }
    Ok(())
}

/// Connects to etcd and says how this broker joins the cluster kept there, and, with `--auth`,
/// what it checks clients against: the cluster's users and ACLs in etcd, followed live.
#[cfg(feature = "etcd")]
async fn cluster_membership(
    args: &ServeArgs,
    advertised: String,
    clock: Arc<dyn crate::clock::Clock>,
) -> Result<(ClusterMembership, Option<Arc<crate::auth::Security>>), CliError> {
    use crate::broker::cluster::ClusterConfig;
    use crate::cluster::meta::{EtcdConfig, EtcdMetaStore};
    let etcd = EtcdConfig::new(args.etcd.clone()).with_cluster_name(args.cluster_name.clone());
    let store = EtcdMetaStore::connect_with_clock(etcd, clock)
        .await
        .map_err(|error| CliError::new(format!("--etcd: {error}")))?;
    let security = if args.auth {
        Some(Arc::new(cluster_security(args, &store).await?))
    } else {
        None
    };
    let mut config = ClusterConfig::new(args.node_id, advertised);
    config.peer_tls = args.tls.peer_tls()?;
    config.registration_ttl = std::time::Duration::from_millis(args.registration_ttl_ms);
    config.replication.replica_lag_max_ms = args.replica_lag_max_ms;
    config.replication.pipelined_fetches = args.replica_fetch_pipelining;
    config.replica_fetch_max_bytes = args.replica_fetch_max_bytes;
    config.peer_addrs = args.peer_addrs.iter().cloned().collect();
    config.offsets.partitions = args.offsets_partitions;
    config.offsets.replication_factor = args.offsets_replication_factor;
    config
        .offsets
        .validate()
        .map_err(|error| CliError::new(format!("--offsets-*: {error}")))?;
    if let Some(user) = &args.broker_user {
        config.peer_credentials = Some(crate::client::Credentials {
            user: user.clone(),
            password: super::common::read_secret(
                args.broker_password_file.as_deref(),
                "--broker-password-file",
                BROKER_PASSWORD_ENV,
            )
            .map_err(|error| CliError::new(format!("--broker-user: {}", error.message)))?,
        });
    }
    crate::cluster::meta::validate_ttl(config.registration_ttl)
        .map_err(|error| CliError::new(format!("--registration-ttl-ms: {error}")))?;
    tracing::info!(node_id = args.node_id, advertised = %config.native_addr, etcd = ?args.etcd, "joining the cluster");
    Ok((
        ClusterMembership {
            config,
            store: Arc::new(store),
        },
        security,
    ))
}

/// The cluster's users and ACLs, read from etcd now (a damaged value or too many is an error)
/// and followed from then on, with this broker's super users and broker principal.
#[cfg(feature = "etcd")]
async fn cluster_security(
    args: &ServeArgs,
    store: &crate::cluster::meta::EtcdMetaStore,
) -> Result<crate::auth::Security, CliError> {
    use crate::auth::{Security, SecurityStore};
    use crate::cluster::meta::security::EtcdSecurityStore;
    let etcd = EtcdSecurityStore::new(store.clone());
    let live = etcd
        .load_and_follow()
        .await
        .map_err(|error| CliError::new(format!("--auth: the cluster's users and ACLs: {error}")))?;
    warn_if_no_users(
        live.users().users.is_empty(),
        &format!("--etcd {}", args.etcd.join(",")),
    );
    let mut security = Security::live(live, SecurityStore::Etcd, args.super_users.clone())
        .with_acl_store(std::sync::Arc::new(etcd));
    if let Some(broker_user) = &args.broker_user {
        security = security.with_broker_principal(broker_user.clone());
    }
    Ok(security)
}

/// Environment variable holding the broker user's password (`serve --broker-user`).
pub const BROKER_PASSWORD_ENV: &str = "FENCELOG_BROKER_PASSWORD";

/// Without the `etcd` feature there is no store to join.
#[cfg(not(feature = "etcd"))]
async fn cluster_membership(
    _args: &ServeArgs,
    _advertised: String,
    _clock: Arc<dyn crate::clock::Clock>,
) -> Result<(ClusterMembership, Option<Arc<crate::auth::Security>>), CliError> {
    Err(CliError::new(
        "--etcd: this build has no etcd client (built without the `etcd` feature)",
    ))
}

/// Binds the Kafka listener if `--kafka-listen` was given, with what it advertises.
async fn kafka_listener(args: &ServeArgs) -> Result<Option<KafkaListener>, CliError> {
    let Some(listen) = &args.kafka_listen else {
        return Ok(None);
    };
    let listener = bind("--kafka-listen", listen).await?;
    let mut config = match &args.kafka_advertise {
        Some(advertise) => KafkaConfig::advertising_host_port(advertise)
            .map_err(|error| CliError::new(format!("--kafka-advertise: {error}")))?,
        // The bound address, so `--kafka-listen 127.0.0.1:0` advertises the port it got.
        None => KafkaConfig::advertising(
            listener
                .local_addr()
                .map_err(|error| CliError::new(format!("Kafka listener address: {error}")))?,
        ),
    };
    if let Some(kafka_node_id) = args.kafka_node_id {
        if i64::from(kafka_node_id) != i64::from(args.node_id) {
            return Err(CliError::new(format!(
                "--kafka-node-id {kafka_node_id} differs from --node-id {}: the Kafka broker id is the node id; drop --kafka-node-id",
                args.node_id
            )));
        }
    }
    if i32::try_from(args.node_id).is_err() {
        return Err(CliError::new(format!(
            "--node-id {} with --kafka-listen: Kafka broker ids go up to {}",
            args.node_id,
            i32::MAX
        )));
    }
    config.max_frame_bytes = args.kafka_max_frame_bytes;
    config.validate().map_err(|error| match error {
        KafkaConfigError::UnreachableHost { .. } => CliError::new(format!(
            "--kafka-listen {listen} listens on every interface, which is no address a Kafka client can connect to: set --kafka-advertise HOST:PORT"
        )),
        other => CliError::new(format!("Kafka listener: {other}")),
    })?;
    Ok(Some(KafkaListener { listener, config }))
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
