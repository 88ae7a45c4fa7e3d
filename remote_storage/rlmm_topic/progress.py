"""How far one topic's remote segments are, as the ``__remote_log_metadata`` records of it tell: copied, deleting,
deleted, per partition; and whether that stopped moving.

This is how tieredctl follows a disablement on a cluster it did not build (``tiering disable --compat kafka
--wait``): Kafka's leaders write the segment states there and nothing else tells progress. Pure: records in, a new
:class:`TopicSegments` out (:func:`fold`); :class:`StallWatch` is given the time, never reads a clock.

What Kafka does (``RemoteLogManager.deleteRemoteLogPartition``, apache/kafka): on ``remote.storage.enable=false``
with ``remote.log.delete.on.disable=true`` each leader writes DELETE_SEGMENT_STARTED for every segment of its
partition, deletes the objects, then writes DELETE_SEGMENT_FINISHED for all of them; a storage error in between
leaves the partition's segments at DELETE_SEGMENT_STARTED and is not retried. So a delete is finished when every
segment of the topic is DELETE_SEGMENT_FINISHED, and one that stops short of it stays short.

Invariants:
* A segment's state only moves forward (COPY_SEGMENT_STARTED < COPY_SEGMENT_FINISHED < DELETE_SEGMENT_STARTED <
  DELETE_SEGMENT_FINISHED): a record that would move it back is moot, as in Kafka's own cache.
* An update of a segment whose first record was not seen (the topic lost it) still counts, with size 0.
* Records of other topics are ignored: one fold follows one topic id.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from orchestrator.ids import Uuid
from orchestrator.metadata.records import MetadataRecord, SegmentState

SEGMENT = "RemoteLogSegmentMetadataRecord"
SEGMENT_UPDATE = "RemoteLogSegmentMetadataUpdateRecord"


@dataclass(frozen=True)
class SegmentEntry:
    partition: int
    state: SegmentState
    size: int  # bytes, as the segment's first record gave them (0 when it was not seen)


@dataclass(frozen=True)
class PartitionProgress:
    """One partition's segments by state; ``remaining``: not DELETE_SEGMENT_FINISHED yet."""

    partition: int
    copying: int = 0
    copied: int = 0
    deleting: int = 0
    deleted: int = 0
    bytes_remaining: int = 0

    @property
    def remaining(self) -> int:
        return self.copying + self.copied + self.deleting

    def as_json(self) -> dict[str, int]:
        return {
            "partition": self.partition,
            "copying": self.copying,
            "copied": self.copied,
            "deleting": self.deleting,
            "deleted": self.deleted,
            "segments_remaining": self.remaining,
            "bytes_remaining": self.bytes_remaining,
        }


@dataclass(frozen=True)
class TopicSegments:
    """The segments of topic ``topic_id`` by segment id, folded from the metadata topic."""

    topic_id: Uuid
    segments: Mapping[Uuid, SegmentEntry] = field(default_factory=dict)

    def partitions(self, partition_count: int = 0) -> list[PartitionProgress]:
        """Every partition's progress: those of ``range(partition_count)`` and any other a record named."""
        counts: dict[int, dict[str, int]] = {p: {} for p in range(partition_count)}
        for seg in self.segments.values():
            row = counts.setdefault(seg.partition, {})
            name = _COUNTED[seg.state]
            row[name] = row.get(name, 0) + 1
            if seg.state != SegmentState.DELETE_SEGMENT_FINISHED:
                row["bytes_remaining"] = row.get("bytes_remaining", 0) + seg.size
        return [PartitionProgress(p, **counts[p]) for p in sorted(counts)]

    def count(self, state: SegmentState) -> int:
        return sum(1 for seg in self.segments.values() if seg.state == state)

    @property
    def all_deleted(self) -> bool:
        """Every segment is DELETE_SEGMENT_FINISHED (true of a topic with none)."""
        return all(seg.state == SegmentState.DELETE_SEGMENT_FINISHED for seg in self.segments.values())

    @property
    def copies_in_flight(self) -> int:
        return self.count(SegmentState.COPY_SEGMENT_STARTED)

    @property
    def mark(self) -> tuple[int, ...]:
        """What changes whenever a segment moves: the count in each state."""
        return tuple(self.count(state) for state in SegmentState)


_COUNTED = {
    SegmentState.COPY_SEGMENT_STARTED: "copying",
    SegmentState.COPY_SEGMENT_FINISHED: "copied",
    SegmentState.DELETE_SEGMENT_STARTED: "deleting",
    SegmentState.DELETE_SEGMENT_FINISHED: "deleted",
}


def _segment_ref(record: MetadataRecord) -> tuple[Uuid, int, Uuid]:
    sid: Mapping[str, Any] = record["remote_log_segment_id"]
    tip: Mapping[str, Any] = sid["topic_id_partition"]
    return tip["id"], int(tip["partition"]), sid["id"]


def fold(topic: TopicSegments, records: Iterable[MetadataRecord]) -> TopicSegments:
    """``topic`` with ``records`` (in the metadata topic's order per partition) applied."""
    segments = dict(topic.segments)
    for record in records:
        if record.name not in (SEGMENT, SEGMENT_UPDATE):
            continue
        topic_id, partition, segment_id = _segment_ref(record)
        if topic_id != topic.topic_id:
            continue
        state = SegmentState(record["remote_log_segment_state"])
        known = segments.get(segment_id)
        if known is None:
            size = int(record["segment_size_in_bytes"]) if record.name == SEGMENT else 0
            segments[segment_id] = SegmentEntry(partition, state, size)
        elif state > known.state:
            segments[segment_id] = replace(known, state=state)
    return replace(topic, segments=segments)


@dataclass(frozen=True)
class StallWatch:
    """When the topic's segments last moved: ``mark`` as last seen and the time (ms) it was first seen so."""

    mark: tuple[int, ...]
    since_ms: int

    def observe(self, mark: tuple[int, ...], now_ms: int) -> StallWatch:
        return self if mark == self.mark else StallWatch(mark, now_ms)

    def stalled(self, now_ms: int, bound_ms: int) -> bool:
        """Nothing moved for ``bound_ms`` or longer."""
        return now_ms - self.since_ms >= bound_ms
