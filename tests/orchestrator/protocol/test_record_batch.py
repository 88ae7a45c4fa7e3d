"""Kafka's record batch v2 codec: a golden batch checked by hand, round trips, agreement with kafka-python byte for
byte, every malformation a typed error, and a truncated last batch never an error."""

from __future__ import annotations

import contextlib
import dataclasses
import struct
import warnings
from typing import Any

import pytest
from crc32c import crc32c
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestrator.errors import CorruptMessage, InvalidArgument, UnsupportedCompressionType, for_code
from orchestrator.protocol.record_batch import (
    RECORD_BATCH_OVERHEAD,
    Compression,
    Record,
    RecordBatch,
    RecordInput,
    TimestampType,
    batch_attributes,
    build_batch,
    decode_batch,
    decode_batches,
    encode_batch,
    rebased,
    split_batches,
)

with warnings.catch_warnings():  # kafka-python's first import uses a resources API Python 3.11 deprecated
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.record import _crc32c as kafka_python_crc32c
    from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
    from kafka.record.memory_records import MemoryRecords

pytestmark = pytest.mark.unit

SETTINGS = settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])

# --- the golden batch: every field written out by hand. Its CRC is the one kafka-python's own pure-Python CRC-32C
# computes over the bytes from the attributes on (a different implementation from the crc32c package ours uses).
GOLDEN_FIELDS = [
    ("baseOffset", "0000000000000005"),
    ("batchLength 71: 83 bytes - 12", "00000047"),
    ("partitionLeaderEpoch 3", "00000003"),
    ("magic", "02"),
    ("crc", "d9ab4840"),
    ("attributes: none, create time", "0000"),
    ("lastOffsetDelta", "00000001"),
    ("baseTimestamp 1700000000000", "0000018bcfe56800"),
    ("maxTimestamp 1700000000005", "0000018bcfe56805"),
    ("producerId -1", "ffffffffffffffff"),
    ("producerEpoch -1", "ffff"),
    ("baseSequence -1", "ffffffff"),
    ("records count", "00000002"),
    # record 0: length 9, attributes, timestampDelta 0, offsetDelta 0, key "k", value "v1", no headers
    ("record 0", "12 00 00 00 026b 047631 00"),
    # record 1: length 11, attributes, timestampDelta 5, offsetDelta 1, null key, value "v2", header ("h", null)
    ("record 1", "16 00 0a 02 01 047632 02 0268 01"),
]
GOLDEN = bytes.fromhex("".join(hex_ for _, hex_ in GOLDEN_FIELDS))
GOLDEN_BATCH = RecordBatch(
    base_offset=5,
    partition_leader_epoch=3,
    attributes=0,
    last_offset_delta=1,
    base_timestamp=1_700_000_000_000,
    max_timestamp=1_700_000_000_005,
    producer_id=-1,
    producer_epoch=-1,
    base_sequence=-1,
    records=(
        Record(offset_delta=0, timestamp_delta=0, key=b"k", value=b"v1", headers=()),
        Record(offset_delta=1, timestamp_delta=5, key=None, value=b"v2", headers=(("h", None),)),
    ),
)


def reseal(raw: bytes | bytearray) -> bytes:
    """``raw`` with its batch length and CRC made right again, so a test reaches the check after them."""
    out = bytearray(raw)
    struct.pack_into(">i", out, 8, len(out) - 12)
    struct.pack_into(">I", out, 17, crc32c(bytes(out[21:])))
    return bytes(out)


def batch_of(records: bytes, count: int, *, attributes: int = 0) -> bytes:
    """A batch header (written here, not by the codec) before hand-written record bytes."""
    header = struct.pack(">qiibIhiqqqhii", 0, 0, 0, 2, 0, attributes, max(count - 1, 0), 0, 0, -1, -1, -1, count)
    return reseal(header + records)


def kafka_python_batch(records: list[RecordInput], *, compression: int = 0, **producer: Any) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=compression,
        is_transactional=producer.get("is_transactional", False),
        producer_id=producer.get("producer_id", -1),
        producer_epoch=producer.get("producer_epoch", -1),
        base_sequence=producer.get("base_sequence", -1),
        batch_size=1 << 30,
    )
    for offset, (key, value, timestamp, headers) in enumerate(records):
        assert builder.append(offset, timestamp, key, value, list(headers)) is not None
    return bytes(builder.build())


