"""Where a leader resumes copying (remote_storage/rlmm.py: highest_copied_offset_in_lineage, Kafka's
findHighestRemoteOffset): the highest offset copied in the latest epoch of its own lineage that any copy has, cut to
where that epoch ends in its log. A leader elected without its predecessor's divergent tail (unclean election)
copies its own records over those offsets instead of skipping them; in every other case it is the highest copied
offset."""

from __future__ import annotations

import pytest

from orchestrator.ids import Uuid
from orchestrator.metadata.records import SegmentState
from remote_storage.rlmm import (
    RecordedRlmm,
    RemoteSegment,
    RlmmFold,
    copy_started_record,
    epoch_ends,
    highest_in_lineage,
    update_record,
)

pytestmark = pytest.mark.unit

TID = Uuid.random()
NOW = 1_700_000_000_000


def _seg(start: int, end: int, epochs: tuple[tuple[int, int], ...]) -> RemoteSegment:
    return RemoteSegment(
        "orders",
        TID,
        0,
        Uuid.random(),
        start,
        end,
        NOW,
        100,
        tiered_epoch=0,
        leader_epochs=epochs,
        leader_epoch=epochs[0][0] if epochs else 0,
    )


def _fold(*finished: RemoteSegment, started_only: tuple[RemoteSegment, ...] = ()) -> RlmmFold:
    records = []
    for seg in finished:
        records += [
            copy_started_record(seg, now_ms=NOW),
            update_record(seg, SegmentState.COPY_SEGMENT_FINISHED, broker_id=1, now_ms=NOW),
        ]
    records += [copy_started_record(seg, now_ms=NOW) for seg in started_only]
    fold = RlmmFold(RecordedRlmm(records))
    fold.refresh()
    return fold


def test_each_epoch_of_a_segment_ends_where_the_next_begins():
    assert epoch_ends(_seg(100, 299, ((3, 100), (4, 150), (6, 290)))) == [(3, 149), (4, 289), (6, 299)]
    assert epoch_ends(_seg(0, 49, ())) == [(0, 49)], "no epochs recorded: the segment's one"


def test_one_leader_and_a_clean_leader_change_resume_at_the_highest_copied_offset():
    fold = _fold(_seg(0, 99, ((0, 0),)), _seg(100, 199, ((0, 100),)), _seg(200, 299, ((0, 200), (1, 250))))
    assert fold.highest_copied_offset(TID, 0) == 299
    assert fold.highest_copied_offset_in_lineage(TID, 0, [(0, 0), (1, 250)], 400) == 299
    assert fold.highest_copied_offset_in_lineage(TID, 0, [(0, 0), (1, 250), (2, 380)], 400) == 299, "epoch 2: none"


def test_a_leader_without_its_predecessors_divergent_tail_resumes_where_its_own_lineage_left_it():
    # the old leader copied epoch 1 up to 299; the new one (unclean) has epoch 1 only up to 239, then its epoch 2
    fold = _fold(_seg(0, 199, ((0, 0), (1, 150))), _seg(200, 299, ((1, 200),)))
    assert fold.highest_copied_offset(TID, 0) == 299
    assert fold.highest_copied_offset_in_lineage(TID, 0, [(0, 0), (1, 150), (2, 240)], 500) == 239


def test_an_unfinished_copy_counts_for_nothing_and_an_empty_lineage_falls_back_to_the_highest():
    fold = _fold(_seg(0, 99, ((0, 0),)), started_only=(_seg(100, 199, ((1, 100),)),))
    assert fold.highest_copied_offset_in_lineage(TID, 0, [(0, 0), (1, 100)], 300) == 99
    assert fold.highest_copied_offset_in_lineage(TID, 0, [], 300) == 99
    assert fold.highest_copied_offset_in_lineage(TID, 0, [(5, 250)], 300) == 99, "a lineage truncated from the start"
    assert fold.highest_copied_offset_in_lineage(Uuid.random(), 0, [(0, 0)], 300) == -1


@pytest.mark.parametrize(
    ("copied", "lineage", "end", "expected"),
    [
        ({}, [(0, 0)], 10, -7),
        ({0: 50}, [(0, 0)], 10, 9),  # copied past this log's own end in that epoch: cut to it
        ({0: 50, 2: 90}, [(0, 0), (1, 60)], 100, 50),  # epoch 2 is no epoch of this lineage
    ],
)
def test_the_pure_rule(copied, lineage, end, expected):
    assert highest_in_lineage(copied, lineage, end, overall=-7) == expected
