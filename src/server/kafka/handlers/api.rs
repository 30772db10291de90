//! What a Kafka API declares beside its handler ([`KafkaApi`]: its request type, version range,
//! whether it may run before SASL authentication, its ACL rule, its answer to a refused request
//! and how it starts), and the erased row of it that the listener's one list holds
//! ([`ApiHandler`]).
//!
//! Why: the listener used to know each API in six central places (a dispatch match, a refusal
//! match, a check match, the versions table, a request and a response enum), so adding an API
//! or changing one's rule meant touching them all, and nothing tied them together. Now each
//! API's file says everything about it in one `impl KafkaApi` (as Redpanda's
//! `handler_template<Api, MinVersion, MaxVersion>` and Kafka's per-request
//! `getErrorResponse` do), and [`super::HANDLERS`] lists them: ApiVersions advertises that
//! list, the decoder enforces it, and the request decoded is the API's own type, so a version
//! the list does not name can be neither advertised nor served.
//!
//! The order of a request's checks is the same for every API ([`Pending::start`]): SASL
//! gate, then the ACL rule (only with `--auth`), then the handler.

use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

use bytes::Bytes;
use kafka_protocol::messages::ApiKey;
use kafka_protocol::protocol::{Decodable, Request, StrBytes};

use super::super::response::{KafkaResponse, ResponseBody};
use super::super::{KafkaConfig, KafkaSession};
use crate::auth::{Access, NotAuthorized};
use crate::broker::BrokerService;
use crate::server::protocol::Started;

/// Everything a handler may use to start one request.
pub struct Call<'a> {
    /// The broker the request runs against.
    pub service: &'a Arc<BrokerService>,
    /// The listener's advertised address, cluster id and limits.
    pub config: &'a KafkaConfig,
    /// The connection (its produce queue, SASL state, client id, peer, fetch budget).
    pub session: &'a mut KafkaSession,
    /// What the connection may do (everything without `--auth`).
    pub access: Access,
    /// The request's correlation id, echoed in the answer.
    pub correlation_id: i32,
    /// The request's version, which the answer is encoded in.
    pub version: i16,
}

/// A request its API's ACL rule refused: what the answer to it may depend on.
pub struct AclRefusal<'a> {
    /// What the connection may do (some answers pick their error code by what else it may).
    pub access: &'a Access,
    /// The request's version (some answers change shape with it).
    pub version: i16,
    /// What was refused, and the grant that would allow it.
    pub reason: &'a NotAuthorized,
}

impl AclRefusal<'_> {
    /// The refusal as the error message of the answers that carry one.
    pub fn message(&self) -> Option<StrBytes> {
        Some(StrBytes::from_string(self.reason.to_string()))
    }
}

/// One Kafka API as the listener serves it: implemented by a unit type in the API's own file
/// under `handlers/`, and listed once in [`super::HANDLERS`] with [`ApiHandler::of`].
pub trait KafkaApi: 'static {
    /// The request message, decoded by the vendored codec in the request's version.
    type Request: Request + fmt::Debug + Send + 'static;
    /// The API key (checked against the request type's at compile time).
    const KEY: ApiKey;
    /// Oldest version implemented.
    const MIN_VERSION: i16;
    /// Newest version implemented (tested: `tests/kafka/` sends each version).
    const MAX_VERSION: i16;
    /// Whether a request may run before SASL authentication on a server with `--auth` (the
    /// SASL steps and ApiVersions); any other request before it closes the connection.
    const BEFORE_AUTHENTICATION: bool = false;

    /// The ACL check made before the handler runs, only on a server with `--auth`. The default
    /// lets every request through: APIs that need authentication only, or that check each
    /// resource in their handler (and answer per resource), keep it.
    fn authorize(access: &Access, request: &Self::Request) -> Result<(), NotAuthorized> {
        let _ = (access, request);
        Ok(())
    }

    /// The answer to a request [`Self::authorize`] refused, in the request's version; `None`
    /// answers nothing and closes the connection. The default is only reached by an API that
    /// refuses in `authorize` without saying how to answer: it closes and logs the omission.
    fn refuse(refusal: &AclRefusal<'_>, request: &Self::Request) -> Option<ResponseBody> {
        let _ = (refusal, request);
        tracing::error!(
            api_key = ?Self::KEY,
            "Kafka API refused a request but has no refusal answer; closing connection"
        );
        None
    }

    /// Starts an admitted request: what must happen in request order happens now, the rest in
    /// the returned response future.
    fn start(call: Call<'_>, request: Self::Request) -> Started<KafkaResponse>;
}

