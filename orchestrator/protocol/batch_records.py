"""The records of a Kafka record batch (magic 2): each record's bytes, and the compression of the records section.

:mod:`orchestrator.protocol.record_batch` frames a batch (its 61-byte header, CRC, attributes); this module writes
and reads what lies after the header: ``recordCount`` records, each::

    length varint | attributes int8 | timestampDelta varlong | offsetDelta varint
    | keyLength varint (-1: null) key | valueLength varint (-1: null) value
    | headerCount varint, each: keyLength varint, key (UTF-8) | valueLength varint (-1: null), value

and, when the batch is compressed, the one stream they are compressed into (gzip only: Kafka's reader reads
concatenated gzip members, and so does :func:`gunzip`).

Invariants:

* Reading is total and bounded: any bytes either decode into exactly the declared number of records or raise
  :class:`~orchestrator.errors.CorruptMessage` naming the record, its byte and the field; every read stays inside
  the record's declared length, and inflating stops at the caller's bound.
* ``decode_records`` of what ``encode_record`` wrote gives back equal records; varints are written in their shortest
  form, as every Kafka writer writes them.
* :class:`Record` is a frozen value; the decoder fills its slots directly (see :func:`new_record`), which gives what
  its ``__init__`` would.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from enum import IntEnum
from typing import cast

from orchestrator.errors import CorruptMessage, InvalidArgument, UnsupportedCompressionType
from orchestrator.protocol.codec import write_uvarint

MIN_RECORD_SIZE = 7  # length, attributes, timestampDelta, offsetDelta, keyLength, valueLength, headerCount
_MIN_HEADER_SIZE = 2  # keyLength, valueLength


class Compression(IntEnum):
    """Bits 0-2 of a batch's attributes."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


Header = tuple[str, bytes | None]


@dataclass(frozen=True, slots=True)
class Record:
    """One record of a batch; its offset and timestamp are relative to the batch's (see :class:`RecordBatch`).

    ``attributes`` is the record's own attribute byte, unused by Kafka (always 0) but kept so a batch re-encodes
    to the bytes it was read from.
    """

    offset_delta: int
    timestamp_delta: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()
    attributes: int = 0


# Decoding and build_batch make each Record through its slots' descriptors: the frozen dataclass's __init__ sets
# each field with object.__setattr__, which takes half the time of decoding a small record. The fields get what
# __init__ would give them.
_new_object = object.__new__
_set_offset_delta, _set_timestamp_delta, _set_key, _set_value, _set_headers, _set_attributes = (
    getattr(Record, field).__set__ for field in Record.__slots__
)
assert Record.__slots__ == ("offset_delta", "timestamp_delta", "key", "value", "headers", "attributes")
_SETTERS = (_set_offset_delta, _set_timestamp_delta, _set_key, _set_value, _set_headers, _set_attributes)

try:  # the compiled decoder (orchestrator/protocol/_batch_records_c.pyx), which make builds
    from orchestrator.protocol._batch_records_c import (  # type: ignore[import-not-found]
        decode_records as _compiled_decode_records,
    )
except ImportError:  # pragma: no cover - an install that did not compile it: the reference alone
    _compiled_decode_records = None

#: Whether :func:`decode_records` runs compiled (the build made ``_batch_records_c``).
COMPILED = _compiled_decode_records is not None


def new_record(
    offset_delta: int,
    timestamp_delta: int,
    key: bytes | None,
    value: bytes | None,
    headers: tuple[Header, ...],
    attributes: int,
) -> Record:
    record = _new_object(Record)
    _set_offset_delta(record, offset_delta)
    _set_timestamp_delta(record, timestamp_delta)
    _set_key(record, key)
    _set_value(record, value)
    _set_headers(record, headers)
    _set_attributes(record, attributes)
    return record


def _put_varint(zigzagged: int, out: bytearray) -> None:
    if zigzagged < 0x80:
        out.append(zigzagged)
    else:
        write_uvarint(zigzagged, out)


def _put_bytes(data: bytes | None, out: bytearray) -> None:
    """A nullable key, value or header value: its length (-1 for null) and its bytes. A length past int32 makes
    the batch length overflow too, which :func:`encode_batch` refuses."""
    if data is None:
        out.append(1)  # zigzag(-1)
    else:
        _put_varint(len(data) << 1, out)
        out += data


