"""Which partitions a tiering round passes (orchestrator/broker/idle_partitions.py): a partition is passed when it is
new, when what its pass reads changed, when its last pass failed, and otherwise every few rounds; and the RLMM's
per-partition version, one of the things a pass reads, moves exactly when the RLMM's entries of that partition do."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orchestrator.broker.idle_partitions import IdlePartitions
from orchestrator.broker.tiering_round import copy_generation
from orchestrator.controller import tiering
from orchestrator.errors import TieredError
from orchestrator.ids import Uuid
from orchestrator.metadata.image import TopicImage
from orchestrator.metadata.records import (
    DisablePolicy,
    PartitionDeleteState,
    SegmentState,
    TieredState,
    make_record,
)
from remote_storage.rlmm import RecordedRlmm, RemoteSegment, RlmmFold, copy_started_record, update_record

pytestmark = pytest.mark.unit


def test_a_partition_is_passed_when_new_changed_or_failed_and_otherwise_every_n_rounds() -> None:
    idle: IdlePartitions[str] = IdlePartitions(every_rounds=3)
    idle.next_round()
    assert idle.due("p", (1,))  # never passed
    idle.passed("p", (1,))
    seen = []
    for _ in range(6):
        idle.next_round()
        due = idle.due("p", (1,))
        seen.append(due)
        if due:
            idle.passed("p", (1,))
    assert seen == [False, False, True, False, False, True]
    idle.next_round()
    assert idle.due("p", (2,))  # its inputs moved
    idle.failed("p")
    assert idle.due("p", (1,))  # its last pass failed
    idle.passed("p", (1,))
    idle.forget_all_but([])
    assert idle.due("p", (1,))  # forgotten: new again


def test_every_round_when_n_is_one_and_n_must_be_positive() -> None:
    idle: IdlePartitions[str] = IdlePartitions(every_rounds=1)
    for _ in range(3):
        idle.next_round()
        assert idle.due("p", ("same",))
        idle.passed("p", ("same",))
    with pytest.raises(ValueError, match="every_rounds must be >= 1"):
        IdlePartitions(every_rounds=0)


@given(st.lists(st.tuples(st.booleans(), st.booleans()), max_size=40), st.integers(1, 5))
def test_no_partition_waits_more_than_n_rounds_and_none_is_passed_twice_for_the_same_inputs_within_n(
    steps: list[tuple[bool, bool]], n: int
) -> None:
    """Against a model: each round the inputs change or not, and the pass fails or not."""
    idle: IdlePartitions[str] = IdlePartitions(every_rounds=n)
    inputs, last_ok, last_inputs, ok = 0, None, None, False
    for changed, fails in steps:
        round_no = idle.next_round()
        inputs += changed
        expected = not ok or last_inputs != inputs or round_no - last_ok >= n  # type: ignore[operator]
        assert idle.due("p", (inputs,)) == expected
        if expected:
            ok = not fails
            if fails:
                idle.failed("p")
            else:
                idle.passed("p", (inputs,))
                last_ok, last_inputs = round_no, inputs


TID, OTHER = Uuid.random(), Uuid.random()


def _seg(topic_id: Uuid, partition: int) -> RemoteSegment:
    return RemoteSegment("orders", topic_id, partition, Uuid.random(), 0, 99, 1_000, 100, tiered_epoch=0)


def test_the_rlmm_version_of_a_partition_moves_with_its_own_entries_only() -> None:
    a, b, c = _seg(TID, 0), _seg(TID, 1), _seg(OTHER, 0)
    delete = make_record(
        "RemotePartitionDeleteMetadataRecord",
        topic_id_partition={"name": "orders", "id": TID, "partition": 1},
        broker_id=1,
        event_timestamp_ms=2_000,
        remote_partition_delete_state=int(PartitionDeleteState.DELETE_PARTITION_MARKED),
    )
    records = [
        copy_started_record(a, now_ms=1_000),  # 0: partition 0
        copy_started_record(b, now_ms=1_000),  # 1: partition 1
        copy_started_record(c, now_ms=1_000),  # 2: another topic's partition 0
        update_record(a, SegmentState.COPY_SEGMENT_FINISHED, broker_id=1, now_ms=1_500),  # 3: partition 0
        update_record(a, SegmentState.COPY_SEGMENT_STARTED, broker_id=1, now_ms=1_600),  # 4: moot (never back)
        delete,  # 5: partition 1
        delete,  # 6: moot (already there)
    ]
    versions = []
    for upto in range(len(records) + 1):
        fold = RlmmFold(RecordedRlmm(records[:upto]))
        fold.refresh()
        versions.append(
            (fold.partition_version(TID, 0), fold.partition_version(TID, 1), fold.partition_version(OTHER, 0))
        )
    p0 = [v[0] for v in versions]
    p1 = [v[1] for v in versions]
    other = [v[2] for v in versions]
    moved = lambda xs: [i for i in range(1, len(xs)) if xs[i] != xs[i - 1]]  # noqa: E731
    assert moved(p0) == [1, 4]  # after records 0 and 3
    assert moved(p1) == [2, 6]  # after records 1 and 5
    assert moved(other) == [3]
    assert versions[0] == (0, 0, 0)


# -- the topic's tiering in a fingerprint ---------------------------------------------------------------------------

_STEPS = st.lists(st.sampled_from(["enable", "retain", "delete", "complete", "configs"]), max_size=30)


@given(_STEPS)
def test_the_copy_generation_moves_when_copying_is_turned_on_and_never_when_it_is_turned_off(steps: list[str]) -> None:
    """Driven through the controller's own tiering state machine: whatever the requests, turning copying on (to
    ENABLED) moves the generation a fingerprint holds, and turning it off (DISABLING, DISABLED) never does."""
    topic = TopicImage(Uuid.random(), "orders")
    for step in steps:
        before = topic
        try:
            if step == "complete":
                record = tiering.complete(topic, topic.tiered_epoch)
                fields = record.fields
                after = tiering.TieredStatus(
                    TieredState(fields["tiered_state"]), fields["tiered_epoch"], DisablePolicy(fields["policy"])
                )
            else:
                intent = {"enable": tiering.Intent.ENABLE, "configs": tiering.Intent.NONE}.get(
                    step, tiering.Intent.DISABLE
                )
                policy = {"retain": DisablePolicy.RETAIN, "delete": DisablePolicy.DELETE}.get(step)
                after = tiering.transition(topic, intent, policy)
        except TieredError:
            continue  # refused (DISABLING takes no tiering request; delete -> retain): nothing changes
        topic = replace(topic, tiered_state=after.state, tiered_epoch=after.epoch, policy=after.policy)
        was = copy_generation(before.tiered_state, before.tiered_epoch)
        now = copy_generation(topic.tiered_state, topic.tiered_epoch)
        purge = before.tiered_state == TieredState.DISABLED and topic.tiered_state == TieredState.DISABLING
        if topic.tiered_state == TieredState.ENABLED and before.tiered_state != TieredState.ENABLED:
            assert now != was, (before, topic)
        elif not purge:  # every other step (off, DISABLING -> DISABLED, a no-op) leaves it; a purge may move it
            assert now == was, (before, topic)
