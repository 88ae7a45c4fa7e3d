"""The custom metadata Aiven puts in the RLMM's COPY_SEGMENT_FINISHED record: Kafka tagged fields, byte for byte.

Owner: Aiven's, defined by ``core/src/main/java/io/aiven/kafka/tieredstorage/metadata/SegmentCustomMetadataField.java``,
``SegmentCustomMetadataSerde.java`` and ``SegmentCustomMetadataBuilder.java``, with the setting
``custom.metadata.fields.include`` of ``config/RemoteStorageManagerConfig.java`` (commit in
:mod:`remote_storage.segment_format`). The bytes are Kafka's tagged-fields section
(``org.apache.kafka.common.protocol.types.TaggedFields``) of a schema with three fields:

====  ===============  ==============  ===========================================================
tag   name             Kafka type      value Aiven writes
====  ===============  ==============  ===========================================================
0     REMOTE_SIZE      VARLONG         bytes uploaded for the segment: .log + .indexes + .rsm-manifest
1     OBJECT_PREFIX    COMPACT_STRING  the configured key prefix (``key.prefix``)
2     OBJECT_KEY       COMPACT_STRING  the key's main path, ``<topic>-<id>/<partition>/<offset>-<segment id>``
====  ===============  ==============  ===========================================================

Layout: ``count`` (unsigned varint), then per field in ascending tag order ``tag`` (unsigned varint), ``size``
(unsigned varint, bytes of the value) and the value: a VARLONG is the zigzag varint of a 64-bit value, a
COMPACT_STRING the unsigned varint of its UTF-8 length plus one, then the bytes (at most 32767). No field at all is
written as zero bytes, not as a count of 0 (and zero bytes read back as no field).

Which fields are written is the setting ``custom.metadata.fields.include``: a comma-separated list of the names
above, empty by default (then the record carries no custom metadata). A field this module does not know (a later
version's) is kept as raw bytes when read and written back unchanged, as Kafka does.

Invariants: ``decode(encode(m)) == m``; tags are unique and ascending; a blob with trailing bytes, a tag out of
order or a value that does not fill its size exactly is refused.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import IntEnum

from orchestrator.errors import InvalidArgument
from remote_storage.segment_format.errors import SegmentFormatError

MAX_COMPACT_STRING = 32767  # Kafka's Short.MAX_VALUE bound on a COMPACT_STRING
_UINT32_MAX = 2**32 - 1
_UINT64_MAX = 2**64 - 1
INCLUDE_SETTING = "custom.metadata.fields.include"


class CustomMetadataField(IntEnum):
    """The fields, by tag; each name is the one ``custom.metadata.fields.include`` takes."""

    REMOTE_SIZE = 0
    OBJECT_PREFIX = 1
    OBJECT_KEY = 2


_KNOWN_TAGS = frozenset(int(field) for field in CustomMetadataField)


@dataclass(frozen=True, slots=True)
class SegmentCustomMetadata:
    """The fields of one segment's custom metadata; None when absent. ``unknown`` holds tags this module does not
    know, as ``(tag, raw value bytes)``."""

    remote_size: int | None = None
    object_prefix: str | None = None
    object_key: str | None = None
    unknown: tuple[tuple[int, bytes], ...] = ()

    @property
    def empty(self) -> bool:
        return self.remote_size is None and self.object_prefix is None and self.object_key is None and not self.unknown


def parse_fields_include(value: str | Iterable[str]) -> frozenset[CustomMetadataField]:
    """The fields a ``custom.metadata.fields.include`` value names (a comma-separated string, or the names)."""
    names = value.split(",") if isinstance(value, str) else list(value)
    fields = set()
    for name in (n.strip() for n in names):
        if not name:
            continue
        try:
            fields.add(CustomMetadataField[name])
        except KeyError:
            known = ", ".join(f.name for f in CustomMetadataField)
            raise InvalidArgument(f"{INCLUDE_SETTING}: unknown field {name!r} (known: {known})") from None
    return frozenset(fields)


def build_custom_metadata(
    include: Iterable[CustomMetadataField], *, uploaded_bytes: Mapping[str, int], object_prefix: str, object_key: str
) -> SegmentCustomMetadata:
    """The custom metadata of a copied segment: ``uploaded_bytes`` per object (its sum is REMOTE_SIZE), the
    configured prefix and the key's main path; only the fields in ``include``."""
    chosen = set(include)
    return SegmentCustomMetadata(
        remote_size=sum(uploaded_bytes.values()) if CustomMetadataField.REMOTE_SIZE in chosen else None,
        object_prefix=object_prefix if CustomMetadataField.OBJECT_PREFIX in chosen else None,
        object_key=object_key if CustomMetadataField.OBJECT_KEY in chosen else None,
    )


def _uvarint(value: int) -> bytes:
    if not 0 <= value <= _UINT32_MAX:
        raise InvalidArgument(f"an unsigned varint holds 0..2^32-1, got {value}")
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _varlong(value: int) -> bytes:
    if not -(2**63) <= value < 2**63:
        raise InvalidArgument(f"a VARLONG holds a 64-bit value, got {value}")
    zigzag = ((value << 1) ^ (value >> 63)) & (2**64 - 1)
    out = bytearray()
    while zigzag >= 0x80:
        out.append((zigzag & 0x7F) | 0x80)
        zigzag >>= 7
    out.append(zigzag)
    return bytes(out)


