"""Whether the local cluster's metadata store answers, within a bound: what a CLI command checks when the cluster
did not answer it, so that it says the store is the cause (and what to do) instead of a bare NOT_CONTROLLER or a
timeout, and never waits on the store longer than the bound.

A probe of PostgreSQL opens the store as a reader (:func:`~orchestrator.local.cluster_store.open_cluster_store`)
and reads the lease; a probe of SQLite takes the file's write lock for a moment (``BEGIN IMMEDIATE`` then
``ROLLBACK``, with a busy timeout of half the bound): reads of a SQLite file in WAL mode never wait, but every
writer, the controllers' lease renewals first, waits on a process that holds the write lock. It runs on a daemon
thread joined for the bound, so a PostgreSQL server that answers nothing (paused) costs the command the bound and
no more: the thread is left behind and ends with the process.

Invariant: a probe writes nothing (its transaction is rolled back) and recovers nothing.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

from orchestrator.errors import StoreUnavailable, TieredError
from orchestrator.local.cluster_store import open_cluster_store
from orchestrator.local.state import LocalClusterState
from orchestrator.metadata.open import parse_store_spec

PROBE_TIMEOUT_S = 5.0
"""How long a command waits for its store's answer when it checks why the cluster did not answer it."""


def store_problem(state: LocalClusterState, *, timeout_s: float = PROBE_TIMEOUT_S) -> StoreUnavailable | None:
    """What keeps the cluster's store from answering within ``timeout_s`` (None: it answers)."""
    spec = parse_store_spec(state.store_spec)
    outcome: list[BaseException | None] = []

    def probe() -> None:
        try:
            if spec.is_postgresql:
                with open_cluster_store(state) as store:
                    store.current_lease()
            else:  # the lock first: opening the store may wait on it
                _take_write_lock(Path(spec.target), timeout_s=timeout_s / 2)
            outcome.append(None)
        except BaseException as exc:  # reported to the caller, whatever it is
            outcome.append(exc)

    worker = threading.Thread(target=probe, name="store-probe", daemon=True)
    worker.start()
    worker.join(timeout_s)
    where = spec.location
    if not outcome:
        what = "PostgreSQL server" if spec.is_postgresql else "SQLite file"
        return StoreUnavailable(
            f"the metadata store {where} did not answer within {timeout_s:g}s: is its {what} paused or unreachable? "
            f"{_what_to_do(spec.is_postgresql, where)}"
        )
    error = outcome[0]
    if error is None:
        return None
    if isinstance(error, _Locked):
        return StoreUnavailable(
            f"the metadata store {where} is locked: another process has held its write lock for more than "
            f"{timeout_s:g}s (one paused inside a write?), so no controller can renew its lease. "
            f"{_what_to_do(False, where)}"
        )
    detail = str(error) if isinstance(error, TieredError) else f"{type(error).__name__}: {error}"
    return StoreUnavailable(
        f"the metadata store {where} cannot be used: {detail}. {_what_to_do(spec.is_postgresql, where)}"
    )


class _Locked(Exception):
    """The SQLite file's write lock could not be had within the bound."""


def _take_write_lock(path: Path, *, timeout_s: float) -> None:
    db = sqlite3.connect(path, timeout=timeout_s, isolation_level=None)
    try:
        db.execute("BEGIN IMMEDIATE")
        db.execute("ROLLBACK")
    except sqlite3.OperationalError as exc:
        if "locked" in str(exc) or "busy" in str(exc):
            raise _Locked(str(exc)) from exc
        raise
    finally:
        db.close()


def _what_to_do(postgresql: bool, where: str) -> str:
    if postgresql:
        return (
            "Check that the server runs and answers (pg_isready, or resume it if it was stopped); the cluster "
            "carries on by itself once it does"
        )
    return (
        f"Find the process holding {where} (fuser {where}) and resume it (kill -CONT) or stop it; the cluster "
        "carries on by itself once the lock is free"
    )
