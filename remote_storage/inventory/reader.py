"""Reading an inventory: open and verify it (:func:`read_inventory`), then stream its rows (:meth:`Inventory.rows`)
or hand a local inventory's data files to a reader that takes paths (:meth:`Inventory.local_paths`).

Invariants:
* The manifest's bytes match its ``manifest.checksum`` (their MD5, as AWS writes it) when there is one; a mismatch
  raises :class:`~.manifest.InventoryError` before anything is read. An inventory without one is read, with a
  warning (``inventory.checksum_missing``): only AWS's own always has it.
* Every data file listed by the manifest exists with the listed size and MD5 before :func:`read_inventory`
  returns (unless ``verify_checksums=False``, which still checks existence and size); a file's MD5 is checked
  again as it is read, before any of its rows is yielded. A missing or corrupt file raises
  :class:`~.manifest.InventoryError` naming the file: an inventory is never read partially.
* Rows are streamed file by file (CSV line by line, Parquet batch by batch): memory is flat in the number of rows.
* CSV data files are gzip, have no header row, have columns in ``fileSchema`` order, and URL-encoded keys
  (form encoding: a space is ``+``, a ``+`` is ``%2B``), decoded with ``unquote_plus``; a ``%`` that does not start
  two hex digits, or an escape that is not UTF-8, makes the key undecodable (as in the Spark scan). Parquet columns are
  snake_case (``bucket``, ``key``, ``size``, ``last_modified_date``, ``e_tag``) and keys are not encoded.
* A malformed row (wrong column count, missing or non-integer size, undecodable key, bad timestamp) is never
  silently dropped: it is counted under a stable reason in :attr:`Inventory.malformed`, which keeps the first
  ``max_examples`` examples. The reason strings are a contract with the scan's report: never rename them.
* :attr:`Inventory.creation_ms` (the manifest's ``creationTimestamp``) is "now" for every age decision made from
  an inventory, never the wall clock (inventories lag the bucket).
"""

from __future__ import annotations

import csv
import gzip
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote_plus

import structlog

from remote_storage.inventory.location import Location
from remote_storage.inventory.manifest import (
    CHECKSUM_NAME,
    InventoryError,
    Manifest,
    check_manifest_checksum,
    check_md5,
    parse_manifest,
)

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client
else:
    S3Client = Any

log = structlog.get_logger(__name__)

DEFAULT_MAX_EXAMPLES = 20
_BAD_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")  # unquote_plus would keep it as text; the key is not decodable

# Stable malformed-row reasons (reported by the scan; never rename).
WRONG_COLUMN_COUNT = "wrong column count"
BAD_SIZE = "bad size"
BAD_KEY = "undecodable key"
MISSING_KEY = "missing key"
BAD_LAST_MODIFIED = "bad last modified date"


@dataclass(frozen=True, slots=True)
class InventoryRow:
    bucket: str
    key: str
    size: int
    last_modified_ms: int  # -1 when the inventory has no LastModifiedDate column
    etag: str


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


def _parse_iso_ms(text: str) -> int:
    dt = datetime.fromisoformat(text)
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return int(dt.timestamp() * 1000)


class Inventory:
    """A verified inventory; :meth:`rows` streams its rows and counts malformed ones in :attr:`malformed`."""

    def __init__(self, manifest: Manifest, location: Location, *, max_examples: int) -> None:
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

    @property
    def bucket(self) -> str:
        """The bucket holding an ``s3://`` inventory's files ("" for a local inventory)."""
        return self._location.bucket

    def local_paths(self) -> list[Path]:
        """The local paths of a local inventory's data files, for a reader that takes paths.

        Their MD5s were checked when the inventory was opened (unless the caller opted out). An ``s3://``
        inventory has none: its files are read where they are (the scan's executors fetch them), never copied to
        the opener's disk.
        """
        if self.is_s3:
            raise InventoryError(f"inventory {self.uri} is in S3: its data files have no local paths")
        return [self._location.resolve_local(f.key) for f in self.manifest.files]

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
    loc = Location(uri, s3_client)
    manifest_bytes = loc.read_manifest_bytes()
    checksum = loc.read_checksum_bytes()
    if checksum is not None:
        check_manifest_checksum(manifest_bytes, checksum, loc.manifest_name())
    else:  # AWS always writes one; a hand-made inventory may not: said, not refused
        log.warning("inventory.checksum_missing", inventory=loc.manifest_name(), expected=CHECKSUM_NAME)
    manifest = parse_manifest(manifest_bytes, name=loc.manifest_name())
    for f in manifest.files:
        size = loc.stat(f)
        if size != f.size:
            raise InventoryError(f"inventory data file {loc.display(f)} is {size} bytes, the manifest says {f.size}")
        if verify_checksums:
            check_md5(f, loc.md5(f), loc.display(f))
    log.info(
        "inventory.opened",
        inventory=loc.manifest_name(),
        format=manifest.file_format,
        files=len(manifest.files),
        creation_ms=manifest.creation_ms,
    )
    return Inventory(manifest, loc, max_examples=max_examples)
