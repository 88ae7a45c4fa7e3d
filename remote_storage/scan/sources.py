"""The inventory as the scan's executors read it: data-file references on the driver, the files' rows on executors.

The driver reads only the manifest (small): it turns every listed data file into a :class:`DataFileRef` and the
whole inventory into an :class:`InventorySource`. The job distributes the references, one Spark partition per data
file in manifest order, and each task opens its own file with :func:`read_data_files` (``mapPartitions``): a local
path directly, an ``s3://`` object through boto3 against :class:`ObjectStoreAccess`; gzip CSV is decoded by Python,
Parquet by pyarrow. No JAR (no Hadoop S3A) and no pandas (which ``mapInArrow`` requires) is needed, and nothing is
staged on the driver's disk, so the same job runs in local mode and on a cluster whose executors share no disk with
the driver.

Invariants:
* An ``s3://`` data file is spooled to the executor's temporary directory, its MD5 checked as it streams, before any
  of its rows is yielded; a mismatch raises :class:`~remote_storage.inventory.InventoryError` in the task, which the
  job turns back into that error on the driver. (A local inventory's MD5s were checked by the driver when it was
  opened: executors read the same files.)
* CSV files yield their lines, not parsed rows: Spark's own CSV parser (``from_csv``) parses them, so a row is
  parsed exactly as ``spark.read.csv`` would (the scan's malformed-row verdicts depend on that parser). Lines are
  split at ``\\n``, ``\\r\\n`` or ``\\r`` and blank lines are dropped, as Hadoop's line reader and Spark's CSV
  source do.
* Parquet files yield the scan's columns with Spark's types already applied (``size`` as text for ``try_cast``,
  ``last_modified_date`` as epoch milliseconds floored, as ``unix_millis`` floors).
* Credentials reach the executors only inside :class:`ObjectStoreAccess` (never logged: its secrets are left out of
  its ``repr``); temporary credentials (with a session token) are not shipped, they would expire during a long scan:
  executors then use their own credential chain (instance profile, ``spark.executorEnv.AWS_*``).
"""

from __future__ import annotations

import gzip
import re
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlparse

from remote_storage import inventory as inv
from remote_storage.inventory.location import Location
from remote_storage.inventory.manifest import READ_CHUNK_BYTES
from remote_storage.s3 import make_s3_client

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client
else:
    S3Client = Any

BATCH_ROWS = 65_536
# The columns of a data-file reference, as the job distributes them (one row per data file).
REF_SCHEMA = "name string, bucket string, location string, size bigint, md5 string"
CSV_LINES_SCHEMA = "file string, line string"
PARQUET_ROWS_SCHEMA = "file string, bucket string, key string, size string, last_modified_ms bigint"

_EOL = re.compile(rb"\r\n|\r|\n")
_JAVA_BLANK = "".join(chr(i) for i in range(0x21))  # what Java's String.trim strips: a blank line is dropped
_UNIT_PER_MS = {"s": None, "ms": 1, "us": 1_000, "ns": 1_000_000}


@dataclass(frozen=True, slots=True)
class ObjectStoreAccess:
    """How an executor reaches the object store holding an ``s3://`` inventory: shipped with the job's tasks."""

    endpoint_url: str | None = None
    region: str = "us-east-1"
    access_key_id: str | None = field(default=None, repr=False)
    secret_access_key: str | None = field(default=None, repr=False)

    @classmethod
    def of_client(cls, client: S3Client) -> ObjectStoreAccess:
        """The endpoint and region of the driver's client, with the driver's credentials when they are static."""
        import boto3

        creds = boto3.session.Session().get_credentials()
        frozen = creds.get_frozen_credentials() if creds is not None else None
        static = frozen is not None and not frozen.token
        return cls(
            endpoint_url=client.meta.endpoint_url,
            region=client.meta.region_name or "us-east-1",
            access_key_id=frozen.access_key if static and frozen else None,
            secret_access_key=frozen.secret_key if static and frozen else None,
        )

    def client(self) -> S3Client:
        return make_s3_client(
            endpoint_url=self.endpoint_url,
            region=self.region,
            access_key_id=self.access_key_id,
            secret_access_key=self.secret_access_key,
        )


@dataclass(frozen=True, slots=True)
class DataFileRef:
    """One data file as a task finds it: ``bucket`` empty for a local file (then ``location`` is its path)."""

    name: str  # how outputs name it: file:///... or s3://bucket/key
    bucket: str
    location: str  # a local absolute path, or the object's key
    size: int
    md5: str

    def as_row(self) -> tuple[str, str, str, int, str]:
        return (self.name, self.bucket, self.location, self.size, self.md5)


