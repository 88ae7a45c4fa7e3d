"""How a driver walks its retry queue: lost requests expired and due ones handed out, only when something can be due.

Both drivers (``disablement.py``, ``topic_deletion.py``) run one :class:`QueueWalk` over their queue. The controller
ticks every 100 ms; over thousands of queued topics a walk per tick would be most of a bulk disablement's work. So
a walk remembers the queue it left and the earliest time at which time alone changes anything in it
(:func:`retry_queue.next_event_ms`: a backoff ending, a request timing out, a wait reaching the stall threshold),
and a tick that finds the very same queue before that time walks nothing.

Invariants:
* Nothing is skipped that a walk would have found: the queue is immutable, so the same object before its next
  event expires, sends and stalls exactly what it did at the last walk (nothing).
* A deposed controller hands out no request: when a walk finds requests due it checks the lease first, and raises
  :class:`~orchestrator.errors.StaleControllerEpoch` (the queue unchanged) once the lease has moved on.
"""

from __future__ import annotations

import math
from typing import Any, Generic

from orchestrator.ids import Uuid
from orchestrator.settings import DisablementSettings

from . import retry_queue as rq
from .retry_queue import J
from .state import ControllerState


class QueueWalk(Generic[J]):
    def __init__(self, state: ControllerState, settings: DisablementSettings, *, watch_stalls: bool) -> None:
        """``watch_stalls``: whether a wait reaching ``settings.stall_threshold_ms`` is an event (stall reports)."""
        self._state = state
        self.retries = rq.Retries.of(settings)
        self._timeout_ms = settings.request_timeout_ms
        self._stall_threshold_ms = settings.stall_threshold_ms if watch_stalls else math.inf
        self._unchanged_until: tuple[rq.RetryQueue[Any], float] | None = None
        self.stalls_checked_ms = -1  # the time of the last stall report (waits stalled by then are reported)
        self._stalled_reported: frozenset[tuple[Uuid, int]] = frozenset()

    def nothing_due(self, queue: rq.RetryQueue[J], now_ms: int) -> bool:
        """Whether ``queue`` is the very one the last walk left and its next event has not come."""
        memo = self._unchanged_until
        return memo is not None and memo[0] is queue and now_ms < memo[1]

    def walked(self, queue: rq.RetryQueue[J]) -> None:
        """Note that ``queue`` was walked (expired, sent, stall-checked) as of now."""
        until = rq.next_event_ms(
            queue,
            timeout_ms=self._timeout_ms,
            stall_threshold_ms=self._stall_threshold_ms,
            stalls_after_ms=self.stalls_checked_ms,
        )
        self._unchanged_until = (queue, until)

    def new_stalls(self, queue: rq.RetryQueue[J], now_ms: int) -> list[tuple[Uuid, int]]:
        """The (job, broker) pairs of ``queue`` stalled now and not at the last check, in a stable order: each is
        reported once when it stalls, and again only if it recovered and stalled anew. Empty when nothing can be
        due (see :meth:`nothing_due`)."""
        threshold = self._stall_threshold_ms
        if math.isinf(threshold) or self.nothing_due(queue, now_ms):
            return []
        stalled = frozenset(rq.stalled(queue, now_ms, int(threshold)))
        self.stalls_checked_ms = now_ms
        new = sorted(stalled - self._stalled_reported, key=lambda pair: (str(pair[0]), pair[1]))
        self._stalled_reported = stalled
        return new

    def expire(self, queue: rq.RetryQueue[J], now_ms: int) -> rq.RetryQueue[J]:
        """``queue`` with every request in flight longer than the request timeout given up on (retried later)."""
        if self.nothing_due(queue, now_ms):
            return queue
        return rq.expire(queue, now_ms, timeout_ms=self._timeout_ms, rng=self._state.rng, retries=self.retries)

    def take_due(self, queue: rq.RetryQueue[J]) -> tuple[rq.RetryQueue[J], list[rq.Send[J, Any]]]:
        """The requests to send now, and ``queue`` with them in flight (lost ones expired first)."""
        now = self._state.now_ms()
        if self.nothing_due(queue, now):
            return queue, []
        queue, sends = rq.due(self.expire(queue, now), now)
        if sends:
            self._state.check_lease()
        self.walked(queue)
        return queue, sends
