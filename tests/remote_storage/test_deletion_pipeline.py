"""Pipelined journaled deletion: DeleteObjects calls of a window run concurrently (never more than ``concurrency``),
the window is journaled in two appends, and the journal invariant holds when one batch fails: its segments stay
STARTED (a rerun finishes them), the others are FINISHED, and no segment is FINISHED with an object left.

moto's S3 server on loopback and a real SQLite store."""

from __future__ import annotations

import threading
from typing import Any

import botocore.exceptions as bce
import pytest
from prometheus_client import CollectorRegistry

from orchestrator.errors import InvalidRequest
from orchestrator.ids import Uuid
from orchestrator.metadata.records import SegmentState, TieredState, make_record
from orchestrator.metadata.sqlite import SqliteMetadataStore
from orchestrator.metrics import RemoteStorageMetrics
from remote_storage.deletion import delete_segments
from remote_storage.keys import segment_keys, topic_prefix
from remote_storage.rlmm import RemoteLogMetadataManager, RemoteSegment, copy_started_record, update_record
from remote_storage.s3 import S3RemoteStorage

pytestmark = pytest.mark.integration

PREFIX = "tiered/"
SEGMENTS, PER_BATCH = 40, 4  # 10 batches


class World:
    def __init__(self, tmp_path: Any, s3: Any, bucket: str, partitions: int = 1) -> None:
        self.s3, self.bucket = s3, bucket
        self.store = SqliteMetadataStore(tmp_path / "store.db")
        lease = self.store.acquire_lease(holder="t", now_ms=0, ttl_ms=10**12)
        assert lease is not None
        self.tid = Uuid.random()
        enabled = make_record(
            "TieredStateRecord", topic_id=self.tid, tiered_epoch=1, tiered_state=int(TieredState.ENABLED), policy=0
        )
        self.store.append(
            [make_record("TopicRecord", name="orders", topic_id=self.tid), enabled],
            controller_epoch=lease.controller_epoch,
        )
        per = SEGMENTS // partitions  # segment i of partition i // per: in plan order, partition by partition
        self.segments = [
            RemoteSegment("orders", self.tid, i // per, Uuid.random(), i % per * 10, i % per * 10 + 9, 0, 30, 1)
            for i in range(SEGMENTS)
        ]
        for seg in self.segments:
            for key in segment_keys(PREFIX, seg.key).values():
                s3.put_object(Bucket=bucket, Key=key, Body=b"x")
        self.store.append_remote_log_metadata([copy_started_record(s, now_ms=0) for s in self.segments])
        self.store.append_remote_log_metadata(
            [update_record(s, SegmentState.COPY_SEGMENT_FINISHED, broker_id=1, now_ms=0) for s in self.segments]
        )
        self.rlmm = RemoteLogMetadataManager(self.store)
        self.rsm = S3RemoteStorage(client=s3, bucket=bucket, prefix=PREFIX)
        self.batches = tuple(tuple(self.segments[i : i + PER_BATCH]) for i in range(0, SEGMENTS, PER_BATCH))

    def delete(self, **kwargs: Any) -> Any:
        self.rlmm.refresh()
        todo = {s.segment_id for s in self.rlmm.segments(self.tid) if s.state != SegmentState.DELETE_SEGMENT_FINISHED}
        batches = tuple(b for b in (tuple(s for s in b if s.segment_id in todo) for b in self.batches) if b)
        return delete_segments(
            [s for b in batches for s in b],
            rsm=self.rsm,
            rlmm=self.rlmm,
            broker_id=1,
            now_ms=lambda: 0,
            batches=batches,
            **kwargs,
        )

    def states(self) -> dict[Uuid, SegmentState]:
        self.rlmm.refresh()
        return {s.segment_id: s.state for s in self.rlmm.segments(self.tid)}

    def keys(self) -> set[str]:
        pages = self.s3.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=topic_prefix(PREFIX, "orders", self.tid)
        )
        return {o["Key"] for p in pages for o in p.get("Contents", [])}


