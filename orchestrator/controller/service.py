"""The controller process: one active (holds the lease), any number of standbys.

Every controller serves the admin API over the Kafka protocol. Any controller answers the reads (Metadata,
DescribeConfigs, DescribeCluster) from its image, naming the active controller (the lease holder,
``"<node_id>@<host>:<port>"``); a standby forwards Kafka's admin writes to it (:mod:`orchestrator.admin_api`),
except while the lease still names the standby itself (it is stepping down or taking its tenure back: the write
would come back to it), and answers our own APIs with NOT_CONTROLLER (41), so clients and the CLI follow a failover
by themselves. The standby polls the lease every ttl/4, and just after the expiry of the lease it last saw if that
comes sooner (on a PostgreSQL store also as soon as a lease change or an append is notified, so a released lease is
taken at once); when the active controller stops renewing (killed, paused, partitioned) the lease expires and a
standby takes it at controller epoch + 1, catches its image up with the log's tail (the standby's follower keeps its
image current while it waits, so a takeover never replays the whole log), rebuilds every DISABLING topic's queue and
re-sends DisableRemoteTopic to every required broker (KIP-950 failure modes).

The active controller renews its lease every ttl/3. A renewal that fails retriably (the store busy, e.g. a lock
timeout behind a paused writer) is retried every ttl/10 for as long as the last good renewal leaves a third of
the TTL; a renewal refused (StaleControllerEpoch), or none by then, makes it step down at once: it stops sending
and drops its core; every append of a deposed controller is refused by the store anyway (DESIGN §4 invariant 6).

All calls into the (synchronous) ControllerCore run on ONE worker thread, so the core is never used
concurrently and the event loop never blocks on SQLite. Each call runs with the cycle collector paused
(:func:`~orchestrator.collector.run_as_burst`): a bulk alter or a batch of replies builds long-lived state, and
collections part way through it walk the whole unfrozen heap for nothing.

The active controller snapshots its image (:mod:`orchestrator.controller.snapshots`, ``[snapshots]`` settings):
a snapshot task checks every ``SNAPSHOT_CHECK_S`` whether one is due and writes it on a third worker thread with
its own store connection, from the core's current (immutable) image, fenced by its controller epoch; a fenced
write steps the controller down like a fenced append. Saving a snapshot deletes the log below the oldest one kept.

DisableRemoteTopic requests go out over one connection per broker (ConnectionPool). Each sender round coalesces
every topic due to a broker into one version 1 request (at most ``max_topics_per_request`` topics each), so a bulk
disablement costs O(brokers x rounds) exchanges, not O(topics x brokers); a broker that serves only version 0 (a
rolling upgrade, found by ApiVersions) gets one request per topic instead. At most ``max_in_flight_per_broker``
exchanges are in flight to a broker. All the outcomes of one exchange go back to the core in one call, so the
topics they complete become DISABLED in one append. DeleteRemotePartitions (a deleted topic's remote data) go out
one per topic, from the same sender rounds.

Every controller serves Prometheus metrics (:mod:`orchestrator.metrics`, ``[metrics]`` settings) on an HTTP port
of its own, written to the ready file as ``metrics_port``: DisableRemoteTopic exchanges by result and their latency,
disablement durations, and gauges read at scrape time from the image (topics per tiered state, fenced brokers),
the active controller's queues (``controller/metrics_view.py``) and the store's log end offset, read on a
connection of its own so a scrape never waits behind the core's writes.

No loop ends quietly (:mod:`orchestrator.supervision`): a lease round or a sender round that raises anything is
logged as ``controller.loop_failed`` with its cause and retried after a backoff. A lease round that fails while
active steps down first (a renewal that did not happen cannot be trusted to hold the lease); a sender that fails
``SENDER_FAILURES_BEFORE_STEP_DOWN`` rounds in a row steps down too, so the lease expires and a controller with a
fresh core (maybe this one) takes over. A DisableRemoteTopic exchange that dies of an unexpected error is logged as
``controller.send_failed`` (its request is retried once it times out). If the lease loop ends anyway, that is a
bug: ``controller.loop_crashed`` is logged, the controller stops and :func:`main` exits with status 1.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import json
import os
import random
import signal
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar, cast

import structlog

from orchestrator import crash_points
from orchestrator.admin_api import envelope, reads
from orchestrator.admin_api.authorization import node_access
from orchestrator.admin_api.forwarding import FORWARDED, Forwarder
from orchestrator.admin_api.refusals import refusal
from orchestrator.collector import run_as_burst
from orchestrator.controller.core import ControllerCore
from orchestrator.controller.disablement import (
    DisableOutcome,
    DisableRequestBody,
    batch_request,
    split_batch_response,
)
from orchestrator.controller.metrics_view import controller_view, disable_result, queue_view
from orchestrator.controller.snapshots import SnapshotWriter
from orchestrator.controller.topic_deletion import DeleteRemotePartitionsBody
from orchestrator.errors import (
    BrokerNotAvailable,
    CoordinatorNotAvailable,
    InvalidRequest,
    KafkaError,
    NotController,
    StaleControllerEpoch,
    TieredError,
)
from orchestrator.logging import configure_logging
from orchestrator.metadata.follower import MetadataFollower
from orchestrator.metadata.image import MetadataImage
from orchestrator.metadata.open import open_store, parse_store_spec, read_password
from orchestrator.metadata.store import Lease, MetadataStore
from orchestrator.metrics import ControllerMetrics, ControllerView, MetricsEndpoint
from orchestrator.net.admin import AdminClient
from orchestrator.net.connection import ConnectionPool, highest_common_version
from orchestrator.net.server import Handler, KafkaServer, served_versions
from orchestrator.net.tls import node_client_security, server_ssl_context
from orchestrator.private_files import restrict_process
from orchestrator.protocol import messages as m
from orchestrator.protocol.api_keys import ApiKey
from orchestrator.protocol.framing import Request
from orchestrator.settings import ControllerSettings, load_controller_settings
from orchestrator.supervision import log_loop_failure, log_loop_recovered, loop_backoff_s

log = structlog.get_logger(__name__)


T = TypeVar("T")
SENDER_INTERVAL_S = 0.1
SENDER_FAILURES_BEFORE_STEP_DOWN = 5  # a sender failing this many rounds in a row steps down (see the docstring)
SNAPSHOT_CHECK_S = 0.5  # how often the active controller checks whether a snapshot is due
READS = (ApiKey.METADATA, ApiKey.DESCRIBE_CONFIGS, ApiKey.DESCRIBE_CLUSTER)  # answered by any controller


def wall_ms() -> int:
    return int(time.time() * 1000)


STANDBY_EXPIRY_MARGIN_MS = 20  # a standby asks again this long after the lease it saw should have expired


def standby_pause_s(seen: Lease | None, now_ms: int, ttl_ms: int) -> float:
    """How long a standby waits before asking for the lease again: ttl/4, or, when the lease it saw expires
    sooner, just past that expiry, so a dead controller is replaced within the TTL plus a round, not plus ttl/4."""
    pause_ms = ttl_ms / 4
    if seen is not None:
        pause_ms = min(pause_ms, max(STANDBY_EXPIRY_MARGIN_MS, seen.expires_at_ms - now_ms + STANDBY_EXPIRY_MARGIN_MS))
    return pause_ms / 1000


def _by_broker(due: list[tuple[int, DisableRequestBody]]) -> dict[tuple[int, int], list[DisableRequestBody]]:
    """The due requests grouped by (broker id, broker epoch), in the order they came."""
    out: dict[tuple[int, int], list[DisableRequestBody]] = {}
    for broker_id, body in due:
        out.setdefault((broker_id, body["broker_epoch"]), []).append(body)
    return out


def _log_send_failure(broker_id: int, bodies: list[DisableRequestBody], task: asyncio.Task[None]) -> None:
    """A DisableRemoteTopic exchange that died of an unexpected error (its requests time out and are retried)."""
    if task.cancelled() or task.exception() is None:
        return
    exc = task.exception()
    log.error(
        "controller.send_failed",
        broker_id=broker_id,
        topics=len(bodies),
        topic_id=str(bodies[0]["topic_id"]),
        tiered_epoch=bodies[0]["tiered_epoch"],
        error=type(exc).__name__,
        detail=str(exc),
        exc_info=exc,
    )


def _tick_and_collect(
    core: ControllerCore,
) -> tuple[list[tuple[int, DisableRequestBody]], list[tuple[int, DeleteRemotePartitionsBody]]]:
    core.tick()
    return core.due_disable_requests(), core.due_remote_delete_requests()


class ControllerService:
    def __init__(self, settings: ControllerSettings, *, environ: Mapping[str, str] = os.environ) -> None:
        self.settings = settings
        password = read_password(settings.store, environ)
        open_ = functools.partial(
            open_store,
            settings.metadata_store,
            settings=settings.store,
            password=password,
            application_name=f"tieredctl-controller-{settings.node_id}",
        )
        self.store = open_()
        self.follower = MetadataFollower(self.store)  # the standby's view, for Metadata answers
        self.core: ControllerCore | None = None
        self.port = settings.port
        self.holder = ""
        self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="controller-core")
        # The lease has its own thread and connection: a renewal must never wait behind a long burst of core work,
        # or a busy controller would lose its lease to a standby for nothing.
        self.lease_store = open_(recover_on_open=False)
        self._lease_executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="lease")
        self._renewal_deadline = 0.0  # monotonic: a failed renewal is retried until then (see _lease_round)
        # Snapshots too: serializing a large image must delay neither the core's requests nor a lease renewal.
        self.snapshot_store = open_(recover_on_open=False)
        self._snapshot_executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="snapshot")
        self.metrics = ControllerMetrics()
        self.metrics.observe(self._metrics_view)
        self._open_store = open_
        self.metrics_store: MetadataStore | None = None  # run() opens it when the metrics are served
        self._metrics_endpoint: MetricsEndpoint | None = None
        self._lease_seen: Lease | None = None  # the lease as the last round read it (a standby's metrics)
        self._pool: ConnectionPool | None = None
        self._forwarder: Forwarder | None = None
        self._handlers: dict[int, Handler] = {}  # the admin API's handlers, behind the authorization gate
        self._stopping = asyncio.Event()
        self._sender_wake = asyncio.Event()
        self._rng = random.Random()
        self._active_tasks: list[asyncio.Task[None]] = []
        self._broker_slots: dict[int, asyncio.Semaphore] = {}
        self._in_flight: set[asyncio.Task[None]] = set()
        self.crashed_loop: str | None = None  # set when the lease loop ended while running: main() exits nonzero

    async def _on_core(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` on the core's thread as one burst: no automatic cycle collection part way through it."""
        return await asyncio.get_running_loop().run_in_executor(self._executor, functools.partial(run_as_burst, fn))

    async def _on_lease(self, fn: Callable[[], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._lease_executor, fn)

    async def _on_snapshot(self, fn: Callable[[], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._snapshot_executor, fn)

    # -- lifecycle --------------------------------------------------------------------------------------------

    async def run(self) -> None:
        structlog.contextvars.bind_contextvars(node_id=self.settings.node_id)
        api_keys = (
            *READS,
            *FORWARDED,
            ApiKey.DESCRIBE_TIERED_STATE,
            ApiKey.BROKER_REGISTRATION,
            ApiKey.BROKER_HEARTBEAT,
            ApiKey.UNREGISTER_BROKER,
        )
        authentication, gate = node_access(self.settings.security, self._current_image)
        self._handlers = gate.guard_all({key: self._admin(key) for key in api_keys})
        handlers = {
            **self._handlers,
            ApiKey.ENVELOPE: gate.guard(ApiKey.ENVELOPE, self._on_envelope),
            ApiKey.INIT_PRODUCER_ID: gate.guard(ApiKey.INIT_PRODUCER_ID, self._on_init_producer_id),
        }
        server = KafkaServer(
            name=f"controller-{self.settings.node_id}",
            host=self.settings.host,
            port=self.settings.port,
            handlers=handlers,
            ssl_context=server_ssl_context(self.settings.tls),
            authentication=authentication,
        )
        _, self.port = await server.start()
        if self.settings.metrics.enabled:
            # Scrapes read the log end offset on a connection of their own (never waiting behind the core's writes).
            self.metrics_store = await asyncio.to_thread(self._open_store, recover_on_open=False)
            metrics = self.settings.metrics
            self._metrics_endpoint = MetricsEndpoint.start(self.metrics.registry, host=metrics.host, port=metrics.port)
        self.holder = f"{self.settings.node_id}@{self.settings.host}:{self.port}"
        identity = node_client_security(self.settings.tls, self.settings.security)
        client_ssl = identity.ssl_context()  # read the certificate files once
        self._pool = ConnectionPool(ssl_context=client_ssl, sasl=identity.sasl)
        # A standby forwards admin writes to the active controller, which its own Metadata names (from the lease).
        own_address = [(self._reachable_host(), self.port)]
        self._forwarder = Forwarder(AdminClient(own_address, ssl_context=client_ssl, sasl=identity.sasl))
        if self.settings.ready_file:
            tmp = Path(self.settings.ready_file + ".tmp")
            metrics_port = self._metrics_endpoint.port if self._metrics_endpoint is not None else None
            ready = {"port": self.port, "pid": os.getpid(), "node_id": self.settings.node_id}
            tmp.write_text(json.dumps({**ready, "metrics_port": metrics_port}))
            tmp.replace(self.settings.ready_file)
        store = parse_store_spec(self.settings.metadata_store).location  # never the password
        log.info("controller.started", port=self.port, holder=self.holder, store=store)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._stopping.set)
        lease_task = asyncio.create_task(self._lease_loop(), name="lease")
        lease_task.add_done_callback(self._loop_ended)
        try:
            await self._stopping.wait()
        finally:
            lease_task.cancel()
            await asyncio.gather(lease_task, return_exceptions=True)
            await self._step_down("shutdown")
            await server.stop()
            if self._metrics_endpoint is not None:
                self._metrics_endpoint.close()
            await self._pool.close()
            await self._forwarder.close()
            self._executor.shutdown(wait=True)
            self._lease_executor.shutdown(wait=True)
            self._snapshot_executor.shutdown(wait=True)
            self.store.close()
            self.lease_store.close()
            self.snapshot_store.close()
            if self.metrics_store is not None:
                self.metrics_store.close()
            log.info("controller.stopped", crashed_loop=self.crashed_loop)

    def stop(self) -> None:
        self._stopping.set()

    def _loop_ended(self, task: asyncio.Task[None]) -> None:
        """The lease loop only ends when the controller stops it; one that ends otherwise would leave the
        controller serving but never active (or active and never renewing): log it and stop."""
        if self._stopping.is_set():
            return
        exc = None if task.cancelled() else task.exception()
        self.crashed_loop = task.get_name()
        error = "cancelled" if exc is None else type(exc).__name__
        log.critical("controller.loop_crashed", loop=task.get_name(), error=error, detail=str(exc or ""), exc_info=exc)
        self._stopping.set()

    async def _lease_loop(self) -> None:
        failures = 0
        while True:
            try:
                pause_s = await self._lease_round()
            except Exception as exc:
                failures += 1
                pause_s = min(loop_backoff_s(failures), self.settings.lease_ttl_ms / 1000)
                log_loop_failure("controller", "lease", exc, attempt=failures, retry_in_s=pause_s)
                await self._step_down(f"lease loop failed: {type(exc).__name__}")
            else:
                if failures:
                    log_loop_recovered("controller", "lease", failed_attempts=failures)
                    failures = 0
                if self.core is None and self.lease_store.notifies_changes:
                    # A standby wakes early on a lease change or an append (PostgreSQL's NOTIFY): a released lease
                    # is taken at once, and its image follows the log. Expiry is still found by the timeout.
                    wait = functools.partial(self.lease_store.wait_for_change, timeout_s=pause_s)
                    await self._on_lease(wait)
                    continue
            await asyncio.sleep(pause_s)

    async def _lease_round(self) -> float:
        """Take the lease (standby) or renew it (active); returns the pause before the next round, in seconds."""
        ttl = self.settings.lease_ttl_ms
        if self.core is None:
            lease = await self._on_lease(functools.partial(self._acquire_if_free, ttl))
            if lease is not None:
                await self._become_active(lease.controller_epoch)
                return ttl / 4000
            await self._on_core(self.follower.refresh)
            return standby_pause_s(self._lease_seen, wall_ms(), ttl)
        started = time.monotonic()
        try:
            await self._on_lease(self._renew_lease_factory(self.core.controller_epoch, ttl))
        except KafkaError as exc:
            # A retriable failure (the store busy: a lock timeout) is tried again while the last renewal still
            # holds the lease with a third of its TTL to spare; a refusal, or no renewal by then, steps down.
            if exc.retriable and not isinstance(exc, StaleControllerEpoch) and started < self._renewal_deadline:
                log.warning("controller.lease_renewal_failed", error=exc.name, detail=exc.message)
                return ttl / 10_000
            await self._step_down(f"lease renewal failed: {exc.name}")
            return ttl / 4000
        self._renewal_deadline = started + ttl / 1000 * 2 / 3
        return ttl / 3000

    def _acquire_if_free(self, ttl: int) -> Lease | None:
        """Take the lease if nobody else holds it unexpired. The read first is only a shortcut that spares the
        store's write lock while another controller is active; ``acquire_lease`` decides, under that lock."""
        current = self._lease_seen = self.lease_store.current_lease()
        if current is not None and current.holder != self.holder and not current.expired(wall_ms()):
            return None
        return self.lease_store.acquire_lease(holder=self.holder, now_ms=wall_ms(), ttl_ms=ttl)

    def _renew_lease_factory(self, epoch: int, ttl: int) -> Callable[[], object]:
        return lambda: self.lease_store.renew_lease(
            holder=self.holder, controller_epoch=epoch, now_ms=wall_ms(), ttl_ms=ttl
        )

    async def _become_active(self, epoch: int) -> None:
        settings = self.settings

        def new_core() -> ControllerCore:
            return ControllerCore(
                self.store,
                holder=self.holder,
                controller_epoch=epoch,
                now_ms=wall_ms,
                rng=self._rng,
                membership=settings.membership,
                topic_defaults=settings.topic_defaults,
                disablement=settings.disablement,
                metrics=self.metrics,
                follower=self.follower,  # current as of the last standby round: only the tail is replayed
            )

        self._renewal_deadline = time.monotonic() + settings.lease_ttl_ms / 1000 * 2 / 3
        self.core = await self._on_core(new_core)
        log.info("controller.active", controller_epoch=epoch)
        self._active_tasks = [
            asyncio.create_task(self._sender_loop(self.core), name="sender"),
            asyncio.create_task(self._snapshot_loop(self.core), name="snapshots"),
        ]

    async def _step_down(self, reason: str) -> None:
        if self.core is None:
            return
        log.warning("controller.step_down", reason=reason, controller_epoch=self.core.controller_epoch)
        self.core = None
        for t in self._active_tasks + list(self._in_flight):
            t.cancel()
        await asyncio.gather(*self._active_tasks, *self._in_flight, return_exceptions=True)
        self._active_tasks = []
        self._in_flight.clear()

    # -- snapshots --------------------------------------------------------------------------------------------

    async def _snapshot_loop(self, core: ControllerCore) -> None:
        """Write a snapshot of the core's image whenever one is due, while ``core`` is the active one."""
        settings, store = self.settings.snapshots, self.snapshot_store
        failures = 0
        pause_s = SNAPSHOT_CHECK_S
        writer: SnapshotWriter | None = None
        while self.core is core:
            await asyncio.sleep(pause_s)
            try:
                if writer is None:
                    writer = await self._on_snapshot(lambda: SnapshotWriter.resume(store, settings, now_ms=wall_ms))
                image = core.image  # immutable: read here, serialized on the snapshot thread
                if self.core is core and writer.due(image):
                    await self._on_snapshot(
                        functools.partial(writer.write, image, controller_epoch=core.controller_epoch)
                    )
            except StaleControllerEpoch as exc:
                await asyncio.shield(self._step_down(f"fenced: {exc.message}"))
                return
            except Exception as exc:
                failures += 1
                pause_s = loop_backoff_s(failures)  # the wait logged is the wait slept
                log_loop_failure("controller", "snapshots", exc, attempt=failures, retry_in_s=pause_s)
                continue
            if failures:
                log_loop_recovered("controller", "snapshots", failed_attempts=failures)
                failures = 0
            pause_s = SNAPSHOT_CHECK_S

    # -- the disablement sender -------------------------------------------------------------------------------

    async def _sender_loop(self, core: ControllerCore) -> None:
        failures = 0
        while self.core is core:
            try:
                due, remote_deletes = await self._on_core(lambda: _tick_and_collect(core))
            except StaleControllerEpoch as exc:
                await asyncio.shield(self._step_down(f"fenced: {exc.message}"))
                return
            except Exception as exc:
                failures += 1
                pause_s = loop_backoff_s(failures)
                log_loop_failure("controller", "sender", exc, attempt=failures, retry_in_s=pause_s)
                if failures >= SENDER_FAILURES_BEFORE_STEP_DOWN:
                    await asyncio.shield(self._step_down(f"the sender failed {failures} rounds in a row"))
                    return
                await asyncio.sleep(pause_s)
                continue
            if failures:
                log_loop_recovered("controller", "sender", failed_attempts=failures)
                failures = 0
            per_request = self.settings.disablement.max_topics_per_request
            for (broker_id, _), bodies in _by_broker(due).items():
                for start in range(0, len(bodies), per_request):
                    chunk = bodies[start : start + per_request]
                    task = asyncio.create_task(self._send_disable(core, broker_id, chunk))
                    self._in_flight.add(task)
                    task.add_done_callback(self._in_flight.discard)
                    task.add_done_callback(functools.partial(_log_send_failure, broker_id, chunk))
            for broker_id, delete_body in remote_deletes:
                delete_task = asyncio.create_task(self._send_remote_delete(core, broker_id, delete_body))
                self._in_flight.add(delete_task)
                delete_task.add_done_callback(self._in_flight.discard)
            # tick() and due() scan the whole queue on the core thread; 10 rounds a second keeps that cost small
            # next to the replies, and re-polls (disablement.repoll_ms) are coarser than this anyway. An admin
            # write (e.g. tiering off for many topics) wakes the sender at once instead.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._sender_wake.wait(), SENDER_INTERVAL_S)
            self._sender_wake.clear()

    async def _send_disable(self, core: ControllerCore, broker_id: int, bodies: list[DisableRequestBody]) -> None:
        """The requests due to one broker incarnation: one version 1 exchange carrying them all, or, to a broker
        that serves only version 0, one exchange per topic (at most ``max_in_flight_per_broker`` at a time). Every
        outcome goes back to the core in one call, so the topics they complete become DISABLED in one append."""
        limit = self.settings.disablement.max_in_flight_per_broker
        slots = self._broker_slots.setdefault(broker_id, asyncio.Semaphore(limit))
        async with slots:
            broker = core.image.brokers.get(broker_id)
            started = time.monotonic()
            version, exchanges = 0, 0
            try:
                if broker is None or not broker.endpoints:
                    raise BrokerNotAvailable(f"broker {broker_id} has no endpoint")  # recorded below, then retried
                ep = broker.endpoints[0]
                version = await self._disable_version((ep.host, ep.port))
                exchanges = 1 if version >= 1 else len(bodies)
                outcomes = await self._exchange_disable((ep.host, ep.port), version, bodies)
            except TieredError as exc:  # a Kafka error, or a reply that does not decode: retried the same way
                outcomes = [(b, None, exc) for b in bodies]
            results = [disable_result(response, error) for _, response, error in outcomes]
            self.metrics.disable_exchange_done(version, exchanges, results, time.monotonic() - started)
        if self.core is not core:
            return
        try:
            await self._on_core(lambda: core.on_disable_responses(broker_id, outcomes))
        except StaleControllerEpoch as exc:
            await self._step_down(f"fenced: {exc.message}")

    async def _disable_version(self, address: tuple[str, int]) -> int:
        """The highest DisableRemoteTopic version the broker and this controller both speak."""
        assert self._pool is not None
        timeout_s = self.settings.disablement.request_timeout_ms / 1000
        theirs = await self._pool.api_versions(address, timeout_s=timeout_s)  # negotiated once per connection
        ours = served_versions(ApiKey.DISABLE_REMOTE_TOPIC)
        return highest_common_version(ApiKey.DISABLE_REMOTE_TOPIC, ours, theirs)

    async def _exchange_disable(
        self, address: tuple[str, int], version: int, bodies: list[DisableRequestBody]
    ) -> list[DisableOutcome]:
        """Each body's outcome: one version 1 exchange carrying them all, or one version 0 exchange each."""
        assert self._pool is not None
        timeout_s = self.settings.disablement.request_timeout_ms / 1000
        crash_points.reached("controller.before_disable_send")
        if version >= 1:
            reply = await self._pool.request(
                address, ApiKey.DISABLE_REMOTE_TOPIC, version, batch_request(bodies), timeout_s=timeout_s
            )
            return split_batch_response(bodies, cast(m.DisableRemoteTopicResponse, reply))
        # A broker that predates version 1 (a rolling upgrade): one topic per request, concurrently.
        at_most = asyncio.Semaphore(self.settings.disablement.max_in_flight_per_broker)

        async def one(body: DisableRequestBody) -> DisableOutcome:
            async with at_most:
                try:
                    reply = await self._pool.request(  # type: ignore[union-attr]
                        address, ApiKey.DISABLE_REMOTE_TOPIC, 0, body, timeout_s=timeout_s
                    )
                except TieredError as exc:
                    return body, None, exc
                return body, cast(m.DisableRemoteTopicResponse, reply), None

        return list(await asyncio.gather(*(one(b) for b in bodies)))

    async def _send_remote_delete(self, core: ControllerCore, broker_id: int, body: DeleteRemotePartitionsBody) -> None:
        """One DeleteRemotePartitions exchange (a deleted topic's remote data), as :meth:`_send_disable`."""
        limit = self.settings.disablement.max_in_flight_per_broker
        slots = self._broker_slots.setdefault(broker_id, asyncio.Semaphore(limit))
        response: m.DeleteRemotePartitionsResponse | None = None
        error: TieredError | None = None
        async with slots:
            broker = core.image.brokers.get(broker_id)
            try:
                if broker is None or not broker.endpoints:
                    raise BrokerNotAvailable(f"broker {broker_id} has no endpoint")
                ep = broker.endpoints[0]
                assert self._pool is not None
                timeout_s = self.settings.disablement.request_timeout_ms / 1000
                reply = await self._pool.request(
                    (ep.host, ep.port), ApiKey.DELETE_REMOTE_PARTITIONS, 0, body, timeout_s=timeout_s
                )
                response = cast(m.DeleteRemotePartitionsResponse, reply)
            except TieredError as exc:
                error = exc
        if self.core is not core:
            return
        try:
            await self._on_core(lambda: core.on_remote_delete_response(broker_id, body, response, error))
        except StaleControllerEpoch as exc:
            await self._step_down(f"fenced: {exc.message}")

    # -- admin API --------------------------------------------------------------------------------------------

    def _admin(self, api_key: int) -> Handler:
        async def handle(request: Request) -> Mapping[str, object]:
            core = self.core
            body, version = request.body, request.header.api_version
            if api_key in READS:
                return await self._on_core(lambda: self._read(core, api_key, body, version))
            if core is None:
                if api_key in FORWARDED and self._forwarder is not None and not await self._holds_lease():
                    return await self._forwarder.forward(request)
                return refusal(api_key, version, body, NotController(self._who_is_active()))
            try:
                answer = await self._on_core(lambda: self._dispatch(core, api_key, body, version))
                self._sender_wake.set()  # the write may have made requests due: send them now, not at the tick
                return answer
            except StaleControllerEpoch as exc:
                await self._step_down(f"fenced: {exc.message}")
                return refusal(api_key, version, body, NotController(self._who_is_active()))

        return handle

    def _current_image(self) -> MetadataImage:
        """The image this controller decides with: the core's when active, the follower's when standby."""
        core = self.core
        return core.image if core is not None else self.follower.image

    def _reachable_host(self) -> str:
        """This controller's own address as a client dials it (a wildcard listener is reached on loopback)."""
        wildcards = {"0.0.0.0": "127.0.0.1", "": "127.0.0.1", "::": "::1"}
        return wildcards.get(self.settings.host, self.settings.host)

    async def _on_init_producer_id(self, request: Request) -> Mapping[str, object]:
        """InitProducerId, which a client may send to any node it knows (librdkafka sends it to the first it is
        connected to, often its bootstrap controller): passed on to a live broker, which allocates producer ids
        (:mod:`orchestrator.broker.producer_ids`), after this node's gate authorized the client. No live broker
        answering is COORDINATOR_NOT_AVAILABLE, which clients retry."""
        image = self._current_image()
        brokers = sorted((b for b in image.brokers.values() if b.endpoints and not b.fenced), key=lambda b: b.broker_id)
        last: TieredError | None = None
        for broker in brokers:
            ep = broker.endpoints[0]
            assert self._pool is not None
            try:
                timeout_s = self.settings.disablement.request_timeout_ms / 1000  # its bound on every call to a broker
                version = request.header.api_version
                return await self._pool.request(
                    (ep.host, ep.port), ApiKey.INIT_PRODUCER_ID, version, request.body, timeout_s=timeout_s
                )
            except TieredError as exc:
                last = exc
        detail = last.message if last is not None else "no live broker is registered"
        log.warning("controller.init_producer_id_unavailable", detail=detail)
        return {"error_code": CoordinatorNotAvailable.code, "producer_id": -1, "producer_epoch": -1}

    async def _on_envelope(self, request: Request) -> Mapping[str, object]:
        """A write another node forwarded (:mod:`orchestrator.admin_api.envelope`), served as its client's."""
        try:
            inner = envelope.unwrap(request.body)
        except InvalidRequest as exc:
            log.warning("controller.envelope_refused", sender=request.principal, reason=exc.message)
            return {"response_data": None, "error_code": exc.code}
        handler = self._handlers.get(inner.header.api_key)
        if inner.header.api_key not in FORWARDED or handler is None:
            log.warning("controller.envelope_refused", sender=request.principal, api_key=inner.header.api_key)
            return {"response_data": None, "error_code": InvalidRequest.code}
        return envelope.answer(inner, await handler(inner))

    def _read(
        self, core: ControllerCore | None, api_key: int, body: dict[str, Any], version: int
    ) -> Mapping[str, object]:
        """A read any node answers (:mod:`orchestrator.admin_api.reads`): from the core's image when active, from
        the follower's (refreshed) when standby. Runs on the core thread."""
        holder: str | None = self.holder  # the active controller holds the lease: no need to read it
        if core is not None:
            image = core.refresh()
        else:
            image, holder = self.follower.refresh(), reads.live_holder(self.store.current_lease(), wall_ms())
        view = reads.cluster_view(image, holder, cluster_id=self.settings.membership.cluster_id)
        if api_key == ApiKey.METADATA:
            return reads.metadata(image, cast(m.MetadataRequest, body), version, view)
        if api_key == ApiKey.DESCRIBE_CONFIGS:
            return reads.describe_configs(image, cast(m.DescribeConfigsRequest, body), version)
        return reads.describe_cluster(cast(m.DescribeClusterRequest, body), version, view)

    @staticmethod
    def _dispatch(core: ControllerCore, api_key: int, body: dict[str, Any], version: int) -> Mapping[str, object]:
        """Call the core's handler for ``api_key``. The codec decodes ``body`` by the api's schema, so it is cast
        here, once, to that request's type; the typed response goes back to the codec as it is."""
        response: Mapping[str, object]
        if api_key == ApiKey.CREATE_TOPICS:
            response = core.create_topics(cast(m.CreateTopicsRequest, body), version)
        elif api_key == ApiKey.DELETE_TOPICS:
            response = core.delete_topics(cast(m.DeleteTopicsRequest, body), version)
        elif api_key == ApiKey.CREATE_PARTITIONS:
            response = core.create_partitions(cast(m.CreatePartitionsRequest, body), version)
        elif api_key == ApiKey.INCREMENTAL_ALTER_CONFIGS:
            response = core.incremental_alter_configs(cast(m.IncrementalAlterConfigsRequest, body), version)
        elif api_key == ApiKey.ALTER_CONFIGS:
            response = core.alter_configs(cast(m.AlterConfigsRequest, body), version)
        elif api_key == ApiKey.DESCRIBE_TIERED_STATE:
            response = core.describe_tiered_state(cast(m.DescribeTieredStateRequest, body))
        elif api_key == ApiKey.BROKER_REGISTRATION:
            response = core.broker_registration(cast(m.BrokerRegistrationRequest, body))
        elif api_key == ApiKey.BROKER_HEARTBEAT:
            response = core.broker_heartbeat(cast(m.BrokerHeartbeatRequest, body))
        elif api_key == ApiKey.UNREGISTER_BROKER:
            response = core.unregister_broker(cast(m.UnregisterBrokerRequest, body))
        elif api_key == ApiKey.CREATE_ACLS:
            response = core.create_acls(cast(m.CreateAclsRequest, body), version)
        elif api_key == ApiKey.DESCRIBE_ACLS:
            response = core.describe_acls(cast(m.DescribeAclsRequest, body), version)
        elif api_key == ApiKey.DELETE_ACLS:
            response = core.delete_acls(cast(m.DeleteAclsRequest, body), version)
        elif api_key == ApiKey.ALTER_USER_SCRAM_CREDENTIALS:
            response = core.alter_user_scram_credentials(cast(m.AlterUserScramCredentialsRequest, body), version)
        elif api_key == ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS:
            response = core.describe_user_scram_credentials(cast(m.DescribeUserScramCredentialsRequest, body), version)
        else:  # pragma: no cover
            raise NotController(f"no handler for api key {api_key}")
        return response

    async def _holds_lease(self) -> bool:
        """Whether the lease names this controller although it has no core (it is stepping down, or taking its
        tenure back): its own Metadata would then name itself, so a write it forwarded would come back to it and
        wait behind itself. Such a write is refused with NOT_CONTROLLER instead, which clients retry."""
        lease = await self._on_lease(self.lease_store.current_lease)
        return lease is not None and lease.holder == self.holder and not lease.expired(wall_ms())

    def _who_is_active(self) -> str:
        lease = self.store.current_lease()
        if lease is None or lease.expired(wall_ms()):
            return "no controller is active right now; retry shortly"
        return f"the active controller is {lease.holder} (epoch {lease.controller_epoch})"

    # -- metrics ----------------------------------------------------------------------------------------------

    def _metrics_view(self) -> ControllerView:
        """What a scrape shows (on the scrape's thread): the core's image and queues (immutable, read once) when
        active, the follower's image and the last lease seen when standby."""
        core = self.core
        image = core.image if core is not None else self.follower.image
        queues, epoch = None, None
        if core is not None:
            epoch = core.controller_epoch
            stall_ms = self.settings.disablement.stall_threshold_ms
            queues = queue_view(core.queue, core.deletion_queue, now_ms=wall_ms(), stall_threshold_ms=stall_ms)
        elif self._lease_seen is not None:
            epoch = self._lease_seen.controller_epoch
        log_end = None
        if self.metrics_store is not None:
            try:
                log_end = self.metrics_store.end_offset()
            except TieredError as exc:
                log.debug("controller.metrics_log_end_unavailable", error=exc.name, detail=str(exc))
        return controller_view(image, queues=queues, controller_epoch=epoch, log_end_offset=log_end)


def main(settings_path: str) -> None:
    """Entry point of ``tieredctl controller start --config FILE``."""
    restrict_process()  # the store and everything else it writes: owner only
    configure_logging("service")
    crash_points.arm_from_env(os.environ)  # the fault suite's; a bad value stops the process here
    service = ControllerService(load_controller_settings(settings_path))
    asyncio.run(service.run())
    if service.crashed_loop is not None:  # exit status 1: a supervisor or an operator sees it
        raise SystemExit(
            f"controller {service.settings.node_id}: its {service.crashed_loop} loop crashed (controller.loop_crashed)"
        )
