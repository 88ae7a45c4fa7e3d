"""A partition log whose directory was lost or is behind is rebuilt from the RLMM's segments of it: its offsets go
on after every offset the RLMM knows, its log start is the remote tier's first live offset, its leader epochs are
the segments', its idempotent producers those of the snapshot uploaded with the newest finished segment; a healthy
log and a partition never tiered are opened as they are."""

from __future__ import annotations

import pytest
from structlog.testing import capture_logs

from orchestrator.broker.leader_epochs import EpochEntry
from orchestrator.broker.local_log import LogConfig, PartitionLog
from orchestrator.broker.log_recovery import REBUILD_SUFFIX, RemoteBounds, open_partition_log, remote_bounds
from orchestrator.broker.partition_dirs import STALE_DIR
from orchestrator.broker.producer_state import ProducedBatch, ProducerStates, snapshot_bytes
from orchestrator.errors import InconsistentTopicId, OffsetOutOfRange, OutOfOrderSequenceNumber, RemoteStorageError
from orchestrator.ids import Uuid
from orchestrator.metadata.records import SegmentState
from orchestrator.protocol.record_batch import build_batch, encode_batch
from remote_storage.rlmm import RemoteSegment

pytestmark = pytest.mark.unit

TID = Uuid.random()
CONFIG = LogConfig(segment_bytes=1000, index_interval_bytes=100)
S = SegmentState


def _seg(start: int, end: int, state: SegmentState = S.COPY_SEGMENT_FINISHED, epochs=((0, None),)) -> RemoteSegment:
    return RemoteSegment(
        topic="orders",
        topic_id=TID,
        partition=0,
        segment_id=Uuid.random(),
        start_offset=start,
        end_offset=end,
        max_timestamp_ms=0,
        size_bytes=100,
        tiered_epoch=0,
        state=state,
        leader_epoch=epochs[0][0],
        leader_epochs=tuple((e, start if o is None else o) for e, o in epochs),
    )


def _clock() -> int:
    return 1_700_000_000_000


@pytest.fixture
def opened():
    logs: list[PartitionLog] = []
    yield logs
    for plog in logs:
        plog.close()


def _open(directory, segments, opened) -> PartitionLog:
    plog = open_partition_log(directory, topic_id=TID, config=CONFIG, clock=_clock, segments=segments)
    opened.append(plog)
    return plog


def test_a_partition_the_rlmm_does_not_know_has_no_bounds():
    assert remote_bounds([]) is None


def test_the_bounds_start_at_the_first_live_segment_and_end_after_every_offset_any_record_names():
    segments = [
        _seg(0, 99, S.DELETE_SEGMENT_FINISHED),  # expired: not readable any more
        _seg(100, 199, epochs=((0, None), (3, 150))),
        _seg(200, 299),
        _seg(300, 349, S.COPY_SEGMENT_STARTED, epochs=((5, None),)),  # a copy that never finished
    ]
    assert remote_bounds(reversed(segments)) == RemoteBounds(
        log_start_offset=100,
        next_offset=350,
        leader_epochs=(EpochEntry(0, 0), EpochEntry(3, 150), EpochEntry(5, 300)),
    )


def test_with_no_live_segment_left_the_log_starts_where_the_rlmm_ends():
    bounds = remote_bounds([_seg(0, 99, S.DELETE_SEGMENT_FINISHED), _seg(100, 149, S.DELETE_SEGMENT_STARTED)])
    assert bounds is not None and bounds.log_start_offset == bounds.next_offset == 150


def test_a_lost_directory_is_rebuilt_after_every_offset_the_rlmm_knows(tmp_path, opened):
    directory = tmp_path / "orders-0"
    plog = _open(directory, [_seg(0, 99, epochs=((2, None),)), _seg(100, 219, epochs=((2, None), (4, 180)))], opened)
    assert (plog.log_start_offset, plog.local_log_start_offset, plog.log_end_offset) == (0, 220, 220)
    assert plog.leader_epochs.entries == (EpochEntry(2, 0), EpochEntry(4, 180))
    info = plog.append([(None, b"after the loss", None)], leader_epoch=6)
    assert info.first_offset == 220
    with pytest.raises(OffsetOutOfRange):
        plog.read(219)  # below the local log: the remote tier serves it, never an empty local read
    assert not list(tmp_path.glob(f"*{REBUILD_SUFFIX}"))
    plog.close()

    reopened = _open(directory, [_seg(0, 99), _seg(100, 219)], opened)  # healthy now: opened as it is
    assert (reopened.log_start_offset, reopened.log_end_offset) == (0, 221)
    assert [r.value for r in reopened.read(220)] == [b"after the loss"]
    assert not (tmp_path / STALE_DIR).exists()


def test_a_directory_behind_the_rlmm_is_moved_aside_not_deleted_and_rebuilt(tmp_path, opened):
    directory = tmp_path / "orders-0"
    old = PartitionLog(directory, topic_id=TID, config=CONFIG, clock=_clock)
    for i in range(30):
        old.append([(None, f"old {i}".encode(), None)])
    old.close()

    plog = _open(directory, [_seg(0, 49), _seg(50, 99)], opened)
    assert (plog.log_start_offset, plog.log_end_offset) == (0, 100)
    [moved] = (tmp_path / STALE_DIR).iterdir()
    assert moved.name.startswith(f"orders-0.{TID}.")
    kept = PartitionLog(moved, topic_id=TID, config=CONFIG, clock=_clock)
    try:
        assert [r.value for r in kept.read(0)][:2] == [b"old 0", b"old 1"]  # the operator can still look at it
    finally:
        kept.close()


