"""Remote segments for the planners' tests: one segment, or a chain of consecutive ones, of topic id ``TID``."""

from __future__ import annotations

from typing import Any

from orchestrator.ids import Uuid
from orchestrator.metadata.records import SegmentState
from remote_storage.rlmm import RemoteSegment

TID = Uuid.random()


def remote_segment(
    start: int,
    end: int,
    *,
    ts: int = 0,
    size: int = 100,
    state: SegmentState = SegmentState.COPY_SEGMENT_FINISHED,
    tid: Uuid = TID,
    partition: int = 0,
    epoch: int = 1,
) -> RemoteSegment:
    return RemoteSegment("t", tid, partition, Uuid.random(), start, end, ts, size, epoch, state)


def segment_chain(n: int, *, size: int = 100, ts_step: int = 1000, **kw: Any) -> list[RemoteSegment]:
    """``n`` segments of 10 offsets each from offset 0, their max timestamps ``ts_step`` apart."""
    return [remote_segment(i * 10, i * 10 + 9, ts=(i + 1) * ts_step, size=size, **kw) for i in range(n)]
