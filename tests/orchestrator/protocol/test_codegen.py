"""The compiled and the generated codecs against the reference closures, for every schema and version.

Both fast kinds are held to the reference: the compiled loop (``_struct_codec_c.pyx``), which runs wherever the
build made it, and the generated Python source, which runs where it did not. ``make`` builds the loop: a build
without it fails the first test here rather than passing the others against the generated code twice.

The property: on the same value both encoders write the same bytes (or both refuse it, with the reference's error
text); on the same bytes both decoders return equal values and stop at the same position (or both raise
ProtocolError), the compiled one also when it reads a range with no Reader (``decode_range``). Inputs are valid values,
their encodings with one byte changed or cut short, and random bytes, so the error paths of the inlined code
(lengths, varints, UTF-8, nulls, the tagged-field section) are compared as well as the happy path.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestrator.errors import ProtocolError, UnsupportedVersion
from orchestrator.ids import Uuid
from orchestrator.protocol import codec, codegen
from orchestrator.protocol.schema import MessageSchema, load_schemas
from tests.orchestrator.protocol.test_codec_roundtrip import CASES, IDS, SETTINGS, value_strategy

pytestmark = pytest.mark.unit


FAST = ["compiled", "generated"]


def _decode(c: codec.StructCodec, data: bytes) -> tuple[str, Any]:
    r = codec.Reader(data)
    try:
        value = c.decode_from(r)
    except ProtocolError:
        return ("error", None)
    found = ("ok", (value, r.pos))
    decode_range = getattr(c.decode_from, "decode_range", None)
    if decode_range is not None:  # the compiled loop, reading from a prefix with no Reader
        assert decode_range(b"xy" + data, 2, len(data) + 2) == (value, r.pos + 2)
        assert list(value) == list(decode_range(data, 0, len(data))[0])  # the same keys in the same order
    return found


def _encode(c: codec.StructCodec, value: Any) -> tuple[str, Any]:
    out = bytearray(b"prefix")
    try:
        c.encode_into(value, out)
    except (ValueError, UnsupportedVersion) as exc:
        return (type(exc).__name__, str(exc))
    return ("ok", bytes(out))


def _pair(name: str, version: int, how: str) -> tuple[MessageSchema, codec.StructCodec, codec.StructCodec]:
    schema = load_schemas()[name]
    fast = codec.compiled(schema, version) if how == "compiled" else codec.generated(schema, version)
    return schema, fast, codec.reference(schema, version)


def test_the_build_compiled_the_loop_and_codecs_run_it() -> None:
    assert codegen.COMPILED, "make builds orchestrator/protocol/_struct_codec_c.pyx; this build did not"
    schema = load_schemas()["PartitionRecord"]
    version = schema.valid_versions.hi
    assert version is not None
    assert type(codec.compiled(schema, version).decode_from).__name__ == "StructDecoder"
    assert type(codec.compiled(schema, version).encode_into).__name__ == "StructEncoder"
    assert codec.generated(schema, version).decode_from.__code__.co_filename == "<codec decode>"
    assert codec.reference(schema, version).decode_from.__code__.co_filename != "<codec decode>"


@pytest.mark.parametrize("how", FAST)
@pytest.mark.parametrize(("name", "version"), CASES, ids=IDS)
@SETTINGS
@given(data=st.data())
def test_same_bytes_and_values_as_the_reference(name: str, version: int, how: str, data: st.DataObject) -> None:
    schema, fast, ref = _pair(name, version, how)
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


@pytest.mark.parametrize("how", FAST)
@pytest.mark.parametrize(("name", "version"), CASES, ids=IDS)
@settings(max_examples=12, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(junk=st.binary(max_size=48))
def test_random_bytes_decode_alike(name: str, version: int, how: str, junk: bytes) -> None:
    _, fast, ref = _pair(name, version, how)
    assert _decode(fast, junk) == _decode(ref, junk)


BAD_VALUES: list[tuple[str, dict[str, Any]]] = [
    ("partition_id", {"partition_id": "seven"}),  # a str in an int32
    ("partition_id", {"partition_id": 2**31}),  # out of range
    ("topic_id", {"topic_id": "not-a-uuid"}),
    ("replicas", {"replicas": [1, "two"]}),
    ("replicas", {"replicas": None}),  # not nullable
    ("replicas", {"replicas": [2**40]}),
]


@pytest.mark.parametrize("how", FAST)
@pytest.mark.parametrize(("field", "value"), BAD_VALUES, ids=[f"{f}-{i}" for i, (f, _) in enumerate(BAD_VALUES)])
def test_a_value_that_does_not_fit_gets_the_reference_error_and_writes_nothing(
    field: str, value: Any, how: str
) -> None:
    _, fast, ref = _pair("PartitionRecord", 0, how)
    full = {"topic_id": Uuid.random(), "replicas": [1], "isr": [1]} | value
    out = bytearray(b"keep")
    with pytest.raises(ValueError, match=f"PartitionRecord.{field}") as caught:
        fast.encode_into(full, out)
    assert bytes(out) == b"keep"
    assert _encode(ref, full) == ("_EncodeError", str(caught.value))


@pytest.mark.parametrize("how", FAST)
def test_a_string_too_long_and_a_null_name_get_the_reference_error(how: str) -> None:
    _, fast, ref = _pair("TopicRecord", 0, how)
    for value in ({"name": "x" * 40_000}, {"name": None}, {"name": b"bytes"}):
        assert _encode(fast, value) == _encode(ref, value)
        assert _encode(fast, value)[0] == "_EncodeError"


class _Level(IntEnum):
    THREE = 3


class _Name(str):
    pass


ODD_VALUES: list[tuple[str, dict[str, Any]]] = [
    ("enum-and-bool", {"leader": _Level.THREE, "replicas": [True, _Level.THREE], "leader_recovery_state": False}),
    ("no-topic-id", {"topic_id": None}),
    ("a-tuple-for-a-list", {"isr": (1, 2)}),
    ("int-bounds", {"partition_id": -(2**31), "leader_epoch": 2**31 - 1, "replicas": [2**31 - 1, -(2**31)]}),
    ("float-in-an-int", {"partition_id": 1.0}),
    ("a-generator-for-a-list", {"replicas": (r for r in [1, 2])}),
]


@pytest.mark.parametrize("how", FAST)
@pytest.mark.parametrize(("label", "value"), ODD_VALUES, ids=[label for label, _ in ODD_VALUES])
def test_odd_but_possible_values_get_what_the_reference_gives(label: str, value: dict[str, Any], how: str) -> None:
    """Ints that are bools or IntEnums, a tuple for a list, no topic id, the ends of a range: the same bytes; a float
    in an int field, a generator for a list: the same refusal."""
    _, fast, ref = _pair("PartitionRecord", 2, how)
    full = {"topic_id": Uuid.random(), "replicas": [1], "isr": [1]} | value
    found = _encode(fast, full)
    assert found == _encode(ref, full)
    assert found[0] == ("_EncodeError" if label in ("float-in-an-int", "a-generator-for-a-list") else "ok")


@pytest.mark.parametrize("how", FAST)
def test_a_str_subclass_and_a_bytearray_subclass_out_write_what_the_reference_writes(how: str) -> None:
    _, fast, ref = _pair("TopicRecord", 0, how)
    value = {"name": _Name("orders"), "topic_id": Uuid.random()}
    assert _encode(fast, value) == _encode(ref, value)

    class Out(bytearray):
        pass

    out, expected = Out(b"p"), bytearray(b"p")
    fast.encode_into(value, out)
    ref.encode_into(value, expected)
    assert bytes(out) == bytes(expected)
