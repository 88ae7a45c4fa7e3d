"""Partition records, replica placement and leadership: pure functions of an image (KRaft's rules).

Nothing here reads the store or a clock: each function takes a :class:`MetadataImage` (and, for placement, the
round-robin cursor) and returns the records to append, or raises a typed Kafka error.

* Replicas are placed round-robin over the live (registered, unfenced) brokers sorted by id, starting at a cursor
  that the caller rotates per topic from a random start; the leader is the first replica. A new partition's ISR is
  its live replicas (all of them if none is live, leaderless).
* Leaving (fencing: session timeout, WantFence/WantShutDown, a new incarnation, unregistration) removes the broker
  from every ISR (KRaft keeps the last member, leaderless) and moves each partition it leads to the first live
  in-ISR replica in replica order, or to -1.
* Rejoining (unfencing): local data is not replicated between brokers (ARCHITECTURE §2), so an unfenced broker is put
  back in the ISR of its partitions, takes the leadership of leaderless ones and, with ``rebalance``, of those it is the
  preferred (first) replica of: that is where its data is.
* A PartitionChangeRecord is written only for a partition that changes, and names only what changes.
* A new topic is its TopicRecord, one PartitionRecord per partition, then the records of its configs and tiered
  state (:func:`new_topic_records`): what a client's CreateTopics and the controller's own internal topic write.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping, Sequence

from orchestrator.errors import InvalidReplicaAssignment, InvalidReplicationFactor
from orchestrator.ids import Uuid
from orchestrator.metadata.image import LEADER_UNCHANGED, NO_LEADER, MetadataImage, PartitionImage, TopicImage
from orchestrator.metadata.records import MetadataRecord, make_record

from . import tiering


def place(image: MetadataImage, count: int, factor: int, *, cursor: int) -> tuple[list[list[int]], int]:
    """Replicas for ``count`` new partitions of ``factor`` replicas each, and the cursor for the next topic."""
    if factor <= 0:
        raise InvalidReplicationFactor(f"the replication factor must be positive (or -1 for the default), got {factor}")
    live = sorted(b.broker_id for b in image.brokers.values() if not b.fenced)
    if factor > len(live):
        raise InvalidReplicationFactor(
            f"replication factor {factor} cannot be reached: only {len(live)} broker(s) are registered and unfenced"
        )
    assignment = [[live[(cursor + p + k) % len(live)] for k in range(factor)] for p in range(count)]
    return assignment, cursor + 1


def check_replicas(replicas: Sequence[int], image: MetadataImage, *, where: str) -> None:
    """INVALID_REPLICA_ASSIGNMENT unless ``replicas`` are distinct registered brokers, not all of them fenced."""
    if not replicas:
        raise InvalidReplicaAssignment(f"{where} has no replicas")
    if len(set(replicas)) != len(replicas):
        raise InvalidReplicaAssignment(f"{where} names a broker twice: {list(replicas)}")
    unknown = [b for b in replicas if b not in image.brokers]
    if unknown:
        raise InvalidReplicaAssignment(f"{where} names unregistered broker(s) {unknown}")
    if all(image.brokers[b].fenced for b in replicas):
        raise InvalidReplicaAssignment(f"every broker of {where} ({list(replicas)}) is fenced")


def partition_record(
    topic_id: Uuid, partition_id: int, replicas: Sequence[int], image: MetadataImage
) -> MetadataRecord:
    live = [b for b in replicas if b in image.brokers and not image.brokers[b].fenced]
    return make_record(
        "PartitionRecord",
        partition_id=partition_id,
        topic_id=topic_id,
        replicas=list(replicas),
        isr=live or list(replicas),
        leader=live[0] if live else NO_LEADER,
        leader_epoch=0,
        partition_epoch=0,
    )


def new_topic_id(image: MetadataImage, rng: random.Random) -> Uuid:
    """A topic id drawn from ``rng`` that no topic has, live or removed (a removed topic's remote data may still be
    deleted under its id)."""
    while True:
        topic_id = Uuid.random(rng.randbytes)
        if topic_id not in image.topics and topic_id not in image.removed_topics:
            return topic_id


def new_topic_records(
    image: MetadataImage,
    name: str,
    topic_id: Uuid,
    assignment: Sequence[Sequence[int]],
    configs: Mapping[str, str],
) -> tuple[list[MetadataRecord], tiering.TieringPlan]:
    """The records that create topic ``name`` with id ``topic_id``, partition ``i`` on ``assignment[i]`` and the
    (validated) ``configs``, and the tiering plan they carry out (its state after is the topic's first)."""
    plan = tiering.plan(TopicImage(topic_id=topic_id, name=name), {}, configs)
    records = [
        make_record("TopicRecord", name=name, topic_id=topic_id),
        *(partition_record(topic_id, i, replicas, image) for i, replicas in enumerate(assignment)),
        *plan.records,
    ]
    return records, plan


def leave_records(image: MetadataImage, broker_id: int) -> list[MetadataRecord]:
    """PartitionChangeRecords taking ``broker_id`` out of every ISR and leadership (KRaft keeps a last ISR member)."""

    def usable(b: int) -> bool:
        return b != broker_id and b in image.brokers and not image.brokers[b].fenced

    out: list[MetadataRecord] = []
    for topic, p in _partitions(image):
        if broker_id not in p.isr and p.leader != broker_id:
            continue
        isr = [b for b in p.isr if b != broker_id] or list(p.isr)
        leader = p.leader
        if leader == broker_id:
            leader = next((b for b in p.replicas if b in isr and usable(b)), NO_LEADER)
        change = _change(topic.topic_id, p, isr, leader)
        if change is not None:
            out.append(change)
    return out


def rejoin_records(image: MetadataImage, broker_id: int, *, rebalance: bool) -> list[MetadataRecord]:
    """PartitionChangeRecords putting an unfenced ``broker_id`` back in the ISR of its partitions, leading the
    leaderless ones and (``rebalance``) those it is the preferred replica of."""
    out: list[MetadataRecord] = []
    for topic, p in _partitions(image):
        if broker_id not in p.replicas:
            continue
        isr = [b for b in p.replicas if b in p.isr or b == broker_id]
        leader = p.leader
        if leader == NO_LEADER or (rebalance and p.replicas[0] == broker_id):
            leader = broker_id
        change = _change(topic.topic_id, p, isr, leader)
        if change is not None:
            out.append(change)
    return out


def _partitions(image: MetadataImage) -> Iterable[tuple[TopicImage, PartitionImage]]:
    for topic in image.topics.values():
        for p in sorted(topic.partitions.values(), key=lambda p: p.partition_id):
            yield topic, p


def _change(topic_id: Uuid, p: PartitionImage, isr: list[int], leader: int) -> MetadataRecord | None:
    isr_changed = tuple(isr) != p.isr
    if not isr_changed and leader == p.leader:
        return None
    return make_record(
        "PartitionChangeRecord",
        topic_id=topic_id,
        partition_id=p.partition_id,
        isr=isr if isr_changed else None,
        leader=leader if leader != p.leader else LEADER_UNCHANGED,
    )