@pytest.fixture
def world(tmp_path, s3_client, bucket) -> Any:  # type: ignore[no-untyped-def]
    w = World(tmp_path, s3_client, bucket)
    yield w
    w.store.close()


@pytest.fixture
def four_partitions(tmp_path, s3_client, bucket) -> Any:  # type: ignore[no-untyped-def]
    w = World(tmp_path, s3_client, bucket, partitions=4)  # 10 segments each: batches 2 and 4 hold two partitions
    yield w
    w.store.close()


def test_delete_objects_calls_overlap_but_never_exceed_the_concurrency_and_the_journal_is_two_appends_a_window(world):
    in_flight, peak, arrived, gate = [0], [0], [0], threading.Condition()
    batches = SEGMENTS // PER_BATCH

    def window_start(**_: Any) -> None:
        """Each call waits for the other calls of its window (3, the last one 1) to start, so they are in flight
        together whatever the machine's load; calls run one by one would wait out the bound and show a peak of 1."""
        with gate:
            index = arrived[0]
            arrived[0] += 1
            in_flight[0] += 1
            peak[0] = max(peak[0], in_flight[0])
            gate.notify_all()
            window_end = min((index // 3 + 1) * 3, batches)
            gate.wait_for(lambda: arrived[0] >= window_end, timeout=30)

    def done(**_: Any) -> None:
        with gate:
            in_flight[0] -= 1

    world.s3.meta.events.register("before-send.s3.DeleteObjects", window_start)
    world.s3.meta.events.register("after-call.s3.DeleteObjects", done)
    appends: list[int] = []
    real_append = world.store.append_remote_log_metadata

    def counting(records: Any, **kw: Any) -> Any:
        appends.append(len(records))
        return real_append(records, **kw)

    world.store.append_remote_log_metadata = counting  # type: ignore[method-assign]
    progress: list[tuple[int, int, int]] = []
    result = world.delete(concurrency=3, on_progress=lambda d, t, c: progress.append((d, t, c)))
    assert result.complete and result.segments_deleted == SEGMENTS and result.objects_deleted == 3 * SEGMENTS
    assert peak[0] == 3, f"three calls in flight at once, never more (saw {peak[0]})"
    assert len(appends) == 2 * 4, "10 batches in windows of 3: 4 windows, a STARTED and a FINISHED append each"
    assert progress == [(12, 40, 12), (24, 40, 24), (36, 40, 36), (40, 40, 40)]
    assert world.keys() == set() and set(world.states().values()) == {SegmentState.DELETE_SEGMENT_FINISHED}


def test_a_failing_batch_in_a_window_stays_started_with_its_objects_and_a_rerun_finishes_it(world):
    doomed = world.batches[4]  # in the second window of 3
    doomed_keys = {k for s in doomed for k in segment_keys(PREFIX, s.key).values()}

    def refuse(request: Any, **_: Any) -> None:
        if any(k.encode() in request.body for k in doomed_keys):
            raise bce.EndpointConnectionError(endpoint_url=request.url)

    world.s3.meta.events.register("before-send.s3.DeleteObjects", refuse)
    result = world.delete(concurrency=3)
    assert not result.complete and set(result.failed_keys) == doomed_keys
    assert result.unfinished_partitions == {0}, "the partition whose segments stay STARTED is named"
    states = world.states()
    assert {states[s.segment_id] for s in doomed} == {SegmentState.DELETE_SEGMENT_STARTED}, "journaled, not finished"
    others = [s for s in world.segments if s not in doomed]
    assert {states[s.segment_id] for s in others} == {SegmentState.DELETE_SEGMENT_FINISHED}
    assert world.keys() == doomed_keys, "a FINISHED segment has no object left; the failed batch keeps its objects"

    world.s3.meta.events.unregister("before-send.s3.DeleteObjects", refuse)
    again = world.delete(concurrency=3)
    assert again.complete and again.segments_deleted == len(doomed)
    assert world.keys() == set() and set(world.states().values()) == {SegmentState.DELETE_SEGMENT_FINISHED}


@pytest.mark.parametrize("failing_batch", [None, 4])
def test_a_partition_is_reported_done_by_the_window_that_finished_its_last_segment_and_never_with_one_left(
    four_partitions, failing_batch
):
    """Windows of 3 batches of 4 segments (12 segments) over 4 partitions of 10: each window ends one partition.
    With batch 4 (partition 1's segments 16-19, in the second window) failing, partition 1 is never reported and
    the result names it; the others are reported when their windows are journaled, as without the failure."""
    world = four_partitions
    doomed_keys = set()
    if failing_batch is not None:
        doomed_keys = {k for s in world.batches[failing_batch] for k in segment_keys(PREFIX, s.key).values()}

    def refuse(request: Any, **_: Any) -> None:
        if any(k.encode() in request.body for k in doomed_keys):
            raise bce.EndpointConnectionError(endpoint_url=request.url)

    world.s3.meta.events.register("before-send.s3.DeleteObjects", refuse)
    heard: list[tuple[frozenset[int], SegmentState]] = []

    def partitions_done(ended: frozenset[int]) -> None:  # each one heard once its segments are journaled FINISHED
        states = {s.state for s in world.rlmm.segments(world.tid) if s.partition in ended}
        heard.append((ended, *states))

    result = world.delete(concurrency=3, on_partitions_done=partitions_done)
    finished = SegmentState.DELETE_SEGMENT_FINISHED
    if failing_batch is None:
        assert result.complete and result.unfinished_partitions == frozenset()
        assert heard == [({0}, finished), ({1}, finished), ({2}, finished), ({3}, finished)]
    else:
        assert not result.complete and result.unfinished_partitions == {1}
        assert heard == [({0}, finished), ({2}, finished), ({3}, finished)]


def test_the_rlmm_folds_its_own_append_without_reading_it_back_unless_another_writer_came_between(world):
    world.rlmm.refresh()
    reads: list[int] = []
    real_read = world.store.read_remote_log_metadata

    def counting(**kw: Any) -> Any:  # how many entries each read yields (a reader may stop early)
        reads.append(0)
        for entry in real_read(**kw):
            reads[-1] += 1
            yield entry

    world.store.read_remote_log_metadata = counting  # type: ignore[method-assign]
    first, second = world.segments[0], world.segments[1]
    world.rlmm.transition([first], SegmentState.DELETE_SEGMENT_STARTED, broker_id=1, now_ms=0)
    assert sum(reads) == 0, "our own record is folded as written, not read back"
    assert world.states()[first.segment_id] == SegmentState.DELETE_SEGMENT_STARTED

    other = RemoteLogMetadataManager(world.store)  # another broker's RLMM over the same store
    other.refresh()
    other.transition([second], SegmentState.DELETE_SEGMENT_STARTED, broker_id=2, now_ms=0)
    reads.clear()
    # Appended right after the other writer's record, which this RLMM has not read yet: that one is read from the
    # store (the read stops before ours), ours folded as written; the refresh after finds nothing new.
    mine = update_record(first, SegmentState.DELETE_SEGMENT_FINISHED, broker_id=1, now_ms=0)
    world.rlmm._append([mine], now_ms=0)
    assert reads == [2, 0], "the other writer's record is read (and ours, where the read stopped), then nothing"
    states = world.states()
    assert states[first.segment_id] == SegmentState.DELETE_SEGMENT_FINISHED
    assert states[second.segment_id] == SegmentState.DELETE_SEGMENT_STARTED


def test_two_deleters_racing_on_the_same_segments_count_each_segment_once_and_never_move_one_back(world):
    """Two brokers deleting one partition (a leaderless partition assigned to one while its old leader still
    works on it): the second checks the states before the first journals FINISHED and appends its own FINISHED
    after. Each segment is counted as deleted once, by the first in the log, and a late DELETE_STARTED does not
    move a deleted segment back."""
    registries = [CollectorRegistry(), CollectorRegistry()]
    metrics = [RemoteStorageMetrics(r) for r in registries]
    first_rlmm = RemoteLogMetadataManager(world.store)
    first = S3RemoteStorage(client=world.s3, bucket=world.bucket, prefix=PREFIX, metrics=metrics[0])
    second = S3RemoteStorage(client=world.s3, bucket=world.bucket, prefix=PREFIX, metrics=metrics[1])
    real_append = world.store.append_remote_log_metadata
    raced: list[int] = []

    class Racing:  # the second broker's store: the first broker deletes everything just before its FINISHED lands
        def __getattr__(self, name: str) -> Any:
            return getattr(world.store, name)

        def append_remote_log_metadata(self, records: Any, **kw: Any) -> Any:
            if not raced and records[0].fields["remote_log_segment_state"] == SegmentState.DELETE_SEGMENT_FINISHED:
                raced.append(1)
                whole = delete_segments(world.segments, rsm=first, rlmm=first_rlmm, broker_id=1, now_ms=lambda: 0)
                assert whole.complete and whole.segments_deleted == whole.segments_counted == SEGMENTS
            return real_append(records, **kw)

    second_rlmm = RemoteLogMetadataManager(Racing())  # type: ignore[arg-type]
    progress: list[tuple[int, int, int]] = []
    result = delete_segments(
        world.segments,
        rsm=second,
        rlmm=second_rlmm,
        broker_id=2,
        now_ms=lambda: 0,
        on_progress=lambda d, t, c: progress.append((d, t, c)),
    )
    assert raced and result.complete
    assert (result.segments_deleted, result.segments_counted) == (SEGMENTS, 0), "finished all, first to none"
    assert progress == [(SEGMENTS, SEGMENTS, 0)], "its progress says the work is done and counts nothing"
    counted = [r.get_sample_value("tieredctl_remote_segments_deleted_total") for r in registries]
    assert counted == [SEGMENTS, 0], "the first FINISHED in the log counts; the second broker's is moot"
    assert [r.get_sample_value("tieredctl_remote_bytes_deleted_total") for r in registries] == [30 * SEGMENTS, 0]
    assert world.keys() == set() and set(world.states().values()) == {SegmentState.DELETE_SEGMENT_FINISHED}

    late = first_rlmm.transition(world.segments[:3], SegmentState.DELETE_SEGMENT_STARTED, broker_id=1, now_ms=0)
    assert late == [], "already deleted: nothing to move, nothing written"
    stale = update_record(world.segments[0], SegmentState.DELETE_SEGMENT_STARTED, broker_id=3, now_ms=0)
    assert first_rlmm._append([stale], now_ms=0) == [False], "a record that would move a segment back is moot"
    replayed = RemoteLogMetadataManager(world.store)
    replayed.refresh()
    assert {s.state for s in replayed.segments(world.tid)} == {SegmentState.DELETE_SEGMENT_FINISHED}
    with pytest.raises(InvalidRequest, match="cannot go back"):
        first_rlmm.transition(world.segments[:1], SegmentState.COPY_SEGMENT_FINISHED, broker_id=1, now_ms=0)


class _LateWrites:
    """One segment of ``orders`` journaled at event time 10_000 in ``state``, with its objects; a PUT of its .log
    object held by a stalled front end lands during the deletion's wait (``sleep``), as one given up on may."""

    def __init__(self, world: World, state: SegmentState, *, earlier_attempt_ms: int | None = None) -> None:
        """``earlier_attempt_ms``: an earlier deletion attempt (one an S3 outage failed) journaled the segment
        DELETE_SEGMENT_STARTED then."""
        self.world = world
        self.seg = RemoteSegment("orders", world.tid, 1, Uuid.random(), 0, 9, 0, 30, 1)
        self.keys = list(segment_keys(PREFIX, self.seg.key).values())
        for key in self.keys:
            world.s3.put_object(Bucket=world.bucket, Key=key, Body=b"x")
        world.store.append_remote_log_metadata([copy_started_record(self.seg, now_ms=10_000)])
        if state == SegmentState.COPY_SEGMENT_FINISHED:
            finished = update_record(self.seg, state, broker_id=1, now_ms=10_000)
            world.store.append_remote_log_metadata([finished])
        if earlier_attempt_ms is not None:
            attempt = update_record(
                self.seg, SegmentState.DELETE_SEGMENT_STARTED, broker_id=2, now_ms=earlier_attempt_ms
            )
            world.store.append_remote_log_metadata([attempt])
        self.slept: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.world.s3.put_object(Bucket=self.world.bucket, Key=self.keys[0], Body=b"late")

    def delete(self, now_ms: int) -> Any:
        rlmm = self.world.rlmm
        rlmm.refresh()
        planned = [s for s in rlmm.segments(self.world.tid, 1)]
        return delete_segments(
            planned,
            rsm=self.world.rsm,
            rlmm=rlmm,
            broker_id=1,
            now_ms=lambda: now_ms,
            settle_ms=5_000,
            sleep=self.sleep,
        )

    def left(self) -> set[str]:
        return self.world.keys() & set(self.keys)


def test_an_unfinished_copy_deleted_inside_the_late_write_window_is_deleted_again_after_it_then_finished(world):
    """Matrix seed 103: a copy whose upload timed out and whose finish was refused, its clean-up lost to a store
    restart, deleted by the delete policy 5 s later; the PUT held by the stalled S3 landed after the deletion and left
    its object for good. Now the deletion waits out the window (here 5 s from the copy's start: 3.5 s left), deletes
    again what landed meanwhile, and only then journals the segment FINISHED."""
    late = _LateWrites(world, SegmentState.COPY_SEGMENT_STARTED)
    result = late.delete(now_ms=11_500)
    assert late.slept == [3.5]
    assert late.left() == set(), "the object that landed during the wait is gone too"
    assert result.complete and result.segments_deleted == 1
    assert world.states()[late.seg.segment_id] == SegmentState.DELETE_SEGMENT_FINISHED


@pytest.mark.parametrize(
    ("state", "now_ms"), [(SegmentState.COPY_SEGMENT_FINISHED, 11_500), (SegmentState.COPY_SEGMENT_STARTED, 15_000)]
)
def test_a_finished_copy_or_an_unfinished_one_past_the_window_is_deleted_without_waiting(world, state, now_ms):
    late = _LateWrites(world, state)
    assert late.delete(now_ms=now_ms).complete
    assert late.slept == [] and late.left() == set()
    assert world.states()[late.seg.segment_id] == SegmentState.DELETE_SEGMENT_FINISHED


def test_a_finished_copy_whose_deletion_an_earlier_attempt_started_is_deleted_without_waiting(world):
    """An earlier attempt (failed by an S3 outage, or another deleter's) left the segment DELETE_SEGMENT_STARTED
    0.5 s ago. Its copy had finished, so no PUT of it is left to land: no wait (before, the state alone counted it
    as an unfinished copy and every deletion resumed after an outage waited out the whole window)."""
    late = _LateWrites(world, SegmentState.COPY_SEGMENT_FINISHED, earlier_attempt_ms=11_000)
    world.rlmm.refresh()
    [seg] = world.rlmm.segments(world.tid, 1)
    assert seg.state == SegmentState.DELETE_SEGMENT_STARTED and seg.copy_confirmed
    assert late.delete(now_ms=11_500).complete
    assert late.slept == [] and late.left() == set()
    assert world.states()[late.seg.segment_id] == SegmentState.DELETE_SEGMENT_FINISHED


def test_an_unfinished_copy_whose_deletion_an_earlier_attempt_started_waits_out_the_window_from_that_attempt(world):
    late = _LateWrites(world, SegmentState.COPY_SEGMENT_STARTED, earlier_attempt_ms=14_000)
    world.rlmm.refresh()
    [seg] = world.rlmm.segments(world.tid, 1)
    assert seg.state == SegmentState.DELETE_SEGMENT_STARTED and not seg.copy_confirmed
    result = late.delete(now_ms=15_000)
    assert late.slept == [4.0], "5 s from the newest event, the earlier attempt: 4 s left"
    assert late.left() == set() and result.complete
