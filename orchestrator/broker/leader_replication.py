"""A leader's side of replication in the data plane: the high watermark of each partition it leads, the wait of an
acks=all write for its in-sync replicas, and where a follower's log leaves this one (KIP-320).

Invariants:

* The high watermark is :class:`~orchestrator.broker.replication.ReplicaStates`' (the least log end offset of the
  ISR, never back, never past the log end); each time it moves, acks=all waits and long polls are woken
  (``on_moved``: the data plane's wake-up of waiting fetches).
* An acks=all write is answered only when the high watermark has passed it *and* the ISR holds at least
  ``min.insync.replicas`` (Kafka checks both as it answers): NOT_ENOUGH_REPLICAS_AFTER_APPEND when the ISR is below
  it (also when its shrinking is what let the high watermark through), REQUEST_TIMED_OUT when the request's
  timeout passes first (the records stay in the leader's log, as in Kafka), NOT_LEADER_OR_FOLLOWER or
  UNKNOWN_TOPIC_OR_PARTITION when leadership or the topic went meanwhile.
* A wait is woken by a follower's fetch that moves the high watermark; the ISR changes only in the image, which a
  wait looks at again every :data:`ISR_RECHECK_S`.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable

from orchestrator.broker.local_log import PartitionLog
from orchestrator.broker.replication import ReplicaStates
from orchestrator.errors import (
    NotEnoughReplicasAfterAppend,
    NotLeaderOrFollower,
    RequestTimedOut,
    UnknownTopicOrPartition,
)
from orchestrator.metadata.image import MetadataImage, TopicImage
from orchestrator.metadata.topic_configs import int_or_default
from orchestrator.protocol import messages as m

ISR_RECHECK_S = 0.25  # an acks=all wait looks at the image's ISR this often (its changes wake nothing)


class LeaderReplication:
    """The high watermarks and acks=all waits of the partitions a broker leads (see the module docstring)."""

    def __init__(
        self,
        *,
        replicas: ReplicaStates,
        image: Callable[[], MetadataImage],
        on_moved: Callable[[], None],
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.replicas = replicas
        self._image = image
        self._on_moved = on_moved
        self._monotonic = monotonic
        self._moved = asyncio.Event()  # set (and replaced) when a high watermark moves: acks=all waits wake up

    def high_watermark(self, topic: TopicImage, partition: int, plog: PartitionLog) -> int:
        """The high watermark of a partition this broker leads, moved forward if its ISR allows (and the waits on it
        woken when it moves). Call it on the event loop."""
        p = topic.partitions[partition]
        key = (topic.topic_id, partition)
        before = self.replicas.stored_high_watermark(key)
        hw = self.replicas.high_watermark(
            key,
            leader_epoch=p.leader_epoch,
            leader=p.leader,  # this broker: only the log of a partition it leads is open here
            isr=p.isr,
            leader_end=plog.log_end_offset,
            log_start=plog.log_start_offset,
        )
        if hw > before:
            self._moved.set()
            self._moved = asyncio.Event()
            self._on_moved()  # a consumer waiting at the high watermark has records now
        return hw

    async def wait_replicated(
        self, topic: TopicImage, partition: int, plog: PartitionLog, end: int, timeout_ms: int
    ) -> None:
        """Wait until every in-sync replica has the log up to ``end`` (acks=all), with at least
        ``min.insync.replicas`` in the ISR; raises as the module docstring says."""
        deadline = self._monotonic() + max(timeout_ms, 0) / 1000
        key = (topic.topic_id, partition)
        while True:
            moved = self._moved
            image = self._image()
            current = image.topics.get(topic.topic_id)
            if current is None or partition not in current.partitions:
                raise UnknownTopicOrPartition(f"topic '{topic.name}' was deleted while an acks=all write waited")
            p = current.partitions[partition]
            if p.leader != topic.partitions[partition].leader:
                raise NotLeaderOrFollower(f"{topic.name}-{partition}: leadership moved while an acks=all write waited")
            reached = self.high_watermark(current, partition, plog) >= end
            min_isr = int_or_default(image.topic_configs(topic.name), "min.insync.replicas")
            if reached and len(p.isr) >= min_isr:
                return
            if len(p.isr) < min_isr:  # reached or not: fewer copies than promised (Kafka checks it as it answers)
                raise NotEnoughReplicasAfterAppend(
                    f"{topic.name}-{partition}: the ISR {list(p.isr)} fell below min.insync.replicas={min_isr} "
                    f"before offset {end - 1} was replicated"
                )
            left = deadline - self._monotonic()
            if left <= 0:
                raise RequestTimedOut(
                    f"{topic.name}-{partition}: offset {end - 1} was not replicated to the ISR {list(p.isr)} "
                    f"within {timeout_ms} ms (followers: {self.replicas.followers(key)})"
                )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(moved.wait(), timeout=min(left, ISR_RECHECK_S))


def diverging(
    plog: PartitionLog, leader_epoch: int, last_fetched_epoch: int, fetch_offset: int
) -> m.FetchResponseEpochEndOffset | None:
    """Where a follower's log leaves this one (Kafka's check of a follower's fetch, KIP-320): the epoch it last
    fetched ends here before its fetch offset, or this log has no such epoch (as the leader answers it,
    :meth:`LeaderEpochCache.end_offset_as_leader`). None when the logs agree."""
    if last_fetched_epoch < 0:
        return None
    epoch, end = plog.leader_epochs.end_offset_as_leader(
        last_fetched_epoch, leader_epoch=leader_epoch, log_end_offset=plog.log_end_offset
    )
    if end < fetch_offset or epoch < last_fetched_epoch:
        return {"epoch": epoch, "end_offset": end}
    return None
