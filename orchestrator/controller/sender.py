"""The active controller's sender: every request its queues make due goes out to the brokers, by a table of kinds.

A round runs on the core's thread to tick the core and collect what each kind's queue has due
(:func:`tick_and_collect`), then sends it from the event loop, over one connection per broker
(:class:`~orchestrator.net.connection.ConnectionPool`). Rounds come every ``SENDER_INTERVAL_S``, or at once when an
admin write wakes the sender (:meth:`Sender.wake`): tiering off for many topics goes out without waiting for a tick.

:data:`REQUEST_KINDS` says, per kind, how its requests are sent and how their outcomes go back:

* DisableRemoteTopic coalesces every topic due to one broker incarnation into version 1 requests of at most
  ``max_topics_per_request`` topics (:func:`~orchestrator.controller.disablement.batch_request`), each reply split
  back into one outcome per topic, so a bulk disablement costs O(brokers x rounds) exchanges, not O(topics x
  brokers); its exchanges are counted in the metrics.
* DeleteRemotePartitions (a deleted topic's remote data) goes out one request per topic.

Invariants:
* The version is negotiated (ApiVersions, once per connection): the highest both sides speak. A broker that speaks
  no batched version of a kind (a rolling upgrade, still on DisableRemoteTopic version 0) gets one exchange per
  body instead, concurrently.
* At most ``max_in_flight_per_broker`` exchanges are in flight to a broker, every kind together.
* Every outcome of one exchange (a reply, an error, or a timeout) goes back to the core in one call, so the topics
  it completes become DISABLED in one append; a core that is no longer the active one gets none.
* A broker answering STALE_CONTROLLER_EPOCH (raised by the core, after recording the outcome) steps the controller
  down, as does a round that fails ``SENDER_FAILURES_BEFORE_STEP_DOWN`` times in a row (the lease then expires
  and a controller with a fresh core, maybe this one, takes over); a failed round is logged as
  ``controller.loop_failed`` and retried after the loop backoff. An exchange that dies of an unexpected error is
  logged as ``controller.send_failed``; its requests time out and are retried.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import structlog

from orchestrator import crash_points
from orchestrator.errors import BrokerNotAvailable, StaleControllerEpoch, TieredError
from orchestrator.metrics import ControllerMetrics
from orchestrator.net.connection import Address, ConnectionPool, highest_common_version
from orchestrator.net.server import served_versions
from orchestrator.protocol.api_keys import ApiKey
from orchestrator.settings import DisablementSettings
from orchestrator.supervision import log_loop_failure, log_loop_recovered, loop_backoff_s

from .core import ControllerCore
from .disablement import batch_request, split_batch_response
from .host import CoreHost
from .metrics_view import disable_result

log = structlog.get_logger(__name__)

SENDER_INTERVAL_S = 0.1
SENDER_FAILURES_BEFORE_STEP_DOWN = 5  # a sender failing this many rounds in a row steps down (see the docstring)

Outcome = tuple[Any, Any, TieredError | None]
"""One request's outcome: the body the core handed out (given back as it is), and a reply, an error, or neither."""


@dataclass(frozen=True, slots=True)
class RequestKind:
    """One kind of request the controller sends brokers: where its due requests come from, how they are sent, and
    where their outcomes go."""

    name: str  # for logs
    api_key: ApiKey
    due: Callable[[ControllerCore], Sequence[tuple[int, Any]]]  # (broker id, body) pairs, now in flight
    feed: Callable[[ControllerCore, int, list[Outcome]], None]  # the outcomes of one exchange to one broker
    # The request carrying many bodies to one broker incarnation, and each body's outcome from its reply, at
    # versions from ``batched_from_version`` on (None: one body per exchange).
    batch: Callable[[Sequence[Any]], Mapping[str, object]] | None = None
    split: Callable[[Sequence[Any], Any], list[Outcome]] | None = None
    batched_from_version: int = 1
    # Counts an exchange in the metrics: (metrics, version, exchanges, outcomes, seconds).
    observe: Callable[[ControllerMetrics, int, int, list[Outcome], float], None] | None = None
    crash_point: str | None = None  # the fault suite's crash point reached before each exchange

    def batched(self, version: int) -> bool:
        """Whether one request at ``version`` carries many bodies."""
        return self.batch is not None and version >= self.batched_from_version


