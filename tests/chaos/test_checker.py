"""The checker on hand-made observations: a clean one passes, and each planted violation is found by the check for
its invariant (so a check that could not fail would fail here)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from chaos import checker as ck
from chaos.scenario import generate

pytestmark = pytest.mark.unit

T1, T2 = "AAAAAAAAAAAAAAAAAAAAAQ", "AAAAAAAAAAAAAAAAAAAAAg"
PREFIX = "tiered/"


def rec(offset: int, record: str, epoch: int = 1, **fields: Any) -> ck.LogRecord:
    return ck.LogRecord(offset, epoch, record, fields)


def tiered(offset: int, tid: str, state: int, epoch: int, policy: int = 0) -> ck.LogRecord:
    return rec(offset, "TieredStateRecord", topic_id=tid, tiered_state=state, tiered_epoch=epoch, policy=policy)


def key(tid: str, segment: str, name: str = "orders") -> str:
    return f"{PREFIX}{name}-{tid}/0/00000000000000000000-{segment}.log"


def clean() -> ck.Observation:
    """orders (T1): created tiered, disabled with delete, DISABLED after broker 1 acked; events (T2): tiered, kept."""
    log = (
        rec(0, "RegisterBrokerRecord", broker_id=1),
        rec(1, "TopicRecord", name="orders", topic_id=T1),
        rec(2, "PartitionRecord", topic_id=T1, partition_id=0, replicas=[1]),
        tiered(3, T1, ck.ENABLED, 1),
        rec(4, "TopicRecord", name="events", topic_id=T2),
        rec(5, "PartitionRecord", topic_id=T2, partition_id=0, replicas=[1]),
        tiered(6, T2, ck.ENABLED, 1),
        tiered(7, T1, ck.DISABLING, 2, ck.DELETE),
        tiered(8, T1, ck.DISABLED, 2, ck.DELETE),
    )
    rlmm = (
        ck.RlmmRecord(T1, "s1", ck.COPY_STARTED, 1, True, 0, 0, 1),
        ck.RlmmRecord(T1, "s1", ck.COPY_FINISHED, 1, False),
        ck.RlmmRecord(T2, "s2", ck.COPY_STARTED, 1, True, 0, 0, 0),
        ck.RlmmRecord(T2, "s2", ck.COPY_FINISHED, 1, False),
        ck.RlmmRecord(T1, "s1", ck.DELETE_STARTED, 2, False),
        ck.RlmmRecord(T1, "s1", ck.DELETE_FINISHED, 2, False),
    )
    sentinel = "outside/keep.bin"
    return ck.Observation(
        prefix=PREFIX,
        log=log,
        log_gaps=(),
        rlmm=rlmm,
        bucket_keys=frozenset({key(T2, "s2", "events"), sentinel}),
        sentinels=frozenset({sentinel}),
        mutations=(
            ck.Mutation(10, "PutObject", key(T1, "s1"), 200),
            ck.Mutation(11, "PutObject", key(T2, "s2", "events"), 200),
            ck.Mutation(30, "DeleteObjects", key(T1, "s1"), 200),
        ),
        topics=(
            ck.TopicEnd("orders", T1, ck.DISABLED, 2, ck.DELETE, (ck.PartitionEnd(0, 2, 2, 3, {2: b"c"}),)),
            ck.TopicEnd("events", T2, ck.ENABLED, 1, 0, (ck.PartitionEnd(0, 0, 1, 2, {0: b"x", 1: b"y"}),)),
        ),
        acks=(
            ck.Ack(T1, 0, 0, (b"a", b"b"), 5),
            ck.Ack(T1, 0, 2, (b"c",), 25),
            ck.Ack(T2, 0, 0, (b"x", b"y"), 6),
        ),
        delete_requests={T1: (20,)},
        controller_events=(
            ck.ControllerEvent(21, "disable.ack", T1, 2, 1),
            ck.ControllerEvent(22, "disable.completed", T1, 2),
        ),
    )


def invariants(obs: ck.Observation) -> list[str]:
    return [v.invariant for v in ck.check(obs)]


def test_a_clean_run_has_no_violation() -> None:
    assert ck.check(clean()) == []


def test_an_epoch_that_goes_down_or_jumps_or_repeats_is_invariant_1() -> None:
    base = clean()
    down = dataclasses.replace(base, log=(*base.log, tiered(9, T1, ck.ENABLED, 1)))
    assert "1" in invariants(down)
    jump = dataclasses.replace(base, log=(*base.log, tiered(9, T1, ck.ENABLED, 4)))
    assert "1" in invariants(jump)
    twice = dataclasses.replace(base, log=(*base.log, tiered(9, T1, ck.DISABLED, 2, ck.DELETE)))
    assert "1" in invariants(twice)
    skipped = dataclasses.replace(base, log=(*base.log[:7], tiered(7, T1, ck.DISABLED, 2, ck.DELETE)))
    assert "1" in invariants(skipped)
    assert invariants(dataclasses.replace(base, log=(*base.log, tiered(9, T1, ck.ENABLED, 3)))) == []


def test_disabled_before_a_required_broker_acked_is_invariant_2() -> None:
    base = clean()
    late = dataclasses.replace(
        base,
        controller_events=(
            ck.ControllerEvent(22, "disable.completed", T1, 2),
            ck.ControllerEvent(23, "disable.ack", T1, 2, 1),
        ),
    )
    assert invariants(late) == ["2"]
    two_replicas = (*base.log[:3], rec(3, "PartitionRecord", topic_id=T1, partition_id=1, replicas=[2]), *base.log[3:])
    assert invariants(dataclasses.replace(base, log=two_replicas)) == ["2"]
    gone = (*two_replicas[:4], rec(4, "UnregisterBrokerRecord", broker_id=2), *two_replicas[4:])
    assert invariants(dataclasses.replace(base, log=gone)) == [], "a decommissioned broker owes nothing"


def test_a_copy_recorded_at_an_epoch_not_enabled_is_invariant_3() -> None:
    base = clean()
    zombie = dataclasses.replace(base, rlmm=(*base.rlmm, ck.RlmmRecord(T2, "s3", ck.COPY_STARTED, 2, True)))
    assert invariants(zombie) == ["3"]


def test_delete_policy_leftovers_are_invariant_4() -> None:
    base = clean()
    left = dataclasses.replace(base, bucket_keys=base.bucket_keys | {key(T1, "s1")})
    assert invariants(left) == ["4"]
    alive = dataclasses.replace(base, rlmm=base.rlmm[:-1])
    assert invariants(alive) == ["4"]
    orders, events = base.topics
    wrong_start = dataclasses.replace(orders, partitions=(ck.PartitionEnd(0, 2, 3, 3, {2: b"c"}),))
    assert "4" in invariants(dataclasses.replace(base, topics=(wrong_start, events)))
    retained_deleted = (*base.rlmm, ck.RlmmRecord(T2, "s2", ck.DELETE_STARTED, 1, False))
    assert "4" in invariants(dataclasses.replace(base, rlmm=retained_deleted))


def test_touching_anything_outside_a_topic_prefix_or_a_kept_topic_is_invariant_5() -> None:
    base = clean()
    outside = (*base.mutations, ck.Mutation(40, "DeleteObject", "outside/keep.bin", 204))
    assert "5" in invariants(dataclasses.replace(base, mutations=outside))
    lookalike = (*base.mutations, ck.Mutation(40, "PutObject", f"{PREFIX}orders-{T2}/0/x.log", 200))
    assert "5" in invariants(dataclasses.replace(base, mutations=lookalike))
    kept = (*base.mutations, ck.Mutation(40, "DeleteObjects", key(T2, "s2", "events"), 200))
    assert "5" in invariants(dataclasses.replace(base, mutations=kept))
    gone = dataclasses.replace(base, bucket_keys=base.bucket_keys - {"outside/keep.bin"})
    assert "5" in invariants(gone)


def test_a_record_written_by_an_older_controller_epoch_is_invariant_6() -> None:
    base = clean()
    stale = (*base.log, dataclasses.replace(rec(9, "TopicRecord", 0, name="x", topic_id="X"), controller_epoch=0))
    raised = tuple(dataclasses.replace(r, controller_epoch=2) for r in base.log[:5]) + base.log[5:]
    assert invariants(dataclasses.replace(base, log=stale)) == ["6"]
    assert set(invariants(dataclasses.replace(base, log=raised))) == {"6"}


def test_a_broker_that_does_not_refuse_a_deposed_controllers_request_as_stale_is_invariant_6() -> None:
    base = clean()
    refused = ck.DeposedAnswer(1, 1, 2, ck.STALE_CONTROLLER_EPOCH)
    silent = ck.DeposedAnswer(2, 1, 2, None, "RequestTimedOut: paused")
    no_lease = ck.DeposedAnswer(3, 1, 2, ck.KAFKA_STORAGE_ERROR)  # it could not read the lease: it admitted nothing
    assert invariants(dataclasses.replace(base, deposed=(refused, silent, no_lease))) == []
    accepted = ck.DeposedAnswer(1, 1, 2, 0)
    assert invariants(dataclasses.replace(base, deposed=(refused, accepted))) == ["6"]
    [violation] = ck.check(dataclasses.replace(base, deposed=(ck.DeposedAnswer(3, 4, 5, 31),)))
    assert "broker 3 answered error code 31" in violation.message and "controller epoch 4" in violation.message


def test_lost_or_changed_acknowledged_records_are_promise_8() -> None:
    base = clean()
    orders, events = base.topics
    lost = dataclasses.replace(events, partitions=(ck.PartitionEnd(0, 1, 1, 2, {1: b"y"}),))
    assert invariants(dataclasses.replace(base, topics=(orders, lost))) == ["8"]
    changed = dataclasses.replace(events, partitions=(ck.PartitionEnd(0, 0, 1, 2, {0: b"x", 1: b"z"}),))
    assert invariants(dataclasses.replace(base, topics=(orders, changed))) == ["8"]
    short = dataclasses.replace(events, partitions=(ck.PartitionEnd(0, 0, 1, 1, {0: b"x"}),))
    assert invariants(dataclasses.replace(base, topics=(orders, short))) == ["8"]
    # orders' first two records went with the delete policy asked after them; the one acked after it must stay
    after = dataclasses.replace(orders, partitions=(ck.PartitionEnd(0, 3, 3, 3, {}),))
    assert "8" in invariants(dataclasses.replace(base, topics=(after, events)))


def test_a_record_a_delete_policy_let_go_must_have_been_in_a_finished_copy() -> None:
    base = clean()
    orders, events = base.topics
    # orders-0@0..1 were in s1 (finished, then deleted by the policy): they may go; a log start at 3 would also let
    # @2 go, acknowledged before the policy too, but never copied: only ever local, so lost
    early = dataclasses.replace(base, acks=(ck.Ack(T1, 0, 0, (b"a", b"b", b"c"), 5), *base.acks[2:]))
    past = dataclasses.replace(orders, partitions=(ck.PartitionEnd(0, 3, 3, 3, {}),))
    found = ck.check(dataclasses.replace(early, topics=(past, events)))
    assert [v.invariant for v in found] == ["8"]
    assert found[0].message == (
        "orders-0@2 acknowledged at 5 is below the log start 3, and no finished copy held it for a delete policy "
        "to remove"
    )
    started_only = tuple(r for r in base.rlmm if not (r.segment_id == "s1" and r.state == ck.COPY_FINISHED))
    unfinished = dataclasses.replace(base, rlmm=started_only)
    assert "8" in invariants(unfinished), "a copy never finished held nothing local retention could drop"
    assert ck.check_records(base) == []


def test_an_offset_acknowledged_for_two_different_records_is_promise_8_even_once_a_policy_removed_both() -> None:
    base = clean()
    # orders-0@1 acked as b"b" at 5, then as b"z" at 15: both went with the delete policy asked at 20, so reading
    # back shows nothing; only the acknowledgements do
    reused = dataclasses.replace(base, acks=(*base.acks, ck.Ack(T1, 0, 1, (b"z",), 15)))
    found = ck.check(reused)
    assert [v.invariant for v in found] == ["8"]
    assert found[0].message.startswith(f"1 offset(s) of {T1}-0 acknowledged twice, from 1: b'b' at 5, then b'z' at 15")
    assert found[0].evidence == ("offset 1: acknowledged b'b' at 5",)
    same_again = dataclasses.replace(base, acks=(*base.acks, ck.Ack(T2, 0, 1, (b"y",), 7)))
    assert invariants(same_again) == [], "the same record at the same offset is one record"
    other_partition = dataclasses.replace(base, acks=(*base.acks, ck.Ack(T1, 1, 1, (b"z",), 26)))
    assert ck.check_offsets_unique(other_partition) == []


def test_a_run_that_did_not_converge_or_missed_log_records_is_reported() -> None:
    base = clean()
    assert invariants(dataclasses.replace(base, unconverged=("orders still DISABLING",))) == ["8"]
    assert invariants(dataclasses.replace(base, log_gaps=((3, 9),))) == [ck.INCOMPLETE]


def test_the_excerpt_keeps_the_events_of_the_violations_topic() -> None:
    history = [
        {"type": "op", "topic": "orders", "index": 0},
        {"type": "result", "topic": "orders", "topic_id": T1, "ok": True},
        {"type": "result", "topic": "events", "topic_id": T2, "ok": True},
        {"type": "fault", "kind": "kill"},
    ]
    got = ck.excerpt(history, ck.Violation("4", "x", T1))
    assert got == history[:2]
    assert ck.excerpt(history, ck.Violation("5", "x")) == [history[3]]


def test_a_seed_gives_the_same_scenario_and_seeds_differ() -> None:
    points = ("controller.after_epoch_bump", "broker.mid_delete_batch")
    a, b = generate(7, crash_points=points), generate(7, crash_points=points)
    assert a == b
    assert generate(8, crash_points=points) != a
    assert all(0 < f.at < len(a.ops) for f in a.faults)
    kinds = {op.kind for s in range(30) for op in generate(s, crash_points=points).ops}
    assert kinds >= {"create", "produce", "disable", "enable", "delete", "recreate", "add_partitions", "decommission"}
    faults = {f.kind for s in range(30) for f in generate(s, crash_points=points).faults}
    assert faults == {"kill", "pause", "crash_point", "s3", "link"}
