"""The one SQL core: the :class:`MetadataStore` contract written once, for every SQL engine behind a dialect.

:class:`SqlMetadataStore` keeps every invariant of :mod:`orchestrator.metadata.store` in SQL that SQLite and
PostgreSQL both run (the dialect, :mod:`.dialect`, supplies the few names, the connection, the transaction,
notification and recovery below the rows; :mod:`.tables` the row-level reads and repairs). The backends
(:class:`~orchestrator.metadata.sqlite.SqliteMetadataStore`,
:class:`~orchestrator.metadata.postgres.PostgresMetadataStore`) are this class with their dialect and their
constructor.

Transactions and fences. Every write (append, snapshot, lease change, RLMM append, repair) is one transaction that
begins by reading the lease row under the store's write lock (SQLite: ``BEGIN IMMEDIATE`` locks the file;
PostgreSQL: ``SELECT ... FOR UPDATE`` locks the row), so writes are serialized across every process and:

* the controller-epoch check and the write it guards are in one transaction (store invariant 2): a deposed
  controller whose append is queued behind the new controller's lease acquisition reads the new epoch and is
  refused;
* the next offset is ``MAX + 1`` of its log, read under the lock, so offsets are dense and distinct whichever
  process writes (invariant 1); a refused or failed batch rolls back whole;
* the RLMM fence table is read and the metadata log's changes to it are written under the same lock, so no
  append can change a topic's tiered state between an RLMM fence check and the RLMM write (invariant 4).

Group commit. Appends (to either log) from concurrent threads of one process share one transaction
(:mod:`..group_commit`), each in its own savepoint, so one append's refusal changes nothing of the others; the
lease row read when the transaction began stays locked, so every append of the group is checked against it.

Reads are single statements, a page (:data:`~.tables.PAGE_ROWS` rows) at a time, and take no write lock. One lock
(:attr:`_lock`) serializes this process's use of the one connection.
"""

from __future__ import annotations

import contextlib
import functools
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Generic, NamedTuple, Self

import structlog

from orchestrator import crash_points
from orchestrator.errors import KafkaStorageError, MetadataLogCorrupt, StaleControllerEpoch
from orchestrator.ids import Uuid
from orchestrator.metadata.group_commit import DEFAULT_MAX_GROUP, GroupCommit, sql_savepoint
from orchestrator.metadata.records import MetadataRecord, TieredState, decode_record
from orchestrator.metadata.sql.dialect import C, FileFindings, SqlDialect
from orchestrator.metadata.sql.tables import (
    PAGE_ROWS,
    Findings,
    LeaseRow,
    LogRow,
    apply_fence_changes,
    executemany,
    fence_lookup,
    fence_lookup_many,
    lease_row,
    page_log,
    repair,
    scalar,
    scan,
    verified,
)
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
    fence_topic_ids,
    log_recovery,
    plan_fence_changes,
    split_snapshot,
    truncation_point,
)

log = structlog.get_logger(__name__)


class WriteTransaction(NamedTuple, Generic[C]):
    """An open write transaction: its connection, and the lease row it locked when it began."""

    db: C
    lease: LeaseRow


