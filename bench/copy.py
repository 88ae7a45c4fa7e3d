"""Tiering copy throughput and copy lag on a real local cluster (separate processes, the embedded S3).

Throughput: 2 topics x 3 partitions on 3 brokers, 16 KiB segments. A backlog is produced with tiering off, then
tiering is turned on for both topics at once (NOT_TIERED -> ENABLED); measured: segments and bytes per second until
the RLMM holds every closed segment COPY_SEGMENT_FINISHED. The brokers write Aiven's object format with its
defaults (one 4 MiB chunk per segment here, compression and encryption off: ``python -m bench remote-format``
measures them on and off). Reference in the same run: bare PutObject calls of the same objects (the three objects
each segment got, read back from the bucket first, three PUTs a segment, as ours uploads) to the same endpoint
from one process, ``BARE_THREADS`` at a time (ours copies one segment at a time per broker: 3 in flight).

Copy lag under a steady produce rate: while a producer writes ``STEADY_RATE`` records/s (200-byte values) to one
tiered partition for ``STEADY_S`` seconds, every second the closed segments on disk that the RLMM does not hold
COPY_SEGMENT_FINISHED yet are counted, with the age of the oldest (since its file was last written, i.e. closed);
printed: the worst of each, against one second of produce (the producer writes each second's records at once) and
that second plus one tiering tick (the broker's default ``tiering_interval_ms``).
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench.report import Figure, print_figures
from orchestrator.client import TieredClient
from orchestrator.local import cluster as lc
from orchestrator.metadata.records import SegmentState
from orchestrator.metadata.sqlite import SqliteMetadataStore
from remote_storage.rlmm import RemoteLogMetadataManager
from remote_storage.s3 import make_s3_client

SEGMENT_BYTES = 16 * 1024
TOPICS, PARTITIONS, BROKERS = 2, 3, 3
RECORDS_PER_PARTITION = 6_000  # 200-byte values: about 80 segments a partition
VALUE = b"v" * 200
BARE_THREADS = BROKERS
STEADY_RATE, STEADY_S = 2_000, 20
TIERING_INTERVAL_S = 0.5  # the broker's default tiering_interval_ms
BROKER = {"broker": {"heartbeat_interval_ms": 500, "metadata_poll_ms": 100}}


def closed_segments(cluster_dir: Path, topic: str) -> list[tuple[Path, Path]]:
    """(log file, index file) of every closed segment of ``topic`` on every broker: all but each partition's last."""
    out = []
    for part_dir in (cluster_dir / "data").glob(f"broker-*/{topic}-*"):
        if not part_dir.is_dir() or part_dir.name.endswith("-stale"):
            continue
        logs = sorted(part_dir.glob("*.log"))
        for log_file in logs[:-1]:
            out.append((log_file, log_file.with_suffix(".index")))
    return out


def copies_finished(store_path: Path) -> set[tuple[str, int, int]]:
    """(topic, partition, start offset) of every COPY_SEGMENT_FINISHED segment."""
    with SqliteMetadataStore(store_path, recover_on_open=False) as store:
        rlmm = RemoteLogMetadataManager(store)
        rlmm.refresh()
        return {
            (s.topic, s.partition, s.start_offset)
            for tid in rlmm.topic_ids()
            for s in rlmm.segments(tid)
            if s.state == SegmentState.COPY_SEGMENT_FINISHED
        }


def _copy_lag(cluster_dir: Path, store_path: Path, topic: str) -> tuple[int, float]:
    """(closed segments of ``topic`` not copied yet, age in seconds of the oldest of them)."""
    copied = copies_finished(store_path)
    behind = [
        log_file
        for log_file, _ in closed_segments(cluster_dir, topic)
        if (topic, int(log_file.parent.name.rsplit("-", 1)[1]), int(log_file.stem)) not in copied
    ]
    oldest = min((f.stat().st_mtime for f in behind), default=time.time())
    return len(behind), time.time() - oldest


