"""Which open logs a broker rebuilds from the RLMM: a lost directory of a partition it is the only replica of, or
one it is to lead; never a follower's of a replicated partition, which copies from its leader what its disk lost
(a rebuild would start it past records only the leader's local log holds, those of a copy that never finished)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from orchestrator.ids import Uuid
from orchestrator.metadata.records import DisablePolicy, SegmentState, TieredState, make_record
from remote_storage.rlmm import RemoteLogMetadataManager
from tests.support.broker_harness import in_process_broker, wall_ms
from tests.support.segments import remote_segment

pytestmark = pytest.mark.unit


def _topic(writer, name: str, replicas: list[int], leader: int) -> Uuid:
    tid = Uuid.random()
    partition = make_record(
        "PartitionRecord",
        partition_id=0,
        topic_id=tid,
        replicas=replicas,
        isr=replicas,
        leader=leader,
        leader_epoch=0,
        partition_epoch=0,
    )
    tiered = make_record(
        "TieredStateRecord", topic_id=tid, tiered_epoch=1, tiered_state=int(TieredState.ENABLED), policy=0
    )
    topic = make_record("TopicRecord", name=name, topic_id=tid)
    writer.store.append([topic, partition, tiered], controller_epoch=writer.epoch)
    return tid


def _copy_started(writer, name: str, tid: Uuid, start: int, end: int) -> None:
    seg = replace(remote_segment(start, end, state=SegmentState.COPY_SEGMENT_STARTED, tid=tid), topic=name)
    RemoteLogMetadataManager(writer.store).copy_started(seg, now_ms=wall_ms())


def test_a_follower_on_a_lost_disk_opens_empty_and_the_log_is_rebuilt_from_the_rlmm_once_it_is_to_lead(tmp_path):
    with in_process_broker(tmp_path) as (broker, writer):
        broker.data_dir.mkdir(parents=True)
        tid = _topic(writer, "replicated", [1, 2], leader=2)
        _copy_started(writer, "replicated", tid, 0, 46)  # broker 2 began copying 0-46; only its disk holds them
        followed = broker.hosted.open_log(broker.follower.refresh(), tid, 0)
        assert (followed.log_start_offset, followed.log_end_offset) == (0, 0), "it copies from its leader from 0"

        move = make_record("PartitionChangeRecord", partition_id=0, topic_id=tid, leader=1)
        writer.store.append([move], controller_epoch=writer.epoch)
        led = broker._leader_log(tid, 0)
        assert led is not followed and (led.log_start_offset, led.log_end_offset) == (47, 47), (
            "leading, it hands out no offset the RLMM knows"
        )
        assert broker._leader_log(tid, 0) is led, "an open log is looked at once"
        assert broker.logs[(tid, 0)] is led


def test_a_partition_with_one_replica_is_rebuilt_as_it_opens_and_a_healthy_leaders_log_is_kept(tmp_path):
    with in_process_broker(tmp_path) as (broker, writer):
        broker.data_dir.mkdir(parents=True)
        sole = _topic(writer, "sole", [1], leader=1)
        _copy_started(writer, "sole", sole, 0, 9)
        opened = broker.hosted.open_log(broker.follower.refresh(), sole, 0)
        assert opened.log_end_offset == 10, "the RLMM is the only other record of a sole replica"

        led = _topic(writer, "led", [1, 2], leader=1)
        broker.follower.refresh()
        log = broker._leader_log(led, 0)
        assert (log.log_start_offset, log.log_end_offset) == (0, 0) and broker._leader_log(led, 0) is log


def _lead(writer, tid: Uuid, leader: int) -> None:
    writer.store.append(
        [make_record("PartitionChangeRecord", partition_id=0, topic_id=tid, leader=leader)],
        controller_epoch=writer.epoch,
    )


def _tiered(writer, tid: Uuid, epoch: int, state: TieredState, policy: DisablePolicy) -> None:
    record = make_record(
        "TieredStateRecord", topic_id=tid, tiered_epoch=epoch, tiered_state=int(state), policy=int(policy)
    )
    writer.store.append([record], controller_epoch=writer.epoch)


def _remote(writer, name: str, tid: Uuid, start: int, end: int, state: SegmentState, epoch: int = 1):
    """A segment of ``name``-0 copied (finished) at tiered epoch ``epoch``, then moved on to ``state``."""
    rlmm = RemoteLogMetadataManager(writer.store)
    seg = replace(remote_segment(start, end, state=SegmentState.COPY_SEGMENT_STARTED, tid=tid, epoch=epoch), topic=name)
    rlmm.copy_started(seg, now_ms=wall_ms())
    rlmm.copy_finished(seg, broker_id=1, now_ms=wall_ms())
    for then in (SegmentState.DELETE_SEGMENT_STARTED, SegmentState.DELETE_SEGMENT_FINISHED):
        if state in (then, SegmentState.DELETE_SEGMENT_FINISHED):
            rlmm.transition([seg], then, broker_id=1, now_ms=wall_ms())
    return seg


def _led_log_with_tiered_records_gone_locally(broker, writer, name: str, *, copied: bool = True):
    """Broker 1 leads ``name``-0 (replicas 1 and 2): records 0-34 in a closed segment tiered (a finished remote
    segment, unless ``copied`` is False) and then removed by local retention, so its log starts at 0 and its local
    log at 35."""
    tid = _topic(writer, name, [1, 2], leader=1)
    broker.follower.refresh()
    plog = broker._leader_log(tid, 0)
    plog.append([(None, b"v%d" % i, None) for i in range(35)])
    plog.roll()
    plog.delete_local_segments_before(35)
    assert (plog.log_start_offset, plog.local_log_start_offset, plog.log_end_offset) == (0, 35, 35)
    if copied:
        _remote(writer, name, tid, 0, 34, SegmentState.COPY_SEGMENT_FINISHED)
    return tid, plog


@pytest.mark.parametrize(
    ("policy", "log_start"), [(DisablePolicy.DELETE, 35), (DisablePolicy.RETAIN, 0)], ids=["delete", "retain"]
)
def test_a_partition_led_again_after_its_policy_ran_without_a_leader_starts_where_its_data_does(
    tmp_path, policy: DisablePolicy, log_start: int
):
    """The delete policy applied to a leaderless partition (its remote segments deleted by the broker it was assigned
    to, no log start to move) and the partition then led again by a replica that led it before: the new leader's
    earliest offset is its local log start, not an offset it cannot serve. Under retain the remote data still serves
    what lies below, and the log start stays."""
    with in_process_broker(tmp_path) as (broker, writer):
        broker.data_dir.mkdir(parents=True)
        tid, plog = _led_log_with_tiered_records_gone_locally(broker, writer, "gone")
        assert broker._leader_log(tid, 0) is plog and plog.log_start_offset == 0, "tiered, what lies below is in S3"
        if policy == DisablePolicy.DELETE:  # what the policy's broker did meanwhile: the segment is gone
            rlmm = RemoteLogMetadataManager(writer.store)
            rlmm.refresh()
            rlmm.transition(
                rlmm.live_segments(tid, 0), SegmentState.DELETE_SEGMENT_FINISHED, broker_id=2, now_ms=wall_ms()
            )

        _lead(writer, tid, 2)  # the leader moves away; then the topic is disabled, the policy applied without it
        _tiered(writer, tid, 2, TieredState.DISABLING, policy)
        _tiered(writer, tid, 2, TieredState.DISABLED, policy)
        _lead(writer, tid, 1)  # and it leads again, at a new leader epoch
        broker.follower.refresh()
        led = broker._leader_log(tid, 0)
        assert led is plog and (led.log_start_offset, led.local_log_start_offset) == (log_start, 35)
        assert broker._leader_log(tid, 0).log_start_offset == log_start, "looked at once per leader epoch"


@pytest.mark.parametrize(
    ("first_live", "log_start"), [(14, 14), (0, 0), (None, 35)], ids=["re-tiered", "kept", "none-left"]
)
def test_a_leader_starts_its_log_at_its_first_live_remote_segment_whatever_the_topic_state_now(
    tmp_path, first_live: int | None, log_start: int
):
    """Matrix seed 12 (RF 3, disk faults): a topic disabled under the delete policy and tiered again at once, its
    partition then led by a replica that never heard of the policy's log start move (the leader that made it died).
    The topic is ENABLED again, so the policy's rule no longer applies; the remote tier decides: the earliest offset
    is the start of the first live remote segment (records 0-13 were deleted by the policy, 14-34 copied again under
    the new tiered epoch), all of it when the segment is still live, and the local log start when none is left."""
    with in_process_broker(tmp_path) as (broker, writer):
        broker.data_dir.mkdir(parents=True)
        tid, plog = _led_log_with_tiered_records_gone_locally(broker, writer, "again", copied=False)
        if first_live == 0:  # copied under tiered epoch 1, still live
            _remote(writer, "again", tid, 0, 34, SegmentState.COPY_SEGMENT_FINISHED)
        elif first_live is not None:  # 0-13 copied under epoch 1, deleted by the policy
            _remote(writer, "again", tid, 0, first_live - 1, SegmentState.DELETE_SEGMENT_FINISHED)
        _lead(writer, tid, 2)
        _tiered(writer, tid, 2, TieredState.DISABLED, DisablePolicy.DELETE)
        _tiered(writer, tid, 3, TieredState.ENABLED, DisablePolicy.NONE)
        if first_live:  # the rest copied again under epoch 3
            _remote(writer, "again", tid, first_live, 34, SegmentState.COPY_SEGMENT_FINISHED, epoch=3)
        _lead(writer, tid, 1)
        broker.follower.refresh()
        led = broker._leader_log(tid, 0)
        assert led is plog and (led.log_start_offset, led.local_log_start_offset) == (log_start, 35)


def test_records_still_held_whose_copy_a_delete_policy_removed_count_as_not_copied_until_copied_again(tmp_path):
    """Matrix seed 12 again (RF 3, disk faults): records 0-13 copied under tiered epoch 1, the topic disabled under
    delete (the copy deleted; the records still local, so the log start stayed at 0), then tiered again at epoch 3
    and 14-34 copied. The old copy counted as copied, so local retention dropped 0-13 with no copy anywhere:
    acknowledged records lost. Now they count as not copied until copied again; retention's deletions still count
    (their log start moved past them first)."""
    from orchestrator.broker.remote_retention import copied_through

    with in_process_broker(tmp_path) as (broker, writer):
        broker.data_dir.mkdir(parents=True)
        tid = _topic(writer, "again", [1, 2], leader=1)
        broker.follower.refresh()
        plog = broker._leader_log(tid, 0)
        plog.append([(None, b"v%d" % i, None) for i in range(14)])
        plog.roll()
        plog.append([(None, b"v%d" % i, None) for i in range(14, 35)])
        plog.roll()
        rlmm = RemoteLogMetadataManager(writer.store)
        _remote(writer, "again", tid, 0, 13, SegmentState.DELETE_SEGMENT_FINISHED)  # copied at 1, deleted by policy
        _tiered(writer, tid, 2, TieredState.DISABLED, DisablePolicy.DELETE)
        _tiered(writer, tid, 3, TieredState.ENABLED, DisablePolicy.NONE)
        rlmm.refresh()
        assert copied_through(rlmm, tid, 0, plog) == -1, "0-13 is held here only: copy it again"

        _remote(writer, "again", tid, 14, 34, SegmentState.COPY_SEGMENT_FINISHED, epoch=3)
        rlmm.refresh()
        assert copied_through(rlmm, tid, 0, plog) == -1, "a later live copy does not make 0-13 copied"
        _remote(writer, "again", tid, 0, 13, SegmentState.COPY_SEGMENT_FINISHED, epoch=3)
        rlmm.refresh()
        assert copied_through(rlmm, tid, 0, plog) == 34, "copied again: both ranges are live"

        plog.advance_log_start_offset(14)  # retention moved the log start past 0-13, then its copies went
        plog.delete_local_segments_before(14)
        rlmm.transition(rlmm.live_segments(tid, 0)[:1], SegmentState.DELETE_SEGMENT_FINISHED, broker_id=1, now_ms=0)
        rlmm.refresh()
        assert copied_through(rlmm, tid, 0, plog) == 34, "retention's deletion still counts as copied"
