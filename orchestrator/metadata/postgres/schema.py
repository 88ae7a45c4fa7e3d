"""The store's tables in PostgreSQL, created and upgraded by the store itself through versioned migrations.

Layout (schema version 2), inside the store's own PostgreSQL schema (``tieredctl`` unless told otherwise); it
mirrors the SQLite backend's format 1 column for column:

* ``log(record_offset, controller_epoch, data, crc)`` and ``rlmm(record_offset, topic_id, appended_at_ms, data,
  crc)``: each record's encoded bytes and the CRC-32 of those bytes (``offset`` is a reserved word here);
* ``snapshots(snapshot_offset, controller_epoch, record_count, data, crc)``: one checksummed blob per snapshot;
* ``lease``: one row (``id = 1``) whose ``controller_epoch`` outlives releases, so it only grows. Every write
  transaction locks this row first (see :mod:`.store`);
* ``tiered_state``: the RLMM fence, derived from the metadata log; ``quarantine``: what recovery moved out of a
  log; ``meta``: the checksum algorithm; ``schema_version``: one row per migration applied;
* ``log_holds(holder, record_offset, expires_at_ms)`` (version 2): readers' holds on the log (``store``
  invariant 8).

Topic ids are PostgreSQL ``uuid`` values (the same 16 bytes as a KIP-516 id), so an operator can read them.

Invariants:

* :data:`MIGRATIONS` is append-only: version N's statements never change once released; a change of layout is
  a new migration. Migration 1 creates the first layout; 2 adds the log holds.
* :func:`migrate` applies the missing migrations in order, all in one transaction together with their
  ``schema_version`` rows, while holding a transaction-level advisory lock keyed by the schema name. Concurrent
  first opens (several processes) therefore apply each migration exactly once: the others wait for the lock,
  then find nothing left to do. A failed migration leaves nothing behind (PostgreSQL's DDL is transactional).
* A store at a schema version newer than this build knows is refused, never written to.
* :data:`STATEMENTS` is the SQL core's one set of statements (:mod:`orchestrator.metadata.sql.dialect`) in this
  layout's names: ``%s`` placeholders, ``record_offset`` / ``snapshot_offset`` columns, ``uuid`` topic ids, and
  the lease row read ``FOR UPDATE`` when a write begins. ``tiered_state`` is kept by the core
  (:mod:`orchestrator.metadata.sql.tables`).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import structlog
from psycopg import sql

from orchestrator.errors import MetadataLogCorrupt
from orchestrator.ids import Uuid
from orchestrator.metadata.postgres.connection import Connection
from orchestrator.metadata.sql.dialect import statements
from orchestrator.metadata.store import CHECKSUM_ALGORITHM

log = structlog.get_logger(__name__)


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
    Migration(
        2,
        "readers' holds on the metadata log",
        (
            "CREATE TABLE log_holds (holder text PRIMARY KEY, record_offset bigint NOT NULL "
            "CHECK (record_offset >= 0), expires_at_ms bigint NOT NULL)",
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


# The SQL core's statements on this layout: a topic id is bound as a ``uuid``, and a write transaction locks the
# lease row (the store's write lock) with the read that begins it.
STATEMENTS = statements(
    param="%s",
    offset="record_offset",
    snapshot_offset="snapshot_offset",
    lock_lease=" FOR UPDATE",
    topic_key=Uuid.to_uuid,
)


__all__ = ["LATEST_VERSION", "MIGRATIONS", "STATEMENTS", "Migration", "migrate"]
