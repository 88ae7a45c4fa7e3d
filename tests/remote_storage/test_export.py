"""The metadata export: topics (live and deleted, KIP-516) and RLMM segments as Parquet with fixed types."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from psycopg.conninfo import conninfo_to_dict
from structlog.testing import capture_logs

from orchestrator.errors import KafkaError
from orchestrator.ids import Uuid
from orchestrator.metadata.open import PASSWORD_ENV
from orchestrator.metadata.postgres import PostgresMetadataStore
from orchestrator.metadata.records import DisablePolicy, SegmentState, TieredState
from orchestrator.metadata.sqlite import SqliteMetadataStore
from orchestrator.metadata.store import MetadataStore
from remote_storage.export import export_metadata, export_store_file, load_export
from remote_storage.export_format import (
    ADDED_SEGMENT_COLUMNS,
    SEGMENTS_FILE,
    TOPICS_FILE,
    segments_schema,
    topics_schema,
)
from remote_storage.rlmm import RemoteLogMetadataManager, RemoteSegment
from remote_storage.segment_format.custom_metadata import SegmentCustomMetadata, encode_custom_metadata
from tests.support.broker_harness import ControllerWriter
from tests.support.rlmm_records import finish_copy

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
        "remote_size": None,  # no custom metadata recorded
        "object_prefix": None,
        "object_key": None,
        "custom_metadata_error": None,
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


# -- Aiven's custom metadata ----------------------------------------------------------------------------------------


def test_custom_metadata_recorded_with_a_finished_copy_is_exported_decoded_and_null_when_absent(tmp_path: Path) -> None:
    store = SqliteMetadataStore(tmp_path / "meta.db")
    try:
        writer = ControllerWriter(store)
        rlmm = RemoteLogMetadataManager(store)
        orders = writer.create_topic("orders", tiered=True)
        every_field, size_only, none = (_segment("orders", orders, i * 10, i * 10 + 9) for i in range(3))
        recorded = SegmentCustomMetadata(remote_size=12_345, object_prefix="old-prefix/", object_key="k/path")
        finish_copy(store, every_field, custom_metadata=encode_custom_metadata(recorded), now_ms=NOW - 3000)
        blob = encode_custom_metadata(SegmentCustomMetadata(remote_size=7))
        finish_copy(store, size_only, custom_metadata=blob, now_ms=NOW - 2000)
        finish_copy(store, none, custom_metadata=None, now_ms=NOW - 1000)
        # A later delete update carries no custom metadata (as Kafka's do not): the segment keeps what it recorded.
        rlmm.transition([every_field], SegmentState.DELETE_SEGMENT_STARTED, broker_id=1, now_ms=NOW)
        result = export_metadata(store, tmp_path / "export")
    finally:
        store.close()

    assert result.custom_metadata_errors == 0
    by_id = {r["segment_id"]: r for r in pq.read_table(result.segments_path).to_pylist()}
    columns = ("remote_size", "object_prefix", "object_key", "custom_metadata_error")
    assert {c: by_id[str(every_field.segment_id)][c] for c in columns} == {
        "remote_size": 12_345,
        "object_prefix": "old-prefix/",
        "object_key": "k/path",
        "custom_metadata_error": None,
    }
    assert by_id[str(every_field.segment_id)]["state"] == "DELETE_SEGMENT_STARTED"
    assert [by_id[str(size_only.segment_id)][c] for c in columns] == [7, None, None, None]
    assert [by_id[str(none.segment_id)][c] for c in columns] == [None, None, None, None]

    _, segments, _ = load_export(tmp_path / "export")
    read_back = {s.segment_id: s for s in segments}[str(every_field.segment_id)]
    assert (read_back.remote_size, read_back.object_prefix, read_back.object_key) == (12_345, "old-prefix/", "k/path")
    assert read_back.recorded_location


@pytest.mark.parametrize(
    ("blob", "why"),
    [
        (b"\x01\x00\x05\x80", "needs 5 bytes"),  # REMOTE_SIZE says 5 bytes, one follows
        (b"\x02\x01\x01\x01\x00\x01\x01", "ascend"),  # tag 0 after tag 1
        (encode_custom_metadata(SegmentCustomMetadata(remote_size=-1)), "negative"),
    ],
)
def test_custom_metadata_that_does_not_decode_is_counted_and_logged_never_a_crash(
    tmp_path: Path, blob: bytes, why: str
) -> None:
    store = SqliteMetadataStore(tmp_path / "meta.db")
    try:
        orders = ControllerWriter(store).create_topic("orders", tiered=True)
        bad, good = _segment("orders", orders, 0, 9), _segment("orders", orders, 10, 19)
        finish_copy(store, bad, custom_metadata=blob, now_ms=NOW)
        finish_copy(store, good, custom_metadata=encode_custom_metadata(SegmentCustomMetadata(9)), now_ms=NOW)
        with capture_logs() as logs:
            result = export_metadata(store, tmp_path / "export")
    finally:
        store.close()

    assert (result.segments, result.custom_metadata_errors) == (2, 1)
    by_id = {r["segment_id"]: r for r in pq.read_table(result.segments_path).to_pylist()}
    row = by_id[str(bad.segment_id)]
    assert (row["remote_size"], row["object_prefix"], row["object_key"]) == (None, None, None)
    assert why in row["custom_metadata_error"]
    assert by_id[str(good.segment_id)]["remote_size"] == 9
    warned = [e for e in logs if e["event"] == "metadata_export.bad_custom_metadata"]
    assert [e["segment_id"] for e in warned] == [str(bad.segment_id)]


def test_an_export_written_before_the_custom_metadata_columns_reads_them_as_null(tmp_path: Path) -> None:
    """The export as the landed code wrote it: segments.parquet without the columns added since."""
    store = SqliteMetadataStore(tmp_path / "meta.db")
    try:
        orders = ControllerWriter(store).create_topic("orders", tiered=True)
        finish_copy(store, _segment("orders", orders, 0, 9), custom_metadata=None, now_ms=NOW)
        result = export_metadata(store, tmp_path / "export")
    finally:
        store.close()
    table = pq.read_table(result.segments_path)
    older = table.drop_columns(list(ADDED_SEGMENT_COLUMNS))
    assert older.num_columns == len(segments_schema()) - len(ADDED_SEGMENT_COLUMNS)
    pq.write_table(older, result.segments_path)

    _, segments, _ = load_export(tmp_path / "export")
    assert len(segments) == 1
    seg = segments[0]
    assert (seg.remote_size, seg.object_prefix, seg.object_key, seg.custom_metadata_error) == (None,) * 4
    assert seg.size_bytes == 1000
