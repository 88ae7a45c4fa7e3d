"""Generated struct codecs: one straight-line Python function per (struct, version), as Kafka generates Java.

The closure codec in :mod:`orchestrator.protocol.codec` is the reference: it walks one small function per field.
Here a struct's fields are turned into Python source once (``compile`` + ``exec``) so the hot paths (the metadata
log's replay and append, every request and response) run without a call per field:

* runs of fixed-width fields (ints, floats, bools, UUIDs) are read and written with ONE ``struct`` call and one
  bounds check;
* strings, arrays of fixed-width values or UUIDs, varint lengths and an empty tagged-field section are inlined
  with a local cursor;
* everything else (bytes, nested structs, arrays of structs or strings, a non-empty tagged section) calls the
  reference closure for that field, so there is one definition of those rules.

Invariants:
* A generated decoder accepts exactly the inputs the reference accepts and returns equal values; on anything
  malformed it raises :class:`~orchestrator.errors.ProtocolError` and nothing else, checking every length and count
  against the bytes left before reading them.
* A generated encoder writes the reference's bytes. On any value it cannot write (a wrong type, an int out of
  range, a None in a non-nullable field) it removes what it wrote and runs the reference encoder, which raises the
  error naming the field — so the error text is the reference's — and leaves ``out`` as it found it.
* Schema text reaches the generated source only through ``repr`` (dict keys, messages) and through names this
  module makes up (``v0``, ``_s1``), so no schema can inject code.

Where the build compiled ``_struct_codec_c.pyx`` (:data:`COMPILED`), the same plan runs as a loop in C instead
(:func:`compiled_decoder`, :func:`compiled_encoder`), under the same invariants; the generated source is then what
runs where it was not built, and both are held to the reference closures by the same property tests.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from orchestrator.errors import ProtocolError, UnsupportedVersion
from orchestrator.ids import ZERO_UUID, Uuid

# struct format characters of the fixed-width types, big-endian
FIXED_CHARS = {
    "int8": "b",
    "int16": "h",
    "uint16": "H",
    "int32": "i",
    "uint32": "I",
    "int64": "q",
    "float64": "d",
    "bool": "?",
    "uuid": "16s",
}
# element types whose arrays are read with one unpack (the reference does the same for exactly these)
ARRAY_CHARS = {t: c for t, c in FIXED_CHARS.items() if t not in ("bool", "uuid")}
_IMMUTABLE = (int, float, str, bool, bytes, Uuid, type(None))
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


@dataclass(frozen=True, slots=True)
class FieldPlan:
    """One plain (untagged) field as the generator sees it."""

    key: str  # the dict key (snake_case name)
    label: str  # the schema's name, for messages
    type: str  # the schema type, e.g. "int32", "string", "[]int32", "[]Topic"
    is_struct: bool
    compact: bool  # flexible encoding at this version: varint lengths
    nullable: bool
    encode: Callable[[Any, bytearray], None]  # the reference closures of this field
    decode: Callable[[Any], Any]
    default: Callable[[], Any]

    @property
    def kind(self) -> str:
        if self.type in FIXED_CHARS and not self.nullable:
            return "fixed"
        if self.type == "string":
            return "string"
        if self.type.startswith("[]") and self.type[2:] in ARRAY_CHARS and not self.is_struct:
            return "array"
        if self.type == "[]uuid":
            return "uuids"
        return "call"


@dataclass(frozen=True, slots=True)
class StructPlan:
    name: str
    flexible: bool
    plain: Sequence[FieldPlan]
    tagged: Sequence[tuple[str, Callable[[], Any]]]  # (key, default) in tag order
    absent: Sequence[tuple[str, Callable[[], Any]]]  # fields not in this version: (key, default)
    unsupported: Sequence[tuple[str, Callable[[], Any]]]  # absent and not ignorable: sending them is an error


class _Source:
    """Lines of one function, with the namespace its constants live in."""

    def __init__(self, namespace: dict[str, Any]) -> None:
        self.lines: list[str] = []
        self.ns = namespace
        self._count = 0

    def emit(self, indent: int, text: str) -> None:
        self.lines.append("    " * indent + text)

    def const(self, value: Any, hint: str = "c") -> str:
        self._count += 1
        name = f"_{hint}{self._count}"
        self.ns[name] = value
        return name

    def default_expr(self, make: Callable[[], Any]) -> str:
        """An expression giving a fresh default: the value itself when immutable, else a call of its factory."""
        sample = make()
        if isinstance(sample, _IMMUTABLE):
            return self.const(sample, "k")
        return f"{self.const(make, 'f')}()"


def _runs(plain: Sequence[FieldPlan]) -> list[list[tuple[int, FieldPlan]]]:
    """The fields in order, consecutive fixed-width ones grouped into one run each."""
    runs: list[list[tuple[int, FieldPlan]]] = []
    for i, f in enumerate(plain):
        if f.kind == "fixed" and runs and runs[-1][0][1].kind == "fixed":
            runs[-1].append((i, f))
        else:
            runs.append([(i, f)])
    return runs


class _ArrayStructs(dict[int, Callable[..., Any]]):
    """``[n]``: the ``pack`` or ``unpack_from`` of a Struct of n elements of one format character, made once for
    lengths up to :data:`ARRAY_STRUCT_CACHE` (arrays of replicas, ISRs, partitions) and on demand beyond."""

    def __init__(self, char: str, method: str) -> None:
        super().__init__()
        self._char = char
        self._method = method

    def __missing__(self, n: int) -> Callable[..., Any]:
        fn: Callable[..., Any] = getattr(struct.Struct(f">{n}{self._char}"), self._method)
        if n <= ARRAY_STRUCT_CACHE:
            self[n] = fn
        return fn


ARRAY_STRUCT_CACHE = 64


def _fixed_struct(run: list[tuple[int, FieldPlan]]) -> struct.Struct:
    return struct.Struct(">" + "".join(FIXED_CHARS[f.type] for _, f in run))


def _finish(src: _Source, fn_name: str) -> Callable[..., Any]:
    code = compile("\n".join(src.lines) + "\n", f"<codec {fn_name}>", "exec")
    exec(code, src.ns)
    fn: Callable[..., Any] = src.ns[fn_name]
    return fn


# --- decoding


def _dec_varint(src: _Source, ind: int, var: str) -> None:
    """``var`` = an unsigned varint at ``pos``: inline when one byte, else the Reader's bounded loop."""
    src.emit(ind, "if pos >= end:")
    src.emit(ind + 1, "raise _PE(f'truncated varint at position {pos}')")
    src.emit(ind, f"{var} = buf[pos]")
    src.emit(ind, f"if {var} < 0x80:")
    src.emit(ind + 1, "pos += 1")
    src.emit(ind, "else:")
    src.emit(ind + 1, "r.pos = pos")
    src.emit(ind + 1, f"{var} = r.uvarint()")
    src.emit(ind + 1, "pos = r.pos")


