"""The S3 RemoteStorageManager: segment upload, ranged fetch and batched deletion through boto3.

The client is passed in (built by :func:`make_s3_client` at an entry point), so tests point it at moto's server
and production at AWS S3, MinIO or Ceph by endpoint URL. A long-running process that may never call S3 (a broker
with no tiered topic) takes :func:`lazy_s3_client`: its settings are checked at once, as the client would check
them, and the client (about 0.15 s of CPU to build, most of it reading botocore's S3 model) is built on first use.
botocore itself (about 0.1 s more to import) is imported when the first client is built: until then no exception
can be one of botocore's, and this module and :mod:`remote_storage.retry` tell them apart through
:func:`~remote_storage.retry.botocore_errors`, which names none while botocore is not loaded.

A segment is written as Aiven's RemoteStorageManager writes it (:mod:`remote_storage.segment_format`, settings in
:class:`~remote_storage.object_format.ObjectFormat`): the ``.log`` in chunks, each zstd-compressed and/or
AES-GCM-encrypted when so configured; the ``.indexes`` with the five indexes; the ``.rsm-manifest`` as
``SegmentManifestV1`` JSON; and, when configured, Aiven's custom metadata for the RLMM's COPY_SEGMENT_FINISHED
record. Reading a segment back by ranges is :mod:`remote_storage.remote_segments`.

Invariants:
* A segment's objects are written ``.log``, ``.indexes``, then ``.rsm-manifest`` last: a present manifest means
  the whole object set was written. Every object carries the S3 tag ``tieredEpoch=<n>``, our tiered epoch, which
  is never written into the manifest (Aiven's reader refuses a member it does not know).
* The ``.log`` is streamed: read a chunk at a time, transformed, and sent as the parts of a multipart upload once
  it outgrows ``multipart_threshold``, so memory holds about one part and one chunk, whatever the segment's size.
  A failed multipart upload is aborted, so no invisible parts stay billed.
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

import contextlib
import functools
import ipaddress
import os
import re
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import structlog
from tenacity import Retrying

from orchestrator.errors import InvalidArgument, MissingCredentialsError, RemoteStorageError
from orchestrator.metrics import RemoteStorageMetrics
from remote_storage.keys import SEGMENT_SUFFIXES, SegmentKey, Suffix, build_key
from remote_storage.object_format import DEFAULT_OBJECT_FORMAT, ChunkedLog, ObjectFormat
from remote_storage.retry import (
    S3_MAX_ATTEMPTS,
    botocore_errors,
    call_errors,
    error_code,
    is_missing_credentials,
    is_not_found,
    is_retriable_code,
    s3_retrying,
)
from remote_storage.segment_format.custom_metadata import build_custom_metadata, encode_custom_metadata
from remote_storage.segment_format.encryption import RandomBytes
from remote_storage.segment_format.kafka_metadata import RemoteLogSegmentMetadata
from remote_storage.segment_format.manifest import SegmentManifestV1, manifest_to_json, wrap_encryption
from remote_storage.segment_format.object_keys import main_path
from remote_storage.segment_format.segment_indexes import SegmentIndexFiles, build_indexes_object
from remote_storage.segment_format.transform import ChunkTransforms

if TYPE_CHECKING:
    import botocore.loaders
    from mypy_boto3_s3 import S3Client
else:
    S3Client = Any

log = structlog.get_logger(__name__)

DELETE_BATCH = 1000  # the S3 limit for DeleteObjects
MIN_PART_SIZE = 5 * 1024 * 1024  # the S3 minimum for every part but the last
TIERED_EPOCH_TAG = "tieredEpoch"


class RemoteObjectNotFound(RemoteStorageError):
    name, retriable = "REMOTE_OBJECT_NOT_FOUND", False


_LOADER_LOCK = threading.Lock()
_loader: botocore.loaders.Loader | None = None


def _shared_loader() -> botocore.loaders.Loader:
    """One loader of botocore's service models per process: each client gets a session of its own (credentials are
    resolved per client, as before), but the models are read and parsed once, not for every client (a fresh
    session's loader takes about 0.2 s to build an S3 client; brokers, the scan's executors and tests make many)."""
    import botocore.loaders

    global _loader
    with _LOADER_LOCK:
        if _loader is None:
            _loader = botocore.loaders.create_loader()
        return _loader


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
    requests timed and counted in ``metrics`` when given. botocore is imported here, when the first client is built
    (see :func:`remote_storage.retry.botocore_errors`)."""
    import botocore.session
    from botocore.config import Config

    config = Config(
        region_name=region,
        retries={"total_max_attempts": 1, "mode": "standard"},
        connect_timeout=connect_timeout,
        read_timeout=read_timeout,
        max_pool_connections=max_pool_connections,
        s3={"addressing_style": "path"},
    )
    session = botocore.session.Session()  # its own credentials, resolved as AWS resolves them
    session.register_component("data_loader", _shared_loader())
    client = cast(
        "S3Client",
        session.create_client(
            "s3",
            region_name=region,
            endpoint_url=endpoint_url,
            aws_access_key_id=access_key_id,
            aws_secret_access_key=secret_access_key,
            config=config,
        ),
    )
    if metrics is not None:
        observe_requests(client, metrics)
    return client


