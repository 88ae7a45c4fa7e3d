"""Group commit: concurrent appends share one transaction, each in its own savepoint.

The rules with a recording fake transaction (pure: order, isolation of a failing unit, a failed commit, a lost
transaction, the group bound, no unit lost or run twice under many threads), then the SQLite store: appends from
many threads land densely in fewer transactions, and a refused one (stale controller epoch, tiered epoch going
down) changes nothing of the others in its group: a real SQLite file, and a real PostgreSQL server."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.errors import KafkaStorageError, StaleControllerEpoch, StaleTieredEpoch
from orchestrator.ids import Uuid
from orchestrator.metadata.group_commit import GroupCommit, TransactionLost, sql_savepoint
from orchestrator.metadata.postgres import PostgresMetadataStore
from orchestrator.metadata.records import TieredState
from orchestrator.metadata.sqlite import SqliteMetadataStore
from tests.support.metadata_records import copy_started, tiered, topic


class Journal:
    """A fake transactional store: units write to a pending list; a commit publishes it; savepoints cut it."""

    def __init__(self, *, fail_commit: bool = False) -> None:
        self.committed: list[Any] = []
        self.transactions: list[list[Any]] = []
        self.fail_commit = fail_commit
        self.gate = threading.Event()
        self.gate.set()

    @contextlib.contextmanager
    def transaction(self) -> Iterator[list[Any]]:
        self.gate.wait(10)
        pending: list[Any] = []
        yield pending
        self.transactions.append(list(pending))
        if self.fail_commit:
            raise OSError("disk full")
        self.committed += pending

    @staticmethod
    @contextlib.contextmanager
    def savepoint(pending: list[Any]) -> Iterator[None]:
        mark = len(pending)
        try:
            yield
        except BaseException:
            del pending[mark:]
            raise


def _gc(journal: Journal, **kw: Any) -> GroupCommit[list[Any]]:
    return GroupCommit(journal.transaction, journal.savepoint, **kw)


def _write(*items: Any, fail: BaseException | None = None) -> Callable[[list[Any]], Any]:
    def work(pending: list[Any]) -> Any:
        pending.extend(items)
        if fail is not None:
            raise fail
        return items[-1]

    return work


def _queue_behind_a_leader(gc: GroupCommit[Any], journal: Journal, works: list[Callable[[Any], Any]]) -> list[Any]:
    """Hand in works[0] (its leader blocks at BEGIN), then the rest while it waits; open the gate; return the
    outcome of each, in order (its value or the exception it raised)."""
    outcomes: list[Any] = [None] * len(works)

    def call(i: int) -> None:
        try:
            outcomes[i] = gc.run(works[i])
        except BaseException as exc:
            outcomes[i] = exc

    journal.gate.clear()
    threads = [threading.Thread(target=call, args=(0,))]
    threads[0].start()
    _until(lambda: gc.transactions == 1)  # the first leader took its group of one and waits at BEGIN
    for i in range(1, len(works)):
        threads.append(threading.Thread(target=call, args=(i,)))
        threads[-1].start()
        _until(lambda i=i: gc.waiting == i)  # type: ignore[misc]
    journal.gate.set()
    for t in threads:
        t.join(10)
        assert not t.is_alive()
    return outcomes


def _until(cond: Callable[[], bool], timeout_s: float = 10.0) -> None:
    """Wait for the threads to reach ``cond`` by giving them the CPU (``sched_yield`` lets go of the GIL), not by
    sleeping for a while: the waits here are a thread's few steps to a lock."""
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        os.sched_yield()


@pytest.mark.unit
def test_a_caller_alone_is_one_transaction_of_one_unit() -> None:
    journal = Journal()
    gc = _gc(journal)
    assert gc.run(_write("a", "b")) == "b"
    assert journal.committed == ["a", "b"] and journal.transactions == [["a", "b"]]
    assert (gc.transactions, gc.units, gc.waiting) == (1, 1, 0)
    refused = StaleTieredEpoch("below the current epoch")
    with pytest.raises(StaleTieredEpoch) as raised:
        gc.run(_write("c", fail=refused))
    assert raised.value is refused, "a lone unit's own error, not a wrapper"
    assert journal.committed == ["a", "b"], "its transaction rolled back: nothing of it written"


@pytest.mark.unit
def test_units_handed_in_while_a_transaction_runs_share_the_next_one_in_order() -> None:
    journal = Journal()
    gc = _gc(journal)
    works = [_write(f"u{i}") for i in range(6)]
    outcomes = _queue_behind_a_leader(gc, journal, works)
    assert outcomes == [f"u{i}" for i in range(6)]
    assert journal.transactions == [["u0"], ["u1", "u2", "u3", "u4", "u5"]], "one transaction for the five waiting"
    assert journal.committed == [f"u{i}" for i in range(6)]


