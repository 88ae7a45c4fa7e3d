"""Producer ids a broker hands out (InitProducerId): unique across the cluster, across restarts, never reused.

An id is ``broker_id << 40 | n``: brokers draw from disjoint ranges, so no coordination is needed. ``n`` comes from
blocks of :data:`BLOCK` reserved in ``<data_dir>/producer-ids.json`` (written to a temporary file, fsynced and
renamed) before any id of the block is handed out, so a restart (or a SIGKILL) skips to the next block and never
hands out an id twice. A missing or lost file starts at the wall clock's seconds shifted left by 8 bits, so a broker
whose data directory was replaced does not reuse an id as long as its clock did not go back and it handed out at
most 256 ids a second on average (producers ask once per start). Thread-safe.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path

from orchestrator.broker.durable_files import replace_durably
from orchestrator.errors import InvalidArgument

BLOCK = 256  # a second of the clock's share (below): reservations never run ahead of it on average
_N_BITS = 40
MAX_BROKER_ID = (1 << (63 - _N_BITS)) - 1


class ProducerIdAllocator:
    def __init__(self, path: Path, broker_id: int, *, clock_s: Callable[[], float] = time.time) -> None:
        if not 0 <= broker_id <= MAX_BROKER_ID:
            raise InvalidArgument(f"broker id {broker_id} is outside 0..{MAX_BROKER_ID}: no producer id range")
        self._path = path
        self._base = broker_id << _N_BITS
        self._clock_s = clock_s
        self._lock = threading.Lock()
        self._next = 0
        self._end = 0  # the block is used up: reserve the next one first

    def _reserved_end(self) -> int:
        try:
            return int(json.loads(self._path.read_text())["next_block"])
        except (OSError, ValueError, KeyError, TypeError):
            return 0

    def _reserve(self) -> None:
        start = max(self._reserved_end(), int(self._clock_s()) << 8, self._end)
        end = start + BLOCK
        if end >= 1 << _N_BITS:
            raise InvalidArgument("this broker's producer id range is used up")
        replace_durably(self._path, json.dumps({"next_block": end}).encode())
        self._next, self._end = start, end

    def next_id(self) -> int:
        with self._lock:
            if self._next >= self._end:
                self._reserve()
            n = self._next
            self._next += 1
            return self._base | n
