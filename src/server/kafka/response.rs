//! A Kafka response and its encoding: the size prefix, the response header (v0: correlation id;
//! v1 for flexible versions: plus tagged fields; ApiVersions' is always v0 so a client that
//! does not know our versions yet can read it), then the body in the request's version.

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{
    AddOffsetsToTxnResponse, AddPartitionsToTxnResponse, AlterConfigsResponse, ApiKey,
    ApiVersionsResponse, ConsumerGroupDescribeResponse, ConsumerGroupHeartbeatResponse,
    CreateAclsResponse, CreatePartitionsResponse, CreateTopicsResponse, DeleteAclsResponse,
    DeleteGroupsResponse, DeleteRecordsResponse, DeleteTopicsResponse, DescribeAclsResponse,
    DescribeClusterResponse, DescribeConfigsResponse, DescribeGroupsResponse,
    DescribeLogDirsResponse, DescribeProducersResponse, DescribeTransactionsResponse,
    EndTxnResponse, FetchResponse, FindCoordinatorResponse, HeartbeatResponse,
    IncrementalAlterConfigsResponse, InitProducerIdResponse, JoinGroupResponse, LeaveGroupResponse,
    ListGroupsResponse, ListOffsetsResponse, ListTransactionsResponse, MetadataResponse,
    OffsetCommitResponse, OffsetDeleteResponse, OffsetFetchResponse, OffsetForLeaderEpochResponse,
    ProduceResponse, ResponseHeader, SaslAuthenticateResponse, SaslHandshakeResponse,
    SyncGroupResponse, TxnOffsetCommitResponse,
};
use kafka_protocol::protocol::Encodable;

use super::super::protocol::AfterEncode;
use crate::protocol::FRAME_LENGTH_BYTES;
use crate::server::memory_budget::Reservation;

/// A response before encoding.
#[derive(Debug)]
pub struct KafkaResponse {
    /// The request's correlation id.
    pub correlation_id: i32,
    /// The API answered.
    pub api_key: ApiKey,
    /// The body's version (the request's, or 0 for the KIP-511 ApiVersions fallback).
    pub api_version: i16,
    /// The body.
    pub body: ResponseBody,
}

