"""The AWS S3 Inventory format: read one (local or ``s3://``), and build one by listing a bucket.

An inventory is a ``manifest.json`` (``sourceBucket``, ``destinationBucket``, ``fileFormat`` CSV or Parquet,
``fileSchema``, ``creationTimestamp`` in epoch milliseconds as a string, ``files`` each with ``key``, ``size`` and
``MD5checksum``) plus the data files it lists. A data file's ``key`` is relative to the destination bucket's root;
for a local inventory it is resolved against the manifest's directory and then each of its ancestors (a local
directory mirrors the destination bucket), so both a flat ``dest/{manifest.json,data/...}`` and AWS's
``<prefix>/<bucket>/<config>/<date>/manifest.json`` layout are found.

Invariants:
* Every data file listed by the manifest exists with the listed size and MD5 before :func:`read_inventory`
  returns (unless ``verify_checksums=False``, which still checks existence and size); a file's MD5 is checked
  again as it is read, before any of its rows is yielded. A missing or corrupt file raises :class:`InventoryError`
  naming the file: an inventory is never read partially.
* Rows are streamed file by file (CSV line by line, Parquet batch by batch): memory is flat in the number of rows.
  An ``s3://`` data file is spooled to a temporary file, never held in memory.
* CSV data files are gzip, have no header row, have columns in ``fileSchema`` order, and URL-encoded keys
  (form encoding: a space is ``+``, a ``+`` is ``%2B``), decoded with ``unquote_plus``; a ``%`` that does not start
  two hex digits, or an escape that is not UTF-8, makes the key undecodable (as in the Spark scan). Parquet columns are
  snake_case (``bucket``, ``key``, ``size``, ``last_modified_date``, ``e_tag``) and keys are not encoded.
* A malformed row (wrong column count, missing or non-integer size, undecodable key, bad timestamp) is never
  silently dropped: it is counted under a stable reason in :attr:`Inventory.malformed`, which keeps the first
  ``max_examples`` examples.
* :attr:`Inventory.creation_ms` (the manifest's ``creationTimestamp``) is "now" for every age decision made from
  an inventory, never the wall clock (inventories lag the bucket).
* :func:`build_inventory` lists the bucket page by page and writes at most ``rows_per_file`` rows per data file,
  so its memory is flat in the number of objects; the manifest is written last, so a present manifest means every
  data file it lists was written.
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import json
import os
import re
import tempfile
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import quote_plus, unquote_plus

import botocore.exceptions as bce
import structlog

from orchestrator.errors import MissingCredentialsError, ScanInputError
from remote_storage.retry import is_missing_credentials, is_not_found

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client
else:
    S3Client = Any

log = structlog.get_logger(__name__)

MANIFEST_NAME = "manifest.json"
DEFAULT_ROWS_PER_FILE = 1_000_000
DEFAULT_MAX_EXAMPLES = 20
CSV_SCHEMA = ("Bucket", "Key", "Size", "LastModifiedDate", "ETag")
PARQUET_SCHEMA_STRING = (
    "message s3.inventory { required binary bucket (UTF8); required binary key (UTF8); optional int64 size; "
    "optional int64 last_modified_date (TIMESTAMP_MILLIS); optional binary e_tag (UTF8); }"
)
_CHUNK = 1 << 20
_BAD_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")  # unquote_plus would keep it as text; the key is not decodable

# Stable malformed-row reasons (reported by the scan; never rename).
WRONG_COLUMN_COUNT = "wrong column count"
BAD_SIZE = "bad size"
BAD_KEY = "undecodable key"
MISSING_KEY = "missing key"
BAD_LAST_MODIFIED = "bad last modified date"

Format = Literal["csv", "parquet"]


class InventoryError(ScanInputError):
    """An inventory that cannot be read as a whole: bad manifest, missing or corrupt data file."""

    name, retriable = "INVALID_INVENTORY", False


@dataclass(frozen=True, slots=True)
class InventoryRow:
    bucket: str
    key: str
    size: int
    last_modified_ms: int  # -1 when the inventory has no LastModifiedDate column
    etag: str


@dataclass(frozen=True, slots=True)
class DataFile:
    key: str
    size: int
    md5: str


@dataclass(frozen=True, slots=True)
class Manifest:
    source_bucket: str
    destination_bucket: str
    file_format: Format
    file_schema: str
    creation_ms: int
    files: tuple[DataFile, ...]

    @property
    def csv_columns(self) -> tuple[str, ...]:
        return tuple(c.strip() for c in self.file_schema.split(","))


@dataclass(frozen=True, slots=True)
class MalformedExample:
    file: str
    row: int  # 1-based row number within the data file
    reason: str
    raw: str


@dataclass
class MalformedRows:
    """Malformed rows counted by reason, with the first ``max_examples`` examples."""

    max_examples: int = DEFAULT_MAX_EXAMPLES
    counts: Counter[str] = field(default_factory=Counter)
    examples: list[MalformedExample] = field(default_factory=list)

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def add(self, file: str, row: int, reason: str, raw: str) -> None:
        self.counts[reason] += 1
        if len(self.examples) < self.max_examples:
            self.examples.append(MalformedExample(file, row, reason, raw[:500]))

    def as_dict(self) -> dict[str, Any]:
        return {
            "total": self.total,
            "by_reason": dict(sorted(self.counts.items())),
            "examples": [{"file": e.file, "row": e.row, "reason": e.reason, "raw": e.raw} for e in self.examples],
        }


# -- locations ------------------------------------------------------------------------------------------------


def split_s3_uri(uri: str) -> tuple[str, str]:
    """``s3://bucket/some/key`` -> ``("bucket", "some/key")``."""
    if not uri.startswith("s3://"):
        raise InventoryError(f"{uri!r} is not an s3:// URI")
    bucket, _, key = uri[len("s3://") :].partition("/")
    if not bucket:
        raise InventoryError(f"{uri!r} names no bucket")
    return bucket, key


