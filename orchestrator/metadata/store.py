"""The metadata store: the interface every backend implements, and the pure rules they share.

The store is the single source of truth (ARCHITECTURE §2). It holds three things:

* the **cluster metadata log**: records with dense offsets starting at 0, each stored as its encoded bytes plus
  a CRC-32 of those bytes, and **snapshots** (the image as records at an offset; replay = the latest snapshot
  plus the log after it). Saving a snapshot keeps the newest ``retain`` snapshots and deletes the log's records
  below the oldest one kept (see invariant 7), so the log is bounded and start-up replays only a tail;
* the **controller lease** and its controller epoch;
* the **remote log metadata** (RLMM): a second log, with its own dense offsets, of per-segment records.

Invariants every backend keeps (the contract suite ``tests/orchestrator/metadata/test_store_contract.py`` checks them):

1. Offsets are dense and start at 0; an ``append`` is all or nothing: every record of the call is written, or
   none (a record that does not encode, a stale epoch or a fence refusal writes nothing). An ``append`` given
   ``remote_log_metadata`` records too writes them to the RLMM log in the same transaction, after the metadata-log
   records and checked against the fence as those leave it (a topic's removal and its partitions'
   DELETE_PARTITION_MARKED: both logs have them, or neither).
2. Fencing by controller epoch (ARCHITECTURE §4 invariant 6): ``append`` and ``save_snapshot`` are refused with
   :class:`StaleControllerEpoch` unless the epoch is the one of the lease currently held. The check and the
   write happen in one transaction, so a deposed controller can change nothing, even mid-flight.
3. The controller epoch names a *tenure*: it grows by exactly 1 each time the lease is acquired by a holder
   that did not hold it (first acquisition, after a release, or taking over an expired lease), and never
   shrinks. A holder whose lease expired while nobody else took it resumes the same tenure (same epoch) by
   renewing or re-acquiring: that is safe because writes are fenced by epoch and no other writer ever had
   it. Expiry is judged against the caller's ``now_ms``; processes sharing a store pass wall-clock time.
   Holder names must be unique per process (e.g. include the pid or a random id).
4. The RLMM fence (ARCHITECTURE §4 invariant 3): a record that reports a copy (``COPY_SEGMENT_STARTED`` or
   ``COPY_SEGMENT_FINISHED``) is accepted only if the topic's tiered state, as last written to the metadata log
   by a ``TieredStateRecord`` (and forgotten by ``RemoveTopicRecord``), is ENABLED at exactly the record's
   ``tiered_epoch``. Otherwise the whole batch is refused with :class:`StaleTieredEpoch`. ``DELETE_*`` updates
   and partition-delete records are always accepted: deleting must never be blocked by a disablement.
   The fence state is updated in the same transaction as the metadata-log append that changes it.
5. ``tiered_epoch`` only grows (ARCHITECTURE §4 invariant 1): an append carrying a ``TieredStateRecord`` below the
   topic's current epoch is refused with :class:`StaleTieredEpoch`, so the log always replays (the image
   refuses such a record too).
6. Every read verifies each record's checksum and raises :class:`MetadataLogCorrupt` naming the offset on a
   mismatch. ``recover()`` finds damage and makes the log usable again without losing anything before it:
   the log continues from the last good record (records after the first bad one are a torn tail and are
   moved to a quarantine table, not silently dropped), and the findings are logged and returned.
7. Snapshots and truncation. ``save_snapshot(offset=S, ...)`` (fenced like ``append``; ``start_offset() <= S <
   end_offset()``) stores the snapshot, drops all but the newest ``retain`` snapshots and deletes, in the same
   transaction, every log record below the oldest snapshot kept. The record at that snapshot's own offset stays,
   so a written log is never empty and ``end_offset()`` never moves back; ``start_offset()`` is the first offset
   still held. Keeping two or more snapshots means a damaged newest one still leaves an older one that the
   remaining log continues. Reading below ``start_offset()`` raises :class:`LogTruncated` (a reader that fell
   behind reloads from the latest snapshot), never :class:`MetadataLogCorrupt`. Whoever rebuilds something from
   "the whole log" (the RLMM fence after recovery, salvage) starts from the newest snapshot the remaining log
   continues, or from offset 0 while the log still starts there.
8. Log holds. A reader that must see every record (an audit, the fault suite's checker) holds the log at the next
   offset it will read: ``hold_log(holder=H, offset=O, now_ms=..., ttl_ms=...)`` sets or moves H's hold, and until
   it expires (``now_ms + ttl_ms``) or ``release_log_hold(holder=H)``, ``save_snapshot`` deletes no record at or
   after O (it deletes below the lowest live hold, or below the oldest snapshot kept if that is lower). A hold
   that expired holds nothing, so a reader that died never keeps the log from being truncated; holds are not
   fenced by the lease (a reader is no controller) and change nothing else: offsets, snapshots and reads are as
   without them.

The checksum is zlib's CRC-32 (IEEE). It never leaves the store, so Kafka's CRC-32C buys no compatibility,
and zlib's is always available at C speed; the algorithm is recorded in the store so it can change later.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

import structlog

from orchestrator.errors import InvalidRequest, MetadataLogCorrupt, StaleTieredEpoch, TieredError
from orchestrator.ids import Uuid
from orchestrator.metadata.records import (
    MetadataRecord,
    SegmentState,
    TieredState,
    record_encoder,
)

log = structlog.get_logger(__name__)

CHECKSUM_ALGORITHM = "crc32"

TIERED_STATE_RECORD = "TieredStateRecord"
REMOVE_TOPIC_RECORD = "RemoveTopicRecord"
SEGMENT_RECORD = "RemoteLogSegmentMetadataRecord"
SEGMENT_UPDATE_RECORD = "RemoteLogSegmentMetadataUpdateRecord"
PARTITION_DELETE_RECORD = "RemotePartitionDeleteMetadataRecord"

_COPY_STATES = frozenset({SegmentState.COPY_SEGMENT_STARTED, SegmentState.COPY_SEGMENT_FINISHED})

DEFAULT_RETAINED_SNAPSHOTS = 2  # a damaged newest snapshot still leaves one the log continues


class LogTruncated(TieredError):
    """A read asked for metadata-log records that were deleted behind a snapshot (store invariant 7).

    Not damage: the reader is behind the log's start and must reload from the latest snapshot, then read on.
    """

    name, retriable = "METADATA_LOG_TRUNCATED", True
    hint = "Load the latest snapshot and read the log from just after its offset."


class LogEntry(NamedTuple):
    """A record at its offset. ``controller_epoch`` is the writer's epoch (metadata log); ``appended_at_ms``
    is the caller's clock at append time (RLMM log, when given). A named tuple: replay makes one per record, and
    a tuple is built several times faster than a frozen dataclass."""

    offset: int
    record: MetadataRecord
    controller_epoch: int | None = None
    appended_at_ms: int | None = None


@dataclass(frozen=True, slots=True)
class Lease:
    holder: str
    controller_epoch: int
    expires_at_ms: int

    def expired(self, now_ms: int) -> bool:
        return now_ms >= self.expires_at_ms


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The image as records, after applying the metadata log up to and including ``offset``."""

    offset: int
    records: tuple[MetadataRecord, ...]


