"""The embedded S3 of a local cluster as its own process: moto's server, with its objects kept across restarts.

``python -m orchestrator.local.embedded_s3 --port 0 --ready-file F [--snapshot-dir D]``

It binds the port itself (0: any free one) and writes ``{"port": ..., "pid": ...}`` to the ready file once it
serves, so nothing can take the port between choosing and binding it. With ``--snapshot-dir`` (see
:mod:`.s3_snapshot`) it first puts back the objects of its last clean stop, and on SIGTERM or SIGINT writes them
all there before it exits.

Invariants:
* It refuses to start (exit status 3, the reason logged as ``s3.objects_lost``) when the snapshot directory says
  the previous run did not stop cleanly: serving an empty bucket under metadata that names its objects would
  lose data silently.
* The ready file appears only after the restore finished: a cluster never sees a half-restored bucket.
* A snapshot that fails to be written is logged (``s3.snapshot_failed``) and the process exits with status 1,
  leaving the directory marked as not cleanly stopped.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import structlog
from moto.core.models import DEFAULT_ACCOUNT_ID
from moto.s3.models import s3_backends
from moto.server import ThreadedMotoServer

from orchestrator.local import s3_snapshot
from orchestrator.logging import configure_logging
from orchestrator.private_files import restrict_process

log = structlog.get_logger(__name__)

EXIT_OBJECTS_LOST = 3


def _publish(ready_file: Path, port: int) -> None:
    tmp = ready_file.with_name(ready_file.name + ".tmp")
    tmp.write_text(json.dumps({"port": port, "pid": os.getpid()}))
    tmp.replace(ready_file)


_USER_META = "x-amz-meta-"
REGION = "us-east-1"  # the region every client of the local cluster names (make_s3_client's default)


class MotoObjects:
    """moto's S3 backend in this process, shaped as :class:`~.s3_snapshot.ObjectStore`: the snapshot reads and puts
    objects there directly (two requests per object over HTTP made a stop of ten thousand objects take minutes).
    moto keeps header names lower-cased and user metadata as ``x-amz-meta-*`` headers, naive UTC datetimes, and
    tags in its tagger; these are read and written as its own request handlers do."""

    def __init__(self) -> None:
        self._backend = s3_backends[DEFAULT_ACCOUNT_ID]["aws"]

    def buckets(self) -> list[str]:
        return sorted(self._backend.buckets)

    def objects(self, bucket: str) -> Iterator[s3_snapshot.StoredObject]:
        keys = self._backend.buckets[bucket].keys
        for name in sorted(keys):
            key = keys[name]
            headers = dict(key.metadata)
            tags = self._backend.get_object_tagging(key)["Tags"]
            yield s3_snapshot.StoredObject(
                key=name,
                body=key.value,
                content_type=headers.get("content-type"),
                metadata={k[len(_USER_META) :]: v for k, v in headers.items() if k.startswith(_USER_META)},
                tags={t["Key"]: t["Value"] for t in tags},
                last_modified_ms=round(key.last_modified.replace(tzinfo=datetime.UTC).timestamp() * 1000),
            )

    def create_bucket(self, bucket: str) -> None:
        self._backend.create_bucket(bucket, REGION)

    def put(self, bucket: str, obj: s3_snapshot.StoredObject) -> None:
        key = self._backend.put_object(bucket, obj.key, obj.body)
        headers = {f"{_USER_META}{k}": v for k, v in obj.metadata.items()}
        if obj.content_type:
            headers["Content-Type"] = obj.content_type
        key.set_metadata(headers)
        if obj.tags:
            self._backend.put_object_tagging(key, obj.tags)
        if obj.last_modified_ms is not None:
            when = datetime.datetime.fromtimestamp(obj.last_modified_ms / 1000, tz=datetime.UTC)
            key.last_modified = when.replace(tzinfo=None)


def serve(*, host: str, port: int, ready_file: Path, snapshot_dir: Path | None) -> int:
    """Run until SIGTERM/SIGINT; returns the exit status."""
    if snapshot_dir is not None:
        found = s3_snapshot.status(snapshot_dir)
        if found.status is s3_snapshot.SnapshotStatus.LOST:
            log.error(
                "s3.objects_lost",
                snapshot_dir=str(snapshot_dir),
                detail="the previous run of this embedded S3 did not stop cleanly; its objects are gone",
            )
            return EXIT_OBJECTS_LOST
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    server = ThreadedMotoServer(ip_address=host, port=port, verbose=False)
    server.start()
    bound_host, bound_port = server.get_host_and_port()
    objects = MotoObjects()
    status = 0
    try:
        if snapshot_dir is not None:
            restored = s3_snapshot.restore(snapshot_dir, objects)
            s3_snapshot.mark_running(snapshot_dir)
            log.info("s3.restored", objects=restored, snapshot_dir=str(snapshot_dir))
        _publish(ready_file, bound_port)
        log.info("s3.started", host=bound_host, port=bound_port)
        stop.wait()
        if snapshot_dir is not None:
            try:
                written = s3_snapshot.write(snapshot_dir, objects)
                log.info("s3.snapshot_written", objects=written, snapshot_dir=str(snapshot_dir))
            except Exception:
                log.exception("s3.snapshot_failed", snapshot_dir=str(snapshot_dir))
                status = 1
    finally:
        server.stop()
    log.info("s3.stopped", exit_status=status)
    return status


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m orchestrator.local.embedded_s3", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--ready-file", required=True, type=Path)
    parser.add_argument("--snapshot-dir", type=Path, default=None)
    args = parser.parse_args(argv)
    restrict_process()  # the objects it snapshots to disk: owner only
    configure_logging("service")
    return serve(host=args.host, port=args.port, ready_file=args.ready_file, snapshot_dir=args.snapshot_dir)


if __name__ == "__main__":
    sys.exit(main())
