"""Group commit: appends from concurrent callers share one transaction, so one durable commit serves them all.

A store with durable commits (SQLite with ``synchronous=FULL``: an fsync of the WAL per commit) pays the commit
once per transaction, whatever it holds. Brokers append small RLMM batches from many threads at once (copies
finishing on several partitions, delete windows), so one transaction per caller makes them queue behind each
other's fsyncs. Here each caller hands in its unit of work (a function of the open transaction's connection); one
caller at a time leads: it takes the units queued so far (at most ``max_group``), runs them in the order they
were handed in, each inside its own savepoint, and commits once.

Invariants:

* A caller returns only after the transaction holding its unit committed; it gets its unit's own result.
* A unit that raises is rolled back to its savepoint, and only its caller gets the error: the other units of the
  group run and commit as if each had run alone, in order. So a stale batch cannot fail its neighbours.
* A transaction that fails (at BEGIN, at COMMIT, or with an error that escapes a unit's savepoint) writes nothing
  of the group, and every unit of the group that had not failed on its own gets that error.
* No unit is lost or run twice: a caller whose unit no leader took leads the next group itself, so a unit runs
  in the first group that begins after it was handed in, or the one after when that group was full.
* A group of one is an ordinary transaction, without a savepoint (its transaction is its own to roll back): a
  caller alone pays no savepoint and no sub-journal.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

C = TypeVar("C")  # the backend's connection
T = TypeVar("T")

DEFAULT_MAX_GROUP = 256  # units a transaction takes at most: bounds how long one commit holds the others


class _Unit:
    __slots__ = ("error", "finished", "value", "work")

    def __init__(self, work: Callable[[Any], Any]) -> None:
        self.work = work
        self.finished = False
        self.value: Any = None
        self.error: BaseException | None = None


class GroupCommit(Generic[C]):
    """``transaction()`` opens a write transaction and commits it on a clean exit (rolls back otherwise; it must
    raise if it could not commit); ``savepoint(conn)`` runs its body inside a savepoint, rolling back to it and
    re-raising on an error (:func:`sql_savepoint`); ``errors()`` translates the backend's errors around each unit,
    its savepoint included, so a caller gets the store's typed errors whichever statement failed."""

    def __init__(
        self,
        transaction: Callable[[], contextlib.AbstractContextManager[C]],
        savepoint: Callable[[C], contextlib.AbstractContextManager[Any]],
        *,
        errors: Callable[[], contextlib.AbstractContextManager[Any]] = contextlib.nullcontext,
        max_group: int = DEFAULT_MAX_GROUP,
    ) -> None:
        if max_group < 1:
            raise ValueError(f"max_group must be >= 1, got {max_group}")
        self._transaction = transaction
        self._savepoint = savepoint
        self._errors = errors
        self._max_group = max_group
        self._queue_lock = threading.Lock()
        self._queue: list[_Unit] = []
        self._leader = threading.Lock()
        self.transactions = 0  # committed or not: what the bench and the tests count
        self.units = 0

    @property
    def waiting(self) -> int:
        """Units handed in that no leader has taken yet."""
        with self._queue_lock:
            return len(self._queue)

    def run(self, work: Callable[[C], T]) -> T:
        """Run ``work(conn)`` in a transaction shared with the units of other callers; return its result once
        committed, or raise its error (or the transaction's)."""
        unit = _Unit(work)
        with self._queue_lock:
            self._queue.append(unit)
        while not unit.finished:
            with self._leader:
                if unit.finished:  # a leader took it while this caller waited
                    break
                with self._queue_lock:
                    group = self._queue[: self._max_group]
                    del self._queue[: self._max_group]
                self._commit(group)
        if unit.error is not None:
            raise unit.error
        value: T = unit.value
        return value

    def _commit(self, group: list[_Unit]) -> None:
        self.transactions += 1
        self.units += len(group)
        try:
            with self._transaction() as conn:
                if len(group) == 1:  # its failure rolls the transaction back: the same as its savepoint would
                    with self._errors():
                        group[0].value = group[0].work(conn)
                    return
                for unit in group:
                    try:
                        with self._errors(), self._savepoint(conn):
                            unit.value = unit.work(conn)
                    except TransactionLost as lost:  # the whole transaction is gone: stop, fail the group
                        raise lost.cause from None
                    except Exception as exc:  # this unit's own failure: its caller gets it, the others go on
                        unit.error = exc
        except BaseException as exc:  # nothing of the group was written
            for unit in group:
                if unit.error is None:
                    unit.value, unit.error = None, exc
        finally:
            for unit in group:
                unit.finished = True


class TransactionLost(Exception):
    """A unit's error took the whole transaction with it (e.g. SQLite rolls back on a full disk, so the savepoint
    is gone): the group stops at once and every unit of it fails with ``cause``."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.cause = cause


@contextlib.contextmanager
def sql_savepoint(execute: Callable[[str], object], name: str = "unit") -> Iterator[None]:
    """A savepoint through SQL (SQLite and PostgreSQL spell it the same): rolled back to and released on an
    error, which is re-raised; released on success. If it cannot be rolled back to, the transaction is lost:
    :class:`TransactionLost` carrying the error; so it is when the savepoint cannot even be opened."""
    try:
        execute(f"SAVEPOINT {name}")
    except Exception as exc:
        raise TransactionLost(exc) from exc
    try:
        yield
    except BaseException as exc:
        try:
            execute(f"ROLLBACK TO SAVEPOINT {name}")
            execute(f"RELEASE SAVEPOINT {name}")
        except Exception:
            raise TransactionLost(exc) from exc
        raise
    try:
        execute(f"RELEASE SAVEPOINT {name}")
    except Exception as exc:
        raise TransactionLost(exc) from exc