@dataclass(frozen=True, slots=True)
class InventorySource:
    """A verified inventory, as the job reads it: what the manifest says and where each data file is."""

    uri: str
    source_bucket: str
    creation_ms: int
    file_format: str  # "csv" or "parquet"
    csv_columns: tuple[str, ...]
    files: tuple[DataFileRef, ...]
    access: ObjectStoreAccess | None = None

    @classmethod
    def from_inventory(
        cls,
        inventory: inv.Inventory,
        *,
        access: ObjectStoreAccess | None = None,
    ) -> InventorySource:
        """``access``: how executors reach an ``s3://`` inventory's bucket (required for one)."""
        m = inventory.manifest
        if inventory.is_s3:
            if access is None:
                raise inv.InventoryError(f"reading {inventory.uri} on the executors needs the object store's access")
            bucket = inventory.bucket
            refs = tuple(DataFileRef(f"s3://{bucket}/{f.key}", bucket, f.key, f.size, f.md5) for f in m.files)
        else:
            paths = inventory.local_paths()
            refs = tuple(
                DataFileRef(p.resolve().as_uri(), "", str(p.resolve()), f.size, f.md5)
                for p, f in zip(paths, m.files, strict=True)
            )
        return cls(inventory.uri, m.source_bucket, m.creation_ms, m.file_format, m.csv_columns, refs, access)


# -- on the executors ----------------------------------------------------------------------------------------------


def read_data_files(
    refs: Iterator[tuple[str, str, str, int, str]], *, file_format: str, access: ObjectStoreAccess | None
) -> Iterator[tuple[Any, ...]]:
    """``mapPartitions``: the :data:`REF_SCHEMA` tuples of a partition in, each file's lines (CSV, as
    :data:`CSV_LINES_SCHEMA`) or rows (Parquet, as :data:`PARQUET_ROWS_SCHEMA`) out."""
    for row in refs:
        ref = DataFileRef(*row)
        with _opened(ref, access) as path:
            if file_format == "csv":
                yield from _csv_lines(path, ref.name)
            else:
                yield from _parquet_rows(path, ref.name)


@contextmanager
def _opened(ref: DataFileRef, access: ObjectStoreAccess | None) -> Iterator[Path]:
    if not ref.bucket:
        yield Path(ref.location)
        return
    if access is None:
        raise inv.InventoryError(f"reading {ref.name} needs the object store's access")
    location = Location(f"s3://{ref.bucket}/", access.client())
    with tempfile.TemporaryDirectory(prefix="tieredctl-inventory-") as tmp:
        path = Path(tmp) / "data"
        location.download_verified(inv.DataFile(ref.location, ref.size, ref.md5), path)
        yield path


def _lines(path: Path) -> Iterator[bytes]:
    with gzip.open(path, "rb") as fh:
        carry = b""
        for chunk in iter(lambda: fh.read(READ_CHUNK_BYTES), b""):
            # A "\r\n" cut between chunks yields one blank line more, and blank lines are dropped.
            parts = _EOL.split(carry + chunk)
            carry = parts.pop()
            yield from parts
        if carry:
            yield carry


def _csv_lines(path: Path, name: str) -> Iterator[tuple[str, str]]:
    for raw in _lines(path):
        # Hadoop's Text decodes with replacement; an undecodable key then fails the scan's UTF-8 check.
        line = raw.decode("utf-8", errors="replace")
        if line.strip(_JAVA_BLANK):
            yield (name, line)


def _epoch_ms(column: Any) -> Any:
    """A timestamp or integer column as epoch milliseconds (int64); integers are AWS's epoch milliseconds."""
    import pyarrow as pa  # type: ignore[import-untyped]
    import pyarrow.compute as pc  # type: ignore[import-untyped]

    if pa.types.is_timestamp(column.type):
        values = pc.cast(column, pa.timestamp(column.type.unit)).cast(pa.int64())
        per_ms = _UNIT_PER_MS[column.type.unit]
        if per_ms is None:
            return pc.multiply(values, 1000)
        if per_ms == 1:
            return values
        quotient = pc.divide(values, per_ms)  # truncated toward zero; floored below, as unix_millis floors
        negative_rest = pc.less(pc.subtract(values, pc.multiply(quotient, per_ms)), 0)
        return pc.subtract(quotient, pc.cast(negative_rest, pa.int64()))
    if pa.types.is_integer(column.type):
        return column.cast(pa.int64())
    return pa.nulls(len(column), pa.int64())


