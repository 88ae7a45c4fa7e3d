"""Journaled deletion of remote segments: the one way a segment's objects leave the bucket.

Batches (at most 999 keys: one DeleteObjects each) go in windows of up to ``concurrency`` batches: the window's
segments are journaled DELETE_SEGMENT_STARTED in the RLMM first (one atomic append for the whole window), then its
DeleteObjects calls run concurrently (keys confined to the topic id's prefix), then DELETE_SEGMENT_FINISHED is
appended, once for the window, for the segments whose every object is gone. So the journal costs two appends per
window, not two per batch, and S3 sees ``concurrency`` calls in flight. Invariants, whatever the window size:
a segment is STARTED before any of its objects is deleted, and FINISHED only once all of them are gone. A crash at
any point leaves segments STARTED-but-not-FINISHED, which the next plan includes again; deleting an already deleted
object is a success, so a rerun finishes the job (ARCHITECTURE §4 invariants 4, 7, 8). Keys that fail for good are
reported in the result and keep their segment unfinished; they are never counted as deleted.

Counted once: two deleters can race on one segment (a leaderless partition assigned to one broker while its old
leader still works on it). Both delete its objects (idempotent) and both journal FINISHED, but only the first
FINISHED in the log moves the segment (the RLMM's ``transition`` returns the segments its records moved). What a
call reports as *counted* (``segments_counted``, the progress callback's third number, the metrics) is only what it
moved first, so counts summed over brokers name every deleted segment once. ``segments_deleted`` is what the call
finished, counted or not: the work left shrinks by it.

Used by the policies' executors (the delete policy, retention expiry) and by the broker's clean-up of a copy that
failed or was fenced.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
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
    segments_deleted: int = 0  # finished by this call, whether or not a racing deleter finished them first
    objects_deleted: int = 0
    failed_keys: Mapping[str, str] = field(default_factory=dict)
    segments_counted: int = 0  # of those, the ones this call's FINISHED moved first (module docstring)

    @property
    def complete(self) -> bool:
        return not self.failed_keys


ProgressCallback = Callable[[int, int, int], None]  # (segments done, segments planned, segments counted)


DEFAULT_CONCURRENCY = 8  # DeleteObjects calls in flight per deletion (each up to 999 keys)


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
    concurrency: int = DEFAULT_CONCURRENCY,
) -> DeleteResult:
    """Delete the object sets of ``segments`` (one topic id), journaled in the RLMM window by window (see the
    module docstring). ``crash_point`` (:mod:`orchestrator.crash_points`) is reached after each batch's objects are
    deleted, before its FINISHED."""
    if concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, got {concurrency}")
    plan_batches = [b for b in (batches if batches is not None else (tuple(segments),)) if b]
    total = sum(len(b) for b in plan_batches)
    tids = {s.topic_id for b in plan_batches for s in b}
    if len(tids) > 1:
        raise ValueError(f"a deletion must hold one topic id, got {len(tids)}")
    done = objects = counted = 0
    failed: dict[str, str] = {}
    with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="s3-delete") as pool:
        for start in range(0, len(plan_batches), concurrency):
            window = plan_batches[start : start + concurrency]
            first = window[0][0]
            prefix = topic_prefix(rsm.prefix, first.topic, first.topic_id)
            started = [s for b in window for s in b]
            rlmm.transition(started, SegmentState.DELETE_SEGMENT_STARTED, broker_id=broker_id, now_ms=now_ms())
            keys_of = {s.segment_id: list(segment_keys(rsm.prefix, s.key).values()) for s in started}

            key_lists = [[k for s in batch for k in keys_of[s.segment_id]] for batch in window]
            outcomes = list(pool.map(functools.partial(rsm.delete_keys, within_prefix=prefix), key_lists))
            finished: list[RemoteSegment] = []
            for batch, outcome in zip(window, outcomes, strict=True):
                failed.update(outcome.failed)
                objects += len(outcome.deleted)
                if crash_point is not None:
                    crash_points.reached(crash_point)
                finished += [s for s in batch if not any(k in outcome.failed for k in keys_of[s.segment_id])]
            moved = rlmm.transition(
                finished, SegmentState.DELETE_SEGMENT_FINISHED, broker_id=broker_id, now_ms=now_ms()
            )
            done += len(finished)
            counted += len(moved)
            if rsm.metrics is not None:  # only what this call finished first: a racing deleter counted the rest
                rsm.metrics.segments_removed(len(moved), sum(s.size_bytes for s in moved))
            if on_progress is not None:
                on_progress(done, total, counted)
            log.info(
                "policy.delete_batch",
                topic_id=str(first.topic_id),
                batches=len(window),
                segments=len(finished),
                failed=sum(len(o.failed) for o in outcomes),
            )
    return DeleteResult(done, objects, failed, counted)
