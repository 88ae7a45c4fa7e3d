"""A follower's side of replication: fetch each followed partition from its leader and append what comes, as Kafka's
replica fetcher threads do (one fetcher per leader broker, Fetch v12 with this broker's replica id).

For every leader broker that leads a partition this broker is a replica of, one task sends Fetch requests in a
loop: each followed partition at its log end offset, with the leader epoch the image gives (so a leader that moved
on answers FENCED_LEADER_EPOCH or NOT_LEADER_OR_FOLLOWER, and the follower waits for its image to catch up) and the
epoch of its last batch (so the leader can say where the logs diverge). The leader long-polls: a fetch at its log
end offset waits for its next append.

What comes back, per partition, under the broker's log lock:

* records: appended as they are (:meth:`PartitionLog.append_replicated`: offsets and leader epochs kept);
* a diverging epoch (KIP-320): the log is truncated to where the leader's epoch ends, at most to the end of that
  epoch in this log (Kafka's rule), before the next fetch (:meth:`PartitionLog.truncate_to`);
* the leader's high watermark, kept cut to this log's end (:class:`ReplicaStates`), and its log start offset:
  this log's start follows it (a delete-policy disable or retention on the leader removes the same range here);
* OFFSET_MOVED_TO_TIERED_STORAGE (KIP-405: this log ends below the leader's local log start, what lies between
  is in remote storage only): the log starts again, empty, at the leader's local log start (ListOffsets
  EARLIEST_LOCAL), its log start offset the leader's; nothing is copied back from S3;
* OFFSET_OUT_OF_RANGE: a log that ends below the leader's log start starts again, empty, at it
  (:meth:`PartitionLog.truncate_fully_and_start_at`); one past the leader's end is cut back to it.

Errors of one leader (a dead broker, a refused request) back that leader's task off on the loops' one schedule
(:data:`orchestrator.supervision.LOOP_RETRY_WAIT`); the others go on. A task ends when its leader leads nothing this
broker follows; the agent's replication round starts tasks for new leaders.

Invariants: a follower never appends a batch that does not start at its log end offset; it never serves a consumer
(the data plane answers NOT_LEADER_OR_FOLLOWER); only the leader copies to remote storage.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

import structlog

from orchestrator.backoff import Backoff
from orchestrator.broker.local_log import PartitionLog
from orchestrator.broker.replication import ReplicaStates
from orchestrator.errors import (
    FencedLeaderEpoch,
    KafkaError,
    NotLeaderOrFollower,
    OffsetMovedToTieredStorage,
    OffsetOutOfRange,
    TieredError,
    UnknownLeaderEpoch,
    UnknownTopicOrPartition,
    raise_for_code,
)
from orchestrator.ids import Uuid
from orchestrator.metadata.image import MetadataImage
from orchestrator.net.connection import ConnectionPool
from orchestrator.protocol import messages as m
from orchestrator.protocol.api_keys import ApiKey
from orchestrator.supervision import LOOP_RETRY_WAIT

log = structlog.get_logger(__name__)

FETCH_VERSION = 12
LIST_OFFSETS_VERSION = 8  # the first with EARLIEST_LOCAL (-4), KIP-405
EARLIEST_LOCAL = -4
REPLICA_FETCH_WAIT_MS = 500  # Kafka's replica.fetch.wait.max.ms
REPLICA_FETCH_MIN_BYTES = 1
REPLICA_FETCH_MAX_BYTES = 10 * 1024 * 1024  # replica.fetch.response.max.bytes
PARTITION_FETCH_MAX_BYTES = 1024 * 1024  # replica.fetch.max.bytes
# Answers that mean "this broker's image is behind, or the leader's": wait for the metadata, not an error.
_WAIT_FOR_METADATA = {
    e.code for e in (NotLeaderOrFollower, FencedLeaderEpoch, UnknownLeaderEpoch, UnknownTopicOrPartition)
}

PartitionKey = tuple[Uuid, int]


@dataclass(frozen=True, slots=True)
class Followed:
    """A partition this broker follows, as the image has it."""

    topic_id: Uuid
    name: str
    partition: int
    leader_epoch: int


def followed_by_leader(image: MetadataImage, broker_id: int) -> dict[int, list[Followed]]:
    """Each live leader and the partitions it leads that ``broker_id`` is a replica of."""
    out: dict[int, list[Followed]] = {}
    for topic in image.topics.values():
        for p in topic.partitions.values():
            if broker_id in p.replicas and p.leader >= 0 and p.leader != broker_id and p.leader in image.brokers:
                out.setdefault(p.leader, []).append(
                    Followed(topic.topic_id, topic.name, p.partition_id, p.leader_epoch)
                )
    return out


class ReplicaFetcher:
    """The follower side of every partition this broker follows (see the module docstring)."""

    def __init__(
        self,
        *,
        broker_id: int,
        image: Callable[[], MetadataImage],
        open_log: Callable[[MetadataImage, Uuid, int], PartitionLog],
        log_lock: asyncio.Lock,
        replicas: ReplicaStates,
        pool: ConnectionPool,
        request_timeout_s: float,
        retry_wait: Backoff = LOOP_RETRY_WAIT,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        rng: random.Random | None = None,
    ) -> None:
        self._broker_id = broker_id
        self._image = image
        self._open_log = open_log
        self._log_lock = log_lock
        self._replicas = replicas
        self._pool = pool
        self._timeout_s = request_timeout_s
        self._retry_wait = retry_wait
        self._sleep = sleep
        self._rng = rng or random.Random()
        self._tasks: dict[int, asyncio.Task[None]] = {}
        self._followed: tuple[MetadataImage | None, dict[int, list[Followed]]] = (None, {})
        self.fetched_batches = 0  # batches appended since start (tests and metrics look)

    def _followed_now(self) -> tuple[MetadataImage, dict[int, list[Followed]]]:
        """The image and what this broker follows in it, computed once per image (not per fetch: a walk of every
        partition of the cluster)."""
        image = self._image()
        cached_for, followed = self._followed
        if image is not cached_for:
            followed = followed_by_leader(image, self._broker_id)
            self._followed = (image, followed)
        return image, followed

    async def round(self) -> None:
        """Start a fetcher task for each leader that has none (one whose partitions this broker follows)."""
        for leader in self._followed_now()[1]:
            task = self._tasks.get(leader)
            if task is None or task.done():
                self._tasks[leader] = asyncio.create_task(self._follow(leader), name=f"replica-fetch-{leader}")

    async def close(self) -> None:
        tasks, self._tasks = list(self._tasks.values()), {}
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _follow(self, leader: int) -> None:
        failures = 0
        while True:
            image, followed = self._followed_now()
            partitions = followed.get(leader)
            if not partitions:
                return
            try:
                waits = await self._fetch_once(image, leader, partitions)
                failures = 0
            except (TieredError, OSError, TimeoutError) as exc:
                failures += 1
                delay = self._retry_wait.delay(failures, self._rng)
                error = exc.name if isinstance(exc, KafkaError) else type(exc).__name__
                log.warning(
                    "broker.replica_fetch_failed",
                    leader=leader,
                    error=error,
                    detail=str(exc),
                    attempt=failures,
                    retry_in_s=round(delay, 3),
                )
                await self._sleep(delay)
                continue
            if waits:  # every partition answered "not yet known here": give the metadata a moment
                await self._sleep(self._retry_wait.floor)

    async def _fetch_once(self, image: MetadataImage, leader: int, partitions: list[Followed]) -> bool:
        """One Fetch to ``leader`` for ``partitions`` and its answer applied; True when every partition was answered
        with an error that waits for newer metadata."""
        logs: dict[PartitionKey, PartitionLog] = {}
        topics: dict[str, list[m.FetchPartition]] = {}
        for f in partitions:
            plog = await asyncio.to_thread(self._open_log, image, f.topic_id, f.partition)
            logs[(f.topic_id, f.partition)] = plog
            topics.setdefault(f.name, []).append(
                {
                    "partition": f.partition,
                    "current_leader_epoch": f.leader_epoch,
                    "fetch_offset": plog.log_end_offset,
                    "last_fetched_epoch": plog.leader_epochs.latest_epoch,
                    "log_start_offset": plog.log_start_offset,
                    "partition_max_bytes": PARTITION_FETCH_MAX_BYTES,
                }
            )
        body: m.FetchRequest = {
            "replica_id": self._broker_id,
            "max_wait_ms": REPLICA_FETCH_WAIT_MS,
            "min_bytes": REPLICA_FETCH_MIN_BYTES,
            "max_bytes": REPLICA_FETCH_MAX_BYTES,
            "isolation_level": 0,
            "session_id": 0,
            "session_epoch": -1,
            "topics": [{"topic": name, "partitions": parts} for name, parts in topics.items()],
            "forgotten_topics_data": [],
            "rack_id": "",
        }
        broker = image.brokers[leader]
        address = (broker.endpoints[0].host, broker.endpoints[0].port)
        timeout_s = self._timeout_s + REPLICA_FETCH_WAIT_MS / 1000
        response = await self._pool.request(address, ApiKey.FETCH, FETCH_VERSION, body, timeout_s=timeout_s)
        if response.get("error_code", 0):
            raise_for_code(response["error_code"], f"a replica fetch from broker {leader}")
        by_name = {f.name: f.topic_id for f in partitions}
        waiting = 0
        answered = 0
        for topic in response["responses"]:
            topic_id = by_name.get(topic["topic"])
            if topic_id is None:
                continue
            for p in topic["partitions"]:
                key = (topic_id, p["partition_index"])
                if key not in logs:
                    continue
                answered += 1
                followed = next(f for f in partitions if (f.topic_id, f.partition) == key)
                if p["error_code"] in _WAIT_FOR_METADATA:
                    waiting += 1
                    continue
                if p["error_code"] == OffsetMovedToTieredStorage.code:
                    await self._start_at_leaders_local_start(address, followed, logs[key], p)
                    continue
                await self._apply(followed, logs[key], p)
        return answered > 0 and waiting == answered

    async def _start_at_leaders_local_start(
        self, address: tuple[str, int], followed: Followed, plog: PartitionLog, p: Mapping[str, object]
    ) -> None:
        """KIP-405's follower: what it lacks below the leader's local log start is in remote storage, so its log
        starts again, empty, at that offset (asked with ListOffsets EARLIEST_LOCAL), its log start offset the
        leader's; nothing is copied back from S3."""
        body: m.ListOffsetsRequest = {
            "replica_id": self._broker_id,
            "isolation_level": 0,
            "topics": [
                {
                    "name": followed.name,
                    "partitions": [
                        {
                            "partition_index": followed.partition,
                            "current_leader_epoch": followed.leader_epoch,
                            "timestamp": EARLIEST_LOCAL,
                        }
                    ],
                }
            ],
        }
        response = await self._pool.request(
            address, ApiKey.LIST_OFFSETS, LIST_OFFSETS_VERSION, body, timeout_s=self._timeout_s
        )
        (answer,) = response["topics"][0]["partitions"]
        raise_for_code(answer["error_code"], f"{followed.name}-{followed.partition}'s local log start")
        local_start = int(answer["offset"])
        leader_start = int(p.get("log_start_offset", -1))  # type: ignore[call-overload]
        async with self._log_lock:
            if plog.log_end_offset < local_start:  # else it moved on meanwhile: the next fetch says where it is
                await asyncio.to_thread(
                    plog.truncate_fully_and_start_at, local_start, log_start=min(max(leader_start, 0), local_start)
                )
                self._replicas.truncated((followed.topic_id, followed.partition), plog.log_end_offset)
        log.info(
            "broker.replica_moved_to_tiered",
            partition=followed.partition,
            leader_local_log_start=local_start,
            leader_log_start=leader_start,
        )

    async def _apply(self, followed: Followed, plog: PartitionLog, p: Mapping[str, object]) -> None:
        key = (followed.topic_id, followed.partition)
        error_code = int(p["error_code"])  # type: ignore[call-overload]
        async with self._log_lock:
            if error_code == OffsetOutOfRange.code:
                leader_hw = int(p.get("high_watermark", -1))  # type: ignore[call-overload]
                leader_start = int(p.get("log_start_offset", -1))  # type: ignore[call-overload]
                await asyncio.to_thread(self._out_of_range, plog, leader_hw, leader_start)
                self._replicas.truncated(key, plog.log_end_offset)
                log.info(
                    "broker.replica_out_of_range",
                    partition=followed.partition,
                    leader_hw=leader_hw,
                    leader_log_start=leader_start,
                    log_end_offset=plog.log_end_offset,
                )
                return
            if error_code:
                raise_for_code(error_code, f"{followed.name}-{followed.partition} from its leader")
            diverging = p.get("diverging_epoch")
            if isinstance(diverging, Mapping) and int(diverging.get("end_offset", -1)) >= 0:
                await asyncio.to_thread(
                    self._truncate_diverged, plog, int(diverging["epoch"]), int(diverging["end_offset"])
                )
                self._replicas.truncated(key, plog.log_end_offset)
                return
            records = p.get("records")
            if isinstance(records, bytes) and records:
                self.fetched_batches += await asyncio.to_thread(plog.append_replicated, records)
            leader_start = int(p.get("log_start_offset", -1))  # type: ignore[call-overload]
            if plog.log_start_offset < leader_start <= plog.log_end_offset:
                await asyncio.to_thread(plog.advance_log_start_offset, leader_start)
            self._replicas.follower_high_watermark(
                key,
                leader_epoch=followed.leader_epoch,
                leader_hw=int(p.get("high_watermark", -1)),  # type: ignore[call-overload]
                log_end=plog.log_end_offset,
            )

    @staticmethod
    def _truncate_diverged(plog: PartitionLog, epoch: int, leader_end: int) -> None:
        own_epoch, own_end = plog.leader_epochs.end_offset_for(epoch, plog.log_end_offset)
        end = min(leader_end, own_end) if own_epoch == epoch and own_end >= 0 else leader_end
        plog.truncate_to(end)
        log.warning("broker.replica_truncated", directory=str(plog.directory), epoch=epoch, to=plog.log_end_offset)

    @staticmethod
    def _out_of_range(plog: PartitionLog, leader_hw: int, leader_start: int) -> None:
        """The leader has no offset where this log ends. Below the leader's log start (retention or a delete policy
        removed it there while this replica was away): this log starts again, empty, at the leader's log start, as
        Kafka's follower does. Past the leader's high watermark (which the answer carries, at or below the leader's
        end): cut back to it. The rest is fetched again."""
        if plog.log_end_offset < leader_start:
            plog.truncate_fully_and_start_at(leader_start)
        elif 0 <= leader_hw < plog.log_end_offset:
            plog.truncate_to(leader_hw)
