"""Retention's planners: which remote segments expire now, and where local retention cuts the local log.

Pure: every function takes ``now_ms`` and the state it needs and returns a result; nothing reads a clock or does
I/O. :mod:`policies.retention_executor` applies an expiry plan; the broker's RemoteLogManager applies the local cut.

Invariants (Kafka's RemoteLogManager rules):
* retain: nothing is deleted except by retention expiry; expiry deletes a segment only when it lies wholly
  past ``retention.ms``, wholly below the log start offset, or is among the oldest that must go for the
  partition to fit ``retention.bytes``. -1 means unlimited. Segments expire oldest first: the first survivor keeps
  every later one.
* Local retention, while tiering is on, drops only segments already copied (end offset <= highest copied).
* Unfinished segments (:func:`plan_unfinished`) are finished by deleting them, as Kafka's expiration task retries
  dangling segments: a deletion left at DELETE_SEGMENT_STARTED, and a copy this broker started and abandoned (left at
  COPY_SEGMENT_STARTED: the broker was killed between its upload and its COPY_SEGMENT_FINISHED, or the write of one
  of its records went unanswered). A copy is abandoned only when no write of it can still land: it was started
  before this broker process started (its copies are sequential per partition, so an earlier process's copy is
  over), or longer ago than ``settle_ms`` (at least the RLMM writer's whole wait). Another broker's copy (only a
  leader copies, so that broker led an earlier term: killed or deposed mid-copy) is taken only once ``settle_ms``
  has passed since it was written: until then it may still be uploading, and deleting a copy whose
  COPY_SEGMENT_FINISHED lands meanwhile would drop data that local retention then drops too. After it, a late
  COPY_SEGMENT_FINISHED cannot land: the controller appends no record that moves a segment's state back.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from orchestrator.metadata.records import SegmentState
from remote_storage.rlmm import RemoteSegment


@dataclass(frozen=True, slots=True)
class ExpiryPlan:
    expired: tuple[RemoteSegment, ...]
    log_start_offset: int  # the partition's log start offset after expiry (never lower than before)
    reasons: Mapping[str, int]  # reason -> number of segments: "retention.ms", "retention.bytes", "log_start"


def plan_remote_expiry(
    segments: Sequence[RemoteSegment],
    *,
    now_ms: int,
    retention_ms: int,
    retention_bytes: int,
    log_start_offset: int,
    local_bytes_not_copied: int = 0,
) -> ExpiryPlan:
    """Remote segments of one partition that retention deletes now.

    ``local_bytes_not_copied`` is the size of the local log above the highest copied offset: Kafka counts the
    whole log (remote plus not-yet-tiered local data) against ``retention.bytes``.
    """
    live = sorted((s for s in segments if s.state == SegmentState.COPY_SEGMENT_FINISHED), key=lambda s: s.start_offset)
    expired: list[RemoteSegment] = []
    reasons = {"log_start": 0, "retention.ms": 0, "retention.bytes": 0}
    total = sum(s.size_bytes for s in live) + local_bytes_not_copied
    for seg in live:
        if seg.end_offset < log_start_offset:
            reason = "log_start"
        elif retention_ms >= 0 and seg.max_timestamp_ms < now_ms - retention_ms:
            reason = "retention.ms"
        elif retention_bytes >= 0 and total > retention_bytes:
            reason = "retention.bytes"
        else:
            break  # segments are expired oldest first; the first survivor keeps everything after it
        expired.append(seg)
        reasons[reason] += 1
        total -= seg.size_bytes
    new_start = log_start_offset
    if expired:
        new_start = max(new_start, expired[-1].end_offset + 1)
    return ExpiryPlan(tuple(expired), new_start, {k: v for k, v in reasons.items() if v})


@dataclass(frozen=True, slots=True)
class LocalSegment:
    base_offset: int
    end_offset: int
    size_bytes: int
    max_timestamp_ms: int


def plan_local_retention(
    closed: Sequence[LocalSegment],
    *,
    now_ms: int,
    retention_ms: int,
    retention_bytes: int,
    tiering_enabled: bool,
    highest_copied_offset: int,
    active_bytes: int = 0,
) -> int:
    """The offset below which closed local segments may be dropped (the first kept segment's base offset).

    With tiering on, ``retention_*`` are ``local.retention.*`` and only copied segments may go; with tiering
    off they are ``retention.*`` and the data is simply expired.
    """
    ordered = sorted(closed, key=lambda s: s.base_offset)
    total = sum(s.size_bytes for s in ordered) + active_bytes
    cut = ordered[0].base_offset if ordered else 0
    for seg in ordered:
        if tiering_enabled and seg.end_offset > highest_copied_offset:
            break
        too_old = retention_ms >= 0 and seg.max_timestamp_ms < now_ms - retention_ms
        too_big = retention_bytes >= 0 and total > retention_bytes
        if not (too_old or too_big):
            break
        total -= seg.size_bytes
        cut = seg.end_offset + 1
    return cut


def plan_unfinished(
    segments: Sequence[RemoteSegment], *, broker_id: int, now_ms: int, started_ms: int, settle_ms: int
) -> tuple[RemoteSegment, ...]:
    """The partition's segments its leader ``broker_id`` finishes by deleting them (module docstring), in offset
    order: deletions that did not finish and copies this broker abandoned, each last written before ``started_ms``
    (this broker process's start) or ``settle_ms`` or more before ``now_ms``; and copies another broker left at
    COPY_SEGMENT_STARTED ``settle_ms`` or more before ``now_ms`` (only a leader copies, so that broker led an earlier
    term: once its writer's whole wait has passed, nothing it still sends can land after the deletion)."""

    def settled(seg: RemoteSegment) -> bool:
        return seg.event_timestamp_ms <= now_ms - settle_ms

    def mine_settled(seg: RemoteSegment) -> bool:
        return seg.event_timestamp_ms < started_ms or settled(seg)

    def unfinished(s: RemoteSegment) -> bool:
        if s.state == SegmentState.DELETE_SEGMENT_STARTED:
            return mine_settled(s)
        if s.state == SegmentState.COPY_SEGMENT_STARTED:
            return mine_settled(s) if s.broker_id == broker_id else settled(s)
        return False

    return tuple(sorted((s for s in segments if unfinished(s)), key=lambda s: s.start_offset))
