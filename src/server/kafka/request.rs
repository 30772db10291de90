//! A Kafka request frame decoded: the fixed prefix (API key, version, correlation id), the
//! request header (v1, or v2 for flexible versions), and the body, for the APIs and versions in
//! [`super::versions`] only.
//!
//! Layout of a request frame (after the 4-byte size the connection loop has removed):
//!
//! | bytes | field | |
//! |---|---|---|
//! | 0..2 | `api_key` (i16) | |
//! | 2..4 | `api_version` (i16) | |
//! | 4..8 | `correlation_id` (i32) | echoed in the response header |
//! | 8.. | `client_id` (nullable string), tagged fields in header v2 | |
//! | .. | the body, in that API's version | |
//!
//! The prefix is read by hand, with bounds checks, before the codec runs: the codec's own
//! header helper slices without checking and would panic on a short frame, and the version has
//! to be checked against our table before the body is handed to the codec at all. An
//! unsupported ApiVersions version is not an error: KIP-511 says to answer it in v0 with
//! `UNSUPPORTED_VERSION` and the table, so the client can retry with a version we have.

use bytes::{Buf, Bytes};
use kafka_protocol::messages::{
    AddOffsetsToTxnRequest, AddPartitionsToTxnRequest, AlterConfigsRequest, ApiKey,
    ApiVersionsRequest, ConsumerGroupDescribeRequest, ConsumerGroupHeartbeatRequest,
    CreateAclsRequest, CreatePartitionsRequest, CreateTopicsRequest, DeleteAclsRequest,
    DeleteGroupsRequest, DeleteRecordsRequest, DeleteTopicsRequest, DescribeAclsRequest,
    DescribeClusterRequest, DescribeConfigsRequest, DescribeGroupsRequest, DescribeLogDirsRequest,
    DescribeProducersRequest, DescribeTransactionsRequest, EndTxnRequest, FetchRequest,
    FindCoordinatorRequest, HeartbeatRequest, IncrementalAlterConfigsRequest,
    InitProducerIdRequest, JoinGroupRequest, LeaveGroupRequest, ListGroupsRequest,
    ListOffsetsRequest, ListTransactionsRequest, MetadataRequest, OffsetCommitRequest,
    OffsetDeleteRequest, OffsetFetchRequest, OffsetForLeaderEpochRequest, ProduceRequest,
    RequestHeader, SaslAuthenticateRequest, SaslHandshakeRequest, SyncGroupRequest,
    TxnOffsetCommitRequest,
};
use kafka_protocol::protocol::Decodable;
use thiserror::Error;

use super::versions;

/// Bytes of the fixed prefix: API key, API version, correlation id.
pub const REQUEST_PREFIX_BYTES: usize = 8;

/// A decoded request of a supported API and version.
#[derive(Debug)]
pub struct KafkaRequest {
    /// The API.
    pub api_key: ApiKey,
    /// The request header (version, correlation id, client id).
    pub header: RequestHeader,
    /// The body.
    pub body: RequestBody,
}

