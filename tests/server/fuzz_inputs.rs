//! Fuzz-style property tests of every parser that sees untrusted bytes: the frame decoder
//! (`FrameCodec`), the request decoder (`RequestFrame::decode`), the record batch validator
//! (`batch::validate`, `decode_batch`, `decode_batches`) and the recovery scan built on it.
//!
//! Inputs are random bytes, mutated valid frames and batches, random truncations and random
//! length fields. Every case asserts: no panic, no hang (each case has a time budget), and only
//! typed errors. For the frame decoder it also asserts the memory rule that protects the server:
//! a declared length is validated before anything is reserved, and a partial frame reserves no
//! more than its validated length. The same checks run for minutes under libFuzzer in `fuzz/`
//! (`tools/fuzz`); inputs it ever finds crashing are kept at the end of this file.

use std::time::{Duration, Instant};

use crate::support::protocol_strategies;

use bytes::{Bytes, BytesMut};
use fencelog::batch::{
    decode_batch, decode_batches, stamp_base_offset, validate, BatchBuilder, BatchError,
    BatchHeader, CRC_START, HEADER_BYTES, MAX_RECORDS_PER_BATCH,
};
use fencelog::protocol::{
    ApiKey, ErrorCode, FrameCodec, ProtocolError, RequestFrame, ResponseFrame, FRAME_LENGTH_BYTES,
    REQUEST_HEADER_BYTES,
};
use fencelog::storage::scan_segment_bytes;
use proptest::prelude::*;
use protocol_strategies::*;
use tokio_util::codec::Decoder;

/// Longest one case may take. Generous for a slow CI machine; a parser that loops or goes
/// quadratic on a few kilobytes blows through it.
const CASE_BUDGET: Duration = Duration::from_secs(2);

fn within_budget<T>(what: &str, work: impl FnOnce() -> T) -> T {
    let started = Instant::now();
    let result = work();
    let elapsed = started.elapsed();
    assert!(elapsed < CASE_BUDGET, "{what} took {elapsed:?}");
    result
}

// ---------------------------------------------------------------------------
// Frame decoder
// ---------------------------------------------------------------------------

fn declared(buffer: &[u8]) -> Option<usize> {
    let prefix: [u8; 4] = buffer.get(..FRAME_LENGTH_BYTES)?.try_into().ok()?;
    Some(u32::from_be_bytes(prefix) as usize)
}

/// What one decode call did.
#[derive(Debug, PartialEq, Eq)]
enum Step {
    Frame(Bytes),
    NeedMore,
    Refused,
}

/// One decode call with every invariant checked (the same checks as `fuzz/frame_decode`).
///
/// `consumed` is how many bytes earlier frames took off the front of `buffer`'s allocation:
/// `reserve` may double the allocation (Vec's amortized growth, which counts those bytes), so a
/// partial frame may leave at most `max(2 * capacity + consumed, frame)` bytes of capacity, and
/// for a buffer that holds exactly its bytes (`consumed == 0`, capacity == length) that bound is
/// tight: the declared length adds nothing beyond the validated frame.
fn decode_once(codec: &mut FrameCodec, buffer: &mut BytesMut, consumed: usize) -> Step {
    let length = declared(buffer);
    let (len_before, capacity_before) = (buffer.len(), buffer.capacity());
    let snapshot = buffer.to_vec();
    match codec.decode(buffer) {
        Ok(Some(frame)) => {
            let length = length.expect("a frame needs a prefix");
            assert!(length > 0 && length <= codec.max_frame_bytes);
            assert_eq!(frame.len(), length);
            assert_eq!(
                &frame[..],
                &snapshot[FRAME_LENGTH_BYTES..FRAME_LENGTH_BYTES + length]
            );
            assert_eq!(buffer.len(), len_before - FRAME_LENGTH_BYTES - length);
            Step::Frame(frame)
        }
        Ok(None) => {
            assert_eq!(
                &buffer[..],
                &snapshot[..],
                "a partial frame is not consumed"
            );
            if let Some(length) = length {
                assert!(length > 0 && length <= codec.max_frame_bytes);
                let total = FRAME_LENGTH_BYTES + length;
                assert!(len_before < total);
                assert!(
                    buffer.capacity() <= (2 * capacity_before + consumed).max(total),
                    "reserved {} for a frame of {total} bytes (capacity before {capacity_before})",
                    buffer.capacity()
                );
            }
            Step::NeedMore
        }
        Err(error) => {
            assert_eq!(
                buffer.capacity(),
                capacity_before,
                "a refused frame reserves nothing"
            );
            let length = length.expect("errors come from the prefix");
            match error {
                ProtocolError::EmptyFrame => assert_eq!(length, 0),
                ProtocolError::FrameTooLarge { declared, max } => {
                    assert_eq!((declared, max), (length, codec.max_frame_bytes));
                    assert!(declared > max);
                }
                other => panic!("untyped framing error: {other}"),
            }
            Step::Refused
        }
    }
}

