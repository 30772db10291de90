"""A fencelog wire-protocol client (protocol version 0), standard library only.

Written from docs/protocol.md and docs/storage-format.md alone, as a check that
those documents are sufficient to implement a client.

Layers:
  * encoding helpers (``Writer`` / ``Reader``) for the primitive types of
    protocol.md section 1;
  * record batches (storage-format.md "Record batch"): ``build_batch``,
    ``build_kafka_batch`` (magic 2, compressed), ``parse_batches`` (every magic,
    every codec);
  * compression (storage-format.md "Compressed records"): ``compress``,
    ``decompress`` (bounded), gzip from the standard library, snappy, lz4 and
    zstd from the PyPI modules ``python-snappy`` (or ``cramjam``), ``lz4`` and
    ``zstandard`` when they are installed (``codec_available``);
  * request bodies (``encode_*``) and response bodies (``decode_*``) for every
    API of protocol.md section 5, plus ``TopicConfig`` (section 6) and the
    error body (section 4);
  * ``Connection``: framing (section 2), request header (section 3), response
    header (section 4), with both a simple synchronous ``call`` and the
    lower-level ``send`` / ``recv`` for pipelining.
"""

from __future__ import annotations

import io
import socket
import struct
import time
import zlib
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

# --------------------------------------------------------------------------
# Constants

PROTOCOL_API_VERSION = 0
DEFAULT_MAX_FRAME_BYTES = 16 * 1024 * 1024  # section 2

# API keys (section 5)
API_VERSIONS = 0
CREATE_TOPIC = 1
METADATA = 2
ACQUIRE_LEASE = 3
RENEW_LEASE = 4
RELEASE_LEASE = 5
PRODUCE = 6
FETCH = 7
LIST_OFFSETS = 8
INIT_PRODUCER_ID = 9

API_NAMES = {
    API_VERSIONS: "ApiVersions",
    CREATE_TOPIC: "CreateTopic",
    METADATA: "Metadata",
    ACQUIRE_LEASE: "AcquireLease",
    RENEW_LEASE: "RenewLease",
    RELEASE_LEASE: "ReleaseLease",
    PRODUCE: "Produce",
    FETCH: "Fetch",
    LIST_OFFSETS: "ListOffsets",
    INIT_PRODUCER_ID: "InitProducerId",
}

# Error codes (section 7): code -> (name, retriable)
ERROR_CODES = {
    0: ("NONE", False),
    1: ("FENCED", False),
    2: ("UNKNOWN_EPOCH", False),
    3: ("LEASE_LOST", False),
    4: ("LEASE_HELD", True),
    5: ("UNKNOWN_TOPIC", False),
    6: ("UNKNOWN_PARTITION", False),
    7: ("TOPIC_EXISTS", False),
    8: ("INVALID_BATCH", False),
    9: ("BATCH_TOO_LARGE", False),
    10: ("INVALID_REQUEST", False),
    11: ("UNSUPPORTED_VERSION", False),
    12: ("UNKNOWN_API", False),
    13: ("OFFSET_OUT_OF_RANGE", False),
    14: ("STORAGE_ERROR", True),
    15: ("CORRUPT_DATA", False),
    16: ("INVALID_CONFIG", False),
    17: ("SHUTTING_DOWN", True),
    18: ("TOO_MANY_CONNECTIONS", True),
    19: ("FRAME_TOO_LARGE", False),
    20: ("INTERNAL", False),
}
for _code, (_name, _retriable) in ERROR_CODES.items():
    globals()[_name] = _code
del _code, _name, _retriable

# Flush policies (section 6)
FLUSH_NEVER = 0
FLUSH_INTERVAL = 1
FLUSH_ALWAYS = 2

# Batch format (storage-format.md)
BATCH_MAGIC = 1
# An idempotent producer's batch: the 48 bytes above, then producer_id i64, producer_epoch i16,
# base_sequence i32 and two reserved bytes (docs/protocol.md, Produce). This client reads it.
BATCH_MAGIC_WITH_PRODUCER = 3
PRODUCER_FIELDS = struct.Struct(">qhiH")  # 16 bytes, at batch offset 48
# A Kafka record batch v2 kept as it was sent (storage-format.md, "Header, magic 2"): the 64-byte
# header of magic 3 (CRC-32C of bytes 16..64 and 81..85; producer fields -1 without a producer), then a
# Kafka record batch v2 with its own CRC-32C. This client reads it, and sends it to compress
# (protocol.md 5.6, ``build_kafka_batch``).
BATCH_MAGIC_KAFKA = 2
KAFKA_HEADER = struct.Struct(">qiiBIhiqqqhii")  # 61 bytes, at batch offset 64
NATIVE_KAFKA_HEADER = struct.Struct(">QIIBBHQIqqqhiH")  # the 64-byte header of magic 2
assert NATIVE_KAFKA_HEADER.size == 64 and KAFKA_HEADER.size == 61
ATTRIBUTE_TRANSACTIONAL = 0x10
ATTRIBUTE_CODEC_MASK = 0x07
# Compression codecs: bits 0-2 of a magic-2 batch's attributes (Kafka's numbers).
CODEC_NONE = 0
CODEC_GZIP = 1
CODEC_SNAPPY = 2
CODEC_LZ4 = 3
CODEC_ZSTD = 4
CODEC_NAMES = {CODEC_NONE: "none", CODEC_GZIP: "gzip", CODEC_SNAPPY: "snappy",
               CODEC_LZ4: "lz4", CODEC_ZSTD: "zstd"}
