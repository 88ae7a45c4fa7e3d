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

The table is rebuilt from the batch headers of the local log when the log is opened, so it survives a restart as
far as the local segments reach; a producer whose batches are all gone from the local log is unknown again.
Values are immutable; :meth:`ProducerStates.with_batch` returns a new table.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import Enum
from types import MappingProxyType

from orchestrator.errors import InvalidProducerEpoch, OutOfOrderSequenceNumber
from orchestrator.protocol.record_batch import NO_PRODUCER_ID

CACHED_BATCHES = 5  # as Kafka: a producer has at most five batches in flight per partition
MAX_SEQUENCE = 2**31 - 1


@dataclass(frozen=True, slots=True)
class ProducedBatch:
    first_sequence: int
    last_sequence: int
    first_offset: int
    last_offset: int


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
