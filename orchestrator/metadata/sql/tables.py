"""The SQL store's rows, read, checked and repaired the same way on every engine.

Each function takes an open connection and the dialect's :class:`~.dialect.Statements`; none opens, commits or
locks anything: the caller (the core, :mod:`.store`, or SQLite's salvage writing a fresh file) holds the
transaction. What is here:

* reading a log in pages (:func:`table_rows`, :func:`page_log`): keyset pagination, :data:`PAGE_ROWS` rows a
  statement, so one statement never runs long (PostgreSQL's ``statement_timeout``) and SQLite never keeps a read
  open over a whole table; :func:`page_log` checks and decodes a page's records in one call (:func:`page_entries`,
  compiled where the build made ``_replay_c``), so a page's records are verified before any is handed on;
* the RLMM fence table, derived from the metadata log: lookups, a batch's changes, and its rebuild from the log
  (``store`` invariants 4 and 7);
* the lease row;
* recovery of readable rows (``store`` invariant 6): :func:`scan` finds the first bad record of each log and the
  bad snapshots; :func:`repair` moves each log's tail from its first bad record into ``quarantine`` (never
  dropped), drops the bad snapshots and, when the metadata log lost records, rebuilds the fence and revokes the
  lease (epoch kept), because the active controller's image may hold the lost records.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, cast

import structlog

from orchestrator.errors import MetadataLogCorrupt, ProtocolError
from orchestrator.ids import Uuid
from orchestrator.metadata.records import (
    FRAME_VERSION,
    MetadataRecord,
    TieredState,
    decode_record,
    plain_decoder,
)
from orchestrator.metadata.sql.dialect import LogTable, SqlConnection, Statements
from orchestrator.metadata.store import FenceChanges, LogEntry, checksum, plan_fence_changes, snapshot_base, truncated

log = structlog.get_logger(__name__)

PAGE_ROWS = 512  # rows a statement when a log is read
_IN_CHUNK = 500  # topic ids per IN (...) query: below SQLite's bound-parameter limit on every build

LogRow = tuple[int, int, bytes, int]
"""One stored metadata-log row: (offset, controller epoch, encoded record, CRC)."""


def executemany(db: SqlConnection, query: str, rows: Sequence[Any]) -> None:
    """``query`` once a row, in one driver call; nothing at all for no rows."""
    if not rows:
        return
    cursor = db.cursor()
    try:
        cursor.executemany(query, rows)
    finally:
        cursor.close()


def scalar(db: SqlConnection, query: str, args: Sequence[object] = ()) -> int:
    row = db.execute(query, args).fetchone()
    if row is None or row[0] is None:  # pragma: no cover - aggregates always answer a row
        raise MetadataLogCorrupt(f"no value for {query!r}")
    return int(row[0])


# --- the lease row ----------------------------------------------------------------------------------------------


class LeaseRow(NamedTuple):
    holder: str | None
    controller_epoch: int
    expires_at_ms: int

    def describe(self) -> str:
        if self.holder is None:
            return f"no controller holds the lease (last controller epoch {self.controller_epoch})"
        return f"the lease is held by {self.holder} at controller epoch {self.controller_epoch}"


def lease_row(db: SqlConnection, query: str) -> LeaseRow:
    """The lease row, read by ``query`` (:attr:`Statements.read_lease`, or ``lock_lease`` in a write)."""
    row = db.execute(query).fetchone()
    if row is None:  # pragma: no cover - every layout inserts it
        raise MetadataLogCorrupt("the lease row is missing")
    return LeaseRow(row[0], int(row[1]), int(row[2]))


# --- reading the logs -------------------------------------------------------------------------------------------


def table_rows(db: SqlConnection, table: LogTable, *, from_offset: int = 0) -> Iterator[tuple[int, bytes, int]]:
    """Every ``(offset, data, crc)`` of a log from ``from_offset``, in offset order, a page a statement."""
    expected = from_offset
    while True:
        rows = db.execute(table.page, (expected, PAGE_ROWS)).fetchall()
        yield from rows
        if len(rows) < PAGE_ROWS:
            return
        expected = int(rows[-1][0]) + 1


def verified(data: bytes, crc: int, offset: int, *, rlmm: bool, store: str) -> MetadataRecord:
    """The record stored at ``offset`` once its checksum holds (:class:`MetadataLogCorrupt` naming it if not)."""
    if checksum(data) != crc:
        kind = "remote log metadata" if rlmm else "metadata log"
        log.error("metadata.log.corrupt", store=store, offset=offset, log=kind, reason="checksum")
        raise MetadataLogCorrupt(f"{kind} record at offset {offset}: checksum mismatch")
    try:
        return decode_record(data, rlmm=rlmm)
    except ProtocolError as exc:
        kind = "remote log metadata" if rlmm else "metadata log"
        raise ProtocolError(f"{kind} record at offset {offset}: {exc.message}") from exc


def page_log(
    fetch_page: Callable[[int, int], Sequence[LogRow]],
    *,
    expected: int,
    limit: int | None,
    start_offset: Callable[[], int],
    store: str,
    on_missing: Callable[[int], None],
) -> Iterator[LogEntry]:
    """The cluster metadata log of ``store`` (its location, as errors name it) from ``expected`` on,
    :data:`PAGE_ROWS` rows a read (``fetch_page(from_offset, rows)``), each record checked and decoded by
    :func:`page_entries`. A gap is :class:`LogTruncated` when it lies below ``start_offset()`` (deleted behind a
    snapshot), else damage: ``on_missing(offset)`` (the caller logs it), then :class:`MetadataLogCorrupt` naming
    the missing offset (``store`` invariant 6)."""
    remaining = limit
    while remaining is None or remaining > 0:
        page = PAGE_ROWS if remaining is None else min(PAGE_ROWS, remaining)
        rows = fetch_page(expected, page)
        entries, expected = page_entries(rows, expected, store=store)
        yield from entries
        if len(entries) < len(rows):
            offset = rows[len(entries)][0]
            start = start_offset()
            if expected < start:
                raise truncated(expected, start)
            on_missing(expected)
            raise MetadataLogCorrupt(f"metadata log offset {expected} is missing (next stored: {offset})")
        if remaining is not None:
            remaining -= len(rows)
        if len(rows) < page:
            return


try:  # the compiled page reader (orchestrator/metadata/_replay_c.pyx), which make builds
    from orchestrator.metadata._replay_c import read_page as _compiled_read_page  # type: ignore[import-not-found]
except ImportError:  # pragma: no cover - an install that did not compile it: the reference alone
    _compiled_read_page = None

#: Whether :func:`page_entries` runs compiled (the build made ``_replay_c``).
COMPILED = _compiled_read_page is not None
_PLAIN_DECODERS: dict[int, Any] = {}  # the compiled reader's memo of plain_decoder, by (type << 16 | version)
_CLUSTER_DECODER = functools.partial(plain_decoder, False)


def page_entries(rows: Sequence[LogRow], expected: int, *, store: str) -> tuple[list[LogEntry], int]:
    """The cluster metadata log's ``rows`` as entries, from the first while their offsets run ``expected``,
    ``expected + 1``, ...: ``(entries, the offset expected next)``; fewer entries than rows means the next row
    broke the run. Each record is :func:`verified` as a cluster-log record of ``store`` (never the RLMM's: record
    types of the two logs share numbers, so the reader is bound to one log here, not chosen by a caller).

    The compiled twin (``_replay_c.read_page``) when it is built (:data:`COMPILED`), else the reference,
    :func:`page_entries_py`: the same entries, or the same error, for the same rows."""
    if _compiled_read_page is None:
        return page_entries_py(rows, expected, store=store)
    return cast(
        tuple[list[LogEntry], int],
        _compiled_read_page(
            rows if type(rows) is list else list(rows),
            expected,
            _PLAIN_DECODERS,
            _CLUSTER_DECODER,
            functools.partial(verified, rlmm=False, store=store),
            LogEntry,
            MetadataRecord,
            FRAME_VERSION,
        ),
    )


def page_entries_py(rows: Sequence[LogRow], expected: int, *, store: str) -> tuple[list[LogEntry], int]:
    """The reference reader, in Python (:func:`page_entries`)."""
    entries: list[LogEntry] = []
    for offset, epoch, data, crc in rows:
        if offset != expected:
            break
        entries.append(LogEntry(offset, verified(data, crc, offset, rlmm=False, store=store), epoch))
        expected += 1
    return entries, expected


# --- the RLMM fence (derived from the metadata log) -------------------------------------------------------------


def fence_lookup(db: SqlConnection, sql: Statements, topic_id: Uuid) -> tuple[int, TieredState] | None:
    row = db.execute(sql.fence, (sql.topic_key(topic_id),)).fetchone()
    return None if row is None else (int(row[0]), TieredState(row[1]))


def fence_lookup_many(
    db: SqlConnection, sql: Statements, topic_ids: Sequence[Uuid]
) -> dict[Uuid, tuple[int, TieredState]]:
    """The fence of each of ``topic_ids`` that has one, in one query per 500 ids."""
    found: dict[Uuid, tuple[int, TieredState]] = {}
    for i in range(0, len(topic_ids), _IN_CHUNK):
        chunk = {sql.topic_key(t): t for t in topic_ids[i : i + _IN_CHUNK]}
        for key, epoch, state in db.execute(sql.fences_of(len(chunk)), list(chunk)):
            found[chunk[key]] = (int(epoch), TieredState(state))
    return found


def apply_fence_changes(db: SqlConnection, sql: Statements, changes: FenceChanges) -> None:
    """Write a batch's fence changes: one statement for the removed topics, one for the others."""
    key = sql.topic_key
    executemany(db, sql.remove_fence, [(key(t),) for t, state in changes.items() if state is None])
    kept = [(key(t), state[0], int(state[1])) for t, state in changes.items() if state is not None]
    executemany(db, sql.set_fence, kept)


