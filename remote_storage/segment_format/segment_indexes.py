"""A segment's ``.indexes`` object: the five indexes a RemoteStorageManager serves, back to back.

Owner: Aiven's, defined by ``core/src/main/java/io/aiven/kafka/tieredstorage/KafkaRemoteStorageManager.java``
(``uploadIndexes``, ``transformIndex``, ``fetchIndex``), ``manifest/SegmentIndexesV1.java``,
``SegmentIndexesV1Builder.java`` and ``SegmentIndexV1.java`` (commit in :mod:`remote_storage.segment_format`).

The object holds, in this order: the offset index, the time index, the producer snapshot, the leader-epoch
checkpoint and the transaction index, each as Kafka wrote it for the segment (their contents are Kafka's formats and
opaque here). The manifest's ``segmentIndexes`` says where each lies: ``{"offset","timestamp","producerSnapshot",
"leaderEpoch","transaction"}``, each ``{"position","size"}`` in the object.

* With encryption on, each index is encrypted on its own, as one blob (:mod:`.encryption`: its own IV, 28 bytes
  more); indexes are never compressed, even when the ``.log`` chunks are.
* An index that is truly empty (a zero-byte file) is written as Aiven writes one: no bytes at all (not even an IV
  and tag), and ``{"position": <where it would start>, "size": 0}``.
* A segment without a transaction index has ``"transaction": null``; the four others are always present.

Invariants: ranges are contiguous from 0 in the order above and the object is exactly their concatenation;
reading an index returns exactly the bytes given for it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from remote_storage.segment_format import encryption
from remote_storage.segment_format.encryption import DataKeyAndAad, RandomBytes
from remote_storage.segment_format.errors import SegmentFormatError
from remote_storage.segment_format.json_text import INT32_MAX, optional_object, require_int, require_object


class IndexType(StrEnum):
    """The five indexes, in the order of the ``.indexes`` object; each value is its member name in the manifest."""

    OFFSET = "offset"
    TIMESTAMP = "timestamp"
    PRODUCER_SNAPSHOT = "producerSnapshot"
    LEADER_EPOCH = "leaderEpoch"
    TRANSACTION = "transaction"


@dataclass(frozen=True, slots=True)
class IndexRange:
    """Where one index lies in the ``.indexes`` object."""

    position: int
    size: int

    @property
    def end(self) -> int:
        return self.position + self.size


@dataclass(frozen=True, slots=True)
class SegmentIndexes:
    """The manifest's ``segmentIndexes``."""

    offset: IndexRange
    timestamp: IndexRange
    producer_snapshot: IndexRange
    leader_epoch: IndexRange
    transaction: IndexRange | None

    def range_of(self, index_type: IndexType) -> IndexRange | None:
        return {
            IndexType.OFFSET: self.offset,
            IndexType.TIMESTAMP: self.timestamp,
            IndexType.PRODUCER_SNAPSHOT: self.producer_snapshot,
            IndexType.LEADER_EPOCH: self.leader_epoch,
            IndexType.TRANSACTION: self.transaction,
        }[index_type]


@dataclass(frozen=True, slots=True)
class SegmentIndexFiles:
    """The contents of a segment's five index files; ``transaction`` is None when the segment has none."""

    offset: bytes
    timestamp: bytes
    producer_snapshot: bytes
    leader_epoch: bytes
    transaction: bytes | None = None

    def contents(self, index_type: IndexType) -> bytes | None:
        return {
            IndexType.OFFSET: self.offset,
            IndexType.TIMESTAMP: self.timestamp,
            IndexType.PRODUCER_SNAPSHOT: self.producer_snapshot,
            IndexType.LEADER_EPOCH: self.leader_epoch,
            IndexType.TRANSACTION: self.transaction,
        }[index_type]


@dataclass(frozen=True, slots=True)
class IndexesObject:
    """The ``.indexes`` object's bytes, and where each index lies in it."""

    body: bytes
    indexes: SegmentIndexes


def build_indexes_object(
    files: SegmentIndexFiles, *, encryption_key: DataKeyAndAad | None = None, random_bytes: RandomBytes = os.urandom
) -> IndexesObject:
    """The ``.indexes`` object of ``files``, each index encrypted on its own when ``encryption_key`` is given."""
    parts: list[bytes] = []

    def place(contents: bytes) -> IndexRange:
        stored = contents
        if contents and encryption_key is not None:
            stored = encryption.encrypt(contents, encryption_key, random_bytes=random_bytes)
        position = sum(len(part) for part in parts)
        parts.append(stored)
        return IndexRange(position, len(stored))

    # Arguments are evaluated left to right: this is the order of the object.
    indexes = SegmentIndexes(
        offset=place(files.offset),
        timestamp=place(files.timestamp),
        producer_snapshot=place(files.producer_snapshot),
        leader_epoch=place(files.leader_epoch),
        transaction=None if files.transaction is None else place(files.transaction),
    )
    return IndexesObject(b"".join(parts), indexes)


def decode_index(
    stored: bytes | memoryview, index_type: IndexType, *, encryption_key: DataKeyAndAad | None = None
) -> bytes:
    """An index's contents from its stored bytes (the GET of its range, or its slice of the object)."""
    if not stored:
        return b""
    if encryption_key is None:
        return bytes(stored)
    return encryption.decrypt(stored, encryption_key, what=f"the {index_type.value} index")


def read_index(
    body: bytes | memoryview,
    indexes: SegmentIndexes,
    index_type: IndexType,
    *,
    encryption_key: DataKeyAndAad | None = None,
) -> bytes | None:
    """An index's contents from the whole ``.indexes`` object; None for an absent transaction index."""
    index_range = indexes.range_of(index_type)
    if index_range is None:
        return None
    if index_range.end > len(body):
        raise SegmentFormatError(
            f"the {index_type.value} index lies at [{index_range.position}, {index_range.end}) "
            f"of a {len(body)}-byte .indexes object"
        )
    stored = memoryview(body)[index_range.position : index_range.end]
    return decode_index(stored, index_type, encryption_key=encryption_key)


def segment_indexes_to_json(indexes: SegmentIndexes) -> dict[str, Any]:
    """``segmentIndexes`` as a JSON object, members in Aiven's order, ``transaction`` null when absent."""

    def one(index_range: IndexRange | None) -> dict[str, int] | None:
        return None if index_range is None else {"position": index_range.position, "size": index_range.size}

    return {t.value: one(indexes.range_of(t)) for t in IndexType}


def segment_indexes_from_json(obj: Mapping[str, Any], where: str = "segmentIndexes") -> SegmentIndexes:
    """``segmentIndexes`` from JSON: the four first members present and not null, ``transaction`` present (Aiven
    requires the member) and possibly null."""

    def one(member: str) -> IndexRange:
        entry = require_object(obj, member, where)
        at = f"{where}.{member}"
        return IndexRange(
            require_int(entry, "position", at, lo=0, hi=INT32_MAX), require_int(entry, "size", at, lo=0, hi=INT32_MAX)
        )

    if IndexType.TRANSACTION.value not in obj:
        raise SegmentFormatError(f"{where}.transaction is missing (null is allowed, absence is not)")
    transaction = None
    if optional_object(obj, IndexType.TRANSACTION.value, where) is not None:
        transaction = one(IndexType.TRANSACTION.value)
    return SegmentIndexes(
        offset=one(IndexType.OFFSET.value),
        timestamp=one(IndexType.TIMESTAMP.value),
        producer_snapshot=one(IndexType.PRODUCER_SNAPSHOT.value),
        leader_epoch=one(IndexType.LEADER_EPOCH.value),
        transaction=transaction,
    )
