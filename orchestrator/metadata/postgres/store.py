"""A :class:`MetadataStore` backend on PostgreSQL (psycopg 3, synchronous), for clusters whose processes do not
share a file system.

Concurrency. Every write (append, snapshot, lease change, RLMM append, repair) is one READ COMMITTED
transaction that starts by locking the single ``lease`` row (``SELECT ... FOR UPDATE``): writes are serialized
across every process and connection, as SQLite's ``BEGIN IMMEDIATE`` serializes them. Under that lock:

* the epoch check and the write it guards are in the same transaction (store invariant 2): a deposed controller
  whose append is queued behind the new controller's lease acquisition reads the new epoch and is refused;
* the next offset is ``MAX + 1`` of its log, read after the lock, so offsets are dense and distinct whichever
  process writes (invariant 1); a refused or failed batch rolls back whole;
* an RLMM append reads the fence table after the lock, so no metadata-log append can change a topic's tiered
  state between the fence check and the RLMM write (invariant 4).

Appends (to either log) from concurrent threads of one process are group-committed (:mod:`..group_commit`): one
transaction, one commit, each append in its own savepoint, so one append's refusal
changes nothing of the others; the lease row read at the start of the transaction stays locked, so every append
of the group is checked against the same lease.

Serializing RLMM appends with metadata-log writes costs throughput, not correctness; both are small and rare
next to the data path, and one lock leaves no lock ordering to get wrong. Reads are single statements, a page
(:data:`~.schema.PAGE_ROWS` rows) at a time, and take no lock.

Bounded waits. Each connection carries ``statement_timeout``, ``lock_timeout`` and
``idle_in_transaction_session_timeout`` (:class:`~.connection.SessionTimeouts`): a client paused while it holds
the lease row blocks the others for at most the idle timeout; until then they fail after ``lock_timeout`` with a
retriable :class:`KafkaStorageError`.

Connections and errors. One connection per store, used by one thread at a time (a lock), opened again on the next
call after it broke. psycopg's errors become :class:`KafkaStorageError` (retriable) or, for damage the server
reports, :class:`MetadataLogCorrupt` (:func:`~.connection.translate`). A connection lost during ``COMMIT``
leaves the outcome unknown; the store says so (KafkaStorageError) and never retries a write by itself, so a
caller that retries an append reads the log end first. The DSN is logged only with its password masked.

Change notification. A metadata-log append, a lease taken by a new holder and a lease release each run
``pg_notify('tieredctl_changes', <schema>)`` inside their transaction: the server delivers it at commit, to every
session that LISTENs, and never for a transaction that rolled back. :meth:`wait_for_change` LISTENs on a second
connection of its own (opened on first use, so the store's write connection is never blocked by a waiter) and
returns on the first notification for its schema. Notifications that arrive between two waits are queued by the
client and returned by the next wait. A wait that has to (re)open the listening connection returns True at once,
without waiting: commits before its LISTEN were never notified to it, so the caller reads the store then, and no
commit after it is missed (a follower that LISTENed only after its first read slept through the appends in
between, e.g. its own broker registration). Followers also read the store when a wait times out.

Recovery (on open, and ``recover()``), see ``store`` invariant 6. PostgreSQL keeps its own files consistent
(its WAL is its business, not ours), so there is no torn WAL to inspect and no file to salvage; what can still be
wrong is what a bug, a manual edit or a restore did to the rows. Every record's checksum is verified and offsets
must be dense; the log is cut at the first bad record (the rest is moved to ``quarantine``, not dropped),
snapshots beyond the new end or failing their checksum are dropped, the fence is rebuilt from the log, and if the
metadata log lost records the lease is revoked (epoch kept), so the active controller re-acquires at epoch + 1
and rebuilds. The scan runs without the lock; only when it finds damage is it repeated, and the repair made,
under the write lock (another process may have repaired it meanwhile).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field

import psycopg
import structlog
from psycopg import sql

from orchestrator import crash_points
from orchestrator.errors import KafkaStorageError, MetadataLogCorrupt, ProtocolError, StaleControllerEpoch
from orchestrator.ids import Uuid
from orchestrator.metadata.group_commit import GroupCommit, sql_savepoint
from orchestrator.metadata.postgres.connection import (
    Connection,
    SessionTimeouts,
    check_dsn,
    check_schema_name,
    connect,
    masked_dsn,
    translate,
)
from orchestrator.metadata.postgres.schema import (
    PAGE_ROWS,
    apply_fence_changes,
    fence_lookup,
    fence_lookup_many,
    log_rows,
    migrate,
    rebuild_fence,
)
from orchestrator.metadata.records import MetadataRecord, TieredState, decode_record
from orchestrator.metadata.store import (
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

DEFAULT_SCHEMA = "tieredctl"
# Every store notifies on this channel with its schema as the payload (a channel is an identifier of at most 63
# bytes; ``tieredctl_<schema>`` could exceed it). Listeners ignore other schemas' notifications.
CHANGE_CHANNEL = "tieredctl_changes"
_LISTEN_SLICE_S = 0.25  # a wait checks for close() this often


@dataclass(frozen=True, slots=True)
class _LeaseRow:
    holder: str | None
    controller_epoch: int
    expires_at_ms: int

    def describe(self) -> str:
        if self.holder is None:
            return f"no controller holds the lease (last controller epoch {self.controller_epoch})"
        return f"the lease is held by {self.holder} at controller epoch {self.controller_epoch}"


@dataclass
class _Findings:
    """What a scan of the rows found (mutable scratch, turned into a RecoveryReport)."""

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


class PostgresMetadataStore:
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
        self._dsn = dsn
        self.schema = schema
        self.timeouts = timeouts or SessionTimeouts()
        self.location = f"{masked_dsn(dsn)} schema={schema}"  # what logs and errors name: never the password
        self._application_name = application_name
        self._clock = clock
        self._lock = threading.RLock()
        self._conn: Connection | None = None
        self._listen_lock = threading.Lock()
        self._listener: Connection | None = None  # LISTENs on CHANGE_CHANNEL; opened by the first wait_for_change
        self._closed = False
        self._group: GroupCommit[tuple[Connection, _LeaseRow]] = GroupCommit(
            self._write, lambda db_lease: sql_savepoint(db_lease[0].execute), errors=self._pg_errors
        )
        self.last_recovery: RecoveryReport | None = None
        try:
            with self._lock, self._pg_errors():
                found, now = migrate(self._db(), schema=schema)
            log.info("metadata.store.opened", store=self.location, schema_version=now, migrated_from=found)
            if recover_on_open:
                self.last_recovery = self.recover()
        except BaseException:
            self.close()  # a store that failed to open leaves no connection behind
            raise

    def __enter__(self) -> PostgresMetadataStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"PostgresMetadataStore({self.location!r})"

    # --- cluster metadata log -------------------------------------------------------------------------------

    def append(self, records: Sequence[MetadataRecord], *, controller_epoch: int) -> int:
        encoded = encode_all(records, rlmm=False)

        def write(db: Connection, lease: _LeaseRow) -> int:
            self._check_epoch(lease, controller_epoch, what="append to the metadata log")
            changes = plan_fence_changes(records, fence_lookup_many(db, fence_topic_ids(records)).get)
            start = _next_offset(db, "log")
            if encoded:
                with db.cursor() as cur:
                    cur.executemany(
                        "INSERT INTO log (record_offset, controller_epoch, data, crc) VALUES (%s, %s, %s, %s)",
                        [(start + i, controller_epoch, data, checksum(data)) for i, data in enumerate(encoded)],
                    )
            apply_fence_changes(db, changes)
            if encoded:
                self._notify(db)
            return start + len(encoded) - 1

        return self._group.run(lambda db_lease: write(*db_lease))

    def read(self, *, from_offset: int = 0, limit: int | None = None) -> Iterator[LogEntry]:
        check_read_range(from_offset, limit)
        return self._iter_log(from_offset, limit)

    def _iter_log(self, expected: int, limit: int | None) -> Iterator[LogEntry]:
        def fetch_page(from_offset: int, rows: int) -> list[LogRow]:
            with self._read() as db:
                found = db.execute(
                    "SELECT record_offset, controller_epoch, data, crc FROM log WHERE record_offset >= %s "
                    "ORDER BY record_offset LIMIT %s",
                    (from_offset, rows),
                ).fetchall()
            return [(int(o), int(e), bytes(d), int(c)) for o, e, d, c in found]

        return page_log(
            fetch_page,
            expected=expected,
            limit=limit,
            page_rows=PAGE_ROWS,
            start_offset=self.start_offset,
            verified=lambda data, crc, offset: self._verified(data, crc, offset, rlmm=False),
            on_missing=lambda offset: log.error(
                "metadata.log.corrupt", store=self.location, offset=offset, reason="missing"
            ),
        )

    def end_offset(self) -> int:
        with self._read() as db:
            return _next_offset(db, "log")

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
        with self._write() as (db, lease):
            self._check_epoch(lease, controller_epoch, what="save a snapshot")
            check_snapshot_offset(offset, _log_start(db), _next_offset(db, "log"), retain)
            db.execute(
                "INSERT INTO snapshots (snapshot_offset, controller_epoch, record_count, data, crc) "
                "VALUES (%s, %s, %s, %s, %s) ON CONFLICT (snapshot_offset) DO UPDATE SET "
                "controller_epoch = EXCLUDED.controller_epoch, record_count = EXCLUDED.record_count, "
                "data = EXCLUDED.data, crc = EXCLUDED.crc",
                (offset, controller_epoch, len(records), blob, checksum(blob)),
            )
            crash_points.reached("controller.mid_snapshot")  # written, not committed: the transaction dies with it
            db.execute(
                "DELETE FROM snapshots WHERE snapshot_offset NOT IN "
                "(SELECT snapshot_offset FROM snapshots ORDER BY snapshot_offset DESC LIMIT %s)",
                (retain,),
            )
            oldest = _scalar(db, "SELECT MIN(snapshot_offset) FROM snapshots")
            deleted = db.execute("DELETE FROM log WHERE record_offset < %s", (oldest,)).rowcount
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
            row = db.execute(
                "SELECT snapshot_offset, data, crc FROM snapshots ORDER BY snapshot_offset DESC LIMIT 1"
            ).fetchone()
        if row is None:
            return None
        offset, data, crc = int(row[0]), bytes(row[1]), int(row[2])
        if checksum(data) != crc:
            log.error("metadata.log.corrupt", store=self.location, snapshot_offset=offset, reason="checksum")
            raise MetadataLogCorrupt(f"snapshot at offset {offset}: checksum mismatch")
        return Snapshot(offset, tuple(decode_record(part) for part in split_snapshot(data, offset=offset)))

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
                self._notify(db)
            else:
                return None
            db.execute(
                "UPDATE lease SET holder = %s, controller_epoch = %s, expires_at_ms = %s WHERE id = 1",
                (holder, epoch, now_ms + ttl_ms),
            )
            return Lease(holder, epoch, now_ms + ttl_ms)

    def renew_lease(self, *, holder: str, controller_epoch: int, now_ms: int, ttl_ms: int) -> Lease:
        check_lease_args(holder, ttl_ms)
        with self._write() as (db, lease):
            if lease.holder != holder or lease.controller_epoch != controller_epoch:
                raise StaleControllerEpoch(
                    f"{holder} cannot renew the lease at controller epoch {controller_epoch}: {lease.describe()}"
                )
            db.execute("UPDATE lease SET expires_at_ms = %s WHERE id = 1", (now_ms + ttl_ms,))
            return Lease(holder, controller_epoch, now_ms + ttl_ms)

    def release_lease(self, *, holder: str, controller_epoch: int) -> bool:
        with self._write() as (db, lease):
            if lease.holder != holder or lease.controller_epoch != controller_epoch:
                return False
            db.execute("UPDATE lease SET holder = NULL, expires_at_ms = 0 WHERE id = 1")
            self._notify(db)
        log.info("metadata.lease.released", holder=holder, controller_epoch=controller_epoch)
        return True

    def current_lease(self) -> Lease | None:
        with self._read() as db:
            lease = _lease_row(db)
        return None if lease.holder is None else Lease(lease.holder, lease.controller_epoch, lease.expires_at_ms)

    # --- remote log metadata ----------------------------------------------------------------------------------

    def append_remote_log_metadata(self, records: Sequence[MetadataRecord], *, now_ms: int | None = None) -> int:
        encoded = encode_all(records, rlmm=True)

        def write(db: Connection, _lease: _LeaseRow) -> int:
            topic_ids = check_rlmm_fence(records, lambda tid: fence_lookup(db, tid))
            start = _next_offset(db, "rlmm")
            if encoded:
                with db.cursor() as cur:
                    cur.executemany(
                        "INSERT INTO rlmm (record_offset, topic_id, appended_at_ms, data, crc) "
                        "VALUES (%s, %s, %s, %s, %s)",
                        [
                            (start + i, tid.to_uuid(), now_ms, data, checksum(data))
                            for i, (data, tid) in enumerate(zip(encoded, topic_ids, strict=True))
                        ],
                    )
            return start + len(encoded) - 1

        return self._group.run(lambda db_lease: write(*db_lease))

    def read_remote_log_metadata(self, *, topic_id: Uuid | None = None, from_offset: int = 0) -> Iterator[LogEntry]:
        check_read_range(from_offset, None)
        return self._iter_rlmm(topic_id, from_offset)

    def _iter_rlmm(self, topic_id: Uuid | None, expected: int) -> Iterator[LogEntry]:
        dense = topic_id is None
        while True:
            with self._read() as db:
                if topic_id is None:
                    rows = db.execute(
                        "SELECT record_offset, appended_at_ms, data, crc FROM rlmm WHERE record_offset >= %s "
                        "ORDER BY record_offset LIMIT %s",
                        (expected, PAGE_ROWS),
                    ).fetchall()
                else:
                    rows = db.execute(
                        "SELECT record_offset, appended_at_ms, data, crc FROM rlmm WHERE topic_id = %s "
                        "AND record_offset >= %s ORDER BY record_offset LIMIT %s",
                        (topic_id.to_uuid(), expected, PAGE_ROWS),
                    ).fetchall()
            for offset, appended_at_ms, data, crc in rows:
                if dense and offset != expected:
                    log.error("metadata.log.corrupt", store=self.location, rlmm_offset=expected, reason="missing")
                    raise MetadataLogCorrupt(f"remote log metadata offset {expected} is missing (next: {offset})")
                record = self._verified(bytes(data), int(crc), offset, rlmm=True)
                yield LogEntry(offset, record, appended_at_ms=appended_at_ms)
                expected = offset + 1
            if len(rows) < PAGE_ROWS:
                return

    def tiered_state(self, topic_id: Uuid) -> tuple[int, TieredState] | None:
        with self._read() as db:
            return fence_lookup(db, topic_id)

    # --- change notification ----------------------------------------------------------------------------------

    notifies_changes = True

    def wait_for_change(self, *, timeout_s: float) -> bool:
        """Block until another connection committed a metadata-log append or a lease change in this schema
        (True), or ``timeout_s`` passed (False); see the module docstring (Change notification)."""
        deadline = time.monotonic() + max(0.0, timeout_s)
        with self._listen_lock:
            if not self._closed and (self._listener is None or self._listener.closed or self._listener.broken):
                # Not listening until now: whatever was committed before this LISTEN was never notified to us, so
                # answer "changed" at once; the caller reads the store, and from then on no commit is missed.
                try:
                    self._listening()
                except psycopg.Error as exc:
                    log.warning("metadata.listen_failed", store=self.location, error=type(exc).__name__)
                    self._close_listener()
                return True
            while not self._closed:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                try:
                    listener = self._listening()
                    for note in listener.notifies(timeout=min(remaining, _LISTEN_SLICE_S)):
                        if note.payload == self.schema:
                            return True
                except psycopg.Error as exc:
                    # Missed notifications cost latency only (the caller reads the store after every return): log,
                    # drop the connection, sleep out the wait, and LISTEN again next time.
                    log.warning("metadata.listen_failed", store=self.location, error=type(exc).__name__)
                    self._close_listener()
                    time.sleep(max(0.0, min(deadline - time.monotonic(), _LISTEN_SLICE_S)))
            return False

    def _listening(self) -> Connection:
        if self._listener is None or self._listener.closed or self._listener.broken:
            self._close_listener()
            self._listener = connect(
                self._dsn, schema=self.schema, timeouts=self.timeouts, application_name=self._application_name
            )
            self._listener.execute(sql.SQL("LISTEN {}").format(sql.Identifier(CHANGE_CHANNEL)))
        return self._listener

    def _close_listener(self) -> None:
        if self._listener is not None:
            with contextlib.suppress(psycopg.Error):
                self._listener.close()
            self._listener = None

    def _notify(self, db: Connection) -> None:
        """Queue a notification for the followers, delivered by the server when this transaction commits."""
        db.execute("SELECT pg_notify(%s, %s)", (CHANGE_CHANNEL, self.schema))

    # --- lifecycle --------------------------------------------------------------------------------------------

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._disconnect()
        with self._listen_lock:  # a wait in progress notices _closed within one slice
            self._close_listener()

    def recover(self) -> RecoveryReport:
        """Verify every record, cut each log at its first bad one (quarantining the rest), drop bad snapshots,
        rebuild the fence and revoke the lease if the metadata log lost records; report what was found."""
        with self._lock, self._pg_errors():
            self._closed = False
            db = self._db()
            found = _scan(db)
            if found.damaged:
                with db.transaction():
                    _lock_lease(db)
                    found = _scan(db)  # again, under the write lock: another process may have repaired it
                    if found.damaged:
                        self._repair(db, found)
            report = RecoveryReport(
                log_end_offset=found.log_end,
                rlmm_end_offset=found.rlmm_end,
                first_bad_offset=found.first_bad,
                truncated_records=found.bad_count,
                first_bad_rlmm_offset=found.first_bad_rlmm,
                truncated_rlmm_records=found.bad_rlmm_count,
                dropped_snapshots=tuple(found.bad_snapshots),
                problems=tuple(found.problems),
            )
        log_recovery(report, store=self.location)
        self.last_recovery = report
        return report

    # --- internals --------------------------------------------------------------------------------------------

    def _repair(self, db: Connection, found: _Findings) -> None:
        now_ms = int(self._clock() * 1000)
        for table, first_bad in (("log", found.first_bad), ("rlmm", found.first_bad_rlmm)):
            if first_bad is None:
                continue
            reason = f"torn tail from offset {first_bad}"
            if table == "log":
                db.execute(
                    "INSERT INTO quarantine (log, record_offset, controller_epoch, data, crc, reason, "
                    "quarantined_at_ms) SELECT 'log', record_offset, controller_epoch, data, crc, %s, %s FROM log "
                    "WHERE record_offset >= %s ORDER BY record_offset",
                    (reason, now_ms, first_bad),
                )
                db.execute("DELETE FROM log WHERE record_offset >= %s", (first_bad,))
            else:
                db.execute(
                    "INSERT INTO quarantine (log, record_offset, topic_id, appended_at_ms, data, crc, reason, "
                    "quarantined_at_ms) SELECT 'rlmm', record_offset, topic_id, appended_at_ms, data, crc, %s, %s "
                    "FROM rlmm WHERE record_offset >= %s ORDER BY record_offset",
                    (reason, now_ms, first_bad),
                )
                db.execute("DELETE FROM rlmm WHERE record_offset >= %s", (first_bad,))
        if found.bad_snapshots:
            db.execute("DELETE FROM snapshots WHERE snapshot_offset = ANY(%s)", (found.bad_snapshots,))
        if found.first_bad is not None:
            rebuild_fence(db)
            lease = _lease_row(db)
            if lease.holder is not None:  # the controller's image may hold the lost records
                db.execute("UPDATE lease SET holder = NULL, expires_at_ms = 0 WHERE id = 1")
                log.warning(
                    "metadata.lease.revoked",
                    holder=lease.holder,
                    controller_epoch=lease.controller_epoch,
                    reason="log truncated",
                )

    def _verified(self, data: bytes, crc: int, offset: int, *, rlmm: bool) -> MetadataRecord:
        kind = "remote log metadata" if rlmm else "metadata log"
        if checksum(data) != crc:
            log.error("metadata.log.corrupt", store=self.location, offset=offset, log=kind, reason="checksum")
            raise MetadataLogCorrupt(f"{kind} record at offset {offset}: checksum mismatch")
        try:
            return decode_record(data, rlmm=rlmm)
        except ProtocolError as exc:
            raise ProtocolError(f"{kind} record at offset {offset}: {exc.message}") from exc

    def _check_epoch(self, lease: _LeaseRow, controller_epoch: int, *, what: str) -> None:
        if lease.holder is None or controller_epoch != lease.controller_epoch:
            log.warning(
                "metadata.append.fenced",
                controller_epoch=controller_epoch,
                current=lease.controller_epoch,
                holder=lease.holder,
            )
            raise StaleControllerEpoch(f"controller epoch {controller_epoch} cannot {what}: {lease.describe()}")

    # --- connection handling ----------------------------------------------------------------------------------

    def _db(self) -> Connection:
        """The connection, opened again if the last one broke (a server restart, a timeout that ended the session)."""
        if self._closed:
            raise KafkaStorageError(f"the metadata store {self.location} is closed")
        if self._conn is None or self._conn.closed or self._conn.broken:
            self._disconnect()
            self._conn = connect(
                self._dsn, schema=self.schema, timeouts=self.timeouts, application_name=self._application_name
            )
        return self._conn

    def _disconnect(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(psycopg.Error):
                self._conn.close()
            self._conn = None

    @contextlib.contextmanager
    def _pg_errors(self) -> Iterator[None]:
        """Translate psycopg's errors at the boundary: damage vs everything else (retriable)."""
        try:
            yield
        except psycopg.Error as exc:
            error = translate(exc, where=self.location)
            if isinstance(error, MetadataLogCorrupt):
                log.error("metadata.store.damaged", store=self.location, error=str(exc))
            raise error from exc

    @contextlib.contextmanager
    def _read(self) -> Iterator[Connection]:
        with self._lock, self._pg_errors():
            yield self._db()

    @contextlib.contextmanager
    def _write(self) -> Iterator[tuple[Connection, _LeaseRow]]:
        """One write transaction, holding the lease row's lock from its first statement (see the module docstring)."""
        with self._lock, self._pg_errors():
            db = self._db()
            with db.transaction() as tx:
                yield db, _lock_lease(db)
            if tx.status != tx.Status.COMMITTED:  # psycopg leaves a block quietly when the connection broke in it
                raise KafkaStorageError(
                    f"the connection to {self.location} was lost before the commit: nothing of it was written"
                )


