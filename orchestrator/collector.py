"""Python's cycle collector around a large, long-lived, acyclic heap: paused while it is built, settled after.

Replaying the metadata log builds hundreds of thousands of dicts, lists and records that stay alive. Each of
them counts towards the collector's thresholds, so a replay triggers collections that walk the whole growing
heap again and again; on a 1M-record log that is half the replay time, and none of it finds garbage (images are
trees: reference counting frees them). :func:`collector_paused` stops automatic collection for the duration.

Once built, the image lives on, and every full collection walks it again: on a 2,000-topic cluster one full
collection stalls the controller for 100-200 ms, several times during a bulk disablement, for nothing found.
:func:`settle_if_grown` moves what is alive into the collector's permanent generation (``gc.freeze``) once the
old generation has grown enough since the last settle; full collections then walk only what came after.

Invariants:
* Pauses nest and may overlap across threads: the collector is re-enabled when the last pause ends, and only if
  it was enabled when the first one began (a process that turned it off keeps it off).
* Objects are still freed by reference counting while paused; only cycles wait for the next collection.
* A settle is one full collection of everything (frozen objects included: it unfreezes first), then a freeze:
  a cycle among frozen objects waits at most until the next settle, never forever. It runs only when the old,
  unfrozen generation holds at least :data:`SETTLE_MIN_OBJECTS` objects and as many as are frozen (the heap
  doubled), so settles walk the heap a bounded number of times per doubling: over any growth their cost is at
  most about twice the final heap. Between settles the collector's own full collections walk only the unfrozen
  part. Never while paused or when the process turned the collector off; checked at most once per
  ``min_interval_s``.
"""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_state = {"depth": 0, "was_enabled": False}  # process-wide, like the collector itself
_checked_at = [float("-inf")]

SETTLE_MIN_OBJECTS = 20_000
SETTLE_GROWTH = 1.0


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


def settle_if_grown(*, min_interval_s: float = 1.0, clock: Callable[[], float] = time.monotonic) -> bool:
    """Collect everything and freeze what survives, if the old generation grew enough (module docstring);
    return whether it did."""
    with _lock:
        if _state["depth"] or not gc.isenabled():
            return False
        now = clock()
        if now - _checked_at[0] < min_interval_s:
            return False
        _checked_at[0] = now
    unfrozen_old = len(gc.get_objects(generation=2))
    if unfrozen_old < max(SETTLE_MIN_OBJECTS, SETTLE_GROWTH * gc.get_freeze_count()):
        return False
    # Outside the lock: a collection runs finalizers, and one that paused the collector must not wait for us.
    gc.unfreeze()
    gc.collect()
    gc.freeze()
    return True