def check_client_settings(*, endpoint_url: str | None, region: str) -> None:
    """Refuse, with :class:`InvalidArgument` naming the value, an endpoint URL or a region the client would refuse
    when built: botocore's rules, written here so that botocore is not imported for them (tests hold the two
    together). An empty region, which botocore lets through until the first request fails, is refused too."""
    if endpoint_url is not None and not _is_endpoint_url(endpoint_url):
        raise InvalidArgument(f"endpoint_url {endpoint_url!r} is not a URL with a host, e.g. http://127.0.0.1:9000")
    if not _REGION.fullmatch(region):
        raise InvalidArgument(f"region {region!r} is not a region name (a host label, e.g. us-east-1)")


_HOST_LABEL = re.compile(r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?")
_REGION = re.compile(r"(?![0-9]+$)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?")  # a host label, not all digits


def _is_endpoint_url(url: str) -> bool:
    """A URL whose host is an IPv6 address, or a DNS name of host labels (an IPv4 address is one): what the client
    accepts as an endpoint (tests/remote_storage/test_lazy_s3_client.py holds this to botocore's own check)."""
    if any(c in url for c in "\t\r\n"):
        return False
    try:
        host = urllib.parse.urlsplit(url).hostname
    except ValueError:  # e.g. an unclosed IPv6 bracket
        return False
    if not host:
        return False
    with contextlib.suppress(ValueError):
        ipaddress.IPv6Address(host)
        return True
    name = host[:-1] if host.endswith(".") else host
    return len(name) <= 255 and all(_HOST_LABEL.fullmatch(label) for label in name.split("."))


class LazyS3Client:
    """An S3 client built by ``make`` on first use (any attribute: a call, ``meta``, ``exceptions``), once, whichever
    thread comes first; the others wait for it. A ``make`` that raises is raised to that caller, and the next use
    tries again."""

    def __init__(self, make: Callable[[], S3Client]) -> None:
        self._make = make
        self._lock = threading.Lock()
        self._client: S3Client | None = None

    @property
    def built(self) -> bool:
        return self._client is not None

    def __getattr__(self, name: str) -> Any:
        client = self._client
        if client is None:
            with self._lock:
                if self._client is None:
                    self._client = self._make()
                client = self._client
        return getattr(client, name)


def lazy_s3_client(*, endpoint_url: str | None = None, region: str = "us-east-1", **options: Any) -> S3Client:
    """:func:`make_s3_client`'s client with the same arguments, built on first use; the endpoint URL and the
    region are checked now (:func:`check_client_settings`)."""
    check_client_settings(endpoint_url=endpoint_url, region=region)
    make = functools.partial(make_s3_client, endpoint_url=endpoint_url, region=region, **options)
    return cast("S3Client", LazyS3Client(make))


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
    manifest: SegmentManifestV1
    # Aiven's custom metadata for the COPY_SEGMENT_FINISHED record (the fields ObjectFormat includes), or None
    custom_metadata: bytes | None = None

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


@dataclass(frozen=True, slots=True)
class IncompleteUpload:
    """A multipart upload begun and neither completed nor aborted (ListMultipartUploads): its parts take space that
    no listing of objects (or inventory) shows, until it is aborted."""

    key: str
    upload_id: str
    initiated_ms: int
    parts: int
    bytes: int  # the parts' sizes added up (ListParts)


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
        object_format: ObjectFormat = DEFAULT_OBJECT_FORMAT,
        random_bytes: RandomBytes = os.urandom,
        late_write_window_ms: int = 0,
        max_attempts: int = S3_MAX_ATTEMPTS,
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
        self.object_format = object_format
        self._random_bytes = random_bytes  # data keys, AADs and IVs
        # How long a PUT this client gave up on may still land (remote_storage.deletion: the late-write window).
        self.late_write_window_ms = late_write_window_ms
        if max_attempts < 1:
            raise InvalidArgument(f"max_attempts must be >= 1, got {max_attempts}")
        self.max_attempts = max_attempts  # of every call (the retry layer: remote_storage.retry)

    def _retrying(self) -> Retrying:
        return s3_retrying(sleep=self._sleep, max_attempts=self.max_attempts)

    def _call(self, what: str, fn: Callable[..., Any], **kwargs: Any) -> Any:
        try:
            return self._retrying()(fn, **kwargs)
        except call_errors("BotoCoreError", "ClientError") as exc:
            raise self._error(what, kwargs.get("Key"), exc) from exc

    def _error(self, what: str, key: str | None, exc: Exception) -> RemoteStorageError | MissingCredentialsError:
        """Our error for a call that failed for good: no credentials, no such object, or a storage failure."""
        if is_missing_credentials(exc):
            return MissingCredentialsError(f"{what} on bucket {self.bucket}: {exc}")
        if is_not_found(exc):
            return RemoteObjectNotFound(f"{what}: {key or ''} not found in {self.bucket}")
        if isinstance(exc, botocore_errors("ClientError")):
            return RemoteStorageError(f"{what} failed for {key or self.bucket}: {error_code(exc)}: {exc}")  # type: ignore[arg-type]
        return RemoteStorageError(f"{what} failed: {type(exc).__name__}: {exc}")

    # -- upload -----------------------------------------------------------------------------------------------

    def copy_segment(
        self,
        segment: SegmentKey,
        *,
        log_file: Path,
        index_files: SegmentIndexFiles,
        metadata: RemoteLogSegmentMetadata,
        tiered_epoch: int,
    ) -> UploadedSegment:
        """Upload one segment's object set in Aiven's format, manifest last, each object tagged with
        ``tiered_epoch``. Raises RemoteStorageError (or OSError reading ``log_file``); the caller cleans up."""
        fmt = self.object_format
        keys = {s: build_key(self.prefix, segment, s) for s in SEGMENT_SUFFIXES}
        tagging = f"{TIERED_EPOCH_TAG}={tiered_epoch}"
        data_key = fmt.new_data_key(self._random_bytes)
        transforms = ChunkTransforms(compression=fmt.compression, encryption=data_key)
        chunked = ChunkedLog(chunk_size=fmt.chunk_size, transforms=transforms, random_bytes=self._random_bytes)
        sizes: dict[Suffix, int] = {}
        sizes[Suffix.LOG] = self._upload_chunks(keys[Suffix.LOG], log_file, chunked, tagging)
        indexes = build_indexes_object(index_files, encryption_key=data_key, random_bytes=self._random_bytes)
        indexes_upload = dict(Bucket=self.bucket, Key=keys[Suffix.INDEXES], Body=indexes.body, Tagging=tagging)
        self._call("upload indexes", self.client.put_object, **indexes_upload)
        sizes[Suffix.INDEXES] = len(indexes.body)
        encryption = None
        if data_key is not None and fmt.key_ring is not None:
            encryption = wrap_encryption(data_key, fmt.key_ring, random_bytes=self._random_bytes)
        manifest = SegmentManifestV1(chunked.chunk_index(), indexes.indexes, fmt.compression, encryption, metadata)
        body = manifest_to_json(manifest).encode("utf-8")
        manifest_upload = dict(
            Bucket=self.bucket, Key=keys[Suffix.MANIFEST], Body=body, Tagging=tagging, ContentType="application/json"
        )
        self._call("upload manifest", self.client.put_object, **manifest_upload)
        sizes[Suffix.MANIFEST] = len(body)
        custom = None
        if fmt.custom_metadata_fields:
            uploaded = {suffix.value: size for suffix, size in sizes.items()}
            fields = build_custom_metadata(
                fmt.custom_metadata_fields,
                uploaded_bytes=uploaded,
                object_prefix=self.prefix,
                object_key=main_path(segment),
            )
            custom = encode_custom_metadata(fields)
        log.debug("rsm.segment_copied", key=keys[Suffix.LOG], bytes=sum(sizes.values()), tiered_epoch=tiered_epoch)
        return UploadedSegment(keys, sizes, manifest, custom)

    def _upload_chunks(self, key: str, path: Path, chunked: ChunkedLog, tagging: str) -> int:
        """Upload ``path`` as ``chunked`` stores it, read a chunk at a time: one PutObject while it fits under
        ``multipart_threshold``, else the parts of a multipart upload as they fill up. Returns the bytes stored."""
        buffer = bytearray()
        upload_id: str | None = None
        parts: list[dict[str, Any]] = []

        def send_part(data: bytes) -> None:
            nonlocal upload_id
            if upload_id is None:
                upload = self._call("start multipart upload", self.client.create_multipart_upload, **target)
                upload_id = upload["UploadId"]
            number = len(parts) + 1
            part = dict(Bucket=self.bucket, Key=key, UploadId=upload_id, PartNumber=number, Body=data)
            resp = self._call("upload part", self.client.upload_part, **part)
            parts.append({"PartNumber": number, "ETag": resp["ETag"]})

        target = dict(Bucket=self.bucket, Key=key, Tagging=tagging)
        try:
            with path.open("rb") as f:
                while chunk := f.read(chunked.chunk_size):
                    buffer += chunked.stored(chunk)
                    while len(buffer) >= self.part_size and (
                        upload_id is not None or len(buffer) >= self.multipart_threshold
                    ):
                        send_part(bytes(buffer[: self.part_size]))
                        del buffer[: self.part_size]
            if upload_id is None:
                self._call("upload log", self.client.put_object, **target, Body=bytes(buffer))
                return chunked.stored_size
            if buffer:
                send_part(bytes(buffer))
            completion = dict(Bucket=self.bucket, Key=key, UploadId=upload_id, MultipartUpload={"Parts": parts})
            self._call("complete multipart upload", self.client.complete_multipart_upload, **completion)
        except BaseException:
            if upload_id is not None:
                aborted = dict(Bucket=self.bucket, Key=key, UploadId=upload_id)
                try:
                    self._call("abort multipart upload", self.client.abort_multipart_upload, **aborted)
                except RemoteStorageError as abort_exc:
                    log.error("rsm.multipart_abort_failed", key=key, upload_id=upload_id, error=str(abort_exc))
            raise
        return chunked.stored_size

    # -- read -------------------------------------------------------------------------------------------------

    def fetch(self, key: str, *, start: int = 0, end: int | None = None) -> bytes:
        """Bytes ``start..end`` (inclusive, like an HTTP range) of an object; the whole tail if ``end`` is None."""
        rng = f"bytes={start}-" if end is None else f"bytes={start}-{end}"

        def get() -> bytes:
            resp = self.client.get_object(Bucket=self.bucket, Key=key, Range=rng)
            return resp["Body"].read()  # inside the retried call: a reset mid-body is retried too

        data: bytes = self._call("fetch", get)
        return data

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

    # -- incomplete multipart uploads -------------------------------------------------------------------------

    def incomplete_uploads(self, prefix: str) -> Iterator[IncompleteUpload]:
        """Every multipart upload under ``prefix`` not completed or aborted, with its parts' bytes (all pages of
        ListMultipartUploads, and of ListParts for each)."""
        markers: dict[str, str] = {}
        while True:
            page = self._call(
                "list uploads", self.client.list_multipart_uploads, Bucket=self.bucket, Prefix=prefix, **markers
            )
            for u in page.get("Uploads", []):
                parts, size = self._parts(u["Key"], u["UploadId"])
                yield IncompleteUpload(u["Key"], u["UploadId"], int(u["Initiated"].timestamp() * 1000), parts, size)
            if not page.get("IsTruncated"):
                return
            markers = {"KeyMarker": page["NextKeyMarker"], "UploadIdMarker": page["NextUploadIdMarker"]}

    def _parts(self, key: str, upload_id: str) -> tuple[int, int]:
        parts = size = 0
        marker: dict[str, int] = {}
        while True:
            page = self._call(
                "list parts", self.client.list_parts, Bucket=self.bucket, Key=key, UploadId=upload_id, **marker
            )
            for part in page.get("Parts", []):
                parts += 1
                size += int(part["Size"])
            if not page.get("IsTruncated"):
                return parts, size
            marker = {"PartNumberMarker": int(page["NextPartNumberMarker"])}

    def abort_upload(self, key: str, upload_id: str, *, within_prefix: str) -> bool:
        """Abort one multipart upload (its parts are freed); ``key`` must start with ``within_prefix``. False when
        the upload was gone already (NoSuchUpload: completed or aborted since)."""
        if not key.startswith(within_prefix):
            raise InvalidArgument(f"the upload of {key} is not under {within_prefix!r}: not aborted")
        abort = self.client.abort_multipart_upload
        try:
            self._retrying()(abort, Bucket=self.bucket, Key=key, UploadId=upload_id)
        except botocore_errors("ClientError") as exc:
            if error_code(exc) == "NoSuchUpload":  # type: ignore[arg-type]
                return False
            raise self._error("abort upload", key, exc) from exc
        except call_errors("BotoCoreError") as exc:
            raise self._error("abort upload", key, exc) from exc
        return True

    # -- delete -----------------------------------------------------------------------------------------------

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
            self._retrying()(attempt)
        except _RetriableKeyErrors:
            permanent.update({k: "RetriesExhausted" for k in remaining})
        except botocore_errors(
            "ClientError"
        ) as exc:  # the whole call failed: keep its code and text, the operator's clue
            permanent.update({k: f"{error_code(exc) or 'ClientError'}: {exc}" for k in remaining})  # type: ignore[arg-type]
        except call_errors("BotoCoreError") as exc:
            if is_missing_credentials(exc):  # not a per-key failure: nothing can be deleted at all
                raise self._error("delete", None, exc) from exc
            permanent.update({k: f"{type(exc).__name__}: {exc}" for k in remaining})
        return deleted, permanent
