"""``cluster down`` and ``cluster up`` of a local cluster whose embedded S3 holds N objects (default 10,000).

The embedded S3 keeps its objects in memory; ``cluster down`` writes them to ``<cluster>/s3/`` (a snapshot) and
``cluster up`` reads them back before the cluster serves (:mod:`orchestrator.local.s3_snapshot`). Measured: the
seconds of ``lc.down`` and of ``lc.up`` (resume, until healthy) of a 1-broker, 1-controller cluster holding N
objects of ``OBJECT_BYTES`` each (put with boto3 before the clock starts), against the same cluster holding none,
down and up in the same run: the ratio is what the objects add to a stop and a start. Also printed: the objects
counted back after ``up`` (they must all be there) and, as the floor of writing them, a bare copy of the snapshot's
files (``shutil.copytree`` of ``<cluster>/s3/``).
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench.report import Figure, print_figures
from orchestrator.local import cluster as lc
from orchestrator.local.state import STATE_FILE, LocalClusterState
from orchestrator.logging import configure_logging

OBJECT_BYTES = 4096
PUT_THREADS = 8


def _timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _put(state: LocalClusterState, n: int) -> None:
    s3 = lc.s3_client(state)
    body = b"o" * OBJECT_BYTES
    with ThreadPoolExecutor(PUT_THREADS) as pool:
        list(
            pool.map(
                lambda i: s3.put_object(Bucket=state.bucket, Key=f"{state.prefix}bench/{i:06d}", Body=body), range(n)
            )
        )


def _count(state: LocalClusterState) -> int:
    s3 = lc.s3_client(state)
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=state.bucket, Prefix=f"{state.prefix}bench/")
    return sum(len(page.get("Contents", [])) for page in pages)


def run(n: int = 10_000) -> list[Figure]:
    configure_logging("cli", level=logging.WARNING)  # as the CLI: no connection retries between the tables
    with tempfile.TemporaryDirectory(prefix="tieredctl-bench-") as tmp:
        empty, full = Path(tmp) / "empty", Path(tmp) / "full"
        try:
            lc.up(empty, brokers=1, controllers=1, timeout_s=120)
            _put(lc.up(full, brokers=1, controllers=1, timeout_s=120), n)
            empty_down = _timed(lambda: lc.down(empty, timeout_s=300))
            empty_up = _timed(lambda: lc.up(empty, timeout_s=300))
            full_down = _timed(lambda: lc.down(full, timeout_s=300))
            copy_s = _timed(lambda: shutil.copytree(full / "s3", Path(tmp) / "s3-copy"))
            t0 = time.perf_counter()
            resumed = lc.up(full, timeout_s=300)
            full_up = time.perf_counter() - t0
            counted = _count(resumed)
            if counted != n:
                raise AssertionError(f"cluster up restored {counted:,} of {n:,} objects")
        finally:
            for d in (empty, full):
                if (d / STATE_FILE).exists():  # a cluster that did not get as far as starting has nothing to stop
                    lc.down(d, purge=True, timeout_s=300)
    figures = [
        Figure(
            f"cluster down, {n:,} objects in the embedded S3",
            full_down,
            "s",
            "the same, no object",
            empty_down,
            higher_is_better=False,
        ),
        Figure(
            f"cluster up (resume), {n:,} objects", full_up, "s", "the same, no object", empty_up, higher_is_better=False
        ),
        Figure(
            f"cluster down, {n:,} objects",
            full_down,
            "s",
            "bare copy of the snapshot's files",
            copy_s,
            higher_is_better=False,
        ),
    ]
    print_figures(f"Local cluster stop and start ({n:,} objects of {OBJECT_BYTES:,} B, all restored)", figures)
    return figures


if __name__ == "__main__":
    run()
