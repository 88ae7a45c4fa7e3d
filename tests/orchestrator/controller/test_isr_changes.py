"""AlterPartition's decision (``isr_changes.py``): every refusal, the repeat that writes nothing, a shrink and an
expand, each on an image built from records."""

from __future__ import annotations

import pytest

from orchestrator.controller.isr_changes import IsrMember, IsrRequest, check_sender, decide
from orchestrator.errors import (
    FencedLeaderEpoch,
    IneligibleReplica,
    InvalidRequest,
    InvalidUpdateVersion,
    NotLeaderOrFollower,
    StaleBrokerEpoch,
    UnknownTopicId,
    UnknownTopicOrPartition,
)
from orchestrator.ids import Uuid
from orchestrator.metadata.image import EMPTY_IMAGE, MetadataImage, replay
from orchestrator.metadata.records import ConfigResourceType, make_record

pytestmark = pytest.mark.unit

TOPIC = Uuid.from_bytes(bytes(range(16)))
EPOCHS = {1: 10, 2: 20, 3: 30, 4: 40}  # broker epochs; broker 4 is fenced, broker 5 not registered
LEADER_EPOCH, PARTITION_EPOCH = 3, 7


def cluster(isr: tuple[int, ...] = (1, 2)) -> MetadataImage:
    records = []
    for b, epoch in EPOCHS.items():
        records.append(
            make_record(
                "RegisterBrokerRecord",
                broker_id=b,
                incarnation_id=Uuid.from_bytes(bytes([b]) * 16),
                broker_epoch=epoch,
                end_points=[],
                rack=None,
                fenced=True,
            )
        )
        if b != 4:
            records.append(make_record("UnfenceBrokerRecord", id=b, epoch=epoch))
    records += [
        make_record("TopicRecord", name="orders", topic_id=TOPIC),
        make_record(
            "PartitionRecord",
            partition_id=0,
            topic_id=TOPIC,
            replicas=[1, 2, 3, 4],
            isr=list(isr),
            leader=1,
            leader_epoch=LEADER_EPOCH,
            partition_epoch=PARTITION_EPOCH,
        ),
    ]
    return replay(EMPTY_IMAGE, list(enumerate(records)))


def ask(new_isr: list[int | tuple[int, int]], **overrides: object) -> IsrRequest:
    members = tuple(IsrMember(*m) if isinstance(m, tuple) else IsrMember(m) for m in new_isr)
    fields: dict[str, object] = {
        "broker_id": 1,
        "topic_id": TOPIC,
        "partition_id": 0,
        "leader_epoch": LEADER_EPOCH,
        "partition_epoch": PARTITION_EPOCH,
        "new_isr": members,
    }
    fields.update(overrides)
    return IsrRequest(**fields)  # type: ignore[arg-type]


def test_a_shrink_is_one_record_naming_only_the_new_isr() -> None:
    decision = decide(cluster(isr=(1, 2, 3)), ask([1, 3]))
    assert decision.error is None and decision.record is not None
    assert decision.record.name == "PartitionChangeRecord"
    assert dict(decision.record.fields) == {
        **dict(make_record("PartitionChangeRecord", topic_id=TOPIC, partition_id=0).fields),
        "isr": [1, 3],
    }


def test_an_expand_adds_a_registered_unfenced_replica_and_replaying_it_bumps_only_the_partition_epoch() -> None:
    image = cluster()
    decision = decide(image, ask([1, 2, (3, 30)]))
    assert decision.error is None and decision.record is not None
    after = replay(image, [(image.offset + 1, decision.record)]).topics[TOPIC].partitions[0]
    assert (after.isr, after.leader, after.leader_epoch, after.partition_epoch) == (
        (1, 2, 3),
        1,
        LEADER_EPOCH,
        PARTITION_EPOCH + 1,
    )


def test_asking_for_the_isr_it_already_has_writes_nothing_even_when_based_on_an_older_partition_epoch() -> None:
    image = cluster()
    for request in (ask([1, 2]), ask([2, 1]), ask([1, 2], partition_epoch=PARTITION_EPOCH - 1)):
        decision = decide(image, request)
        assert (decision.error, decision.record) == (None, None)
        assert decision.partition is image.topics[TOPIC].partitions[0]


@pytest.mark.parametrize(
    ("request_", "error"),
    [
        (ask([1], topic_id=Uuid.from_bytes(b"\x07" * 16)), UnknownTopicId),
        (ask([1], partition_id=1), UnknownTopicOrPartition),
        (ask([1], leader_epoch=LEADER_EPOCH - 1), FencedLeaderEpoch),
        (ask([1], leader_epoch=LEADER_EPOCH + 1), FencedLeaderEpoch),
        (ask([2], broker_id=2), NotLeaderOrFollower),
        (ask([1], partition_epoch=PARTITION_EPOCH + 1), InvalidUpdateVersion),
        (ask([1, 2, 2]), InvalidRequest),  # a member twice
        (ask([]), InvalidRequest),
        (ask([1, 6]), InvalidRequest),  # not a replica
        (ask([2, 3]), InvalidRequest),  # leaves the leader out
        (ask([1], partition_epoch=PARTITION_EPOCH - 1), InvalidUpdateVersion),  # a change based on an older state
        (ask([1, 2, 4]), IneligibleReplica),  # fenced
        (ask([1, 2, (3, 29)]), IneligibleReplica),  # another incarnation of 3 than the registered one
    ],
)
def test_each_refusal(request_: IsrRequest, error: type[Exception]) -> None:
    decision = decide(cluster(), request_)
    assert isinstance(decision.error, error) and decision.record is None


def test_an_unregistered_replica_is_ineligible() -> None:
    image = cluster()
    image = replay(image, [(image.offset + 1, make_record("UnregisterBrokerRecord", broker_id=3, broker_epoch=30))])
    decision = decide(image, ask([1, 2, 3]))
    assert isinstance(decision.error, IneligibleReplica) and "3 (not registered)" in decision.error.message


def test_the_sender_must_be_the_registered_incarnation() -> None:
    image = cluster()
    assert check_sender(image, 1, 10) is None
    assert isinstance(check_sender(image, 1, 11), StaleBrokerEpoch)
    assert isinstance(check_sender(image, 5, -1), StaleBrokerEpoch)


def test_a_shrink_below_min_insync_replicas_makes_the_replica_left_out_eligible_and_growing_back_clears_it() -> None:
    config = make_record(
        "ConfigRecord",
        resource_type=ConfigResourceType.TOPIC,
        resource_name="orders",
        name="min.insync.replicas",
        value="2",
    )
    image = cluster(isr=(1, 2))
    image = replay(image, [(image.offset + 1, config)])
    shrink = decide(image, ask([1]))
    assert shrink.record is not None and shrink.record.fields["eligible_leader_replicas"] == [2]
    image = replay(image, [(image.offset + 1, shrink.record)])
    assert image.topics[TOPIC].partitions[0].elr == (2,)
    grow = decide(image, ask([1, 3], partition_epoch=PARTITION_EPOCH + 1))
    assert grow.record is not None and grow.record.fields["eligible_leader_replicas"] == []
    assert replay(image, [(image.offset + 1, grow.record)]).topics[TOPIC].partitions[0].elr == ()
