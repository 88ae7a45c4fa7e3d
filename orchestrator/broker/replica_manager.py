"""A broker's replication, both sides, run as one loop of the agent: the follower side fetches every partition it
follows from its leader (:mod:`orchestrator.broker.replica_fetcher`), the leader side asks the controller to shrink
and expand its partitions' ISR (:mod:`orchestrator.broker.isr_proposals`). Both read the one
:class:`~orchestrator.broker.replication.ReplicaStates` the data plane keeps (followers' fetches, high watermarks).

Invariants: the replication state (:class:`ReplicaStates`) holds only partitions this broker has a replica of in the
latest image (pruned once per new image); one fetcher task per leader broker, started by
:meth:`ReplicaManager.round` and ended by :meth:`ReplicaManager.close` (and by itself when its leader leads nothing
followed here any more); the leader side sends one AlterPartition per partition and partition epoch at most.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping

from orchestrator.broker.controller_link import ControllerLink
from orchestrator.broker.isr_proposals import IsrChanges, IsrProposal
from orchestrator.broker.local_log import PartitionLog
from orchestrator.broker.replica_fetcher import ReplicaFetcher
from orchestrator.broker.replication import PartitionKey, ReplicaStates
from orchestrator.ids import Uuid
from orchestrator.metadata.image import MetadataImage
from orchestrator.net.admin import AdminClient
from orchestrator.net.connection import ConnectionPool
from orchestrator.supervision import loop_retry_wait


def alter_through(link: ControllerLink, controllers: AdminClient) -> Callable[[IsrProposal], Awaitable[object]]:
    """The leader side's way to the active controller: each proposal as AlterPartition (raises its refusal)."""

    async def alter(proposal: IsrProposal) -> object:
        return await link.alter_partition(
            controllers,
            topic_id=proposal.topic_id,
            partition=proposal.partition,
            leader_epoch=proposal.leader_epoch,
            partition_epoch=proposal.partition_epoch,
            new_isr=proposal.new_isr,
        )

    return alter


def epoch_start_offset(plog: PartitionLog, leader_epoch: int) -> int:
    """Where ``leader_epoch`` began in this leader's log: its entry's start, or the log end offset when nothing was
    appended in it yet (Kafka writes that entry as a broker becomes leader)."""
    for entry in plog.leader_epochs.entries:
        if entry.epoch == leader_epoch:
            return entry.start_offset
    return plog.log_end_offset


def replicas_held(image: MetadataImage, broker_id: int) -> list[PartitionKey]:
    """Every partition ``broker_id`` holds a replica of in ``image``."""
    return [
        (topic.topic_id, index)
        for topic in image.topics.values()
        for index, part in topic.partitions.items()
        if broker_id in part.replicas
    ]


class ReplicaManager:
    def __init__(
        self,
        *,
        broker_id: int,
        image: Callable[[], MetadataImage],
        logs: Mapping[PartitionKey, PartitionLog],
        open_log: Callable[[MetadataImage, Uuid, int], PartitionLog],
        log_lock: asyncio.Lock,
        replicas: ReplicaStates,
        pool: ConnectionPool,
        request_timeout_s: float,
        alter_isr: Callable[[IsrProposal], Awaitable[object]],
        lag_max_ms: int,
        retry_max_ms: int,
        now_ms: Callable[[], int],
        on_isr_change: Callable[[int, int], None],
    ) -> None:
        self._pool, self._broker_id, self._image, self._replicas = pool, broker_id, image, replicas
        self._pruned_for: MetadataImage | None = None
        self.fetcher = ReplicaFetcher(
            broker_id=broker_id,
            image=image,
            open_log=open_log,
            log_lock=log_lock,
            replicas=replicas,
            pool=pool,
            request_timeout_s=request_timeout_s,
            retry_wait=loop_retry_wait(retry_max_ms),
        )

        def start_of(key: PartitionKey, leader_epoch: int) -> int | None:
            plog = logs.get(key)
            return None if plog is None else epoch_start_offset(plog, leader_epoch)

        self.isr = IsrChanges(
            broker_id=broker_id,
            image=image,
            replicas=replicas,
            epoch_start_offset=start_of,
            alter=alter_isr,
            lag_max_ms=lag_max_ms,
            now_ms=now_ms,
            on_change=on_isr_change,
        )

    async def round(self) -> None:
        self._forget_partitions_gone()
        await self.fetcher.round()
        await self.isr.round()

    def _forget_partitions_gone(self) -> None:
        """Drop the replication state of partitions this broker no longer holds a replica of (a deleted topic, a
        new assignment), once per new image: the state grows with the partitions held, not with their history."""
        image = self._image()
        if image is self._pruned_for:
            return
        self._pruned_for = image
        self._replicas.forget_all_but(replicas_held(image, self._broker_id))

    async def close(self) -> None:
        await self.fetcher.close()
        await self._pool.close()