def _dec_length(src: _Source, ind: int, f: FieldPlan, long_length: bool) -> None:
    """``n`` = the field's length, or -1 for null (compact varint+1, or classic int16/int32)."""
    if f.compact:
        _dec_varint(src, ind, "n")
        src.emit(ind, "n -= 1")
        return
    s = _I32 if long_length else _I16
    src.emit(ind, f"if end - pos < {s.size}:")
    src.emit(ind + 1, f"raise _trunc({s.size}, pos, end)")
    src.emit(ind, f"n = {src.const(s.unpack_from, 'u')}(buf, pos)[0]")
    src.emit(ind, f"pos += {s.size}")
    src.emit(ind, "if n < -1:")
    src.emit(ind + 1, "raise _PE(f'negative length {n} at position {pos}')")


def _dec_null(src: _Source, ind: int, f: FieldPlan, var: str) -> None:
    if f.nullable:
        src.emit(ind, f"{var} = None")
    else:
        src.emit(ind, f"raise _PE({('null value for non-nullable field ' + f.label)!r})")


def _dec_length_or_null(src: _Source, ind: int, f: FieldPlan, var: str, *, long_length: bool) -> None:
    """The length ``n``; a null sets ``var`` (or is refused) and the caller's code goes in the ``else`` at ind+1."""
    _dec_length(src, ind, f, long_length)
    src.emit(ind, "if n == -1:")
    _dec_null(src, ind + 1, f, var)
    src.emit(ind, "else:")


