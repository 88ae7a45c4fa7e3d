"""The delete policy end to end, as a user runs it: ``tieredctl tiering disable NAME --policy delete --wait``.

A local cluster as ``cluster up`` makes it (3 brokers, 2 controllers, the embedded S3), one topic of 12 partitions
with 16 KiB segments, produced to until it holds ``SEGMENTS`` segments and tiered until every closed segment is
COPY_SEGMENT_FINISHED (three objects each: about 11,000 objects). Measured: the seconds from starting the CLI
(a new process, as a user types it) to its exit once the topic is DISABLED, every object then gone from the
bucket. References in the same run, on the same endpoint and the same keys (put back, 64 bytes each, after the
disable): ``aws s3 rm --recursive`` of the topic's prefix, and bare DeleteObjects calls of the keys, 1000 a call,
``DEFAULT_CONCURRENCY`` in flight, from one process (:func:`bench.delete_policy.bare_delete`): the endpoint's limit
for one deleter, where ours has three brokers deleting side by side.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.copy import closed_segments, copies_finished
from bench.delete_policy import against_references, aws_cli, bare_delete, put_all
from bench.report import Figure
from orchestrator.client import TieredClient
from orchestrator.local import cluster as lc
from orchestrator.local.state import LocalClusterState
from orchestrator.logging import configure_logging

TOPIC, PARTITIONS = "bulk", 12
SEGMENTS = 3_600
SEGMENT_BYTES = 16 * 1024
VALUE = b"v" * 200
PRODUCE_BATCH = 5_000
TIER_TIMEOUT_S = 900.0


def _fill(state: LocalClusterState, segments: int) -> None:
    per_partition = segments * SEGMENT_BYTES // len(VALUE) // PARTITIONS
    configs = {"segment.bytes": str(SEGMENT_BYTES), "remote.storage.enable": "true", "local.retention.ms": "-1"}

    async def go() -> None:
        async with TieredClient(state.bootstrap_server, timeout_s=300) as c:
            await c.create_topic(TOPIC, partitions=PARTITIONS, configs=configs)
            for i in range(0, per_partition, PRODUCE_BATCH):
                n = min(PRODUCE_BATCH, per_partition - i)
                await asyncio.gather(*(c.produce(TOPIC, [VALUE] * n, partition=p) for p in range(PARTITIONS)))

    asyncio.run(go())


def _tiered(cluster_dir: Path) -> int:
    """Wait until every closed segment of the topic is COPY_SEGMENT_FINISHED; return how many are."""
    deadline = time.monotonic() + TIER_TIMEOUT_S
    closed = len(closed_segments(cluster_dir, TOPIC))
    while (done := len(copies_finished(cluster_dir / "metadata.db"))) < closed:
        if time.monotonic() > deadline:
            raise SystemExit(f"tiering did not finish in {TIER_TIMEOUT_S:g} s: {done} of {closed} segments copied")
        time.sleep(1)
    return done


def _keys(s3: object, bucket: str, prefix: str) -> list[str]:
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)  # type: ignore[attr-defined]
    return [o["Key"] for page in pages for o in page.get("Contents", [])]


def run(segments: int = SEGMENTS) -> list[Figure]:
    aws = aws_cli()
    configure_logging("cli", level=logging.WARNING)  # as the CLI: no connection retries between the tables
    with tempfile.TemporaryDirectory(prefix="tieredctl-bench-delete-") as tmp:
        cluster_dir = Path(tmp)
        state = lc.up(cluster_dir, timeout_s=120)
        try:
            _fill(state, segments)
            copied = _tiered(cluster_dir)
            s3 = lc.s3_client(state)
            keys = _keys(s3, state.bucket, f"{state.prefix}{TOPIC}-")
            topic_prefix = keys[0][: keys[0].index("/", len(state.prefix)) + 1]
            env = {**os.environ, "TIEREDCTL_BOOTSTRAP_SERVER": state.bootstrap_server}
            command = [sys.executable, "-m", "orchestrator.cli", "-o", "json", "tiering", "disable", TOPIC]
            t0 = time.perf_counter()
            done = subprocess.run(
                [*command, "--policy", "delete", "--wait", "--timeout", "600"],
                env=env,
                capture_output=True,
                text=True,
                check=True,
            )
            ours_s = time.perf_counter() - t0
            answer = json.loads(done.stdout)
            left = _keys(s3, state.bucket, topic_prefix)
            assert answer["state"] == "DISABLED" and not left, (answer, len(left))

            access_key, secret_key = state.s3_credentials or ("bench", "bench")
            aws_env = {
                **os.environ,
                "AWS_ACCESS_KEY_ID": access_key,
                "AWS_SECRET_ACCESS_KEY": secret_key,
                "AWS_DEFAULT_REGION": "us-east-1",
            }
            put_all(s3, state.bucket, keys)
            target = f"s3://{state.bucket}/{topic_prefix}"
            t0 = time.perf_counter()
            subprocess.run(
                [aws, "s3", "rm", "--recursive", "--quiet", target, "--endpoint-url", state.s3_endpoint],
                env=aws_env,
                check=True,
            )
            aws_s = time.perf_counter() - t0
            assert not _keys(s3, state.bucket, topic_prefix)

            put_all(s3, state.bucket, keys)
            t0 = time.perf_counter()
            bare_delete(s3, state.bucket, keys)
            bare_s = time.perf_counter() - t0
            assert not _keys(s3, state.bucket, topic_prefix)
        finally:
            lc.down(cluster_dir, purge=True)
    n = len(keys)
    return against_references(
        "Delete policy end to end (local cluster, embedded S3)",
        f"tiering disable --policy delete --wait, CLI start to exit ({copied:,} segments, {n:,} objects, 3 brokers)",
        n,
        ours_s=ours_s,
        aws_s=aws_s,
        bare_s=bare_s,
    )


if __name__ == "__main__":
    run()
