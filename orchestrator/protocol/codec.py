"""A schema-driven codec for Kafka's binary encoding.

Covers fixed-width ints, floats, booleans, UUIDs, classic and compact strings/bytes/arrays, nullable fields,
nested structs, defaults, tagged fields and flexible versions, exactly as Kafka's generated code writes them.

Each (schema, version) pair is compiled once (:func:`compiled`) into a tree of per-field closures (the reference)
and, from the same plan, one function per struct that runs it straight (:mod:`orchestrator.protocol.codegen`: a
loop in C where the build compiled ``_struct_codec_c.pyx``, else generated Python source), so encoding and
decoding walk no schema at run time. Values are plain dicts keyed by snake_case field names. Encoding fills
missing keys with the field's default; decoding returns every field of the schema, fields absent from that version
holding their default, so handlers read values uniformly across versions.

Invariants:
* Decoding never reads past its buffer and never allocates more than the input can describe: every length and
  count is checked against the bytes left before use, varints are bounded to 5 (int) or 10 (long) bytes. Any
  malformed input raises :class:`~orchestrator.errors.ProtocolError`, nothing else.
* Encoding a non-default value into a version that lacks its (non-ignorable) field raises
  :class:`~orchestrator.errors.UnsupportedVersion` rather than silently dropping data, as Kafka does.
* Tagged fields are written only when they differ from their default, in ascending tag order; unknown tags are
  skipped on decode.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any, Literal

from orchestrator.errors import ProtocolError, UnsupportedVersion
from orchestrator.ids import ZERO_UUID, Uuid
from orchestrator.protocol.codegen import (
    ARRAY_CHARS,
    COMPILED,
    MISSING,
    FieldPlan,
    StructPlan,
    build_decoder,
    build_encoder,
    compiled_decoder,
    compiled_encoder,
    write_uvarint,
)
from orchestrator.protocol.schema import FieldSpec, MessageSchema

__all__ = ["Reader", "StructCodec", "compiled", "decode", "decode_from", "encode", "encode_into", "write_uvarint"]

Encoder = Callable[[Any, bytearray], None]
#: How a codec's struct functions run: the compiled loop (``_struct_codec_c``, the generated source where the build
#: made none), the generated source, or the per-field closures (the reference both are held to).
CodecKind = Literal["compiled", "generated", "reference"]
Decoder = Callable[["Reader"], Any]

# The fixed-width ints and floats, from the generator's table of format characters (one definition of both).
_FIXED = {t: struct.Struct(">" + c) for t, c in ARRAY_CHARS.items()}
_I8, _I16, _I32 = _FIXED["int8"], _FIXED["int16"], _FIXED["int32"]


class Reader:
    """A bounds-checked cursor over a bytes-like buffer."""

    __slots__ = ("buf", "end", "pos")

    def __init__(self, data: bytes | bytearray | memoryview, pos: int = 0, end: int | None = None) -> None:
        self.buf = data
        self.pos = pos
        self.end = len(data) if end is None else end

    @property
    def remaining(self) -> int:
        return self.end - self.pos

    def take(self, n: int) -> bytes:
        if n < 0:
            raise ProtocolError(f"negative length {n}")
        if n > self.end - self.pos:
            raise ProtocolError(f"truncated: need {n} bytes at position {self.pos}, {self.end - self.pos} left")
        start = self.pos
        self.pos = start + n
        return bytes(self.buf[start : start + n])

    def fixed(self, s: struct.Struct) -> Any:
        pos = self.pos
        if s.size > self.end - pos:
            raise ProtocolError(f"truncated: need {s.size} bytes at position {pos}, {self.end - pos} left")
        self.pos = pos + s.size
        return s.unpack_from(self.buf, pos)[0]

    def uvarint(self, max_bytes: int = 5) -> int:
        pos = self.pos
        if pos < self.end:
            b = self.buf[pos]
            if b < 0x80:  # the common case: one byte
                self.pos = pos + 1
                return int(b)
        result = 0
        shift = 0
        buf, pos, end = self.buf, self.pos, self.end
        for _ in range(max_bytes):
            if pos >= end:
                raise ProtocolError(f"truncated varint at position {self.pos}")
            b = buf[pos]
            pos += 1
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                self.pos = pos
                if max_bytes == 5 and result > 0xFFFFFFFF:
                    raise ProtocolError(f"varint overflows 32 bits at position {self.pos}")
                return result
            shift += 7
        raise ProtocolError(f"varint longer than {max_bytes} bytes at position {self.pos}")


# --- defaults


def default_factory(field: FieldSpec, version: int | None = None) -> Callable[[], Any]:
    """A function returning a fresh default value for ``field`` (fresh, so mutable defaults are never shared)."""
    raw = field.default
    nullable_somewhere = field.nullable_versions.hi is None or field.nullable_versions.lo <= (
        field.nullable_versions.hi
    )
    if raw == "null":
        if not nullable_somewhere:
            raise ValueError(f"{field.name}: default null on a non-nullable field")
        return lambda: None
    if field.is_array:
        return list
    if field.is_struct:
        subs = [(f.py_name, default_factory(f)) for f in field.fields]
        return lambda: {name: make() for name, make in subs}
    t = field.type
    if t == "bool":
        value: Any = raw is not None and raw.lower() == "true"
    elif t in ("int8", "int16", "uint16", "int32", "uint32", "int64"):
        value = int(raw, 0) if raw else 0
    elif t == "float64":
        value = float(raw) if raw else 0.0
    elif t == "string":
        value = raw or ""
    elif t == "uuid":
        value = ZERO_UUID
    elif t in ("bytes", "records"):
        return bytes
    else:  # pragma: no cover - the schema parser admits no other type
        raise ValueError(f"unknown type {t}")
    return lambda: value


# --- primitive encoders and decoders


def _enc_fixed(s: struct.Struct) -> Encoder:
    pack = s.pack

    def enc(v: Any, out: bytearray) -> None:
        out += pack(v)

    return enc


def _dec_fixed(s: struct.Struct) -> Decoder:
    return lambda r: r.fixed(s)


def _enc_bool(v: Any, out: bytearray) -> None:
    out.append(1 if v else 0)


def _dec_bool(r: Reader) -> bool:
    return bool(r.fixed(_I8))


def _enc_uuid(v: Any, out: bytearray) -> None:
    out += (v or ZERO_UUID).raw


def _dec_uuid(r: Reader) -> Uuid:
    return Uuid(r.take(16))


def _length_codec(compact: bool, long_length: bool) -> tuple[Callable[[int | None, bytearray], None], Decoder]:
    """How a string, bytes or array length (or null, as None) is written: compact varint+1, or int16/int32."""
    if compact:

        def wlen(n: int | None, out: bytearray) -> None:
            write_uvarint(0 if n is None else n + 1, out)

        def rlen(r: Reader) -> int | None:
            n = r.uvarint()
            return None if n == 0 else n - 1

        return wlen, rlen
    s = _I32 if long_length else _I16

    def wlen_classic(n: int | None, out: bytearray) -> None:
        out += s.pack(-1 if n is None else n)

    def rlen_classic(r: Reader) -> int | None:
        n = r.fixed(s)
        if n < -1:
            raise ProtocolError(f"negative length {n} at position {r.pos}")
        return None if n == -1 else int(n)

    return wlen_classic, rlen_classic


def _null_check(name: str, nullable: bool) -> None:
    if not nullable:
        raise ProtocolError(f"null value for non-nullable field {name}")


def _enc_string(name: str, compact: bool, nullable: bool) -> tuple[Encoder, Decoder]:
    wlen, rlen = _length_codec(compact, long_length=False)

    def enc(v: Any, out: bytearray) -> None:
        if v is None:
            if not nullable:
                raise ValueError(f"{name} is not nullable")
            wlen(None, out)
            return
        data = v.encode("utf-8")
        if len(data) > 0x7FFF:  # Kafka's limit for every string, classic or compact
            raise ValueError(f"{name}: string of {len(data)} bytes exceeds 32767")
        wlen(len(data), out)
        out += data

    def dec(r: Reader) -> str | None:
        n = rlen(r)
        if n is None:
            _null_check(name, nullable)
            return None
        if n > 0x7FFF:
            raise ProtocolError(f"{name}: string length {n} exceeds 32767")
        try:
            return r.take(n).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ProtocolError(f"{name}: invalid UTF-8: {exc}") from exc

    return enc, dec


def _enc_bytes(name: str, compact: bool, nullable: bool) -> tuple[Encoder, Decoder]:
    wlen, rlen = _length_codec(compact, long_length=True)

    def enc(v: Any, out: bytearray) -> None:
        if v is None:
            if not nullable:
                raise ValueError(f"{name} is not nullable")
            wlen(None, out)
            return
        wlen(len(v), out)
        out += v

    def dec(r: Reader) -> bytes | None:
        n = rlen(r)
        if n is None:
            _null_check(name, nullable)
            return None
        return r.take(n)

    return enc, dec


def _element_codec(field: FieldSpec, version: int, flexible: bool, how: CodecKind) -> tuple[Encoder, Decoder]:
    """Codec of one value of the field's element type (a primitive or a struct), never null."""
    t = field.element_type
    if field.is_struct:
        sc = StructCodec(field.fields, version, flexible, field.name, how=how)
        return sc.encode_into, sc.decode_from
    if t in _FIXED:
        return _enc_fixed(_FIXED[t]), _dec_fixed(_FIXED[t])
    if t == "bool":
        return _enc_bool, _dec_bool
    if t == "uuid":
        return _enc_uuid, _dec_uuid
    if t == "string":
        return _enc_string(field.name, flexible, nullable=False)
    if t in ("bytes", "records"):
        return _enc_bytes(field.name, flexible, nullable=False)
    raise ValueError(f"unknown type {t}")  # pragma: no cover


