"""Which open logs a broker rebuilds from the RLMM: a lost directory of a partition it is the only replica of, or
one it is to lead; never a follower's of a replicated partition, which copies from its leader what its disk lost
(a rebuild would start it past records only the leader's local log holds, those of a copy that never finished)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from orchestrator.ids import Uuid
from orchestrator.metadata.records import SegmentState, TieredState, make_record
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
