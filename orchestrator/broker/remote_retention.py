"""A partition's retention on the broker that leads it: local retention, remote expiry, and the unfinished segments
a leader finishes by deleting them.

* Local retention: while tiering is on, ``local.retention.*`` apply (-2 inherits ``retention.*``, as in Kafka) and
  only segments already copied may go; otherwise ``retention.*`` apply and, with no live remote data below, the log
  start offset follows the local one (:func:`policies.retention.plan_local_retention`).
* Remote expiry (leader only): ``retention.ms`` / ``retention.bytes`` and the log start offset applied to the live
  remote segments, the log start offset moved first, so nothing expired is still served
  (:func:`policies.retention.plan_remote_expiry`, :func:`policies.retention_executor.execute_expiry_plan`).
* Unfinished segments (leader only, after expiry): deletions left at DELETE_SEGMENT_STARTED, and this broker's copies
  left at COPY_SEGMENT_STARTED once no write of them can land (begun by an earlier process of this broker, or
  ``abandoned_after_ms`` ago: the broker passes twice its RLMM writer's whole wait), are deleted, objects first
  (:func:`policies.retention.plan_unfinished`), as Kafka's expiration task retries dangling segments. Another
  broker's copy (an earlier leader's, killed or deposed mid-copy) is taken only ``abandoned_after_ms`` after it was
  written: until then it may still be uploading. A deletion that fails again is tried after another
  ``abandoned_after_ms``, so a segment that cannot be deleted (its recorded key outside its topic's prefix) is
  reported that often, not every pass.

Invariant: called for a partition only after its copy pass (the RemoteLogManager's ``tiering_pass``), whose copies
are sequential: no copy of this process is in flight for the partition while its unfinished segments are planned.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import structlog

from orchestrator.broker.local_log import PartitionLog
from orchestrator.ids import Uuid
from orchestrator.metadata.image import MetadataImage
from orchestrator.metadata.records import SegmentState, TieredState
from orchestrator.metadata.topic_configs import (
    LOCAL_RETENTION_BYTES,
    LOCAL_RETENTION_MS,
    RETENTION_BYTES,
    RETENTION_MS,
    int_or_default,
)
from policies.retention import LocalSegment, plan_local_retention, plan_remote_expiry, plan_unfinished
from policies.retention_executor import execute_expiry_plan
from remote_storage.deletion import DeleteResult, delete_segments
from remote_storage.rlmm import RemoteLogMetadataManager, RemoteSegment
from remote_storage.s3 import S3RemoteStorage

log = structlog.get_logger(__name__)

# A copy of this process left at COPY_SEGMENT_STARTED, or a deletion left at DELETE_SEGMENT_STARTED, this long is
# finished by deleting it; the broker passes twice its RLMM writer's whole wait.
DEFAULT_ABANDONED_AFTER_MS = 120_000


def copied_in_lineage(rlmm: RemoteLogMetadataManager, topic_id: Uuid, partition: int, plog: PartitionLog) -> int:
    """The highest offset a finished copy holds in this log's own leader-epoch lineage, deleted since or not."""
    lineage = [(e.epoch, e.start_offset) for e in plog.leader_epochs.entries]
    return rlmm.highest_copied_offset_in_lineage(topic_id, partition, lineage, plog.log_end_offset)


def copied_through(rlmm: RemoteLogMetadataManager, topic_id: Uuid, partition: int, plog: PartitionLog) -> int:
    """The highest offset of this log that is copied: in its own leader-epoch lineage (a copy of a predecessor's
    divergent tail does not count, KIP-405), what both copying and local retention go by.

    A copy deleted since, of records this log still holds (at or above both its log start and its local log
    start) and that no live segment holds, does not count: the delete policy removed it while the records stayed
    (they were not yet dropped locally), and the topic was tiered again since. Those records are copied again before
    local retention may drop them; counting the old copy would drop them with no copy anywhere. Retention's
    deletions are not such: their log start moved past them first."""
    highest = copied_in_lineage(rlmm, topic_id, partition, plog)
    held_from = max(plog.log_start_offset, plog.local_log_start_offset)
    deleted = rlmm.segments(
        topic_id, partition, states=(SegmentState.DELETE_SEGMENT_STARTED, SegmentState.DELETE_SEGMENT_FINISHED)
    )
    gone = [s for s in deleted if s.end_offset >= held_from and s.start_offset <= highest]
    if gone:
        live = rlmm.live_segments(topic_id, partition)
        gone = [s for s in gone if not covered(s.start_offset, s.end_offset, live)]
    return min([highest, *(s.start_offset - 1 for s in gone)])


def covered(start: int, end: int, live: Sequence[RemoteSegment]) -> bool:
    """Whether one of ``live`` holds every offset from ``start`` to ``end``."""
    return any(seg.start_offset <= start and end <= seg.end_offset for seg in live)


