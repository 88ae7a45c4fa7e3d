"""A second, independent reader and writer of Kafka messages, driven by Kafka's own JSON schema files.

Written only from Kafka's message-schema format (``clients/src/main/resources/common/message/README.md``) and the
rules of Kafka's generated code, for the types the remote log metadata records use; it shares nothing with
``orchestrator.protocol`` (no schema parser, no codec, no varint writer), so agreeing with it means something.

* Values are dicts keyed by Kafka's field names (``RemoteLogSegmentId``, ``StartOffset``); uuids are
  ``uuid.UUID``; every version of these records is flexible (compact strings, bytes and arrays, tagged fields).
* Reading keeps the tags the schema does not know (ours, as Kafka does: ``_unknownTaggedFields``) as raw bytes
  by tag; writing can add such raw tags. A tag the schema gives a field only in *other* versions is refused, as
  Kafka's generated reader refuses it (``Tag 1 is not valid for version 0``).
* A value is framed as ``AbstractApiMessageSerde`` frames it: unsigned varints frame version 1, apiKey, version.
"""

from __future__ import annotations

import json
import struct
import uuid
from pathlib import Path
from typing import Any

_FIXED = {"int8": ">b", "int16": ">h", "int32": ">i", "int64": ">q"}


def load_schema(path: Path) -> dict[str, Any]:
    """A Kafka schema file: JSON with ``//`` comment lines."""
    text = "\n".join(
        line for line in path.read_text(encoding="utf-8").splitlines() if not line.lstrip().startswith("//")
    )
    doc: dict[str, Any] = json.loads(text)
    return doc


def in_versions(spec: str | None, version: int) -> bool:
    """Whether ``version`` is in a Kafka version spec ("0+", "0-1", "1", "none" or absent)."""
    if spec is None or spec == "none":
        return False
    if spec.endswith("+"):
        return version >= int(spec[:-1])
    low, _, high = spec.partition("-")
    return int(low) <= version <= int(high or low)


def is_tagged_at(field: dict[str, Any], version: int) -> bool:
    return "tag" in field and in_versions(field.get("taggedVersions"), version)


def default_of(field: dict[str, Any]) -> Any:
    """Kafka's default for a field: its "default" text, else the type's zero (null only when the text says so)."""
    text = field.get("default")
    ftype = field["type"]
    if text == "null":
        return None
    if ftype.startswith("[]"):
        return []
    if "fields" in field:
        return {f["name"]: default_of(f) for f in field["fields"]}
    if ftype in _FIXED:
        return int(text, 0) if text is not None else 0
    if ftype == "bool":
        return text == "true"
    if ftype == "string":
        return text or ""
    if ftype == "bytes":
        return b""
    if ftype == "uuid":
        return uuid.UUID(int=0)
    raise ValueError(f"type {ftype} is not covered here")


# --- writing


def _uvarint(n: int) -> bytes:
    if n < 0:
        raise ValueError(f"negative unsigned varint {n}")
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _write_value(field: dict[str, Any], version: int, value: Any) -> bytes:
    ftype = field["type"]
    if ftype.startswith("[]"):
        if value is None:
            return _uvarint(0)
        return _uvarint(len(value) + 1) + b"".join(_write_struct(field["fields"], version, e) for e in value)
    if "fields" in field:
        return _write_struct(field["fields"], version, value)
    if ftype in _FIXED:
        return struct.pack(_FIXED[ftype], value)
    if ftype == "bool":
        return b"\x01" if value else b"\x00"
    if ftype == "uuid":
        return bytes(value.bytes)
    if ftype in ("string", "bytes"):
        if value is None:
            if not in_versions(field.get("nullableVersions"), version):
                raise ValueError(f"{field['name']} is not nullable at version {version}")
            return _uvarint(0)
        raw = value.encode("utf-8") if ftype == "string" else bytes(value)
        return _uvarint(len(raw) + 1) + raw
    raise ValueError(f"type {ftype} is not covered here")


def _write_struct(
    fields: list[dict[str, Any]], version: int, value: dict[str, Any], raw_tags: dict[int, bytes] | None = None
) -> bytes:
    out = bytearray()
    tagged: dict[int, bytes] = dict(raw_tags or {})
    for f in fields:
        v = value.get(f["name"], default_of(f))
        if not in_versions(f["versions"], version):
            if v != default_of(f):
                raise ValueError(f"{f['name']} does not exist at version {version}")
            continue
        if is_tagged_at(f, version):
            if v != default_of(f):
                tagged[f["tag"]] = _write_value(f, version, v)
        else:
            out += _write_value(f, version, v)
    out += _uvarint(len(tagged))
    for tag in sorted(tagged):
        out += _uvarint(tag) + _uvarint(len(tagged[tag])) + tagged[tag]
    return bytes(out)


