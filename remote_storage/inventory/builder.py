"""Building an inventory in the AWS format by listing a bucket (:func:`build_inventory`).

The layout written under ``dest`` (a local directory or ``s3://bucket/path/``) is AWS's: ``data/<uuid>.csv.gz`` or
``data/<uuid>.parquet``, then ``manifest.checksum`` (the MD5 of the manifest) and ``manifest.json``, whose data file
keys are relative to the destination bucket's root.

Invariants:
* :func:`build_inventory` lists the bucket page by page and writes at most ``rows_per_file`` rows per data file,
  so its memory is flat in the number of objects; the manifest is written last, so a present manifest means every
  data file it lists was written.
* Several prefixes (the scanned one and those segments record in their custom metadata) are listed one after the
  other, each object once: a prefix under another one listed is not listed again (:func:`covering_prefixes`).
* A data file is written with the columns of :data:`~.manifest.CSV_SCHEMA` (CSV: gzip, no header, keys encoded as
  :mod:`.reader` decodes them) or :func:`parquet_schema`; its size and MD5 in the manifest are those of the bytes
  written.
* Every S3 call, the listing's pages and each write, goes through the one retry layer
  (:func:`remote_storage.retry.s3_retrying`), so a throttled (503 SlowDown) or dropped call is retried; one that
  fails for good raises :class:`~.manifest.InventoryError` naming the listing or the object, or
  :class:`~orchestrator.errors.MissingCredentialsError`. A data file goes up as one PutObject streamed from its
  scratch file (sent whole again on a retry), never read into memory.
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import json
import os
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any
from urllib.parse import quote_plus

import botocore.exceptions as bce
import structlog

from orchestrator.errors import RemoteStorageError
from remote_storage.inventory.location import s3_failure, split_s3_uri
from remote_storage.inventory.manifest import (
    CSV_SCHEMA,
    MANIFEST_NAME,
    PARQUET_SCHEMA_STRING,
    DataFile,
    Format,
    InventoryError,
    md5_file,
)
from remote_storage.retry import s3_retrying
from remote_storage.s3 import ObjectInfo, S3RemoteStorage

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client
else:
    S3Client = Any

log = structlog.get_logger(__name__)

DEFAULT_ROWS_PER_FILE = 1_000_000


def covering_prefixes(prefixes: Iterable[str]) -> list[str]:
    """The prefixes to list so that every object under any of ``prefixes`` is listed exactly once: sorted, without
    those under another one (``""`` covers them all)."""
    kept: list[str] = []
    for prefix in sorted(set(prefixes)):
        if not any(prefix.startswith(k) for k in kept):
            kept.append(prefix)
    return kept


def _list_bucket(
    client: S3Client, bucket: str, prefixes: Iterable[str], *, sleep: Callable[[float], None]
) -> Iterator[ObjectInfo]:
    """Every object under ``prefixes``, page by page through the storage layer's retried listing."""
    storage = S3RemoteStorage(client=client, bucket=bucket, sleep=sleep)
    for prefix in covering_prefixes(prefixes):
        try:
            yield from storage.list_objects(prefix)
        except RemoteStorageError as exc:  # missing credentials go through as they are, with their own hint
            raise InventoryError(f"listing s3://{bucket}/{prefix} failed: {exc.message}") from exc


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


class _Writer:
    """Writes data files to a local directory, or to a temporary file then ``s3://``, and returns DataFiles."""

    def __init__(self, dest: str, client: S3Client | None, *, sleep: Callable[[float], None]) -> None:
        self.dest = dest
        self.client = client
        self._sleep = sleep
        if dest.startswith("s3://"):
            if client is None:
                raise InventoryError(f"writing to {dest} needs an S3 client")
            self.bucket, base = split_s3_uri(dest)
            self.base = base if not base or base.endswith("/") else f"{base}/"
            self.root: Path | None = None
        else:
            self.root = Path(dest)
            self.root.mkdir(parents=True, exist_ok=True)
            self.bucket, self.base = "", ""

    @property
    def s3(self) -> S3Client:
        assert self.client is not None
        return self.client

    def data_key(self, name: str) -> str:
        return f"{self.base}data/{name}"

    def _write_s3(self, key: str, write: Callable[[], object]) -> None:
        try:
            s3_retrying(sleep=self._sleep)(write)
        except (bce.ClientError, bce.BotoCoreError) as exc:
            raise s3_failure(f"writing s3://{self.bucket}/{key} failed", exc) from exc

    def put(self, key: str, local: Path) -> DataFile:
        md5 = md5_file(local)
        size = local.stat().st_size
        if self.root is None:

            def upload() -> None:
                with local.open("rb") as body:  # opened by every attempt: a retry sends the file from its start
                    self.s3.put_object(Bucket=self.bucket, Key=key, Body=body)

            self._write_s3(key, upload)
        else:
            target = self.root.joinpath(*PurePosixPath(key).parts)
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(local, target)
        return DataFile(key, size, md5)

    def put_bytes(self, key: str, data: bytes) -> str:
        if self.root is None:
            self._write_s3(key, lambda: self.s3.put_object(Bucket=self.bucket, Key=key, Body=data))
            return f"s3://{self.bucket}/{key}"
        target = self.root / key
        tmp = target.with_name(target.name + ".tmp")
        tmp.write_bytes(data)
        os.replace(tmp, target)
        return str(target)


