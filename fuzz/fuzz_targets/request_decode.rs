//! Fuzzes `RequestFrame::decode` (and `ResponseFrame::decode` for every API) with arbitrary frame
//! bodies.
//!
//! Checked: no panic; a decoded request re-encodes and decodes to itself; a refused one carries
//! its correlation id exactly when the 8-byte header was there, maps to `UNKNOWN_API`,
//! `UNSUPPORTED_VERSION` or `INVALID_REQUEST`, asks to close the connection only when the header
//! was unreadable, and its answer encodes.
#![no_main]

use bytes::{Bytes, BytesMut};
use fencelog::protocol::{
    ApiKey, ErrorCode, FrameCodec, RequestFrame, ResponseFrame, REQUEST_HEADER_BYTES,
};
use libfuzzer_sys::fuzz_target;
use tokio_util::codec::Decoder;

fuzz_target!(|data: &[u8]| {
    let body = Bytes::copy_from_slice(data);
    match RequestFrame::decode(body.clone()) {
        Ok(frame) => {
            let mut encoded = BytesMut::new();
            frame
                .encode(&mut encoded)
                .expect("a decoded request re-encodes");
            let again = FrameCodec::new(usize::MAX)
                .decode(&mut encoded)
                .expect("frames")
                .expect("whole frame");
            assert_eq!(RequestFrame::decode(again).expect("re-decodes"), frame);
        }
        Err(error) => {
            assert_eq!(
                error.correlation_id.is_some(),
                data.len() >= REQUEST_HEADER_BYTES
            );
            assert_eq!(
                error.must_close_connection(),
                data.len() < REQUEST_HEADER_BYTES
            );
            assert!(matches!(
                error.error_code(),
                ErrorCode::UnknownApi | ErrorCode::UnsupportedVersion | ErrorCode::InvalidRequest
            ));
            let response = error.to_response();
            assert_eq!(response.correlation_id, error.correlation_id.unwrap_or(0));
            let mut encoded = BytesMut::new();
            response
                .encode(&mut encoded)
                .expect("the error answer encodes");
        }
    }
    for api in ApiKey::ALL {
        let _ = ResponseFrame::decode(api, body.clone());
    }
});