/// Feeds `stream` to a decoder in pieces of `chunk` bytes, as `Framed` would, and returns the
/// frames and whether the stream ended refused.
fn decode_stream(max_frame_bytes: usize, stream: &[u8], chunk: usize) -> (Vec<Bytes>, bool) {
    let mut codec = FrameCodec::new(max_frame_bytes);
    let mut buffer = BytesMut::new();
    let mut frames = Vec::new();
    let mut consumed = 0;
    for piece in stream.chunks(chunk.max(1)) {
        buffer.extend_from_slice(piece);
        loop {
            match decode_once(&mut codec, &mut buffer, consumed) {
                Step::Frame(frame) => {
                    consumed += FRAME_LENGTH_BYTES + frame.len();
                    frames.push(frame);
                }
                Step::NeedMore => break,
                Step::Refused => return (frames, true),
            }
        }
    }
    (frames, false)
}

/// Decodes `stream` from a buffer holding exactly it (capacity == length), rebuilt that way
/// after every frame, so the reservation bound of `decode_once` is tight.
fn decode_exact(max_frame_bytes: usize, stream: &[u8]) -> (Vec<Bytes>, bool) {
    let mut codec = FrameCodec::new(max_frame_bytes);
    let mut buffer = BytesMut::from(stream);
    let mut frames = Vec::new();
    loop {
        assert_eq!(buffer.capacity(), buffer.len());
        match decode_once(&mut codec, &mut buffer, 0) {
            Step::Frame(frame) => {
                frames.push(frame);
                buffer = BytesMut::from(&buffer[..]);
            }
            Step::NeedMore => return (frames, false),
            Step::Refused => return (frames, true),
        }
    }
}

/// A length prefix that is interesting to a decoder: 0, tiny, around the limit, huge.
fn arb_declared(max_frame_bytes: usize) -> impl Strategy<Value = u32> {
    let max = u32::try_from(max_frame_bytes).unwrap_or(u32::MAX);
    prop_oneof![
        Just(0),
        1u32..16,
        Just(max),
        Just(max.saturating_add(1)),
        Just(u32::MAX),
        Just(0x8000_0000),
        any::<u32>(),
        0u32..=max,
    ]
}

/// A stream of frames whose prefixes come from `arb_declared` and whose bodies may be shorter or
/// longer than declared.
fn arb_lying_stream() -> impl Strategy<Value = (usize, Vec<u8>, usize)> {
    prop_oneof![Just(0usize), Just(8), Just(100), Just(4096)].prop_flat_map(|max| {
        let frame = (
            arb_declared(max),
            proptest::collection::vec(any::<u8>(), 0..200),
        );
        (
            Just(max),
            proptest::collection::vec(frame, 1..6).prop_map(|frames| {
                let mut stream = Vec::new();
                for (declared, body) in frames {
                    stream.extend_from_slice(&declared.to_be_bytes());
                    stream.extend_from_slice(&body);
                }
                stream
            }),
            1usize..64,
        )
    })
}

/// A valid request of every API, with a real batch in produces.
fn arb_request() -> impl Strategy<Value = RequestFrame> {
    (any::<u32>(), arb_request_with(arb_batch().boxed()))
        .prop_map(|(correlation_id, request)| RequestFrame::new(correlation_id, request))
}

fn encode(frame: &RequestFrame) -> Vec<u8> {
    let mut buffer = BytesMut::new();
    frame.encode(&mut buffer).expect("encodable request");
    buffer.to_vec()
}

/// A change to bytes: a flipped byte, a rewritten big-endian `u32` (length fields are `u16`/`u32`),
/// an insertion or a deletion.
#[derive(Debug, Clone)]
enum Mutation {
    Set(usize, u8),
    Word(usize, u32),
    Insert(usize, u8),
    Delete(usize),
}

