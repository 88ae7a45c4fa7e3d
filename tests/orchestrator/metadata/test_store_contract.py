"""One contract suite for every MetadataStore backend (SQLite on a temp file, in-memory, PostgreSQL).

Each backend comes with a ``damage(offset, rlmm=False)`` hook that flips a byte of a stored record behind the
store's back (keeping the stored checksum), so checksum verification and ``recover()`` are tested the same way.

The PostgreSQL backend runs against a real server started once for the session (``tests.support.postgres_server``:
initdb in a temporary directory, 127.0.0.1 only, stopped by pid at the end), with a fresh database per test. If
the server's binaries are missing, its tests fail naming the package to install; they are never skipped. The
last section holds what only the PostgreSQL backend has: migrations, server-side timeouts, reconnection, and a
DSN whose password must never be logged.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
import structlog
from psycopg import sql

from orchestrator.errors import (
    InvalidArgument,
    InvalidRequest,
    KafkaStorageError,
    MetadataLogCorrupt,
    StaleControllerEpoch,
    StaleTieredEpoch,
)
from orchestrator.ids import Uuid
from orchestrator.metadata.memory_store import InMemoryMetadataStore
from orchestrator.metadata.postgres import DEFAULT_SCHEMA, PostgresMetadataStore, SessionTimeouts, masked_dsn
from orchestrator.metadata.postgres import schema as postgres_schema
from orchestrator.metadata.postgres.connection import connect
from orchestrator.metadata.postgres.schema import LATEST_VERSION, MIGRATIONS
from orchestrator.metadata.records import (
    DisablePolicy,
    MetadataRecord,
    PartitionDeleteState,
    SegmentState,
    TieredState,
)
from orchestrator.metadata.sqlite import SqliteMetadataStore
from orchestrator.metadata.store import Lease, LogTruncated, MetadataStore
from tests.support import REPO_ROOT
from tests.support.clocks import FakeClock
from tests.support.metadata_records import (
    copy_started,
    partition_delete,
    remove_topic,
    segment_update,
    tiered,
    topic,
)
from tests.support.postgres_server import PostgresServer, free_port

TTL = 1_000


@dataclass
class Backend:
    store: MetadataStore
    damage: Callable[..., None]
    clock: FakeClock  # the store's injected clock (seconds), read where a caller gives no now_ms


def _flip(data: bytes) -> bytes:
    raw = bytearray(data)
    raw[len(raw) // 2] ^= 0x5A
    return bytes(raw)


def _damage_postgres(dsn: str, offset: int, rlmm: bool = False) -> None:
    table = sql.Identifier(DEFAULT_SCHEMA, "rlmm" if rlmm else "log")
    with psycopg.connect(dsn, autocommit=True) as raw:
        row = raw.execute(sql.SQL("SELECT data FROM {} WHERE record_offset = %s").format(table), (offset,)).fetchone()
        assert row is not None, f"no record at offset {offset}"
        raw.execute(sql.SQL("UPDATE {} SET data = %s WHERE record_offset = %s").format(table), (_flip(row[0]), offset))


# The SQLite and in-memory runs are unit tests; the PostgreSQL run needs a real server: an integration test.
@pytest.fixture(
    params=[
        pytest.param("sqlite", marks=pytest.mark.unit),
        pytest.param("memory", marks=pytest.mark.unit),
        pytest.param("postgresql", marks=pytest.mark.integration),
    ]
)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    clock = FakeClock(0.0)
    if request.param == "postgresql":
        dsn: str = request.getfixturevalue("postgres_dsn")
        pg_store = PostgresMetadataStore(dsn, clock=clock)
        yield Backend(pg_store, lambda offset, rlmm=False: _damage_postgres(dsn, offset, rlmm), clock)
        pg_store.close()
    elif request.param == "sqlite":
        path = tmp_path / "metadata.db"
        sqlite_store = SqliteMetadataStore(path, clock=clock)

        def damage_sqlite(offset: int, rlmm: bool = False) -> None:
            table = "rlmm" if rlmm else "log"
            with sqlite3.connect(path) as raw:
                (data,) = raw.execute(f"SELECT data FROM {table} WHERE offset = ?", (offset,)).fetchone()
                raw.execute(f"UPDATE {table} SET data = ? WHERE offset = ?", (_flip(data), offset))
            raw.close()

        yield Backend(sqlite_store, damage_sqlite, clock)
        sqlite_store.close()
    else:
        memory_store = InMemoryMetadataStore(clock=clock)

        def damage_memory(offset: int, rlmm: bool = False) -> None:
            entries = (
                memory_store.read_remote_log_metadata()
                if rlmm
                else memory_store.read(from_offset=memory_store.start_offset())
            )
            from orchestrator.metadata.records import encode_record

            record = next(e.record for e in entries if e.offset == offset)
            memory_store.inject_corruption(offset=offset, data=_flip(encode_record(record)), rlmm=rlmm)

        yield Backend(memory_store, damage_memory, clock)
        memory_store.close()


@pytest.fixture
def store(backend: Backend) -> MetadataStore:
    return backend.store


def _lease(store: MetadataStore, holder: str = "controller-1", now_ms: int = 0) -> Lease:
    lease = store.acquire_lease(holder=holder, now_ms=now_ms, ttl_ms=TTL)
    assert lease is not None
    return lease


def _names(store: MetadataStore) -> list[str]:
    return [e.record["name"] for e in store.read()]


def _enabled_topic(store: MetadataStore, epoch: int = 1) -> tuple[Uuid, Lease]:
    """A topic with tiering ENABLED at ``epoch``, written by a controller that holds the lease."""
    lease = store.current_lease() or _lease(store)
    tid = Uuid.random()
    store.append(
        [topic(f"t-{tid}", tid), tiered(tid, epoch, TieredState.ENABLED)], controller_epoch=lease.controller_epoch
    )
    return tid, lease


# --- the metadata log ------------------------------------------------------------------------------------------


def test_an_empty_store_has_no_records_no_snapshot_and_no_lease(store: MetadataStore) -> None:
    assert store.end_offset() == 0
    assert list(store.read()) == []
    assert store.latest_snapshot() is None
    assert store.current_lease() is None
    assert list(store.read_remote_log_metadata()) == []


def test_offsets_are_dense_from_zero_across_appends(store: MetadataStore) -> None:
    epoch = _lease(store).controller_epoch
    assert store.append([topic("a", Uuid.random())], controller_epoch=epoch) == 0
    assert store.append([topic("b", Uuid.random()), topic("c", Uuid.random())], controller_epoch=epoch) == 2
    assert store.append([topic("d", Uuid.random())], controller_epoch=epoch) == 3
    assert store.end_offset() == 4
    entries = list(store.read())
    assert [e.offset for e in entries] == [0, 1, 2, 3]
    assert [e.record["name"] for e in entries] == ["a", "b", "c", "d"]
    assert {e.controller_epoch for e in entries} == {epoch}


def test_records_read_back_equal_to_what_was_written(store: MetadataStore) -> None:
    epoch = _lease(store).controller_epoch
    tid = Uuid.random()
    written = [topic("orders", tid), tiered(tid, 3, TieredState.DISABLING, DisablePolicy.DELETE), remove_topic(tid)]
    store.append(written, controller_epoch=epoch)
    assert [e.record for e in store.read()] == written


def test_read_starts_at_an_offset_and_stops_at_a_limit(store: MetadataStore) -> None:
    epoch = _lease(store).controller_epoch
    store.append([topic(f"t{i}", Uuid.random()) for i in range(10)], controller_epoch=epoch)
    assert [e.offset for e in store.read(from_offset=7)] == [7, 8, 9]
    assert [e.offset for e in store.read(from_offset=2, limit=3)] == [2, 3, 4]
    assert list(store.read(from_offset=10)) == []
    assert list(store.read(limit=0)) == []
    with pytest.raises(InvalidRequest):
        store.read(from_offset=-1)


def test_an_empty_append_writes_nothing_and_returns_the_last_offset(store: MetadataStore) -> None:
    epoch = _lease(store).controller_epoch
    assert store.append([], controller_epoch=epoch) == -1
    store.append([topic("a", Uuid.random())], controller_epoch=epoch)
    assert store.append([], controller_epoch=epoch) == 0
    assert store.end_offset() == 1


def test_a_batch_with_a_record_that_does_not_encode_writes_nothing(store: MetadataStore) -> None:
    epoch = _lease(store).controller_epoch
    store.append([topic("a", Uuid.random())], controller_epoch=epoch)
    bad = MetadataRecord("TopicRecord", 0, {"name": 12345, "topic_id": Uuid.random()})
    with pytest.raises(InvalidRequest, match="TopicRecord"):
        store.append([topic("b", Uuid.random()), bad], controller_epoch=epoch)
    assert store.end_offset() == 1
    assert _names(store) == ["a"]


def test_a_remote_log_metadata_record_does_not_belong_in_the_metadata_log(store: MetadataStore) -> None:
    epoch = _lease(store).controller_epoch
    tid = Uuid.random()
    with pytest.raises(InvalidRequest, match="does not belong"):
        store.append([copy_started(tid, 1)], controller_epoch=epoch)
    with pytest.raises(InvalidRequest, match="does not belong"):
        store.append_remote_log_metadata([topic("a", tid)])
    assert store.end_offset() == 0


def test_a_batch_that_lowers_a_tiered_epoch_writes_nothing(store: MetadataStore) -> None:
    tid, lease = _enabled_topic(store, epoch=4)
    with pytest.raises(StaleTieredEpoch, match="below the current epoch 4"):
        store.append(
            [topic("other", Uuid.random()), tiered(tid, 3, TieredState.DISABLING)],
            controller_epoch=lease.controller_epoch,
        )
    assert store.end_offset() == 2
    assert store.tiered_state(tid) == (4, TieredState.ENABLED)


def test_many_threads_appending_get_dense_distinct_offsets(store: MetadataStore) -> None:
    epoch = _lease(store).controller_epoch
    results: list[int] = []
    lock = threading.Lock()

    def writer(n: int) -> None:
        for i in range(20):
            last = store.append(
                [topic(f"w{n}-{i}", Uuid.random()), topic(f"w{n}-{i}b", Uuid.random())], controller_epoch=epoch
            )
            with lock:
                results.append(last)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == list(range(1, 160, 2))
    assert [e.offset for e in store.read()] == list(range(160))


# --- controller lease and epoch fencing ------------------------------------------------------------------------


def test_append_without_a_lease_is_refused(store: MetadataStore) -> None:
    with pytest.raises(StaleControllerEpoch, match="no controller holds the lease"):
        store.append([topic("a", Uuid.random())], controller_epoch=0)
    assert store.end_offset() == 0


def test_the_first_acquisition_gets_controller_epoch_1(store: MetadataStore) -> None:
    lease = _lease(store, "c1", now_ms=100)
    assert lease == Lease("c1", 1, 100 + TTL)
    assert store.current_lease() == lease


def test_a_held_lease_is_refused_to_others_until_it_expires(store: MetadataStore) -> None:
    _lease(store, "c1", now_ms=0)
    assert store.acquire_lease(holder="c2", now_ms=TTL - 1, ttl_ms=TTL) is None
    taken = store.acquire_lease(holder="c2", now_ms=TTL, ttl_ms=TTL)
    assert taken == Lease("c2", 2, 2 * TTL)


def test_a_deposed_controller_cannot_append_or_snapshot_after_another_takes_the_lease(store: MetadataStore) -> None:
    old = _lease(store, "c1", now_ms=0)
    store.append([topic("a", Uuid.random())], controller_epoch=old.controller_epoch)
    new = store.acquire_lease(holder="c2", now_ms=TTL + 1, ttl_ms=TTL)
    assert new is not None and new.controller_epoch == old.controller_epoch + 1
    with pytest.raises(StaleControllerEpoch, match="held by c2 at controller epoch 2"):
        store.append([topic("zombie", Uuid.random())], controller_epoch=old.controller_epoch)
    with pytest.raises(StaleControllerEpoch):
        store.save_snapshot(offset=0, records=[], controller_epoch=old.controller_epoch)
    assert store.append([topic("b", Uuid.random())], controller_epoch=new.controller_epoch) == 1
    assert _names(store) == ["a", "b"]


def test_a_future_epoch_is_refused_too(store: MetadataStore) -> None:
    lease = _lease(store)
    with pytest.raises(StaleControllerEpoch):
        store.append([topic("a", Uuid.random())], controller_epoch=lease.controller_epoch + 1)


def test_the_controller_epoch_only_grows_across_acquire_expire_and_reacquire(store: MetadataStore) -> None:
    epochs = []
    now = 0
    for holder in ["c1", "c2", "c1", "c3", "c2"]:
        lease = store.acquire_lease(holder=holder, now_ms=now, ttl_ms=TTL)
        assert lease is not None
        epochs.append(lease.controller_epoch)
        now += TTL  # let it expire
    assert epochs == [1, 2, 3, 4, 5]


def test_the_holder_re_acquiring_keeps_its_tenure_and_epoch(store: MetadataStore) -> None:
    first = _lease(store, "c1", now_ms=0)
    again = store.acquire_lease(holder="c1", now_ms=10, ttl_ms=TTL)
    assert again == Lease("c1", first.controller_epoch, 10 + TTL)
    # Expired, but nobody else took it: the same tenure resumes (writes are fenced by epoch, so this is safe).
    late = store.acquire_lease(holder="c1", now_ms=5 * TTL, ttl_ms=TTL)
    assert late == Lease("c1", first.controller_epoch, 6 * TTL)


def test_renew_extends_the_lease_and_a_lost_lease_cannot_be_renewed(store: MetadataStore) -> None:
    lease = _lease(store, "c1", now_ms=0)
    renewed = store.renew_lease(holder="c1", controller_epoch=lease.controller_epoch, now_ms=900, ttl_ms=TTL)
    assert renewed == Lease("c1", lease.controller_epoch, 900 + TTL)
    assert store.acquire_lease(holder="c2", now_ms=TTL + 1, ttl_ms=TTL) is None  # renewal pushed expiry out
    taken = store.acquire_lease(holder="c2", now_ms=900 + TTL, ttl_ms=TTL)
    assert taken is not None
    with pytest.raises(StaleControllerEpoch, match="held by c2"):
        store.renew_lease(holder="c1", controller_epoch=lease.controller_epoch, now_ms=900 + TTL, ttl_ms=TTL)
    with pytest.raises(StaleControllerEpoch):  # right holder name, wrong epoch
        store.renew_lease(holder="c2", controller_epoch=lease.controller_epoch, now_ms=900 + TTL, ttl_ms=TTL)


def test_release_frees_the_lease_and_the_next_acquisition_bumps_the_epoch(store: MetadataStore) -> None:
    lease = _lease(store, "c1")
    assert store.release_lease(holder="c2", controller_epoch=lease.controller_epoch) is False
    assert store.release_lease(holder="c1", controller_epoch=lease.controller_epoch + 1) is False
    assert store.current_lease() == lease
    assert store.release_lease(holder="c1", controller_epoch=lease.controller_epoch) is True
    assert store.release_lease(holder="c1", controller_epoch=lease.controller_epoch) is False
    assert store.current_lease() is None
    with pytest.raises(StaleControllerEpoch, match="no controller holds the lease"):
        store.append([topic("a", Uuid.random())], controller_epoch=lease.controller_epoch)
    with pytest.raises(StaleControllerEpoch):
        store.renew_lease(holder="c1", controller_epoch=lease.controller_epoch, now_ms=1, ttl_ms=TTL)
    again = _lease(store, "c1", now_ms=1)
    assert again.controller_epoch == lease.controller_epoch + 1


def test_lease_arguments_are_validated(store: MetadataStore) -> None:
    with pytest.raises(InvalidRequest):
        store.acquire_lease(holder="", now_ms=0, ttl_ms=TTL)
    with pytest.raises(InvalidRequest):
        store.acquire_lease(holder="c1", now_ms=0, ttl_ms=0)


# --- snapshots -------------------------------------------------------------------------------------------------


def test_the_latest_snapshot_is_returned_with_its_records(store: MetadataStore) -> None:
    epoch = _lease(store).controller_epoch
    tid = Uuid.random()
    store.append([topic("a", tid), tiered(tid, 1, TieredState.ENABLED)], controller_epoch=epoch)
    first = [topic("a", tid), tiered(tid, 1, TieredState.ENABLED)]
    store.save_snapshot(offset=1, records=first, controller_epoch=epoch)
    store.append([tiered(tid, 2, TieredState.DISABLING, DisablePolicy.RETAIN)], controller_epoch=epoch)
    second = [topic("a", tid), tiered(tid, 2, TieredState.DISABLING, DisablePolicy.RETAIN)]
    store.save_snapshot(offset=2, records=second, controller_epoch=epoch)
    snap = store.latest_snapshot()
    assert snap is not None
    assert snap.offset == 2
    assert list(snap.records) == second


def test_a_snapshot_must_be_at_an_offset_in_the_log(store: MetadataStore) -> None:
    epoch = _lease(store).controller_epoch
    with pytest.raises(InvalidRequest):
        store.save_snapshot(offset=0, records=[], controller_epoch=epoch)
    store.append([topic("a", Uuid.random())], controller_epoch=epoch)
    with pytest.raises(InvalidRequest):
        store.save_snapshot(offset=1, records=[], controller_epoch=epoch)
    store.save_snapshot(offset=0, records=[], controller_epoch=epoch)
    snap = store.latest_snapshot()
    assert snap is not None and snap.offset == 0 and snap.records == ()


def _numbered_topics(store: MetadataStore, epoch: int, n: int) -> None:
    store.append([topic(f"t{i}", Uuid.random()) for i in range(n)], controller_epoch=epoch)


def test_saving_a_snapshot_deletes_the_log_below_the_oldest_snapshot_kept(store: MetadataStore) -> None:
    epoch = _lease(store).controller_epoch
    _numbered_topics(store, epoch, 10)
    assert store.start_offset() == 0

    assert store.save_snapshot(offset=3, records=[], controller_epoch=epoch) == 3
    assert store.save_snapshot(offset=6, records=[], controller_epoch=epoch) == 3  # two kept: 3 and 6
    assert store.save_snapshot(offset=9, records=[], controller_epoch=epoch) == 6  # 3 dropped, records 3..5 too

    assert (store.start_offset(), store.end_offset()) == (6, 10)
    assert [e.offset for e in store.read(from_offset=6)] == [6, 7, 8, 9]
    assert [e.offset for e in store.read(from_offset=8, limit=1)] == [8]
    snap = store.latest_snapshot()
    assert snap is not None and snap.offset == 9
    # Appends continue densely after the deletion.
    assert store.append([topic("after", Uuid.random())], controller_epoch=epoch) == 10


def test_reading_below_the_log_start_is_log_truncated_not_corruption(store: MetadataStore) -> None:
    epoch = _lease(store).controller_epoch
    _numbered_topics(store, epoch, 5)
    store.save_snapshot(offset=3, records=[], controller_epoch=epoch, retain=1)
    for from_offset in (0, 2):
        with pytest.raises(LogTruncated, match="starts at 3"):
            list(store.read(from_offset=from_offset))
    assert [e.offset for e in store.read(from_offset=3)] == [3, 4]


def test_the_number_of_snapshots_kept_is_the_callers(store: MetadataStore) -> None:
    epoch = _lease(store).controller_epoch
    _numbered_topics(store, epoch, 10)
    for offset in (2, 4, 6):
        store.save_snapshot(offset=offset, records=[], controller_epoch=epoch, retain=3)
    assert store.start_offset() == 2
    assert store.save_snapshot(offset=8, records=[], controller_epoch=epoch, retain=1) == 8
    with pytest.raises(InvalidRequest, match="at least one"):
        store.save_snapshot(offset=9, records=[], controller_epoch=epoch, retain=0)


def test_a_snapshot_below_the_log_start_is_refused(store: MetadataStore) -> None:
    epoch = _lease(store).controller_epoch
    _numbered_topics(store, epoch, 5)
    store.save_snapshot(offset=3, records=[], controller_epoch=epoch, retain=1)
    with pytest.raises(InvalidRequest, match="offsets run from 3 to 4"):
        store.save_snapshot(offset=2, records=[], controller_epoch=epoch)
    assert store.start_offset() == 3


def test_a_log_hold_keeps_the_records_from_its_offset_through_snapshots_until_moved_released_or_expired(
    store: MetadataStore,
) -> None:
    """Store invariant 8: a reader's hold keeps every record at and after its offset; the lowest live hold wins; a
    hold moved on, released or expired holds nothing more, and the next snapshot deletes as without it."""
    epoch = _lease(store).controller_epoch
    _numbered_topics(store, epoch, 12)
    store.hold_log(holder="audit", offset=2, now_ms=1_000, ttl_ms=10_000)
    store.hold_log(holder="checker", offset=5, now_ms=1_000, ttl_ms=10_000)
    assert store.save_snapshot(offset=8, records=[], controller_epoch=epoch, retain=1, now_ms=2_000) == 2
    assert [e.offset for e in store.read(from_offset=2, limit=2)] == [2, 3], "held records read back"

    store.hold_log(holder="audit", offset=6, now_ms=2_000, ttl_ms=10_000)  # moved on: checker's 5 is lowest
    assert store.save_snapshot(offset=9, records=[], controller_epoch=epoch, retain=1, now_ms=3_000) == 5
    store.release_log_hold(holder="checker")
    store.release_log_hold(holder="checker")  # releasing twice is harmless
    assert store.save_snapshot(offset=10, records=[], controller_epoch=epoch, retain=1, now_ms=4_000) == 6
    # audit's hold expires at 12_000: from then on it holds nothing.
    assert store.save_snapshot(offset=11, records=[], controller_epoch=epoch, retain=1, now_ms=12_000) == 11
    with pytest.raises(LogTruncated):
        list(store.read(from_offset=6))


def test_a_snapshot_given_no_time_judges_holds_by_the_stores_own_clock(backend: Backend) -> None:
    store = backend.store
    epoch = _lease(store).controller_epoch
    _numbered_topics(store, epoch, 8)
    store.hold_log(holder="reader", offset=3, now_ms=1_000, ttl_ms=5_000)
    backend.clock.now = 5.999  # the hold lives until 6_000 ms
    assert store.save_snapshot(offset=5, records=[], controller_epoch=epoch, retain=1) == 3
    backend.clock.now = 6.0
    assert store.save_snapshot(offset=6, records=[], controller_epoch=epoch, retain=1) == 6


def test_a_hold_above_the_oldest_snapshot_changes_nothing_and_bad_holds_are_refused(store: MetadataStore) -> None:
    epoch = _lease(store).controller_epoch
    _numbered_topics(store, epoch, 10)
    store.hold_log(holder="reader", offset=9, now_ms=0, ttl_ms=60_000)
    assert store.save_snapshot(offset=4, records=[], controller_epoch=epoch, retain=1, now_ms=1) == 4
    for holder, offset, ttl_ms, why in (("", 0, 1, "holder"), ("r", -1, 1, "offset"), ("r", 0, 0, "ttl_ms")):
        with pytest.raises(InvalidRequest, match=why):
            store.hold_log(holder=holder, offset=offset, now_ms=0, ttl_ms=ttl_ms)
    assert store.start_offset() == 4 and store.end_offset() == 10


def test_a_deposed_controller_deletes_nothing(store: MetadataStore) -> None:
    old = _lease(store)
    _numbered_topics(store, old.controller_epoch, 5)
    store.release_lease(holder=old.holder, controller_epoch=old.controller_epoch)
    _lease(store, holder="controller-2")
    with pytest.raises(StaleControllerEpoch):
        store.save_snapshot(offset=4, records=[], controller_epoch=old.controller_epoch, retain=1)
    assert store.start_offset() == 0 and store.latest_snapshot() is None


def test_recovery_after_deletion_rebuilds_the_fence_from_the_snapshot_and_the_tail(backend: Backend) -> None:
    store = backend.store
    epoch = _lease(store).controller_epoch
    tid = Uuid.random()
    enabled = [topic("a", tid), tiered(tid, 1, TieredState.ENABLED)]
    store.append([*enabled, topic("b", Uuid.random())], controller_epoch=epoch)
    store.save_snapshot(offset=2, records=[*enabled, topic("b", Uuid.random())], controller_epoch=epoch, retain=1)
    store.append([tiered(tid, 2, TieredState.DISABLING, DisablePolicy.DELETE)], controller_epoch=epoch)
    assert store.tiered_state(tid) == (2, TieredState.DISABLING)
    backend.damage(3)

    report = store.recover()

    assert (report.first_bad_offset, report.log_end_offset) == (3, 3)
    assert store.start_offset() == 2
    assert store.tiered_state(tid) == (1, TieredState.ENABLED)  # from the snapshot: records 0..1 are gone
    assert store.recover().clean


def test_a_snapshot_needs_the_current_controller_epoch(store: MetadataStore) -> None:
    epoch = _lease(store).controller_epoch
    store.append([topic("a", Uuid.random())], controller_epoch=epoch)
    with pytest.raises(StaleControllerEpoch):
        store.save_snapshot(offset=0, records=[], controller_epoch=epoch - 1)
    assert store.latest_snapshot() is None


# --- the RLMM fence (ARCHITECTURE §4 invariant 3) --------------------------------------------------------------------


def test_a_copy_at_the_enabled_epoch_is_accepted(store: MetadataStore) -> None:
    tid, _ = _enabled_topic(store, epoch=2)
    seg = Uuid.random()
    assert store.append_remote_log_metadata([copy_started(tid, 2, segment_id=seg)], now_ms=123) == 0
    assert store.append_remote_log_metadata([segment_update(tid, seg, SegmentState.COPY_SEGMENT_FINISHED, 2)]) == 1
    entries = list(store.read_remote_log_metadata())
    assert [e.offset for e in entries] == [0, 1]
    assert entries[0].appended_at_ms == 123
    assert entries[1].record["remote_log_segment_state"] == SegmentState.COPY_SEGMENT_FINISHED


@pytest.mark.parametrize("record_epoch", [1, 3, -1])
def test_a_copy_at_another_epoch_is_refused_naming_topic_epoch_and_state(
    store: MetadataStore, record_epoch: int
) -> None:
    tid, _ = _enabled_topic(store, epoch=2)
    with pytest.raises(StaleTieredEpoch) as caught:
        store.append_remote_log_metadata([copy_started(tid, record_epoch)])
    message = str(caught.value)
    assert str(tid) in message and f"tiered epoch {record_epoch}" in message and "ENABLED at epoch 2" in message
    assert list(store.read_remote_log_metadata()) == []


def test_a_copy_without_a_tiered_epoch_is_refused(store: MetadataStore) -> None:
    tid, _ = _enabled_topic(store, epoch=1)
    with pytest.raises(StaleTieredEpoch):
        store.append_remote_log_metadata([copy_started(tid, None)])


@pytest.mark.parametrize("state", [TieredState.DISABLING, TieredState.DISABLED])
def test_a_copy_is_refused_once_the_topic_is_disabling_or_disabled(store: MetadataStore, state: TieredState) -> None:
    tid, lease = _enabled_topic(store, epoch=1)
    seg = Uuid.random()
    store.append_remote_log_metadata([copy_started(tid, 1, segment_id=seg)])
    store.append([tiered(tid, 2, state, DisablePolicy.RETAIN)], controller_epoch=lease.controller_epoch)
    for late in (
        segment_update(tid, seg, SegmentState.COPY_SEGMENT_FINISHED, 1),  # the zombie upload of epoch 1
        segment_update(tid, seg, SegmentState.COPY_SEGMENT_FINISHED, 2),
        copy_started(tid, 2),
    ):
        with pytest.raises(StaleTieredEpoch, match=f"{state.name} at epoch 2"):
            store.append_remote_log_metadata([late])
    assert len(list(store.read_remote_log_metadata())) == 1


def test_re_enabling_moves_the_fence_to_the_new_epoch(store: MetadataStore) -> None:
    tid, lease = _enabled_topic(store, epoch=1)
    store.append(
        [
            tiered(tid, 2, TieredState.DISABLING),
            tiered(tid, 2, TieredState.DISABLED),
            tiered(tid, 3, TieredState.ENABLED),
        ],
        controller_epoch=lease.controller_epoch,
    )
    assert store.tiered_state(tid) == (3, TieredState.ENABLED)
    with pytest.raises(StaleTieredEpoch):
        store.append_remote_log_metadata([copy_started(tid, 1)])
    assert store.append_remote_log_metadata([copy_started(tid, 3)]) == 0


def test_a_copy_for_a_removed_topic_is_refused(store: MetadataStore) -> None:
    tid, lease = _enabled_topic(store, epoch=1)
    store.append([remove_topic(tid)], controller_epoch=lease.controller_epoch)
    assert store.tiered_state(tid) is None
    with pytest.raises(StaleTieredEpoch, match="unknown to the metadata log"):
        store.append_remote_log_metadata([copy_started(tid, 1)])


def test_a_copy_for_an_unknown_topic_is_refused(store: MetadataStore) -> None:
    _enabled_topic(store, epoch=1)
    with pytest.raises(StaleTieredEpoch, match="unknown to the metadata log"):
        store.append_remote_log_metadata([copy_started(Uuid.random(), 1)])


def test_deletes_are_always_accepted(store: MetadataStore) -> None:
    tid, lease = _enabled_topic(store, epoch=1)
    seg = Uuid.random()
    store.append_remote_log_metadata([copy_started(tid, 1, segment_id=seg)])
    store.append([tiered(tid, 2, TieredState.DISABLING, DisablePolicy.DELETE)], controller_epoch=lease.controller_epoch)
    deletes = [
        segment_update(tid, seg, SegmentState.DELETE_SEGMENT_STARTED, 2),
        segment_update(tid, seg, SegmentState.DELETE_SEGMENT_FINISHED, 2),
        segment_update(tid, seg, SegmentState.DELETE_SEGMENT_FINISHED, 0),  # any epoch
        partition_delete(tid, PartitionDeleteState.DELETE_PARTITION_MARKED),
    ]
    assert store.append_remote_log_metadata(deletes) == 4
    store.append([remove_topic(tid)], controller_epoch=lease.controller_epoch)
    unknown = Uuid.random()
    assert (
        store.append_remote_log_metadata(
            [
                partition_delete(tid, PartitionDeleteState.DELETE_PARTITION_FINISHED),
                segment_update(unknown, Uuid.random(), SegmentState.DELETE_SEGMENT_STARTED, 7),
            ]
        )
        == 6
    )


def test_a_batch_with_one_refused_copy_writes_nothing(store: MetadataStore) -> None:
    tid, _ = _enabled_topic(store, epoch=1)
    with pytest.raises(StaleTieredEpoch):
        store.append_remote_log_metadata(
            [
                copy_started(tid, 1),
                partition_delete(tid, PartitionDeleteState.DELETE_PARTITION_MARKED),
                copy_started(tid, 0),
            ]
        )
    assert list(store.read_remote_log_metadata()) == []
    assert store.append_remote_log_metadata([copy_started(tid, 1)]) == 0


def test_a_topics_removal_and_its_partition_marks_land_in_both_logs_in_one_append(store: MetadataStore) -> None:
    tid, lease = _enabled_topic(store, epoch=1)
    store.append_remote_log_metadata([copy_started(tid, 1)])
    marked = partition_delete(tid, PartitionDeleteState.DELETE_PARTITION_MARKED)
    last = store.append(
        [remove_topic(tid)], controller_epoch=lease.controller_epoch, remote_log_metadata=[marked], now_ms=42
    )
    assert last == 2 and [e.record.name for e in store.read()][-1] == "RemoveTopicRecord"
    assert store.tiered_state(tid) is None
    rlmm = list(store.read_remote_log_metadata(topic_id=tid))
    assert [(e.offset, e.record, e.appended_at_ms) for e in rlmm[1:]] == [(1, marked, 42)]


def test_an_append_whose_remote_log_metadata_is_refused_writes_neither_log(store: MetadataStore) -> None:
    tid, lease = _enabled_topic(store, epoch=1)
    marked = partition_delete(tid, PartitionDeleteState.DELETE_PARTITION_MARKED)
    late_copy = copy_started(tid, 1)
    with pytest.raises(StaleTieredEpoch, match="unknown to the metadata log"):  # checked against the removal
        store.append(
            [remove_topic(tid)], controller_epoch=lease.controller_epoch, remote_log_metadata=[marked, late_copy]
        )
    with pytest.raises(StaleControllerEpoch):
        store.append([remove_topic(tid)], controller_epoch=lease.controller_epoch + 1, remote_log_metadata=[marked])
    assert store.end_offset() == 2 and store.tiered_state(tid) == (1, TieredState.ENABLED)
    assert list(store.read_remote_log_metadata()) == []


def test_remote_log_metadata_can_be_read_per_topic_from_an_offset(store: MetadataStore) -> None:
    a, _ = _enabled_topic(store, epoch=1)
    b, _ = _enabled_topic(store, epoch=5)
    store.append_remote_log_metadata([copy_started(a, 1), copy_started(b, 5), copy_started(a, 1), copy_started(b, 5)])
    assert [e.offset for e in store.read_remote_log_metadata(topic_id=a)] == [0, 2]
    assert [e.offset for e in store.read_remote_log_metadata(topic_id=b, from_offset=2)] == [3]
    assert [e.offset for e in store.read_remote_log_metadata(from_offset=1)] == [1, 2, 3]
    assert list(store.read_remote_log_metadata(topic_id=Uuid.random())) == []


def test_tiered_state_follows_the_metadata_log(store: MetadataStore) -> None:
    lease = _lease(store)
    tid = Uuid.random()
    assert store.tiered_state(tid) is None
    store.append([topic("t", tid)], controller_epoch=lease.controller_epoch)
    assert store.tiered_state(tid) is None  # a topic never tiered has no tiered state
    store.append([tiered(tid, 1, TieredState.ENABLED)], controller_epoch=lease.controller_epoch)
    assert store.tiered_state(tid) == (1, TieredState.ENABLED)
    store.append([tiered(tid, 2, TieredState.DISABLING, DisablePolicy.DELETE)], controller_epoch=lease.controller_epoch)
    assert store.tiered_state(tid) == (2, TieredState.DISABLING)
    store.append([remove_topic(tid)], controller_epoch=lease.controller_epoch)
    assert store.tiered_state(tid) is None


def test_a_batch_of_many_topics_moves_every_fence_at_once_and_one_stale_epoch_among_them_writes_nothing(
    store: MetadataStore,
) -> None:
    """More topics in one batch than a backend reads in one query (SQLite: 500 ids a query): some removed, some
    moved up, some new, one topic twice; then the same many with one epoch going down."""
    epoch = _lease(store).controller_epoch
    tids = [Uuid.random() for _ in range(1200)]
    store.append(
        [r for i, t in enumerate(tids) for r in (topic(f"t{i}", t), tiered(t, 2, TieredState.ENABLED))],
        controller_epoch=epoch,
    )
    batch = [remove_topic(t) for t in tids[:300]]
    batch += [tiered(t, 3, TieredState.DISABLING, DisablePolicy.DELETE) for t in tids[300:1100]]
    fresh = [Uuid.random() for _ in range(200)]
    batch += [tiered(t, 1, TieredState.ENABLED) for t in fresh]
    batch += [tiered(tids[1099], 4, TieredState.DISABLED, DisablePolicy.DELETE)]
    store.append(batch, controller_epoch=epoch)
    assert [store.tiered_state(t) for t in tids[:300]] == [None] * 300
    assert {store.tiered_state(t) for t in tids[300:1099]} == {(3, TieredState.DISABLING)}
    assert store.tiered_state(tids[1099]) == (4, TieredState.DISABLED)
    assert {store.tiered_state(t) for t in tids[1100:]} == {(2, TieredState.ENABLED)}
    assert {store.tiered_state(t) for t in fresh} == {(1, TieredState.ENABLED)}

    end = store.end_offset()
    stale = [tiered(t, 5, TieredState.ENABLED) for t in tids[300:1200]] + [tiered(fresh[-1], 0, TieredState.ENABLED)]
    with pytest.raises(StaleTieredEpoch, match="at tiered epoch 0 is below the current epoch 1"):
        store.append(stale, controller_epoch=epoch)
    assert store.end_offset() == end
    assert {store.tiered_state(t) for t in tids[300:1099]} == {(3, TieredState.DISABLING)}, "nothing written"


# --- checksums and recovery ------------------------------------------------------------------------------------


def test_a_clean_store_recovers_clean(store: MetadataStore) -> None:
    _enabled_topic(store)
    report = store.recover()
    assert report.clean
    assert report.log_end_offset == 2 and report.first_bad_offset is None


def test_a_damaged_record_fails_its_checksum_on_read_naming_the_offset(backend: Backend) -> None:
    store = backend.store
    epoch = _lease(store).controller_epoch
    store.append([topic(f"t{i}", Uuid.random()) for i in range(5)], controller_epoch=epoch)
    backend.damage(3)
    assert [e.offset for e in store.read(limit=3)] == [0, 1, 2]
    with pytest.raises(MetadataLogCorrupt, match="offset 3"):
        list(store.read())


def test_recovery_cuts_the_log_at_the_first_bad_record_and_appends_continue_densely(backend: Backend) -> None:
    store = backend.store
    lease = _lease(store)
    tid = Uuid.random()
    store.append([topic("a", tid), tiered(tid, 1, TieredState.ENABLED)], controller_epoch=lease.controller_epoch)
    # At offset 0: the oldest snapshot kept is at the log's start, so saving deletes no record (invariant 7).
    store.save_snapshot(offset=0, records=[topic("a", tid)], controller_epoch=lease.controller_epoch)
    store.append(
        [tiered(tid, 2, TieredState.DISABLING), topic("b", Uuid.random())], controller_epoch=lease.controller_epoch
    )
    store.save_snapshot(offset=3, records=[topic("a", tid)], controller_epoch=lease.controller_epoch)
    assert store.tiered_state(tid) == (2, TieredState.DISABLING)
    backend.damage(2)

    report = store.recover()

    assert not report.clean
    assert (report.first_bad_offset, report.truncated_records, report.log_end_offset) == (2, 2, 2)
    assert report.dropped_snapshots == (3,)
    assert [e.offset for e in store.read()] == [0, 1]
    snap = store.latest_snapshot()
    assert snap is not None and snap.offset == 0
    assert store.tiered_state(tid) == (1, TieredState.ENABLED)  # the fence is rebuilt from what remains
    # The log lost records the controller had written: its lease is revoked, so it must rebuild at epoch + 1.
    assert store.current_lease() is None
    with pytest.raises(StaleControllerEpoch):
        store.append([topic("c", Uuid.random())], controller_epoch=lease.controller_epoch)
    again = _lease(store, now_ms=1)
    assert again.controller_epoch == lease.controller_epoch + 1
    assert store.append([topic("c", Uuid.random())], controller_epoch=again.controller_epoch) == 2
    assert store.recover().clean


def test_recovery_cuts_a_damaged_remote_log_metadata_tail(backend: Backend) -> None:
    store = backend.store
    tid, lease = _enabled_topic(store)
    store.append_remote_log_metadata([copy_started(tid, 1) for _ in range(4)])
    backend.damage(1, rlmm=True)
    with pytest.raises(MetadataLogCorrupt, match="offset 1"):
        list(store.read_remote_log_metadata())

    report = store.recover()

    assert (report.first_bad_rlmm_offset, report.truncated_rlmm_records, report.rlmm_end_offset) == (1, 3, 1)
    assert report.first_bad_offset is None
    assert store.current_lease() == lease  # the metadata log is intact: the controller keeps its lease
    assert store.append_remote_log_metadata([copy_started(tid, 1)]) == 1


# --- PostgreSQL only: migrations, server-side timeouts, reconnection, the DSN's password -----------------------

CONCURRENT_OPENERS = 4
APPENDER_PROCESSES = 3
APPENDS_PER_PROCESS = 20
WAIT_DEADLINE_S = 30.0

_APPENDER = """
import json, os, sys
from orchestrator.ids import Uuid
from orchestrator.logging import configure_logging
from orchestrator.metadata.postgres import PostgresMetadataStore
from tests.support.metadata_records import topic

