"""Metadata images the retry queue's tests reconcile with: brokers, topics, partitions and tiered states, replayed
by the real image code from real records."""

from __future__ import annotations

import random

from orchestrator.ids import Uuid
from orchestrator.metadata.image import EMPTY_IMAGE, MetadataImage, replay
from orchestrator.metadata.records import DisablePolicy, MetadataRecord, TieredState, make_record

T = Uuid.from_string("AAAAAAAAQACAAAAAAAAAAQ")
OTHER = Uuid.from_string("AAAAAAAAQACAAAAAAAAAAg")
NOW = 1_000_000


def apply_records(image: MetadataImage, *records: MetadataRecord) -> MetadataImage:
    return replay(image, enumerate(records, start=image.offset + 1))


def register(broker_id: int, epoch: int, *, fenced: bool = False) -> MetadataRecord:
    return make_record(
        "RegisterBrokerRecord",
        broker_id=broker_id,
        incarnation_id=Uuid.random(random.Random(broker_id * 1000 + epoch).randbytes),
        broker_epoch=epoch,
        end_points=[],
        rack=None,
        fenced=fenced,
    )


def tiered(topic_id: Uuid, epoch: int, state: TieredState, policy: DisablePolicy) -> MetadataRecord:
    return make_record(
        "TieredStateRecord", topic_id=topic_id, tiered_epoch=epoch, tiered_state=int(state), policy=int(policy)
    )


def partition(topic_id: Uuid, pid: int, replicas: list[int], leader: int) -> MetadataRecord:
    return make_record(
        "PartitionRecord",
        partition_id=pid,
        topic_id=topic_id,
        replicas=replicas,
        isr=replicas,
        leader=leader,
        leader_epoch=0,
        partition_epoch=0,
    )


def leader(topic_id: Uuid, pid: int, broker_id: int) -> MetadataRecord:
    return make_record("PartitionChangeRecord", topic_id=topic_id, partition_id=pid, leader=broker_id)


def cluster(*, brokers: tuple[int, ...] = (1, 2, 3), policy: DisablePolicy = DisablePolicy.DELETE) -> MetadataImage:
    """Brokers 1-3 (epoch 10 x id); topic T "orders" DISABLING at epoch 2: p0 on [1, 2] led by 1, p1 on [2, 4] led
    by 2 (4 never registered), so the required brokers are 1 and 2; broker 3 hosts nothing of it."""
    return apply_records(
        EMPTY_IMAGE,
        *(register(b, 10 * b) for b in brokers),
        make_record("TopicRecord", name="orders", topic_id=T),
        partition(T, 0, [1, 2], 1),
        partition(T, 1, [2, 4], 2),
        tiered(T, 1, TieredState.ENABLED, DisablePolicy.NONE),
        tiered(T, 2, TieredState.DISABLING, policy),
    )


def brokers(*ids: int, fenced: tuple[int, ...] = ()) -> MetadataImage:
    """Only registered brokers (epoch 10 + id), some of them fenced."""
    return apply_records(EMPTY_IMAGE, *(register(b, 10 + b, fenced=b in fenced) for b in ids))