class _Location:
    """Where an inventory's files live: a local directory tree or an S3 bucket."""

    def __init__(self, uri: str, s3_client: S3Client | None) -> None:
        self.uri = uri
        self._client = s3_client
        if uri.startswith("s3://"):
            if s3_client is None:
                raise InventoryError(f"reading {uri} needs an S3 client")
            self.bucket, key = split_s3_uri(uri)
            if not key or key.endswith("/"):
                key = f"{key}{MANIFEST_NAME}"
            self.manifest_key = key
            self.local_manifest: Path | None = None
        else:
            path = Path(uri)
            self.local_manifest = path / MANIFEST_NAME if path.is_dir() else path
            self.bucket, self.manifest_key = "", ""

    @property
    def is_s3(self) -> bool:
        return self.local_manifest is None

    @property
    def client(self) -> S3Client:
        assert self._client is not None
        return self._client

    def manifest_name(self) -> str:
        return f"s3://{self.bucket}/{self.manifest_key}" if self.is_s3 else str(self.local_manifest)

    def read_manifest_bytes(self) -> bytes:
        if self.local_manifest is not None:
            try:
                return self.local_manifest.read_bytes()
            except OSError as exc:
                raise InventoryError(f"cannot read inventory manifest {self.local_manifest}: {exc}") from exc
        try:
            body: bytes = self.client.get_object(Bucket=self.bucket, Key=self.manifest_key)["Body"].read()
        except (bce.ClientError, bce.BotoCoreError) as exc:
            raise s3_failure(f"cannot read inventory manifest {self.manifest_name()}", exc) from exc
        return body

    def resolve_local(self, key: str) -> Path:
        assert self.local_manifest is not None
        rel = PurePosixPath(key)
        if rel.is_absolute() or ".." in rel.parts:
            raise InventoryError(f"inventory data file key {key!r} is not a relative key")
        base = self.local_manifest.parent.resolve()
        for d in (base, *base.parents):
            candidate = d.joinpath(*rel.parts)
            if candidate.is_file():
                return candidate
        raise InventoryError(f"inventory data file {key} is missing (looked under {base} and its parents)")

    def stat(self, f: DataFile) -> int:
        """The data file's size; InventoryError naming it when it is missing."""
        if not self.is_s3:
            return self.resolve_local(f.key).stat().st_size
        try:
            head = self.client.head_object(Bucket=self.bucket, Key=f.key)
        except (bce.ClientError, bce.BotoCoreError) as exc:
            if is_not_found(exc):
                raise InventoryError(f"inventory data file s3://{self.bucket}/{f.key} is missing") from exc
            raise s3_failure(f"cannot reach inventory data file s3://{self.bucket}/{f.key}", exc) from exc
        return int(head["ContentLength"])

    def download_verified(self, f: DataFile, path: Path) -> None:
        """Spool an ``s3://`` data file to ``path``, checking its MD5 against the manifest as it streams."""
        digest = hashlib.md5(usedforsecurity=False)
        try:
            body = self.client.get_object(Bucket=self.bucket, Key=f.key)["Body"]
            with path.open("wb") as out:
                for chunk in iter(lambda: body.read(_CHUNK), b""):
                    digest.update(chunk)
                    out.write(chunk)
        except (bce.ClientError, bce.BotoCoreError) as exc:
            raise s3_failure(f"cannot read inventory data file s3://{self.bucket}/{f.key}", exc) from exc
        _check_md5(f, digest.hexdigest(), f"s3://{self.bucket}/{f.key}")

    @contextmanager
    def open_verified(self, f: DataFile) -> Iterator[Path]:
        """A local path of the data file whose MD5 was just checked against the manifest."""
        if not self.is_s3:
            path = self.resolve_local(f.key)
            _check_md5(f, _md5_file(path), str(path))
            yield path
            return
        with tempfile.TemporaryDirectory(prefix="inventory-") as tmp:
            path = Path(tmp) / "data"
            self.download_verified(f, path)
            yield path

    def md5(self, f: DataFile) -> str:
        if not self.is_s3:
            return _md5_file(self.resolve_local(f.key))
        digest = hashlib.md5(usedforsecurity=False)
        try:
            body = self.client.get_object(Bucket=self.bucket, Key=f.key)["Body"]
            for chunk in iter(lambda: body.read(_CHUNK), b""):
                digest.update(chunk)
        except (bce.ClientError, bce.BotoCoreError) as exc:
            raise s3_failure(f"cannot read inventory data file s3://{self.bucket}/{f.key}", exc) from exc
        return digest.hexdigest()

    def display(self, f: DataFile) -> str:
        return f"s3://{self.bucket}/{f.key}" if self.is_s3 else f.key