/// A request decoded as its API's type, not started yet.
pub trait DecodedRequest: fmt::Debug + Send {
    /// Runs the SASL gate, the API's ACL rule and, if both admit it, the API's handler.
    fn start(self: Box<Self>, call: Call<'_>) -> Started<KafkaResponse>;
}

/// One API's row in the listener's list: its key and versions, which ApiVersions advertises
/// and the decoder enforces, and how to decode a request of it into its own type.
#[derive(Clone, Copy)]
pub struct ApiHandler {
    /// The API.
    pub key: ApiKey,
    /// Oldest version implemented.
    pub min_version: i16,
    /// Newest version implemented.
    pub max_version: i16,
    decode: DecodeBody,
}

/// How a row decodes a request body of its API at a version: into the API's own request
/// type, behind [`DecodedRequest`], or the codec's complaint.
type DecodeBody = fn(&mut Bytes, i16) -> Result<Box<dyn DecodedRequest>, String>;

impl ApiHandler {
    /// The row of `A`. Evaluated at compile time for the list, where it also proves that the
    /// key is the request type's and that the range is not empty.
    pub const fn of<A: KafkaApi>() -> Self {
        assert!(
            A::KEY as i16 == <A::Request as Request>::KEY,
            "a Kafka API's key is not its request type's"
        );
        assert!(
            A::MIN_VERSION <= A::MAX_VERSION,
            "a Kafka API's version range is empty"
        );
        Self {
            key: A::KEY,
            min_version: A::MIN_VERSION,
            max_version: A::MAX_VERSION,
            decode: decode::<A>,
        }
    }

    /// Whether `version` is implemented.
    pub fn implements(&self, version: i16) -> bool {
        (self.min_version..=self.max_version).contains(&version)
    }

    /// Decodes a request body of this API at `version` (the codec's complaint on failure).
    pub fn decode(
        &self,
        frame: &mut Bytes,
        version: i16,
    ) -> Result<Box<dyn DecodedRequest>, String> {
        (self.decode)(frame, version)
    }
}

impl fmt::Debug for ApiHandler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ApiHandler")
            .field("key", &self.key)
            .field("min_version", &self.min_version)
            .field("max_version", &self.max_version)
            .finish_non_exhaustive()
    }
}

fn decode<A: KafkaApi>(frame: &mut Bytes, version: i16) -> Result<Box<dyn DecodedRequest>, String> {
    match A::Request::decode(frame, version) {
        Ok(request) => Ok(Box::new(Pending::<A> {
            request,
            api: PhantomData,
        })),
        Err(error) => Err(format!("{error:#}")),
    }
}

/// A decoded request of `A`.
struct Pending<A: KafkaApi> {
    request: A::Request,
    api: PhantomData<fn() -> A>,
}

impl<A: KafkaApi> fmt::Debug for Pending<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.request.fmt(f)
    }
}

impl<A: KafkaApi> DecodedRequest for Pending<A> {
    fn start(self: Box<Self>, call: Call<'_>) -> Started<KafkaResponse> {
        if !A::BEFORE_AUTHENTICATION {
            if let Some(closed) = super::super::sasl::gate(&call.session.sasl, A::KEY) {
                return closed;
            }
        }
        if call.access.principal().is_some() {
            if let Err(refused) = A::authorize(&call.access, &self.request) {
                tracing::info!(%refused, "Kafka request refused by ACL");
                let refusal = AclRefusal {
                    access: &call.access,
                    version: call.version,
                    reason: &refused,
                };
                return match A::refuse(&refusal, &self.request) {
                    Some(body) => Started::ready(KafkaResponse {
                        correlation_id: call.correlation_id,
                        api_key: A::KEY,
                        api_version: call.version,
                        body,
                    }),
                    None => Started {
                        response: None,
                        close: true,
                    },
                };
            }
        }
        A::start(call, self.request)
    }
}
