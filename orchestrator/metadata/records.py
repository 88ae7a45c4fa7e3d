"""Cluster metadata records and remote log metadata (RLMM) records, and their binary form.

A record is serialized as Kafka serializes metadata records: an unsigned-varint frame version (1), an
unsigned-varint record type (the schema's ``apiKey``), an unsigned-varint record version, then the body in the
codec's encoding. Cluster metadata records and RLMM records have separate type namespaces (as in Kafka, where
the RLMM records travel in their own topic), so decoding says which one it reads.

The enums below are the wire values of the tiering fields; they never change meaning once written.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import IntEnum
from functools import cache
from typing import Any

from orchestrator.errors import ProtocolError, UnsupportedVersion
from orchestrator.protocol import codec
from orchestrator.protocol.schema import MessageSchema, is_rlmm_record, load_schemas

FRAME_VERSION = 1


class TieredState(IntEnum):
    NOT_TIERED = 0  # never tiered: tiered_epoch 0
    ENABLED = 1
    DISABLING = 2
    DISABLED = 3


class DisablePolicy(IntEnum):
    NONE = 0
    RETAIN = 1
    DELETE = 2

    @property
    def config_value(self) -> str:
        return self.name.lower()


class SegmentState(IntEnum):
    """RemoteLogSegmentState, with Kafka's ids."""

    COPY_SEGMENT_STARTED = 0
    COPY_SEGMENT_FINISHED = 1
    DELETE_SEGMENT_STARTED = 2
    DELETE_SEGMENT_FINISHED = 3


class PartitionDeleteState(IntEnum):
    """RemotePartitionDeleteState, with Kafka's ids."""

    DELETE_PARTITION_MARKED = 0
    DELETE_PARTITION_STARTED = 1
    DELETE_PARTITION_FINISHED = 2


class ConfigResourceType(IntEnum):
    TOPIC = 2
    BROKER = 4


@dataclass(frozen=True, slots=True)
class MetadataRecord:
    """One record: its schema name, version and field values (snake_case keys)."""

    name: str
    version: int
    fields: Mapping[str, Any]

    def __getitem__(self, key: str) -> Any:
        return self.fields[key]


@cache
def _record_schemas() -> tuple[dict[str, MessageSchema], dict[int, MessageSchema], dict[int, MessageSchema]]:
    by_name: dict[str, MessageSchema] = {}
    cluster: dict[int, MessageSchema] = {}
    rlmm: dict[int, MessageSchema] = {}
    for s in load_schemas().values():
        if s.type != "metadata" or s.api_key is None:
            continue
        by_name[s.name] = s
        (rlmm if is_rlmm_record(s) else cluster)[s.api_key] = s
    return by_name, cluster, rlmm


def record_schema_by_name(name: str) -> MessageSchema:
    try:
        return _record_schemas()[0][name]
    except KeyError:
        raise ProtocolError(f"unknown metadata record type {name}") from None


def make_record(record_type: str, version: int | None = None, /, **fields: Any) -> MetadataRecord:
    """A ``record_type`` record at ``version`` (default: the newest this build knows) with these field values."""
    name = record_type
    s = record_schema_by_name(name)
    if version is None:
        if s.valid_versions.hi is None:  # pragma: no cover - record schemas declare closed ranges
            raise ProtocolError(f"{name} declares no highest version")
        version = s.valid_versions.hi
    c = codec.compiled(s, version)
    unknown = set(fields) - c.field_names
    if unknown:
        raise ValueError(f"{name} has no field(s) {sorted(unknown)}")
    return MetadataRecord(name, version, c.normalize(fields))


def encode_record(record: MetadataRecord) -> bytes:
    prefix, c = _encoder(record.name, record.version)
    out = bytearray(prefix)
    c.encode_into(record.fields, out)
    return bytes(out)


@cache
def _encoder(name: str, version: int) -> tuple[bytes, codec.StructCodec]:
    """The frame header (frame version, type, version) and the codec of one record type at one version."""
    s = record_schema_by_name(name)
    assert s.api_key is not None
    prefix = bytearray()
    for n in (FRAME_VERSION, s.api_key, version):
        codec.write_uvarint(n, prefix)
    return bytes(prefix), codec.compiled(s, version)


@cache
def is_rlmm_type(name: str) -> bool:
    """Whether records named ``name`` belong in the remote log metadata (else the cluster metadata log)."""
    return is_rlmm_record(record_schema_by_name(name))


def decode_record(data: bytes | bytearray | memoryview, *, rlmm: bool = False) -> MetadataRecord:
    """Decode one record; any malformation (incl. an unknown type or version) raises ProtocolError."""
    r = codec.Reader(data)
    if len(data) > 2 and data[0] == FRAME_VERSION and data[1] < 0x80 and data[2] < 0x80:  # one-byte varints
        api_key, version, r.pos = data[1], data[2], 3
    else:
        frame_version = r.uvarint()
        if frame_version != FRAME_VERSION:
            raise ProtocolError(f"unknown metadata record frame version {frame_version}")
        api_key = r.uvarint()
        version = r.uvarint()
    s, c = _decoder(rlmm, api_key, version)
    fields = c.decode_from(r)
    if r.pos != r.end:
        raise ProtocolError(f"{s.name} v{version}: {r.end - r.pos} trailing bytes")
    return MetadataRecord(s.name, version, fields)


@cache
def _decoder(rlmm: bool, api_key: int, version: int) -> tuple[MessageSchema, codec.StructCodec]:
    """The schema and codec of a record type at a version (memoized: one look-up per record on replay; an unknown
    type or version raises ProtocolError and is not memoized)."""
    _, cluster, remote = _record_schemas()
    s = (remote if rlmm else cluster).get(api_key)
    if s is None:
        kind = "remote log metadata" if rlmm else "metadata"
        raise ProtocolError(f"unknown {kind} record type {api_key}")
    try:
        return s, codec.compiled(s, version)
    except UnsupportedVersion as exc:
        raise ProtocolError(str(exc)) from exc
