"""What the RLMM folds its records into: one remote segment's state (:class:`RemoteSegment`) and one partition's
remote data (:class:`RemotePartition`), immutable values with the pure answers they give (their object keys, their
leader epochs), apart from the fold and the writes of :mod:`remote_storage.rlmm`, which re-exports them.

Invariants: a value never changes (the fold replaces it); a segment's objects are where its custom metadata
recorded them, else under the configured prefix at the key layout's path (:meth:`RemoteSegment.object_keys`), and
a delete of them may touch only :meth:`RemoteSegment.objects_topic_prefix`.
"""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.ids import Uuid
from orchestrator.metadata.records import PartitionDeleteState, SegmentState
from remote_storage.keys import SEGMENT_SUFFIXES, SegmentKey, Suffix, topic_prefix
from remote_storage.segment_format.custom_metadata import SegmentCustomMetadata, decode_custom_metadata
from remote_storage.segment_format.object_keys import segment_object_key


@dataclass(frozen=True, slots=True)
class RemoteSegment:
    topic: str
    topic_id: Uuid
    partition: int
    segment_id: Uuid
    start_offset: int
    end_offset: int
    max_timestamp_ms: int
    size_bytes: int
    tiered_epoch: int
    state: SegmentState = SegmentState.COPY_SEGMENT_STARTED
    broker_id: int = -1
    event_timestamp_ms: int = -1
    leader_epoch: int = 0  # the first of leader_epochs (0 when the segment's batches carried none)
    # (leader epoch, its first offset in the segment), ascending; empty: one, leader_epoch from start_offset
    leader_epochs: tuple[tuple[int, int], ...] = ()
    # Aiven's custom metadata, raw as Kafka carries it (the COPY_SEGMENT_FINISHED record's CustomMetadata)
    custom_metadata: bytes | None = None
    # Whether the RLMM journaled its copy COPY_SEGMENT_FINISHED before a deletion started (the state alone cannot
    # say: DELETE_SEGMENT_STARTED follows a finished copy or one that never finished). Read by copy_confirmed.
    copy_finished: bool = False

    @property
    def key(self) -> SegmentKey:
        return SegmentKey(self.topic, self.topic_id, self.partition, self.start_offset, self.segment_id)

    @property
    def epochs(self) -> tuple[tuple[int, int], ...]:
        """The segment's leader epochs, each with its first offset (never empty)."""
        return self.leader_epochs or ((self.leader_epoch, self.start_offset),)

    def recorded_location(self) -> SegmentCustomMetadata | None:
        """The custom metadata's fields (SegmentFormatError when the blob does not decode); None without any."""
        return None if self.custom_metadata is None else decode_custom_metadata(self.custom_metadata)

    def object_keys(self, configured_prefix: str) -> dict[Suffix, str]:
        """Where the segment's objects are: under the prefix and key its custom metadata recorded, if any, else the
        configured prefix and the key layout's path."""
        recorded = self.recorded_location()
        return {
            suffix: segment_object_key(
                configured_prefix=configured_prefix, segment=self.key, suffix=suffix, custom_metadata=recorded
            ).value
            for suffix in SEGMENT_SUFFIXES
        }

    def objects_topic_prefix(self, configured_prefix: str) -> str:
        """The only prefix a delete of the segment's objects may touch: its topic's own prefix
        (``<prefix><topic>-<topicId>/``) under the prefix the segment was recorded under, else the configured one. A
        recorded key outside it is refused by the delete, never followed."""
        recorded = self.recorded_location()
        prefix = configured_prefix if recorded is None or recorded.object_prefix is None else recorded.object_prefix
        return topic_prefix(prefix, self.topic, self.topic_id)

    @property
    def deleted(self) -> bool:
        return self.state == SegmentState.DELETE_SEGMENT_FINISHED

    @property
    def live(self) -> bool:
        """Copied and not being deleted: readable, counted against retention."""
        return self.state == SegmentState.COPY_SEGMENT_FINISHED

    @property
    def copy_confirmed(self) -> bool:
        """Its upload was confirmed: it is, or was before its deletion started, COPY_SEGMENT_FINISHED."""
        return self.copy_finished or self.state == SegmentState.COPY_SEGMENT_FINISHED


@dataclass(frozen=True, slots=True)
class RemotePartition:
    """What the RLMM knows of one partition's remote data: its partition-delete state (None: never marked) and its
    segments not DELETE_SEGMENT_FINISHED."""

    topic: str
    topic_id: Uuid
    partition: int
    delete_state: PartitionDeleteState | None
    segments_left: int
    bytes_left: int


def epoch_ends(seg: RemoteSegment) -> list[tuple[int, int]]:
    """(leader epoch, the last offset of the segment in that epoch) for each epoch of ``seg``."""
    epochs = list(seg.epochs)
    nexts = [start for _, start in epochs[1:]] + [seg.end_offset + 1]
    return [(epoch, nxt - 1) for (epoch, _), nxt in zip(epochs, nexts, strict=True)]
