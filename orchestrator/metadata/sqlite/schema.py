"""The layout of the store file: its tables, its format version, and the fence table derived from the log.

Layout (format 1): ``log(offset, controller_epoch, data, crc)`` and ``rlmm(offset, topic_id, appended_at_ms,
data, crc)`` hold each record's encoded bytes and the CRC-32 of those bytes; ``snapshots(offset, ...)`` one
checksummed blob per snapshot (the newest ``retain`` are kept; log rows below the oldest are deleted);
``lease`` one row whose ``controller_epoch`` outlives releases so it only grows; ``tiered_state`` the RLMM
fence (derived from the log, rebuilt by recovery); ``quarantine`` the records recovery moved out of a log;
``meta`` the format version.

Invariants:

* One definition of the tables, :data:`SCHEMA`, used both to open a store and to write a salvaged file, so a
  salvaged file is laid out exactly like a new one.
* Creating the tables is idempotent (``IF NOT EXISTS``; the single lease row is inserted only if missing).
* ``tiered_state`` holds nothing the log does not say: an append changes it in the same transaction as the log
  rows (:func:`apply_fence_changes`), and whoever cuts or rewrites the log recomputes it from the whole log
  (:func:`rebuild_fence`): from offset 0 while the log starts there, else from the newest snapshot the
  remaining log continues plus the records after it (``store`` invariant 7).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from orchestrator.errors import MetadataLogCorrupt
from orchestrator.ids import Uuid
from orchestrator.metadata.records import TieredState, decode_record
from orchestrator.metadata.store import plan_fence_changes, snapshot_base

FORMAT_VERSION = "1"

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS log (
    offset INTEGER PRIMARY KEY, controller_epoch INTEGER NOT NULL, data BLOB NOT NULL, crc INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS snapshots (
    offset INTEGER PRIMARY KEY, controller_epoch INTEGER NOT NULL, record_count INTEGER NOT NULL,
    data BLOB NOT NULL, crc INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS lease (
    id INTEGER PRIMARY KEY CHECK (id = 1), holder TEXT, controller_epoch INTEGER NOT NULL,
    expires_at_ms INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS rlmm (
    offset INTEGER PRIMARY KEY, topic_id BLOB NOT NULL, appended_at_ms INTEGER, data BLOB NOT NULL,
    crc INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS rlmm_by_topic ON rlmm (topic_id, offset);
CREATE TABLE IF NOT EXISTS tiered_state (
    topic_id BLOB PRIMARY KEY, tiered_epoch INTEGER NOT NULL, tiered_state INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS quarantine (
    id INTEGER PRIMARY KEY, log TEXT NOT NULL, offset INTEGER NOT NULL, controller_epoch INTEGER,
    topic_id BLOB, appended_at_ms INTEGER, data BLOB, crc INTEGER, reason TEXT NOT NULL,
    quarantined_at_ms INTEGER NOT NULL);
INSERT OR IGNORE INTO lease (id, holder, controller_epoch, expires_at_ms) VALUES (1, NULL, 0, 0);
"""


def create_tables(db: sqlite3.Connection) -> None:
    """Run :data:`SCHEMA`, one statement at a time, inside the caller's transaction."""
    for statement in SCHEMA.split(";"):
        if statement.strip():
            db.execute(statement)


# --- the RLMM fence (derived from the metadata log) ------------------------------------------------------------


def fence_lookup(db: sqlite3.Connection, topic_id: Uuid) -> tuple[int, TieredState] | None:
    row = db.execute(
        "SELECT tiered_epoch, tiered_state FROM tiered_state WHERE topic_id = ?", (topic_id.raw,)
    ).fetchone()
    return None if row is None else (int(row[0]), TieredState(row[1]))


_IN_CHUNK = 500  # topic ids per IN (...) query: below SQLite's bound-parameter limit on every build


def fence_lookup_many(db: sqlite3.Connection, topic_ids: Sequence[Uuid]) -> dict[Uuid, tuple[int, TieredState]]:
    """The fence of each of ``topic_ids`` that has one, in one query per 500 ids."""
    found: dict[Uuid, tuple[int, TieredState]] = {}
    for i in range(0, len(topic_ids), _IN_CHUNK):
        chunk = {t.raw: t for t in topic_ids[i : i + _IN_CHUNK]}
        rows = db.execute(
            f"SELECT topic_id, tiered_epoch, tiered_state FROM tiered_state WHERE topic_id IN "
            f"({', '.join('?' * len(chunk))})",
            list(chunk),
        )
        for raw, epoch, state in rows:
            found[chunk[raw]] = (int(epoch), TieredState(state))
    return found


def apply_fence_changes(db: sqlite3.Connection, changes: dict[Uuid, tuple[int, TieredState] | None]) -> None:
    """Write a batch's fence changes: one statement for the removed topics, one for the others."""
    db.executemany(
        "DELETE FROM tiered_state WHERE topic_id = ?", [(t.raw,) for t, state in changes.items() if state is None]
    )
    db.executemany(
        "INSERT OR REPLACE INTO tiered_state (topic_id, tiered_epoch, tiered_state) VALUES (?, ?, ?)",
        [(t.raw, state[0], int(state[1])) for t, state in changes.items() if state is not None],
    )


def rebuild_fence(db: sqlite3.Connection) -> None:
    """Recompute the RLMM fence from the metadata log (after the log lost a tail): the whole log while it starts at
    offset 0, else the newest snapshot it continues plus the records after that snapshot."""
    bounds = db.execute("SELECT COALESCE(MIN(offset), 0), COALESCE(MAX(offset) + 1, 0) FROM log").fetchone()
    start, end = int(bounds[0]), int(bounds[1])
    base: list[bytes] = []
    after = -1
    if start > 0:
        snapshots = db.execute("SELECT offset, data, crc FROM snapshots").fetchall()
        found = snapshot_base(snapshots, start_offset=start, end_offset=end)
        if found is None:
            raise MetadataLogCorrupt(
                f"the metadata log starts at offset {start} and no snapshot it continues verifies: "
                "the fence cannot be rebuilt"
            )
        after, base = found
    rows = db.execute("SELECT data FROM log WHERE offset > ? ORDER BY offset", (after,)).fetchall()
    records = [decode_record(data) for data in base] + [decode_record(row[0]) for row in rows]
    changes = plan_fence_changes(records, lambda _tid: None)
    db.execute("DELETE FROM tiered_state")
    apply_fence_changes(db, {tid: s for tid, s in changes.items() if s is not None})


__all__ = [
    "FORMAT_VERSION",
    "SCHEMA",
    "apply_fence_changes",
    "create_tables",
    "fence_lookup",
    "fence_lookup_many",
    "rebuild_fence",
]
