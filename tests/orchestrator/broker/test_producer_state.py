"""Idempotent producers: the partition's verdict on each batch (pure), deduplication in the log across a restart,
and producer ids that are never handed out twice."""

from __future__ import annotations

import json
import struct

import pytest
from crc32c import crc32c
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.broker import local_log
from orchestrator.broker.local_log import LogConfig, PartitionLog
from orchestrator.broker.log_segment import LogSegment
from orchestrator.broker.producer_ids import BLOCK, ProducerIdAllocator
from orchestrator.broker.producer_state import (
    MAX_SEQUENCE,
    ProducedBatch,
    ProducerStates,
    SnapshotEntry,
    SnapshotFormatError,
    Verdict,
    last_sequence_of,
    parse_snapshot,
    snapshot_bytes,
)
from orchestrator.errors import InvalidArgument, InvalidProducerEpoch, OutOfOrderSequenceNumber
from orchestrator.ids import Uuid
from orchestrator.protocol.record_batch import NO_PRODUCER_ID, build_batch, encode_batch

pytestmark = pytest.mark.unit

PID = 7 << 40


def _after(states: ProducerStates, epoch: int, first: int, count: int, offset: int) -> ProducerStates:
    batch = ProducedBatch(first, last_sequence_of(first, count), offset, offset + count - 1)
    return states.with_batch(PID, epoch, batch)


def test_an_unknown_producer_may_start_anywhere_and_then_must_follow_on():
    states = ProducerStates()
    assert states.judge(PID, 0, 42, 3).verdict is Verdict.APPEND  # state lost with its segments: accepted
    states = _after(states, 0, 42, 3, offset=100)
    assert states.judge(PID, 0, 45, 1).verdict is Verdict.APPEND
    with pytest.raises(OutOfOrderSequenceNumber, match="sequence 46 after 44"):
        states.judge(PID, 0, 46, 1)
    with pytest.raises(OutOfOrderSequenceNumber):
        states.judge(PID, 0, 40, 1)


def test_a_retry_of_any_of_the_last_five_batches_is_a_duplicate_with_its_first_offsets():
    states = ProducerStates()
    for i in range(7):
        states = _after(states, 0, i * 2, 2, offset=10 * i)
    for i in range(2, 7):  # the last five
        judged = states.judge(PID, 0, i * 2, 2)
        assert judged.verdict is Verdict.DUPLICATE and judged.duplicate_of is not None
        assert (judged.duplicate_of.first_offset, judged.duplicate_of.last_offset) == (10 * i, 10 * i + 1)
    with pytest.raises(OutOfOrderSequenceNumber):  # older than the cache: no longer recognized
        states.judge(PID, 0, 0, 2)


def test_epochs_fence_zombies_and_a_new_epoch_starts_at_zero():
    states = _after(ProducerStates(), 3, 0, 5, offset=0)
    with pytest.raises(InvalidProducerEpoch, match=r"epoch 2.*epoch 3"):
        states.judge(PID, 2, 5, 1)
    with pytest.raises(OutOfOrderSequenceNumber, match="must start at sequence 0"):
        states.judge(PID, 4, 5, 1)
    assert states.judge(PID, 4, 0, 1).verdict is Verdict.APPEND
    bumped = _after(states, 4, 0, 1, offset=5)
    assert bumped.entries[PID].epoch == 4 and len(bumped.entries[PID].batches) == 1


def test_sequences_wrap_from_the_largest_int32_to_zero():
    states = _after(ProducerStates(), 0, MAX_SEQUENCE - 1, 2, offset=0)
    assert states.entries[PID].last_sequence == MAX_SEQUENCE
    assert states.judge(PID, 0, 0, 1).verdict is Verdict.APPEND
    assert last_sequence_of(MAX_SEQUENCE, 3) == 1


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 5), st.booleans()), min_size=1, max_size=30))
def test_a_producer_that_retries_at_random_gets_each_batch_written_once_in_order(sends):
    """A model run: a producer sends batches in order and retries some (the retry arrives right after); the
    table accepts each new batch once and answers every retry with the offsets the batch got."""
    states, sequence, offset = ProducerStates(), 0, 0
    written: list[tuple[int, int]] = []
    for count, retried in sends:
        assert states.judge(PID, 0, sequence, count).verdict is Verdict.APPEND
        states = _after(states, 0, sequence, count, offset)
        written.append((offset, offset + count - 1))
        if retried:
            judged = states.judge(PID, 0, sequence, count)
            assert judged.verdict is Verdict.DUPLICATE and judged.duplicate_of is not None
            assert (judged.duplicate_of.first_offset, judged.duplicate_of.last_offset) == written[-1]
        sequence, offset = sequence + count, offset + count
    assert sum(b - a + 1 for a, b in written) == offset


def _idempotent(values: list[bytes], *, epoch: int, sequence: int) -> bytes:
    records = [(None, v, 1_000, ()) for v in values]
    return encode_batch(build_batch(0, records, producer_id=PID, producer_epoch=epoch, base_sequence=sequence))


