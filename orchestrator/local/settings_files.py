"""The settings files (TOML) the local cluster writes for its controllers and brokers, and reads back.

A settings file is a table of tables (``{"broker": {"broker_id": 1, ...}, "s3": {...}}``). The cluster writes only
what :func:`write_toml` can spell (booleans, integers, finite floats, strings, lists of them); a ``None`` value is
left out, so the process takes its own default. Files are 0600 in 0700 directories: they may name a password file.
"""

from __future__ import annotations

import json
import math
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from orchestrator.private_files import private_dir, write_private

Tables = Mapping[str, Mapping[str, Any]]
"""A settings file: table -> key -> value."""


def with_overrides(tables: Tables, overrides: Tables | None) -> dict[str, dict[str, Any]]:
    """``tables`` with each table of ``overrides`` merged into the table of the same name (its keys win)."""
    out = {name: dict(values) for name, values in tables.items()}
    for name, values in (overrides or {}).items():
        out.setdefault(name, {}).update(values)
    return out


def read_toml(path: Path) -> Tables:
    with path.open("rb") as f:
        return tomllib.load(f)


def write_toml(path: Path, tables: Tables) -> None:
    lines: list[str] = []
    for table, values in tables.items():
        lines.append(f"[{table}]")
        lines += [f"{k} = {_toml_value(v)}" for k, v in values.items() if v is not None]
        lines.append("")
    private_dir(path.parent)
    write_private(path, "\n".join(lines))


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if not math.isfinite(v):
            raise ValueError(f"a setting cannot be {v!r}: give a finite number")
        return repr(v)  # a TOML float: 2.0, 0.25, 1e-05
    if isinstance(v, list | tuple):
        return "[" + ", ".join(_toml_value(item) for item in v) + "]"
    return json.dumps(str(v))
