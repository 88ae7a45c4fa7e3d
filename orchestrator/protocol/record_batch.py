"""Kafka's record batch, magic 2: the format of a Produce request's and a Fetch response's records and of a
log segment file.

A batch, big-endian::

    baseOffset int64 | batchLength int32 | partitionLeaderEpoch int32 | magic int8 (2) | crc uint32
    | attributes int16 | lastOffsetDelta int32 | baseTimestamp int64 | maxTimestamp int64
    | producerId int64 | producerEpoch int16 | baseSequence int32 | recordCount int32 | records

``batchLength`` counts the bytes after itself. ``crc`` is the CRC-32C of everything from ``attributes`` to the end.
``attributes``: compression in bits 0-2, timestamp type bit 3, transactional bit 4, control bit 5, delete horizon
bit 6 (``baseTimestamp`` is then the delete horizon). When compressed, ``records`` is one compressed stream of all
the records; ``recordCount`` stays outside it. A record (written and read by
:mod:`orchestrator.protocol.batch_records`)::

    length varint | attributes int8 | timestampDelta varlong | offsetDelta varint
    | keyLength varint (-1: null) key | valueLength varint (-1: null) value
    | headerCount varint, each: keyLength varint, key (UTF-8) | valueLength varint (-1: null), value

Varints are zigzag-encoded (a varint has at most 5 bytes and 32 bits, a varlong 10 bytes and 64 bits). They are
written with :func:`~orchestrator.protocol.codec.write_uvarint` after the zigzag step, but read here rather than with
codec's ``Reader``: a bad record is CORRUPT_MESSAGE (answered, the connection kept), not a ProtocolError (the
connection closed), and the record loop reads one-byte varints inline.

Compression: none and gzip (zlib, in the standard library). Snappy, lz4 and zstd raise
:class:`~orchestrator.errors.UnsupportedCompressionType` (Kafka's 76) both ways: no library for them is installed.

Invariants:

* Decoding is total: any bytes either decode or raise :class:`~orchestrator.errors.CorruptMessage` (or
  UnsupportedCompressionType) with a message naming the batch, the record and the field; never IndexError,
  struct.error, zlib.error or UnicodeDecodeError.
* Nothing is allocated from an untrusted length before that length is checked against the bytes present, and a
  compressed batch is inflated to at most ``max_uncompressed_bytes``.
* A truncated last batch is not an error: a Fetch response may end inside one. :func:`split_batches` reports its
  size, :func:`decode_batches` stops before it. A complete batch that does not decode is an error, as is a batch
  whose first 17 bytes (up to the magic) no valid batch could start with, complete or not (as in Kafka).
* Stricter than Kafka's Java reader in two places, both written by no client: a key or value length below -1 (Java
  reads it as null) and a header key that is not UTF-8 (Java replaces the bad bytes) are corrupt.
* ``decode_batch(encode_batch(b)) == b`` for every batch ``encode_batch`` accepts, and ``encode_batch`` of a decoded
  uncompressed batch gives back its bytes when they used the shortest varints (as every Kafka writer does).
* ``baseOffset`` and ``partitionLeaderEpoch`` lie before the CRC'd bytes: :func:`rebased` rewrites both in one copy
  without touching the CRC, as a broker assigns them.
* Values are frozen dataclasses; encoding errors in a value (an int out of its field's range, an unknown
  compression id) are :class:`~orchestrator.errors.InvalidArgument`: nothing came off a wire.

Decoding reads the header with one ``struct.unpack_from`` on a memoryview and walks the records of a ``bytes`` copy
of the batch's records (one copy per batch, so keys and values are single slices); the only per-byte loop is the
multi-byte varint.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import NamedTuple

from crc32c import crc32c

from orchestrator.errors import CorruptMessage, InvalidArgument, UnsupportedCompressionType
from orchestrator.protocol.batch_records import (
    MIN_RECORD_SIZE,
    Compression,
    Header,
    Record,
    compress,
    decode_records,
    encode_record,
    gunzip,
    new_record,
)

MAGIC = 2
LOG_OVERHEAD = 12  # baseOffset and batchLength: the bytes batchLength does not count
HEADER_UP_TO_MAGIC = 17  # enough to tell a batch's size and whether it is a v2 batch
RECORD_BATCH_OVERHEAD = 61  # the header, up to and including recordCount
MIN_BATCH_LENGTH = RECORD_BATCH_OVERHEAD - LOG_OVERHEAD

_LENGTH_AT = 8
_PARTITION_LEADER_EPOCH_AT = 12
_MAGIC_AT = 16
_CRC_AT = 17
_ATTRIBUTES_AT = 21
_LAST_OFFSET_DELTA_AT = 23
_MAX_TIMESTAMP_AT = 35  # after attributes (2), lastOffsetDelta (4), baseTimestamp (8)

# The whole header; the CRC'd part (attributes .. recordCount) packed on its own when encoding.
_HEADER = struct.Struct(">qiibIhiqqqhii")
_PREFIX = struct.Struct(">qiibI")
_CRC_PART = struct.Struct(">hiqqqhii")
_LENGTH_TO_MAGIC = struct.Struct(">iib")  # batchLength, partitionLeaderEpoch, magic
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_U32 = struct.Struct(">I")
_I16 = struct.Struct(">h")
assert _HEADER.size == RECORD_BATCH_OVERHEAD and _PREFIX.size + _CRC_PART.size == _HEADER.size

DEFAULT_MAX_UNCOMPRESSED_BYTES = 256 * 1024 * 1024  # a bound on inflating one batch (Kafka's batches are ~1 MiB)
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1


class TimestampType(IntEnum):
    """Bit 3 of a batch's attributes: the producer's clock, or the broker's when it appended the batch."""

    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


