"""The run's deposed-controller request, built from the metadata log read so far: every topic the log created and
did not remove, at its latest tiered epoch, with the delete policy, at the controller epoch given; and the coverage
counts of the answers."""

from __future__ import annotations

from typing import Any

import pytest

from chaos import checker as ck
from chaos.deposed import NO_LEASE, REFUSED, UNANSWERED, count, highest_controller_epoch, stale_request
from orchestrator.ids import Uuid

pytestmark = pytest.mark.unit

A, B, C = (Uuid.from_string(s) for s in ("AAAAAAAAAAAAAAAAAAAAAA", "BBBBBBBBBBBBBBBBBBBBBA", "CCCCCCCCCCCCCCCCCCCCCA"))


def rec(offset: int, record: str, epoch: int | None = 1, **fields: Any) -> ck.LogRecord:
    return ck.LogRecord(offset, epoch, record, fields)


def test_the_request_names_every_live_topic_at_its_latest_tiered_epoch_with_the_delete_policy() -> None:
    log = [
        rec(0, "TopicRecord", name="a", topic_id=A),
        rec(1, "TieredStateRecord", topic_id=A, tiered_state=1, tiered_epoch=1),
        rec(2, "TopicRecord", name="b", topic_id=B),
        rec(3, "TieredStateRecord", topic_id=A, tiered_state=2, tiered_epoch=2, policy=1, epoch=2),
        rec(4, "TopicRecord", name="c", topic_id=C, epoch=2),
        rec(5, "RemoveTopicRecord", topic_id=C, epoch=3),
        rec(6, "PartitionRecord", topic_id=A, partition_id=0, epoch=None),
    ]
    assert highest_controller_epoch(log) == 3
    request = stale_request(log, 2)
    assert request["controller_epoch"] == 2 and request["broker_epoch"] == -1
    by_id = {str(t["topic_id"]): t for t in request["topics"]}
    assert set(by_id) == {str(A), str(B)}, "a removed topic is not named"
    assert by_id[str(A)]["tiered_epoch"] == 2 and by_id[str(B)]["tiered_epoch"] == 0
    assert all(t["policy"] == 2 and t["assigned_partitions"] == [] for t in request["topics"])
    assert highest_controller_epoch([rec(0, "X", epoch=None)]) == -1


def test_answers_are_counted_as_refused_or_unanswered_and_every_row_is_there() -> None:
    answers = [
        ck.DeposedAnswer(1, 1, 2, ck.STALE_CONTROLLER_EPOCH),
        ck.DeposedAnswer(2, 1, 2, None, "paused"),
        ck.DeposedAnswer(3, 1, 2, ck.KAFKA_STORAGE_ERROR),
        ck.DeposedAnswer(3, 1, 2, 0),  # the checker's to judge, not a row of its own
    ]
    assert count(answers) == {REFUSED: 1, NO_LEASE: 1, UNANSWERED: 1}
    assert count([]) == {REFUSED: 0, NO_LEASE: 0, UNANSWERED: 0}
