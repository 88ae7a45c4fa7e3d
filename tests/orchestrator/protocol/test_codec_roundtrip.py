"""Round trips through the schema-driven codec, for every schema and every version it declares.

Values come from a hypothesis strategy built from the schema itself (:func:`value_strategy`): every field
present in the version, nullable fields sometimes None, tagged fields sometimes left out (so their default is
used), nested structs and arrays of structs down to any depth. The property is
``decode(encode(v)) == normalize(v)``, where :func:`normalize` fills in what the codec is documented to fill in
(schema defaults for missing keys). Defaults are worked out here from the schema text, not from the codec.
"""

from __future__ import annotations

import functools
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestrator.errors import ProtocolError
from orchestrator.ids import Uuid
from orchestrator.protocol import codec
from orchestrator.protocol.schema import FieldSpec, MessageSchema, load_schemas
from tests.support.schema_values import INT_RANGES, is_tagged, present, project_fields, schema_default, versions_of

pytestmark = pytest.mark.unit

SETTINGS = settings(
    max_examples=15,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


# --- schema walking, independent of the codec


def all_cases() -> list[tuple[str, int]]:
    return [(name, v) for name, s in sorted(load_schemas().items()) for v in versions_of(s)]


def normalize_struct(fields: tuple[FieldSpec, ...], version: int, value: dict[str, Any]) -> dict[str, Any]:
    """``value`` with every field of the version present: missing keys take the schema default."""
    out: dict[str, Any] = {}
    for f in present(fields, version):
        if f.py_name not in value:
            out[f.py_name] = schema_default(f, version)
            continue
        v = value[f.py_name]
        if v is not None and f.is_struct:
            v = (
                [normalize_struct(f.fields, version, item) for item in v]
                if f.is_array
                else normalize_struct(f.fields, version, v)
            )
        elif v is not None and f.is_array:
            v = list(v)
        out[f.py_name] = v
    return out


def normalize(schema: MessageSchema, version: int, value: dict[str, Any]) -> dict[str, Any]:
    return normalize_struct(schema.fields, version, value)


def project(schema: MessageSchema, version: int, decoded: dict[str, Any]) -> dict[str, Any]:
    return project_fields(schema.fields, version, decoded)


# --- the strategy


def _primitive(type_name: str) -> st.SearchStrategy[Any]:
    if type_name in INT_RANGES:
        lo, hi = INT_RANGES[type_name]
        return st.integers(min_value=lo, max_value=hi)
    if type_name == "bool":
        return st.booleans()
    if type_name == "float64":
        return st.floats(allow_nan=False)
    if type_name == "string":
        return st.text(max_size=12)
    if type_name == "uuid":
        return st.binary(min_size=16, max_size=16).map(Uuid.from_bytes)
    if type_name in ("bytes", "records"):
        return st.binary(max_size=12)
    raise AssertionError(f"unknown type {type_name}")


def field_strategy(field: FieldSpec, version: int) -> st.SearchStrategy[Any]:
    element: st.SearchStrategy[Any] = (
        struct_strategy(field.fields, version) if field.is_struct else _primitive(field.element_type)
    )
    s = st.lists(element, max_size=3) if field.is_array else element
    if version in field.nullable_versions:
        s = st.none() | s
    return s


def struct_strategy(fields: tuple[FieldSpec, ...], version: int) -> st.SearchStrategy[dict[str, Any]]:
    """Dicts holding every field of the version; tagged fields may be left out (the codec uses their default)."""
    required: dict[str, st.SearchStrategy[Any]] = {}
    optional: dict[str, st.SearchStrategy[Any]] = {}
    for f in present(fields, version):
        (optional if is_tagged(f, version) else required)[f.py_name] = field_strategy(f, version)
    return st.fixed_dictionaries(required, optional=optional)


@functools.cache
def value_strategy(schema: MessageSchema, version: int) -> st.SearchStrategy[dict[str, Any]]:
    """Valid values of ``schema`` at ``version``.

    Built once per (schema, version): hypothesis validates a strategy object once, so a test that draws from the
    same object in each example skips rebuilding and revalidating the nested strategies; the values drawn are
    the same as from a fresh copy.
    """
    return struct_strategy(schema.fields, version)


# --- tests

CASES = all_cases()
IDS = [f"{name}-v{v}" for name, v in CASES]


def test_every_schema_has_versions() -> None:
    schemas = load_schemas()
    assert schemas, "no schema files were loaded"
    assert len(CASES) >= len(schemas)


@pytest.mark.parametrize(("name", "version"), CASES, ids=IDS)
@SETTINGS
@given(data=st.data())
def test_roundtrip(name: str, version: int, data: st.DataObject) -> None:
    schema = load_schemas()[name]
    value = data.draw(value_strategy(schema, version), label="value")
    encoded = codec.encode(schema, version, value)
    decoded = codec.decode(schema, version, encoded)
    assert project(schema, version, decoded) == normalize(schema, version, value)
    # Decoding is a fixed point: encoding what came out gives the same bytes again.
    assert codec.encode(schema, version, decoded) == encoded


@pytest.mark.parametrize(("name", "version"), CASES, ids=IDS)
def test_empty_value_takes_defaults(name: str, version: int) -> None:
    schema = load_schemas()[name]
    decoded = codec.decode(schema, version, codec.encode(schema, version, {}))
    assert project(schema, version, decoded) == normalize(schema, version, {})


FLEXIBLE_CASES = [(n, v) for n, v in CASES if v in load_schemas()[n].flexible_versions]


@pytest.mark.parametrize(("name", "version"), FLEXIBLE_CASES, ids=[f"{n}-v{v}" for n, v in FLEXIBLE_CASES])
@SETTINGS
@given(data=st.data())
def test_unknown_tagged_fields_are_skipped(name: str, version: int, data: st.DataObject) -> None:
    schema = load_schemas()[name]
    # Only values whose top-level tagged fields are all left at their default end in an empty tag section (0x00).
    value = data.draw(struct_strategy_without_top_tags(schema, version), label="value")
    encoded = codec.encode(schema, version, value)
    assert encoded[-1] == 0, "a value without tagged fields ends with an empty tagged-field section"
    payload = data.draw(st.binary(max_size=20), label="payload")
    tag = data.draw(st.integers(min_value=max(_all_tags(schema.fields), default=-1) + 1, max_value=2**20))
    extra = encoded[:-1] + uvarint(1) + uvarint(tag) + uvarint(len(payload)) + payload
    assert project(schema, version, codec.decode(schema, version, extra)) == normalize(schema, version, value)


def uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _all_tags(fields: tuple[FieldSpec, ...]) -> list[int]:
    """Every tag the top level uses in any version (a tag of another version is not 'unknown' to Kafka)."""
    return [int(f.tag) for f in fields if f.tag is not None]


@functools.cache
def struct_strategy_without_top_tags(schema: MessageSchema, version: int) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries(
        {f.py_name: field_strategy(f, version) for f in present(schema.fields, version) if not is_tagged(f, version)}
    )


@pytest.mark.parametrize(("name", "version"), CASES, ids=IDS)
@settings(max_examples=10, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_truncated_or_padded_input_is_a_protocol_error(name: str, version: int, data: st.DataObject) -> None:
    schema = load_schemas()[name]
    encoded = codec.encode(schema, version, data.draw(value_strategy(schema, version), label="value"))
    if encoded:
        cut = data.draw(st.integers(min_value=0, max_value=len(encoded) - 1), label="cut")
        with pytest.raises(ProtocolError):
            codec.decode(schema, version, encoded[:cut])
    with pytest.raises(ProtocolError):
        codec.decode(schema, version, encoded + b"\x00")


@pytest.mark.parametrize(("name", "version"), CASES, ids=IDS)
@settings(max_examples=15, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(junk=st.binary(max_size=64))
def test_arbitrary_bytes_decode_or_raise_protocol_error(name: str, version: int, junk: bytes) -> None:
    schema = load_schemas()[name]
    try:
        decoded = codec.decode(schema, version, junk)
    except ProtocolError:
        return
    assert isinstance(decoded, dict)