# The most bytes one batch's compressed records may inflate to (storage-format.md).
MAX_INFLATED_RECORDS_BYTES = 64 * 1024 * 1024
# xerial's snappy stream header: magic, version 1, compatible version 1.
XERIAL_SNAPPY_HEADER = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
XERIAL_SNAPPY_BLOCK_BYTES = 32 * 1024
# The largest zstd window accepted (storage-format.md: 16 MiB).
ZSTD_MAX_WINDOW_BYTES = 1 << 24
BATCH_HEADER = struct.Struct(">QIIBBHQIqq")  # 48 bytes
assert BATCH_HEADER.size == 48
MAX_RECORDS_PER_BATCH = 1 << 20


def error_name(code: int) -> str:
    return ERROR_CODES.get(code, (f"UNKNOWN_ERROR_CODE_{code}", False))[0]


def is_retriable(code: int) -> bool:
    # Unknown codes are treated as non-retriable (section 7).
    return ERROR_CODES.get(code, ("", False))[1]


# --------------------------------------------------------------------------
# Exceptions


class ProtocolError(Exception):
    """The peer sent bytes that do not follow the protocol."""


class CorruptBatch(ProtocolError):
    """A fetched batch failed its CRC or structural checks."""


@dataclass
class ErrorBody:
    """Section 4, "Error body"."""

    message: str
    epoch: int
    current_epoch: int
    # Details after current_epoch (LEASE_HELD, OFFSET_OUT_OF_RANGE); empty when absent.
    details: Dict[str, object] = field(default_factory=dict)


class FencelogError(Exception):
    """A response with error_code != 0."""

    def __init__(self, correlation_id: int, code: int, body: ErrorBody):
        self.correlation_id = correlation_id
        self.code = code
        self.name = error_name(code)
        self.retriable = is_retriable(code)
        self.message = body.message
        self.epoch = body.epoch
        self.current_epoch = body.current_epoch
        self.details = body.details
        super().__init__(
            f"{self.name} ({code}): {body.message!r} "
            f"[epoch={body.epoch} current_epoch={body.current_epoch} "
            f"correlation_id={correlation_id}]"
        )


# --------------------------------------------------------------------------
# Primitive encoding (section 1)


class Writer:
    def __init__(self) -> None:
        self.parts: List[bytes] = []

    def u8(self, v: int) -> "Writer":
        self.parts.append(struct.pack(">B", v))
        return self

    def u16(self, v: int) -> "Writer":
        self.parts.append(struct.pack(">H", v))
        return self

    def u32(self, v: int) -> "Writer":
        self.parts.append(struct.pack(">I", v))
        return self

    def u64(self, v: int) -> "Writer":
        self.parts.append(struct.pack(">Q", v))
        return self

    def u128(self, v: int) -> "Writer":
        self.parts.append(v.to_bytes(16, "big"))
        return self

    def string16(self, s: str) -> "Writer":
        b = s.encode("utf-8")
        if len(b) > 0xFFFF:
            raise ValueError("string16 longer than 65535 bytes")
        self.parts.append(struct.pack(">H", len(b)) + b)
        return self

    def bytes32(self, b: bytes) -> "Writer":
        self.parts.append(struct.pack(">I", len(b)) + bytes(b))
        return self

    def raw(self, b: bytes) -> "Writer":
        self.parts.append(bytes(b))
        return self

    def getvalue(self) -> bytes:
        return b"".join(self.parts)


class Reader:
    def __init__(self, data: bytes, pos: int = 0) -> None:
        self.data = memoryview(data)
        self.pos = pos

    def _take(self, n: int) -> memoryview:
        if self.pos + n > len(self.data):
            raise ProtocolError(
                f"truncated: need {n} bytes at {self.pos}, have {len(self.data) - self.pos}"
            )
        v = self.data[self.pos:self.pos + n]
        self.pos += n
        return v

    def u8(self) -> int:
        return self._take(1)[0]

    def u16(self) -> int:
        return struct.unpack(">H", self._take(2))[0]

    def u32(self) -> int:
        return struct.unpack(">I", self._take(4))[0]

    def u64(self) -> int:
        return struct.unpack(">Q", self._take(8))[0]

    def u128(self) -> int:
        return int.from_bytes(self._take(16), "big")

    def string16(self) -> str:
        n = self.u16()
        try:
            return bytes(self._take(n)).decode("utf-8")
        except UnicodeDecodeError as e:
            raise ProtocolError(f"invalid UTF-8 in string16: {e}") from None

    def bytes32(self) -> bytes:
        n = self.u32()
        return bytes(self._take(n))

    def remaining(self) -> int:
        return len(self.data) - self.pos

    def end(self) -> None:
        if self.remaining():
            raise ProtocolError(f"{self.remaining()} trailing bytes")


# --------------------------------------------------------------------------
# TopicConfig (section 6)


@dataclass
class TopicConfig:
    segment_bytes: int = 64 * 1024 * 1024
    flush_policy: int = FLUSH_ALWAYS
    flush_interval_ms: int = 0
    retention_bytes: int = 0
    retention_ms: int = 0

    SIZE = 33

    def encode(self, w: Writer) -> None:
        (w.u64(self.segment_bytes).u8(self.flush_policy).u64(self.flush_interval_ms)
         .u64(self.retention_bytes).u64(self.retention_ms))

    @classmethod
    def decode(cls, r: Reader) -> "TopicConfig":
        return cls(r.u64(), r.u8(), r.u64(), r.u64(), r.u64())


# --------------------------------------------------------------------------
# Record batches (storage-format.md, "Record batch" and "Record")


