//! The consumer-group APIs of the wire protocol, `OffsetCommit` (key 10) and `OffsetFetch`
//! (key 11), as a black box: round trips, the `-1` of "nothing committed", refusal of other
//! negative offsets, and the worked hex examples of `docs/protocol.md` (checked in both
//! directions, as `tests/server/protocol_codec.rs` does for the older APIs).

use crate::support::protocol_strategies;

use crate::support::doc_examples;

use bytes::{BufMut, BytesMut};
use doc_examples::*;
use fencelog::protocol::{
    ApiKey, ErrorCode, ProtocolError, Request, RequestFrame, Response, ResponseFrame,
};
use proptest::prelude::*;
use protocol_strategies::arb_string;

#[test]
fn doc_example_offset_commit() {
    // Proves: the OffsetCommit example of docs/protocol.md is what the encoder writes and the
    // decoder reads, request and (empty) response.
    let request = RequestFrame::new(
        12,
        Request::OffsetCommit {
            group: "billing".into(),
            topic: "orders".into(),
            partition: 0,
            offset: 42,
            metadata: "h1".into(),
        },
    );
    let body = check_doc_example(
        "OffsetCommit request",
        encode_request(&request),
        "00 00 00 29 00 0a 00 00 00 00 00 0c 00 07 62 69\n\
         6c 6c 69 6e 67 00 06 6f 72 64 65 72 73 00 00 00\n\
         00 00 00 00 00 00 00 00 2a 00 02 68 31",
    );
    assert_eq!(RequestFrame::decode(body), Ok(request));

    let response = ResponseFrame::ok(12, Response::OffsetCommit);
    let body = check_doc_example(
        "OffsetCommit response",
        encode_response(&response),
        "00 00 00 06 00 00 00 0c 00 00",
    );
    assert_eq!(
        ResponseFrame::decode(ApiKey::OffsetCommit, body).unwrap(),
        response
    );
}

#[test]
fn doc_example_offset_fetch() {
    // Proves: the OffsetFetch examples of docs/protocol.md (a committed offset, and -1 for
    // nothing committed) are what the encoder writes and the decoder reads.
    let request = RequestFrame::new(
        13,
        Request::OffsetFetch {
            group: "billing".into(),
            topic: "orders".into(),
            partition: 0,
        },
    );
    let body = check_doc_example(
        "OffsetFetch request",
        encode_request(&request),
        "00 00 00 1d 00 0b 00 00 00 00 00 0d 00 07 62 69\n\
         6c 6c 69 6e 67 00 06 6f 72 64 65 72 73 00 00 00\n\
         00",
    );
    assert_eq!(RequestFrame::decode(body), Ok(request));

    let response = ResponseFrame::ok(
        13,
        Response::OffsetFetch {
            offset: Some(42),
            metadata: "h1".into(),
        },
    );
    let body = check_doc_example(
        "OffsetFetch response",
        encode_response(&response),
        "00 00 00 12 00 00 00 0d 00 00 00 00 00 00 00 00\n\
         00 2a 00 02 68 31",
    );
    assert_eq!(
        ResponseFrame::decode(ApiKey::OffsetFetch, body).unwrap(),
        response
    );

    let nothing = ResponseFrame::ok(
        14,
        Response::OffsetFetch {
            offset: None,
            metadata: String::new(),
        },
    );
    let body = check_doc_example(
        "OffsetFetch -1",
        encode_response(&nothing),
        "00 00 00 10 00 00 00 0e 00 00 ff ff ff ff ff ff\n\
         ff ff 00 00",
    );
    assert_eq!(
        ResponseFrame::decode(ApiKey::OffsetFetch, body).unwrap(),
        nothing
    );
}

#[test]
fn negative_committed_offsets_other_than_minus_one_are_malformed() {
    // Proves: a response offset of -2 (or any negative but -1) is refused, not read as a huge
    // offset.
    let mut body = BytesMut::new();
    body.put_u32(13);
    body.put_u16(0);
    body.put_i64(-2);
    body.put_u16(0);
    let error = ResponseFrame::decode(ApiKey::OffsetFetch, body.freeze()).unwrap_err();
    assert!(matches!(error, ProtocolError::Malformed(_)), "{error:?}");
}

#[test]
fn an_offset_past_i64_max_cannot_be_encoded() {
    // Proves: the encoder refuses a committed offset the i64 field cannot carry rather than
    // writing a negative number.
    let response = ResponseFrame::ok(
        1,
        Response::OffsetFetch {
            offset: Some(1 << 63),
            metadata: String::new(),
        },
    );
    assert!(response.encode(&mut BytesMut::new()).is_err());
}

#[test]
fn the_new_keys_and_codes_have_their_reserved_numbers() {
    // Proves: the wire numbers reserved for committed offsets are the ones used.
    assert_eq!(ApiKey::from_u16(10), Some(ApiKey::OffsetCommit));
    assert_eq!(ApiKey::from_u16(11), Some(ApiKey::OffsetFetch));
    assert_eq!(ErrorCode::from_u16(25), Some(ErrorCode::InvalidGroup));
    assert_eq!(
        ErrorCode::from_u16(26),
        Some(ErrorCode::OffsetMetadataTooLarge)
    );
    assert_eq!(ErrorCode::from_u16(27), Some(ErrorCode::GroupLimitReached));
}

fn arb_offset_request() -> impl Strategy<Value = Request> {
    prop_oneof![
        (
            arb_string(),
            arb_string(),
            any::<u32>(),
            any::<u64>(),
            arb_string()
        )
            .prop_map(|(group, topic, partition, offset, metadata)| {
                Request::OffsetCommit {
                    group,
                    topic,
                    partition,
                    offset,
                    metadata,
                }
            }),
        (arb_string(), arb_string(), any::<u32>()).prop_map(|(group, topic, partition)| {
            Request::OffsetFetch {
                group,
                topic,
                partition,
            }
        }),
    ]
}

fn arb_offset_response() -> impl Strategy<Value = Response> {
    prop_oneof![
        Just(Response::OffsetCommit),
        (proptest::option::of(0..=i64::MAX as u64), arb_string())
            .prop_map(|(offset, metadata)| Response::OffsetFetch { offset, metadata }),
    ]
}

proptest! {
    #[test]
    fn offset_requests_round_trip(id in any::<u32>(), request in arb_offset_request()) {
        // Proves: every OffsetCommit/OffsetFetch request decodes to what was encoded.
        let frame = RequestFrame::new(id, request);
        let body = single_frame(encode_request(&frame));
        prop_assert_eq!(RequestFrame::decode(body), Ok(frame));
    }

    #[test]
    fn offset_responses_round_trip(id in any::<u32>(), response in arb_offset_response()) {
        // Proves: every encodable OffsetCommit/OffsetFetch response decodes to what was encoded.
        let api = response.api_key();
        let frame = ResponseFrame::ok(id, response);
        let body = single_frame(encode_response(&frame));
        prop_assert_eq!(ResponseFrame::decode(api, body).expect("decodes"), frame);
    }

    #[test]
    fn truncated_offset_requests_are_refused(request in arb_offset_request(), cut in 1usize..40) {
        // Proves: any truncation of a request body is a decode error, never a panic or a
        // different request.
        let frame = RequestFrame::new(1, request);
        let body = single_frame(encode_request(&frame));
        let keep = body.len().saturating_sub(cut).max(8);
        if keep < body.len() {
            prop_assert!(RequestFrame::decode(body.slice(..keep)).is_err());
        }
    }
}
