"""The client traffic beside a chaos workload: which topics it may use (from the metadata log read so far), and the
checker's judgement of what it read."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from chaos import checker as ck
from chaos.traffic import live_topics

pytestmark = pytest.mark.unit

NAMES = frozenset({"chaos-0", "chaos-1"})


def rec(offset: int, record: str, **fields: Any) -> ck.LogRecord:
    return ck.LogRecord(offset, 1, record, fields)


def test_live_topics_are_the_scenarios_created_and_not_removed_with_their_partitions() -> None:
    log = [
        rec(0, "TopicRecord", name="chaos-0", topic_id="T0"),
        rec(1, "PartitionRecord", topic_id="T0", partition_id=0),
        rec(2, "PartitionRecord", topic_id="T0", partition_id=1),
        rec(3, "TopicRecord", name="outside", topic_id="TX"),
        rec(4, "PartitionRecord", topic_id="TX", partition_id=0),
        rec(5, "TopicRecord", name="chaos-1", topic_id="T1"),
        rec(6, "PartitionRecord", topic_id="T1", partition_id=0),
        rec(7, "RemoveTopicRecord", topic_id="T1"),
        rec(8, "TopicRecord", name="chaos-1", topic_id="T2"),  # created again: no partition record read yet
    ]
    assert live_topics(log, NAMES) == {"chaos-0": ("T0", (0, 1))}
    log.append(rec(9, "PartitionRecord", topic_id="T2", partition_id=0))
    assert live_topics(log, NAMES) == {"chaos-0": ("T0", (0, 1)), "chaos-1": ("T2", (0,))}


def _observation(acks: tuple[ck.Ack, ...], reads: tuple[ck.Read, ...]) -> ck.Observation:
    return ck.Observation(
        prefix="tiered/",
        log=(),
        log_gaps=(),
        rlmm=(),
        bucket_keys=frozenset(),
        sentinels=frozenset(),
        mutations=(),
        topics=(),
        acks=acks,
        delete_requests={},
        controller_events=(),
        reads=reads,
    )


def test_a_read_of_another_value_at_an_acknowledged_offset_is_promise_8_once_per_offset() -> None:
    acks = (ck.Ack("T0", 0, 10, (b"a", b"b"), 5),)
    same = (ck.Read("T0", 0, 10, b"a", 6), ck.Read("T0", 0, 11, b"b", 6), ck.Read("T0", 0, 12, b"unacked", 6))
    assert ck.check_reads(_observation(acks, same)) == []
    other = (ck.Read("T0", 0, 11, b"x", 7), ck.Read("T0", 0, 11, b"x", 8), ck.Read("T0", 1, 11, b"x", 8))
    [violation] = ck.check_reads(_observation(acks, other))
    assert violation.invariant == "8" and "T0-0@11" in violation.message and violation.topic_id == "T0"
    moved = dataclasses.replace(other[0], topic_id="T9")  # another topic's offset 11: nothing acknowledged there
    assert ck.check_reads(_observation(acks, (moved,))) == []