@dataclass(frozen=True, slots=True)
class RecoveryReport:
    """What ``recover()`` found and did. ``clean`` is true when nothing was wrong.

    ``first_bad_offset`` is the first metadata-log offset found damaged (the log now ends just before it) and
    ``truncated_records`` how many records from there on were moved out of the log; likewise for the RLMM log.
    ``wal_torn_bytes`` / ``wal_ignored_frames`` describe SQLite's write-ahead log (see
    :mod:`orchestrator.metadata.sqlite.wal`).
    ``corrupt_copy`` is where a damaged database file was kept aside when its readable content was salvaged
    into a fresh file. ``problems`` says each finding in words, for the operator.
    """

    log_end_offset: int
    rlmm_end_offset: int
    first_bad_offset: int | None = None
    truncated_records: int = 0
    first_bad_rlmm_offset: int | None = None
    truncated_rlmm_records: int = 0
    dropped_snapshots: tuple[int, ...] = ()
    wal_torn_bytes: int = 0
    wal_ignored_frames: int = 0
    integrity_errors: tuple[str, ...] = ()
    corrupt_copy: str | None = None
    problems: tuple[str, ...] = field(default=())

    @property
    def clean(self) -> bool:
        return not self.problems


class MetadataStore(Protocol):
    """The store interface (ARCHITECTURE §2). Backends: the SQL core
    (:class:`~orchestrator.metadata.sql.SqlMetadataStore`) on SQLite and on PostgreSQL, and the in-memory fake
    (:class:`InMemoryMetadataStore`).

    Offsets returned are the last offset written; ``end_offset()`` is the next offset to be written and
    ``start_offset()`` the first one still held (0 until a snapshot let older records go). ``save_snapshot``
    returns the log's start offset after it (store invariant 7).

    ``wait_for_change(timeout_s=...)`` blocks until a metadata-log append or a lease change *may* have happened
    (True: woken by a notification) or ``timeout_s`` passed (False). It is a hint, never a guarantee: a follower
    reads the store after every return, so a missed or spurious wake-up costs latency, not correctness. A backend
    that can notify across processes (PostgreSQL's LISTEN/NOTIFY) says so with ``notifies_changes``; the others
    sleep for ``timeout_s`` (the poll interval the caller would have slept anyway).
    """

    # cluster metadata log (and, in the same transaction, RLMM records that must land with it: invariant 1)
    def append(
        self,
        records: Sequence[MetadataRecord],
        *,
        controller_epoch: int,
        remote_log_metadata: Sequence[MetadataRecord] = (),
        now_ms: int | None = None,
    ) -> int: ...

    def read(self, *, from_offset: int = 0, limit: int | None = None) -> Iterator[LogEntry]: ...

    def end_offset(self) -> int: ...

    def start_offset(self) -> int: ...

    # snapshots
    def save_snapshot(
        self,
        *,
        offset: int,
        records: Sequence[MetadataRecord],
        controller_epoch: int,
        retain: int = DEFAULT_RETAINED_SNAPSHOTS,
        now_ms: int | None = None,
    ) -> int: ...

    def latest_snapshot(self) -> Snapshot | None: ...

    # log holds (invariant 8)
    def hold_log(self, *, holder: str, offset: int, now_ms: int, ttl_ms: int) -> None: ...

    def release_log_hold(self, *, holder: str) -> None: ...

    # controller lease
    def acquire_lease(self, *, holder: str, now_ms: int, ttl_ms: int) -> Lease | None: ...

    def renew_lease(self, *, holder: str, controller_epoch: int, now_ms: int, ttl_ms: int) -> Lease: ...

    def release_lease(self, *, holder: str, controller_epoch: int) -> bool: ...

    def current_lease(self) -> Lease | None: ...

    # remote log metadata
    def append_remote_log_metadata(self, records: Sequence[MetadataRecord], *, now_ms: int | None = None) -> int: ...

    def read_remote_log_metadata(self, *, topic_id: Uuid | None = None, from_offset: int = 0) -> Iterator[LogEntry]: ...

    def tiered_state(self, topic_id: Uuid) -> tuple[int, TieredState] | None: ...

    # change notification (followers)
    notifies_changes: bool  # True when wait_for_change wakes on other processes' writes (PostgreSQL)

    def wait_for_change(self, *, timeout_s: float) -> bool: ...

    # lifecycle
    def recover(self) -> RecoveryReport: ...

    def close(self) -> None: ...