def _compact_string(text: str) -> bytes:
    raw = text.encode("utf-8")
    if len(raw) > MAX_COMPACT_STRING:
        raise InvalidArgument(f"a COMPACT_STRING is at most {MAX_COMPACT_STRING} bytes, got {len(raw)}")
    return _uvarint(len(raw) + 1) + raw


def encode_custom_metadata(metadata: SegmentCustomMetadata) -> bytes:
    """The bytes of ``metadata`` as Aiven's serde writes them (zero bytes when it holds no field)."""
    fields: dict[int, bytes] = dict(metadata.unknown)
    if len(fields) != len(metadata.unknown) or any(tag in _KNOWN_TAGS for tag in fields):
        raise InvalidArgument(f"unknown custom-metadata tags must be unique and not 0, 1 or 2: {metadata.unknown}")
    if metadata.remote_size is not None:
        fields[CustomMetadataField.REMOTE_SIZE] = _varlong(metadata.remote_size)
    if metadata.object_prefix is not None:
        fields[CustomMetadataField.OBJECT_PREFIX] = _compact_string(metadata.object_prefix)
    if metadata.object_key is not None:
        fields[CustomMetadataField.OBJECT_KEY] = _compact_string(metadata.object_key)
    if not fields:
        return b""
    out = bytearray(_uvarint(len(fields)))
    for tag in sorted(fields):
        out += _uvarint(tag) + _uvarint(len(fields[tag])) + fields[tag]
    return bytes(out)


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.at = data, 0

    def varint(self, what: str, *, max_bytes: int, limit: int) -> int:
        """An unsigned LEB128 varint of at most ``max_bytes`` bytes and ``limit`` in value."""
        value = shift = 0
        for _ in range(max_bytes):
            if self.at >= len(self.data):
                raise SegmentFormatError(f"custom metadata: truncated {what}")
            byte = self.data[self.at]
            self.at += 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                if value > limit:
                    raise SegmentFormatError(f"custom metadata: {what} overflows")
                return value
            shift += 7
        raise SegmentFormatError(f"custom metadata: {what} is longer than {max_bytes} bytes")

    def take(self, size: int, what: str) -> bytes:
        if self.at + size > len(self.data):
            raise SegmentFormatError(f"custom metadata: {what} needs {size} bytes, {len(self.data) - self.at} left")
        chunk = self.data[self.at : self.at + size]
        self.at += size
        return chunk

    def done(self) -> bool:
        return self.at == len(self.data)


def _read_value(tag: int, raw: bytes) -> int | str:
    reader = _Reader(raw)
    value: int | str
    if tag == CustomMetadataField.REMOTE_SIZE:
        zigzag = reader.varint("REMOTE_SIZE", max_bytes=10, limit=_UINT64_MAX)
        value = (zigzag >> 1) ^ -(zigzag & 1)
    else:
        length = reader.varint(f"the length of {CustomMetadataField(tag).name}", max_bytes=5, limit=_UINT32_MAX) - 1
        if not 0 <= length <= MAX_COMPACT_STRING:
            raise SegmentFormatError(f"custom metadata: {CustomMetadataField(tag).name} has length {length}")
        try:
            value = reader.take(length, CustomMetadataField(tag).name).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise SegmentFormatError(f"custom metadata: {CustomMetadataField(tag).name} is not UTF-8") from exc
    if not reader.done():
        raise SegmentFormatError(f"custom metadata: field {tag} does not fill its {len(raw)} bytes exactly")
    return value


def decode_custom_metadata(data: bytes) -> SegmentCustomMetadata:
    """The fields of a custom-metadata blob (zero bytes: none)."""
    if not data:
        return SegmentCustomMetadata()
    reader = _Reader(bytes(data))
    count = reader.varint("the field count", max_bytes=5, limit=_UINT32_MAX)
    known: dict[int, int | str] = {}
    unknown: list[tuple[int, bytes]] = []
    previous = -1
    for _ in range(count):
        tag = reader.varint("a tag", max_bytes=5, limit=_UINT32_MAX)
        if tag <= previous:
            raise SegmentFormatError(f"custom metadata: tag {tag} after tag {previous} (tags ascend)")
        previous = tag
        raw = reader.take(reader.varint(f"the size of field {tag}", max_bytes=5, limit=_UINT32_MAX), f"field {tag}")
        if tag in _KNOWN_TAGS:
            known[tag] = _read_value(tag, raw)
        else:
            unknown.append((tag, raw))
    if not reader.done():
        raise SegmentFormatError(f"custom metadata: {len(data) - reader.at} bytes after the last field")
    remote_size = known.get(CustomMetadataField.REMOTE_SIZE)
    prefix = known.get(CustomMetadataField.OBJECT_PREFIX)
    key = known.get(CustomMetadataField.OBJECT_KEY)
    return SegmentCustomMetadata(
        remote_size=remote_size if isinstance(remote_size, int) else None,
        object_prefix=prefix if isinstance(prefix, str) else None,
        object_key=key if isinstance(key, str) else None,
        unknown=tuple(unknown),
    )