_COMPRESSION_MASK = 0x07
_TIMESTAMP_TYPE_BIT = 0x08
_TRANSACTIONAL_BIT = 0x10
_CONTROL_BIT = 0x20
_DELETE_HORIZON_BIT = 0x40


@dataclass(frozen=True, slots=True)
class RecordBatch:
    """A decoded batch. ``attributes`` is the raw int16; the properties read its bits."""

    base_offset: int
    partition_leader_epoch: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records: tuple[Record, ...]

    @property
    def compression(self) -> Compression:
        """The codec; raises InvalidArgument for an id Kafka does not define (5-7), which decoding never returns."""
        return _compression(self.attributes & _COMPRESSION_MASK)

    @property
    def timestamp_type(self) -> TimestampType:
        return TimestampType.LOG_APPEND_TIME if self.attributes & _TIMESTAMP_TYPE_BIT else TimestampType.CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & _TRANSACTIONAL_BIT)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & _CONTROL_BIT)

    @property
    def delete_horizon_ms(self) -> int | None:
        """When the log cleaner may drop this batch's tombstones and markers (``baseTimestamp`` holds it)."""
        return self.base_timestamp if self.attributes & _DELETE_HORIZON_BIT else None

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    def offset_of(self, record: Record) -> int:
        return self.base_offset + record.offset_delta

    def timestamp_of(self, record: Record) -> int:
        """A record's timestamp: the batch's max timestamp for every record when the broker stamped it."""
        if self.attributes & _TIMESTAMP_TYPE_BIT:
            return self.max_timestamp
        return self.base_timestamp + record.timestamp_delta

    def absolute_records(self) -> Iterator[tuple[int, int, Record]]:
        """``(offset, timestamp, record)`` for each record, in the batch's order."""
        for record in self.records:
            yield self.offset_of(record), self.timestamp_of(record), record


class SplitBatches(NamedTuple):
    """The complete batches at the start of a buffer (views into it) and the size of the truncated one after them
    (0 when the buffer ends on a batch boundary)."""

    batches: tuple[memoryview, ...]
    partial_size: int


# --- attributes


def _compression(value: int) -> Compression:
    try:
        return Compression(value)
    except ValueError:
        raise InvalidArgument(f"compression id {value} is not one Kafka defines (0-4)") from None


def batch_attributes(
    *,
    compression: Compression = Compression.NONE,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
    is_transactional: bool = False,
    is_control: bool = False,
    has_delete_horizon: bool = False,
) -> int:
    """The attributes int16 these properties make."""
    return (
        int(compression)
        | (_TIMESTAMP_TYPE_BIT if timestamp_type is TimestampType.LOG_APPEND_TIME else 0)
        | (_TRANSACTIONAL_BIT if is_transactional else 0)
        | (_CONTROL_BIT if is_control else 0)
        | (_DELETE_HORIZON_BIT if has_delete_horizon else 0)
    )


# --- encoding