def test_the_log_writes_a_retried_batch_once_and_still_knows_it_after_a_restart(tmp_path):
    def open_log() -> PartitionLog:
        return PartitionLog(tmp_path / "t-0", topic_id=TID, config=LogConfig(segment_bytes=200), clock=lambda: 1_000)

    plog = open_log()
    assert plog.append_batches([_idempotent([b"a", b"b"], epoch=0, sequence=0)]) == (0, 1)
    assert plog.append_batches([_idempotent([b"c"], epoch=0, sequence=2)]) == (2, 2)
    assert plog.append_batches([_idempotent([b"a", b"b"], epoch=0, sequence=0)]) == (0, 1)  # a retry
    assert plog.log_end_offset == 3
    plog.close()

    reopened = open_log()  # the table is rebuilt from the segments' batch headers
    assert reopened.append_batches([_idempotent([b"c"], epoch=0, sequence=2)]) == (2, 2)
    with pytest.raises(OutOfOrderSequenceNumber):
        reopened.append_batches([_idempotent([b"e"], epoch=0, sequence=9)])
    assert reopened.append_batches([_idempotent([b"d"], epoch=1, sequence=0)]) == (3, 3)  # a new epoch, from 0
    with pytest.raises(InvalidProducerEpoch):
        reopened.append_batches([_idempotent([b"z"], epoch=0, sequence=3)])  # the old epoch is fenced
    assert [r.value for r in reopened.read(0)] == [b"a", b"b", b"c", b"d"]
    reopened.close()


TID = Uuid.random()


def test_producer_ids_are_unique_across_restarts_and_brokers(tmp_path):
    path = tmp_path / "producer-ids.json"
    first = ProducerIdAllocator(path, 1, clock_s=lambda: 1_000)
    ids = [first.next_id() for _ in range(BLOCK + 5)]  # two blocks
    again = ProducerIdAllocator(path, 1, clock_s=lambda: 1_000)  # a restart: the rest of the block is skipped
    later = [again.next_id() for _ in range(3)]
    other = ProducerIdAllocator(tmp_path / "other.json", 2, clock_s=lambda: 1_000)
    assert len(set(ids + later + [other.next_id()])) == len(ids) + 4
    assert min(later) > max(ids)
    assert json.loads(path.read_text())["next_block"] > max(later) & ((1 << 40) - 1)


def test_a_lost_producer_id_file_starts_from_the_clock_not_from_zero(tmp_path):
    path = tmp_path / "producer-ids.json"
    before = ProducerIdAllocator(path, 3, clock_s=lambda: 1_000).next_id()
    path.unlink()  # the data directory was replaced, a second later
    after = ProducerIdAllocator(path, 3, clock_s=lambda: 1_001).next_id()
    assert after > before + BLOCK - 1  # past the whole block the lost file had reserved


def test_a_broker_id_without_a_producer_id_range_is_refused(tmp_path):
    with pytest.raises(InvalidArgument, match="outside"):
        ProducerIdAllocator(tmp_path / "x.json", 1 << 23)


def _kafka_snapshot(entries: list[tuple[int, int, int, int, int, int]]) -> bytes:
    """Kafka's producer snapshot, built here from its schema alone (ProducerStateManager, version 1): int16 version,
    uint32 CRC-32C of the rest, then an int32-counted array of (producerId int64, epoch int16, lastSequence int32,
    lastOffset int64, offsetDelta int32, timestamp int64, coordinatorEpoch int32, currentTxnFirstOffset int64)."""
    body = struct.pack(">i", len(entries))
    for pid, epoch, last_seq, last_offset, delta, timestamp in entries:
        body += struct.pack(">q", pid) + struct.pack(">h", epoch) + struct.pack(">i", last_seq)
        body += struct.pack(">q", last_offset) + struct.pack(">i", delta) + struct.pack(">q", timestamp)
        body += struct.pack(">i", -1) + struct.pack(">q", -1)  # no transaction coordinator, no open transaction
    return struct.pack(">h", 1) + struct.pack(">I", crc32c(body)) + body


def test_a_snapshot_is_kafkas_file_with_each_producers_epoch_and_last_batch():
    states = ProducerStates()
    states = states.with_batch(PID + 1, 2, ProducedBatch(0, 4, 10, 14, 1_700))
    states = states.with_batch(PID, 0, ProducedBatch(0, 1, 0, 1, 1_000))
    states = states.with_batch(PID, 0, ProducedBatch(2, 2, 5, 5, 1_500))
    states = states.with_batch(NO_PRODUCER_ID, -1, ProducedBatch(-1, -1, 6, 9, 1_600))  # not idempotent: not kept
    expected = _kafka_snapshot([(PID, 0, 2, 5, 0, 1_500), (PID + 1, 2, 4, 14, 4, 1_700)])
    assert snapshot_bytes(states) == expected
    assert parse_snapshot(expected) == [
        SnapshotEntry(PID, 0, 2, 5, 0, 1_500),
        SnapshotEntry(PID + 1, 2, 4, 14, 4, 1_700),
    ]
    assert snapshot_bytes(ProducerStates()) == _kafka_snapshot([])