def _dec_field(src: _Source, ind: int, f: FieldPlan, var: str) -> None:
    kind = f.kind
    if kind == "string":
        _dec_length_or_null(src, ind, f, var, long_length=False)
        src.emit(ind + 1, "if n > 0x7FFF:")
        src.emit(ind + 2, f"raise _PE({f.label + ': string length '!r} + str(n) + ' exceeds 32767')")
        src.emit(ind + 1, "if n > end - pos:")
        src.emit(ind + 2, "raise _trunc(n, pos, end)")
        src.emit(ind + 1, "try:")
        src.emit(ind + 2, f"{var} = str(buf[pos:pos + n], 'utf-8')")
        src.emit(ind + 1, "except UnicodeDecodeError as exc:")
        src.emit(ind + 2, f"raise _PE({f.label + ': invalid UTF-8: '!r} + str(exc)) from exc")
        src.emit(ind + 1, "pos += n")
    elif kind == "array":
        char = ARRAY_CHARS[f.type[2:]]
        width = struct.calcsize(">" + char)
        _dec_length_or_null(src, ind, f, var, long_length=True)
        src.emit(ind + 1, f"if n * {width} > end - pos:")
        msg = f"{f.label}: array of "
        src.emit(ind + 2, f"raise _PE({msg!r} + str(n) + ' elements but only ' + str(end - pos) + ' bytes left')")
        src.emit(ind + 1, "if n:")
        src.emit(ind + 2, f"{var} = list({src.const(_ArrayStructs(char, 'unpack_from'), 'a')}[n](buf, pos))")
        src.emit(ind + 2, f"pos += n * {width}")
        src.emit(ind + 1, "else:")
        src.emit(ind + 2, f"{var} = []")
    elif kind == "uuids":
        _dec_length_or_null(src, ind, f, var, long_length=True)
        src.emit(ind + 1, "if n * 16 > end - pos:")
        src.emit(ind + 2, "raise _trunc(n * 16, pos, end)")
        src.emit(ind + 1, f"{var} = [_Uuid(bytes(buf[k:k + 16])) for k in range(pos, pos + n * 16, 16)]")
        src.emit(ind + 1, "pos += n * 16")
    else:
        src.emit(ind, "r.pos = pos")
        src.emit(ind, f"{var} = {src.const(f.decode, 'd')}(r)")
        src.emit(ind, "pos = r.pos")


