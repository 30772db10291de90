//! Tests of the wire protocol as a black box: framing, round trips of every
//! request and response, robustness against arbitrary and truncated input,
//! and the worked hex examples of `docs/protocol.md`.
//!
//! The hex examples are checked in both directions — our encoder must produce
//! exactly the bytes printed in the document, and the document must contain
//! exactly those bytes — so the contract a third-party client is written
//! against cannot drift from the implementation unnoticed.

use crate::support::protocol_strategies;

use crate::support::doc_examples;

use bytes::{BufMut, Bytes, BytesMut};
use doc_examples::*;
use fencelog::protocol::{
    ApiKey, ApiVersionRange, ErrorCode, ErrorResponse, FrameCodec, ProtocolError, Request,
    RequestDecodeErrorKind, RequestFrame, Response, ResponseFrame, TopicMetadata,
    DEFAULT_MAX_FRAME_BYTES,
};
use futures::{SinkExt, StreamExt};
use proptest::prelude::*;
use protocol_strategies::*;
use tokio::io::AsyncWriteExt;
use tokio_util::codec::{Decoder, Encoder, Framed};

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

/// What decoding an encoded Fetch response yields: the batches as one chunk.
fn normalize(frame: ResponseFrame) -> ResponseFrame {
    match frame.result {
        Ok(Response::Fetch {
            high_watermark,
            log_start_offset,
            batches,
            committed,
        }) => {
            let joined: Vec<u8> = batches.iter().flat_map(|b| b.iter().copied()).collect();
            let batches = if joined.is_empty() {
                Vec::new()
            } else {
                vec![Bytes::from(joined)]
            };
            ResponseFrame::ok(
                frame.correlation_id,
                Response::Fetch {
                    high_watermark,
                    log_start_offset,
                    batches,
                    committed,
                },
            )
        }
        _ => frame,
    }
}

// ---------------------------------------------------------------------------
// Strategies
// ---------------------------------------------------------------------------

fn arb_bytes() -> impl Strategy<Value = Bytes> {
    proptest::collection::vec(any::<u8>(), 0..80).prop_map(Bytes::from)
}

fn arb_request() -> impl Strategy<Value = Request> {
    arb_request_with(arb_bytes().boxed())
}

fn arb_response() -> impl Strategy<Value = Response> {
    let range = (any::<u16>(), any::<u16>(), any::<u16>()).prop_map(
        |(api_key, min_version, max_version)| ApiVersionRange {
            api_key,
            min_version,
            max_version,
        },
    );
    let topic =
        (arb_string(), any::<u32>(), arb_config()).prop_map(|(name, partitions, config)| {
            TopicMetadata {
                name,
                partitions,
                config,
            }
        });
    prop_oneof![
        (arb_string(), proptest::collection::vec(range, 0..12))
            .prop_map(|(server, apis)| Response::ApiVersions { server, apis }),
        Just(Response::CreateTopic),
        proptest::collection::vec(topic, 0..5).prop_map(|topics| Response::Metadata {
            topics,
            cluster: None,
        }),
        (any::<u64>(), any::<u128>(), any::<u64>()).prop_map(|(epoch, lease_id, ttl_ms)| {
            Response::AcquireLease {
                epoch,
                lease_id,
                ttl_ms,
            }
        }),
        (any::<u64>(), any::<u64>())
            .prop_map(|(epoch, ttl_ms)| Response::RenewLease { epoch, ttl_ms }),
        Just(Response::ReleaseLease),
        (any::<u64>(), any::<u64>(), any::<u64>()).prop_map(
            |(base_offset, last_offset, log_end_offset)| Response::Produce {
                base_offset,
                last_offset,
                log_end_offset,
            }
        ),
        (
            any::<u64>(),
            any::<u64>(),
            proptest::collection::vec(arb_bytes(), 0..4)
        )
            .prop_map(
                |(high_watermark, log_start_offset, batches)| Response::Fetch {
                    high_watermark,
                    log_start_offset,
                    batches,
                    // Version 0: the round trip decodes every response in version 0.
                    committed: None,
                }
            ),
        (any::<u64>(), any::<u64>(), any::<u64>()).prop_map(|(earliest, latest, epoch)| {
            Response::ListOffsets {
                earliest,
                latest,
                epoch,
                offset_for_timestamp: None,
            }
        }),
        (any::<i64>(), any::<i16>()).prop_map(|(producer_id, producer_epoch)| {
            Response::InitTransaction {
                producer_id,
                producer_epoch,
            }
        }),
        Just(Response::AddToTransaction),
        Just(Response::EndTransaction),
        Just(Response::VerifyTransaction),
        Just(Response::TxnOffsetCommit),
        Just(Response::EndTxnOffsets),
    ]
}

