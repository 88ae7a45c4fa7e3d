"""A topic's removal and its partitions' DELETE_PARTITION_MARKED are one store transaction (store invariant 1), on
SQLite and on PostgreSQL: a write that fails after the removal is in the transaction (the RLMM rows refused by the
engine, as a process killed there or a server gone would leave it) leaves neither, and the same append run to its end
leaves both."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest

from orchestrator.errors import KafkaStorageError
from orchestrator.ids import Uuid
from orchestrator.metadata.postgres import PostgresMetadataStore
from orchestrator.metadata.records import MetadataRecord, PartitionDeleteState, TieredState
from orchestrator.metadata.sql.store import SqlMetadataStore
from orchestrator.metadata.sqlite import SqliteMetadataStore
from tests.support.metadata_records import copy_started, partition_delete, remove_topic, tiered, topic


class _FailsAfterTheRemoval:
    """Makes a SQL store's RLMM insert fail while ``failing``: by then the removal's rows are in the transaction."""

    def __init__(self, store: SqlMetadataStore[Any]) -> None:
        self.failing = True
        insert: Callable[..., int] = store._insert_rlmm

        def insert_or_fail(db: Any, records: Sequence[MetadataRecord], encoded: list[bytes], now_ms: int | None) -> int:
            if self.failing and any(r.name == "RemotePartitionDeleteMetadataRecord" for r in records):
                raise KafkaStorageError("the store failed between the removal and the marks")
            return insert(db, records, encoded, now_ms)

        store._insert_rlmm = insert_or_fail  # type: ignore[method-assign]


def _check_removal_is_all_or_nothing(store: SqlMetadataStore[Any]) -> None:
    lease = store.acquire_lease(holder="controller-1", now_ms=0, ttl_ms=3_600_000)
    assert lease is not None
    tid = Uuid.random()
    store.append([topic("orders", tid), tiered(tid, 1, TieredState.ENABLED)], controller_epoch=lease.controller_epoch)
    store.append_remote_log_metadata([copy_started(tid, 1)])
    fault = _FailsAfterTheRemoval(store)
    marked = partition_delete(tid, PartitionDeleteState.DELETE_PARTITION_MARKED)

    def remove() -> int:
        epoch = lease.controller_epoch
        return store.append([remove_topic(tid)], controller_epoch=epoch, remote_log_metadata=[marked], now_ms=7)

    with pytest.raises(KafkaStorageError):
        remove()
    assert [e.record.name for e in store.read()] == ["TopicRecord", "TieredStateRecord"], "no removal without marks"
    assert store.tiered_state(tid) == (1, TieredState.ENABLED)
    assert [e.record.name for e in store.read_remote_log_metadata()] == ["RemoteLogSegmentMetadataRecord"]

    fault.failing = False
    assert remove() == 2
    assert [e.record.name for e in store.read()][-1] == "RemoveTopicRecord" and store.tiered_state(tid) is None
    rlmm = list(store.read_remote_log_metadata())
    assert [(e.record, e.appended_at_ms) for e in rlmm[1:]] == [(marked, 7)], "the removal came with its mark"


@pytest.fixture
def sqlite_store(tmp_path: Any) -> Iterator[SqliteMetadataStore]:
    with SqliteMetadataStore(tmp_path / "metadata.db") as store:
        yield store


@pytest.mark.unit
def test_a_removal_whose_marks_fail_inside_its_transaction_leaves_neither_on_sqlite(
    sqlite_store: SqliteMetadataStore,
) -> None:
    _check_removal_is_all_or_nothing(sqlite_store)


@pytest.mark.integration
def test_a_removal_whose_marks_fail_inside_its_transaction_leaves_neither_on_postgresql(postgres_dsn: str) -> None:
    with PostgresMetadataStore(postgres_dsn) as store:
        _check_removal_is_all_or_nothing(store)
