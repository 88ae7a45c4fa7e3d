"""Opening the PostgreSQL store when a process starts: a server that cannot be reached yet is waited for, in bounds.

A controller or broker opens its store before it serves anything. A server restarting, a link cut for a few seconds
or a connection reset while it was being set up would otherwise end the process at once, though the store is back a
moment later. :func:`open_when_reachable` tries again, on the start-up backoff (:data:`STARTUP_BACKOFF`), until the
store opens or ``timeout_s`` has passed.

Invariants:

* Only an unreachable server is waited for (:func:`unreachable`): a connection refused, lost or reset, an answer
  that never came (the watchdog), a server shutting down, starting up or out of connection slots (SQLSTATE class 08,
  ``57P01``-``57P03``, ``53300``; a failed connection has no SQLSTATE, so there the server's own words for those).
  Everything else fails at once, as it will not mend by waiting: a wrong password, a database or role that does not
  exist (the server's FATAL refusal), a schema newer than this program, damage.
* The wait is bounded: no attempt starts once ``timeout_s`` has passed since the first, and the error raised then is
  a :class:`KafkaStorageError` that names the store (masked, never the password), the time waited and the last
  failure, and says what to check. Each failed attempt logs ``metadata.store.open_retry``.
* The clock, the sleep and the random draws of the backoff are injected, so a test runs the schedule without
  waiting.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import TypeVar

import psycopg
import structlog
from tenacity import RetryCallState, Retrying, retry_if_exception

from orchestrator.backoff import Backoff, tenacity_wait
from orchestrator.errors import KafkaStorageError

log = structlog.get_logger(__name__)

S = TypeVar("S")

# Seconds: the first retry within 0.2 s, then doubling to at most 2 s between attempts, so a server back after a
# restart is reached within about 2 s of it answering.
STARTUP_BACKOFF = Backoff(base=0.2, cap=2.0, floor=0.05)
# Admin shutdown, crash shutdown, cannot connect now, too many connections: the server is there but not for long.
_UNREACHABLE_STATES = frozenset({"57P01", "57P02", "57P03", "53300"})
# A failed connection carries no SQLSTATE (libpq's message alone): a server that answered refuses with a FATAL
# message, which means it will refuse again, except these (the states above, in the server's words).
_PASSING_FATALS = (
    "the database system is starting up",
    "the database system is shutting down",
    "the database system is in recovery mode",
    "the database system is not yet accepting connections",
    "terminating connection due to administrator command",
    "too many clients already",
    "remaining connection slots are reserved",
)


def unreachable(exc: BaseException) -> bool:
    """Whether ``exc`` (a store error, or what it was raised from) says the server could not be reached, as
    opposed to refusing what was asked (see the module docstring)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, psycopg.OperationalError):
            state = current.sqlstate
            if state is not None:
                return state.startswith("08") or state in _UNREACHABLE_STATES
            message = str(current)
            return "FATAL:" not in message or any(words in message for words in _PASSING_FATALS)
        current = current.__cause__
    return False


def open_when_reachable(
    open_: Callable[[], S],
    *,
    timeout_s: float,
    location: str,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    rng: random.Random | None = None,
) -> S:
    """``open_()``, tried again while the store is unreachable, for at most ``timeout_s`` seconds (0: once)."""
    started = clock()
    attempts = 0

    def out_of_time(_state: RetryCallState) -> bool:
        return clock() - started >= timeout_s

    def before_sleep(state: RetryCallState) -> None:
        nonlocal attempts
        attempts = state.attempt_number
        error = state.outcome.exception() if state.outcome is not None else None
        log.warning(
            "metadata.store.open_retry",
            store=location,
            attempt=state.attempt_number,
            waited_s=round(clock() - started, 2),
            timeout_s=timeout_s,
            error=str(error),
        )

    retrying = Retrying(
        retry=retry_if_exception(unreachable),
        stop=out_of_time,
        wait=tenacity_wait(STARTUP_BACKOFF, rng or random.Random()),
        sleep=sleep,
        before_sleep=before_sleep,
        reraise=True,
    )
    try:
        return retrying(open_)
    except KafkaStorageError as exc:
        if not unreachable(exc) or timeout_s <= 0:
            raise
        waited = clock() - started
        raise KafkaStorageError(
            f"{location}: the metadata store could not be reached in {waited:.1f}s of start-up "
            f"({attempts + 1} attempts; [store] startup_timeout_ms bounds the wait); last error: {exc.message}. "
            "Check that the PostgreSQL server runs and that this host reaches it, then start the process again"
        ) from exc