class SqlMetadataStore(Generic[C]):
    """A :class:`~orchestrator.metadata.store.MetadataStore` on a SQL engine (see the module docstring).

    ``location`` names the store in logs and errors (never a password). ``clock`` (seconds since the epoch) only
    stamps quarantined rows. ``max_group_commit``: appends one transaction takes at most (1: one per append). A
    backend's constructor opens its store (and recovers it, when asked); :attr:`last_recovery` keeps the latest
    recovery's report.
    """

    def __init__(
        self,
        dialect: SqlDialect[C],
        *,
        location: str,
        clock: Callable[[], float] = time.time,
        max_group_commit: int = DEFAULT_MAX_GROUP,
    ) -> None:
        self.location = location
        self._dialect = dialect
        self._sql = dialect.sql
        self._clock = clock
        self._lock = threading.RLock()
        self._closed = False
        self._group: GroupCommit[WriteTransaction[C]] = GroupCommit(
            self._write, lambda tx: sql_savepoint(tx.db.execute), errors=dialect.errors, max_group=max_group_commit
        )
        # Partials are C-level calls: reading the logs makes no Python call of its own per record.
        self._verified_rlmm = functools.partial(verified, rlmm=True, store=location)
        self.notifies_changes = dialect.changes.notifies_changes
        self.last_recovery: RecoveryReport | None = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

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
        sql = self._sql

        def write(tx: WriteTransaction[C]) -> int:
            self._check_epoch(tx.lease, controller_epoch, what="append to the metadata log")
            changes = plan_fence_changes(records, fence_lookup_many(tx.db, sql, fence_topic_ids(records)).get)
            start = scalar(tx.db, sql.log.next_offset)
            rows = [(start + i, controller_epoch, data, checksum(data)) for i, data in enumerate(encoded)]
            executemany(tx.db, sql.insert_log, rows)
            apply_fence_changes(tx.db, sql, changes)
            if encoded_rlmm:  # in the same transaction (store invariant 1), checked against the fence just written
                self._insert_rlmm(tx.db, remote_log_metadata, encoded_rlmm, now_ms)
            if encoded:
                self._dialect.changes.announce(tx.db)
            return start + len(encoded) - 1

        return self._group.run(write)

    def read(self, *, from_offset: int = 0, limit: int | None = None) -> Iterator[LogEntry]:
        check_read_range(from_offset, limit)
        return self._iter_log(from_offset, limit)

    def _iter_log(self, expected: int, limit: int | None) -> Iterator[LogEntry]:
        def fetch_page(from_offset: int, rows: int) -> list[LogRow]:
            with self._read() as db:
                return db.execute(self._sql.read_log, (from_offset, rows)).fetchall()

        return page_log(
            fetch_page,
            expected=expected,
            limit=limit,
            start_offset=self.start_offset,
            store=self.location,
            on_missing=lambda offset: log.error(
                "metadata.log.corrupt", store=self.location, offset=offset, reason="missing"
            ),
        )

    def end_offset(self) -> int:
        with self._read() as db:
            return scalar(db, self._sql.log.next_offset)

    def start_offset(self) -> int:
        with self._read() as db:
            return scalar(db, self._sql.log_start)

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
        sql = self._sql
        now = int(self._clock() * 1000) if now_ms is None else now_ms
        with self._write() as (db, lease):
            self._check_epoch(lease, controller_epoch, what="save a snapshot")
            check_snapshot_offset(offset, scalar(db, sql.log_start), scalar(db, sql.log.next_offset), retain)
            db.execute(sql.save_snapshot, (offset, controller_epoch, len(records), blob, checksum(blob)))
            crash_points.reached("controller.mid_snapshot")  # written, not committed: the transaction dies with it
            db.execute(sql.keep_newest_snapshots, (retain,))
            held = db.execute(sql.lowest_hold, (now,)).fetchone()
            cut = truncation_point(scalar(db, sql.oldest_snapshot), None if held[0] is None else int(held[0]))
            deleted = db.execute(sql.delete_log_below, (cut,)).rowcount
            start = scalar(db, sql.log_start)
        log.info(
            "metadata.snapshot.saved",
            offset=offset,
            records=len(records),
            controller_epoch=controller_epoch,
            deleted_records=deleted,
            log_start_offset=start,
        )
        return start

    def latest_snapshot(self) -> Snapshot | None:
        with self._read() as db:
            row = db.execute(self._sql.latest_snapshot).fetchone()
        if row is None:
            return None
        offset, data, crc = int(row[0]), row[1], int(row[2])
        if checksum(data) != crc:
            log.error("metadata.log.corrupt", store=self.location, snapshot_offset=offset, reason="checksum")
            raise MetadataLogCorrupt(f"snapshot at offset {offset}: checksum mismatch")
        return Snapshot(offset, tuple(decode_record(part) for part in split_snapshot(data, offset=offset)))

    # --- log holds (store invariant 8) -------------------------------------------------------------------------

    def hold_log(self, *, holder: str, offset: int, now_ms: int, ttl_ms: int) -> None:
        check_hold_args(holder, offset, ttl_ms)
        with self._write() as (db, _lease):
            db.execute(self._sql.drop_expired_holds, (now_ms,))
            db.execute(self._sql.set_hold, (holder, offset, now_ms + ttl_ms))

    def release_log_hold(self, *, holder: str) -> None:
        with self._write() as (db, _lease):
            db.execute(self._sql.drop_hold, (holder,))

    # --- lease ------------------------------------------------------------------------------------------------

    def acquire_lease(self, *, holder: str, now_ms: int, ttl_ms: int) -> Lease | None:
        check_lease_args(holder, ttl_ms)
        with self._write() as (db, lease):
            epoch = lease.controller_epoch
            if lease.holder == holder:
                pass  # resumes its tenure, expired or not (store invariant 3)
            elif lease.holder is None or now_ms >= lease.expires_at_ms:
                epoch += 1
                log.info("metadata.lease.acquired", holder=holder, controller_epoch=epoch, previous_holder=lease.holder)
                self._dialect.changes.announce(db)
            else:
                return None
            db.execute(self._sql.set_lease, (holder, epoch, now_ms + ttl_ms))
            return Lease(holder, epoch, now_ms + ttl_ms)

    def renew_lease(self, *, holder: str, controller_epoch: int, now_ms: int, ttl_ms: int) -> Lease:
        check_lease_args(holder, ttl_ms)
        with self._write() as (db, lease):
            if lease.holder != holder or lease.controller_epoch != controller_epoch:
                raise StaleControllerEpoch(
                    f"{holder} cannot renew the lease at controller epoch {controller_epoch}: {lease.describe()}"
                )
            db.execute(self._sql.extend_lease, (now_ms + ttl_ms,))
            return Lease(holder, controller_epoch, now_ms + ttl_ms)

    def release_lease(self, *, holder: str, controller_epoch: int) -> bool:
        with self._write() as (db, lease):
            if lease.holder != holder or lease.controller_epoch != controller_epoch:
                return False
            db.execute(self._sql.free_lease)
            self._dialect.changes.announce(db)
        log.info("metadata.lease.released", holder=holder, controller_epoch=controller_epoch)
        return True

    def current_lease(self) -> Lease | None:
        with self._read() as db:
            lease = lease_row(db, self._sql.read_lease)
        return None if lease.holder is None else Lease(lease.holder, lease.controller_epoch, lease.expires_at_ms)

    # --- remote log metadata ----------------------------------------------------------------------------------

    def append_remote_log_metadata(self, records: Sequence[MetadataRecord], *, now_ms: int | None = None) -> int:
        encoded = encode_all(records, rlmm=True)
        return self._group.run(lambda tx: self._insert_rlmm(tx.db, records, encoded, now_ms))

    def _insert_rlmm(self, db: C, records: Sequence[MetadataRecord], encoded: list[bytes], now_ms: int | None) -> int:
        """Write an RLMM batch in the caller's transaction, after its fence check (store invariant 4)."""
        sql = self._sql
        topic_ids = check_rlmm_fence(records, lambda tid: fence_lookup(db, sql, tid))
        start = scalar(db, sql.rlmm.next_offset)
        rows = [
            (start + i, sql.topic_key(tid), now_ms, data, checksum(data))
            for i, (data, tid) in enumerate(zip(encoded, topic_ids, strict=True))
        ]
        executemany(db, sql.insert_rlmm, rows)
        crash_points.reached("store.mid_rlmm_append")  # written, not committed: the store's write lock is held
        return start + len(encoded) - 1

    def read_remote_log_metadata(self, *, topic_id: Uuid | None = None, from_offset: int = 0) -> Iterator[LogEntry]:
        check_read_range(from_offset, None)
        return self._iter_rlmm(topic_id, from_offset)

    def _iter_rlmm(self, topic_id: Uuid | None, expected: int) -> Iterator[LogEntry]:
        dense = topic_id is None
        key = None if topic_id is None else self._sql.topic_key(topic_id)
        while True:
            with self._read() as db:
                if key is None:
                    rows = db.execute(self._sql.read_rlmm, (expected, PAGE_ROWS)).fetchall()
                else:
                    rows = db.execute(self._sql.read_rlmm_topic, (key, expected, PAGE_ROWS)).fetchall()
            for offset, appended_at_ms, data, crc in rows:
                if dense and offset != expected:
                    log.error("metadata.log.corrupt", store=self.location, rlmm_offset=expected, reason="missing")
                    raise MetadataLogCorrupt(f"remote log metadata offset {expected} is missing (next: {offset})")
                yield LogEntry(offset, self._verified_rlmm(data, crc, offset), appended_at_ms=appended_at_ms)
                expected = offset + 1
            if len(rows) < PAGE_ROWS:
                return

    def tiered_state(self, topic_id: Uuid) -> tuple[int, TieredState] | None:
        with self._read() as db:
            return fence_lookup(db, self._sql, topic_id)

    # --- change notification ----------------------------------------------------------------------------------

    def wait_for_change(self, *, timeout_s: float) -> bool:
        """See ``MetadataStore.wait_for_change``: the dialect's change feed (LISTEN/NOTIFY, or polling)."""
        return self._dialect.changes.wait(timeout_s=timeout_s, closed=lambda: self._closed)

    # --- lifecycle --------------------------------------------------------------------------------------------

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._dialect.disconnect()
        self._dialect.changes.close()  # outside the lock: a wait in progress notices the close within its slice

    def recover(self) -> RecoveryReport:
        """Find damage, repair what can be repaired without losing anything before it, and report it (``store``
        invariant 6): the dialect below the rows first, then each log cut at its first bad record (the rest
        quarantined), bad snapshots dropped, the fence rebuilt and the lease revoked if the metadata log lost
        records. The rows are scanned without the write lock; only damage makes the scan run again, and the
        repair, under it (another process may have repaired it meanwhile)."""
        with self._lock, self._dialect.errors():
            self._closed = False
            with self._dialect.file_recovery() as below:
                found = scan(self._db(), self._sql)
                if found.damaged:
                    with self._write() as (db, _lease):
                        found = scan(db, self._sql)
                        repair(db, self._sql, found, now_ms=int(self._clock() * 1000))
            report = _report(below, found)
        log_recovery(report, store=self.location)
        self.last_recovery = report
        return report

    # --- internals --------------------------------------------------------------------------------------------

    def _db(self) -> C:
        if self._closed:
            raise KafkaStorageError(f"the metadata store {self.location} is closed")
        return self._dialect.connection()

    @contextlib.contextmanager
    def _read(self) -> Iterator[C]:
        with self._lock, self._dialect.errors():
            yield self._db()

    @contextlib.contextmanager
    def _write(self) -> Iterator[WriteTransaction[C]]:
        """One write transaction, holding the store's write lock from its first statement (module docstring)."""
        with self._lock, self._dialect.errors():
            db = self._db()
            with self._dialect.transaction(db):
                yield WriteTransaction(db, lease_row(db, self._sql.lock_lease))

    def _check_epoch(self, lease: LeaseRow, controller_epoch: int, *, what: str) -> None:
        if lease.holder is None or controller_epoch != lease.controller_epoch:
            log.warning(
                "metadata.append.fenced",
                controller_epoch=controller_epoch,
                current=lease.controller_epoch,
                holder=lease.holder,
            )
            raise StaleControllerEpoch(f"controller epoch {controller_epoch} cannot {what}: {lease.describe()}")


def _report(below: FileFindings, rows: Findings) -> RecoveryReport:
    """What recovery found, below the rows (first: a salvage's losses are the earliest) and in them."""
    return RecoveryReport(
        log_end_offset=rows.log_end,
        rlmm_end_offset=rows.rlmm_end,
        first_bad_offset=below.first_bad if below.first_bad is not None else rows.first_bad,
        truncated_records=below.bad_count + rows.bad_count,
        first_bad_rlmm_offset=below.first_bad_rlmm if below.first_bad_rlmm is not None else rows.first_bad_rlmm,
        truncated_rlmm_records=below.bad_rlmm_count + rows.bad_rlmm_count,
        dropped_snapshots=below.dropped_snapshots + tuple(rows.bad_snapshots),
        wal_torn_bytes=below.wal_torn_bytes,
        wal_ignored_frames=below.wal_ignored_frames,
        integrity_errors=below.integrity_errors,
        corrupt_copy=below.corrupt_copy,
        problems=below.problems + tuple(rows.problems),
    )


__all__ = ["SqlMetadataStore", "WriteTransaction"]


def _conforms(store: SqlMetadataStore[Any]) -> MetadataStore:
    return store  # mypy checks here that the core implements the whole interface
