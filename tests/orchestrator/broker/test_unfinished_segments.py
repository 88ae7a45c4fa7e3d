"""Copies whose RLMM write went unanswered, and segments left unfinished: a real SQLite store, real segment files,
moto's S3 server, and an RLMM writer that lands a record and then loses its answer (as a controller killed between
appending and answering does) or loses the request itself.

Two rules are held here (``orchestrator.broker.remote_log_manager``, ``policies.retention.plan_unfinished``):
a copy whose COPY_SEGMENT_FINISHED went unanswered is never undone at once (it may have landed: deleting it then
would drop a range the RLMM holds as copied, which local retention drops locally too), and a copy this broker
abandoned at COPY_SEGMENT_STARTED is deleted, objects and all, once no write of it can land any more."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from orchestrator.errors import RequestTimedOut
from orchestrator.metadata.records import MetadataRecord, SegmentState, make_record
from orchestrator.metadata.sqlite import SqliteMetadataStore
from remote_storage.keys import topic_prefix
from tests.support.broker_harness import BrokerUnderTest, ControllerWriter, wall_ms

pytestmark = pytest.mark.integration

ABANDONED_AFTER_MS = 60_000
FINISHED = int(SegmentState.COPY_SEGMENT_FINISHED)


class Clock:
    def __init__(self) -> None:
        self.now = wall_ms()

    def __call__(self) -> int:
        return self.now


class LossyWriter:
    """Appends to the store as a controller would, except the next COPY_SEGMENT_FINISHED, whose answer is lost
    (``land=True``: it was appended) or whose request is lost (``land=False``): RequestTimedOut either way."""

    def __init__(self, store_path) -> None:
        self.store = SqliteMetadataStore(store_path)
        self.lose_next_finish: bool | None = None  # None: answer everything

    def __call__(self, records: Sequence[MetadataRecord], *, now_ms: int) -> list[int]:
        finishing = any(r.fields.get("remote_log_segment_state") == FINISHED for r in records)
        land = self.lose_next_finish
        if finishing and land is not None:
            self.lose_next_finish = None
            if land:
                self.store.append_remote_log_metadata(records, now_ms=now_ms)
            raise RequestTimedOut("no active controller took the RLMM write within 36 s")
        last = self.store.append_remote_log_metadata(records, now_ms=now_ms)
        return list(range(last - len(records) + 1, last + 1))


@pytest.fixture
def world(tmp_path, s3_client, bucket):
    store_path = tmp_path / "metadata.db"
    writer_store = SqliteMetadataStore(store_path)
    writer = ControllerWriter(writer_store)
    lossy, clock = LossyWriter(store_path), Clock()
    opened: list[BrokerUnderTest] = []

    def broker(broker_id: int = 1) -> BrokerUnderTest:
        b = BrokerUnderTest(
            broker_id=broker_id,
            data_dir=tmp_path / f"broker-{broker_id}",
            store_path=store_path,
            s3_client=s3_client,
            bucket=bucket,
            now_ms=clock,
            rlmm_append=lossy,
            abandoned_after_ms=ABANDONED_AFTER_MS,
        )
        opened.append(b)
        return b

    yield writer, broker, lossy, clock, s3_client, bucket
    for b in opened:
        b.close()
    lossy.store.close()
    writer_store.close()


def _keys(s3, bucket, prefix):
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    return sorted(o["Key"] for p in pages for o in p.get("Contents", []))


def _states(broker, tid):
    broker.rlmm.refresh()
    return {s.segment_id: s.state for s in broker.rlmm.segments(tid)}


def test_a_copy_whose_finish_landed_but_went_unanswered_is_kept_not_undone(world):
    writer, new_broker, lossy, _clock, s3, bucket = world
    broker = new_broker()
    tid = writer.create_topic("orders")
    broker.produce(tid, 10)  # one segment
    broker.log(tid).roll()
    lossy.lose_next_finish = True
    result = broker.rlm.copy_partition(tid, 0)
    assert isinstance(result.failure, RequestTimedOut) and result.copied == 0, "the pass failed: it backs off"
    assert list(_states(broker, tid).values()) == [SegmentState.COPY_SEGMENT_FINISHED], "not undone"
    assert broker.rlmm.highest_copied_offset(tid, 0) == 9
    assert len(_keys(s3, bucket, topic_prefix("tiered/", "orders", tid))) == 3, "its objects stay"
    assert broker.rlm.copy_partition(tid, 0).copied == 0, "nothing copied twice"
    broker.trim_local(tid)
    assert broker.read_all(tid) == list(range(10)), "served from the bucket"


def test_a_copy_abandoned_at_started_is_copied_again_then_deleted_once_no_write_of_it_can_land(world):
    writer, new_broker, lossy, clock, s3, bucket = world
    broker = new_broker()
    tid = writer.create_topic("orders")
    prefix = topic_prefix("tiered/", "orders", tid)
    broker.produce(tid, 10)  # one segment
    broker.log(tid).roll()
    lossy.lose_next_finish = False
    assert isinstance(broker.rlm.copy_partition(tid, 0).failure, RequestTimedOut)
    [abandoned] = _states(broker, tid)
    assert _states(broker, tid) == {abandoned: SegmentState.COPY_SEGMENT_STARTED}

    clock.now += 1_000  # the next pass: the range is copied again under a new segment id
    broker.rlm.tiering_pass(tid, 0, roll=False)
    states = _states(broker, tid)
    assert states.pop(abandoned) == SegmentState.COPY_SEGMENT_STARTED, "a write of it may still land"
    assert list(states.values()) == [SegmentState.COPY_SEGMENT_FINISHED]
    assert len(_keys(s3, bucket, prefix)) == 6

    clock.now += ABANDONED_AFTER_MS  # no write of it can land any more
    broker.rlm.tiering_pass(tid, 0, roll=False)
    assert _states(broker, tid)[abandoned] == SegmentState.DELETE_SEGMENT_FINISHED
    assert len(_keys(s3, bucket, prefix)) == 3 and not any(str(abandoned) in k for k in _keys(s3, bucket, prefix))
    assert broker.rlmm.highest_copied_offset(tid, 0) == 9
    broker.trim_local(tid)
    assert broker.read_all(tid) == list(range(10))


def test_a_restarted_broker_deletes_its_earlier_process_copy_at_once_and_an_earlier_leaders_after_the_wait(world):
    writer, new_broker, lossy, clock, s3, bucket = world
    old_leader, first = new_broker(2), new_broker(1)
    tid = writer.create_topic("orders", leader=2)
    for copier in (old_leader, first):  # each leads in turn and abandons a copy at COPY_SEGMENT_STARTED
        copier.produce(tid, 10)
        copier.log(tid).roll()
        lossy.lose_next_finish = False
        assert isinstance(copier.rlm.copy_partition(tid, 0).failure, RequestTimedOut)
        change = {"topic_id": tid, "partition_id": 0, "leader": 1, "replicas": None, "isr": None}
        writer.store.append([make_record("PartitionChangeRecord", **change)], controller_epoch=writer.epoch)
    by_writer = {s.broker_id: s.segment_id for s in first.rlmm.segments(tid)}
    assert sorted(by_writer) == [1, 2] and set(_states(first, tid).values()) == {SegmentState.COPY_SEGMENT_STARTED}
    first.rlm.expire_partition(tid, 0)
    assert set(_states(first, tid).values()) == {SegmentState.COPY_SEGMENT_STARTED}, "a write of it may still land"
    first.close()

    clock.now += 1  # broker 1 again, a new process: its earlier process's copy is over
    restarted = new_broker(1)
    restarted.log(tid)  # opened, as the agent opens a log it leads
    restarted.rlm.expire_partition(tid, 0)
    states = _states(restarted, tid)
    assert states[by_writer[1]] == SegmentState.DELETE_SEGMENT_FINISHED
    assert states[by_writer[2]] == SegmentState.COPY_SEGMENT_STARTED, "another broker's copy may still be uploading"
    keys = _keys(s3, bucket, "")
    assert not any(str(by_writer[1]) in k for k in keys) and any(str(by_writer[2]) in k for k in keys)

    clock.now += ABANDONED_AFTER_MS  # the earlier leader's writer has given up: nothing of it can land any more
    restarted.rlm.expire_partition(tid, 0)
    assert _states(restarted, tid)[by_writer[2]] == SegmentState.DELETE_SEGMENT_FINISHED
    assert not any(str(by_writer[2]) in k for k in _keys(s3, bucket, ""))