configure_logging("service", stream=sys.stderr)
epoch, count, name = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
store = PostgresMetadataStore(os.environ["TIEREDCTL_TEST_DSN"], recover_on_open=False)
print("ready", flush=True)
sys.stdin.readline()  # every process starts appending at once
batches = [[topic(f"{name}-{i:03}", Uuid.random()), topic(f"{name}-{i:03}b", Uuid.random())] for i in range(count)]
last = [store.append(batch, controller_epoch=epoch) for batch in batches]
store.close()
print(json.dumps(last), flush=True)
"""


@pytest.mark.integration
def test_postgresql_concurrent_first_opens_apply_each_migration_exactly_once(postgres_dsn: str) -> None:
    barrier = threading.Barrier(CONCURRENT_OPENERS)
    opened: list[PostgresMetadataStore] = []
    failed: list[BaseException] = []
    lock = threading.Lock()

    def open_store() -> None:
        barrier.wait(timeout=WAIT_DEADLINE_S)
        try:
            store = PostgresMetadataStore(postgres_dsn)
        except BaseException as exc:
            with lock:
                failed.append(exc)
            return
        with lock:
            opened.append(store)

    try:
        with structlog.testing.capture_logs() as logs:
            threads = [threading.Thread(target=open_store) for _ in range(CONCURRENT_OPENERS)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(timeout=WAIT_DEADLINE_S)
        assert failed == [] and len(opened) == CONCURRENT_OPENERS
        migrated_from = sorted(e["migrated_from"] for e in logs if e["event"] == "metadata.store.opened")
        assert migrated_from == [0] + [LATEST_VERSION] * (CONCURRENT_OPENERS - 1)
        with psycopg.connect(postgres_dsn, autocommit=True) as raw:
            versions = raw.execute("SELECT version FROM tieredctl.schema_version ORDER BY version").fetchall()
            leases = raw.execute("SELECT COUNT(*) FROM tieredctl.lease").fetchone()
        assert [v for (v,) in versions] == [m.version for m in MIGRATIONS]
        assert leases == (1,)
        # Every store shares the one lease: the first acquisition wins, the others see it held.
        first = _lease(opened[0], "c0")
        assert all(
            s.acquire_lease(holder=f"c{i}", now_ms=0, ttl_ms=TTL) is None for i, s in enumerate(opened[1:], start=1)
        )
        assert all(s.current_lease() == first for s in opened)
    finally:
        for store in opened:
            store.close()


@pytest.mark.integration
def test_postgresql_a_store_made_by_an_earlier_build_is_upgraded_and_keeps_its_log(
    postgres_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store at schema version 1 (made before the log holds) gets migration 2 on its next open: its records and
    lease stay, and holds work."""
    monkeypatch.setattr(postgres_schema, "MIGRATIONS", MIGRATIONS[:1])
    monkeypatch.setattr(postgres_schema, "LATEST_VERSION", 1)
    with PostgresMetadataStore(postgres_dsn) as old:
        epoch = _lease(old).controller_epoch
        _numbered_topics(old, epoch, 4)
    monkeypatch.undo()
    with PostgresMetadataStore(postgres_dsn) as store:
        assert [e.offset for e in store.read()] == [0, 1, 2, 3] and store.current_lease() is not None
        store.hold_log(holder="reader", offset=1, now_ms=0, ttl_ms=TTL)
        assert store.save_snapshot(offset=3, records=[], controller_epoch=epoch, retain=1, now_ms=1) == 1
    with psycopg.connect(postgres_dsn, autocommit=True) as raw:
        versions = raw.execute("SELECT version FROM tieredctl.schema_version ORDER BY version").fetchall()
    assert [v for (v,) in versions] == [1, 2]


