"""AlterPartition's decision: whether a partition leader's request to change its ISR is applied (KIP-497, KIP-841).

Pure: :func:`decide` takes the image and one partition's request and returns the refusal, the record to append, or
neither (the ISR already is the one asked for). :func:`check_sender` decides for the whole request.

The rules, checked in this order (KRaft's ``ReplicationControlManager``, with NOT_LEADER_OR_FOLLOWER for a sender
that does not lead):

* The sender is the registered incarnation of its broker id: else STALE_BROKER_EPOCH for the whole request.
* The topic id is known (UNKNOWN_TOPIC_ID) and the partition exists (UNKNOWN_TOPIC_OR_PARTITION).
* The request's leader epoch is the partition's (FENCED_LEADER_EPOCH: the sender's view of who leads is stale) and
  the sender is the partition's leader (NOT_LEADER_OR_FOLLOWER).
* A partition epoch ahead of the partition's is INVALID_UPDATE_VERSION.
* The new ISR is non-empty, names no broker twice, only replicas of the partition, and the leader
  (INVALID_REQUEST).
* A new ISR that already is the ISR (as a set) is answered with the current state and nothing is written, whatever
  partition epoch it was based on: the broker's link sends an unanswered request again (it may have been applied),
  and a leader that asks for what already holds loses nothing by learning the current epochs.
* Otherwise the partition epoch must be the current one: a change based on an older state is INVALID_UPDATE_VERSION
  (the controller shrank the ISR meanwhile, or another change landed), and the leader decides again from the
  metadata.
* Every member of the new ISR is registered, unfenced and, when the request gives its broker epoch (version 3,
  KIP-903; -1 skips the check), at that epoch: else INELIGIBLE_REPLICA. Members already in the ISR pass (the
  controller takes a broker that leaves out of every ISR it leads), so in practice this checks the ones added.

A change is one PartitionChangeRecord naming the new ISR (and the new ELR, KIP-966, when that changes: the replicas
a shrink below ``min.insync.replicas`` leaves out join it, an ISR back at ``min.insync.replicas`` empties it:
:func:`~orchestrator.controller.partitions.next_elr`); replaying it bumps the partition epoch and leaves the leader
and its epoch as they are (:mod:`orchestrator.metadata.image`). AlterPartition never moves leadership.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from orchestrator.errors import (
    FencedLeaderEpoch,
    IneligibleReplica,
    InvalidRequest,
    InvalidUpdateVersion,
    KafkaError,
    NotLeaderOrFollower,
    StaleBrokerEpoch,
    UnknownTopicId,
    UnknownTopicOrPartition,
)
from orchestrator.ids import Uuid
from orchestrator.metadata.image import MetadataImage, PartitionImage
from orchestrator.metadata.records import MetadataRecord, make_record

from .partitions import min_insync, next_elr

UNKNOWN_BROKER_EPOCH = -1  # a member's broker epoch the request does not give (version 2, or a leader that skips it)


@dataclass(frozen=True, slots=True)
class IsrMember:
    """One member of the ISR asked for: its broker id and the broker epoch the leader knows it by (or -1)."""

    broker_id: int
    broker_epoch: int = UNKNOWN_BROKER_EPOCH


@dataclass(frozen=True, slots=True)
class IsrRequest:
    """One partition of an AlterPartition request, from its leader ``broker_id``."""

    broker_id: int
    topic_id: Uuid
    partition_id: int
    leader_epoch: int
    partition_epoch: int
    new_isr: tuple[IsrMember, ...]


@dataclass(frozen=True, slots=True)
class IsrDecision:
    """What to do with one partition's request: refuse it (``error``), append ``record``, or neither (the ISR already
    is the one asked for). ``partition`` is the partition as the decision found it."""

    error: KafkaError | None = None
    record: MetadataRecord | None = None
    partition: PartitionImage | None = None


def check_sender(image: MetadataImage, broker_id: int, broker_epoch: int) -> StaleBrokerEpoch | None:
    """STALE_BROKER_EPOCH unless ``broker_id`` is registered at ``broker_epoch``."""
    registration = image.brokers.get(broker_id)
    if registration is None or registration.broker_epoch != broker_epoch:
        return StaleBrokerEpoch(f"broker {broker_id} at epoch {broker_epoch} is not the registered incarnation")
    return None


def decide(image: MetadataImage, request: IsrRequest) -> IsrDecision:
    """The decision on one partition's ISR change (see the module docstring for the rules and their order)."""
    topic = image.topics.get(request.topic_id)
    if topic is None:
        return IsrDecision(UnknownTopicId(f"no topic has id {request.topic_id}"))
    where = f"{topic.name}-{request.partition_id}"
    p = topic.partitions.get(request.partition_id)
    if p is None:
        return IsrDecision(UnknownTopicOrPartition(f"topic {topic.name} has no partition {request.partition_id}"))
    error = _refusal(image, p, request, where)
    if error is not None:
        return IsrDecision(error, partition=p)
    asked = [member.broker_id for member in request.new_isr]
    if set(asked) == set(p.isr):
        return IsrDecision(partition=p)
    if request.partition_epoch != p.partition_epoch:
        return IsrDecision(
            InvalidUpdateVersion(
                f"{where} is at partition epoch {p.partition_epoch}; the change was based on {request.partition_epoch}"
            ),
            partition=p,
        )
    ineligible = _ineligible(image, request.new_isr)
    if ineligible:
        return IsrDecision(
            IneligibleReplica(f"{where}: the new ISR {asked} names {', '.join(ineligible)}"), partition=p
        )
    elr = next_elr(p, asked, min_insync(image, topic))
    record = make_record(
        "PartitionChangeRecord",
        topic_id=request.topic_id,
        partition_id=request.partition_id,
        isr=asked,
        eligible_leader_replicas=elr if tuple(elr) != p.elr else None,
    )
    return IsrDecision(record=record, partition=p)