class PartitionRetention:
    def __init__(
        self,
        *,
        broker_id: int,
        rsm: S3RemoteStorage,
        rlmm: RemoteLogMetadataManager,
        logs: Mapping[tuple[Uuid, int], PartitionLog],
        image: Callable[[], MetadataImage],
        now_ms: Callable[[], int],
        abandoned_after_ms: int = DEFAULT_ABANDONED_AFTER_MS,
    ) -> None:
        self.broker_id = broker_id
        self.abandoned_after_ms = abandoned_after_ms
        self.rsm = rsm
        self.rlmm = rlmm
        self._logs = logs
        self._image = image
        self._now_ms = now_ms
        self._started_ms = now_ms()  # a copy this broker started before this process did is over
        self._unfinished_retry_at: dict[Uuid, int] = {}  # segment id -> when its failed deletion is tried again

    def expire_partition(self, topic_id: Uuid, partition: int, *, refresh: bool = True) -> DeleteResult:
        """Apply retention.ms / retention.bytes to this partition's remote segments, then finish its unfinished
        ones (leader only)."""
        image = self._image()
        topic = image.topics.get(topic_id)
        if topic is None:
            return DeleteResult()
        p = topic.partitions.get(partition)
        if p is None or p.leader != self.broker_id:
            return DeleteResult()
        configs = image.topic_configs(topic.name)
        plog = self._logs.get((topic_id, partition))
        if plog is None:
            return DeleteResult()  # closed meanwhile (this runs outside the broker's log lock)
        if refresh:
            self.rlmm.refresh()
        highest = copied_through(self.rlmm, topic_id, partition, plog)
        not_copied = plog.bytes_above(highest)
        plan = plan_remote_expiry(
            self.rlmm.segments(topic_id, partition),
            now_ms=self._now_ms(),
            retention_ms=int_or_default(configs, RETENTION_MS),
            retention_bytes=int_or_default(configs, RETENTION_BYTES),
            log_start_offset=plog.log_start_offset,
            local_bytes_not_copied=not_copied,
        )
        expired = execute_expiry_plan(
            plan,
            rsm=self.rsm,
            rlmm=self.rlmm,
            broker_id=self.broker_id,
            now_ms=self._now_ms,
            advance_log_start=plog.advance_log_start_offset,
        )
        self._finish_unfinished(topic_id, partition)
        return expired

    def _finish_unfinished(self, topic_id: Uuid, partition: int) -> None:
        """Delete the partition's unfinished segments (module docstring), whose objects would otherwise stay in the
        bucket for ever."""
        now = self._now_ms()
        unfinished = [
            s
            for s in plan_unfinished(
                self.rlmm.segments(topic_id, partition),
                broker_id=self.broker_id,
                now_ms=now,
                started_ms=self._started_ms,
                settle_ms=self.abandoned_after_ms,
            )
            if self._unfinished_retry_at.get(s.segment_id, 0) <= now
        ]
        if not unfinished:
            return
        for seg in unfinished:
            where = {"topic_id": str(topic_id), "partition": partition, "segment_id": str(seg.segment_id)}
            log.warning(
                "rlm.unfinished_segment_deleted", **where, state=seg.state.name, written_ms=seg.event_timestamp_ms
            )
        result = delete_segments(
            unfinished, rsm=self.rsm, rlmm=self.rlmm, broker_id=self.broker_id, now_ms=self._now_ms
        )
        for seg in unfinished:  # tried again after another abandoned_after_ms if it failed, else forgotten
            if result.complete:
                self._unfinished_retry_at.pop(seg.segment_id, None)
            else:
                self._unfinished_retry_at[seg.segment_id] = now + self.abandoned_after_ms
        if not result.complete:
            log.error("rlm.cleanup_incomplete", failed=dict(result.failed_keys))

    def apply_local_retention(self, topic_id: Uuid, partition: int, *, refresh: bool = True) -> int:
        """Drop expired closed local segments (module docstring); returns how many."""
        image = self._image()
        topic = image.topics.get(topic_id)
        plog = self._logs.get((topic_id, partition))
        if topic is None or plog is None:
            return 0
        configs = image.topic_configs(topic.name)
        retention_ms = int_or_default(configs, RETENTION_MS)
        retention_bytes = int_or_default(configs, RETENTION_BYTES)
        tiering = topic.tiered_state == TieredState.ENABLED
        if tiering:
            local_ms = int_or_default(configs, LOCAL_RETENTION_MS)
            local_bytes = int_or_default(configs, LOCAL_RETENTION_BYTES)
            retention_ms = retention_ms if local_ms == -2 else local_ms
            retention_bytes = retention_bytes if local_bytes == -2 else local_bytes
        if refresh:
            self.rlmm.refresh()
        closed = [
            LocalSegment(s.base_offset, s.end_offset, s.size_bytes, s.max_timestamp_ms) for s in plog.closed_segments()
        ]
        cut = plan_local_retention(
            closed,
            now_ms=self._now_ms(),
            retention_ms=retention_ms,
            retention_bytes=retention_bytes,
            tiering_enabled=tiering,
            highest_copied_offset=copied_through(self.rlmm, topic_id, partition, plog),
            active_bytes=plog.active_segment_bytes(),
        )
        dropped = plog.delete_local_segments_before(cut)
        if dropped and not self.rlmm.live_segments(topic_id, partition):
            plog.advance_log_start_offset(plog.local_log_start_offset)
        return len(dropped)
