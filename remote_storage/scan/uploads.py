"""Incomplete multipart uploads under the scanned prefixes: what no inventory lists, written beside the scan.

An upload begun and never completed nor aborted (a broker killed mid-copy, Kafka giving up on a segment) keeps its
parts, billed, but invisible to ListObjects and to S3 Inventory. The scan lists them (ListMultipartUploads under
the scanned prefix and every prefix segments record, then ListParts for each one's bytes) into
``multipart_uploads.json`` (:data:`remote_storage.scan.contract.UPLOADS_FILE`); ``reclaim`` aborts those older than
its ``--older-than`` that are still there (:mod:`policies.reclaim_executor`).

Format: ``{"listed_at_ms", "bucket", "prefixes": [...], "uploads": [{"key", "upload_id", "initiated_ms",
"age_ms", "parts", "bytes"}]}``, uploads sorted by key then upload id. Ages are from the listing's time (the
inventory, whose creation time is the objects' "now", does not see uploads).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from remote_storage.s3 import IncompleteUpload, S3RemoteStorage
from remote_storage.scan import contract as c
from remote_storage.scan.errors import ScanError


@dataclass(frozen=True, slots=True)
class UploadsListing:
    listed_at_ms: int
    bucket: str
    prefixes: tuple[str, ...]
    uploads: tuple[IncompleteUpload, ...]

    @property
    def bytes(self) -> int:
        return sum(u.bytes for u in self.uploads)

    def as_json(self) -> dict[str, Any]:
        return {
            "listed_at_ms": self.listed_at_ms,
            "bucket": self.bucket,
            "prefixes": list(self.prefixes),
            "uploads": [
                {
                    "key": u.key,
                    "upload_id": u.upload_id,
                    "initiated_ms": u.initiated_ms,
                    "age_ms": self.listed_at_ms - u.initiated_ms,
                    "parts": u.parts,
                    "bytes": u.bytes,
                }
                for u in self.uploads
            ],
        }


def list_uploads(rsm: S3RemoteStorage, prefixes: Sequence[str], *, now_ms: int) -> UploadsListing:
    """Every incomplete upload under ``prefixes`` (each listed once, however the prefixes nest)."""
    found = {(u.key, u.upload_id): u for p in dict.fromkeys(prefixes) for u in rsm.incomplete_uploads(p)}
    uploads = tuple(found[k] for k in sorted(found))
    return UploadsListing(now_ms, rsm.bucket, tuple(dict.fromkeys(prefixes)), uploads)


def write_uploads(out_dir: Path, listing: UploadsListing) -> Path:
    path = out_dir / c.UPLOADS_FILE
    tmp = path.with_name(f".{c.UPLOADS_FILE}.tmp")
    tmp.write_text(json.dumps(listing.as_json(), indent=1) + "\n")
    os.replace(tmp, path)
    return path


def read_uploads(out_dir: Path) -> UploadsListing | None:
    """The scan's listing, or None when it made none (no access to the bucket, or a scan from before)."""
    path = out_dir / c.UPLOADS_FILE
    if not path.exists():
        return None
    try:
        doc = json.loads(path.read_text())
        uploads = tuple(
            IncompleteUpload(u["key"], u["upload_id"], int(u["initiated_ms"]), int(u["parts"]), int(u["bytes"]))
            for u in doc["uploads"]
        )
        return UploadsListing(int(doc["listed_at_ms"]), str(doc["bucket"]), tuple(doc["prefixes"]), uploads)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ScanError(f"cannot read {path}: {exc!r}") from exc
