"""The broker's publisher of ``__remote_log_metadata``: every RLMM record the store holds, appended to the partition
of the topic Kafka's partitioner picks for it, by the broker that leads that partition.

The store stays the source of truth: every RLMM record is first written there, fenced (the tiered epoch, the
controller epoch), by whoever writes it. The topic is a projection of the store's RLMM log, built by the brokers:

* **Who.** The leader of each partition of the topic (placed by the controller, ``orchestrator/controller/
  internal_topics.py``) publishes that partition, and nobody else writes to it: a client's Produce is refused
  (``orchestrator/admin_api/internal_topics.py``) and the publisher appends to the broker's own log, as a leader
  appends what it accepted. Each round (``[remote_log_metadata] publish_interval_ms``) reads the store's RLMM log once,
  from the lowest position among the partitions this broker leads, and appends to each partition the records that
  Kafka's partitioner puts there, in store order (:mod:`remote_storage.rlmm_topic.publishing`).
* **Where a partition stands** is in its own log: each record carries the store offset it came from in a header
  (``tieredctl.rlmm.offset``). When a broker starts leading a partition (its start, a leadership it takes back), it
  reads its log's last such header and continues from the next store offset; while it leads, it keeps that position
  in memory and moves it past each append that returned, and past the records a round read that are not its own.
  Nothing else is kept anywhere: a broker that restarts, or a leader whose log is empty (a new disk, another
  broker), rebuilds the partition from the store.

Guarantees, per topic-partition of the RLMM (its records all go to one partition of the topic):

* **In order.** Records are appended in store order, and the store's RLMM offsets are its write order (appends are
  serialized by the store's write lock; a reader sees a prefix of them, never a gap).
* **No gap.** A partition's position only moves past records appended to its log: after an append returns (the
  batch is written to the OS, so it survives SIGKILL of the broker), or, after a restart, to what the log holds (a
  torn last batch is cut off when the log is opened, and its records are published again). The store's RLMM log is
  never truncated: snapshots delete metadata-log records only (store invariant 7), so a partition rebuilt from
  offset 0 finds every record.
* **No duplicate.** A record is appended only at a store offset above the last one the log holds, so even
  at-least-once delivery here is exactly once: a leader that dies mid-append and comes back republishes only what
  its log lacks. What is appended is a function of the store alone (value, key, timestamp, header; offsets are
  dense), so the record at offset N of a partition is the same whichever broker built it.
* **Failover.** Nothing depends on the controller once the topic exists: a controller failover changes no leader
  of the topic by itself. A broker failure leaves its partitions leaderless (one replica: local data is not
  replicated) until it is back; they are published again from where its log stands, records written to the store
  meanwhile included.

Checks: when a partition's position is read back from its log, the store record at the log's last store offset is
encoded again and compared with the log's last value; a store that no longer holds it (a store recovered from
damage, which quarantines a torn tail of its RLMM log) is ``broker.rlmm_publish_diverged``, and nothing more is
published to that partition until the broker restarts (its lag keeps growing in the metrics).

Lag (:meth:`RemoteLogMetadataPublisher.lag`, the metric ``tieredctl_remote_log_metadata_records_lag``): per
partition this broker leads, the records the last round read from the store for it and could not append (a failed
disk, a diverged partition). A round reads the store to its end, at most ``MAX_RECORDS_PER_ROUND`` records, so the
lag is exact at the end of a round that reached the end, and a lower bound while a leader catches up on more.

A partition whose append fails is logged as ``broker.loop_failed`` (loop ``rlmm_publish``) and retried after its
own backoff (:class:`~orchestrator.supervision.RetryBackoff`); the other partitions go on.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field

import structlog

from orchestrator.broker.data_plane import DataPlane, LeaderLog
from orchestrator.broker.local_log import PartitionLog
from orchestrator.errors import ProtocolError, TieredError, UnsupportedVersion
from orchestrator.ids import Uuid
from orchestrator.metadata.follower import MetadataFollower
from orchestrator.metadata.image import MetadataImage, TopicImage
from orchestrator.metadata.store import LogEntry, MetadataStore
from orchestrator.protocol.record_batch import decode_batches
from orchestrator.settings import BrokerSettings, RemoteLogMetadataTopicSettings
from orchestrator.supervision import (
    RetryBackoff,
    WaitPolicy,
    log_loop_failure,
    log_loop_recovered,
    loop_backoff_s,
    loop_wait,
)
from remote_storage.rlmm_topic.layout import TOPIC_NAME
from remote_storage.rlmm_topic.publishing import last_published_in, metadata_partition_of, publish_batch
from remote_storage.rlmm_topic.serde import decode_value, encode_value

log = structlog.get_logger(__name__)

LOOP = "rlmm_publish"
MAX_RECORDS_PER_ROUND = 20_000  # a round's read of the store, at most (a new leader catching up takes a few rounds)
READ_CHUNK_RECORDS = 2_000  # records read from the store, then appended, at a time
BATCH_RECORDS = 500  # records per record batch appended
READ_WINDOW_BYTES = 1 << 20  # how much of a log is read at a time when its position is looked for


@dataclass(frozen=True, slots=True)
class LastPublished:
    """The last record of a partition's log that names a store offset: that offset and the record's value."""

    store_offset: int
    value: bytes


def last_published(plog: PartitionLog) -> LastPublished | None:
    """The last record of ``plog`` naming a store offset (None: none does). The log's last batch is read first; a
    log whose last record names none (records a client wrote before the topic was internal) is read whole."""
    end = plog.log_end_offset
    offset = plog.local_log_start_offset
    if end <= offset:
        return None
    found = last_published_in(plog.read_batches(end - 1))
    if found is not None:
        return LastPublished(*found)
    while offset < end:  # rare: a log that ends in records of nobody's publisher
        data = plog.read_batches(offset, max_bytes=READ_WINDOW_BYTES)
        batches = list(decode_batches(data))
        if not batches:
            break
        found = last_published_in(data) or found
        offset = batches[-1].next_offset
    return None if found is None else LastPublished(*found)


def matches_store(last: LastPublished, entry: LogEntry | None) -> bool:
    """Whether the store still holds, at ``last``'s offset, the record ``last`` was published from."""
    if entry is None or entry.offset != last.store_offset:
        return False
    try:
        version = decode_value(last.value).version
        return encode_value(entry.record, version=version) == last.value
    except (ProtocolError, UnsupportedVersion):
        return False


