"""pause_outside_sqlite_writes: a process is left stopped only at a moment it holds no write lock on the SQLite
store, and one that always holds it is reported, continued. Real child processes and a real SQLite file."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.live_cluster import pause_outside_sqlite_writes, process_state, store_writable, wait_until

pytestmark = pytest.mark.integration

# Takes the write lock, holds it for HOLD_S, lets go for FREE_S, again and again; prints "ready" once it first holds
# it. ``FREE_S = 0``: it never lets go.
WRITER = """
import sqlite3, sys, time
hold_s, free_s = float(sys.argv[2]), float(sys.argv[3])
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("PRAGMA journal_mode=WAL")
db.execute("BEGIN IMMEDIATE"); db.execute("INSERT INTO t VALUES (1)")
print("ready", flush=True)
while True:
    time.sleep(hold_s)
    if free_s:
        db.execute("COMMIT"); time.sleep(free_s); db.execute("BEGIN IMMEDIATE"); db.execute("INSERT INTO t VALUES (1)")
"""


@pytest.fixture
def database(tmp_path: Path) -> Path:
    path = tmp_path / "metadata.db"
    db = sqlite3.connect(path)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("CREATE TABLE t (x INTEGER)")
    db.commit()
    db.close()
    return path


@pytest.fixture
def writer(database: Path) -> Iterator[object]:
    started: list[subprocess.Popen[str]] = []

    def start(hold_s: float, free_s: float) -> subprocess.Popen[str]:
        proc = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(database), str(hold_s), str(free_s)], stdout=subprocess.PIPE, text=True
        )
        started.append(proc)
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        return proc

    yield start
    for proc in started:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGCONT)
            proc.kill()
        proc.wait(timeout=10)
        if proc.stdout is not None:
            proc.stdout.close()


def test_a_process_that_holds_the_lock_now_and_then_is_left_stopped_outside_it(database, writer):
    proc = writer(0.05, 0.05)
    pause_outside_sqlite_writes(proc.pid, database, "the writer")
    assert process_state(proc.pid) == "T"
    assert store_writable(database)


def test_a_process_that_never_lets_go_of_the_lock_is_reported_and_continued(database, writer):
    proc = writer(3600, 0)
    assert not store_writable(database)
    with pytest.raises(AssertionError, match="the writer held the store's write lock each of the 3 times"):
        pause_outside_sqlite_writes(proc.pid, database, "the writer", attempts=3)
    wait_until("the writer to run again", lambda: process_state(proc.pid) in {"S", "R"}, timeout_s=10)
