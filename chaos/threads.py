"""The threads a fault proxy started, kept so that its close() can join every one of them.

:class:`ThreadSet` starts daemon threads (:meth:`ThreadSet.start`), each running its target through a wrapper, and
joins them all within a deadline (:meth:`ThreadSet.join_all`).

Invariants:

* A thread is in the set from before it starts until its target has ended (returned or raised): the wrapper
  removes it as its last step.
* A thread is added and started under the set's lock, so :meth:`ThreadSet.join_all` and :meth:`ThreadSet.live`
  never see a thread that is not started yet (one that ``join`` would refuse).
* The set's lock is a leaf: nothing else is locked while it is held (no target runs under it), so a caller may
  start a thread, or end one, while holding a lock of its own.
* :meth:`ThreadSet.join_all` waits at most ``timeout_s`` in all, and looks again until the set is empty: a thread
  may start another as it ends. A thread whose join timed out is a daemon: it never holds up the interpreter's
  exit.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TypeVarTuple

Ts = TypeVarTuple("Ts")


class ThreadSet:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._threads: set[threading.Thread] = set()

    def start(self, target: Callable[[*Ts], object], name: str, *args: *Ts) -> None:
        """Run ``target(*args)`` in a new daemon thread named ``name``, kept in the set until the target ends."""
        t = threading.Thread(target=self._run, args=(target, args), name=name, daemon=True)
        with self._lock:
            self._threads.add(t)
            t.start()  # under the lock: join_all() never sees a thread it cannot join yet

    def join_all(self, timeout_s: float) -> bool:
        """Join every thread of the set, those started meanwhile too, for ``timeout_s`` at the most in all; whether
        none is left."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:  # again until none is left: a thread may start one as it ends
            with self._lock:
                threads = list(self._threads)
            if not threads:
                return True
            for t in threads:
                t.join(timeout=max(0.0, deadline - time.monotonic()))
        with self._lock:
            return not self._threads

    def live(self) -> int:
        """How many of the set's threads still run."""
        with self._lock:
            return sum(t.is_alive() for t in self._threads)

    def _run(self, target: Callable[[*Ts], object], args: tuple[*Ts]) -> None:
        try:
            target(*args)
        finally:
            with self._lock:
                self._threads.discard(threading.current_thread())
