"""Tiering and KIP-950 disablement on the broker side: real SQLite store, real segment files, moto's S3 server."""

import os
import signal
import subprocess
import sys

import pytest

from orchestrator.broker.job_registry import BrokerJobStatus
from orchestrator.broker.local_log import PartitionLog
from orchestrator.broker.partition_dirs import STALE_DIR, retire_stale_partitions
from orchestrator.errors import InconsistentTopicId, OffsetOutOfRange, RemoteStorageError, StaleTieredEpoch
from orchestrator.metadata.records import DisablePolicy, SegmentState, TieredState
from orchestrator.metadata.sqlite import SqliteMetadataStore
from remote_storage.keys import parse_key, topic_prefix
from remote_storage.retry import S3_MAX_ATTEMPTS
from remote_storage.rlmm import RemoteSegment
from tests.support import REPO_ROOT
from tests.support.broker_harness import BrokerUnderTest, ControllerWriter
from tests.support.faults import FaultInjector

pytestmark = pytest.mark.integration


@pytest.fixture
def env(tmp_path, s3_client, bucket):
    store_path = tmp_path / "metadata.db"
    writer_store = SqliteMetadataStore(store_path)
    writer = ControllerWriter(writer_store)
    data_dir = tmp_path / "broker-1"
    broker = BrokerUnderTest(broker_id=1, data_dir=data_dir, store_path=store_path, s3_client=s3_client, bucket=bucket)
    yield writer, broker, s3_client, bucket
    broker.close()
    writer_store.close()


def _objects(s3_client, bucket, prefix=""):
    pages = s3_client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    return sorted(o["Key"] for p in pages for o in p.get("Contents", []))


def test_tier_then_disable_with_delete_removes_exactly_that_topic_ids_objects(env):
    writer, broker, s3, bucket = env
    tid = writer.create_topic("orders", partitions=2)
    keep = writer.create_topic("payments")
    for t, parts in ((tid, 2), (keep, 1)):
        for p in range(parts):
            broker.produce(t, 60, partition=p)
            assert broker.tier(t, p) > 0
            broker.trim_local(t, p)
            broker.produce(t, 5, partition=p)  # a local tail that is not tiered
    kept_before = _objects(s3, bucket, topic_prefix("tiered/", "payments", keep))
    assert kept_before and _objects(s3, bucket, topic_prefix("tiered/", "orders", tid))

    epoch = writer.set_state(tid, TieredState.DISABLING, DisablePolicy.DELETE)
    resp = broker.disable(tid, controller_epoch=writer.epoch)
    assert resp["error_code"] == 0 and resp["tiered_epoch"] == epoch
    assert resp["partitions_done"] == resp["partitions_total"] == 2 and resp["segments_remaining"] == 0

    assert _objects(s3, bucket, topic_prefix("tiered/", "orders", tid)) == []
    assert _objects(s3, bucket, topic_prefix("tiered/", "payments", keep)) == kept_before
    broker.rlmm.refresh()
    segs = broker.rlmm.segments(tid)
    assert segs and all(s.state == SegmentState.DELETE_SEGMENT_FINISHED for s in segs)
    assert resp["segments_deleted"] == len(segs)
    for p in range(2):
        plog = broker.log(tid, p)
        assert plog.log_start_offset == plog.local_log_start_offset > 0
        with pytest.raises(OffsetOutOfRange):
            broker.rlm.fetch(tid, p, 0)
        assert broker.read_all(tid, p) == list(range(plog.log_start_offset, plog.log_end_offset))


def test_redelivered_disable_changes_nothing_already_done(env):
    writer, broker, _s3, _bucket = env
    tid = writer.create_topic("orders")
    broker.produce(tid, 40)
    broker.tier(tid)
    writer.set_state(tid, TieredState.DISABLING, DisablePolicy.DELETE)
    first = broker.disable(tid, controller_epoch=writer.epoch)
    rlmm_end = sum(1 for _ in broker.store.read_remote_log_metadata())
    again = broker.disable(tid, controller_epoch=writer.epoch)
    assert again == first
    assert sum(1 for _ in broker.store.read_remote_log_metadata()) == rlmm_end