@pytest.mark.unit
def test_a_failing_unit_is_rolled_back_alone_and_only_its_caller_gets_the_error() -> None:
    journal = Journal()
    gc = _gc(journal)
    refused = StaleTieredEpoch("tiered epoch 1 is below 2")
    works = [_write("first"), _write("a"), _write("b1", "b2", fail=refused), _write("c")]
    outcomes = _queue_behind_a_leader(gc, journal, works)
    assert outcomes == ["first", "a", refused, "c"]
    assert journal.transactions == [["first"], ["a", "c"]], "b's writes are cut at its savepoint"


@pytest.mark.unit
def test_a_failed_commit_fails_every_unit_of_the_group_that_had_not_failed_on_its_own() -> None:
    journal = Journal()
    gc = _gc(journal)
    own = ValueError("bad record")
    works = [_write("first"), _write("a"), _write("b", fail=own), _write("c")]
    journal.fail_commit = True
    outcomes = _queue_behind_a_leader(gc, journal, works)
    assert isinstance(outcomes[0], OSError) and isinstance(outcomes[1], OSError) and isinstance(outcomes[3], OSError)
    assert outcomes[2] is own
    assert journal.committed == []


@pytest.mark.unit
def test_a_lost_transaction_stops_the_group_and_fails_all_of_it_with_the_cause() -> None:
    journal = Journal()
    gc = _gc(journal)
    cause = OSError("database or disk is full")
    ran: list[str] = []

    def lost(_pending: list[Any]) -> None:
        raise TransactionLost(cause)

    def after(pending: list[Any]) -> None:
        ran.append("after")

    outcomes = _queue_behind_a_leader(gc, journal, [_write("first"), _write("a"), lost, after])
    assert outcomes[0] == "first"
    assert outcomes[1:] == [cause, cause, cause]
    assert ran == [], "nothing runs after the transaction is gone"
    assert journal.committed == ["first"]


@pytest.mark.unit
def test_a_group_takes_at_most_max_group_units_and_the_rest_lead_the_next() -> None:
    journal = Journal()
    gc = _gc(journal, max_group=2)
    outcomes = _queue_behind_a_leader(gc, journal, [_write(f"u{i}") for i in range(6)])
    assert outcomes == [f"u{i}" for i in range(6)]
    assert journal.transactions == [["u0"], ["u1", "u2"], ["u3", "u4"], ["u5"]]
    with pytest.raises(ValueError, match="max_group"):
        GroupCommit(journal.transaction, journal.savepoint, max_group=0)


@pytest.mark.unit
def test_many_threads_each_unit_runs_exactly_once_and_returns_its_own_value() -> None:
    journal = Journal()
    gc = _gc(journal, max_group=7)
    results: dict[tuple[int, int], Any] = {}

    def caller(t: int) -> None:
        for i in range(200):
            results[t, i] = gc.run(_write((t, i)))

    threads = [threading.Thread(target=caller, args=(t,)) for t in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(60)
        assert not th.is_alive()
    assert results == {(t, i): (t, i) for t in range(8) for i in range(200)}
    assert sorted(journal.committed) == sorted(results.values()), "each unit committed once"
    assert gc.units == 1600 and gc.transactions == len(journal.transactions) <= 1600
    assert all(len(tx) <= 7 for tx in journal.transactions)
    for t in range(8):
        mine = [x for x in journal.committed if x[0] == t]
        assert mine == sorted(mine), "a caller's units commit in the order it handed them in"


@pytest.mark.unit
def test_sql_savepoint_on_a_lost_transaction_raises_transaction_lost_with_the_cause() -> None:
    statements: list[str] = []

    def execute(sql: str) -> None:
        statements.append(sql)
        if sql.startswith("ROLLBACK TO"):
            raise RuntimeError("no such savepoint: unit")

    cause = OSError("disk I/O error")
    with pytest.raises(TransactionLost) as lost, sql_savepoint(execute):
        raise cause
    assert lost.value.cause is cause
    assert statements == ["SAVEPOINT unit", "ROLLBACK TO SAVEPOINT unit"]


# --- the stores ------------------------------------------------------------------------------------------------


def _queue_behind_the_store(
    store: SqliteMetadataStore | PostgresMetadataStore, calls: list[Callable[[], Any]]
) -> list[Any]:
    """Run ``calls`` on threads while the store's lock is held: the first leads a group of one and waits for the
    lock; the others queue behind it, in order, and make the next group. The outcome of each, in order (its
    value or the exception it raised)."""
    outcomes: list[Any] = [None] * len(calls)

    def call(i: int) -> None:
        try:
            outcomes[i] = calls[i]()
        except Exception as exc:
            outcomes[i] = exc

    threads = [threading.Thread(target=call, args=(i,)) for i in range(len(calls))]
    before = store._group.transactions
    with store._lock:
        threads[0].start()
        _until(lambda: store._group.transactions == before + 1)
        for i, t in enumerate(threads[1:], start=1):
            t.start()
            _until(lambda i=i: store._group.waiting == i)  # type: ignore[misc]
    for t in threads:
        t.join(30)
        assert not t.is_alive()
    return outcomes


@pytest.fixture(
    params=[pytest.param("sqlite", marks=pytest.mark.unit), pytest.param("postgresql", marks=pytest.mark.integration)]
)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SqliteMetadataStore | PostgresMetadataStore]:
    opened = (
        SqliteMetadataStore(tmp_path / "store.db")
        if request.param == "sqlite"
        else PostgresMetadataStore(request.getfixturevalue("postgres_dsn"))
    )
    yield opened
    opened.close()