def _field_codec(field: FieldSpec, version: int, flexible: bool, how: CodecKind) -> tuple[Encoder, Decoder]:
    if field.flexible_versions is not None:
        flexible = version in field.flexible_versions
    nullable = version in field.nullable_versions
    if field.is_array:
        elem_enc, elem_dec = _element_codec(field, version, flexible, how)
        wlen, rlen = _length_codec(flexible, long_length=True)
        name = field.name

        def enc_array(v: Any, out: bytearray) -> None:
            if v is None:
                if not nullable:
                    raise ValueError(f"{name} is not nullable")
                wlen(None, out)
                return
            wlen(len(v), out)
            for item in v:
                elem_enc(item, out)

        fixed = _FIXED.get(field.element_type) if not field.is_struct else None
        width = fixed.size if fixed is not None else 1
        fmt = fixed.format[1:] if fixed is not None else ""

        def dec_array(r: Reader) -> list[Any] | None:
            n = rlen(r)
            if n is None:
                _null_check(name, nullable)
                return None
            if n * width > r.remaining:  # every element takes at least `width` bytes
                raise ProtocolError(f"{name}: array of {n} elements but only {r.remaining} bytes left")
            if fixed is not None:  # fixed-width primitives: one unpack for the whole array
                values = list(struct.unpack_from(f">{n}{fmt}", r.buf, r.pos))
                r.pos += n * width
                return values
            return [elem_dec(r) for _ in range(n)]

        return enc_array, dec_array
    if field.type == "string":
        return _enc_string(field.name, flexible, nullable)
    if field.type in ("bytes", "records"):
        return _enc_bytes(field.name, flexible, nullable)
    elem_enc, elem_dec = _element_codec(field, version, flexible, how)
    if field.is_struct and nullable:
        # A nullable struct is preceded by an int8: -1 for null, 1 for present.

        def enc_nullable_struct(v: Any, out: bytearray) -> None:
            if v is None:
                out += _I8.pack(-1)
            else:
                out += _I8.pack(1)
                elem_enc(v, out)

        def dec_nullable_struct(r: Reader) -> Any:
            if r.fixed(_I8) < 0:  # Kafka reads any non-negative marker as present
                return None
            return elem_dec(r)

        return enc_nullable_struct, dec_nullable_struct
    return elem_enc, elem_dec


