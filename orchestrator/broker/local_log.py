"""A partition's local log: real segment files on disk, an offset index, checkpoints of the start offsets.

Layout of a partition directory ``<data_dir>/<topic>-<partition>/`` (Kafka's naming and formats):

* per segment (:mod:`orchestrator.broker.log_segment`): ``<baseOffset:20>.log``, Kafka record batches (magic 2,
  :mod:`orchestrator.protocol.record_batch`) one after the other, each with its absolute base offset and the leader
  epoch it was appended in: byte for byte what a Kafka broker writes, so the remote tier holds what a Kafka broker
  would upload; ``<baseOffset:20>.index``, Kafka's offset index; ``<baseOffset:20>.timeindex``, Kafka's time index;
* ``<offset:20>.snapshot``: the idempotent producers' state as of ``offset``, written as each segment is closed at
  the offset the next one starts (Kafka's producer snapshot, :mod:`orchestrator.broker.producer_state`); the one
  at the local log start offset outlives the segments deleted before it and seeds the producers' table on open;
* ``leader-epoch-checkpoint``: the partition's leader-epoch cache (:mod:`orchestrator.broker.leader_epochs`),
  rewritten whenever an append starts a new leader epoch or the log start offset moves;
* ``partition.metadata``: ``version: 0`` and ``topic_id: <id>`` (KIP-516), written once, checked on open;
* ``offsets.checkpoint``: JSON with ``log_start_offset`` and ``local_log_start_offset``, replaced atomically.

What a remote segment needs beside its ``.log`` (the five indexes of a RemoteStorageManager) is thus kept here:
the offset and time indexes, the producer snapshot at its end and the leader-epoch cache cut at its end
(:meth:`PartitionLog.leader_epoch_checkpoint`); there is no transaction index (we serve no transactions).

Every file but the logs is derived from the logs and rebuilt on open where missing or unreadable: both indexes of
every segment always (so a torn tail, or a directory written before the time index existed, gets exact ones), a
closed segment's missing or corrupt snapshot from the producer state folded up to its end, and the leader-epoch
cache from the batches' epochs (a checkpoint that is missing keeps only the epochs of the local batches; one that
is present also keeps older epochs, as Kafka's does). Files are replaced atomically (written aside, synced,
renamed), so a kill at any moment leaves the old file or the new one.

Invariants:
* Offsets are dense and increase by one per record; a batch's offsets are assigned here (its base offset rewritten
  to the log end offset, outside its CRC); ``log_start_offset <= local_log_start_offset <= log_end_offset``.
  The log start offset only moves forward (retention, the delete policy).
* An append is written to the OS before it returns, so a killed process (SIGKILL) loses nothing it acknowledged;
  on open, a torn or corrupt tail of the active segment is truncated after the last whole batch whose CRC-32C
  matches and whose offsets follow on, and its index is rebuilt. A batch never spans two segments.
* A directory whose ``partition.metadata`` names another topic id is stale (the topic was deleted and re-created,
  KIP-516) and is refused with :class:`InconsistentTopicId`; it is never served.
* Closed segments are immutable; only the active (last) segment is appended to.
* One operation at a time: every public method holds the log's lock, so a start offset moved on one thread (a
  delete-policy job) and retention applied on another (a tiering pass) never interleave, in memory or in the
  checkpoint file.

Disk errors (KIP-112's failed log directory):
* Every ``OSError`` of a partition's files leaves :class:`PartitionLog` as :class:`KafkaStorageError`
  (KAFKA_STORAGE_ERROR, 56) naming the partition's directory, the OS error and the file
  (``log directory /data/broker-2/t-0: [Errno 30] Read-only file system``), with the ``OSError`` as its cause.
  The translation happens in one place, :func:`~orchestrator.broker.log_directory.on_log_directory`, which wraps
  every public method that touches the disk (opening included); callers (request handlers, the broker's loops,
  the RemoteLogManager) never see a bare ``OSError`` from here.
* A failed operation leaves the log as the disk has it and may simply be retried once the disk is back: a write
  that failed half way is cut off when the segment is next opened for appending (nothing unaccounted stays in
  the file); a segment leaves the log only once its files are deleted; start offsets that moved in memory but
  could not be checkpointed are checkpointed by the next retention or start-offset call. An append of several
  batches that fails part way keeps the batches written before the failure (the produce answers the error).
"""