fn arb_error() -> impl Strategy<Value = ErrorResponse> {
    (
        proptest::sample::select(&ErrorCode::ALL[1..]),
        arb_string(),
        any::<u64>(),
        any::<u64>(),
    )
        .prop_map(|(code, message, epoch, current_epoch)| {
            ErrorResponse::with_epochs(code, message, epoch, current_epoch)
        })
}

fn arb_response_frame() -> impl Strategy<Value = (ApiKey, ResponseFrame)> {
    prop_oneof![
        (any::<u32>(), arb_response())
            .prop_map(|(id, response)| { (response.api_key(), ResponseFrame::ok(id, response)) }),
        (
            any::<u32>(),
            proptest::sample::select(&ApiKey::ALL[..]),
            arb_error()
        )
            .prop_map(|(id, api, error)| (api, ResponseFrame::error(id, error))),
    ]
}

fn arb_request_frame() -> impl Strategy<Value = RequestFrame> {
    (any::<u32>(), arb_request()).prop_map(|(id, request)| RequestFrame::new(id, request))
}

// ---------------------------------------------------------------------------
// Properties
// ---------------------------------------------------------------------------

proptest! {
    #![proptest_config(crate::support::proptest_config(512))]

    #[test]
    fn requests_round_trip(frame in arb_request_frame()) {
        let body = single_frame(encode_request(&frame));
        prop_assert_eq!(RequestFrame::decode(body), Ok(frame));
    }

    /// The vectored encoding (header chunks plus a produce's batch as it is) is byte for byte
    /// the plain encoding.
    #[test]
    fn vectored_request_encoding_matches_the_plain_one(frame in arb_request_frame()) {
        let mut plain = BytesMut::new();
        let plain_result = frame.encode(&mut plain);
        let (mut scratch, mut parts) = (BytesMut::new(), Vec::new());
        let vectored_result = frame.encode_vectored(&mut scratch, &mut parts);
        prop_assert_eq!(plain_result.is_ok(), vectored_result.is_ok());
        prop_assert_eq!(parts.concat(), plain.to_vec());
    }

    #[test]
    fn responses_round_trip((api, frame) in arb_response_frame()) {
        let body = single_frame(encode_response(&frame));
        let decoded = ResponseFrame::decode(api, body).expect("decodes");
        prop_assert_eq!(decoded, normalize(frame));
    }

    #[test]
    fn decoding_arbitrary_frames_never_panics(body in proptest::collection::vec(any::<u8>(), 0..200)) {
        let body = Bytes::from(body);
        let _ = RequestFrame::decode(body.clone());
        for api in ApiKey::ALL {
            let _ = ResponseFrame::decode(api, body.clone());
        }
    }

    #[test]
    fn decoding_arbitrary_streams_never_panics(
        stream in proptest::collection::vec(any::<u8>(), 0..300),
        max in 0usize..64,
    ) {
        let mut codec = FrameCodec::new(max);
        let mut buf = BytesMut::from(&stream[..]);
        while let Ok(Some(frame)) = codec.decode(&mut buf) {
            prop_assert!(!frame.is_empty() && frame.len() <= max);
            let _ = RequestFrame::decode(frame.clone());
            let _ = ResponseFrame::decode(ApiKey::Metadata, frame);
        }
    }

    #[test]
    fn mutated_requests_never_panic(
        frame in arb_request_frame(),
        flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..4),
    ) {
        let mut bytes = single_frame(encode_request(&frame)).to_vec();
        for (at, value) in flips {
            let len = bytes.len();
            bytes[at % len] = value;
        }
        let _ = RequestFrame::decode(Bytes::from(bytes));
    }

    #[test]
    fn truncated_requests_are_refused_with_what_was_readable(
        frame in arb_request_frame(),
        cut in any::<prop::sample::Index>(),
    ) {
        let encoded = encode_request(&frame);
        let body = single_frame(encoded.clone());
        let cut = cut.index(body.len());
        // The framing layer waits for the rest of a truncated frame ...
        let mut partial = BytesMut::from(&encoded[..FRAME_PREFIX + cut]);
        prop_assert_eq!(FrameCodec::default().decode(&mut partial).ok(), Some(None));
        // ... and a frame whose body was cut short is refused, not misread.
        let err = RequestFrame::decode(body.slice(..cut)).unwrap_err();
        prop_assert_eq!(&err.kind, &RequestDecodeErrorKind::Truncated);
        prop_assert_eq!(err.error_code(), ErrorCode::InvalidRequest);
        if cut >= 8 {
            prop_assert_eq!(err.correlation_id, Some(frame.correlation_id));
            prop_assert_eq!(err.to_response().correlation_id, frame.correlation_id);
            prop_assert!(!err.must_close_connection());
        } else {
            prop_assert_eq!(err.correlation_id, None);
            prop_assert!(err.must_close_connection());
        }
    }

    #[test]
    fn truncated_responses_are_refused((api, frame) in arb_response_frame(), cut in any::<prop::sample::Index>()) {
        let body = single_frame(encode_response(&frame));
        let cut = cut.index(body.len());
        let result = ResponseFrame::decode(api, body.slice(..cut));
        prop_assert!(matches!(result, Err(ProtocolError::Malformed(_))), "{:?}", result);
    }

    #[test]
    fn trailing_bytes_are_refused(frame in arb_request_frame(), extra in 1usize..4) {
        let mut body = single_frame(encode_request(&frame)).to_vec();
        body.extend(std::iter::repeat_n(0u8, extra));
        let err = RequestFrame::decode(Bytes::from(body)).unwrap_err();
        prop_assert_eq!(&err.kind, &RequestDecodeErrorKind::TrailingBytes);
        prop_assert_eq!(err.correlation_id, Some(frame.correlation_id));
    }
}