# --- structs


@dataclass(frozen=True, slots=True)
class _TaggedField:
    tag: int
    py_name: str
    encode: Encoder
    decode: Decoder
    default: Callable[[], Any]


class StructCodec:
    """The compiled codec of one struct (or message body) at one version.

    ``encode_into`` and ``decode_from`` run the plan compiled or generated (``how``, :data:`CodecKind`) unless
    ``how`` is ``"reference"``; ``reference_encode_into`` and ``reference_decode_from`` walk the per-field closures
    and define what the generated ones must do."""

    __slots__ = (
        "_absent",
        "_defaults",
        "_flexible",
        "_plain",
        "_tagged",
        "_tagged_by_tag",
        "_unsupported",
        "decode_from",
        "decode_range",
        "encode_into",
        "field_names",
        "name",
    )

    def __init__(
        self, fields: tuple[FieldSpec, ...], version: int, flexible: bool, name: str, *, how: CodecKind = "compiled"
    ) -> None:
        self.name = name
        self._flexible = flexible
        plain: list[tuple[str, Encoder, Decoder, Callable[[], Any]]] = []
        plans: list[FieldPlan] = []
        tagged: list[_TaggedField] = []
        absent: list[tuple[str, Callable[[], Any]]] = []
        unsupported: list[tuple[str, Callable[[], Any]]] = []
        for f in fields:
            make_default = default_factory(f)
            if version not in f.versions:
                absent.append((f.py_name, make_default))
                if not f.ignorable:
                    unsupported.append((f.py_name, make_default))
                continue
            if flexible and version in f.tagged_versions:
                assert f.tag is not None
                enc, dec = _field_codec(f, version, True, how)
                tagged.append(_TaggedField(f.tag, f.py_name, enc, dec, make_default))
            else:
                enc, dec = _field_codec(f, version, flexible, how)
                plain.append((f.py_name, enc, dec, make_default))
                compact = flexible if f.flexible_versions is None else version in f.flexible_versions
                nullable = version in f.nullable_versions
                plans.append(
                    FieldPlan(f.py_name, f.name, f.type, f.is_struct, compact, nullable, enc, dec, make_default)
                )
        tagged.sort(key=lambda t: t.tag)
        self._plain = tuple(plain)
        self._tagged = tuple(tagged)
        self._tagged_by_tag = {t.tag: t for t in tagged}
        self._absent = tuple(absent)
        self._unsupported = tuple(unsupported)
        self._defaults = tuple((n, d) for n, _, _, d in plain) + tuple((t.py_name, t.default) for t in tagged)
        self.field_names = frozenset(n for n, _ in self._defaults) | frozenset(n for n, _ in self._absent)
        self.encode_into: Encoder = self.reference_encode_into
        self.decode_from: Callable[[Reader], dict[str, Any]] = self.reference_decode_from
        self.decode_range: Callable[[Any, int, int], tuple[dict[str, Any], int]] = self._decode_range
        if how != "reference":
            plan = StructPlan(
                name,
                flexible,
                tuple(plans),
                tuple((t.py_name, t.default) for t in self._tagged),
                self._absent,
                self._unsupported,
            )
            if how == "compiled" and COMPILED:
                decoder = compiled_decoder(plan, self._read_tagged, Reader)
                self.decode_from = decoder
                self.decode_range = decoder.decode_range  # type: ignore[attr-defined]
                self.encode_into = compiled_encoder(plan, self._write_tagged, self.reference_encode_into)
            else:
                self.decode_from = build_decoder(plan, self._read_tagged)
                self.encode_into = build_encoder(plan, self._write_tagged, self.reference_encode_into)

    def reference_encode_into(self, value: Any, out: bytearray) -> None:
        get = value.get
        for name, make_default in self._unsupported:
            v = get(name)
            if v is not None and v != make_default():
                raise UnsupportedVersion(f"{self.name}.{name} cannot be sent at this version (value {v!r})")
        for name, enc, _dec, make_default in self._plain:
            v = get(name, MISSING)
            if v is MISSING:
                v = make_default()
            try:
                enc(v, out)
            except (struct.error, TypeError, ValueError, AttributeError) as exc:
                raise _EncodeError(f"{self.name}.{name}: {exc}") from exc
        if self._flexible:
            self._write_tagged(get, out)

    def _write_tagged(self, get: Callable[..., Any], out: bytearray) -> None:
        present = []
        for t in self._tagged:
            v = get(t.py_name, MISSING)
            if v is MISSING or v == t.default():
                continue
            buf = bytearray()
            try:
                t.encode(v, buf)
            except (struct.error, TypeError, ValueError, AttributeError) as exc:
                raise _EncodeError(f"{self.name}.{t.py_name}: {exc}") from exc
            present.append((t.tag, buf))
        write_uvarint(len(present), out)
        for tag, buf in present:
            write_uvarint(tag, out)
            write_uvarint(len(buf), out)
            out += buf

    def _decode_range(self, buf: Any, pos: int, end: int) -> tuple[dict[str, Any], int]:
        """``(value, position after it)`` of the struct at ``buf[pos:end]`` (the compiled loop needs no Reader)."""
        r = Reader(buf, pos, end)
        value = self.decode_from(r)
        return value, r.pos

    def reference_decode_from(self, r: Reader) -> dict[str, Any]:
        d: dict[str, Any] = {}
        for name, _enc, dec, _default in self._plain:
            d[name] = dec(r)
        if self._flexible:
            self._read_tagged(r, d)
        for name, make_default in self._absent:
            d[name] = make_default()
        return d

    def _read_tagged(self, r: Reader, d: dict[str, Any]) -> None:
        """Read the tagged-field section at ``r`` into ``d``; tagged fields it does not hold take their default."""
        count = r.uvarint()
        if count > r.remaining:
            raise ProtocolError(f"{self.name}: {count} tagged fields but only {r.remaining} bytes left")
        last_tag = -1
        for _ in range(count):
            tag = r.uvarint()
            size = r.uvarint()
            if tag <= last_tag:
                raise ProtocolError(f"{self.name}: tagged fields out of order ({tag} after {last_tag})")
            last_tag = tag
            if size > r.remaining:
                raise ProtocolError(f"{self.name}: tagged field {tag} of {size} bytes, {r.remaining} left")
            known = self._tagged_by_tag.get(tag)
            if known is None:
                r.pos += size  # an unknown tag from a newer peer: skip it
                continue
            sub = Reader(r.buf, r.pos, r.pos + size)
            d[known.py_name] = known.decode(sub)
            if sub.pos != sub.end:
                raise ProtocolError(f"{self.name}: tagged field {tag} has {sub.end - sub.pos} trailing bytes")
            r.pos += size
        for t in self._tagged:
            if t.py_name not in d:
                d[t.py_name] = t.default()

    def normalize(self, value: Mapping[str, Any]) -> dict[str, Any]:
        """``value`` as decoding its encoding would return it (defaults filled in): every record the controller
        makes goes through here (thousands per bulk request), so a default is made only for a field not given."""
        out = {n: value[n] if n in value else d() for n, d in self._defaults}
        out.update({n: d() for n, d in self._absent})
        return out


