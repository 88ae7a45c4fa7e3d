"""A leader's changes to its partitions' ISR (Kafka's ``Partition.maybeShrinkIsr`` / ``maybeExpandIsr``), asked of
the active controller with AlterPartition; the image shows them once the controller has written them.

Each round, for every partition this broker leads with more than one replica (:class:`ReplicaStates` holds what
its followers' fetches said):

* **shrink**: an ISR member that has not caught up with the leader's log for ``replica.lag.time.max.ms`` leaves
  (a dead, frozen or cut-off follower; one never heard of in this term counts from when this broker began leading);
* **expand**: a replica outside the ISR whose log reaches the high watermark, and the offset where the leader's
  current epoch began, joins (a returning broker, once it has truncated and caught up: KIP-101), if it fetched
  within ``replica.lag.time.max.ms``: a replica that stopped fetching is never taken back on an old fetch.

The proposal is the current ISR with both changes, in replica order, the leader always in it. At most one request
per partition is in flight, and a proposal is sent again only once the image shows a new partition epoch or a
request failed (the controller refuses a stale partition epoch with INVALID_UPDATE_VERSION, so nothing is applied
twice). Failures are logged (``broker.isr_change_failed``) and retried next round.

Invariants: the leader never proposes an ISR without itself; a replica joins only with every offset below the high
watermark; a partition of one replica is never touched.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass

import structlog

from orchestrator.broker.replication import PartitionKey, ReplicaStates
from orchestrator.errors import KafkaError, TieredError
from orchestrator.ids import Uuid
from orchestrator.metadata.image import MetadataImage, PartitionImage

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class IsrProposal:
    topic_id: Uuid
    partition: int
    leader_epoch: int
    partition_epoch: int
    new_isr: tuple[int, ...]


AlterIsr = Callable[[IsrProposal], Awaitable[object]]


def propose(
    p: PartitionImage,
    key: PartitionKey,
    replicas: ReplicaStates,
    *,
    now_ms: int,
    lag_max_ms: int,
    leading_since_ms: int,
    epoch_start_offset: int,
) -> tuple[int, ...] | None:
    """The ISR this partition's leader should ask for now, or None when it stays as it is. Pure."""
    if len(p.replicas) < 2:
        return None
    lagging = set(
        replicas.out_of_sync(
            key, leader=p.leader, isr=p.isr, now_ms=now_ms, lag_max_ms=lag_max_ms, since_ms=leading_since_ms
        )
    )
    hw = replicas.stored_high_watermark(key)
    at = max(hw, epoch_start_offset)
    joining = set(
        replicas.caught_up(key, replicas=p.replicas, isr=p.isr, high_watermark=at, now_ms=now_ms, lag_max_ms=lag_max_ms)
    )
    members = (set(p.isr) - lagging) | joining | {p.leader}
    proposal = tuple(r for r in p.replicas if r in members)
    return None if set(proposal) == set(p.isr) else proposal


def led_with_replicas(image: MetadataImage, broker_id: int) -> list[tuple[PartitionKey, PartitionImage]]:
    """The partitions ``broker_id`` leads that have followers (an ISR to look after)."""
    return [
        ((topic.topic_id, p.partition_id), p)
        for topic in image.topics.values()
        for p in topic.partitions.values()
        if p.leader == broker_id and len(p.replicas) > 1
    ]


class IsrChanges:
    """Sends the ISR changes of the partitions this broker leads (see the module docstring)."""

    def __init__(
        self,
        *,
        broker_id: int,
        image: Callable[[], MetadataImage],
        replicas: ReplicaStates,
        epoch_start_offset: Callable[[PartitionKey, int], int | None],
        alter: AlterIsr,
        lag_max_ms: int,
        now_ms: Callable[[], int],
        on_change: Callable[[int, int], None] = lambda removed, added: None,
    ) -> None:
        self._broker_id = broker_id
        self._image = image
        self._replicas = replicas
        self._epoch_start_offset = epoch_start_offset
        self._alter = alter
        self._lag_max_ms = lag_max_ms
        self._now_ms = now_ms
        self._on_change = on_change  # (replicas removed, replicas added) of each change made
        self._leading_since: dict[tuple[PartitionKey, int], int] = {}  # (partition, leader epoch) -> since when
        self._sent: dict[PartitionKey, int] = {}  # partition -> the partition epoch a change was asked at
        self._led_in: MetadataImage | None = None  # the image self._led was worked out from
        self._led: list[tuple[PartitionKey, PartitionImage]] = []

    async def round(self) -> None:
        image, now = self._image(), self._now_ms()
        if image is not self._led_in:  # a walk of every partition of the cluster: once per image
            self._led_in, self._led = image, led_with_replicas(image, self._broker_id)
            self._forget_all_but({(key, p.leader_epoch) for key, p in self._led})
        led = self._led
        for key, p in led:
            since = self._leading_since.setdefault((key, p.leader_epoch), now)
            if self._sent.get(key) == p.partition_epoch:
                continue  # asked at this partition epoch already: wait for the image to show the answer
            start = self._epoch_start_offset(key, p.leader_epoch)
            if start is None:
                continue  # the log is not open here (yet)
            new_isr = propose(
                p,
                key,
                self._replicas,
                now_ms=now,
                lag_max_ms=self._lag_max_ms,
                leading_since_ms=since,
                epoch_start_offset=start,
            )
            if new_isr is None:
                continue
            proposal = IsrProposal(key[0], key[1], p.leader_epoch, p.partition_epoch, new_isr)
            self._sent[key] = p.partition_epoch
            try:
                await self._alter(proposal)
            except (TieredError, OSError, TimeoutError) as exc:
                del self._sent[key]  # asked again next round
                error = exc.name if isinstance(exc, KafkaError) else type(exc).__name__
                log.warning(
                    "broker.isr_change_failed",
                    topic_id=str(key[0]),
                    partition=key[1],
                    isr=list(p.isr),
                    proposed=list(new_isr),
                    error=error,
                    detail=str(exc),
                )
                continue
            self._on_change(len(set(p.isr) - set(new_isr)), len(set(new_isr) - set(p.isr)))
            log.info(
                "broker.isr_changed",
                topic_id=str(key[0]),
                partition=key[1],
                isr=list(p.isr),
                proposed=list(new_isr),
                leader_epoch=p.leader_epoch,
            )

    def _forget_all_but(self, terms: Collection[tuple[PartitionKey, int]]) -> None:
        for term in [t for t in self._leading_since if t not in terms]:
            del self._leading_since[term]
        keys = {key for key, _ in terms}
        for key in [k for k in self._sent if k not in keys]:
            del self._sent[key]