# --- helpers ---------------------------------------------------------------------------------------------------


def _scalar(db: Connection, query: str, args: tuple[object, ...] = ()) -> int:
    row = db.execute(query, args).fetchone()
    if row is None or row[0] is None:  # pragma: no cover - aggregates always answer a row
        raise KafkaStorageError(f"no value for {query!r}")
    return int(row[0])


_NEXT_OFFSET = {
    "log": "SELECT COALESCE(MAX(record_offset) + 1, 0) FROM log",
    "rlmm": "SELECT COALESCE(MAX(record_offset) + 1, 0) FROM rlmm",
}


def _next_offset(db: Connection, table: str) -> int:
    return _scalar(db, _NEXT_OFFSET[table])


def _log_start(db: Connection) -> int:
    return _scalar(db, "SELECT COALESCE(MIN(record_offset), 0) FROM log")


def _lease_row(db: Connection, *, for_update: bool = False) -> _LeaseRow:
    query = "SELECT holder, controller_epoch, expires_at_ms FROM lease WHERE id = 1"
    row = db.execute(query + " FOR UPDATE" if for_update else query).fetchone()
    if row is None:  # pragma: no cover - migration 1 inserts it
        raise MetadataLogCorrupt("the lease row is missing")
    return _LeaseRow(row[0], int(row[1]), int(row[2]))