def test_appends_from_many_threads_share_transactions_and_a_refused_one_changes_nothing_else(
    store: SqliteMetadataStore | PostgresMetadataStore,
) -> None:
    lease = store.acquire_lease(holder="c", now_ms=0, ttl_ms=10**12)
    assert lease is not None
    epoch = lease.controller_epoch
    tid = Uuid.random()
    store.append([topic("orders", tid), tiered(tid, 2, TieredState.ENABLED)], controller_epoch=epoch)
    before = store._group.transactions

    batches: list[Callable[[], int]] = []
    names = [[f"t{i}-{j}" for j in range(3)] for i in range(6)]
    for group in names:
        batches.append(lambda g=group: store.append([topic(n, Uuid.random()) for n in g], controller_epoch=epoch))
    batches.append(lambda: store.append([topic("fenced", Uuid.random())], controller_epoch=epoch - 1))
    batches.append(lambda: store.append([tiered(tid, 1, TieredState.ENABLED)], controller_epoch=epoch))
    batches.append(lambda: store.append_remote_log_metadata([copy_started(tid, 2)]))
    batches.append(lambda: store.append_remote_log_metadata([copy_started(tid, 1)]))  # below the fence's epoch
    outcomes = _queue_behind_the_store(store, batches)
    assert store._group.transactions - before == 2, "the first append, then all the others in one"
    assert isinstance(outcomes[6], StaleControllerEpoch)
    assert isinstance(outcomes[7], StaleTieredEpoch)
    assert isinstance(outcomes[9], StaleTieredEpoch)
    landed = sorted(outcomes[i] for i in range(6))
    assert landed == [4, 7, 10, 13, 16, 19], "each batch's last offset, dense after the first two records"
    entries = list(store.read())
    assert [e.offset for e in entries] == list(range(20))
    assert sorted(e.record["name"] for e in entries[2:]) == sorted(n for g in names for n in g)
    for i in range(6):  # a batch's records are contiguous, in its order
        last = outcomes[i]
        assert [e.record["name"] for e in entries[last - 2 : last + 1]] in names
    assert store.tiered_state(tid) == (2, TieredState.ENABLED)
    assert [e.offset for e in store.read_remote_log_metadata()] == [0] and outcomes[8] == 0


@pytest.mark.integration
def test_postgres_a_session_killed_in_the_middle_of_a_group_writes_nothing_of_it_and_the_store_goes_on(
    postgres_dsn: str,
) -> None:
    """The server ends the session while a group's second unit runs: every unit of the group fails (nothing is
    written, whatever each caller is told), and the next append reconnects and lands right after the log's end."""
    store = PostgresMetadataStore(postgres_dsn)
    lease = store.acquire_lease(holder="c", now_ms=0, ttl_ms=10**12)
    assert lease is not None
    epoch = lease.controller_epoch
    store.append([topic("before", Uuid.random())], controller_epoch=epoch)

    def killed(db_lease: Any) -> int:
        db_lease[0].execute("SELECT pg_terminate_backend(pg_backend_pid())")
        return -1

    calls: list[Callable[[], Any]] = [
        lambda: store.append([topic("first", Uuid.random())], controller_epoch=epoch),
        lambda: store.append([topic("a", Uuid.random())], controller_epoch=epoch),
        lambda: store._group.run(killed),
        lambda: store.append([topic("b", Uuid.random())], controller_epoch=epoch),
    ]
    outcomes = _queue_behind_the_store(store, calls)  # "first" alone, then a, the killer and b in one group
    try:
        assert outcomes[0] == 1
        assert all(isinstance(o, KafkaStorageError) for o in outcomes[1:]), outcomes
        assert [e.record["name"] for e in store.read()] == ["before", "first"], "nothing of the killed group"
        assert store.append([topic("after", Uuid.random())], controller_epoch=epoch) == 2
        assert [e.record["name"] for e in store.read()] == ["before", "first", "after"]
    finally:
        store.close()
