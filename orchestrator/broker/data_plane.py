"""Kafka's data plane on a broker: Produce (0), Fetch (1), ListOffsets (2) and InitProducerId (22), as Kafka
clients speak them.

Served versions (the schemas under ``orchestrator/protocol/schemas``): Produce v3-v9, Fetch v4-v12, ListOffsets
v1-v9, InitProducerId v0-v4 (idempotent producers; :mod:`orchestrator.broker.producer_ids`). Records are Kafka
record batches (magic 2) end to end: a producer's batches are validated
(:mod:`orchestrator.broker.produce_validation`), given their offsets and the partition's leader epoch, and written
to the local log as they came; a fetch returns the same bytes, from the local log or, below the local log start
offset, from the remote tier (:meth:`RemoteLogManager.read`, KIP-405).

Invariants:

* **Internal topics take no Produce.** A Produce to ``__remote_log_metadata`` is refused on each of its partitions
  with INVALID_TOPIC_EXCEPTION "Cannot append to internal topic ..." as Kafka refuses appends to its internal
  topics (:mod:`orchestrator.admin_api.internal_topics`); the broker's publisher appends to its own log instead
  (:mod:`orchestrator.broker.rlmm_publisher`) and calls :meth:`DataPlane.appended`, so waiting fetches wake up.
* **Errors per partition, never a dropped connection.** An unknown topic is UNKNOWN_TOPIC_OR_PARTITION, a partition
  led elsewhere NOT_LEADER_OR_FOLLOWER, a stale or future ``current_leader_epoch`` FENCED_LEADER_EPOCH /
  UNKNOWN_LEADER_EPOCH, an offset outside [log start offset, log end offset] OFFSET_OUT_OF_RANGE (with the
  partition's bounds, so a consumer can reset), a failed disk KAFKA_STORAGE_ERROR; the other partitions of the
  request are served. A refused produce appends nothing of that partition.
* **acks.** 1 answers once the batches are in the leader's log (written to the OS: safe against SIGKILL); -1 (all)
  once every in-sync replica has them too: the high watermark has passed them (:mod:`.leader_replication`;
  followers fetch with their replica id, :mod:`orchestrator.broker.replica_fetcher`). acks=all is refused with
  NOT_ENOUGH_REPLICAS, nothing written, when the ISR is smaller than ``min.insync.replicas``; one whose ISR shrinks
  below it while it waits gets NOT_ENOUGH_REPLICAS_AFTER_APPEND, and one the ISR does not reach within the request's
  ``timeout_ms`` REQUEST_TIMED_OUT (the records stay in the leader's log; an idempotent producer's retry is not
  written twice). 0 gets no response; if any partition failed, the connection is closed instead (as Kafka does), so
  the producer notices. Other values are INVALID_REQUIRED_ACKS on every partition.
* **High watermark.** Consumers read up to it, ListOffsets' latest is it, and only segments wholly below it are
  copied to remote storage: nothing a new leader might not have is ever served or tiered. A follower's Fetch
  (``replica_id`` >= 0, one of the partition's replicas) reads up to the log end offset; its fetch offset is how far
  it has the log, and a follower whose last fetched epoch ends earlier here is answered with the diverging epoch
  (KIP-320) and no records, so it truncates first; one below the local log start offset is answered
  OFFSET_MOVED_TO_TIERED_STORAGE (KIP-405) with the bounds, so it starts its log there rather than copy S3 back.
* **Idempotent producers, no transactions.** InitProducerId gives a producer id unique in the cluster; each
  partition deduplicates retried batches and fences stale epochs (:mod:`orchestrator.broker.producer_state`:
  a retry gets its first offsets, OUT_OF_ORDER_SEQUENCE_NUMBER and INVALID_PRODUCER_EPOCH otherwise).
  Transactional ids and transactional batches are UNSUPPORTED_FOR_MESSAGE_FORMAT: no coordinator runs here, so
  nothing is accepted under a guarantee the broker cannot keep.
* **Fetch sessions (KIP-227) are never created:** every response has session id 0, so clients send full fetches;
  an incremental fetch naming a session is FETCH_SESSION_ID_NOT_FOUND. read_committed reads as read_uncommitted
  (no transactions exist, so the last stable offset is the high watermark).
* **Long polls are bounded.** A fetch with fewer than ``min_bytes`` to return waits for an append to this broker
  or a high watermark to move, at most ``max_wait_ms`` (capped at :data:`MAX_FETCH_WAIT_MS`), then answers what it has.
* **KIP-74 limits.** Each partition returns at least its first batch, however large, when it is the first with
  data; after that, batches stop at ``partition_max_bytes`` and at the request's ``max_bytes``.
* ListOffsets: -2 earliest (the log start offset: what remains readable from either tier), -1 latest (the high
  watermark: what a consumer can read), -3 the record with the largest timestamp (v7+), -4 the local log start
  offset (v8+, KIP-405), -5 the last offset copied to the remote tier (v9+, KIP-1005; -1 when none); any other
  timestamp at or above 0 finds the first record at or after it, in either tier (offset -1 when none). A special
  value the version does not know is UNSUPPORTED_VERSION, another negative one INVALID_REQUEST.

Blocking work (the log, S3) runs in worker threads; the log is used under the broker's log lock, so a log is never
closed under a read or an append. A Produce takes one hop to a worker thread, holding the lock: every partition is
checked and validated, then the valid ones are appended; the acknowledgements (acks=all waits) follow on the loop.
A read from the remote tier finds its segment under the lock and reads it from S3
after releasing it: a slow GET holds up no produce or fetch of another partition. A segment expired in between
(retention, a delete policy) is OFFSET_OUT_OF_RANGE with the bounds as they are then.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

import structlog

from orchestrator.admin_api.internal_topics import produce_refusal
from orchestrator.broker.leader_replication import LeaderReplication
from orchestrator.broker.leader_replication import diverging as diverging_at
from orchestrator.broker.local_log import AppendInfo, PartitionLog
from orchestrator.broker.partition_rules import check_leader_epoch, produce_policy
from orchestrator.broker.produce_validation import validate_records
from orchestrator.broker.remote_log_manager import ReadResult, RemoteLogManager
from orchestrator.broker.replication import ReplicaStates
from orchestrator.errors import (
    FetchSessionIdNotFound,
    InvalidRequest,
    InvalidRequiredAcks,
    KafkaError,
    KafkaStorageError,
    NotEnoughReplicas,
    NotLeaderOrFollower,
    OffsetMovedToTieredStorage,
    OffsetOutOfRange,
    RemoteStorageError,
    TieredError,
    UnknownTopicOrPartition,
    UnsupportedForMessageFormat,
    UnsupportedVersion,
    as_wire_error,
)
from orchestrator.ids import Uuid
from orchestrator.metadata.image import MetadataImage, TopicImage, topic_for
from orchestrator.metadata.topic_configs import int_or_default
from orchestrator.net.server import CLOSE_CONNECTION, NO_RESPONSE
from orchestrator.protocol import messages as m
from orchestrator.protocol.framing import Request
from orchestrator.protocol.record_batch import frames, with_log_append_time

log = structlog.get_logger(__name__)

MAX_FETCH_WAIT_MS = 30_000
EARLIEST, LATEST, MAX_TIMESTAMP, EARLIEST_LOCAL, LATEST_TIERED = -2, -1, -3, -4, -5
_SPECIAL_SINCE = {MAX_TIMESTAMP: 7, EARLIEST_LOCAL: 8, LATEST_TIERED: 9}
NO_OFFSET = -1

LeaderLog = Callable[[Uuid, int], PartitionLog]


@dataclass(frozen=True, slots=True)
class _Bounds:
    log_start_offset: int
    local_log_start_offset: int
    log_end_offset: int
    high_watermark: int


@dataclass(frozen=True, slots=True)
class _Prepared:
    """A partition's produced records, checked and validated, ready to append (:meth:`DataPlane.produce`)."""

    topic: TopicImage
    partition: int
    batches: list[bytes | memoryview]
    log_append_time_ms: int  # -1 unless the topic stamps LogAppendTime


