"""Pausing Python's cycle collector while a process loads a large, acyclic structure.

Replaying the metadata log builds hundreds of thousands of dicts, lists and records that stay alive. Each of
them counts towards the collector's thresholds, so a replay triggers collections that walk the whole growing
heap again and again; on a 1M-record log that is half the replay time, and none of it finds garbage (images are
trees: reference counting frees them). :func:`collector_paused` stops automatic collection for the duration.

Invariants:
* Pauses nest and may overlap across threads: the collector is re-enabled when the last pause ends, and only if
  it was enabled when the first one began (a process that turned it off keeps it off).
* Objects are still freed by reference counting while paused; only cycles wait for the next collection.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_state = {"depth": 0, "was_enabled": False}  # process-wide, like the collector itself


@contextmanager
def collector_paused() -> Iterator[None]:
    with _lock:
        if _state["depth"] == 0:
            _state["was_enabled"] = gc.isenabled()
            gc.disable()
        _state["depth"] += 1
    try:
        yield
    finally:
        with _lock:
            _state["depth"] -= 1
            if _state["depth"] == 0 and _state["was_enabled"]:
                gc.enable()