def build_decoder(plan: StructPlan, read_tagged: Callable[[Any, dict[str, Any]], None]) -> Callable[[Any], Any]:
    """A function ``decode(reader) -> dict`` for ``plan``. ``read_tagged(reader, d)`` is the reference reading of
    a non-empty tagged-field section (it fills in defaults of the tagged fields it did not see)."""
    src = _Source({"_PE": ProtocolError, "_trunc": _truncated, "_unpack_from": struct.unpack_from, "_Uuid": _uuid})
    src.emit(0, "def decode(r):")
    src.emit(1, "buf = r.buf")
    src.emit(1, "pos = r.pos")
    src.emit(1, "end = r.end")
    for run in _runs(plan.plain):
        if run[0][1].kind == "fixed":
            s = _fixed_struct(run)
            src.emit(1, f"if end - pos < {s.size}:")
            src.emit(2, f"raise _trunc({s.size}, pos, end)")
            targets = ", ".join(f"v{i}" for i, _ in run)
            src.emit(1, f"{targets}{',' if len(run) == 1 else ''} = {src.const(s.unpack_from, 'u')}(buf, pos)")
            src.emit(1, f"pos += {s.size}")
            for i, f in run:
                if f.type == "uuid":
                    src.emit(1, f"v{i} = _Uuid(v{i})")
        else:
            i, f = run[0]
            _dec_field(src, 1, f, f"v{i}")
    items = [f"{f.key!r}: v{i}" for i, f in enumerate(plan.plain)]
    absent = [f"{key!r}: {src.default_expr(make)}" for key, make in plan.absent]
    if plan.flexible:
        src.emit(1, "if pos >= end:")
        src.emit(2, "raise _PE(f'truncated varint at position {pos}')")
        src.emit(1, "if buf[pos] == 0:")  # no tagged fields: the common case
        src.emit(2, "r.pos = pos + 1")
        tagged = [f"{key!r}: {src.default_expr(make)}" for key, make in plan.tagged]
        src.emit(2, f"return {{{', '.join(items + tagged + absent)}}}")
        src.emit(1, "r.pos = pos")
        src.emit(1, f"d = {{{', '.join(items)}}}")
        src.emit(1, f"{src.const(read_tagged, 't')}(r, d)")
        if absent:
            src.emit(1, f"d.update({{{', '.join(absent)}}})")
        src.emit(1, "return d")
    else:
        src.emit(1, "r.pos = pos")
        src.emit(1, f"return {{{', '.join(items + absent)}}}")
    return _finish(src, "decode")


def _truncated(n: int, pos: int, end: int) -> ProtocolError:
    return ProtocolError(f"truncated: need {n} bytes at position {pos}, {end - pos} left")


def _uuid(raw: bytes) -> Uuid:
    """A Uuid from 16 bytes known to be 16 bytes long (the unpack says so), without re-checking them."""
    u = object.__new__(Uuid)
    object.__setattr__(u, "raw", raw)
    return u


# --- encoding


def _enc_varint(src: _Source, ind: int, expr: str) -> None:
    src.emit(ind, f"if {expr} < 0x80:")
    src.emit(ind + 1, f"out.append({expr})")
    src.emit(ind, "else:")
    src.emit(ind + 1, f"_wuv({expr}, out)")


def _enc_length(src: _Source, ind: int, f: FieldPlan, long_length: bool, null: bool) -> None:
    """Write the field's length ``n`` (or null)."""
    if f.compact:
        if null:
            src.emit(ind, "out.append(0)")
        else:
            _enc_varint(src, ind, "n + 1")
        return
    s = _I32 if long_length else _I16
    src.emit(ind, f"out += {src.const(s.pack, 'p')}({'-1' if null else 'n'})")


def _enc_null(src: _Source, ind: int, f: FieldPlan, long_length: bool) -> None:
    if f.nullable:
        _enc_length(src, ind, f, long_length, null=True)
    else:
        src.emit(ind, "raise ValueError('not nullable')")  # the reference encoder then names the field


def _enc_field(src: _Source, ind: int, f: FieldPlan, var: str) -> None:
    kind = f.kind
    if kind == "string":
        src.emit(ind, f"if {var} is None:")
        _enc_null(src, ind + 1, f, long_length=False)
        src.emit(ind, "else:")
        src.emit(ind + 1, f"data = {var}.encode('utf-8')")
        src.emit(ind + 1, "n = len(data)")
        src.emit(ind + 1, "if n > 0x7FFF:")
        src.emit(ind + 2, "raise ValueError('string too long')")
        _enc_length(src, ind + 1, f, long_length=False, null=False)
        src.emit(ind + 1, "out += data")
    elif kind == "array":
        char = ARRAY_CHARS[f.type[2:]]
        src.emit(ind, f"if {var} is None:")
        _enc_null(src, ind + 1, f, long_length=True)
        src.emit(ind, "else:")
        src.emit(ind + 1, f"n = len({var})")
        _enc_length(src, ind + 1, f, long_length=True, null=False)
        src.emit(ind + 1, "if n:")
        src.emit(ind + 2, f"out += {src.const(_ArrayStructs(char, 'pack'), 'a')}[n](*{var})")
    elif kind == "uuids":
        src.emit(ind, f"if {var} is None:")
        _enc_null(src, ind + 1, f, long_length=True)
        src.emit(ind, "else:")
        src.emit(ind + 1, f"n = len({var})")
        _enc_length(src, ind + 1, f, long_length=True, null=False)
        src.emit(ind + 1, f"for u in {var}:")
        src.emit(ind + 2, "out += (u or _ZERO).raw")
    else:
        src.emit(ind, f"{src.const(f.encode, 'e')}({var}, out)")