def test_tier_then_disable_with_retain_keeps_everything_fetchable_and_expiry_still_works(env):
    from orchestrator.metadata.records import make_record

    writer, broker, s3, bucket = env
    tid = writer.create_topic("orders", configs={"retention.ms": "-1", "retention.bytes": "-1"})
    broker.produce(tid, 80, ts=1_000)
    broker.tier(tid)
    broker.trim_local(tid)
    assert broker.log(tid).local_log_start_offset > 0  # reads from 0 must now go to S3
    before = _objects(s3, bucket)

    writer.set_state(tid, TieredState.DISABLING, DisablePolicy.RETAIN)
    resp = broker.disable(tid, controller_epoch=writer.epoch)
    assert resp["error_code"] == 0 and resp["segments_deleted"] == 0
    assert _objects(s3, bucket) == before
    assert broker.read_all(tid) == list(range(0, 80))

    # Retention still expires remote data after a retain disable, exactly what retention.ms says.
    live = broker.rlmm.live_segments(tid, 0)
    retention_bytes = str(sum(s.size_bytes for s in live[1:]) + broker.log(tid).segments()[-1].size_bytes)
    record = make_record(
        "ConfigRecord", resource_type=2, resource_name="orders", name="retention.bytes", value=retention_bytes
    )
    writer.store.append([record], controller_epoch=writer.epoch)
    result = broker.rlm.expire_partition(tid, 0)
    assert result.segments_deleted == 1
    broker.rlmm.refresh()
    assert [s.segment_id for s in broker.rlmm.live_segments(tid, 0)] == [s.segment_id for s in live[1:]]
    assert broker.log(tid).log_start_offset == live[0].end_offset + 1
    assert broker.read_all(tid) == list(range(live[0].end_offset + 1, 80))


def test_reenable_tiers_new_segments_at_the_new_epoch_and_old_ones_are_still_served(env):
    writer, broker, s3, bucket = env
    tid = writer.create_topic("orders")
    broker.produce(tid, 40)
    broker.tier(tid)
    writer.set_state(tid, TieredState.DISABLING, DisablePolicy.RETAIN)
    broker.disable(tid, controller_epoch=writer.epoch)
    writer.set_state(tid, TieredState.DISABLED, DisablePolicy.RETAIN)
    broker.produce(tid, 40)
    assert broker.tier(tid) == 0  # disabled: nothing is copied
    new_epoch = writer.set_state(tid, TieredState.ENABLED)
    assert broker.tier(tid) > 0
    broker.rlmm.refresh()
    epochs = {s.tiered_epoch for s in broker.rlmm.live_segments(tid, 0)}
    assert epochs == {1, new_epoch}
    for key in _objects(s3, bucket):
        seg = next(s for s in broker.rlmm.segments(tid) if s.segment_id == parse_key(key, "tiered/").segment.segment_id)
        assert broker.rsm.tags(key) == {"tieredEpoch": str(seg.tiered_epoch)}
    broker.trim_local(tid)
    assert broker.read_all(tid) == list(range(0, 80))


