"""The broker agent process: one per broker id.

It registers with the active controller (broker id, a fresh incarnation id per process start, and the address the
others reach it at: ``host`` and ``advertised_port``, else the bound port) and heart-beats
(:mod:`orchestrator.broker.controller_link`); tails the metadata log
from the shared store into its image (every ``metadata_poll_ms``; on a PostgreSQL store, on each append's
notification and at least every ``metadata_notified_poll_ms``); hosts its partitions' local logs; runs the
RemoteLogManager's copy, local retention and remote expiry for the partitions it leads; and serves, over the Kafka
protocol, DisableRemoteTopic (10950), DeleteRemotePartitions (10954: a deleted topic's remote data) and Kafka's data
plane: Produce, Fetch, ListOffsets and InitProducerId (:mod:`orchestrator.broker.data_plane`) and
OffsetForLeaderEpoch (:mod:`orchestrator.broker.epoch_end_offsets`), so Kafka's own producers (idempotent ones too)
and consumers read and write, across both tiers, and check their positions after a leader change.

Replication (:mod:`orchestrator.broker.replica_manager`): the broker fetches each partition it follows from its
leader and appends the leader's batches as they are (truncating a divergent tail first, KIP-101); as a leader it
serves its followers' fetches, derives the high watermark from its ISR (what consumers see, what acks=all waits for,
what may be tiered) and asks the controller to shrink and expand the ISR (AlterPartition). Only the leader copies to
remote storage and expires remote segments; a follower applies local retention against what the leader copied, and
its log start follows the leader's.

Kafka clients learn of the brokers from Metadata and send admin requests to any of them, so a broker serves the
admin API too (:mod:`orchestrator.admin_api`): Metadata, DescribeConfigs and DescribeCluster from its own image,
refreshed from the store before each answer (:mod:`orchestrator.broker.admin_reads`), and the admin writes
(CreateTopics, DeleteTopics, CreatePartitions, AlterConfigs, IncrementalAlterConfigs) forwarded to the active
controller, as Kafka's brokers do since KIP-590.

Partition directories follow the image (KIP-516/KIP-631; :mod:`orchestrator.broker.hosted_dirs`): a
directory whose topic id no longer exists, or whose name now belongs to another topic id, is stale: its log is
closed and it is moved to ``data_dir/stale/`` (never served), and removed ``stale_dir_retention_ms`` later (24 h
by default; the metadata loop looks at most once a minute). This happens before serving (start-up) and while
running, as soon as the image says so: the metadata round reconciles whenever the image's set of topic ids
changed, and a request that finds its partition's directory held by a deleted topic id of the same name
(deleted and re-created since the last round) reconciles at once instead of refusing with INCONSISTENT_TOPIC_ID.

Open logs: ``self.logs`` is shared with the RemoteLogManager and the DisableRemoteTopic handler. Every append,
read, roll and local retention runs under ``_log_lock``, and every open under ``_open_lock``; a log is closed and
dropped only under both, so closing never races an append, a fetch or a retention. A tiering pass copies to S3
outside ``_log_lock`` (an upload waiting on a slow S3 must not hold up produce and fetch): a copy whose log is
closed meanwhile fails on its moved files and is cleaned up as any failed copy. A delete-policy job moves a log's
start offset from its own thread, outside ``_log_lock``: each log's own lock keeps that apart from the rest. A log
is opened only for a topic id the newest image still has, so a request or loop holding an older image cannot
re-create a retired topic's directory: a request for a deleted topic id gets UNKNOWN_TOPIC_ID. A log whose
directory lost offsets the RLMM knows (a lost data directory) is rebuilt from the RLMM as it opens
(:mod:`orchestrator.broker.log_recovery`): it serves the remote tier and never hands out those offsets again.

Requests are fenced: DisableRemoteTopic with a broker epoch other than this process's current one was meant for
another incarnation and is refused with STALE_BROKER_EPOCH; the handler itself fences controller and tiered
epochs. Blocking work (S3, SQLite, segment files) runs in worker threads, never on the event loop.

Remote storage (:mod:`orchestrator.broker.remote_storage_setup`): ``[s3]`` and ``[rsm]`` make the
RemoteStorageManager (Aiven's object format, the key pairs' files read once at start) and its range reader with
the chunk cache, shared by the RemoteLogManager's copies and reads. The broker only reads the store: its RLMM
records go to the active controller (:mod:`orchestrator.broker.rlmm_appender`), so a frozen broker holds no lock.

Metrics (:mod:`orchestrator.metrics`, ``[metrics]``): a port of its own (``metrics_port`` in the ready file); S3
latency and errors, objects, segments and bytes deleted, and at scrape time the copy lag of the partitions it leads
(``broker/metrics_view.py``), its image's offset and the store's log end offset (on a connection of its own).

Background work never dies quietly:

* Each loop (heartbeat, metadata, tiering) runs under :func:`orchestrator.supervision.supervise`: a round that
  raises anything (an ``Exception``, not only our typed errors) is logged as ``broker.loop_failed`` with the loop,
  the error, its message and cause (and the traceback when the error is not one of ours), and the round is run
  again after a backoff; the first success after failures logs ``broker.loop_recovered`` and resets the backoff.
* Work per partition (opening a hosted partition's log, a tiering pass) fails alone: the partition is logged the
  same way with its topic id and partition, retried after its own backoff (:class:`RetryBackoff`), and the other
  partitions go on. So after a disk comes back, new partitions get their directory and copying to remote storage
  resumes, with no restart. The tiering round (chunked worker-thread hops, idle partitions passed every few
  rounds) is :mod:`orchestrator.broker.tiering_round`'s.
* Every backoff follows ONE declared policy, :data:`orchestrator.supervision.LOOP_RETRY_WAIT` (exponential with
  full jitter, capped); sleep and clock are injected.
* A loop task that ends anyway is a bug that would leave the broker half alive (registered and unfenced, doing
  nothing): it is logged as ``broker.loop_crashed`` with its exception and the broker stops; :func:`main` then
  exits with a nonzero status, and the controller fences the silent broker.

Disk errors: the local log turns an ``OSError`` into KAFKA_STORAGE_ERROR naming the partition's directory
(:mod:`orchestrator.broker.local_log`), answered for that partition (``broker.storage_error``). A disk that failed
or refuses writes (EIO, EROFS, ENOSPC...) halts the broker, as Kafka's does when its only log directory fails
(:mod:`orchestrator.broker.log_dir_failure`); any other OS error leaves the server going on.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import signal
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, cast

import structlog

from orchestrator import crash_points
from orchestrator.admin_api.authorization import node_access
from orchestrator.admin_api.forwarding import FORWARDED, Forwarder
from orchestrator.broker.admin_reads import BROKER_READS, answer_read
from orchestrator.broker.controller_link import ControllerLink, copy_state_messages, stale_broker_epoch
from orchestrator.broker.data_plane import DataPlane
from orchestrator.broker.disable_handler import DisableRemoteTopicHandler
from orchestrator.broker.epoch_end_offsets import EpochEndOffsets
from orchestrator.broker.fencing import ControllerEpochFence
from orchestrator.broker.hosted_dirs import HostedDirs
from orchestrator.broker.hosted_logs import HostedLogs
from orchestrator.broker.job_answers import answer_once_ended
from orchestrator.broker.job_registry import error_body
from orchestrator.broker.local_log import PartitionLog
from orchestrator.broker.log_dir_failure import LogDirFailureChannel, halt_now
from orchestrator.broker.metrics_view import broker_view
from orchestrator.broker.partition_dirs import (
    PartitionKey,
)
from orchestrator.broker.producer_ids import ProducerIdAllocator
from orchestrator.broker.remote_log_manager import RemoteLogManager
from orchestrator.broker.remote_partition_deleter import DeleteRemotePartitionsHandler
from orchestrator.broker.remote_storage_setup import remote_storage
from orchestrator.broker.replica_manager import ReplicaManager, alter_through
from orchestrator.broker.rlmm_appender import ControllerRlmmAppend, rlmm_write_client
from orchestrator.broker.rlmm_publisher import RemoteLogMetadataPublisher
from orchestrator.broker.tiering_round import TieringRound
from orchestrator.clock import wall_ms
from orchestrator.errors import (
    TieredError,
    UnknownTopicId,
)
from orchestrator.ids import Uuid
from orchestrator.logging import configure_logging
from orchestrator.metadata.follower import MetadataFollower
from orchestrator.metadata.image import MetadataImage, TopicImage
from orchestrator.metadata.image_changes import topics_with_new_partitions
from orchestrator.metadata.open import open_store_at_startup, parse_store_spec, read_password
from orchestrator.metadata.store import MetadataStore
from orchestrator.metrics import BrokerMetrics, BrokerView, MetricsEndpoint
from orchestrator.net.admin import AdminClient
from orchestrator.net.connection import ConnectionPool
from orchestrator.net.server import KafkaServer
from orchestrator.net.tls import metrics_ssl_context, node_client_security, server_ssl_context
from orchestrator.private_files import restrict_process
from orchestrator.protocol import messages as m
from orchestrator.protocol.api_keys import ApiKey
from orchestrator.protocol.framing import Request
from orchestrator.settings import BrokerSettings, load_broker_settings
from orchestrator.supervision import RetryBackoff, Sleep, log_loop_failure, log_loop_recovered, loop_wait, supervise
from remote_storage.rlmm import RemoteLogMetadataManager

log = structlog.get_logger(__name__)


class BrokerAgent:
    def __init__(
        self,
        settings: BrokerSettings,
        *,
        sleep: Sleep = asyncio.sleep,
        clock: Callable[[], float] = time.monotonic,
        wall_clock_ms: Callable[[], int] = wall_ms,
        environ: Mapping[str, str] = os.environ,
        halt: Callable[[int], None] = halt_now,
    ) -> None:
        self.settings = settings
        self._sleep = sleep
        self._clock = clock  # seconds: the backoff of partitions whose work failed
        self._wall_clock_ms = wall_clock_ms  # epoch ms: replicas' lag, the lease an admin read reports; the dirs' too
        self.controller_link = ControllerLink(
            settings,
            advertised_port=lambda: settings.advertised_port or self.port,
            image_offset=lambda: self.follower.image.offset,
            copy_states=lambda: copy_state_messages(self.rlm.copy_states()),
        )
        self.metrics = BrokerMetrics()
        # First, before anything is opened: a key file that cannot be read refuses the start (SettingsError).
        storage = remote_storage(settings.s3, settings.rsm, metrics=self.metrics.remote_storage)
        self.rsm = storage.rsm
        self._open_store = functools.partial(
            open_store_at_startup,
            settings.metadata_store,
            settings=settings.store,
            password=read_password(settings.store, environ),
            application_name=f"tieredctl-broker-{settings.broker_id}",
        )
        self.store = self._open_store()
        self.follower = MetadataFollower(self.store)
        self._rlmm_append = ControllerRlmmAppend(settings.broker_id, request_timeout_ms=settings.request_timeout_ms)
        self.rlmm = RemoteLogMetadataManager(self.store, append=self._rlmm_append)  # brokers never write the store
        self.metrics.observe(self._metrics_view)
        self.metrics_store: MetadataStore | None = None  # run() opens it when the metrics are served
        self._metrics_endpoint: MetricsEndpoint | None = None
        self.logs: dict[tuple[Uuid, int], PartitionLog] = {}
        self.data_dir = Path(settings.data_dir)
        self.rlm = RemoteLogManager(
            broker_id=settings.broker_id,
            rsm=self.rsm,
            rlmm=self.rlmm,
            logs=self.logs,
            image=lambda: self.follower.image,
            now_ms=wall_ms,
            reader=storage.reader,
            copy_stall_threshold_ms=settings.copy_stall_threshold_ms,
            abandoned_after_ms=2 * self._rlmm_append.wait_ms,
        )
        fence = ControllerEpochFence(self.store)  # one for every API a controller calls
        self.disable_handler = DisableRemoteTopicHandler(
            broker_id=settings.broker_id,
            store=self.store,
            rlm=self.rlm,
            logs=self.logs,
            refresh_image=self.follower.refresh,
            now_ms=wall_ms,
            data_dir=self.data_dir,
            fence=fence,
        )
        self.remote_delete_handler = DeleteRemotePartitionsHandler(
            broker_id=settings.broker_id,
            store=self.store,
            rlm=self.rlm,
            refresh_image=self.follower.refresh,
            now_ms=wall_ms,
            fence=fence,
        )
        self.server: KafkaServer | None = None
        self.port = settings.port
        self._stopping = asyncio.Event()
        self._log_lock = asyncio.Lock()
        self._open_lock = threading.Lock()  # the metadata loop and requests open logs from worker threads
        self.dirs = HostedDirs(
            data_dir=self.data_dir,
            broker_id=settings.broker_id,
            cluster_id=settings.cluster_id,
            logs=lambda: self.logs,
            newest_image=lambda: self.follower.image,
            open_lock=self._open_lock,
            log_lock=self._log_lock,
            stale_retention_ms=settings.stale_dir_retention_ms,
            clock=clock,
            wall_clock_ms=wall_clock_ms,
        )
        self._log_dir_failures = LogDirFailureChannel(Path(settings.data_dir), halt=halt)
        self.hosted = HostedLogs(
            settings,
            logs=lambda: self.logs,
            follower=self.follower,
            rlmm=self.rlmm,
            open_lock=self._open_lock,
            reconcile=self.dirs.reconcile,
            producer_snapshot=self.rlm.producer_snapshot,
            on_failure=self._log_dir_failures.report,
            incarnation_id=self.controller_link.incarnation_id,
        )
        self._open_log = self.hosted.open_log
        self._leader_log = self.hosted.leader_log
        self.data_plane = DataPlane(
            refresh_image=self.follower.refresh,
            leader_log=self._leader_log,
            rlm=self.rlm,
            log_lock=self._log_lock,
            now_ms=wall_clock_ms,
            producer_ids=ProducerIdAllocator(self.data_dir / "producer-ids.json", settings.broker_id).next_id,
            image=lambda: self.follower.image,
        )
        self.epoch_end_offsets = EpochEndOffsets(
            broker_id=settings.broker_id,
            refresh_image=self.follower.refresh,
            leader_log=self._leader_log,
            log_lock=self._log_lock,
        )
        self.replication: ReplicaManager | None = None  # run() starts it, with its connections to the brokers
        self.rlmm_publisher = RemoteLogMetadataPublisher.serving(self.data_plane, settings, self.store, self.follower)
        self.metrics.observe_rlmm_lag(self.rlmm_publisher.lag)
        self._loop_wait = loop_wait(settings.loop_retry_max_ms)
        self._open_retry: RetryBackoff[PartitionKey] = RetryBackoff(self._loop_wait)
        self._all_hosted_open: MetadataImage | None = None  # the image every hosted log was last found open for
        self._tiering_retry: RetryBackoff[PartitionKey] = RetryBackoff(self._loop_wait)
        self.tiering = TieringRound(
            broker_id=settings.broker_id,
            rlm=self.rlm,
            logs=self.logs,
            log_lock=self._log_lock,
            image=lambda: self.follower.image,
            data_plane=self.data_plane,
            retry=self._tiering_retry,
            idle_rounds=settings.tiering_idle_rounds,
            clock=self._clock,
            report=functools.partial(self._partition_outcome, "tiering", self._tiering_retry),
            on_round=self.metrics.tiering.round_done,
        )
        self.crashed_loop: str | None = None  # set when a loop ended while the broker ran: main() exits nonzero

    # -- lifecycle --------------------------------------------------------------------------------------------

    async def run(self) -> None:
        structlog.contextvars.bind_contextvars(broker_id=self.settings.broker_id)
        image = await asyncio.to_thread(self.follower.refresh)
        try:  # the start-up's own disk work: a failing disk halts the broker as a failure while it runs does
            dir_id, created = await asyncio.to_thread(self.dirs.open_data_dir)
            await asyncio.to_thread(self.dirs.reconcile, image)
        except OSError as exc:
            self._log_dir_failures.report(self.data_dir, exc)
            raise
        self.controller_link.log_dirs = (dir_id,)
        if created:
            log.info("broker.log_dir_created", directory=str(self.data_dir), directory_id=str(dir_id))
        identity = node_client_security(self.settings.tls, self.settings.security)
        client_ssl = identity.ssl_context()
        request_timeout_s = self.settings.request_timeout_ms / 1000
        forwarder = Forwarder(AdminClient(self.settings.controllers, ssl_context=client_ssl, sasl=identity.sasl))
        authentication, gate = node_access(self.settings.security, lambda: self.follower.image)
        # Forwarded writes are authorized by the controller, which the Envelope tells who the client is.
        guarded = gate.guard_all(
            {
                ApiKey.DISABLE_REMOTE_TOPIC: self._on_disable,
                ApiKey.DELETE_REMOTE_PARTITIONS: self._on_delete_remote_partitions,
                ApiKey.PRODUCE: self.data_plane.produce,
                ApiKey.FETCH: self.data_plane.fetch,
                ApiKey.LIST_OFFSETS: self.data_plane.list_offsets,
                ApiKey.INIT_PRODUCER_ID: self.data_plane.init_producer_id,
                ApiKey.OFFSET_FOR_LEADER_EPOCH: self.epoch_end_offsets.offset_for_leader_epoch,
                **{key: self._on_read for key in BROKER_READS},
            }
        )
        self.server = KafkaServer(
            name=f"broker-{self.settings.broker_id}",
            host=self.settings.host,
            port=self.settings.port,
            handlers={**guarded, **{key: forwarder.forward for key in FORWARDED}},
            ssl_context=server_ssl_context(self.settings.tls),
            authentication=authentication,
        )
        _, self.port = await self.server.start()
        if self.settings.metrics.enabled:
            # Scrapes read the log end offset on a connection of their own (never waiting behind a write).
            self.metrics_store = await asyncio.to_thread(self._open_store, recover_on_open=False)
            metrics = self.settings.metrics
            self._metrics_endpoint = MetricsEndpoint.start(
                self.metrics.registry, host=metrics.host, port=metrics.port, ssl_context=metrics_ssl_context(metrics)
            )
        self._write_ready_file()
        store = parse_store_spec(self.settings.metadata_store).location  # never the password
        incarnation = str(self.controller_link.incarnation_id)
        log.info("broker.started", port=self.port, incarnation_id=incarnation, store=store)
        controllers = AdminClient(
            self.settings.controllers, ssl_context=client_ssl, sasl=identity.sasl, timeout_s=request_timeout_s
        )
        loop = asyncio.get_running_loop()
        rlmm_writes = rlmm_write_client(self.settings.controllers, client_ssl, identity.sasl, request_timeout_s)
        self._rlmm_append.attach(loop, rlmm_writes)
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._stopping.set)
        heartbeats = functools.partial(self.controller_link.heartbeat_loop, controllers)  # restarted if it fails
        self.replication = ReplicaManager(
            broker_id=self.settings.broker_id,
            image=lambda: self.follower.image,
            logs=self.logs,
            open_log=self._open_log,
            log_lock=self._log_lock,
            replicas=self.data_plane.replicas,
            pool=ConnectionPool(ssl_context=client_ssl, sasl=identity.sasl),
            request_timeout_s=request_timeout_s,
            alter_isr=alter_through(self.controller_link, controllers),
            lag_max_ms=self.settings.replica_lag_time_max_ms,
            retry_max_ms=self.settings.loop_retry_max_ms,
            now_ms=self._wall_clock_ms,
            on_isr_change=self.metrics.replication.changed,
        )
        tasks = [
            self._start_loop("heartbeat", heartbeats, self.settings.heartbeat_interval_ms),
            self._start_loop(
                "metadata", self._metadata_round, self.settings.metadata_poll_ms, pause=self._wait_for_metadata
            ),
            self._start_loop("tiering", self.tiering.run, self.settings.tiering_interval_ms),
            self._start_loop("rlmm_publish", self.rlmm_publisher.publish_round, self.rlmm_publisher.interval_ms),
            self._start_loop("replication", self.replication.round, self.settings.metadata_poll_ms),
        ]
        try:
            await self._stopping.wait()
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await self.replication.close()
            await self.server.stop()
            if self._metrics_endpoint is not None:
                self._metrics_endpoint.close()
            await controllers.close()
            await self._rlmm_append.close()
            await forwarder.close()
            for plog in self.logs.values():
                plog.close()
            self.store.close()
            if self.metrics_store is not None:
                self.metrics_store.close()
            log.info("broker.stopped", crashed_loop=self.crashed_loop)

    def stop(self) -> None:
        self._stopping.set()

    def _start_loop(
        self,
        name: str,
        one_round: Callable[[], Awaitable[object]],
        interval_ms: int,
        *,
        pause: Callable[[float], Awaitable[object]] | None = None,
    ) -> asyncio.Task[Any]:
        interval_s = interval_ms / 1000
        loop = supervise(
            name,
            one_round,
            component="broker",
            interval_s=interval_s,
            sleep=self._sleep,
            wait=self._loop_wait,
            pause=pause,
        )
        task: asyncio.Task[Any] = asyncio.create_task(loop, name=name)
        task.add_done_callback(self._loop_ended)
        return task

    def _loop_ended(self, task: asyncio.Task[Any]) -> None:
        """A loop only ends when the broker stops it; one that ends otherwise is a bug. The broker must not go on
        half alive (registered, unfenced, doing nothing), so it logs ``broker.loop_crashed`` and stops."""
        if task.cancelled():
            if self._stopping.is_set():
                return
            exc: BaseException | None = None
        else:
            exc = task.exception()
        if self.crashed_loop is None:
            self.crashed_loop = task.get_name()
        error = "cancelled" if exc is None else type(exc).__name__
        log.critical("broker.loop_crashed", loop=task.get_name(), error=error, detail=str(exc or ""), exc_info=exc)
        self._stopping.set()

    def _write_ready_file(self) -> None:
        if self.settings.ready_file:
            tmp = Path(self.settings.ready_file + ".tmp")
            metrics_port = self._metrics_endpoint.port if self._metrics_endpoint is not None else None
            ready = {"port": self.port, "pid": os.getpid(), "broker_id": self.settings.broker_id}
            tmp.write_text(json.dumps({**ready, "metrics_port": metrics_port}))
            tmp.replace(self.settings.ready_file)

    def _metrics_view(self) -> BrokerView:
        """What a scrape shows (on the scrape's thread): the image, the copy lag, the log end read now."""
        image = self.follower.image
        log_end = None
        if self.metrics_store is not None:
            try:
                log_end = self.metrics_store.end_offset()
            except TieredError as exc:
                log.debug("broker.metrics_log_end_unavailable", error=exc.name, detail=str(exc))
        lag = self.rlm.copy_lag()
        return broker_view(image, broker_id=self.settings.broker_id, copy_lag=lag, log_end_offset=log_end)

    # -- loops ------------------------------------------------------------------------------------------------

    async def _wait_for_metadata(self, poll_s: float) -> None:
        """Between metadata rounds: sleep the poll interval, or, on a store that notifies appends (PostgreSQL),
        wait for a notification, at most ``metadata_notified_poll_ms`` (a missed one costs that much latency).
        The wait blocks a worker thread; cancelled at shutdown, it ends within the store's listen slice."""
        if not self.store.notifies_changes:
            await self._sleep(poll_s)
            return
        timeout_s = max(poll_s, self.settings.metadata_notified_poll_ms / 1000)
        await asyncio.to_thread(functools.partial(self.store.wait_for_change, timeout_s=timeout_s))

    async def _metadata_round(self) -> None:
        """Catch the image up with the metadata log; retire the partitions it no longer has (closing their logs,
        moving their directories aside); open the log of every hosted partition not open yet; remove moved-aside
        directories past their retention. A directory that cannot be moved fails the round (logged and retried by
        the supervisor) but not the opening of the other partitions' logs."""
        image = await asyncio.to_thread(self.follower.refresh)
        try:
            await self.dirs.reconcile_if_topics_changed(image)
        finally:
            await self._open_hosted_logs(image)
        await self.dirs.remove_expired_stale()

    async def _open_hosted_logs(self, image: MetadataImage) -> None:
        """Open every hosted partition's log not open yet. Logs close only when the image drops their partition, and
        images are immutable and copy-on-write, so only what changed since the last image every hosted log was found
        open for is looked at: nothing when the image is that one, and otherwise only the topics whose partitions are
        not the very same map as then (new topics, partitions added, replicas moved). A change of thousands of
        topics' tiered state (a bulk disablement) looks at no partition at all."""
        opened = self._all_hosted_open
        if image is opened:
            return
        before: Mapping[Uuid, TopicImage] = opened.topics if opened is not None else {}
        broker_id, logs = self.settings.broker_id, self.logs
        not_open: list[tuple[Uuid, int]] = []
        for topic in topics_with_new_partitions(before, image.topics):  # the others had every hosted log open
            tid = topic.topic_id
            not_open += [
                (tid, p.partition_id)
                for p in topic.partitions.values()
                if broker_id in p.replicas and (tid, p.partition_id) not in logs
            ]
        self._open_retry.forget_all_but(not_open)  # e.g. a log that a produce opened meanwhile
        if not_open:
            await asyncio.to_thread(self.rlmm.refresh)  # once for every log opened below
        for key in not_open:
            open_log = functools.partial(asyncio.to_thread, self._open_hosted_log, image, *key)
            await self._partition_work("metadata", self._open_retry, key, open_log)
        if all(key in self.logs for key in not_open):
            self._all_hosted_open = image

    def _open_hosted_log(self, image: MetadataImage, topic_id: Uuid, partition: int) -> None:
        try:
            self._open_log(image, topic_id, partition, refresh_rlmm=False)
        except UnknownTopicId:
            return  # deleted since this round's image was read: nothing to open, nothing failed

    async def _partition_work(
        self,
        loop: str,
        retry: RetryBackoff[PartitionKey],
        key: PartitionKey,
        work: Callable[[], Awaitable[object]],
    ) -> None:
        """Run one partition's share of a loop's round if it is due (:meth:`_partition_outcome`)."""
        if not retry.due(key, now=self._clock()):
            return
        failure: Exception | None = None
        try:
            await work()
        except Exception as exc:
            failure = exc
        self._partition_outcome(loop, retry, key, failure)

    def _partition_outcome(
        self, loop: str, retry: RetryBackoff[PartitionKey], key: PartitionKey, failure: Exception | None
    ) -> None:
        """A failure is logged and backed off for this partition alone, so the round goes on with the others; the
        first success after failures is logged as a recovery."""
        if failure is not None:
            attempt, delay = retry.failed(key, now=self._clock())
            where = {"topic_id": str(key[0]), "partition": key[1]}
            log_loop_failure("broker", loop, failure, attempt=attempt, retry_in_s=delay, **where)
            return
        failed_attempts = retry.succeeded(key)
        if failed_attempts:
            log_loop_recovered("broker", loop, topic_id=str(key[0]), partition=key[1], failed_attempts=failed_attempts)

    # -- request handlers -------------------------------------------------------------------------------------

    async def _on_read(self, request: Request) -> Mapping[str, object]:
        """Metadata, DescribeConfigs, DescribeCluster from this broker's image, caught up with the store first (a
        write the controller acknowledged is in the answer); :mod:`orchestrator.admin_api.reads`."""
        return await asyncio.to_thread(self._read, request)

    def _read(self, request: Request) -> Mapping[str, object]:
        image = self.follower.refresh()
        lease, now = self.store.current_lease(), self._wall_clock_ms()
        return answer_read(request, image=image, lease=lease, now_ms=now, cluster_id=self.settings.cluster_id)

    async def _on_disable(self, request: Request) -> m.DisableRemoteTopicResponse:
        body = cast(m.DisableRemoteTopicRequest, request.body)
        if (stale := stale_broker_epoch(body["broker_epoch"], self.controller_link.broker_epoch)) is not None:
            return error_body(stale, m.DisableRemoteTopicResponse)
        # Version 1: many topics in one request, each answered in its own entry.
        handle = self.disable_handler.handle_topics if request.header.api_version >= 1 else self.disable_handler.handle
        return await answer_once_ended(
            functools.partial(handle, body), self.disable_handler.on_job_end, wait_s=self._job_answer_wait_s
        )

    async def _on_delete_remote_partitions(self, request: Request) -> m.DeleteRemotePartitionsResponse:
        body = cast(m.DeleteRemotePartitionsRequest, request.body)
        if (stale := stale_broker_epoch(body["broker_epoch"], self.controller_link.broker_epoch)) is not None:
            return error_body(stale, m.DeleteRemotePartitionsResponse)
        return await answer_once_ended(
            functools.partial(self.remote_delete_handler.handle, body),
            self.remote_delete_handler.on_job_end,
            wait_s=self._job_answer_wait_s,
        )

    @property
    def _job_answer_wait_s(self) -> float:
        return self.settings.job_answer_wait_ms / 1000


def main(settings_path: str) -> None:
    """Entry point of ``tieredctl broker start --config FILE``."""
    restrict_process()  # segment files, partition metadata, the store: owner only
    configure_logging("service")
    crash_points.arm_from_env(os.environ)  # the fault suite's; a bad value stops the process here
    agent = BrokerAgent(load_broker_settings(settings_path))
    asyncio.run(agent.run())
    if agent.crashed_loop is not None:  # exit status 1: a supervisor or an operator sees it, the controller fences it
        raise SystemExit(
            f"broker {agent.settings.broker_id}: its {agent.crashed_loop} loop crashed (broker.loop_crashed)"
        )