def run() -> list[Figure]:
    figures: list[Figure] = []
    with tempfile.TemporaryDirectory(prefix="tieredctl-bench-copy-") as tmp:
        cluster_dir = Path(tmp)
        state = lc.up(cluster_dir, brokers=BROKERS, controllers=1, broker_overrides=BROKER, timeout_s=120)
        try:
            names = [f"copy-{i}" for i in range(TOPICS)]
            configs = {"segment.bytes": str(SEGMENT_BYTES), "local.retention.ms": "-1"}

            async def backlog() -> None:
                async with TieredClient(state.bootstrap_server, timeout_s=120) as c:
                    for n in names:
                        await c.create_topic(n, partitions=PARTITIONS, configs=configs)
                    await asyncio.gather(
                        *(
                            c.produce(n, [VALUE] * RECORDS_PER_PARTITION, partition=p)
                            for n in names
                            for p in range(PARTITIONS)
                        )
                    )

            asyncio.run(backlog())
            closed = [seg for n in names for seg in closed_segments(cluster_dir, n)]
            closed_bytes = sum(log_file.stat().st_size for log_file, _ in closed)
            store_path = cluster_dir / "metadata.db"

            async def tier_all() -> float:
                async with TieredClient(state.bootstrap_server, timeout_s=120) as c:
                    t0 = time.perf_counter()
                    for n in names:
                        await c.enable_tiering(n)
                    while len(await asyncio.to_thread(copies_finished, store_path)) < len(closed):
                        await asyncio.sleep(0.1)
                    return time.perf_counter() - t0

            ours_s = asyncio.run(tier_all())

            credentials = state.s3_credentials
            client = make_s3_client(
                endpoint_url=state.s3_endpoint,
                access_key_id=credentials[0] if credentials else None,
                secret_access_key=credentials[1] if credentials else None,
            )

            uploaded = [
                client.get_object(Bucket=state.bucket, Key=o["Key"])["Body"].read()
                for page in client.get_paginator("list_objects_v2").paginate(Bucket=state.bucket, Prefix=state.prefix)
                for o in page.get("Contents", [])
            ]
            by_segment = [uploaded[i : i + 3] for i in range(0, len(uploaded), 3)]  # keys list a segment's three

            def put(i_objects: tuple[int, list[bytes]]) -> None:
                i, objects = i_objects
                for suffix, body in zip(("indexes", "log", "rsm-manifest"), objects, strict=True):
                    client.put_object(Bucket=state.bucket, Key=f"bare/{i:06d}.{suffix}", Body=body)

            t0 = time.perf_counter()
            with ThreadPoolExecutor(BARE_THREADS) as pool:
                list(pool.map(put, enumerate(by_segment)))
            bare_s = time.perf_counter() - t0

            async def steady() -> tuple[int, float]:
                async with TieredClient(state.bootstrap_server, timeout_s=120) as c:
                    await c.create_topic("steady", partitions=1, configs={**configs, "remote.storage.enable": "true"})
                    worst, oldest = 0, 0.0
                    start = time.monotonic()
                    while time.monotonic() - start < STEADY_S:
                        second = time.monotonic()
                        await c.produce("steady", [VALUE] * STEADY_RATE)
                        behind, age = await asyncio.to_thread(_copy_lag, cluster_dir, store_path, "steady")
                        worst, oldest = max(worst, behind), max(oldest, age if behind else 0.0)
                        await asyncio.sleep(max(0.0, 1.0 - (time.monotonic() - second)))
                    return worst, oldest

            worst_lag, oldest_s = asyncio.run(steady())
        finally:
            lc.down(cluster_dir, purge=True)
    n = len(closed)
    what = f"{TOPICS} topics x {PARTITIONS} partitions, {BROKERS} brokers, {n} segments of 16 KiB"
    reference = f"bare PutObject x3 a segment, {BARE_THREADS} in flight"
    figures.append(Figure(f"tiering copy ({what})", n / ours_s, "segments/s", reference, n / bare_s))
    figures.append(
        Figure("tiering copy bytes", closed_bytes / ours_s / 2**20, "MiB/s", reference, closed_bytes / bare_s / 2**20)
    )
    steady = f"copy lag under {STEADY_RATE:,} records/s for {STEADY_S} s"
    per_second = STEADY_RATE * len(VALUE) / SEGMENT_BYTES  # segments the producer closes each second
    figures.append(
        Figure(
            f"{steady}: closed, not copied (worst)", worst_lag, "segments", "one second of produce", per_second, False
        )
    )
    bound_s = 1.0 + TIERING_INTERVAL_S  # a burst's segments, and the tick that finds them
    figures.append(Figure(f"{steady}: oldest not copied (worst)", oldest_s, "s", "1 s burst + 1 tick", bound_s, False))
    print_figures("Tiering copy (real processes, embedded S3)", figures)
    return figures


if __name__ == "__main__":
    run()
