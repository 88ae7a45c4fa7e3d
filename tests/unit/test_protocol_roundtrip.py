"""Round trips through the schema-driven codec, for every schema and every version it declares.

Values come from a hypothesis strategy built from the schema itself (:func:`value_strategy`): every field
present in the version, nullable fields sometimes None, tagged fields sometimes left out (so their default is
used), nested structs and arrays of structs down to any depth. The property is
``decode(encode(v)) == normalize(v)``, where :func:`normalize` fills in what the codec is documented to fill in
(schema defaults for missing keys). Defaults are worked out here from the schema text, not from the codec.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestrator.errors import ProtocolError
from orchestrator.ids import ZERO_UUID, Uuid
from orchestrator.protocol import codec
from orchestrator.protocol.schema import FieldSpec, MessageSchema, load_schemas

pytestmark = pytest.mark.unit

SETTINGS = settings(
    max_examples=15,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

_INT_RANGES = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "uint16": (0, 2**16 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "uint32": (0, 2**32 - 1),
    "int64": (-(2**63), 2**63 - 1),
}


# --- schema walking, independent of the codec


def versions_of(schema: MessageSchema) -> list[int]:
    lo, hi = schema.valid_versions.lo, schema.valid_versions.hi
    assert hi is not None, f"{schema.name}: open-ended validVersions"
    return list(range(lo, hi + 1))


def all_cases() -> list[tuple[str, int]]:
    return [(name, v) for name, s in sorted(load_schemas().items()) for v in versions_of(s)]


def present(fields: tuple[FieldSpec, ...], version: int) -> Iterator[FieldSpec]:
    return (f for f in fields if version in f.versions)


def is_tagged(field: FieldSpec, version: int) -> bool:
    return field.tag is not None and version in field.tagged_versions


def default_value(field: FieldSpec, version: int) -> Any:
    """The field's default as Kafka's generated code sets it: the "default" text, or the type's zero value."""
    raw = field.default
    if raw == "null":
        return None
    if field.is_array:
        return []
    if field.is_struct:
        return {f.py_name: default_value(f, version) for f in present(field.fields, version)}
    t = field.type
    if t in _INT_RANGES:
        return int(raw, 0) if raw else 0
    if t == "bool":
        return raw is not None and raw.lower() == "true"
    if t == "float64":
        return float(raw) if raw else 0.0
    if t == "string":
        return raw or ""
    if t == "uuid":
        return ZERO_UUID
    if t in ("bytes", "records"):
        return b""
    raise AssertionError(f"unknown type {t}")


def normalize_struct(fields: tuple[FieldSpec, ...], version: int, value: dict[str, Any]) -> dict[str, Any]:
    """``value`` with every field of the version present: missing keys take the schema default."""
    out: dict[str, Any] = {}
    for f in present(fields, version):
        if f.py_name not in value:
            out[f.py_name] = default_value(f, version)
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


def project_struct(fields: tuple[FieldSpec, ...], version: int, decoded: dict[str, Any]) -> dict[str, Any]:
    """The part of a decoded value that belongs to ``version``, checking the keys the codec must return.

    Every field of the version must be there; a key for a field absent from the version may be there too, but
    only holding that field's default.
    """
    out: dict[str, Any] = {}
    known = {f.py_name: f for f in fields}
    for f in fields:
        if version in f.versions:
            assert f.py_name in decoded, f"decode dropped field {f.name}"
            v = decoded[f.py_name]
            if v is not None and f.is_struct:
                v = (
                    [project_struct(f.fields, version, item) for item in v]
                    if f.is_array
                    else project_struct(f.fields, version, v)
                )
            out[f.py_name] = v
        elif f.py_name in decoded:
            absent = decoded[f.py_name]
            assert absent in (default_value(f, version), None, []), f"{f.name} is absent but holds {absent!r}"
    extra = set(decoded) - set(known)
    assert not extra, f"decode returned unknown keys {extra}"
    return out


def project(schema: MessageSchema, version: int, decoded: dict[str, Any]) -> dict[str, Any]:
    return project_struct(schema.fields, version, decoded)


# --- the strategy


def _primitive(type_name: str) -> st.SearchStrategy[Any]:
    if type_name in _INT_RANGES:
        lo, hi = _INT_RANGES[type_name]
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


def value_strategy(schema: MessageSchema, version: int) -> st.SearchStrategy[dict[str, Any]]:
    """Valid values of ``schema`` at ``version``."""
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