def _check_int(what: str, value: int, bits: int) -> int:
    limit = 1 << (bits - 1)
    if not -limit <= value < limit:
        raise InvalidArgument(f"{what} {value} does not fit in int{bits}")
    return value


def encode_batch(batch: RecordBatch) -> bytes:
    """The batch's bytes, with ``batchLength``, ``recordCount`` and the CRC computed here.

    Raises InvalidArgument for a field out of its range, UnsupportedCompressionType for snappy, lz4 and zstd.
    """
    compression = _compression(batch.attributes & _COMPRESSION_MASK)
    records = bytearray()
    for record in batch.records:
        encode_record(record, records)
    payload = compress(compression, bytes(records))
    fields = (
        ("attributes", batch.attributes, 16),
        ("last offset delta", batch.last_offset_delta, 32),
        ("base timestamp", batch.base_timestamp, 64),
        ("max timestamp", batch.max_timestamp, 64),
        ("producer id", batch.producer_id, 64),
        ("producer epoch", batch.producer_epoch, 16),
        ("base sequence", batch.base_sequence, 32),
        ("record count", len(batch.records), 32),
    )
    crc_part = _CRC_PART.pack(*(_check_int(what, value, bits) for what, value, bits in fields))
    batch_length = _check_int("batch length", _HEADER.size - LOG_OVERHEAD + len(payload), 32)
    prefix = _PREFIX.pack(
        _check_int("base offset", batch.base_offset, 64),
        batch_length,
        _check_int("partition leader epoch", batch.partition_leader_epoch, 32),
        MAGIC,
        crc32c(payload, crc32c(crc_part)),
    )
    return b"".join((prefix, crc_part, payload))


RecordInput = tuple[bytes | None, bytes | None, int, Sequence[Header]]


def build_batch(
    base_offset: int,
    records: Sequence[RecordInput],
    *,
    compression: Compression = Compression.NONE,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    is_transactional: bool = False,
    is_control: bool = False,
) -> RecordBatch:
    """A batch of ``records``, each ``(key, value, timestamp_ms, headers)``, at consecutive offsets from
    ``base_offset``, as a producer builds one: the first record's timestamp is the base, the largest the max.

    Pass the result to :func:`encode_batch` for its bytes. Raises InvalidArgument for no records (a producer never
    sends an empty batch).
    """
    if not records:
        raise InvalidArgument("a batch needs at least one record")
    base_timestamp = records[0][2]
    built = tuple(
        new_record(index, timestamp - base_timestamp, key, value, tuple(headers), 0)
        for index, (key, value, timestamp, headers) in enumerate(records)
    )
    attributes = batch_attributes(
        compression=compression,
        timestamp_type=timestamp_type,
        is_transactional=is_transactional,
        is_control=is_control,
    )
    return RecordBatch(
        base_offset=base_offset,
        partition_leader_epoch=partition_leader_epoch,
        attributes=attributes,
        last_offset_delta=len(built) - 1,
        base_timestamp=base_timestamp,
        max_timestamp=max(timestamp for _, _, timestamp, _ in records),
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        records=built,
    )


# --- rewriting a batch's unchecksummed fields


def _single_batch(raw: bytes | bytearray | memoryview) -> memoryview:
    view = _byte_view(raw)
    if len(view) < RECORD_BATCH_OVERHEAD:
        raise CorruptMessage(f"a record batch has at least {RECORD_BATCH_OVERHEAD} bytes, this one {len(view)}")
    batch_length, _, magic = _LENGTH_TO_MAGIC.unpack_from(view, _LENGTH_AT)
    if magic != MAGIC:
        raise CorruptMessage(f"record batch magic is {magic}, only {MAGIC} is supported")
    if batch_length + LOG_OVERHEAD != len(view):
        raise CorruptMessage(f"record batch length {batch_length} does not match its {len(view)} bytes")
    return view


def rebased(raw: bytes | bytearray | memoryview, base_offset: int, partition_leader_epoch: int) -> bytes:
    """A copy of one encoded batch with the offsets and leader epoch a broker assigns it, in one copy; its CRC stays
    valid (neither field is covered)."""
    view = _single_batch(raw)
    head = _I64.pack(_check_int("base offset", base_offset, 64)) + view[_LENGTH_AT:_PARTITION_LEADER_EPOCH_AT]
    epoch = _I32.pack(_check_int("partition leader epoch", partition_leader_epoch, 32))
    return b"".join((head, epoch, view[_MAGIC_AT:]))