def _observe_disable(
    metrics: ControllerMetrics, version: int, exchanges: int, outcomes: list[Outcome], s: float
) -> None:
    results = [disable_result(response, error) for _, response, error in outcomes]
    metrics.disable_exchange_done(version, exchanges, results, s)


DISABLE_REMOTE_TOPIC = RequestKind(
    "DisableRemoteTopic",
    ApiKey.DISABLE_REMOTE_TOPIC,
    due=ControllerCore.due_disable_requests,
    feed=ControllerCore.on_disable_responses,
    batch=batch_request,
    split=split_batch_response,
    observe=_observe_disable,
    crash_point="controller.before_disable_send",
)
DELETE_REMOTE_PARTITIONS = RequestKind(
    "DeleteRemotePartitions",
    ApiKey.DELETE_REMOTE_PARTITIONS,
    due=ControllerCore.due_remote_delete_requests,
    feed=ControllerCore.on_remote_delete_responses,
)
REQUEST_KINDS = (DISABLE_REMOTE_TOPIC, DELETE_REMOTE_PARTITIONS)


def tick_and_collect(core: ControllerCore) -> Sequence[Sequence[tuple[int, Any]]]:
    """Tick the core, then collect what each kind of :data:`REQUEST_KINDS` has due, in that order (core thread)."""
    core.tick()
    return [kind.due(core) for kind in REQUEST_KINDS]


def exchanges_of(kind: RequestKind, due: Sequence[tuple[int, Any]], per_request: int) -> list[tuple[int, list[Any]]]:
    """The due bodies as (broker id, bodies of one exchange): a batched kind's grouped by broker incarnation, in the
    order they came, at most ``per_request`` each; any other kind's one by one."""
    if kind.batch is None:
        return [(broker_id, [body]) for broker_id, body in due]
    grouped: dict[tuple[int, int], list[Any]] = {}
    for broker_id, body in due:
        grouped.setdefault((broker_id, body["broker_epoch"]), []).append(body)
    return [
        (broker_id, bodies[start : start + per_request])
        for (broker_id, _), bodies in grouped.items()
        for start in range(0, len(bodies), per_request)
    ]


