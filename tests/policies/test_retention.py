"""Retention's planners (policies.retention): remote expiry by time, size and log start offset; local retention."""

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orchestrator.metadata.records import SegmentState
from policies.retention import LocalSegment, plan_local_retention, plan_remote_expiry, plan_unfinished
from tests.support.segments import segment_chain

pytestmark = pytest.mark.unit


def test_expiry_by_time_deletes_only_segments_wholly_past_retention():
    segs = segment_chain(5, ts_step=1000)  # max timestamps 1000..5000
    plan = plan_remote_expiry(segs, now_ms=4500, retention_ms=2000, retention_bytes=-1, log_start_offset=0)
    assert [s.start_offset for s in plan.expired] == [0, 10]  # 1000 and 2000 are below 2500; 3000 is not
    assert plan.log_start_offset == 20 and plan.reasons == {"retention.ms": 2}


def test_expiry_by_size_counts_local_data_not_yet_tiered():
    segs = segment_chain(5, size=100)
    plan = plan_remote_expiry(
        segs, now_ms=0, retention_ms=-1, retention_bytes=350, log_start_offset=0, local_bytes_not_copied=50
    )
    assert len(plan.expired) == 2 and plan.reasons == {"retention.bytes": 2}


def test_expiry_below_the_log_start_offset_and_unlimited_retention():
    segs = segment_chain(3)
    assert (
        plan_remote_expiry(segs, now_ms=10**12, retention_ms=-1, retention_bytes=-1, log_start_offset=0).expired == ()
    )
    plan = plan_remote_expiry(segs, now_ms=0, retention_ms=-1, retention_bytes=-1, log_start_offset=15)
    assert [s.start_offset for s in plan.expired] == [0] and plan.log_start_offset == 15


def test_unfinished_deletions_and_abandoned_copies_are_finished_and_nothing_else():
    started, deleting, finished, gone = (
        SegmentState.COPY_SEGMENT_STARTED,
        SegmentState.DELETE_SEGMENT_STARTED,
        SegmentState.COPY_SEGMENT_FINISHED,
        SegmentState.DELETE_SEGMENT_FINISHED,
    )
    chain = segment_chain(8)
    at = [  # (state, writer, last written at); this broker is 1, its process started at 5_000, now is 100_000
        (started, 1, 4_000),  # an earlier process of this broker: abandoned
        (started, 1, 80_000),  # this process, 20 s ago: a write of it may still land
        (started, 1, 69_999),  # this process, 30_001 ms ago (settle 30_000): abandoned
        (started, 2, 1_000),  # an earlier leader's copy, long ago: its writer's wait is over
        (deleting, 2, 69_000),  # a deletion left unfinished, by anyone, long enough ago
        (deleting, 1, 99_000),  # a deletion under way
        (finished, 1, 1_000),
        (started, 2, 4_000),  # an earlier leader's copy 96 s ago, before this process began: taken as well
    ]
    segs = [replace(s, state=st_, broker_id=b, event_timestamp_ms=t) for s, (st_, b, t) in zip(chain, at, strict=True)]
    segs.append(replace(segment_chain(9)[8], state=gone, broker_id=1, event_timestamp_ms=0))
    segs.append(replace(segment_chain(10)[9], state=started, broker_id=3, event_timestamp_ms=71_000))  # 29 s: may land
    plan = plan_unfinished(segs, broker_id=1, now_ms=100_000, started_ms=5_000, settle_ms=30_000)
    assert [s.start_offset for s in plan] == [0, 20, 30, 40, 70]
    assert (
        plan_unfinished(list(reversed(segs)), broker_id=1, now_ms=100_000, started_ms=5_000, settle_ms=30_000) == plan
    )


@given(
    st.integers(1, 12),
    st.integers(0, 20_000),
    st.integers(-1, 15_000),
    st.integers(-1, 2_000),
    st.integers(0, 130),
)
def test_expiry_removes_a_prefix_and_never_moves_the_start_offset_back(n, now, rms, rbytes, lso):
    segs = segment_chain(n)
    plan = plan_remote_expiry(segs, now_ms=now, retention_ms=rms, retention_bytes=rbytes, log_start_offset=lso)
    k = len(plan.expired)
    assert list(plan.expired) == segs[:k]  # oldest first, no holes
    assert plan.log_start_offset >= lso
    for seg in plan.expired:
        assert seg.end_offset < lso or (rms >= 0 and seg.max_timestamp_ms < now - rms) or rbytes >= 0


def test_local_retention_only_drops_copied_segments_while_tiering_is_on():
    closed = [LocalSegment(i * 10, i * 10 + 9, 100, (i + 1) * 1000) for i in range(4)]
    cut = plan_local_retention(
        closed, now_ms=10**9, retention_ms=0, retention_bytes=-1, tiering_enabled=True, highest_copied_offset=19
    )
    assert cut == 20
    cut = plan_local_retention(
        closed, now_ms=10**9, retention_ms=0, retention_bytes=-1, tiering_enabled=False, highest_copied_offset=-1
    )
    assert cut == 40
    cut = plan_local_retention(
        closed, now_ms=0, retention_ms=-1, retention_bytes=250, tiering_enabled=True, highest_copied_offset=39
    )
    assert cut == 20
