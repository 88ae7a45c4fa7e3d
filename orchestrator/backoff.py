"""The one retry schedule of every call family: exponential backoff with full jitter, pure.

After the ``n``-th consecutive failure (or attempt without progress) the wait is drawn uniformly from
``[floor, window]``, where the window is ``base * 2 ** (n - 1)`` capped at ``cap``: it doubles per failure, and the
draw spreads out callers that failed together (a failover, an S3 outage), so they do not come back in lockstep.

Each call family declares its parameters once, as a :class:`Backoff`: the controller's requests to brokers from
``[disablement]`` settings (:class:`orchestrator.settings.DisablementSettings`, where their cap is documented), the
background loops in :mod:`orchestrator.supervision`, the admin client in :mod:`orchestrator.net.admin`, S3 calls in
:mod:`remote_storage.retry`. Who retries decides how the schedule is used, never both ways for one family: a pure
core that schedules its own retries (the controller's queue, a loop's supervisor) calls :meth:`Backoff.delay`; a call
retried in place by tenacity gets :func:`tenacity_wait` as its ``wait`` (tenacity's public API: a callable of the
retry state).

Invariants:
* Nothing here reads a clock, sleeps, or draws from the global ``random``: the caller passes the generator, so a
  seeded one reproduces a schedule exactly.
* Units are the caller's: seconds or milliseconds, as long as ``base``, ``cap`` and ``floor`` agree.
* Zero (or fewer) failures counts as the first; a window never exceeds ``cap``, whatever the count.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from tenacity import RetryCallState


def full_jitter(attempt: int, *, base: float, cap: float, rng: random.Random, floor: float = 0.0) -> float:
    """The wait after ``attempt`` consecutive failures: uniform in ``[floor, min(cap, base * 2 ** (attempt - 1))]``
    (the window never below ``floor``)."""
    exponent = max(1, attempt) - 1
    try:
        window = min(cap, base * 2**exponent)
    except OverflowError:  # a count so high that the window is far beyond any cap
        window = cap
    return rng.uniform(floor, max(floor, window))


@dataclass(frozen=True, slots=True)
class Backoff:
    """One call family's retry schedule (see the module docstring)."""

    base: float  # the first window: a wait after one failure is at most this
    cap: float  # no window is wider than this
    floor: float = 0.0  # no wait is shorter than this (a failing loop must not spin)

    def __post_init__(self) -> None:
        if not 0 <= self.floor <= self.cap or self.base <= 0:
            raise ValueError(f"a backoff needs base > 0 and 0 <= floor <= cap, got {self}")

    def delay(self, attempt: int, rng: random.Random) -> float:
        """The wait after ``attempt`` consecutive failures, drawn from ``rng`` (:func:`full_jitter`)."""
        return full_jitter(attempt, base=self.base, cap=self.cap, rng=rng, floor=self.floor)


def tenacity_wait(backoff: Backoff, rng: random.Random) -> Callable[[RetryCallState], float]:
    """``backoff`` as the ``wait`` of a tenacity ``Retrying`` or ``AsyncRetrying`` that retries a call in place: the
    delay after the attempt that just failed (tenacity's ``attempt_number``), drawn from ``rng``."""

    def wait(state: RetryCallState) -> float:
        return backoff.delay(state.attempt_number, rng)

    return wait