def kafka_python_view(raw: bytes) -> list[tuple[int, int, bytes | None, bytes | None, list[tuple[str, Any]]]]:
    batch = DefaultRecordBatch(raw)
    assert batch.validate_crc()
    return [(r.offset, r.timestamp, r.key, r.value, [tuple(h) for h in r.headers]) for r in batch]


def our_view(batch: RecordBatch) -> list[tuple[int, int, bytes | None, bytes | None, list[tuple[str, Any]]]]:
    return [(offset, ts, r.key, r.value, list(r.headers)) for offset, ts, r in batch.absolute_records()]


# --- strategies

nullable_bytes = st.none() | st.binary(max_size=300)
headers = st.lists(st.tuples(st.text(max_size=20), nullable_bytes), max_size=4).map(tuple)
timestamps = st.integers(min_value=0, max_value=1 << 45)
record_inputs = st.lists(st.tuples(nullable_bytes, nullable_bytes, timestamps, headers), min_size=1, max_size=40)
int_of = {bits: st.integers(min_value=-(1 << (bits - 1)), max_value=(1 << (bits - 1)) - 1) for bits in (8, 16, 32, 64)}


@st.composite
def batches(draw: st.DrawFn) -> RecordBatch:
    """Any batch encode_batch accepts: fields anywhere in their range, records with any deltas."""
    records = draw(
        st.lists(
            st.builds(
                Record,
                offset_delta=int_of[32],
                timestamp_delta=int_of[64],
                key=nullable_bytes,
                value=nullable_bytes,
                headers=headers,
                attributes=int_of[8],
            ),
            max_size=20,
        )
    )
    compression = draw(st.sampled_from([Compression.NONE, Compression.GZIP]))
    flags = draw(st.integers(min_value=0, max_value=0x1FF)) & ~0x07
    return RecordBatch(
        base_offset=draw(int_of[64]),
        partition_leader_epoch=draw(int_of[32]),
        attributes=flags | compression,
        last_offset_delta=draw(int_of[32]),
        base_timestamp=draw(int_of[64]),
        max_timestamp=draw(int_of[64]),
        producer_id=draw(int_of[64]),
        producer_epoch=draw(int_of[16]),
        base_sequence=draw(int_of[32]),
        records=tuple(records),
    )


# --- the golden batch


def test_the_golden_batch_decodes_to_the_fields_written_out_by_hand():
    assert kafka_python_crc32c.crc(GOLDEN[21:]) == 0xD9AB4840
    batch = decode_batch(GOLDEN)
    assert batch == GOLDEN_BATCH
    assert (batch.last_offset, batch.next_offset, batch.compression) == (6, 7, Compression.NONE)
    assert list(batch.absolute_records()) == [
        (5, 1_700_000_000_000, GOLDEN_BATCH.records[0]),
        (6, 1_700_000_000_005, GOLDEN_BATCH.records[1]),
    ]


def test_the_golden_batch_is_what_encoding_its_fields_writes_and_kafka_python_reads_it_alike():
    assert encode_batch(GOLDEN_BATCH) == GOLDEN
    assert kafka_python_view(GOLDEN) == our_view(GOLDEN_BATCH)


# --- round trips


@SETTINGS
@given(batches())
def test_any_batch_decodes_to_itself_and_reencodes_to_the_same_bytes(batch):
    raw = encode_batch(batch)
    decoded = decode_batch(raw)
    assert decoded == batch
    assert encode_batch(decoded) == raw


@SETTINGS
@given(record_inputs, int_of[64].filter(lambda offset: offset < (1 << 63) - 100))
def test_a_built_batch_holds_its_records_at_consecutive_offsets_with_their_timestamps(records, base_offset):
    batch = build_batch(base_offset, records)
    decoded = decode_batch(encode_batch(batch))
    assert decoded == batch
    assert [(r.key, r.value, ts, r.headers) for _, ts, r in decoded.absolute_records()] == [
        (key, value, ts, tuple(h)) for key, value, ts, h in records
    ]
    assert [offset for offset, _, _ in decoded.absolute_records()] == list(range(base_offset, decoded.next_offset))
    assert decoded.max_timestamp == max(ts for _, _, ts, _ in records)


