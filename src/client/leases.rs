//! Leases from the client side: [`Lease`] and [`RenewedLease`], the lease id's text form, and
//! the `AcquireLease`, `RenewLease` and `ReleaseLease` calls.
//!
//! A lease is what gives a writer its epoch (the fencing token), so these calls and the lease
//! id, a bearer credential that `Debug` never prints, are kept together in one place.

use std::fmt;
use std::time::Duration;

use super::calls::expect_response;
use super::{Client, ClientError};
use crate::protocol::{Request, Response};

/// A granted lease: the epoch to stamp into batches and the secret to renew and release it.
///
/// `Debug` redacts the lease id, which is a bearer credential.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Lease {
    /// The fencing token for every batch written under this lease.
    pub epoch: u64,
    /// Secret proving ownership on renew and release.
    pub lease_id: u128,
    /// Granted duration in milliseconds.
    pub ttl_ms: u64,
}

impl Lease {
    /// The lease id as 32 lowercase hex digits, the form the CLI prints and accepts.
    pub fn lease_id_hex(&self) -> String {
        format_lease_id(self.lease_id)
    }

    /// The granted duration.
    pub fn ttl(&self) -> Duration {
        Duration::from_millis(self.ttl_ms)
    }
}

impl fmt::Debug for Lease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lease")
            .field("epoch", &self.epoch)
            .field("lease_id", &"<redacted>")
            .field("ttl_ms", &self.ttl_ms)
            .finish()
    }
}

/// Formats a lease id as 32 lowercase hex digits.
pub fn format_lease_id(lease_id: u128) -> String {
    format!("{lease_id:032x}")
}

/// Parses a lease id written as up to 32 hex digits (an optional `0x` prefix is accepted).
pub fn parse_lease_id(text: &str) -> Result<u128, ClientError> {
    let digits = text.trim();
    let digits = digits
        .strip_prefix("0x")
        .or_else(|| digits.strip_prefix("0X"))
        .unwrap_or(digits);
    if digits.is_empty() || digits.len() > 32 || !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(ClientError::InvalidArgument(format!(
            "lease id {text:?} is not 32 hex digits"
        )));
    }
    u128::from_str_radix(digits, 16)
        .map_err(|error| ClientError::InvalidArgument(format!("lease id {text:?}: {error}")))
}

/// The answer to a lease renewal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RenewedLease {
    /// The lease's epoch (unchanged by renewal).
    pub epoch: u64,
    /// The lease now expires this many ms after the server received the renewal.
    pub ttl_ms: u64,
}

impl Client {
    /// Acquires the write lease of a partition. Fails with [`ClientError::LeaseHeld`] while
    /// another live lease exists.
    pub async fn acquire_lease(
        &self,
        topic: &str,
        partition: u32,
        holder: &str,
        ttl: Duration,
    ) -> Result<Lease, ClientError> {
        let request = Request::AcquireLease {
            topic: topic.to_owned(),
            partition,
            holder: holder.to_owned(),
            ttl_ms: u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX),
        };
        let response = self.call_routed(topic, partition, request).await?;
        expect_response!(response, Response::AcquireLease { epoch, lease_id, ttl_ms } => Lease { epoch, lease_id, ttl_ms })
    }

    /// Extends a live lease by its TTL. Fails with [`ClientError::LeaseLost`] if it is gone.
    pub async fn renew_lease(
        &self,
        topic: &str,
        partition: u32,
        lease_id: u128,
    ) -> Result<RenewedLease, ClientError> {
        let request = Request::RenewLease {
            topic: topic.to_owned(),
            partition,
            lease_id,
        };
        let response = self.call_routed(topic, partition, request).await?;
        expect_response!(response, Response::RenewLease { epoch, ttl_ms } => RenewedLease { epoch, ttl_ms })
    }

    /// Ends a live lease at once, so another writer can acquire the partition.
    pub async fn release_lease(
        &self,
        topic: &str,
        partition: u32,
        lease_id: u128,
    ) -> Result<(), ClientError> {
        let request = Request::ReleaseLease {
            topic: topic.to_owned(),
            partition,
            lease_id,
        };
        let response = self.call_routed(topic, partition, request).await?;
        expect_response!(response, Response::ReleaseLease => ())
    }
}