def _refusal(image: MetadataImage, p: PartitionImage, request: IsrRequest, where: str) -> KafkaError | None:
    """The refusals that do not depend on the ISR being a change: epochs, leadership, the ISR's shape."""
    if request.leader_epoch != p.leader_epoch:
        return FencedLeaderEpoch(f"{where} is at leader epoch {p.leader_epoch}, not {request.leader_epoch}")
    if request.broker_id != p.leader:
        return NotLeaderOrFollower(f"broker {request.broker_id} does not lead {where} (its leader is {p.leader})")
    if request.partition_epoch > p.partition_epoch:
        return InvalidUpdateVersion(
            f"{where} is at partition epoch {p.partition_epoch}, behind the request's {request.partition_epoch}"
        )
    return _shape_error(p, [member.broker_id for member in request.new_isr], where)


def _shape_error(p: PartitionImage, asked: Sequence[int], where: str) -> InvalidRequest | None:
    if not asked:
        return InvalidRequest(f"{where}: the new ISR is empty")
    if len(set(asked)) != len(asked):
        return InvalidRequest(f"{where}: the new ISR {list(asked)} names a broker twice")
    strangers = [b for b in asked if b not in p.replicas]
    if strangers:
        return InvalidRequest(f"{where}: the new ISR names {strangers}, not replicas of it ({list(p.replicas)})")
    if p.leader not in asked:
        return InvalidRequest(f"{where}: the new ISR {list(asked)} leaves out its leader {p.leader}")
    return None


def _ineligible(image: MetadataImage, members: Sequence[IsrMember]) -> list[str]:
    out = []
    for member in members:
        registration = image.brokers.get(member.broker_id)
        if registration is None:
            out.append(f"{member.broker_id} (not registered)")
        elif registration.fenced:
            out.append(f"{member.broker_id} (fenced)")
        elif member.broker_epoch not in (UNKNOWN_BROKER_EPOCH, registration.broker_epoch):
            out.append(f"{member.broker_id} (at broker epoch {registration.broker_epoch}, not {member.broker_epoch})")
    return out