def build_encoder(
    plan: StructPlan,
    write_tagged: Callable[[Callable[..., Any], bytearray], None],
    reference: Callable[[Any, bytearray], None],
) -> Callable[[Any, bytearray], None]:
    """A function ``encode(value, out)`` for ``plan``. ``write_tagged(value.get, out)`` is the reference writing of
    the tagged-field section; ``reference(value, out)`` the whole reference encoder, run when this one fails."""
    src = _Source(
        {
            "_M": MISSING,
            "_UV": UnsupportedVersion,
            "_pack": struct.pack,
            "_ZERO": ZERO_UUID,
            "_wuv": write_uvarint,
            "_ref": reference,
            "_SE": struct.error,
        }
    )
    src.emit(0, "def encode(value, out):")
    src.emit(1, "get = value.get")
    for key, make in plan.unsupported:
        src.emit(1, f"v = get({key!r})")
        src.emit(1, f"if v is not None and v != {src.default_expr(make)}:")
        msg = f"{plan.name}.{key} cannot be sent at this version (value "
        src.emit(2, f"raise _UV({msg!r} + repr(v) + ')')")
    src.emit(1, "start = len(out)")
    src.emit(1, "try:")
    src.emit(2, "pass")  # a struct may have no field at this version
    if plan.plain:  # a value holding every field (a normalized record) skips the defaults
        src.emit(2, "try:")
        for i, f in enumerate(plan.plain):
            src.emit(3, f"v{i} = value[{f.key!r}]")
        src.emit(2, "except KeyError:")
        for i, f in enumerate(plan.plain):
            src.emit(3, f"v{i} = get({f.key!r}, _M)")
            src.emit(3, f"if v{i} is _M:")
            src.emit(4, f"v{i} = {src.default_expr(f.default)}")
    for run in _runs(plan.plain):
        if run[0][1].kind == "fixed":
            args = ", ".join(f"(v{i} or _ZERO).raw" if f.type == "uuid" else f"v{i}" for i, f in run)
            src.emit(2, f"out += {src.const(_fixed_struct(run).pack, 'p')}({args})")
        else:
            i, f = run[0]
            _enc_field(src, 2, f, f"v{i}")
    if plan.flexible:
        if plan.tagged:  # all at their default (the common case): an empty section, else the reference writes it
            checks = []
            for j, (key, make) in enumerate(plan.tagged):
                src.emit(2, f"t{j} = get({key!r}, _M)")
                checks.append(f"(t{j} is _M or t{j} == {src.default_expr(make)})")
            src.emit(2, f"if {' and '.join(checks)}:")
            src.emit(3, "out.append(0)")
            src.emit(2, "else:")
            src.emit(3, f"{src.const(write_tagged, 't')}(get, out)")
        else:
            src.emit(2, "out.append(0)")
    src.emit(1, "except (_SE, TypeError, ValueError, AttributeError):")
    src.emit(2, "del out[start:]")
    src.emit(2, "try:")
    src.emit(3, "_ref(value, out)")
    src.emit(2, "except BaseException:")
    src.emit(3, "del out[start:]")  # a refused value leaves ``out`` as it was
    src.emit(3, "raise")
    return _finish(src, "encode")


def write_uvarint(value: int, out: bytearray) -> None:
    """Append ``value`` as an unsigned varint (7 bits a byte, low bits first)."""
    if value < 0:
        raise ValueError(f"unsigned varint cannot hold {value}")
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


