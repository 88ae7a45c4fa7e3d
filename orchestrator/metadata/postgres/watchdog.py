"""The client's own bound on one store operation: a PostgreSQL server that answers nothing is taken for gone.

The server-side timeouts (``statement_timeout``, ``lock_timeout``...) end what the *server* is doing; they cannot end
a wait on a server that does nothing at all: one SIGSTOPped, or behind a link that silently drops packets. Its
kernel still accepts connections and acknowledges what is sent, so no TCP timeout fires either, and a process
would wait on its socket for ever (the controller's core thread, and so every request to it, with it). The
:class:`Watchdog` shuts the connection's socket down once an operation has run ``timeout_s``: the blocked call
then fails at once, the store turns that into a retriable error naming the bound (:meth:`Watchdog.fired`), and the
connection, now broken, is opened again on the next call.

Invariants:
* One watchdog thread per store, started on first use and asleep while nothing is in flight; arming and disarming
  an operation costs a lock and a notify, never a thread.
* A connection is shut only while the operation that armed the watchdog still runs and has outlived its deadline;
  an operation that ended a moment before is never touched (disarming and firing take the same lock).
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator

import structlog
from psycopg import Connection

log = structlog.get_logger(__name__)


class Watchdog:
    def __init__(
        self,
        timeout_s: float,
        *,
        current: Callable[[], Connection | None],
        location: str,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``current`` gives the connection an operation is using (it may be opened during the operation)."""
        self.timeout_s = timeout_s
        self._current = current
        self._location = location
        self._clock = clock
        self._cond = threading.Condition()
        self._deadline: float | None = None  # of the operation in flight, if any
        self._fired = False  # the operation in flight was cut short
        self._thread: threading.Thread | None = None

    @contextlib.contextmanager
    def guard(self) -> Iterator[None]:
        """Bound the operation run inside: after ``timeout_s`` the connection's socket is shut down."""
        with self._cond:
            self._deadline, self._fired = self._clock() + self.timeout_s, False
            if self._thread is None:
                self._thread = threading.Thread(target=self._watch, name="store-watchdog", daemon=True)
                self._thread.start()
            self._cond.notify_all()
        try:
            yield
        finally:
            with self._cond:
                self._deadline = None

    def fired(self) -> bool:
        """Whether the last guarded operation was cut short (read after it failed)."""
        with self._cond:
            return self._fired

    def _watch(self) -> None:
        with self._cond:
            while True:
                if self._deadline is None:
                    self._cond.wait()
                    continue
                left = self._deadline - self._clock()
                if left > 0:
                    self._cond.wait(left)
                    continue
                self._deadline, self._fired = None, True
                self._shut(self._current())

    def _shut(self, conn: Connection | None) -> None:
        if conn is None or conn.closed:
            return
        log.warning("metadata.store.no_answer", store=self._location, timeout_s=self.timeout_s)
        try:
            sock = socket.socket(fileno=os.dup(conn.fileno()))
        except OSError:
            return
        with contextlib.suppress(OSError), sock:
            sock.shutdown(socket.SHUT_RDWR)  # wakes the thread blocked on the socket: its call fails now
