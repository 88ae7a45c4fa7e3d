"""OffsetForLeaderEpoch (23) on a broker: where each asked leader epoch ends in the log of a partition it leads.

A consumer asks it after a leader change to check its position (KIP-320: librdkafka does so as soon as a broker
advertises the API), a tool or a replica to find where its own log leaves the leader's (KIP-101, KIP-279). Our own
followers learn it from Fetch's diverging epoch instead (:func:`orchestrator.broker.leader_replication.diverging`),
which answers from the same cache by the same rule. Served versions 2-4 (the schemas under ``orchestrator/protocol``).

Each partition is answered as Kafka's leader answers it (``ReplicaManager.lastOffsetForLeaderEpoch`` and
``Partition.lastOffsetForLeaderEpoch``), in this order:

* a topic or partition the image does not have: UNKNOWN_TOPIC_OR_PARTITION;
* a ``current_leader_epoch`` older than the partition's: FENCED_LEADER_EPOCH, newer: UNKNOWN_LEADER_EPOCH (-1
  skips the check; :func:`orchestrator.broker.partition_rules.check_leader_epoch`, the same fence as Fetch's);
* a partition this broker does not lead: NOT_LEADER_OR_FOLLOWER, whoever asks: a consumer (``replica_id`` -1), a
  debugging client (-2) or a replica (>= 0). Kafka's broker also answers only as a leader
  (``fetchOnlyFromLeader``) and so do we: a follower's cache may still hold a tail the leader does not have;
* else error NONE with the leader epoch cache's answer (:meth:`LeaderEpochCache.end_offset_for`, Kafka's
  ``endOffsetFor``): the largest epoch at or below the one asked for, ending where the next epoch starts, or at
  the log end offset for the latest; -1/-1 when the log knows no such epoch (above the latest, negative, or an
  empty cache). The leader's own epoch counts as begun at its log end offset even before its first batch, as
  Kafka writes that entry on becoming leader: the epoch before it then ends there, not "unknown".

The log end offset, not the high watermark, for a consumer too: Kafka's leader answers every asker from
``endOffsetFor(epoch, logEndOffset)``. A consumer's position is at most the high watermark, which is at most the log
end offset, so the current epoch's answer never makes it think records it read were truncated; an earlier epoch
ends at the same offset either way.

The mapping from request to response is pure (:func:`partitions_to_read`, :func:`epoch_end_offsets`); the handler
(:class:`EpochEndOffsets`) only reads the image (caught up with the store, as for Fetch and ListOffsets) and, under
the broker's log lock, each led partition's cache and log end offset. Errors are per partition; nothing a client
sends closes the connection or fails the other partitions.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass
from typing import cast

import structlog

from orchestrator.broker.data_plane import LeaderLog
from orchestrator.broker.leader_epochs import LeaderEpochCache
from orchestrator.broker.partition_dirs import PartitionKey
from orchestrator.broker.partition_rules import check_leader_epoch
from orchestrator.errors import (
    KafkaError,
    KafkaStorageError,
    NotLeaderOrFollower,
    TieredError,
    UnknownTopicOrPartition,
    as_wire_error,
)
from orchestrator.metadata.image import MetadataImage, topic_for
from orchestrator.protocol import messages as m
from orchestrator.protocol.framing import Request

log = structlog.get_logger(__name__)

UNDEFINED = -1  # Kafka's UNDEFINED_EPOCH and UNDEFINED_EPOCH_OFFSET


@dataclass(frozen=True, slots=True)
class LeaderLogEpochs:
    """What the answer needs of a led partition's log, read under the log lock."""

    leader_epochs: LeaderEpochCache
    log_end_offset: int


LogRead = LeaderLogEpochs | KafkaError  # a log that could not be read (a failed disk) answers its error


def _led_partition(image: MetadataImage, broker_id: int, topic: str, p: m.OffsetForLeaderPartition) -> PartitionKey:
    """The partition to read, or the KafkaError it is answered with (Kafka's order of checks)."""
    found = topic_for(image, name=topic)
    partition = found.partitions.get(p["partition"])
    if partition is None:
        raise UnknownTopicOrPartition(f"topic '{topic}' has no partition {p['partition']}")
    check_leader_epoch(found, partition.partition_id, p.get("current_leader_epoch", UNDEFINED))
    if partition.leader != broker_id:
        raise NotLeaderOrFollower(
            f"broker {broker_id} does not lead {topic}-{partition.partition_id} (its leader is {partition.leader})"
        )
    return found.topic_id, partition.partition_id


