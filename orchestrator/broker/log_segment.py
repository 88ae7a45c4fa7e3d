"""One segment of a partition's local log: its ``.log`` file and the offset and time indexes kept beside it.

Files of a segment whose first offset is ``base`` (Kafka's names and formats):

* ``<base:20>.log``: Kafka record batches one after the other;
* ``<base:20>.index``: Kafka's offset index, entries ``relativeOffset:uint32 | position:uint32``: the last offset of
  a batch (relative to ``base``) and the batch's position, for the first batch and then every
  ``index_interval_bytes`` of log;
* ``<base:20>.timeindex``: Kafka's time index, entries ``timestamp:int64 | relativeOffset:uint32``: the largest
  timestamp so far and the last offset of the batch that carried it first (Kafka's "shallow" offset of the max
  timestamp), added at the same batches as the offset index when that timestamp grew since the last entry, and
  once more when the segment is closed (Kafka's ``onBecomeInactiveSegment``), so a closed segment's last entry
  holds its max timestamp.

Both indexes are derived from the log: :meth:`LogSegment.load` rebuilds them from the batches on every open (so a
torn tail, or a directory written before the time index existed, gets exact indexes), and an append writes the
entries before the batch, unbuffered; :meth:`LogSegment._open_for_append` cuts every file back to what the
segment accounts for, so entries or bytes of a write that failed half way never stay behind.

Errors: every method lets ``OSError`` through; :class:`~orchestrator.broker.local_log.PartitionLog` translates it
for the whole partition in one place.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import structlog

from orchestrator.broker.log_reads import position_before
from orchestrator.errors import CorruptMessage, KafkaStorageError
from orchestrator.protocol.record_batch import BatchHeader, batch_header, crc_matches, frames

log = structlog.get_logger(__name__)

OFFSET_INDEX_ENTRY = struct.Struct(">II")  # relative offset, position
TIME_INDEX_ENTRY = struct.Struct(">qI")  # timestamp, relative offset


def _write_all(f: BinaryIO, data: bytes) -> None:
    """Write every byte: an unbuffered file may write less than asked (a disk filling up) without raising."""
    view = memoryview(data)
    while view:
        view = view[f.write(view) :]


def segment_file(directory: Path, offset: int, suffix: str) -> Path:
    """``<offset:20>.<suffix>`` in ``directory`` (Kafka's naming of segment files and producer snapshots)."""
    return directory / f"{offset:020d}.{suffix}"


@dataclass(frozen=True, slots=True)
class SegmentInfo:
    """A segment as the rest of the broker sees it (RemoteLogManager, retention)."""

    base_offset: int
    end_offset: int  # last offset in the segment (base_offset - 1 when empty)
    size_bytes: int
    max_timestamp_ms: int
    first_timestamp_ms: int
    log_path: Path
    index_path: Path
    time_index_path: Path
    # The producer state as of the segment's end, written when the segment was closed (Kafka's <next base>.snapshot).
    producer_snapshot_path: Path


class LogSegment:
    def __init__(self, directory: Path, base_offset: int) -> None:
        self.directory = directory
        self.base_offset = base_offset
        self.log_path = segment_file(directory, base_offset, "log")
        self.index_path = segment_file(directory, base_offset, "index")
        self.time_index_path = segment_file(directory, base_offset, "timeindex")
        self.size = 0
        self.next_offset = base_offset
        self.max_timestamp_ms = -1
        self.offset_of_max_timestamp = -1
        self.first_timestamp_ms = -1
        self.index: list[tuple[int, int]] = []  # (offset, position)
        self.time_index: list[tuple[int, int]] = []  # (timestamp, offset)
        self._bytes_since_index = 0
        self._log_file: BinaryIO | None = None
        self._index_file: BinaryIO | None = None
        self._time_index_file: BinaryIO | None = None
        self._snapshot_path: tuple[int, Path] = (-1, directory)  # (next offset, its snapshot's path)

    @property
    def producer_snapshot_path(self) -> Path:
        # Built again only when the segment's end moved: a tiering pass reads every segment's info each round.
        if self._snapshot_path[0] != self.next_offset:
            self._snapshot_path = (self.next_offset, segment_file(self.directory, self.next_offset, "snapshot"))
        return self._snapshot_path[1]

    def create_files(self) -> None:
        for path in (self.log_path, self.index_path, self.time_index_path):
            path.touch()

    def write(self, batch: bytes, last_offset: int, max_timestamp: int, index_interval: int) -> None:
        """Append one batch (its offsets assigned); unbuffered, so it is in the OS before this returns (safe against
        SIGKILL).

        A write that fails changes nothing in memory and closes the files, so the next write reopens them and
        cuts off whatever part of this one reached the disk."""
        if self._log_file is None or self._index_file is None or self._time_index_file is None:
            self._log_file, self._index_file, self._time_index_file = self._open_for_append()
        log_file, index_file, time_index_file = self._log_file, self._index_file, self._time_index_file
        indexed = self._bytes_since_index >= index_interval or not self.index
        max_ts, offset_of_max = self._max_after(last_offset, max_timestamp)
        timed = indexed and self._time_entry_due(max_ts)
        try:
            if indexed:
                _write_all(index_file, OFFSET_INDEX_ENTRY.pack(last_offset - self.base_offset, self.size))
            if timed:
                _write_all(time_index_file, TIME_INDEX_ENTRY.pack(max_ts, offset_of_max - self.base_offset))
            _write_all(log_file, batch)
        except BaseException:
            self.close()
            raise
        self._account(last_offset, self.size, len(batch), max_timestamp, indexed)

    def _max_after(self, last_offset: int, max_timestamp: int) -> tuple[int, int]:
        """The max timestamp and the offset that first carried it, once a batch ending at ``last_offset`` is in."""
        if max_timestamp > self.max_timestamp_ms:
            return max_timestamp, last_offset
        return self.max_timestamp_ms, self.offset_of_max_timestamp

    def _time_entry_due(self, max_timestamp: int) -> bool:
        return max_timestamp >= 0 and (not self.time_index or max_timestamp > self.time_index[-1][0])

    def _account(self, last_offset: int, position: int, size: int, max_timestamp: int, indexed: bool) -> None:
        self.max_timestamp_ms, self.offset_of_max_timestamp = self._max_after(last_offset, max_timestamp)
        if indexed:
            self.index.append((last_offset, position))
            if self._time_entry_due(self.max_timestamp_ms):
                self.time_index.append((self.max_timestamp_ms, self.offset_of_max_timestamp))
            self._bytes_since_index = 0
        self._bytes_since_index += size
        self.size = position + size
        self.next_offset = last_offset + 1
        if self.first_timestamp_ms < 0:
            self.first_timestamp_ms = max_timestamp

    def _open_for_append(self) -> tuple[BinaryIO, BinaryIO, BinaryIO]:
        """The segment's files opened for appending, cut back to the bytes this segment accounts for."""
        files: list[BinaryIO] = []
        accounted = (
            (self.log_path, self.size),
            (self.index_path, len(self.index) * OFFSET_INDEX_ENTRY.size),
            (self.time_index_path, len(self.time_index) * TIME_INDEX_ENTRY.size),
        )
        try:
            for path, size in accounted:
                opened: BinaryIO = path.open("ab", buffering=0)
                files.append(opened)
                if os.fstat(opened.fileno()).st_size > size:  # the torn end of a write that failed
                    opened.truncate(size)
        except BaseException:
            for f in files:
                f.close()
            raise
        return files[0], files[1], files[2]

    def close(self) -> None:
        files = (self._log_file, self._index_file, self._time_index_file)
        self._log_file = self._index_file = self._time_index_file = None
        for f in files:
            if f is not None:
                f.close()

    def become_inactive(self) -> None:
        """Close the segment for good (it is rolled): its time index gets the max timestamp if it has not yet."""
        self.close()
        if self._time_entry_due(self.max_timestamp_ms):
            self.time_index.append((self.max_timestamp_ms, self.offset_of_max_timestamp))
        self.write_indexes()

    def info(self) -> SegmentInfo:
        return SegmentInfo(
            self.base_offset,
            self.next_offset - 1,
            self.size,
            self.max_timestamp_ms,
            self.first_timestamp_ms,
            self.log_path,
            self.index_path,
            self.time_index_path,
            self.producer_snapshot_path,
        )

    def load(self, index_interval: int, *, active: bool, on_batch: Callable[[BatchHeader], None]) -> None:
        """Scan the log file's batch headers (each whole one passed to ``on_batch``) and rebuild both indexes; for
        the active segment, also check each batch's CRC-32C and truncate a torn or corrupt tail (a closed segment
        that does not frame is an error)."""
        data = self.log_path.read_bytes() if self.log_path.exists() else b""
        self.index = []
        self.time_index = []
        self._bytes_since_index = index_interval  # index the first batch
        valid_end = 0
        problem = ""
        try:
            for position, raw in frames(data):
                header = batch_header(raw)
                if header.base_offset != self.next_offset or header.last_offset_delta < 0:
                    problem = f"batch at offset {header.base_offset} where {self.next_offset} was due"
                    break
                if active and not crc_matches(raw):
                    problem = f"batch at offset {header.base_offset} fails its CRC-32C"
                    break
                indexed = self._bytes_since_index >= index_interval
                self._account(header.last_offset, position, header.size, header.max_timestamp, indexed)
                on_batch(header)
                valid_end = position + header.size
        except CorruptMessage as exc:
            problem = exc.message
        if valid_end < len(data):
            if not active:
                raise KafkaStorageError(f"closed segment {self.log_path} is corrupt at byte {valid_end}: {problem}")
            log.warning(
                "log.torn_tail_truncated",
                path=str(self.log_path),
                kept=valid_end,
                dropped=len(data) - valid_end,
                reason=problem or "a batch cut short",
            )
            with self.log_path.open("r+b") as f:
                f.truncate(valid_end)
                f.flush()
                os.fsync(f.fileno())
        self.size = valid_end
        if active:
            self.write_indexes()
        else:
            self.become_inactive()

    def read_at(self, position: int, length: int) -> bytes:
        with self.log_path.open("rb") as f:
            f.seek(position)
            return f.read(length)

    def position_of(self, offset: int) -> int:
        """Where to start reading for ``offset`` (:func:`~orchestrator.broker.log_reads.position_before`)."""
        return position_before(self.index, offset)

    def write_indexes(self) -> None:
        base = self.base_offset
        self.index_path.write_bytes(b"".join(OFFSET_INDEX_ENTRY.pack(o - base, p) for o, p in self.index))
        self.time_index_path.write_bytes(b"".join(TIME_INDEX_ENTRY.pack(t, o - base) for t, o in self.time_index))

    def delete_files(self, *, keep_snapshot: bool = False) -> None:
        """Delete the segment's files, the log last: the log is what is served, so a failure part way leaves a
        segment that is still whole on disk (indexes are rebuilt on open). ``keep_snapshot``: not the producer
        snapshot at its end (the next segment's start, which becomes the local log start)."""
        self.close()
        snapshot = () if keep_snapshot else (self.producer_snapshot_path,)
        for path in (*snapshot, self.time_index_path, self.index_path, self.log_path):
            path.unlink(missing_ok=True)
