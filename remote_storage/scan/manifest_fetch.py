"""The manifests the size rule needs, read by the scan's executors: one GET per segment, never on the driver.

The job hands each task rows of :data:`REQUEST_SCHEMA` (a segment and its ``.rsm-manifest`` key) and runs
:func:`fetch_manifests` on them with ``mapPartitions``; the task opens its own boto3 client from the
:class:`~remote_storage.scan.sources.ObjectStoreAccess` shipped with it (as the inventory's data files are read),
GETs each manifest (a few at a time, :data:`GETS_IN_FLIGHT` per task) and yields one :data:`READING_SCHEMA` row per
request: the :class:`~remote_storage.scan.manifest_reading.ManifestReading` of its body.

Invariants:
* Exactly one row out per row in, in any order; nothing else is read (the job decides which segments need it and
  caps how many: see the contract's size rule).
* Every GET goes through the one S3 retry layer (:func:`remote_storage.retry.s3_retrying`). An object that is not
  there is the reading ``gone``; a body over :data:`MAX_MANIFEST_BYTES` is ``unreadable`` (no manifest is that big);
  no credentials raise :class:`~orchestrator.errors.MissingCredentialsError` and any other failure that outlasts the
  retries :class:`~orchestrator.errors.RemoteStorageError` naming the object, both raised on the driver as
  themselves by the job: a scan never judges a size on a guess.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from itertools import islice
from typing import TYPE_CHECKING, Any

import botocore.exceptions as bce

from orchestrator.errors import MissingCredentialsError, RemoteStorageError
from remote_storage.retry import error_code, is_missing_credentials, is_not_found, s3_retrying
from remote_storage.scan.manifest_reading import GONE, UNREADABLE, ManifestReading, read_manifest
from remote_storage.scan.sources import ObjectStoreAccess

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client
else:
    S3Client = Any

REQUEST_SCHEMA = "topic_id string, segment_id string, manifest_key string"
READING_SCHEMA = "topic_id string, segment_id string, m_kind string, m_size bigint, m_detail string"
GETS_IN_FLIGHT = 16
MAX_MANIFEST_BYTES = 64 * 1024 * 1024


def _read_one(client: S3Client, bucket: str, key: str) -> ManifestReading:
    def get() -> bytes:
        body: bytes = client.get_object(Bucket=bucket, Key=key)["Body"].read(MAX_MANIFEST_BYTES + 1)
        return body  # read inside the retried call: a connection reset mid-body is retried too

    try:
        body = s3_retrying()(get)
    except (bce.ClientError, bce.BotoCoreError) as exc:
        if is_not_found(exc):
            return ManifestReading(GONE)
        if is_missing_credentials(exc):
            raise MissingCredentialsError(f"reading the manifest s3://{bucket}/{key}: {exc}") from exc
        code = error_code(exc) if isinstance(exc, bce.ClientError) else type(exc).__name__
        raise RemoteStorageError(f"reading the manifest s3://{bucket}/{key} failed: {code}: {exc}") from exc
    if len(body) > MAX_MANIFEST_BYTES:
        return ManifestReading(UNREADABLE, detail=f"manifest: larger than {MAX_MANIFEST_BYTES} bytes")
    return read_manifest(body)


def fetch_manifests(
    rows: Iterator[tuple[str, str, str]], *, bucket: str, access: ObjectStoreAccess
) -> Iterator[tuple[str, str, str, int | None, str | None]]:
    """``mapPartitions``: :data:`REQUEST_SCHEMA` tuples in, :data:`READING_SCHEMA` tuples out (one per request)."""
    client = access.client()

    def one(row: tuple[str, str, str]) -> tuple[str, str, str, int | None, str | None]:
        topic_id, segment_id, key = row
        reading = _read_one(client, bucket, key)
        return (topic_id, segment_id, reading.kind, reading.transformed_size, reading.detail)

    with ThreadPoolExecutor(max_workers=GETS_IN_FLIGHT, thread_name_prefix="scan-manifest") as pool:
        while batch := list(islice(rows, 4 * GETS_IN_FLIGHT)):  # bounded: never the whole partition at once
            yield from pool.map(one, batch)