def test_same_name_different_ids_are_never_confused(env):
    """One data directory throughout, as on a running broker: the old id's partition directory is retired (log
    closed, directory moved to stale/) as the agent's metadata round does once the image has the new id. The
    same on a whole running cluster: test_recreated_topic.py."""
    writer, broker, s3, bucket = env
    old = writer.create_topic("orders")
    broker.produce(old, 40)
    broker.tier(old)
    old_objects = _objects(s3, bucket, topic_prefix("tiered/", "orders", old))
    writer.delete_topic(old)
    new = writer.create_topic("orders")
    with pytest.raises(InconsistentTopicId):  # the directory of the old id is in the way until it is retired
        PartitionLog(broker.data_dir / "orders-0", topic_id=new, clock=lambda: 0)
    retire_stale_partitions(broker.data_dir, broker.follower.refresh(), broker.logs, now_ms=1_000)
    assert [p.name for p in (broker.data_dir / STALE_DIR).iterdir()] == [f"orders-0.{old}.1000"]
    broker.produce(new, 40)
    broker.tier(new)
    assert broker.read_all(new) == list(range(40))  # the new id's own records, none of the old id's
    writer.set_state(new, TieredState.DISABLING, DisablePolicy.DELETE)
    broker.disable(new, controller_epoch=writer.epoch)
    assert _objects(s3, bucket, topic_prefix("tiered/", "orders", new)) == []
    assert _objects(s3, bucket, topic_prefix("tiered/", "orders", old)) == old_objects


def test_s3_faults_on_upload_and_delete_are_retried_with_nothing_lost_and_no_duplicates(env):
    writer, broker, s3, bucket = env
    faults = FaultInjector(s3)
    faults.fail("PutObject", "slowdown", "internal", "reset", "slowdown")
    tid = writer.create_topic("orders")
    broker.produce(tid, 60)
    copied = broker.tier(tid)
    assert copied > 0 and faults.faults_served["PutObject"] == 4
    broker.rlmm.refresh()
    live = broker.rlmm.live_segments(tid, 0)
    assert len(live) == copied == len(broker.rlmm.segments(tid))  # one RLMM entry per segment, no duplicates
    assert len(_objects(s3, bucket)) == 3 * copied
    broker.trim_local(tid)
    assert broker.read_all(tid) == list(range(60))

    faults.fail("DeleteObjects", "reset", "internal", "slowdown")
    writer.set_state(tid, TieredState.DISABLING, DisablePolicy.DELETE)
    resp = broker.disable(tid, controller_epoch=writer.epoch)
    assert resp["error_code"] == 0 and faults.faults_served["DeleteObjects"] == 3
    assert _objects(s3, bucket) == []


def test_a_copy_that_fails_for_good_ends_the_pass_with_its_error_so_the_partition_backs_off(env):
    """The broker's loop backs off a partition whose pass raised (test_agent_loops.py); a copy that failed for good
    used to end the pass quietly, so the copy was tried again every round whatever S3 said. Retention and expiry
    run before the error is raised (they do not depend on the copy)."""
    writer, broker, s3, _bucket = env
    tid = writer.create_topic("orders")
    broker.produce(tid, 40)
    broker.log(tid).roll()
    faults = FaultInjector(s3)
    faults.fail("PutObject", *["reset"] * S3_MAX_ATTEMPTS)  # every attempt of the next upload
    with pytest.raises(RemoteStorageError):
        broker.rlm.tiering_pass(tid, 0, roll=False)
    broker.produce(tid, 40)
    broker.log(tid).roll()
    assert broker.read_all(tid) == list(range(80)), "nothing lost"
    broker.rlmm.refresh()
    states = [s.state for s in broker.rlmm.segments(tid)]
    assert states.count(SegmentState.DELETE_SEGMENT_FINISHED) == 1, "the failed copy was cleaned up"
    # S3 back: the next pass copies every closed segment and ends without error.
    broker.rlm.tiering_pass(tid, 0, roll=False)
    broker.rlmm.refresh()
    assert broker.rlmm.highest_copied_offset(tid, 0) == 79
    assert broker.read_all(tid) == list(range(80))


def test_a_zombie_copy_after_disable_is_refused_by_the_rlmm_fence(env):
    from orchestrator.ids import Uuid

    writer, broker, s3, bucket = env
    tid = writer.create_topic("orders")
    broker.produce(tid, 40)
    broker.log(tid).roll()
    seg = broker.log(tid).closed_segments()[0]
    stale = RemoteSegment(
        "orders", tid, 0, Uuid.random(), seg.base_offset, seg.end_offset, 0, seg.size_bytes, tiered_epoch=1
    )
    writer.set_state(tid, TieredState.DISABLING, DisablePolicy.DELETE)
    with pytest.raises(StaleTieredEpoch):
        broker.rlmm.copy_started(stale, now_ms=0)
    assert broker.rlm.copy_partition(tid, 0).copied == 0
    assert _objects(s3, bucket) == []