/// The body of a response of an implemented API.
#[derive(Debug)]
pub enum ResponseBody {
    /// Produce (0).
    Produce(ProduceResponse),
    /// Fetch (1), with the memory-budget share its record buffers hold until it is encoded,
    /// and the records of partitions that are several buffers.
    Fetch(
        FetchResponse,
        Option<Reservation>,
        super::fetch_encoding::RecordParts,
    ),
    /// ApiVersions (18).
    ApiVersions(ApiVersionsResponse),
    /// Metadata (3).
    Metadata(MetadataResponse),
    /// ListOffsets (2).
    ListOffsets(ListOffsetsResponse),
    /// CreateTopics (19).
    CreateTopics(CreateTopicsResponse),
    /// DeleteTopics (20).
    DeleteTopics(DeleteTopicsResponse),
    /// DeleteRecords (21).
    DeleteRecords(DeleteRecordsResponse),
    /// InitProducerId (22).
    InitProducerId(InitProducerIdResponse),
    /// OffsetCommit (8).
    OffsetCommit(OffsetCommitResponse),
    /// OffsetFetch (9).
    OffsetFetch(OffsetFetchResponse),
    /// OffsetForLeaderEpoch (23).
    OffsetForLeaderEpoch(OffsetForLeaderEpochResponse),
    /// FindCoordinator (10).
    FindCoordinator(FindCoordinatorResponse),
    /// JoinGroup (11).
    JoinGroup(JoinGroupResponse),
    /// Heartbeat (12).
    Heartbeat(HeartbeatResponse),
    /// LeaveGroup (13).
    LeaveGroup(LeaveGroupResponse),
    /// SyncGroup (14).
    SyncGroup(SyncGroupResponse),
    /// DescribeGroups (15).
    DescribeGroups(DescribeGroupsResponse),
    /// ListGroups (16).
    ListGroups(ListGroupsResponse),
    /// SaslHandshake (17).
    SaslHandshake(SaslHandshakeResponse),
    /// SaslAuthenticate (36).
    SaslAuthenticate(SaslAuthenticateResponse),
    /// DeleteGroups (42).
    DeleteGroups(DeleteGroupsResponse),
    /// OffsetDelete (47).
    OffsetDelete(OffsetDeleteResponse),
    /// DescribeCluster (60).
    DescribeCluster(DescribeClusterResponse),
    /// ListTransactions (66).
    ListTransactions(ListTransactionsResponse),
    /// DescribeConfigs (32).
    DescribeConfigs(DescribeConfigsResponse),
    /// AlterConfigs (33).
    AlterConfigs(AlterConfigsResponse),
    /// IncrementalAlterConfigs (44).
    IncrementalAlterConfigs(IncrementalAlterConfigsResponse),
    /// DescribeAcls (29).
    DescribeAcls(DescribeAclsResponse),
    /// CreateAcls (30).
    CreateAcls(CreateAclsResponse),
    /// DeleteAcls (31).
    DeleteAcls(DeleteAclsResponse),
    /// DescribeLogDirs (35).
    DescribeLogDirs(DescribeLogDirsResponse),
    /// DescribeProducers (61).
    DescribeProducers(DescribeProducersResponse),
    /// ConsumerGroupHeartbeat (68).
    ConsumerGroupHeartbeat(ConsumerGroupHeartbeatResponse),
    /// ConsumerGroupDescribe (69).
    ConsumerGroupDescribe(ConsumerGroupDescribeResponse),
    /// CreatePartitions (37).
    CreatePartitions(CreatePartitionsResponse),
    /// AddPartitionsToTxn (24).
    AddPartitionsToTxn(AddPartitionsToTxnResponse),
    /// AddOffsetsToTxn (25).
    AddOffsetsToTxn(AddOffsetsToTxnResponse),
    /// EndTxn (26).
    EndTxn(EndTxnResponse),
    /// TxnOffsetCommit (28).
    TxnOffsetCommit(TxnOffsetCommitResponse),
    /// DescribeTransactions (65).
    DescribeTransactions(DescribeTransactionsResponse),
    /// A raw SASL token after SaslHandshake v0: written after the size prefix as is, with no
    /// response header (the client reads it as the SASL mechanism's bytes).
    RawSaslToken(Bytes),
}

impl ResponseBody {
    fn encode(&self, out: &mut BytesMut, version: i16) -> Result<(), String> {
        let encoded = match self {
            Self::Produce(body) => body.encode(out, version),
            Self::Fetch(body, _, split) if split.is_empty() => body.encode(out, version),
            Self::Fetch(body, _, split) => split.joined(body).encode(out, version),
            Self::ApiVersions(body) => body.encode(out, version),
            Self::Metadata(body) => body.encode(out, version),
            Self::ListOffsets(body) => body.encode(out, version),
            Self::CreateTopics(body) => body.encode(out, version),
            Self::DeleteTopics(body) => body.encode(out, version),
            Self::DeleteRecords(body) => body.encode(out, version),
            Self::InitProducerId(body) => body.encode(out, version),
            Self::OffsetCommit(body) => body.encode(out, version),
            Self::OffsetFetch(body) => body.encode(out, version),
            Self::OffsetForLeaderEpoch(body) => body.encode(out, version),
            Self::FindCoordinator(body) => body.encode(out, version),
            Self::JoinGroup(body) => body.encode(out, version),
            Self::Heartbeat(body) => body.encode(out, version),
            Self::LeaveGroup(body) => body.encode(out, version),
            Self::SyncGroup(body) => body.encode(out, version),
            Self::DescribeGroups(body) => body.encode(out, version),
            Self::ListGroups(body) => body.encode(out, version),
            Self::SaslHandshake(body) => body.encode(out, version),
            Self::SaslAuthenticate(body) => body.encode(out, version),
            Self::DeleteGroups(body) => body.encode(out, version),
            Self::OffsetDelete(body) => body.encode(out, version),
            Self::DescribeCluster(body) => body.encode(out, version),
            Self::ListTransactions(body) => body.encode(out, version),
            Self::DescribeConfigs(body) => body.encode(out, version),
            Self::AlterConfigs(body) => body.encode(out, version),
            Self::IncrementalAlterConfigs(body) => body.encode(out, version),
            Self::DescribeAcls(body) => body.encode(out, version),
            Self::CreateAcls(body) => body.encode(out, version),
            Self::DeleteAcls(body) => body.encode(out, version),
            Self::DescribeLogDirs(body) => body.encode(out, version),
            Self::DescribeProducers(body) => body.encode(out, version),
            Self::ConsumerGroupHeartbeat(body) => body.encode(out, version),
            Self::ConsumerGroupDescribe(body) => body.encode(out, version),
            Self::CreatePartitions(body) => body.encode(out, version),
            Self::AddPartitionsToTxn(body) => body.encode(out, version),
            Self::AddOffsetsToTxn(body) => body.encode(out, version),
            Self::EndTxn(body) => body.encode(out, version),
            Self::TxnOffsetCommit(body) => body.encode(out, version),
            Self::DescribeTransactions(body) => body.encode(out, version),
            Self::RawSaslToken(token) => {
                out.put_slice(token);
                Ok(())
            }
        };
        encoded.map_err(|error| format!("{error:#}"))
    }
}