def test_gzip_batches_round_trip_and_are_smaller_for_repetitive_records():
    records = [(b"key", b"value " * 50, 1000 + i, (("h", b"x"),)) for i in range(100)]
    plain = encode_batch(build_batch(0, records))
    gzipped = encode_batch(build_batch(0, records, compression=Compression.GZIP))
    assert len(gzipped) < len(plain) / 10
    assert decode_batch(gzipped) == build_batch(0, records, compression=Compression.GZIP)
    assert decode_batch(gzipped).records == decode_batch(plain).records


def test_a_batch_reads_its_attribute_bits_and_stamped_timestamps():
    attributes = batch_attributes(
        compression=Compression.GZIP,
        timestamp_type=TimestampType.LOG_APPEND_TIME,
        is_transactional=True,
        is_control=True,
        has_delete_horizon=True,
    )
    assert attributes == 0b111_1001
    batch = build_batch(10, [(None, b"a", 100, ()), (None, b"b", 50, ())], timestamp_type=TimestampType.LOG_APPEND_TIME)
    assert batch.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert [ts for _, ts, _ in batch.absolute_records()] == [100, 100]  # the broker's time for every record
    assert not (batch.is_control or batch.is_transactional) and batch.delete_horizon_ms is None
    assert dataclasses.replace(batch, attributes=batch.attributes | 0x40).delete_horizon_ms == 100  # baseTimestamp
    control = build_batch(0, [(b"\x00\x00\x00\x01", b"", 7, ())], is_control=True, is_transactional=True)
    assert control.is_control and control.is_transactional
    assert build_batch(0, [(None, None, 5, ())]).timestamp_of(Record(0, -3, None, None)) == 2


# --- kafka-python, an independent implementation


@SETTINGS
@given(record_inputs)
def test_ours_writes_the_bytes_kafka_python_writes_and_reads_them_to_the_same_records(records):
    theirs = kafka_python_batch(records)
    ours = encode_batch(build_batch(0, records, partition_leader_epoch=0))  # kafka-python writes epoch 0
    assert ours == theirs
    assert our_view(decode_batch(theirs)) == kafka_python_view(theirs)


@SETTINGS
@given(record_inputs)
def test_gzip_batches_of_either_library_read_the_same_in_the_other(records):
    theirs = kafka_python_batch(records, compression=1)
    ours = encode_batch(build_batch(0, records, compression=Compression.GZIP, partition_leader_epoch=0))
    expected = kafka_python_view(kafka_python_batch(records))
    assert kafka_python_view(ours) == expected
    assert our_view(decode_batch(theirs)) == expected


def test_a_gzip_batch_kafka_python_compressed_reads_the_same_in_ours():
    records = [(b"key", b"the same value " * 20, 1_700_000_000_000 + i, (("trace", b"abc"),)) for i in range(50)]
    theirs = kafka_python_batch(records, compression=1)
    assert DefaultRecordBatch(theirs).compression_type == 1  # it keeps a batch uncompressed when gzip does not help
    assert decode_batch(theirs) == build_batch(0, records, compression=Compression.GZIP, partition_leader_epoch=0)


def test_producer_state_is_written_as_kafka_python_writes_it():
    records = [(b"k", b"v", 1, ()), (b"k2", None, 2, (("a", b"b"),))]
    producer = {"producer_id": 42, "producer_epoch": 3, "base_sequence": 17, "is_transactional": True}
    theirs = kafka_python_batch(records, **producer)
    ours = encode_batch(build_batch(0, records, partition_leader_epoch=0, **producer))
    assert ours == theirs
    batch = decode_batch(theirs)
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence, batch.is_transactional) == (42, 3, 17, True)


