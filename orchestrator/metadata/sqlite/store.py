"""The default :class:`MetadataStore` backend: one SQLite file shared by every process of a cluster.

It is the one SQL core (:class:`~orchestrator.metadata.sql.SqlMetadataStore`: the contract, the fences, snapshots,
group commit, the recovery of the rows) with SQLite's dialect, :class:`SqliteDialect`, which is this module.

Durability and concurrency. The file is in WAL mode with ``synchronous=FULL`` (a commit is on disk before it is
acknowledged) and a busy timeout; every write is one ``BEGIN IMMEDIATE`` transaction, which takes the file's write
lock at once, so the controller, its standbys and the brokers (separate OS processes) can share the file and a
write transaction's first read (the lease row) is already under the lock. A store opened by one thread may be used
by others (the core's lock, one connection opened with ``check_same_thread`` off). Change notification: none
across processes; followers poll (:class:`~orchestrator.metadata.sql.Polling`).

The package: this module is SQLite's dialect (the connection, the transaction, errors, and the order of recovery
below the rows) and the store's constructor; :mod:`.schema` the file's layout (format 1) and the core's statements
on it; :mod:`.wal` what the ``-wal`` file holds beyond what SQLite accepted; :mod:`.salvage` replacing a damaged
file with a fresh one holding what it still yields.

Recovery (on open, and ``recover()``), see also ``store`` invariant 6; the first two steps are this dialect's, the
last two the core's:

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
every operation) and reconnects; one whose file went missing meanwhile is refused, never handed a new empty file.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import structlog

from orchestrator.errors import KafkaStorageError, MetadataLogCorrupt
from orchestrator.metadata.group_commit import DEFAULT_MAX_GROUP
from orchestrator.metadata.sql import FileFindings, Polling, SqlMetadataStore
from orchestrator.metadata.sqlite.salvage import Salvage, finish_salvage, replace_with_salvage
from orchestrator.metadata.sqlite.schema import FORMAT_VERSION, STATEMENTS, create_tables
from orchestrator.metadata.sqlite.wal import WalInspection, create_owner_only, inspect_wal, sidecar
from orchestrator.metadata.store import CHECKSUM_ALGORITHM

log = structlog.get_logger(__name__)


def _is_damage(exc: sqlite3.DatabaseError) -> bool:
    """Corruption, as opposed to contention or misuse (``database is locked`` is an OperationalError)."""
    name = getattr(exc, "sqlite_errorname", "") or ""
    if name:
        return name.startswith(("SQLITE_CORRUPT", "SQLITE_NOTADB"))
    return not isinstance(exc, sqlite3.OperationalError)


class SqliteDialect:
    """SQLite's side of the SQL core (:class:`~orchestrator.metadata.sql.SqlDialect`) for the file at ``path``.

    ``clock`` (seconds since the epoch) names the kept-aside copy of a damaged file.
    """

    sql = STATEMENTS

    def __init__(self, path: Path, *, busy_timeout_ms: int, clock: Callable[[], float]) -> None:
        self.path = path
        self.changes = Polling()
        self._busy_timeout_ms = busy_timeout_ms
        self._clock = clock
        self._conn: sqlite3.Connection | None = None
        self._file_id: tuple[int, int] | None = None

    # --- the connection ---------------------------------------------------------------------------------------

    def open(self) -> sqlite3.Connection:
        """A fresh connection, creating the file if there is none (only opening a store, or recovering it, does)."""
        self.disconnect()
        create_owner_only(Path(self.path))  # SQLite would make it 0666 less the umask
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

    def connection(self) -> sqlite3.Connection:
        """The connection, reopened if recovery (in any process) replaced the file since it was opened."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            raise KafkaStorageError(f"the metadata store {self.path} is missing (being recovered?)") from None
        if self._conn is None or self._file_id != (st.st_dev, st.st_ino):
            return self.open()
        return self._conn

    def disconnect(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(sqlite3.Error):
                self._conn.close()
            self._conn, self._file_id = None, None

    @contextlib.contextmanager
    def errors(self) -> Iterator[None]:
        """Translate SQLite's errors at the boundary: damage vs contention."""
        try:
            yield
        except sqlite3.DatabaseError as exc:
            if _is_damage(exc):
                log.error("metadata.store.damaged", path=str(self.path), error=str(exc))
                raise MetadataLogCorrupt(f"{self.path}: {exc}; reopen the store to recover it") from exc
            raise KafkaStorageError(f"{self.path}: {exc}") from exc

    @contextlib.contextmanager
    def transaction(self, db: sqlite3.Connection) -> Iterator[None]:
        """``BEGIN IMMEDIATE`` (the file's write lock, waiting up to the busy timeout) ... ``COMMIT``."""
        db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")

    # --- recovery below the rows ------------------------------------------------------------------------------

    @contextlib.contextmanager
    def file_recovery(self) -> Iterator[FileFindings]:
        """Reconnect, check the file and its WAL, salvage a damaged file; once the core has repaired the rows,
        empty a WAL that held ignored frames (module docstring, Recovery)."""
        problems: list[str] = []
        integrity, wal = self._open_and_check()
        problems.extend(wal.problems(self.path.name))
        salvage = Salvage()
        corrupt_copy: str | None = None
        if integrity:
            problems.append(f"{self.path.name} is damaged: {'; '.join(integrity[:5])}")
            salvage, corrupt_copy = self._salvage(integrity)
            problems.extend(salvage.problems)
        yield FileFindings(
            problems=tuple(problems),
            first_bad=salvage.first_bad,
            bad_count=salvage.bad_count,
            first_bad_rlmm=salvage.first_bad_rlmm,
            bad_rlmm_count=salvage.bad_rlmm_count,
            dropped_snapshots=tuple(salvage.dropped_snapshots),
            wal_torn_bytes=wal.torn_bytes,
            wal_ignored_frames=wal.ignored_frames + (1 if wal.header_damaged else 0),
            integrity_errors=tuple(integrity),
            corrupt_copy=corrupt_copy,
        )
        if not wal.clean:
            self._reset_wal()

    def _open_and_check(self) -> tuple[list[str], WalInspection]:
        """Connect, run ``quick_check``, inspect the WAL and create the schema if missing.

        Returns ``quick_check``'s complaints (or the error that made the file unreadable) and the WAL findings.
        """
        wal = WalInspection()
        try:
            db = self.open()
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

    def _create_schema(self, db: sqlite3.Connection) -> None:
        with self.transaction(db):
            create_tables(db)
            db.execute("INSERT OR IGNORE INTO meta (key, value) VALUES ('format_version', ?)", (FORMAT_VERSION,))
            db.execute("INSERT OR IGNORE INTO meta (key, value) VALUES ('checksum', ?)", (CHECKSUM_ALGORITHM,))
            meta = dict(db.execute("SELECT key, value FROM meta").fetchall())
            if meta.get("format_version") != FORMAT_VERSION or meta.get("checksum") != CHECKSUM_ALGORITHM:
                raise MetadataLogCorrupt(
                    f"{self.path}: store format {meta.get('format_version')} with checksum {meta.get('checksum')} "
                    f"is not readable by this build (format {FORMAT_VERSION}, {CHECKSUM_ALGORITHM})"
                )

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
        db = self.connection()
        try:
            db.execute("PRAGMA busy_timeout = 200")
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        except sqlite3.OperationalError:
            pass
        finally:
            db.execute(f"PRAGMA busy_timeout = {int(self._busy_timeout_ms)}")

    def _salvage(self, integrity: list[str]) -> tuple[Salvage, str]:
        """Copy the readable content of the damaged file into a fresh one; keep the damaged one aside."""
        self.disconnect()
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
        self.open()
        return salvage, str(corrupt)


def _integrity_lines(rows: list[str], keep: int = 10) -> list[str]:
    """``quick_check``'s complaints, one per line, without its banner, at most ``keep`` and a count of the rest."""
    lines = [line for row in rows for line in row.splitlines() if line and not line.startswith("*** in database")]
    return lines[:keep] + ([f"... and {len(lines) - keep} more"] if len(lines) > keep else [])


class SqliteMetadataStore(SqlMetadataStore[sqlite3.Connection]):
    """A :class:`~orchestrator.metadata.store.MetadataStore` in one SQLite file (see the module docstring).

    ``recover_on_open`` runs :meth:`recover` in the constructor; its report is kept in :attr:`last_recovery`.
    ``clock`` (seconds since the epoch) only names kept-aside files and stamps quarantined rows.
    ``max_group_commit``: appends one transaction takes at most (1: a transaction per append).
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
        self.path = Path(path)
        dialect = SqliteDialect(self.path, busy_timeout_ms=busy_timeout_ms, clock=clock)
        super().__init__(dialect, location=str(self.path), clock=clock, max_group_commit=max_group_commit)
        finish_salvage(self.path)
        if recover_on_open:
            self.recover()
        else:
            with self._lock, dialect.errors():
                dialect.open()


__all__ = ["SqliteDialect", "SqliteMetadataStore"]
