"""An in-process broker on a real SQLite store and moto's S3 server, plus a minimal controller-side writer.

The writer appends the metadata records a controller would (topic, partitions, configs, tiered state) under a
real lease; the broker replays them through a MetadataFollower exactly as a broker agent does. A
:class:`BrokerJobsWorld` puts the two together for the tests of the broker's remote-data job handlers.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from orchestrator.broker.agent import BrokerAgent
from orchestrator.broker.disable_handler import DisableRemoteTopicHandler
from orchestrator.broker.job_registry import BrokerJobStatus
from orchestrator.broker.local_log import LogConfig, PartitionLog
from orchestrator.broker.remote_log_manager import RemoteLogManager
from orchestrator.broker.remote_retention import DEFAULT_ABANDONED_AFTER_MS
from orchestrator.ids import Uuid
from orchestrator.metadata.follower import MetadataFollower
from orchestrator.metadata.records import ConfigResourceType, DisablePolicy, TieredState, make_record
from orchestrator.metadata.sqlite import SqliteMetadataStore
from orchestrator.settings import BrokerSettings
from remote_storage.keys import topic_prefix
from remote_storage.object_format import DEFAULT_OBJECT_FORMAT, ObjectFormat
from remote_storage.retry import S3_MAX_ATTEMPTS
from remote_storage.rlmm import RemoteLogMetadataManager, RlmmAppend
from remote_storage.s3 import S3RemoteStorage


def wall_ms() -> int:
    return int(time.time() * 1000)


class ControllerWriter:
    def __init__(self, store: SqliteMetadataStore, holder: str = "test-controller") -> None:
        self.store = store
        lease = store.acquire_lease(holder=holder, now_ms=wall_ms(), ttl_ms=3_600_000)
        assert lease is not None
        self.epoch = lease.controller_epoch
        self.follower = MetadataFollower(store)

    def create_topic(
        self,
        name: str,
        *,
        partitions: int = 1,
        leader: int = 1,
        configs: dict[str, str] | None = None,
        tiered: bool = True,
        topic_id: Uuid | None = None,
    ) -> Uuid:
        tid = topic_id if topic_id is not None else Uuid.random()
        recs = [make_record("TopicRecord", name=name, topic_id=tid)]
        initial_epochs = {"leader_epoch": 0, "partition_epoch": 0}
        for p in range(partitions):
            assignment = {"replicas": [leader], "isr": [leader], "leader": leader}
            recs.append(make_record("PartitionRecord", partition_id=p, topic_id=tid, **assignment, **initial_epochs))
        this_topic = {"resource_type": int(ConfigResourceType.TOPIC), "resource_name": name}
        for k, v in (configs or {}).items():
            recs.append(make_record("ConfigRecord", **this_topic, name=k, value=v))
        if tiered:
            enabled = int(TieredState.ENABLED)
            recs.append(make_record("TieredStateRecord", topic_id=tid, tiered_epoch=1, tiered_state=enabled, policy=0))
        self.store.append(recs, controller_epoch=self.epoch)
        return tid

    def register_broker(self, broker_id: int, incarnation_id: Uuid) -> None:
        """The broker's incarnation registered and unfenced, as the controller leaves a live broker: a broker leads
        nothing until then (:mod:`orchestrator.broker.hosted_logs`)."""
        epoch = self.store.end_offset()
        endpoint = {"name": "PLAINTEXT", "host": "127.0.0.1", "port": 1, "security_protocol": 0}
        record = make_record(
            "RegisterBrokerRecord",
            broker_id=broker_id,
            incarnation_id=incarnation_id,
            broker_epoch=epoch,
            end_points=[endpoint],
            rack=None,
            fenced=False,
        )
        self.store.append([record], controller_epoch=self.epoch)

    def set_state(self, tid: Uuid, state: TieredState, policy: DisablePolicy = DisablePolicy.NONE) -> int:
        """Move the topic to ``state``; the epoch is bumped except for DISABLING -> DISABLED (ARCHITECTURE §4)."""
        topic = self.follower.refresh().topics[tid]
        epoch = topic.tiered_epoch if state == TieredState.DISABLED else topic.tiered_epoch + 1
        new_state = {"tiered_epoch": epoch, "tiered_state": int(state), "policy": int(policy)}
        record = make_record("TieredStateRecord", topic_id=tid, **new_state)
        self.store.append([record], controller_epoch=self.epoch)
        return epoch

    def delete_topic(self, tid: Uuid) -> None:
        self.store.append([make_record("RemoveTopicRecord", topic_id=tid)], controller_epoch=self.epoch)


class BrokerUnderTest:
    def __init__(
        self,
        *,
        broker_id: int,
        data_dir: Path,
        store_path: Path,
        s3_client: object,
        bucket: str,
        prefix: str = "tiered/",
        log_config: LogConfig | None = None,
        now_ms: Callable[[], int] = wall_ms,
        object_format: ObjectFormat = DEFAULT_OBJECT_FORMAT,
        rlmm_append: RlmmAppend | None = None,
        abandoned_after_ms: int = DEFAULT_ABANDONED_AFTER_MS,
        s3_max_attempts: int = S3_MAX_ATTEMPTS,
    ) -> None:
        """``rlmm_append`` replaces the store's own append of the broker's RLMM records (as the agent's goes through
        the controller); ``abandoned_after_ms`` is the RemoteLogManager's; ``s3_max_attempts`` bounds every S3 call's
        tries (``[s3] max_attempts``)."""
        self.broker_id = broker_id
        self.data_dir = data_dir
        self.store = SqliteMetadataStore(store_path)
        self.follower = MetadataFollower(self.store)
        self.rsm = S3RemoteStorage(
            client=s3_client,  # type: ignore[arg-type]
            bucket=bucket,
            prefix=prefix,
            sleep=lambda s: None,
            object_format=object_format,
            max_attempts=s3_max_attempts,
        )
        self.rlmm = RemoteLogMetadataManager(self.store, append=rlmm_append)
        self.logs: dict[tuple[Uuid, int], PartitionLog] = {}
        self.log_config = log_config or LogConfig(segment_bytes=2000, index_interval_bytes=256)
        self.now_ms = now_ms
        refresh = self.follower.refresh
        self.rlm = RemoteLogManager(
            broker_id=broker_id,
            rsm=self.rsm,
            rlmm=self.rlmm,
            logs=self.logs,
            image=refresh,
            now_ms=now_ms,
            abandoned_after_ms=abandoned_after_ms,
        )
        self.handler = DisableRemoteTopicHandler(
            broker_id=broker_id, store=self.store, rlm=self.rlm, logs=self.logs, refresh_image=refresh, now_ms=now_ms
        )

    def log(self, tid: Uuid, partition: int = 0) -> PartitionLog:
        key = (tid, partition)
        if key not in self.logs:
            topic = self.follower.refresh().topics[tid]
            directory = self.data_dir / f"{topic.name}-{partition}"
            self.logs[key] = PartitionLog(directory, topic_id=tid, config=self.log_config, clock=self.now_ms)
        return self.logs[key]

    def produce(self, tid: Uuid, n: int, *, partition: int = 0, size: int = 100, ts: int | None = None) -> None:
        plog = self.log(tid, partition)
        start = plog.log_end_offset
        leader_epoch = self.follower.image.topics[tid].partitions[partition].leader_epoch
        for i in range(n):  # one batch per record, as a producer sending small batches writes them
            plog.append([(None, f"{start + i}:".encode() + b"x" * size, ts)], leader_epoch=leader_epoch)

    def tier(self, tid: Uuid, partition: int = 0) -> int:
        """Roll the active segment and copy every closed segment; returns how many were copied."""
        self.log(tid, partition).roll()
        return self.rlm.copy_partition(tid, partition).copied

    def trim_local(self, tid: Uuid, partition: int = 0) -> None:
        """Local retention at its tightest (local.retention.ms=0): drop every local segment already copied."""
        self.rlmm.refresh()
        self.log(tid, partition).delete_local_segments_before(self.rlmm.highest_copied_offset(tid, partition) + 1)

    def disable(self, tid: Uuid, *, controller_epoch: int, timeout_s: float = 60.0) -> dict[str, object]:
        """Send DisableRemoteTopic at the topic's current epoch until it answers DONE (bounded)."""
        topic = self.follower.refresh().topics[tid]
        body = {
            "topic_id": tid,
            "partition_id": -1,
            "tiered_epoch": topic.tiered_epoch,
            "controller_epoch": controller_epoch,
        }
        deadline = time.monotonic() + timeout_s
        while True:
            resp = self.handler.handle(body)
            if resp["error_code"] != 0 or resp["status"] == BrokerJobStatus.DONE:
                return resp
            if time.monotonic() > deadline:
                raise TimeoutError(f"DisableRemoteTopic still in progress: {resp}")
            time.sleep(0.02)

    def read_all(self, tid: Uuid, partition: int = 0) -> list[int]:
        """Every offset readable from the log start offset to the end, across tiers."""
        plog = self.log(tid, partition)
        offset, out = plog.log_start_offset, []
        while offset < plog.log_end_offset:
            recs = self.rlm.fetch(tid, partition, offset, max_bytes=1 << 20)
            assert recs, f"no record at offset {offset}"
            for r in recs:
                assert r.value.startswith(f"{r.offset}:".encode())
                out.append(r.offset)
            offset = recs[-1].offset + 1
        return out

    def close(self) -> None:
        for plog in self.logs.values():
            plog.close()
        self.store.close()


