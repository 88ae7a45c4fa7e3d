"""A partition log whose directory was lost, rebuilt from what the remote log metadata (RLMM) knows of it.

A broker that opens a partition's log finds its directory (``<data_dir>/<topic>-<partition>/``) gone or behind:
the data directory was lost or replaced (a new disk, a restore from an old backup), or the partition moved here
from a broker that tiered it. Opened as it is, the log would start at offset 0: consumers would read nothing of
what the remote tier holds, and produces would be acknowledged at offsets the remote tier already holds (offsets
handed out twice, the new records never uploaded since their offsets are "already copied", then removed by local
retention as if tiered). Kafka's brokers face this as a follower whose fetch is below the leader's local log start
(KIP-405's "building the remote log auxiliary state"); with one replica, the RLMM is the only other record.

:func:`remote_bounds` (pure) folds the RLMM's segments of a partition into what a rebuilt log must respect: the
first offset still readable remotely, one past the last offset any RLMM record names (a segment in any state: a
copy that only started still had its offsets handed out), and the leader epochs of the segments.
:func:`open_partition_log` opens the log and, when its log end offset is not past that last offset, moves the
directory aside (:mod:`orchestrator.broker.partition_dirs`' ``stale/``, never deleted on the spot) and writes a new
one: its log starts at the remote tier's first live offset, its local log (empty) at the next offset the RLMM does
not know, and its leader-epoch cache is the segments'.

Invariants:

* **No offset the RLMM knows is handed out again**: a rebuilt log's end offset is one past the highest end offset
  of any of the partition's remote segments.
* **The remote tier stays served**: ListOffsets earliest is the first live remote offset, and a fetch below the
  local log start offset reads the remote segments, as before the loss.
* **What could not be recovered is said, not served as empty**: records that were only local are gone with the
  directory; a fetch at one of their offsets (beyond the new log end) is OFFSET_OUT_OF_RANGE with the partition's
  bounds, and an offset in a hole of the remote tier (a copy that never finished) is OFFSET_OUT_OF_RANGE too. The
  rebuild is logged as ``log.rebuilt_from_remote`` (a warning) with the offsets recovered and the directory moved
  aside, if any.
* **Atomic**: the new directory is written beside its place (``<name>.rebuild``), synced and renamed into place, so
  a kill leaves either no directory (rebuilt again on the next open) or a whole one.
* **Idempotent producers are still known**: the rebuilt log's producer state is the producer snapshot uploaded
  with the partition's newest finished segment (Kafka's ``buildRemoteLogAuxState`` does the same), so a retry of a
  batch the remote tier holds is still answered as a duplicate, not written twice, and a producer's gap is still
  refused. A segment uploaded without one, or one that does not parse, leaves the state empty (said in the log
  event); a snapshot that cannot be fetched fails the open, which is retried, rather than forget the producers.
* A directory whose log end is past every offset the RLMM knows is opened as it is: this module never touches a
  healthy log (tiering copies only closed segments, so a healthy log's end is always past what was copied).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import structlog

from orchestrator.broker.durable_files import fsync_directory
from orchestrator.broker.leader_epochs import CHECKPOINT_FILE, EpochEntry, LeaderEpochCache, checkpoint_text
from orchestrator.broker.local_log import LogConfig, PartitionLog, log_directory_error
from orchestrator.broker.log_segment import segment_file
from orchestrator.broker.partition_dirs import move_aside
from orchestrator.broker.partition_files import OFFSETS_CHECKPOINT, check_partition_metadata, offsets_checkpoint
from orchestrator.broker.producer_state import SnapshotFormatError, parse_snapshot
from orchestrator.ids import Uuid
from orchestrator.metadata.records import SegmentState
from remote_storage.rlmm import RemoteSegment

log = structlog.get_logger(__name__)

REBUILD_SUFFIX = ".rebuild"


@dataclass(frozen=True, slots=True)
class RemoteBounds:
    """What the RLMM knows of one partition's offsets."""

    log_start_offset: int  # the first offset a live remote segment holds; next_offset when none is live
    next_offset: int  # one past the highest offset any remote segment names, in any state
    leader_epochs: tuple[EpochEntry, ...]  # the segments' epochs, ascending, below next_offset


def remote_bounds(segments: Iterable[RemoteSegment]) -> RemoteBounds | None:
    """The bounds the RLMM's segments of one partition set; None when it has none (never tiered)."""
    segs = sorted(segments, key=lambda s: (s.start_offset, s.end_offset))
    if not segs:
        return None
    next_offset = max(s.end_offset for s in segs) + 1
    live = [s.start_offset for s in segs if s.state == SegmentState.COPY_SEGMENT_FINISHED]
    cache = LeaderEpochCache()
    for seg in segs:
        for epoch, start in seg.leader_epochs or ((seg.leader_epoch, seg.start_offset),):
            cache = cache.assigned(epoch, start)
    return RemoteBounds(min(live, default=next_offset), next_offset, cache.entries)