const FRAME_PREFIX: usize = 4;

// ---------------------------------------------------------------------------
// Framing
// ---------------------------------------------------------------------------

#[test]
fn max_length_is_refused_before_reserving() {
    let mut codec = FrameCodec::default();
    let mut buf = BytesMut::with_capacity(16);
    buf.put_u32(0xFFFF_FFFF);
    buf.put_slice(&[0, 8, 0, 0]);
    let capacity = buf.capacity();
    match codec.decode(&mut buf) {
        Err(ProtocolError::FrameTooLarge { declared, max }) => {
            assert_eq!(declared, 0xFFFF_FFFF);
            assert_eq!(max, DEFAULT_MAX_FRAME_BYTES);
        }
        other => panic!("expected FrameTooLarge, got {other:?}"),
    }
    assert_eq!(buf.capacity(), capacity, "nothing was reserved");
    let message = ProtocolError::FrameTooLarge {
        declared: 0xFFFF_FFFF,
        max: DEFAULT_MAX_FRAME_BYTES,
    }
    .to_string();
    assert!(
        message.starts_with("frame of 4294967295 bytes exceeds the maximum of 16777216"),
        "{message}"
    );
}

#[test]
fn one_past_the_limit_is_refused_and_the_limit_accepted() {
    let mut codec = FrameCodec::new(10);
    let mut buf = BytesMut::new();
    buf.put_u32(11);
    assert!(matches!(
        codec.decode(&mut buf),
        Err(ProtocolError::FrameTooLarge {
            declared: 11,
            max: 10
        })
    ));
    let mut buf = BytesMut::new();
    buf.put_u32(10);
    buf.put_slice(&[7; 10]);
    assert_eq!(codec.decode(&mut buf).unwrap().unwrap().len(), 10);
}

#[test]
fn zero_length_frame_is_an_error() {
    let mut buf = BytesMut::from(&[0u8, 0, 0, 0, 1, 2][..]);
    assert!(matches!(
        FrameCodec::default().decode(&mut buf),
        Err(ProtocolError::EmptyFrame)
    ));
}

#[test]
fn partial_frames_return_none_until_complete() {
    let frame = RequestFrame::new(
        5,
        Request::Produce {
            topic: "orders".into(),
            partition: 3,
            batch: Bytes::from_static(b"0123456789abcdef"),
            acks: None,
        },
    );
    let encoded = encode_request(&frame);
    let mut codec = FrameCodec::default();
    let mut buf = BytesMut::new();
    for (i, byte) in encoded.iter().enumerate() {
        buf.put_u8(*byte);
        let decoded = codec.decode(&mut buf).expect("no error on a valid prefix");
        if i + 1 < encoded.len() {
            assert!(decoded.is_none(), "complete after only {} bytes", i + 1);
        } else {
            let body = decoded.expect("complete frame");
            assert_eq!(RequestFrame::decode(body), Ok(frame.clone()));
        }
    }
    assert!(buf.is_empty());
}

