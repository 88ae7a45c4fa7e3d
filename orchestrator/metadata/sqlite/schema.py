"""The layout of the store file: its tables, its format version, and the SQL core's statements on them.

Layout (format 1): ``log(offset, controller_epoch, data, crc)`` and ``rlmm(offset, topic_id, appended_at_ms,
data, crc)`` hold each record's encoded bytes and the CRC-32 of those bytes; ``snapshots(offset, ...)`` one
checksummed blob per snapshot (the newest ``retain`` are kept; log rows below the oldest are deleted);
``lease`` one row whose ``controller_epoch`` outlives releases so it only grows; ``tiered_state`` the RLMM
fence (derived from the log, rebuilt by recovery); ``quarantine`` the records recovery moved out of a log;
``log_holds`` the readers' holds on the log (``store`` invariant 8; a table an older build ignores, so the format
stays 1); ``meta`` the format version. Topic ids are their 16 raw bytes.

Invariants:

* One definition of the tables, :data:`SCHEMA`, used both to open a store and to write a salvaged file, so a
  salvaged file is laid out exactly like a new one.
* Creating the tables is idempotent (``IF NOT EXISTS``; the single lease row is inserted only if missing).
* :data:`STATEMENTS` is the SQL core's one set of statements (:mod:`orchestrator.metadata.sql.dialect`) in this
  layout's names: ``?`` placeholders, ``offset`` columns, and no lock of the lease row (``BEGIN IMMEDIATE`` has
  locked the file). ``tiered_state`` is kept by the core (:mod:`orchestrator.metadata.sql.tables`).
"""

from __future__ import annotations

import operator
import sqlite3

from orchestrator.metadata.sql.dialect import statements

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
CREATE TABLE IF NOT EXISTS log_holds (
    holder TEXT PRIMARY KEY, offset INTEGER NOT NULL, expires_at_ms INTEGER NOT NULL);
INSERT OR IGNORE INTO lease (id, holder, controller_epoch, expires_at_ms) VALUES (1, NULL, 0, 0);
"""


def create_tables(db: sqlite3.Connection) -> None:
    """Run :data:`SCHEMA`, one statement at a time, inside the caller's transaction."""
    for statement in SCHEMA.split(";"):
        if statement.strip():
            db.execute(statement)


# The SQL core's statements on this layout: a topic id is stored as its 16 raw bytes.
STATEMENTS = statements(
    param="?", offset="offset", snapshot_offset="offset", lock_lease="", topic_key=operator.attrgetter("raw")
)


__all__ = ["FORMAT_VERSION", "SCHEMA", "STATEMENTS", "create_tables"]
