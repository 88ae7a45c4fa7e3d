"""Metadata log: append and replay rates for N records (default 1,000,000) on the SQLite store.

Append: the store's ``append`` (encoding, CRC, controller-epoch fence, fence table) in batches of 1000, against
the same encoded bytes inserted into a bare SQLite table with the same pragmas and transaction sizes.
Replay: a follower's first refresh (read + verify + decode + replay into a MetadataImage, and the cycle
collection it defers), against a bare ``SELECT`` of the same rows (the I/O floor) — so each ratio shows what our
layers cost over SQLite itself.
"""

from __future__ import annotations

import gc
import sqlite3
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from bench.report import Figure, peak_rss_mib, print_figures
from orchestrator.ids import Uuid
from orchestrator.metadata.follower import MetadataFollower
from orchestrator.metadata.records import MetadataRecord, encode_record, make_record
from orchestrator.metadata.sqlite import SqliteMetadataStore

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
    figures = [
        Figure(f"metadata append ({n:,} records)", n / append_s, "rec/s", "bare SQLite insert", n / raw_append_s),
        Figure(f"metadata replay ({n:,} records)", n / replay_s, "rec/s", "bare SQLite scan", n / raw_scan_s),
    ]
    print_figures(f"Metadata log (peak RSS {peak_rss_mib():,.0f} MiB)", figures)
    return figures


if __name__ == "__main__":
    run()
