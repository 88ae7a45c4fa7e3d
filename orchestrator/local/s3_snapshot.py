"""The embedded S3's objects on disk, so a local cluster on it survives ``cluster down`` and ``cluster up``.

moto's server keeps objects in memory. :mod:`.embedded_s3` writes every bucket's objects here when it is stopped
(SIGTERM), and reads them back before it serves again. The directory (``<cluster>/s3/``) holds:

* ``state.json``: ``{"status": "running" | "stopped", "snapshot": "snapshot-<n>" | null, "objects": N}``;
* ``snapshot-<n>/``: ``manifest.json`` (bucket, key, file, content type, user metadata, tags of each object, and
  every bucket, also empty ones) and ``objects/<i>`` (the bytes).

Invariants:
* ``status`` is ``stopped`` only between a completed snapshot and the next start; a start marks it ``running``
  before serving. So a state that says ``running`` when no server is running means the last run did not stop
  cleanly: its objects died with it. :func:`status` reports that as :attr:`SnapshotStatus.LOST`, and nothing
  restores an older snapshot in its place (that would serve a bucket that silently lacks objects).
* A snapshot is complete before ``state.json`` names it (written to its own directory first, then the state file
  is replaced atomically); older snapshots are removed only after that.
* An object comes back with its bytes, tags, content type, user metadata and last-modified time (the server
  process sets the time: S3 has no call for it), so what a scan recorded still matches after a restart.
* Only objects and buckets are kept: bucket configuration (versioning, lifecycle, inventory configurations) and
  in-progress multipart uploads are not.
"""

from __future__ import annotations

import datetime
import json
import os
import shutil
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

SNAPSHOT_DIR = "s3"  # under the cluster's directory
_STATE = "state.json"


class SnapshotStatus(Enum):
    NONE = "none"  # never started: nothing to restore
    STOPPED = "stopped"  # stopped cleanly: the snapshot holds every object
    LOST = "lost"  # the last run did not stop cleanly: its objects are gone


@dataclass(frozen=True, slots=True)
class SnapshotState:
    status: SnapshotStatus
    snapshot: str | None = None
    objects: int = 0


def status(directory: Path) -> SnapshotState:
    """What a start in ``directory`` would find."""
    path = directory / _STATE
    if not path.exists():
        return SnapshotState(SnapshotStatus.NONE)
    doc = json.loads(path.read_text())
    if doc.get("status") != "stopped":
        return SnapshotState(SnapshotStatus.LOST, doc.get("snapshot"), int(doc.get("objects", 0)))
    return SnapshotState(SnapshotStatus.STOPPED, doc.get("snapshot"), int(doc.get("objects", 0)))


def _write_state(directory: Path, *, running: bool, snapshot: str | None, objects: int) -> None:
    doc = {"status": "running" if running else "stopped", "snapshot": snapshot, "objects": objects}
    tmp = directory / (_STATE + ".tmp")
    with tmp.open("w") as out:
        json.dump(doc, out)
        out.flush()
        os.fsync(out.fileno())
    tmp.replace(directory / _STATE)


def mark_running(directory: Path) -> None:
    """Called once the server serves: from now on, only a completed :func:`write` makes the directory clean."""
    directory.mkdir(parents=True, exist_ok=True)
    current = status(directory)
    _write_state(directory, running=True, snapshot=current.snapshot, objects=current.objects)


def restore(
    directory: Path,
    client: S3Client,
    *,
    set_last_modified: Callable[[str, str, datetime.datetime], None] | None = None,
    on_object: Callable[[int], None] = lambda _n: None,
) -> int:
    """Put every bucket and object of the last clean snapshot into the (empty) server ``client`` talks to;
    ``set_last_modified(bucket, key, when)`` gives each object back its recorded time (UTC)."""
    state = status(directory)
    if state.status is not SnapshotStatus.STOPPED or state.snapshot is None:
        return 0
    snap = directory / state.snapshot
    manifest = json.loads((snap / "manifest.json").read_text())
    for bucket in manifest["buckets"]:
        client.create_bucket(Bucket=bucket)
    for n, entry in enumerate(manifest["objects"], 1):
        extra: dict[str, Any] = {"Metadata": entry["metadata"]}
        if entry.get("content_type"):
            extra["ContentType"] = entry["content_type"]
        if entry["tags"]:
            extra["Tagging"] = urllib.parse.urlencode(sorted(entry["tags"].items()))
        with (snap / "objects" / entry["file"]).open("rb") as body:
            client.put_object(Bucket=entry["bucket"], Key=entry["key"], Body=body, **extra)
        if set_last_modified is not None and entry.get("last_modified_ms") is not None:
            when = datetime.datetime.fromtimestamp(entry["last_modified_ms"] / 1000, tz=datetime.UTC)
            set_last_modified(entry["bucket"], entry["key"], when)
        on_object(n)
    return len(manifest["objects"])


def write(directory: Path, client: S3Client) -> int:
    """Write every bucket and object the server holds as a new snapshot and mark the directory stopped (clean).

    Returns the number of objects written. An error leaves the state as it was (``running``): the next start
    then refuses, rather than restoring an incomplete or older snapshot."""
    directory.mkdir(parents=True, exist_ok=True)
    previous = status(directory).snapshot
    number = int(previous.rsplit("-", 1)[1]) + 1 if previous else 1
    name = f"snapshot-{number}"
    snap = directory / name
    shutil.rmtree(snap, ignore_errors=True)
    (snap / "objects").mkdir(parents=True)
    buckets = [b["Name"] for b in client.list_buckets().get("Buckets", [])]
    objects: list[dict[str, Any]] = []
    for bucket in buckets:
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
            for item in page.get("Contents", []):
                key = item["Key"]
                file = str(len(objects))
                resp = client.get_object(Bucket=bucket, Key=key)
                with (snap / "objects" / file).open("wb") as out:
                    for chunk in resp["Body"].iter_chunks(1 << 20):
                        out.write(chunk)
                tags = client.get_object_tagging(Bucket=bucket, Key=key).get("TagSet", [])
                objects.append(
                    {
                        "bucket": bucket,
                        "key": key,
                        "file": file,
                        "content_type": resp.get("ContentType"),
                        "metadata": resp.get("Metadata", {}),
                        "tags": {t["Key"]: t["Value"] for t in tags},
                        "last_modified_ms": round(item["LastModified"].timestamp() * 1000),
                    }
                )
    with (snap / "manifest.json").open("w") as out:
        json.dump({"buckets": buckets, "objects": objects}, out)
        out.flush()
        os.fsync(out.fileno())
    _write_state(directory, running=False, snapshot=name, objects=len(objects))
    for old in directory.glob("snapshot-*"):
        if old.name != name:
            shutil.rmtree(old, ignore_errors=True)
    return len(objects)