def _parquet_rows(path: Path, name: str) -> Iterator[tuple[Any, ...]]:
    import pyarrow as pa
    import pyarrow.parquet as pq  # type: ignore[import-untyped]

    pf = pq.ParquetFile(path)
    names = set(pf.schema_arrow.names)
    for required in ("key", "size"):
        if required not in names:
            raise inv.InventoryError(f"inventory data file {name} has no {required!r} column")
    wanted = [c for c in ("bucket", "key", "size", "last_modified_date") if c in names]
    for batch in pf.iter_batches(columns=wanted, batch_size=BATCH_ROWS):
        n = batch.num_rows
        col = {c: batch.column(c) for c in wanted}
        bucket = col["bucket"].cast(pa.string()) if "bucket" in col else pa.nulls(n, pa.string())
        lm = _epoch_ms(col["last_modified_date"]) if "last_modified_date" in col else pa.nulls(n, pa.int64())
        columns = [bucket, col["key"].cast(pa.string()), col["size"].cast(pa.string()), lm]
        for bucket_, key, size, last_modified_ms in zip(*(c.to_pylist() for c in columns), strict=True):
            yield (name, bucket_, key, size, last_modified_ms)


# -- on the driver: which files Spark's own Parquet reader can read --------------------------------------------------

# Characters Spark's path handling treats as glob syntax or a path list: a file named with one goes through pyarrow.
_GLOB_CHARS = frozenset("*?[]{}\\,")
_WANTED = ("bucket", "key", "size", "last_modified_date")


@dataclass(frozen=True, slots=True)
class NativeParquet:
    """A local Parquet data file that Spark's own reader reads into exactly the rows :func:`_parquet_rows` yields.

    ``signature`` is the Arrow types of the scan's columns: files with the same one are read in one go."""

    path: str
    name: str
    has_bucket: bool
    last_modified: str | None  # "timestamp", "integer", or None (absent or another type: every value is null)
    signature: tuple[str, ...]


def native_parquet(ref: DataFileRef) -> NativeParquet | None:
    """How Spark can read ``ref`` natively, or None when only pyarrow on the executors reads it the scan's way: an
    ``s3://`` file (no Hadoop S3A), a glob character in its path, two columns whose names differ only in case
    (Spark resolves names case-insensitively), or a column type Spark would convert differently (a non-string
    key or bucket, a size that is neither an integer nor a string, nanosecond timestamps, which Spark does not
    read). A file without a ``key`` or ``size`` column is refused here, as the executors would refuse it."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if ref.bucket or _GLOB_CHARS & set(ref.location):
        return None
    schema = pq.read_schema(ref.location)
    names = schema.names
    for required in ("key", "size"):
        if required not in names:
            raise inv.InventoryError(f"inventory data file {ref.name} has no {required!r} column")
    lowered = [n.lower() for n in names]
    if any(lowered.count(w) > 1 for w in _WANTED):
        return None

    def stringy(t: Any) -> bool:
        return bool(pa.types.is_string(t) or pa.types.is_large_string(t))

    types = {n: schema.field(n).type for n in _WANTED if n in names}
    if not stringy(types["key"]) or ("bucket" in types and not stringy(types["bucket"])):
        return None
    if not (stringy(types["size"]) or pa.types.is_int32(types["size"]) or pa.types.is_int64(types["size"])):
        return None
    last_modified = None
    lm = types.get("last_modified_date")
    if lm is not None and pa.types.is_timestamp(lm):
        if lm.unit not in ("ms", "us"):
            return None
        last_modified = "timestamp"
    elif lm is not None and pa.types.is_int64(lm):
        last_modified = "integer"
    signature = tuple(f"{n}:{types[n]}" if n in types else f"{n}:-" for n in _WANTED)
    return NativeParquet(ref.location, ref.name, "bucket" in types, last_modified, signature)


def file_name(native: tuple[NativeParquet, ...], spark_path: str) -> str:
    """The inventory's name (``DataFileRef.name``) of the file Spark calls ``spark_path`` (``_metadata.file_path``:
    a ``file:`` URI, possibly percent-encoded); ``spark_path`` itself when no file matches."""
    path = unquote(urlparse(spark_path).path) if spark_path.startswith("file:") else spark_path
    for f in native:
        if f.path == path:
            return f.name
    return spark_path
