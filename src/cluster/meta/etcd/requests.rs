//! One etcd request, bounded and with its failure mapped: every read and transaction of the
//! store goes through [`EtcdMetaStore::request`], and a transaction's answer is read back with
//! [`txn_revision`] and [`txn_read`].
//!
//! Why one place: the request timeout, the naming of the endpoints tried, and the line between
//! `Invalid` (etcd refused the request itself: retrying cannot help) and `Unavailable` (etcd
//! could not answer: retrying may) then hold for every request alike.

use std::future::Future;

use etcd_client::{GetOptions, GetResponse, KeyValue, Txn, TxnOpResponse, TxnResponse};

use super::super::MetaError;
use super::EtcdMetaStore;

impl EtcdMetaStore {
    /// `Unavailable` for `reason`, naming the endpoints.
    pub(in crate::cluster::meta) fn unavailable(&self, reason: String) -> MetaError {
        MetaError::Unavailable {
            endpoints: self.inner.config.endpoints.join(","),
            reason,
        }
    }

    /// Runs one etcd request within the request timeout, mapping its failure.
    pub(in crate::cluster::meta) async fn request<T>(
        &self,
        what: &str,
        request: impl Future<Output = Result<T, etcd_client::Error>>,
    ) -> Result<T, MetaError> {
        match tokio::time::timeout(self.inner.config.request_timeout, request).await {
            Ok(Ok(response)) => Ok(response),
            Ok(Err(error)) => Err(self.map_error(what, error)),
            Err(_elapsed) => Err(self.unavailable(format!(
                "{what}: no answer within {:?}",
                self.inner.config.request_timeout
            ))),
        }
    }

    /// etcd refusing the request itself (too many operations, a request too large) is
    /// `Invalid`; anything else (transport, no leader, timeouts) is `Unavailable`.
    fn map_error(&self, what: &str, error: etcd_client::Error) -> MetaError {
        if let etcd_client::Error::GRpcStatus(status) = &error {
            if matches!(
                status.code(),
                tonic::Code::InvalidArgument | tonic::Code::FailedPrecondition
            ) {
                return MetaError::Invalid(format!("{what}: etcd refused: {}", status.message()));
            }
        }
        self.unavailable(format!("{what}: {error}"))
    }

    /// One transaction, as a request.
    pub(super) async fn txn(&self, what: &str, txn: Txn) -> Result<TxnResponse, MetaError> {
        let mut client = self.client();
        self.request(what, async move { client.txn(txn).await })
            .await
    }

    /// Every key under `prefix`, as one request.
    pub(super) async fn get_prefix(
        &self,
        what: &str,
        prefix: String,
    ) -> Result<GetResponse, MetaError> {
        let mut client = self.client();
        self.request(what, async move {
            client
                .get(prefix, Some(GetOptions::new().with_prefix()))
                .await
        })
        .await
    }
}

/// The revision a transaction was applied at.
pub(super) fn txn_revision(response: &TxnResponse) -> i64 {
    response.header().map_or(0, |header| header.revision())
}

/// The key-values a transaction's `get` branch read.
pub(super) fn txn_read(response: &TxnResponse) -> Vec<KeyValue> {
    response
        .op_responses()
        .into_iter()
        .filter_map(|op| match op {
            TxnOpResponse::Get(get) => Some(get.kvs().to_vec()),
            _ => None,
        })
        .flatten()
        .collect()
}
