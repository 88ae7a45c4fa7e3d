"""JSON text as Jackson's default ``ObjectMapper`` writes it, and typed field reads for the format's objects.

Owner: the text form is Jackson's (com.fasterxml.jackson, as configured by Aiven's
``core/src/main/java/io/aiven/kafka/tieredstorage/RemoteStorageManagerUtils.java`` at the commit in
:mod:`remote_storage.segment_format`): no whitespace at all, members in the order given, integers in decimal,
``true``/``false``/``null``, and strings with only ``"``, ``\\`` and the control characters escaped (``\\b \\t \\n
\\f \\r`` by name, the others as ``\\u00XX`` with upper-case hex); every other character, non-ASCII included, is
written as itself in UTF-8. :func:`dumps` writes exactly that, so a manifest compares byte for byte with Aiven's.

Reads go through Python's :mod:`json` (which accepts everything Jackson writes) and then the ``require_*``
helpers, which check a member's presence and type and raise :class:`SegmentFormatError` naming the member and the
object it belongs to. Booleans are not integers here (JSON keeps them apart; Python would not).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from remote_storage.segment_format.errors import SegmentFormatError

INT32_MAX = 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

# A value :func:`dumps` can write: None, bool, int, str, a sequence of values or a mapping with str keys.
JsonValue = Any

_NAMED_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}
_ESCAPES = {chr(c): _NAMED_ESCAPES.get(chr(c), f"\\u{c:04X}") for c in range(0x20)} | _NAMED_ESCAPES


def _string(text: str) -> str:
    if not any(ch in _ESCAPES for ch in text):
        return f'"{text}"'
    return '"' + "".join(_ESCAPES.get(ch, ch) for ch in text) + '"'


def dumps(value: JsonValue) -> str:
    """``value`` as Jackson writes it: compact, members in the mapping's order."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, Mapping):
        return "{" + ",".join(f"{_string(k)}:{dumps(v)}" for k, v in value.items()) + "}"
    if isinstance(value, Sequence):
        return "[" + ",".join(dumps(v) for v in value) + "]"
    raise TypeError(f"cannot write {type(value).__name__} as JSON")


def loads_object(text: str | bytes, what: str) -> dict[str, Any]:
    """Parse ``text`` as one JSON object; ``what`` names it in errors (e.g. ``"manifest"``)."""
    try:
        value = json.loads(text)
    except (ValueError, UnicodeDecodeError) as exc:
        raise SegmentFormatError(f"{what} is not JSON: {exc}") from exc
    return require_object({"": value}, "", what)


def require_object(obj: Mapping[str, Any], member: str, where: str) -> dict[str, Any]:
    value = _present(obj, member, where)
    if not isinstance(value, dict):
        raise SegmentFormatError(f"{_name(member, where)} is not a JSON object")
    return value


def optional_object(obj: Mapping[str, Any], member: str, where: str) -> dict[str, Any] | None:
    """An object member that may be absent or ``null`` (both read as None)."""
    if obj.get(member) is None:
        return None
    return require_object(obj, member, where)


def require_int(obj: Mapping[str, Any], member: str, where: str, *, lo: int, hi: int) -> int:
    value = _present(obj, member, where)
    if isinstance(value, bool) or not isinstance(value, int):
        raise SegmentFormatError(f"{_name(member, where)} is not an integer: {value!r}")
    if not lo <= value <= hi:
        raise SegmentFormatError(f"{_name(member, where)} is out of range [{lo}, {hi}]: {value}")
    return value


def require_bool(obj: Mapping[str, Any], member: str, where: str) -> bool:
    value = _present(obj, member, where)
    if not isinstance(value, bool):
        raise SegmentFormatError(f"{_name(member, where)} is not a boolean: {value!r}")
    return value


def require_str(obj: Mapping[str, Any], member: str, where: str) -> str:
    value = _present(obj, member, where)
    if not isinstance(value, str):
        raise SegmentFormatError(f"{_name(member, where)} is not a string: {value!r}")
    return value


def _present(obj: Mapping[str, Any], member: str, where: str) -> Any:
    if member not in obj:
        raise SegmentFormatError(f"{_name(member, where)} is missing")
    return obj[member]


def _name(member: str, where: str) -> str:
    return where if not member else f"{where}.{member}"
