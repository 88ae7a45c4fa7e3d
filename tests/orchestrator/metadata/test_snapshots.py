"""Snapshots end to end on each backend: the image round-trips through a snapshot (history included), a follower
starts from the latest snapshot and replays only the tail, a follower left behind the deletion point reloads from
the snapshot, and what reads "the whole log" (the metadata export, salvage) stays right once old records are gone.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from structlog.testing import capture_logs

from orchestrator.ids import Uuid
from orchestrator.metadata.follower import MetadataFollower
from orchestrator.metadata.image import EMPTY_IMAGE, MetadataImage, replay
from orchestrator.metadata.memory_store import InMemoryMetadataStore
from orchestrator.metadata.records import DisablePolicy, MetadataRecord, TieredState, make_record
from orchestrator.metadata.sqlite import SqliteMetadataStore
from orchestrator.metadata.sqlite.salvage import replace_with_salvage
from orchestrator.metadata.store import MetadataStore
from remote_storage.export import export_metadata
from tests.support.metadata_records import remove_topic, tiered, topic

pytestmark = pytest.mark.unit


@pytest.fixture(params=["sqlite", "memory"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MetadataStore]:
    s: MetadataStore = SqliteMetadataStore(tmp_path / "m.db") if request.param == "sqlite" else InMemoryMetadataStore()
    yield s
    s.close()


def _epoch(store: MetadataStore) -> int:
    lease = store.acquire_lease(holder="c1", now_ms=0, ttl_ms=10**9)
    assert lease is not None
    return lease.controller_epoch


def _config(name: str, key: str, value: str) -> MetadataRecord:
    return make_record("ConfigRecord", resource_type=2, resource_name=name, name=key, value=value)


def _history(tid: Uuid) -> list[MetadataRecord]:
    """A topic that went ENABLED -> DISABLING -> DISABLED -> ENABLED."""
    return [
        tiered(tid, 1, TieredState.ENABLED),
        tiered(tid, 2, TieredState.DISABLING, DisablePolicy.RETAIN),
        tiered(tid, 2, TieredState.DISABLED, DisablePolicy.RETAIN),
        tiered(tid, 3, TieredState.ENABLED),
    ]


def _cluster(live: Uuid, gone: Uuid) -> list[MetadataRecord]:
    """A live topic with a tiering history, and a removed one (same name as a later live one) with its own."""
    return [
        topic("gone", gone),
        tiered(gone, 1, TieredState.ENABLED),
        _config("gone", "retention.ms", "1000"),
        remove_topic(gone),
        topic("orders", live),
        *_history(live),
        _config("orders", "retention.ms", "5000"),
        topic("gone", Uuid.random()),
    ]


def _filler(n: int) -> list[MetadataRecord]:
    return [_config("orders", "segment.ms", str(i)) for i in range(n)]


def _full_replay(records: list[MetadataRecord]) -> MetadataImage:
    return replay(EMPTY_IMAGE, enumerate(records))


def _same(a: MetadataImage, b: MetadataImage) -> None:
    assert a.offset == b.offset
    for name in (
        "brokers",
        "topics",
        "topics_by_name",
        "configs",
        "tiered_history",
        "removed_topics",
        "acls",
        "scram_credentials",
    ):
        assert dict(getattr(a, name)) == dict(getattr(b, name)), name


def test_a_snapshot_keeps_removed_topics_and_every_tiered_state_change() -> None:
    live, gone = Uuid.random(), Uuid.random()
    image = _full_replay(_cluster(live, gone))
    again = replay(EMPTY_IMAGE, enumerate(image.to_records()))
    _same(replace(again, offset=image.offset), image)
    assert [c.tiered_epoch for c in image.tiered_history[live]] == [1, 2, 2, 3]
    assert image.removed_topics[gone].name == "gone" and image.removed_topics[gone].configs == {"retention.ms": "1000"}
    assert image.topic_by_name("gone") is not None  # the re-created topic of the same name is live


def test_a_follower_starts_from_the_latest_snapshot_and_replays_only_the_tail(store: MetadataStore) -> None:
    epoch = _epoch(store)
    records = _cluster(Uuid.random(), Uuid.random()) + _filler(40)
    store.append(records, controller_epoch=epoch)
    at = 30
    store.save_snapshot(offset=at, records=_full_replay(records[: at + 1]).to_records(), controller_epoch=epoch)
    assert store.start_offset() == at

    reads: list[int] = []
    real_read = store.read

    def spy(*, from_offset: int = 0, limit: int | None = None) -> Any:
        reads.append(from_offset)
        return real_read(from_offset=from_offset, limit=limit)

    store.read = spy  # type: ignore[method-assign]
    with capture_logs() as logs:
        image = MetadataFollower(store).refresh()
    _same(image, _full_replay(records))
    assert reads == [at + 1]
    loaded = [e for e in logs if e["event"] == "metadata.snapshot_loaded"]
    assert [(e["snapshot_offset"], e["log_start_offset"]) for e in loaded] == [(at, at)]


def test_a_follower_behind_the_deletion_point_reloads_from_the_snapshot(store: MetadataStore) -> None:
    epoch = _epoch(store)
    records = _cluster(Uuid.random(), Uuid.random())
    store.append(records, controller_epoch=epoch)
    follower = MetadataFollower(store)
    assert follower.refresh().offset == len(records) - 1

    # The controller moves on while this follower sleeps: two snapshots, and the records it has not read are gone.
    for _ in range(2):
        records += _filler(25)
        store.append(_filler(25), controller_epoch=epoch)
        offset = len(records) - 1
        store.save_snapshot(offset=offset, records=_full_replay(records).to_records(), controller_epoch=epoch)
    records += _filler(5)
    store.append(_filler(5), controller_epoch=epoch)
    assert store.start_offset() > follower.image.offset + 1

    with capture_logs() as logs:
        image = follower.refresh()

    _same(image, _full_replay(records))
    wanted = ("metadata.follower.reload", "metadata.snapshot_loaded")
    assert [e["event"] for e in logs if e["event"] in wanted] == [
        "metadata.follower.reload",
        "metadata.snapshot_loaded",
    ]


def test_a_follower_that_is_not_behind_keeps_reading_the_tail(store: MetadataStore) -> None:
    epoch = _epoch(store)
    records = _cluster(Uuid.random(), Uuid.random())
    store.append(records, controller_epoch=epoch)
    follower = MetadataFollower(store)
    follower.refresh()
    store.save_snapshot(offset=len(records) - 1, records=_full_replay(records).to_records(), controller_epoch=epoch)
    store.append(_filler(3), controller_epoch=epoch)
    with capture_logs() as logs:
        image = follower.refresh()
    _same(image, _full_replay(records + _filler(3)))
    assert not [e for e in logs if e["event"] in ("metadata.follower.reload", "metadata.snapshot_loaded")]


def test_a_refresh_with_nothing_new_is_the_very_same_image_and_the_next_append_is_read(store: MetadataStore) -> None:
    # callers tell "nothing changed" by identity (a broker's metadata round opens no log for the same image)
    epoch = _epoch(store)
    records = _cluster(Uuid.random(), Uuid.random())
    store.append(records, controller_epoch=epoch)
    follower = MetadataFollower(store)
    first = follower.refresh()
    assert follower.refresh() is first
    store.append(_filler(2), controller_epoch=epoch)
    later = follower.refresh()
    assert later is not first and later.offset == first.offset + 2
    _same(later, _full_replay(records + _filler(2)))


def test_the_export_still_names_deleted_topics_and_past_epochs_once_their_records_are_gone(
    store: MetadataStore, tmp_path: Path
) -> None:
    epoch = _epoch(store)
    live, gone = Uuid.random(), Uuid.random()
    records = _cluster(live, gone) + _filler(5)
    store.append(records, controller_epoch=epoch)
    store.save_snapshot(offset=len(records) - 1, records=_full_replay(records).to_records(), controller_epoch=epoch)
    assert store.start_offset() == len(records) - 1  # TopicRecord, RemoveTopicRecord, TieredStateRecords: gone

    export_metadata(store, tmp_path / "export")

    topics = pq.read_table(tmp_path / "export" / "topics.parquet").to_pylist()
    deleted = [t for t in topics if t["deleted"]]
    assert [(t["topic_id"], t["name"], t["retention_ms"]) for t in deleted] == [(str(gone), "gone", 1000)]
    epochs = {
        (e["topic_id"], e["tiered_epoch"], e["state"])
        for e in pq.read_table(tmp_path / "export" / "epochs.parquet").to_pylist()
    }
    assert {(str(live), 1, "ENABLED"), (str(live), 3, "ENABLED"), (str(gone), 1, "ENABLED")} <= epochs
    assert (str(live), 2, "DISABLED") in epochs


def test_salvage_keeps_a_log_that_starts_behind_a_snapshot(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    tid = Uuid.random()
    records = [topic("orders", tid), *_history(tid), *_filler(10)]
    with SqliteMetadataStore(path) as store:
        epoch = _epoch(store)
        store.append(records, controller_epoch=epoch)
        store.save_snapshot(offset=8, records=_full_replay(records[:9]).to_records(), controller_epoch=epoch)

    salvage, _corrupt = replace_with_salvage(path, clock=lambda: 0.0)

    assert salvage.first_bad is None and not salvage.problems
    with SqliteMetadataStore(path) as store:
        assert store.last_recovery is not None and store.last_recovery.clean
        assert (store.start_offset(), store.end_offset()) == (8, len(records))
        assert store.tiered_state(tid) == (3, TieredState.ENABLED)  # the fence, rebuilt from the snapshot + tail
        _same(MetadataFollower(store).refresh(), _full_replay(records))