#[test]
fn pipelined_frames_in_one_buffer_decode_separately() {
    let first = RequestFrame::new(1, Request::ApiVersions);
    let second = RequestFrame::new(
        2,
        Request::ListOffsets {
            topic: "t".into(),
            partition: 0,
            timestamp: None,
        },
    );
    let mut buf = BytesMut::new();
    let mut codec = FrameCodec::default();
    codec.encode(first.clone(), &mut buf).unwrap();
    codec.encode(second.clone(), &mut buf).unwrap();
    buf.put_slice(&[0, 0]); // the start of a third frame
    let a = codec.decode(&mut buf).unwrap().unwrap();
    let b = codec.decode(&mut buf).unwrap().unwrap();
    assert_eq!(codec.decode(&mut buf).unwrap(), None);
    assert_eq!(RequestFrame::decode(a), Ok(first));
    assert_eq!(RequestFrame::decode(b), Ok(second));
    assert_eq!(&buf[..], &[0, 0]);
}

#[test]
fn produce_batch_is_a_zero_copy_slice_of_the_frame() {
    let frame = RequestFrame::new(
        9,
        Request::Produce {
            topic: "t".into(),
            partition: 0,
            batch: Bytes::from_static(&[0xAB; 64]),
            acks: None,
        },
    );
    let body = single_frame(encode_request(&frame));
    let range = body.as_ptr_range();
    let Ok(RequestFrame {
        request: Request::Produce { batch, .. },
        ..
    }) = RequestFrame::decode(body.clone())
    else {
        panic!("not a produce request");
    };
    assert!(range.contains(&batch.as_ptr()), "batch was copied");
}

#[tokio::test]
async fn framed_pipelining_over_a_stream() {
    let (client_io, server_io) = tokio::io::duplex(64);
    let mut client = Framed::new(client_io, FrameCodec::default());
    let mut server = Framed::new(server_io, FrameCodec::default());

    let server_task = tokio::spawn(async move {
        while let Some(frame) = server.next().await {
            let frame = frame.expect("valid frame");
            let answer = match RequestFrame::decode(frame) {
                Ok(req) => ResponseFrame::ok(
                    req.correlation_id,
                    Response::ListOffsets {
                        earliest: 0,
                        latest: u64::from(req.correlation_id) * 10,
                        epoch: 1,
                        offset_for_timestamp: None,
                    },
                ),
                Err(err) => err.to_response(),
            };
            server.send(answer).await.expect("send");
        }
    });

    for id in 1..=3u32 {
        let request = Request::ListOffsets {
            topic: format!("topic-{id}"),
            partition: id,
            timestamp: None,
        };
        client
            .send(RequestFrame::new(id, request))
            .await
            .expect("send");
    }
    // A request with an unknown api key: answered, connection stays usable.
    let mut raw = BytesMut::new();
    raw.put_u32(8);
    raw.put_u16(999);
    raw.put_u16(0);
    raw.put_u32(4);
    client.get_mut().write_all_buf(&mut raw).await.unwrap();

    for id in 1..=3u32 {
        let body = client.next().await.expect("response").expect("frame");
        assert_eq!(ResponseFrame::peek_correlation_id(&body), Some(id));
        let response = ResponseFrame::decode(ApiKey::ListOffsets, body).unwrap();
        assert_eq!(
            response.result,
            Ok(Response::ListOffsets {
                earliest: 0,
                latest: u64::from(id) * 10,
                epoch: 1,
                offset_for_timestamp: None,
            })
        );
    }
    let body = client.next().await.expect("response").expect("frame");
    let response = ResponseFrame::decode(ApiKey::ListOffsets, body).unwrap();
    assert_eq!(response.correlation_id, 4);
    assert_eq!(response.result.unwrap_err().code, ErrorCode::UnknownApi);
    drop(client);
    server_task.await.unwrap();
}

// ---------------------------------------------------------------------------
// Malformed bodies keep their correlation id
// ---------------------------------------------------------------------------

