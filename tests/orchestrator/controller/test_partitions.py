"""The ISR and leadership rules when brokers leave and rejoin (``partitions.py``), on images built from records:
KRaft's rules now that followers replicate, unclean election only where a topic allows it, RF 1 as before."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from orchestrator.controller.partitions import (
    MIN_INSYNC_REPLICAS,
    UNCLEAN_LEADER_ELECTION,
    leave_records,
    rejoin_records,
)
from orchestrator.ids import Uuid
from orchestrator.metadata.image import EMPTY_IMAGE, MetadataImage, PartitionImage, replay
from orchestrator.metadata.records import ConfigResourceType, MetadataRecord, make_record

pytestmark = pytest.mark.unit

TOPIC = Uuid.from_bytes(bytes(range(16)))


def image_of(
    *,
    replicas: Sequence[int],
    isr: Sequence[int],
    leader: int,
    fenced: Sequence[int] = (),
    unclean: bool = False,
    min_isr: int | None = None,
    elr: Sequence[int] = (),
) -> MetadataImage:
    records: list[MetadataRecord] = []
    for b in (1, 2, 3):
        records.append(
            make_record(
                "RegisterBrokerRecord",
                broker_id=b,
                incarnation_id=Uuid.from_bytes(bytes([b]) * 16),
                broker_epoch=b,
                end_points=[],
                rack=None,
                fenced=True,
            )
        )
        if b not in fenced:
            records.append(make_record("UnfenceBrokerRecord", id=b, epoch=b))
    records += [
        make_record("TopicRecord", name="t", topic_id=TOPIC),
        make_record(
            "PartitionRecord",
            partition_id=0,
            topic_id=TOPIC,
            replicas=list(replicas),
            isr=list(isr),
            leader=leader,
            leader_epoch=0,
            partition_epoch=0,
            eligible_leader_replicas=list(elr) or None,
        ),
    ]
    if min_isr is not None:
        records.append(_topic_config(MIN_INSYNC_REPLICAS, str(min_isr)))
    if unclean:
        records.append(_topic_config(UNCLEAN_LEADER_ELECTION, "true"))
    return replay(EMPTY_IMAGE, list(enumerate(records)))


def _topic_config(name: str, value: str) -> MetadataRecord:
    return make_record(
        "ConfigRecord", resource_type=ConfigResourceType.TOPIC, resource_name="t", name=name, value=value
    )


def after(image: MetadataImage, records: list[MetadataRecord]) -> PartitionImage:
    return replay(image, [(image.offset + 1 + i, r) for i, r in enumerate(records)]).topics[TOPIC].partitions[0]


def test_a_leaving_leader_leaves_the_isr_and_the_first_live_in_sync_replica_in_replica_order_leads() -> None:
    image = image_of(replicas=[1, 3, 2], isr=[1, 2, 3], leader=1)
    p = after(image, leave_records(image, 1))
    assert (p.isr, p.leader) == ((2, 3), 3)


def test_a_leaving_follower_leaves_the_isr_and_the_leader_stays() -> None:
    image = image_of(replicas=[1, 2, 3], isr=[1, 2, 3], leader=1)
    p = after(image, leave_records(image, 2))
    assert (p.isr, p.leader, p.leader_epoch) == ((1, 3), 1, 0)


def test_the_last_in_sync_replica_to_leave_stays_the_isr_of_a_leaderless_partition() -> None:
    image = image_of(replicas=[1, 2], isr=[1], leader=1)
    p = after(image, leave_records(image, 1))
    assert (p.isr, p.leader) == ((1,), -1), "broker 2 is live but out of sync: not elected"


def test_with_unclean_election_a_live_out_of_sync_replica_leads_alone_when_the_last_in_sync_one_leaves() -> None:
    image = image_of(replicas=[1, 2, 3], isr=[1], leader=1, fenced=[2], unclean=True)
    p = after(image, leave_records(image, 1))
    assert (p.isr, p.leader) == ((3,), 3)


def test_a_rejoining_broker_is_not_put_back_in_an_isr_that_has_another_member() -> None:
    image = image_of(replicas=[1, 2, 3], isr=[2, 3], leader=2, fenced=[1])
    assert rejoin_records(image, 1, rebalance=True) == [], "not in the ISR: neither back in it nor leader"


def test_the_last_in_sync_replica_comes_back_as_leader() -> None:
    image = image_of(replicas=[1, 2, 3], isr=[2], leader=-1, fenced=[1, 2])
    assert rejoin_records(image, 1, rebalance=True) == [], "broker 1 is out of sync: the partition waits for 2"
    p = after(image, rejoin_records(image, 2, rebalance=False))
    assert (p.isr, p.leader, p.leader_epoch) == ((2,), 2, 1)


def test_with_unclean_election_a_rejoining_out_of_sync_replica_leads_a_partition_whose_isr_is_all_fenced() -> None:
    image = image_of(replicas=[1, 2, 3], isr=[2], leader=-1, fenced=[1, 2], unclean=True)
    p = after(image, rejoin_records(image, 1, rebalance=False))
    assert (p.isr, p.leader) == ((1,), 1)
    live_isr = image_of(replicas=[1, 2, 3], isr=[3], leader=-1, fenced=[1], unclean=True)
    assert rejoin_records(live_isr, 1, rebalance=False) == [], "an in-sync replica is live: no unclean election"


def test_rebalance_gives_the_preferred_replica_its_leadership_back_only_when_it_is_in_sync() -> None:
    in_sync = image_of(replicas=[1, 2], isr=[2, 1], leader=2, fenced=[1])
    assert rejoin_records(in_sync, 1, rebalance=False) == []
    assert after(in_sync, rejoin_records(in_sync, 1, rebalance=True)).leader == 1
    out_of_sync = image_of(replicas=[1, 2], isr=[2], leader=2, fenced=[1])
    assert rejoin_records(out_of_sync, 1, rebalance=True) == []


def test_with_one_replica_the_broker_leaves_leaderless_and_returns_leader() -> None:
    image = image_of(replicas=[1], isr=[1], leader=1)
    left = replay(image, [(image.offset + 1 + i, r) for i, r in enumerate(leave_records(image, 1))])
    assert (left.topics[TOPIC].partitions[0].isr, left.topics[TOPIC].partitions[0].leader) == ((1,), -1)
    p = after(left, rejoin_records(left, 1, rebalance=True))
    assert (p.isr, p.leader, p.leader_epoch) == ((1,), 1, 2)


# --- eligible leader replicas (KIP-966) and a broker back on a new disk (KIP-858)


def test_replicas_leaving_an_isr_below_min_insync_replicas_become_eligible_and_an_isr_back_at_it_clears_them() -> None:
    image = image_of(replicas=[1, 2, 3], isr=[1, 2, 3], leader=1, min_isr=2)
    p = after(image, leave_records(image, 2))
    assert (p.isr, p.elr) == ((1, 3), ()), "two in sync still commit without 2: it is not eligible"
    image = image_of(replicas=[1, 2, 3], isr=[1, 3], leader=1, min_isr=2, fenced=[2])
    p = after(image, leave_records(image, 3))
    assert (p.isr, p.elr, p.leader) == ((1,), (3,), 1), "nothing commits below min ISR: 3 holds all that did"


def test_the_last_in_sync_replica_back_on_a_new_disk_leaves_and_an_eligible_replica_leads() -> None:
    image = image_of(replicas=[1, 2, 3], isr=[1], leader=-1, min_isr=2, elr=[3], fenced=[2])
    p = after(image, leave_records(image, 1, lost=True))
    assert (p.isr, p.elr, p.leader) == ((3,), (), 3), "the empty disk does not lead; 3 holds every committed record"


def test_an_empty_isr_waits_for_an_eligible_replica_which_leads_when_it_rejoins() -> None:
    image = image_of(replicas=[1, 2, 3], isr=[1], leader=-1, min_isr=2, elr=[3], fenced=[2, 3])
    p = after(image, leave_records(image, 1, lost=True))
    assert (p.isr, p.elr, p.leader) == ((), (3,), -1), "no live eligible replica yet: leaderless, nothing lost"
    image = replay(image, [(image.offset + 1, r) for r in leave_records(image, 1, lost=True)])
    p = after(image, rejoin_records(image, 1, rebalance=False))
    assert p.leader == -1, "the broker on the new disk is neither in sync nor eligible"
    p = after(image, rejoin_records(image, 3, rebalance=False))
    assert (p.isr, p.elr, p.leader) == ((3,), (), 3)


def test_without_an_eligible_replica_the_last_member_back_on_a_new_disk_stays_and_leads_again() -> None:
    image = image_of(replicas=[1, 2, 3], isr=[1], leader=-1, fenced=[2, 3])  # min.insync.replicas 1: no ELR
    assert leave_records(image, 1, lost=True) == []
    p = after(image, rejoin_records(image, 1, rebalance=False))
    assert (p.isr, p.leader) == ((1,), 1), "no one else holds more: it leads with what the remote tier holds"


def test_a_broker_back_on_a_new_disk_leaves_the_elr() -> None:
    image = image_of(replicas=[1, 2, 3], isr=[1], leader=1, min_isr=2, elr=[2, 3], fenced=[2])
    p = after(image, leave_records(image, 2, lost=True))
    assert (p.isr, p.elr, p.leader) == ((1,), (3,), 1)
