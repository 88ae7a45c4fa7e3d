"""The disablement policies' planner (KIP-950): what ``delete`` removes and where the log start offsets move.

Pure: it reads the RLMM's segments and the local log start offsets given to it, never a clock or the store, and
returns an immutable :class:`DeletePlan`; :mod:`policies.disable_executor` applies it. ``retain`` needs no plan:
its remote data stays until retention expiry (:mod:`policies.retention`) deletes it.

Invariants (ARCHITECTURE §4 items 4 and 5):
* A plan for a topic id only ever names segments of that topic id; its deletions are confined to
  :func:`remote_storage.keys.topic_prefix` of that id, which the executor passes to the storage layer.
* delete: every segment of the topic id that is not DELETE_SEGMENT_FINISHED is planned for deletion (in-flight
  copies included: the broker stopped its copy tasks first), and each partition's log start offset moves to its
  local log start offset. A batch holds one partition's segments, at most :data:`SEGMENTS_PER_DELETE_BATCH` (three
  objects each, within S3's 1000 keys per DeleteObjects): a DeleteObjects call that fails fails one partition's
  objects, and the executor's window of calls in flight spans the partitions of a plan.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from orchestrator.ids import Uuid
from orchestrator.metadata.records import SegmentState
from remote_storage.rlmm import RemoteSegment

SEGMENTS_PER_DELETE_BATCH = 333  # three objects a segment: at most 999 keys per DeleteObjects call


@dataclass(frozen=True, slots=True)
class DeletePlan:
    topic_id: Uuid
    batches: tuple[tuple[RemoteSegment, ...], ...]
    log_start_offsets: Mapping[int, int]  # partition -> new log start offset

    @property
    def segment_count(self) -> int:
        return sum(len(b) for b in self.batches)


def batched(
    segments: Sequence[RemoteSegment], size: int = SEGMENTS_PER_DELETE_BATCH
) -> tuple[tuple[RemoteSegment, ...], ...]:
    return tuple(tuple(segments[i : i + size]) for i in range(0, len(segments), size))


def plan_delete(
    topic_id: Uuid,
    segments: Sequence[RemoteSegment],
    local_log_start_offsets: Mapping[int, int],
    *,
    batch_segments: int = SEGMENTS_PER_DELETE_BATCH,
) -> DeletePlan:
    """The delete policy for one topic id: every remote segment not yet deleted, and the new start offsets."""
    todo = sorted(
        (s for s in segments if s.topic_id == topic_id and s.state != SegmentState.DELETE_SEGMENT_FINISHED),
        key=lambda s: (s.partition, s.start_offset),
    )
    if not 1 <= batch_segments <= SEGMENTS_PER_DELETE_BATCH:
        raise ValueError(f"batch_segments must be 1..{SEGMENTS_PER_DELETE_BATCH}, got {batch_segments}")
    batches = tuple(
        batch
        for _, in_partition in itertools.groupby(todo, key=lambda s: s.partition)
        for batch in batched(list(in_partition), batch_segments)
    )
    return DeletePlan(topic_id, batches, dict(local_log_start_offsets))
