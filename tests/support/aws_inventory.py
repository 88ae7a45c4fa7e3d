"""Inventories in the AWS S3 Inventory format, written by hand from AWS's documentation (never by the project's own
writer), so that tests of the readers check the format and not our writer's idea of it.

AWS's layout: ``<dest>/<bucket>/<config>/data/<file>`` and ``<dest>/<bucket>/<config>/<date>/manifest.json``.
CSV data files are gzip, have no header, quote every field and URL-encode keys; Parquet data files use snake_case
columns with ``last_modified_date`` as int64 epoch milliseconds.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import quote_plus

import pyarrow as pa
import pyarrow.parquet as pq

CREATED_MS = 1_700_000_000_000
ETAG = "0f343b0931126a20f133d67c2b018a3b"
SOURCE = "kafka-tiered"
CONFIG_DIR = f"inv/{SOURCE}/daily"
CSV_SCHEMA = "Bucket, Key, Size, LastModifiedDate, ETag, StorageClass"
PARQUET_SCHEMA = "message s3.inventory { required binary bucket (UTF8); required binary key (UTF8); ... }"


def md5(data: bytes) -> str:
    return hashlib.md5(data, usedforsecurity=False).hexdigest()


def write_aws_inventory(
    root: Path, files: dict[str, bytes], *, fmt: str, schema: str, creation_ms: int = CREATED_MS, source: str = SOURCE
) -> Path:
    """Write the data files and manifest.json in AWS's layout under ``root``; return the manifest's path."""
    config_dir = f"inv/{source}/daily"
    entries = []
    for name, data in files.items():
        key = f"{config_dir}/data/{name}"
        (root / key).parent.mkdir(parents=True, exist_ok=True)
        (root / key).write_bytes(data)
        entries.append({"key": key, "size": len(data), "MD5checksum": md5(data)})
    manifest = {
        "sourceBucket": source,
        "destinationBucket": "arn:aws:s3:::inventory-dest",
        "version": "2016-11-30",
        "creationTimestamp": str(creation_ms),
        "fileFormat": fmt,
        "fileSchema": schema,
        "files": entries,
    }
    path = root / config_dir / "2023-11-14T22-13Z" / "manifest.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(manifest))
    return path


def gz(lines: list[str]) -> bytes:
    return gzip.compress(("\n".join(lines) + "\n").encode())


def csv_line(
    bucket: str, key: str, size: int, last_modified_ms: int, etag: str = "0f343b0931126a20f133d67c2b018a3b"
) -> str:
    """One AWS CSV row: every field quoted, the key URL-encoded (a space is '+'), ISO 8601 UTC with milliseconds."""
    when = datetime.fromtimestamp(last_modified_ms / 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    return f'"{bucket}","{quote_plus(key, safe="/")}","{size}","{when}","{etag}","STANDARD"'


def parquet_bytes(rows: Iterable[tuple[str, str, int, int]]) -> bytes:
    """(bucket, key, size, last_modified_ms) rows as an AWS Parquet inventory data file."""
    rows = list(rows)
    table = pa.table(
        {
            "bucket": pa.array([r[0] for r in rows], pa.string()),
            "key": pa.array([r[1] for r in rows], pa.string()),
            "size": pa.array([r[2] for r in rows], pa.int64()),
            "last_modified_date": pa.array([r[3] for r in rows], pa.int64()),
            "e_tag": pa.array([ETAG] * len(rows), pa.string()),
            "storage_class": pa.array(["STANDARD"] * len(rows), pa.string()),
        }
    )
    buf = io.BytesIO()
    pq.write_table(table, buf)
    return buf.getvalue()


def write_rows(
    root: Path, rows: list[tuple[str, str, int, int]], *, fmt: str, creation_ms: int, per_file: int = 1000
) -> Path:
    """An inventory of ``rows`` (bucket, key, size, last_modified_ms) in ``fmt`` ("csv" or "parquet")."""
    files: dict[str, bytes] = {}
    chunks = [rows[i : i + per_file] for i in range(0, len(rows), per_file)] or [[]]
    for i, chunk in enumerate(chunks):
        if fmt == "csv":
            files[f"part-{i}.csv.gz"] = gz([csv_line(*r) for r in chunk]) if chunk else gzip.compress(b"")
        else:
            files[f"part-{i}.parquet"] = parquet_bytes(chunk)
    return write_aws_inventory(
        root,
        files,
        fmt="CSV" if fmt == "csv" else "Parquet",
        schema=CSV_SCHEMA if fmt == "csv" else PARQUET_SCHEMA,
        creation_ms=creation_ms,
        source=rows[0][0] if rows else SOURCE,
    )
