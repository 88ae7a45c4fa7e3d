"""The broker agent process: one per broker id.

It registers with the active controller (broker id, a fresh incarnation id per process start) and heart-beats;
tails the metadata log from the shared store into its image; hosts its partitions' local logs; runs the
RemoteLogManager's copy, local retention and remote expiry for the partitions it leads; and serves, over the
Kafka protocol, DisableRemoteTopic (10950) plus our data-plane TieredProduce (10952) and TieredFetch (10953).

Startup reconciliation (KIP-516/KIP-631): before serving, every partition directory under ``data_dir`` is
checked against the replayed metadata; a directory whose topic id no longer exists, or whose name now belongs
to another topic id, is stale: it is moved to ``data_dir/stale/`` (kept for the operator, never served).

Requests are fenced: DisableRemoteTopic with a broker epoch other than this process's current one was meant for
another incarnation and is refused with STALE_BROKER_EPOCH; the handler itself fences controller and tiered
epochs. Blocking work (S3, SQLite, segment files) runs in worker threads, never on the event loop.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import time
from pathlib import Path
from typing import TypeVar, cast

import structlog

from orchestrator.broker.disable_handler import DisableRemoteTopicHandler
from orchestrator.broker.local_log import LogConfig, PartitionLog, read_partition_metadata
from orchestrator.broker.remote_log_manager import RemoteLogManager
from orchestrator.errors import (
    NotLeaderOrFollower,
    StaleBrokerEpoch,
    TieredError,
    UnknownTopicId,
    as_wire_error,
)
from orchestrator.ids import Uuid
from orchestrator.logging import configure_logging
from orchestrator.metadata.follower import MetadataFollower
from orchestrator.metadata.image import MetadataImage
from orchestrator.metadata.sqlite import SqliteMetadataStore
from orchestrator.net.admin import AdminClient
from orchestrator.net.server import KafkaServer
from orchestrator.net.tls import client_ssl_context, server_ssl_context
from orchestrator.protocol import messages as m
from orchestrator.protocol.api_keys import ApiKey
from orchestrator.protocol.framing import Request
from orchestrator.settings import BrokerSettings, load_broker_settings
from remote_storage.rlmm import RemoteLogMetadataManager
from remote_storage.s3 import S3RemoteStorage, make_s3_client

log = structlog.get_logger(__name__)


def now_ms() -> int:
    return int(time.time() * 1000)


# The responses this broker serves; each carries error_code and error_message.
_Response = TypeVar("_Response", m.DisableRemoteTopicResponse, m.TieredProduceResponse, m.TieredFetchResponse)


def _error_body(exc: TieredError, response: type[_Response]) -> _Response:
    """What a request answers for ``exc``: its Kafka code (a storage failure is KAFKA_STORAGE_ERROR)."""
    wire = as_wire_error(exc)
    return response(error_code=wire.code, error_message=wire.message)


class BrokerAgent:
    def __init__(self, settings: BrokerSettings) -> None:
        self.settings = settings
        self.incarnation_id = Uuid.random()
        self.broker_epoch = -1
        self.store = SqliteMetadataStore(settings.metadata_store)
        self.follower = MetadataFollower(self.store)
        self.rlmm = RemoteLogMetadataManager(self.store)
        client = make_s3_client(endpoint_url=settings.s3.endpoint_url, region=settings.s3.region)
        self.rsm = S3RemoteStorage(client=client, bucket=settings.s3.bucket, prefix=settings.s3.prefix)
        self.logs: dict[tuple[Uuid, int], PartitionLog] = {}
        self.data_dir = Path(settings.data_dir)
        self.rlm = RemoteLogManager(
            broker_id=settings.broker_id,
            rsm=self.rsm,
            rlmm=self.rlmm,
            logs=self.logs,
            image=lambda: self.follower.image,
            now_ms=now_ms,
        )
        self.disable_handler = DisableRemoteTopicHandler(
            broker_id=settings.broker_id,
            store=self.store,
            rlm=self.rlm,
            logs=self.logs,
            refresh_image=self.follower.refresh,
            now_ms=now_ms,
        )
        self.server: KafkaServer | None = None
        self.port = settings.port
        self._stopping = asyncio.Event()
        self._log_lock = asyncio.Lock()

    # -- lifecycle --------------------------------------------------------------------------------------------

    async def run(self) -> None:
        structlog.contextvars.bind_contextvars(broker_id=self.settings.broker_id)
        image = await asyncio.to_thread(self.follower.refresh)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        await asyncio.to_thread(self.reconcile_partition_dirs, image)
        self.server = KafkaServer(
            name=f"broker-{self.settings.broker_id}",
            host=self.settings.host,
            port=self.settings.port,
            handlers={
                ApiKey.DISABLE_REMOTE_TOPIC: self._on_disable,
                ApiKey.TIERED_PRODUCE: self._on_produce,
                ApiKey.TIERED_FETCH: self._on_fetch,
            },
            ssl_context=server_ssl_context(self.settings.tls),
        )
        _, self.port = await self.server.start()
        self._write_ready_file()
        log.info("broker.started", port=self.port, incarnation_id=str(self.incarnation_id))
        client_ssl = client_ssl_context(self.settings.tls)
        request_timeout_s = self.settings.request_timeout_ms / 1000
        controllers = AdminClient(self.settings.controllers, ssl_context=client_ssl, timeout_s=request_timeout_s)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._stopping.set)
        tasks = [
            asyncio.create_task(self._heartbeat_loop(controllers), name="heartbeat"),
            asyncio.create_task(self._metadata_loop(), name="metadata"),
            asyncio.create_task(self._tiering_loop(), name="tiering"),
        ]
        try:
            await self._stopping.wait()
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await self.server.stop()
            await controllers.close()
            for plog in self.logs.values():
                plog.close()
            self.store.close()
            log.info("broker.stopped")

    def stop(self) -> None:
        self._stopping.set()

    def _write_ready_file(self) -> None:
        if self.settings.ready_file:
            tmp = Path(self.settings.ready_file + ".tmp")
            tmp.write_text(json.dumps({"port": self.port, "pid": os.getpid(), "broker_id": self.settings.broker_id}))
            tmp.replace(self.settings.ready_file)

    # -- startup reconciliation -------------------------------------------------------------------------------

    def reconcile_partition_dirs(self, image: MetadataImage) -> list[Path]:
        """Move stale partition directories aside; return them."""
        stale: list[Path] = []
        for d in sorted(p for p in self.data_dir.iterdir() if p.is_dir() and p.name != "stale"):
            meta = d / "partition.metadata"
            topic_id = read_partition_metadata(meta) if meta.exists() else None
            topic = image.topics.get(topic_id) if topic_id is not None else None
            name, _, part = d.name.rpartition("-")
            if topic is not None and topic.name == name and part.isdigit() and int(part) in topic.partitions:
                continue
            target = self.data_dir / "stale" / f"{d.name}.{topic_id or 'unknown'}.{now_ms()}"
            target.parent.mkdir(exist_ok=True)
            shutil.move(str(d), target)
            stale.append(target)
            log.warning("broker.stale_partition_dir", directory=d.name, topic_id=str(topic_id), moved_to=str(target))
        return stale

    # -- loops ------------------------------------------------------------------------------------------------

    async def _register(self, controllers: AdminClient) -> None:
        listener: m.Listener = {
            "name": "PLAINTEXT",
            "host": self.settings.host,
            "port": self.port,
            "security_protocol": 1 if self.settings.tls.enabled else 0,
        }
        body: m.BrokerRegistrationRequest = {
            "broker_id": self.settings.broker_id,
            "cluster_id": self.settings.cluster_id,
            "incarnation_id": self.incarnation_id,
            "listeners": [listener],
            "features": [],
            "rack": self.settings.rack,
        }
        resp = await controllers.call(ApiKey.BROKER_REGISTRATION, (0, 4), body, m.BrokerRegistrationResponse)
        if resp["error_code"] != 0:
            raise StaleBrokerEpoch(f"registration refused with error {resp['error_code']}")
        self.broker_epoch = resp["broker_epoch"]
        log.info("broker.registered", broker_epoch=self.broker_epoch)

    async def _heartbeat_loop(self, controllers: AdminClient) -> None:
        interval = self.settings.heartbeat_interval_ms / 1000
        while True:
            try:
                if self.broker_epoch < 0:
                    await self._register(controllers)
                heartbeat: m.BrokerHeartbeatRequest = {
                    "broker_id": self.settings.broker_id,
                    "broker_epoch": self.broker_epoch,
                    "current_metadata_offset": self.follower.image.offset,
                    "want_fence": False,
                    "want_shut_down": False,
                }
                resp = await controllers.call(ApiKey.BROKER_HEARTBEAT, (0, 1), heartbeat, m.BrokerHeartbeatResponse)
                if resp["error_code"] == StaleBrokerEpoch.code:
                    log.warning("broker.heartbeat_stale_epoch", broker_epoch=self.broker_epoch)
                    self.broker_epoch = -1
                    continue
            except TieredError as exc:
                log.warning("broker.heartbeat_failed", error=exc.name, detail=exc.message)
            except OSError as exc:
                log.warning("broker.heartbeat_failed", error=type(exc).__name__, detail=str(exc))
            await asyncio.sleep(interval)

    async def _metadata_loop(self) -> None:
        while True:
            try:
                image = await asyncio.to_thread(self.follower.refresh)
                await self._open_hosted_logs(image)
            except TieredError as exc:
                log.warning("broker.metadata_refresh_failed", error=exc.name, detail=exc.message)
            await asyncio.sleep(self.settings.metadata_poll_ms / 1000)

    async def _open_hosted_logs(self, image: MetadataImage) -> None:
        for topic in image.topics.values():
            for p in topic.partitions.values():
                if self.settings.broker_id in p.replicas and (topic.topic_id, p.partition_id) not in self.logs:
                    await asyncio.to_thread(self._open_log, image, topic.topic_id, p.partition_id)

    def _open_log(self, image: MetadataImage, topic_id: Uuid, partition: int) -> PartitionLog:
        key = (topic_id, partition)
        plog = self.logs.get(key)
        if plog is None:
            topic = image.topics[topic_id]
            configs = image.topic_configs(topic.name)
            log_config = LogConfig(
                segment_bytes=int(configs.get("segment.bytes", self.settings.segment_bytes)),
                segment_ms=int(configs.get("segment.ms", self.settings.segment_ms)),
            )
            directory = self.data_dir / f"{topic.name}-{partition}"
            plog = PartitionLog(directory, topic_id=topic_id, config=log_config, clock=now_ms)
            self.logs[key] = plog
        return plog

    async def _tiering_loop(self) -> None:
        while True:
            await asyncio.sleep(self.settings.tiering_interval_ms / 1000)
            image = self.follower.image
            led = [
                key
                for key in list(self.logs)
                if (topic := image.topics.get(key[0])) is not None
                and (p := topic.partitions.get(key[1])) is not None
                and p.leader == self.settings.broker_id
            ]
            if not led:
                continue
            await asyncio.to_thread(self.rlm.rlmm.refresh)  # once per round, not once per partition
            for topic_id, partition in led:
                try:
                    async with self._log_lock:
                        await asyncio.to_thread(self.rlm.tiering_pass, topic_id, partition)
                except TieredError as exc:
                    where = {"topic_id": str(topic_id), "partition": partition}
                    log.warning("broker.tiering_failed", **where, error=exc.name, detail=exc.message)

    # -- request handlers -------------------------------------------------------------------------------------

    async def _on_disable(self, request: Request) -> m.DisableRemoteTopicResponse:
        body = cast(m.DisableRemoteTopicRequest, request.body)
        if body["broker_epoch"] >= 0 and body["broker_epoch"] != self.broker_epoch:
            stale = StaleBrokerEpoch(
                f"request for broker epoch {body['broker_epoch']}; this incarnation has {self.broker_epoch}"
            )
            return _error_body(stale, m.DisableRemoteTopicResponse)
        return await asyncio.to_thread(self.disable_handler.handle, body)

    def _leader_log(self, topic_id: Uuid, partition: int) -> PartitionLog:
        image = self.follower.image
        topic = image.topics.get(topic_id)
        if (
            topic is None
            or partition not in topic.partitions
            or topic.partitions[partition].leader != self.settings.broker_id
        ):
            image = self.follower.refresh()  # the client may know of a change this broker has not replayed yet
            topic = image.topics.get(topic_id)
        if topic is None or partition not in topic.partitions:
            raise UnknownTopicId(f"no partition {partition} of topic id {topic_id}")
        if topic.partitions[partition].leader != self.settings.broker_id:
            raise NotLeaderOrFollower(f"broker {self.settings.broker_id} does not lead {topic.name}-{partition}")
        return self._open_log(image, topic_id, partition)

    async def _on_produce(self, request: Request) -> m.TieredProduceResponse:
        body = cast(m.TieredProduceRequest, request.body)
        try:
            async with self._log_lock:
                plog = await asyncio.to_thread(self._leader_log, body["topic_id"], body["partition"])
                records = [
                    (r["key"], r["value"], None if r["timestamp_ms"] < 0 else r["timestamp_ms"])
                    for r in body["records"]
                ]
                first, last = await asyncio.to_thread(plog.append, records)
            return {
                "error_code": 0,
                "base_offset": first,
                "last_offset": last,
                "log_start_offset": plog.log_start_offset,
            }
        except TieredError as exc:
            return _error_body(exc, m.TieredProduceResponse)

    async def _on_fetch(self, request: Request) -> m.TieredFetchResponse:
        body = cast(m.TieredFetchRequest, request.body)
        bounds: m.TieredFetchResponse = {}
        try:
            plog = await asyncio.to_thread(self._leader_log, body["topic_id"], body["partition"])
            bounds = {
                "log_start_offset": plog.log_start_offset,
                "local_log_start_offset": plog.local_log_start_offset,
                "log_end_offset": plog.log_end_offset,
            }
            async with self._log_lock:
                topic_id, partition, offset = body["topic_id"], body["partition"], body["fetch_offset"]
                max_bytes = max(1, body["max_bytes"])
                records = await asyncio.to_thread(self.rlm.fetch, topic_id, partition, offset, max_bytes=max_bytes)
            local_start = bounds["local_log_start_offset"]
            return {
                "error_code": 0,
                **bounds,
                "records": [
                    {
                        "offset": r.offset,
                        "timestamp_ms": r.timestamp_ms,
                        "key": r.key,
                        "value": r.value,
                        "remote": r.offset < local_start,
                    }
                    for r in records
                ],
            }
        except TieredError as exc:  # the bounds let a consumer reset an out-of-range offset
            return {**_error_body(exc, m.TieredFetchResponse), **bounds}


def main(settings_path: str) -> None:
    """Entry point of ``tieredctl broker start --config FILE``."""
    configure_logging("service")
    agent = BrokerAgent(load_broker_settings(settings_path))
    asyncio.run(agent.run())
