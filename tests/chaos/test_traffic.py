"""The client traffic beside a chaos workload: which topics it may use (from the metadata log read so far), which
of its acknowledged batches it keeps, and the checker's judgement of what it read."""

from __future__ import annotations

import asyncio
import dataclasses
from types import SimpleNamespace
from typing import Any

import pytest

from chaos import checker as ck
from chaos.checker import Ack
from chaos.history import History
from chaos.traffic import PRODUCED, UNATTRIBUTED, LiveTopics, Traffic, live_topics

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
    kept = LiveTopics(NAMES)
    assert kept.update(log[:7]) == {"chaos-0": ("T0", (0, 1)), "chaos-1": ("T1", (0,))}
    assert kept.update(log) == {"chaos-0": ("T0", (0, 1))}, "folded on from where it stopped"
    log.append(rec(9, "PartitionRecord", topic_id="T2", partition_id=0))
    both = {"chaos-0": ("T0", (0, 1)), "chaos-1": ("T2", (0,))}
    assert live_topics(log, NAMES) == both and kept.update(log) == both


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


class _NameMoves:
    """A client whose topic name names ``ids`` in turn (one per lookup), acknowledging every produce at offset 0."""

    def __init__(self, *ids: str) -> None:
        self.ids = list(ids)

    async def topic(self, name: str) -> dict[str, str]:
        return {"topic_id": self.ids.pop(0)}

    async def produce(self, name: str, values: list[bytes], *, partition: int, on_ack: Any) -> None:
        on_ack(0, len(values))


def _traffic(client: _NameMoves) -> tuple[Traffic, list[Ack]]:
    scenario = SimpleNamespace(seed=1, topic_names=("chaos-0",))
    rig = SimpleNamespace(scenario=scenario, call=lambda fn, **kw: asyncio.run(fn(client)))
    acks: list[Ack] = []
    return Traffic(rig, History(), tail=None, acks=acks), acks  # type: ignore[arg-type]


def test_a_batch_acknowledged_while_its_topic_was_created_again_under_its_name_is_not_judged() -> None:
    # The name named T1 before the produce and T2 after it: a produce by name may have gone to T2, so its offset 0
    # says nothing of T1's (T1's own offset 0 holds another value: judging it would be an offset handed out twice).
    traffic, acks = _traffic(_NameMoves("T1", "T2"))
    traffic._produce("chaos-0", "T1", 0)
    assert acks == [] and traffic.counts[UNATTRIBUTED] == 1 and traffic.counts[PRODUCED] == 0
    traffic, acks = _traffic(_NameMoves("T1", "T1"))
    traffic._produce("chaos-0", "T1", 0)
    assert [(a.topic_id, a.first_offset, len(a.values)) for a in acks] == [("T1", 0, 3)]
    assert traffic.counts[PRODUCED] == 1
