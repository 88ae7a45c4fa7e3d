"""The store's tables in PostgreSQL, created and upgraded by the store itself through versioned migrations.

Layout (schema version 1), inside the store's own PostgreSQL schema (``tieredctl`` unless told otherwise); it
mirrors the SQLite backend's format 1 column for column:

* ``log(record_offset, controller_epoch, data, crc)`` and ``rlmm(record_offset, topic_id, appended_at_ms, data,
  crc)``: each record's encoded bytes and the CRC-32 of those bytes (``offset`` is a reserved word here);
* ``snapshots(snapshot_offset, controller_epoch, record_count, data, crc)``: one checksummed blob per snapshot;
* ``lease``: one row (``id = 1``) whose ``controller_epoch`` outlives releases, so it only grows. Every write
  transaction locks this row first (see :mod:`.store`);
* ``tiered_state``: the RLMM fence, derived from the metadata log; ``quarantine``: what recovery moved out of a
  log; ``meta``: the checksum algorithm; ``schema_version``: one row per migration applied.

Topic ids are PostgreSQL ``uuid`` values (the same 16 bytes as a KIP-516 id), so an operator can read them.

Invariants:

* :data:`MIGRATIONS` is append-only: version N's statements never change once released; a change of layout is
  a new migration. Migration 1 creates everything.
* :func:`migrate` applies the missing migrations in order, all in one transaction together with their
  ``schema_version`` rows, while holding a transaction-level advisory lock keyed by the schema name. Concurrent
  first opens (several processes) therefore apply each migration exactly once: the others wait for the lock,
  then find nothing left to do. A failed migration leaves nothing behind (PostgreSQL's DDL is transactional).
* A store at a schema version newer than this build knows is refused, never written to.
* ``tiered_state`` holds nothing the log does not say: an append changes it in the same transaction as the log
  rows (:func:`apply_fence_changes`), and whoever cuts the log recomputes it (:func:`rebuild_fence`): from offset
  0 while the log starts there, else from the newest snapshot the remaining log continues plus the records after
  it (``store`` invariant 7).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import structlog
from psycopg import sql

from orchestrator.errors import MetadataLogCorrupt
from orchestrator.ids import Uuid
from orchestrator.metadata.postgres.connection import Connection
from orchestrator.metadata.records import TieredState, decode_record
from orchestrator.metadata.store import CHECKSUM_ALGORITHM, plan_fence_changes, snapshot_base

log = structlog.get_logger(__name__)

PAGE_ROWS = 512  # rows per statement when a whole log is read: each statement stays far below statement_timeout


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    description: str
    statements: tuple[str, ...]


MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "the metadata log, snapshots, lease, remote log metadata, fence and quarantine",
        (
            "CREATE TABLE meta (key text PRIMARY KEY, value text NOT NULL)",
            "CREATE TABLE log (record_offset bigint PRIMARY KEY CHECK (record_offset >= 0), "
            "controller_epoch bigint NOT NULL, data bytea NOT NULL, "
            "crc bigint NOT NULL CHECK (crc BETWEEN 0 AND 4294967295))",
            "CREATE TABLE snapshots (snapshot_offset bigint PRIMARY KEY, controller_epoch bigint NOT NULL, "
            "record_count integer NOT NULL, data bytea NOT NULL, crc bigint NOT NULL)",
            "CREATE TABLE lease (id smallint PRIMARY KEY CHECK (id = 1), holder text, "
            "controller_epoch bigint NOT NULL, expires_at_ms bigint NOT NULL)",
            "INSERT INTO lease (id, holder, controller_epoch, expires_at_ms) VALUES (1, NULL, 0, 0)",
            "CREATE TABLE rlmm (record_offset bigint PRIMARY KEY CHECK (record_offset >= 0), topic_id uuid NOT NULL, "
            "appended_at_ms bigint, data bytea NOT NULL, crc bigint NOT NULL CHECK (crc BETWEEN 0 AND 4294967295))",
            "CREATE INDEX rlmm_by_topic ON rlmm (topic_id, record_offset)",
            "CREATE TABLE tiered_state (topic_id uuid PRIMARY KEY, tiered_epoch bigint NOT NULL, "
            "tiered_state smallint NOT NULL)",
            "CREATE TABLE quarantine (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, log text NOT NULL, "
            "record_offset bigint NOT NULL, controller_epoch bigint, topic_id uuid, appended_at_ms bigint, "
            "data bytea, crc bigint, reason text NOT NULL, quarantined_at_ms bigint NOT NULL)",
            f"INSERT INTO meta (key, value) VALUES ('checksum', '{CHECKSUM_ALGORITHM}')",
        ),
    ),
)

LATEST_VERSION = MIGRATIONS[-1].version


def _advisory_key(schema: str) -> int:
    """A stable signed 64-bit key for ``pg_advisory_xact_lock``, one per schema name."""
    digest = hashlib.sha256(f"tieredctl.metadata.migrate:{schema}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def migrate(conn: Connection, *, schema: str) -> tuple[int, int]:
    """Bring ``schema`` to :data:`LATEST_VERSION` (see the module docstring); return (version found, version now).

    The connection's ``search_path`` is ``schema`` already (:func:`.connection.connect`).
    """
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_advisory_key(schema),))
        exists = conn.execute("SELECT to_regnamespace(%s) IS NOT NULL", (schema,)).fetchone()
        if not (exists and exists[0]):
            conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
        conn.execute(
            "CREATE TABLE IF NOT EXISTS schema_version (version integer PRIMARY KEY, description text NOT NULL, "
            "applied_at timestamptz NOT NULL DEFAULT now())"
        )
        row = conn.execute("SELECT COALESCE(MAX(version), 0) FROM schema_version").fetchone()
        found = int(row[0]) if row else 0
        if found > LATEST_VERSION:
            raise MetadataLogCorrupt(
                f"schema {schema} is at store schema version {found}, newer than this build knows "
                f"({LATEST_VERSION}); it is not readable by this build"
            )
        for migration in MIGRATIONS:
            if migration.version <= found:
                continue
            for statement in migration.statements:
                conn.execute(statement)
            conn.execute(
                "INSERT INTO schema_version (version, description) VALUES (%s, %s)",
                (migration.version, migration.description),
            )
            log.info(
                "metadata.schema.migrated", schema=schema, version=migration.version, description=migration.description
            )
        meta: dict[str, str] = dict(conn.execute("SELECT key, value FROM meta").fetchall())
        if meta.get("checksum") != CHECKSUM_ALGORITHM:
            raise MetadataLogCorrupt(
                f"schema {schema} records checksums with {meta.get('checksum')}; this build reads {CHECKSUM_ALGORITHM}"
            )
    return found, LATEST_VERSION


# --- reading a whole log in pages --------------------------------------------------------------------------------


def log_rows(conn: Connection, table: str, *, from_offset: int = 0) -> Iterator[tuple[int, bytes, int]]:
    """Every ``(record_offset, data, crc)`` of ``table`` (``log`` or ``rlmm``) from ``from_offset``, in offset
    order, one page per statement (keyset pagination)."""
    query = sql.SQL(
        "SELECT record_offset, data, crc FROM {} WHERE record_offset >= %s ORDER BY record_offset LIMIT %s"
    ).format(sql.Identifier(table))
    expected = from_offset
    while True:
        rows = conn.execute(query, (expected, PAGE_ROWS)).fetchall()
        for offset, data, crc in rows:
            yield int(offset), bytes(data), int(crc)
        if len(rows) < PAGE_ROWS:
            return
        expected = int(rows[-1][0]) + 1


# --- the RLMM fence (derived from the metadata log) --------------------------------------------------------------


def fence_lookup(conn: Connection, topic_id: Uuid) -> tuple[int, TieredState] | None:
    row = conn.execute(
        "SELECT tiered_epoch, tiered_state FROM tiered_state WHERE topic_id = %s", (topic_id.to_uuid(),)
    ).fetchone()
    return None if row is None else (int(row[0]), TieredState(row[1]))


def fence_lookup_many(conn: Connection, topic_ids: Sequence[Uuid]) -> dict[Uuid, tuple[int, TieredState]]:
    """The fence of each of ``topic_ids`` that has one, in one query."""
    if not topic_ids:
        return {}
    by_uuid = {t.to_uuid(): t for t in topic_ids}
    rows = conn.execute(
        "SELECT topic_id, tiered_epoch, tiered_state FROM tiered_state WHERE topic_id = ANY(%s)", (list(by_uuid),)
    ).fetchall()
    return {by_uuid[row[0]]: (int(row[1]), TieredState(row[2])) for row in rows}


def apply_fence_changes(conn: Connection, changes: dict[Uuid, tuple[int, TieredState] | None]) -> None:
    """Write a batch's fence changes: one statement for the removed topics, one for the others."""
    removed = [t.to_uuid() for t, state in changes.items() if state is None]
    if removed:
        conn.execute("DELETE FROM tiered_state WHERE topic_id = ANY(%s)", (removed,))
    kept = [(t.to_uuid(), state[0], int(state[1])) for t, state in changes.items() if state is not None]
    if kept:
        with conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO tiered_state (topic_id, tiered_epoch, tiered_state) VALUES (%s, %s, %s) "
                "ON CONFLICT (topic_id) DO UPDATE SET tiered_epoch = EXCLUDED.tiered_epoch, "
                "tiered_state = EXCLUDED.tiered_state",
                kept,
            )


