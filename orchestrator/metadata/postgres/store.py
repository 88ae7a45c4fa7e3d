"""A :class:`MetadataStore` backend on PostgreSQL (psycopg 3, synchronous), for clusters whose processes do not
share a file system.

It is the one SQL core (:class:`~orchestrator.metadata.sql.SqlMetadataStore`: the contract, the fences, snapshots,
group commit, the recovery of the rows) with PostgreSQL's dialect, :class:`PostgresDialect`, which is this module.

The write lock. Every write is one READ COMMITTED transaction whose first statement locks the single ``lease`` row
(``SELECT ... FOR UPDATE``, :data:`~.schema.STATEMENTS`): writes are serialized across every process and
connection, as SQLite's ``BEGIN IMMEDIATE`` serializes them, and under READ COMMITTED every later statement of the
transaction sees all that was committed before the lock was granted (the epoch check, the next offset, the fence).
Serializing RLMM appends with metadata-log writes costs throughput, not correctness; both are small and rare next
to the data path, and one lock leaves no lock ordering to get wrong. Reads take no lock.

Bounded waits. Each connection carries ``statement_timeout``, ``lock_timeout`` and
``idle_in_transaction_session_timeout`` (:class:`~.connection.SessionTimeouts`): a client paused while it holds
the lease row blocks the others for at most the idle timeout; until then they fail after ``lock_timeout`` with a
retriable :class:`KafkaStorageError`. A server that answers nothing at all (paused) is bounded on the client side:
an operation that outlives ``response_timeout_ms`` has its connection shut (:mod:`.watchdog`) and fails, retriable.

Connections and errors. One connection per store, used by one thread at a time (the core's lock), opened again on
the next call after it broke. psycopg's errors become :class:`KafkaStorageError` (retriable) or, for damage the
server reports, :class:`MetadataLogCorrupt` (:func:`~.connection.translate`). A connection lost during ``COMMIT``
leaves the outcome unknown, and psycopg leaves a transaction block quietly when its connection broke inside it:
the store refuses to call such a write done (KafkaStorageError) and never retries a write by itself, so a caller
that retries an append reads the log end first. The DSN is logged only with its password masked.

Change notification (:class:`ChangeListener`). A metadata-log append, a lease taken by a new holder and a lease
release each run ``pg_notify('tieredctl_changes', <schema>)`` inside their transaction: the server delivers it at
commit, to every session that LISTENs, and never for a transaction that rolled back. ``wait_for_change`` LISTENs
on a second connection of its own (opened on first use, so the store's write connection is never blocked by a
waiter) and returns on the first notification for its schema. Notifications that arrive between two waits are
queued by the client and returned by the next wait. A wait that has to (re)open the listening connection returns
True at once, without waiting: commits before its LISTEN were never notified to it, so the caller reads the store
then, and no commit after it is missed (a follower that LISTENed only after its first read slept through the
appends in between, e.g. its own broker registration). Followers also read the store when a wait times out.

Recovery (on open, and ``recover()``). PostgreSQL keeps its own files consistent (its WAL is its business, not
ours), so there is no torn WAL to inspect and no file to salvage: recovery is the core's scan and repair of the
rows (what a bug, a manual edit or a restore did to them).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator

import psycopg
import structlog
from psycopg import sql

from orchestrator.errors import KafkaStorageError, MetadataLogCorrupt
from orchestrator.metadata.postgres.connection import (
    Connection,
    SessionTimeouts,
    check_dsn,
    check_schema_name,
    connect,
    masked_dsn,
    translate,
)
from orchestrator.metadata.postgres.schema import STATEMENTS, migrate
from orchestrator.metadata.postgres.watchdog import Watchdog
from orchestrator.metadata.sql import FileFindings, SqlMetadataStore
from orchestrator.metadata.sql.dialect import SqlConnection

log = structlog.get_logger(__name__)

DEFAULT_SCHEMA = "tieredctl"
# Every store notifies on this channel with its schema as the payload (a channel is an identifier of at most 63
# bytes; ``tieredctl_<schema>`` could exceed it). Listeners ignore other schemas' notifications.
CHANGE_CHANNEL = "tieredctl_changes"
_LISTEN_SLICE_S = 0.25  # a wait checks for close() this often


def _usable(conn: Connection | None) -> bool:
    """An open connection whose session did not break (psycopg knows it broke once a call through it failed)."""
    return conn is not None and not conn.closed and not conn.broken


def _close_quietly(conn: Connection | None) -> None:
    if conn is not None:
        with contextlib.suppress(psycopg.Error):
            conn.close()


class ChangeListener:
    """LISTEN/NOTIFY for one schema's store (see the module docstring, Change notification)."""

    notifies_changes = True

    def __init__(self, open_connection: Callable[[], Connection], *, schema: str, location: str) -> None:
        self._open_connection = open_connection
        self._schema = schema
        self._location = location
        self._lock = threading.Lock()
        self._listener: Connection | None = None  # LISTENs on CHANGE_CHANNEL; opened by the first wait

    def announce(self, db: SqlConnection) -> None:
        """Queue a notification for the followers, delivered by the server when this transaction commits."""
        db.execute("SELECT pg_notify(%s, %s)", (CHANGE_CHANNEL, self._schema))

    def wait(self, *, timeout_s: float, closed: Callable[[], bool]) -> bool:
        """Block until another connection committed a metadata-log append or a lease change in this schema
        (True), or ``timeout_s`` passed (False)."""
        deadline = time.monotonic() + max(0.0, timeout_s)
        with self._lock:
            if not closed() and not _usable(self._listener):
                # Not listening until now: whatever was committed before this LISTEN was never notified to us, so
                # answer "changed" at once; the caller reads the store, and from then on no commit is missed.
                try:
                    self._listening()
                except psycopg.Error as exc:
                    log.warning("metadata.listen_failed", store=self._location, error=type(exc).__name__)
                    self._drop()
                return True
            while not closed():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                try:
                    listener = self._listening()
                    for note in listener.notifies(timeout=min(remaining, _LISTEN_SLICE_S)):
                        if note.payload == self._schema:
                            return True
                except psycopg.Error as exc:
                    # Missed notifications cost latency only (the caller reads the store after every return): log,
                    # drop the connection, sleep out the wait, and LISTEN again next time.
                    log.warning("metadata.listen_failed", store=self._location, error=type(exc).__name__)
                    self._drop()
                    time.sleep(max(0.0, min(deadline - time.monotonic(), _LISTEN_SLICE_S)))
            return False

    def close(self) -> None:
        with self._lock:  # a wait in progress notices the store's close within one slice
            self._drop()

    def _listening(self) -> Connection:
        listener = self._listener
        if listener is None or not _usable(listener):
            self._drop()
            listener = self._listener = self._open_connection()
            listener.execute(sql.SQL("LISTEN {}").format(sql.Identifier(CHANGE_CHANNEL)))
        return listener

    def _drop(self) -> None:
        _close_quietly(self._listener)
        self._listener = None