class _EncodeError(ValueError):
    pass


@cache
def compiled(schema: MessageSchema, version: int) -> StructCodec:
    """The compiled codec of ``schema`` at ``version`` (cached; raises UnsupportedVersion if out of range)."""
    schema.check_version(version)
    return StructCodec(schema.fields, version, version in schema.flexible_versions, schema.name)


def reference(schema: MessageSchema, version: int) -> StructCodec:
    """The same codec with no generated code: the per-field closures only. What the generated code is held to."""
    schema.check_version(version)
    return StructCodec(schema.fields, version, version in schema.flexible_versions, schema.name, how="reference")


@cache
def generated(schema: MessageSchema, version: int) -> StructCodec:
    """The codec whose functions are generated Python source: what runs where the build made no compiled loop."""
    schema.check_version(version)
    return StructCodec(schema.fields, version, version in schema.flexible_versions, schema.name, how="generated")


def encode(schema: MessageSchema, version: int, value: Mapping[str, object]) -> bytes:
    """Encode a message body. A value that does not fit its schema raises ValueError naming the field."""
    out = bytearray()
    encode_into(schema, version, value, out)
    return bytes(out)


def encode_into(schema: MessageSchema, version: int, value: Mapping[str, object], out: bytearray) -> None:
    compiled(schema, version).encode_into(value, out)


def decode(schema: MessageSchema, version: int, data: bytes | bytearray | memoryview) -> dict[str, Any]:
    """Decode a whole message body; trailing bytes are a protocol error."""
    r = Reader(data)
    value = decode_from(schema, version, r)
    if r.pos != r.end:
        raise ProtocolError(f"{schema.name} v{version}: {r.end - r.pos} trailing bytes")
    return value


def decode_from(schema: MessageSchema, version: int, r: Reader) -> dict[str, Any]:
    try:
        codec = compiled(schema, version)
    except UnsupportedVersion as exc:
        raise ProtocolError(str(exc)) from exc
    return codec.decode_from(r)
