"""The compiled record decoder (``_batch_records_c.pyx``) is held to the Python reference (``decode_records_py``):
for any bytes, the same records or the same CorruptMessage text.

The bytes are the records sections of well-formed batches (any field in its range, headers, null keys and values),
the same with bytes overwritten, cut or appended, and arbitrary bytes with arbitrary counts; origins and prefixes
vary so every message's numbers are compared. ``make`` builds the compiled decoder: a build without it fails the
first test here, rather than passing the others against the reference itself.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.errors import CorruptMessage
from orchestrator.protocol import batch_records
from orchestrator.protocol.batch_records import Record, decode_records, decode_records_py, encode_record

pytestmark = pytest.mark.unit

nullable_bytes = st.none() | st.binary(max_size=40)
header_keys = st.text(max_size=8) | st.binary(max_size=8).map(lambda b: b.decode("latin-1"))
headers = st.lists(st.tuples(header_keys, nullable_bytes), max_size=3).map(tuple)
records = st.lists(
    st.builds(
        Record,
        offset_delta=st.integers(-(1 << 31), (1 << 31) - 1),
        timestamp_delta=st.integers(-(1 << 63), (1 << 63) - 1),
        key=nullable_bytes,
        value=nullable_bytes,
        headers=headers,
        attributes=st.integers(-128, 127),
    ),
    max_size=12,
)


def encode_records(rs: list[Record]) -> bytes:
    out = bytearray()
    for r in rs:
        encode_record(r, out)
    return bytes(out)


def outcome(decode, data: bytes, count: int, origin: int, where: str) -> object:
    try:
        return decode(data, count, origin, where)
    except CorruptMessage as exc:
        return ("CorruptMessage", exc.message)


def assert_same(data: bytes, count: int, origin: int = 61, where: str = "record batch at byte 0: ") -> None:
    assert outcome(decode_records, data, count, origin, where) == outcome(decode_records_py, data, count, origin, where)


def test_the_build_compiled_the_decoder():
    assert batch_records.COMPILED, "orchestrator/protocol/_batch_records_c.pyx is not built: run make"


@settings(max_examples=300)
@given(records, st.integers(0, 1 << 20), st.sampled_from(["", "x: ", "batch, decompressed: "]))
def test_well_formed_records_decode_to_the_same_records(rs, origin, where):
    data = encode_records(rs)
    assert decode_records(data, len(rs), origin, where) == tuple(rs)
    assert_same(data, len(rs), origin, where)


@settings(max_examples=500)
@given(records.filter(bool), st.data())
def test_damaged_records_give_the_same_records_or_the_same_error(rs, data):
    raw = bytearray(encode_records(rs))
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(raw) - 1))
        raw[at] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(raw)))
    tail = data.draw(st.binary(max_size=6))
    count = len(rs) + data.draw(st.integers(-1, 1))
    assert_same(bytes(raw[:cut]) + tail, count)


@settings(max_examples=500)
@given(st.binary(max_size=64), st.integers(-2, 6))
def test_any_bytes_give_the_same_records_or_the_same_error(raw, count):
    assert_same(raw, count)


def test_varints_at_their_bounds_read_alike():
    # a record whose timestamp delta is the longest varlong (10 bytes) with each last byte, and offset deltas of
    # 5 bytes with each last byte: overflow, the largest values and "longer than" are compared
    for last in range(256):
        timestamp = bytes([0xFF] * 9 + [last])
        body = b"\x00" + timestamp + b"\x00\x01\x01\x00"
        assert_same(bytes([len(body) * 2]) + body, 1)
        offset = bytes([0xFF] * 4 + [last])
        body = b"\x00\x00" + offset + b"\x01\x01\x00"
        assert_same(bytes([len(body) * 2]) + body, 1)


@given(records.filter(bool))
def test_a_first_record_whose_length_is_a_few_bytes_off_reads_alike(rs):
    # the length cut just before a field (the header count, a value) with a 0 byte behind it is where a bound
    # checked one byte late would read the next record's byte as this one's: every nearby length, every tail
    body = encode_records(rs[:1])
    length, at = batch_records._varint(body, 0, len(body), 5, "length")
    for off in range(-3, 4):
        head = bytearray()
        batch_records._put_varint(((length + off) << 1) ^ ((length + off) >> 31), head)
        for tail in (b"", b"\x00", b"\x01", b"\x00\x00", b"\x02\x00"):
            assert_same(bytes(head) + body[at:] + tail, 1)