#[test]
fn malformed_bodies_are_answerable() {
    let header = |api: u16, version: u16, id: u32| {
        let mut b = BytesMut::new();
        b.put_u16(api);
        b.put_u16(version);
        b.put_u32(id);
        b
    };

    let mut bad_utf8 = header(8, 0, 41);
    bad_utf8.put_slice(&[0, 2, 0xC3, 0x28, 0, 0, 0, 0]);
    let err = RequestFrame::decode(bad_utf8.freeze()).unwrap_err();
    assert_eq!(err.kind, RequestDecodeErrorKind::InvalidUtf8);
    let response = err.to_response();
    assert_eq!(response.correlation_id, 41);
    assert_eq!(
        response.result.as_ref().unwrap_err().code,
        ErrorCode::InvalidRequest
    );
    assert!(
        err.detail.contains("topic"),
        "detail names the field: {err}"
    );

    let err = RequestFrame::decode(header(1234, 0, 42).freeze()).unwrap_err();
    assert_eq!(err.kind, RequestDecodeErrorKind::UnknownApi(1234));
    assert_eq!(err.error_code(), ErrorCode::UnknownApi);
    assert_eq!(err.correlation_id, Some(42));

    let err = RequestFrame::decode(header(0, 1, 43).freeze()).unwrap_err();
    assert_eq!(
        err.kind,
        RequestDecodeErrorKind::UnsupportedVersion {
            api_key: ApiKey::ApiVersions,
            version: 1
        }
    );
    assert_eq!(err.error_code(), ErrorCode::UnsupportedVersion);

    let mut bad_policy = header(1, 0, 44);
    bad_policy.put_slice(&[0, 1, b't', 0, 0, 0, 1]);
    bad_policy.put_u64(1 << 20);
    bad_policy.put_u8(7);
    bad_policy.put_slice(&[0; 24]);
    let err = RequestFrame::decode(bad_policy.freeze()).unwrap_err();
    assert!(
        matches!(err.kind, RequestDecodeErrorKind::Invalid(_)),
        "{err:?}"
    );
    assert_eq!(err.correlation_id, Some(44));

    let err = RequestFrame::decode(Bytes::from_static(&[0, 8, 0])).unwrap_err();
    assert_eq!(err.correlation_id, None);
    assert_eq!(err.api_key, Some(8));
    assert_eq!(err.to_response().correlation_id, 0);
}

#[test]
fn api_versions_lists_every_api_from_version_zero() {
    let Response::ApiVersions { server, apis } = Response::supported_api_versions() else {
        panic!("wrong variant");
    };
    assert_eq!(server, format!("fencelog {}", env!("CARGO_PKG_VERSION")));
    let keys: Vec<u16> = apis.iter().map(|a| a.api_key).collect();
    let expected: Vec<u16> = ApiKey::ALL.iter().map(|key| key.as_u16()).collect();
    assert_eq!(keys, expected);
    assert!(keys.starts_with(&(0..=11).collect::<Vec<u16>>()));
    // Every API starts at version 0; ListOffsets has reached version 1 (timestamp lookup),
    // CreateTopic, Metadata and Produce too (replication factor, cluster metadata, acks), and
    // ReplicaFetch (a follower's log end apart from its fetch offset), and Fetch (read_committed).
    let at_version_one = [
        ApiKey::Fetch,
        ApiKey::ListOffsets,
        ApiKey::CreateTopic,
        ApiKey::Metadata,
        ApiKey::Produce,
        ApiKey::ReplicaFetch,
    ]
    .map(ApiKey::as_u16);
    for api in &apis {
        let max = if at_version_one.contains(&api.api_key) {
            1
        } else {
            0
        };
        assert_eq!((api.min_version, api.max_version), (0, max), "{api:?}");
    }
}

#[test]
fn error_response_display_is_actionable() {
    let fenced = ErrorResponse::with_epochs(ErrorCode::Fenced, "stale writer", 3, 4);
    assert_eq!(
        fenced.to_string(),
        "FENCED: stale writer (epoch 3, current epoch 4)"
    );
    let plain = ErrorResponse::new(ErrorCode::UnknownTopic, "no topic \"x\"");
    assert_eq!(plain.to_string(), "UNKNOWN_TOPIC: no topic \"x\"");
}

// ---------------------------------------------------------------------------
// The worked examples of docs/protocol.md
// ---------------------------------------------------------------------------

#[test]
fn doc_example_list_offsets() {
    let request = RequestFrame::new(
        7,
        Request::ListOffsets {
            topic: "orders".into(),
            partition: 0,
            timestamp: None,
        },
    );
    let body = check_doc_example(
        "ListOffsets request",
        encode_request(&request),
        "00 00 00 14 00 08 00 00 00 00 00 07 00 06 6f 72\n\
         64 65 72 73 00 00 00 00",
    );
    assert_eq!(RequestFrame::decode(body), Ok(request));

    let response = ResponseFrame::ok(
        7,
        Response::ListOffsets {
            earliest: 0,
            latest: 42,
            epoch: 3,
            offset_for_timestamp: None,
        },
    );
    let body = check_doc_example(
        "ListOffsets response",
        encode_response(&response),
        "00 00 00 1e 00 00 00 07 00 00 00 00 00 00 00 00\n\
         00 00 00 00 00 00 00 00 00 2a 00 00 00 00 00 00\n\
         00 03",
    );
    assert_eq!(
        ResponseFrame::decode(ApiKey::ListOffsets, body).unwrap(),
        response
    );
}

