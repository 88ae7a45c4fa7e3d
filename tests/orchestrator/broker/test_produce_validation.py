"""What a Produce request's records must be before a log takes them (orchestrator.broker.produce_validation):
each malformation refused with Kafka's code, a good batch returned as the very bytes the request carried."""

from __future__ import annotations

import dataclasses
import struct

import pytest
from crc32c import crc32c
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestrator.broker.produce_validation import ProducePolicy, validate_records
from orchestrator.errors import (
    CorruptMessage,
    InvalidRecord,
    InvalidTimestamp,
    KafkaError,
    MessageTooLarge,
    UnsupportedCompressionType,
)
from orchestrator.protocol.record_batch import (
    Compression,
    TimestampType,
    build_batch,
    decode_batch,
    encode_batch,
)

pytestmark = pytest.mark.unit

NOW = 1_700_000_000_000
HOUR = 3_600_000
POLICY = ProducePolicy()
PROPERTY = settings(max_examples=200, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
_CRC_AT, _ATTRIBUTES_AT = 17, 21


def batch(n: int = 3, *, ts: int = NOW, **kwargs: object) -> bytes:
    records = [(b"k%d" % i, b"value-%d" % i, ts + i, (("h", b"x"),) if i == 1 else ()) for i in range(n)]
    return encode_batch(build_batch(0, records, **kwargs))  # type: ignore[arg-type]


def with_deltas(raw: bytes, deltas: list[int], *, last_offset_delta: int | None = None) -> bytes:
    """The batch re-encoded (CRC and record count computed again) with these offset deltas."""
    decoded = decode_batch(raw)
    records = tuple(dataclasses.replace(r, offset_delta=d) for r, d in zip(decoded.records, deltas, strict=True))
    last = decoded.last_offset_delta if last_offset_delta is None else last_offset_delta
    return encode_batch(dataclasses.replace(decoded, records=records, last_offset_delta=last))


def with_attributes(raw: bytes, attributes: int) -> bytes:
    """The batch with other attributes and its CRC-32C computed again, as a client that set them would send it."""
    out = bytearray(raw)
    struct.pack_into(">h", out, _ATTRIBUTES_AT, attributes)
    struct.pack_into(">I", out, _CRC_AT, crc32c(bytes(out[_ATTRIBUTES_AT:])))
    return bytes(out)


def refused(records: bytes | None, policy: ProducePolicy = POLICY, now_ms: int = NOW) -> KafkaError:
    with pytest.raises(KafkaError) as caught:
        validate_records(records, policy, now_ms=now_ms)
    return caught.value


# --- accepted, unchanged


@pytest.mark.parametrize("compression", [Compression.NONE, Compression.GZIP])
def test_a_good_batch_is_returned_as_the_requests_own_bytes(compression):
    raw = batch(5, compression=compression)
    validated = validate_records(raw, POLICY, now_ms=NOW)
    assert validated.record_count == 5
    (view,) = validated.batches
    assert bytes(view) == raw  # unchanged: the log assigns offsets
    assert view.obj is raw  # a view into the request's bytes, not a copy


def test_a_batch_exactly_at_max_message_bytes_passes_and_one_byte_more_is_message_too_large():
    raw = batch(4)
    assert validate_records(raw, ProducePolicy(max_message_bytes=len(raw)), now_ms=NOW).record_count == 4
    error = refused(raw, ProducePolicy(max_message_bytes=len(raw) - 1))
    assert isinstance(error, MessageTooLarge) and error.code == 10


def test_a_gzip_batch_is_measured_by_its_compressed_size():
    raw = batch(50, compression=Compression.GZIP)
    plain = batch(50)
    assert len(raw) < len(plain)
    assert validate_records(raw, ProducePolicy(max_message_bytes=len(raw)), now_ms=NOW).record_count == 50
    assert isinstance(refused(plain, ProducePolicy(max_message_bytes=len(raw))), MessageTooLarge)


# --- CORRUPT_MESSAGE


@pytest.mark.parametrize("at", [_CRC_AT, _CRC_AT + 3, _ATTRIBUTES_AT + 1, 40, -1, -5])
def test_a_flipped_byte_under_the_crc_is_corrupt(at):
    raw = bytearray(batch())
    raw[at] ^= 0x01
    error = refused(bytes(raw))
    assert isinstance(error, CorruptMessage) and error.code == 2


@pytest.mark.parametrize("keep", [1, 11, 16, 17, 60, 61, -1])
def test_a_truncated_batch_is_corrupt(keep):
    raw = batch()
    error = refused(raw[:keep])
    assert isinstance(error, CorruptMessage), keep


def test_a_batch_followed_by_part_of_another_is_corrupt():
    assert isinstance(refused(batch() + batch()[:30]), CorruptMessage)


def test_a_gzip_batch_whose_records_do_not_inflate_is_corrupt():
    raw = batch(3, compression=Compression.GZIP)
    mangled = bytearray(raw)
    mangled[70:80] = bytes(10)  # inside the gzip stream
    fixed = with_attributes(bytes(mangled), struct.unpack_from(">h", raw, _ATTRIBUTES_AT)[0])  # a valid CRC
    assert isinstance(refused(fixed), CorruptMessage)


@pytest.mark.parametrize("compression_id", [5, 6, 7])
def test_a_compression_id_kafka_does_not_define_is_corrupt(compression_id):
    assert isinstance(refused(with_attributes(batch(), compression_id)), CorruptMessage)


@PROPERTY
@given(junk=st.binary(min_size=1, max_size=400))
def test_random_bytes_are_corrupt(junk):
    assert isinstance(refused(junk), CorruptMessage)


@PROPERTY
@given(body=st.binary(min_size=0, max_size=300), base_offset=st.integers(-(2**63), 2**63 - 1))
def test_random_bytes_framed_as_a_batch_are_corrupt(body, base_offset):
    """A header that frames (its length matches, magic 2) around bytes no producer wrote: the CRC or the records
    give it away."""
    rest = struct.pack(">ib", 0, 2) + body  # partition leader epoch, magic, then anything
    if len(rest) < 49:
        rest += bytes(49 - len(rest))
    raw = struct.pack(">qi", base_offset, len(rest)) + rest
    assert isinstance(refused(raw), CorruptMessage)


@PROPERTY
@given(data=st.data())
def test_any_single_flipped_bit_of_a_good_batch_is_refused_or_changes_only_what_the_crc_does_not_cover(data):
    raw = batch(3, compression=data.draw(st.sampled_from([Compression.NONE, Compression.GZIP])))
    at = data.draw(st.integers(0, len(raw) - 1))
    bit = data.draw(st.integers(0, 7))
    flipped = bytearray(raw)
    flipped[at] ^= 1 << bit
    try:
        validated = validate_records(bytes(flipped), POLICY, now_ms=NOW)
    except KafkaError as error:
        assert isinstance(error, CorruptMessage | InvalidRecord | MessageTooLarge), error
        return
    assert (
        at < 8 or 12 <= at < 16
    )  # only the base offset and the leader epoch are outside the CRC (the log rewrites both)
    assert validated.record_count == 3


# --- INVALID_RECORD


@pytest.mark.parametrize("records", [None, b""])
def test_no_records_at_all_is_an_invalid_record(records):
    error = refused(records)
    assert isinstance(error, InvalidRecord) and error.code == 87


def test_two_batches_for_one_partition_are_an_invalid_record():
    error = refused(batch(2) + batch(1))
    assert isinstance(error, InvalidRecord) and "2 record batches" in error.message


def test_a_control_batch_is_an_invalid_record():
    control = encode_batch(build_batch(0, [(b"\x00\x00\x00\x00", b"\x00\x00", NOW, ())], is_control=True))
    assert isinstance(refused(control), InvalidRecord)


@pytest.mark.parametrize(
    "deltas,last",
    [
        ([0, 2, 3], None),  # a gap
        ([1, 2, 3], None),  # not from 0
        ([0, 0, 1], None),  # a repeat
        ([2, 1, 0], None),  # backwards
        ([0, 1, 2], 5),  # the header's last offset delta says six records
        ([0, 1, 2], 1),  # ... or two
        ([0, -1, 1], None),
    ],
)
def test_offset_deltas_that_do_not_run_0_1_2_or_disagree_with_the_header_are_an_invalid_record(deltas, last):
    bad = with_deltas(batch(3), deltas, last_offset_delta=last)
    decode_batch(bad)  # a well-formed batch: only its offsets are wrong
    error = refused(bad)
    assert isinstance(error, InvalidRecord), error


def test_a_batch_of_no_records_is_an_invalid_record():
    empty = dataclasses.replace(decode_batch(batch(1)), records=(), last_offset_delta=-1)
    assert isinstance(refused(encode_batch(empty)), InvalidRecord)


def test_the_same_offset_deltas_in_order_pass():
    assert validate_records(with_deltas(batch(3), [0, 1, 2]), POLICY, now_ms=NOW).record_count == 3


# --- UNSUPPORTED_COMPRESSION_TYPE


@pytest.mark.parametrize("compression", [Compression.SNAPPY, Compression.LZ4, Compression.ZSTD])
def test_snappy_lz4_and_zstd_are_unsupported_compression_types(compression):
    raw = with_attributes(batch(), int(compression))
    error = refused(raw)
    assert isinstance(error, UnsupportedCompressionType) and error.code == 76


# --- INVALID_TIMESTAMP


def test_timestamps_within_the_skew_limits_pass_and_one_millisecond_beyond_is_refused():
    policy = ProducePolicy(timestamp_before_max_ms=HOUR, timestamp_after_max_ms=HOUR)
    oldest, newest = NOW - HOUR, NOW + HOUR
    for ts in (oldest, NOW, newest - 2):  # batch(3) stamps ts, ts + 1, ts + 2
        assert validate_records(batch(3, ts=ts), policy, now_ms=NOW).record_count == 3
    for ts in (oldest - 1, newest - 1):
        error = refused(batch(3, ts=ts), policy)
        assert isinstance(error, InvalidTimestamp) and error.code == 32, ts


def test_any_record_of_the_batch_counts_not_only_the_first_or_the_header():
    policy = ProducePolicy(timestamp_before_max_ms=HOUR, timestamp_after_max_ms=HOUR)
    too_old_inside = encode_batch(build_batch(0, [(None, b"a", NOW, ()), (None, b"b", NOW - 2 * HOUR, ())]))
    assert isinstance(refused(too_old_inside, policy), InvalidTimestamp)
    too_new_inside = encode_batch(build_batch(0, [(None, b"a", NOW, ()), (None, b"b", NOW + 2 * HOUR, ())]))
    assert isinstance(refused(too_new_inside, policy), InvalidTimestamp)


def test_each_limit_applies_on_its_own_side():
    only_past = ProducePolicy(timestamp_before_max_ms=HOUR)
    only_future = ProducePolicy(timestamp_after_max_ms=HOUR)
    far_past, far_future = batch(1, ts=NOW - 100 * HOUR), batch(1, ts=NOW + 100 * HOUR)
    assert isinstance(refused(far_past, only_past), InvalidTimestamp)
    assert validate_records(far_future, only_past, now_ms=NOW).record_count == 1
    assert isinstance(refused(far_future, only_future), InvalidTimestamp)
    assert validate_records(far_past, only_future, now_ms=NOW).record_count == 1


def test_a_log_append_time_topic_does_not_check_the_producers_timestamps():
    policy = ProducePolicy(log_append_time=True, timestamp_before_max_ms=0, timestamp_after_max_ms=0)
    raw = batch(2, ts=NOW - 100 * HOUR)
    validated = validate_records(raw, policy, now_ms=NOW)
    assert bytes(validated.batches[0]) == raw  # the log stamps the time when it appends, not the validator


@PROPERTY
@given(
    stamps=st.lists(st.integers(NOW - 3 * HOUR, NOW + 3 * HOUR), min_size=1, max_size=6),
    before=st.integers(0, 2 * HOUR),
    after=st.integers(0, 2 * HOUR),
)
def test_a_batch_is_refused_exactly_when_one_of_its_records_is_outside_the_window(stamps, before, after):
    raw = encode_batch(build_batch(0, [(None, b"v", ts, ()) for ts in stamps]))
    policy = ProducePolicy(timestamp_before_max_ms=before, timestamp_after_max_ms=after)
    outside = any(ts < NOW - before or ts > NOW + after for ts in stamps)
    if outside:
        assert isinstance(refused(raw, policy), InvalidTimestamp)
    else:
        assert validate_records(raw, policy, now_ms=NOW).record_count == len(stamps)


def test_a_producer_may_not_set_the_log_append_time_bit_itself():
    policy = ProducePolicy(timestamp_before_max_ms=HOUR, timestamp_after_max_ms=HOUR)
    forged = encode_batch(
        build_batch(0, [(None, b"v", NOW - 100 * HOUR, ())], timestamp_type=TimestampType.LOG_APPEND_TIME)
    )
    assert decode_batch(forged).timestamp_type is TimestampType.LOG_APPEND_TIME
    assert isinstance(refused(forged, policy), InvalidTimestamp)


def test_a_record_without_a_timestamp_is_exempt_from_the_bounds_as_in_kafka():
    policy = ProducePolicy(timestamp_before_max_ms=HOUR, timestamp_after_max_ms=HOUR)
    raw = encode_batch(build_batch(0, [(None, b"v", -1, ())]))
    assert validate_records(raw, policy, now_ms=NOW).record_count == 1
    stale = encode_batch(build_batch(0, [(None, b"v", -1, ()), (None, b"w", NOW - 2 * HOUR, ())]))
    assert isinstance(refused(stale, policy), InvalidTimestamp)


def test_a_header_max_timestamp_below_its_records_is_rewritten_with_a_valid_crc():
    honest = build_batch(0, [(None, b"a", NOW, ()), (None, b"b", NOW + 5, ())])
    lying = encode_batch(dataclasses.replace(honest, max_timestamp=NOW))
    [stored] = validate_records(lying, POLICY, now_ms=NOW).batches
    assert decode_batch(stored).max_timestamp == NOW + 5  # decode_batch checks the CRC
    untouched = encode_batch(honest)
    [kept] = validate_records(untouched, POLICY, now_ms=NOW).batches
    assert bytes(kept) == untouched
