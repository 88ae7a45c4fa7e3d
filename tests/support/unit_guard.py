"""The ``unit`` marker, checked rather than trusted: while a unit test runs, connecting a socket, starting a process
and sleeping raise :class:`NotAUnitTest`.

A unit test is pure logic: it starts no process, touches no network (loopback included) and never sleeps, so
``make check`` can run all of them in seconds and a new one cannot quietly make it slow. A test that needs any of
those is an ``integration`` test; it still runs in ``make test``.

What is caught, and where:

* **Sockets**: ``socket.socket.connect`` and ``connect_ex``, which every client goes through (``create_connection``,
  asyncio's ``sock_connect``, boto3, psycopg's Python path). A server that only binds is caught when the test's
  client connects to it.
* **Processes**: ``subprocess.Popen._execute_child`` (``run``, ``check_output``, asyncio's subprocesses all end
  there) and ``os.fork``.
* **Sleeps**: ``time.sleep`` with any duration, and ``asyncio.sleep`` with a positive one (``asyncio.sleep(0)``
  only yields to the event loop, and is allowed).

Only threads the test started are watched: those that were alive before it (a session's moto server, pytest-xdist's
I/O threads) keep their own business. The patches are undone after the test, whatever happened.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any


class NotAUnitTest(AssertionError):
    """A test marked ``unit`` did what only an integration test may: the message says what, and what to do."""


def _refuse(what: str) -> NotAUnitTest:
    return NotAUnitTest(
        f"a test marked 'unit' {what}; unit tests are pure logic (no process, no network, no sleep). "
        "Inject the clock or the transport, wait for an event instead of sleeping, or mark the test 'integration'."
    )


@contextlib.contextmanager
def forbidding_io() -> Iterator[None]:
    """Patch the calls the module docstring lists for the duration of the block; threads alive at its start are
    exempt."""
    exempt = {t.ident for t in threading.enumerate()} - {threading.get_ident()}

    def watched() -> bool:
        return threading.get_ident() not in exempt

    saved: list[tuple[Any, str, Any]] = []

    def patch(owner: Any, name: str, make: Callable[[Any], Any]) -> None:
        original = getattr(owner, name)
        saved.append((owner, name, original))
        setattr(owner, name, make(original))

    def connect_guard(original: Any) -> Any:
        def connect(self: socket.socket, address: Any) -> Any:
            if watched():
                self.close()  # not left for the garbage collector to warn about in a later test
                raise _refuse(f"connected a socket to {address!r}")
            return original(self, address)

        return connect

    def spawn_guard(original: Any) -> Any:
        def _execute_child(self: subprocess.Popen[Any], args: Any, *rest: Any, **kwargs: Any) -> Any:
            if watched():
                raise _refuse(f"started a process ({args!r})")
            return original(self, args, *rest, **kwargs)

        return _execute_child

    def fork_guard(original: Any) -> Any:
        def fork() -> int:
            if watched():
                raise _refuse("forked")
            result: int = original()
            return result

        return fork

    def sleep_guard(original: Any) -> Any:
        def sleep(seconds: float) -> None:
            if watched():
                raise _refuse(f"slept {seconds} s")
            original(seconds)

        return sleep

    def async_sleep_guard(original: Any) -> Any:
        async def sleep(delay: float, result: Any = None) -> Any:
            if delay > 0 and watched():
                raise _refuse(f"slept {delay} s in asyncio")
            return await original(delay, result)

        return sleep

    patch(socket.socket, "connect", connect_guard)
    patch(socket.socket, "connect_ex", connect_guard)
    patch(subprocess.Popen, "_execute_child", spawn_guard)
    patch(os, "fork", fork_guard)
    patch(time, "sleep", sleep_guard)
    patch(asyncio, "sleep", async_sleep_guard)
    try:
        yield
    finally:
        for owner, name, original in reversed(saved):
            setattr(owner, name, original)