class Sender:
    """The sender of one controller process; :meth:`run` sends for one core while it is the active one."""

    def __init__(
        self, settings: DisablementSettings, pool: ConnectionPool, metrics: ControllerMetrics, *, host: CoreHost
    ) -> None:
        self._settings = settings
        self._pool = pool
        self._metrics = metrics
        self._host = host
        self._wake = asyncio.Event()
        self._broker_slots: dict[int, asyncio.Semaphore] = {}
        self._in_flight: set[asyncio.Task[None]] = set()

    def wake(self) -> None:
        """Start the next round now (a write may have made requests due)."""
        self._wake.set()

    def exchanges_in_flight(self) -> list[asyncio.Task[None]]:
        return list(self._in_flight)

    async def run(self, core: ControllerCore) -> None:
        """Send rounds for ``core`` for as long as it is the active one."""
        failures = 0
        while self._host.active_core() is core:
            try:
                collected = await self._host.on_core(lambda: tick_and_collect(core))
            except StaleControllerEpoch as exc:
                await asyncio.shield(self._host.step_down(f"fenced: {exc.message}"))
                return
            except Exception as exc:
                failures += 1
                pause_s = loop_backoff_s(failures)
                log_loop_failure("controller", "sender", exc, attempt=failures, retry_in_s=pause_s)
                if failures >= SENDER_FAILURES_BEFORE_STEP_DOWN:
                    await asyncio.shield(self._host.step_down(f"the sender failed {failures} rounds in a row"))
                    return
                await asyncio.sleep(pause_s)
                continue
            if failures:
                log_loop_recovered("controller", "sender", failed_attempts=failures)
                failures = 0
            per_request = self._settings.max_topics_per_request
            for kind, due in zip(REQUEST_KINDS, collected, strict=True):
                for broker_id, bodies in exchanges_of(kind, due, per_request):
                    task = asyncio.create_task(self._send(kind, core, broker_id, bodies))
                    self._in_flight.add(task)
                    task.add_done_callback(self._in_flight.discard)
                    task.add_done_callback(functools.partial(_log_send_failure, kind, broker_id, bodies))
            # tick() and due() scan the queues on the core thread; 10 rounds a second keeps that cost small next
            # to the replies, and re-polls (disablement.repoll_ms) are coarser than this anyway.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), SENDER_INTERVAL_S)
            self._wake.clear()

    async def _send(self, kind: RequestKind, core: ControllerCore, broker_id: int, bodies: list[Any]) -> None:
        """One exchange of ``kind`` with one broker incarnation (or, to a broker with no batched version, one per
        body); every outcome goes back to the core in one call."""
        slots = self._broker_slots.setdefault(broker_id, asyncio.Semaphore(self._settings.max_in_flight_per_broker))
        async with slots:
            broker = core.image.brokers.get(broker_id)
            started = time.monotonic()
            version, exchanges = 0, 0
            try:
                if broker is None or not broker.endpoints:
                    raise BrokerNotAvailable(f"broker {broker_id} has no endpoint")  # recorded below, then retried
                address = (broker.endpoints[0].host, broker.endpoints[0].port)
                version = await self._version(kind, address)
                exchanges = 1 if kind.batched(version) else len(bodies)
                outcomes = await self._exchange(kind, address, version, bodies)
            except TieredError as exc:  # a Kafka error, or a reply that does not decode: retried the same way
                outcomes = [(b, None, exc) for b in bodies]
            if kind.observe is not None:
                kind.observe(self._metrics, version, exchanges, outcomes, time.monotonic() - started)
        if self._host.active_core() is not core:
            return
        try:
            await self._host.on_core(lambda: kind.feed(core, broker_id, outcomes))
        except StaleControllerEpoch as exc:
            await self._host.step_down(f"fenced: {exc.message}")

    async def _version(self, kind: RequestKind, address: Address) -> int:
        """The highest version of ``kind`` the broker and this controller both speak."""
        theirs = await self._pool.api_versions(address, timeout_s=self._timeout_s)  # negotiated once per connection
        return highest_common_version(kind.api_key, served_versions(kind.api_key), theirs)

    @property
    def _timeout_s(self) -> float:
        return self._settings.request_timeout_ms / 1000

    async def _exchange(self, kind: RequestKind, address: Address, version: int, bodies: list[Any]) -> list[Outcome]:
        """Each body's outcome: one exchange carrying them all (:meth:`RequestKind.batched`), or one exchange each."""
        if kind.crash_point is not None:
            crash_points.reached(kind.crash_point)
        if kind.batch is not None and kind.split is not None and kind.batched(version):
            reply = await self._pool.request(
                address, kind.api_key, version, kind.batch(bodies), timeout_s=self._timeout_s
            )
            return kind.split(bodies, reply)
        at_most = asyncio.Semaphore(self._settings.max_in_flight_per_broker)

        async def one(body: Any) -> Outcome:
            async with at_most:
                try:
                    reply = await self._pool.request(address, kind.api_key, version, body, timeout_s=self._timeout_s)
                except TieredError as exc:
                    return body, None, exc
                return body, reply, None

        return list(await asyncio.gather(*(one(b) for b in bodies)))


def _log_send_failure(kind: RequestKind, broker_id: int, bodies: list[Any], task: asyncio.Task[None]) -> None:
    """An exchange that died of an unexpected error (its requests time out and are retried)."""
    if task.cancelled() or task.exception() is None:
        return
    exc = task.exception()
    log.error(
        "controller.send_failed",
        request=kind.name,
        broker_id=broker_id,
        topics=len(bodies),
        topic_id=str(bodies[0]["topic_id"]),
        tiered_epoch=bodies[0].get("tiered_epoch"),
        error=type(exc).__name__,
        detail=str(exc),
        exc_info=exc,
    )