def test_a_copy_whose_finish_is_fenced_is_cleaned_up(env):
    """The topic is disabled while an upload is in flight: the finish is refused and the objects removed."""
    writer, broker, s3, bucket = env
    tid = writer.create_topic("orders")
    broker.produce(tid, 40)
    broker.log(tid).roll()
    disabled = []

    def disable_mid_upload(**kwargs):
        if not disabled:
            disabled.append(writer.set_state(tid, TieredState.DISABLING, DisablePolicy.RETAIN))

    s3.meta.events.register("before-send.s3.PutObject", disable_mid_upload)
    result = broker.rlm.copy_partition(tid, 0)
    assert result.copied == 0 and result.aborted == 1
    assert _objects(s3, bucket) == []
    broker.rlmm.refresh()
    assert [s.state for s in broker.rlmm.segments(tid)] == [SegmentState.DELETE_SEGMENT_FINISHED]


def test_a_delete_killed_half_way_is_finished_by_a_rerun(env, tmp_path, moto_endpoint):
    writer, broker, s3, bucket = env
    tid = writer.create_topic("orders")
    broker.produce(tid, 300)
    assert broker.tier(tid) >= 20
    writer.set_state(tid, TieredState.DISABLING, DisablePolicy.DELETE)
    total_objects = len(_objects(s3, bucket))
    worker = [sys.executable, "-m", "tests.support.delete_worker"]
    cmd = [*worker, str(tmp_path / "metadata.db"), moto_endpoint, bucket, "tiered/", str(tid)]
    proc = subprocess.Popen([*cmd, "hold"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=REPO_ROOT)
    try:
        line = proc.stdout.readline()  # the first batch is journaled and deleted; the worker now holds
        assert line.startswith("progress"), line
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        proc.stdout.close()
        proc.stdin.close()
    remaining = len(_objects(s3, bucket))
    assert 0 < remaining < total_objects
    broker.rlmm.refresh()
    states = {s.state for s in broker.rlmm.segments(tid)}
    assert SegmentState.DELETE_SEGMENT_FINISHED in states and SegmentState.COPY_SEGMENT_FINISHED in states
    segments = broker.rlmm.segments(tid)
    left = sum(1 for s in segments if s.state != SegmentState.DELETE_SEGMENT_FINISHED)
    assert 0 < left < len(segments)

    rerun = subprocess.run([*cmd, "go"], capture_output=True, text=True, cwd=REPO_ROOT, timeout=120)
    assert rerun.returncode == 0, rerun.stderr
    assert rerun.stdout.strip().endswith("complete")
    # The rerun resumed: it planned exactly the segments the killed run had not finished, not the whole topic again,
    # and it finished every one of them ("progress DONE TOTAL" per batch).
    progress = [tuple(map(int, line.split()[1:])) for line in rerun.stdout.splitlines() if line.startswith("progress")]
    assert progress and {total for _, total in progress} == {left} and progress[-1] == (left, left)
    assert _objects(s3, bucket) == []
    broker.rlmm.refresh()
    assert {s.state for s in broker.rlmm.segments(tid)} == {SegmentState.DELETE_SEGMENT_FINISHED}


def test_local_retention_drops_only_copied_segments_while_tiering_is_on(env):
    writer, broker, _s3, _bucket = env
    tid = writer.create_topic("orders", configs={"local.retention.ms": "0", "retention.ms": "-1"})
    broker.produce(tid, 60, ts=1)
    broker.log(tid).roll()
    closed = broker.log(tid).closed_segments()
    assert broker.rlm.apply_local_retention(tid, 0) == 0  # nothing copied yet: nothing may go
    assert broker.rlm.copy_partition(tid, 0).copied == len(closed)
    assert broker.rlm.apply_local_retention(tid, 0) == len(closed)
    assert broker.log(tid).log_start_offset == 0  # the data is remote now, still readable from 0
    assert broker.read_all(tid) == list(range(60))


def test_local_retention_of_a_never_tiered_topic_moves_the_log_start(env):
    writer, broker, _s3, _bucket = env
    tid = writer.create_topic("plain", configs={"retention.ms": "0"}, tiered=False)
    broker.produce(tid, 60, ts=1)
    broker.log(tid).roll()
    assert broker.rlm.apply_local_retention(tid, 0) > 0
    assert broker.log(tid).log_start_offset == broker.log(tid).local_log_start_offset == 60


def test_a_never_tiered_topics_local_pass_rolls_by_time_applies_retention_and_touches_no_object(env):
    writer, broker, s3, bucket = env
    tid = writer.create_topic("plain", configs={"retention.ms": "0", "segment.ms": "1"}, tiered=False)
    broker.produce(tid, 60, ts=1)
    # the last records sit in the active segment: only a roll by time lets retention remove them
    assert max(seg.end_offset for seg in broker.log(tid).closed_segments()) < 59
    before = _objects(s3, bucket)
    broker.rlm.local_pass(tid, 0)
    assert broker.log(tid).log_start_offset == broker.log(tid).local_log_start_offset == 60
    assert broker.rlm.rlmm.segments(tid) == []
    assert _objects(s3, bucket) == before


def test_a_broker_that_becomes_leader_after_acknowledging_applies_the_policy_to_its_new_partition(env):
    from orchestrator.metadata.records import make_record

    writer, broker, s3, bucket = env
    tid = writer.create_topic("orders", partitions=2)
    for p in range(2):
        broker.produce(tid, 40, partition=p)
        broker.tier(tid, p)
    # Partition 1 moves to broker 2 before the disable: broker 1 acknowledges for partition 0 only.
    moved_away = make_record("PartitionChangeRecord", topic_id=tid, partition_id=1, leader=2)
    writer.store.append([moved_away], controller_epoch=writer.epoch)
    writer.set_state(tid, TieredState.DISABLING, DisablePolicy.DELETE)
    first = broker.disable(tid, controller_epoch=writer.epoch)
    assert first["partitions_total"] == 1
    assert _objects(s3, bucket, f"tiered/orders-{tid}/1/")  # not broker 1's duty yet
    # Leadership comes back while DISABLING: the controller asks again and broker 1 must cover partition 1 too.
    moved_back = make_record("PartitionChangeRecord", topic_id=tid, partition_id=1, leader=1)
    writer.store.append([moved_back], controller_epoch=writer.epoch)
    again = broker.disable(tid, controller_epoch=writer.epoch)
    assert again["partitions_total"] == 2 and again["error_code"] == 0
    assert _objects(s3, bucket, topic_prefix("tiered/", "orders", tid)) == []


def test_retain_with_no_copy_in_flight_answers_done_on_the_first_request(env):
    writer, broker, _s3, _bucket = env
    tid = writer.create_topic("orders")
    broker.produce(tid, 40)
    broker.tier(tid)
    epoch = writer.set_state(tid, TieredState.DISABLING, DisablePolicy.RETAIN)
    body = {"topic_id": tid, "partition_id": -1, "tiered_epoch": epoch, "controller_epoch": writer.epoch}
    first = broker.handler.handle(body)
    assert first["error_code"] == 0 and first["status"] == BrokerJobStatus.DONE
    # And the topic tiers nothing more (DISABLING alone refuses copies; the fence itself is covered by the RLMM
    # fence tests and by stop_partitions waiting for in-flight copies in the delete tests).
    broker.produce(tid, 40)
    assert broker.tier(tid) == 0