def encode_record(record: Record, out: bytearray) -> None:
    """Appends the record, its length first (so the body is built apart, then copied)."""
    timestamp_delta, offset_delta, attributes = record.timestamp_delta, record.offset_delta, record.attributes
    if not -(1 << 63) <= timestamp_delta < 1 << 63:
        raise InvalidArgument(f"timestamp delta {timestamp_delta} does not fit in int64")
    if not -(1 << 31) <= offset_delta < 1 << 31:
        raise InvalidArgument(f"offset delta {offset_delta} does not fit in int32")
    if not -128 <= attributes < 128:
        raise InvalidArgument(f"record attributes {attributes} do not fit in int8")
    body = bytearray((attributes & 0xFF,))
    _put_varint((timestamp_delta << 1) ^ (timestamp_delta >> 63), body)
    _put_varint((offset_delta << 1) ^ (offset_delta >> 63), body)
    _put_bytes(record.key, body)
    _put_bytes(record.value, body)
    headers = record.headers
    _put_varint(len(headers) << 1, body)
    try:
        for header_key, header_value in headers:
            _put_bytes(header_key.encode(), body)
            _put_bytes(header_value, body)
    except UnicodeEncodeError as e:
        raise InvalidArgument(f"header key {e.object!r} cannot be written as UTF-8 ({e.reason})") from None
    _put_varint(len(body) << 1, out)
    out += body


def compress(compression: Compression, data: bytes) -> bytes:
    if compression is Compression.NONE:
        return data
    if compression is Compression.GZIP:
        # One gzip member, as Kafka's GZIPOutputStream writes, at Deflater's default level (6). zlib writes no
        # time or name in the gzip header, so the same records compress to the same bytes.
        deflate = zlib.compressobj(6, zlib.DEFLATED, 31)
        return deflate.compress(data) + deflate.flush()
    raise UnsupportedCompressionType(f"cannot write {compression.name.lower()}: only none and gzip are supported")


def gunzip(payload: memoryview, limit: int, where: str) -> bytes:
    """Every gzip member of ``payload`` inflated (Kafka's reader reads concatenated members), at most ``limit``
    bytes in all."""
    chunks: list[bytes] = []
    total = 0
    rest: bytes | memoryview = payload
    try:
        while True:
            inflate = zlib.decompressobj(31)
            chunk = inflate.decompress(rest, limit - total + 1)
            total += len(chunk)
            if total > limit:
                raise CorruptMessage(f"{where}: gzip records inflate to more than {limit} bytes")
            chunks.append(chunk)
            if not inflate.eof:
                raise CorruptMessage(f"{where}: gzip stream ends early")
            rest = inflate.unused_data
            if not rest:
                return b"".join(chunks)
    except zlib.error as e:
        raise CorruptMessage(f"{where}: gzip records do not inflate: {e}") from None


def _varint(data: bytes, pos: int, end: int, max_bytes: int, what: str) -> tuple[int, int]:
    """The zigzag varint (``max_bytes`` 5) or varlong (10) at ``pos``, and the position after it."""
    if pos + 1 < end:  # one or two bytes: every length and delta below 8192
        first = data[pos]
        if first < 0x80:
            return (first >> 1) ^ -(first & 1), pos + 1
        second = data[pos + 1]
        if second < 0x80:
            value = (first & 0x7F) | (second << 7)
            return (value >> 1) ^ -(value & 1), pos + 2
    start = pos
    result = 0
    shift = 0
    while True:
        if pos >= end:
            raise CorruptMessage(f"{what} runs past the end ({pos - start} of its bytes present)")
        if pos - start == max_bytes:
            raise CorruptMessage(f"{what} is a varint longer than {max_bytes} bytes")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            break
        shift += 7
    bits = 32 if max_bytes == 5 else 64
    if result >> bits:
        raise CorruptMessage(f"{what} is a varint that overflows {bits} bits")
    return (result >> 1) ^ -(result & 1), pos


def decode_records(data: bytes, count: int, origin: int, where: str) -> tuple[Record, ...]:
    """``count`` records filling ``data`` exactly; ``data`` starts at byte ``origin`` of the batch (0 for
    decompressed records), which messages add to positions, after ``where``.

    The compiled twin (``_batch_records_c.pyx``, built by ``make``) when it is built (:data:`COMPILED`), else the
    reference, :func:`decode_records_py`: the same records and the same errors for the same bytes."""
    if _compiled_decode_records is None:
        return decode_records_py(data, count, origin, where)
    return cast(tuple[Record, ...], _compiled_decode_records(data, count, origin, where, Record, _new_object, _SETTERS))