def rebuild_fence(conn: Connection) -> None:
    """Recompute the RLMM fence from the metadata log (after the log lost a tail): the whole log while it starts at
    offset 0, else the newest snapshot it continues plus the records after that snapshot."""
    bounds = conn.execute(
        "SELECT COALESCE(MIN(record_offset), 0), COALESCE(MAX(record_offset) + 1, 0) FROM log"
    ).fetchone()
    start, end = (int(bounds[0]), int(bounds[1])) if bounds else (0, 0)
    base: list[bytes] = []
    after = -1
    if start > 0:
        snapshots = [
            (int(o), bytes(d), int(c)) for o, d, c in conn.execute("SELECT snapshot_offset, data, crc FROM snapshots")
        ]
        found = snapshot_base(snapshots, start_offset=start, end_offset=end)
        if found is None:
            raise MetadataLogCorrupt(
                f"the metadata log starts at offset {start} and no snapshot it continues verifies: "
                "the fence cannot be rebuilt"
            )
        after, base = found
    tail = (data for _offset, data, _crc in log_rows(conn, "log", from_offset=after + 1))
    records = [decode_record(data) for data in base] + [decode_record(data) for data in tail]
    changes = plan_fence_changes(records, lambda _tid: None)
    conn.execute("DELETE FROM tiered_state")
    apply_fence_changes(conn, {tid: s for tid, s in changes.items() if s is not None})


__all__ = [
    "LATEST_VERSION",
    "MIGRATIONS",
    "Migration",
    "apply_fence_changes",
    "fence_lookup",
    "fence_lookup_many",
    "log_rows",
    "migrate",
    "rebuild_fence",
]
