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
  takes its partition's leadership back; an out-of-sync one never does. A tick pays only for what changed since the
  last check (:func:`preferred_leader_changes`): the image's maps are immutable and replaced when anything in them
  changes, so a topic whose partitions map and whose image's brokers map are the very objects a check found settled
  is settled still. Its answer is always the full scan's (:func:`preferred_leader_records`): at 10,000 topics the
  full scan was about 150 ms of the core thread per tick, ten ticks a second.
* Eligible leader replicas (ELR, KIP-966): a replica that leaves the ISR while the ISR is (then) smaller than the
  topic's ``min.insync.replicas`` joins the ELR, since nothing can be committed without it from then on; an ISR
  back at ``min.insync.replicas`` empties it. A broker back on a new disk (``lost``: its registration's log
  directory ids are new, KIP-858) leaves the ELR, and leaves the ISR even as its last member when the ELR names
  another replica; a partition whose ISR is then empty elects a live ELR member (its ISR becomes that one), now or
  when one rejoins. Without an ELR member the lost broker stays the last member, as with one replica.
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
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from orchestrator.errors import InvalidReplicaAssignment, InvalidReplicationFactor
from orchestrator.ids import Uuid
from orchestrator.metadata.image import (
    LEADER_UNCHANGED,
    NO_LEADER,
    BrokerImage,
    MetadataImage,
    PartitionImage,
    TopicImage,
)
from orchestrator.metadata.records import MetadataRecord, make_record
from orchestrator.metadata.topic_configs import flag, int_or_default

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
MIN_INSYNC_REPLICAS = "min.insync.replicas"


def leave_records(image: MetadataImage, broker_id: int, *, lost: bool = False) -> list[MetadataRecord]:
    """PartitionChangeRecords taking ``broker_id`` out of every ISR (but a last member) and leadership; a partition
    left without a live in-sync replica elects a live eligible leader replica (ELR), or, when its topic allows unclean
    election, a live one outside the ISR. ``lost``: the broker came back on a new disk (its log directories are not
    the ones it registered before): it holds nothing, so it leaves the ELR, and leaves the ISR even as its last
    member when the ELR names someone else (who holds every committed record); with no one else (one replica, or
    ``min.insync.replicas`` 1) it stays, and leads again with what the remote tier holds (the broker rebuilds its
    log from the RLMM: what only the lost disk held is gone)."""

    def usable(b: int) -> bool:
        return b != broker_id and _live(image, b)

    out: list[MetadataRecord] = []
    for topic, p in _partitions(image):
        if broker_id not in p.isr and p.leader != broker_id and not (lost and broker_id in p.elr):
            continue
        min_isr = min_insync(image, topic)
        rest = [b for b in p.isr if b != broker_id]
        isr = rest or list(p.isr)
        elr = next_elr(p, isr, min_isr, gone=broker_id if lost else None)
        if lost and not rest and broker_id in p.isr:
            eligible = next_elr(p, [], min_isr, gone=broker_id)
            if eligible:  # someone holds every committed record: the empty disk does not stay the last member
                isr, elr = [], eligible
        leader = p.leader
        if leader == broker_id:
            leader = next((b for b in p.replicas if b in isr and usable(b)), NO_LEADER)
        if leader == NO_LEADER and not any(usable(b) for b in isr):
            leader, isr, elr = _elect_outside_isr(image, topic, p, isr, elr, usable)
        change = _change(topic.topic_id, p, isr, leader, elr)
        if change is not None:
            out.append(change)
    return out


def _elect_outside_isr(
    image: MetadataImage,
    topic: TopicImage,
    p: PartitionImage,
    isr: list[int],
    elr: list[int],
    usable: Callable[[int], bool],
) -> tuple[int, list[int], list[int]]:
    """(leader, ISR, ELR) of a partition none of whose in-sync replicas can lead: a live eligible leader replica
    when the ISR is empty (it holds every committed record), else a live replica outside the ISR when the topic
    allows unclean election, else leaderless as it is."""
    eligible = next((b for b in p.replicas if b in elr and usable(b)), NO_LEADER) if not isr else NO_LEADER
    if eligible != NO_LEADER:
        return eligible, [eligible], [b for b in elr if b != eligible]
    unclean = next((b for b in p.replicas if usable(b)), NO_LEADER)
    if unclean != NO_LEADER and _unclean_allowed(image, topic):
        return unclean, [unclean], []
    return NO_LEADER, isr, elr


def next_elr(p: PartitionImage, isr: Sequence[int], min_isr: int, *, gone: int | None = None) -> list[int]:
    """The ELR once the ISR is ``isr`` (KIP-966): empty while the ISR has at least ``min_isr`` members (a record can
    be committed without any one outside it); else what it was, with every replica that just left the ISR (each
    holds every committed record: none can be committed without ``min_isr`` in-sync replicas), less the new ISR's
    members and ``gone`` (a broker whose disk was lost holds nothing), in replica order."""
    if len(isr) >= min_isr:
        return []
    members = (set(p.elr) | (set(p.isr) - set(isr))) - set(isr) - {gone}
    return [b for b in p.replicas if b in members]