def write(
    schema: dict[str, Any], version: int, value: dict[str, Any], raw_tags: dict[int, bytes] | None = None
) -> bytes:
    """The body of ``value`` at ``version``, with ``raw_tags`` (tags the schema does not know) added at top level."""
    if not in_versions(schema["validVersions"], version):
        raise ValueError(f"{schema['name']} has no version {version}")
    return _write_struct(schema["fields"], version, value, raw_tags)


def frame(schema: dict[str, Any], version: int, body: bytes) -> bytes:
    return _uvarint(1) + _uvarint(schema["apiKey"]) + _uvarint(version) + body


# --- reading


class _Cursor:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise ValueError(f"need {n} bytes at {self.pos}, have {len(self.data) - self.pos}")
        chunk = self.data[self.pos : self.pos + n]
        self.pos += n
        return chunk

    def uvarint(self) -> int:
        result, shift = 0, 0
        while True:
            (byte,) = self.take(1)
            result |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return result
            shift += 7
            if shift > 28:
                raise ValueError("varint too long")


def _read_value(field: dict[str, Any], version: int, cur: _Cursor) -> Any:
    ftype = field["type"]
    if ftype.startswith("[]"):
        n = cur.uvarint()
        if n == 0:
            return None
        return [_read_struct(field["fields"], version, cur)[0] for _ in range(n - 1)]
    if "fields" in field:
        return _read_struct(field["fields"], version, cur)[0]
    if ftype in _FIXED:
        fmt = _FIXED[ftype]
        return struct.unpack(fmt, cur.take(struct.calcsize(fmt)))[0]
    if ftype == "bool":
        return cur.take(1) != b"\x00"
    if ftype == "uuid":
        return uuid.UUID(bytes=cur.take(16))
    if ftype in ("string", "bytes"):
        n = cur.uvarint()
        if n == 0:
            if not in_versions(field.get("nullableVersions"), version):
                raise ValueError(f"null {field['name']} is not nullable at version {version}")
            return None
        raw = cur.take(n - 1)
        return raw.decode("utf-8") if ftype == "string" else raw
    raise ValueError(f"type {ftype} is not covered here")


def _read_struct(fields: list[dict[str, Any]], version: int, cur: _Cursor) -> tuple[dict[str, Any], dict[int, bytes]]:
    value: dict[str, Any] = {}
    for f in fields:
        if in_versions(f["versions"], version) and not is_tagged_at(f, version):
            value[f["name"]] = _read_value(f, version, cur)
        else:
            value[f["name"]] = default_of(f)
    by_tag = {f["tag"]: f for f in fields if "tag" in f}
    unknown: dict[int, bytes] = {}
    for _ in range(cur.uvarint()):
        tag = cur.uvarint()
        raw = cur.take(cur.uvarint())
        f = by_tag.get(tag)
        if f is None:
            unknown[tag] = raw
            continue
        if not (in_versions(f["versions"], version) and is_tagged_at(f, version)):
            raise ValueError(f"Tag {tag} is not valid for version {version}")
        sub = _Cursor(raw)
        value[f["name"]] = _read_value(f, version, sub)
        if sub.pos != len(raw):
            raise ValueError(f"tag {tag}: {len(raw) - sub.pos} bytes left over")
    return value, unknown


def read(schema: dict[str, Any], version: int, body: bytes) -> tuple[dict[str, Any], dict[int, bytes]]:
    """The value of a body at ``version`` and the top-level tags the schema does not know (raw, by tag)."""
    if not in_versions(schema["validVersions"], version):
        raise ValueError(f"Can't read version {version} of {schema['name']}")
    cur = _Cursor(body)
    value, unknown = _read_struct(schema["fields"], version, cur)
    if cur.pos != len(body):
        raise ValueError(f"{len(body) - cur.pos} bytes of garbage after {schema['name']}")
    return value, unknown


def unframe(data: bytes) -> tuple[int, int, bytes]:
    """(apiKey, version, body) of a framed value."""
    cur = _Cursor(data)
    frame_version = cur.uvarint()
    if frame_version != 1:
        raise ValueError(f"unknown frame version {frame_version}")
    api_key = cur.uvarint()
    version = cur.uvarint()
    return api_key, version, data[cur.pos :]
