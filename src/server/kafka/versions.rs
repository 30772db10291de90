//! The APIs and versions the Kafka listener implements, read off the one list both
//! ApiVersions advertises and the request decoder enforces: [`super::handlers::HANDLERS`], where
//! each API declares its range beside its handler. This module only names that list for the
//! callers that want the ranges alone (tests, fuzzers), so there is no second table to drift.

use kafka_protocol::messages::ApiKey;

pub use super::handlers::ApiHandler;

/// Every API the listener answers, in API key order: the handler list itself.
pub const SUPPORTED_APIS: &[ApiHandler] = super::handlers::HANDLERS;

/// The API's row (its implemented versions), or `None` if the listener does not answer it.
pub fn supported(key: ApiKey) -> Option<&'static ApiHandler> {
    super::handlers::handler(key)
}