def rebuild_fence(db: SqlConnection, sql: Statements) -> None:
    """Recompute the RLMM fence from the metadata log (after the log lost a tail, or in a salvaged file): the whole
    log while it starts at offset 0, else the newest snapshot it continues plus the records after that snapshot."""
    bounds = db.execute(sql.log_bounds).fetchone()
    start, end = int(bounds[0]), int(bounds[1])
    base: list[bytes] = []
    after = -1
    if start > 0:
        snapshots = db.execute(sql.snapshots).fetchall()
        found = snapshot_base(snapshots, start_offset=start, end_offset=end)
        if found is None:
            raise MetadataLogCorrupt(
                f"the metadata log starts at offset {start} and no snapshot it continues verifies: "
                "the fence cannot be rebuilt"
            )
        after, base = found
    tail = (data for _offset, data, _crc in table_rows(db, sql.log, from_offset=after + 1))
    records = [decode_record(data) for data in base] + [decode_record(data) for data in tail]
    changes = plan_fence_changes(records, lambda _tid: None)
    db.execute(sql.clear_fence)
    apply_fence_changes(db, sql, {tid: s for tid, s in changes.items() if s is not None})


# --- recovery of readable rows ----------------------------------------------------------------------------------


@dataclass
class Findings:
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


def scan(db: SqlConnection, sql: Statements) -> Findings:
    found = Findings()
    found.first_bad, found.log_end = _first_bad(table_rows(db, sql.log))
    found.first_bad_rlmm, found.rlmm_end = _first_bad(table_rows(db, sql.rlmm))
    if found.first_bad is not None:
        found.bad_count = scalar(db, sql.log.count_from, (found.first_bad,))
        found.problems.append(
            f"metadata log: bad record at offset {found.first_bad}; the log now ends there and "
            f"{found.bad_count} record(s) from it on were quarantined"
        )
    if found.first_bad_rlmm is not None:
        found.bad_rlmm_count = scalar(db, sql.rlmm.count_from, (found.first_bad_rlmm,))
        found.problems.append(
            f"remote log metadata: bad record at offset {found.first_bad_rlmm}; "
            f"{found.bad_rlmm_count} record(s) from it on were quarantined"
        )
    for offset, data, crc in db.execute(sql.snapshots).fetchall():
        if checksum(data) != crc or offset >= found.log_end:
            found.bad_snapshots.append(int(offset))
            found.problems.append(f"snapshot at offset {offset} dropped (damaged or beyond the log end)")
    return found


