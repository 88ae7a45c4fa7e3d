"""The ISR and leadership rules when brokers leave and rejoin (``partitions.py``), on images built from records:
KRaft's rules now that followers replicate, unclean election only where a topic allows it, RF 1 as before."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.controller.partitions import (
    MIN_INSYNC_REPLICAS,
    UNCLEAN_LEADER_ELECTION,
    LeaderBalance,
    leave_records,
    preferred_leader_changes,
    preferred_leader_records,
    rejoin_records,
)
from orchestrator.ids import Uuid
from orchestrator.metadata.image import EMPTY_IMAGE, MetadataImage, PartitionImage, replay
from orchestrator.metadata.records import ConfigResourceType, MetadataRecord, TieredState, make_record

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
    records = _brokers(fenced)
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


def _brokers(fenced: Sequence[int]) -> list[MetadataRecord]:
    """Brokers 1, 2 and 3 registered (broker epoch = id), each unfenced unless named in ``fenced``."""
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
    return records


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


# --- leader balancing, incrementally ----------------------------------------------------------------------------

BROKERS = (1, 2, 3)
TOPICS = tuple(Uuid.from_bytes(bytes([i]) * 16) for i in range(1, 5))


def _balanced_cluster() -> MetadataImage:
    """Three live brokers; four topics of three partitions, each led by its preferred replica, all in sync."""
    records = _brokers(fenced=())
    for n, topic_id in enumerate(TOPICS):
        records.append(make_record("TopicRecord", name=f"t{n}", topic_id=topic_id))
        for p in range(3):
            replicas = [BROKERS[(p + i) % 3] for i in range(3)]
            records.append(
                make_record(
                    "PartitionRecord",
                    partition_id=p,
                    topic_id=topic_id,
                    replicas=replicas,
                    isr=replicas,
                    leader=replicas[0],
                    leader_epoch=0,
                    partition_epoch=0,
                )
            )
    return replay(EMPTY_IMAGE, list(enumerate(records)))


def _then(image: MetadataImage, records: list[MetadataRecord]) -> MetadataImage:
    return replay(image, [(image.offset + 1 + i, r) for i, r in enumerate(records)]) if records else image


def _step(image: MetadataImage, op: tuple[str, int, int, int]) -> list[MetadataRecord]:
    """The records of one change to the cluster: a broker fenced or unfenced (with its partitions' changes, or alone),
    a partition's leadership moved to another in-sync replica, a replica back in an ISR, or a topic's tiered state
    changed (its partitions untouched)."""
    kind, a, b, c = op
    topic_id = TOPICS[a % len(TOPICS)]
    broker = BROKERS[b % len(BROKERS)]
    if kind == "fence":
        if image.brokers[broker].fenced:
            return []
        return [make_record("FenceBrokerRecord", id=broker, epoch=broker), *leave_records(image, broker)]
    if kind == "unfence":
        if not image.brokers[broker].fenced:
            return []
        return [
            make_record("UnfenceBrokerRecord", id=broker, epoch=broker),
            *rejoin_records(image, broker, rebalance=False),
        ]
    if kind == "flip":  # the broker record alone: only the brokers map changes, the partitions stay as they are
        fenced = image.brokers[broker].fenced
        return [make_record("UnfenceBrokerRecord" if fenced else "FenceBrokerRecord", id=broker, epoch=broker)]
    p = image.topics[topic_id].partitions[c % 3]
    if kind == "move" and broker in p.isr and broker != p.leader and not image.brokers[broker].fenced:
        return [make_record("PartitionChangeRecord", topic_id=topic_id, partition_id=p.partition_id, leader=broker)]
    if kind == "sync" and broker not in p.isr and not image.brokers[broker].fenced:
        isr = [*p.isr, broker]
        return [make_record("PartitionChangeRecord", topic_id=topic_id, partition_id=p.partition_id, isr=isr)]
    if kind == "tier":
        now = image.topics[topic_id]
        on = now.tiered_state != TieredState.ENABLED
        state = {"tiered_epoch": now.tiered_epoch + 1, "tiered_state": 1 if on else 2, "policy": 0 if on else 1}
        return [make_record("TieredStateRecord", topic_id=topic_id, **state)]
    return []


OPS = st.tuples(
    st.sampled_from(["fence", "unfence", "flip", "move", "sync", "tier"]),
    st.integers(0, 3),
    st.integers(0, 2),
    st.integers(0, 5),
)


@settings(max_examples=200, deadline=None)
@given(steps=st.lists(st.tuples(OPS, st.booleans()), max_size=25))
def test_the_incremental_check_of_preferred_leaders_always_answers_what_the_full_scan_does(
    steps: list[tuple[tuple[str, int, int, int], bool]],
) -> None:
    """After every change, and whether or not the last check's records were appended (an append that failed leaves
    the image as it was, and the next check must find the same changes again)."""
    image, balance = _balanced_cluster(), LeaderBalance()
    for op, appended in steps:
        image = _then(image, _step(image, op))
        records, balance = preferred_leader_changes(image, balance)
        assert records == preferred_leader_records(image)
        if appended:
            image = _then(image, records)
    assert preferred_leader_changes(image, balance)[0] == preferred_leader_records(image)


def test_a_check_after_nothing_changed_reads_no_partition_and_one_after_a_change_reads_only_that_topic() -> None:
    image = _balanced_cluster()
    records, balance = preferred_leader_changes(image, LeaderBalance())
    assert records == [] and balance.topics is image.topics
    assert preferred_leader_changes(image, balance) == ([], balance), "the same maps: nothing read, nothing changed"
    p = image.topics[TOPICS[1]].partitions[0]
    moved = _then(image, _step(image, ("move", 1, p.replicas[1] - 1, 0)))
    records, after_move = preferred_leader_changes(moved, balance)
    assert [(r["topic_id"], r["partition_id"], r["leader"]) for r in records] == [(TOPICS[1], 0, p.replicas[0])]
    assert after_move.topics is None, "changes found: the next check must look again until they are appended"
    assert set(after_move.settled) == set(TOPICS) - {TOPICS[1]}
    assert all(after_move.settled[t] is image.topics[t].partitions for t in after_move.settled)
