"""Delete policy: objects deleted per second, against ``aws s3 rm --recursive`` on the same objects and endpoint.

``make bench``'s delete section has two parts: the delete plan alone, in this process (this module), and the whole
disablement from the CLI on a local cluster (:mod:`bench.delete_end_to_end`).

Both sides delete the same N segments (3 objects each) from one moto server process. Ours runs the real delete
plan: RLMM journaling around each batch, DeleteObjects with up to 999 keys, keys known from the RLMM (no listing).
References in the same run: the AWS CLI, which lists the prefix and deletes with DeleteObjects of 1000 keys (it
lives in its own virtualenv, ``AWS_CLI``, set by ``make bench``, so that its botocore pin never touches ours); and
bare DeleteObjects calls of the same keys, 1000 a call, ``DEFAULT_CONCURRENCY`` in flight (ours runs that many),
from boto3 with no journal: the limit of this endpoint.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench.report import Figure, print_figures
from bench.s3server import moto_server_process
from orchestrator.ids import Uuid
from orchestrator.metadata.records import DisablePolicy, SegmentState, TieredState, make_record
from orchestrator.metadata.sqlite import SqliteMetadataStore
from policies.disable import plan_delete
from policies.disable_executor import execute_delete_plan
from remote_storage.deletion import DEFAULT_CONCURRENCY
from remote_storage.keys import segment_keys, topic_prefix
from remote_storage.rlmm import RemoteLogMetadataManager, RemoteSegment, copy_started_record, update_record
from remote_storage.s3 import S3RemoteStorage, make_s3_client

PREFIX = "tiered/"


def put_all(client: object, bucket: str, keys: list[str]) -> None:
    def put(key: str) -> None:
        client.put_object(Bucket=bucket, Key=key, Body=b"x" * 64)  # type: ignore[attr-defined]

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(put, keys))


def bare_delete(client: object, bucket: str, keys: list[str]) -> None:
    """DeleteObjects of ``keys``, 1000 a call, ``DEFAULT_CONCURRENCY`` calls in flight, with no journal."""

    def delete(chunk: list[str]) -> None:
        resp = client.delete_objects(  # type: ignore[attr-defined]
            Bucket=bucket, Delete={"Objects": [{"Key": k} for k in chunk], "Quiet": True}
        )
        assert not resp.get("Errors"), resp["Errors"][:3]

    with ThreadPoolExecutor(DEFAULT_CONCURRENCY) as pool:
        list(pool.map(delete, [keys[i : i + 1000] for i in range(0, len(keys), 1000)]))


def _count(client: object, bucket: str) -> int:
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket)  # type: ignore[attr-defined]
    return sum(len(p.get("Contents", [])) for p in pages)


def aws_cli() -> str:
    aws = os.environ.get("AWS_CLI") or shutil.which("aws")
    if not aws:
        raise SystemExit("the delete-policy bench needs the AWS CLI: run it through 'make bench'")
    return aws


def run(segments: int = 2000) -> list[Figure]:
    aws = aws_cli()
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "bench")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "bench")
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    with moto_server_process() as endpoint, tempfile.TemporaryDirectory() as tmp:
        client = make_s3_client(endpoint_url=endpoint, max_pool_connections=16)
        bucket = "bench"
        client.create_bucket(Bucket=bucket)
        store = SqliteMetadataStore(Path(tmp) / "store.db")
        lease = store.acquire_lease(holder="bench", now_ms=0, ttl_ms=10**12)
        assert lease is not None
        tid = Uuid.random()
        enabled = make_record(
            "TieredStateRecord", topic_id=tid, tiered_epoch=1, tiered_state=int(TieredState.ENABLED), policy=0
        )
        store.append(
            [make_record("TopicRecord", name="orders", topic_id=tid), enabled], controller_epoch=lease.controller_epoch
        )
        segs = [
            RemoteSegment("orders", tid, i % 12, Uuid.random(), i * 100, i * 100 + 99, 0, 192, 1)
            for i in range(segments)
        ]
        keys = [k for s in segs for k in segment_keys(PREFIX, s.key).values()]
        put_all(client, bucket, keys)
        store.append_remote_log_metadata([copy_started_record(s, now_ms=0) for s in segs])
        store.append_remote_log_metadata(
            [update_record(s, SegmentState.COPY_SEGMENT_FINISHED, broker_id=1, now_ms=0) for s in segs]
        )
        state, policy = int(TieredState.DISABLING), int(DisablePolicy.DELETE)
        disabling = make_record("TieredStateRecord", topic_id=tid, tiered_epoch=2, tiered_state=state, policy=policy)
        store.append([disabling], controller_epoch=lease.controller_epoch)
        rlmm = RemoteLogMetadataManager(store)
        rsm = S3RemoteStorage(client=client, bucket=bucket, prefix=PREFIX)

        t0 = time.perf_counter()
        rlmm.refresh()
        plan = plan_delete(tid, rlmm.segments(tid), {})
        result = execute_delete_plan(
            plan, rsm=rsm, rlmm=rlmm, broker_id=1, now_ms=lambda: 0, advance_log_start=lambda p, o: None
        )
        ours_s = time.perf_counter() - t0
        assert result.complete and result.objects_deleted == len(keys) and _count(client, bucket) == 0

        put_all(client, bucket, keys)
        target = f"s3://{bucket}/{topic_prefix(PREFIX, 'orders', tid)}"
        t0 = time.perf_counter()
        subprocess.run([aws, "s3", "rm", "--recursive", "--quiet", target, "--endpoint-url", endpoint], check=True)
        aws_s = time.perf_counter() - t0
        assert _count(client, bucket) == 0

        put_all(client, bucket, keys)
        t0 = time.perf_counter()
        bare_delete(client, bucket, keys)
        bare_s = time.perf_counter() - t0
        assert _count(client, bucket) == 0
        store.close()
    n = len(keys)
    return against_references(
        "Delete policy on moto's S3 server (separate process)",
        f"delete policy ({n:,} objects, RLMM journaled)",
        n,
        ours_s=ours_s,
        aws_s=aws_s,
        bare_s=bare_s,
    )


def against_references(
    title: str, ours: str, objects: int, *, ours_s: float, aws_s: float, bare_s: float
) -> list[Figure]:
    """Our deletion of ``objects`` beside ``aws s3 rm`` and bare DeleteObjects of the same keys, printed."""
    bare = f"bare DeleteObjects, {DEFAULT_CONCURRENCY} in flight"
    figures = [
        Figure(ours, objects / ours_s, "obj/s", "aws s3 rm --recursive", objects / aws_s),
        Figure(ours, objects / ours_s, "obj/s", bare, objects / bare_s),
    ]
    print_figures(title, figures)
    return figures


if __name__ == "__main__":
    run()
