//! A Fetch response frame written without copying its records.
//!
//! The generic encoder (`kafka-protocol`'s `Encodable`) writes the whole response into one
//! buffer, so every fetched byte was copied twice on its way out: once when a stored batch is
//! converted to a Kafka record batch (`batches::to_kafka`), and once more when that batch was
//! copied into the response buffer. Here the fields around the records are written into the
//! connection's scratch buffer and each partition's records `Bytes` is handed to the writer as
//! a part of its own, so the connection's vectored write sends them from where the conversion
//! put them (issue 34: the Kafka fetch path's second copy).
//!
//! Only what the listener sends takes this path: Fetch versions up to 12 (the highest
//! advertised, see `versions.rs`) without tagged fields (no diverging epoch, current leader or
//! snapshot id, no unknown tagged fields). Anything else is left to the generic encoder
//! ([`encode_fetch_frame`] answers `None`), which stays the reference: the tests check that
//! both write the same bytes for every version and random responses.

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::fetch_response::{
    EpochEndOffset, LeaderIdAndEpoch, PartitionData, SnapshotId,
};
use kafka_protocol::messages::FetchResponse;

use crate::batch::varint::put_unsigned_varint;
use crate::protocol::FRAME_LENGTH_BYTES;

/// The highest Fetch version written here: the first with topic ids (13) is not advertised.
const MAX_VERSION: i16 = 12;
/// The first flexible Fetch version (compact strings, arrays and bytes; tagged fields).
const FIRST_FLEXIBLE: i16 = 12;
/// Records shorter than this are copied into the frame rather than sent as a part of their
/// own: below a few KiB an extra `iovec` costs more than the copy it saves.
const MIN_ZERO_COPY_BYTES: usize = 4096;

/// The records of the partitions of a Fetch response that are several buffers rather than one
/// (stored Kafka batches served from the log's bytes, between converted ones): by the
/// partition's index in the response, counting through its topics' partitions in order. Such a
/// partition's own `records` is empty; its records are these parts, one after the other.
#[derive(Debug, Default)]
pub struct RecordParts {
    /// (partition index, parts), indices ascending.
    split: Vec<(usize, Vec<Bytes>)>,
}

impl RecordParts {
    /// Records the parts of the partition at `index` (after every index inserted before).
    pub fn insert(&mut self, index: usize, parts: Vec<Bytes>) {
        debug_assert!(self.split.last().is_none_or(|(last, _)| *last < index));
        self.split.push((index, parts));
    }

    /// The parts of the partition at `index`, if its records were split.
    fn get(&self, index: usize) -> Option<&[Bytes]> {
        self.split
            .binary_search_by_key(&index, |(at, _)| *at)
            .ok()
            .map(|found| self.split[found].1.as_slice())
    }

    /// Bytes of every part.
    pub fn bytes(&self) -> usize {
        self.split
            .iter()
            .flat_map(|(_, parts)| parts)
            .map(Bytes::len)
            .sum()
    }

    /// `body` with each split partition's parts joined into its `records` (a copy): for the
    /// generic encoder, which takes one buffer per partition.
    pub fn joined(&self, body: &FetchResponse) -> FetchResponse {
        let mut body = body.clone();
        let partitions = body
            .responses
            .iter_mut()
            .flat_map(|topic| topic.partitions.iter_mut());
        for (index, partition) in partitions.enumerate() {
            if let Some(parts) = self.get(index) {
                let mut records = BytesMut::with_capacity(parts.iter().map(Bytes::len).sum());
                for part in parts {
                    records.extend_from_slice(part);
                }
                partition.records = Some(records.freeze());
            }
        }
        body
    }

    /// No partition's records were split.
    pub fn is_empty(&self) -> bool {
        self.split.is_empty()
    }
}

