"""Custom metadata against Aiven's SegmentCustomMetadataSerdeTest and BuilderTest, and against kio's tagged fields."""

from __future__ import annotations

import io
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kio.serial.writers import (
    write_compact_string,
    write_signed_varlong,
    write_tagged_field,
    write_unsigned_varint,
)
from kio.static.primitive import uvarint

from orchestrator.errors import InvalidArgument
from orchestrator.ids import Uuid
from remote_storage.keys import SegmentKey
from remote_storage.segment_format.custom_metadata import (
    CustomMetadataField,
    SegmentCustomMetadata,
    build_custom_metadata,
    decode_custom_metadata,
    encode_custom_metadata,
    parse_fields_include,
)
from remote_storage.segment_format.errors import SegmentFormatError
from remote_storage.segment_format.object_keys import main_path
from tests.remote_storage.segment_format.golden import load_golden

pytestmark = pytest.mark.unit

GOLDEN = load_golden("segment_custom_metadata_test.json")


def _from_fields(fields: dict[str, Any]) -> SegmentCustomMetadata:
    return SegmentCustomMetadata(remote_size=fields.get("0"), object_prefix=fields.get("1"), object_key=fields.get("2"))


@pytest.mark.parametrize("case", GOLDEN["serde"], ids=lambda c: c["name"])
def test_custom_metadata_has_aivens_length_and_round_trips(case: dict[str, Any]) -> None:
    metadata = _from_fields(case["fields"])
    encoded = encode_custom_metadata(metadata)
    assert len(encoded) == case["length"]
    assert encoded.hex() == case["derivedBytes"]
    assert decode_custom_metadata(encoded) == metadata


def test_the_cases_our_types_cannot_express_are_listed_with_why() -> None:
    assert {c["name"] for c in GOLDEN["serdeNotApplicable"]} == {
        "shouldFailWhenWrongType",
        "shouldFailWhenUnknownLocation",
    }
    with pytest.raises(InvalidArgument):  # the nearest we can build: a raw field under a known tag
        encode_custom_metadata(SegmentCustomMetadata(unknown=((0, b"x"),)))


@pytest.mark.parametrize("case", GOLDEN["builder"]["cases"], ids=lambda c: c["name"])
def test_the_fields_built_are_aivens_for_each_case_of_its_builder_test(case: dict[str, Any]) -> None:
    segment = SegmentKey("topic", Uuid.random(), 0, 1, Uuid.random())
    built = build_custom_metadata(
        parse_fields_include(case["include"]),
        uploaded_bytes=case["uploads"],
        object_prefix=GOLDEN["builder"]["prefix"],
        object_key=main_path(segment),
    )
    expected = {
        tag: value.format(topicId=segment.topic_id, segmentId=segment.segment_id) if isinstance(value, str) else value
        for tag, value in case["expected"].items()
    }
    assert built == _from_fields(expected)


def test_the_include_setting_takes_aivens_field_names_and_refuses_others() -> None:
    assert parse_fields_include("") == frozenset()
    assert parse_fields_include("REMOTE_SIZE, OBJECT_KEY") == {
        CustomMetadataField.REMOTE_SIZE,
        CustomMetadataField.OBJECT_KEY,
    }
    assert parse_fields_include(["OBJECT_PREFIX"]) == {CustomMetadataField.OBJECT_PREFIX}
    with pytest.raises(InvalidArgument, match="unknown field 'remote_size'"):
        parse_fields_include("remote_size")


def _kio_bytes(metadata: SegmentCustomMetadata) -> bytes:
    """The same fields written with kio's tagged-field writer (an independent Kafka protocol implementation)."""
    fields: list[tuple[int, Any, Any]] = []
    if metadata.remote_size is not None:
        fields.append((0, write_signed_varlong, metadata.remote_size))
    if metadata.object_prefix is not None:
        fields.append((1, write_compact_string, metadata.object_prefix))
    if metadata.object_key is not None:
        fields.append((2, write_compact_string, metadata.object_key))
    buffer = io.BytesIO()
    write_unsigned_varint(buffer, uvarint(len(fields)))
    for tag, writer, value in fields:
        write_tagged_field(buffer, uvarint(tag), writer, value)
    return buffer.getvalue() if fields else b""


custom_metadata = st.builds(
    SegmentCustomMetadata,
    remote_size=st.none() | st.integers(-(2**63), 2**63 - 1),
    object_prefix=st.none() | st.text(max_size=40),
    object_key=st.none() | st.text(max_size=80),
)


@given(custom_metadata)
def test_our_bytes_are_the_bytes_kios_tagged_fields_writer_makes(metadata: SegmentCustomMetadata) -> None:
    assert encode_custom_metadata(metadata) == _kio_bytes(metadata)


@given(custom_metadata, st.lists(st.tuples(st.integers(3, 2**31), st.binary(max_size=20)), unique_by=lambda f: f[0]))
def test_custom_metadata_round_trips_keeping_unknown_tags_raw(
    metadata: SegmentCustomMetadata, unknown: list[tuple[int, bytes]]
) -> None:
    with_unknown = SegmentCustomMetadata(
        metadata.remote_size, metadata.object_prefix, metadata.object_key, tuple(sorted(unknown))
    )
    assert decode_custom_metadata(encode_custom_metadata(with_unknown)) == with_unknown


@pytest.mark.parametrize(
    ("blob", "complaint"),
    [
        ("02", "truncated a tag"),
        ("0100", "truncated the size"),
        ("010005c801", "needs 5 bytes"),
        ("02020101000100", "tag 0 after tag 2"),
        ("010003c80100", "does not fill"),
        ("010002c80100", "after the last field"),
        ("01020100", "has length -1"),
        ("01020202ff", "not UTF-8"),
        ("ffffffff1f", "overflows"),
        ("8080808080808080", "longer than 5 bytes"),
    ],
)
def test_a_malformed_blob_is_refused_naming_what_is_wrong(blob: str, complaint: str) -> None:
    with pytest.raises(SegmentFormatError, match=complaint):
        decode_custom_metadata(bytes.fromhex(blob))


def test_zero_bytes_and_a_zero_count_both_read_as_no_field() -> None:
    assert decode_custom_metadata(b"") == SegmentCustomMetadata()
    assert decode_custom_metadata(b"\x00") == SegmentCustomMetadata()
    assert SegmentCustomMetadata().empty