#[test]
fn doc_example_resource_exhausted() {
    let response = ResponseFrame::error(
        9,
        ErrorResponse::new(ErrorCode::ResourceExhausted, "disk full"),
    );
    let body = check_doc_example(
        "RESOURCE_EXHAUSTED response",
        encode_response(&response),
        "00 00 00 21 00 00 00 09 00 22 00 09 64 69 73 6b\n\
         20 66 75 6c 6c 00 00 00 00 00 00 00 00 00 00 00\n\
         00 00 00 00 00",
    );
    assert_eq!(
        ResponseFrame::decode(ApiKey::AcquireLease, body).unwrap(),
        response
    );
}

#[test]
fn doc_example_acquire_lease() {
    let request = RequestFrame::new(
        8,
        Request::AcquireLease {
            topic: "orders".into(),
            partition: 0,
            holder: "writer-1".into(),
            ttl_ms: 10_000,
        },
    );
    let body = check_doc_example(
        "AcquireLease request",
        encode_request(&request),
        "00 00 00 26 00 03 00 00 00 00 00 08 00 06 6f 72\n\
         64 65 72 73 00 00 00 00 00 08 77 72 69 74 65 72\n\
         2d 31 00 00 00 00 00 00 27 10",
    );
    assert_eq!(RequestFrame::decode(body), Ok(request));

    let response = ResponseFrame::ok(
        8,
        Response::AcquireLease {
            epoch: 4,
            lease_id: 0x0123_4567_89ab_cdef_fedc_ba98_7654_3210,
            ttl_ms: 10_000,
        },
    );
    let body = check_doc_example(
        "AcquireLease response",
        encode_response(&response),
        "00 00 00 26 00 00 00 08 00 00 00 00 00 00 00 00\n\
         00 04 01 23 45 67 89 ab cd ef fe dc ba 98 76 54\n\
         32 10 00 00 00 00 00 00 27 10",
    );
    assert_eq!(
        ResponseFrame::decode(ApiKey::AcquireLease, body).unwrap(),
        response
    );
}

#[test]
fn doc_example_fenced_produce() {
    let response = ResponseFrame::error(
        9,
        ErrorResponse::with_epochs(ErrorCode::Fenced, "epoch 3 is fenced", 3, 4),
    );
    let body = check_doc_example(
        "FENCED response",
        encode_response(&response),
        "00 00 00 29 00 00 00 09 00 01 00 11 65 70 6f 63\n\
         68 20 33 20 69 73 20 66 65 6e 63 65 64 00 00 00\n\
         00 00 00 00 03 00 00 00 00 00 00 00 04",
    );
    assert_eq!(
        ResponseFrame::decode(ApiKey::Produce, body).unwrap(),
        response
    );
}

// ---------------------------------------------------------------------------
// Golden bytes of every API
// ---------------------------------------------------------------------------

/// One request and one response of every API, plus an error response, as the encoder wrote them
/// before `protocol/messages.rs` was split into one file per API (captured from that code). The
/// doc examples above cover three messages; these pin every body layout byte for byte.
const GOLDEN_HEX: [(&str, &str); 19] = [
    ("ApiVersions", "000000080000000000000001"),
    ("CreateTopic", "0000003000010000000000020001740000000300000000001000000100000000000000fa00000000400000000000000000000000"),
    ("Metadata", "000000110002000000000003000200016100026263"),
    ("AcquireLease", "0000001a0003000000000004000174000000010001680000000000001388"),
    ("RenewLease", "0000001f0004000000000005000174000000010102030405060708090a0b0c0d0e0f10"),
    ("ReleaseLease", "0000001f00050000000000060001740000000200000000000000000000000000000007"),
    ("Produce", "00000018000600000000000700017400000000000000054241544348"),
    ("Fetch", "0000001f000700000000000800017400000000000000000000002a0000040000000064"),
    ("ListOffsets", "0000000f000800000000000900017400000009"),
    ("ApiVersions", "000000110000006400000001730001000600000001"),
    ("CreateTopic", "00000006000000650000"),
    ("Metadata", "0000005a000000660000000000020001740000000200000000040000000000000000000000000000000000000000000000000000000000017500000001000000000400000002000000000000000000000000000000000000000000000000"),
    ("AcquireLease", "00000026000000670000000000000000000400000000000000000000000000abcdef0000000000001388"),
    ("RenewLease", "0000001600000068000000000000000000040000000000000fa0"),
    ("ReleaseLease", "00000006000000690000"),
    ("Produce", "0000001e0000006a0000000000000000000a000000000000000c000000000000000d"),
    ("Fetch", "0000001f0000006b0000000000000000000d0000000000000000000000054142434445"),
    ("ListOffsets", "0000001e0000006c00000000000000000000000000000000000d0000000000000004"),
    ("error", "0000001c000000c800030004676f6e6500000000000000030000000000000005"),
];