def decode_records_py(data: bytes, count: int, origin: int, where: str) -> tuple[Record, ...]:
    """The reference decoder, in Python (:func:`decode_records`).

    The hot loop of decoding: a one-byte varint is read inline (a call costs more than the read), longer ones by
    :func:`_varint`; every read is bounded by the record's end.
    """
    varint = _varint
    new, record_type = _new_object, Record
    set_offset_delta, set_timestamp_delta, set_key, set_value = (
        _set_offset_delta,
        _set_timestamp_delta,
        _set_key,
        _set_value,
    )
    set_headers, set_attributes = _set_headers, _set_attributes
    end = len(data)
    pos = start = 0
    records: list[Record] = []
    append = records.append
    try:
        for _ in range(count):
            start = pos
            length, pos = varint(data, pos, end, 5, "length")
            record_end = pos + length
            if length <= 0 or record_end > end:
                raise CorruptMessage(f"length {length} with {end - pos} bytes left")
            attributes = data[pos]
            pos += 1
            timestamp_delta, pos = varint(data, pos, record_end, 10, "timestamp delta")
            offset_delta, pos = varint(data, pos, record_end, 5, "offset delta")
            if pos < record_end and (byte := data[pos]) < 0x80:
                key_length = (byte >> 1) ^ -(byte & 1)
                pos += 1
            else:
                key_length, pos = varint(data, pos, record_end, 5, "key length")
            if key_length < 0:
                if key_length != -1:
                    raise CorruptMessage(f"key length {key_length}")
                key = None
            else:
                if pos + key_length > record_end:
                    raise CorruptMessage(f"key length {key_length} runs past the record")
                key = data[pos : pos + key_length]
                pos += key_length
            value_length, pos = varint(data, pos, record_end, 5, "value length")
            if value_length < 0:
                if value_length != -1:
                    raise CorruptMessage(f"value length {value_length}")
                value = None
            else:
                if pos + value_length > record_end:
                    raise CorruptMessage(f"value length {value_length} runs past the record")
                value = data[pos : pos + value_length]
                pos += value_length
            if pos < record_end and data[pos] == 0:  # no headers, the common case
                headers: tuple[Header, ...] = ()
                pos += 1
            else:
                header_count, pos = varint(data, pos, record_end, 5, "header count")
                headers, pos = _decode_headers(data, pos, record_end, header_count)
            if pos != record_end:
                raise CorruptMessage(f"length {length} but its fields take {pos - record_end + length}")
            record = new(record_type)
            set_offset_delta(record, offset_delta)
            set_timestamp_delta(record, timestamp_delta)
            set_key(record, key)
            set_value(record, value)
            set_headers(record, headers)
            set_attributes(record, attributes - 256 * (attributes >> 7))
            append(record)
    except CorruptMessage as e:
        raise CorruptMessage(f"{where}record {len(records)} at byte {origin + start}: {e.message}") from None
    if pos != end:
        raise CorruptMessage(f"{where}{end - pos} bytes at byte {origin + pos} after the {count} records it declares")
    return tuple(records)


def _decode_headers(data: bytes, pos: int, end: int, count: int) -> tuple[tuple[Header, ...], int]:
    if count < 0 or count > (end - pos) // _MIN_HEADER_SIZE:
        raise CorruptMessage(f"header count {count} with {end - pos} bytes left in the record")
    varint = _varint
    headers: list[Header] = []
    append = headers.append
    try:
        for _ in range(count):
            if pos < end and (byte := data[pos]) < 0x80:
                key_length = (byte >> 1) ^ -(byte & 1)
                pos += 1
            else:
                key_length, pos = varint(data, pos, end, 5, "key length")
            key_end = pos + key_length
            if key_length < 0 or key_end > end:
                raise CorruptMessage(f"key length {key_length} with {end - pos} bytes left in the record")
            try:
                key = data[pos:key_end].decode()
            except UnicodeDecodeError as e:
                raise CorruptMessage(f"key is not UTF-8 ({e.reason} at its byte {e.start})") from None
            if key_end < end and (byte := data[key_end]) < 0x80:
                value_length = (byte >> 1) ^ -(byte & 1)
                pos = key_end + 1
            else:
                value_length, pos = varint(data, key_end, end, 5, "value length")
            if value_length < 0:
                if value_length != -1:
                    raise CorruptMessage(f"value length {value_length}")
                append((key, None))
            else:
                value_end = pos + value_length
                if value_end > end:
                    raise CorruptMessage(f"value length {value_length} runs past the record")
                append((key, data[pos:value_end]))
                pos = value_end
    except CorruptMessage as e:
        raise CorruptMessage(f"header {len(headers)}: {e.message}") from None
    return tuple(headers), pos