def _with_count(snapshot: bytes, count: int) -> bytes:
    """The snapshot with another entry count, its CRC made right again."""
    body = struct.pack(">i", count) + snapshot[10:]
    return snapshot[:2] + struct.pack(">I", crc32c(body)) + body


@pytest.mark.parametrize(
    ("damage", "why"),
    [
        (lambda b: _kafka_snapshot([(PID, 0, 0, 0, 0, 1)])[:-1] + b"", "CRC"),
        (
            lambda b: b[:2] + struct.pack(">I", crc32c(b"\x00\x00\x00\x02" + b[10:])) + b"\x00\x00\x00\x02" + b[10:],
            "do not fill",
        ),
        (lambda b: b[:2] + bytes([b[2] ^ 1]) + b[3:], "CRC"),
        (lambda b: b"\x00\x02" + b[2:], "version"),
        (lambda b: b[:4], "at least"),
    ],
)
def test_a_snapshot_kafka_would_refuse_is_refused(damage, why):
    states = ProducerStates().with_batch(PID, 0, ProducedBatch(0, 0, 0, 0, 1))
    with pytest.raises(SnapshotFormatError, match=why):
        parse_snapshot(damage(snapshot_bytes(states)))


def test_a_producer_whose_batches_left_with_deleted_segments_is_still_known_after_a_restart(tmp_path):
    """Local segments deleted (retention after tiering): the snapshot at the new local log start keeps what they
    knew, so after a restart a retry of the producer's last batch is still a duplicate and a gap still refused."""

    def open_log() -> PartitionLog:
        return PartitionLog(tmp_path / "t-0", topic_id=TID, config=LogConfig(segment_bytes=200), clock=lambda: 1_000)

    plog = open_log()
    assert plog.append_batches([_idempotent([b"a", b"b"], epoch=0, sequence=0)]) == (0, 1)
    plog.roll()
    assert plog.append_batches([_other_producer([b"x"])]) == (2, 2)  # another producer's batch
    plog.roll()
    plog.advance_log_start_offset(3)  # both segments holding the producer's batches are deleted
    assert [s.base_offset for s in plog.segments()] == [3]
    assert sorted(p.name for p in (tmp_path / "t-0").glob("*.snapshot")) == [f"{3:020d}.snapshot"]
    plog.close()

    reopened = open_log()
    assert reopened.append_batches([_idempotent([b"a", b"b"], epoch=0, sequence=0)]) == (0, 1)  # a retry
    with pytest.raises(OutOfOrderSequenceNumber):
        reopened.append_batches([_idempotent([b"e"], epoch=0, sequence=9)])
    assert reopened.append_batches([_idempotent([b"c"], epoch=0, sequence=2)]) == (3, 3)
    assert [r.value for r in reopened.read(3)] == [b"c"]
    reopened.close()


def test_a_roll_does_not_sync_its_snapshot_and_the_one_left_alone_is_synced_before_any_segment_goes(
    tmp_path, monkeypatch
):
    """A roll holds up every append of the broker, so its producer snapshot is written unsynced (one a machine crash
    tore is rebuilt from the segments on open); the snapshot at the new local log start holds what deleted segments
    knew and nothing can rebuild it, so it is synced before the first of them is deleted."""
    events: list[tuple[str, str]] = []
    sync = local_log._fsync
    monkeypatch.setattr(local_log, "_fsync", lambda path: (events.append(("sync", path.name)), sync(path))[1])
    delete = LogSegment.delete_files

    def deleting(seg: LogSegment, **kwargs: bool) -> None:
        events.append(("delete", seg.log_path.name))
        delete(seg, **kwargs)

    monkeypatch.setattr(LogSegment, "delete_files", deleting)
    plog = PartitionLog(tmp_path / "t-0", topic_id=TID, config=LogConfig(segment_bytes=200), clock=lambda: 1_000)
    plog.append_batches([_idempotent([b"a", b"b"], epoch=0, sequence=0)])
    plog.roll()
    plog.append_batches([_other_producer([b"x"])])
    plog.roll()
    assert not [e for e in events if ".snapshot" in e[1]]  # nor its ".snapshot.tmp" before the rename
    events.clear()
    plog.advance_log_start_offset(3)
    assert events[:3] == [
        ("sync", f"{3:020d}.snapshot"),
        ("delete", f"{0:020d}.log"),
        ("delete", f"{2:020d}.log"),
    ]
    plog.close()


def _other_producer(values: list[bytes]) -> bytes:
    records = [(None, v, 1_000, ()) for v in values]
    return encode_batch(build_batch(0, records, producer_id=PID + 1, producer_epoch=0, base_sequence=0))