/// Lower-case hex without separators, as in [`GOLDEN_HEX`].
fn compact_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn golden_frames() -> (Vec<RequestFrame>, Vec<(ApiKey, ResponseFrame)>) {
    use fencelog::protocol::{FlushPolicy, TopicConfig};
    let config = TopicConfig {
        segment_bytes: 1 << 20,
        flush: FlushPolicy::Interval { interval_ms: 250 },
        retention_bytes: Some(1 << 30),
        retention_ms: None,
    };
    let requests = vec![
        Request::ApiVersions,
        Request::CreateTopic {
            name: "t".into(),
            partitions: 3,
            config,
            replication: None,
        },
        Request::Metadata {
            topics: vec!["a".into(), "bc".into()],
            cluster: false,
        },
        Request::AcquireLease {
            topic: "t".into(),
            partition: 1,
            holder: "h".into(),
            ttl_ms: 5000,
        },
        Request::RenewLease {
            topic: "t".into(),
            partition: 1,
            lease_id: 0x0102_0304_0506_0708_090a_0b0c_0d0e_0f10,
        },
        Request::ReleaseLease {
            topic: "t".into(),
            partition: 2,
            lease_id: 7,
        },
        Request::Produce {
            topic: "t".into(),
            partition: 0,
            batch: Bytes::from_static(b"BATCH"),
            acks: None,
        },
        Request::Fetch {
            topic: "t".into(),
            partition: 0,
            offset: 42,
            max_bytes: 1024,
            max_wait_ms: 100,
            read_committed: None,
        },
        Request::ListOffsets {
            topic: "t".into(),
            partition: 9,
            timestamp: None,
        },
    ];
    let responses = vec![
        Response::ApiVersions {
            server: "s".into(),
            apis: vec![ApiVersionRange {
                api_key: 6,
                min_version: 0,
                max_version: 1,
            }],
        },
        Response::CreateTopic,
        Response::Metadata {
            topics: vec![
                TopicMetadata {
                    name: "t".into(),
                    partitions: 2,
                    config: TopicConfig {
                        flush: FlushPolicy::Never,
                        ..TopicConfig::default()
                    },
                },
                TopicMetadata {
                    name: "u".into(),
                    partitions: 1,
                    config: TopicConfig::default(),
                },
            ],
            cluster: None,
        },
        Response::AcquireLease {
            epoch: 4,
            lease_id: 0xabcdef,
            ttl_ms: 5000,
        },
        Response::RenewLease {
            epoch: 4,
            ttl_ms: 4000,
        },
        Response::ReleaseLease,
        Response::Produce {
            base_offset: 10,
            last_offset: 12,
            log_end_offset: 13,
        },
        Response::Fetch {
            high_watermark: 13,
            log_start_offset: 0,
            batches: vec![Bytes::from_static(b"AB"), Bytes::from_static(b"CDE")],
            committed: None,
        },
        Response::ListOffsets {
            earliest: 0,
            latest: 13,
            epoch: 4,
            offset_for_timestamp: None,
        },
    ];
    let requests = (1..).zip(requests).map(|(id, r)| RequestFrame::new(id, r));
    let mut responses: Vec<_> = (100..)
        .zip(responses)
        .map(|(id, r)| (r.api_key(), ResponseFrame::ok(id, r)))
        .collect();
    responses.push((
        ApiKey::Produce,
        ResponseFrame::error(
            200,
            ErrorResponse::with_epochs(ErrorCode::LeaseLost, "gone", 3, 5),
        ),
    ));
    (requests.collect(), responses)
}

