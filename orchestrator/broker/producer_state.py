"""Idempotent producers (KIP-98): what a partition remembers of each producer, and the verdict on a new batch. Pure.

A producer that InitProducerId gave an id stamps every batch with (producer id, epoch, base sequence); a retry of a
batch carries the same numbers. The partition keeps, per producer id, its epoch and its last
:data:`CACHED_BATCHES` batches (sequence range and offsets), and judges each new batch as Kafka's broker does:

* an epoch below the producer's is a zombie: INVALID_PRODUCER_EPOCH (47);
* a batch equal to a cached one (same epoch, first and last sequence) is a retry of a batch already written: it is
  not appended again, and the producer is answered with the offsets it got the first time (DUPLICATE);
* a new epoch must start at sequence 0 (unless the producer is unknown), the same epoch must go on from the last
  sequence plus one (wrapping at 2^31 - 1 to 0); anything else is OUT_OF_ORDER_SEQUENCE_NUMBER (45);
* a producer the partition does not know (its batches left with the segments that held them, or never seen) may
  start at any sequence, as Kafka accepts since KIP-360.

The table is rebuilt when the log is opened: from the snapshot kept at the local log start offset (the table as of
the end of the last segment deleted, :func:`states_from_snapshot`), then from the batch headers of the local
segments. So it survives a restart after local segments were deleted (retention, tiering), as Kafka's does; a
producer is unknown again only when no snapshot holds it (a log whose first segments were lost with their
snapshots).
Values are immutable; :meth:`ProducerStates.with_batch` returns a new table.

Snapshots (:func:`snapshot_bytes`): the table as of a segment's end, in Kafka's ``<offset>.snapshot`` format
(``storage/.../internals/log/ProducerStateManager.java``, version 1), which a RemoteStorageManager uploads with the
segment. Kafka's file holds, per producer, its epoch and its last batch (last sequence, last offset, offset delta,
max timestamp), the epoch of the last transaction coordinator and the first offset of an open transaction; we
have no transactions, so those two are always -1, and the last batch is the last one this table caches. So the
snapshot is derived honestly from what this table keeps: the same facts Kafka keeps for an idempotent producer.
Layout, big-endian: ``version:int16 (1) | crc:uint32 | count:int32 | count x (producerId:int64 | epoch:int16 |
lastSequence:int32 | lastOffset:int64 | offsetDelta:int32 | timestamp:int64 | coordinatorEpoch:int32 |
currentTxnFirstOffset:int64)``, the CRC-32C of everything after the CRC; producers by id (Kafka writes a hash map's
order, which no reader relies on).
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import Enum
from types import MappingProxyType

from crc32c import crc32c

from orchestrator.errors import InvalidProducerEpoch, OutOfOrderSequenceNumber
from orchestrator.protocol.record_batch import NO_PRODUCER_ID

CACHED_BATCHES = 5  # as Kafka: a producer has at most five batches in flight per partition
MAX_SEQUENCE = 2**31 - 1
SNAPSHOT_VERSION = 1  # Kafka's ProducerStateManager.PRODUCER_SNAPSHOT_VERSION
NO_COORDINATOR_EPOCH = -1
NO_TXN_FIRST_OFFSET = -1
_SNAPSHOT_HEAD = struct.Struct(">hI")  # version, crc
_SNAPSHOT_COUNT = struct.Struct(">i")
_SNAPSHOT_ENTRY = struct.Struct(">qhiqiqiq")


@dataclass(frozen=True, slots=True)
class ProducedBatch:
    first_sequence: int
    last_sequence: int
    first_offset: int
    last_offset: int
    max_timestamp_ms: int = -1


@dataclass(frozen=True, slots=True)
class ProducerEntry:
    epoch: int
    batches: tuple[ProducedBatch, ...] = ()

    @property
    def last_sequence(self) -> int:
        return self.batches[-1].last_sequence if self.batches else -1


class Verdict(Enum):
    APPEND = "append"
    DUPLICATE = "duplicate"


@dataclass(frozen=True, slots=True)
class Judgement:
    verdict: Verdict
    duplicate_of: ProducedBatch | None = None


def last_sequence_of(first_sequence: int, record_count: int) -> int:
    """The sequence of a batch's last record: sequences wrap from 2^31 - 1 to 0."""
    return (first_sequence + record_count - 1) % (MAX_SEQUENCE + 1)


def _in_sequence(last: int, first: int) -> bool:
    return first == (0 if last == MAX_SEQUENCE else last + 1)


