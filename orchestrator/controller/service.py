"""The controller process: one active (holds the lease), any number of standbys. This module wires the rooms that
do the work and runs their lifecycle:

* ``admin_dispatch.py``: the admin API every controller serves (reads from its image; writes on the active core,
  or forwarded to it by a standby; our own APIs by the active controller alone).
* ``lease.py``: the election. A standby that takes the lease (at controller epoch + 1) becomes active: it catches
  its image up with the log's tail (the standby's follower keeps its image current while it waits, so a takeover
  never replays the whole log), rebuilds every DISABLING topic's queue and re-sends DisableRemoteTopic to every
  required broker (KIP-950 failure modes). An active controller whose lease can no longer be trusted steps down
  at once: it stops sending and drops its core (every append of a deposed controller is refused by the store
  anyway: ARCHITECTURE §4 invariant 6).
* ``sender.py``: while active, every request the core's queues make due goes out to the brokers.
* ``snapshot_loop.py``: while active, snapshots of the core's image.

All calls into the (synchronous) ControllerCore run on ONE worker thread, so the core is never used
concurrently and the event loop never blocks on SQLite. Each call runs with the cycle collector paused
(:func:`~orchestrator.collector.run_as_burst`): a bulk alter or a batch of replies builds long-lived state, and
collections part way through it walk the whole unfrozen heap for nothing.

Every controller serves Prometheus metrics (:mod:`orchestrator.metrics`, ``[metrics]`` settings) on an HTTP port
of its own, written to the ready file as ``metrics_port``: DisableRemoteTopic exchanges by result and their latency,
disablement durations, and gauges read at scrape time from the image (topics per tiered state, fenced brokers),
the active controller's queues (``controller/metrics_view.py``) and the store's log end offset, read on a
connection of its own so a scrape never waits behind the core's writes.

No loop ends quietly (:mod:`orchestrator.supervision`): a lease round, a sender round or a snapshot round that
raises anything is logged as ``controller.loop_failed`` with its cause and retried after a backoff. A lease round
that fails while active steps down first (a renewal that did not happen cannot be trusted to hold the lease). If
the lease loop ends anyway, that is a bug: ``controller.loop_crashed`` is logged, the controller stops and
:func:`main` exits with status 1.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import json
import os
import random
import signal
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TypeVar

import structlog

from orchestrator import crash_points
from orchestrator.admin_api.authorization import node_access
from orchestrator.admin_api.forwarding import Forwarder
from orchestrator.clock import wall_ms
from orchestrator.collector import run_as_burst
from orchestrator.errors import TieredError
from orchestrator.logging import configure_logging
from orchestrator.metadata.follower import MetadataFollower
from orchestrator.metadata.open import open_store_at_startup, parse_store_spec, read_password
from orchestrator.metadata.store import MetadataStore
from orchestrator.metrics import ControllerMetrics, ControllerView, MetricsEndpoint
from orchestrator.net.admin import AdminClient
from orchestrator.net.connection import ConnectionPool
from orchestrator.net.server import KafkaServer
from orchestrator.net.tls import metrics_ssl_context, node_client_security, server_ssl_context
from orchestrator.private_files import restrict_process
from orchestrator.protocol.api_keys import ApiKey
from orchestrator.settings import ControllerSettings, load_controller_settings
from orchestrator.supervision import log_loop_failure, log_loop_recovered, loop_backoff_s

from .admin_dispatch import AdminEndpoint
from .core import ControllerCore
from .lease import LeaseElection
from .metrics_view import controller_view, queue_view
from .sender import Sender
from .snapshot_loop import SnapshotLoop

log = structlog.get_logger(__name__)

T = TypeVar("T")


class ControllerService:
    def __init__(self, settings: ControllerSettings, *, environ: Mapping[str, str] = os.environ) -> None:
        self.settings = settings
        password = read_password(settings.store, environ)
        open_ = functools.partial(
            open_store_at_startup,
            settings.metadata_store,
            settings=settings.store,
            password=password,
            application_name=f"tieredctl-controller-{settings.node_id}",
        )
        self.store = open_()
        self.follower = MetadataFollower(self.store)  # the standby's view, for Metadata answers
        self.core: ControllerCore | None = None
        self.port = settings.port
        self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="controller-core")
        # The lease and the snapshots have their own threads and store connections (see their modules).
        self.lease = LeaseElection(open_(recover_on_open=False), ttl_ms=settings.lease_ttl_ms)
        self.snapshots = SnapshotLoop(open_(recover_on_open=False), settings.snapshots, host=self)
        self.metrics = ControllerMetrics()
        self.metrics.observe(self._metrics_view)
        self._open_store = open_
        self.metrics_store: MetadataStore | None = None  # run() opens it when the metrics are served
        self._metrics_endpoint: MetricsEndpoint | None = None
        self.admin = AdminEndpoint(
            settings,
            store=self.store,
            follower=self.follower,
            lease=self.lease,
            host=self,
            wrote=self._wake_sender,
        )
        self.sender: Sender | None = None  # run() starts it once it can reach the brokers
        self._stopping = asyncio.Event()
        self._rng = random.Random()
        self._active_tasks: list[asyncio.Task[None]] = []
        self.crashed_loop: str | None = None  # set when the lease loop ended while running: main() exits nonzero

    @property
    def lease_store(self) -> MetadataStore:
        return self.lease.store

    @property
    def snapshot_store(self) -> MetadataStore:
        return self.snapshots.store

    def active_core(self) -> ControllerCore | None:
        return self.core

    def _wake_sender(self) -> None:
        if self.sender is not None:
            self.sender.wake()

    async def on_core(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` on the core's thread as one burst: no automatic cycle collection part way through it."""
        return await asyncio.get_running_loop().run_in_executor(self._executor, functools.partial(run_as_burst, fn))

    # -- lifecycle --------------------------------------------------------------------------------------------

    async def run(self) -> None:
        structlog.contextvars.bind_contextvars(node_id=self.settings.node_id)
        authentication, gate = node_access(self.settings.security, self.admin.current_image)
        guarded = gate.guard_all({key: self.admin.handler(key) for key in self.admin.api_keys()})
        handlers = {
            **guarded,
            ApiKey.ENVELOPE: gate.guard(ApiKey.ENVELOPE, self.admin.on_envelope),
            ApiKey.INIT_PRODUCER_ID: gate.guard(ApiKey.INIT_PRODUCER_ID, self.admin.on_init_producer_id),
            ApiKey.APPEND_REMOTE_LOG_METADATA: gate.guard(
                ApiKey.APPEND_REMOTE_LOG_METADATA, self.admin.on_append_remote_log_metadata
            ),
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
            self._metrics_endpoint = MetricsEndpoint.start(
                self.metrics.registry, host=metrics.host, port=metrics.port, ssl_context=metrics_ssl_context(metrics)
            )
        self.lease.holder = f"{self.settings.node_id}@{self.settings.host}:{self.port}"
        identity = node_client_security(self.settings.tls, self.settings.security)
        client_ssl = identity.ssl_context()  # read the certificate files once
        pool = ConnectionPool(ssl_context=client_ssl, sasl=identity.sasl)
        self.sender = Sender(self.settings.disablement, pool, self.metrics, host=self)
        # A standby forwards admin writes to the active controller, which its own Metadata names (from the lease).
        own_address = [(self._reachable_host(), self.port)]
        forwarder = Forwarder(AdminClient(own_address, ssl_context=client_ssl, sasl=identity.sasl))
        self.admin.serve(pool, forwarder, guarded)
        self._write_ready_file()
        store = parse_store_spec(self.settings.metadata_store).location  # never the password
        log.info("controller.started", port=self.port, holder=self.lease.holder, store=store)
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
            await self.step_down("shutdown")
            await server.stop()
            if self._metrics_endpoint is not None:
                self._metrics_endpoint.close()
            await pool.close()
            await forwarder.close()
            self._executor.shutdown(wait=True)
            self.lease.close()
            self.snapshots.close()
            self.store.close()
            if self.metrics_store is not None:
                self.metrics_store.close()
            log.info("controller.stopped", crashed_loop=self.crashed_loop)

    def stop(self) -> None:
        self._stopping.set()

    def _reachable_host(self) -> str:
        """This controller's own address as a client dials it (a wildcard listener is reached on loopback)."""
        wildcards = {"0.0.0.0": "127.0.0.1", "": "127.0.0.1", "::": "::1"}
        return wildcards.get(self.settings.host, self.settings.host)

    def _write_ready_file(self) -> None:
        if not self.settings.ready_file:
            return
        tmp = Path(self.settings.ready_file + ".tmp")
        metrics_port = self._metrics_endpoint.port if self._metrics_endpoint is not None else None
        ready = {"port": self.port, "pid": os.getpid(), "node_id": self.settings.node_id}
        tmp.write_text(json.dumps({**ready, "metrics_port": metrics_port}))
        tmp.replace(self.settings.ready_file)

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

    # -- the election -----------------------------------------------------------------------------------------

    async def _lease_loop(self) -> None:
        failures = 0
        while True:
            try:
                pause_s = await self._lease_round()
            except Exception as exc:
                failures += 1
                pause_s = min(loop_backoff_s(failures), self.settings.lease_ttl_ms / 1000)
                log_loop_failure("controller", "lease", exc, attempt=failures, retry_in_s=pause_s)
                await self.step_down(f"lease loop failed: {type(exc).__name__}")
            else:
                if failures:
                    log_loop_recovered("controller", "lease", failed_attempts=failures)
                    failures = 0
                if self.core is None and self.lease.notifies_changes:
                    # A standby wakes early on a lease change or an append (PostgreSQL's NOTIFY): a released lease
                    # is taken at once, and its image follows the log. Expiry is still found by the timeout.
                    await self.lease.wait_for_change(pause_s)
                    continue
            await asyncio.sleep(pause_s)

    async def _lease_round(self) -> float:
        """Take the lease (standby) or renew it (active); returns the pause before the next round, in seconds."""
        if self.core is None:
            lease = await self.lease.take()
            if lease is not None:
                await self._become_active(lease.controller_epoch)
                return self.settings.lease_ttl_ms / 4000
            await self.on_core(self.follower.refresh)
            return self.lease.standby_pause_s()
        renewal = await self.lease.renew(self.core.controller_epoch)
        if renewal.lost is not None:
            await self.step_down(renewal.lost)
        return renewal.pause_s

    async def _become_active(self, epoch: int) -> None:
        settings = self.settings

        def new_core() -> ControllerCore:
            return ControllerCore(
                self.store,
                holder=self.lease.holder,
                controller_epoch=epoch,
                now_ms=wall_ms,
                rng=self._rng,
                membership=settings.membership,
                topic_defaults=settings.topic_defaults,
                disablement=settings.disablement,
                metrics=self.metrics,
                follower=self.follower,  # current as of the last standby round: only the tail is replayed
                remote_log_metadata=settings.remote_log_metadata,
            )

        self.core = await self.on_core(new_core)
        log.info("controller.active", controller_epoch=epoch)
        assert self.sender is not None  # the lease loop starts once the sender exists
        self._active_tasks = [
            asyncio.create_task(self.sender.run(self.core), name="sender"),
            asyncio.create_task(self.snapshots.run(self.core), name="snapshots"),
        ]

    async def step_down(self, reason: str) -> None:
        if self.core is None:
            return
        log.warning("controller.step_down", reason=reason, controller_epoch=self.core.controller_epoch)
        self.core = None
        exchanges = self.sender.exchanges_in_flight() if self.sender is not None else []
        for t in self._active_tasks + exchanges:
            t.cancel()
        await asyncio.gather(*self._active_tasks, *exchanges, return_exceptions=True)
        self._active_tasks = []

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
        elif self.lease.seen is not None:
            epoch = self.lease.seen.controller_epoch
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
