"""Partition records, replica placement and leadership: pure functions of an image (KRaft's rules).

Nothing here reads the store or a clock: each function takes a :class:`MetadataImage` (and, for placement, the
round-robin cursor) and returns the records to append, or raises a typed Kafka error.

* Replicas are placed round-robin over the live (registered, unfenced) brokers sorted by id, starting at a cursor
  that the caller rotates per topic from a random start; the leader is the first replica. A new partition's ISR is
  its live replicas (all of them if none is live, leaderless).
* The ISR is who holds every acknowledged record (followers replicate their leader's log), and only
  its members may lead, as in KRaft. Only the leader grows the ISR (AlterPartition, ``isr_changes.py``, once a
  follower has caught up); the controller only shrinks it.
* Leaving (fencing: session timeout, WantFence/WantShutDown, a new incarnation, unregistration) removes the broker
  from every ISR, except a last member: a partition whose every in-sync replica left keeps the last one to leave as
  its ISR, leaderless, because that is the replica known to hold everything acknowledged. Each partition the broker
  led goes to its first live in-ISR replica in replica order, or to -1.
* Rejoining (unfencing) does not put the broker back in any ISR: it must catch up first, and its leader then asks.
  It takes the leadership of the leaderless partitions whose ISR it is in (the last member to leave comes back as
  leader) and, with ``rebalance``, of those it is the preferred (first) replica of and in the ISR of.
* Leader balancing (``rebalance``, on every controller tick): a live in-sync preferred replica that does not lead
  takes its partition's leadership back; an out-of-sync one never does.
* Unclean election (topic config ``unclean.leader.election.enable``, default false): a leaderless partition whose
  in-sync replicas are all fenced or gone elects a live replica outside the ISR, whose ISR becomes just that broker
  (acknowledged records it lacks are lost). It happens when the leader leaves with no live in-sync replica, and when
  such a replica rejoins.
* With one replica nothing of this shows: the sole replica is always the ISR, leaves leaderless and returns leader.
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
from orchestrator.metadata.topic_configs import flag

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


UNCLEAN_LEADER_ELECTION = "unclean.leader.election.enable"


def leave_records(image: MetadataImage, broker_id: int) -> list[MetadataRecord]:
    """PartitionChangeRecords taking ``broker_id`` out of every ISR (but a last member) and leadership; a partition
    left without a live in-sync replica elects a live one outside the ISR when its topic allows unclean election."""

    def usable(b: int) -> bool:
        return b != broker_id and _live(image, b)

    out: list[MetadataRecord] = []
    for topic, p in _partitions(image):
        if broker_id not in p.isr and p.leader != broker_id:
            continue
        isr = [b for b in p.isr if b != broker_id] or list(p.isr)
        leader = p.leader
        if leader == broker_id:
            leader = next((b for b in p.replicas if b in isr and usable(b)), NO_LEADER)
            unclean = next((b for b in p.replicas if usable(b)), NO_LEADER)
            if leader == NO_LEADER and unclean != NO_LEADER and _unclean_allowed(image, topic):
                leader, isr = unclean, [unclean]
        change = _change(topic.topic_id, p, isr, leader)
        if change is not None:
            out.append(change)
    return out


def rejoin_records(image: MetadataImage, broker_id: int, *, rebalance: bool) -> list[MetadataRecord]:
    """PartitionChangeRecords for an unfenced ``broker_id``: leading the leaderless partitions whose ISR it is in (or,
    with unclean election allowed, whose ISR is all fenced) and (``rebalance``) those it is the preferred replica
    of and in the ISR of. It joins no ISR: its leader adds it once it has caught up."""
    out: list[MetadataRecord] = []
    for topic, p in _partitions(image):
        if broker_id not in p.replicas:
            continue
        isr, leader = list(p.isr), p.leader
        if leader == NO_LEADER and broker_id in p.isr:
            leader = broker_id
        elif leader == NO_LEADER and _unclean_allowed(image, topic) and not any(_live(image, b) for b in p.isr):
            leader, isr = broker_id, [broker_id]
        elif rebalance and p.replicas[0] == broker_id and broker_id in p.isr:
            leader = broker_id
        change = _change(topic.topic_id, p, isr, leader)
        if change is not None:
            out.append(change)
    return out


def preferred_leader_records(image: MetadataImage) -> list[MetadataRecord]:
    """PartitionChangeRecords giving each partition whose preferred (first) replica is live and in the ISR but does
    not lead its leadership back (KRaft's automatic leader balancing; a replica that rejoined gets there once its
    leader has added it to the ISR)."""
    out: list[MetadataRecord] = []
    for topic, p in _partitions(image):
        preferred = p.replicas[0] if p.replicas else NO_LEADER
        if preferred != p.leader and preferred in p.isr and _live(image, preferred):
            change = _change(topic.topic_id, p, list(p.isr), preferred)
            if change is not None:
                out.append(change)
    return out


def _live(image: MetadataImage, broker_id: int) -> bool:
    broker = image.brokers.get(broker_id)
    return broker is not None and not broker.fenced


def _unclean_allowed(image: MetadataImage, topic: TopicImage) -> bool:
    return flag(image.topic_configs(topic.name), UNCLEAN_LEADER_ELECTION)


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
