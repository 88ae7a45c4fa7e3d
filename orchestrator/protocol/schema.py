"""Kafka message schemas (the JSON format of Kafka's ``common/message`` files) as immutable objects.

A schema is parsed once into :class:`MessageSchema`; field types that name a ``commonStructs`` entry are
resolved at load time, so the codec never looks names up on the hot path. Field names keep Kafka's spelling
in ``name`` and get a snake_case ``py_name`` (``TopicId`` -> ``topic_id``) used as the key in message values.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from orchestrator.errors import ProtocolError, UnsupportedVersion

PRIMITIVE_TYPES = frozenset(
    {
        "bool",
        "int8",
        "int16",
        "uint16",
        "int32",
        "uint32",
        "int64",
        "float64",
        "string",
        "bytes",
        "uuid",
        "records",
    }
)


class SchemaError(ProtocolError):
    """A schema file that does not follow Kafka's message schema format (a packaging error: the process stops)."""

    name, retriable = "SCHEMA_ERROR", False


@dataclass(frozen=True, slots=True)
class Versions:
    """An inclusive version range; ``hi`` None means open-ended, an empty range has ``lo > hi``."""

    lo: int
    hi: int | None

    @classmethod
    def parse(cls, text: str | None) -> Versions:
        if text is None or text == "none":
            return NO_VERSIONS
        text = text.strip()
        if text.endswith("+"):
            return cls(int(text[:-1]), None)
        if "-" in text:
            lo, hi = text.split("-", 1)
            return cls(int(lo), int(hi))
        return cls(int(text), int(text))

    def __contains__(self, version: object) -> bool:
        if not isinstance(version, int):
            return False
        return self.lo <= version and (self.hi is None or version <= self.hi)

    def intersect(self, other: Versions) -> Versions:
        his = [h for h in (self.hi, other.hi) if h is not None]
        return Versions(max(self.lo, other.lo), min(his) if his else None)

    def __str__(self) -> str:
        if self.hi is not None and self.lo > self.hi:
            return "none"
        return f"{self.lo}+" if self.hi is None else f"{self.lo}-{self.hi}"


NO_VERSIONS = Versions(1, 0)


def snake_case(name: str) -> str:
    """Kafka's PascalCase field name to Python's snake_case (``ThrottleTimeMs`` -> ``throttle_time_ms``)."""
    s = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", name)
    s = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", s)
    return s.lower()


@dataclass(frozen=True, slots=True)
class FieldSpec:
    name: str
    py_name: str
    type: str  # as written: "int32", "[]int32", "[]Topic", "Topic", ...
    versions: Versions
    nullable_versions: Versions
    tagged_versions: Versions
    tag: int | None
    default: str | None
    ignorable: bool
    flexible_versions: Versions | None  # a per-field override (Kafka uses it for the header's ClientId)
    fields: tuple[FieldSpec, ...]  # for struct and struct-array types
    struct_name: str | None  # the struct type name, when the field is a struct or an array of structs

    @property
    def is_array(self) -> bool:
        return self.type.startswith("[]")

    @property
    def element_type(self) -> str:
        return self.type[2:] if self.is_array else self.type

    @property
    def is_struct(self) -> bool:
        return self.struct_name is not None


@dataclass(frozen=True, slots=True, eq=False)  # identity equality: schemas are loaded once; cheap cache keys
class MessageSchema:
    name: str
    type: str  # request | response | metadata | header | data
    api_key: int | None
    valid_versions: Versions
    flexible_versions: Versions
    fields: tuple[FieldSpec, ...]

    def check_version(self, version: int) -> None:
        if version not in self.valid_versions:
            raise UnsupportedVersion(f"{self.name} version {version} is not supported (valid: {self.valid_versions})")


def _parse_field(raw: dict[str, Any], common: dict[str, dict[str, Any]], where: str) -> FieldSpec:
    try:
        name = raw["name"]
        ftype = raw["type"]
        versions = Versions.parse(raw["versions"])
    except KeyError as exc:
        raise SchemaError(f"{where}: field {raw.get('name', '?')} lacks {exc}") from exc
    element = ftype[2:] if ftype.startswith("[]") else ftype
    sub: tuple[FieldSpec, ...] = ()
    struct_name = None
    if element not in PRIMITIVE_TYPES:
        struct_name = element
        if "fields" in raw:
            sub_raw = raw["fields"]
        elif element in common:
            sub_raw = common[element]["fields"]
        else:
            raise SchemaError(f"{where}: field {name} has unknown type {ftype}")
        sub = tuple(_parse_field(f, common, f"{where}.{name}") for f in sub_raw)
    tag = raw.get("tag")
    tagged = Versions.parse(raw.get("taggedVersions"))
    if (tag is None) != (raw.get("taggedVersions") is None):
        raise SchemaError(f"{where}: field {name} must set both tag and taggedVersions, or neither")
    fv = raw.get("flexibleVersions")
    return FieldSpec(
        name=name,
        py_name=snake_case(name),
        type=ftype,
        versions=versions,
        nullable_versions=Versions.parse(raw.get("nullableVersions")),
        tagged_versions=tagged,
        tag=tag,
        default=None if raw.get("default") is None else str(raw["default"]),
        ignorable=bool(raw.get("ignorable", False)),
        flexible_versions=None if fv is None else Versions.parse(fv),
        fields=sub,
        struct_name=struct_name,
    )


def parse_schema(doc: dict[str, Any]) -> MessageSchema:
    name = doc.get("name")
    if not name or "fields" not in doc or "validVersions" not in doc:
        raise SchemaError(f"schema {name!r} lacks name, validVersions or fields")
    common = {c["name"]: c for c in doc.get("commonStructs", [])}
    fields = tuple(_parse_field(f, common, name) for f in doc["fields"])
    return MessageSchema(
        name=name,
        type=doc.get("type", "data"),
        api_key=doc.get("apiKey"),
        valid_versions=Versions.parse(doc["validVersions"]),
        flexible_versions=Versions.parse(doc.get("flexibleVersions", "none")),
        fields=fields,
    )


@cache
def load_schemas() -> dict[str, MessageSchema]:
    """Every schema shipped in ``orchestrator/protocol/schemas``, keyed by message name."""
    out: dict[str, MessageSchema] = {}
    folder = resources.files("orchestrator.protocol") / "schemas"
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".json"):
            schema = parse_schema(json.loads(entry.read_text(encoding="utf-8")))
            if schema.name in out:
                raise SchemaError(f"duplicate schema name {schema.name}")
            out[schema.name] = schema
    return out


def schema(name: str) -> MessageSchema:
    try:
        return load_schemas()[name]
    except KeyError:
        raise SchemaError(f"no schema named {name}") from None


@cache
def _by_api_key() -> dict[tuple[str, int], MessageSchema]:
    return {(s.type, s.api_key): s for s in load_schemas().values() if s.api_key is not None}


def request_schema(api_key: int) -> MessageSchema | None:
    return _by_api_key().get(("request", api_key))


def response_schema(api_key: int) -> MessageSchema | None:
    return _by_api_key().get(("response", api_key))


def record_schema(api_key: int, *, rlmm: bool = False) -> MessageSchema | None:
    """A cluster metadata record schema, or (``rlmm``) a remote log metadata record schema, by record type."""
    for s in load_schemas().values():
        if s.type == "metadata" and s.api_key == api_key and is_rlmm_record(s) == rlmm:
            return s
    return None


def is_rlmm_record(s: MessageSchema) -> bool:
    return s.name.startswith("Remote") and s.name.endswith("Record")
