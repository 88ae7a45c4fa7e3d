"""``--wait`` through Kafka's configs, driven with a fake clock and a scripted metadata topic: it ends when the
topic reaches the state asked for, says "stalled" once no segment moved for the bound (and not before, however
long the whole wait), and "timeout" while segments still move past the timeout; it never sleeps for real."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest

from orchestrator.cli.tiering_kafka import POLL_INTERVAL_S, Followed, follow
from orchestrator.client.kafka_tiering import MetadataTail, TopicRef
from orchestrator.ids import Uuid
from orchestrator.metadata.records import SegmentState, TieredState
from remote_storage.rlmm_topic.progress import SegmentEntry, TopicSegments

pytestmark = pytest.mark.unit

TID = Uuid.from_string("AAAAAAAAAAAAAAAAAAAAAQ")
SEGS = [Uuid.from_string(f"AAAAAAAAAAAAAAAAAAAA{c}A") for c in "BCDEFG"]
DELETE = {"remote.storage.enable": "false", "remote.log.delete.on.disable": "true"}
F, DS, DF = (
    SegmentState.COPY_SEGMENT_FINISHED,
    SegmentState.DELETE_SEGMENT_STARTED,
    SegmentState.DELETE_SEGMENT_FINISHED,
)


def segments(*states: SegmentState) -> TopicSegments:
    return TopicSegments(TID, {SEGS[i]: SegmentEntry(i % 2, s, 10) for i, s in enumerate(states)})


class Script(Followed):
    """The topic's segments at each poll, in turn (the last one for ever)."""

    def __init__(self, polls: Sequence[TopicSegments]) -> None:
        ref = TopicRef("t", TID, 2)
        super().__init__(ref, MetadataTail((ref,)), polls[0])
        self.polls = list(polls)
        self.count = 0

    async def poll(self, c: Any) -> TopicSegments:
        self.segments = self.polls[min(self.count, len(self.polls) - 1)]
        self.count += 1
        return self.segments


class Configs:
    async def describe_configs(self, name: str) -> dict[str, str]:
        return dict(DELETE)


class FakeTime:
    def __init__(self) -> None:
        self.now = 1000.0
        self.slept: list[float] = []

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def run_follow(script: Script, *, timeout_s: float, stall_timeout_s: float) -> tuple[str, Any, FakeTime]:
    time = FakeTime()
    seen: list[Any] = []
    coro = follow(
        Configs(),  # type: ignore[arg-type]
        script,
        target=TieredState.DISABLED,
        timeout_s=timeout_s,
        stall_timeout_s=stall_timeout_s,
        on_poll=seen.append,
        clock=time.clock,
        sleep=time.sleep,
    )
    outcome, status = asyncio.run(coro)
    assert seen[-1] is status
    return outcome, status, time


def test_it_ends_when_every_segment_is_delete_finished():
    script = Script([segments(F, F), segments(DS, DS), segments(DF, DS), segments(DF, DF)])
    outcome, status, time = run_follow(script, timeout_s=60, stall_timeout_s=10)
    assert (outcome, status.state) == ("done", TieredState.DISABLED)
    assert time.slept == [POLL_INTERVAL_S] * 3


def test_it_says_stalled_once_nothing_moved_for_the_bound():
    script = Script([segments(F, F), segments(DF, DS)])  # partition 1's segment stays DELETE_SEGMENT_STARTED
    outcome, status, time = run_follow(script, timeout_s=600, stall_timeout_s=5)
    assert outcome == "stalled" and status.state == TieredState.DISABLING
    assert [p.remaining for p in status.partitions] == [0, 1]
    # It moved at the second poll (t=0.5 s); the bound counts from there.
    assert time.now - 1000.0 == pytest.approx(0.5 + 5, abs=POLL_INTERVAL_S)


def test_segments_still_moving_past_the_timeout_are_a_timeout_not_a_stall():
    states = [segments(*([DF] * i + [DS] * (6 - i))) for i in range(6)]  # one more deleted at every poll
    moving = Script([s for s in states for _ in range(2)])
    outcome, status, _time = run_follow(moving, timeout_s=2, stall_timeout_s=3)
    assert outcome == "timeout" and status.state == TieredState.DISABLING