#[test]
fn every_api_encodes_to_its_golden_bytes_and_back() {
    let (requests, responses) = golden_frames();
    assert_eq!(requests.len() + responses.len(), GOLDEN_HEX.len());
    let (request_hex, response_hex) = GOLDEN_HEX.split_at(requests.len());
    for (frame, (name, hex)) in requests.iter().zip(request_hex) {
        assert_eq!(frame.request.api_key().name(), *name);
        let bytes = encode_request(frame);
        assert_eq!(compact_hex(&bytes), *hex, "{name} request");
        let mut parts = Vec::new();
        frame
            .encode_vectored(&mut BytesMut::new(), &mut parts)
            .expect("encodable request");
        assert_eq!(parts.concat(), &bytes[..], "{name} vectored request");
        let decoded = RequestFrame::decode(single_frame(bytes)).expect("decodable request");
        assert_eq!(&decoded, frame, "{name} request round trip");
    }
    for ((api, frame), (name, hex)) in responses.iter().zip(response_hex) {
        if frame.result.is_ok() {
            assert_eq!(api.name(), *name);
        }
        let bytes = encode_response(frame);
        assert_eq!(compact_hex(&bytes), *hex, "{name} response");
        let mut parts = Vec::new();
        frame
            .encode_vectored(&mut BytesMut::new(), &mut parts)
            .expect("encodable response");
        assert_eq!(parts.concat(), &bytes[..], "{name} vectored response");
        let decoded = ResponseFrame::decode(*api, single_frame(bytes)).expect("decodable response");
        assert_eq!(
            decoded,
            normalize(frame.clone()),
            "{name} response round trip"
        );
    }
}

#[test]
fn doc_example_verify_transaction() {
    use fencelog::protocol::TransactionProducer;
    let verify = RequestFrame::new(
        40,
        Request::VerifyTransaction {
            producer: TransactionProducer {
                transactional_id: "t1".into(),
                producer_id: 1000,
                producer_epoch: 1,
            },
            topic: "orders".into(),
            partition: 1,
        },
    );
    let body = check_doc_example(
        "VerifyTransaction request",
        encode_request(&verify),
        "00 00 00 22 00 17 00 00 00 00 00 28 00 02 74 31\n\
         00 00 00 00 00 00 03 e8 00 01 00 06 6f 72 64 65\n\
         72 73 00 00 00 01",
    );
    assert_eq!(RequestFrame::decode(body), Ok(verify));
    check_doc_example(
        "VerifyTransaction response",
        encode_response(&ResponseFrame::ok(40, Response::VerifyTransaction)),
        "00 00 00 06 00 00 00 28 00 00",
    );
}

#[test]
fn doc_example_atomic_append() {
    use fencelog::protocol::{TransactionPartition, TransactionProducer};
    let producer = TransactionProducer {
        transactional_id: "t1".into(),
        producer_id: 1000,
        producer_epoch: 1,
    };
    let add = RequestFrame::new(
        30,
        Request::AddToTransaction {
            producer: producer.clone(),
            partitions: vec![
                TransactionPartition {
                    topic: "orders".into(),
                    partition: 0,
                    epoch: 4,
                },
                TransactionPartition {
                    topic: "orders".into(),
                    partition: 1,
                    epoch: 7,
                },
            ],
        },
    );
    let body = check_doc_example(
        "AddToTransaction request",
        encode_request(&add),
        "00 00 00 42 00 15 00 00 00 00 00 1e 00 02 74 31\n\
         00 00 00 00 00 00 03 e8 00 01 00 00 00 02 00 06\n\
         6f 72 64 65 72 73 00 00 00 00 00 00 00 00 00 00\n\
         00 04 00 06 6f 72 64 65 72 73 00 00 00 01 00 00\n\
         00 00 00 00 00 07",
    );
    assert_eq!(RequestFrame::decode(body), Ok(add));
    let end = RequestFrame::new(
        31,
        Request::EndTransaction {
            producer,
            commit: true,
        },
    );
    let body = check_doc_example(
        "EndTransaction request",
        encode_request(&end),
        "00 00 00 17 00 16 00 00 00 00 00 1f 00 02 74 31\n\
         00 00 00 00 00 00 03 e8 00 01 01",
    );
    assert_eq!(RequestFrame::decode(body), Ok(end));
    let fenced = ResponseFrame::error(
        31,
        ErrorResponse::with_epochs(
            ErrorCode::Fenced,
            "orders/1: fenced: epoch 7 < current 8; the transaction was aborted, none of it is visible",
            7,
            8,
        ),
    );
    check_doc_example(
        "EndTransaction FENCED",
        encode_response(&fenced),
        "00 00 00 71 00 00 00 1f 00 01 00 59 6f 72 64 65\n\
         72 73 2f 31 3a 20 66 65 6e 63 65 64 3a 20 65 70\n\
         6f 63 68 20 37 20 3c 20 63 75 72 72 65 6e 74 20\n\
         38 3b 20 74 68 65 20 74 72 61 6e 73 61 63 74 69\n\
         6f 6e 20 77 61 73 20 61 62 6f 72 74 65 64 2c 20\n\
         6e 6f 6e 65 20 6f 66 20 69 74 20 69 73 20 76 69\n\
         73 69 62 6c 65 00 00 00 00 00 00 00 07 00 00 00\n\
         00 00 00 00 08",
    );
}
