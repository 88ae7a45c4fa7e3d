"""A run's history: every operation asked and answered, every fault injected and healed, every observation, in the
order the run saw them, with the wall-clock time (ms) the cluster's own logs use.

Append-only and written through to ``history.jsonl`` as it grows, so a run that dies still leaves what it saw.
Values are JSON-safe (bytes are never stored: acknowledged records are kept as counts and offsets, their values
derived from the seed).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from orchestrator.clock import wall_ms


class History:
    def __init__(self, path: Path | None = None) -> None:
        self.events: list[dict[str, Any]] = []
        self._lock = threading.Lock()  # fault timers record from their own threads
        self._file = path.open("a", encoding="utf-8") if path is not None else None

    def record(self, type_: str, **fields: Any) -> dict[str, Any]:
        event = {"t": wall_ms(), "type": type_, **fields}
        with self._lock:
            self.events.append(event)
            if self._file is not None:
                self._file.write(json.dumps(event, default=str) + "\n")
                self._file.flush()
        return event

    def of_type(self, type_: str) -> list[Mapping[str, Any]]:
        with self._lock:
            return [e for e in self.events if e["type"] == type_]

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