def test_kafka_python_iterates_a_buffer_of_our_batches_like_ours_does():
    raws = [
        encode_batch(build_batch(base, [(b"k%d" % i, b"v", 100 + i, ()) for i in range(3)], partition_leader_epoch=0))
        for base in (0, 3, 6)
    ]
    buffer = b"".join(raws) + raws[0][:30]  # and a truncated batch at the end, as a Fetch response may have
    theirs = [[r.offset for r in batch] for batch in MemoryRecords(buffer)]
    ours = [[offset for offset, _, _ in batch.absolute_records()] for batch in decode_batches(buffer)]
    assert ours == theirs == [[0, 1, 2], [3, 4, 5], [6, 7, 8]]


# --- a buffer of batches, and truncation


def two_batches() -> tuple[bytes, bytes]:
    first = encode_batch(build_batch(0, [(b"a", b"1", 10, ()), (None, b"2", 11, (("h", b"v"),))]))
    second = encode_batch(build_batch(2, [(b"b", b"3" * 40, 12, ())], compression=Compression.GZIP))
    return first, second


def test_a_buffer_truncated_at_any_byte_yields_its_complete_batches_and_the_partial_size():
    first, second = two_batches()
    buffer = first + second
    for size in range(len(buffer) + 1):
        prefix = buffer[:size]
        complete = 2 if size == len(buffer) else 1 if size >= len(first) else 0
        decoded = list(decode_batches(prefix))
        assert [batch.base_offset for batch in decoded] == [0, 2][:complete], size
        split = split_batches(memoryview(prefix))
        assert [bytes(raw) for raw in split.batches] == [first, second][:complete]
        assert split.partial_size == size - sum(len(raw) for raw in [first, second][:complete])


def test_a_corrupt_complete_batch_raises_even_before_a_truncated_one():
    first, second = two_batches()
    damaged = bytearray(first)
    damaged[-1] ^= 0xFF
    with pytest.raises(CorruptMessage, match="CRC-32C"):
        list(decode_batches(bytes(damaged) + second[:20]))
    assert [batch.base_offset for batch in decode_batches(bytes(damaged) + second[:20], verify_crc=False)] == [0]


def test_batches_are_decoded_lazily_so_the_good_ones_before_a_bad_one_are_read():
    first, second = two_batches()
    damaged = bytearray(second)
    damaged[-1] ^= 0xFF
    batches = decode_batches(first + bytes(damaged))
    assert next(batches).base_offset == 0
    with pytest.raises(CorruptMessage, match=r"record batch at byte \d+ \(base offset 2\): CRC-32C"):
        next(batches)


def test_decode_batch_wants_exactly_one_whole_batch():
    first, second = two_batches()
    with pytest.raises(CorruptMessage, match="does not match"):
        decode_batch(first + second)
    with pytest.raises(CorruptMessage, match="at least 61 bytes"):
        decode_batch(first[:60])


# --- malformations


def with_byte(raw: bytes, at: int, value: int) -> bytes:
    out = bytearray(raw)
    out[at] = value
    return bytes(out)


RECORD_AB = bytes.fromhex("10 00 00 00 0261 0262 00")  # key "a", value "b"


