"""The packed chunk sizes against Aiven's ChunkSizesBinaryCodecTest and ChunkIndexSerializationTest's ENCODED_CHUNKS."""

from __future__ import annotations

import base64
import struct
from typing import Any

import pytest
import zstandard
from hypothesis import given
from hypothesis import strategies as st

from orchestrator.errors import InvalidArgument
from remote_storage.segment_format.chunk_sizes import decode_field, encode_field, pack, unpack
from remote_storage.segment_format.errors import SegmentFormatError
from tests.remote_storage.segment_format.golden import load_golden

pytestmark = pytest.mark.unit

CODEC = load_golden("chunk_sizes_binary_codec_test.json")
ENCODED = load_golden("chunk_index_serialization_test.json")["encodedChunks"]


def _values(case: dict[str, Any]) -> list[int]:
    if "values" in case:
        return list(case["values"])
    spec = case["valuesRange"]
    values = list(range(spec["start"], spec["stop"], spec["step"]))
    return values[::-1] if spec["reversed"] else values


def test_aivens_encoded_chunks_are_written_and_read_byte_for_byte() -> None:
    assert encode_field(ENCODED["values"]) == ENCODED["text"]
    assert decode_field(ENCODED["text"]) == tuple(ENCODED["values"])


def test_aivens_encoded_chunks_hold_the_packed_layout_its_test_spells_out() -> None:
    p = ENCODED["packed"]
    layout = struct.pack(">iib", p["count"], p["base"], p["bytesPerValue"]) + bytes(p["packedValues"])
    layout += struct.pack(">i", p["last"])
    assert pack(ENCODED["values"]) == layout
    assert zstandard.ZstdDecompressor().decompress(base64.b64decode(ENCODED["text"])) == layout


@pytest.mark.parametrize("case", CODEC["roundTrips"], ids=lambda c: c["name"])
def test_few_values_round_trip(case: dict[str, Any]) -> None:
    assert unpack(pack(case["values"])) == tuple(case["values"])


@pytest.mark.parametrize("case", CODEC["multipleValues"], ids=lambda c: f"{c['bytesPerValue']}B-{len(_values(c))}")
def test_several_values_take_the_bytes_per_value_aiven_expects(case: dict[str, Any]) -> None:
    values = _values(case)
    width = case["bytesPerValue"]
    packed = pack(values)
    assert len(packed) == 4 + 4 + 1 + (len(values) - 1) * width + 4
    count, _base, packed_width = struct.unpack_from(">iib", packed)
    assert (count, packed_width) == (len(values), width)
    assert unpack(packed) == tuple(values)


@pytest.mark.parametrize("values", CODEC["negativeValues"], ids=str)
def test_negative_values_are_refused(values: list[int]) -> None:
    with pytest.raises(InvalidArgument, match=">= 0"):
        pack(values)


@given(st.lists(st.integers(0, 2**31 - 1), max_size=50))
def test_any_int32_sizes_round_trip_through_the_field_text(values: list[int]) -> None:
    assert decode_field(encode_field(values)) == tuple(values)


@pytest.mark.parametrize(
    ("blob", "complaint"),
    [
        (b"\x00\x00", "too short"),
        (b"\xff\xff\xff\xff", "negative count"),
        (struct.pack(">ii", 1, 7) + b"\x00", "expected 8"),
        (struct.pack(">iib", 3, 0, 5) + bytes(10), "1 to 4"),
        (struct.pack(">iib", 3, 0, 1) + bytes(2), "expected 15"),
        (struct.pack(">ii", 1, -5), "not an int32 >= 0"),
    ],
)
def test_a_malformed_packed_form_is_refused(blob: bytes, complaint: str) -> None:
    with pytest.raises(SegmentFormatError, match=complaint):
        unpack(blob)


def test_a_field_that_is_not_base64_of_a_zstd_frame_with_its_size_is_refused() -> None:
    with pytest.raises(SegmentFormatError, match="not base64"):
        decode_field("KLUv/SAP!")
    with pytest.raises(SegmentFormatError, match="not a zstd frame"):
        decode_field(base64.b64encode(b"plain bytes").decode())
    without_size = zstandard.ZstdCompressor(write_content_size=False).compressobj()
    frame = without_size.compress(pack([1, 2, 3])) + without_size.flush()
    with pytest.raises(SegmentFormatError, match="content size"):
        decode_field(base64.b64encode(frame).decode())
