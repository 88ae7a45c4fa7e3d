"""Journaled deletion of remote segments: the one way a segment's objects leave the bucket.

Each batch is journaled in the RLMM around its S3 call: DELETE_SEGMENT_STARTED for the whole batch first (one
atomic append), then DeleteObjects (keys confined to the topic id's prefix), then DELETE_SEGMENT_FINISHED for
the segments whose every object is gone. A crash at any point leaves segments STARTED-but-not-FINISHED, which
the next plan includes again; deleting an already deleted object is a success, so a rerun finishes the job
(DESIGN §4 invariants 4, 7, 8). Keys that fail for good are reported in the result and keep their segment
unfinished; they are never counted as deleted.

Used by the policies' executors (the delete policy, retention expiry) and by the broker's clean-up of a copy that
failed or was fenced.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import structlog

from orchestrator import crash_points
from orchestrator.metadata.records import SegmentState
from remote_storage.keys import segment_keys, topic_prefix
from remote_storage.rlmm import RemoteLogMetadataManager, RemoteSegment
from remote_storage.s3 import S3RemoteStorage

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class DeleteResult:
    segments_deleted: int = 0
    objects_deleted: int = 0
    failed_keys: Mapping[str, str] = field(default_factory=dict)

    @property
    def complete(self) -> bool:
        return not self.failed_keys


ProgressCallback = Callable[[int, int], None]  # (segments done, segments planned)


def delete_segments(
    segments: tuple[RemoteSegment, ...] | list[RemoteSegment],
    *,
    rsm: S3RemoteStorage,
    rlmm: RemoteLogMetadataManager,
    broker_id: int,
    now_ms: Callable[[], int],
    batches: tuple[tuple[RemoteSegment, ...], ...] | None = None,
    on_progress: ProgressCallback | None = None,
    crash_point: str | None = None,
) -> DeleteResult:
    """Delete the object sets of ``segments`` (one topic id), journaled in the RLMM batch by batch. ``crash_point``
    (:mod:`orchestrator.crash_points`) is reached after each batch's objects are deleted, before its FINISHED."""
    plan_batches = batches if batches is not None else (tuple(segments),)
    total = sum(len(b) for b in plan_batches)
    done = objects = 0
    failed: dict[str, str] = {}
    for batch in plan_batches:
        if not batch:
            continue
        tids = {s.topic_id for s in batch}
        if len(tids) != 1:
            raise ValueError(f"a delete batch must hold one topic id, got {len(tids)}")
        first = batch[0]
        prefix = topic_prefix(rsm.prefix, first.topic, first.topic_id)
        rlmm.transition(batch, SegmentState.DELETE_SEGMENT_STARTED, broker_id=broker_id, now_ms=now_ms())
        keys_of = {s.segment_id: list(segment_keys(rsm.prefix, s.key).values()) for s in batch}
        outcome = rsm.delete_keys([k for ks in keys_of.values() for k in ks], within_prefix=prefix)
        failed.update(outcome.failed)
        if crash_point is not None:
            crash_points.reached(crash_point)
        finished = [s for s in batch if not any(k in outcome.failed for k in keys_of[s.segment_id])]
        rlmm.transition(finished, SegmentState.DELETE_SEGMENT_FINISHED, broker_id=broker_id, now_ms=now_ms())
        done += len(finished)
        objects += len(outcome.deleted)
        if rsm.metrics is not None:
            rsm.metrics.segments_removed(len(finished), sum(s.size_bytes for s in finished))
        if on_progress is not None:
            on_progress(done, total)
        log.info(
            "policy.delete_batch", topic_id=str(first.topic_id), segments=len(finished), failed=len(outcome.failed)
        )
    return DeleteResult(done, objects, failed)