def with_max_timestamp(
    raw: bytes | bytearray | memoryview, max_timestamp: int, timestamp_type: TimestampType | None = None
) -> bytes:
    """A copy of one encoded batch with another ``maxTimestamp`` (and, if given, timestamp type), its CRC-32C
    computed again, as Kafka's broker rewrites a batch: with LogAppendTime the broker's clock becomes every record's
    timestamp; with CreateTime the header's max is set to the records' true max."""
    view = _single_batch(raw)
    out = bytearray(view)
    if timestamp_type is not None:
        (attributes,) = _I16.unpack_from(out, _ATTRIBUTES_AT)
        bit = _TIMESTAMP_TYPE_BIT if timestamp_type == TimestampType.LOG_APPEND_TIME else 0
        _I16.pack_into(out, _ATTRIBUTES_AT, (attributes & ~_TIMESTAMP_TYPE_BIT) | bit)
    _I64.pack_into(out, _MAX_TIMESTAMP_AT, _check_int("timestamp", max_timestamp, 64))
    _U32.pack_into(out, _CRC_AT, crc32c(out[_ATTRIBUTES_AT:]))
    return bytes(out)


def with_log_append_time(raw: bytes | bytearray | memoryview, now_ms: int) -> bytes:
    """A copy of one encoded batch stamped with the broker's clock (a topic with ``message.timestamp.type`` =
    LogAppendTime): :func:`with_max_timestamp` with ``now_ms`` and the LogAppendTime bit."""
    return with_max_timestamp(raw, now_ms, TimestampType.LOG_APPEND_TIME)


# --- decoding


def _byte_view(data: bytes | bytearray | memoryview) -> memoryview:
    view = memoryview(data)
    return view if view.format == "B" and view.ndim == 1 else view.cast("B")


def _frames(view: memoryview) -> Iterator[tuple[int, memoryview]]:
    """``(position, batch)`` for each complete batch; stops at the end or before a truncated last batch."""
    size = len(view)
    pos = 0
    while size - pos >= HEADER_UP_TO_MAGIC:
        batch_length, _, magic = _LENGTH_TO_MAGIC.unpack_from(view, pos + _LENGTH_AT)
        if batch_length < MIN_BATCH_LENGTH:
            raise CorruptMessage(
                f"record batch at byte {pos}: batch length {batch_length} is less than the minimum {MIN_BATCH_LENGTH}"
            )
        if magic != MAGIC:
            raise CorruptMessage(f"record batch at byte {pos}: magic is {magic}, only {MAGIC} is supported")
        end = pos + LOG_OVERHEAD + batch_length
        if end > size:
            return
        yield pos, view[pos:end]
        pos = end


class BatchHeader(NamedTuple):
    """A batch's header fields, read without decoding its records (a log reads these to index and search)."""

    base_offset: int
    size: int  # the whole batch's bytes, LOG_OVERHEAD included
    partition_leader_epoch: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1


def batch_header(raw: memoryview) -> BatchHeader:
    """The header of the batch ``raw`` starts with (as framed by :func:`frames`). Raises CorruptMessage for fewer
    bytes than a header has."""
    if len(raw) < RECORD_BATCH_OVERHEAD:
        raise CorruptMessage(f"a record batch has at least {RECORD_BATCH_OVERHEAD} bytes, this one {len(raw)}")
    base, length, epoch, _, crc, attributes, delta, base_ts, max_ts, pid, pepoch, seq, count = _HEADER.unpack_from(
        raw, 0
    )
    return BatchHeader(
        base, length + LOG_OVERHEAD, epoch, crc, attributes, delta, base_ts, max_ts, pid, pepoch, seq, count
    )


def crc_matches(raw: memoryview) -> bool:
    """Whether the CRC-32C a framed batch carries is that of its bytes (attributes to the end)."""
    return len(raw) >= RECORD_BATCH_OVERHEAD and crc32c(raw[_ATTRIBUTES_AT:]) == _U32.unpack_from(raw, _CRC_AT)[0]


def frames(data: bytes | bytearray | memoryview) -> Iterator[tuple[int, memoryview]]:
    """``(position, batch)`` for each complete batch of ``data``, without decoding; stops before a truncated last
    batch. Raises CorruptMessage for a batch header no valid batch has (a length below the minimum, a magic not 2)."""
    return _frames(_byte_view(data))


