"""An in-memory :class:`MetadataStore` with the same semantics as the SQLite one, for fast tests.

It is a fake, not a mock: it keeps every invariant of ``orchestrator.metadata.store`` (dense offsets, all-or-
nothing appends, epoch fencing, the lease tenure rules, the RLMM fence, checksums verified on every read) and
passes the same contract suite. Records are stored encoded, with their checksum, exactly as the SQLite backend
stores them, so a record that would not encode is refused here too. One lock serializes every operation, so
threads may share an instance. ``inject_corruption`` replaces a stored record's bytes (keeping the old
checksum) so that tests can exercise detection and ``recover()``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import structlog

from orchestrator.errors import MetadataLogCorrupt, StaleControllerEpoch
from orchestrator.ids import Uuid
from orchestrator.metadata.records import MetadataRecord, TieredState, decode_record
from orchestrator.metadata.store import (
    DEFAULT_RETAINED_SNAPSHOTS,
    Lease,
    LogEntry,
    MetadataStore,
    RecoveryReport,
    Snapshot,
    check_hold_args,
    check_lease_args,
    check_read_range,
    check_rlmm_fence,
    check_snapshot_offset,
    checksum,
    encode_all,
    encode_snapshot,
    log_recovery,
    plan_fence_changes,
    snapshot_base,
    split_snapshot,
    truncated,
    truncation_point,
)

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class _Row:
    data: bytes
    crc: int
    controller_epoch: int | None = None
    topic_id: Uuid | None = None
    appended_at_ms: int | None = None


class InMemoryMetadataStore:
    """A :class:`~orchestrator.metadata.store.MetadataStore` held in process memory."""

    def __init__(self, *, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock  # seconds; read only where a caller gives no now_ms, as the SQL stores do
        self._lock = threading.RLock()
        self._log: list[_Row] = []  # the record at offset o is self._log[o - self._log_start]
        self._log_start = 0
        self._rlmm: list[_Row] = []
        self._snapshots: dict[int, _Row] = {}
        self._holds: dict[str, tuple[int, int]] = {}  # holder -> (offset held from, expires at ms)
        self._fence: dict[Uuid, tuple[int, TieredState]] = {}
        self._lease_holder: str | None = None
        self._lease_epoch = 0
        self._lease_expires_at_ms = 0
        self._quarantine: list[tuple[str, int, _Row]] = []

    # --- cluster metadata log -------------------------------------------------------------------------------

    def append(
        self,
        records: Sequence[MetadataRecord],
        *,
        controller_epoch: int,
        remote_log_metadata: Sequence[MetadataRecord] = (),
        now_ms: int | None = None,
    ) -> int:
        encoded = encode_all(records, rlmm=False)
        encoded_rlmm = encode_all(remote_log_metadata, rlmm=True)
        with self._lock:
            self._check_epoch(controller_epoch, what="append to the metadata log")
            changes = plan_fence_changes(records, self._fence.get)

            def fence_after(topic_id: Uuid) -> tuple[int, TieredState] | None:
                return changes[topic_id] if topic_id in changes else self._fence.get(topic_id)

            rlmm_topic_ids = check_rlmm_fence(remote_log_metadata, fence_after)  # before anything is written
            for data in encoded:
                self._log.append(_Row(data, checksum(data), controller_epoch=controller_epoch))
            for topic_id, state in changes.items():
                if state is None:
                    self._fence.pop(topic_id, None)
                else:
                    self._fence[topic_id] = state
            for data, topic_id in zip(encoded_rlmm, rlmm_topic_ids, strict=True):
                self._rlmm.append(_Row(data, checksum(data), topic_id=topic_id, appended_at_ms=now_ms))
            return self._end() - 1

    def read(self, *, from_offset: int = 0, limit: int | None = None) -> Iterator[LogEntry]:
        check_read_range(from_offset, limit)
        with self._lock:
            if from_offset < self._log_start and from_offset < self._end() and limit != 0:
                raise truncated(from_offset, self._log_start)
            first = max(from_offset - self._log_start, 0)
            rows = self._log[first : None if limit is None else first + limit]
        return (
            LogEntry(i, _decode(row, i, rlmm=False), controller_epoch=row.controller_epoch)
            for i, row in enumerate(rows, start=from_offset)
        )

    def end_offset(self) -> int:
        with self._lock:
            return self._end()

    def start_offset(self) -> int:
        with self._lock:
            return self._log_start

    def _end(self) -> int:
        return self._log_start + len(self._log)

    # --- snapshots --------------------------------------------------------------------------------------------

    def save_snapshot(
        self,
        *,
        offset: int,
        records: Sequence[MetadataRecord],
        controller_epoch: int,
        retain: int = DEFAULT_RETAINED_SNAPSHOTS,
        now_ms: int | None = None,
    ) -> int:
        blob = encode_snapshot(encode_all(records, rlmm=False))
        now = int(self._clock() * 1000) if now_ms is None else now_ms
        with self._lock:
            self._check_epoch(controller_epoch, what="save a snapshot")
            check_snapshot_offset(offset, self._log_start, self._end(), retain)
            self._snapshots[offset] = _Row(blob, checksum(blob), controller_epoch=controller_epoch)
            for old in sorted(self._snapshots)[:-retain]:
                del self._snapshots[old]
            live = [held for held, expires in self._holds.values() if expires > now]
            oldest = truncation_point(min(self._snapshots), min(live) if live else None)
            deleted = max(oldest - self._log_start, 0)
            del self._log[:deleted]
            self._log_start += deleted
            log.info(
                "metadata.snapshot.saved",
                offset=offset,
                records=len(records),
                controller_epoch=controller_epoch,
                deleted_records=deleted,
                log_start_offset=self._log_start,
            )
            return self._log_start

    def hold_log(self, *, holder: str, offset: int, now_ms: int, ttl_ms: int) -> None:
        check_hold_args(holder, offset, ttl_ms)
        with self._lock:
            self._holds = {h: v for h, v in self._holds.items() if v[1] > now_ms}
            self._holds[holder] = (offset, now_ms + ttl_ms)

    def release_log_hold(self, *, holder: str) -> None:
        with self._lock:
            self._holds.pop(holder, None)

    def latest_snapshot(self) -> Snapshot | None:
        with self._lock:
            if not self._snapshots:
                return None
            offset = max(self._snapshots)
            row = self._snapshots[offset]
        if checksum(row.data) != row.crc:
            raise MetadataLogCorrupt(f"snapshot at offset {offset}: checksum mismatch")
        parts = split_snapshot(row.data, offset=offset)
        return Snapshot(offset, tuple(decode_record(p) for p in parts))

    # --- lease ------------------------------------------------------------------------------------------------

    def acquire_lease(self, *, holder: str, now_ms: int, ttl_ms: int) -> Lease | None:
        check_lease_args(holder, ttl_ms)
        with self._lock:
            if self._lease_holder == holder:
                pass  # resumes its tenure, expired or not (store invariant 3)
            elif self._lease_holder is None or now_ms >= self._lease_expires_at_ms:
                self._lease_holder = holder
                self._lease_epoch += 1
                log.info("metadata.lease.acquired", holder=holder, controller_epoch=self._lease_epoch)
            else:
                return None
            self._lease_expires_at_ms = now_ms + ttl_ms
            return Lease(holder, self._lease_epoch, self._lease_expires_at_ms)

    def renew_lease(self, *, holder: str, controller_epoch: int, now_ms: int, ttl_ms: int) -> Lease:
        check_lease_args(holder, ttl_ms)
        with self._lock:
            if self._lease_holder != holder or self._lease_epoch != controller_epoch:
                raise StaleControllerEpoch(
                    f"{holder} cannot renew the lease at controller epoch {controller_epoch}: {self._describe()}"
                )
            self._lease_expires_at_ms = now_ms + ttl_ms
            return Lease(holder, controller_epoch, self._lease_expires_at_ms)

    def release_lease(self, *, holder: str, controller_epoch: int) -> bool:
        with self._lock:
            if self._lease_holder != holder or self._lease_epoch != controller_epoch:
                return False
            self._lease_holder = None
            self._lease_expires_at_ms = 0
            log.info("metadata.lease.released", holder=holder, controller_epoch=controller_epoch)
            return True

    def current_lease(self) -> Lease | None:
        with self._lock:
            if self._lease_holder is None:
                return None
            return Lease(self._lease_holder, self._lease_epoch, self._lease_expires_at_ms)

    # --- remote log metadata ----------------------------------------------------------------------------------

    def append_remote_log_metadata(self, records: Sequence[MetadataRecord], *, now_ms: int | None = None) -> int:
        encoded = encode_all(records, rlmm=True)
        with self._lock:
            topic_ids = check_rlmm_fence(records, self._fence.get)
            for data, topic_id in zip(encoded, topic_ids, strict=True):
                self._rlmm.append(_Row(data, checksum(data), topic_id=topic_id, appended_at_ms=now_ms))
            return len(self._rlmm) - 1

    def read_remote_log_metadata(self, *, topic_id: Uuid | None = None, from_offset: int = 0) -> Iterator[LogEntry]:
        check_read_range(from_offset, None)
        with self._lock:
            rows = self._rlmm[from_offset:]
        return (
            LogEntry(i, _decode(row, i, rlmm=True), appended_at_ms=row.appended_at_ms)
            for i, row in enumerate(rows, start=from_offset)
            if topic_id is None or row.topic_id == topic_id
        )

    def tiered_state(self, topic_id: Uuid) -> tuple[int, TieredState] | None:
        with self._lock:
            return self._fence.get(topic_id)

    # --- lifecycle --------------------------------------------------------------------------------------------

    def recover(self) -> RecoveryReport:
        """Verify every checksum; cut the logs at their first bad record and rebuild the fence state."""
        with self._lock:
            problems: list[str] = []
            bad_log = _first_bad(self._log, self._log_start)
            cut = self._cut("log", self._log, bad_log, self._log_start, problems)
            bad_rlmm = _first_bad(self._rlmm, 0)
            cut_rlmm = self._cut("rlmm", self._rlmm, bad_rlmm, 0, problems)
            dropped = []
            for offset, row in sorted(self._snapshots.items()):
                if checksum(row.data) != row.crc or offset >= self._end():
                    dropped.append(offset)
                    del self._snapshots[offset]
                    problems.append(f"snapshot at offset {offset} dropped (damaged or beyond the log end)")
            if cut:
                self._rebuild_fence()
                if self._lease_holder is not None:  # the controller's image may hold the lost records
                    log.warning(
                        "metadata.lease.revoked",
                        holder=self._lease_holder,
                        controller_epoch=self._lease_epoch,
                        reason="log truncated",
                    )
                    self._lease_holder, self._lease_expires_at_ms = None, 0
            report = RecoveryReport(
                log_end_offset=self._end(),
                rlmm_end_offset=len(self._rlmm),
                first_bad_offset=bad_log,
                truncated_records=cut,
                first_bad_rlmm_offset=bad_rlmm,
                truncated_rlmm_records=cut_rlmm,
                dropped_snapshots=tuple(dropped),
                problems=tuple(problems),
            )
        log_recovery(report, store="memory")
        return report

    notifies_changes = False  # one process: nobody else writes, and callers keep their own poll interval

    def wait_for_change(self, *, timeout_s: float) -> bool:
        """Sleep ``timeout_s``: see ``MetadataStore.wait_for_change``."""
        time.sleep(max(0.0, timeout_s))
        return False

    def close(self) -> None:
        pass

    def inject_corruption(self, *, offset: int, data: bytes, rlmm: bool = False) -> None:
        """Fault injection for tests: replace the stored bytes at ``offset`` and keep the old checksum."""
        with self._lock:
            rows = self._rlmm if rlmm else self._log
            index = offset if rlmm else offset - self._log_start
            old = rows[index]
            rows[index] = _Row(data, old.crc, old.controller_epoch, old.topic_id, old.appended_at_ms)

    # --- internals --------------------------------------------------------------------------------------------

    def _check_epoch(self, controller_epoch: int, *, what: str) -> None:
        if self._lease_holder is None or controller_epoch != self._lease_epoch:
            log.warning("metadata.append.fenced", controller_epoch=controller_epoch, current=self._lease_epoch)
            raise StaleControllerEpoch(f"controller epoch {controller_epoch} cannot {what}: {self._describe()}")

    def _describe(self) -> str:
        if self._lease_holder is None:
            return f"no controller holds the lease (last controller epoch {self._lease_epoch})"
        return f"the lease is held by {self._lease_holder} at controller epoch {self._lease_epoch}"

    def _rebuild_fence(self) -> None:
        """The fence from the log (store invariant 7): from offset 0, or the newest snapshot the log continues."""
        base: list[bytes] = []
        after = -1
        if self._log_start > 0:
            rows = ((o, r.data, r.crc) for o, r in self._snapshots.items())
            found = snapshot_base(rows, start_offset=self._log_start, end_offset=self._end())
            if found is None:
                raise MetadataLogCorrupt(
                    f"the metadata log starts at offset {self._log_start} and no snapshot it continues verifies"
                )
            after, base = found
        tail = [r.data for r in self._log[after + 1 - self._log_start :]]
        changes = plan_fence_changes((decode_record(d) for d in base + tail), lambda _t: None)
        self._fence = {tid: state for tid, state in changes.items() if state is not None}

    def _cut(self, kind: str, rows: list[_Row], first_bad: int | None, start: int, problems: list[str]) -> int:
        if first_bad is None:
            return 0
        tail = rows[first_bad - start :]
        self._quarantine.extend((kind, first_bad + i, row) for i, row in enumerate(tail))
        del rows[first_bad - start :]
        problems.append(
            f"{kind}: checksum mismatch at offset {first_bad}; {len(tail)} record(s) from there on quarantined"
        )
        return len(tail)


def _first_bad(rows: list[_Row], start: int) -> int | None:
    return next((start + i for i, row in enumerate(rows) if checksum(row.data) != row.crc), None)


def _decode(row: _Row, offset: int, *, rlmm: bool) -> MetadataRecord:
    if checksum(row.data) != row.crc:
        kind = "remote log metadata" if rlmm else "metadata log"
        log.error("metadata.log.corrupt", offset=offset, log=kind)
        raise MetadataLogCorrupt(f"{kind} record at offset {offset}: checksum mismatch")
    return decode_record(row.data, rlmm=rlmm)


def _conforms(store: InMemoryMetadataStore) -> MetadataStore:
    return store  # mypy checks here that the backend implements the whole interface