class PostgresDialect:
    """PostgreSQL's side of the SQL core (:class:`~orchestrator.metadata.sql.SqlDialect`), for one schema."""

    sql = STATEMENTS

    def __init__(
        self, dsn: str, *, schema: str, timeouts: SessionTimeouts, application_name: str, location: str
    ) -> None:
        self._dsn = dsn
        self._schema = schema
        self._timeouts = timeouts
        self._application_name = application_name
        self._location = location
        self._conn: Connection | None = None
        self.changes = ChangeListener(self._connect, schema=schema, location=location)
        self._watchdog = Watchdog(timeouts.response_timeout_ms / 1000, current=lambda: self._conn, location=location)

    def _connect(self) -> Connection:
        return connect(self._dsn, schema=self._schema, timeouts=self._timeouts, application_name=self._application_name)

    def connection(self) -> Connection:
        """The connection, opened again if the last one broke (a server restart, a timeout that ended the session)."""
        conn = self._conn
        if conn is None or not _usable(conn):
            self.disconnect()
            conn = self._conn = self._connect()
        return conn

    def disconnect(self) -> None:
        _close_quietly(self._conn)
        self._conn = None

    @contextlib.contextmanager
    def errors(self) -> Iterator[None]:
        """Translate psycopg's errors at the boundary: damage vs everything else (retriable). The operation inside
        is bounded by the watchdog (a server that answers nothing)."""
        try:
            with self._watchdog.guard():
                yield
        except psycopg.Error as exc:
            if self._watchdog.fired():
                self.disconnect()
                bound = self._watchdog.timeout_s
                raise KafkaStorageError(
                    f"{self._location}: no answer within {bound:g}s (the PostgreSQL server is paused, or the link "
                    "to it is lost): the connection was closed"
                ) from exc
            error = translate(exc, where=self._location)
            if isinstance(error, MetadataLogCorrupt):
                log.error("metadata.store.damaged", store=self._location, error=str(exc))
            raise error from exc

    @contextlib.contextmanager
    def transaction(self, db: Connection) -> Iterator[None]:
        """``BEGIN`` ... ``COMMIT``; a block psycopg left because the connection broke in it was not written."""
        with db.transaction() as tx:
            yield
        if tx.status != tx.Status.COMMITTED:
            raise KafkaStorageError(
                f"the connection to {self._location} was lost before the commit: nothing of it was written"
            )

    @contextlib.contextmanager
    def file_recovery(self) -> Iterator[FileFindings]:
        """Nothing below the rows: PostgreSQL keeps its own files."""
        yield FileFindings()


class PostgresMetadataStore(SqlMetadataStore[Connection]):
    """A :class:`~orchestrator.metadata.store.MetadataStore` in a PostgreSQL schema (see the module docstring).

    ``dsn`` is a libpq connection string or URI; its tables live in ``schema`` (created, with every migration,
    on first open). ``timeouts`` bounds every server-side wait (:class:`SessionTimeouts`' defaults: 5 s per
    statement, 5 s per lock wait, 10 s idle in a transaction). ``recover_on_open`` runs :meth:`recover` in the
    constructor; its report is kept in :attr:`last_recovery`. ``clock`` (seconds since the epoch) only stamps
    quarantined rows.
    """

    def __init__(
        self,
        dsn: str,
        *,
        schema: str = DEFAULT_SCHEMA,
        timeouts: SessionTimeouts | None = None,
        recover_on_open: bool = True,
        application_name: str = "tieredctl-metadata",
        clock: Callable[[], float] = time.time,
    ) -> None:
        check_dsn(dsn)
        check_schema_name(schema)
        self.schema = schema
        self.timeouts = timeouts or SessionTimeouts()
        location = f"{masked_dsn(dsn)} schema={schema}"  # what logs and errors name: never the password
        dialect = PostgresDialect(
            dsn, schema=schema, timeouts=self.timeouts, application_name=application_name, location=location
        )
        super().__init__(dialect, location=location, clock=clock)
        try:
            with self._lock, dialect.errors():
                found, now = migrate(self._db(), schema=schema)
            log.info("metadata.store.opened", store=self.location, schema_version=now, migrated_from=found)
            if recover_on_open:
                self.recover()
        except BaseException:
            self.close()  # a store that failed to open leaves no connection behind
            raise

    def __repr__(self) -> str:
        return f"PostgresMetadataStore({self.location!r})"


__all__ = ["CHANGE_CHANNEL", "DEFAULT_SCHEMA", "ChangeListener", "PostgresDialect", "PostgresMetadataStore"]
