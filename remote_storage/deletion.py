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

Where each segment's objects are, and the one prefix its delete may touch, are the segment's own (``RemoteSegment``'s
``object_keys`` and ``objects_topic_prefix``): a segment whose custom metadata recorded another prefix is deleted
there, confined to its topic's own prefix within that prefix. A segment whose recorded key lies outside it, or
whose custom metadata does not decode, is refused: none of its objects is deleted, its keys are reported failed
(``OutsideTopicPrefix``, ``BadCustomMetadata``) and it stays DELETE_SEGMENT_STARTED, for an operator to look at.
DeleteObjects calls go per prefix within a batch, so one call never mixes two prefixes' keys.

Late writes (``settle_ms``, the delete policy and a deleted topic's partitions only): a PUT the S3 client gave up on
(it timed out) may still land later, held in the store's front end, and would bring an object back after its
deletion, left there for good under a topic whose remote data is gone. A copy that never finished is where that
happens: its upload failed or went unconfirmed (a timeout among the likely causes), and its clean-up may not have
run (the store unreachable then). So a segment whose copy never finished (never journaled COPY_SEGMENT_FINISHED:
``RemoteSegment.copy_confirmed``) and whose newest journal event (its copy's start, or an earlier deletion attempt) is
less than ``settle_ms`` old when its objects are deleted is not journaled FINISHED at once: the call waits until that
age is reached (never longer than ``settle_ms``), deletes its objects once more, and only then journals it FINISHED
(events ``policy.delete_settling``, ``policy.delete_settled``). A finished copy is deleted without waiting, also when
an earlier deletion attempt (one an S3 outage failed, or another deleter's) left it DELETE_SEGMENT_STARTED a moment
ago: a PUT of it that timed out and was retried, deleted within the window, can still come back (the scan finds such
an object). Retention expiry's segments are old, and the clean-up of a failed copy does not wait (it would hold up
the tiering pass).

Used by the policies' executors (the delete policy, retention expiry) and by the broker's clean-up of a copy that
failed or was fenced.
"""

from __future__ import annotations

import collections
import functools
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import structlog

from orchestrator import crash_points
from orchestrator.ids import Uuid
from orchestrator.metadata.records import SegmentState
from remote_storage.rlmm import RemoteLogMetadataManager, RemoteSegment
from remote_storage.s3 import DeleteOutcome, S3RemoteStorage
from remote_storage.segment_format.errors import SegmentFormatError

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class DeleteResult:
    segments_deleted: int = 0  # finished by this call, whether or not a racing deleter finished them first
    objects_deleted: int = 0
    failed_keys: Mapping[str, str] = field(default_factory=dict)
    segments_counted: int = 0  # of those, the ones this call's FINISHED moved first (module docstring)
    unfinished_partitions: frozenset[int] = frozenset()  # partitions with a segment this call could not finish

    @property
    def complete(self) -> bool:
        return not self.failed_keys


ProgressCallback = Callable[[int, int, int], None]  # (segments done, segments planned, segments counted)
PartitionsCallback = Callable[[frozenset[int]], None]  # partitions whose every planned segment is now finished


DEFAULT_CONCURRENCY = 8  # DeleteObjects calls in flight per deletion (each up to 999 keys)


@dataclass(frozen=True, slots=True)
class _SegmentObjects:
    """One segment's object keys and the prefix they must lie under, or why none of them may be deleted."""

    keys: tuple[str, ...]
    within: str
    refused: str | None = None


def _objects_of(seg: RemoteSegment, configured_prefix: str) -> _SegmentObjects:
    try:
        keys = tuple(seg.object_keys(configured_prefix).values())
        within = seg.objects_topic_prefix(configured_prefix)
    except SegmentFormatError as exc:  # reported under the segment's id: where its objects are is unknown
        return _SegmentObjects((f"<segment {seg.segment_id}>",), "", f"BadCustomMetadata: {exc.message}")
    outside = [k for k in keys if not k.startswith(within)]
    if outside:
        reason = f"OutsideTopicPrefix: {outside[0]!r} is not under {within!r}, where the segment was recorded"
        return _SegmentObjects(keys, within, reason)
    return _SegmentObjects(keys, within)


def _delete_batch(rsm: S3RemoteStorage, objects: list[_SegmentObjects]) -> DeleteOutcome:
    """Delete one batch's objects, one DeleteObjects call per prefix; refused segments' keys fail unrequested."""
    deleted: list[str] = []
    failed: dict[str, str] = {}
    by_prefix: dict[str, list[str]] = {}
    for obj in objects:
        if obj.refused is not None:
            failed.update({key: obj.refused for key in obj.keys})
        else:
            by_prefix.setdefault(obj.within, []).extend(obj.keys)
    for within, keys in by_prefix.items():
        outcome = rsm.delete_keys(keys, within_prefix=within)
        deleted.extend(outcome.deleted)
        failed.update(outcome.failed)
    return DeleteOutcome(tuple(deleted), failed)


def delete_segments(
    segments: tuple[RemoteSegment, ...] | list[RemoteSegment],
    *,
    rsm: S3RemoteStorage,
    rlmm: RemoteLogMetadataManager,
    broker_id: int,
    now_ms: Callable[[], int],
    batches: tuple[tuple[RemoteSegment, ...], ...] | None = None,
    on_progress: ProgressCallback | None = None,
    on_partitions_done: PartitionsCallback | None = None,
    crash_point: str | None = None,
    concurrency: int = DEFAULT_CONCURRENCY,
    settle_ms: int = 0,
    sleep: Callable[[float], None] = time.sleep,
) -> DeleteResult:
    """Delete the object sets of ``segments`` (one topic id), journaled in the RLMM window by window (see the
    module docstring). ``crash_point`` (:mod:`orchestrator.crash_points`) is reached after each batch's objects are
    deleted, before its FINISHED. ``settle_ms``: the late-write window (module docstring; 0: none).
    ``on_partitions_done`` hears, after each window is journaled, the partitions whose last planned segment it
    finished (a partition with a segment that failed is never among them)."""
    if concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, got {concurrency}")
    plan_batches = [b for b in (batches if batches is not None else (tuple(segments),)) if b]
    total = sum(len(b) for b in plan_batches)
    tids = {s.topic_id for b in plan_batches for s in b}
    if len(tids) > 1:
        raise ValueError(f"a deletion must hold one topic id, got {len(tids)}")
    done = objects = counted = 0
    failed: dict[str, str] = {}
    left = collections.Counter(s.partition for b in plan_batches for s in b)  # planned segments not yet finished
    with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="s3-delete") as pool:
        for start in range(0, len(plan_batches), concurrency):
            window = plan_batches[start : start + concurrency]
            first = window[0][0]
            started = [s for b in window for s in b]
            rlmm.transition(started, SegmentState.DELETE_SEGMENT_STARTED, broker_id=broker_id, now_ms=now_ms())
            objects_of = {s.segment_id: _objects_of(s, rsm.prefix) for s in started}

            per_batch = [[objects_of[s.segment_id] for s in batch] for batch in window]
            outcomes = list(pool.map(functools.partial(_delete_batch, rsm), per_batch))
            finished: list[RemoteSegment] = []
            for batch, outcome in zip(window, outcomes, strict=True):
                failed.update(outcome.failed)
                objects += len(outcome.deleted)
                if crash_point is not None:  # the record names the batch: its segments are STARTED, objects gone
                    crash_points.reached(crash_point, functools.partial(_batch_detail, batch))
                finished += [s for s in batch if not any(k in outcome.failed for k in objects_of[s.segment_id].keys)]
            if settle_ms > 0:
                finished = _settled(finished, objects_of, rsm, failed, now_ms=now_ms, settle_ms=settle_ms, sleep=sleep)
            moved = rlmm.transition(
                finished, SegmentState.DELETE_SEGMENT_FINISHED, broker_id=broker_id, now_ms=now_ms()
            )
            done += len(finished)
            counted += len(moved)
            left.subtract(s.partition for s in finished)
            if on_partitions_done is not None and (
                ended := frozenset(s.partition for s in finished if not left[s.partition])
            ):
                on_partitions_done(ended)
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
    return DeleteResult(done, objects, failed, counted, frozenset(p for p, n in left.items() if n > 0))


def _batch_detail(batch: tuple[RemoteSegment, ...]) -> dict[str, object]:
    """What a crash point's record says of the batch it fired in: its segments' ids."""
    return {"segments": [str(s.segment_id) for s in batch]}


def _settled(
    finished: list[RemoteSegment],
    objects_of: Mapping[Uuid, _SegmentObjects],
    rsm: S3RemoteStorage,
    failed: dict[str, str],
    *,
    now_ms: Callable[[], int],
    settle_ms: int,
    sleep: Callable[[float], None],
) -> list[RemoteSegment]:
    """``finished`` once a write that was given up on can no longer land (module docstring): the recent unfinished
    ones' objects deleted again after their window, those whose second deletion failed left out (their keys in
    ``failed``)."""
    now = now_ms()
    recent = [s for s in finished if not s.copy_confirmed and s.event_timestamp_ms + settle_ms > now]
    if not recent:
        return finished
    due = max(s.event_timestamp_ms for s in recent) + settle_ms
    log.info("policy.delete_settling", topic_id=str(recent[0].topic_id), segments=len(recent), wait_ms=due - now)
    sleep(min(due - now, settle_ms) / 1000)
    outcome = _delete_batch(rsm, [objects_of[s.segment_id] for s in recent])
    failed.update(outcome.failed)
    log.info(
        "policy.delete_settled",
        topic_id=str(recent[0].topic_id),
        segments=len(recent),
        waited_ms=min(due - now, settle_ms),
        objects_deleted_again=len(outcome.deleted),
        failed=len(outcome.failed),
    )
    return [s for s in finished if not any(k in outcome.failed for k in objects_of[s.segment_id].keys)]
