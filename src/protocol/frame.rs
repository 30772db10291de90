//! Whole messages: a header plus one API's body, as [`RequestFrame`] and [`ResponseFrame`].
//!
//! A frame body (everything after the `u32` length prefix) is a header followed by the
//! API-specific body. This file writes and reads the headers, picks the API's body from them, and
//! turns field-level failures into the error type of each side. It is deliberately independent of
//! the framing layer (`codec`) so that a malformed body is reported as a [`RequestDecodeError`]
//! carrying the correlation id (the server answers it and keeps the connection) rather than as a
//! stream error. Every encoder either writes the whole frame or leaves its buffer as it was.

use bytes::{BufMut, Bytes, BytesMut};

use super::api::{fetch, produce, replica_fetch};
use super::codec::FRAME_LENGTH_BYTES;
use super::error_response::DecodeBodyError;
use super::wire::{Reader, WireError};
use super::{
    ApiKey, ErrorCode, ErrorResponse, ProtocolError, Request, RequestDecodeError,
    RequestDecodeErrorKind, Response,
};

/// Size of a request header: `api_key u16, api_version u16, correlation_id u32`.
pub const REQUEST_HEADER_BYTES: usize = 8;

/// Size of a response header: `correlation_id u32, error_code u16`.
pub const RESPONSE_HEADER_BYTES: usize = 6;

/// The `frame_length` field for a frame of `total` bytes (prefix included).
fn frame_length_field(total: usize) -> Result<u32, ProtocolError> {
    u32::try_from(total - FRAME_LENGTH_BYTES).map_err(|_| {
        ProtocolError::Unencodable(format!(
            "frame body of {} bytes does not fit the u32 frame length",
            total - FRAME_LENGTH_BYTES
        ))
    })
}

/// A complete request: header fields plus body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestFrame {
    /// Chosen by the client and echoed in the response, so pipelined
    /// responses can be matched to their requests.
    pub correlation_id: u32,
    /// Version of the API the body is encoded in ([`Request::api_version`] when built with
    /// [`RequestFrame::new`]).
    pub api_version: u16,
    /// The request itself; its variant determines the header's `api_key`.
    pub request: Request,
}

impl RequestFrame {
    /// A request in the version its fields need ([`Request::api_version`]).
    pub fn new(correlation_id: u32, request: Request) -> RequestFrame {
        RequestFrame {
            correlation_id,
            api_version: request.api_version(),
            request,
        }
    }

    /// Total bytes [`encode`](Self::encode) writes, length prefix included;
    /// lets callers check a size limit before encoding.
    pub fn encoded_len(&self) -> usize {
        FRAME_LENGTH_BYTES + REQUEST_HEADER_BYTES + self.request.body_len()
    }

    /// Writes the length prefix and the header.
    fn put_prefix_and_header(&self, dst: &mut BytesMut, declared: u32) {
        dst.put_u32(declared);
        dst.put_u16(self.request.api_key().as_u16());
        dst.put_u16(self.api_version);
        dst.put_u32(self.correlation_id);
    }

    /// Appends the whole frame (length prefix, header, body) to `dst`.
    ///
    /// Fails with [`ProtocolError::Unencodable`] if a value does not fit its
    /// wire field; `dst` is then left exactly as it was.
    pub fn encode(&self, dst: &mut BytesMut) -> Result<(), ProtocolError> {
        let total = self.encoded_len();
        let declared = frame_length_field(total)?;
        let start = dst.len();
        dst.reserve(total);
        self.put_prefix_and_header(dst, declared);
        if let Err(e) = self.request.encode_body(dst) {
            dst.truncate(start);
            return Err(e);
        }
        debug_assert_eq!(dst.len() - start, total);
        Ok(())
    }

    /// Encodes the frame for a vectored write: the encoded header and fields go into `dst` and
    /// are split off into `out` as `Bytes`, while the batch of a `Produce` is pushed to `out` as
    /// it is, never copied on its way to the socket. The bytes, concatenated, are exactly what
    /// [`RequestFrame::encode`] writes; on failure nothing is pushed and `dst` is unchanged.
    pub fn encode_vectored(
        &self,
        dst: &mut BytesMut,
        out: &mut Vec<Bytes>,
    ) -> Result<(), ProtocolError> {
        let Request::Produce {
            topic,
            partition,
            batch,
            acks,
        } = &self.request
        else {
            self.encode(dst)?;
            out.push(dst.split().freeze());
            return Ok(());
        };
        let declared = frame_length_field(self.encoded_len())?;
        let start = dst.len();
        self.put_prefix_and_header(dst, declared);
        if let Err(error) = produce::encode_request_fields(dst, topic, *partition, batch.len()) {
            dst.truncate(start);
            return Err(error);
        }
        out.push(dst.split().freeze());
        out.push(batch.clone());
        produce::encode_request_trailer(dst, *acks);
        if !dst.is_empty() {
            out.push(dst.split().freeze());
        }
        Ok(())
    }

