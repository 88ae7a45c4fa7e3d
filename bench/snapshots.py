"""Metadata snapshots: start-up time (load the image) and store size after N records (default 1,000,000), with
snapshots against the same log without them.

The workload is a steady cluster's: 500 topics of 12 partitions (about 8,000 records of image) and then churn,
leadership moves (PartitionChangeRecord) and config changes (ConfigRecord), up to N records. Both stores receive
the same batches through the store's ``append``; the one with snapshots also gets one every
``SnapshotSettings().every_records`` records, from its image, exactly as the active controller writes them
(keeping ``retained`` and deleting the log below the oldest). Start-up is a fresh :class:`MetadataFollower`'s first
``refresh()`` on a freshly opened store; size is the database file after close (SQLite reuses the pages deleted
records free, so the file stays near its high-water mark instead of growing with the log).
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from bench.report import Figure, peak_rss_mib, print_figures
from orchestrator.ids import Uuid
from orchestrator.metadata.follower import MetadataFollower
from orchestrator.metadata.image import EMPTY_IMAGE, replay
from orchestrator.metadata.records import MetadataRecord, make_record
from orchestrator.metadata.sqlite import SqliteMetadataStore
from orchestrator.settings import SnapshotSettings

BATCH = 10_000
TOPICS = 500
PARTITIONS = 12
BROKERS = 6


def _cluster() -> tuple[list[MetadataRecord], list[Uuid]]:
    records: list[MetadataRecord] = []
    ids: list[Uuid] = []
    for t in range(TOPICS):
        tid = Uuid.random()
        ids.append(tid)
        name = f"topic-{t:05d}"
        records.append(make_record("TopicRecord", name=name, topic_id=tid))
        for p in range(PARTITIONS):
            replicas = [(p + k) % BROKERS for k in range(3)]
            records.append(
                make_record(
                    "PartitionRecord",
                    partition_id=p,
                    topic_id=tid,
                    replicas=replicas,
                    isr=replicas,
                    leader=replicas[0],
                    leader_epoch=0,
                    partition_epoch=0,
                )
            )
        records.append(make_record("ConfigRecord", resource_type=2, resource_name=name, name="retention.ms", value="1"))
    return records, ids


def workload(n: int) -> Iterator[list[MetadataRecord]]:
    """Batches of at most ``BATCH`` records, ``n`` in all: the cluster, then churn."""
    cluster, ids = _cluster()
    produced = 0
    for i in range(0, len(cluster), BATCH):
        batch = cluster[i : i + BATCH][: n - produced]
        produced += len(batch)
        yield batch
    i = 0
    while produced < n:
        batch = []
        for _ in range(min(BATCH, n - produced)):
            tid = ids[i % TOPICS]
            if i % 4 == 3:
                batch.append(
                    make_record(
                        "ConfigRecord",
                        resource_type=2,
                        resource_name=f"topic-{i % TOPICS:05d}",
                        name="retention.ms",
                        value=str(i),
                    )
                )
            else:
                p = (i // TOPICS) % PARTITIONS
                leader = (p + (i // (TOPICS * PARTITIONS)) % 3) % BROKERS
                batch.append(
                    make_record(
                        "PartitionChangeRecord",
                        partition_id=p,
                        topic_id=tid,
                        isr=None,
                        leader=leader,
                        replicas=None,
                    )
                )
            i += 1
        produced += len(batch)
        yield batch


def _size_mib(path: Path) -> float:
    return sum(os.path.getsize(p) for p in (path, Path(f"{path}-wal")) if p.exists()) / (1 << 20)


def _start_up(path: Path) -> tuple[float, int]:
    """Seconds to open the store and load the image (a fresh follower's first refresh), and the image's offset."""
    t0 = time.perf_counter()
    with SqliteMetadataStore(path, recover_on_open=False) as store:
        image = MetadataFollower(store).refresh()
    return time.perf_counter() - t0, image.offset


def run(n: int = 1_000_000) -> list[Figure]:
    settings = SnapshotSettings()
    with tempfile.TemporaryDirectory() as tmp:
        plain_path, snap_path = Path(tmp) / "plain.db", Path(tmp) / "snapshots.db"
        plain, snap = SqliteMetadataStore(plain_path), SqliteMetadataStore(snap_path)
        epochs = []
        for store in (plain, snap):
            lease = store.acquire_lease(holder="bench", now_ms=int(time.time() * 1000), ttl_ms=3_600_000)
            assert lease is not None
            epochs.append(lease.controller_epoch)
        image = EMPTY_IMAGE
        last_snapshot = -1
        snapshots = 0
        t0 = time.perf_counter()
        for batch in workload(n):
            plain.append(batch, controller_epoch=epochs[0])
            snap.append(batch, controller_epoch=epochs[1])
            image = replay(image, enumerate(batch, start=image.offset + 1))
            if image.offset - last_snapshot >= settings.every_records:
                snap.save_snapshot(
                    offset=image.offset,
                    records=image.to_records(),
                    controller_epoch=epochs[1],
                    retain=settings.retained,
                )
                last_snapshot = image.offset
                snapshots += 1
        build_s = time.perf_counter() - t0
        log_start = snap.start_offset()
        plain.close()
        snap.close()

        snap_s, snap_offset = _start_up(snap_path)
        plain_s, plain_offset = _start_up(plain_path)
        assert snap_offset == plain_offset == n - 1
        figures = [
            Figure(
                f"start-up, snapshots every {settings.every_records:,} ({n:,} records)",
                snap_s,
                "s",
                "start-up, whole log replayed",
                plain_s,
                higher_is_better=False,
            ),
            Figure(
                f"store size, snapshots ({n:,} records)",
                _size_mib(snap_path),
                "MiB",
                "store size, no snapshots",
                _size_mib(plain_path),
                higher_is_better=False,
            ),
        ]
    title = (
        f"Metadata snapshots: {snapshots} written, {settings.retained} kept, log from offset {log_start:,} "
        f"(both stores built in {build_s:,.0f} s; peak RSS {peak_rss_mib():,.0f} MiB)"
    )
    print_figures(title, figures)
    return figures


if __name__ == "__main__":
    run()
