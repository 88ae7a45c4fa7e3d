"""Salvage: replace a damaged store file with a fresh one holding everything it still yields.

When ``PRAGMA quick_check`` finds a damaged file (e.g. truncated pages), the store hands it here. The damaged
file (with its ``-wal``) is copied to ``<name>.salvage-src`` and read row by row: the log in offset order up to
its first unreadable or bad record, the RLMM log likewise, the snapshots that verify and lie within the salvaged
log, the controller epoch and the quarantine. They are written to a fresh file, ``<name>.salvage-tmp``, and the
damaged file is kept aside as ``<name>.corrupt-<UTC timestamp>`` (``-2``, ``-3``... if that name is taken).

Invariants:

* Nothing before the first bad record is lost, and nothing after it is kept in the fresh file (only in the
  kept-aside copy): the salvaged logs are dense from their first offset (0, or for the metadata log the offset
  it starts at once records were deleted behind a snapshot; ``store`` invariant 7).
* The controller epoch only grows: the fresh file's lease is at the highest epoch found anywhere (lease row, log
  rows, snapshots), even if the lease row itself is lost. The lease is free: the active controller's image may
  include records that are gone, so it must re-acquire the lease (at epoch + 1) and rebuild from the log.
* The switch is crash-safe: the fresh file is complete, committed, checkpointed and fsynced
  (``meta.salvage_complete``) before anything is renamed, and :func:`finish_salvage`, run on every open,
  finishes a half-done switch or throws away an incomplete fresh file (the damaged file is then still in place
  and is salvaged again). The damaged file's ``-wal`` is moved aside before the fresh file takes its name, so it
  can never be replayed onto it.
* Salvage replaces the file, so it assumes no other process is writing to it (damage is found when processes
  restart after a crash); a process that still has the old file open notices the replacement and reconnects.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.metadata.sql.tables import rebuild_fence
from orchestrator.metadata.sqlite.schema import FORMAT_VERSION, STATEMENTS, create_tables
from orchestrator.metadata.sqlite.wal import create_owner_only, sidecar
from orchestrator.metadata.store import CHECKSUM_ALGORITHM, checksum


@dataclass
class Salvage:
    """Rows read back from a damaged file."""

    log: list[tuple[int, int, bytes, int]] = field(default_factory=list)
    rlmm: list[tuple[int, bytes, int | None, bytes, int]] = field(default_factory=list)
    snapshots: list[tuple[int, int, int, bytes, int]] = field(default_factory=list)
    lease: tuple[str | None, int, int] | None = None
    quarantine: list[tuple[Any, ...]] = field(default_factory=list)
    first_bad: int | None = None
    bad_count: int = 0
    first_bad_rlmm: int | None = None
    bad_rlmm_count: int = 0
    dropped_snapshots: list[int] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def replace_with_salvage(path: Path, *, clock: Callable[[], float]) -> tuple[Salvage, Path]:
    """Copy the readable content of the damaged file into a fresh one; keep the damaged one aside.

    The caller has closed its connection to ``path``. Returns what was salvaged and the kept-aside copy's path.
    ``clock`` (seconds since the epoch) names the kept-aside copy and stamps the fresh file.
    """
    src, tmp = sidecar(path, ".salvage-src"), sidecar(path, ".salvage-tmp")
    for p in (src, tmp):
        for suffix in ("", "-wal", "-shm", "-journal"):
            sidecar(p, suffix).unlink(missing_ok=True)
    shutil.copyfile(path, src)
    if sidecar(path, "-wal").exists():
        shutil.copyfile(sidecar(path, "-wal"), sidecar(src, "-wal"))
    salvage = _read_salvage(src)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(clock()))
    corrupt = sidecar(path, f".corrupt-{stamp}")
    n = 1
    while corrupt.exists():
        n += 1
        corrupt = sidecar(path, f".corrupt-{stamp}-{n}")
    _write_salvage(tmp, salvage, corrupt_name=corrupt.name, now_ms=int(clock() * 1000))
    finish_salvage(path)
    for suffix in ("", "-wal", "-shm"):
        sidecar(src, suffix).unlink(missing_ok=True)
    return salvage, corrupt


def _read_salvage(src: Path) -> Salvage:
    """Read, row by row, whatever a damaged database still yields (in offset order, up to the first bad row)."""
    out = Salvage()
    db = sqlite3.connect(src, isolation_level=None, check_same_thread=False)
    try:
        # Lets SQLite open a file shorter than its header says (a truncated file): missing pages read as errors.
        with contextlib.suppress(sqlite3.DatabaseError):
            db.execute("PRAGMA writable_schema = ON")

        def one(query: str, args: tuple[Any, ...] = ()) -> tuple[Any, ...] | sqlite3.DatabaseError | None:
            try:
                row: tuple[Any, ...] | None = db.execute(query, args).fetchone()
                return row
            except sqlite3.DatabaseError as exc:
                return exc

        def prefix(table: str, columns: str, what: str) -> tuple[list[tuple[Any, ...]], int | None, int]:
            rows: list[tuple[Any, ...]] = []
            first = one(f"SELECT COALESCE(MIN(offset), 0) FROM {table}")
            start = int(first[0]) if isinstance(first, tuple) else 0
            while True:
                offset = start + len(rows)
                row = one(f"SELECT {columns} FROM {table} WHERE offset = ?", (offset,))
                count = 0
                if isinstance(row, sqlite3.DatabaseError):
                    reason = f"unreadable ({row})"
                elif row is None:
                    # The end, unless the table holds rows the prefix did not reach: a page lost to truncation
                    # reads as zeros, i.e. rows with NULL columns and out-of-order ids that no seek finds.
                    total = one(f"SELECT COUNT(*) FROM {table}")
                    if isinstance(total, tuple) and total[0] == len(rows):
                        return rows, None, 0
                    reason = "missing"
                    count = total[0] - len(rows) if isinstance(total, tuple) else 0
                elif not isinstance(row[-2], bytes) or checksum(row[-2]) != row[-1]:
                    reason = "checksum mismatch"
                else:
                    rows.append(row)
                    continue
                if not count:
                    after = one(f"SELECT COUNT(*) FROM {table} WHERE offset >= ?", (offset,))
                    count = after[0] if isinstance(after, tuple) else 0
                kept = f"salvaged offsets {start}..{offset - 1}" if offset > start else "nothing salvaged"
                out.problems.append(
                    f"{what}: record at offset {offset} is {reason}; {kept}"
                    + (f", lost {count} record(s) from there on" if count else "")
                )
                return rows, offset, count

        log_rows, out.first_bad, out.bad_count = prefix("log", "offset, controller_epoch, data, crc", "metadata log")
        out.log = [(int(r[0]), int(r[1]), bytes(r[2]), int(r[3])) for r in log_rows]
        rlmm_rows, out.first_bad_rlmm, out.bad_rlmm_count = prefix(
            "rlmm", "offset, topic_id, appended_at_ms, data, crc", "remote log metadata"
        )
        out.rlmm = [(int(r[0]), bytes(r[1]), r[2], bytes(r[3]), int(r[4])) for r in rlmm_rows]
        try:
            snapshot_offsets = [int(r[0]) for r in db.execute("SELECT offset FROM snapshots").fetchall()]
        except sqlite3.DatabaseError:
            snapshot_offsets = []
            out.problems.append("snapshots: the snapshot table is unreadable; none salvaged")
        for offset in sorted(snapshot_offsets):
            row = one(
                "SELECT offset, controller_epoch, record_count, data, crc FROM snapshots WHERE offset = ?",
                (offset,),
            )
            log_end = out.log[-1][0] + 1 if out.log else 0
            if isinstance(row, tuple) and checksum(row[3]) == row[4] and offset < log_end:
                out.snapshots.append((int(row[0]), int(row[1]), int(row[2]), bytes(row[3]), int(row[4])))
            else:
                out.dropped_snapshots.append(offset)
                out.problems.append(f"snapshot at offset {offset} dropped (unreadable, damaged or beyond the log)")
        lease = one("SELECT holder, controller_epoch, expires_at_ms FROM lease WHERE id = 1")
        if isinstance(lease, tuple):
            out.lease = (lease[0], int(lease[1]), int(lease[2]))
        else:
            out.problems.append("lease: unreadable; it is free now, at the highest controller epoch found")
        try:
            out.quarantine = db.execute(
                "SELECT log, offset, controller_epoch, topic_id, appended_at_ms, data, crc, reason, quarantined_at_ms "
                "FROM quarantine ORDER BY id"
            ).fetchall()
        except sqlite3.DatabaseError:
            out.problems.append("quarantine: unreadable; earlier quarantined records are only in the kept-aside copy")
    finally:
        with contextlib.suppress(sqlite3.Error):
            db.close()
    return out


def _write_salvage(tmp: Path, salvage: Salvage, *, corrupt_name: str, now_ms: int) -> None:
    create_owner_only(tmp)
    db = sqlite3.connect(tmp, isolation_level=None)
    try:
        db.execute("PRAGMA journal_mode = WAL")
        db.execute("PRAGMA synchronous = FULL")
        db.execute("BEGIN IMMEDIATE")
        create_tables(db)
        db.executemany(
            "INSERT INTO meta (key, value) VALUES (?, ?)",
            [("format_version", FORMAT_VERSION), ("checksum", CHECKSUM_ALGORITHM)],
        )
        db.executemany("INSERT INTO log (offset, controller_epoch, data, crc) VALUES (?, ?, ?, ?)", salvage.log)
        db.executemany(
            "INSERT INTO rlmm (offset, topic_id, appended_at_ms, data, crc) VALUES (?, ?, ?, ?, ?)",
            salvage.rlmm,
        )
        db.executemany(
            "INSERT INTO snapshots (offset, controller_epoch, record_count, data, crc) VALUES (?, ?, ?, ?, ?)",
            salvage.snapshots,
        )
        db.executemany(
            "INSERT INTO quarantine (log, offset, controller_epoch, topic_id, appended_at_ms, data, crc, reason, "
            "quarantined_at_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [tuple(q) for q in salvage.quarantine],
        )
        # The epoch only grows: never below any epoch the damaged file shows, even if its lease row is lost.
        floor = max(
            [salvage.lease[1] if salvage.lease else 0]
            + [row[1] for row in salvage.log]
            + [row[1] for row in salvage.snapshots]
        )
        # Free, whatever the damaged file said: the active controller's image may hold records that are gone, so
        # it must re-acquire (at epoch + 1) and rebuild from the salvaged log (see the module docstring).
        db.execute("UPDATE lease SET holder = NULL, controller_epoch = ?, expires_at_ms = 0 WHERE id = 1", (floor,))
        rebuild_fence(db, STATEMENTS)
        db.executemany(
            "INSERT INTO meta (key, value) VALUES (?, ?)",
            [("salvaged_at_ms", str(now_ms)), ("corrupt_copy", corrupt_name), ("salvage_complete", "1")],
        )
        db.execute("COMMIT")
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        db.close()
    _fsync(tmp)


def finish_salvage(path: Path) -> None:
    """Put a complete salvaged file in place (idempotent; finishes a switch a crash interrupted)."""
    tmp = sidecar(path, ".salvage-tmp")
    if not tmp.exists():
        return
    corrupt_name: str | None = None
    try:
        db = sqlite3.connect(tmp, isolation_level=None)
        try:
            meta = dict(db.execute("SELECT key, value FROM meta").fetchall())
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        finally:
            db.close()
        if meta.get("salvage_complete") == "1":
            corrupt_name = meta.get("corrupt_copy")
    except sqlite3.DatabaseError:
        corrupt_name = None
    if corrupt_name is None:  # an incomplete salvage: the damaged file is still in place; start over later
        for suffix in ("", "-wal", "-shm", "-journal"):
            sidecar(tmp, suffix).unlink(missing_ok=True)
        return
    corrupt = path.with_name(corrupt_name)
    # The WAL first: a damaged file's WAL must never be replayed onto the fresh file.
    for suffix in ("-wal", ""):
        if sidecar(path, suffix).exists():
            os.replace(sidecar(path, suffix), sidecar(corrupt, suffix))
    sidecar(path, "-shm").unlink(missing_ok=True)
    for suffix in ("-wal", "-shm"):
        sidecar(tmp, suffix).unlink(missing_ok=True)
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):
        _fsync(path)


__all__ = ["Salvage", "finish_salvage", "replace_with_salvage"]
