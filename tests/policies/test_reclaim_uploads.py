"""Incomplete multipart uploads on moto's S3 server: the scan's listing (ListMultipartUploads, ListParts for the
bytes) under its prefixes only, and reclaim's part: a dry run aborts nothing, an upload younger than --older-than or
gone since is skipped, the rest are aborted (AbortMultipartUpload) and gone from the bucket's listing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from policies.reclaim_uploads import GONE, LISTING, TOO_YOUNG, reclaim_uploads
from remote_storage.s3 import S3RemoteStorage
from remote_storage.scan.uploads import list_uploads, read_uploads, write_uploads

pytestmark = pytest.mark.integration

PREFIX = "tiered/"
DAY = 86_400_000


def _begin(s3: Any, bucket: str, key: str, *parts: int) -> str:
    upload_id: str = s3.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
    for number, size in enumerate(parts, start=1):
        s3.upload_part(Bucket=bucket, Key=key, UploadId=upload_id, PartNumber=number, Body=b"p" * size)
    return upload_id


def _open_uploads(s3: Any, bucket: str) -> set[str]:
    return {u["Key"] for u in s3.list_multipart_uploads(Bucket=bucket).get("Uploads", [])}


def test_the_listing_has_every_upload_under_the_prefixes_with_its_bytes_and_age(
    s3_client: Any, bucket: str, tmp_path: Path
) -> None:
    _begin(s3_client, bucket, f"{PREFIX}orders-x/0/a.log", 100, 50)
    _begin(s3_client, bucket, "old-cluster/orders-x/0/b.log", 7)
    _begin(s3_client, bucket, "elsewhere/c.bin", 1)
    rsm = S3RemoteStorage(client=s3_client, bucket=bucket, prefix=PREFIX)
    uploaded = s3_client.list_multipart_uploads(Bucket=bucket)["Uploads"]
    initiated = max(int(u["Initiated"].timestamp() * 1000) for u in uploaded)

    listing = list_uploads(rsm, [PREFIX, "old-cluster/", PREFIX], now_ms=initiated + DAY)
    assert [(u.key, u.parts, u.bytes) for u in listing.uploads] == [
        ("old-cluster/orders-x/0/b.log", 1, 7),
        (f"{PREFIX}orders-x/0/a.log", 2, 150),
    ]
    assert listing.bytes == 157 and listing.prefixes == (PREFIX, "old-cluster/")
    write_uploads(tmp_path, listing)
    assert read_uploads(tmp_path) == listing
    assert all(u["age_ms"] >= DAY for u in listing.as_json()["uploads"])


def test_reclaim_aborts_only_uploads_still_there_and_old_enough_and_only_when_executed(
    s3_client: Any, bucket: str, tmp_path: Path
) -> None:
    stale = f"{PREFIX}orders-x/0/stale.log"
    completed = f"{PREFIX}orders-x/0/completed.log"
    _begin(s3_client, bucket, stale, 10)
    done_id = _begin(s3_client, bucket, completed, 20)
    rsm = S3RemoteStorage(client=s3_client, bucket=bucket, prefix=PREFIX)
    uploaded = s3_client.list_multipart_uploads(Bucket=bucket)["Uploads"]
    now = max(int(u["Initiated"].timestamp() * 1000) for u in uploaded) + DAY
    write_uploads(tmp_path, list_uploads(rsm, [PREFIX], now_ms=now))
    parts = s3_client.list_parts(Bucket=bucket, Key=completed, UploadId=done_id)["Parts"]
    finished = {"Parts": [{"PartNumber": p["PartNumber"], "ETag": p["ETag"]} for p in parts]}
    s3_client.complete_multipart_upload(Bucket=bucket, Key=completed, UploadId=done_id, MultipartUpload=finished)

    def run(older_than_ms: int, execute: bool) -> Any:
        return reclaim_uploads(tmp_path, rsm=rsm, older_than_ms=older_than_ms, execute=execute, now_ms=lambda: now)

    dry = run(0, False)
    assert (dry.listed, dry.planned, dry.planned_bytes, dry.aborted) == (True, 1, 10, 0)
    assert dry.skipped == {GONE: 1} and _open_uploads(s3_client, bucket) == {stale}
    young = run(2 * DAY, True)
    assert young.planned == 0 and young.skipped == {GONE: 1, TOO_YOUNG: 1}
    assert _open_uploads(s3_client, bucket) == {stale}
    executed = run(0, True)
    assert (executed.planned, executed.aborted, executed.aborted_bytes, executed.failed) == (1, 1, 10, {})
    assert _open_uploads(s3_client, bucket) == set()


def test_a_scan_without_a_listing_has_nothing_to_abort(s3_client: Any, bucket: str, tmp_path: Path) -> None:
    rsm = S3RemoteStorage(client=s3_client, bucket=bucket, prefix=PREFIX)
    outcome = reclaim_uploads(tmp_path, rsm=rsm, older_than_ms=0, execute=True, now_ms=lambda: 0)
    assert not outcome.listed and outcome.planned == 0


def test_uploads_that_cannot_be_listed_again_are_a_failure_and_nothing_is_aborted(
    s3_client: Any, bucket: str, tmp_path: Path
) -> None:
    _begin(s3_client, bucket, f"{PREFIX}orders-x/0/a.log", 5)
    write_uploads(tmp_path, list_uploads(S3RemoteStorage(client=s3_client, bucket=bucket), [PREFIX], now_ms=0))
    elsewhere = S3RemoteStorage(client=s3_client, bucket=f"{bucket}-gone", prefix=PREFIX)
    outcome = reclaim_uploads(tmp_path, rsm=elsewhere, older_than_ms=0, execute=True, now_ms=lambda: DAY)
    assert outcome.listed and outcome.aborted == 0 and list(outcome.failed) == [LISTING]
    assert _open_uploads(s3_client, bucket) == {f"{PREFIX}orders-x/0/a.log"}