@dataclass
class Record:
    value: Optional[bytes]
    key: Optional[bytes] = None
    timestamp: Optional[int] = None  # ms since the Unix epoch; None = now
    # A header value of None is a null value (value_length 0xFFFFFFFF), apart from b"".
    headers: List[Tuple[str, Optional[bytes]]] = field(default_factory=list)
    # Filled in when parsed from a fetched batch:
    offset: Optional[int] = None
    epoch: Optional[int] = None


@dataclass
class Batch:
    base_offset: int
    batch_length: int
    crc: int
    magic: int
    attributes: int
    epoch: int
    record_count: int
    first_timestamp: int
    max_timestamp: int
    records: List[Record]

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.record_count - 1

    @property
    def codec(self) -> int:
        """The records' compression codec (only magic 2 compresses)."""
        return self.attributes & ATTRIBUTE_CODEC_MASK if self.magic == BATCH_MAGIC_KAFKA else 0


def _encode_record(rec: Record, first_ts: int) -> bytes:
    body = Writer()
    delta = rec.timestamp - first_ts
    if delta < 0:
        raise ValueError("timestamp_delta would be negative")
    body.u32(delta)
    for part in (rec.key, rec.value):
        if part is None:
            body.raw(struct.pack(">i", -1))
        else:
            body.raw(struct.pack(">i", len(part)) + bytes(part))
    body.u16(len(rec.headers))
    for name, value in rec.headers:
        nb = name.encode("utf-8")
        if value is None:
            body.u16(len(nb)).raw(nb).u32(0xFFFFFFFF)
        else:
            body.u16(len(nb)).raw(nb).u32(len(value)).raw(value)
    b = body.getvalue()
    return struct.pack(">I", len(b)) + b


def build_batch(epoch: int, records: Sequence[Record], base_offset: int = 0,
                producer: Optional[Tuple[int, int, int]] = None) -> bytes:
    """Builds one record batch as a producer sends it (base_offset 0): magic 1, or magic 3
    when ``producer`` is ``(producer_id, producer_epoch, base_sequence)``."""
    if not records:
        raise ValueError("a batch needs at least one record")
    if len(records) > MAX_RECORDS_PER_BATCH:
        raise ValueError("too many records for one batch")
    now = int(time.time() * 1000)
    stamped = [r if r.timestamp is not None else
               Record(r.value, r.key, now, list(r.headers)) for r in records]
    # first_timestamp is "timestamp of the first record" and timestamp_delta is
    # unsigned ("never negative"), so records must not go back in time.
    first_ts = stamped[0].timestamp
    max_ts = max(r.timestamp for r in stamped)
    payload = b"".join(_encode_record(r, first_ts) for r in stamped)
    producer_fields = b"" if producer is None else PRODUCER_FIELDS.pack(*producer, 0)
    magic = BATCH_MAGIC if producer is None else BATCH_MAGIC_WITH_PRODUCER
    batch_length = BATCH_HEADER.size + len(producer_fields) + len(payload)
    # Bytes [16, batch_length): everything covered by the CRC.
    covered = struct.pack(">BBHQIqq", magic, 0, 0, epoch, len(stamped),
                          first_ts, max_ts) + producer_fields + payload
    crc = zlib.crc32(covered) & 0xFFFFFFFF
    return struct.pack(">QII", base_offset, batch_length, crc) + covered


def _parse_records(data: memoryview, pos: int, end: int, base_offset: int,
                   epoch: int, first_ts: int, max_ts: int, count: int) -> List[Record]:
    records: List[Record] = []
    r = Reader(bytes(data[pos:end]))
    for index in range(count):
        record_length = r.u32()
        record_end = r.pos + record_length
        if record_end > len(r.data):
            raise CorruptBatch(f"record {index} overruns its batch")
        delta = r.u32()
        kv: List[Optional[bytes]] = []
        for _ in range(2):
            (n,) = struct.unpack(">i", r._take(4))
            if n < -1:
                raise CorruptBatch(f"record {index}: negative length {n}")
            kv.append(None if n == -1 else bytes(r._take(n)))
        header_count = r.u16()
        headers = []
        for _ in range(header_count):
            name_length = r.u16()
            name = bytes(r._take(name_length)).decode("utf-8")
            value_length = r.u32()
            if value_length == 0xFFFFFFFF:  # a null value
                headers.append((name, None))
            else:
                headers.append((name, bytes(r._take(value_length))))
        if r.pos != record_end:
            raise CorruptBatch(f"record {index}: fields do not fill record_length")
        ts = first_ts + delta
        if ts > max_ts:
            raise CorruptBatch(f"record {index}: timestamp beyond max_timestamp")
        records.append(Record(value=kv[1], key=kv[0], timestamp=ts, headers=headers,
                              offset=base_offset + index, epoch=epoch))
    if r.remaining():
        raise CorruptBatch("records do not fill the batch")
    return records


def _crc32c_table() -> List[int]:
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_CRC32C_TABLE = _crc32c_table()