@pytest.mark.integration
def test_postgresql_a_store_at_a_newer_schema_version_is_refused(postgres_dsn: str) -> None:
    PostgresMetadataStore(postgres_dsn).close()
    with psycopg.connect(postgres_dsn, autocommit=True) as raw:
        raw.execute(
            "INSERT INTO tieredctl.schema_version (version, description) VALUES (%s, 'from a newer build')",
            (LATEST_VERSION + 1,),
        )
    with pytest.raises(MetadataLogCorrupt, match="newer than this build"):
        PostgresMetadataStore(postgres_dsn)


@pytest.mark.integration
def test_postgresql_appenders_in_several_processes_get_dense_distinct_offsets(postgres_dsn: str) -> None:
    with PostgresMetadataStore(postgres_dsn) as store:
        epoch = _lease(store).controller_epoch
    env = {**os.environ, "TIEREDCTL_TEST_DSN": postgres_dsn}  # not argv: ps would show the password
    procs: list[subprocess.Popen[str]] = []
    try:
        for n in range(APPENDER_PROCESSES):
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-c", _APPENDER, str(epoch), str(APPENDS_PER_PROCESS), f"w{n}"],
                    cwd=REPO_ROOT,
                    env=env,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                )
            )
        for proc in procs:
            assert proc.stdout is not None
            assert proc.stdout.readline().strip() == "ready", proc.communicate(timeout=WAIT_DEADLINE_S)
        for proc in procs:  # the go signal reaches every process before any is waited for
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
        outputs = [proc.communicate(timeout=WAIT_DEADLINE_S) for proc in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=WAIT_DEADLINE_S)
    assert [proc.returncode for proc in procs] == [0] * APPENDER_PROCESSES, [err for _out, err in outputs]
    last_offsets = sorted(o for out, _err in outputs for o in json.loads(out))
    total = 2 * APPENDER_PROCESSES * APPENDS_PER_PROCESS
    assert last_offsets == list(range(1, total, 2))  # every two-record batch got two adjacent offsets
    with PostgresMetadataStore(postgres_dsn) as store:
        entries = list(store.read())
    assert [e.offset for e in entries] == list(range(total))
    for n in range(APPENDER_PROCESSES):  # each process's batches are in the log in the order it wrote them
        mine = [e.record["name"] for e in entries if e.record["name"].startswith(f"w{n}-")]
        assert mine == sorted(mine) and len(mine) == 2 * APPENDS_PER_PROCESS