def test_a_healthy_log_past_everything_tiered_is_opened_untouched(tmp_path, opened):
    directory = tmp_path / "orders-0"
    first = _open(directory, [], opened)
    for i in range(20):
        first.append([(None, f"r{i}".encode(), None)])
    first.close()
    # tiering copies only closed segments: what the RLMM knows ends before the log does
    again = _open(directory, [_seg(0, 9)], opened)
    assert (again.log_start_offset, again.log_end_offset) == (0, 20)
    assert again.read(0)[0].value == b"r0"
    assert not (tmp_path / STALE_DIR).exists()


def test_a_rebuild_killed_half_way_is_done_again_from_scratch(tmp_path, opened):
    half = tmp_path / f"orders-0{REBUILD_SUFFIX}"
    half.mkdir()
    (half / "offsets.checkpoint").write_text("{torn")
    plog = _open(tmp_path / "orders-0", [_seg(0, 9)], opened)
    assert plog.log_end_offset == 10
    assert not half.exists()


def test_a_directory_of_another_topic_id_is_still_refused_not_rebuilt(tmp_path):
    directory = tmp_path / "orders-0"
    PartitionLog(directory, topic_id=Uuid.random(), config=CONFIG, clock=_clock).close()
    with pytest.raises(InconsistentTopicId):
        open_partition_log(directory, topic_id=TID, config=CONFIG, clock=_clock, segments=[_seg(0, 9)])
    assert not (tmp_path / STALE_DIR).exists()


# --- idempotent producers across the rebuild

PID = 4_000


def _snapshot_of(*batches: tuple[int, int, int, int]) -> bytes:
    """A producer snapshot holding PID's batches, each (first sequence, last sequence, first offset, last offset)."""
    states = ProducerStates()
    for first_seq, last_seq, first, last in batches:
        states = states.with_batch(PID, 0, ProducedBatch(first_seq, last_seq, first, last, 1_000))
    return snapshot_bytes(states)


def _idempotent(sequence: int, values: list[bytes]) -> bytes:
    records = [(None, v, 1_000, ()) for v in values]
    return encode_batch(build_batch(0, records, producer_id=PID, producer_epoch=0, base_sequence=sequence))


def test_a_rebuilt_log_knows_the_producers_the_newest_finished_segment_uploaded(tmp_path, opened):
    asked: list[int] = []
    snapshot = _snapshot_of((0, 9, 200, 209), (10, 19, 210, 219))

    def fetch(seg: RemoteSegment) -> bytes | None:
        asked.append(seg.end_offset)
        return snapshot

    segments = [_seg(0, 99), _seg(100, 219), _seg(220, 260, S.COPY_SEGMENT_STARTED)]
    with capture_logs() as logs:
        plog = open_partition_log(
            tmp_path / "orders-0", topic_id=TID, config=CONFIG, clock=_clock, segments=segments, producer_snapshot=fetch
        )
    opened.append(plog)
    assert asked == [219]  # the newest finished segment's: the started copy's records are lost
    assert [e["producers"] for e in logs if e["event"] == "log.rebuilt_from_remote"] == [1]
    retry = _idempotent(10, [f"r{i}".encode() for i in range(10)])
    assert plog.append_batches([retry]) == (210, 219)  # a duplicate of a batch in S3: not written again
    assert plog.log_end_offset == 261
    with pytest.raises(OutOfOrderSequenceNumber):
        plog.append_batches([_idempotent(25, [b"gap"])])
    assert plog.append_batches([_idempotent(20, [b"next"])]) == (261, 261)
    plog.close()
    reopened = _open(tmp_path / "orders-0", segments, opened)  # healthy now: the state is read back from disk
    assert reopened.append_batches([_idempotent(20, [b"next"])]) == (261, 261)


def test_without_a_snapshot_the_rebuilt_log_knows_no_producer_and_says_why(tmp_path, opened):
    segments = [_seg(0, 99), _seg(100, 219)]
    for fetched, why in [(None, "uploaded without a producer snapshot"), (b"\x00\x01garbage", "is unreadable")]:
        directory = tmp_path / f"orders-{len(opened)}"
        with capture_logs() as logs:
            plog = open_partition_log(
                directory,
                topic_id=TID,
                config=CONFIG,
                clock=_clock,
                segments=segments,
                producer_snapshot=lambda s, fetched=fetched: fetched,
            )
        opened.append(plog)
        [said] = [e["producers"] for e in logs if e["event"] == "log.rebuilt_from_remote"]
        assert why in said
        # the producer is unknown: its retry is taken as new records (the state lost with the disk)
        assert plog.append_batches([_idempotent(10, [b"x"])]) == (220, 220)


def test_a_snapshot_that_cannot_be_fetched_fails_the_open_and_moves_nothing(tmp_path, opened):
    directory = tmp_path / "orders-0"
    _open(directory, [], opened).append([(None, b"only local", None)])
    opened.pop().close()

    def unreachable(seg: RemoteSegment) -> bytes | None:
        raise RemoteStorageError("S3 did not answer")

    with pytest.raises(RemoteStorageError):
        open_partition_log(
            directory, topic_id=TID, config=CONFIG, clock=_clock, segments=[_seg(0, 99)], producer_snapshot=unreachable
        )
    assert not (tmp_path / STALE_DIR).exists() and (directory / f"{0:020d}.log").exists()
