"""The broker's RemoteLogManager: copy closed segments to S3, expire them by retention, fetch across tiers.

Copy (leader only, topic ENABLED): for each closed local segment above the highest copied offset, in order:
RLMM COPY_SEGMENT_STARTED at the topic's current tiered epoch (the store's fence refuses it if the epoch moved),
upload ``.log``, ``.indexes``, ``.rsm-manifest`` in Aiven's format (:meth:`S3RemoteStorage.copy_segment`: the five
indexes are the segment's offset and time indexes, the producer snapshot at its end and the leader-epoch cache cut
at its end, from the local log; the manifest's segment metadata is the RLMM entry's, with the segment's own leader
epochs), then RLMM COPY_SEGMENT_FINISHED with the custom metadata the upload returned (fenced again). A copy
refused at start uploads nothing. A copy that fails, or whose finish is refused because the topic was disabled
meanwhile (a zombie upload), has its objects deleted and its RLMM entry moved to DELETE_SEGMENT_FINISHED, so
nothing of it stays behind or is ever served (ARCHITECTURE §4 invariant 3). The same holds when the copy's topic is
deleted meanwhile: its finish is refused (the store's fence: the topic id is gone; the RLMM's: the partition is
marked for deletion), and if the partition's deletion already deleted the segment (its objects may have been
uploaded after that), the copier deletes the objects it uploaded itself, with no journal entry left to write.

A copy whose RLMM write goes unanswered (RequestTimedOut and the like: the record may have landed) ends the pass
with that error but is not undone: undoing a segment whose COPY_SEGMENT_FINISHED landed would leave the RLMM holding
the range as copied with its objects gone, and local retention would then drop it locally too. What such copies
leave is finished by the leader's expiry pass (:mod:`orchestrator.broker.remote_retention`).

Retention (local, and remote expiry) is :class:`~orchestrator.broker.remote_retention.PartitionRetention`'s; a pass
runs it after the partition's copies.

Copy lag (Kafka's RemoteCopyLagSegments/Bytes): from the start of each copy pass and after each segment copied,
the closed local segments of the partition that are still not remote (so an upload stuck on S3 shows as lag), kept
per partition while it may copy (its topic ENABLED, led here) and read by the metrics
(:meth:`RemoteLogManager.copy_lag`); :meth:`RemoteLogManager.retain_copy_lag` forgets partitions no longer led.

Copy state (what ``tiering status`` shows, through the broker's heartbeats): the upload in flight of each partition,
from the moment its objects start going up (the injected clock) until the copy ends, said as the segment and the
S3 object it goes to, and stalled once in flight for ``copy_stall_threshold_ms``; and the error that failed the
partition's last copy pass with the count of passes failed in a row, kept until a pass ends without one
(:meth:`RemoteLogManager.copy_states`). An S3 that hangs shows first as a stalled upload, then, once the S3 client's
timeouts and retries end it, as the pass's error.

``stop_partitions(topic_id, tiered_epoch)`` (KIP-950's RemoteLogManager#stopPartitions): from then on no copy of
that topic starts below that epoch's successor, and the call returns only when every copy in flight for the
topic has finished or been cleaned up.

Reads (KIP-405's RemoteLogReader, for Fetch and ListOffsets): offsets at or above the local log start offset come
from the local log; offsets from the log start offset up to there come from the live remote segment that holds
them, as the same record batches the local log held, read by ranges (:mod:`remote_storage.remote_segments`: the
manifest once, then only the chunks that hold the bytes, through the chunk cache), positioned by the segment's
remote offset index, about ``max_bytes`` at a time; anything below the log start offset is OFFSET_OUT_OF_RANGE. A
timestamp lookup searches the live remote segments (by their max timestamps) before the local log, each from where
its remote time index says (a segment of the landed format, without one, from its start), so it finds the first
record at or after the timestamp in either tier reading about an index interval per segment.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace

import structlog

from orchestrator import crash_points
from orchestrator.broker.local_log import PartitionLog, SegmentInfo
from orchestrator.broker.log_reads import (
    Record,
    find_timestamp,
    index_entries,
    position_before,
    read_batches,
    records_from,
    time_index_entries,
    timestamp_search_position,
)
from orchestrator.broker.remote_retention import (
    DEFAULT_ABANDONED_AFTER_MS,
    PartitionRetention,
    copied_in_lineage,
    copied_through,
    covered,
)
from orchestrator.errors import (
    InvalidRequest,
    KafkaError,
    KafkaStorageError,
    MissingCredentialsError,
    OffsetOutOfRange,
    RemoteStorageError,
    StaleTieredEpoch,
)
from orchestrator.ids import Uuid
from orchestrator.metadata.image import MetadataImage, TopicImage
from orchestrator.metadata.records import TieredState
from remote_storage.deletion import DeleteResult, delete_segments
from remote_storage.keys import Suffix
from remote_storage.remote_segments import RemoteSegmentReader
from remote_storage.rlmm import RemoteLogMetadataManager, RemoteSegment
from remote_storage.s3 import S3RemoteStorage
from remote_storage.segment_format.kafka_metadata import RemoteLogSegmentMetadata
from remote_storage.segment_format.segment_indexes import IndexType, SegmentIndexFiles

log = structlog.get_logger(__name__)

PartitionKey = tuple[Uuid, int]
_COPIED, _REFUSED = object(), object()  # what a segment's copy came to, when it did not fail


@dataclass(frozen=True, slots=True)
class CopyResult:
    copied: int = 0
    aborted: int = 0  # refused at start by the fence, or cleaned up after a failed/zombie upload
    failure: Exception | None = None  # what failed the copy that ended the pass (None: copied all, or refused)


@dataclass(frozen=True, slots=True)
class ReadResult:
    """The record batches a fetch returns (whole batches, possibly from below the offset) and the tier they came
    from."""

    records: bytes
    remote: bool


@dataclass(frozen=True, slots=True)
class PartitionCopyState:
    """A partition's copying as :meth:`RemoteLogManager.copy_states` reports it: an upload in flight since
    ``in_flight_since_ms`` (-1: none), and the error of its last copy pass (None: the last pass ended without one)."""

    in_flight_since_ms: int = -1
    in_flight: str | None = None  # "upload of segment 0-99 of orders-0 to s3://bucket/key"
    stalled: bool = False  # in flight for the stall threshold or longer
    last_error: str | None = None
    last_error_ms: int = -1
    failed_passes: int = 0  # consecutive copy passes that failed


DEFAULT_COPY_STALL_THRESHOLD_MS = 30_000  # the S3 client's default read timeout: one request may take that long


@dataclass(frozen=True, slots=True)
class PartitionCopyLag:
    """Closed local segments of a partition not copied yet, as the last copy pass left them."""

    segments: int
    bytes: int


# An RLMM write answered with one of these wrote nothing: the copy can be undone at once.
_REFUSALS = (StaleTieredEpoch, InvalidRequest, KafkaStorageError)


class RemoteLogManager:
    def __init__(
        self,
        *,
        broker_id: int,
        rsm: S3RemoteStorage,
        rlmm: RemoteLogMetadataManager,
        logs: Mapping[PartitionKey, PartitionLog],
        image: Callable[[], MetadataImage],
        now_ms: Callable[[], int],
        reader: RemoteSegmentReader | None = None,
        copy_stall_threshold_ms: int = DEFAULT_COPY_STALL_THRESHOLD_MS,
        abandoned_after_ms: int = DEFAULT_ABANDONED_AFTER_MS,
    ) -> None:
        self.broker_id = broker_id
        self.copy_stall_threshold_ms = copy_stall_threshold_ms
        self.rsm = rsm
        self.reader = reader if reader is not None else RemoteSegmentReader(rsm)
        self.rlmm = rlmm
        self._logs = logs
        self._image = image
        self._now_ms = now_ms
        self._cond = threading.Condition()
        self._in_flight: dict[Uuid, int] = {}
        self._stopped_at: dict[Uuid, int] = {}  # topic id -> the tiered epoch it was stopped at
        self._copy_lag: dict[PartitionKey, PartitionCopyLag] = {}  # under _cond: the metrics read it from their thread
        self._copy_states: dict[PartitionKey, PartitionCopyState] = {}  # under _cond: the heartbeat reads it
        self.retention = PartitionRetention(
            broker_id=broker_id,
            rsm=rsm,
            rlmm=rlmm,
            logs=logs,
            image=image,
            now_ms=now_ms,
            abandoned_after_ms=abandoned_after_ms,
        )

    # -- copy -------------------------------------------------------------------------------------------------

    def _may_copy(self, topic: TopicImage, partition: int) -> bool:
        p = topic.partitions.get(partition)
        return (
            topic.tiered_state == TieredState.ENABLED
            and topic.tiered_epoch > self._stopped_at.get(topic.topic_id, -1)
            and p is not None
            and p.leader == self.broker_id
        )

    def copy_partition(
        self, topic_id: Uuid, partition: int, *, refresh: bool = True, high_watermark: int | None = None
    ) -> CopyResult:
        """Copy every closed segment of this partition that is not yet remote. One caller per partition.
        ``refresh=False`` skips re-reading the RLMM (a periodic pass refreshes once for all partitions).
        ``high_watermark``: only segments wholly below it are copied (never a record not every in-sync replica has:
        a new leader may not have it, KIP-405); None: the log end offset (a closed segment always is below it)."""
        copied = aborted = 0
        failure: Exception | None = None
        plog = self._logs.get((topic_id, partition))
        if plog is None:
            return CopyResult()  # closed since the pass began: its topic was deleted
        if refresh:
            self.rlmm.refresh()
        highest = copied_through(self.rlmm, topic_id, partition, plog)
        upto = high_watermark if high_watermark is not None else plog.log_end_offset
        # Copying again what a deleted copy held (copied_through), a segment a live copy holds is not copied twice;
        # above the lineage's own copies nothing is skipped (a divergent predecessor's copy is copied over, KIP-405).
        redo_until = copied_in_lineage(self.rlmm, topic_id, partition, plog)
        live = self.rlmm.live_segments(topic_id, partition) if redo_until > highest else []
        behind = [
            seg
            for seg in plog.closed_segments()
            if highest < seg.end_offset < upto
            and not (seg.end_offset <= redo_until and covered(seg.base_offset, seg.end_offset, live))
        ]
        self._record_copy_lag(topic_id, partition, behind)  # what is owed shows while an upload is stuck
        for seg in behind:
            topic = self._image().topics.get(topic_id)
            with self._cond:
                if topic is None or not self._may_copy(topic, partition):
                    break
                self._in_flight[topic_id] = self._in_flight.get(topic_id, 0) + 1
            try:
                outcome = self._copy_segment(topic, partition, plog, seg)
                if outcome is _COPIED:
                    copied += 1
                    self._record_copy_lag(topic_id, partition, behind[copied:])
                else:
                    aborted += 1
                    failure = outcome if isinstance(outcome, Exception) else None
                    break
            finally:
                with self._cond:
                    self._in_flight[topic_id] -= 1
                    self._cond.notify_all()
                self._update_copy_state(
                    topic_id, partition, lambda s: replace(s, in_flight_since_ms=-1, in_flight=None)
                )
        if behind:  # else the lag recorded above stands
            self._record_copy_lag(topic_id, partition, behind[copied:])
        self._record_pass_outcome(topic_id, partition, failure)
        return CopyResult(copied, aborted, failure)

    def _update_copy_state(
        self, topic_id: Uuid, partition: int, change: Callable[[PartitionCopyState], PartitionCopyState]
    ) -> None:
        """Apply ``change`` to the partition's copy state; a state with nothing to say is forgotten."""
        with self._cond:
            key = (topic_id, partition)
            state = change(self._copy_states.get(key, PartitionCopyState()))
            if state == PartitionCopyState():
                self._copy_states.pop(key, None)
            else:
                self._copy_states[key] = state

    def _record_pass_outcome(self, topic_id: Uuid, partition: int, failure: Exception | None) -> None:
        """The pass's error (its count in a row grows), or none: the partition's copying is keeping up again."""
        if failure is None:
            with self._cond:
                if (topic_id, partition) not in self._copy_states:
                    return  # no state: no error to clear (the common pass, thousands a round)
            self._update_copy_state(
                topic_id, partition, lambda s: replace(s, last_error=None, last_error_ms=-1, failed_passes=0)
            )
            return
        error, now = f"{type(failure).__name__}: {failure}", self._now_ms()
        self._update_copy_state(
            topic_id,
            partition,
            lambda s: replace(s, last_error=error, last_error_ms=now, failed_passes=s.failed_passes + 1),
        )

    def copy_states(self) -> dict[PartitionKey, PartitionCopyState]:
        """Each partition whose upload is in flight or whose last copy pass failed (any thread); an upload in flight
        for ``copy_stall_threshold_ms`` or longer is marked stalled."""
        now = self._now_ms()
        with self._cond:
            states = dict(self._copy_states)
        return {
            key: replace(
                s, stalled=s.in_flight_since_ms >= 0 and now - s.in_flight_since_ms >= self.copy_stall_threshold_ms
            )
            for key, s in states.items()
        }

    def _record_copy_lag(self, topic_id: Uuid, partition: int, left: list[SegmentInfo]) -> None:
        """The copy lag of a partition after a pass: the segments it left behind, while the partition may copy."""
        topic = self._image().topics.get(topic_id)
        with self._cond:
            if topic is not None and self._may_copy(topic, partition):
                lag = PartitionCopyLag(len(left), sum(s.size_bytes for s in left))
                self._copy_lag[(topic_id, partition)] = lag
            else:
                self._copy_lag.pop((topic_id, partition), None)

    def copy_lag(self) -> dict[PartitionKey, PartitionCopyLag]:
        """Each copying partition's lag as its last copy pass left it (any thread)."""
        with self._cond:
            return dict(self._copy_lag)

    def retain_copy_lag(self, partitions: Iterable[PartitionKey]) -> None:
        """Forget the copy lag and copy state of every partition but ``partitions`` (those this broker still leads)."""
        keep = set(partitions)
        with self._cond:
            for key in [k for k in self._copy_lag if k not in keep]:
                del self._copy_lag[key]
            for key in [k for k in self._copy_states if k not in keep]:
                del self._copy_states[key]

    def _copy_segment(self, topic: TopicImage, partition: int, plog: PartitionLog, seg: SegmentInfo) -> object:
        """Copy one segment: :data:`_COPIED`, :data:`_REFUSED` (the fence refused its start: nothing uploaded), or
        the exception that failed it (after its clean-up). The log may be closed meanwhile (its topic deleted): its
        files, moved aside, then fail the copy (OSError), which is cleaned up as any failed copy."""
        epochs = tuple((e.epoch, e.start_offset) for e in plog.segment_leader_epochs(seg.base_offset, seg.end_offset))
        remote = RemoteSegment(
            topic=topic.name,
            topic_id=topic.topic_id,
            partition=partition,
            segment_id=Uuid.random(),
            start_offset=seg.base_offset,
            end_offset=seg.end_offset,
            max_timestamp_ms=seg.max_timestamp_ms,
            size_bytes=seg.size_bytes,
            tiered_epoch=topic.tiered_epoch,
            broker_id=self.broker_id,
            leader_epoch=epochs[0][0] if epochs else 0,
            leader_epochs=epochs,
        )
        where = {"topic_id": str(topic.topic_id), "partition": partition, "segment_id": str(remote.segment_id)}
        try:
            remote = self.rlmm.copy_started(remote, now_ms=self._now_ms())
        except StaleTieredEpoch as exc:
            log.info("rlm.copy_refused", topic_id=str(topic.topic_id), partition=partition, reason=str(exc))
            return _REFUSED
        except _REFUSALS as exc:  # the controller refused it: nothing written, nothing uploaded
            log.warning("rlm.copy_aborted", **where, reason=str(exc))
            return exc
        except (KafkaError, OSError) as exc:  # unanswered: COPY_SEGMENT_STARTED may have landed
            log.warning("rlm.copy_unconfirmed", **where, record="COPY_SEGMENT_STARTED", reason=str(exc))
            return exc
        target = f"s3://{self.rsm.bucket}/{remote.object_keys(self.rsm.prefix)[Suffix.LOG]}"
        what = f"upload of segment {seg.base_offset}-{seg.end_offset} of {topic.name}-{partition} to {target}"
        since = self._now_ms()
        self._update_copy_state(
            topic.topic_id, partition, lambda s: replace(s, in_flight_since_ms=since, in_flight=what)
        )
        try:
            uploaded = self.rsm.copy_segment(
                remote.key,
                log_file=seg.log_path,
                index_files=self._index_files(plog, seg),
                metadata=_segment_metadata(remote),
                tiered_epoch=topic.tiered_epoch,
            )
            remote = replace(remote, custom_metadata=uploaded.custom_metadata)
            crash_points.reached("broker.after_upload_before_rlmm")
        except (RemoteStorageError, MissingCredentialsError, OSError) as exc:  # the upload failed
            log.warning("rlm.copy_aborted", **where, reason=str(exc))
            self._clean_up(remote)
            return exc
        try:
            self.rlmm.copy_finished(remote, broker_id=self.broker_id, now_ms=self._now_ms())
        except _REFUSALS as exc:  # refused, nothing written (InvalidRequest: the segment was deleted under the copy)
            log.warning("rlm.copy_aborted", **where, reason=str(exc))
            self._clean_up(remote)
            return exc
        except (KafkaError, OSError) as exc:  # unanswered: COPY_SEGMENT_FINISHED may have landed, or may yet
            # Undoing the copy now could delete a segment the RLMM then holds as copied, which local retention would
            # take as safe to drop locally: it is left at COPY_SEGMENT_STARTED, or finished, as the write went. The
            # next pass copies the range again if it did not land, and the unfinished segment is deleted once no
            # write of it can land any more (_finish_unfinished).
            log.warning("rlm.copy_unconfirmed", **where, record="COPY_SEGMENT_FINISHED", reason=str(exc))
            return exc
        where = {"topic_id": str(topic.topic_id), "partition": partition}
        offsets = {"start_offset": seg.base_offset, "end_offset": seg.end_offset}
        log.info("rlm.segment_copied", **where, **offsets, tiered_epoch=topic.tiered_epoch)
        return _COPIED

    @staticmethod
    def _index_files(plog: PartitionLog, seg: SegmentInfo) -> SegmentIndexFiles:
        """The five indexes of a closed local segment, as a RemoteStorageManager uploads them (no transaction index:
        we serve no transactions, and Aiven writes an absent one as ``"transaction": null``)."""
        return SegmentIndexFiles(
            offset=seg.index_path.read_bytes(),
            timestamp=seg.time_index_path.read_bytes(),
            producer_snapshot=seg.producer_snapshot_path.read_bytes(),
            leader_epoch=plog.leader_epoch_checkpoint(seg.end_offset),
            transaction=None,
        )

    def _clean_up(self, remote: RemoteSegment) -> None:
        self.rlmm.refresh()
        current = next(
            (s for s in self.rlmm.segments(remote.topic_id, remote.partition) if s.segment_id == remote.segment_id),
            None,
        )
        if current is not None and current.deleted:
            # Deleted in the RLMM already (its topic's deletion got there first): only the objects this copy may
            # have uploaded since are left, and there is no journal entry to write for them.
            keys = list(remote.object_keys(self.rsm.prefix).values())
            within = remote.objects_topic_prefix(self.rsm.prefix)
            try:
                outcome = self.rsm.delete_keys(keys, within_prefix=within)
            except (RemoteStorageError, MissingCredentialsError) as exc:
                log.error("rlm.cleanup_incomplete", segment_id=str(remote.segment_id), failed={"*": str(exc)})
                return
            if outcome.failed:
                log.error("rlm.cleanup_incomplete", segment_id=str(remote.segment_id), failed=dict(outcome.failed))
            return
        result = delete_segments([remote], rsm=self.rsm, rlmm=self.rlmm, broker_id=self.broker_id, now_ms=self._now_ms)
        if not result.complete:
            # The segment stays DELETE_SEGMENT_STARTED in the RLMM; the delete policy or the scan finds it.
            log.error("rlm.cleanup_incomplete", segment_id=str(remote.segment_id), failed=dict(result.failed_keys))

    def stop_partitions(self, topic_id: Uuid, *, tiered_epoch: int, timeout_s: float = 300.0) -> bool:
        """Stop copies of the topic below ``tiered_epoch`` + 1 and wait for those in flight; False on timeout."""
        with self._cond:
            self._stopped_at[topic_id] = max(self._stopped_at.get(topic_id, -1), tiered_epoch)
            return self._cond.wait_for(lambda: self._in_flight.get(topic_id, 0) == 0, timeout=timeout_s)

    def tiering_pass(self, topic_id: Uuid, partition: int, *, roll: bool = True) -> None:
        """One periodic round for a partition this broker leads: roll by time, copy, local retention, expiry.
        The caller refreshes the RLMM once per round over all partitions. A copy that failed (S3, the store, the
        disk) is raised once the round is done, so the caller backs the partition off as every failing loop is
        (the broker's per-partition :class:`~orchestrator.supervision.RetryBackoff`), not retried every round."""
        plog = self._logs[(topic_id, partition)]
        if roll:
            plog.maybe_roll_by_time()
        copied = self.copy_partition(topic_id, partition, refresh=False)
        self.trim_and_expire(topic_id, partition)
        if copied.failure is not None:  # after retention and expiry, which do not depend on it: the caller backs off
            raise copied.failure

    def local_pass(self, topic_id: Uuid, partition: int) -> None:
        """The whole periodic round of a partition of a never-tiered topic (``NOT_TIERED``): roll by time, then local
        retention. It has nothing to copy and no remote segment to expire: a topic leaves ``NOT_TIERED`` for good when
        it is first enabled, and only an enabled topic's segments are copied. So its round is one thread hop under
        the caller's log lock, where a tiering partition's takes four (:meth:`tiering_pass`'s steps)."""
        plog = self._logs.get((topic_id, partition))
        if plog is None:
            return  # closed since the round began: its topic was deleted
        plog.maybe_roll_by_time()
        self.apply_local_retention(topic_id, partition, refresh=False)

    def trim_and_expire(self, topic_id: Uuid, partition: int) -> None:
        """A pass's end: local retention, then remote expiry (the RLMM as the pass's caller refreshed it)."""
        self.apply_local_retention(topic_id, partition, refresh=False)
        self.expire_partition(topic_id, partition, refresh=False)

    def copies_in_flight(self, topic_id: Uuid) -> int:
        with self._cond:
            return self._in_flight.get(topic_id, 0)

    # -- retention (remote_retention.py) ------------------------------------------------------------------

    def expire_partition(self, topic_id: Uuid, partition: int, *, refresh: bool = True) -> DeleteResult:
        return self.retention.expire_partition(topic_id, partition, refresh=refresh)

    def apply_local_retention(self, topic_id: Uuid, partition: int, *, refresh: bool = True) -> int:
        return self.retention.apply_local_retention(topic_id, partition, refresh=refresh)

    # -- reads ----------------------------------------------------------------------------------------------

    def producer_snapshot(self, seg: RemoteSegment) -> bytes | None:
        """The producer snapshot uploaded with ``seg`` (None: it has none); a lost log is rebuilt with it."""
        return self.reader.index(seg, IndexType.PRODUCER_SNAPSHOT)

    def read(self, topic_id: Uuid, partition: int, offset: int, *, max_bytes: int = 1024 * 1024) -> ReadResult:
        """The record batches a fetch at ``offset`` returns, from the local log or the remote tier."""
        planned = self.read_local_or_locate(topic_id, partition, offset, max_bytes=max_bytes)
        return planned if isinstance(planned, ReadResult) else self.read_remote(planned, offset, max_bytes=max_bytes)

    def read_local_or_locate(
        self, topic_id: Uuid, partition: int, offset: int, *, max_bytes: int = 1024 * 1024
    ) -> ReadResult | RemoteSegment:
        """A read's first step, which needs the log: the local batches at ``offset``, or the live remote segment
        that holds it (read by :meth:`read_remote`, which needs no log: a caller holding a lock over the logs
        releases it first, so a slow S3 holds up nothing else)."""
        plog = self._logs[(topic_id, partition)]
        if offset >= plog.local_log_start_offset:
            return ReadResult(plog.read_batches(offset, max_bytes=max_bytes), remote=False)
        if offset < plog.log_start_offset:
            raise OffsetOutOfRange(f"offset {offset} is below the log start offset {plog.log_start_offset}")
        self.rlmm.refresh()
        for seg in self.rlmm.live_segments(topic_id, partition):
            if seg.start_offset <= offset <= seg.end_offset:
                return seg
        raise OffsetOutOfRange(f"offset {offset} is in no live remote segment of {topic_id}-{partition}")

    def read_remote(self, seg: RemoteSegment, offset: int, *, max_bytes: int = 1024 * 1024) -> ReadResult:
        """The record batches at ``offset`` of a remote segment :meth:`read_local_or_locate` found."""
        return ReadResult(self._read_remote(seg, offset, max_bytes), remote=True)

    def fetch(self, topic_id: Uuid, partition: int, offset: int, *, max_bytes: int = 1024 * 1024) -> list[Record]:
        """The records of :meth:`read`, decoded, from ``offset`` on (tools and tests)."""
        return records_from(self.read(topic_id, partition, offset, max_bytes=max_bytes).records, offset)

    def _read_remote(self, seg: RemoteSegment, offset: int, max_bytes: int) -> bytes:
        try:
            index = self.reader.index(seg, IndexType.OFFSET) or b""
        except RemoteStorageError:
            index = b""  # read from the segment's start: slower, still right

        def ranged(position: int, length: int) -> bytes:
            return self.reader.read(seg, position, length)

        position = position_before(index_entries(index, seg.start_offset), offset)
        return read_batches(ranged, position, seg.size_bytes, offset, max_bytes)

    def _remote_below_local(self, topic_id: Uuid, partition: int) -> list[RemoteSegment]:
        """The live remote segments holding offsets from the log start offset up to the local log start offset."""
        plog = self._logs[(topic_id, partition)]
        self.rlmm.refresh()
        return [
            seg
            for seg in self.rlmm.live_segments(topic_id, partition)
            if seg.end_offset >= plog.log_start_offset and seg.start_offset < plog.local_log_start_offset
        ]

    def highest_tiered_offset(self, topic_id: Uuid, partition: int) -> int:
        """The last offset the remote tier holds now (live segments only: none after a delete policy), -1 when
        none (ListOffsets' latest-tiered, KIP-1005)."""
        self.rlmm.refresh()
        return max((seg.end_offset for seg in self.rlmm.live_segments(topic_id, partition)), default=-1)

    def _remote_offset_for_timestamp(self, seg: RemoteSegment, timestamp_ms: int) -> tuple[int, int] | None:
        """The first record of a remote segment whose timestamp is at least ``timestamp_ms``, searched from where the
        segment's remote time index says (from its start without one)."""
        position = 0
        time_index = self.reader.index(seg, IndexType.TIMESTAMP)
        if time_index:
            offsets = index_entries(self.reader.index(seg, IndexType.OFFSET) or b"", seg.start_offset)
            position = timestamp_search_position(
                time_index_entries(time_index, seg.start_offset), offsets, timestamp_ms
            )

        def ranged(at: int, length: int) -> bytes:
            return self.reader.read(seg, at, length)

        return find_timestamp(ranged, position, seg.size_bytes, timestamp_ms)

    def offset_for_timestamp(self, topic_id: Uuid, partition: int, timestamp_ms: int) -> tuple[int, int] | None:
        """``(offset, timestamp)`` of the first record at or above the log start offset whose timestamp is at least
        ``timestamp_ms``, in either tier; None when there is none."""
        plog = self._logs[(topic_id, partition)]
        for seg in self._remote_below_local(topic_id, partition):
            if seg.max_timestamp_ms >= timestamp_ms:
                found = self._remote_offset_for_timestamp(seg, timestamp_ms)
                if found is not None and found[0] >= plog.log_start_offset:
                    return found
        return plog.offset_for_timestamp(timestamp_ms)

    def max_timestamp(self, topic_id: Uuid, partition: int) -> tuple[int, int] | None:
        """``(offset, timestamp)`` of the first record carrying the largest timestamp, in either tier."""
        plog = self._logs[(topic_id, partition)]
        local = plog.max_timestamp()
        remote = self._remote_below_local(topic_id, partition)
        best = max(remote, key=lambda seg: seg.max_timestamp_ms, default=None)
        if best is None or (local is not None and local[1] > best.max_timestamp_ms):
            return local
        return self._remote_offset_for_timestamp(best, best.max_timestamp_ms) or local


def _segment_metadata(seg: RemoteSegment) -> RemoteLogSegmentMetadata:
    """Kafka's RemoteLogSegmentMetadata of a copy, as the manifest carries it: the RLMM entry's."""
    return RemoteLogSegmentMetadata(
        topic_id=seg.topic_id,
        topic=seg.topic,
        partition=seg.partition,
        segment_id=seg.segment_id,
        start_offset=seg.start_offset,
        end_offset=seg.end_offset,
        max_timestamp_ms=seg.max_timestamp_ms,
        broker_id=seg.broker_id,
        event_timestamp_ms=seg.event_timestamp_ms,
        segment_leader_epochs=seg.epochs,
    )
