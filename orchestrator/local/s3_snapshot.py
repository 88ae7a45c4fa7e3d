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
* An object comes back with its bytes, tags, content type, user metadata and last-modified time (to the
  microsecond, as the server held it), so what a scan recorded still matches after a restart. Both ways go through
  the server's own process (:class:`ObjectStore`), not a request per object: stopping and starting take seconds at
  ten thousand objects.
* Only objects and buckets are kept: bucket configuration (versioning, lifecycle, inventory configurations) and
  in-progress multipart uploads are not.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, Protocol

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


@dataclass(frozen=True, slots=True)
class StoredObject:
    """One object as a snapshot keeps it (``metadata``: the user metadata, names without ``x-amz-meta-``)."""

    key: str
    body: bytes
    content_type: str | None = None
    metadata: dict[str, str] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)
    last_modified_us: int | None = None  # microseconds since the epoch: the time the server held, exactly


class ObjectStore(Protocol):
    """The server's objects as the snapshot reads and puts them back: in the server's own process, without a
    request per object (:mod:`.embedded_s3` gives moto's backend this shape)."""

    def buckets(self) -> list[str]: ...

    def objects(self, bucket: str) -> Iterator[StoredObject]: ...

    def create_bucket(self, bucket: str) -> None: ...

    def put(self, bucket: str, obj: StoredObject) -> None:
        """Put ``obj`` with its bytes, content type, metadata, tags and (when it has one) last-modified time."""
        ...


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


def restore(directory: Path, store: ObjectStore, *, on_object: Callable[[int], None] = lambda _n: None) -> int:
    """Put every bucket and object of the last clean snapshot into the (empty) server of ``store``, each object
    with its recorded bytes, content type, metadata, tags and last-modified time."""
    state = status(directory)
    if state.status is not SnapshotStatus.STOPPED or state.snapshot is None:
        return 0
    snap = directory / state.snapshot
    manifest = json.loads((snap / "manifest.json").read_text())
    for bucket in manifest["buckets"]:
        store.create_bucket(bucket)
    for n, entry in enumerate(manifest["objects"], 1):
        obj = StoredObject(
            key=entry["key"],
            body=(snap / "objects" / entry["file"]).read_bytes(),
            content_type=entry.get("content_type"),
            metadata=dict(entry["metadata"]),
            tags=dict(entry["tags"]),
            last_modified_us=_last_modified_us(entry),
        )
        store.put(entry["bucket"], obj)
        on_object(n)
    return len(manifest["objects"])


def write(directory: Path, store: ObjectStore) -> int:
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
    buckets = store.buckets()
    objects: list[dict[str, Any]] = []
    for bucket in buckets:
        for obj in store.objects(bucket):
            file = str(len(objects))
            (snap / "objects" / file).write_bytes(obj.body)
            objects.append(
                {
                    "bucket": bucket,
                    "key": obj.key,
                    "file": file,
                    "content_type": obj.content_type,
                    "metadata": obj.metadata,
                    "tags": obj.tags,
                    "last_modified_us": obj.last_modified_us,
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


def _last_modified_us(entry: dict[str, Any]) -> int | None:
    """An entry's time in microseconds; a snapshot written before microseconds were kept has milliseconds."""
    if entry.get("last_modified_us") is not None:
        return int(entry["last_modified_us"])
    ms = entry.get("last_modified_ms")
    return None if ms is None else int(ms) * 1000