def split_batches(data: bytes | bytearray | memoryview) -> SplitBatches:
    """The complete batches of ``data`` (a Fetch response's records, a segment file) without decoding them, and
    the size of a truncated batch at its end. Raises CorruptMessage for a batch header no valid batch has."""
    view = _byte_view(data)
    batches = tuple(batch for _, batch in _frames(view))
    return SplitBatches(batches, len(view) - sum(len(batch) for batch in batches))


def decode_batches(
    data: bytes | bytearray | memoryview,
    *,
    verify_crc: bool = True,
    max_uncompressed_bytes: int = DEFAULT_MAX_UNCOMPRESSED_BYTES,
) -> Iterator[RecordBatch]:
    """Each complete batch of ``data`` in turn, decoded; a truncated last batch is skipped (its size is
    :func:`split_batches`'s ``partial_size``). Raises CorruptMessage when it reaches a batch that does not decode."""
    for position, raw in _frames(_byte_view(data)):
        yield _decode(raw, position, verify_crc, max_uncompressed_bytes)


def records_at_or_after(data: bytes | bytearray | memoryview, offset: int) -> Iterator[tuple[int, int, Record]]:
    """``(offset, timestamp, record)`` of every record from ``offset`` on in the complete batches of ``data`` (a
    Fetch response's records: they may begin below the offset asked for and end in a truncated batch), skipping
    control batches (transaction markers), as a consumer reads them."""
    for _, raw in _frames(_byte_view(data)):
        if _I64.unpack_from(raw, 0)[0] + _I32.unpack_from(raw, _LAST_OFFSET_DELTA_AT)[0] < offset:
            continue  # the whole batch lies below the offset: not even decoded
        batch = _decode(raw, 0, True, DEFAULT_MAX_UNCOMPRESSED_BYTES)
        if batch.is_control:
            continue
        for at, timestamp, record in batch.absolute_records():
            if at >= offset:
                yield at, timestamp, record


def decode_batch(
    raw: bytes | bytearray | memoryview,
    *,
    verify_crc: bool = True,
    max_uncompressed_bytes: int = DEFAULT_MAX_UNCOMPRESSED_BYTES,
) -> RecordBatch:
    """Exactly one batch: ``raw`` must hold it whole and nothing after it."""
    return _decode(_single_batch(raw), 0, verify_crc, max_uncompressed_bytes)


def _decode(view: memoryview, position: int, verify_crc: bool, max_uncompressed_bytes: int) -> RecordBatch:
    """``view`` is one framed batch (length and magic already checked) that starts at ``position`` in its buffer."""
    (
        base_offset,
        _,
        partition_leader_epoch,
        _,
        crc,
        attributes,
        last_offset_delta,
        base_timestamp,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        count,
    ) = _HEADER.unpack_from(view, 0)
    where = f"record batch at byte {position} (base offset {base_offset})"
    if verify_crc:
        computed = crc32c(view[_ATTRIBUTES_AT:])
        if computed != crc:
            raise CorruptMessage(f"{where}: CRC-32C is {computed:#010x}, the batch says {crc:#010x}")
    if count < 0:
        raise CorruptMessage(f"{where}: negative record count {count}")
    compression = attributes & _COMPRESSION_MASK
    payload = view[RECORD_BATCH_OVERHEAD:]
    if compression == Compression.NONE:
        if count > len(payload) // MIN_RECORD_SIZE:
            raise CorruptMessage(f"{where}: {count} records cannot fit in {len(payload)} bytes")
        data = bytes(payload)
        origin = RECORD_BATCH_OVERHEAD
    elif compression == Compression.GZIP:
        data = gunzip(payload, max_uncompressed_bytes, where)
        origin = 0
    elif compression in (Compression.SNAPPY, Compression.LZ4, Compression.ZSTD):
        name = Compression(compression).name.lower()
        raise UnsupportedCompressionType(f"{where}: cannot read {name}: only none and gzip are supported")
    else:
        raise CorruptMessage(f"{where}: unknown compression id {compression}")
    records = decode_records(data, count, origin, f"{where}: " if origin else f"{where}, decompressed: ")
    return RecordBatch(
        base_offset=base_offset,
        partition_leader_epoch=partition_leader_epoch,
        attributes=attributes,
        last_offset_delta=last_offset_delta,
        base_timestamp=base_timestamp,
        max_timestamp=max_timestamp,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        records=records,
    )