MISSING: Any = object()  # a key absent from a value being encoded (None is a value)


# --- the compiled twin

try:  # the plan run by a loop in C (orchestrator/protocol/_struct_codec_c.pyx), which make builds
    from orchestrator.protocol import _struct_codec_c as _compiled  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - a build without Cython's extensions runs the generated functions
    _compiled = None

#: Whether :func:`compiled_decoder` and :func:`compiled_encoder` are available (the build made ``_struct_codec_c``).
COMPILED = _compiled is not None


def _default_pair(key: str, make: Callable[[], Any]) -> tuple[str, Any, bool]:
    """``(key, value, False)`` for an immutable default, ``(key, factory, True)`` for one made fresh each time
    (the rule of :meth:`_Source.default_expr`)."""
    sample = make()
    return (key, sample, False) if isinstance(sample, _IMMUTABLE) else (key, make, True)


def _ops(plan: StructPlan, *, encoding: bool) -> tuple[Any, ...]:
    """The plan as the compiled loop's steps: a run of fixed-width fields or one field of another kind each."""
    assert _compiled is not None
    c = _compiled
    ops = []
    for run in _runs(plan.plain):
        f = run[0][1]
        if f.kind == "fixed":
            s = _fixed_struct(run)
            keys = tuple(g.key for _, g in run)
            chars = b"".join(b"u" if g.type == "uuid" else FIXED_CHARS[g.type].encode() for _, g in run)
            ops.append(c.Op(c.KIND_FIXED, f.key, f.label, False, False, None, s.size, keys, chars))
        elif f.kind == "array":
            char = ARRAY_CHARS[f.type[2:]]
            width = struct.calcsize(">" + char)
            ops.append(c.Op(c.KIND_ARRAY, f.key, f.label, f.compact, f.nullable, None, width, (), char.encode()))
        elif f.kind == "uuids":
            ops.append(c.Op(c.KIND_UUIDS, f.key, f.label, f.compact, f.nullable, None, 16, (), b"u"))
        else:
            kind = c.KIND_STRING if f.kind == "string" else c.KIND_CALL
            fn = (f.encode if encoding else f.decode) if kind == c.KIND_CALL else None
            ops.append(c.Op(kind, f.key, f.label, f.compact, f.nullable, fn, 0, (), b""))
    return tuple(ops)


def compiled_decoder(
    plan: StructPlan, read_tagged: Callable[[Any, dict[str, Any]], None], reader_type: type
) -> Callable[[Any], Any]:
    """What :func:`build_decoder` makes, run by the compiled loop; it also has ``decode_range(buf, pos, end)``."""
    assert _compiled is not None
    decoder: Callable[[Any], Any] = _compiled.StructDecoder(
        _ops(plan, encoding=False),
        plan.flexible,
        [_default_pair(k, make) for k, make in plan.tagged],
        [_default_pair(k, make) for k, make in plan.absent],
        read_tagged,
        reader_type,
        Uuid,
        ProtocolError,
    )
    return decoder


def compiled_encoder(
    plan: StructPlan,
    write_tagged: Callable[[Callable[..., Any], bytearray], None],
    reference: Callable[[Any, bytearray], None],
) -> Callable[[Any, bytearray], None]:
    """What :func:`build_encoder` makes, run by the compiled loop."""
    assert _compiled is not None
    encoder: Callable[[Any, bytearray], None] = _compiled.StructEncoder(
        plan.name,
        _ops(plan, encoding=True),
        [_default_pair(k, make) for k, make in plan.unsupported],
        [_default_pair(f.key, f.default) for f in plan.plain],
        plan.flexible,
        [_default_pair(k, make) for k, make in plan.tagged],
        write_tagged,
        reference,
        MISSING,
        ZERO_UUID,
        UnsupportedVersion,
        (struct.error, TypeError, ValueError, AttributeError),
    )
    return encoder