def _asked(body: m.OffsetForLeaderEpochRequest) -> Iterator[tuple[str, m.OffsetForLeaderPartition]]:
    for t in body["topics"]:
        for p in t["partitions"]:
            yield t["topic"], p


def partitions_to_read(body: m.OffsetForLeaderEpochRequest, image: MetadataImage, broker_id: int) -> set[PartitionKey]:
    """The led partitions whose logs the answer needs: those asked for that pass every check."""
    keys = set()
    for topic, p in _asked(body):
        try:
            keys.add(_led_partition(image, broker_id, topic, p))
        except KafkaError:
            continue
    return keys


def epoch_end_offsets(
    body: m.OffsetForLeaderEpochRequest,
    *,
    image: MetadataImage,
    broker_id: int,
    logs: Mapping[PartitionKey, LogRead],
) -> m.OffsetForLeaderEpochResponse:
    """The response to ``body`` from broker ``broker_id`` with ``image``, ``logs`` holding what
    :func:`partitions_to_read` named (a partition missing there is answered NOT_LEADER_OR_FOLLOWER: it was not
    led when its log was read)."""
    topics: list[m.OffsetForLeaderTopicResult] = []
    for t in body["topics"]:
        partitions: list[m.OffsetForLeaderEpochResponseEpochEndOffset] = []
        for p in t["partitions"]:
            index = p["partition"]
            entry: m.OffsetForLeaderEpochResponseEpochEndOffset = {
                "partition": index,
                "error_code": 0,
                "leader_epoch": UNDEFINED,
                "end_offset": UNDEFINED,
            }
            try:
                key = _led_partition(image, broker_id, t["topic"], p)
            except KafkaError as exc:
                entry["error_code"] = exc.code
            else:
                read = logs.get(key)
                if read is None:
                    entry["error_code"] = NotLeaderOrFollower.code
                elif isinstance(read, KafkaError):
                    entry["error_code"] = read.code
                else:
                    leader_epoch = image.topics[key[0]].partitions[index].leader_epoch
                    entry["leader_epoch"], entry["end_offset"] = read.leader_epochs.end_offset_as_leader(
                        p["leader_epoch"], leader_epoch=leader_epoch, log_end_offset=read.log_end_offset
                    )
            partitions.append(entry)
        topics.append({"topic": t["topic"], "partitions": partitions})
    return {"throttle_time_ms": 0, "topics": topics}


class EpochEndOffsets:
    """The handler: the image caught up with the store, then the led partitions' logs under the log lock."""

    def __init__(
        self,
        *,
        broker_id: int,
        refresh_image: Callable[[], MetadataImage],
        leader_log: LeaderLog,
        log_lock: asyncio.Lock,
    ) -> None:
        self._broker_id = broker_id
        self._refresh_image = refresh_image
        self._leader_log = leader_log  # NOT_LEADER_OR_FOLLOWER / UNKNOWN_TOPIC_ID when leadership moved meanwhile
        self._log_lock = log_lock

    async def offset_for_leader_epoch(self, request: Request) -> m.OffsetForLeaderEpochResponse:
        body = cast(m.OffsetForLeaderEpochRequest, request.body)
        image = await asyncio.to_thread(self._refresh_image)
        wanted = partitions_to_read(body, image, self._broker_id)
        logs: dict[PartitionKey, LogRead] = {}
        if wanted:
            async with self._log_lock:
                logs = await asyncio.to_thread(self._read_logs, wanted)
        return epoch_end_offsets(body, image=image, broker_id=self._broker_id, logs=logs)

    def _read_logs(self, keys: Collection[PartitionKey]) -> dict[PartitionKey, LogRead]:
        """Each partition's cache and log end offset (a worker thread, under the log lock)."""
        out: dict[PartitionKey, LogRead] = {}
        for key in keys:
            try:
                plog = self._leader_log(*key)
                out[key] = LeaderLogEpochs(plog.leader_epochs, plog.log_end_offset)
            except TieredError as exc:
                wire = as_wire_error(exc)
                if isinstance(wire, KafkaStorageError):
                    log.warning(
                        "broker.storage_error",
                        api="OffsetForLeaderEpoch",
                        topic_id=str(key[0]),
                        partition=key[1],
                        detail=wire.message,
                    )
                out[key] = wire
        return out
