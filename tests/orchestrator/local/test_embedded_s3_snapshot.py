"""The embedded S3 as its own process keeps every object across a stop and a start: its bytes, content type, user
metadata, tags and last-modified time, as an S3 client reads them before and after (moto's request handlers are the
judge of what the snapshot took from and put back into moto's backend in the server's process).

Real processes (``python -m orchestrator.local.embedded_s3``), stopped with SIGTERM; no duration is asserted (the
bench of ``cluster down`` at ten thousand objects is in the closing note, not here).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.local.processes import S3_STOP_TIMEOUT_S, start_embedded_s3, stop_process
from orchestrator.local.s3_snapshot import SnapshotStatus, status
from orchestrator.local.state import EMBEDDED_S3_CREDENTIALS, ProcessInfo
from remote_storage.s3 import make_s3_client

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

OBJECTS = 120  # every combination of metadata, content type and tags, in two buckets


def _client(p: ProcessInfo) -> Any:
    key_id, secret = EMBEDDED_S3_CREDENTIALS
    return make_s3_client(endpoint_url=f"http://127.0.0.1:{p.port}", access_key_id=key_id, secret_access_key=secret)


def _everything(client: Any) -> dict[tuple[str, str], dict[str, Any]]:
    """Every object of every bucket as a client sees it: bytes, content type, user metadata, tags, time, ETag."""
    seen: dict[tuple[str, str], dict[str, Any]] = {}
    for bucket in sorted(b["Name"] for b in client.list_buckets()["Buckets"]):
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
            for item in page.get("Contents", []):
                got = client.get_object(Bucket=bucket, Key=item["Key"])
                seen[(bucket, item["Key"])] = {
                    "body": got["Body"].read(),
                    "content_type": got["ContentType"],
                    "metadata": got["Metadata"],
                    "tags": client.get_object_tagging(Bucket=bucket, Key=item["Key"])["TagSet"],
                    "last_modified": got["LastModified"],
                    "etag": got["ETag"],
                }
    return seen


@pytest.fixture
def started(tmp_path: Path) -> Iterator[list[ProcessInfo]]:
    processes: list[ProcessInfo] = []
    try:
        yield processes
    finally:
        for p in processes:
            stop_process(p, timeout_s=S3_STOP_TIMEOUT_S)


def test_a_stop_and_a_start_keep_every_object_as_a_client_reads_it(tmp_path: Path, started: list[ProcessInfo]) -> None:
    snapshots = tmp_path / "s3"
    first = start_embedded_s3(tmp_path / "first.log", snapshot_dir=snapshots)
    started.append(first)
    client = _client(first)
    client.create_bucket(Bucket="tiered")
    client.create_bucket(Bucket="empty-but-kept")
    client.create_bucket(Bucket="other")
    for n in range(OBJECTS):
        extra: dict[str, Any] = {}
        if n % 3 == 0:
            extra["Metadata"] = {"remote-size": str(n), "Mixed-Case": "kept"}
        if n % 5 == 0:
            extra["ContentType"] = "application/x-segment"
        if n % 7 == 0:
            extra["Tagging"] = f"tiered_epoch={n % 4}&topic=orders"
        bucket = "other" if n % 10 == 9 else "tiered"
        client.put_object(Bucket=bucket, Key=f"prefix/{n:05d}/seg.log", Body=bytes([n % 251]) * (n % 97), **extra)
    before = _everything(client)

    stop_process(first, timeout_s=S3_STOP_TIMEOUT_S)
    assert status(snapshots).status is SnapshotStatus.STOPPED and status(snapshots).objects == OBJECTS
    manifest = json.loads((snapshots / str(status(snapshots).snapshot) / "manifest.json").read_text())
    assert sorted(manifest["buckets"]) == ["empty-but-kept", "other", "tiered"]

    second = start_embedded_s3(tmp_path / "second.log", snapshot_dir=snapshots)
    started.append(second)
    client = _client(second)
    assert _everything(client) == before
    assert {b["Name"] for b in client.list_buckets()["Buckets"]} == {"empty-but-kept", "other", "tiered"}
    # It serves on as before: a new object, then a second stop and start keep both generations.
    client.put_object(Bucket="tiered", Key="after/restart", Body=b"new")
    stop_process(second, timeout_s=S3_STOP_TIMEOUT_S)
    third = start_embedded_s3(tmp_path / "third.log", snapshot_dir=snapshots)
    started.append(third)
    after = _everything(_client(third))
    assert after[("tiered", "after/restart")]["body"] == b"new"
    assert {k: v for k, v in after.items() if k != ("tiered", "after/restart")} == before