@pytest.mark.integration
def test_postgresql_a_paused_writer_holds_others_up_only_until_the_server_ends_its_session(postgres_dsn: str) -> None:
    short = SessionTimeouts(statement_timeout_ms=2_000, lock_timeout_ms=200, idle_in_transaction_timeout_ms=1_000)
    store = PostgresMetadataStore(postgres_dsn, timeouts=short)
    # A writer set up exactly as the store's connections are, paused while it holds the write lock.
    paused = connect(postgres_dsn, schema=DEFAULT_SCHEMA, timeouts=short, application_name="paused-writer")
    try:
        paused.execute("BEGIN")
        paused.execute("SELECT holder FROM lease WHERE id = 1 FOR UPDATE")
        with pytest.raises(KafkaStorageError, match="lock timeout") as waited:
            store.acquire_lease(holder="c1", now_ms=0, ttl_ms=TTL)
        assert waited.value.retriable
        deadline = time.monotonic() + WAIT_DEADLINE_S
        while True:  # the server ends the paused session after its idle timeout, releasing the lock
            try:
                lease = store.acquire_lease(holder="c1", now_ms=0, ttl_ms=TTL)
                break
            except KafkaStorageError:
                assert time.monotonic() < deadline, "the paused writer's lock was never released"
                time.sleep(0.05)
        assert lease == Lease("c1", 1, TTL)
        with pytest.raises(psycopg.Error):
            paused.execute("SELECT 1")
    finally:
        paused.close()
        store.close()