def crc32c(data) -> int:
    """CRC-32C (Castagnoli, reflected, as Kafka computes it); slow but standard library only."""
    c = 0xFFFFFFFF
    table = _CRC32C_TABLE
    for b in bytes(data):
        c = table[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


# --------------------------------------------------------------------------
# Compression (storage-format.md, "Compressed records")


class CodecUnavailable(Exception):
    """The codec's Python module is not installed."""


def _import_snappy():
    """(compress_raw, decompress_raw) from python-snappy or cramjam."""
    try:
        import snappy  # python-snappy
        return snappy.compress, snappy.decompress
    except ImportError:
        pass
    try:
        import cramjam
        return (lambda b: bytes(cramjam.snappy.compress_raw(b)),
                lambda b: bytes(cramjam.snappy.decompress_raw(b)))
    except ImportError:
        raise CodecUnavailable("snappy needs the python-snappy or cramjam module") from None


def _import_lz4():
    try:
        import lz4.frame
        return lz4.frame
    except ImportError:
        raise CodecUnavailable("lz4 needs the lz4 module") from None


def _import_zstd():
    try:
        import zstandard
        return zstandard
    except ImportError:
        raise CodecUnavailable("zstd needs the zstandard module") from None


def codec_available(codec: int) -> bool:
    """Whether this Python can compress and decompress ``codec``."""
    try:
        {CODEC_NONE: lambda: None, CODEC_GZIP: lambda: None, CODEC_SNAPPY: _import_snappy,
         CODEC_LZ4: _import_lz4, CODEC_ZSTD: _import_zstd}[codec]()
        return True
    except (CodecUnavailable, KeyError):
        return False


def compress(codec: int, data: bytes) -> bytes:
    """The records section of a magic-2 batch, compressed as the storage format says (and as
    Kafka's Java producer writes it, so Kafka consumers read it too)."""
    data = bytes(data)
    if codec == CODEC_NONE:
        return data
    if codec == CODEC_GZIP:
        encoder = zlib.compressobj(6, zlib.DEFLATED, 31)  # wbits 31: a gzip member
        return encoder.compress(data) + encoder.flush()
    if codec == CODEC_SNAPPY:
        compress_raw, _ = _import_snappy()
        out = [XERIAL_SNAPPY_HEADER]
        for at in range(0, len(data), XERIAL_SNAPPY_BLOCK_BYTES):
            block = compress_raw(data[at:at + XERIAL_SNAPPY_BLOCK_BYTES])
            out.append(struct.pack(">I", len(block)) + block)
        return b"".join(out)
    if codec == CODEC_LZ4:
        frame = _import_lz4()
        return frame.compress(data, block_size=frame.BLOCKSIZE_MAX64KB, block_linked=False,
                              content_checksum=False, store_size=False)
    if codec == CODEC_ZSTD:
        return _import_zstd().ZstdCompressor(level=3).compress(data)
    raise ValueError(f"unknown codec {codec}")


def _too_large(limit: int) -> CorruptBatch:
    return CorruptBatch(f"compressed records inflate past {limit} bytes")


def _snappy_raw_length(block: bytes) -> int:
    """The uncompressed length a raw snappy block declares (its leading varint)."""
    length = 0
    for i in range(5):
        if i >= len(block):
            break
        length |= (block[i] & 0x7F) << (7 * i)
        if not block[i] & 0x80:
            return length
    raise CorruptBatch("snappy block with a bad length varint")


def decompress(codec: int, data, limit: int = MAX_INFLATED_RECORDS_BYTES) -> bytes:
    """Inflates a magic-2 batch's compressed records, stopping with ``CorruptBatch`` once the
    output would pass ``limit`` bytes (never inflating a bomb to its end). A corrupt body is a
    ``CorruptBatch`` too; a missing module is ``CodecUnavailable``."""
    data = bytes(data)
    if codec == CODEC_NONE:
        if len(data) > limit:
            raise _too_large(limit)
        return data
    try:
        if codec == CODEC_GZIP:
            return _gunzip(data, limit)
        if codec == CODEC_SNAPPY:
            return _unsnappy(data, limit)
        if codec == CODEC_LZ4:
            decoder = _import_lz4().LZ4FrameDecompressor()
            out = decoder.decompress(data, max_length=limit + 1)
            if len(out) > limit:
                raise _too_large(limit)
            if not decoder.eof:
                raise CorruptBatch("lz4 frame cut short")
            return out
        if codec == CODEC_ZSTD:
            zstandard = _import_zstd()
            context = zstandard.ZstdDecompressor(max_window_size=ZSTD_MAX_WINDOW_BYTES)
            reader = context.stream_reader(io.BytesIO(data), read_across_frames=True)
            out = bytearray()
            while True:
                chunk = reader.read(limit + 1 - len(out))
                if not chunk:
                    break
                out += chunk
                if len(out) > limit:
                    raise _too_large(limit)
            # The reader ends quietly where the input does: check that every frame is whole
            # (decoding again is within the limit now that the output is known to be).
            rest = data
            while rest:
                frame = context.decompressobj()
                frame.decompress(rest)
                if not frame.eof:
                    raise CorruptBatch("zstd frame cut short")
                rest = frame.unused_data
            return bytes(out)
    except (CorruptBatch, CodecUnavailable):
        raise
    except Exception as e:  # each module's own error type
        raise CorruptBatch(f"{CODEC_NAMES[codec]} decompression failed: {e}") from None
    raise CorruptBatch(f"unknown compression codec {codec}")


def _gunzip(data: bytes, limit: int) -> bytes:
    """gzip members back to back, within ``limit``."""
    out = bytearray()
    while True:
        decoder = zlib.decompressobj(31)
        pending = data
        while True:
            # At most one byte past the limit: stop there, whatever the stream says.
            out += decoder.decompress(pending, limit + 1 - len(out))
            if len(out) > limit:
                raise _too_large(limit)
            pending = decoder.unconsumed_tail
            if decoder.eof or not pending:
                break
        if not decoder.eof:
            raise CorruptBatch("gzip stream cut short")
        data = decoder.unused_data
        if not data:
            return bytes(out)


def _unsnappy(data: bytes, limit: int) -> bytes:
    """xerial-framed snappy blocks, or one raw block without the xerial header."""
    _, decompress_raw = _import_snappy()
    if not data.startswith(XERIAL_SNAPPY_HEADER):
        blocks = [data]
    else:
        blocks, at = [], len(XERIAL_SNAPPY_HEADER)
        while at < len(data):
            if len(data) - at < 4:
                raise CorruptBatch("snappy block length cut short")
            (length,) = struct.unpack_from(">I", data, at)
            if at + 4 + length > len(data):
                raise CorruptBatch("snappy block runs past the batch")
            blocks.append(data[at + 4:at + 4 + length])
            at += 4 + length
    out = bytearray()
    for block in blocks:
        # The declared length is checked before anything is allocated for it.
        declared = _snappy_raw_length(block)
        if declared > limit - len(out):
            raise _too_large(limit)
        inflated = decompress_raw(block)
        if len(inflated) != declared:
            raise CorruptBatch("snappy block inflates to another length than it declares")
        out += inflated
    return bytes(out)


# --------------------------------------------------------------------------
# Magic 2 (storage-format.md "Header, magic 2"; protocol.md 5.6, "Magic 2: a compressed batch")


def _put_varint(value: int) -> bytes:
    """Kafka's zigzag base-128 varint (and varlong)."""
    raw = (value << 1) ^ (value >> 63)
    raw &= (1 << 64) - 1
    out = bytearray()
    while raw >= 0x80:
        out.append((raw & 0x7F) | 0x80)
        raw >>= 7
    out.append(raw)
    return bytes(out)


def _put_nullable(part: Optional[bytes]) -> bytes:
    return _put_varint(-1) if part is None else _put_varint(len(part)) + bytes(part)


def encode_kafka_records(records: Sequence[Record], base_timestamp: int) -> bytes:
    """Kafka records back to back: what a magic-2 batch compresses."""
    out = []
    for index, rec in enumerate(records):
        body = [b"\0", _put_varint(rec.timestamp - base_timestamp), _put_varint(index),
                _put_nullable(rec.key), _put_nullable(rec.value), _put_varint(len(rec.headers))]
        for name, value in rec.headers:
            body.append(_put_nullable(name.encode("utf-8")))
            body.append(_put_nullable(value))
        body_bytes = b"".join(body)
        out.append(_put_varint(len(body_bytes)) + body_bytes)
    return b"".join(out)


def build_kafka_batch(epoch: int, records: Sequence[Record], codec: int = CODEC_GZIP,
                      producer: Optional[Tuple[int, int, int]] = None,
                      transactional: bool = False) -> bytes:
    """Builds a magic-2 batch as a native producer sends it to compress (protocol.md 5.6):
    Kafka records compressed with ``codec`` behind the 64-byte native header, whose ``epoch`` is
    the fencing token. ``producer`` is ``(producer_id, producer_epoch, base_sequence)`` of an
    idempotent producer, else all three are -1. Timestamps may go back in time (negative
    deltas from the first record's)."""
    if not records:
        raise ValueError("a batch needs at least one record")
    if len(records) > MAX_RECORDS_PER_BATCH:
        raise ValueError("too many records for one batch")
    if codec not in CODEC_NAMES:
        raise ValueError(f"unknown codec {codec}")
    now = int(time.time() * 1000)
    stamped = [r if r.timestamp is not None else
               Record(r.value, r.key, now, list(r.headers)) for r in records]
    base_ts = stamped[0].timestamp
    max_ts = max(r.timestamp for r in stamped)
    plain = encode_kafka_records(stamped, base_ts)
    if len(plain) > MAX_INFLATED_RECORDS_BYTES:
        raise ValueError("records larger than a batch may inflate to")
    body = compress(codec, plain)
    producer_id, producer_epoch, base_sequence = producer or (-1, -1, -1)
    if transactional and producer is None:
        raise ValueError("a transactional batch needs a producer")
    attributes = codec | (ATTRIBUTE_TRANSACTIONAL if transactional else 0)
    count = len(stamped)
    # Kafka bytes 21..61 (attributes to recordsCount) and the records: what its CRC-32C covers.
    covered = struct.pack(">hiqqqhii", attributes, count - 1, base_ts, max_ts, producer_id,
                          producer_epoch, base_sequence, count) + body
    kafka_crc = crc32c(covered)
    kafka = struct.pack(">qiiBI", 0, 49 + len(body), -1, 2, kafka_crc) + covered
    # The native header; its CRC-32C covers bytes 16..64 and then the Kafka CRC field.
    native = bytearray(NATIVE_KAFKA_HEADER.pack(
        0, 64 + len(kafka), 0, BATCH_MAGIC_KAFKA, attributes, 0, epoch, count, base_ts, max_ts,
        producer_id, producer_epoch, base_sequence, 0))
    struct.pack_into(">I", native, 12, crc32c(bytes(native[16:64]) + kafka[17:21]))
    return bytes(native) + kafka


def _kafka_varint(r: Reader, max_bytes: int) -> int:
    raw = 0
    for i in range(max_bytes):
        b = r.u8()
        raw |= (b & 0x7F) << (7 * i)
        if not b & 0x80:
            return (raw >> 1) ^ -(raw & 1)
    raise CorruptBatch("varint too long")


def _kafka_nullable(r: Reader) -> Optional[bytes]:
    n = _kafka_varint(r, 5)
    if n < -1:
        raise CorruptBatch(f"negative length {n}")
    return None if n == -1 else bytes(r._take(n))


def _parse_kafka_batch(mv: memoryview, pos: int, end: int, base_offset: int, epoch: int,
                       first_ts: int, max_ts: int, count: int, attributes: int,
                       verify_crc: bool) -> List[Record]:
    """The records of a magic-2 batch: the Kafka batch at pos + 64, checked against the
    native header (storage-format.md, "Header, magic 2"), its records inflated when
    compressed."""
    at = pos + 64
    if end - at < KAFKA_HEADER.size:
        raise CorruptBatch(f"magic-2 batch too short at byte {pos}")
    (k_base, k_length, k_leader_epoch, k_magic, k_crc, k_attributes, k_last_delta, k_base_ts,
     k_max_ts, _pid, _pepoch, _seq, k_count) = KAFKA_HEADER.unpack_from(mv, at)
    if verify_crc and crc32c(mv[at + 21:end]) != k_crc:
        raise CorruptBatch(f"Kafka CRC-32C mismatch at byte {pos}")
    if (k_base != base_offset or k_length != end - at - 12 or k_magic != 2
            or k_leader_epoch != -1 or k_last_delta != count - 1 or k_base_ts != first_ts
            or k_max_ts != max_ts or k_count != count or k_attributes != attributes):
        raise CorruptBatch(f"Kafka header disagrees with the native one at byte {pos}")
    r = Reader(decompress(attributes & ATTRIBUTE_CODEC_MASK, mv[at + KAFKA_HEADER.size:end]))
    records: List[Record] = []
    for index in range(count):
        length = _kafka_varint(r, 5)
        record_end = r.pos + length
        if length < 0 or record_end > len(r.data):
            raise CorruptBatch(f"record {index} overruns its batch")
        r.u8()  # record attributes, 0
        delta = _kafka_varint(r, 10)
        if _kafka_varint(r, 5) != index:
            raise CorruptBatch(f"record {index}: offset delta is not its index")
        key = _kafka_nullable(r)
        value = _kafka_nullable(r)
        headers = []
        for _ in range(_kafka_varint(r, 5)):
            name = _kafka_nullable(r)
            if name is None:
                raise CorruptBatch(f"record {index}: null header key")
            headers.append((name.decode("utf-8"), _kafka_nullable(r)))
        if r.pos != record_end:
            raise CorruptBatch(f"record {index}: fields do not fill its length")
        ts = first_ts + delta  # the delta may be negative (storage-format.md)
        if ts > max_ts or not -(1 << 63) <= ts < (1 << 63):
            raise CorruptBatch(f"record {index}: timestamp outside the batch's")
        records.append(Record(value=value, key=key, timestamp=ts, headers=headers,
                              offset=base_offset + index, epoch=epoch))
    if r.remaining():
        raise CorruptBatch("records do not fill the batch")
    return records


def parse_batches(data: bytes, verify_crc: bool = True) -> List[Batch]:
    """Splits the ``batches`` bytes of a Fetch response into parsed batches."""
    out: List[Batch] = []
    mv = memoryview(data)
    pos = 0
    while pos < len(mv):
        if len(mv) - pos < BATCH_HEADER.size:
            raise CorruptBatch(f"truncated batch header at byte {pos}")
        (base_offset, length, crc, magic, attributes, reserved, epoch, count,
         first_ts, max_ts) = BATCH_HEADER.unpack_from(mv, pos)
        end = pos + length
        if length < BATCH_HEADER.size or end > len(mv):
            raise CorruptBatch(f"bad batch_length {length} at byte {pos}")
        if magic == BATCH_MAGIC_KAFKA:
            if length < 64 + KAFKA_HEADER.size:
                raise CorruptBatch(f"magic-2 batch shorter than its headers at byte {pos}")
            # The header's CRC-32C covers its bytes 16..64, then the Kafka batch's CRC field.
            covered = bytes(mv[pos + 16:pos + 64]) + bytes(mv[pos + 81:pos + 85])
            if verify_crc and crc32c(covered) != crc:
                raise CorruptBatch(f"CRC-32C mismatch of the header at byte {pos}")
            if (attributes & ~(ATTRIBUTE_TRANSACTIONAL | ATTRIBUTE_CODEC_MASK)
                    or attributes & ATTRIBUTE_CODEC_MASK not in CODEC_NAMES
                    or reserved != 0 or not 1 <= count <= MAX_RECORDS_PER_BATCH):
                raise CorruptBatch(f"bad magic-2 header at byte {pos}")
            records = _parse_kafka_batch(mv, pos, end, base_offset, epoch, first_ts, max_ts,
                                         count, attributes, verify_crc)
            out.append(Batch(base_offset, length, crc, magic, attributes, epoch, count,
                             first_ts, max_ts, records))
            pos = end
            continue
        if verify_crc:
            actual = zlib.crc32(mv[pos + 16:end]) & 0xFFFFFFFF
            if actual != crc:
                raise CorruptBatch(
                    f"CRC mismatch at byte {pos}: header {crc:#010x}, computed {actual:#010x}")
        records_at = pos + BATCH_HEADER.size
        if magic == BATCH_MAGIC_WITH_PRODUCER:
            if length < BATCH_HEADER.size + PRODUCER_FIELDS.size:
                raise CorruptBatch(f"magic-3 batch shorter than its header at byte {pos}")
            (producer_id, producer_epoch, base_sequence,
             producer_reserved) = PRODUCER_FIELDS.unpack_from(mv, records_at)
            if producer_id < 0 or producer_epoch < 0 or base_sequence < 0 or producer_reserved:
                raise CorruptBatch(f"producer fields out of range at byte {pos}")
            records_at += PRODUCER_FIELDS.size
        elif magic != BATCH_MAGIC:
            raise CorruptBatch(f"magic {magic} at byte {pos}")
        if attributes != 0 or reserved != 0:
            raise CorruptBatch(f"attributes/reserved not zero at byte {pos}")
        if not 1 <= count <= MAX_RECORDS_PER_BATCH:
            raise CorruptBatch(f"record_count {count} at byte {pos}")
        if max_ts < first_ts:
            raise CorruptBatch(f"max_timestamp < first_timestamp at byte {pos}")
        records = _parse_records(mv, records_at, end, base_offset, epoch,
                                 first_ts, max_ts, count)
        out.append(Batch(base_offset, length, crc, magic, attributes, epoch, count,
                         first_ts, max_ts, records))
        pos = end
    return out


# --------------------------------------------------------------------------
# Request bodies (section 5)


def encode_api_versions() -> bytes:
    return b""


def encode_create_topic(name: str, partitions: int, config: TopicConfig) -> bytes:
    w = Writer().string16(name).u32(partitions)
    config.encode(w)
    return w.getvalue()


def encode_metadata(names: Sequence[str] = ()) -> bytes:
    w = Writer().u16(len(names))
    for n in names:
        w.string16(n)
    return w.getvalue()


def encode_acquire_lease(topic: str, partition: int, holder: str, ttl_ms: int) -> bytes:
    return Writer().string16(topic).u32(partition).string16(holder).u64(ttl_ms).getvalue()


def encode_renew_lease(topic: str, partition: int, lease_id: int) -> bytes:
    return Writer().string16(topic).u32(partition).u128(lease_id).getvalue()


encode_release_lease = encode_renew_lease


def encode_produce(topic: str, partition: int, batch: bytes) -> bytes:
    return Writer().string16(topic).u32(partition).bytes32(batch).getvalue()


def encode_fetch(topic: str, partition: int, offset: int, max_bytes: int,
                 max_wait_ms: int) -> bytes:
    return (Writer().string16(topic).u32(partition).u64(offset).u32(max_bytes)
            .u32(max_wait_ms).getvalue())


def encode_list_offsets(topic: str, partition: int) -> bytes:
    return Writer().string16(topic).u32(partition).getvalue()


# --------------------------------------------------------------------------
# Response bodies (section 5)


@dataclass
class ApiVersionsResponse:
    server: str
    versions: Dict[int, Tuple[int, int]]


@dataclass
class TopicMetadata:
    name: str
    partitions: int
    config: TopicConfig


@dataclass
class Lease:
    epoch: int
    lease_id: int
    ttl_ms: int


@dataclass
class RenewResponse:
    epoch: int
    ttl_ms: int


@dataclass
class ProduceResponse:
    base_offset: int
    last_offset: int
    log_end_offset: int


@dataclass
class FetchResponse:
    high_watermark: int
    log_start_offset: int
    raw_batches: bytes
    batches: List[Batch]

    def records(self, from_offset: int = 0) -> List[Record]:
        return [r for b in self.batches for r in b.records if r.offset >= from_offset]


@dataclass
class ListOffsetsResponse:
    earliest: int
    latest: int
    epoch: int


def decode_error_body(r: Reader, code: int) -> ErrorBody:
    body = ErrorBody(r.string16(), r.u64(), r.u64())
    if r.remaining() and code == LEASE_HELD:
        body.details = {"holder": r.string16(), "expires_in_ms": r.u64()}
    elif r.remaining() and code == OFFSET_OUT_OF_RANGE:
        body.details = {"offset": r.u64(), "earliest": r.u64(), "latest": r.u64()}
    # Section 4: bytes after the fields a client knows are ignored.
    r.pos = len(r.data)
    return body


def decode_api_versions(r: Reader) -> ApiVersionsResponse:
    server = r.string16()
    count = r.u16()
    versions = {}
    for _ in range(count):
        key, lo, hi = r.u16(), r.u16(), r.u16()
        versions[key] = (lo, hi)
    return ApiVersionsResponse(server, versions)


def decode_empty(r: Reader) -> None:
    return None


def decode_metadata(r: Reader) -> List[TopicMetadata]:
    count = r.u32()
    return [TopicMetadata(r.string16(), r.u32(), TopicConfig.decode(r)) for _ in range(count)]


def decode_acquire_lease(r: Reader) -> Lease:
    return Lease(r.u64(), r.u128(), r.u64())


def decode_renew_lease(r: Reader) -> RenewResponse:
    return RenewResponse(r.u64(), r.u64())


def decode_produce(r: Reader) -> ProduceResponse:
    return ProduceResponse(r.u64(), r.u64(), r.u64())


def decode_fetch(r: Reader) -> FetchResponse:
    hwm, lso = r.u64(), r.u64()
    raw = r.bytes32()
    return FetchResponse(hwm, lso, raw, parse_batches(raw))


def decode_list_offsets(r: Reader) -> ListOffsetsResponse:
    return ListOffsetsResponse(r.u64(), r.u64(), r.u64())


def decode_init_producer_id(r: Reader) -> Tuple[int, int]:
    """``(producer_id, producer_epoch)``: i64 and i16, two's complement."""
    producer_id, producer_epoch = struct.unpack(">qh", r._take(10))
    return producer_id, producer_epoch


DECODERS = {
    API_VERSIONS: decode_api_versions,
    CREATE_TOPIC: decode_empty,
    METADATA: decode_metadata,
    ACQUIRE_LEASE: decode_acquire_lease,
    RENEW_LEASE: decode_renew_lease,
    RELEASE_LEASE: decode_empty,
    PRODUCE: decode_produce,
    FETCH: decode_fetch,
    LIST_OFFSETS: decode_list_offsets,
    INIT_PRODUCER_ID: decode_init_producer_id,
}


# --------------------------------------------------------------------------
# Framing and connection (sections 2, 3, 4, 9)


def encode_request_frame(api_key: int, correlation_id: int, body: bytes,
                         api_version: int = PROTOCOL_API_VERSION) -> bytes:
    payload = struct.pack(">HHI", api_key, api_version, correlation_id) + body
    return struct.pack(">I", len(payload)) + payload


@dataclass
class RawResponse:
    correlation_id: int
    error_code: int
    body: bytes  # after the 6-byte response header

    def error(self) -> Optional[FencelogError]:
        if self.error_code == 0:
            return None
        r = Reader(self.body)
        eb = decode_error_body(r, self.error_code)
        r.end()
        return FencelogError(self.correlation_id, self.error_code, eb)


class Connection:
    def __init__(self, host: str, port: int, timeout: float = 10.0,
                 max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.max_frame_bytes = max_frame_bytes
        self._next_correlation_id = 1
        # correlation_id -> api_key, in send order (responses arrive in order)
        self.in_flight: Dict[int, int] = {}

    @classmethod
    def connect(cls, addr: str, **kw) -> "Connection":
        host, _, port = addr.rpartition(":")
        return cls(host.strip("[]"), int(port), **kw)

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> "Connection":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def next_correlation_id(self) -> int:
        cid = self._next_correlation_id
        self._next_correlation_id = (cid % 0xFFFFFFFF) + 1  # never 0
        return cid

    # -- low level --------------------------------------------------------

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send(self, api_key: int, body: bytes, correlation_id: Optional[int] = None,
             api_version: int = PROTOCOL_API_VERSION) -> int:
        cid = self.next_correlation_id() if correlation_id is None else correlation_id
        frame = encode_request_frame(api_key, cid, body, api_version)
        if len(frame) - 4 > self.max_frame_bytes:
            raise ValueError("request frame exceeds max_frame_bytes")
        self.in_flight[cid] = api_key
        self.send_raw(frame)
        return cid

    def _recv_exact(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError(
                    f"connection closed by server ({len(buf)}/{n} bytes read)")
            buf += chunk
        return bytes(buf)

    def recv(self) -> RawResponse:
        (length,) = struct.unpack(">I", self._recv_exact(4))
        if length == 0:
            raise ProtocolError("frame_length 0")
        if length > self.max_frame_bytes:
            raise ProtocolError(f"frame_length {length} exceeds {self.max_frame_bytes}")
        body = self._recv_exact(length)
        if length < 6:
            raise ProtocolError(f"response shorter than its 6-byte header ({length})")
        cid, code = struct.unpack_from(">IH", body, 0)
        self.in_flight.pop(cid, None)
        return RawResponse(cid, code, body[6:])

    @staticmethod
    def decode(api_key: int, resp: RawResponse):
        """Decodes a response body, raising FencelogError for error responses."""
        err = resp.error()
        if err is not None:
            raise err
        r = Reader(resp.body)
        value = DECODERS[api_key](r)
        r.end()
        return value

    # -- synchronous calls ------------------------------------------------

    def call(self, api_key: int, body: bytes):
        cid = self.send(api_key, body)
        resp = self.recv()
        if resp.correlation_id != cid:
            err = resp.error()
            raise ProtocolError(
                f"expected correlation_id {cid}, got {resp.correlation_id}"
                + (f" ({err})" if err else ""))
        return self.decode(api_key, resp)

    def api_versions(self) -> ApiVersionsResponse:
        return self.call(API_VERSIONS, encode_api_versions())

    def create_topic(self, name: str, partitions: int = 1,
                     config: Optional[TopicConfig] = None) -> None:
        return self.call(CREATE_TOPIC, encode_create_topic(name, partitions,
                                                           config or TopicConfig()))

    def metadata(self, names: Sequence[str] = ()) -> List[TopicMetadata]:
        return self.call(METADATA, encode_metadata(names))

    def acquire_lease(self, topic: str, partition: int, holder: str,
                      ttl_ms: int = 10_000) -> Lease:
        return self.call(ACQUIRE_LEASE, encode_acquire_lease(topic, partition, holder, ttl_ms))

    def renew_lease(self, topic: str, partition: int, lease_id: int) -> RenewResponse:
        return self.call(RENEW_LEASE, encode_renew_lease(topic, partition, lease_id))

    def release_lease(self, topic: str, partition: int, lease_id: int) -> None:
        return self.call(RELEASE_LEASE, encode_release_lease(topic, partition, lease_id))

    def produce_batch(self, topic: str, partition: int, batch: bytes) -> ProduceResponse:
        return self.call(PRODUCE, encode_produce(topic, partition, batch))

    def produce(self, topic: str, partition: int, epoch: int,
                records: Iterable[Record]) -> ProduceResponse:
        return self.produce_batch(topic, partition, build_batch(epoch, list(records)))

    def init_producer_id(self) -> Tuple[int, int]:
        return self.call(INIT_PRODUCER_ID, b"")

    def fetch(self, topic: str, partition: int, offset: int, max_bytes: int = 1 << 20,
              max_wait_ms: int = 0) -> FetchResponse:
        return self.call(FETCH, encode_fetch(topic, partition, offset, max_bytes, max_wait_ms))

    def list_offsets(self, topic: str, partition: int) -> ListOffsetsResponse:
        return self.call(LIST_OFFSETS, encode_list_offsets(topic, partition))