# --- pure rules shared by the backends -------------------------------------------------------------------------


def checksum(data: bytes) -> int:
    return zlib.crc32(data) & 0xFFFFFFFF


def encode_all(records: Sequence[MetadataRecord], *, rlmm: bool) -> list[bytes]:
    """Encode a batch before anything is written; a record that does not encode, or that belongs to the other
    log (cluster metadata and RLMM record types share type numbers), is an :class:`InvalidRequest`."""
    out: list[bytes] = []
    for i, record in enumerate(records):
        try:
            prefix, encode_into, is_rlmm = record_encoder(record.name, record.version)
            if is_rlmm != rlmm:
                where = "the remote log metadata" if rlmm else "the cluster metadata log"
                raise InvalidRequest(f"{record.name} does not belong in {where}")
            data = bytearray(prefix)
            encode_into(record.fields, data)
            out.append(bytes(data))
        except (ValueError, TypeError, KeyError, AttributeError, InvalidRequest) as exc:
            raise InvalidRequest(f"{record.name} (record {i} of the batch) cannot be encoded: {exc}") from exc
    return out


def encode_snapshot(encoded_records: Iterable[bytes]) -> bytes:
    """Length-prefixed concatenation (4-byte big-endian sizes); one checksum covers the whole blob."""
    out = bytearray()
    for data in encoded_records:
        out += struct.pack(">I", len(data))
        out += data
    return bytes(out)


