"""Metadata log: append and replay rates for N records (default 1,000,000) on the SQLite store.

Append: the store's ``append`` (encoding, CRC, controller-epoch fence, fence table) in batches of 1000, against
the same encoded bytes inserted into a bare SQLite table with the same pragmas and transaction sizes.
Replay: a follower's first refresh (read + verify + decode + replay into a MetadataImage, and the cycle
collection it defers), against a bare ``SELECT`` of the same rows (the I/O floor) — so each ratio shows what our
layers cost over SQLite itself.
Concurrent appends: 8 threads each append one-record RLMM batches (a broker's copies finishing on several
partitions), group-committed, then again with group commit off (a transaction per append), each against the same
encoded rows inserted one transaction each (a commit per record); each figure names how many transactions the
appends took.
"""

from __future__ import annotations

import gc
import sqlite3
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from bench.report import Figure, peak_rss_mib, print_figures
from orchestrator.ids import Uuid
from orchestrator.metadata.follower import MetadataFollower
from orchestrator.metadata.group_commit import DEFAULT_MAX_GROUP
from orchestrator.metadata.records import MetadataRecord, encode_record, make_record
from orchestrator.metadata.sqlite import SqliteMetadataStore
from remote_storage.rlmm import RemoteSegment, copy_started_record

BATCH = 1000


def cluster_records(n: int) -> Iterator[MetadataRecord]:
    """A realistic mix: per topic a TopicRecord, 12 PartitionRecords, 2 ConfigRecords, a TieredStateRecord."""
    produced = 0
    t = 0
    while produced < n:
        tid = Uuid.random()
        name = f"topic-{t:07d}"
        batch = [make_record("TopicRecord", name=name, topic_id=tid)]
        for p in range(12):
            replicas = [p % 6, (p + 1) % 6, (p + 2) % 6]
            leader_and_isr = {"isr": replicas, "leader": p % 6, "leader_epoch": 0, "partition_epoch": 0}
            partition = make_record(
                "PartitionRecord", partition_id=p, topic_id=tid, replicas=replicas, **leader_and_isr
            )
            batch.append(partition)
        batch += [
            make_record(
                "ConfigRecord", resource_type=2, resource_name=name, name="remote.storage.enable", value="true"
            ),
            make_record("ConfigRecord", resource_type=2, resource_name=name, name="retention.ms", value="604800000"),
            make_record("TieredStateRecord", topic_id=tid, tiered_epoch=1, tiered_state=1, policy=0),
        ]
        yield from batch[: n - produced]
        produced += min(len(batch), n - produced)
        t += 1


APPENDERS, APPENDS_EACH = 8, 250


def _segment_records(topic_id: Uuid, n: int) -> list[MetadataRecord]:
    return [
        copy_started_record(
            RemoteSegment("orders", topic_id, i % 12, Uuid.random(), i * 100, i * 100 + 99, 0, 1 << 20, 1),
            now_ms=0,
        )
        for i in range(n)
    ]


def concurrent_appends(tmp: Path, *, max_group: int = DEFAULT_MAX_GROUP) -> Figure:
    store = SqliteMetadataStore(tmp / f"concurrent-{max_group}.db", max_group_commit=max_group)
    lease = store.acquire_lease(holder="bench", now_ms=0, ttl_ms=3_600_000)
    assert lease is not None
    tid = Uuid.random()
    enabled = make_record("TieredStateRecord", topic_id=tid, tiered_epoch=1, tiered_state=1, policy=0)
    store.append([make_record("TopicRecord", name="orders", topic_id=tid), enabled], controller_epoch=1)
    records = _segment_records(tid, APPENDERS * APPENDS_EACH)
    shares = [records[i::APPENDERS] for i in range(APPENDERS)]
    before = store._group.transactions

    def appender(mine: list[MetadataRecord]) -> None:
        for record in mine:
            store.append_remote_log_metadata([record], now_ms=0)

    threads = [threading.Thread(target=appender, args=(mine,)) for mine in shares]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    grouped_s = time.perf_counter() - t0
    transactions = store._group.transactions - before
    store.close()

    encoded = [encode_record(r) for r in records]
    db = sqlite3.connect(tmp / f"concurrent-raw-{max_group}.db", isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=FULL")
    db.execute("CREATE TABLE rlmm (offset INTEGER PRIMARY KEY, data BLOB NOT NULL)")
    t0 = time.perf_counter()
    for i, data in enumerate(encoded):
        db.execute("BEGIN IMMEDIATE")
        db.execute("INSERT INTO rlmm VALUES (?, ?)", (i, data))
        db.execute("COMMIT")
    raw_s = time.perf_counter() - t0
    db.close()
    n = len(records)
    return Figure(
        f"RLMM append, {APPENDERS} threads x 1-record batches, {'grouped' if max_group > 1 else 'no group commit'} "
        f"({n:,} in {transactions:,} transactions)",
        n / grouped_s,
        "rec/s",
        "bare SQLite, a commit per record",
        n / raw_s,
    )


def run(n: int = 1_000_000) -> list[Figure]:
    records = list(cluster_records(n))
    with tempfile.TemporaryDirectory() as tmp:
        store_path = Path(tmp) / "store.db"
        store = SqliteMetadataStore(store_path)
        lease = store.acquire_lease(holder="bench", now_ms=int(time.time() * 1000), ttl_ms=3_600_000)
        assert lease is not None
        t0 = time.perf_counter()
        for i in range(0, n, BATCH):
            store.append(records[i : i + BATCH], controller_epoch=lease.controller_epoch)
        append_s = time.perf_counter() - t0

        encoded = [encode_record(r) for r in records]
        raw_path = Path(tmp) / "raw.db"
        db = sqlite3.connect(raw_path, isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")
        db.execute("CREATE TABLE log (offset INTEGER PRIMARY KEY, data BLOB NOT NULL)")
        t0 = time.perf_counter()
        for i in range(0, n, BATCH):
            db.execute("BEGIN IMMEDIATE")
            db.executemany("INSERT INTO log VALUES (?, ?)", ((i + j, d) for j, d in enumerate(encoded[i : i + BATCH])))
            db.execute("COMMIT")
        raw_append_s = time.perf_counter() - t0
        del encoded, records

        gc.collect()
        t0 = time.perf_counter()
        image = MetadataFollower(store).refresh()  # what every process does at start
        gc.collect()  # the refresh pauses the cycle collector; the collection it defers is counted here
        replay_s = time.perf_counter() - t0
        assert image.offset == n - 1

        t0 = time.perf_counter()
        rows = sum(1 for _ in db.execute("SELECT offset, data FROM log ORDER BY offset"))
        raw_scan_s = time.perf_counter() - t0
        assert rows == n
        db.close()
        store.close()
        concurrent = [concurrent_appends(Path(tmp)), concurrent_appends(Path(tmp), max_group=1)]
    figures = [
        Figure(f"metadata append ({n:,} records)", n / append_s, "rec/s", "bare SQLite insert", n / raw_append_s),
        Figure(f"metadata replay ({n:,} records)", n / replay_s, "rec/s", "bare SQLite scan", n / raw_scan_s),
        *concurrent,
    ]
    print_figures(f"Metadata log (peak RSS {peak_rss_mib():,.0f} MiB)", figures)
    return figures


if __name__ == "__main__":
    run()