def min_insync(image: MetadataImage, topic: TopicImage) -> int:
    return int_or_default(image.topic_configs(topic.name), MIN_INSYNC_REPLICAS)


def rejoin_records(image: MetadataImage, broker_id: int, *, rebalance: bool) -> list[MetadataRecord]:
    """PartitionChangeRecords for an unfenced ``broker_id``: leading the leaderless partitions whose ISR it is in,
    or whose ISR is empty and whose ELR it is in (or, with unclean election allowed, whose ISR is all fenced) and
    (``rebalance``) those it is the preferred replica of and in the ISR of. It joins no ISR otherwise: its leader
    adds it once it has caught up."""
    out: list[MetadataRecord] = []
    for topic, p in _partitions(image):
        if broker_id not in p.replicas:
            continue
        isr, leader, elr = list(p.isr), p.leader, list(p.elr)
        if leader == NO_LEADER and broker_id in p.isr:
            leader = broker_id
        elif leader == NO_LEADER and not p.isr and broker_id in p.elr:
            leader, isr, elr = broker_id, [broker_id], [b for b in p.elr if b != broker_id]
        elif leader == NO_LEADER and _unclean_allowed(image, topic) and not any(_live(image, b) for b in p.isr):
            leader, isr, elr = broker_id, [broker_id], []
        elif rebalance and p.replicas[0] == broker_id and broker_id in p.isr:
            leader = broker_id
        change = _change(topic.topic_id, p, isr, leader, elr)
        if change is not None:
            out.append(change)
    return out


def preferred_leader_records(image: MetadataImage) -> list[MetadataRecord]:
    """PartitionChangeRecords giving each partition whose preferred (first) replica is live and in the ISR but does
    not lead its leadership back (KRaft's automatic leader balancing; a replica that rejoined gets there once its
    leader has added it to the ISR): the full scan, the reference for :func:`preferred_leader_changes`."""
    return [change for topic in image.topics.values() for change in _preferred_changes(image, topic)]


@dataclass(frozen=True)
class LeaderBalance:
    """What one check of preferred leaders read and found, for the next check to skip what did not change.

    ``brokers`` is the image's brokers map the check read; ``topics`` its topics map, kept only when the check found
    nothing to change (a check whose records were never appended must be made again); ``settled`` holds, per topic,
    the partitions map in which no partition could take its preferred leader back."""

    brokers: Mapping[int, BrokerImage] | None = None
    topics: Mapping[Uuid, TopicImage] | None = None
    settled: Mapping[Uuid, Mapping[int, PartitionImage]] = field(default_factory=dict)


def preferred_leader_changes(image: MetadataImage, last: LeaderBalance) -> tuple[list[MetadataRecord], LeaderBalance]:
    """:func:`preferred_leader_records` of ``image``, checking only the topics whose partitions map is not the one
    ``last`` found settled (all of them when the brokers map changed: a broker fenced or unfenced), and nothing when
    neither map changed since a check that found nothing; with what to pass to the next check."""
    if image.brokers is last.brokers and image.topics is last.topics:
        return [], last
    known = last.settled if image.brokers is last.brokers else {}
    out: list[MetadataRecord] = []
    settled: dict[Uuid, Mapping[int, PartitionImage]] = {}
    for topic in image.topics.values():
        partitions = topic.partitions
        if known.get(topic.topic_id) is not partitions:
            changes = _preferred_changes(image, topic)
            if changes:
                out += changes
                continue
        settled[topic.topic_id] = partitions
    return out, LeaderBalance(image.brokers, None if out else image.topics, settled)


def _preferred_changes(image: MetadataImage, topic: TopicImage) -> list[MetadataRecord]:
    out: list[MetadataRecord] = []
    for p in sorted(topic.partitions.values(), key=lambda p: p.partition_id):
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


def _change(
    topic_id: Uuid, p: PartitionImage, isr: list[int], leader: int, elr: Sequence[int] | None = None
) -> MetadataRecord | None:
    isr_changed = tuple(isr) != p.isr
    elr_changed = elr is not None and tuple(elr) != p.elr
    if not isr_changed and not elr_changed and leader == p.leader:
        return None
    return make_record(
        "PartitionChangeRecord",
        topic_id=topic_id,
        partition_id=p.partition_id,
        isr=isr if isr_changed else None,
        leader=leader if leader != p.leader else LEADER_UNCHANGED,
        eligible_leader_replicas=list(elr) if elr_changed and elr is not None else None,
    )