/// The body of a request of an implemented API (one variant per row of the versions table, so
/// the dispatch match is exhaustive).
#[derive(Debug)]
pub enum RequestBody {
    /// Produce (0).
    Produce(ProduceRequest),
    /// Fetch (1).
    Fetch(FetchRequest),
    /// ApiVersions (18).
    ApiVersions(ApiVersionsRequest),
    /// Metadata (3).
    Metadata(MetadataRequest),
    /// ListOffsets (2).
    ListOffsets(ListOffsetsRequest),
    /// CreateTopics (19).
    CreateTopics(CreateTopicsRequest),
    /// DeleteTopics (20).
    DeleteTopics(DeleteTopicsRequest),
    /// DeleteRecords (21).
    DeleteRecords(DeleteRecordsRequest),
    /// InitProducerId (22).
    InitProducerId(InitProducerIdRequest),
    /// OffsetCommit (8).
    OffsetCommit(OffsetCommitRequest),
    /// OffsetFetch (9).
    OffsetFetch(OffsetFetchRequest),
    /// OffsetForLeaderEpoch (23).
    OffsetForLeaderEpoch(OffsetForLeaderEpochRequest),
    /// FindCoordinator (10).
    FindCoordinator(FindCoordinatorRequest),
    /// JoinGroup (11).
    JoinGroup(JoinGroupRequest),
    /// Heartbeat (12).
    Heartbeat(HeartbeatRequest),
    /// LeaveGroup (13).
    LeaveGroup(LeaveGroupRequest),
    /// SyncGroup (14).
    SyncGroup(SyncGroupRequest),
    /// DescribeGroups (15).
    DescribeGroups(DescribeGroupsRequest),
    /// ListGroups (16).
    ListGroups(ListGroupsRequest),
    /// SaslHandshake (17).
    SaslHandshake(SaslHandshakeRequest),
    /// SaslAuthenticate (36).
    SaslAuthenticate(SaslAuthenticateRequest),
    /// DeleteGroups (42).
    DeleteGroups(DeleteGroupsRequest),
    /// OffsetDelete (47).
    OffsetDelete(OffsetDeleteRequest),
    /// DescribeCluster (60).
    DescribeCluster(DescribeClusterRequest),
    /// ListTransactions (66).
    ListTransactions(ListTransactionsRequest),
    /// DescribeConfigs (32).
    DescribeConfigs(DescribeConfigsRequest),
    /// AlterConfigs (33).
    AlterConfigs(AlterConfigsRequest),
    /// IncrementalAlterConfigs (44).
    IncrementalAlterConfigs(IncrementalAlterConfigsRequest),
    /// DescribeAcls (29).
    DescribeAcls(DescribeAclsRequest),
    /// CreateAcls (30).
    CreateAcls(CreateAclsRequest),
    /// DeleteAcls (31).
    DeleteAcls(DeleteAclsRequest),
    /// DescribeLogDirs (35).
    DescribeLogDirs(DescribeLogDirsRequest),
    /// DescribeProducers (61).
    DescribeProducers(DescribeProducersRequest),
    /// ConsumerGroupHeartbeat (68).
    ConsumerGroupHeartbeat(ConsumerGroupHeartbeatRequest),
    /// ConsumerGroupDescribe (69).
    ConsumerGroupDescribe(ConsumerGroupDescribeRequest),
    /// CreatePartitions (37).
    CreatePartitions(CreatePartitionsRequest),
    /// AddPartitionsToTxn (24).
    AddPartitionsToTxn(AddPartitionsToTxnRequest),
    /// AddOffsetsToTxn (25).
    AddOffsetsToTxn(AddOffsetsToTxnRequest),
    /// EndTxn (26).
    EndTxn(EndTxnRequest),
    /// TxnOffsetCommit (28).
    TxnOffsetCommit(TxnOffsetCommitRequest),
    /// DescribeTransactions (65).
    DescribeTransactions(DescribeTransactionsRequest),
}