@pytest.mark.integration
def test_postgresql_a_store_whose_session_was_ended_reconnects_on_the_next_call(postgres_dsn: str) -> None:
    with PostgresMetadataStore(postgres_dsn, application_name="store-under-test") as store:
        epoch = _lease(store).controller_epoch
        with psycopg.connect(postgres_dsn, autocommit=True) as admin:
            ended = admin.execute(
                "SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity "
                "WHERE application_name = 'store-under-test' AND datname = current_database()"
            ).fetchall()
        assert ended == [(True,)]
        with pytest.raises(KafkaStorageError):
            store.append([topic("lost", Uuid.random())], controller_epoch=epoch)
        assert store.append([topic("a", Uuid.random())], controller_epoch=epoch) == 0
        assert _names(store) == ["a"]


@pytest.mark.integration
def test_postgresql_the_password_never_reaches_a_log_line_or_an_error(
    postgres_server: PostgresServer, postgres_dsn: str
) -> None:
    password = postgres_server.password
    unreachable = psycopg.conninfo.make_conninfo(postgres_dsn, port=str(free_port()))
    with structlog.testing.capture_logs() as logs:
        with PostgresMetadataStore(postgres_dsn) as store:
            lease = _lease(store)
            store.append([topic(f"t{i}", Uuid.random()) for i in range(3)], controller_epoch=lease.controller_epoch)
            _damage_postgres(postgres_dsn, 2)
            with pytest.raises(MetadataLogCorrupt):
                list(store.read())
            assert not store.recover().clean
            with pytest.raises(StaleControllerEpoch):
                store.append([topic("late", Uuid.random())], controller_epoch=lease.controller_epoch)
            described = f"{store!r} {store.location}"
        with pytest.raises(KafkaStorageError) as unreachable_error:
            PostgresMetadataStore(unreachable)
    assert logs and password not in repr(logs)
    assert "password=***" in described and password not in described
    assert password not in str(unreachable_error.value)
    with pytest.raises(InvalidArgument) as unparsable:
        PostgresMetadataStore(f"host=127.0.0.1 {password}")
    assert password not in str(unparsable.value) and unparsable.value.__cause__ is None
    for dsn in (postgres_dsn, f"postgresql://postgres:{password}@127.0.0.1:5432/db"):
        assert password not in masked_dsn(dsn) and "***" in masked_dsn(dsn)
