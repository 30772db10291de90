//! The protocol additions of issue 13's client piece: `ListOffsets` version 1 (timestamp
//! lookup) and the error-body details of `LEASE_HELD` and `OFFSET_OUT_OF_RANGE`. The worked
//! examples of `docs/protocol.md` are checked byte for byte in both directions, and the
//! compatibility rules (version 0 unchanged, details optional, trailing details ignored) hold.

use crate::support::doc_examples;

use bytes::Bytes;
use doc_examples::*;
use fencelog::protocol::{
    ApiKey, ErrorCode, ErrorDetails, ErrorResponse, FrameCodec, Request, RequestFrame, Response,
    ResponseFrame,
};
use tokio_util::codec::Decoder;

/// The documented ListOffsets v1 request and response, and that the version follows from the
/// request's fields.
#[test]
fn doc_example_list_offsets_version_1() {
    let request = RequestFrame::new(
        10,
        Request::ListOffsets {
            topic: "orders".into(),
            partition: 0,
            timestamp: Some(1_700_000_000_000),
        },
    );
    assert_eq!(request.api_version, 1);
    let body = check_doc_example(
        "ListOffsets v1 request",
        encode_request(&request),
        "00 00 00 1c 00 08 00 01 00 00 00 0a 00 06 6f 72\n\
         64 65 72 73 00 00 00 00 00 00 01 8b cf e5 68 00",
    );
    assert_eq!(RequestFrame::decode(body), Ok(request));

    let response = ResponseFrame::ok(
        10,
        Response::ListOffsets {
            earliest: 0,
            latest: 42,
            epoch: 3,
            offset_for_timestamp: Some(17),
        },
    );
    let body = check_doc_example(
        "ListOffsets v1 response",
        encode_response(&response),
        "00 00 00 26 00 00 00 0a 00 00 00 00 00 00 00 00\n\
         00 00 00 00 00 00 00 00 00 2a 00 00 00 00 00 00\n\
         00 03 00 00 00 00 00 00 00 11",
    );
    assert_eq!(
        ResponseFrame::decode_version(ApiKey::ListOffsets, 1, body.clone()).unwrap(),
        response
    );
    // Read as version 0 the extra field is trailing garbage: versions are not guessed.
    assert!(ResponseFrame::decode(ApiKey::ListOffsets, body).is_err());
}

/// The documented LEASE_HELD body carries the holder and the time left after the common fields.
#[test]
fn doc_example_lease_held_details() {
    let response = ResponseFrame::error(
        11,
        ErrorResponse::lease_held("lease held", 4, "writer-1", 7250),
    );
    let body = check_doc_example(
        "LEASE_HELD response",
        encode_response(&response),
        "00 00 00 34 00 00 00 0b 00 04 00 0a 6c 65 61 73\n\
         65 20 68 65 6c 64 00 00 00 00 00 00 00 00 00 00\n\
         00 00 00 00 00 04 00 08 77 72 69 74 65 72 2d 31\n\
         00 00 00 00 00 00 1c 52",
    );
    let decoded = ResponseFrame::decode(ApiKey::AcquireLease, body).unwrap();
    assert_eq!(decoded, response);
    let error = decoded.result.unwrap_err();
    assert_eq!(
        error.details,
        Some(ErrorDetails::LeaseHeld {
            holder: "writer-1".into(),
            expires_in_ms: 7250
        })
    );
}

/// The documented OFFSET_OUT_OF_RANGE body carries the offset and both ends of the range.
#[test]
fn doc_example_offset_out_of_range_details() {
    let response = ResponseFrame::error(
        12,
        ErrorResponse::offset_out_of_range("out of range", 99, 10, 42),
    );
    let body = check_doc_example(
        "OFFSET_OUT_OF_RANGE response",
        encode_response(&response),
        "00 00 00 3c 00 00 00 0c 00 0d 00 0c 6f 75 74 20\n\
         6f 66 20 72 61 6e 67 65 00 00 00 00 00 00 00 00\n\
         00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 63\n\
         00 00 00 00 00 00 00 0a 00 00 00 00 00 00 00 2a",
    );
    assert_eq!(
        ResponseFrame::decode(ApiKey::Fetch, body).unwrap(),
        response
    );
}

/// A version-0 ListOffsets request is still version 0 on the wire, byte for byte as before.
#[test]
fn list_offsets_without_a_timestamp_stays_version_0() {
    let request = RequestFrame::new(
        7,
        Request::ListOffsets {
            topic: "orders".into(),
            partition: 0,
            timestamp: None,
        },
    );
    assert_eq!(request.api_version, 0);
    assert_eq!(encode_request(&request).len(), 24);
}

/// An error body that ends at `current_epoch` (an older server) decodes without details, and
/// bytes after the known fields (a newer server) are ignored, for every code.
#[test]
fn error_details_are_optional_and_trailing_bytes_are_ignored() {
    let old = ResponseFrame::error(
        3,
        ErrorResponse::with_epochs(ErrorCode::LeaseHeld, "held", 0, 2),
    );
    let mut bytes = encode_response(&old);
    let body = FrameCodec::default().decode(&mut bytes).unwrap().unwrap();
    let decoded = ResponseFrame::decode(ApiKey::AcquireLease, body).unwrap();
    assert_eq!(decoded.result.unwrap_err().details, None);

    // A TOPIC_EXISTS body with 5 extra bytes a later server might send.
    let mut body = vec![0, 0, 0, 4, 0, 7, 0, 1, b'x'];
    body.extend_from_slice(&[0; 16]);
    body.extend_from_slice(&[1, 2, 3, 4, 5]);
    let decoded = ResponseFrame::decode(ApiKey::CreateTopic, Bytes::from(body)).unwrap();
    let error = decoded.result.unwrap_err();
    assert_eq!(
        (error.code, error.message.as_str()),
        (ErrorCode::TopicExists, "x")
    );
}

/// Details that do not belong to the code are not written, so the bytes never lie.
#[test]
fn mismatched_details_are_not_encoded() {
    let mut error = ErrorResponse::new(ErrorCode::UnknownTopic, "no");
    error.details = Some(ErrorDetails::OffsetOutOfRange {
        offset: 1,
        earliest: 2,
        latest: 3,
    });
    let response = ResponseFrame::error(1, error);
    let plain = ResponseFrame::error(1, ErrorResponse::new(ErrorCode::UnknownTopic, "no"));
    assert_eq!(encode_response(&response), encode_response(&plain));
}

/// The server answers a version it does not know with UNSUPPORTED_VERSION, keeping the
/// correlation id.
#[test]
fn list_offsets_version_2_is_unsupported() {
    let mut request = RequestFrame::new(
        5,
        Request::ListOffsets {
            topic: "t".into(),
            partition: 0,
            timestamp: Some(1),
        },
    );
    request.api_version = 2;
    let mut bytes = encode_request(&request);
    let body = FrameCodec::default().decode(&mut bytes).unwrap().unwrap();
    let error = RequestFrame::decode(body).unwrap_err();
    assert_eq!(error.correlation_id, Some(5));
    assert_eq!(error.error_code(), ErrorCode::UnsupportedVersion);
}
