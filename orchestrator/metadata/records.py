"""Cluster metadata records and remote log metadata (RLMM) records, and their binary form.

A record is serialized as Kafka serializes metadata records: an unsigned-varint frame version (1), an
unsigned-varint record type (the schema's ``apiKey``), an unsigned-varint record version, then the body in the
codec's encoding. Cluster metadata records and RLMM records have separate type namespaces (as in Kafka, where
the RLMM records travel in their own topic), so decoding says which one it reads.

The enums below are the wire values of the tiering fields; they never change meaning once written.

RLMM records are Kafka's (``storage/src/main/resources/message/*.json``, versions 0 and 1) plus our tagged
``TieredEpoch`` on tag 10950. :func:`make_record` builds them at :data:`RLMM_RECORD_VERSION` (0) unless told
otherwise: every Kafka release with tiered storage (3.6 on) reads version 0, while a reader whose schemas stop at
version 0 (3.9, 4.x) refuses a version-1 record outright.

The tiered epoch has not always been on tag 10950: stores written before hold version-0 records with it on tag 1
(RemoteLogSegmentMetadataRecord) or tag 0 (the update and the partition-delete records), tags Kafka has since given
to BrokerLeaderEpoch (version 1 and up only). Decoding keeps reading them (the legacy rule,
:func:`_legacy_tiered_epoch_schema`): in a version-0 RLMM record those tags can only be ours, because at version 0
Kafka defines no tag but TxnIndexEmpty's tag 0 in RemoteLogSegmentMetadataRecord. Such a record reads back with
its tiered epoch and, written again, carries it on tag 10950.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from enum import IntEnum
from functools import cache
from typing import Any

from orchestrator.errors import ProtocolError
from orchestrator.protocol import codec
from orchestrator.protocol.schema import MessageSchema, Versions, is_rlmm_record, load_schemas

FRAME_VERSION = 1

#: The version :func:`make_record` gives an RLMM record unless told otherwise (see the module docstring).
RLMM_RECORD_VERSION = 0

#: Where TieredEpoch sat in version-0 RLMM records before it moved to tag 10950: the legacy rule's table.
LEGACY_TIERED_EPOCH_TAGS = {
    "RemoteLogSegmentMetadataRecord": 1,
    "RemoteLogSegmentMetadataUpdateRecord": 0,
    "RemotePartitionDeleteMetadataRecord": 0,
}
_LEGACY_KEY = "legacy_tiered_epoch"


class UnknownRecordType(ProtocolError):
    """A record whose type (the frame's apiKey) this build does not know."""

    name, retriable = "UNKNOWN_RECORD_TYPE", False

    def __init__(self, api_key: int, *, rlmm: bool) -> None:
        kind = "remote log metadata" if rlmm else "metadata"
        super().__init__(f"unknown {kind} record type (apiKey) {api_key}")
        self.api_key = api_key
        self.rlmm = rlmm


class UnknownRecordVersion(ProtocolError):
    """A record of a known type at a version this build does not know (a newer writer's)."""

    name, retriable = "UNKNOWN_RECORD_VERSION", False

    def __init__(self, record_name: str, api_key: int, version: int, valid: Versions) -> None:
        super().__init__(f"{record_name} (apiKey {api_key}) version {version} is not known (known: {valid})")
        self.record_name = record_name
        self.api_key = api_key
        self.version = version


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
    """A ``record_type`` record at ``version`` with these field values. The default version is the newest this
    build knows for cluster metadata records, :data:`RLMM_RECORD_VERSION` for RLMM records."""
    name = record_type
    version, c = _record_codec(name, version)
    if not c.field_names.issuperset(fields):
        raise ValueError(f"{name} has no field(s) {sorted(set(fields) - c.field_names)}")
    return MetadataRecord(name, version, c.normalize(fields))


@cache
def _record_codec(name: str, version: int | None) -> tuple[int, codec.StructCodec]:
    """The version (None: the default) and codec :func:`make_record` builds a ``name`` record with, found once per
    pair: a bulk request makes thousands of records of a few kinds (an unknown name or version raises, uncached)."""
    s = record_schema_by_name(name)
    if version is None:
        version = default_record_version(s)
    return version, codec.compiled(s, version)


def default_record_version(s: MessageSchema) -> int:
    if is_rlmm_record(s):
        return RLMM_RECORD_VERSION
    if s.valid_versions.hi is None:  # pragma: no cover - record schemas declare closed ranges
        raise ProtocolError(f"{s.name} declares no highest version")
    return s.valid_versions.hi


def encode_record(record: MetadataRecord) -> bytes:
    prefix, encode_into, _ = record_encoder(record.name, record.version)
    out = bytearray(prefix)
    encode_into(record.fields, out)
    return bytes(out)


@cache
def record_encoder(name: str, version: int) -> tuple[bytes, Callable[[Any, bytearray], None], bool]:
    """How to write one record type at one version: the frame header (frame version, type, version), the body's
    encoder, and whether the type belongs in the remote log metadata (:func:`is_rlmm_type`). One look-up per
    record for a writer of many (:func:`encode_record`, the stores' batches)."""
    s = record_schema_by_name(name)
    assert s.api_key is not None
    prefix = bytearray()
    for n in (FRAME_VERSION, s.api_key, version):
        codec.write_uvarint(n, prefix)
    return bytes(prefix), codec.compiled(s, version).encode_into, is_rlmm_record(s)


@cache
def is_rlmm_type(name: str) -> bool:
    """Whether records named ``name`` belong in the remote log metadata (else the cluster metadata log)."""
    return is_rlmm_record(record_schema_by_name(name))


def decode_record(data: bytes | bytearray | memoryview, *, rlmm: bool = False) -> MetadataRecord:
    """Decode one record; any malformation raises ProtocolError: :class:`UnknownRecordType` and
    :class:`UnknownRecordVersion` name what is unknown."""
    end = len(data)
    if end > 2 and data[0] == FRAME_VERSION and data[1] < 0x80 and data[2] < 0x80:  # one-byte varints
        api_key, version, pos = data[1], data[2], 3
    else:
        r = codec.Reader(data)
        frame_version = r.uvarint()
        if frame_version != FRAME_VERSION:
            raise ProtocolError(f"unknown metadata record frame version {frame_version}")
        api_key = r.uvarint()
        version = r.uvarint()
        pos = r.pos
    s, c, legacy = _decoder(rlmm, api_key, version)
    fields, pos = c.decode_range(data, pos, end)
    if pos != end:
        raise ProtocolError(f"{s.name} v{version}: {end - pos} trailing bytes")
    if legacy:
        _apply_legacy_tiered_epoch(s.name, fields)
    return MetadataRecord(s.name, version, fields)


# The compiled page reader (``orchestrator/metadata/_replay_c.pyx``) sets a record's fields by these names.
assert MetadataRecord.__slots__ == ("name", "version", "fields")


def plain_decoder(rlmm: bool, api_key: int, version: int) -> tuple[str, int, Callable[..., Any]] | None:
    """How :func:`decode_record` decodes the body of a record of this type and version, for a reader that frames
    records itself: the schema's name, the version and the codec's ``decode_range``. None where more than the
    codec runs (the legacy tiered-epoch rule) or the type or version is unknown: the reader then calls
    :func:`decode_record`, which raises what it raises."""
    try:
        s, c, legacy = _decoder(rlmm, api_key, version)
    except ProtocolError:
        return None
    return None if legacy else (s.name, version, c.decode_range)


def _apply_legacy_tiered_epoch(name: str, fields: dict[str, Any]) -> None:
    """Fold a legacy tag's tiered epoch into ``tiered_epoch``. Both tags set (no writer ever did) is an error."""
    old = fields.pop(_LEGACY_KEY)
    if old == -1:
        return
    if fields["tiered_epoch"] not in (-1, old):
        raise ProtocolError(
            f"{name} v0 holds two tiered epochs: {old} on the legacy tag and {fields['tiered_epoch']} on tag 10950"
        )
    fields["tiered_epoch"] = old


@cache
def _decoder(rlmm: bool, api_key: int, version: int) -> tuple[MessageSchema, codec.StructCodec, bool]:
    """The schema and codec of a record type at a version, and whether the legacy rule applies (memoized: one
    look-up per record on replay; an unknown type or version raises and is not memoized)."""
    _, cluster, remote = _record_schemas()
    s = (remote if rlmm else cluster).get(api_key)
    if s is None:
        raise UnknownRecordType(api_key, rlmm=rlmm)
    if version not in s.valid_versions:
        raise UnknownRecordVersion(s.name, api_key, version, s.valid_versions)
    if rlmm and version == 0 and s.name in LEGACY_TIERED_EPOCH_TAGS:
        return s, codec.compiled(_legacy_tiered_epoch_schema(s), 0), True
    return s, codec.compiled(s, version), False


@cache
def _legacy_tiered_epoch_schema(s: MessageSchema) -> MessageSchema:
    """``s`` for reading version 0 only, with the tiered epoch's old tag as one more tagged field.

    The old tag must be one no field of ``s`` holds at version 0 (true of Kafka's schemas: checked here, so a
    schema change that breaks the rule fails loudly instead of misreading a Kafka field)."""
    tag = LEGACY_TIERED_EPOCH_TAGS[s.name]
    taken = {f.tag for f in s.fields if f.tag is not None and 0 in f.versions and 0 in f.tagged_versions}
    if tag in taken:
        raise ProtocolError(f"{s.name}: legacy tiered-epoch tag {tag} is a field of version 0")
    current = next(f for f in s.fields if f.py_name == "tiered_epoch")
    v0 = Versions(0, 0)
    legacy = replace(current, name="LegacyTieredEpoch", py_name=_LEGACY_KEY, versions=v0, tagged_versions=v0, tag=tag)
    return replace(s, fields=(*s.fields, legacy))