def split_snapshot(blob: bytes, *, offset: int) -> list[bytes]:
    parts: list[bytes] = []
    pos = 0
    while pos < len(blob):
        if pos + 4 > len(blob):
            raise MetadataLogCorrupt(f"snapshot at offset {offset}: truncated record length at byte {pos}")
        (size,) = struct.unpack_from(">I", blob, pos)
        pos += 4
        if pos + size > len(blob):
            raise MetadataLogCorrupt(f"snapshot at offset {offset}: record of {size} bytes overruns the snapshot")
        parts.append(blob[pos : pos + size])
        pos += size
    return parts


FenceLookup = Callable[[Uuid], "tuple[int, TieredState] | None"]
FenceChanges = dict[Uuid, "tuple[int, TieredState] | None"]


def fence_topic_ids(records: Iterable[MetadataRecord]) -> list[Uuid]:
    """The topic ids whose fence a metadata-log batch may change (its TieredStateRecords and RemoveTopicRecords),
    each once: what a backend reads in one query before :func:`plan_fence_changes`. A malformed topic id is left
    out (the plan refuses its record)."""
    found: dict[Uuid, None] = {}
    for record in records:
        if record.name in (TIERED_STATE_RECORD, REMOVE_TOPIC_RECORD):
            topic_id = record.fields.get("topic_id")
            if isinstance(topic_id, Uuid):
                found[topic_id] = None
    return list(found)


def plan_fence_changes(records: Iterable[MetadataRecord], lookup: FenceLookup) -> FenceChanges:
    """The tiered-state changes a metadata-log batch makes (``None`` = topic removed), in batch order.

    Raises :class:`StaleTieredEpoch` for a TieredStateRecord below the topic's current epoch (invariant 5).
    """
    changes: FenceChanges = {}
    for record in records:
        if record.name not in (TIERED_STATE_RECORD, REMOVE_TOPIC_RECORD):
            continue
        try:
            topic_id: Uuid = record.fields["topic_id"]
            if record.name == REMOVE_TOPIC_RECORD:
                changes[topic_id] = None
                continue
            epoch = int(record.fields["tiered_epoch"])
            state = TieredState(record.fields["tiered_state"])
        except (KeyError, ValueError, TypeError) as exc:
            raise InvalidRequest(f"{record.name} is missing or has a bad field: {exc!r}") from exc
        current = changes[topic_id] if topic_id in changes else lookup(topic_id)
        if current is not None and epoch < current[0]:
            raise StaleTieredEpoch(
                f"TieredStateRecord for topic {topic_id} at tiered epoch {epoch} is below the current "
                f"epoch {current[0]} ({current[1].name}); tiered_epoch only grows"
            )
        changes[topic_id] = (epoch, state)
    return changes


def rlmm_topic_id(record: MetadataRecord) -> Uuid:
    """The topic id an RLMM record is about."""
    f = record.fields
    try:
        if record.name in (SEGMENT_RECORD, SEGMENT_UPDATE_RECORD):
            tid = f["remote_log_segment_id"]["topic_id_partition"]["id"]
        elif record.name == PARTITION_DELETE_RECORD:
            tid = f["topic_id_partition"]["id"]
        else:
            raise InvalidRequest(f"{record.name} is not a remote log metadata record")
    except (KeyError, TypeError) as exc:
        raise InvalidRequest(f"{record.name} has no topic id ({exc!r} missing)") from exc
    if not isinstance(tid, Uuid):
        raise InvalidRequest(f"{record.name} names topic id {tid!r}, not a Uuid")
    return tid


def _segment_label(record: MetadataRecord) -> str:
    f: Mapping[str, Any] = record.fields
    sid = f["remote_log_segment_id"]
    tip = sid["topic_id_partition"]
    return f"segment {sid['id']} of {tip['name']}-{tip['partition']}"


