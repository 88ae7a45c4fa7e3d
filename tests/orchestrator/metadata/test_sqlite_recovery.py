"""Damage to a real SQLite metadata store: detected, reported, repaired, nothing before the damage lost.

Each case damages the files the way a crash or a bad disk does (a truncated database file after a checkpoint, a
truncated or bit-flipped ``-wal`` left by a process killed with SIGKILL, flipped bytes inside a stored record),
then checks that reopening the store reports it, that every record before the damage is intact, and that
appends continue with dense offsets (ARCHITECTURE §4 invariant 8, §10 "a torn write at the end of the log").
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from orchestrator.errors import StaleControllerEpoch
from orchestrator.ids import Uuid
from orchestrator.metadata.records import MetadataRecord, TieredState, encode_record
from orchestrator.metadata.sqlite import SqliteMetadataStore
from orchestrator.metadata.sqlite import salvage as sqlite_salvage
from orchestrator.metadata.store import Lease
from tests.support.metadata_records import copy_started, tiered, topic
from tests.support.store_worker import StoreWorker

pytestmark = pytest.mark.integration

PAGE = 4096
FRAME = 24 + PAGE
TTL = 60_000


def _acquire(store: SqliteMetadataStore, holder: str = "controller-1") -> Lease:
    lease = store.acquire_lease(holder=holder, now_ms=0, ttl_ms=TTL)
    assert lease is not None
    return lease


def _fill(path: Path, batches: int = 30, per_batch: int = 10) -> tuple[list[MetadataRecord], Lease]:
    """A closed (checkpointed) store: RLMM rows and a snapshot first, then ``batches`` appends to the log."""
    written: list[MetadataRecord] = []
    with SqliteMetadataStore(path) as store:
        lease = _acquire(store)
        tid = Uuid.random()
        written += [topic("orders", tid), tiered(tid, 1, TieredState.ENABLED)]
        store.append(written, controller_epoch=lease.controller_epoch)
        store.append_remote_log_metadata([copy_started(tid, 1, start_offset=100 * i) for i in range(20)])
        # At offset 0, the log's first record: saving it deletes nothing (store invariant 7), so the whole log stays.
        store.save_snapshot(offset=0, records=written[:1], controller_epoch=lease.controller_epoch)
        for b in range(batches):
            batch = [topic(f"topic-{b}-{i}", Uuid.random()) for i in range(per_batch)]
            store.append(batch, controller_epoch=lease.controller_epoch)
            written += batch
    assert not Path(f"{path}-wal").exists(), "closing the last connection checkpoints and removes the WAL"
    return written, lease


def _records(store: SqliteMetadataStore) -> list[MetadataRecord]:
    entries = list(store.read())
    assert [e.offset for e in entries] == list(range(len(entries)))
    return [e.record for e in entries]


def _continues_densely(store: SqliteMetadataStore, old: Lease) -> None:
    """After a repair that lost log records the lease is free; a controller re-acquires it at a higher epoch."""
    end = store.end_offset()
    with pytest.raises(StaleControllerEpoch):
        store.append([topic("stale", Uuid.random())], controller_epoch=old.controller_epoch)
    lease = store.acquire_lease(holder="controller-2", now_ms=1, ttl_ms=TTL)
    assert lease is not None and lease.controller_epoch > old.controller_epoch
    assert (
        store.append(
            [topic("after-1", Uuid.random()), topic("after-2", Uuid.random())], controller_epoch=lease.controller_epoch
        )
        == end + 1
    )
    assert [e.offset for e in store.read(from_offset=end)] == [end, end + 1]


def test_a_truncated_database_file_is_salvaged_up_to_the_first_unreadable_record(tmp_path: Path) -> None:
    path = tmp_path / "metadata.db"
    written, lease = _fill(path)
    data = path.read_bytes()
    cut = len(data) - PAGE // 2
    # The records whose bytes lie wholly before the cut, in offset order, are the ones that must survive.
    positions = [data.find(encode_record(r)) for r in written]
    assert all(p >= 0 for p in positions)
    survivors = next((i for i, p in enumerate(positions) if p + len(encode_record(written[i])) > cut), len(written))
    assert 0 < survivors < len(written)
    os.truncate(path, cut)

    with SqliteMetadataStore(path) as store:
        report = store.last_recovery
        assert report is not None and not report.clean
        assert report.integrity_errors, "quick_check must have complained"
        assert report.corrupt_copy is not None and Path(report.corrupt_copy).stat().st_size == cut
        assert report.first_bad_offset == survivors
        assert _records(store) == written[:survivors]
        assert report.log_end_offset == survivors
        assert len(list(store.read_remote_log_metadata())) == 20  # written before the log: on early pages
        snap = store.latest_snapshot()
        assert snap is not None and snap.offset == 0
        assert store.tiered_state(written[0]["topic_id"]) == (1, TieredState.ENABLED)
        _continues_densely(store, lease)

    with SqliteMetadataStore(path) as store:
        assert store.last_recovery is not None and store.last_recovery.clean
        assert store.end_offset() == survivors + 2


def test_an_unreadable_database_file_is_kept_aside_and_the_store_starts_over_reporting_it(tmp_path: Path) -> None:
    path = tmp_path / "metadata.db"
    _fill(path, batches=2)
    with path.open("r+b") as f:
        f.write(b"\xff" * 100)  # the SQLite header: the file is no longer a database

    with SqliteMetadataStore(path) as store:
        report = store.last_recovery
        assert report is not None and not report.clean
        assert report.corrupt_copy is not None and Path(report.corrupt_copy).exists()
        assert any("nothing salvaged" in p for p in report.problems)
        assert store.end_offset() == 0
        lease = _acquire(store)
        assert store.append([topic("fresh", Uuid.random())], controller_epoch=lease.controller_epoch) == 0


def test_flipped_bytes_inside_a_stored_record_cut_the_log_there_and_keep_the_rest_in_quarantine(tmp_path: Path) -> None:
    path = tmp_path / "metadata.db"
    written, lease = _fill(path, batches=5)
    damaged = 17
    data = bytearray(path.read_bytes())
    encoded = encode_record(written[damaged])
    at = data.find(encoded)
    assert at >= 0 and data.find(encoded, at + 1) < 0
    data[at + len(encoded) // 2] ^= 0xFF
    path.write_bytes(bytes(data))

    with SqliteMetadataStore(path) as store:
        report = store.last_recovery
        assert report is not None and not report.clean
        assert report.integrity_errors == ()  # SQLite cannot see it; the record checksum does
        assert (report.first_bad_offset, report.truncated_records) == (damaged, len(written) - damaged)
        assert _records(store) == written[:damaged]
        _continues_densely(store, lease)
    import sqlite3

    with sqlite3.connect(path) as raw:
        quarantined = raw.execute("SELECT offset FROM quarantine WHERE log = 'log' ORDER BY offset").fetchall()
    raw.close()
    assert [o for (o,) in quarantined] == list(range(damaged, len(written)))


def _crashed_writer(path: Path, tmp_path: Path, count: int) -> list[str]:
    """A separate process appends ``count`` single-record transactions, then is killed with SIGKILL."""
    worker = StoreWorker(path, "crashing-controller", log_dir=tmp_path)
    try:
        epoch = worker.call(op="acquire", ttl_ms=1)["lease"][1]
        worker.send(op="append_many", epoch=epoch, count=count, prefix="acked-")
        acked = [worker.read()["acked"] for _ in range(count)]
        assert acked == list(range(count))
        assert worker.read() == {"done": True}
    finally:
        worker.kill()
    assert Path(f"{path}-wal").stat().st_size > 0, "a killed process leaves its WAL behind"
    return [f"acked-{i}" for i in range(count)]


def test_a_truncated_wal_left_by_a_killed_process_loses_only_its_torn_last_transaction(tmp_path: Path) -> None:
    path = tmp_path / "metadata.db"
    names = _crashed_writer(path, tmp_path, count=40)
    wal = Path(f"{path}-wal")
    os.truncate(wal, wal.stat().st_size - 100)  # cut into the last frame: the last commit is torn

    with SqliteMetadataStore(path) as store:
        report = store.last_recovery
        assert report is not None and not report.clean
        assert report.wal_torn_bytes == FRAME - 100
        assert [r["name"] for r in _records(store)] == names[:-1]
        lease = store.acquire_lease(holder="controller-2", now_ms=10**15, ttl_ms=TTL)  # the dead one's expired
        assert lease is not None and lease.controller_epoch == 2
        assert store.append([topic("after", Uuid.random())], controller_epoch=lease.controller_epoch) == len(names) - 1

    with SqliteMetadataStore(path) as store:
        assert store.last_recovery is not None and store.last_recovery.clean


def test_a_damaged_wal_frame_is_reported_and_the_store_continues_from_the_last_good_commit(tmp_path: Path) -> None:
    path = tmp_path / "metadata.db"
    names = _crashed_writer(path, tmp_path, count=40)
    wal = Path(f"{path}-wal")
    frames = (wal.stat().st_size - 32) // FRAME
    with wal.open("r+b") as f:  # flip a byte in the page of a frame a few commits before the end
        f.seek(32 + (frames - 6) * FRAME + 24 + PAGE // 2)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0xFF]))

    with SqliteMetadataStore(path) as store:
        report = store.last_recovery
        assert report is not None and not report.clean
        assert report.wal_ignored_frames >= 6
        kept = [r["name"] for r in _records(store)]
        assert 0 < len(kept) < len(names) and kept == names[: len(kept)]
        lease = store.acquire_lease(holder="controller-2", now_ms=10**15, ttl_ms=TTL)
        assert lease is not None
        assert store.append([topic("after", Uuid.random())], controller_epoch=lease.controller_epoch) == len(kept)


def test_a_salvage_interrupted_before_the_switch_is_finished_on_the_next_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "metadata.db"
    written, _ = _fill(path)
    os.truncate(path, path.stat().st_size - PAGE // 2)
    real_replace = os.replace

    def crash_before_the_switch(src: os.PathLike[str] | str, dst: os.PathLike[str] | str) -> None:
        if str(src).endswith(".salvage-tmp"):
            raise OSError("simulated crash")
        real_replace(src, dst)

    monkeypatch.setattr(sqlite_salvage.os, "replace", crash_before_the_switch)
    with pytest.raises(OSError, match="simulated crash"):
        SqliteMetadataStore(path)
    monkeypatch.setattr(sqlite_salvage.os, "replace", real_replace)
    assert not path.exists() and Path(f"{path}.salvage-tmp").exists()

    with SqliteMetadataStore(path) as store:
        kept = _records(store)
        assert kept and kept == written[: len(kept)]
    assert not Path(f"{path}.salvage-tmp").exists()
    assert len(list(tmp_path.glob("metadata.db.corrupt-*"))) == 1