def _lock_lease(db: Connection) -> _LeaseRow:
    """Take the store's write lock (the lease row, FOR UPDATE) inside the caller's transaction; return the row."""
    return _lease_row(db, for_update=True)


def _first_bad(rows: Iterable[tuple[int, bytes, int]]) -> tuple[int | None, int]:
    """(first bad offset or None, end offset once cut there) for a log's rows in offset order: checksums and
    density from its first row (the metadata log may start above 0, behind a snapshot)."""
    expected: int | None = None
    for offset, data, crc in rows:
        if expected is None:
            expected = offset
        if offset != expected or checksum(data) != crc:
            return expected, expected
        expected += 1
    return None, expected or 0


def _scan(db: Connection) -> _Findings:
    found = _Findings()
    found.first_bad, found.log_end = _first_bad(log_rows(db, "log"))
    found.first_bad_rlmm, found.rlmm_end = _first_bad(log_rows(db, "rlmm"))
    if found.first_bad is not None:
        found.bad_count = _scalar(db, "SELECT COUNT(*) FROM log WHERE record_offset >= %s", (found.first_bad,))
        found.problems.append(
            f"metadata log: bad record at offset {found.first_bad}; the log now ends there and "
            f"{found.bad_count} record(s) from it on were quarantined"
        )
    if found.first_bad_rlmm is not None:
        found.bad_rlmm_count = _scalar(
            db, "SELECT COUNT(*) FROM rlmm WHERE record_offset >= %s", (found.first_bad_rlmm,)
        )
        found.problems.append(
            f"remote log metadata: bad record at offset {found.first_bad_rlmm}; "
            f"{found.bad_rlmm_count} record(s) from it on were quarantined"
        )
    for offset, data, crc in db.execute("SELECT snapshot_offset, data, crc FROM snapshots ORDER BY snapshot_offset"):
        if checksum(bytes(data)) != crc or offset >= found.log_end:
            found.bad_snapshots.append(int(offset))
            found.problems.append(f"snapshot at offset {offset} dropped (damaged or beyond the log end)")
    return found


__all__ = ["DEFAULT_SCHEMA", "PostgresMetadataStore"]


def _conforms(store: PostgresMetadataStore) -> MetadataStore:
    return store  # mypy checks here that the backend implements the whole interface