    /// Parses one frame body (without its length prefix).
    ///
    /// On failure the error carries whatever header fields could be read, so
    /// the server can answer with the right correlation id and error code
    /// (see [`RequestDecodeError::to_response`]).
    pub fn decode(frame: Bytes) -> Result<RequestFrame, RequestDecodeError> {
        if frame.len() < REQUEST_HEADER_BYTES {
            let api_key = match frame.get(..2) {
                Some(&[hi, lo]) => Some(u16::from_be_bytes([hi, lo])),
                _ => None,
            };
            return Err(RequestDecodeError {
                correlation_id: None,
                api_key,
                kind: RequestDecodeErrorKind::Truncated,
                detail: format!(
                    "request header needs {REQUEST_HEADER_BYTES} bytes but the frame holds {}",
                    frame.len()
                ),
            });
        }
        let mut r = Reader::new(frame);
        // Cannot fail: the length was checked just above. The default keeps
        // this path panic-free without an `expect`.
        let header = r
            .array::<REQUEST_HEADER_BYTES>("request header")
            .unwrap_or_default();
        let raw_api = u16::from_be_bytes([header[0], header[1]]);
        let api_version = u16::from_be_bytes([header[2], header[3]]);
        let correlation_id = u32::from_be_bytes([header[4], header[5], header[6], header[7]]);
        let fail = |kind, detail| RequestDecodeError {
            correlation_id: Some(correlation_id),
            api_key: Some(raw_api),
            kind,
            detail,
        };

        let Some(api_key) = ApiKey::from_u16(raw_api) else {
            return Err(fail(
                RequestDecodeErrorKind::UnknownApi(raw_api),
                format!("unknown api key {raw_api}; send ApiVersions to list the supported APIs"),
            ));
        };
        if !api_key.supports_version(api_version) {
            return Err(fail(
                RequestDecodeErrorKind::UnsupportedVersion {
                    api_key,
                    version: api_version,
                },
                format!(
                    "{api_key} version {api_version} is not supported (supported: {}..={})",
                    api_key.min_version(),
                    api_key.max_version()
                ),
            ));
        }
        let parsed = Request::decode_body(api_key, api_version, &mut r);
        let request = parsed
            .and_then(|request| r.finish().map(|()| request))
            .map_err(|e| fail(e.kind(), format!("malformed {api_key} request: {e}")))?;
        Ok(RequestFrame {
            correlation_id,
            api_version,
            request,
        })
    }
}

/// A complete response: the echoed correlation id and either the API's body
/// or an error body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResponseFrame {
    /// The correlation id of the request this answers (0 when the request's
    /// header could not be read).
    pub correlation_id: u32,
    /// The outcome.
    pub result: Result<Response, ErrorResponse>,
}

impl ResponseFrame {
    /// A successful response.
    pub fn ok(correlation_id: u32, response: Response) -> ResponseFrame {
        ResponseFrame {
            correlation_id,
            result: Ok(response),
        }
    }

    /// A failed response.
    pub fn error(correlation_id: u32, error: ErrorResponse) -> ResponseFrame {
        ResponseFrame {
            correlation_id,
            result: Err(error),
        }
    }

    /// Total bytes [`encode`](Self::encode) writes, length prefix included;
    /// lets the server check a size limit (for example of a `Fetch` answer)
    /// before encoding.
    pub fn encoded_len(&self) -> usize {
        let body = match &self.result {
            Ok(response) => response.body_len(),
            Err(error) => error.body_len(),
        };
        FRAME_LENGTH_BYTES + RESPONSE_HEADER_BYTES + body
    }