def s3_failure(message: str, exc: Exception) -> InventoryError | MissingCredentialsError:
    """The error for an S3 call of the inventory that failed: missing credentials are said as such."""
    if is_missing_credentials(exc):
        return MissingCredentialsError(f"{message}: {exc}")
    return InventoryError(f"{message}: {exc}")


def _md5_file(path: Path) -> str:
    digest = hashlib.md5(usedforsecurity=False)
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(_CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _check_md5(f: DataFile, actual: str, name: str) -> None:
    if actual.lower() != f.md5.lower():
        raise InventoryError(f"inventory data file {name} has MD5 {actual}, the manifest says {f.md5}")


# -- manifest -------------------------------------------------------------------------------------------------


def parse_manifest(data: bytes, *, name: str = MANIFEST_NAME) -> Manifest:
    """Parse ``manifest.json``; InventoryError naming the manifest and the field otherwise."""
    try:
        doc = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InventoryError(f"inventory manifest {name} is not JSON: {exc}") from exc
    if not isinstance(doc, dict):
        raise InventoryError(f"inventory manifest {name} is not a JSON object")
    try:
        fmt = str(doc["fileFormat"]).lower()
        if fmt not in ("csv", "parquet"):
            raise InventoryError(f"inventory manifest {name}: fileFormat {doc['fileFormat']!r} is not CSV or Parquet")
        files = tuple(DataFile(str(f["key"]), int(f["size"]), str(f["MD5checksum"])) for f in doc["files"])
        return Manifest(
            source_bucket=str(doc["sourceBucket"]),
            destination_bucket=str(doc.get("destinationBucket", "")),
            file_format="csv" if fmt == "csv" else "parquet",
            file_schema=str(doc.get("fileSchema", "")),
            creation_ms=int(doc["creationTimestamp"]),
            files=files,
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise InventoryError(f"inventory manifest {name} lacks or mangles a field: {exc!r}") from exc


# -- reading --------------------------------------------------------------------------------------------------


def _parse_iso_ms(text: str) -> int:
    dt = datetime.fromisoformat(text)
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return int(dt.timestamp() * 1000)


class Inventory:
    """A verified inventory; :meth:`rows` streams its rows and counts malformed ones in :attr:`malformed`."""

    def __init__(self, manifest: Manifest, location: _Location, *, max_examples: int) -> None:
        self.manifest = manifest
        self._location = location
        self._max_examples = max_examples
        self.malformed = MalformedRows(max_examples)
        if manifest.file_format == "csv":
            cols = manifest.csv_columns
            for required in ("Bucket", "Key", "Size"):
                if required not in cols:
                    raise InventoryError(
                        f"inventory manifest {location.manifest_name()}: fileSchema {manifest.file_schema!r} "
                        f"has no {required} column"
                    )

    @property
    def creation_ms(self) -> int:
        """ "Now" for age decisions: when the inventory was taken."""
        return self.manifest.creation_ms

    @property
    def source_bucket(self) -> str:
        return self.manifest.source_bucket

    @property
    def uri(self) -> str:
        return self._location.manifest_name()

    @property
    def is_s3(self) -> bool:
        return self._location.is_s3

    def stage(self, staging_dir: Path) -> list[Path]:
        """Local paths of every data file, for a reader such as Spark that takes paths.

        A local inventory's files are used where they are (their MD5s were checked when it was opened unless the
        caller opted out); an ``s3://`` inventory's files are downloaded into ``staging_dir``, each checked
        against its MD5 as it streams, so every returned file is exactly the one the manifest lists.
        """
        if not self.is_s3:
            return [self._location.resolve_local(f.key) for f in self.manifest.files]
        staging_dir.mkdir(parents=True, exist_ok=True)
        paths = []
        for i, f in enumerate(self.manifest.files):
            suffix = ".csv.gz" if self.manifest.file_format == "csv" else ".parquet"
            path = staging_dir / f"{i:05d}{suffix}"
            self._location.download_verified(f, path)
            paths.append(path)
        log.info("inventory.staged", inventory=self.uri, files=len(paths), dir=str(staging_dir))
        return paths

    def rows(self) -> Iterator[InventoryRow]:
        """Every well-formed row, file by file; resets and refills :attr:`malformed`."""
        self.malformed = MalformedRows(self._max_examples)
        for f in self.manifest.files:
            with self._location.open_verified(f) as path:
                name = self._location.display(f)
                if self.manifest.file_format == "csv":
                    yield from self._csv_rows(path, name)
                else:
                    yield from self._parquet_rows(path, name)
        if self.malformed.total:
            log.warning("inventory.malformed_rows", inventory=self.uri, by_reason=dict(self.malformed.counts))

    def _csv_rows(self, path: Path, name: str) -> Iterator[InventoryRow]:
        cols = self.manifest.csv_columns
        i_bucket, i_key, i_size = cols.index("Bucket"), cols.index("Key"), cols.index("Size")
        i_lm = cols.index("LastModifiedDate") if "LastModifiedDate" in cols else -1
        i_etag = cols.index("ETag") if "ETag" in cols else -1
        with gzip.open(path, "rt", encoding="utf-8", errors="surrogateescape", newline="") as fh:
            for n, rec in enumerate(csv.reader(fh), start=1):
                raw = ",".join(rec)
                if len(rec) != len(cols):
                    self.malformed.add(name, n, WRONG_COLUMN_COUNT, raw)
                    continue
                if _BAD_ESCAPE.search(rec[i_key]):
                    self.malformed.add(name, n, BAD_KEY, raw)
                    continue
                try:
                    key = unquote_plus(rec[i_key], encoding="utf-8", errors="strict")
                    key.encode("utf-8")  # a surrogate-escaped raw byte is not a key
                except UnicodeError:
                    self.malformed.add(name, n, BAD_KEY, raw)
                    continue
                if not key:
                    self.malformed.add(name, n, MISSING_KEY, raw)
                    continue
                size_text = rec[i_size].strip()
                if not size_text.isdigit():
                    self.malformed.add(name, n, BAD_SIZE, raw)
                    continue
                last_modified = -1
                if i_lm >= 0 and rec[i_lm]:
                    try:
                        last_modified = _parse_iso_ms(rec[i_lm])
                    except ValueError:
                        self.malformed.add(name, n, BAD_LAST_MODIFIED, raw)
                        continue
                etag = rec[i_etag].strip('"') if i_etag >= 0 else ""
                yield InventoryRow(rec[i_bucket], key, int(size_text), last_modified, etag)

    def _parquet_rows(self, path: Path, name: str) -> Iterator[InventoryRow]:
        import pyarrow as pa  # type: ignore[import-untyped]
        import pyarrow.parquet as pq  # type: ignore[import-untyped]

        pf = pq.ParquetFile(path)
        names = set(pf.schema_arrow.names)
        for required in ("bucket", "key", "size"):
            if required not in names:
                raise InventoryError(f"inventory data file {name} has no {required!r} column")
        wanted = [c for c in ("bucket", "key", "size", "last_modified_date", "e_tag") if c in names]
        lm_type = pf.schema_arrow.field("last_modified_date").type if "last_modified_date" in names else None
        n = 0
        for batch in pf.iter_batches(columns=wanted, batch_size=65_536):
            cols = {c: batch.column(c) for c in wanted}
            lm = cols.get("last_modified_date")
            if lm is not None and pa.types.is_timestamp(lm_type):
                lm = lm.cast(pa.timestamp("ms")).cast(pa.int64())
            buckets = cols["bucket"].to_pylist()
            keys = cols["key"].to_pylist()
            sizes = cols["size"].to_pylist()
            lms = lm.to_pylist() if lm is not None else [None] * len(keys)
            etags = cols["e_tag"].to_pylist() if "e_tag" in cols else [None] * len(keys)
            for b, k, s, m, e in zip(buckets, keys, sizes, lms, etags, strict=True):
                n += 1
                if not k:
                    self.malformed.add(name, n, MISSING_KEY, f"{b},{k},{s}")
                elif not isinstance(s, int) or isinstance(s, bool) or s < 0:
                    self.malformed.add(name, n, BAD_SIZE, f"{b},{k},{s}")
                else:
                    yield InventoryRow(b or "", k, s, -1 if m is None else int(m), (e or "").strip('"'))


def read_inventory(
    uri: str,
    *,
    s3_client: S3Client | None = None,
    verify_checksums: bool = True,
    max_examples: int = DEFAULT_MAX_EXAMPLES,
) -> Inventory:
    """Open and verify an inventory: ``uri`` is a local manifest or directory, or ``s3://bucket/.../manifest.json``.

    Every listed data file must exist with its listed size, and (``verify_checksums``) its MD5; InventoryError
    names the first that does not.
    """
    loc = _Location(uri, s3_client)
    manifest = parse_manifest(loc.read_manifest_bytes(), name=loc.manifest_name())
    for f in manifest.files:
        size = loc.stat(f)
        if size != f.size:
            raise InventoryError(f"inventory data file {loc.display(f)} is {size} bytes, the manifest says {f.size}")
        if verify_checksums:
            _check_md5(f, loc.md5(f), loc.display(f))
    log.info(
        "inventory.opened",
        inventory=loc.manifest_name(),
        format=manifest.file_format,
        files=len(manifest.files),
        creation_ms=manifest.creation_ms,
    )
    return Inventory(manifest, loc, max_examples=max_examples)


# -- building -------------------------------------------------------------------------------------------------


def _list_bucket(client: S3Client, bucket: str, prefix: str) -> Iterator[Mapping[str, Any]]:
    token: str | None = None
    while True:
        kwargs: dict[str, Any] = {"Bucket": bucket, "Prefix": prefix, "MaxKeys": 1000}
        if token:
            kwargs["ContinuationToken"] = token
        try:
            page = client.list_objects_v2(**kwargs)
        except (bce.ClientError, bce.BotoCoreError) as exc:
            raise s3_failure(f"listing s3://{bucket}/{prefix} failed", exc) from exc
        yield from page.get("Contents", [])
        if not page.get("IsTruncated"):
            return
        token = page["NextContinuationToken"]


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


class _Writer:
    """Writes data files to a local directory, or to a temporary file then ``s3://``, and returns DataFiles."""

    def __init__(self, dest: str, client: S3Client | None) -> None:
        self.dest = dest
        self.client = client
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

    def data_key(self, name: str) -> str:
        return f"{self.base}data/{name}"

    def put(self, key: str, local: Path) -> DataFile:
        md5 = _md5_file(local)
        size = local.stat().st_size
        if self.root is None:
            assert self.client is not None
            try:
                self.client.upload_file(str(local), self.bucket, key)
            except (bce.ClientError, bce.BotoCoreError) as exc:
                raise s3_failure(f"writing s3://{self.bucket}/{key} failed", exc) from exc
        else:
            target = self.root.joinpath(*PurePosixPath(key).parts)
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(local, target)
        return DataFile(key, size, md5)

    def put_bytes(self, key: str, data: bytes) -> str:
        if self.root is None:
            assert self.client is not None
            try:
                self.client.put_object(Bucket=self.bucket, Key=key, Body=data)
            except (bce.ClientError, bce.BotoCoreError) as exc:
                raise s3_failure(f"writing s3://{self.bucket}/{key} failed", exc) from exc
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
            import pyarrow.parquet as pq

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
) -> str:
    """List ``bucket`` under ``prefix`` and write an inventory in the AWS format to ``dest``; return the manifest.

    ``dest`` is a local directory or ``s3://bucket/path/`` (written with ``dest_client``, default ``client``).
    ``now_ms`` becomes the manifest's ``creationTimestamp``; ``progress`` is called with the row count after each
    page of the listing.
    """
    if fmt not in ("csv", "parquet"):
        raise InventoryError(f"inventory format {fmt!r} is neither 'csv' nor 'parquet'")
    if rows_per_file < 1:
        raise InventoryError(f"rows_per_file must be positive, got {rows_per_file}")
    writer = _Writer(dest, dest_client or client)
    files: list[DataFile] = []
    total = 0
    with tempfile.TemporaryDirectory(prefix="inventory-build-") as tmp:
        scratch = Path(tmp)
        chunk: _Chunk | None = None

        def finish(c: _Chunk) -> None:
            c.close()
            files.append(writer.put(writer.data_key(c.name), c.path))

        for n, obj in enumerate(_list_bucket(client, bucket, prefix), start=1):
            if chunk is None:
                chunk = _Chunk(scratch, fmt, bucket)
            chunk.add(obj["Key"], int(obj["Size"]), int(obj["LastModified"].timestamp() * 1000), obj["ETag"])
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
    log.info("inventory.built", bucket=bucket, prefix=prefix, dest=where, rows=total, files=len(files), format=fmt)
    return where


__all__ = [
    "BAD_KEY",
    "BAD_LAST_MODIFIED",
    "BAD_SIZE",
    "MISSING_KEY",
    "WRONG_COLUMN_COUNT",
    "DataFile",
    "Inventory",
    "InventoryError",
    "InventoryRow",
    "MalformedExample",
    "MalformedRows",
    "Manifest",
    "build_inventory",
    "parquet_schema",
    "parse_manifest",
    "read_inventory",
    "split_s3_uri",
]
