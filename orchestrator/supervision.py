"""Background loops that never end quietly: one retry policy, a supervisor for a loop, and per-unit backoff.

The broker's loops (heartbeat, metadata, tiering) and the controller's (lease, disablement sender) run under
:func:`supervise`. A round that raises anything (an ``Exception``, not only our typed errors) is logged as
``<component>.loop_failed`` (``broker.loop_failed``, ``controller.loop_failed``) with the loop, the error, its
message and cause (and the traceback when the error is not one of ours), and is run again after a backoff; the
first success after failures logs ``<component>.loop_recovered`` and resets the backoff.

Invariants:
* Every backoff follows ONE declared schedule, :data:`LOOP_RETRY_WAIT` (:mod:`orchestrator.backoff`: exponential
  with full jitter, capped, never below 0.1 s so a failing round cannot spin); a process may lower or raise its cap
  (:func:`loop_retry_wait`, the broker's ``loop_retry_max_ms``), nothing else; sleep is injected, and
  :class:`RetryBackoff` takes the time from its caller, so nothing here reads a clock. A caller may pass its own
  schedule (``wait``: consecutive failures -> seconds), e.g. a deterministic one in tests.
* Only cancellation ends :func:`supervise`; whoever starts a supervised task treats any other end as a crash.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
from collections.abc import Awaitable, Callable, Collection, Hashable
from typing import Generic, NoReturn, TypeVar

import structlog

from orchestrator.backoff import Backoff
from orchestrator.errors import TieredError

log = structlog.get_logger(__name__)

# Full jitter in a window that doubles per consecutive failure (0.2 s, 0.4 s, 0.8 s ... capped at 10 s), in
# seconds. The cap is low because the work is local (a disk, the store, a peer on the LAN): once the cause is gone,
# the process catches up within seconds.
LOOP_RETRY_WAIT = Backoff(base=0.2, cap=10.0, floor=0.1)
_RNG = random.Random()

Sleep = Callable[[float], Awaitable[None]]
WaitPolicy = Callable[[int], float]  # consecutive failures (>= 1) -> seconds to wait
_Key = TypeVar("_Key", bound=Hashable)


def loop_retry_wait(cap_ms: int) -> Backoff:
    """:data:`LOOP_RETRY_WAIT` with its cap at ``cap_ms`` (a process's setting), never below its floor."""
    return dataclasses.replace(LOOP_RETRY_WAIT, cap=max(cap_ms / 1000, LOOP_RETRY_WAIT.floor))


def loop_wait(cap_ms: int, rng: random.Random = _RNG) -> WaitPolicy:
    """:func:`loop_retry_wait` as a :data:`WaitPolicy` (consecutive failures -> seconds), drawn from ``rng``."""
    backoff = loop_retry_wait(cap_ms)
    return lambda failures: backoff.delay(failures, rng)


def loop_backoff_s(failures: int, rng: random.Random = _RNG) -> float:
    """Seconds to wait after ``failures`` consecutive failures (>= 1; fewer counts as one), per
    :data:`LOOP_RETRY_WAIT`, drawn from ``rng``."""
    return LOOP_RETRY_WAIT.delay(failures, rng)


class RetryBackoff(Generic[_Key]):
    """Consecutive failures per unit of background work (a partition) and when each failing unit is due again.

    Bookkeeping only: the caller passes the time; nothing here sleeps or reads a clock. A unit that never failed,
    or that succeeded since, is always due."""

    def __init__(self, wait: WaitPolicy = loop_backoff_s) -> None:
        self._wait = wait
        self._failing: dict[_Key, tuple[int, float]] = {}  # key -> (consecutive failures, due again at)

    def due(self, key: _Key, *, now: float) -> bool:
        entry = self._failing.get(key)
        return entry is None or now >= entry[1]

    def failed(self, key: _Key, *, now: float) -> tuple[int, float]:
        """Record a failure; return (consecutive failures, seconds until the unit is due again)."""
        attempt = self._failing.get(key, (0, now))[0] + 1
        delay = self._wait(attempt)
        self._failing[key] = (attempt, now + delay)
        return attempt, delay

    def succeeded(self, key: _Key) -> int:
        """Reset the unit; return how many failures in a row it had."""
        return self._failing.pop(key, (0, 0.0))[0]

    def forget_all_but(self, keys: Collection[_Key]) -> None:
        """Drop units that are no longer part of the work (a deleted topic, a partition led elsewhere now)."""
        for key in [k for k in self._failing if k not in keys]:
            del self._failing[key]


def log_loop_failure(
    component: str, loop: str, exc: BaseException, *, attempt: int, retry_in_s: float, **where: object
) -> None:
    """``<component>.loop_failed``: the loop, where (a partition), the error (a typed error's name, else the
    exception's type), its message and its cause, and when it is tried again; the traceback when the error is not
    one of ours."""
    if isinstance(exc, TieredError):
        error, detail = exc.name, exc.message
    else:
        error, detail = type(exc).__name__, str(exc)
    fields: dict[str, object] = {"loop": loop, **where, "error": error, "detail": detail}
    if exc.__cause__ is not None:
        fields["cause"] = f"{type(exc.__cause__).__name__}: {exc.__cause__}"
    fields.update(attempt=attempt, retry_in_s=round(retry_in_s, 3))
    if isinstance(exc, TieredError):
        log.warning(f"{component}.loop_failed", **fields)
    else:
        log.error(f"{component}.loop_failed", **fields, exc_info=exc)


def log_loop_recovered(component: str, loop: str, *, failed_attempts: int, **where: object) -> None:
    log.info(f"{component}.loop_recovered", loop=loop, **where, failed_attempts=failed_attempts)


async def supervise(
    loop: str,
    one_round: Callable[[], Awaitable[object]],
    *,
    component: str,
    interval_s: float,
    sleep: Sleep = asyncio.sleep,
    wait: WaitPolicy = loop_backoff_s,
    on_failure: Callable[[int], Awaitable[None]] | None = None,
    pause: Callable[[float], Awaitable[object]] | None = None,
) -> NoReturn:
    """Run ``one_round`` every ``interval_s``, forever. A round that raises any ``Exception`` is logged
    (:func:`log_loop_failure`) and run again after ``wait``'s backoff for the failures in a row (``on_failure``,
    given the count, runs first: e.g. a controller steps down); the first success after failures logs
    ``<component>.loop_recovered`` and resets the count. Only cancellation ends it. ``pause(interval_s)``, when
    given, replaces the sleep between successful rounds (e.g. a wait that a change notification ends early); the
    backoff after a failure is always slept in full."""
    failures = 0
    while True:
        try:
            await one_round()
        except Exception as exc:
            failures += 1
            delay = wait(failures)
            log_loop_failure(component, loop, exc, attempt=failures, retry_in_s=delay)
            if on_failure is not None:
                await on_failure(failures)
            await sleep(delay)
            continue
        if failures:
            log_loop_recovered(component, loop, failed_attempts=failures)
            failures = 0
        await (pause or sleep)(interval_s)
