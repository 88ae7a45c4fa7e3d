"""The delete policy's planner (policies.disable): what a disablement with ``delete`` removes."""

import pytest

from orchestrator.ids import Uuid
from orchestrator.metadata.records import SegmentState
from policies.disable import SEGMENTS_PER_DELETE_BATCH, plan_delete
from tests.support.segments import TID, remote_segment, segment_chain

pytestmark = pytest.mark.unit


def test_delete_plans_every_not_yet_deleted_segment_of_the_topic_id_only():
    other = Uuid.random()
    segs = [
        *segment_chain(3),
        remote_segment(30, 39, state=SegmentState.COPY_SEGMENT_STARTED),
        remote_segment(40, 49, state=SegmentState.DELETE_SEGMENT_STARTED),
        remote_segment(50, 59, state=SegmentState.DELETE_SEGMENT_FINISHED),
        remote_segment(0, 9, tid=other),
    ]
    plan = plan_delete(TID, segs, {0: 60})
    planned = [s for b in plan.batches for s in b]
    assert len(planned) == 5 and all(s.topic_id == TID for s in planned)
    assert all(s.state != SegmentState.DELETE_SEGMENT_FINISHED for s in planned)
    assert plan.log_start_offsets == {0: 60}


def test_delete_batches_stay_within_1000_keys():
    plan = plan_delete(TID, segment_chain(1000), {})
    assert [len(b) for b in plan.batches] == [333, 333, 333, 1]
    assert SEGMENTS_PER_DELETE_BATCH * 3 <= 1000


def test_a_batch_holds_one_partitions_segments_and_a_plan_spans_its_partitions():
    segs = [remote_segment(i * 10, i * 10 + 9, partition=p) for p in (2, 0, 1) for i in range(5)]
    plan = plan_delete(TID, segs, {}, batch_segments=3)
    assert [[s.partition for s in b] for b in plan.batches] == [[0, 0, 0], [0, 0], [1, 1, 1], [1, 1], [2, 2, 2], [2, 2]]
    assert [s.start_offset for s in plan.batches[0] + plan.batches[1]] == [0, 10, 20, 30, 40]
