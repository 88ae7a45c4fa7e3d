"""The controller core's side of a deleted topic's remote data: marking, requests, failover rebuild, status."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from structlog.testing import capture_logs

from orchestrator.errors import KafkaStorageError
from orchestrator.metadata.memory_store import InMemoryMetadataStore
from orchestrator.metadata.records import MetadataRecord, PartitionDeleteState, SegmentState, make_record
from remote_storage.rlmm import RemoteLogMetadataManager
from tests.orchestrator.controller.test_core import DISABLEMENT, CoreHarness, _segment

pytestmark = pytest.mark.unit

TIERED = [{"name": "remote.storage.enable", "value": "true"}]


def _tiered_with_segments(c: CoreHarness) -> tuple[Any, RemoteLogMetadataManager]:
    c.create("clicks", num_partitions=3, replication_factor=1, configs=TIERED)
    topic = c.topic("clicks")
    rlmm = RemoteLogMetadataManager(c.store)
    for p in range(3):
        rlmm.copy_started(_segment(topic, p), now_ms=c.clock)
    return topic, rlmm


def test_deleting_a_tiered_topic_marks_every_partition_and_sends_them_to_live_brokers_spread_by_id() -> None:
    c = CoreHarness()
    topic, rlmm = _tiered_with_segments(c)
    response = c.core.delete_topics({"topic_names": ["clicks"]}, 5)["responses"][0]
    assert response["error_code"] == 0
    rlmm.refresh()
    marked = PartitionDeleteState.DELETE_PARTITION_MARKED
    assert [rlmm.partition_delete_state(topic.topic_id, p) for p in range(3)] == [marked] * 3
    sent = c.core.due_remote_delete_requests()
    assert {b: body["partitions"] for b, body in sent} == {1: [0], 2: [1], 3: [2]}
    assert all(
        body["topic_name"] == "clicks" and body["controller_epoch"] == c.core.controller_epoch for _, body in sent
    )
    status = c.core.describe_tiered_state({"topics": ["clicks"]})
    assert status["topics"] == [], "a name only a topic being deleted has is not answered as unknown"
    [deleting] = status["deleting_topics"]
    assert deleting["partitions_remaining"] == [0, 1, 2] and deleting["segments_remaining"] == 3


def test_a_deletion_that_makes_no_progress_is_reported_stalled_once_per_broker_with_its_last_error() -> None:
    c = CoreHarness()
    _tiered_with_segments(c)
    assert c.core.delete_topics({"topic_names": ["clicks"]}, 5)["responses"][0]["error_code"] == 0
    for broker_id, body in c.core.due_remote_delete_requests():
        failed = {"error_code": 56, "error_message": "S3 said 503", "partitions": []}
        c.core.on_remote_delete_response(broker_id, body, failed, None)
    with capture_logs() as logs:
        c.core.tick()  # not stalled yet
        c.clock += DISABLEMENT.stall_threshold_ms
        for b in (1, 2, 3):
            c.heartbeat(b)
        c.core.tick()
        c.core.tick()
    stalled = [e for e in logs if e["event"] == "topic_deletion.stalled"]
    assert sorted((e["broker_id"], tuple(e["partitions"])) for e in stalled) == [(1, (0,)), (2, (1,)), (3, (2,))]
    assert all(e["topic"] == "clicks" and "S3 said 503" in e["last_error"] for e in stalled)


def test_a_new_controller_rebuilds_the_deletions_from_the_rlmm_and_marks_what_a_crash_left_unmarked() -> None:
    c = CoreHarness()
    topic, rlmm = _tiered_with_segments(c)
    # The topic is removed and the controller dies before marking anything: a store written when DeleteTopics made
    # two appends (they are one transaction now: see the test below).
    c.store.append(
        [make_record("RemoveTopicRecord", topic_id=topic.topic_id)], controller_epoch=c.core.controller_epoch
    )
    rlmm.refresh()
    assert rlmm.partition_delete_state(topic.topic_id, 0) is None
    successor = c.new_controller()
    rlmm.refresh()
    assert rlmm.partition_delete_state(topic.topic_id, 0) == PartitionDeleteState.DELETE_PARTITION_MARKED
    sent = successor.due_remote_delete_requests()
    assert sorted(p for _, body in sent for p in body["partitions"]) == [0, 1, 2]
    # the brokers finish: segments deleted, partitions FINISHED; the topic leaves the queue
    segments = rlmm.segments(topic.topic_id)
    rlmm.transition(segments, SegmentState.DELETE_SEGMENT_STARTED, broker_id=1, now_ms=c.clock)
    rlmm.transition(segments, SegmentState.DELETE_SEGMENT_FINISHED, broker_id=1, now_ms=c.clock)
    finished = PartitionDeleteState.DELETE_PARTITION_FINISHED
    rlmm.mark_partitions_delete("clicks", topic.topic_id, range(3), finished, broker_id=1, now_ms=c.clock)
    for b, body in sent:
        successor.on_remote_delete_response(b, body, {"error_code": 0, "status": 0, "partitions_done": 1}, None)
    assert len(successor.deletion_queue.topics) == 0
    assert successor.describe_tiered_state({"topics": None})["deleting_topics"] == []


class FailingRemoteLogWrites(InMemoryMetadataStore):
    """A store whose RLMM appends of their own fail, as a controller killed after the removal would leave it."""

    def append_remote_log_metadata(self, records: Sequence[MetadataRecord], *, now_ms: int | None = None) -> int:
        if any(r.name == "RemotePartitionDeleteMetadataRecord" for r in records):
            raise KafkaStorageError("the store went away between the removal and the marks")
        return super().append_remote_log_metadata(records, now_ms=now_ms)


def test_a_tiered_topics_removal_and_its_partition_marks_are_written_together_or_not_at_all() -> None:
    c = CoreHarness()
    c.store = FailingRemoteLogWrites()
    c.core = c.new_controller()
    for b in (1, 2, 3):
        c.register(b)
        c.heartbeat(b)
    topic, rlmm = _tiered_with_segments(c)
    appends_before = c.store.end_offset()

    assert c.core.delete_topics({"topic_names": ["clicks"]}, 5)["responses"][0]["error_code"] == 0
    rlmm.refresh()
    assert c.store.end_offset() == appends_before + 1 and topic.topic_id not in c.core.image.topics
    marked = PartitionDeleteState.DELETE_PARTITION_MARKED
    assert [rlmm.partition_delete_state(topic.topic_id, p) for p in range(3)] == [marked] * 3, (
        "the removal is in the store only with its partitions' marks"
    )


def test_a_topic_that_was_never_tiered_is_deleted_without_any_remote_deletion() -> None:
    c = CoreHarness()
    c.create("plain", num_partitions=2, replication_factor=1)
    assert c.core.delete_topics({"topic_names": ["plain"]}, 5)["responses"][0]["error_code"] == 0
    assert c.core.due_remote_delete_requests() == [] and len(c.core.deletion_queue.topics) == 0


def test_a_tick_with_nothing_new_in_the_rlmm_or_the_image_does_not_walk_the_deleted_topics_again(monkeypatch) -> None:
    c = CoreHarness()
    topic, rlmm = _tiered_with_segments(c)
    c.core.delete_topics({"topic_names": ["clicks"]}, 5)
    c.core.tick()  # catches up with what the deletion wrote
    walks = []
    driver_rlmm = c.core._deletion._rlmm
    real_topic_ids = driver_rlmm.topic_ids
    monkeypatch.setattr(driver_rlmm, "topic_ids", lambda: walks.append(1) or real_topic_ids())
    for _ in range(20):
        c.core.tick()
    assert walks == [], "nothing moved: nothing to walk"
    rlmm.mark_partitions_delete(
        "clicks", topic.topic_id, [0], PartitionDeleteState.DELETE_PARTITION_STARTED, broker_id=1, now_ms=c.clock
    )
    c.core.tick()
    assert walks == [1], "the RLMM moved: walked once"
