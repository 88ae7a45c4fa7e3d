"""Walking message schemas independently of the codec: versions, fields present, defaults as the schema text says.

Shared by the cross-check and the round-trip tests, so both judge the codec against the same reading of the
schema files rather than against the codec's own defaults.
"""

from __future__ import annotations

from typing import Any

from orchestrator.ids import ZERO_UUID
from orchestrator.protocol.schema import FieldSpec, MessageSchema

INT_RANGES = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "uint16": (0, 2**16 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "uint32": (0, 2**32 - 1),
    "int64": (-(2**63), 2**63 - 1),
}


def versions_of(schema: MessageSchema) -> list[int]:
    lo, hi = schema.valid_versions.lo, schema.valid_versions.hi
    assert hi is not None, f"{schema.name}: open-ended validVersions"
    return list(range(lo, hi + 1))


def present(fields: tuple[FieldSpec, ...], version: int) -> list[FieldSpec]:
    return [f for f in fields if version in f.versions]


def is_tagged(field: FieldSpec, version: int) -> bool:
    return field.tag is not None and version in field.tagged_versions


def schema_default(field: FieldSpec, version: int) -> Any:
    """The field's default as Kafka's generated code sets it: the "default" text, or the type's zero value."""
    raw = field.default
    if raw == "null":
        return None
    if field.is_array:
        return []
    if field.is_struct:
        # A struct absent from the version still holds Kafka's default instance, every sub-field at its default
        # (FetchResponse's DivergingEpoch at v4: its sub-fields exist from v12 only, yet default to -1).
        subs = present(field.fields, version) if version in field.versions else field.fields
        return {f.py_name: schema_default(f, version) for f in subs}
    t = field.type
    if t in INT_RANGES:
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


def project_fields(fields: tuple[FieldSpec, ...], version: int, decoded: dict[str, Any]) -> dict[str, Any]:
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
                    [project_fields(f.fields, version, item) for item in v]
                    if f.is_array
                    else project_fields(f.fields, version, v)
                )
            out[f.py_name] = v
        elif f.py_name in decoded:
            absent = decoded[f.py_name]
            assert absent in (schema_default(f, version), None, []), f"{f.name} is absent but holds {absent!r}"
    extra = set(decoded) - set(known)
    assert not extra, f"decode returned unknown keys {extra}"
    return out