class BrokerJobsWorld:
    """Broker 1 and the controller's writer on one SQLite store in ``directory`` and one moto bucket, for the tests
    of the remote-data job handlers: the jobs a handler starts are collected in ``jobs`` (pass ``jobs.append`` as
    its ``run_in_background``) and run when the test chooses, so it reads every answer in between."""

    topic_name = "orders"  # the topic ``objects`` lists by default

    def __init__(self, directory: Path, s3_client: Any, bucket: str) -> None:
        self.directory, self.s3, self.bucket = directory, s3_client, bucket
        writer_store = SqliteMetadataStore(directory / "metadata.db")
        self.broker = self.another_broker(1)
        self.writer = ControllerWriter(writer_store)
        self.jobs: list[Callable[[], None]] = []

    def another_broker(self, broker_id: int) -> BrokerUnderTest:
        """A broker on the same store and bucket as broker 1 (the caller closes it)."""
        return BrokerUnderTest(
            broker_id=broker_id,
            data_dir=self.directory / f"broker-{broker_id}",
            store_path=self.directory / "metadata.db",
            s3_client=self.s3,
            bucket=self.bucket,
        )

    def run_jobs(self) -> None:
        while self.jobs:
            self.jobs.pop(0)()

    def objects(self, tid: Uuid, name: str | None = None) -> list[str]:
        """The keys of the topic's objects in the bucket."""
        prefix = topic_prefix("tiered/", name if name is not None else self.topic_name, tid)
        pages = self.s3.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix)
        return [o["Key"] for p in pages for o in p.get("Contents", [])]

    def close(self) -> None:
        self.broker.close()
        self.writer.store.close()


@contextlib.contextmanager
def in_process_broker(
    directory: Path, *, agent_kwargs: dict[str, Any] | None = None, **settings: Any
) -> Iterator[tuple[BrokerAgent, ControllerWriter]]:
    """A broker agent (id 1, not started: its handlers and rounds are called directly) over a SQLite store in
    ``directory``, with a writer of that store in the controller's place; every log and store closed on exit.
    ``settings`` override :class:`BrokerSettings`, ``agent_kwargs`` go to :class:`BrokerAgent` (clocks)."""
    store_path = directory / "metadata.db"
    writer_store = SqliteMetadataStore(store_path)
    broker: BrokerAgent | None = None
    try:
        broker_settings = BrokerSettings(
            broker_id=1,
            data_dir=str(directory / "broker-1"),
            metadata_store=str(store_path),
            controllers="127.0.0.1:1",
            **settings,
        )
        broker = BrokerAgent(broker_settings, **(agent_kwargs or {}))
        writer = ControllerWriter(writer_store)
        writer.register_broker(1, broker.controller_link.incarnation_id)
        yield broker, writer
    finally:
        if broker is not None:
            for plog in broker.logs.values():
                plog.close()
            broker.store.close()
        writer_store.close()
