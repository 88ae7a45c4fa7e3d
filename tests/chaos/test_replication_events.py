"""What replication did, counted from a metadata log: a leadership that goes to another replica (through a
leaderless spell or not) is a move, the sole replica coming back is not; an ISR that loses or gains members is a
shrink or an expansion; what the log never created is skipped."""

from __future__ import annotations

from typing import Any

import pytest

from chaos import replication_events as events
from chaos.checker import LogRecord

pytestmark = pytest.mark.unit

T = "AAAAAAAAAAAAAAAAAAAAAQ"


def created(offset: int, leader: int, isr: list[int], partition: int = 0) -> LogRecord:
    fields = {"topic_id": T, "partition_id": partition, "replicas": [1, 2, 3], "isr": isr, "leader": leader}
    return LogRecord(offset, 1, "PartitionRecord", fields)


def changed(offset: int, *, leader: int = -2, isr: list[int] | None = None, partition: int = 0) -> LogRecord:
    fields: dict[str, Any] = {"topic_id": T, "partition_id": partition, "leader": leader, "isr": isr, "replicas": None}
    return LogRecord(offset, 1, "PartitionChangeRecord", fields)


def test_a_failover_and_the_isr_changes_around_it_are_counted() -> None:
    log = [
        created(0, 1, [1, 2, 3]),
        changed(1, leader=2, isr=[2, 3]),  # broker 1 fenced: leader moves, ISR shrinks
        changed(2, isr=[2, 3, 1]),  # it caught up again
        changed(3, leader=1),  # the preferred replica takes its partition back
    ]
    assert events.count(log) == {events.LEADER_MOVED: 2, events.ISR_SHRUNK: 1, events.ISR_EXPANDED: 1}


def test_a_leaderless_spell_ends_in_a_move_only_if_another_broker_leads() -> None:
    back = [created(0, 1, [1]), changed(1, leader=-1), changed(2, leader=1)]
    assert events.count(back)[events.LEADER_MOVED] == 0, "the sole replica came back"
    other = [created(0, 1, [1, 2]), changed(1, leader=-1, isr=[1]), changed(2, leader=2, isr=[2])]
    assert events.count(other)[events.LEADER_MOVED] == 1


def test_changes_of_a_partition_the_log_never_created_are_skipped_and_every_row_is_there() -> None:
    assert events.count([changed(5, leader=2, isr=[2])]) == dict.fromkeys(events.ROWS, 0)
    assert set(events.count([])) == set(events.ROWS)