    /// Appends the whole frame (length prefix, header, body) to `dst`.
    ///
    /// Fails with [`ProtocolError::Unencodable`] if a value does not fit its
    /// wire field or if an error response has code `NONE` (which the peer
    /// would misread as success); `dst` is then left exactly as it was.
    pub fn encode(&self, dst: &mut BytesMut) -> Result<(), ProtocolError> {
        if matches!(&self.result, Err(e) if e.code == ErrorCode::None) {
            return Err(ProtocolError::Unencodable(
                "an error response cannot carry error code NONE".to_owned(),
            ));
        }
        let total = self.encoded_len();
        let declared = frame_length_field(total)?;
        let start = dst.len();
        dst.reserve(total);
        dst.put_u32(declared);
        dst.put_u32(self.correlation_id);
        let written = match &self.result {
            Ok(response) => {
                dst.put_u16(ErrorCode::None.as_u16());
                response.encode_body(dst)
            }
            Err(error) => {
                dst.put_u16(error.code.as_u16());
                error.encode_body(dst)
            }
        };
        if let Err(e) = written {
            dst.truncate(start);
            return Err(e);
        }
        debug_assert_eq!(dst.len() - start, total);
        Ok(())
    }

    /// Encodes the frame for a vectored write: what the encoder produces goes into `dst` and is
    /// split off into `out` as `Bytes`, while the stored batches of a `Fetch` or `ReplicaFetch`
    /// response are pushed to `out` as they are — slices of the segment maps, never copied on
    /// the way to the socket. The bytes, concatenated, are exactly what
    /// [`ResponseFrame::encode`] writes; on failure nothing is pushed and `dst` is unchanged.
    pub fn encode_vectored(
        &self,
        dst: &mut BytesMut,
        out: &mut Vec<Bytes>,
    ) -> Result<(), ProtocolError> {
        match &self.result {
            Ok(Response::Fetch {
                high_watermark,
                log_start_offset,
                batches,
                committed,
            }) => self.encode_fields_then_batches(
                dst,
                out,
                // The one group of batches goes after the v0 fields, before version 1's.
                |dst, cuts| {
                    fetch::encode_response_fields(
                        dst,
                        *high_watermark,
                        *log_start_offset,
                        batches,
                    )?;
                    cuts.push(dst.len());
                    fetch::encode_response_trailer(dst, *committed);
                    Ok(())
                },
                std::iter::once(batches.as_slice()),
            ),
            Ok(Response::ReplicaFetch { partitions }) => self.encode_fields_then_batches(
                dst,
                out,
                |dst, cuts| replica_fetch::encode_response_fields(dst, partitions, cuts),
                partitions
                    .iter()
                    .map(|partition| partition.batches.as_slice()),
            ),
            _ => {
                self.encode(dst)?;
                out.push(dst.split().freeze());
                Ok(())
            }
        }
    }

    /// Writes the length prefix and the header of a successful response.
    fn put_ok_header(&self, dst: &mut BytesMut, declared: u32) {
        dst.put_u32(declared);
        dst.put_u32(self.correlation_id);
        dst.put_u16(ErrorCode::None.as_u16());
    }