from __future__ import annotations

import bisect
import json
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import structlog

from orchestrator.broker.leader_epochs import (
    CHECKPOINT_FILE,
    CheckpointFormatError,
    EpochEntry,
    LeaderEpochCache,
    checkpoint_text,
    parse_checkpoint,
)
from orchestrator.broker.log_directory import log_directory_error, on_log_directory
from orchestrator.broker.log_reads import Record, find_timestamp, read_batches, records_from, timestamp_search_position
from orchestrator.broker.log_segment import LogSegment, SegmentInfo, segment_file
from orchestrator.broker.partition_files import (
    OFFSETS_CHECKPOINT,
    check_partition_metadata,
    offsets_checkpoint,
    read_partition_metadata,
)
from orchestrator.broker.producer_state import (
    ProducedBatch,
    ProducerStates,
    SnapshotFormatError,
    last_sequence_of,
    parse_snapshot,
    snapshot_bytes,
    states_from_snapshot,
)
from orchestrator.errors import CorruptMessage, OffsetOutOfRange
from orchestrator.ids import Uuid
from orchestrator.protocol.record_batch import (
    NO_PARTITION_LEADER_EPOCH,
    BatchHeader,
    batch_header,
    build_batch,
    crc_matches,
    encode_batch,
    frames,
    rebased,
    split_batches,
)

log = structlog.get_logger(__name__)

__all__ = [
    "OFFSETS_CHECKPOINT",
    "AppendInfo",
    "LogConfig",
    "PartitionLog",
    "SegmentInfo",
    "log_directory_error",
    "offsets_checkpoint",
    "read_partition_metadata",
]


@dataclass(frozen=True, slots=True)
class LogConfig:
    segment_bytes: int = 1024 * 1024  # segment.bytes: roll when the active segment would exceed this
    segment_ms: int = 7 * 24 * 3600 * 1000  # segment.ms: roll when the active segment's first record is this old
    index_interval_bytes: int = 4096  # an index entry every this many bytes of log


class AppendInfo(NamedTuple):
    """Where an append went: the offsets of its first and last records."""

    first_offset: int
    last_offset: int