@dataclass
class _Partition:
    """A partition of the topic this broker leads: the next store offset to publish and, while it is stuck (an
    append failed, or its log diverged from the store), the records read for it and not appended."""

    next_store_offset: int
    stuck: str | None = None  # None, "failed" (read its log again when due) or "diverged" (until a restart)
    counted_until: int = 0  # stuck: the records below this store offset are counted in ``unpublished``
    unpublished: int = 0
    pending: list[LogEntry] = field(default_factory=list)

    def stick(self, why: str, *, counted_until: int, unpublished: int) -> None:
        self.stuck, self.counted_until, self.unpublished, self.pending = why, counted_until, unpublished, []


class RemoteLogMetadataPublisher:
    """Publishes the store's RLMM records to the partitions of ``__remote_log_metadata`` this broker leads (see the
    module docstring). ``leader_log`` opens the log of a partition this broker leads (or raises
    NOT_LEADER_OR_FOLLOWER / UNKNOWN_TOPIC_ID); it and every append run under ``log_lock``, the broker's lock of
    every log. ``appended`` is called (on the event loop) after each append, to wake the fetches that wait."""

    def __init__(
        self,
        *,
        broker_id: int,
        settings: RemoteLogMetadataTopicSettings,
        store: MetadataStore,
        image: Callable[[], MetadataImage],
        leader_log: LeaderLog,
        log_lock: asyncio.Lock,
        appended: Callable[[], None] = lambda: None,
        clock: Callable[[], float] = time.monotonic,
        max_records_per_round: int = MAX_RECORDS_PER_ROUND,
        retry_wait: WaitPolicy = loop_backoff_s,
    ) -> None:
        self._broker_id = broker_id
        self._version = settings.record_version
        self._interval_ms = settings.publish_interval_ms
        self._store = store
        self._image = image
        self._leader_log = leader_log
        self._log_lock = log_lock
        self._appended = appended
        self._clock = clock
        self._max_records = max_records_per_round
        self._topic_id: Uuid | None = None
        self._partitions: dict[int, _Partition] = {}
        self._read_end = 0  # the store offset after the last record a round read
        self._retry: RetryBackoff[int] = RetryBackoff(retry_wait)
        self._lag: Mapping[int, int] = {}

    @classmethod
    def serving(
        cls, data_plane: DataPlane, settings: BrokerSettings, store: MetadataStore, follower: MetadataFollower
    ) -> RemoteLogMetadataPublisher:
        """The publisher of a broker: its id and ``[remote_log_metadata]`` settings, its store, the image its
        follower keeps, and the logs its data plane serves (appending under the same lock, waking its fetches)."""
        return cls(
            broker_id=settings.broker_id,
            settings=settings.remote_log_metadata,
            store=store,
            image=lambda: follower.image,
            leader_log=data_plane.leader_log,
            log_lock=data_plane.log_lock,
            appended=data_plane.appended,
            retry_wait=loop_wait(settings.loop_retry_max_ms),
        )

    @property
    def interval_ms(self) -> int:
        """How often a round runs (``[remote_log_metadata] publish_interval_ms``)."""
        return self._interval_ms

    def lag(self) -> Mapping[int, int]:
        """Per partition this broker leads (and whose log it has read): records read for it and not appended."""
        return self._lag

    def positions(self) -> Mapping[int, int]:
        """Per partition this broker leads and publishes: the next store offset it will publish."""
        return {p: s.next_store_offset for p, s in self._partitions.items() if s.stuck is None}

    async def publish_round(self) -> None:
        """Publish what the store holds and the led partitions lack (at most ``max_records_per_round`` records)."""
        topic = self._image().topic_by_name(TOPIC_NAME)
        if topic is None or topic.topic_id != self._topic_id:
            self._topic_id, self._partitions, self._read_end = None if topic is None else topic.topic_id, {}, 0
        if topic is None:
            self._lag = {}
            return
        led = sorted(p.partition_id for p in topic.partitions.values() if p.leader == self._broker_id)
        self._partitions = {p: s for p, s in self._partitions.items() if p in led}  # led elsewhere now: look again
        self._retry.forget_all_but(led)
        now = self._clock()
        for partition in led:
            state = self._partitions.get(partition)
            if (state is None or state.stuck == "failed") and self._retry.due(partition, now=now):
                await self._partition_work(partition, self._resume(topic, partition))
        await self._publish(topic)
        self._lag = {p: s.unpublished for p, s in self._partitions.items()}

    # -- resuming -----------------------------------------------------------------------------------------------

    async def _resume(self, topic: TopicImage, partition: int) -> None:
        """Read where ``partition``'s log stands, and check it against the store."""
        async with self._log_lock:
            plog = await asyncio.to_thread(self._leader_log, topic.topic_id, partition)
            last = await asyncio.to_thread(last_published, plog)
            log_end = plog.log_end_offset
        state = _Partition(0 if last is None else last.store_offset + 1)
        if last is not None:
            entry = await asyncio.to_thread(self._store_entry, last.store_offset)
            if not matches_store(last, entry):
                state.stick("diverged", counted_until=state.next_store_offset, unpublished=0)
                log.error(
                    "broker.rlmm_publish_diverged",
                    topic=TOPIC_NAME,
                    partition=partition,
                    store_offset=last.store_offset,
                    log_end_offset=log_end,
                    detail="the store no longer holds the record this partition's log ends with; nothing more is "
                    "published to it until the broker restarts",
                )
        self._partitions[partition] = state
        log.info(
            "broker.rlmm_publish_resumed",
            topic=TOPIC_NAME,
            partition=partition,
            log_end_offset=log_end,
            next_store_offset=state.next_store_offset,
        )

    def _store_entry(self, offset: int) -> LogEntry | None:
        return next(iter(self._store.read_remote_log_metadata(from_offset=offset)), None)

    # -- publishing ---------------------------------------------------------------------------------------------

    async def _publish(self, topic: TopicImage) -> None:
        publishing = [s for s in self._partitions.values() if s.stuck is None]
        for state in publishing:
            state.unpublished = 0
        start = min((s.next_store_offset for s in publishing), default=self._read_end)
        count = len(topic.partitions)
        read = 0
        while read < self._max_records:
            limit = min(READ_CHUNK_RECORDS, self._max_records - read)
            entries = await asyncio.to_thread(self._read, start, limit)
            for entry in entries:
                target = self._partitions.get(metadata_partition_of(entry.record, partitions=count))
                if target is None:
                    continue
                if target.stuck is not None:
                    if entry.offset >= target.counted_until:
                        target.unpublished += 1
                        target.counted_until = entry.offset + 1
                elif entry.offset >= target.next_store_offset:
                    target.pending.append(entry)
            await self._flush(topic)
            read += len(entries)
            if entries:
                self._read_end = max(self._read_end, entries[-1].offset + 1)
                for state in self._partitions.values():  # it holds every record read that is its own
                    if state.stuck is None:
                        state.next_store_offset = max(state.next_store_offset, self._read_end)
            if len(entries) < limit:
                return
            start = entries[-1].offset + 1

    def _read(self, start: int, limit: int) -> list[LogEntry]:
        return list(itertools.islice(self._store.read_remote_log_metadata(from_offset=start), limit))

    async def _flush(self, topic: TopicImage) -> None:
        for partition, state in list(self._partitions.items()):
            pending = state.pending
            if not pending or state.stuck is not None:
                continue
            state.pending = []
            if not await self._partition_work(partition, self._append(topic, partition, state, pending)):
                # What was written before the failure is unknown here: the log is read again when next due.
                state.stick("failed", counted_until=pending[-1].offset + 1, unpublished=len(pending))

    async def _append(self, topic: TopicImage, partition: int, state: _Partition, entries: Sequence[LogEntry]) -> None:
        batches = [
            publish_batch(entries[i : i + BATCH_RECORDS], version=self._version)
            for i in range(0, len(entries), BATCH_RECORDS)
        ]
        leader_epoch = topic.partitions[partition].leader_epoch
        async with self._log_lock:
            plog = await asyncio.to_thread(self._leader_log, topic.topic_id, partition)
            append = functools.partial(plog.append_batches, batches, leader_epoch=leader_epoch)
            await asyncio.to_thread(append)
        state.next_store_offset = entries[-1].offset + 1
        self._appended()

    async def _partition_work(self, partition: int, work: Awaitable[None]) -> bool:
        """Await ``work`` for ``partition``; a failure is logged and backed off for this partition alone. True when
        it succeeded."""
        try:
            await work
        except TieredError as exc:
            attempt, delay = self._retry.failed(partition, now=self._clock())
            where = {"topic": TOPIC_NAME, "partition": partition}
            log_loop_failure("broker", LOOP, exc, attempt=attempt, retry_in_s=delay, **where)
            return False
        failed_attempts = self._retry.succeeded(partition)
        if failed_attempts:
            log_loop_recovered("broker", LOOP, failed_attempts=failed_attempts, topic=TOPIC_NAME, partition=partition)
        return True