def repair(db: SqlConnection, sql: Statements, found: Findings, *, now_ms: int) -> None:
    """Make the damage ``found`` (by a scan in this very transaction, under the write lock) good."""
    for table, first_bad in ((sql.log, found.first_bad), (sql.rlmm, found.first_bad_rlmm)):
        if first_bad is not None:
            db.execute(table.quarantine, (f"torn tail from offset {first_bad}", now_ms, first_bad))
            db.execute(table.delete_from, (first_bad,))
    executemany(db, sql.drop_snapshot, [(offset,) for offset in found.bad_snapshots])
    if found.first_bad is None:
        return
    rebuild_fence(db, sql)
    lease = lease_row(db, sql.read_lease)
    if lease.holder is not None:  # the controller's image may hold the lost records
        db.execute(sql.free_lease)
        log.warning(
            "metadata.lease.revoked",
            holder=lease.holder,
            controller_epoch=lease.controller_epoch,
            reason="log truncated",
        )


__all__ = [
    "PAGE_ROWS",
    "Findings",
    "LeaseRow",
    "LogRow",
    "apply_fence_changes",
    "executemany",
    "fence_lookup",
    "fence_lookup_many",
    "lease_row",
    "page_log",
    "rebuild_fence",
    "repair",
    "scalar",
    "scan",
    "table_rows",
    "verified",
]
