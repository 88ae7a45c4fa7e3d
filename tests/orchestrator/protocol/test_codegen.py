"""The generated codecs against the reference closures, for every schema and version.

The property: on the same value both encoders write the same bytes (or both refuse it, with the reference's error
text); on the same bytes both decoders return equal values (or both raise ProtocolError). Inputs are valid values,
their encodings with one byte changed or cut short, and random bytes, so the error paths of the inlined code
(lengths, varints, UTF-8, nulls, the tagged-field section) are compared as well as the happy path.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestrator.errors import ProtocolError, UnsupportedVersion
from orchestrator.ids import Uuid
from orchestrator.protocol import codec
from orchestrator.protocol.schema import MessageSchema, load_schemas
from tests.orchestrator.protocol.test_codec_roundtrip import CASES, IDS, SETTINGS, value_strategy

pytestmark = pytest.mark.unit


def _decode(c: codec.StructCodec, data: bytes) -> tuple[str, Any]:
    r = codec.Reader(data)
    try:
        value = c.decode_from(r)
    except ProtocolError:
        return ("error", None)
    return ("ok", (value, r.pos))


def _encode(c: codec.StructCodec, value: Any) -> tuple[str, Any]:
    out = bytearray(b"prefix")
    try:
        c.encode_into(value, out)
    except (ValueError, UnsupportedVersion) as exc:
        return (type(exc).__name__, str(exc))
    return ("ok", bytes(out))


def _pair(name: str, version: int) -> tuple[MessageSchema, codec.StructCodec, codec.StructCodec]:
    schema = load_schemas()[name]
    return schema, codec.compiled(schema, version), codec.reference(schema, version)


def test_compiled_codecs_are_generated_and_reference_ones_are_not() -> None:
    schema = load_schemas()["PartitionRecord"]
    version = schema.valid_versions.hi
    assert version is not None
    assert codec.compiled(schema, version).decode_from.__code__.co_filename == "<codec decode>"
    assert codec.reference(schema, version).decode_from.__code__.co_filename != "<codec decode>"


@pytest.mark.parametrize(("name", "version"), CASES, ids=IDS)
@SETTINGS
@given(data=st.data())
def test_same_bytes_and_values_as_the_reference(name: str, version: int, data: st.DataObject) -> None:
    schema, fast, ref = _pair(name, version)
    value = data.draw(value_strategy(schema, version), label="value")
    encoded = _encode(fast, value)
    assert encoded == _encode(ref, value)
    assert encoded[0] == "ok"
    body = encoded[1][len(b"prefix") :]
    assert _decode(fast, body) == _decode(ref, body)
    if body:
        at = data.draw(st.integers(min_value=0, max_value=len(body) - 1), label="at")
        flipped = body[:at] + bytes([data.draw(st.integers(0, 255), label="byte")]) + body[at + 1 :]
        assert _decode(fast, flipped) == _decode(ref, flipped)
        assert _decode(fast, body[:at]) == _decode(ref, body[:at])


@pytest.mark.parametrize(("name", "version"), CASES, ids=IDS)
@settings(max_examples=12, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(junk=st.binary(max_size=48))
def test_random_bytes_decode_alike(name: str, version: int, junk: bytes) -> None:
    _, fast, ref = _pair(name, version)
    assert _decode(fast, junk) == _decode(ref, junk)


BAD_VALUES: list[tuple[str, dict[str, Any]]] = [
    ("partition_id", {"partition_id": "seven"}),  # a str in an int32
    ("partition_id", {"partition_id": 2**31}),  # out of range
    ("topic_id", {"topic_id": "not-a-uuid"}),
    ("replicas", {"replicas": [1, "two"]}),
    ("replicas", {"replicas": None}),  # not nullable
    ("replicas", {"replicas": [2**40]}),
]


@pytest.mark.parametrize(("field", "value"), BAD_VALUES, ids=[f"{f}-{i}" for i, (f, _) in enumerate(BAD_VALUES)])
def test_a_value_that_does_not_fit_gets_the_reference_error_and_writes_nothing(field: str, value: Any) -> None:
    _, fast, ref = _pair("PartitionRecord", 0)
    full = {"topic_id": Uuid.random(), "replicas": [1], "isr": [1]} | value
    out = bytearray(b"keep")
    with pytest.raises(ValueError, match=f"PartitionRecord.{field}") as caught:
        fast.encode_into(full, out)
    assert bytes(out) == b"keep"
    assert _encode(ref, full) == ("_EncodeError", str(caught.value))


def test_a_string_too_long_and_a_null_name_get_the_reference_error() -> None:
    _, fast, ref = _pair("TopicRecord", 0)
    for value in ({"name": "x" * 40_000}, {"name": None}, {"name": b"bytes"}):
        assert _encode(fast, value) == _encode(ref, value)
        assert _encode(fast, value)[0] == "_EncodeError"
