"""Following one topic's segments in the metadata topic: counted per partition by state, only forward, only that
topic; a delete is done when every segment is DELETE_SEGMENT_FINISHED, a retain when no copy is in flight; and
the stall watch says when nothing moved for the bound."""

from __future__ import annotations

import pytest

from orchestrator.ids import Uuid
from orchestrator.metadata.records import MetadataRecord, SegmentState, make_record
from remote_storage.rlmm_topic.progress import PartitionProgress, StallWatch, TopicSegments, fold
from remote_storage.rlmm_topic.serde import decode_value, encode_value

pytestmark = pytest.mark.unit

TOPIC = Uuid.from_string("AAAAAAAAAAAAAAAAAAAAAQ")
OTHER = Uuid.from_string("AAAAAAAAAAAAAAAAAAAAAg")
S1, S2, S3 = (Uuid.from_string(f"AAAAAAAAAAAAAAAAAAAA{c}A") for c in "BCD")


def _sid(topic: Uuid, partition: int, segment: Uuid) -> dict[str, object]:
    return {"topic_id_partition": {"name": "t", "id": topic, "partition": partition}, "id": segment}


def started(segment: Uuid, partition: int = 0, *, size: int = 100, topic: Uuid = TOPIC) -> MetadataRecord:
    record = make_record(
        "RemoteLogSegmentMetadataRecord",
        0,
        remote_log_segment_id=_sid(topic, partition, segment),
        start_offset=0,
        end_offset=9,
        broker_id=1,
        max_timestamp_ms=1,
        event_timestamp_ms=1,
        segment_leader_epochs=[{"leader_epoch": 0, "offset": 0}],
        segment_size_in_bytes=size,
        remote_log_segment_state=int(SegmentState.COPY_SEGMENT_STARTED),
    )
    return decode_value(encode_value(record, version=0))  # as the topic carries it


def moved(segment: Uuid, state: SegmentState, partition: int = 0, *, topic: Uuid = TOPIC) -> MetadataRecord:
    record = make_record(
        "RemoteLogSegmentMetadataUpdateRecord",
        1,
        remote_log_segment_id=_sid(topic, partition, segment),
        broker_id=1,
        event_timestamp_ms=2,
        remote_log_segment_state=int(state),
    )
    return decode_value(encode_value(record, version=1))


def test_segments_are_counted_per_partition_by_their_last_state_with_the_bytes_left():
    records = [
        started(S1, 0, size=10),
        moved(S1, SegmentState.COPY_SEGMENT_FINISHED, 0),
        started(S2, 1, size=20),
        moved(S2, SegmentState.COPY_SEGMENT_FINISHED, 1),
        moved(S2, SegmentState.DELETE_SEGMENT_STARTED, 1),
        started(S3, 1, size=30),
    ]
    topic = fold(TopicSegments(TOPIC), records)
    assert topic.partitions(3) == [
        PartitionProgress(0, copied=1, bytes_remaining=10),
        PartitionProgress(1, copying=1, deleting=1, bytes_remaining=50),
        PartitionProgress(2),
    ]
    assert topic.copies_in_flight == 1 and not topic.all_deleted


def test_a_delete_is_done_when_every_segment_is_delete_finished():
    copied = fold(TopicSegments(TOPIC), [started(S1), moved(S1, SegmentState.COPY_SEGMENT_FINISHED)])
    deleting = fold(copied, [moved(S1, SegmentState.DELETE_SEGMENT_STARTED)])
    deleted = fold(deleting, [moved(S1, SegmentState.DELETE_SEGMENT_FINISHED)])
    assert [t.all_deleted for t in (copied, deleting, deleted)] == [False, False, True]
    assert deleted.partitions(1) == [PartitionProgress(0, deleted=1)]
    assert TopicSegments(TOPIC).all_deleted  # a topic with no remote segment has nothing to delete


def test_a_state_never_moves_back():
    topic = fold(TopicSegments(TOPIC), [started(S1), moved(S1, SegmentState.DELETE_SEGMENT_FINISHED)])
    again = fold(topic, [moved(S1, SegmentState.COPY_SEGMENT_FINISHED), started(S1)])
    assert again.segments[S1].state == SegmentState.DELETE_SEGMENT_FINISHED


def test_other_topics_and_partition_deletes_are_ignored():
    other = [started(S2, topic=OTHER), moved(S2, SegmentState.COPY_SEGMENT_FINISHED, topic=OTHER)]
    marked = make_record(
        "RemotePartitionDeleteMetadataRecord",
        0,
        topic_id_partition={"name": "t", "id": TOPIC, "partition": 0},
        broker_id=1,
        event_timestamp_ms=3,
        remote_partition_delete_state=0,
    )
    assert fold(TopicSegments(TOPIC), [*other, marked]).segments == {}


def test_an_update_whose_first_record_is_gone_still_counts_without_bytes():
    topic = fold(TopicSegments(TOPIC), [moved(S1, SegmentState.DELETE_SEGMENT_STARTED, 2)])
    assert topic.partitions() == [PartitionProgress(2, deleting=1)]


def test_folding_returns_a_new_value_and_leaves_the_old_one_unchanged():
    before = fold(TopicSegments(TOPIC), [started(S1)])
    fold(before, [moved(S1, SegmentState.COPY_SEGMENT_FINISHED)])
    assert before.segments[S1].state == SegmentState.COPY_SEGMENT_STARTED


def test_the_stall_watch_restarts_whenever_a_segment_moves_and_says_stalled_after_the_bound():
    a = fold(TopicSegments(TOPIC), [started(S1)])
    b = fold(a, [moved(S1, SegmentState.COPY_SEGMENT_FINISHED)])
    watch = StallWatch(a.mark, since_ms=0)
    watch = watch.observe(a.mark, now_ms=900)
    assert not watch.stalled(900, bound_ms=1000)
    watch = watch.observe(b.mark, now_ms=950)  # moved: the bound counts from here
    assert watch.since_ms == 950
    assert not watch.stalled(1900, bound_ms=1000)
    assert watch.observe(b.mark, now_ms=1950).stalled(1950, bound_ms=1000)