    /// [`encode_vectored`](Self::encode_vectored) of a response with stored batches: the
    /// header and every field are encoded first by `fields` (so a failure pushes nothing and
    /// leaves `dst` as it was), which records in `cuts` the length `dst` has where each group of
    /// `batches` goes (a group without a cut goes after all the fields: a `Fetch` records none,
    /// so its path allocates nothing); the fields are then cut there and pushed in turn with the
    /// batches, as they are, between them.
    fn encode_fields_then_batches<'a>(
        &self,
        dst: &mut BytesMut,
        out: &mut Vec<Bytes>,
        fields: impl FnOnce(&mut BytesMut, &mut Vec<usize>) -> Result<(), ProtocolError>,
        batches: impl Iterator<Item = &'a [Bytes]>,
    ) -> Result<(), ProtocolError> {
        let declared = frame_length_field(self.encoded_len())?;
        let start = dst.len();
        self.put_ok_header(dst, declared);
        let mut cuts = Vec::new();
        if let Err(error) = fields(dst, &mut cuts) {
            dst.truncate(start);
            return Err(error);
        }
        let mut encoded = dst.split().freeze();
        let end = encoded.len();
        let mut taken = 0;
        for (index, group) in batches.enumerate() {
            let cut = cuts.get(index).copied().unwrap_or(end);
            out.push(encoded.split_to(cut - taken));
            taken = cut;
            out.extend(group.iter().cloned());
        }
        if !encoded.is_empty() {
            // No groups (a ReplicaFetch of no partitions): the header and count are all there is.
            out.push(encoded);
        }
        Ok(())
    }

    /// Reads the correlation id of a response frame body without parsing the
    /// rest, so a client can look up which API the answer is for before
    /// calling [`decode`](Self::decode).
    pub fn peek_correlation_id(frame: &[u8]) -> Option<u32> {
        match frame.get(..4) {
            Some(&[a, b, c, d]) => Some(u32::from_be_bytes([a, b, c, d])),
            _ => None,
        }
    }

    /// Parses one response frame body (without its length prefix) to a version-0 request; the
    /// caller says which API it is for because responses do not repeat the api key.
    pub fn decode(api_key: ApiKey, frame: Bytes) -> Result<ResponseFrame, ProtocolError> {
        Self::decode_version(api_key, 0, frame)
    }

    /// [`decode`](Self::decode) for a request of `api_version`: the response is in the
    /// version of its request.
    pub fn decode_version(
        api_key: ApiKey,
        api_version: u16,
        frame: Bytes,
    ) -> Result<ResponseFrame, ProtocolError> {
        let correlation_id = Self::peek_correlation_id(&frame);
        let malformed = |e: WireError| {
            let id =
                correlation_id.map_or_else(String::new, |id| format!(" (correlation id {id})"));
            ProtocolError::Malformed(format!("{api_key} response{id}: {e}"))
        };
        let mut r = Reader::new(frame);
        let correlation_id = r.u32("correlation_id").map_err(malformed)?;
        let code = r.u16("error_code").map_err(malformed)?;
        if code == ErrorCode::None.as_u16() {
            let response =
                Response::decode_body(api_key, api_version, &mut r).map_err(malformed)?;
            r.finish().map_err(malformed)?;
            return Ok(ResponseFrame::ok(correlation_id, response));
        }
        match ErrorResponse::decode_body(code, r) {
            Ok(error) => Ok(ResponseFrame::error(correlation_id, error)),
            Err(DecodeBodyError::Wire(error)) => Err(malformed(error)),
            Err(DecodeBodyError::UnknownCode { code, message }) => {
                Err(ProtocolError::UnknownErrorCode { code, message })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::ReplicaFetchedPartition;

    #[test]
    fn lying_counts_do_not_preallocate() {
        // Metadata request announcing 65535 topics with no bytes behind it.
        let frame = Bytes::from_static(&[0, 2, 0, 0, 0, 0, 0, 1, 0xff, 0xff]);
        let err = RequestFrame::decode(frame).unwrap_err();
        assert_eq!(err.correlation_id, Some(1));
        assert_eq!(err.kind, RequestDecodeErrorKind::Truncated);
    }

    #[test]
    fn long_error_messages_are_cut_not_refused() {
        let message = "é".repeat(40_000); // 80_000 bytes
        let frame = ResponseFrame::error(3, ErrorResponse::new(ErrorCode::Internal, message));
        let mut buf = BytesMut::new();
        frame.encode(&mut buf).unwrap();
        assert_eq!(buf.len(), frame.encoded_len());
        let body = buf.freeze().slice(FRAME_LENGTH_BYTES..);
        let decoded = ResponseFrame::decode(ApiKey::Fetch, body).unwrap();
        let err = decoded.result.unwrap_err();
        assert_eq!(err.message.len(), 65_534);
        assert!(err.message.chars().all(|c| c == 'é'));
    }

    #[test]
    fn unencodable_values_leave_buffer_untouched() {
        let mut buf = BytesMut::from(&b"keep"[..]);
        let long = "x".repeat(70_000);
        let frame = RequestFrame::new(
            1,
            Request::ListOffsets {
                topic: long.clone(),
                partition: 0,
                timestamp: None,
            },
        );
        assert!(matches!(
            frame.encode(&mut buf),
            Err(ProtocolError::Unencodable(_))
        ));
        let none = ResponseFrame::error(1, ErrorResponse::new(ErrorCode::None, "x"));
        assert!(matches!(
            none.encode(&mut buf),
            Err(ProtocolError::Unencodable(_))
        ));
        let produce = RequestFrame::new(
            2,
            Request::Produce {
                topic: long,
                partition: 0,
                batch: Bytes::from_static(b"batch"),
                acks: None,
            },
        );
        let mut out = Vec::new();
        assert!(matches!(
            produce.encode_vectored(&mut buf, &mut out),
            Err(ProtocolError::Unencodable(_))
        ));
        assert!(out.is_empty());
        assert_eq!(&buf[..], b"keep");
    }

    /// A `ReplicaFetch` answer of several partitions, each with several stored batches: the
    /// vectored parts, concatenated, are the plain encoding, which is the fields followed by the
    /// batches back to back (one `bytes32` per partition, as the wire has always been); every
    /// batch is pushed as the very `Bytes` it was given (no copy), and the decoder gives each
    /// partition's batches back as one slice of the frame.
    #[test]
    fn a_multi_batch_replica_fetch_answer_is_sent_as_the_concatenation_without_copies() {
        let batches = [
            vec![Bytes::from_static(b"first-"), Bytes::from_static(b"second")],
            Vec::new(),
            vec![
                Bytes::from_static(b"a"),
                Bytes::from_static(b"bc"),
                Bytes::from_static(b"def"),
            ],
        ];
        let partitions: Vec<ReplicaFetchedPartition> = batches
            .iter()
            .enumerate()
            .map(|(index, batches)| ReplicaFetchedPartition {
                topic: format!("t{index}"),
                partition: index as u32,
                error: ErrorCode::None,
                high_watermark: 40 + index as u64,
                log_start_offset: index as u64,
                records_epoch: 5,
                batches: batches.clone(),
            })
            .collect();
        let frame = ResponseFrame::ok(34, Response::ReplicaFetch { partitions });

        let mut expected = BytesMut::new();
        expected.put_u32((frame.encoded_len() - FRAME_LENGTH_BYTES) as u32);
        expected.put_u32(34);
        expected.put_u16(0);
        expected.put_u32(3);
        for (index, batches) in batches.iter().enumerate() {
            expected.put_u16(2);
            expected.put_slice(format!("t{index}").as_bytes());
            expected.put_u32(index as u32);
            expected.put_u16(0);
            expected.put_u64(40 + index as u64);
            expected.put_u64(index as u64);
            expected.put_u32(5);
            expected.put_u32(batches.iter().map(Bytes::len).sum::<usize>() as u32);
            expected.put_slice(&batches.concat());
        }

        let mut plain = BytesMut::new();
        frame.encode(&mut plain).unwrap();
        assert_eq!(&plain[..], &expected[..]);
        assert_eq!(plain.len(), frame.encoded_len());

        let mut scratch = BytesMut::new();
        let mut parts = Vec::new();
        frame.encode_vectored(&mut scratch, &mut parts).unwrap();
        assert_eq!(parts.concat(), &expected[..]);
        assert!(scratch.is_empty());
        let sent_as_given = batches
            .iter()
            .flatten()
            .all(|batch| parts.iter().any(|part| part.as_ptr() == batch.as_ptr()));
        assert!(sent_as_given, "a batch was copied instead of sent as it is");

        let body = plain.freeze().slice(FRAME_LENGTH_BYTES..);
        let frame_start = body.as_ptr() as usize;
        let frame_end = frame_start + body.len();
        let decoded = ResponseFrame::decode(ApiKey::ReplicaFetch, body).unwrap();
        let Ok(Response::ReplicaFetch { partitions }) = decoded.result else {
            panic!("not a ReplicaFetch answer: {decoded:?}");
        };
        for (partition, sent) in partitions.iter().zip(&batches) {
            assert_eq!(partition.batches.concat(), sent.concat());
            assert!(partition.batches.len() <= 1);
            for part in &partition.batches {
                let at = part.as_ptr() as usize;
                assert!(at >= frame_start && at + part.len() <= frame_end, "copied");
            }
        }
    }

    /// A `ReplicaFetch` answer that cannot be encoded (a topic name over 65535 bytes in its
    /// second partition) pushes no part and leaves the scratch buffer as it was.
    #[test]
    fn an_unencodable_replica_fetch_answer_pushes_nothing() {
        let partition = |topic: String| ReplicaFetchedPartition {
            topic,
            partition: 0,
            error: ErrorCode::None,
            high_watermark: 0,
            log_start_offset: 0,
            records_epoch: 1,
            batches: vec![Bytes::from_static(b"batch")],
        };
        let frame = ResponseFrame::ok(
            1,
            Response::ReplicaFetch {
                partitions: vec![partition("ok".into()), partition("x".repeat(70_000))],
            },
        );
        let mut scratch = BytesMut::from(&b"keep"[..]);
        let mut parts = Vec::new();
        assert!(matches!(
            frame.encode_vectored(&mut scratch, &mut parts),
            Err(ProtocolError::Unencodable(_))
        ));
        assert!(parts.is_empty());
        assert_eq!(&scratch[..], b"keep");
    }

    #[test]
    fn unknown_error_codes_keep_the_message() {
        let body = [
            &[0u8, 0, 0, 9, 0x01, 0x00][..],
            &[0, 2, b'h', b'i'],
            &[0; 16],
        ]
        .concat();
        match ResponseFrame::decode(ApiKey::Produce, Bytes::from(body)) {
            Err(ProtocolError::UnknownErrorCode { code: 256, message }) => {
                assert_eq!(message, "hi")
            }
            other => panic!("unexpected {other:?}"),
        }
    }
}
