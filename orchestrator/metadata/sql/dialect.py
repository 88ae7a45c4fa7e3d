"""The dialect adapter: what a SQL engine gives the one SQL core (:mod:`.store`), and nothing more.

The core holds every rule of the :class:`~orchestrator.metadata.store.MetadataStore` contract once (offsets,
fences, snapshots, the lease, checksums, recovery of the rows). A dialect holds only what truly differs between
engines:

* **Statement texts** (:class:`Statements`, built once per dialect by :func:`statements` from the one set of
  templates below): the placeholder (``?`` / ``%s``), the offset columns' names (``offset`` is a reserved word in
  PostgreSQL, so its tables say ``record_offset`` and ``snapshot_offset``), how a topic id is bound (16 raw bytes /
  a ``uuid``) and how a write transaction takes the store's write lock when it reads the lease row (SQLite's
  ``BEGIN IMMEDIATE`` has locked the whole file already; PostgreSQL locks the lease row itself, ``FOR UPDATE``).
* **The connection** (:meth:`SqlDialect.connection`): how it is opened and set up, and when it must be opened
  again (SQLite: the file was replaced by a salvage; PostgreSQL: the session broke), and how the driver's errors
  become the store's (:meth:`SqlDialect.errors`: damage is :class:`MetadataLogCorrupt`, the rest retriable).
* **The write transaction** (:meth:`SqlDialect.transaction`): how it begins and commits, and what a commit that may
  not have happened means (PostgreSQL refuses to call it written).
* **Change notification** (:class:`ChangeFeed`): PostgreSQL's LISTEN/NOTIFY, or :class:`Polling`.
* **Recovery below the rows** (:meth:`SqlDialect.file_recovery`): SQLite checks its file and WAL and may salvage
  the file before the core scans the rows; PostgreSQL keeps its own files consistent and has nothing to do there.

Savepoints are spelled alike by both engines (:func:`~orchestrator.metadata.group_commit.sql_savepoint`).

Invariants:

* Every statement the core runs comes from :data:`_TEMPLATES`, so the two engines run the same SQL but for the
  names above: a rule changed for one engine is changed for both.
* Upserts are ``INSERT ... ON CONFLICT (key) DO UPDATE``, which both engines accept (SQLite since 3.24).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from orchestrator.ids import Uuid


class SqlCursor(Protocol):
    """The part of a DB-API cursor the core uses (``sqlite3.Cursor``, psycopg's ``Cursor``)."""

    @property
    def rowcount(self) -> int: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...

    def executemany(self, query: str, rows: Iterable[Any], /) -> object: ...

    def close(self) -> None: ...

    def __iter__(self) -> Iterator[Any]: ...


class SqlConnection(Protocol):
    """The part of a DB-API connection the core uses (``sqlite3.Connection``, psycopg's ``Connection``)."""

    def execute(self, query: str, params: Any = ..., /) -> SqlCursor: ...

    def cursor(self) -> SqlCursor: ...


C = TypeVar("C", bound=SqlConnection)


@dataclass(frozen=True, slots=True)
class LogTable:
    """What recovery and appends do alike to either log (``log`` or ``rlmm``)."""

    name: str
    next_offset: str
    page: str  # (offset, data, crc) from an offset on, one page a statement
    count_from: str
    quarantine: str  # copy the rows from an offset on into ``quarantine``, with a reason and a time
    delete_from: str


@dataclass(frozen=True, slots=True)
class Statements:
    """One dialect's text of every statement the core runs, and how it binds a topic id."""

    log: LogTable
    rlmm: LogTable
    log_start: str
    log_bounds: str
    insert_log: str
    read_log: str
    delete_log_below: str
    insert_rlmm: str
    read_rlmm: str
    read_rlmm_topic: str
    save_snapshot: str
    keep_newest_snapshots: str
    oldest_snapshot: str
    latest_snapshot: str
    snapshots: str
    drop_snapshot: str
    set_hold: str
    drop_hold: str
    lowest_hold: str
    drop_expired_holds: str
    read_lease: str
    lock_lease: str
    set_lease: str
    extend_lease: str
    free_lease: str
    fence: str
    fences_in: str  # with ``{ids}`` where the placeholders of the ids go: see :meth:`fences_of`
    remove_fence: str
    set_fence: str
    clear_fence: str
    param: str
    topic_key: Callable[[Uuid], object]

    def fences_of(self, count: int) -> str:
        return self.fences_in.format(ids=", ".join([self.param] * count))


# {o}: a log's offset column; {s}: the snapshots' offset column; {p}: the placeholder; {lock}: the lease row's lock.
_LOG_TABLE = {
    "next_offset": "SELECT COALESCE(MAX({o}) + 1, 0) FROM {t}",
    "page": "SELECT {o}, data, crc FROM {t} WHERE {o} >= {p} ORDER BY {o} LIMIT {p}",
    "count_from": "SELECT COUNT(*) FROM {t} WHERE {o} >= {p}",
    "delete_from": "DELETE FROM {t} WHERE {o} >= {p}",
}
_QUARANTINE = {
    "log": "INSERT INTO quarantine (log, {o}, controller_epoch, data, crc, reason, quarantined_at_ms) "
    "SELECT 'log', {o}, controller_epoch, data, crc, {p}, {p} FROM log WHERE {o} >= {p} ORDER BY {o}",
    "rlmm": "INSERT INTO quarantine (log, {o}, topic_id, appended_at_ms, data, crc, reason, quarantined_at_ms) "
    "SELECT 'rlmm', {o}, topic_id, appended_at_ms, data, crc, {p}, {p} FROM rlmm WHERE {o} >= {p} ORDER BY {o}",
}
_LEASE = "SELECT holder, controller_epoch, expires_at_ms FROM lease WHERE id = 1"
_TEMPLATES = {
    "log_start": "SELECT COALESCE(MIN({o}), 0) FROM log",
    "log_bounds": "SELECT COALESCE(MIN({o}), 0), COALESCE(MAX({o}) + 1, 0) FROM log",
    "insert_log": "INSERT INTO log ({o}, controller_epoch, data, crc) VALUES ({p}, {p}, {p}, {p})",
    "read_log": "SELECT {o}, controller_epoch, data, crc FROM log WHERE {o} >= {p} ORDER BY {o} LIMIT {p}",
    "delete_log_below": "DELETE FROM log WHERE {o} < {p}",
    "insert_rlmm": "INSERT INTO rlmm ({o}, topic_id, appended_at_ms, data, crc) VALUES ({p}, {p}, {p}, {p}, {p})",
    "read_rlmm": "SELECT {o}, appended_at_ms, data, crc FROM rlmm WHERE {o} >= {p} ORDER BY {o} LIMIT {p}",
    "read_rlmm_topic": "SELECT {o}, appended_at_ms, data, crc FROM rlmm WHERE topic_id = {p} AND {o} >= {p} "
    "ORDER BY {o} LIMIT {p}",
    "save_snapshot": "INSERT INTO snapshots ({s}, controller_epoch, record_count, data, crc) "
    "VALUES ({p}, {p}, {p}, {p}, {p}) ON CONFLICT ({s}) DO UPDATE SET controller_epoch = excluded.controller_epoch, "
    "record_count = excluded.record_count, data = excluded.data, crc = excluded.crc",
    "keep_newest_snapshots": "DELETE FROM snapshots WHERE {s} NOT IN "
    "(SELECT {s} FROM snapshots ORDER BY {s} DESC LIMIT {p})",
    "oldest_snapshot": "SELECT MIN({s}) FROM snapshots",
    "latest_snapshot": "SELECT {s}, data, crc FROM snapshots ORDER BY {s} DESC LIMIT 1",
    "snapshots": "SELECT {s}, data, crc FROM snapshots ORDER BY {s}",
    "drop_snapshot": "DELETE FROM snapshots WHERE {s} = {p}",
    "set_hold": "INSERT INTO log_holds (holder, {o}, expires_at_ms) VALUES ({p}, {p}, {p}) ON CONFLICT (holder) "
    "DO UPDATE SET {o} = excluded.{o}, expires_at_ms = excluded.expires_at_ms",
    "drop_hold": "DELETE FROM log_holds WHERE holder = {p}",
    "lowest_hold": "SELECT MIN({o}) FROM log_holds WHERE expires_at_ms > {p}",
    "drop_expired_holds": "DELETE FROM log_holds WHERE expires_at_ms <= {p}",
    "read_lease": _LEASE,
    "lock_lease": _LEASE + "{lock}",
    "set_lease": "UPDATE lease SET holder = {p}, controller_epoch = {p}, expires_at_ms = {p} WHERE id = 1",
    "extend_lease": "UPDATE lease SET expires_at_ms = {p} WHERE id = 1",
    "free_lease": "UPDATE lease SET holder = NULL, expires_at_ms = 0 WHERE id = 1",
    "fence": "SELECT tiered_epoch, tiered_state FROM tiered_state WHERE topic_id = {p}",
    "fences_in": "SELECT topic_id, tiered_epoch, tiered_state FROM tiered_state WHERE topic_id IN ({{ids}})",
    "remove_fence": "DELETE FROM tiered_state WHERE topic_id = {p}",
    "set_fence": "INSERT INTO tiered_state (topic_id, tiered_epoch, tiered_state) VALUES ({p}, {p}, {p}) "
    "ON CONFLICT (topic_id) DO UPDATE SET tiered_epoch = excluded.tiered_epoch, tiered_state = excluded.tiered_state",
    "clear_fence": "DELETE FROM tiered_state",
}


def statements(
    *, param: str, offset: str, snapshot_offset: str, lock_lease: str, topic_key: Callable[[Uuid], object]
) -> Statements:
    """The core's statements in one dialect: ``param`` its placeholder, ``offset`` / ``snapshot_offset`` the
    offset columns' names, ``lock_lease`` what follows the lease row's SELECT in a write transaction (``""`` or
    ``" FOR UPDATE"``) and ``topic_key`` how a topic id is bound and stored."""
    names = {"o": offset, "s": snapshot_offset, "p": param, "lock": lock_lease}

    def table(name: str) -> LogTable:
        texts = {key: text.format(t=name, **names) for key, text in _LOG_TABLE.items()}
        return LogTable(name=name, quarantine=_QUARANTINE[name].format(**names), **texts)

    texts = {key: text.format(**names) for key, text in _TEMPLATES.items()}
    return Statements(log=table("log"), rlmm=table("rlmm"), param=param, topic_key=topic_key, **texts)


@dataclass(frozen=True, slots=True)
class FileFindings:
    """What a dialect found and did below the rows before the core scanned them (SQLite: its file and its WAL).

    Merged into the :class:`~orchestrator.metadata.store.RecoveryReport`: its problems come first, its counts add
    to the core's, and its first bad offsets win (they are what the salvaged file lost).
    """

    problems: tuple[str, ...] = ()
    first_bad: int | None = None
    bad_count: int = 0
    first_bad_rlmm: int | None = None
    bad_rlmm_count: int = 0
    dropped_snapshots: tuple[int, ...] = ()
    wal_torn_bytes: int = 0
    wal_ignored_frames: int = 0
    integrity_errors: tuple[str, ...] = ()
    corrupt_copy: str | None = None


class ChangeFeed(Protocol):
    """How followers learn of writes: ``announce`` runs inside a write transaction (delivered at its commit, never
    for one rolled back); ``wait`` blocks until a change may have happened (True) or ``timeout_s`` passed (False),
    returning early once ``closed()`` says the store was closed; ``close`` lets go of whatever it holds."""

    notifies_changes: bool

    def announce(self, db: SqlConnection) -> None: ...

    def wait(self, *, timeout_s: float, closed: Callable[[], bool]) -> bool: ...

    def close(self) -> None: ...


class Polling:
    """No notification across processes: a wait sleeps out the poll interval the caller would have slept anyway."""

    notifies_changes = False

    def announce(self, db: SqlConnection) -> None:
        pass

    def wait(self, *, timeout_s: float, closed: Callable[[], bool]) -> bool:
        time.sleep(max(0.0, timeout_s))
        return False

    def close(self) -> None:
        pass


class SqlDialect(Protocol[C]):
    """One engine's side of the store (see the module docstring). The core calls every method but ``changes``'
    ``wait`` while holding the store's lock, so a dialect needs no lock of its own for its connection."""

    sql: Statements

    @property
    def changes(self) -> ChangeFeed: ...

    def connection(self) -> C:
        """The store's connection: the open one, or a new one when there is none or it can no longer be used."""
        ...

    def disconnect(self) -> None: ...

    def errors(self) -> AbstractContextManager[None]:
        """Translate the driver's errors raised inside into the store's typed errors."""
        ...

    def transaction(self, db: C) -> AbstractContextManager[None]:
        """One write transaction on ``db``: committed on a clean exit, rolled back on an error; raises
        :class:`~orchestrator.errors.KafkaStorageError` when the commit may not have happened."""
        ...

    def file_recovery(self) -> AbstractContextManager[FileFindings]:
        """Check and repair what lies below the rows; the core scans and repairs the rows inside the block."""
        ...


__all__ = [
    "ChangeFeed",
    "FileFindings",
    "LogTable",
    "Polling",
    "SqlConnection",
    "SqlCursor",
    "SqlDialect",
    "Statements",
    "statements",
]