/// Writes a whole Fetch response frame (size prefix, response header, body) as parts: the
/// fields in `scratch`, each large records field as its own `Bytes`. `None` when the response
/// needs the generic encoder (a version or a field this writer does not cover); `Some(Err)`
/// when the frame would exceed `max_frame_bytes` (nothing added to `parts`).
pub fn encode_fetch_frame(
    correlation_id: i32,
    version: i16,
    body: &FetchResponse,
    split: &RecordParts,
    max_frame_bytes: usize,
    scratch: &mut BytesMut,
    parts: &mut Vec<Bytes>,
) -> Option<Result<(), String>> {
    if !(4..=MAX_VERSION).contains(&version) || !plain(body, version) {
        return None;
    }
    let flexible = version >= FIRST_FLEXIBLE;
    // Where each records part goes in the frame: (offset in scratch, bytes).
    let mut records_at: Vec<(usize, &Bytes)> = Vec::new();
    let mut index = 0;
    let mut records_bytes = 0usize;
    let start = scratch.len();
    scratch.put_u32(0); // size, filled in below
    scratch.put_i32(correlation_id);
    if flexible {
        put_unsigned_varint(scratch, 0); // response header v1: no tagged fields
    }
    scratch.put_i32(body.throttle_time_ms);
    if version >= 7 {
        scratch.put_i16(body.error_code);
        scratch.put_i32(body.session_id);
    }
    put_array_len(scratch, flexible, Some(body.responses.len()));
    for topic in &body.responses {
        let name: &[u8] = topic.topic.as_bytes();
        if flexible {
            put_unsigned_varint(scratch, name.len() as u64 + 1);
        } else {
            scratch.put_i16(i16::try_from(name.len()).ok()?);
        }
        scratch.put_slice(name);
        put_array_len(scratch, flexible, Some(topic.partitions.len()));
        for partition in &topic.partitions {
            scratch.put_i32(partition.partition_index);
            scratch.put_i16(partition.error_code);
            scratch.put_i64(partition.high_watermark);
            scratch.put_i64(partition.last_stable_offset);
            if version >= 5 {
                scratch.put_i64(partition.log_start_offset);
            }
            let aborted = partition.aborted_transactions.as_ref();
            put_array_len(scratch, flexible, aborted.map(Vec::len));
            for transaction in aborted.into_iter().flatten() {
                scratch.put_i64(transaction.producer_id.0);
                scratch.put_i64(transaction.first_offset);
                if flexible {
                    put_unsigned_varint(scratch, 0);
                }
            }
            if version >= 11 {
                scratch.put_i32(partition.preferred_read_replica.0);
            }
            let records = match (&partition.records, split.get(index)) {
                (_, Some(parts)) => Some(parts),
                (Some(records), None) => Some(std::slice::from_ref(records)),
                (None, None) => None,
            };
            index += 1;
            match records {
                None if flexible => put_unsigned_varint(scratch, 0),
                None => scratch.put_i32(-1),
                Some(parts) => {
                    let len: usize = parts.iter().map(Bytes::len).sum();
                    if flexible {
                        put_unsigned_varint(scratch, len as u64 + 1);
                    } else {
                        scratch.put_i32(i32::try_from(len).ok()?);
                    }
                    for part in parts {
                        if part.len() < MIN_ZERO_COPY_BYTES {
                            scratch.put_slice(part);
                        } else {
                            records_at.push((scratch.len(), part));
                            records_bytes += part.len();
                        }
                    }
                }
            }
            if flexible {
                put_unsigned_varint(scratch, 0); // partition: no tagged fields
            }
        }
        if flexible {
            put_unsigned_varint(scratch, 0); // topic: no tagged fields
        }
    }
    if flexible {
        put_unsigned_varint(scratch, 0); // response: no tagged fields
    }

    let length = scratch.len() - start - FRAME_LENGTH_BYTES + records_bytes;
    let Some(length) = u32::try_from(length)
        .ok()
        .filter(|_| length <= max_frame_bytes)
    else {
        scratch.truncate(start);
        return Some(Err(format!(
            "response of {length} bytes exceeds the frame limit of {max_frame_bytes}"
        )));
    };
    scratch[start..start + FRAME_LENGTH_BYTES].copy_from_slice(&length.to_be_bytes());

    // Cut the fields where the records go, and interleave. All of `scratch` goes, as the
    // generic path hands it over (anything before `start` belongs before this frame).
    let fields = scratch.split().freeze();
    let mut cut = 0;
    for (at, records) in records_at {
        parts.push(fields.slice(cut..at));
        parts.push(records.clone());
        cut = at;
    }
    parts.push(fields.slice(cut..));
    Some(Ok(()))
}

/// Whether the response has nothing this writer leaves out: no tagged field at any level, and
/// nothing the version cannot carry (the generic encoder refuses those with an error).
fn plain(body: &FetchResponse, version: i16) -> bool {
    let untagged_partition = |partition: &PartitionData| {
        partition.unknown_tagged_fields.is_empty()
            && partition.diverging_epoch == EpochEndOffset::default()
            && partition.current_leader == LeaderIdAndEpoch::default()
            && partition.snapshot_id == SnapshotId::default()
            && (version >= 11 || partition.preferred_read_replica.0 == -1)
            && partition
                .aborted_transactions
                .iter()
                .flatten()
                .all(|transaction| transaction.unknown_tagged_fields.is_empty())
    };
    body.unknown_tagged_fields.is_empty()
        && body.node_endpoints.is_empty()
        && (version >= 7 || body.session_id == 0)
        && body.responses.iter().all(|topic| {
            topic.unknown_tagged_fields.is_empty()
                && topic.partitions.iter().all(untagged_partition)
        })
}

