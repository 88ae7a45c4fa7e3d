"""Reclaim's part for incomplete multipart uploads: abort those the scan listed that are still there and old enough.

A scan lists the uploads under its prefixes that were never completed nor aborted (:mod:`remote_storage.scan.uploads`:
no inventory shows them, yet their parts are stored and billed). ``reclaim`` re-lists them now and, for each the
scan listed:

* gone since (completed, aborted): skipped, ``gone``;
* begun less than ``older_than_ms`` ago (the scan's grace by default, as for objects): skipped, ``too_young``: an
  upload in progress (a broker copying a large segment) must be left to finish;
* otherwise planned, and with ``execute`` aborted (AbortMultipartUpload), confined to the scanned prefix it was
  listed under. An upload already gone when aborted counts as gone; another failure is reported by key and upload
  id, and the run's exit status says it; so is a failure to list them again (nothing aborted), which does not
  stop the objects' reclaim.

A dry run (no ``execute``) aborts nothing. Uploads are never aborted when the object plan's run was refused.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from orchestrator.errors import RemoteStorageError
from remote_storage.s3 import S3RemoteStorage
from remote_storage.scan.uploads import read_uploads

log = structlog.get_logger(__name__)

LISTING = "(listing the uploads)"  # the failure's name when they could not be listed again
GONE = "gone"
TOO_YOUNG = "too_young"


@dataclass(frozen=True, slots=True)
class UploadsOutcome:
    listed: bool = False  # the scan listed the bucket's incomplete uploads
    planned: int = 0
    planned_bytes: int = 0
    aborted: int = 0
    aborted_bytes: int = 0
    skipped: Mapping[str, int] = field(default_factory=dict)  # reason -> uploads
    failed: Mapping[str, str] = field(default_factory=dict)  # "key upload-id" -> error

    def as_json(self) -> dict[str, Any]:
        return {
            "listed": self.listed,
            "planned": self.planned,
            "planned_bytes": self.planned_bytes,
            "aborted": self.aborted,
            "aborted_bytes": self.aborted_bytes,
            "skipped": dict(self.skipped),
            "failed": dict(self.failed),
        }


def reclaim_uploads(
    scan_dir: Path, *, rsm: S3RemoteStorage, older_than_ms: int, execute: bool, now_ms: Callable[[], int]
) -> UploadsOutcome:
    """Re-list, plan and (with ``execute``) abort the scan's incomplete uploads; see the module docstring."""
    listing = read_uploads(scan_dir)
    if listing is None:
        return UploadsOutcome()
    try:
        current = {(u.key, u.upload_id): u for p in listing.prefixes for u in rsm.incomplete_uploads(p)}
    except RemoteStorageError as exc:  # e.g. no s3:ListBucketMultipartUploads: the objects' reclaim goes on
        log.error("reclaim.uploads_not_listed", bucket=rsm.bucket, error=exc.message)
        return UploadsOutcome(True, failed={LISTING: exc.message})
    now = now_ms()
    skipped: Counter[str] = Counter()
    failed: dict[str, str] = {}
    planned = planned_bytes = aborted = aborted_bytes = 0
    for upload in listing.uploads:
        found = current.get((upload.key, upload.upload_id))
        if found is None:
            skipped[GONE] += 1
            continue
        if now - found.initiated_ms < older_than_ms:
            skipped[TOO_YOUNG] += 1
            continue
        planned += 1
        planned_bytes += found.bytes
        if not execute:
            continue
        within = next(p for p in listing.prefixes if upload.key.startswith(p))
        try:
            if not rsm.abort_upload(upload.key, upload.upload_id, within_prefix=within):
                skipped[GONE] += 1
                continue
        except RemoteStorageError as exc:
            failed[f"{upload.key} {upload.upload_id}"] = exc.message
            continue
        aborted += 1
        aborted_bytes += found.bytes
        log.info("reclaim.upload_aborted", bucket=rsm.bucket, key=upload.key, upload_id=upload.upload_id)
    outcome = UploadsOutcome(True, planned, planned_bytes, aborted, aborted_bytes, dict(skipped), failed)
    log.info("reclaim.uploads", bucket=rsm.bucket, execute=execute, **outcome.as_json())
    return outcome
