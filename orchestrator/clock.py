"""The one wall clock: milliseconds since the Unix epoch, as Kafka's records and our metadata store them.

Pure code takes the time as an argument or a :data:`Clock` it is given (tests pass a fixed or stepped one); only the
edges (processes' loops, CLI commands, the client's produce timestamps) read this clock, and they read it here, so a
newcomer finds one place where "now" comes from.

Invariant: :func:`wall_ms` is ``int(time.time() * 1000)``: truncated, never rounded up, so a timestamp taken after
another is never smaller unless the system clock itself steps back (which the lease and the retry queue tolerate by
comparing with what they stored, never with a cached reading).
"""

from __future__ import annotations

import time
from collections.abc import Callable

Clock = Callable[[], int]
"""A source of wall-clock milliseconds: :func:`wall_ms` in processes, a fixed or stepped function in tests."""


def wall_ms() -> int:
    """Now, in milliseconds since the Unix epoch."""
    return int(time.time() * 1000)