@dataclass(frozen=True, slots=True)
class ProducerStates:
    """Every producer a partition knows, by producer id."""

    entries: Mapping[int, ProducerEntry] = field(default_factory=lambda: MappingProxyType({}))

    def judge(self, producer_id: int, epoch: int, first_sequence: int, record_count: int) -> Judgement:
        """The verdict on a batch of ``record_count`` records from ``producer_id`` (module docstring). Raises
        INVALID_PRODUCER_EPOCH or OUT_OF_ORDER_SEQUENCE_NUMBER."""
        if producer_id == NO_PRODUCER_ID:
            return Judgement(Verdict.APPEND)
        entry = self.entries.get(producer_id)
        if entry is None:
            return Judgement(Verdict.APPEND)
        if epoch < entry.epoch:
            raise InvalidProducerEpoch(
                f"producer {producer_id} wrote with epoch {epoch}, but epoch {entry.epoch} has taken over: a zombie"
            )
        last_sequence = last_sequence_of(first_sequence, record_count)
        if epoch == entry.epoch:
            for cached in entry.batches:
                if (cached.first_sequence, cached.last_sequence) == (first_sequence, last_sequence):
                    return Judgement(Verdict.DUPLICATE, cached)
            if entry.batches and not _in_sequence(entry.last_sequence, first_sequence):
                raise OutOfOrderSequenceNumber(
                    f"producer {producer_id} epoch {epoch}: sequence {first_sequence} after {entry.last_sequence}"
                )
        elif first_sequence != 0:
            raise OutOfOrderSequenceNumber(
                f"producer {producer_id}: its new epoch {epoch} must start at sequence 0, not {first_sequence}"
            )
        return Judgement(Verdict.APPEND)

    def with_batch(self, producer_id: int, epoch: int, batch: ProducedBatch) -> ProducerStates:
        """The table after ``batch`` was appended (a non-idempotent batch changes nothing)."""
        if producer_id == NO_PRODUCER_ID:
            return self
        entry = self.entries.get(producer_id)
        if entry is None or entry.epoch != epoch:
            entry = ProducerEntry(epoch)
        entry = replace(entry, batches=(*entry.batches, batch)[-CACHED_BATCHES:])
        return ProducerStates(MappingProxyType({**self.entries, producer_id: entry}))


@dataclass(frozen=True, slots=True)
class SnapshotEntry:
    """One producer in a snapshot file (Kafka's ``ProducerStateEntry`` as written)."""

    producer_id: int
    epoch: int
    last_sequence: int
    last_offset: int
    offset_delta: int
    timestamp_ms: int
    coordinator_epoch: int = NO_COORDINATOR_EPOCH
    current_txn_first_offset: int = NO_TXN_FIRST_OFFSET


def snapshot_entries(states: ProducerStates) -> list[SnapshotEntry]:
    """What a snapshot of ``states`` holds: each producer's epoch and last batch, by producer id."""
    out = []
    for producer_id in sorted(states.entries):
        entry = states.entries[producer_id]
        last = entry.batches[-1]
        delta = last.last_offset - last.first_offset
        out.append(
            SnapshotEntry(producer_id, entry.epoch, last.last_sequence, last.last_offset, delta, last.max_timestamp_ms)
        )
    return out


def snapshot_bytes(states: ProducerStates) -> bytes:
    """The ``<offset>.snapshot`` file of ``states`` (module docstring)."""
    entries = snapshot_entries(states)
    body = _SNAPSHOT_COUNT.pack(len(entries)) + b"".join(
        _SNAPSHOT_ENTRY.pack(
            e.producer_id,
            e.epoch,
            e.last_sequence,
            e.last_offset,
            e.offset_delta,
            e.timestamp_ms,
            e.coordinator_epoch,
            e.current_txn_first_offset,
        )
        for e in entries
    )
    return _SNAPSHOT_HEAD.pack(SNAPSHOT_VERSION, crc32c(body)) + body


def states_from_snapshot(entries: list[SnapshotEntry]) -> ProducerStates:
    """The table a snapshot file restores: each producer's epoch and its last batch (which a retry then matches as
    a duplicate, and after which the producer must go on in sequence), as Kafka reloads a snapshot."""
    restored: dict[int, ProducerEntry] = {}
    for e in entries:
        first_sequence = (e.last_sequence - e.offset_delta) % (MAX_SEQUENCE + 1)
        last = ProducedBatch(
            first_sequence, e.last_sequence, e.last_offset - e.offset_delta, e.last_offset, e.timestamp_ms
        )
        restored[e.producer_id] = ProducerEntry(e.epoch, (last,))
    return ProducerStates(MappingProxyType(restored))


class SnapshotFormatError(ValueError):
    """Bytes that are not a producer snapshot Kafka's reader would accept."""


def parse_snapshot(data: bytes) -> list[SnapshotEntry]:
    """The entries of a snapshot file; :class:`SnapshotFormatError` as Kafka's reader refuses it (version, CRC,
    size)."""
    if len(data) < _SNAPSHOT_HEAD.size + _SNAPSHOT_COUNT.size:
        raise SnapshotFormatError(f"a producer snapshot has at least 10 bytes, got {len(data)}")
    version, crc = _SNAPSHOT_HEAD.unpack_from(data, 0)
    if version != SNAPSHOT_VERSION:
        raise SnapshotFormatError(f"unknown producer snapshot version {version}")
    body = data[_SNAPSHOT_HEAD.size :]
    if crc32c(body) != crc:
        raise SnapshotFormatError("the producer snapshot's CRC does not match its contents")
    (count,) = _SNAPSHOT_COUNT.unpack_from(body, 0)
    if count < 0 or len(body) != _SNAPSHOT_COUNT.size + count * _SNAPSHOT_ENTRY.size:
        raise SnapshotFormatError(f"{count} producer entries do not fill {len(body)} bytes")
    return [SnapshotEntry(*fields) for fields in _SNAPSHOT_ENTRY.iter_unpack(body[_SNAPSHOT_COUNT.size :])]
