"""The default :class:`MetadataStore` backend: one SQLite file shared by every process of a cluster.

Durability and concurrency. The file is in WAL mode with ``synchronous=FULL`` (a commit is on disk before it is
acknowledged) and a busy timeout; every write is one ``BEGIN IMMEDIATE`` transaction, so the controller, its
standbys and the brokers (separate OS processes) can share the file. A fencing check and the write it guards
are in the same transaction: an append reads the lease and the tiered-state fence table and writes the log rows
and the fence table atomically. A store opened by one thread may be used by others (one lock, one connection).
Appends (to either log) from concurrent threads of one process are group-committed (:mod:`..group_commit`): one
transaction, one commit, each append in its own savepoint, so one append's refusal changes nothing of the others.

The package: this module is the :class:`MetadataStore` contract (log, snapshots, lease, RLMM, fences), the
connection and the order of recovery; :mod:`.schema` the file's layout (format 1) and the fence table derived
from the log; :mod:`.wal` what the ``-wal`` file holds beyond what SQLite accepted; :mod:`.salvage` replacing a
damaged file with a fresh one holding what it still yields.

Recovery (on open, and ``recover()``), see also ``store`` invariant 6:

* The ``-wal`` file is compared with what SQLite accepted from it (:mod:`.wal`): SQLite silently ignores
  everything from the first bad frame on, so the store reports the frames it ignored and a partial frame at the
  end, then empties the WAL (best effort) so the next process does not report them again.
* ``PRAGMA quick_check`` finds a damaged file (e.g. truncated pages). Then the readable content is *salvaged*
  into a fresh file and the damaged one is kept aside as ``<name>.corrupt-<UTC timestamp>`` (:mod:`.salvage`);
  a switch a crash interrupted is finished when the store is next opened, before anything else.
* In a readable file, every record's checksum is verified and offsets must be dense; the log is cut at the
  first bad record (later records go to ``quarantine``), snapshots beyond the new end are dropped, and the
  fence table is rebuilt from the log.
* Whenever the metadata log lost records, and after any salvage, the lease is revoked (epoch kept): the active
  controller's image may include the lost records, so its next write or renewal is refused and it rebuilds
  from the log after re-acquiring the lease at epoch + 1.

Salvage replaces the file, so it assumes no other process is writing to it (damage is found when processes
restart after a crash). A process that still has the old file open notices the replacement (inode check on
every operation) and reconnects.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import structlog

from orchestrator import crash_points
from orchestrator.errors import (
    KafkaStorageError,
    MetadataLogCorrupt,
    ProtocolError,
    StaleControllerEpoch,
)
from orchestrator.ids import Uuid
from orchestrator.metadata.group_commit import DEFAULT_MAX_GROUP, GroupCommit, sql_savepoint
from orchestrator.metadata.records import MetadataRecord, TieredState, decode_record
from orchestrator.metadata.sqlite.salvage import Salvage, finish_salvage, replace_with_salvage
from orchestrator.metadata.sqlite.schema import (
    FORMAT_VERSION,
    apply_fence_changes,
    create_tables,
    fence_lookup,
    fence_lookup_many,
    rebuild_fence,
)
from orchestrator.metadata.sqlite.wal import WalInspection, inspect_wal, sidecar
from orchestrator.metadata.store import (
    CHECKSUM_ALGORITHM,
    DEFAULT_RETAINED_SNAPSHOTS,
    Lease,
    LogEntry,
    LogRow,
    MetadataStore,
    RecoveryReport,
    Snapshot,
    check_lease_args,
    check_read_range,
    check_rlmm_fence,
    check_snapshot_offset,
    checksum,
    encode_all,
    encode_snapshot,
    fence_topic_ids,
    log_recovery,
    page_log,
    plan_fence_changes,
    split_snapshot,
)

log = structlog.get_logger(__name__)

_PAGE_ROWS = 512


def _is_damage(exc: sqlite3.DatabaseError) -> bool:
    """Corruption, as opposed to contention or misuse (``database is locked`` is an OperationalError)."""
    name = getattr(exc, "sqlite_errorname", "") or ""
    if name:
        return name.startswith(("SQLITE_CORRUPT", "SQLITE_NOTADB"))
    return not isinstance(exc, sqlite3.OperationalError)


@dataclass
class _Findings:
    """What a scan of a readable database found (mutable scratch, turned into a RecoveryReport)."""

    log_end: int = 0
    rlmm_end: int = 0
    first_bad: int | None = None
    bad_count: int = 0
    first_bad_rlmm: int | None = None
    bad_rlmm_count: int = 0
    bad_snapshots: list[int] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def damaged(self) -> bool:
        return self.first_bad is not None or self.first_bad_rlmm is not None or bool(self.bad_snapshots)


class SqliteMetadataStore:
    """A :class:`~orchestrator.metadata.store.MetadataStore` in one SQLite file (see the module docstring).

    ``recover_on_open`` runs :meth:`recover` in the constructor; its report is kept in :attr:`last_recovery`.
    ``clock`` (seconds since the epoch) only names kept-aside files and stamps quarantined rows.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        busy_timeout_ms: int = 10_000,
        recover_on_open: bool = True,
        clock: Callable[[], float] = time.time,
        max_group_commit: int = DEFAULT_MAX_GROUP,
    ) -> None:
        """``max_group_commit``: appends one transaction takes at most (1: a transaction per append)."""
        self.path = Path(path)
        self._busy_timeout_ms = busy_timeout_ms
        self._clock = clock
        self._lock = threading.RLock()
        self._conn: sqlite3.Connection | None = None
        self._file_id: tuple[int, int] | None = None
        self._closed = False
        self._group: GroupCommit[sqlite3.Connection] = GroupCommit(
            self._write, lambda db: sql_savepoint(db.execute), errors=self._sqlite_errors, max_group=max_group_commit
        )
        self.last_recovery: RecoveryReport | None = None
        finish_salvage(self.path)
        if recover_on_open:
            self.last_recovery = self.recover()
        else:
            with self._sqlite_errors():
                self._connect()

    def __enter__(self) -> SqliteMetadataStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- cluster metadata log -------------------------------------------------------------------------------

    def append(self, records: Sequence[MetadataRecord], *, controller_epoch: int) -> int:
        encoded = encode_all(records, rlmm=False)

        def write(db: sqlite3.Connection) -> int:
            self._check_epoch(db, controller_epoch, what="append to the metadata log")
            changes = plan_fence_changes(records, fence_lookup_many(db, fence_topic_ids(records)).get)
            start = int(db.execute("SELECT COALESCE(MAX(offset) + 1, 0) FROM log").fetchone()[0])
            db.executemany(
                "INSERT INTO log (offset, controller_epoch, data, crc) VALUES (?, ?, ?, ?)",
                [(start + i, controller_epoch, data, checksum(data)) for i, data in enumerate(encoded)],
            )
            apply_fence_changes(db, changes)
            return start + len(encoded) - 1

        return self._group.run(write)

    def read(self, *, from_offset: int = 0, limit: int | None = None) -> Iterator[LogEntry]:
        check_read_range(from_offset, limit)
        return self._iter_log(from_offset, limit)

    def _iter_log(self, expected: int, limit: int | None) -> Iterator[LogEntry]:
        def fetch_page(from_offset: int, rows: int) -> list[LogRow]:
            with self._read() as db:
                return db.execute(
                    "SELECT offset, controller_epoch, data, crc FROM log WHERE offset >= ? ORDER BY offset LIMIT ?",
                    (from_offset, rows),
                ).fetchall()

        return page_log(
            fetch_page,
            expected=expected,
            limit=limit,
            page_rows=_PAGE_ROWS,
            start_offset=self.start_offset,
            verified=_verified_log,
            on_missing=lambda offset: log.error("metadata.log.corrupt", offset=offset, reason="missing"),
        )

    def end_offset(self) -> int:
        with self._read() as db:
            return int(db.execute("SELECT COALESCE(MAX(offset) + 1, 0) FROM log").fetchone()[0])

    def start_offset(self) -> int:
        with self._read() as db:
            return _log_start(db)

    # --- snapshots --------------------------------------------------------------------------------------------

    def save_snapshot(
        self,
        *,
        offset: int,
        records: Sequence[MetadataRecord],
        controller_epoch: int,
        retain: int = DEFAULT_RETAINED_SNAPSHOTS,
    ) -> int:
        blob = encode_snapshot(encode_all(records, rlmm=False))
        with self._write() as db:
            self._check_epoch(db, controller_epoch, what="save a snapshot")
            end = int(db.execute("SELECT COALESCE(MAX(offset) + 1, 0) FROM log").fetchone()[0])
            check_snapshot_offset(offset, _log_start(db), end, retain)
            db.execute(
                "INSERT OR REPLACE INTO snapshots (offset, controller_epoch, record_count, data, crc) "
                "VALUES (?, ?, ?, ?, ?)",
                (offset, controller_epoch, len(records), blob, checksum(blob)),
            )
            crash_points.reached("controller.mid_snapshot")  # written, not committed: the transaction dies with it
            db.execute(
                "DELETE FROM snapshots WHERE offset NOT IN (SELECT offset FROM snapshots ORDER BY offset DESC LIMIT ?)",
                (retain,),
            )
            oldest = int(db.execute("SELECT MIN(offset) FROM snapshots").fetchone()[0])
            deleted = db.execute("DELETE FROM log WHERE offset < ?", (oldest,)).rowcount
            start = _log_start(db)
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
            row = db.execute("SELECT offset, data, crc FROM snapshots ORDER BY offset DESC LIMIT 1").fetchone()
        if row is None:
            return None
        offset, data, crc = row
        if checksum(data) != crc:
            log.error("metadata.log.corrupt", snapshot_offset=offset, reason="checksum")
            raise MetadataLogCorrupt(f"snapshot at offset {offset}: checksum mismatch")
        return Snapshot(offset, tuple(decode_record(part) for part in split_snapshot(data, offset=offset)))

    # --- lease ------------------------------------------------------------------------------------------------

    def acquire_lease(self, *, holder: str, now_ms: int, ttl_ms: int) -> Lease | None:
        check_lease_args(holder, ttl_ms)
        with self._write() as db:
            current, epoch, expires = _lease_row(db)
            if current == holder:
                pass  # resumes its tenure, expired or not (store invariant 3)
            elif current is None or now_ms >= expires:
                epoch += 1
                log.info("metadata.lease.acquired", holder=holder, controller_epoch=epoch, previous_holder=current)
            else:
                return None
            db.execute(
                "UPDATE lease SET holder = ?, controller_epoch = ?, expires_at_ms = ? WHERE id = 1",
                (holder, epoch, now_ms + ttl_ms),
            )
            return Lease(holder, epoch, now_ms + ttl_ms)

    def renew_lease(self, *, holder: str, controller_epoch: int, now_ms: int, ttl_ms: int) -> Lease:
        check_lease_args(holder, ttl_ms)
        with self._write() as db:
            current, epoch, _expires = _lease_row(db)
            if current != holder or epoch != controller_epoch:
                raise StaleControllerEpoch(
                    f"{holder} cannot renew the lease at controller epoch {controller_epoch}: "
                    f"{_describe_lease(current, epoch)}"
                )
            db.execute("UPDATE lease SET expires_at_ms = ? WHERE id = 1", (now_ms + ttl_ms,))
            return Lease(holder, epoch, now_ms + ttl_ms)

    def release_lease(self, *, holder: str, controller_epoch: int) -> bool:
        with self._write() as db:
            current, epoch, _expires = _lease_row(db)
            if current != holder or epoch != controller_epoch:
                return False
            db.execute("UPDATE lease SET holder = NULL, expires_at_ms = 0 WHERE id = 1")
        log.info("metadata.lease.released", holder=holder, controller_epoch=controller_epoch)
        return True

    def current_lease(self) -> Lease | None:
        with self._read() as db:
            holder, epoch, expires = _lease_row(db)
        return None if holder is None else Lease(holder, epoch, expires)

    # --- remote log metadata ----------------------------------------------------------------------------------

    def append_remote_log_metadata(self, records: Sequence[MetadataRecord], *, now_ms: int | None = None) -> int:
        encoded = encode_all(records, rlmm=True)

        def write(db: sqlite3.Connection) -> int:
            topic_ids = check_rlmm_fence(records, lambda tid: fence_lookup(db, tid))
            start = int(db.execute("SELECT COALESCE(MAX(offset) + 1, 0) FROM rlmm").fetchone()[0])
            db.executemany(
                "INSERT INTO rlmm (offset, topic_id, appended_at_ms, data, crc) VALUES (?, ?, ?, ?, ?)",
                [
                    (start + i, tid.raw, now_ms, data, checksum(data))
                    for i, (data, tid) in enumerate(zip(encoded, topic_ids, strict=True))
                ],
            )
            return start + len(encoded) - 1

        return self._group.run(write)

    def read_remote_log_metadata(self, *, topic_id: Uuid | None = None, from_offset: int = 0) -> Iterator[LogEntry]:
        check_read_range(from_offset, None)
        return self._iter_rlmm(topic_id, from_offset)

    def _iter_rlmm(self, topic_id: Uuid | None, expected: int) -> Iterator[LogEntry]:
        dense = topic_id is None
        while True:
            with self._read() as db:
                if topic_id is None:
                    rows = db.execute(
                        "SELECT offset, appended_at_ms, data, crc FROM rlmm WHERE offset >= ? ORDER BY offset LIMIT ?",
                        (expected, _PAGE_ROWS),
                    ).fetchall()
                else:
                    rows = db.execute(
                        "SELECT offset, appended_at_ms, data, crc FROM rlmm WHERE topic_id = ? AND offset >= ? "
                        "ORDER BY offset LIMIT ?",
                        (topic_id.raw, expected, _PAGE_ROWS),
                    ).fetchall()
            for offset, appended_at_ms, data, crc in rows:
                if dense and offset != expected:
                    log.error("metadata.log.corrupt", rlmm_offset=expected, reason="missing")
                    raise MetadataLogCorrupt(f"remote log metadata offset {expected} is missing (next: {offset})")
                yield LogEntry(offset, _verified(data, crc, offset, rlmm=True), appended_at_ms=appended_at_ms)
                expected = offset + 1
            if len(rows) < _PAGE_ROWS:
                return

    def tiered_state(self, topic_id: Uuid) -> tuple[int, TieredState] | None:
        with self._read() as db:
            return fence_lookup(db, topic_id)

    # --- change notification ----------------------------------------------------------------------------------

    notifies_changes = False  # SQLite has no cross-process notification: followers poll

    def wait_for_change(self, *, timeout_s: float) -> bool:
        """Sleep ``timeout_s`` (the poll interval): see ``MetadataStore.wait_for_change``."""
        time.sleep(max(0.0, timeout_s))
        return False

    # --- lifecycle --------------------------------------------------------------------------------------------

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._disconnect()

    def recover(self) -> RecoveryReport:
        """Find damage, repair what can be repaired without losing anything before it, and report it."""
        with self._lock, self._sqlite_errors():
            self._closed = False
            problems: list[str] = []
            integrity, wal = self._open_and_check()
            problems.extend(wal.problems(self.path.name))
            corrupt_copy: str | None = None
            salvage: Salvage | None = None
            if integrity:
                problems.append(f"{self.path.name} is damaged: {'; '.join(integrity[:5])}")
                salvage, corrupt_copy = self._salvage(integrity)
                problems.extend(salvage.problems)
            findings = self._repair_in_place()
            problems.extend(findings.problems)
            if not wal.clean:
                self._reset_wal()
            report = RecoveryReport(
                log_end_offset=findings.log_end,
                rlmm_end_offset=findings.rlmm_end,
                first_bad_offset=salvage.first_bad if salvage and salvage.first_bad is not None else findings.first_bad,
                truncated_records=(salvage.bad_count if salvage else 0) + findings.bad_count,
                first_bad_rlmm_offset=(
                    salvage.first_bad_rlmm
                    if salvage and salvage.first_bad_rlmm is not None
                    else findings.first_bad_rlmm
                ),
                truncated_rlmm_records=(salvage.bad_rlmm_count if salvage else 0) + findings.bad_rlmm_count,
                dropped_snapshots=tuple((salvage.dropped_snapshots if salvage else []) + findings.bad_snapshots),
                wal_torn_bytes=wal.torn_bytes,
                wal_ignored_frames=wal.ignored_frames + (1 if wal.header_damaged else 0),
                integrity_errors=tuple(integrity),
                corrupt_copy=corrupt_copy,
                problems=tuple(problems),
            )
            log_recovery(report, store=str(self.path))
            self.last_recovery = report
            return report

    # --- connection handling ----------------------------------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        self._disconnect()
        conn = sqlite3.connect(
            self.path,
            timeout=self._busy_timeout_ms / 1000,
            isolation_level=None,
            check_same_thread=False,
        )
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(self._busy_timeout_ms)}")
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise KafkaStorageError(f"{self.path}: SQLite refused WAL mode (journal_mode={mode})")
            conn.execute("PRAGMA synchronous = FULL")
            conn.execute("PRAGMA foreign_keys = OFF")
        except BaseException:
            conn.close()
            raise
        st = os.stat(self.path)
        self._conn, self._file_id = conn, (st.st_dev, st.st_ino)
        return conn

    def _disconnect(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(sqlite3.Error):
                self._conn.close()
            self._conn, self._file_id = None, None

    def _db(self) -> sqlite3.Connection:
        """The connection, reopened if recovery (in any process) replaced the file since it was opened."""
        if self._closed:
            raise KafkaStorageError(f"the metadata store {self.path} is closed")
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            raise KafkaStorageError(f"the metadata store {self.path} is missing (being recovered?)") from None
        if self._conn is None or self._file_id != (st.st_dev, st.st_ino):
            return self._connect()
        return self._conn

    def _create_schema(self, db: sqlite3.Connection) -> None:
        db.execute("BEGIN IMMEDIATE")
        try:
            create_tables(db)
            db.execute("INSERT OR IGNORE INTO meta (key, value) VALUES ('format_version', ?)", (FORMAT_VERSION,))
            db.execute("INSERT OR IGNORE INTO meta (key, value) VALUES ('checksum', ?)", (CHECKSUM_ALGORITHM,))
            meta = dict(db.execute("SELECT key, value FROM meta").fetchall())
            if meta.get("format_version") != FORMAT_VERSION or meta.get("checksum") != CHECKSUM_ALGORITHM:
                raise MetadataLogCorrupt(
                    f"{self.path}: store format {meta.get('format_version')} with checksum {meta.get('checksum')} "
                    f"is not readable by this build (format {FORMAT_VERSION}, {CHECKSUM_ALGORITHM})"
                )
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise

    @contextlib.contextmanager
    def _sqlite_errors(self) -> Iterator[None]:
        """Translate SQLite's errors at the boundary: damage vs contention."""
        try:
            yield
        except sqlite3.DatabaseError as exc:
            if _is_damage(exc):
                log.error("metadata.store.damaged", path=str(self.path), error=str(exc))
                raise MetadataLogCorrupt(f"{self.path}: {exc}; reopen the store to recover it") from exc
            raise KafkaStorageError(f"{self.path}: {exc}") from exc

    @contextlib.contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        with self._lock, self._sqlite_errors():
            yield self._db()

    @contextlib.contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        with self._lock, self._sqlite_errors():
            db = self._db()
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
            except BaseException:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")

    def _check_epoch(self, db: sqlite3.Connection, controller_epoch: int, *, what: str) -> None:
        holder, epoch, _expires = _lease_row(db)
        if holder is None or controller_epoch != epoch:
            log.warning("metadata.append.fenced", controller_epoch=controller_epoch, current=epoch, holder=holder)
            raise StaleControllerEpoch(
                f"controller epoch {controller_epoch} cannot {what}: {_describe_lease(holder, epoch)}"
            )

    # --- recovery internals -----------------------------------------------------------------------------------

    def _open_and_check(self) -> tuple[list[str], WalInspection]:
        """Connect, run ``quick_check``, inspect the WAL and create the schema if missing.

        Returns ``quick_check``'s complaints (or the error that made the file unreadable) and the WAL findings.
        """
        wal = WalInspection()
        try:
            db = self._connect()
            rows = db.execute("PRAGMA quick_check(20)").fetchall()
            errors = _integrity_lines([str(r[0]) for r in rows if r[0] != "ok"])
            if not errors:
                wal = self._inspect_wal(db)
                self._create_schema(db)
            return errors, wal
        except sqlite3.DatabaseError as exc:
            if not _is_damage(exc):
                raise
            return [str(exc)], wal

    def _inspect_wal(self, db: sqlite3.Connection) -> WalInspection:
        """Compare the WAL file with the frames SQLite accepted, holding the write lock so no writer is mid-way."""
        if not sidecar(self.path, "-wal").exists():
            return WalInspection()
        locker = sqlite3.connect(self.path, timeout=self._busy_timeout_ms / 1000, isolation_level=None)
        try:
            locker.execute("BEGIN IMMEDIATE")
            _busy, accepted, _backfilled = db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
            if int(accepted) < 0:  # not in WAL mode (yet): nothing to compare
                return WalInspection()
            return inspect_wal(self.path, accepted_frames=int(accepted))
        finally:
            if locker.in_transaction:
                locker.execute("ROLLBACK")
            locker.close()

    def _reset_wal(self) -> None:
        """Best effort: empty the WAL so the ignored frames are not reported again by the next process."""
        db = self._db()
        try:
            db.execute("PRAGMA busy_timeout = 200")
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        except sqlite3.OperationalError:
            pass
        finally:
            db.execute(f"PRAGMA busy_timeout = {int(self._busy_timeout_ms)}")

    def _scan(self, db: sqlite3.Connection) -> _Findings:
        found = _Findings()
        found.first_bad, found.log_end = _scan_log(db, "SELECT offset, data, crc FROM log ORDER BY offset")
        found.first_bad_rlmm, found.rlmm_end = _scan_log(db, "SELECT offset, data, crc FROM rlmm ORDER BY offset")
        if found.first_bad is not None:
            found.bad_count = db.execute("SELECT COUNT(*) FROM log WHERE offset >= ?", (found.first_bad,)).fetchone()[0]
            found.problems.append(
                f"metadata log: bad record at offset {found.first_bad}; the log now ends there and "
                f"{found.bad_count} record(s) from it on were quarantined"
            )
        if found.first_bad_rlmm is not None:
            found.bad_rlmm_count = db.execute(
                "SELECT COUNT(*) FROM rlmm WHERE offset >= ?", (found.first_bad_rlmm,)
            ).fetchone()[0]
            found.problems.append(
                f"remote log metadata: bad record at offset {found.first_bad_rlmm}; "
                f"{found.bad_rlmm_count} record(s) from it on were quarantined"
            )
        for offset, data, crc in db.execute("SELECT offset, data, crc FROM snapshots ORDER BY offset"):
            if checksum(data) != crc or offset >= found.log_end:
                found.bad_snapshots.append(offset)
                found.problems.append(f"snapshot at offset {offset} dropped (damaged or beyond the log end)")
        return found

    def _repair_in_place(self) -> _Findings:
        found = self._scan(self._db())
        if not found.damaged:
            return found
        with self._write() as db:
            found = self._scan(db)  # again, under the write lock: another process may have repaired it
            now_ms = int(self._clock() * 1000)
            for table, first_bad in (("log", found.first_bad), ("rlmm", found.first_bad_rlmm)):
                if first_bad is None:
                    continue
                columns = "controller_epoch, NULL, NULL" if table == "log" else "NULL, topic_id, appended_at_ms"
                db.execute(
                    "INSERT INTO quarantine (log, offset, controller_epoch, topic_id, appended_at_ms, data, crc, "
                    f"reason, quarantined_at_ms) SELECT ?, offset, {columns}, data, crc, ?, ? FROM {table} "
                    "WHERE offset >= ?",
                    (table, f"torn tail from offset {first_bad}", now_ms, first_bad),
                )
                db.execute(f"DELETE FROM {table} WHERE offset >= ?", (first_bad,))
            db.executemany("DELETE FROM snapshots WHERE offset = ?", [(o,) for o in found.bad_snapshots])
            if found.first_bad is not None:
                rebuild_fence(db)
                _revoke_lease(db)
        return found

    def _salvage(self, integrity: list[str]) -> tuple[Salvage, str]:
        """Copy the readable content of the damaged file into a fresh one; keep the damaged one aside."""
        self._disconnect()
        salvage, corrupt = replace_with_salvage(self.path, clock=self._clock)
        log.error(
            "metadata.salvaged",
            path=str(self.path),
            corrupt_copy=str(corrupt),
            integrity_errors=integrity[:5],
            log_records=len(salvage.log),
            rlmm_records=len(salvage.rlmm),
            first_bad_offset=salvage.first_bad,
        )
        self._connect()
        return salvage, str(corrupt)


# --- helpers ---------------------------------------------------------------------------------------------------


def _integrity_lines(rows: list[str], keep: int = 10) -> list[str]:
    """``quick_check``'s complaints, one per line, without its banner, at most ``keep`` and a count of the rest."""
    lines = [line for row in rows for line in row.splitlines() if line and not line.startswith("*** in database")]
    return lines[:keep] + ([f"... and {len(lines) - keep} more"] if len(lines) > keep else [])


def _verified(data: bytes, crc: int, offset: int, *, rlmm: bool) -> MetadataRecord:
    if checksum(data) != crc:
        kind = "remote log metadata" if rlmm else "metadata log"
        log.error("metadata.log.corrupt", offset=offset, log=kind, reason="checksum")
        raise MetadataLogCorrupt(f"{kind} record at offset {offset}: checksum mismatch")
    try:
        return decode_record(data, rlmm=rlmm)
    except ProtocolError as exc:
        kind = "remote log metadata" if rlmm else "metadata log"
        raise ProtocolError(f"{kind} record at offset {offset}: {exc.message}") from exc


_verified_log = functools.partial(_verified, rlmm=False)  # a C-level call: no Python frame per record on replay


def _lease_row(db: sqlite3.Connection) -> tuple[str | None, int, int]:
    row = db.execute("SELECT holder, controller_epoch, expires_at_ms FROM lease WHERE id = 1").fetchone()
    if row is None:  # pragma: no cover - the schema inserts it
        return None, 0, 0
    return row[0], int(row[1]), int(row[2])


def _describe_lease(holder: str | None, epoch: int) -> str:
    if holder is None:
        return f"no controller holds the lease (last controller epoch {epoch})"
    return f"the lease is held by {holder} at controller epoch {epoch}"


def _revoke_lease(db: sqlite3.Connection) -> None:
    holder, epoch, _ = _lease_row(db)
    if holder is not None:
        db.execute("UPDATE lease SET holder = NULL, expires_at_ms = 0 WHERE id = 1")
        log.warning("metadata.lease.revoked", holder=holder, controller_epoch=epoch, reason="log truncated")


def _log_start(db: sqlite3.Connection) -> int:
    return int(db.execute("SELECT COALESCE(MIN(offset), 0) FROM log").fetchone()[0])


def _scan_log(db: sqlite3.Connection, query: str) -> tuple[int | None, int]:
    """(first bad offset or None, end offset once cut there) for a log table: checksums and density from its
    first row (the metadata log may start above 0, behind a snapshot)."""
    expected: int | None = None
    for offset, data, crc in db.execute(query):
        if expected is None:
            expected = offset
        if offset != expected or checksum(data) != crc:
            return expected, expected
        expected += 1
    return None, expected or 0


__all__ = ["SqliteMetadataStore"]


def _conforms(store: SqliteMetadataStore) -> MetadataStore:
    return store  # mypy checks here that the backend implements the whole interface
