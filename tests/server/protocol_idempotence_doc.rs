//! The idempotent-producer parts of `docs/protocol.md`, checked against the code: the
//! `InitProducerId` (key 9) worked example, the magic-3 `Produce` worked example, the magic-3
//! header table, and the error-code rows 21..=24.
//!
//! Hex examples are checked in both directions, as `tests/server/protocol_codec.rs` does for the older
//! APIs: the encoder must write exactly the bytes the document shows, and the document must show
//! exactly the bytes the encoder writes; the decoder must read them back.

use crate::support::doc_examples;

use bytes::Bytes;
use doc_examples::*;
use fencelog::batch::{
    self, BatchBuilder, ProducerStamp, MAGIC_WITH_PRODUCER, PRODUCER_HEADER_BYTES,
};
use fencelog::protocol::{ApiKey, ErrorCode, Request, RequestFrame, Response, ResponseFrame};

/// The batch of the magic-3 Produce example: producer 1000, producer epoch 0, sequence 0, lease
/// epoch 4, one record `hi` without key at 1700000000000 ms.
fn example_batch() -> Bytes {
    let mut builder = BatchBuilder::with_producer(4, 1000, 0);
    builder.push(1_700_000_000_000, None, Some(b"hi"));
    builder.finish_with_sequence(0)
}

#[test]
fn doc_example_init_producer_id() {
    // Proves: the InitProducerId request (empty body) and response (producer_id i64,
    // producer_epoch i16) of docs/protocol.md are what the encoder writes and the decoder reads.
    let request = RequestFrame::new(21, Request::InitProducerId);
    let body = check_doc_example(
        "InitProducerId request",
        encode_request(&request),
        "00 00 00 08 00 09 00 00 00 00 00 15",
    );
    assert_eq!(RequestFrame::decode(body), Ok(request));

    let response = ResponseFrame::ok(
        21,
        Response::InitProducerId {
            producer_id: 1000,
            producer_epoch: 0,
        },
    );
    let body = check_doc_example(
        "InitProducerId response",
        encode_response(&response),
        "00 00 00 10 00 00 00 15 00 00 00 00 00 00 00 00\n\
         03 e8 00 00",
    );
    assert_eq!(
        ResponseFrame::decode(ApiKey::InitProducerId, body).unwrap(),
        response
    );
}

#[test]
fn doc_example_magic_3_produce() {
    // Proves: the magic-3 Produce request of docs/protocol.md is what the client's batch builder
    // and encoder write, that the server's batch validation accepts it, and that the producer
    // fields sit where the header table says.
    let batch = example_batch();
    let header = batch::validate(&batch, 1 << 20).expect("the example batch is valid");
    assert_eq!(header.magic, MAGIC_WITH_PRODUCER);
    assert_eq!(
        ProducerStamp::parse(&batch),
        Some(ProducerStamp {
            producer_id: 1000,
            producer_epoch: 0,
            base_sequence: 0,
        })
    );
    assert_eq!(&batch[48..56], &1000i64.to_be_bytes());
    assert_eq!(&batch[56..58], &0i16.to_be_bytes());
    assert_eq!(&batch[58..62], &0i32.to_be_bytes());
    assert_eq!(&batch[62..64], &[0, 0]);
    assert!(batch.len() > PRODUCER_HEADER_BYTES);

    let request = RequestFrame::new(
        22,
        Request::Produce {
            topic: "orders".into(),
            partition: 0,
            batch,
            acks: None,
        },
    );
    let body = check_doc_example(
        "magic-3 Produce request",
        encode_request(&request),
        "00 00 00 6c 00 06 00 00 00 00 00 16 00 06 6f 72\n\
         64 65 72 73 00 00 00 00 00 00 00 54 00 00 00 00\n\
         00 00 00 00 00 00 00 54 8a c9 be 16 03 00 00 00\n\
         00 00 00 00 00 00 00 04 00 00 00 01 00 00 01 8b\n\
         cf e5 68 00 00 00 01 8b cf e5 68 00 00 00 00 00\n\
         00 00 03 e8 00 00 00 00 00 00 00 00 00 00 00 10\n\
         00 00 00 00 ff ff ff ff 00 00 00 02 68 69 00 00",
    );
    assert_eq!(RequestFrame::decode(body), Ok(request));
}

#[test]
fn error_code_rows_21_to_24_match_the_code() {
    // Proves: section 7 lists codes 21..=24 with the names and retriability the code has.
    for value in 21..=24u16 {
        let code = ErrorCode::from_u16(value).expect("a known code");
        let retriable = if code.is_retriable() { "yes" } else { "no" };
        let row_start = format!("| {value}   | `{}`", code.name());
        let row = PROTOCOL_DOC
            .lines()
            .find(|line| line.starts_with(&row_start))
            .unwrap_or_else(|| panic!("docs/protocol.md has no row starting {row_start:?}"));
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        assert_eq!(cells[3], retriable, "retriable column of {row}");
    }
}