@dataclass(frozen=True, slots=True)
class _Appended:
    """A prepared partition after its append: the log, where the batches went, and the log start offset then."""

    prepared: _Prepared
    log: PartitionLog
    info: AppendInfo
    log_start_offset: int


def below(records: bytes, end: int) -> bytes:
    """The leading batches of ``records`` that start below ``end`` (a consumer reads up to the high watermark)."""
    cut = 0
    for position, raw in frames(records):
        if int.from_bytes(raw[:8], "big", signed=True) >= end:
            break
        cut = position + len(raw)
    return records if cut == len(records) else records[:cut]


class DataPlane:
    """The three handlers, over a broker's logs. ``leader_log`` opens the log of a partition this broker leads (or
    raises UNKNOWN_TOPIC_ID / NOT_LEADER_OR_FOLLOWER); the caller of it holds ``log_lock``."""

    def __init__(
        self,
        *,
        refresh_image: Callable[[], MetadataImage],
        leader_log: LeaderLog,
        rlm: RemoteLogManager,
        log_lock: asyncio.Lock,
        now_ms: Callable[[], int],
        producer_ids: Callable[[], int],
        monotonic: Callable[[], float] = time.monotonic,
        replicas: ReplicaStates | None = None,
        image: Callable[[], MetadataImage] | None = None,
    ) -> None:
        self._refresh_image = refresh_image
        self._leader_log = leader_log
        self._rlm = rlm
        self._log_lock = log_lock
        self._now_ms = now_ms
        self._producer_ids = producer_ids
        self._monotonic = monotonic
        self._image = image if image is not None else refresh_image  # the image as last replayed (no store read)
        self._appended = asyncio.Event()  # set (and replaced) on every append: long polls wake up
        self._leading = LeaderReplication(
            replicas=replicas if replicas is not None else ReplicaStates(),
            image=self._image,
            on_moved=self._woken,
            monotonic=monotonic,
        )
        self.replicas = self._leading.replicas

    # -- lookups ------------------------------------------------------------------------------------------------

    async def _current_image(self) -> MetadataImage:
        """The image caught up with the store, once per request: a topic deleted and re-created under the same name
        is never served from its old topic id (names, not ids, address these versions of the APIs)."""
        return await asyncio.to_thread(self._refresh_image)

    @staticmethod
    def _topic(image: MetadataImage, name: str, partition: int) -> TopicImage:
        topic = topic_for(image, name=name)
        if partition not in topic.partitions:
            raise UnknownTopicOrPartition(f"topic '{name}' has no partition {partition}")
        return topic

    def _woken(self) -> None:
        self._appended.set()
        self._appended = asyncio.Event()

    @property
    def leader_log(self) -> LeaderLog:
        """Opens the log of a partition this broker leads; call it holding :attr:`log_lock`."""
        return self._leader_log

    @property
    def log_lock(self) -> asyncio.Lock:
        """The broker's lock of every log: appends, reads and tiering passes hold it."""
        return self._log_lock

    def appended(self) -> None:
        """Records were appended to a log other than by Produce (the ``__remote_log_metadata`` publisher): wake the
        fetches waiting for data. Call it on the event loop."""
        self._woken()

    def high_watermark(self, topic: TopicImage, partition: int, plog: PartitionLog) -> int:
        """The high watermark of a partition this broker leads (:meth:`LeaderReplication.high_watermark`). Call it on
        the event loop."""
        return self._leading.high_watermark(topic, partition, plog)

    # -- Produce ------------------------------------------------------------------------------------------------

    async def produce(self, request: Request) -> m.ProduceResponse:
        body = cast(m.ProduceRequest, request.body)
        acks = body["acks"]
        refuse: KafkaError | None = None
        if acks not in (0, 1, -1):
            refuse = InvalidRequiredAcks(f"acks={acks}: use 0, 1 or -1 (all)")
        elif body.get("transactional_id") is not None:
            refuse = UnsupportedForMessageFormat(
                f"transactional id {body['transactional_id']!r}: this broker serves no transactions"
            )
        timeout_ms = body["timeout_ms"]

        def prepare_and_append() -> list[tuple[str, list[tuple[int, _Appended | TieredError]]]]:
            """Off the loop, in one hop, holding the log lock: the image caught up with the store, each partition
            checked and validated, and only then the valid ones appended (a refused partition appends nothing)."""
            image = self._refresh_image()
            plan: list[tuple[str, list[tuple[int, _Prepared | TieredError]]]] = []
            for topic_data in body["topic_data"]:
                name = topic_data["name"]
                parts: list[tuple[int, _Prepared | TieredError]] = []
                for data in topic_data["partition_data"]:
                    index = data["index"]
                    try:
                        if refuse is not None:
                            raise refuse
                        parts.append((index, self._prepare_partition(image, name, index, data["records"], acks)))
                    except TieredError as exc:
                        parts.append((index, exc))
                plan.append((name, parts))
            return [
                (name, [(i, p if isinstance(p, TieredError) else self._append_prepared(p)) for i, p in parts])
                for name, parts in plan
            ]

        # One worker-thread hop per request, not one to prepare and one per partition to append: a hop is a thread
        # wake-up and a GIL hand-off each way, and at Kafka's 16 KiB batches they were a third of a Produce's time.
        async with self._log_lock:
            done = await asyncio.to_thread(prepare_and_append)
        self._woken()
        responses: list[m.TopicProduceResponse] = []
        failed = False
        for name, parts in done:
            partitions: list[m.PartitionProduceResponse] = []
            for index, appended in parts:
                try:
                    if isinstance(appended, TieredError):
                        raise appended
                    partitions.append(await self._acknowledge(appended, acks, timeout_ms))
                except TieredError as exc:
                    failed = True
                    partitions.append(_produce_error(index, exc, name))
            responses.append({"name": name, "partition_responses": partitions})
        if acks == 0:
            return cast(m.ProduceResponse, CLOSE_CONNECTION if failed else NO_RESPONSE)
        return {"responses": responses, "throttle_time_ms": 0}

    def _prepare_partition(
        self, image: MetadataImage, name: str, partition: int, records: bytes | None, acks: int
    ) -> _Prepared:
        """One partition's records checked against ``image`` and validated (a worker thread): raises the error that
        refuses them, before anything is written."""
        internal = produce_refusal(name)
        if internal is not None:
            raise internal
        topic = self._topic(image, name, partition)
        isr = topic.partitions[partition].isr
        min_isr = int_or_default(image.topic_configs(name), "min.insync.replicas")
        if acks == -1 and len(isr) < min_isr:
            raise NotEnoughReplicas(
                f"{name}-{partition}: the ISR {list(isr)} is smaller than min.insync.replicas={min_isr}; nothing "
                "was written (acks=all needs that many in-sync replicas)"
            )
        policy = produce_policy(image, topic)
        now = self._now_ms()
        validated = validate_records(records, policy, now_ms=now)
        batches: list[bytes | memoryview] = list(validated.batches)
        if policy.log_append_time:
            batches = [with_log_append_time(raw, now) for raw in batches]
        return _Prepared(topic, partition, batches, now if policy.log_append_time else -1)

    def _append_prepared(self, p: _Prepared) -> _Appended | TieredError:
        """A prepared partition appended to its log (a worker thread, the log lock held), or the error that failed
        it."""
        topic, partition = p.topic, p.partition
        try:
            plog = self._leader_log(topic.topic_id, partition)
            appended = plog.append_batches(p.batches, leader_epoch=topic.partitions[partition].leader_epoch)
        except TieredError as exc:
            return exc
        return _Appended(p, plog, appended, plog.log_start_offset)

    async def _acknowledge(self, a: _Appended, acks: int, timeout_ms: int) -> m.PartitionProduceResponse:
        """An appended partition's answer, once (acks=all) its replicas have it."""
        topic, partition = a.prepared.topic, a.prepared.partition
        last_offset = a.info.last_offset
        if self.high_watermark(topic, partition, a.log) <= last_offset and acks == -1:
            await self._leading.wait_replicated(topic, partition, a.log, last_offset + 1, timeout_ms)
        return {
            "index": partition,
            "error_code": 0,
            "base_offset": a.info.first_offset,
            "log_append_time_ms": a.prepared.log_append_time_ms,
            "log_start_offset": a.log_start_offset,
        }

    # -- InitProducerId -----------------------------------------------------------------------------------------

    async def init_producer_id(self, request: Request) -> m.InitProducerIdResponse:
        """A new producer id at epoch 0 for an idempotent producer (a producer bumps its own epoch, KIP-360); a
        transactional id is UNSUPPORTED_FOR_MESSAGE_FORMAT: no transaction coordinator runs here."""
        body = cast(m.InitProducerIdRequest, request.body)
        if body.get("transactional_id") is not None:
            error = UnsupportedForMessageFormat(
                f"transactional id {body['transactional_id']!r}: this broker serves no transactions"
            )
            return {"error_code": error.code, "producer_id": -1, "producer_epoch": -1}
        try:
            producer_id = await asyncio.to_thread(self._producer_ids)
        except TieredError as exc:
            wire = as_wire_error(exc)
            log.error("broker.producer_id_failed", detail=wire.message)
            return {"error_code": wire.code, "producer_id": -1, "producer_epoch": -1}
        except OSError as exc:
            log.error("broker.producer_id_failed", detail=str(exc))
            return {"error_code": KafkaStorageError.code, "producer_id": -1, "producer_epoch": -1}
        return {"error_code": 0, "producer_id": producer_id, "producer_epoch": 0}

    # -- Fetch --------------------------------------------------------------------------------------------------

    async def fetch(self, request: Request) -> m.FetchResponse:
        body = cast(m.FetchRequest, request.body)
        if body.get("session_id", 0) != 0:
            error = FetchSessionIdNotFound(
                f"fetch session {body['session_id']} does not exist: this broker creates none; send a full fetch"
            )
            return {"error_code": error.code, "session_id": 0, "responses": [], "throttle_time_ms": 0}
        max_wait_s = min(max(body["max_wait_ms"], 0), MAX_FETCH_WAIT_MS) / 1000
        deadline = self._monotonic() + max_wait_s
        while True:
            woken = self._appended  # before reading: an append during the read wakes the wait below at once
            responses, total, errors = await self._fetch_once(body)
            left = deadline - self._monotonic()
            if total >= body["min_bytes"] or errors or left <= 0:
                break
            try:
                await asyncio.wait_for(woken.wait(), timeout=left)
            except TimeoutError:
                break  # nothing was appended since the read: what it found is the answer
        return {"error_code": 0, "session_id": 0, "responses": responses, "throttle_time_ms": 0}

    async def _fetch_once(self, body: m.FetchRequest) -> tuple[list[m.FetchableTopicResponse], int, bool]:
        read_committed = body.get("isolation_level", 0) == 1
        replica_id = body.get("replica_id", -1)
        # A follower asks again at once and knows only what the image says: the image as replayed serves it (a store
        # read per replica fetch would cost every acks=all write two of them).
        image = self._image() if replica_id >= 0 else await self._current_image()
        budget = max(body.get("max_bytes", 0x7FFFFFFF), 0)
        total = 0
        errors = False
        responses: list[m.FetchableTopicResponse] = []
        for topic_request in body["topics"]:
            name = topic_request["topic"]
            partitions: list[m.FetchResponsePartitionData] = []
            for p in topic_request["partitions"]:
                index = p["partition"]
                limit = max(min(p["partition_max_bytes"], budget - total), 1 if total == 0 else 0)
                entry: m.FetchResponsePartitionData = {
                    "partition_index": index,
                    "aborted_transactions": [] if read_committed else None,
                    "preferred_read_replica": -1,
                    "records": b"",
                }
                try:
                    bounds, records, diverging = await self._read_partition(image, name, index, p, limit, replica_id)
                    entry.update(_fetched(bounds))
                    entry["records"] = records
                    if diverging is not None:
                        entry["diverging_epoch"] = diverging
                        errors = True  # answered at once: the follower truncates before it fetches again
                    total += len(records)
                except TieredError as exc:
                    errors = True
                    wire = as_wire_error(exc)
                    entry.update({"error_code": wire.code, "high_watermark": -1, "last_stable_offset": -1})
                    if isinstance(exc, (_OutOfRange, _MovedToTiered)):
                        entry.update(_fetched(exc.bounds))
                        entry["error_code"] = exc.code
                    _log_storage_error("Fetch", name, index, wire)
                partitions.append(entry)
            responses.append({"topic": name, "partitions": partitions})
        return responses, total, errors

    async def _read_partition(
        self, image: MetadataImage, name: str, partition: int, p: m.FetchPartition, limit: int, replica_id: int
    ) -> tuple[_Bounds, bytes, m.FetchResponseEpochEndOffset | None]:
        """One partition's answer: its bounds, its records, and for a follower whose log diverged from this one the
        epoch and end offset it must truncate to (KIP-320's diverging epoch, nothing read then). A consumer reads up
        to the high watermark, a follower (``replica_id`` >= 0, one of the partition's replicas) up to the log end
        offset; a follower's fetch offset is how far it has the log, which may move the high watermark."""
        topic = self._topic(image, name, partition)
        check_leader_epoch(topic, partition, p.get("current_leader_epoch", -1))
        follower = replica_id >= 0
        if follower and replica_id not in topic.partitions[partition].replicas:
            raise NotLeaderOrFollower(f"broker {replica_id} is no replica of {name}-{partition}")
        offset = p["fetch_offset"]
        read_first = functools.partial(
            self._rlm.read_local_or_locate, topic.topic_id, partition, offset, max_bytes=limit
        )
        async with self._log_lock:
            plog = await asyncio.to_thread(self._leader_log, topic.topic_id, partition)
            if follower:
                leader_epoch = topic.partitions[partition].leader_epoch
                diverging = diverging_at(plog, leader_epoch, p.get("last_fetched_epoch", -1), offset)
                if diverging is not None:
                    return self._bounds(topic, partition, plog), b"", diverging
                if plog.log_start_offset <= offset <= plog.log_end_offset:
                    self.replicas.follower_fetched(
                        (topic.topic_id, partition),
                        leader_epoch=topic.partitions[partition].leader_epoch,
                        follower=replica_id,
                        fetch_offset=offset,
                        leader_end=plog.log_end_offset,
                        now_ms=self._now_ms(),
                    )
            bounds = self._bounds(topic, partition, plog)
            if offset < bounds.log_start_offset or offset > bounds.log_end_offset:
                raise _OutOfRange(bounds, offset, name, partition)
            if follower and offset < plog.local_log_start_offset:  # KIP-405: in S3 only; not copied back
                raise _MovedToTiered(bounds, offset, plog.local_log_start_offset, f"{name}-{partition}")
            end = bounds.log_end_offset if follower else bounds.high_watermark
            if offset >= end or limit <= 0:
                return bounds, b"", None
            try:
                planned = await asyncio.to_thread(read_first)
            except OffsetOutOfRange as exc:  # the log start offset moved meanwhile
                raise _OutOfRange(self._bounds(topic, partition, plog), offset, name, partition) from exc
        if isinstance(planned, ReadResult):
            return bounds, below(planned.records, end), None
        # From S3 outside the lock: a slow GET holds up no produce or fetch of another partition.
        try:
            result = await asyncio.to_thread(self._rlm.read_remote, planned, offset, max_bytes=limit)
        except RemoteStorageError:
            now = self._bounds(topic, partition, plog)
            if offset < now.log_start_offset:  # expired meanwhile (retention, a delete policy): out of range now
                raise _OutOfRange(now, offset, name, partition) from None
            raise
        return bounds, result.records, None

    def _bounds(self, topic: TopicImage, partition: int, plog: PartitionLog) -> _Bounds:
        hw = self.high_watermark(topic, partition, plog)
        return _Bounds(plog.log_start_offset, plog.local_log_start_offset, plog.log_end_offset, hw)

    # -- ListOffsets --------------------------------------------------------------------------------------------

    async def list_offsets(self, request: Request) -> m.ListOffsetsResponse:
        body = cast(m.ListOffsetsRequest, request.body)
        version = request.header.api_version
        topics: list[m.ListOffsetsTopicResponse] = []
        image = await self._current_image()
        for t in body["topics"]:
            name = t["name"]
            partitions: list[m.ListOffsetsPartitionResponse] = []
            for p in t["partitions"]:
                index = p["partition_index"]
                try:
                    offset, timestamp, epoch = await self._list_offset(image, name, index, p, version)
                    partitions.append(
                        {
                            "partition_index": index,
                            "error_code": 0,
                            "timestamp": timestamp,
                            "offset": offset,
                            "leader_epoch": epoch,
                        }
                    )
                except TieredError as exc:
                    wire = as_wire_error(exc)
                    _log_storage_error("ListOffsets", name, index, wire)
                    partitions.append({"partition_index": index, "error_code": wire.code, "offset": -1})
            topics.append({"name": name, "partitions": partitions})
        return {"topics": topics, "throttle_time_ms": 0}

    async def _list_offset(
        self, image: MetadataImage, name: str, partition: int, p: m.ListOffsetsPartition, version: int
    ) -> tuple[int, int, int]:
        """(offset, timestamp, leader epoch) for one partition's asked timestamp."""
        topic = self._topic(image, name, partition)
        check_leader_epoch(topic, partition, p.get("current_leader_epoch", -1))
        target = p["timestamp"]
        since = _SPECIAL_SINCE.get(target)
        if since is not None and version < since:
            raise UnsupportedVersion(f"timestamp {target} needs ListOffsets v{since}+, this request is v{version}")
        if target < 0 and target not in (EARLIEST, LATEST) and since is None:
            raise InvalidRequest(f"timestamp {target} is no special value (-1 latest ... -5 latest tiered)")
        leader_epoch = topic.partitions[partition].leader_epoch
        tid = topic.topic_id
        async with self._log_lock:
            plog = await asyncio.to_thread(self._leader_log, tid, partition)
            if target == EARLIEST:
                return plog.log_start_offset, NO_OFFSET, -1
            if target == LATEST:  # what a consumer can read: the high watermark
                return self.high_watermark(topic, partition, plog), NO_OFFSET, leader_epoch
            if target == EARLIEST_LOCAL:
                return plog.local_log_start_offset, NO_OFFSET, -1
            if target == LATEST_TIERED:
                return await asyncio.to_thread(self._rlm.highest_tiered_offset, tid, partition), NO_OFFSET, -1
            if target == MAX_TIMESTAMP:
                found = await asyncio.to_thread(self._rlm.max_timestamp, tid, partition)
            else:
                found = await asyncio.to_thread(self._rlm.offset_for_timestamp, tid, partition, target)
        if found is None:
            return NO_OFFSET, NO_OFFSET, -1
        return found[0], found[1], -1