@pytest.mark.parametrize(
    "raw,message",
    [
        (with_byte(GOLDEN, 16, 1), "magic is 1, only 2 is supported"),
        (GOLDEN[:8] + struct.pack(">i", -1) + GOLDEN[12:], "batch length -1 is less than the minimum 49"),
        (GOLDEN[:8] + struct.pack(">i", 48) + GOLDEN[12:], "batch length 48 is less than the minimum 49"),
        (with_byte(GOLDEN, 70, 0x33), "CRC-32C is 0x[0-9a-f]{8}, the batch says 0xd9ab4840"),
        (batch_of(RECORD_AB, -1), "negative record count -1"),
        (batch_of(RECORD_AB, 2), "2 records cannot fit in 9 bytes"),
        (batch_of(RECORD_AB * 3, 2), r"9 bytes at byte 79 after the 2 records"),
        (batch_of(RECORD_AB * 2 + bytes.fromhex("10 00 00 00 00 00 00"), 3), r"record 2 at byte 79: length 8 with 6"),
        (batch_of(b"\x7e" + RECORD_AB[1:], 1), r"record 0 at byte 61: length 63 with 8 bytes left"),
        (batch_of(b"\x01" + RECORD_AB[1:], 1), r"record 0 at byte 61: length -1 with 8 bytes left"),
        (batch_of(b"\x00" + RECORD_AB[1:], 1), r"record 0 at byte 61: length 0"),
        (batch_of(b"\x12" + RECORD_AB[1:] + b"\x00", 1), r"record 0 at byte 61: length 9 but its fields take 8"),
        (batch_of(bytes.fromhex("10 00 00 00 03 61 02 62 00"), 1), "record 0 at byte 61: key length -2"),
        (batch_of(bytes.fromhex("10 00 00 00 0c 61 02 62 00"), 1), "key length 6 runs past the record"),
        (batch_of(bytes.fromhex("10 00 00 00 02 61 05 62 00"), 1), "value length -3"),
        (batch_of(bytes.fromhex("10 00 00 00 02 61 0c 62 00"), 1), "value length 6 runs past the record"),
        (batch_of(bytes.fromhex("10 00 00 00 02 61 02 62 01"), 1), "header count -1"),
        (batch_of(bytes.fromhex("10 00 00 00 02 61 02 62 04"), 1), "header count 2 with 0 bytes left"),
        (batch_of(bytes.fromhex("16 00 00 00 02 61 02 62 02 03 68 01"), 1), "header 0: key length -2"),
        (batch_of(bytes.fromhex("16 00 00 00 02 61 02 62 02 02 ff 01"), 1), "header 0: key is not UTF-8"),
        (batch_of(bytes.fromhex("16 00 00 00 02 61 02 62 02 02 68 07"), 1), "header 0: value length -4"),
        (batch_of(bytes.fromhex("16 00 00 00 02 61 02 62 02 02 68 04"), 1), "header 0: value length 2 runs past"),
        # varints: too long, over 32 or 64 bits, cut off by the record's end
        (batch_of(bytes.fromhex("1a 00 00 ffffffffff01 02 61 02 62 00"), 1), "offset delta is a varint longer than 5"),
        (
            batch_of(bytes.fromhex("18 00 00 ffffffff7f 02 61 02 62 00"), 1),
            "offset delta is a varint that overflows 32",
        ),
        (batch_of(bytes.fromhex("ffffffffff01 00"), 1), "record 0 at byte 61: length is a varint longer than 5"),
        (
            batch_of(bytes.fromhex("22 00 ffffffffffffffffff7f 00 02 61 02 62 00"), 1),
            "timestamp delta is a varint that overflows 64 bits",
        ),
        (
            batch_of(bytes.fromhex("24 00 ffffffffffffffffffff01 00 02 61 02 62 00"), 1),
            "timestamp delta is a varint longer than 10",
        ),
        (
            batch_of(bytes.fromhex("06 00 00 80 00 00 00"), 1),
            r"offset delta runs past the end \(1 of its bytes present\)",
        ),
        (batch_of(b"garbage", 1, attributes=1), "gzip records do not inflate"),
        (batch_of(b"", 0, attributes=1), "gzip stream ends early"),
        (batch_of(RECORD_AB, 1, attributes=5), "unknown compression id 5"),
    ],
)
def test_each_malformation_is_a_corrupt_message_naming_what_and_where(raw, message):
    with pytest.raises(CorruptMessage, match=message) as raised:
        list(decode_batches(raw))
    assert raised.value.code == 2 and for_code(2) is CorruptMessage


def test_the_well_formed_records_of_the_malformation_table_do_decode():
    assert decode_batch(batch_of(RECORD_AB * 2, 2)).records == (Record(0, 0, b"a", b"b"),) * 2
    header = decode_batch(batch_of(bytes.fromhex("16 00 00 00 02 61 02 62 02 02 68 01"), 1)).records[0]
    assert header.headers == (("h", None),)
    # a varint may be longer than it needs (no writer does this, but it is valid)
    assert decode_batch(batch_of(bytes.fromhex("12 00 80 00 00 02 61 02 62 00"), 1)).records[0].timestamp_delta == 0


def test_a_gzip_batch_is_inflated_to_no_more_than_the_bound():
    raw = encode_batch(build_batch(0, [(None, bytes(100_000), 0, ())], compression=Compression.GZIP))
    assert len(raw) < 1000
    # the bound is inclusive: the value and the 11 bytes of the record around it
    assert decode_batch(raw, max_uncompressed_bytes=100_011).records[0].value == bytes(100_000)
    with pytest.raises(CorruptMessage, match="inflate to more than 50000 bytes"):
        decode_batch(raw, max_uncompressed_bytes=50_000)