def needs_rebuild(log_end_offset: int, bounds: RemoteBounds | None) -> bool:
    """Whether a local log ending at ``log_end_offset`` lacks offsets the RLMM knows of (see the module docstring)."""
    return bounds is not None and log_end_offset < bounds.next_offset


def open_partition_log(
    directory: Path,
    *,
    topic_id: Uuid,
    config: LogConfig,
    clock: Callable[[], int],
    segments: Iterable[RemoteSegment],
    producer_snapshot: Callable[[RemoteSegment], bytes | None] | None = None,
    on_failure: Callable[[Path, OSError], None] | None = None,
) -> PartitionLog:
    """The partition's log, rebuilt from the RLMM's ``segments`` of it first if its directory is lost or behind.

    ``directory`` is ``<data_dir>/<topic>-<partition>``; a directory moved aside goes to ``<data_dir>/stale/``.
    ``producer_snapshot`` fetches the producer snapshot uploaded with a segment (None: it has none); a rebuild
    without it knows no producer; ``on_failure`` is the log's (:class:`PartitionLog`). Raises what
    :class:`PartitionLog` raises (KafkaStorageError for a disk error, InconsistentTopicId) and what
    ``producer_snapshot`` raises."""
    segments = list(segments)
    bounds = remote_bounds(segments)
    if bounds is None:
        return PartitionLog(directory, topic_id=topic_id, config=config, clock=clock, on_failure=on_failure)
    moved_to: Path | None = None
    found_end: int | None = None
    existing = directory.exists()
    if existing:
        plog = PartitionLog(directory, topic_id=topic_id, config=config, clock=clock, on_failure=on_failure)
        if not needs_rebuild(plog.log_end_offset, bounds):
            return plog
        found_end = plog.log_end_offset
        plog.close()
    snapshot, producers = _producer_snapshot(segments, producer_snapshot)  # a fetch that fails changes nothing
    if existing:
        try:
            moved_to = move_aside(directory.parent, directory, topic_id, clock())
        except OSError as exc:
            raise log_directory_error(directory, exc) from exc
    try:
        _write_rebuilt(directory, topic_id, bounds, snapshot)
    except OSError as exc:
        raise log_directory_error(directory, exc) from exc
    plog = PartitionLog(directory, topic_id=topic_id, config=config, clock=clock, on_failure=on_failure)
    log.warning(
        "log.rebuilt_from_remote",
        directory=str(directory),
        topic_id=str(topic_id),
        log_start_offset=plog.log_start_offset,
        log_end_offset=plog.log_end_offset,
        found_log_end_offset=found_end,
        moved_aside_to=str(moved_to) if moved_to is not None else None,
        lost="records that were only local, after the last offset the remote tier knows",
        producers=producers,
    )
    return plog


def _producer_snapshot(
    segments: list[RemoteSegment], fetch: Callable[[RemoteSegment], bytes | None] | None
) -> tuple[bytes | None, str | int]:
    """The producer snapshot of the newest finished segment, checked, and what the log event says of it: how many
    producers it holds, or why the rebuilt log knows none."""
    finished = [s for s in segments if s.state == SegmentState.COPY_SEGMENT_FINISHED]
    if not finished:
        return None, "none: no segment finished its copy"
    newest = max(finished, key=lambda s: s.end_offset)
    data = fetch(newest) if fetch is not None else None
    if data is None:
        return None, f"none: segment {newest.segment_id} was uploaded without a producer snapshot"
    try:
        return data, len(parse_snapshot(data))
    except SnapshotFormatError as exc:
        return None, f"none: the producer snapshot of segment {newest.segment_id} is unreadable ({exc})"


def _write_rebuilt(directory: Path, topic_id: Uuid, bounds: RemoteBounds, producer_snapshot: bytes | None) -> None:
    """Write the rebuilt directory beside its place, sync it, rename it into place. The producer snapshot, if any,
    is the one at the (empty) local log's start, where opening the log reads it."""
    tmp = directory.with_name(directory.name + REBUILD_SUFFIX)
    if tmp.exists():
        shutil.rmtree(tmp)  # a rebuild killed half way: nothing in it was ever served
    tmp.mkdir(parents=True)
    check_partition_metadata(tmp, topic_id)
    files = {
        OFFSETS_CHECKPOINT: offsets_checkpoint(bounds.log_start_offset, bounds.next_offset),
        CHECKPOINT_FILE: checkpoint_text(bounds.leader_epochs).encode(),
    }
    if producer_snapshot is not None:
        files[segment_file(tmp, bounds.next_offset, "snapshot").name] = producer_snapshot
    for name, data in files.items():
        (tmp / name).write_bytes(data)
    for name in ("partition.metadata", *files):  # every file on disk before the rename makes the directory live
        with (tmp / name).open("rb") as f:
            os.fsync(f.fileno())
    tmp.rename(directory)
    fsync_directory(directory.parent)
