"""An inventory's ``manifest.json``: what it says, and the error for an inventory that cannot be read as a whole.

The manifest names the source bucket, the data files' format (CSV or Parquet) and schema, when the inventory was
taken (``creationTimestamp``, epoch milliseconds as a string) and every data file with its ``key``, ``size`` and
``MD5checksum``. The schema constants are the ones :mod:`.builder` writes and AWS uses.

Invariants:
* :func:`parse_manifest` returns a complete :class:`Manifest` or raises :class:`InventoryError` naming the manifest
  and the field it lacks or mangles; the format is ``"csv"`` or ``"parquet"``, whatever the manifest's case.
* A data file is the one its manifest lists only if its MD5 is the listed one (:func:`check_md5`, compared
  case-insensitively); the file is hashed in fixed-size chunks, never read whole.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from orchestrator.errors import ScanInputError

MANIFEST_NAME = "manifest.json"
CHECKSUM_NAME = "manifest.checksum"  # beside the manifest: the hex MD5 of manifest.json's bytes, as AWS writes it
CSV_SCHEMA = ("Bucket", "Key", "Size", "LastModifiedDate", "ETag")
PARQUET_SCHEMA_STRING = (
    "message s3.inventory { required binary bucket (UTF8); required binary key (UTF8); optional int64 size; "
    "optional int64 last_modified_date (TIMESTAMP_MILLIS); optional binary e_tag (UTF8); }"
)
READ_CHUNK_BYTES = 1 << 20  # what is read of a data file at a time, locally or from S3

Format = Literal["csv", "parquet"]


class InventoryError(ScanInputError):
    """An inventory that cannot be read as a whole: bad manifest, missing or corrupt data file."""

    name, retriable = "INVALID_INVENTORY", False


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


def md5_file(path: Path) -> str:
    """The hex MD5 of a local file, read in chunks."""
    digest = hashlib.md5(usedforsecurity=False)
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(READ_CHUNK_BYTES), b""):
            digest.update(chunk)
    return digest.hexdigest()


def check_md5(f: DataFile, actual: str, name: str) -> None:
    """InventoryError naming the data file (as ``name``) when ``actual`` is not the MD5 its manifest lists."""
    if actual.lower() != f.md5.lower():
        raise InventoryError(f"inventory data file {name} has MD5 {actual}, the manifest says {f.md5}")


def check_manifest_checksum(manifest: bytes, checksum: bytes, name: str) -> None:
    """InventoryError naming the manifest when ``checksum`` (the text of its ``manifest.checksum``) is not the MD5
    of ``manifest``'s bytes: a manifest changed after it was written, or a checksum of another manifest."""
    listed = checksum.decode("ascii", errors="replace").strip().lower()
    actual = hashlib.md5(manifest, usedforsecurity=False).hexdigest()
    if listed != actual:
        raise InventoryError(
            f"inventory manifest {name} has MD5 {actual}, its {CHECKSUM_NAME} says {listed!r}: the manifest was "
            "changed after the inventory was written (or the checksum belongs to another one); rebuild or re-fetch "
            "the inventory"
        )