class PartitionLog:
    """One partition's local log, safe to share between threads: every public method runs under the log's own
    (re-entrant) lock. The broker serializes appends, reads and tiering passes itself, but a delete-policy job moves
    the log start offset from a thread of its own while a tiering pass may be applying retention to the same log.

    Every public method that touches the disk raises :class:`KafkaStorageError` for an OS error (see the module
    docstring)."""

    def __init__(
        self,
        directory: Path,
        *,
        topic_id: Uuid,
        config: LogConfig = LogConfig(),
        clock: Callable[[], int],
        on_failure: Callable[[Path, OSError], None] | None = None,
    ) -> None:
        """``on_failure`` hears of every OS error of the log's files before it leaves as KAFKA_STORAGE_ERROR (the
        broker's failed-directory channel, :mod:`orchestrator.broker.log_dir_failure`)."""
        self.directory = directory
        self._mutex = threading.RLock()
        self._on_failure = on_failure
        self._open(topic_id, config, clock)

    @on_log_directory
    def _open(self, topic_id: Uuid, config: LogConfig, clock: Callable[[], int]) -> None:
        directory = self.directory
        self.topic_id = topic_id
        self.config = config
        self._clock = clock
        directory.mkdir(parents=True, exist_ok=True)
        check_partition_metadata(directory, topic_id)
        self._segments: list[LogSegment] = []
        self.producers = ProducerStates()  # idempotent producers, rebuilt from the local batches on open
        # the leader-epoch cache as its checkpoint holds it (None: no readable checkpoint), then completed from the
        # local batches on open
        self._epochs_checkpointed = self._read_leader_epochs()
        self.leader_epochs = self._epochs_checkpointed or LeaderEpochCache()
        self.log_start_offset = 0
        self.local_log_start_offset = 0
        self._load()
        # the start offsets as a reopen would find them; offsets that differ are due a checkpoint
        self._checkpointed = (self.log_start_offset, self.local_log_start_offset)

    # -- opening ----------------------------------------------------------------------------------------------

    def _load(self) -> None:
        bases = sorted(int(p.stem) for p in self.directory.glob("*.log") if p.stem.isdigit())
        if bases:
            self.producers = self._snapshot_at(bases[0])  # what the deleted segments before the first one knew
        for i, base in enumerate(bases):
            seg = LogSegment(self.directory, base)
            active = i == len(bases) - 1
            seg.load(self.config.index_interval_bytes, active=active, on_batch=self._remember_batch)
            if not active:
                self._restore_producer_snapshot(seg)
            self._segments.append(seg)
        cp = self.directory / OFFSETS_CHECKPOINT
        first_local = self._segments[0].base_offset if self._segments else 0
        if cp.exists():
            doc = json.loads(cp.read_text())
            self.log_start_offset = int(doc["log_start_offset"])
            self.local_log_start_offset = int(doc["local_log_start_offset"])
        else:
            self.log_start_offset = self.local_log_start_offset = first_local
        if not self._segments:  # an empty log (new, or rebuilt from the remote tier with a producer snapshot)
            self._segments.append(self._new_segment(self.local_log_start_offset))
            self.producers = self._snapshot_at(self.local_log_start_offset)
        self.local_log_start_offset = max(self.local_log_start_offset, first_local)
        self.log_start_offset = min(self.log_start_offset, self.local_log_start_offset)
        epochs = self.leader_epochs.truncated_from_end(self.log_end_offset)  # a torn tail took its epochs along
        self._save_leader_epochs(epochs.truncated_from_start(self.log_start_offset))

    def _remember_batch(self, header: BatchHeader) -> None:
        batch = ProducedBatch(
            header.base_sequence,
            last_sequence_of(header.base_sequence, header.last_offset_delta + 1),
            header.base_offset,
            header.last_offset,
            header.max_timestamp,
        )
        self.producers = self.producers.with_batch(header.producer_id, header.producer_epoch, batch)
        self.leader_epochs = self.leader_epochs.assigned(header.partition_leader_epoch, header.base_offset)

    def _snapshot_at(self, offset: int) -> ProducerStates:
        """The producers' table the snapshot at ``offset`` holds (empty when there is none or it is unreadable)."""
        path = segment_file(self.directory, offset, "snapshot")
        try:
            return states_from_snapshot(parse_snapshot(path.read_bytes()))
        except FileNotFoundError:
            return ProducerStates()
        except SnapshotFormatError as exc:
            log.warning("log.producer_snapshot_unreadable", path=str(path), reason=str(exc))
            return ProducerStates()

    def _restore_producer_snapshot(self, seg: LogSegment) -> None:
        """Write a closed segment's producer snapshot if it is missing or unreadable (a kill before it was written,
        or a directory written before snapshots were kept): the producer state folded up to the segment's end."""
        path = seg.producer_snapshot_path
        try:
            parse_snapshot(path.read_bytes())
            return
        except FileNotFoundError:
            pass
        except SnapshotFormatError as exc:
            log.warning("log.producer_snapshot_rebuilt", path=str(path), reason=str(exc))
        self._replace_file(path, snapshot_bytes(self.producers))

    def _read_leader_epochs(self) -> LeaderEpochCache | None:
        path = self.directory / CHECKPOINT_FILE
        try:
            return parse_checkpoint(path.read_text())
        except FileNotFoundError:
            return None
        except (CheckpointFormatError, UnicodeDecodeError) as exc:
            log.warning("log.leader_epochs_rebuilt", path=str(path), reason=str(exc))
            return None

    def _save_leader_epochs(self, epochs: LeaderEpochCache) -> None:
        """Make ``epochs`` the cache, and checkpoint it unless the file holds it already (a checkpoint that failed
        is written by the next call)."""
        self.leader_epochs = epochs
        if epochs != self._epochs_checkpointed:
            self._replace_file(self.directory / CHECKPOINT_FILE, checkpoint_text(epochs.entries).encode())
            self._epochs_checkpointed = epochs

    def _new_segment(self, base_offset: int) -> LogSegment:
        seg = LogSegment(self.directory, base_offset)
        seg.create_files()
        return seg

    def _sync_checkpoint(self) -> None:
        """Checkpoint the start offsets if they moved since the last checkpoint (or since one that failed)."""
        offsets = (self.log_start_offset, self.local_log_start_offset)
        if offsets != self._checkpointed:
            self._checkpoint()
            self._checkpointed = offsets

    def _checkpoint(self) -> None:
        data = offsets_checkpoint(self.log_start_offset, self.local_log_start_offset)
        self._replace_file(self.directory / OFFSETS_CHECKPOINT, data)

    @staticmethod
    def _replace_file(path: Path, data: bytes, *, sync: bool = True) -> None:
        """Replace ``path``'s contents atomically: written beside it (``<name>.tmp``), synced (unless ``sync`` is
        False: see :meth:`roll`), renamed over it."""
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_bytes(data)
        if sync:
            _fsync(tmp)
        tmp.replace(path)

    # -- offsets ----------------------------------------------------------------------------------------------

    @property
    def log_end_offset(self) -> int:
        return self._segments[-1].next_offset

    @property
    def active(self) -> LogSegment:
        return self._segments[-1]

    # -- writing ----------------------------------------------------------------------------------------------

    @on_log_directory
    def append_batches(
        self, batches: Sequence[bytes | memoryview], *, leader_epoch: int = NO_PARTITION_LEADER_EPOCH
    ) -> AppendInfo:
        """Append validated record batches (a Produce's, in order): each gets the next offsets and ``leader_epoch``,
        and goes whole into the active segment (rolled first when the batch would overflow it). Returns the offsets
        of the first and last records. A retry of an idempotent producer's batch already in the log is not written
        again: its first offsets are returned (:mod:`orchestrator.broker.producer_state`); a batch out of sequence
        or from a fenced producer epoch raises, and nothing of it is written."""
        if not batches:
            raise ValueError("nothing to append")
        now = self._clock()
        placed: list[tuple[int, int]] = []
        for raw in batches:
            header = batch_header(memoryview(raw))
            pid, epoch, sequence = header.producer_id, header.producer_epoch, header.base_sequence
            judged = self.producers.judge(pid, epoch, sequence, header.last_offset_delta + 1)
            if judged.duplicate_of is not None:
                placed.append((judged.duplicate_of.first_offset, judged.duplicate_of.last_offset))
                continue
            base = self.log_end_offset
            last = base + header.last_offset_delta
            assigned = rebased(raw, base, leader_epoch)
            self._maybe_roll(len(assigned), now)
            self.active.write(assigned, last, header.max_timestamp, self.config.index_interval_bytes)
            last_sequence = last_sequence_of(sequence, header.last_offset_delta + 1)
            produced = ProducedBatch(sequence, last_sequence, base, last, header.max_timestamp)
            self.producers = self.producers.with_batch(pid, epoch, produced)
            placed.append((base, last))
            if leader_epoch > self.leader_epochs.latest_epoch:  # after the write: a kill in between is rebuilt on open
                self._save_leader_epochs(self.leader_epochs.assigned(leader_epoch, base))
        return AppendInfo(placed[0][0], placed[-1][1])

    def append(
        self,
        records: Sequence[tuple[bytes | None, bytes | None, int | None]],
        *,
        leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    ) -> AppendInfo:
        """Append (key, value, timestamp or None for now) records as one uncompressed batch (tools and tests)."""
        if not records:
            raise ValueError("nothing to append")
        now = self._clock()
        batch = build_batch(0, [(key, value, now if ts is None else ts, ()) for key, value, ts in records])
        return self.append_batches([encode_batch(batch)], leader_epoch=leader_epoch)

    @on_log_directory
    def append_replicated(self, records: bytes | memoryview) -> int:
        """Append a leader's batches as they are (a follower's fetch: offsets and leader epochs already assigned),
        and return how many were written. Batches wholly below the log end offset are skipped (a fetch that began
        inside one); a truncated batch at the end is left for the next fetch. A batch that does not start at the log
        end offset, or fails its CRC-32C, is CORRUPT_MESSAGE and nothing from it on is written."""
        now = self._clock()
        written = 0
        for raw in split_batches(records).batches:
            header = batch_header(raw)
            if header.next_offset <= self.log_end_offset:
                continue
            if header.base_offset != self.log_end_offset or not crc_matches(raw):
                why = "fails its CRC-32C" if header.base_offset == self.log_end_offset else "leaves a gap"
                raise CorruptMessage(
                    f"{self.directory}: a replicated batch at offset {header.base_offset} {why} "
                    f"(log end offset {self.log_end_offset})"
                )
            self._maybe_roll(header.size, now)
            self.active.write(bytes(raw), header.last_offset, header.max_timestamp, self.config.index_interval_bytes)
            before = self.leader_epochs
            self._remember_batch(header)
            if self.leader_epochs != before:
                self._save_leader_epochs(self.leader_epochs)
            written += 1
        return written

    @on_log_directory
    def truncate_to(self, offset: int) -> bool:
        """Drop every batch that ends at or past ``offset`` (a follower's divergent tail, KIP-101), and return whether
        anything was dropped. The log is cut at a batch boundary: the batch holding ``offset`` goes whole. Never below
        the local log start offset (what lies there was tiered, so every replica had it): an ``offset`` below it cuts
        there. Files are cut, then the log is read
        back from the disk as an open reads it (indexes, producers and leader epochs rebuilt)."""
        if offset >= self.log_end_offset:
            return False
        offset = max(offset, self.local_log_start_offset)
        keep = [s for s in self._segments if s.base_offset < offset] or [self._segments[0]]
        for seg in self._segments[len(keep) :]:
            seg.delete_files()
        cut = keep[-1]
        cut.close()
        position = cut.position_of(offset)
        data = cut.read_at(position, cut.size - position)
        for at, raw in frames(data):
            if batch_header(raw).next_offset > offset:
                position += at
                break
        with cut.log_path.open("r+b") as f:
            f.truncate(min(position, cut.size))
            os.fsync(f.fileno())
        for path in self.directory.glob("*.snapshot"):
            if path.stem.isdigit() and int(path.stem) > offset:
                path.unlink(missing_ok=True)
        self._reload()
        log.warning("log.truncated", directory=str(self.directory), log_end_offset=self.log_end_offset)
        return True

    @on_log_directory
    def truncate_fully_and_start_at(self, offset: int, *, log_start: int | None = None) -> None:
        """Drop every local batch and start the log empty at ``offset`` (a follower whose log ends below its
        leader's log start: what it has was removed on the leader, so it starts where the leader's log does; or
        below its leader's local log start: ``log_start``, at or below ``offset``, is then the leader's log start,
        the records between being in remote storage).

        The start offsets are checkpointed first, then segments are deleted oldest first: a crash part way leaves
        segments below the log start, which the next call (the next out-of-range answer) removes."""
        start = offset if log_start is None else min(log_start, offset)
        with self._mutex:
            self.log_start_offset, self.local_log_start_offset = start, offset
            self._checkpoint()
            self._checkpointed = (start, offset)
            for seg in self._segments:
                seg.close()
                seg.delete_files()
            for path in self.directory.glob("*.snapshot"):
                path.unlink(missing_ok=True)
            self._segments = [self._new_segment(offset)]
            self.producers = ProducerStates()
            self._save_leader_epochs(LeaderEpochCache())
        log.warning("log.truncated_fully", directory=str(self.directory), start_offset=offset)

    def _reload(self) -> None:
        for seg in self._segments:
            seg.close()
        self._open(self.topic_id, self.config, self._clock)

    def _maybe_roll(self, batch_size: int, now: int) -> None:
        seg = self.active
        if seg.size == 0:
            return
        too_big = seg.size + batch_size > self.config.segment_bytes
        too_old = seg.first_timestamp_ms >= 0 and now - seg.first_timestamp_ms >= self.config.segment_ms
        if too_big or too_old:
            self.roll()

    @on_log_directory
    def roll(self) -> None:
        """Close the active segment (if it holds anything) and start a new one at the log end offset."""
        if self.active.size == 0:
            return
        closing = self.active
        closing.become_inactive()
        # Not synced here: a roll holds up every append of the broker while it runs, and a sync costs tens of
        # milliseconds. A snapshot only a crash of the machine tore is unreadable (its CRC) and rebuilt from the
        # segments on open; the one snapshot no segment can rebuild, at the local log start once the segments below
        # it are deleted, is synced before they are (delete_local_segments_before). Kafka flushes it off the append
        # path too.
        self._replace_file(closing.producer_snapshot_path, snapshot_bytes(self.producers), sync=False)
        self._segments.append(self._new_segment(self.log_end_offset))
        log.debug("log.rolled", directory=str(self.directory), base_offset=self.log_end_offset)

    @on_log_directory
    def maybe_roll_by_time(self) -> bool:
        """Roll the active segment if ``segment.ms`` has passed since its first record; True if it rolled."""
        seg = self.active
        if (
            seg.size
            and seg.first_timestamp_ms >= 0
            and self._clock() - seg.first_timestamp_ms >= self.config.segment_ms
        ):
            self.roll()
            return True
        return False

    # -- reading ----------------------------------------------------------------------------------------------

    def _check_local(self, offset: int) -> None:
        if offset < self.local_log_start_offset or offset > self.log_end_offset:
            raise OffsetOutOfRange(
                f"offset {offset} is outside the local log [{self.local_log_start_offset}, {self.log_end_offset}]"
            )

    @on_log_directory
    def read_batches(self, offset: int, *, max_bytes: int = 1024 * 1024) -> bytes:
        """The record batches a fetch at ``offset`` returns from the local log: whole batches from the one holding
        ``offset``, at least one when any exists there, up to ``max_bytes`` (:mod:`orchestrator.broker.log_reads`);
        empty at the log end offset."""
        self._check_local(offset)
        i = bisect.bisect_right(self._segments, offset, key=lambda s: s.base_offset) - 1
        for seg in self._segments[max(i, 0) :]:
            if seg.next_offset <= offset:
                continue
            data = read_batches(seg.read_at, seg.position_of(offset), seg.size, offset, max_bytes)
            if data:
                return data
        return b""

    def read(self, offset: int, *, max_bytes: int = 1024 * 1024) -> list[Record]:
        """The records from ``offset`` on, decoded, across segments, within about ``max_bytes`` of batches (at least
        one batch when any exists): :meth:`read_batches` repeated (tools and tests)."""
        out: list[Record] = []
        used = 0
        self._check_local(offset)
        while offset < self.log_end_offset and (not out or used < max_bytes):
            data = self.read_batches(offset, max_bytes=max(max_bytes - used, 1) if out else max_bytes)
            records = records_from(data, offset)
            if not records or (out and used + len(data) > max_bytes):
                break
            out.extend(records)
            used += len(data)
            offset = records[-1].offset + 1
        return out

    @on_log_directory
    def offset_for_timestamp(self, timestamp_ms: int) -> tuple[int, int] | None:
        """``(offset, timestamp)`` of the first local record whose timestamp is at least ``timestamp_ms``: the first
        segment whose max timestamp reaches it, searched from where its time index says."""
        for seg in self._segments:
            if seg.size and seg.max_timestamp_ms >= timestamp_ms:
                position = timestamp_search_position(seg.time_index, seg.index, timestamp_ms)
                found = find_timestamp(seg.read_at, position, seg.size, timestamp_ms)
                if found is not None:
                    return found
        return None

    @on_log_directory
    def max_timestamp(self) -> tuple[int, int] | None:
        """``(offset, timestamp)`` of the first local record with the largest timestamp, None when empty."""
        best = None
        for seg in self._segments:
            if seg.size and (best is None or seg.max_timestamp_ms > best.max_timestamp_ms):
                best = seg
        if best is None:
            return None
        position = timestamp_search_position(best.time_index, best.index, best.max_timestamp_ms)
        return find_timestamp(best.read_at, position, best.size, best.max_timestamp_ms)

    def leader_epoch_checkpoint(self, end_offset: int) -> bytes:
        """The leader-epoch checkpoint a remote copy of the segment ending at ``end_offset`` carries: the cache cut
        after that offset (Kafka's RemoteLogManager: every epoch from the oldest known one)."""
        with self._mutex:
            return checkpoint_text(self.leader_epochs.in_range(-1, end_offset + 1)).encode()

    def segment_leader_epochs(self, base_offset: int, end_offset: int) -> tuple[EpochEntry, ...]:
        """The leader epochs of offsets ``base_offset``..``end_offset``, the first one starting at ``base_offset``
        (a remote segment's metadata); empty when its batches carry no epoch (a tool's)."""
        with self._mutex:
            return self.leader_epochs.in_range(base_offset, end_offset + 1)

    @on_log_directory
    def close(self) -> None:
        for seg in self._segments:
            seg.close()

    def __enter__(self) -> PartitionLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def segments(self) -> list[SegmentInfo]:
        with self._mutex:
            return [s.info() for s in self._segments]

    def closed_segments(self) -> list[SegmentInfo]:
        """Every segment but the active one: candidates for tiering and local retention."""
        with self._mutex:
            return [s.info() for s in self._segments[:-1] if s.size]

    def bytes_above(self, offset: int) -> int:
        """The bytes of the segments holding an offset above ``offset`` (the active one included): what a tiering
        pass counts as not copied yet, read without building each segment's :class:`SegmentInfo`."""
        with self._mutex:
            return sum(s.size for s in self._segments if s.next_offset - 1 > offset)

    def active_segment_bytes(self) -> int:
        with self._mutex:
            return self._segments[-1].size

    def tiering_inputs(self) -> tuple[int, int, int, int, int]:
        """What a tiering pass reads of this log, for telling an unchanged log from one that moved: the log start,
        local log start and log end offsets, the number of segments and the active one's size."""
        with self._mutex:
            active = self._segments[-1]
            return (
                self.log_start_offset,
                self.local_log_start_offset,
                active.next_offset,
                len(self._segments),
                active.size,
            )

    # -- retention and start offsets --------------------------------------------------------------------------

    @on_log_directory
    def delete_local_segments_before(self, offset: int) -> list[SegmentInfo]:
        """Drop closed local segments that end below ``offset``; return what was dropped.

        A segment leaves the log once its log file is deleted (its other files go first: the log is what is
        served), so a disk error part way leaves the log as the disk has it, and a second call finishes the work."""
        dropped = []
        kept = next((seg for seg in self._segments[:-1] if seg.next_offset > offset), self._segments[-1])
        if kept is not self._segments[0]:  # what the deleted segments knew of producers lives on in it alone
            _fsync_if_present(kept_snapshot := segment_file(self.directory, kept.base_offset, "snapshot"))
            log.debug("log.producer_snapshot_synced", path=str(kept_snapshot))
        try:
            while len(self._segments) > 1 and self._segments[0].next_offset <= offset:
                seg = self._segments[0]
                last = not (len(self._segments) > 2 and self._segments[1].next_offset <= offset)
                seg.delete_files(keep_snapshot=last)  # the snapshot at the new local log start stays (Kafka's too)
                self._segments.pop(0)
                dropped.append(seg.info())
        finally:
            if dropped:
                self.local_log_start_offset = max(self.log_start_offset, self._segments[0].base_offset)
                self._delete_snapshots_before(self._segments[0].base_offset)
                log.info(
                    "log.local_segments_deleted",
                    directory=str(self.directory),
                    count=len(dropped),
                    local_log_start_offset=self.local_log_start_offset,
                )
        self._sync_checkpoint()
        return dropped

    def _delete_snapshots_before(self, offset: int) -> None:
        """Remove producer snapshots older than ``offset`` (the one kept at an earlier local log start)."""
        for path in self.directory.glob("*.snapshot"):
            if path.stem.isdigit() and int(path.stem) < offset:
                path.unlink(missing_ok=True)

    @on_log_directory
    def advance_log_start_offset(self, offset: int) -> None:
        """Move the log start offset forward (never back), e.g. to the local log start offset (delete policy)."""
        if offset > self.log_end_offset:
            raise OffsetOutOfRange(f"log start offset {offset} beyond log end {self.log_end_offset}")
        if offset > self.log_start_offset:
            self.log_start_offset = offset
            self.local_log_start_offset = max(self.local_log_start_offset, offset)
        # also when the offset did not move: this finishes a call that a disk error stopped half way
        self.delete_local_segments_before(self.log_start_offset)
        self._save_leader_epochs(self.leader_epochs.truncated_from_start(self.log_start_offset))


def _fsync(path: Path) -> None:
    with path.open("rb") as f:
        os.fsync(f.fileno())


def _fsync_if_present(path: Path) -> None:
    """Sync ``path`` to the disk; nothing when it is missing (opening the log writes a closed segment's missing
    snapshot)."""
    try:
        _fsync(path)
    except FileNotFoundError:
        return