class _OutOfRange(OffsetOutOfRange):
    """OFFSET_OUT_OF_RANGE with the partition's bounds, so the response carries them."""

    name, retriable = OffsetOutOfRange.name, OffsetOutOfRange.retriable

    def __init__(self, bounds: _Bounds, offset: int, topic: str, partition: int) -> None:
        super().__init__(
            f"{topic}-{partition}: offset {offset} is outside [{bounds.log_start_offset}, {bounds.log_end_offset}]"
        )
        self.bounds = bounds


class _MovedToTiered(OffsetMovedToTieredStorage):
    """OFFSET_MOVED_TO_TIERED_STORAGE for a follower, with the partition's bounds (its log start offset tells the
    follower where the log starts, remote part included)."""

    name, retriable = OffsetMovedToTieredStorage.name, OffsetMovedToTieredStorage.retriable

    def __init__(self, bounds: _Bounds, offset: int, local_start: int, where: str) -> None:
        super().__init__(f"{where}: offset {offset} is below the local log start {local_start}, in remote storage only")
        self.bounds = bounds


def _fetched(bounds: _Bounds) -> m.FetchResponsePartitionData:
    return {
        "error_code": 0,
        "high_watermark": bounds.high_watermark,
        "last_stable_offset": bounds.high_watermark,
        "log_start_offset": bounds.log_start_offset,
    }


def _produce_error(index: int, exc: TieredError, topic: str) -> m.PartitionProduceResponse:
    wire = as_wire_error(exc)
    _log_storage_error("Produce", topic, index, wire)
    return {"index": index, "error_code": wire.code, "base_offset": -1, "error_message": wire.message}


def _log_storage_error(api: str, topic: str, partition: int, wire: KafkaError) -> None:
    """A request that failed on this broker's storage is the operator's business, not only the client's."""
    if isinstance(wire, KafkaStorageError):
        log.warning("broker.storage_error", api=api, topic=topic, partition=partition, detail=wire.message)
