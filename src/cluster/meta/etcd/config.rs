//! Where the etcd store connects and how patient it is: the endpoints, the cluster's name, and
//! the timeouts of connecting, of one request and of the transport's liveness pings.
//!
//! Why named defaults: each bounds how long a broker can be stuck on an etcd that does not
//! answer, so they are stated once here and overridable per store (tests shorten them).

use std::time::Duration;

use super::super::layout::DEFAULT_CLUSTER_NAME;

/// How long connecting to an etcd endpoint may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// How long one etcd request may take before it counts as unavailable.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// HTTP/2 ping interval on the connection to etcd, so that a dead connection (a paused or
/// partitioned etcd) is noticed by a watch or a keep-alive stream that is otherwise idle.
pub const TRANSPORT_PING_INTERVAL: Duration = Duration::from_secs(2);

/// How long an HTTP/2 ping may go unanswered before the connection is dropped.
pub const TRANSPORT_PING_TIMEOUT: Duration = Duration::from_secs(2);

/// Where the etcd store connects and how patient it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtcdConfig {
    /// etcd client URLs (`http://host:port` or `host:port`), any member of the cluster.
    pub endpoints: Vec<String>,
    /// The cluster's name: every key lives under `/fencelog/<cluster_name>/`.
    pub cluster_name: String,
    /// [`CONNECT_TIMEOUT`] by default.
    pub connect_timeout: Duration,
    /// [`REQUEST_TIMEOUT`] by default.
    pub request_timeout: Duration,
}

impl EtcdConfig {
    /// Defaults for `endpoints`, cluster name [`DEFAULT_CLUSTER_NAME`].
    pub fn new<S: Into<String>>(endpoints: impl IntoIterator<Item = S>) -> Self {
        Self {
            endpoints: endpoints.into_iter().map(Into::into).collect(),
            cluster_name: DEFAULT_CLUSTER_NAME.to_owned(),
            connect_timeout: CONNECT_TIMEOUT,
            request_timeout: REQUEST_TIMEOUT,
        }
    }

    /// The same, for cluster `name`.
    pub fn with_cluster_name(mut self, name: impl Into<String>) -> Self {
        self.cluster_name = name.into();
        self
    }
}
