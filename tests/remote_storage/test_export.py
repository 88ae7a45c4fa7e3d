"""The metadata export: topics (live and deleted, KIP-516) and RLMM segments as Parquet with fixed types."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from psycopg.conninfo import conninfo_to_dict

from orchestrator.errors import KafkaError
from orchestrator.ids import Uuid
from orchestrator.metadata.open import PASSWORD_ENV
from orchestrator.metadata.postgres import PostgresMetadataStore
from orchestrator.metadata.records import DisablePolicy, SegmentState, TieredState
from orchestrator.metadata.sqlite import SqliteMetadataStore
from orchestrator.metadata.store import MetadataStore
from remote_storage.export import export_metadata, export_store_file
from remote_storage.export_format import SEGMENTS_FILE, TOPICS_FILE, segments_schema, topics_schema
from remote_storage.rlmm import RemoteLogMetadataManager, RemoteSegment
from tests.support.broker_harness import ControllerWriter

pytestmark = pytest.mark.integration

NOW = 1_700_000_000_000


def _segment(topic: str, tid: Uuid, start: int, end: int, *, epoch: int = 1, partition: int = 0) -> RemoteSegment:
    return RemoteSegment(
        topic=topic,
        topic_id=tid,
        partition=partition,
        segment_id=Uuid.random(),
        start_offset=start,
        end_offset=end,
        max_timestamp_ms=NOW - 10_000 + start,
        size_bytes=(end - start + 1) * 100,
        tiered_epoch=epoch,
        broker_id=1,
    )


def test_export_has_live_and_deleted_topics_and_every_segment(tmp_path: Path) -> None:
    store = SqliteMetadataStore(tmp_path / "meta.db")
    try:
        writer = ControllerWriter(store)
        rlmm = RemoteLogMetadataManager(store)

        # The first "orders": two segments, then disabled with the delete policy and deleted.
        old = writer.create_topic("orders", configs={"retention.ms": "60000", "local.retention.ms": "0"})
        old_done = _segment("orders", old, 0, 9)
        old_started = _segment("orders", old, 10, 19)
        rlmm.copy_started(old_done, now_ms=NOW - 5000)
        rlmm.copy_started(old_started, now_ms=NOW - 4000)
        rlmm.transition([old_done], SegmentState.COPY_SEGMENT_FINISHED, broker_id=1, now_ms=NOW - 3000)
        writer.set_state(old, TieredState.DISABLING, DisablePolicy.DELETE)
        writer.delete_topic(old)

        # "orders" re-created (a new id) and "clicks", both live.
        new = writer.create_topic("orders", partitions=2, configs={"retention.bytes": "1048576"})
        clicks = writer.create_topic("clicks", configs={"retention.ms": "not-a-number"}, tiered=True)
        new_a = _segment("orders", new, 0, 4, partition=1)
        new_b = _segment("orders", new, 5, 9, partition=1)
        click = _segment("clicks", clicks, 0, 99)
        for seg in (new_a, new_b, click):
            rlmm.copy_started(seg, now_ms=NOW - 2000)
        rlmm.transition([new_a, new_b, click], SegmentState.COPY_SEGMENT_FINISHED, broker_id=1, now_ms=NOW - 1000)
        rlmm.transition([new_a], SegmentState.DELETE_SEGMENT_STARTED, broker_id=1, now_ms=NOW)

        result = export_metadata(store, tmp_path / "export")
    finally:
        store.close()

    assert (result.topics, result.deleted_topics, result.segments) == (3, 1, 5)
    assert result.topics_path == tmp_path / "export" / TOPICS_FILE
    assert result.segments_path == tmp_path / "export" / SEGMENTS_FILE

    topics = pq.read_table(result.topics_path)
    assert topics.schema == topics_schema()
    assert topics.schema.field("tiered_epoch").type == pa.int32()
    assert topics.schema.field("deleted").type == pa.bool_()
    rows = {r["topic_id"]: r for r in topics.to_pylist()}
    assert all(len(tid) == 22 for tid in rows)
    assert rows[str(old)] == {
        "topic_id": str(old),
        "name": "orders",
        "state": "DISABLING",
        "tiered_epoch": 2,
        "policy": "DELETE",
        "retention_ms": 60000,
        "retention_bytes": -1,
        "local_retention_ms": 0,
        "deleted": True,
    }
    assert rows[str(new)] == {
        "topic_id": str(new),
        "name": "orders",
        "state": "ENABLED",
        "tiered_epoch": 1,
        "policy": "NONE",
        "retention_ms": 7 * 24 * 3600 * 1000,
        "retention_bytes": 1048576,
        "local_retention_ms": -2,
        "deleted": False,
    }
    # A config that is not an integer is exported as the default, not dropped.
    assert rows[str(clicks)]["retention_ms"] == 7 * 24 * 3600 * 1000
    assert rows[str(clicks)]["deleted"] is False

    segments = pq.read_table(result.segments_path)
    assert segments.schema == segments_schema()
    assert segments.schema.field("start_offset").type == pa.int64()
    assert segments.schema.field("partition").type == pa.int32()
    by_id = {r["segment_id"]: r for r in segments.to_pylist()}
    assert set(by_id) == {str(s.segment_id) for s in (old_done, old_started, new_a, new_b, click)}
    assert by_id[str(old_done.segment_id)] == {
        "topic_id": str(old),
        "topic": "orders",
        "partition": 0,
        "segment_id": str(old_done.segment_id),
        "start_offset": 0,
        "end_offset": 9,
        "size_bytes": 1000,
        "tiered_epoch": 1,
        "state": "COPY_SEGMENT_FINISHED",
        "max_timestamp_ms": NOW - 10_000,
        "event_timestamp_ms": NOW - 3000,
    }
    assert by_id[str(old_started.segment_id)]["state"] == "COPY_SEGMENT_STARTED"
    assert by_id[str(new_a.segment_id)]["state"] == "DELETE_SEGMENT_STARTED"
    assert by_id[str(new_a.segment_id)]["event_timestamp_ms"] == NOW
    assert (by_id[str(new_b.segment_id)]["topic_id"], by_id[str(new_b.segment_id)]["partition"]) == (str(new), 1)


def test_empty_store_exports_empty_files_with_the_schema(tmp_path: Path) -> None:
    store = SqliteMetadataStore(tmp_path / "meta.db")
    try:
        result = export_metadata(store, tmp_path / "export")
    finally:
        store.close()
    assert (result.topics, result.deleted_topics, result.segments) == (0, 0, 0)
    assert pq.read_table(result.topics_path).schema == topics_schema()
    assert pq.read_table(result.segments_path).num_rows == 0
    assert pq.read_table(result.segments_path).schema == segments_schema()


def test_exporting_a_store_file_never_rewrites_it_even_one_recovery_would_cut(tmp_path: Path) -> None:
    """The scan and reclaim export a live cluster's store: as readers, never as the process that recovers it."""
    from orchestrator.metadata.records import encode_record

    path = tmp_path / "metadata.db"
    store = SqliteMetadataStore(path)
    try:
        writer = ControllerWriter(store)
        for name in ("a", "b", "c"):
            writer.create_topic(name)
        record = next(iter(store.read(from_offset=1, limit=1))).record
    finally:
        store.close()
    data = bytearray(path.read_bytes())
    encoded = encode_record(record)
    at = data.find(encoded)
    assert at >= 0
    data[at + len(encoded) // 2] ^= 0xFF  # a record whose checksum no longer matches: recovery would cut it
    path.write_bytes(bytes(data))
    before = path.read_bytes()
    with contextlib.suppress(KafkaError):  # refusing to export a damaged log is fine; changing it is not
        export_store_file(path, tmp_path / "export")
    assert path.read_bytes() == before
    assert not Path(f"{path}-wal").exists() or Path(f"{path}-wal").stat().st_size == 0


def _fill(store: MetadataStore) -> None:
    writer = ControllerWriter(store)
    rlmm = RemoteLogMetadataManager(store)
    old = writer.create_topic("orders", configs={"retention.ms": "60000"})
    rlmm.copy_started(_segment("orders", old, 0, 9), now_ms=NOW - 5000)
    writer.delete_topic(old)
    clicks = writer.create_topic("clicks", tiered=True)
    done = _segment("clicks", clicks, 0, 99)
    rlmm.copy_started(done, now_ms=NOW - 2000)
    rlmm.transition([done], SegmentState.COPY_SEGMENT_FINISHED, broker_id=1, now_ms=NOW - 1000)


def test_a_postgresql_store_named_by_its_url_exports_what_the_same_records_export_from_sqlite(
    tmp_path: Path, postgres_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The scan and reclaim export a cluster's metadata from its store's spec: a PostgreSQL URL works like a SQLite
    file, the password coming from a file (a local cluster's ``config/store-password``) or the environment."""
    sqlite = SqliteMetadataStore(tmp_path / "meta.db")
    try:
        _fill(sqlite)
    finally:
        sqlite.close()
    with PostgresMetadataStore(postgres_dsn) as pg:
        _fill(pg)
    info = conninfo_to_dict(postgres_dsn)
    url = f"postgresql://{info['user']}@{info['host']}:{info['port']}/{info['dbname']}"
    monkeypatch.delenv("PGPASSWORD", raising=False)
    monkeypatch.delenv(PASSWORD_ENV, raising=False)
    with pytest.raises(KafkaError):  # no password anywhere: refused by the server, nothing exported
        export_store_file(url, tmp_path / "refused")
    (tmp_path / "password").write_text(f"{info['password']}\n")
    from_file = export_store_file(url, tmp_path / "pg-file", password_file=tmp_path / "password")
    monkeypatch.setenv(PASSWORD_ENV, str(info["password"]))
    from_env = export_store_file(url, tmp_path / "pg-env")
    from_sqlite = export_store_file(tmp_path / "meta.db", tmp_path / "sqlite")
    for result in (from_file, from_env):
        assert (result.topics, result.deleted_topics, result.segments) == (2, 1, 2)
        for name in (TOPICS_FILE, SEGMENTS_FILE):
            assert _rows(result.topics_path.parent / name) == _rows(from_sqlite.topics_path.parent / name)


def _rows(path: Path) -> list[str]:
    """A Parquet file's rows without the (random) ids, in a stable order."""
    table = pq.read_table(path)
    kept = table.drop_columns([c for c in table.column_names if "id" in c])
    return sorted(repr(sorted(row.items())) for row in kept.to_pylist())