@pytest.mark.parametrize("compression", [Compression.SNAPPY, Compression.LZ4, Compression.ZSTD])
def test_snappy_lz4_and_zstd_are_unsupported_both_ways(compression):
    with pytest.raises(UnsupportedCompressionType, match=f"cannot write {compression.name.lower()}"):
        encode_batch(build_batch(0, [(None, b"v", 0, ())], compression=compression))
    with pytest.raises(UnsupportedCompressionType, match=f"cannot read {compression.name.lower()}") as raised:
        list(decode_batches(batch_of(b"\x00" * 20, 1, attributes=int(compression))))
    assert raised.value.code == 76 and for_code(76) is UnsupportedCompressionType


@SETTINGS
@given(st.data())
def test_any_damage_to_a_batch_decodes_or_raises_a_typed_error_and_nothing_else(data):
    first, second = two_batches()
    buffer = bytearray(data.draw(st.sampled_from([first, second, GOLDEN])))
    for _ in range(data.draw(st.integers(min_value=1, max_value=4))):
        buffer[data.draw(st.integers(min_value=0, max_value=len(buffer) - 1))] = data.draw(st.integers(0, 255))
    with contextlib.suppress(CorruptMessage, UnsupportedCompressionType):
        list(decode_batches(bytes(buffer), verify_crc=data.draw(st.booleans())))


@SETTINGS
@given(st.binary(max_size=200))
def test_arbitrary_bytes_decode_or_raise_a_typed_error(raw):
    with contextlib.suppress(CorruptMessage):
        split_batches(raw)
        list(decode_batches(raw, verify_crc=False))


# --- rewriting the fields outside the CRC


def test_a_new_base_offset_and_leader_epoch_keep_the_crc_valid():
    moved = rebased(GOLDEN, 1_000_000, 9)
    assert moved[8:12] == GOLDEN[8:12] and moved[16:] == GOLDEN[16:]
    expected = dataclasses.replace(GOLDEN_BATCH, base_offset=1_000_000, partition_leader_epoch=9)
    assert decode_batch(moved) == expected
    assert DefaultRecordBatch(moved).validate_crc()


def test_rewriting_refuses_what_is_not_one_batch_or_a_value_out_of_range():
    with pytest.raises(CorruptMessage):
        rebased(GOLDEN + GOLDEN, 1, 0)
    with pytest.raises(CorruptMessage, match="magic"):
        rebased(with_byte(GOLDEN, 16, 0), 1, 0)
    with pytest.raises(InvalidArgument, match="base offset"):
        rebased(GOLDEN, 1 << 63, 0)
    with pytest.raises(InvalidArgument, match="leader epoch"):
        rebased(GOLDEN, 1, 1 << 31)


# --- encoding refusals


@pytest.mark.parametrize(
    "change,message",
    [
        ({"producer_epoch": 1 << 15}, "producer epoch 32768 does not fit in int16"),
        ({"base_offset": -(1 << 63) - 1}, "base offset"),
        ({"attributes": 6}, "compression id 6"),
        ({"records": (Record(1 << 31, 0, None, None),)}, "offset delta"),
        ({"records": (Record(0, 1 << 63, None, None),)}, "timestamp delta"),
        ({"records": (Record(0, 0, None, None, attributes=128),)}, "record attributes"),
        ({"records": (Record(0, 0, None, None, headers=(("\udcff", None),)),)}, "header key"),
    ],
)
def test_a_value_that_cannot_be_written_is_an_invalid_argument(change, message):
    fields = {field: getattr(GOLDEN_BATCH, field) for field in RecordBatch.__dataclass_fields__}
    with pytest.raises(InvalidArgument, match=message):
        encode_batch(RecordBatch(**{**fields, **change}))


def test_a_producer_never_builds_an_empty_batch():
    with pytest.raises(InvalidArgument, match="at least one record"):
        build_batch(0, [])
    assert len(encode_batch(dataclasses.replace(GOLDEN_BATCH, records=()))) == RECORD_BATCH_OVERHEAD