/// An array's length: compact (unsigned varint of length + 1, 0 for null) in flexible versions,
/// else an `i32` (-1 for null).
fn put_array_len(out: &mut BytesMut, flexible: bool, len: Option<usize>) {
    match (flexible, len) {
        (true, None) => put_unsigned_varint(out, 0),
        (true, Some(len)) => put_unsigned_varint(out, len as u64 + 1),
        (false, None) => out.put_i32(-1),
        (false, Some(len)) => out.put_i32(i32::try_from(len).unwrap_or(i32::MAX)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::kafka::response::{KafkaResponse, ResponseBody};
    use kafka_protocol::messages::fetch_response::{AbortedTransaction, FetchableTopicResponse};
    use kafka_protocol::messages::{ApiKey, BrokerId, TopicName};
    use kafka_protocol::protocol::StrBytes;
    use proptest::prelude::*;

    /// The frame the generic encoder writes for the same response.
    fn reference(correlation_id: i32, version: i16, body: &FetchResponse) -> Vec<u8> {
        let response = KafkaResponse {
            correlation_id,
            api_key: ApiKey::Fetch,
            api_version: version,
            body: ResponseBody::Fetch(body.clone(), None, RecordParts::default()),
        };
        let mut out = BytesMut::new();
        response
            .encode_frame(&mut out, usize::MAX)
            .expect("reference encoding");
        out.to_vec()
    }

    fn zero_copy(correlation_id: i32, version: i16, body: &FetchResponse) -> (Vec<u8>, usize) {
        zero_copy_split(correlation_id, version, body, &RecordParts::default())
    }

    fn zero_copy_split(
        correlation_id: i32,
        version: i16,
        body: &FetchResponse,
        split: &RecordParts,
    ) -> (Vec<u8>, usize) {
        let mut scratch = BytesMut::new();
        let mut parts = Vec::new();
        encode_fetch_frame(
            correlation_id,
            version,
            body,
            split,
            usize::MAX,
            &mut scratch,
            &mut parts,
        )
        .expect("a plain response takes the zero-copy path")
        .expect("fits");
        (parts.concat(), parts.len())
    }

    fn partition_strategy() -> impl Strategy<Value = PartitionData> {
        (
            any::<i32>(),
            any::<i16>(),
            any::<i64>(),
            any::<i64>(),
            any::<i64>(),
            proptest::option::of(proptest::collection::vec(
                (any::<i64>(), any::<i64>()),
                0..3,
            )),
            proptest::option::of(prop_oneof![
                proptest::collection::vec(any::<u8>(), 0..64),
                proptest::collection::vec(any::<u8>(), 4096..9000),
            ]),
        )
            .prop_map(|(index, error, hw, lso, start, aborted, records)| {
                PartitionData::default()
                    .with_partition_index(index)
                    .with_error_code(error)
                    .with_high_watermark(hw)
                    .with_last_stable_offset(lso)
                    .with_log_start_offset(start)
                    .with_preferred_read_replica(BrokerId(-1))
                    .with_aborted_transactions(aborted.map(|list| {
                        list.into_iter()
                            .map(|(producer, first)| {
                                AbortedTransaction::default()
                                    .with_producer_id(kafka_protocol::messages::ProducerId(
                                        producer,
                                    ))
                                    .with_first_offset(first)
                            })
                            .collect()
                    }))
                    .with_records(records.map(Bytes::from))
            })
    }

    fn response_strategy() -> impl Strategy<Value = FetchResponse> {
        let topic = (
            "[a-z.]{0,20}",
            proptest::collection::vec(partition_strategy(), 0..4),
        )
            .prop_map(|(name, partitions)| {
                FetchableTopicResponse::default()
                    .with_topic(TopicName(StrBytes::from_string(name)))
                    .with_partitions(partitions)
            });
        (
            any::<i32>(),
            any::<i16>(),
            proptest::collection::vec(topic, 0..4),
        )
            .prop_map(|(throttle, error, topics)| {
                FetchResponse::default()
                    .with_throttle_time_ms(throttle)
                    .with_error_code(error)
                    .with_responses(topics)
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        /// Proves: for every Fetch version the listener advertises, the zero-copy writer's parts
        /// are byte for byte the frame the generic encoder writes.
        #[test]
        fn zero_copy_frames_equal_the_generic_encoders(
            body in response_strategy(),
            version in 4i16..=12,
            correlation_id in any::<i32>(),
            cut_at in any::<usize>(),
        ) {
            let mut body = body;
            if version < 7 {
                body.session_id = 0;
            }
            let (bytes, _) = zero_copy(correlation_id, version, &body);
            prop_assert_eq!(&bytes, &reference(correlation_id, version, &body));
            // The same records, each partition's cut in pieces (as stored Kafka batches between
            // converted ones are): the same frame, by both writers.
            let (cut, split) = cut_records(&body, cut_at);
            let (split_bytes, _) = zero_copy_split(correlation_id, version, &cut, &split);
            prop_assert_eq!(&split_bytes, &bytes);
            let generic = KafkaResponse {
                correlation_id,
                api_key: ApiKey::Fetch,
                api_version: version,
                body: ResponseBody::Fetch(cut, None, split),
            };
            let mut out = BytesMut::new();
            generic.encode_frame(&mut out, usize::MAX).expect("generic");
            prop_assert_eq!(out.to_vec(), bytes);
        }
    }

    /// `body` with every partition's non-empty records moved into parts cut at
    /// `cut_at` (modulo their length) and at their middle, its own `records` left empty.
    fn cut_records(body: &FetchResponse, cut_at: usize) -> (FetchResponse, RecordParts) {
        let mut body = body.clone();
        let mut split = RecordParts::default();
        let partitions = body
            .responses
            .iter_mut()
            .flat_map(|topic| topic.partitions.iter_mut());
        for (index, partition) in partitions.enumerate() {
            let Some(records) = partition
                .records
                .clone()
                .filter(|records| records.len() > 1)
            else {
                continue;
            };
            let mut cuts = [cut_at % records.len(), records.len() / 2];
            cuts.sort_unstable();
            split.insert(
                index,
                vec![
                    records.slice(..cuts[0]),
                    records.slice(cuts[0]..cuts[1]),
                    records.slice(cuts[1]..),
                ],
            );
            partition.records = Some(Bytes::new());
        }
        (body, split)
    }

    /// Proves: large records are sent as parts of their own (not copied into the frame), small
    /// ones are copied.
    #[test]
    fn large_records_are_parts_of_their_own() {
        let big = Bytes::from(vec![7u8; 64 * 1024]);
        let small = Bytes::from_static(b"tiny");
        let body = FetchResponse::default().with_responses(vec![FetchableTopicResponse::default()
            .with_topic(TopicName(StrBytes::from_static_str("t")))
            .with_partitions(vec![
                PartitionData::default().with_records(Some(big.clone())),
                PartitionData::default().with_records(Some(small)),
            ])]);
        let mut scratch = BytesMut::new();
        let mut parts = Vec::new();
        encode_fetch_frame(
            1,
            12,
            &body,
            &RecordParts::default(),
            usize::MAX,
            &mut scratch,
            &mut parts,
        )
        .expect("plain")
        .expect("fits");
        assert_eq!(parts.len(), 3, "fields, the big records, the rest");
        assert_eq!(
            parts[1].as_ptr(),
            big.as_ptr(),
            "sent from where it is, not copied"
        );
    }

    /// Proves: a response with a tagged field (a current leader) is left to the generic encoder,
    /// and one over the frame limit is refused with nothing added.
    #[test]
    fn tagged_fields_and_oversized_frames_are_not_written_here() {
        let tagged =
            FetchResponse::default().with_responses(vec![FetchableTopicResponse::default()
                .with_partitions(vec![PartitionData::default().with_current_leader(
                    LeaderIdAndEpoch::default()
                        .with_leader_id(BrokerId(1))
                        .with_leader_epoch(3),
                )])]);
        let mut scratch = BytesMut::new();
        let mut parts = Vec::new();
        assert!(encode_fetch_frame(
            1,
            12,
            &tagged,
            &RecordParts::default(),
            usize::MAX,
            &mut scratch,
            &mut parts
        )
        .is_none());
        let big = FetchResponse::default()
            .with_responses(vec![FetchableTopicResponse::default().with_partitions(
                vec![PartitionData::default().with_records(Some(Bytes::from(vec![0u8; 10_000])))],
            )]);
        let result = encode_fetch_frame(
            1,
            12,
            &big,
            &RecordParts::default(),
            9_000,
            &mut scratch,
            &mut parts,
        );
        assert!(matches!(result, Some(Err(_))));
        assert!(parts.is_empty() && scratch.is_empty());
    }
}