def check_rlmm_fence(records: Iterable[MetadataRecord], lookup: FenceLookup) -> list[Uuid]:
    """Check a whole RLMM batch against the fence (invariant 4); return each record's topic id.

    Raises :class:`StaleTieredEpoch` naming the topic, the record's epoch and the topic's current state and epoch
    on the first record that reports a copy the topic's tiered state does not allow.
    """
    topic_ids: list[Uuid] = []
    for record in records:
        topic_id = rlmm_topic_id(record)
        topic_ids.append(topic_id)
        if record.name == PARTITION_DELETE_RECORD:
            continue
        try:
            state = SegmentState(record.fields["remote_log_segment_state"])
        except (KeyError, ValueError) as exc:
            raise InvalidRequest(f"{record.name} for topic {topic_id} has no valid segment state") from exc
        if state not in _COPY_STATES:
            continue
        epoch = record.fields.get("tiered_epoch")
        current = lookup(topic_id)
        if current is not None and current[1] == TieredState.ENABLED and epoch == current[0]:
            continue
        now = "unknown to the metadata log" if current is None else f"{current[1].name} at epoch {current[0]}"
        log.warning(
            "metadata.rlmm.fenced",
            topic_id=str(topic_id),
            record=record.name,
            segment_state=state.name,
            record_tiered_epoch=epoch,
            tiered_state=None if current is None else current[1].name,
            tiered_epoch=None if current is None else current[0],
        )
        raise StaleTieredEpoch(
            f"{record.name} {state.name} for {_segment_label(record)} (topic {topic_id}) at tiered epoch "
            f"{epoch} refused: the topic is {now}"
        )
    return topic_ids


def check_read_range(from_offset: int, limit: int | None) -> None:
    if from_offset < 0:
        raise InvalidRequest(f"from_offset must be >= 0, got {from_offset}")
    if limit is not None and limit < 0:
        raise InvalidRequest(f"limit must be >= 0, got {limit}")


def check_lease_args(holder: str, ttl_ms: int) -> None:
    if not holder:
        raise InvalidRequest("a lease holder needs a non-empty name")
    if ttl_ms <= 0:
        raise InvalidRequest(f"lease ttl_ms must be positive, got {ttl_ms}")


def check_hold_args(holder: str, offset: int, ttl_ms: int) -> None:
    if not holder:
        raise InvalidRequest("a log hold needs a non-empty holder name")
    if offset < 0:
        raise InvalidRequest(f"a log hold's offset must be >= 0, got {offset}")
    if ttl_ms <= 0:
        raise InvalidRequest(f"a log hold's ttl_ms must be positive, got {ttl_ms}")


def truncation_point(oldest_snapshot: int, lowest_hold: int | None) -> int:
    """The offset below which ``save_snapshot`` deletes the log: the oldest snapshot kept, or the lowest live log
    hold when that is lower (invariant 8)."""
    return oldest_snapshot if lowest_hold is None else min(oldest_snapshot, lowest_hold)


def check_snapshot_offset(offset: int, start_offset: int, end_offset: int, retain: int) -> None:
    if retain < 1:
        raise InvalidRequest(f"a store keeps at least one snapshot, got retain={retain}")
    if not start_offset <= offset < end_offset:
        raise InvalidRequest(
            f"snapshot offset {offset} is not in the log: offsets run from {start_offset} to {end_offset - 1}"
        )


def truncated(from_offset: int, start_offset: int) -> LogTruncated:
    return LogTruncated(
        f"metadata log offset {from_offset} was deleted behind a snapshot; the log starts at {start_offset}"
    )


def snapshot_base(
    snapshots: Iterable[tuple[int, bytes, int]], *, start_offset: int, end_offset: int
) -> tuple[int, list[bytes]] | None:
    """The newest snapshot, among ``(offset, blob, crc)`` rows, that verifies and that the log continues
    (``start_offset - 1 <= offset < end_offset``): ``(offset, encoded records)``, or None."""
    for offset, blob, crc in sorted(snapshots, key=lambda row: row[0], reverse=True):
        if start_offset - 1 <= offset < end_offset and checksum(blob) == crc:
            try:
                return offset, split_snapshot(blob, offset=offset)
            except MetadataLogCorrupt:
                continue
    return None


def log_recovery(report: RecoveryReport, *, store: str) -> None:
    """Emit ``metadata.recovered``: a warning naming every finding, or a debug line when clean."""
    if report.clean:
        log.debug("metadata.recovered", store=store, clean=True, log_end_offset=report.log_end_offset)
        return
    log.warning(
        "metadata.recovered",
        store=store,
        clean=False,
        log_end_offset=report.log_end_offset,
        rlmm_end_offset=report.rlmm_end_offset,
        first_bad_offset=report.first_bad_offset,
        truncated_records=report.truncated_records,
        first_bad_rlmm_offset=report.first_bad_rlmm_offset,
        truncated_rlmm_records=report.truncated_rlmm_records,
        dropped_snapshots=list(report.dropped_snapshots),
        wal_torn_bytes=report.wal_torn_bytes,
        wal_ignored_frames=report.wal_ignored_frames,
        integrity_errors=list(report.integrity_errors),
        corrupt_copy=report.corrupt_copy,
        problems=list(report.problems),
    )