class _Chunk:
    """One data file being written (CSV.gz or Parquet) in a scratch directory."""

    def __init__(self, scratch: Path, fmt: Format, bucket: str) -> None:
        self.fmt = fmt
        self.bucket = bucket
        self.name = f"{uuid.uuid4()}.{'csv.gz' if fmt == 'csv' else 'parquet'}"
        self.path = scratch / self.name
        self.rows = 0
        self._buf: dict[str, list[Any]] = {c: [] for c in ("bucket", "key", "size", "last_modified_date", "e_tag")}
        if fmt == "csv":
            self._gz = gzip.open(self.path, "wt", encoding="utf-8", newline="")  # noqa: SIM115 (closed by close())
            self._csv = csv.writer(self._gz, lineterminator="\n")
        else:
            import pyarrow.parquet as pq  # type: ignore[import-untyped]

            self._pq = pq.ParquetWriter(self.path, parquet_schema())

    def add(self, key: str, size: int, last_modified_ms: int, etag: str) -> None:
        self.rows += 1
        if self.fmt == "csv":
            self._csv.writerow([self.bucket, quote_plus(key, safe="/"), size, _iso(last_modified_ms), etag])
            return
        for col, v in zip(self._buf, (self.bucket, key, size, last_modified_ms, etag), strict=True):
            self._buf[col].append(v)
        if len(self._buf["key"]) >= 65_536:
            self._flush()

    def _flush(self) -> None:
        import pyarrow as pa

        if self._buf["key"]:
            self._pq.write_table(pa.Table.from_pydict(self._buf, schema=parquet_schema()))
            self._buf = {c: [] for c in self._buf}

    def close(self) -> None:
        if self.fmt == "csv":
            self._gz.close()
        else:
            self._flush()
            self._pq.close()


def parquet_schema() -> Any:
    import pyarrow as pa

    return pa.schema(
        [
            pa.field("bucket", pa.string(), nullable=False),
            pa.field("key", pa.string(), nullable=False),
            pa.field("size", pa.int64()),
            pa.field("last_modified_date", pa.timestamp("ms", tz="UTC")),
            pa.field("e_tag", pa.string()),
        ]
    )


def build_inventory(
    client: S3Client,
    *,
    bucket: str,
    prefix: str = "",
    dest: str,
    fmt: Format = "csv",
    now_ms: int,
    rows_per_file: int = DEFAULT_ROWS_PER_FILE,
    dest_client: S3Client | None = None,
    progress: Callable[[int], None] | None = None,
    sleep: Callable[[float], None] = time.sleep,
    also_prefixes: Iterable[str] = (),
) -> str:
    """List ``bucket`` under ``prefix`` (and ``also_prefixes``, each object once) and write an inventory in the AWS
    format to ``dest``; return the manifest.

    ``dest`` is a local directory or ``s3://bucket/path/`` (written with ``dest_client``, default ``client``).
    ``now_ms`` becomes the manifest's ``creationTimestamp``; ``progress`` is called with the row count after each
    page of the listing. ``sleep`` is the retry layer's, between attempts of a failed S3 call.
    """
    if fmt not in ("csv", "parquet"):
        raise InventoryError(f"inventory format {fmt!r} is neither 'csv' nor 'parquet'")
    if rows_per_file < 1:
        raise InventoryError(f"rows_per_file must be positive, got {rows_per_file}")
    writer = _Writer(dest, dest_client or client, sleep=sleep)
    files: list[DataFile] = []
    total = 0
    with tempfile.TemporaryDirectory(prefix="inventory-build-") as tmp:
        scratch = Path(tmp)
        chunk: _Chunk | None = None

        def finish(c: _Chunk) -> None:
            c.close()
            files.append(writer.put(writer.data_key(c.name), c.path))

        listed = [prefix, *also_prefixes]
        for n, obj in enumerate(_list_bucket(client, bucket, listed, sleep=sleep), start=1):
            if chunk is None:
                chunk = _Chunk(scratch, fmt, bucket)
            chunk.add(obj.key, obj.size, obj.last_modified_ms, obj.etag)
            total = n
            if chunk.rows >= rows_per_file:
                finish(chunk)
                chunk = None
            if progress is not None and n % 1000 == 0:
                progress(n)
        if chunk is not None:
            finish(chunk)
    if progress is not None:
        progress(total)
    manifest = {
        "sourceBucket": bucket,
        "destinationBucket": f"arn:aws:s3:::{writer.bucket or bucket}",
        "version": "2016-11-30",
        "creationTimestamp": str(now_ms),
        "fileFormat": "CSV" if fmt == "csv" else "Parquet",
        "fileSchema": ", ".join(CSV_SCHEMA) if fmt == "csv" else PARQUET_SCHEMA_STRING,
        "files": [{"key": f.key, "size": f.size, "MD5checksum": f.md5} for f in files],
    }
    data = json.dumps(manifest, indent=2).encode()
    writer.put_bytes(f"{writer.base}manifest.checksum", hashlib.md5(data, usedforsecurity=False).hexdigest().encode())
    where = writer.put_bytes(f"{writer.base}{MANIFEST_NAME}", data)
    listed_prefixes = covering_prefixes([prefix, *also_prefixes])
    log.info(
        "inventory.built",
        bucket=bucket,
        prefix=prefix,
        prefixes=listed_prefixes,
        dest=where,
        rows=total,
        files=len(files),
        format=fmt,
    )
    return where