impl KafkaResponse {
    /// The response header version for this API and version.
    pub fn header_version(&self) -> i16 {
        self.api_key.response_header_version(self.api_version)
    }

    /// Appends the whole frame (size prefix, header, body) to `out`; on failure `out` is left
    /// as it was.
    pub fn encode_frame(&self, out: &mut BytesMut, max_frame_bytes: usize) -> Result<(), String> {
        let start = out.len();
        let result = self.encode_after_prefix(out, start, max_frame_bytes);
        if result.is_err() {
            out.truncate(start);
        }
        result
    }

    fn encode_after_prefix(
        &self,
        out: &mut BytesMut,
        start: usize,
        max_frame_bytes: usize,
    ) -> Result<(), String> {
        out.put_u32(0);
        if !matches!(self.body, ResponseBody::RawSaslToken(_)) {
            ResponseHeader::default()
                .with_correlation_id(self.correlation_id)
                .encode(out, self.header_version())
                .map_err(|error| format!("response header: {error:#}"))?;
        }
        self.body
            .encode(out, self.api_version)
            .map_err(|error| format!("response body: {error}"))?;
        let length = out.len() - start - FRAME_LENGTH_BYTES;
        if length > max_frame_bytes {
            return Err(format!(
                "response of {length} bytes exceeds the frame limit of {max_frame_bytes}"
            ));
        }
        let length = u32::try_from(length).map_err(|_| "response over 4 GiB".to_string())?;
        out[start..start + FRAME_LENGTH_BYTES].copy_from_slice(&length.to_be_bytes());
        Ok(())
    }

    /// Encodes into `scratch` and hands the frame to `parts`; a response that cannot be encoded
    /// is dropped and the connection closed (Kafka has no generic error response a client
    /// could match to its request).
    pub fn encode_into(
        self,
        max_frame_bytes: usize,
        scratch: &mut BytesMut,
        parts: &mut Vec<Bytes>,
    ) -> AfterEncode {
        let zero_copy = match &self.body {
            ResponseBody::Fetch(body, _, split) => super::fetch_encoding::encode_fetch_frame(
                self.correlation_id,
                self.api_version,
                body,
                split,
                max_frame_bytes,
                scratch,
                parts,
            ),
            _ => None,
        };
        let encoded = match zero_copy {
            Some(result) => result,
            None => self
                .encode_frame(scratch, max_frame_bytes)
                .map(|()| parts.push(scratch.split().freeze())),
        };
        match encoded {
            Ok(()) => AfterEncode::Continue,
            Err(reason) => {
                tracing::error!(
                    api_key = ?self.api_key,
                    api_version = self.api_version,
                    correlation_id = self.correlation_id,
                    %reason,
                    "Kafka response could not be encoded"
                );
                AfterEncode::Close
            }
        }
    }
}