impl RequestBody {
    /// Decodes the body of `api_key` at `version`; `None` for an API without a variant.
    fn decode(api_key: ApiKey, frame: &mut Bytes, version: i16) -> Option<Result<Self, String>> {
        let decoded = match api_key {
            ApiKey::Produce => ProduceRequest::decode(frame, version).map(Self::Produce),
            ApiKey::Fetch => FetchRequest::decode(frame, version).map(Self::Fetch),
            ApiKey::ApiVersions => {
                ApiVersionsRequest::decode(frame, version).map(Self::ApiVersions)
            }
            ApiKey::Metadata => MetadataRequest::decode(frame, version).map(Self::Metadata),
            ApiKey::ListOffsets => {
                ListOffsetsRequest::decode(frame, version).map(Self::ListOffsets)
            }
            ApiKey::CreateTopics => {
                CreateTopicsRequest::decode(frame, version).map(Self::CreateTopics)
            }
            ApiKey::DeleteTopics => {
                DeleteTopicsRequest::decode(frame, version).map(Self::DeleteTopics)
            }
            ApiKey::DeleteRecords => {
                DeleteRecordsRequest::decode(frame, version).map(Self::DeleteRecords)
            }
            ApiKey::InitProducerId => {
                InitProducerIdRequest::decode(frame, version).map(Self::InitProducerId)
            }
            ApiKey::OffsetCommit => {
                OffsetCommitRequest::decode(frame, version).map(Self::OffsetCommit)
            }
            ApiKey::OffsetFetch => {
                OffsetFetchRequest::decode(frame, version).map(Self::OffsetFetch)
            }
            ApiKey::OffsetForLeaderEpoch => {
                OffsetForLeaderEpochRequest::decode(frame, version).map(Self::OffsetForLeaderEpoch)
            }
            ApiKey::FindCoordinator => {
                FindCoordinatorRequest::decode(frame, version).map(Self::FindCoordinator)
            }
            ApiKey::JoinGroup => JoinGroupRequest::decode(frame, version).map(Self::JoinGroup),
            ApiKey::Heartbeat => HeartbeatRequest::decode(frame, version).map(Self::Heartbeat),
            ApiKey::LeaveGroup => LeaveGroupRequest::decode(frame, version).map(Self::LeaveGroup),
            ApiKey::SyncGroup => SyncGroupRequest::decode(frame, version).map(Self::SyncGroup),
            ApiKey::DescribeGroups => {
                DescribeGroupsRequest::decode(frame, version).map(Self::DescribeGroups)
            }
            ApiKey::ListGroups => ListGroupsRequest::decode(frame, version).map(Self::ListGroups),
            ApiKey::SaslHandshake => {
                SaslHandshakeRequest::decode(frame, version).map(Self::SaslHandshake)
            }
            ApiKey::SaslAuthenticate => {
                SaslAuthenticateRequest::decode(frame, version).map(Self::SaslAuthenticate)
            }
            ApiKey::DeleteGroups => {
                DeleteGroupsRequest::decode(frame, version).map(Self::DeleteGroups)
            }
            ApiKey::OffsetDelete => {
                OffsetDeleteRequest::decode(frame, version).map(Self::OffsetDelete)
            }
            ApiKey::DescribeCluster => {
                DescribeClusterRequest::decode(frame, version).map(Self::DescribeCluster)
            }
            ApiKey::ListTransactions => {
                ListTransactionsRequest::decode(frame, version).map(Self::ListTransactions)
            }
            ApiKey::DescribeConfigs => {
                DescribeConfigsRequest::decode(frame, version).map(Self::DescribeConfigs)
            }
            ApiKey::AlterConfigs => {
                AlterConfigsRequest::decode(frame, version).map(Self::AlterConfigs)
            }
            ApiKey::IncrementalAlterConfigs => {
                IncrementalAlterConfigsRequest::decode(frame, version)
                    .map(Self::IncrementalAlterConfigs)
            }
            ApiKey::DescribeAcls => {
                DescribeAclsRequest::decode(frame, version).map(Self::DescribeAcls)
            }
            ApiKey::CreateAcls => CreateAclsRequest::decode(frame, version).map(Self::CreateAcls),
            ApiKey::DeleteAcls => DeleteAclsRequest::decode(frame, version).map(Self::DeleteAcls),
            ApiKey::DescribeLogDirs => {
                DescribeLogDirsRequest::decode(frame, version).map(Self::DescribeLogDirs)
            }
            ApiKey::DescribeProducers => {
                DescribeProducersRequest::decode(frame, version).map(Self::DescribeProducers)
            }
            ApiKey::ConsumerGroupHeartbeat => ConsumerGroupHeartbeatRequest::decode(frame, version)
                .map(Self::ConsumerGroupHeartbeat),
            ApiKey::ConsumerGroupDescribe => ConsumerGroupDescribeRequest::decode(frame, version)
                .map(Self::ConsumerGroupDescribe),
            ApiKey::CreatePartitions => {
                CreatePartitionsRequest::decode(frame, version).map(Self::CreatePartitions)
            }
            ApiKey::AddPartitionsToTxn => {
                AddPartitionsToTxnRequest::decode(frame, version).map(Self::AddPartitionsToTxn)
            }
            ApiKey::AddOffsetsToTxn => {
                AddOffsetsToTxnRequest::decode(frame, version).map(Self::AddOffsetsToTxn)
            }
            ApiKey::EndTxn => EndTxnRequest::decode(frame, version).map(Self::EndTxn),
            ApiKey::TxnOffsetCommit => {
                TxnOffsetCommitRequest::decode(frame, version).map(Self::TxnOffsetCommit)
            }
            ApiKey::DescribeTransactions => {
                DescribeTransactionsRequest::decode(frame, version).map(Self::DescribeTransactions)
            }
            _ => return None,
        };
        Some(decoded.map_err(|error| format!("{error:#}")))
    }
}

/// What a frame turned out to be.
#[derive(Debug)]
pub enum Decoded {
    /// A request the listener implements.
    Request(Box<KafkaRequest>),
    /// An ApiVersions request of a version the listener does not implement (KIP-511): answered
    /// in v0 with `UNSUPPORTED_VERSION` and the table; its body is not decoded.
    UnsupportedApiVersions {
        /// The correlation id to answer.
        correlation_id: i32,
        /// The version asked for.
        api_version: i16,
    },
}

