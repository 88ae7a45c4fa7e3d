"""Durations as operators write them (``72h``, ``30m``, ``3d``, ``1d12h``, ``500ms``, ``0s``) and back.

Invariants: :func:`parse_duration` accepts only whole numbers with a unit, concatenated, and refuses anything else
with INVALID_ARGUMENT naming the text; ``parse_duration(format_duration(ms)) == ms`` for every ``ms >= 0``.
"""

from __future__ import annotations

import re

from orchestrator.errors import InvalidArgument

_DURATION = re.compile(r"(\d+)(ms|s|m|h|d)")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_duration(text: str) -> int:
    """``72h``, ``30m``, ``3d``, ``0s``, ``1d12h``, ``500ms`` -> milliseconds; anything else is InvalidArgument."""
    value = text.strip()
    pos = total = 0
    for m in _DURATION.finditer(value):
        if m.start() != pos:
            break
        total += int(m.group(1)) * _UNIT_MS[m.group(2)]
        pos = m.end()
    if not value or pos != len(value):
        raise InvalidArgument(
            f"'{text}' is not a duration: use a number and a unit (ms, s, m, h, d), e.g. 72h, 30m, 3d, 1d12h or 0s"
        )
    return total


def format_duration(ms: int) -> str:
    """The inverse of :func:`parse_duration` for display: the largest unit that divides ``ms`` exactly."""
    for unit in ("d", "h", "m", "s"):
        if ms % _UNIT_MS[unit] == 0 and ms != 0:
            return f"{ms // _UNIT_MS[unit]}{unit}"
    return "0s" if ms == 0 else f"{ms}ms"
