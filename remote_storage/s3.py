"""The S3 RemoteStorageManager: segment upload, ranged fetch and batched deletion through boto3.

The client is passed in (built by :func:`make_s3_client` at an entry point), so tests point it at moto's server
and production at AWS S3, MinIO or Ceph by endpoint URL.

Invariants:
* A segment's objects are written ``.log``, ``.indexes``, then ``.rsm-manifest`` last: a present manifest means
  the whole object set was written. Every object carries the S3 tag ``tieredEpoch=<n>``.
* Large logs go up as multipart uploads; a failed multipart upload is aborted, so no invisible parts stay billed.
* :meth:`S3RemoteStorage.delete_keys` deletes only keys under the prefix it is given (a policy passes its topic
  id's prefix) and refuses the whole call otherwise, before any request is made (ARCHITECTURE §4 invariant 5). It uses
  DeleteObjects with at most 1000 keys per call and reads the per-key errors: retriable ones are retried, a
  missing key counts as deleted (deletion is idempotent), permanent ones are reported, never dropped.
* One retry layer: :mod:`remote_storage.retry` (botocore's own retries are off).
* A client built with ``metrics`` times every HTTP request it makes (each attempt of a retried call) and counts the
  failed ones, by operation, through botocore's ``before-call`` / ``after-call`` / ``after-call-error`` events; an
  :class:`S3RemoteStorage` given ``metrics`` counts the objects it deleted.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import boto3
import botocore.exceptions as bce
import structlog
from botocore.config import Config

from orchestrator.errors import InvalidArgument, MissingCredentialsError, RemoteStorageError
from orchestrator.metrics import RemoteStorageMetrics
from remote_storage.keys import SEGMENT_SUFFIXES, SegmentKey, Suffix, build_key
from remote_storage.retry import error_code, is_missing_credentials, is_not_found, is_retriable_code, s3_retrying

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client
else:
    S3Client = Any

log = structlog.get_logger(__name__)

DELETE_BATCH = 1000  # the S3 limit for DeleteObjects
MIN_PART_SIZE = 5 * 1024 * 1024  # the S3 minimum for every part but the last
TIERED_EPOCH_TAG = "tieredEpoch"


class RemoteObjectNotFound(RemoteStorageError):
    name, retriable = "REMOTE_OBJECT_NOT_FOUND", False


def make_s3_client(
    *,
    endpoint_url: str | None = None,
    region: str = "us-east-1",
    access_key_id: str | None = None,
    secret_access_key: str | None = None,
    connect_timeout: float = 5.0,
    read_timeout: float = 30.0,
    max_pool_connections: int = 32,
    metrics: RemoteStorageMetrics | None = None,
) -> S3Client:
    """A boto3 S3 client with botocore's retries off (our retry layer is :mod:`remote_storage.retry`), its
    requests timed and counted in ``metrics`` when given."""
    config = Config(
        region_name=region,
        retries={"total_max_attempts": 1, "mode": "standard"},
        connect_timeout=connect_timeout,
        read_timeout=read_timeout,
        max_pool_connections=max_pool_connections,
        s3={"addressing_style": "path"},
    )
    session = boto3.session.Session(
        aws_access_key_id=access_key_id, aws_secret_access_key=secret_access_key, region_name=region
    )
    client = session.client("s3", endpoint_url=endpoint_url, config=config)
    if metrics is not None:
        observe_requests(client, metrics)
    return client


_TIMING = "tieredctl_metrics"  # our key in botocore's per-request context: (operation, monotonic start)


def observe_requests(
    client: S3Client, metrics: RemoteStorageMetrics, *, clock: Callable[[], float] = time.monotonic
) -> None:
    """Time every request ``client`` sends and count the failed ones (an S3 error answer, by its code; no answer,
    by the exception's name), by operation (``PutObject``, ``DeleteObjects``...)."""

    def started(model: Any, context: dict[str, Any], **_: Any) -> None:
        context[_TIMING] = (model.name, clock())

    def answered(http_response: Any, parsed: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
        timing = context.pop(_TIMING, None)
        if timing is None:
            return
        code = None
        if http_response.status_code >= 300:
            code = str(parsed.get("Error", {}).get("Code") or http_response.status_code)
        metrics.request_done(timing[0], clock() - timing[1], error_code=code)

    def failed(exception: BaseException, context: dict[str, Any], **_: Any) -> None:
        timing = context.pop(_TIMING, None)
        if timing is not None:
            metrics.request_done(timing[0], clock() - timing[1], error_code=type(exception).__name__)

    events = client.meta.events
    events.register("before-call.s3", started, unique_id="tieredctl-metrics-started")
    events.register("after-call.s3", answered, unique_id="tieredctl-metrics-answered")
    events.register("after-call-error.s3", failed, unique_id="tieredctl-metrics-failed")


@dataclass(frozen=True, slots=True)
class UploadedSegment:
    keys: Mapping[Suffix, str]
    sizes: Mapping[Suffix, int]

    @property
    def total_bytes(self) -> int:
        return sum(self.sizes.values())


@dataclass(frozen=True, slots=True)
class DeleteOutcome:
    deleted: tuple[str, ...] = ()
    failed: Mapping[str, str] = field(default_factory=dict)  # key -> S3 error code, or the failed call's error

    @property
    def ok(self) -> bool:
        return not self.failed


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    key: str
    size: int
    last_modified_ms: int
    etag: str


class _RetriableKeyErrors(Exception):
    """Some keys of a DeleteObjects call failed with retriable errors; the retry layer tries them again."""

    retriable = True


class S3RemoteStorage:
    def __init__(
        self,
        *,
        client: S3Client,
        bucket: str,
        prefix: str = "",
        multipart_threshold: int = 16 * 1024 * 1024,
        part_size: int = 8 * 1024 * 1024,
        sleep: Callable[[float], None] = time.sleep,
        metrics: RemoteStorageMetrics | None = None,
    ) -> None:
        if part_size < MIN_PART_SIZE:
            raise InvalidArgument(f"part_size {part_size} is below S3's minimum of {MIN_PART_SIZE} bytes")
        self.client = client
        self.bucket = bucket
        self.prefix = prefix
        self.multipart_threshold = max(multipart_threshold, part_size)
        self.part_size = part_size
        self._sleep = sleep
        self.metrics = metrics  # counts what is deleted; the client's own requests are timed by make_s3_client

    def _call(self, what: str, fn: Callable[..., Any], **kwargs: Any) -> Any:
        try:
            return s3_retrying(sleep=self._sleep)(fn, **kwargs)
        except (bce.BotoCoreError, bce.ClientError, ConnectionError) as exc:
            raise self._error(what, kwargs.get("Key"), exc) from exc

    def _error(self, what: str, key: str | None, exc: Exception) -> RemoteStorageError | MissingCredentialsError:
        """Our error for a call that failed for good: no credentials, no such object, or a storage failure."""
        if is_missing_credentials(exc):
            return MissingCredentialsError(f"{what} on bucket {self.bucket}: {exc}")
        if is_not_found(exc):
            return RemoteObjectNotFound(f"{what}: {key or ''} not found in {self.bucket}")
        if isinstance(exc, bce.ClientError):
            return RemoteStorageError(f"{what} failed for {key or self.bucket}: {error_code(exc)}: {exc}")
        return RemoteStorageError(f"{what} failed: {type(exc).__name__}: {exc}")

    # -- upload -----------------------------------------------------------------------------------------------

    def copy_segment(
        self,
        segment: SegmentKey,
        *,
        log_file: Path,
        indexes: bytes,
        manifest: Mapping[str, Any],
        tiered_epoch: int,
    ) -> UploadedSegment:
        """Upload one segment's object set, manifest last. Raises RemoteStorageError; the caller cleans up."""
        keys = {s: build_key(self.prefix, segment, s) for s in SEGMENT_SUFFIXES}
        tagging = f"{TIERED_EPOCH_TAG}={tiered_epoch}"
        sizes: dict[Suffix, int] = {}
        sizes[Suffix.LOG] = self._upload_file(keys[Suffix.LOG], log_file, tagging)
        indexes_upload = dict(Bucket=self.bucket, Key=keys[Suffix.INDEXES], Body=indexes, Tagging=tagging)
        self._call("upload indexes", self.client.put_object, **indexes_upload)
        sizes[Suffix.INDEXES] = len(indexes)
        body = json.dumps({**manifest, "tieredEpoch": tiered_epoch}, sort_keys=True).encode()
        manifest_upload = dict(
            Bucket=self.bucket, Key=keys[Suffix.MANIFEST], Body=body, Tagging=tagging, ContentType="application/json"
        )
        self._call("upload manifest", self.client.put_object, **manifest_upload)
        sizes[Suffix.MANIFEST] = len(body)
        log.debug("rsm.segment_copied", key=keys[Suffix.LOG], bytes=sum(sizes.values()), tiered_epoch=tiered_epoch)
        return UploadedSegment(keys, sizes)

    def _upload_file(self, key: str, path: Path, tagging: str) -> int:
        size = path.stat().st_size
        if size < self.multipart_threshold:
            data = path.read_bytes()
            self._call("upload log", self.client.put_object, Bucket=self.bucket, Key=key, Body=data, Tagging=tagging)
            return len(data)
        upload_target = dict(Bucket=self.bucket, Key=key, Tagging=tagging)
        upload = self._call("start multipart upload", self.client.create_multipart_upload, **upload_target)
        upload_id = upload["UploadId"]
        multipart_upload = dict(Bucket=self.bucket, Key=key, UploadId=upload_id)
        try:
            parts = []
            with path.open("rb") as f:
                number = 1
                while chunk := f.read(self.part_size):
                    part = dict(**multipart_upload, PartNumber=number, Body=chunk)
                    resp = self._call("upload part", self.client.upload_part, **part)
                    parts.append({"PartNumber": number, "ETag": resp["ETag"]})
                    number += 1
            completion = dict(**multipart_upload, MultipartUpload={"Parts": parts})
            self._call("complete multipart upload", self.client.complete_multipart_upload, **completion)
        except BaseException:
            try:
                self._call("abort multipart upload", self.client.abort_multipart_upload, **multipart_upload)
            except RemoteStorageError as abort_exc:
                log.error("rsm.multipart_abort_failed", key=key, upload_id=upload_id, error=str(abort_exc))
            raise
        return size

    # -- read -------------------------------------------------------------------------------------------------

    def fetch(self, key: str, *, start: int = 0, end: int | None = None) -> bytes:
        """Bytes ``start..end`` (inclusive, like an HTTP range) of an object; the whole tail if ``end`` is None."""
        rng = f"bytes={start}-" if end is None else f"bytes={start}-{end}"

        def get() -> bytes:
            resp = self.client.get_object(Bucket=self.bucket, Key=key, Range=rng)
            return resp["Body"].read()  # inside the retried call: a reset mid-body is retried too

        data: bytes = self._call("fetch", get)
        return data

    def fetch_manifest(self, segment: SegmentKey) -> dict[str, Any]:
        raw = self.fetch(build_key(self.prefix, segment, Suffix.MANIFEST))
        try:
            doc = json.loads(raw)
        except ValueError as exc:
            raise RemoteStorageError(f"manifest of {segment} is not JSON: {exc}") from exc
        if not isinstance(doc, dict):
            raise RemoteStorageError(f"manifest of {segment} is not a JSON object")
        return doc

    def head(self, key: str) -> ObjectInfo | None:
        try:
            resp = self._call("head", self.client.head_object, Bucket=self.bucket, Key=key)
        except RemoteObjectNotFound:
            return None
        return ObjectInfo(key, resp["ContentLength"], int(resp["LastModified"].timestamp() * 1000), resp["ETag"])

    def tags(self, key: str) -> dict[str, str]:
        resp = self._call("get tagging", self.client.get_object_tagging, Bucket=self.bucket, Key=key)
        return {t["Key"]: t["Value"] for t in resp["TagSet"]}

    def list_objects(self, prefix: str) -> Iterator[ObjectInfo]:
        """Every object under ``prefix``, streamed page by page (memory flat in the number of objects)."""
        token: str | None = None
        while True:
            kwargs: dict[str, Any] = {"Bucket": self.bucket, "Prefix": prefix, "MaxKeys": 1000}
            if token:
                kwargs["ContinuationToken"] = token
            page = self._call("list", self.client.list_objects_v2, **kwargs)
            for o in page.get("Contents", []):
                yield ObjectInfo(o["Key"], o["Size"], int(o["LastModified"].timestamp() * 1000), o["ETag"])
            if not page.get("IsTruncated"):
                return
            token = page["NextContinuationToken"]

    # -- delete -----------------------------------------------------------------------------------------------

    def delete_segment(self, segment: SegmentKey, *, within_prefix: str) -> DeleteOutcome:
        return self.delete_keys(
            [build_key(self.prefix, segment, s) for s in SEGMENT_SUFFIXES], within_prefix=within_prefix
        )

    def delete_keys(self, keys: Sequence[str], *, within_prefix: str) -> DeleteOutcome:
        """Delete ``keys``, all of which must start with ``within_prefix`` (else nothing is deleted)."""
        if not within_prefix or not within_prefix.endswith("/"):
            raise InvalidArgument(f"refusing to delete under prefix {within_prefix!r}: it must be a topic's own prefix")
        outside = [k for k in keys if not k.startswith(within_prefix)]
        if outside:
            raise InvalidArgument(
                f"refusing to delete {len(outside)} key(s) outside {within_prefix!r}, e.g. {outside[0]!r}; "
                "nothing was deleted"
            )
        deleted: list[str] = []
        failed: dict[str, str] = {}
        unique = list(dict.fromkeys(keys))
        for i in range(0, len(unique), DELETE_BATCH):
            d, f = self._delete_batch(unique[i : i + DELETE_BATCH])
            deleted.extend(d)
            failed.update(f)
        if failed:
            log.error("rsm.delete_failed", failed=len(failed), example=next(iter(failed.items())))
        if self.metrics is not None:
            self.metrics.objects_deleted.inc(len(deleted))
        return DeleteOutcome(tuple(deleted), failed)

    def _delete_batch(self, batch: list[str]) -> tuple[list[str], dict[str, str]]:
        remaining = list(batch)
        deleted: list[str] = []
        permanent: dict[str, str] = {}

        def attempt() -> None:
            nonlocal remaining
            resp = self.client.delete_objects(
                Bucket=self.bucket, Delete={"Objects": [{"Key": k} for k in remaining], "Quiet": True}
            )
            errors = {e["Key"]: e.get("Code", "") for e in resp.get("Errors", [])}
            retry: list[str] = []
            for k in remaining:
                code = errors.get(k)
                if code is None or code == "NoSuchKey":
                    deleted.append(k)
                elif is_retriable_code(code):
                    retry.append(k)
                else:
                    permanent[k] = code
            remaining = retry
            if retry:
                raise _RetriableKeyErrors(f"{len(retry)} key(s) failed with retriable errors, e.g. {errors[retry[0]]}")

        try:
            s3_retrying(sleep=self._sleep)(attempt)
        except _RetriableKeyErrors:
            permanent.update({k: "RetriesExhausted" for k in remaining})
        except bce.ClientError as exc:  # the whole call failed: keep its code and its text, the operator's clue
            permanent.update({k: f"{error_code(exc) or 'ClientError'}: {exc}" for k in remaining})
        except (bce.BotoCoreError, ConnectionError) as exc:
            if is_missing_credentials(exc):  # not a per-key failure: nothing can be deleted at all
                raise self._error("delete", None, exc) from exc
            permanent.update({k: f"{type(exc).__name__}: {exc}" for k in remaining})
        return deleted, permanent