fn arb_mutations() -> impl Strategy<Value = Vec<Mutation>> {
    let one = prop_oneof![
        (any::<usize>(), any::<u8>()).prop_map(|(at, value)| Mutation::Set(at, value)),
        (
            any::<usize>(),
            prop_oneof![
                Just(0u32),
                Just(u32::MAX),
                Just(0xFFFF),
                Just(0x7FFF_FFFF),
                any::<u32>()
            ]
        )
            .prop_map(|(at, value)| Mutation::Word(at, value)),
        (any::<usize>(), any::<u8>()).prop_map(|(at, value)| Mutation::Insert(at, value)),
        any::<usize>().prop_map(Mutation::Delete),
    ];
    proptest::collection::vec(one, 1..5)
}

fn mutate(bytes: &mut Vec<u8>, mutations: &[Mutation]) {
    for mutation in mutations {
        if bytes.is_empty() {
            return;
        }
        let len = bytes.len();
        match *mutation {
            Mutation::Set(at, value) => bytes[at % len] = value,
            Mutation::Word(at, value) => {
                let at = at % len;
                for (i, byte) in value.to_be_bytes().iter().enumerate() {
                    if let Some(slot) = bytes.get_mut(at + i) {
                        *slot = *byte;
                    }
                }
            }
            Mutation::Insert(at, value) => bytes.insert(at % (len + 1), value),
            Mutation::Delete(at) => {
                bytes.remove(at % len);
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Request decoder
// ---------------------------------------------------------------------------

/// Decodes a frame body and checks the outcome is typed (the same checks as
/// `fuzz/request_decode`): a decoded request re-encodes to itself, a refused one is answerable.
fn check_request_body(body: &[u8]) {
    let frame = Bytes::copy_from_slice(body);
    match RequestFrame::decode(frame.clone()) {
        Ok(request) => {
            let encoded = encode(&request);
            let (frames, refused) = decode_exact(usize::MAX, &encoded);
            assert!(!refused && frames.len() == 1);
            assert_eq!(
                RequestFrame::decode(frames[0].clone()).as_ref(),
                Ok(&request)
            );
        }
        Err(error) => {
            assert_eq!(
                error.correlation_id.is_some(),
                body.len() >= REQUEST_HEADER_BYTES
            );
            assert_eq!(
                error.must_close_connection(),
                body.len() < REQUEST_HEADER_BYTES
            );
            assert!(matches!(
                error.error_code(),
                ErrorCode::UnknownApi | ErrorCode::UnsupportedVersion | ErrorCode::InvalidRequest
            ));
            let response = error.to_response();
            assert_eq!(response.correlation_id, error.correlation_id.unwrap_or(0));
            assert!(!error.detail.is_empty());
            let mut encoded = BytesMut::new();
            response
                .encode(&mut encoded)
                .expect("the error answer encodes");
        }
    }
    for api in ApiKey::ALL {
        let _ = ResponseFrame::decode(api, frame.clone());
    }
}

/// A request header for a real or almost-real API, followed by random bytes.
fn arb_header_and_noise() -> impl Strategy<Value = Vec<u8>> {
    (
        prop_oneof![0u16..9, Just(9), Just(u16::MAX), any::<u16>()],
        prop_oneof![Just(0u16), Just(1), any::<u16>()],
        any::<u32>(),
        proptest::collection::vec(any::<u8>(), 0..120),
    )
        .prop_map(|(api, version, correlation_id, noise)| {
            let mut body = Vec::with_capacity(8 + noise.len());
            body.extend_from_slice(&api.to_be_bytes());
            body.extend_from_slice(&version.to_be_bytes());
            body.extend_from_slice(&correlation_id.to_be_bytes());
            body.extend_from_slice(&noise);
            body
        })
}

// ---------------------------------------------------------------------------
// Batch validator
// ---------------------------------------------------------------------------

type RecordSpec = (
    i64,
    Option<Vec<u8>>,
    Option<Vec<u8>>,
    Vec<(String, Vec<u8>)>,
);

fn arb_record() -> impl Strategy<Value = RecordSpec> {
    (
        0i64..10_000,
        proptest::option::of(proptest::collection::vec(any::<u8>(), 0..12)),
        proptest::option::of(proptest::collection::vec(any::<u8>(), 0..40)),
        proptest::collection::vec(
            ("[a-z]{0,4}", proptest::collection::vec(any::<u8>(), 0..6)),
            0..3,
        ),
    )
}

fn build_batch(epoch: u64, records: &[RecordSpec]) -> Bytes {
    let mut builder = BatchBuilder::new(epoch);
    for (timestamp, key, value, headers) in records {
        let headers: Vec<(&str, &[u8])> = headers
            .iter()
            .map(|(name, value)| (name.as_str(), value.as_slice()))
            .collect();
        builder.push_with_headers(*timestamp, key.as_deref(), value.as_deref(), &headers);
    }
    builder.finish()
}

fn arb_batch() -> impl Strategy<Value = Bytes> {
    (1u64..1_000, proptest::collection::vec(arb_record(), 1..6))
        .prop_map(|(epoch, records)| build_batch(epoch, &records))
}

/// Writes the real length into the header and recomputes the CRC, so that a mutated batch gets
/// past the CRC and exercises the structural checks behind it.
fn fix_up_crc(bytes: &mut [u8]) {
    if bytes.len() < HEADER_BYTES {
        return;
    }
    let length = bytes.len() as u32;
    bytes[8..12].copy_from_slice(&length.to_be_bytes());
    let crc = crc32fast::hash(&bytes[CRC_START..]);
    bytes[12..16].copy_from_slice(&crc.to_be_bytes());
}

/// Validates and decodes a candidate batch and checks the outcome (the same checks as
/// `fuzz/batch_validate`). Returns the validation result.
fn check_batch(bytes: &[u8], max: usize) -> Result<BatchHeader, BatchError> {
    let shared = Bytes::copy_from_slice(bytes);
    let result = validate(bytes, max);
    match &result {
        Ok(header) => {
            assert_eq!(header.batch_length as usize, bytes.len());
            assert!(bytes.len() <= max && bytes.len() >= HEADER_BYTES);
            assert!((1..=MAX_RECORDS_PER_BATCH).contains(&header.record_count));
            assert!(header.first_timestamp <= header.max_timestamp);
            match decode_batch(&shared) {
                Ok(records) => {
                    assert_eq!(records.len(), header.record_count as usize);
                    for (index, record) in records.iter().enumerate() {
                        assert_eq!(record.offset, header.base_offset + index as u64);
                        assert_eq!(record.epoch, header.epoch);
                        assert!((header.first_timestamp..=header.max_timestamp)
                            .contains(&record.timestamp));
                    }
                }
                // Only a base offset (outside the CRC) whose records would run past u64::MAX.
                Err(BatchError::OffsetOverflow { .. }) => assert!(header
                    .base_offset
                    .checked_add(u64::from(header.record_count))
                    .is_none()),
                Err(other) => panic!("a valid batch does not decode: {other}"),
            }
            let mut stamped = bytes.to_vec();
            stamp_base_offset(&mut stamped, 42);
            assert_eq!(
                validate(&stamped, max)
                    .expect("stamping keeps it valid")
                    .base_offset,
                42
            );
        }
        Err(error) => {
            assert!(!error.to_string().is_empty());
            if max == usize::MAX {
                assert!(
                    decode_batch(&shared).is_err(),
                    "decode accepted what validate refused"
                );
            }
        }
    }
    let _ = decode_batches(shared);
    let scanned = scan_segment_bytes(bytes, 0, 4096);
    assert!(scanned.valid_bytes <= bytes.len() && scanned.data_end <= bytes.len());
    // Without an invalid batch the scan covers all the data (a batch may end in zero bytes).
    assert!(scanned.invalid.is_some() || scanned.valid_bytes >= scanned.data_end);
    result
}

proptest! {
    #![proptest_config(ProptestConfig {
        // PROPTEST_CASES=100000 for a long run.
        cases: std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|cases| cases.parse().ok())
            .unwrap_or(1000),
        // Failures are kept by hand at the end of this file, as regressions with a name.
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// Proves: random byte streams fed in random pieces under random frame limits never make the
    /// decoder panic, loop or fail with anything but a typed framing error, and it reserves
    /// memory only for validated lengths.
    #[test]
    fn random_streams_decode_to_typed_results(
        stream in proptest::collection::vec(any::<u8>(), 0..600),
        max in prop_oneof![0usize..64, Just(4096usize), Just(16 << 20)],
        chunk in 1usize..80,
    ) {
        within_budget("random stream", || {
            decode_stream(max, &stream, chunk);
            decode_exact(max, &stream);
        });
    }

    /// Proves: length prefixes of 0, around the limit and up to 4 GiB, followed by bodies shorter
    /// or longer than declared, give exactly the frames they declare, or a typed refusal at the
    /// first bad prefix, and never a reservation beyond the validated length; chunking does not
    /// change the outcome.
    #[test]
    fn random_length_fields_are_validated_before_reserving((max, stream, chunk) in arb_lying_stream()) {
        within_budget("lying stream", || {
            let whole = decode_exact(max, &stream);
            let chunked = decode_stream(max, &stream, chunk);
            assert_eq!(whole, chunked, "chunking changed the outcome");
        });
    }

    /// Proves: valid request frames, pipelined and then mutated (bytes set, length words
    /// rewritten, bytes inserted or deleted) or truncated at a random point, still frame into
    /// typed results, and every body that comes out decodes to a typed request or error.
    #[test]
    fn mutated_and_truncated_frames_stay_typed(
        frames in proptest::collection::vec(arb_request(), 1..4),
        mutations in arb_mutations(),
        cut in any::<prop::sample::Index>(),
        chunk in 1usize..64,
    ) {
        within_budget("mutated frames", || {
            let mut stream: Vec<u8> = frames.iter().flat_map(encode).collect();
            let (clean, refused) = decode_exact(1 << 16, &stream);
            assert!(!refused);
            for (frame, body) in frames.iter().zip(&clean) {
                assert_eq!(RequestFrame::decode(body.clone()).as_ref(), Ok(frame));
            }
            mutate(&mut stream, &mutations);
            stream.truncate(cut.index(stream.len() + 1));
            let (bodies, _) = decode_stream(1 << 16, &stream, chunk);
            for body in &bodies {
                check_request_body(body);
            }
        });
    }

    /// Proves: random frame bodies, with or without a plausible header, decode to a request that
    /// round-trips or to an error with the right code, correlation id and closing decision.
    #[test]
    fn random_request_bodies_decode_to_typed_results(
        body in prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..64),
            arb_header_and_noise(),
        ],
    ) {
        within_budget("request body", || check_request_body(&body));
    }

    /// Proves: a valid request truncated anywhere, or with a mutated body, is refused with a
    /// typed error or decodes to a request that round-trips; never a panic.
    #[test]
    fn mutated_request_bodies_decode_to_typed_results(
        frame in arb_request(),
        mutations in arb_mutations(),
        cut in any::<prop::sample::Index>(),
    ) {
        within_budget("mutated body", || {
            let encoded = encode(&frame);
            let body = &encoded[FRAME_LENGTH_BYTES..];
            check_request_body(&body[..cut.index(body.len() + 1)]);
            let mut mutated = body.to_vec();
            mutate(&mut mutated, &mutations);
            check_request_body(&mutated);
        });
    }

    /// Proves: random bytes (with or without a recomputed CRC) are refused by the batch validator
    /// with a typed error, or are a batch that decodes consistently; never a panic.
    #[test]
    fn random_batches_are_refused_or_consistent(
        mut bytes in proptest::collection::vec(any::<u8>(), 0..300),
        fix_crc in any::<bool>(),
    ) {
        if fix_crc {
            fix_up_crc(&mut bytes);
        }
        within_budget("random batch", || check_batch(&bytes, usize::MAX)).ok();
    }

    /// Proves: a valid batch with mutations is refused unless the mutation only touched the
    /// base offset (outside the CRC); with the CRC recomputed after mutating, the structural
    /// checks behind the CRC refuse anything a consumer could not parse. Truncations are refused.
    #[test]
    fn mutated_batches_are_refused_or_consistent(
        batch in arb_batch(),
        mutations in arb_mutations(),
        cut in any::<prop::sample::Index>(),
        max in prop_oneof![Just(usize::MAX), 0usize..400],
    ) {
        within_budget("mutated batch", || {
            let header = check_batch(&batch, usize::MAX).expect("built batches are valid");
            let cut = cut.index(batch.len());
            let truncated = check_batch(&batch[..cut], max);
            assert!(truncated.is_err(), "a batch cut at {cut} of {} passed", batch.len());
            let mut mutated = batch.to_vec();
            mutate(&mut mutated, &mutations);
            let changed_protected = mutated.len() != batch.len() || mutated[8..] != batch[8..];
            let result = check_batch(&mutated, max);
            if changed_protected {
                assert!(result.is_err(), "mutation {mutations:?} passed validation");
            } else if batch.len() <= max {
                assert_eq!(result.expect("base offset is free").record_count, header.record_count);
            }
            fix_up_crc(&mut mutated);
            let _ = check_batch(&mutated, max);
        });
    }

    /// Proves: the recovery scan over a run of valid, stamped batches with one byte damaged
    /// stops at a batch boundary at or before the damage and never reports more valid bytes than
    /// it was given.
    #[test]
    fn scan_stops_at_a_batch_boundary_before_the_damage(
        batches in proptest::collection::vec(proptest::collection::vec(arb_record(), 1..6), 1..6),
        damage in any::<prop::sample::Index>(),
        value in any::<u8>(),
    ) {
        within_budget("scan", || {
            let mut log = Vec::new();
            let mut boundaries = vec![0];
            let mut next_offset = 0u64;
            // Epochs never decrease along a log; the scan checks that too.
            for (epoch, records) in (1..).zip(&batches) {
                let mut stamped = build_batch(epoch, records).to_vec();
                stamp_base_offset(&mut stamped, next_offset);
                next_offset += u64::from(BatchHeader::parse(&stamped).unwrap().record_count);
                log.extend_from_slice(&stamped);
                boundaries.push(log.len());
            }
            let clean = scan_segment_bytes(&log, 0, 4096);
            assert_eq!((clean.valid_bytes, clean.next_offset), (log.len(), next_offset));
            let at = damage.index(log.len());
            if log[at] == value {
                return;
            }
            log[at] = value;
            let damaged = scan_segment_bytes(&log, 0, 4096);
            assert!(damaged.valid_bytes <= at, "scan kept the damaged byte {at}");
            assert!(boundaries.contains(&damaged.valid_bytes));
            assert!(damaged.invalid.is_some());
        });
    }
}

// ---------------------------------------------------------------------------
// Fixed cases and regressions
// ---------------------------------------------------------------------------

/// Proves: a 4 GiB length prefix is refused after 4 bytes, before any reservation, whatever
/// the limit; and a prefix at exactly the limit reserves at most the frame.
#[test]
fn huge_length_prefixes_are_refused_without_reserving() {
    for max in [0, 1, 4096, 16 << 20] {
        let mut buffer = BytesMut::from(&[0xFF, 0xFF, 0xFF, 0xFF][..]);
        let capacity = buffer.capacity();
        assert_eq!(
            decode_once(&mut FrameCodec::new(max), &mut buffer, 0),
            Step::Refused
        );
        assert_eq!(buffer.capacity(), capacity);
    }
    let mut at_limit = BytesMut::from(&4096u32.to_be_bytes()[..]);
    assert_eq!(
        decode_once(&mut FrameCodec::new(4096), &mut at_limit, 0),
        Step::NeedMore
    );
    assert!(at_limit.capacity() <= 4 + 4096);
}

/// Found by `tools/fuzz` (batch_validate, crash-319d6a8b): a valid batch of two records whose base
/// offset, outside the CRC, is `u64::MAX`. Proves that decoding refuses it with `OffsetOverflow`
/// instead of numbering its records past `u64::MAX` (a panic with overflow checks, offsets that
/// wrap to 0 without), and that the validator and scan stay typed on it.
#[test]
fn regression_base_offset_near_u64_max_is_refused_when_decoding() {
    let mut bytes = hex_bytes(
        "ffffffffffffffff0000006aaf38c3fb0100000000000000000000030000000200000000000003e8\
         00000000000003ea0000001e00000000000000036b65790000000576616c75650001000168000000\
         01780000001400000002ffffffff000000067365636f6e640000",
    );
    fix_up_crc(&mut bytes);
    let header = check_batch(&bytes, usize::MAX).expect("valid apart from its base offset");
    assert_eq!((header.base_offset, header.record_count), (u64::MAX, 2));
    assert_eq!(
        decode_batch(&Bytes::from(bytes.clone())),
        Err(BatchError::OffsetOverflow {
            base_offset: u64::MAX,
            record_count: 2
        })
    );
    assert!(decode_batches(Bytes::from(bytes)).is_err());
}

fn hex_bytes(hex: &str) -> Vec<u8> {
    let digits: Vec<u8> = hex.bytes().filter(u8::is_ascii_hexdigit).collect();
    digits
        .chunks(2)
        .map(|pair| u8::from_str_radix(std::str::from_utf8(pair).unwrap(), 16).unwrap())
        .collect()
}