/// A request frame the listener cannot answer. Kafka has no error response that fits every API,
/// so, as Kafka's own broker does, the connection is closed after logging this.
#[derive(Debug, Error)]
pub enum KafkaRequestError {
    /// Fewer bytes than the API key, version and correlation id.
    #[error("request frame of {len} bytes is shorter than the {REQUEST_PREFIX_BYTES}-byte header prefix")]
    Truncated {
        /// The frame's length.
        len: usize,
    },
    /// No Kafka API has this key.
    #[error("unknown Kafka API key {api_key} (correlation id {correlation_id})")]
    UnknownApiKey {
        /// The key sent.
        api_key: i16,
        /// The request's correlation id.
        correlation_id: i32,
    },
    /// A Kafka API this listener does not implement (not in ApiVersions' table).
    #[error("Kafka API {api_key:?} is not implemented by this listener (correlation id {correlation_id})")]
    UnsupportedApi {
        /// The API.
        api_key: ApiKey,
        /// The request's correlation id.
        correlation_id: i32,
    },
    /// A version of an implemented API outside the advertised range.
    #[error(
        "Kafka API {api_key:?} version {api_version} is not implemented (implemented: {min_version}..={max_version}; correlation id {correlation_id})"
    )]
    UnsupportedVersion {
        /// The API.
        api_key: ApiKey,
        /// The version sent.
        api_version: i16,
        /// Oldest implemented.
        min_version: i16,
        /// Newest implemented.
        max_version: i16,
        /// The request's correlation id.
        correlation_id: i32,
    },
    /// The request header (client id, tagged fields) does not decode.
    #[error("malformed request header for {api_key:?} v{api_version} (correlation id {correlation_id}): {reason}")]
    MalformedHeader {
        /// The API.
        api_key: ApiKey,
        /// The version.
        api_version: i16,
        /// The request's correlation id.
        correlation_id: i32,
        /// The codec's complaint.
        reason: String,
    },
    /// The body does not decode as that API's version (truncated, impossible counts, bad UTF-8).
    #[error(
        "malformed {api_key:?} v{api_version} request (correlation id {correlation_id}): {reason}"
    )]
    MalformedBody {
        /// The API.
        api_key: ApiKey,
        /// The version.
        api_version: i16,
        /// The request's correlation id.
        correlation_id: i32,
        /// The codec's complaint.
        reason: String,
    },
}

/// Decodes one request frame (the size prefix already removed and checked).
pub fn decode(mut frame: Bytes) -> Result<Decoded, KafkaRequestError> {
    if frame.len() < REQUEST_PREFIX_BYTES {
        return Err(KafkaRequestError::Truncated { len: frame.len() });
    }
    let mut prefix = &frame[..REQUEST_PREFIX_BYTES];
    let raw_api_key = prefix.get_i16();
    let api_version = prefix.get_i16();
    let correlation_id = prefix.get_i32();
    let api_key = ApiKey::try_from(raw_api_key).map_err(|_| KafkaRequestError::UnknownApiKey {
        api_key: raw_api_key,
        correlation_id,
    })?;
    let Some(supported) = versions::supported(api_key) else {
        return Err(KafkaRequestError::UnsupportedApi {
            api_key,
            correlation_id,
        });
    };
    if !(supported.min_version..=supported.max_version).contains(&api_version) {
        if api_key == ApiKey::ApiVersions {
            return Ok(Decoded::UnsupportedApiVersions {
                correlation_id,
                api_version,
            });
        }
        return Err(KafkaRequestError::UnsupportedVersion {
            api_key,
            api_version,
            min_version: supported.min_version,
            max_version: supported.max_version,
            correlation_id,
        });
    }
    let header_version = api_key.request_header_version(api_version);
    let header = RequestHeader::decode(&mut frame, header_version).map_err(|error| {
        KafkaRequestError::MalformedHeader {
            api_key,
            api_version,
            correlation_id,
            reason: error.to_string(),
        }
    })?;
    let Some(body) = RequestBody::decode(api_key, &mut frame, api_version) else {
        // In the versions table without a body variant: a bug, refused like an unknown API.
        tracing::error!(
            ?api_key,
            "Kafka API in the versions table has no request decoder"
        );
        return Err(KafkaRequestError::UnsupportedApi {
            api_key,
            correlation_id,
        });
    };
    let body = body.map_err(|error| KafkaRequestError::MalformedBody {
        api_key,
        api_version,
        correlation_id,
        reason: error,
    })?;
    Ok(Decoded::Request(Box::new(KafkaRequest {
        api_key,
        header,
        body,
    })))
}
