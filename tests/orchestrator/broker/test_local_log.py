import sys
import threading

import pytest

from orchestrator.broker.leader_epochs import EpochEntry
from orchestrator.broker.local_log import LogConfig, PartitionLog
from orchestrator.broker.producer_state import SnapshotEntry, parse_snapshot
from orchestrator.errors import InconsistentTopicId, OffsetOutOfRange
from orchestrator.ids import Uuid
from orchestrator.protocol.record_batch import (
    Compression,
    batch_header,
    build_batch,
    decode_batches,
    encode_batch,
    frames,
)

pytestmark = pytest.mark.unit


class Clock:
    def __init__(self, now: int = 1_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


_OPEN: list[PartitionLog] = []


@pytest.fixture(autouse=True)
def _close_logs():
    yield
    while _OPEN:
        _OPEN.pop().close()


def _log(tmp_path, topic_id=None, clock=None, **cfg):
    config = LogConfig(**{"segment_bytes": 1000, "index_interval_bytes": 100, **cfg})
    log = PartitionLog(tmp_path / "orders-0", topic_id=topic_id or TID, config=config, clock=clock or Clock())
    _OPEN.append(log)
    return log


def _each(log, values, key=None):
    """One batch per record: what a producer sending small batches writes."""
    return [log.append([(key, value, None)]) for value in values]


TID = Uuid.random()


def test_appends_get_dense_offsets_and_roll_by_size(tmp_path):
    log = _log(tmp_path)
    appended = _each(log, [b"v%03d" % i for i in range(100)])
    assert [a.first_offset for a in appended] == list(range(100)) and log.log_end_offset == 100
    segs = log.segments()
    assert len(segs) > 3
    assert all(s.size_bytes <= 1000 for s in segs)
    assert [s.base_offset for s in segs[1:]] == [s.end_offset + 1 for s in segs[:-1]]
    assert [r.value for r in log.read(0, max_bytes=10**9)] == [b"v%03d" % i for i in range(100)]


def test_a_batch_keeps_its_bytes_and_gets_the_log_end_offset_and_leader_epoch(tmp_path):
    log = _log(tmp_path, segment_bytes=10**6)
    log.append([(None, b"first", 5)])
    raw = encode_batch(
        build_batch(0, [(b"k", b"a", 10, (("h", b"1"),)), (None, b"b", 12, ())], compression=Compression.GZIP)
    )
    first, last = log.append_batches([raw], leader_epoch=7)
    assert (first, last) == (1, 2)
    [_, stored] = [bytes(b) for _, b in frames(log.segments()[-1].log_path.read_bytes())]
    assert stored[8:12] == raw[8:12] and stored[16:] == raw[16:]  # only the base offset and leader epoch differ
    header = batch_header(memoryview(stored))
    assert (header.base_offset, header.partition_leader_epoch) == (1, 7)
    [batch] = decode_batches(stored)  # the CRC still holds
    assert batch.compression == Compression.GZIP
    assert [(r.offset, r.value, r.timestamp_ms) for r in log.read(2)] == [(2, b"b", 12)]


def test_reads_start_at_any_offset_through_the_index_and_return_whole_batches(tmp_path):
    log = _log(tmp_path, segment_bytes=10**6)
    for i in range(0, 300, 3):  # batches of three records
        log.append([(b"k", b"x" * ((i + j) % 7), None) for j in range(3)])
    for start in (0, 1, 57, 150, 298, 299):
        data = log.read_batches(start, max_bytes=200)
        first = batch_header(memoryview(data))
        assert first.base_offset <= start <= first.last_offset  # the batch holding the offset comes first
        recs = log.read(start, max_bytes=200)
        assert recs[0].offset == start and recs[0].key == b"k"
        assert [r.offset for r in recs] == list(range(start, start + len(recs)))
    assert log.read(300) == []
    with pytest.raises(OffsetOutOfRange):
        log.read(301)


def test_a_read_returns_at_least_one_whole_batch_however_small_max_bytes_is(tmp_path):
    log = _log(tmp_path, segment_bytes=10**6)
    log.append([(None, b"x" * 5000, None)])
    log.append([(None, b"y", None)])
    data = log.read_batches(0, max_bytes=1)
    assert len(list(frames(data))) == 1 and len(data) > 5000


def test_roll_by_time(tmp_path):
    clock = Clock()
    log = _log(tmp_path, clock=clock, segment_ms=60_000, segment_bytes=10**6)
    log.append([(None, b"a", None)])
    clock.now += 59_999
    assert not log.maybe_roll_by_time()
    clock.now += 1
    assert log.maybe_roll_by_time()
    assert len(log.closed_segments()) == 1


def test_a_batch_larger_than_a_segment_goes_whole_into_a_segment_of_its_own(tmp_path):
    log = _log(tmp_path, segment_bytes=1000)
    log.append([(None, b"small", None)])
    log.append([(None, b"z" * 3000, None)])
    log.append([(None, b"after", None)])
    sizes = [s.size_bytes for s in log.segments()]
    assert len(sizes) == 3 and sizes[1] > 3000
    assert [r.value[:5] for r in log.read(0, max_bytes=10**6)] == [b"small", b"zzzzz", b"after"]
    assert log.read(1)[0].value == b"z" * 3000


def test_reopen_keeps_everything_and_truncates_a_torn_tail(tmp_path):
    log = _log(tmp_path)
    _each(log, [b"r%d" % i for i in range(50)])
    active = log.segments()[-1].log_path
    good_size = active.stat().st_size
    with active.open("ab") as f:  # a torn write: part of a batch
        f.write(encode_batch(build_batch(50, [(None, b"torn", 1, ())]))[:30])
    reopened = _log(tmp_path)
    assert reopened.log_end_offset == 50
    assert active.stat().st_size == good_size
    assert [r.value for r in reopened.read(0, max_bytes=10**9)][-1] == b"r49"
    reopened.append([(None, b"next", None)])
    assert reopened.read(50)[0].value == b"next"


def test_a_flipped_byte_in_the_active_segment_truncates_from_that_batch(tmp_path):
    log = _log(tmp_path, segment_bytes=10**6)
    _each(log, [b"value-%d" % i for i in range(10)])
    path = log.segments()[-1].log_path
    data = bytearray(path.read_bytes())
    data[-3] ^= 0xFF  # inside the last batch: its CRC-32C no longer matches
    path.write_bytes(bytes(data))
    assert _log(tmp_path, segment_bytes=10**6).log_end_offset == 9


def test_a_batch_whose_offsets_do_not_follow_on_truncates_the_active_segment(tmp_path):
    log = _log(tmp_path, segment_bytes=10**6)
    _each(log, [b"a", b"b"])
    path = log.segments()[-1].log_path
    with path.open("ab") as f:
        f.write(encode_batch(build_batch(7, [(None, b"out of sequence", 1, ())])))
    assert _log(tmp_path, segment_bytes=10**6).log_end_offset == 2


def test_a_directory_of_another_topic_id_is_stale_and_refused(tmp_path):
    _log(tmp_path).append([(None, b"x", None)])
    with pytest.raises(InconsistentTopicId, match="stale"):
        _log(tmp_path, topic_id=Uuid.random())


def test_timestamp_lookups_find_the_first_record_at_or_after_and_the_largest(tmp_path):
    log = _log(tmp_path, segment_bytes=300)
    stamps = [100, 200, 150, 400, 400, 300, 500, 100]
    for i in range(0, len(stamps), 2):
        log.append([(None, b"%d" % i, stamps[i]), (None, b"%d" % (i + 1), stamps[i + 1])])
    assert len(log.segments()) > 1
    assert log.offset_for_timestamp(0) == (0, 100)
    assert log.offset_for_timestamp(150) == (1, 200)
    assert log.offset_for_timestamp(250) == (3, 400)
    assert log.offset_for_timestamp(450) == (6, 500)
    assert log.offset_for_timestamp(501) is None
    assert log.max_timestamp() == (6, 500)


def test_start_offsets_move_forward_and_survive_a_restart(tmp_path):
    log = _log(tmp_path)
    _each(log, [b"%d" % i for i in range(200)])
    segs = log.closed_segments()
    dropped = log.delete_local_segments_before(segs[2].base_offset)
    assert len(dropped) == 2
    assert log.local_log_start_offset == segs[2].base_offset and log.log_start_offset == 0
    with pytest.raises(OffsetOutOfRange):
        log.read(0)
    log.advance_log_start_offset(log.local_log_start_offset)
    log.advance_log_start_offset(3)  # never backwards
    reopened = _log(tmp_path)
    assert reopened.log_start_offset == segs[2].base_offset == reopened.local_log_start_offset
    assert reopened.read(reopened.local_log_start_offset)[0].offset == segs[2].base_offset


def test_a_start_offset_moved_on_one_thread_while_another_applies_retention_is_checkpointed_without_a_clash(
    tmp_path,
):
    """A delete-policy job moves the log start offset on its own thread while the tiering pass applies retention to
    the same log: both checkpoint the start offsets. Neither may find the other's checkpoint file gone, and the
    checkpoint on disk ends at the last offset moved to."""
    log = _log(tmp_path)
    _each(log, [b"%d" % i for i in range(600)])
    last = log.closed_segments()[-1].end_offset
    moved = threading.Event()
    errors: list[BaseException] = []

    def retention() -> None:
        try:
            while not moved.is_set():
                log.delete_local_segments_before(0)  # drops nothing, checkpoints offsets moved but not yet saved
        except BaseException as exc:  # handed to the test thread
            errors.append(exc)

    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as the interpreter can: the clash needs no luck
    other = threading.Thread(target=retention)
    try:
        other.start()
        for offset in range(1, last + 1):
            log.advance_log_start_offset(offset)
    finally:
        moved.set()
        other.join(timeout=60)
        sys.setswitchinterval(previous)
    assert not other.is_alive()
    assert errors == []
    reopened = _log(tmp_path)
    assert reopened.log_start_offset == last


def _idempotent(value: bytes, *, producer_id: int, sequence: int, ts: int) -> bytes:
    batch = build_batch(0, [(None, value, ts, ())], producer_id=producer_id, producer_epoch=0, base_sequence=sequence)
    return encode_batch(batch)


def test_closing_a_segment_writes_the_producer_snapshot_at_its_end_kept_as_the_log_start_snapshot_when_deleted(
    tmp_path,
):
    log = _log(tmp_path, segment_bytes=10**6)
    log.append_batches([_idempotent(b"a", producer_id=5, sequence=0, ts=100)])
    log.append_batches([_idempotent(b"b", producer_id=5, sequence=1, ts=200)])
    log.append([(None, b"plain", 300)])
    log.roll()
    [closed] = log.closed_segments()
    assert closed.producer_snapshot_path.name == "00000000000000000003.snapshot"  # where the next segment starts
    assert parse_snapshot(closed.producer_snapshot_path.read_bytes()) == [SnapshotEntry(5, 0, 1, 1, 0, 200)]
    log.append([(None, b"more", 400)])
    log.roll()
    log.delete_local_segments_before(3)
    assert not closed.log_path.exists() and not closed.time_index_path.exists()
    # the snapshot at the new local log start stays (the producers' state the deleted segment held), until the
    # local log start moves past it
    assert closed.producer_snapshot_path.exists()
    log.append([(None, b"even more", 500)])
    log.roll()
    log.delete_local_segments_before(5)
    assert not closed.producer_snapshot_path.exists()
    assert [p.name for p in (tmp_path / "orders-0").glob("*.snapshot")] == [f"{5:020d}.snapshot"]


def test_a_missing_or_corrupt_snapshot_is_rebuilt_on_open_from_the_batches_up_to_the_segments_end(tmp_path):
    log = _log(tmp_path, segment_bytes=10**6)
    for i in range(3):
        log.append_batches([_idempotent(b"%d" % i, producer_id=9, sequence=i, ts=10 * i)])
        log.roll()
    snapshots = [s.producer_snapshot_path for s in log.closed_segments()]
    expected = [p.read_bytes() for p in snapshots]
    log.close()
    snapshots[0].unlink()  # killed before it was written, or a directory written before snapshots were kept
    snapshots[1].write_bytes(b"\x00\x01garbage")
    _log(tmp_path, segment_bytes=10**6)
    assert [p.read_bytes() for p in snapshots] == expected


def test_the_leader_epoch_cache_is_checkpointed_as_epochs_change_and_survives_a_restart(tmp_path):
    log = _log(tmp_path, segment_bytes=10**6)
    log.append([(None, b"a", 1)], leader_epoch=0)
    log.append([(None, b"b", 2)], leader_epoch=0)
    log.append([(None, b"c", 3)], leader_epoch=4)
    checkpoint = tmp_path / "orders-0" / "leader-epoch-checkpoint"
    assert checkpoint.read_text() == "0\n2\n0 0\n4 2\n"
    log.close()
    reopened = _log(tmp_path, segment_bytes=10**6)
    reopened.append([(None, b"d", 4)], leader_epoch=4)
    assert reopened.leader_epoch_checkpoint(2) == b"0\n2\n0 0\n4 2\n"
    assert reopened.leader_epoch_checkpoint(1) == b"0\n1\n0 0\n"  # a segment ending at 1 knows nothing of epoch 4
    assert reopened.segment_leader_epochs(1, 3) == (EpochEntry(0, 1), EpochEntry(4, 2))


def test_epochs_are_rebuilt_from_the_batches_when_the_checkpoint_is_lost_and_cut_with_a_torn_tail(tmp_path):
    log = _log(tmp_path, segment_bytes=10**6)
    for epoch, value in ((1, b"a"), (1, b"b"), (2, b"c"), (5, b"d")):
        log.append([(None, value, 1)], leader_epoch=epoch)
    active = log.segments()[-1].log_path
    log.close()
    checkpoint = tmp_path / "orders-0" / "leader-epoch-checkpoint"
    checkpoint.unlink()
    with active.open("r+b") as f:
        f.truncate(active.stat().st_size - 3)  # the last batch (epoch 5) torn
    reopened = _log(tmp_path, segment_bytes=10**6)
    assert reopened.log_end_offset == 3
    assert checkpoint.read_text() == "0\n2\n1 0\n2 2\n"


def test_moving_the_log_start_offset_truncates_the_epochs_from_the_start(tmp_path):
    log = _log(tmp_path, segment_bytes=10**6)
    for epoch in (0, 0, 3, 3):
        log.append([(None, b"v", 1)], leader_epoch=epoch)
    log.roll()
    log.advance_log_start_offset(3)
    assert (tmp_path / "orders-0" / "leader-epoch-checkpoint").read_text() == "0\n1\n3 3\n"


def test_a_directory_with_only_logs_and_offset_indexes_opens_and_gets_every_other_file(tmp_path):
    log = _log(tmp_path, segment_bytes=300)
    for i in range(20):
        log.append([(None, b"%02d" % i * 20, 1_000 + i)], leader_epoch=0)
    directory = log.directory
    kept = {p.name: p.read_bytes() for p in directory.iterdir() if p.suffix in (".timeindex", ".snapshot")}
    kept["leader-epoch-checkpoint"] = (directory / "leader-epoch-checkpoint").read_bytes()
    log.close()
    for name in kept:  # what the landed code wrote: .log, .index and the checkpoints of start offsets only
        (directory / name).unlink()
    reopened = _log(tmp_path, segment_bytes=300)
    assert {name: (directory / name).read_bytes() for name in kept} == kept
    assert [r.value for r in reopened.read(0, max_bytes=10**9)] == [b"%02d" % i * 20 for i in range(20)]


def test_the_tiering_passes_size_reads_agree_with_the_segments_and_snapshot_paths_follow_the_segment_end(tmp_path):
    """``bytes_above`` and ``active_segment_bytes`` are what a tiering pass used to sum from ``segments()``; a
    segment's producer snapshot path, built once per segment end, still names the end it has now (after appends
    and after a truncation moved it back)."""
    log = _log(tmp_path)
    _each(log, [b"v%03d" % i for i in range(60)])

    def check() -> None:
        segs = log.segments()
        assert log.active_segment_bytes() == segs[-1].size_bytes
        for offset in range(-1, log.log_end_offset + 1):
            assert log.bytes_above(offset) == sum(s.size_bytes for s in segs if s.end_offset > offset), offset
        for s in segs:
            assert s.producer_snapshot_path == log.directory / f"{s.end_offset + 1:020d}.snapshot"

    check()
    _each(log, [b"w%03d" % i for i in range(5)])  # the active segment's end moves on
    check()
    assert log.truncate_to(log.log_end_offset - 7)
    check()
