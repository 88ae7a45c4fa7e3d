"""The embedded S3 of a local cluster as its own process: moto's server, with its objects kept across restarts.

``python -m orchestrator.local.embedded_s3 --port 0 --ready-file F [--snapshot-dir D] [--credentials-file C]``

It binds the port itself (0: any free one) and writes ``{"port": ..., "pid": ...}`` to the ready file once it
serves, so nothing can take the port between choosing and binding it. With ``--snapshot-dir`` (see
:mod:`.s3_snapshot`) it first puts back the objects of its last clean stop, and on SIGTERM or SIGINT writes them
all there before it exits. With ``--credentials-file`` (a secured cluster's key pair, :mod:`.s3_keys`) every
request must be signed with that pair (:mod:`.s3_sigv4`); without it, moto's server takes any request, as before.

moto's own IAM authentication (``INITIAL_NO_AUTH_ACTION_COUNT``) is not used: it answers every request without an
``Authorization`` header, anonymous or presigned, with an HTML 500 (it reads the missing header), leaves
``/moto-api/`` (which dumps and resets every backend) open, and knows only key pairs of IAM users it generated.
Here, moto's WSGI application is served as moto's ``ThreadedMotoServer`` serves it (werkzeug's threaded server,
moto's request handler), behind :class:`SignedRequestsOnly`.

Invariants:
* With a key pair, no request reaches moto (S3, any other service moto emulates, or ``/moto-api/``) unless it is
  signed with that pair; a refused one gets S3's error response and changes nothing.
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
import http
import io
import json
import os
import secrets
import signal
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import structlog
from moto.core.models import DEFAULT_ACCOUNT_ID
from moto.core.request import PRESERVED_HEADER_NAMES_ENVIRON_KEY
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
from moto.s3.models import s3_backends
from werkzeug.serving import make_server

from orchestrator.local import s3_snapshot
from orchestrator.local.s3_keys import KeyPair, read_key_pair
from orchestrator.local.s3_sigv4 import S3Request, check
from orchestrator.logging import configure_logging
from orchestrator.private_files import restrict_process

if TYPE_CHECKING:
    from _typeshed.wsgi import StartResponse, WSGIApplication, WSGIEnvironment

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
                last_modified_us=to_epoch_us(key.last_modified),
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
        if obj.last_modified_us is not None:
            key.last_modified = from_epoch_us(obj.last_modified_us)


_EPOCH = datetime.datetime(1970, 1, 1)  # naive, as moto keeps its UTC datetimes
_MICROSECOND = datetime.timedelta(microseconds=1)


def to_epoch_us(naive_utc: datetime.datetime) -> int:
    """Microseconds since the epoch of one of moto's naive UTC datetimes, exactly (no float: a time at .9996 s must
    not become the next second, which is what a client would read in ``Last-Modified``)."""
    return (naive_utc - _EPOCH) // _MICROSECOND


def from_epoch_us(us: int) -> datetime.datetime:
    """The naive UTC datetime moto keeps, from :func:`to_epoch_us`'s count."""
    return _EPOCH + us * _MICROSECOND


class SignedRequestsOnly:
    """WSGI middleware: a request goes on to ``app`` only when it is signed with ``pair`` (:func:`.s3_sigv4.check`);
    any other gets S3's refusal (its status, ``application/xml`` body and ``x-amz-request-id``; no body to a HEAD)
    and is logged as ``s3.request_refused`` with its method, path and S3 error code."""

    def __init__(
        self,
        app: WSGIApplication,
        pair: KeyPair,
        *,
        clock: Callable[[], datetime.datetime] = lambda: datetime.datetime.now(datetime.UTC),
    ) -> None:
        self._app, self._pair, self._clock = app, pair, clock

    def __call__(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        body = _read_body(environ)
        environ["wsgi.input"] = io.BytesIO(body)  # moto reads the body again
        raw_path, raw_query = _request_target(environ)
        method = str(environ["REQUEST_METHOD"])
        request = S3Request(method, raw_path, raw_query, _headers(environ), body)
        refusal = check(request, self._pair, now=self._clock())
        if refusal is None:
            return self._app(environ, start_response)
        log.info("s3.request_refused", method=method, path=raw_path, code=refusal.code, status=refusal.status)
        request_id = secrets.token_hex(8).upper()
        payload = b"" if method == "HEAD" else refusal.xml(request_id)
        headers = [
            ("Content-Type", "application/xml"),
            ("Content-Length", str(len(payload))),
            ("x-amz-request-id", request_id),
        ]
        start_response(f"{refusal.status} {http.HTTPStatus(refusal.status).phrase}", headers)
        return [payload]


def _request_target(environ: WSGIEnvironment) -> tuple[str, str]:
    """The path and query exactly as the client sent them (werkzeug's ``RAW_URI``; absolute-form reduced to them)."""
    target = str(environ.get("RAW_URI") or environ.get("PATH_INFO", "/"))
    if not target.startswith("/"):
        parts = urlsplit(target)
        return parts.path or "/", parts.query
    raw_path, _, raw_query = target.partition("?")
    return raw_path, raw_query


def _read_body(environ: WSGIEnvironment) -> bytes:
    stream = environ["wsgi.input"]
    length = str(environ.get("CONTENT_LENGTH") or "")
    if length.isdigit():
        return bytes(stream.read(int(length)))
    return bytes(stream.read()) if environ.get("wsgi.input_terminated") else b""


def _headers(environ: WSGIEnvironment) -> dict[str, str]:
    """The request's headers by lower-case name, with the spelling moto's handler kept for underscored ones."""
    original: dict[str, str] = environ.get(PRESERVED_HEADER_NAMES_ENVIRON_KEY, {})
    headers = {}
    for key, value in environ.items():
        if key in ("CONTENT_TYPE", "CONTENT_LENGTH"):
            headers[key.lower().replace("_", "-")] = str(value)
        elif key.startswith("HTTP_"):
            name = original.get(key) or key[5:].replace("_", "-")
            headers[name.lower()] = str(value)
    return headers


class S3Server:
    """moto's application on werkzeug's threaded server with moto's request handler, as ``ThreadedMotoServer``
    runs it, optionally behind :class:`SignedRequestsOnly`; served by a daemon thread until :meth:`stop`."""

    def __init__(self, host: str, port: int, pair: KeyPair | None) -> None:
        app: Any = DomainDispatcherApplication(create_backend_app)
        if pair is not None:
            app = SignedRequestsOnly(app, pair)
        self._server = make_server(host, port, app, threaded=True, request_handler=MotoRequestHandler)
        self._thread = threading.Thread(target=self._server.serve_forever, name="embedded-s3", daemon=True)
        self._thread.start()

    @property
    def host_and_port(self) -> tuple[str, int]:
        host, port = self._server.server_address[:2]
        return str(host), int(port)

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()


def serve(*, host: str, port: int, ready_file: Path, snapshot_dir: Path | None, key_pair: KeyPair | None = None) -> int:
    """Run until SIGTERM/SIGINT; returns the exit status. With ``key_pair``, only requests signed with it are
    served."""
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
    server = S3Server(host, port, key_pair)
    bound_host, bound_port = server.host_and_port
    objects = MotoObjects()
    status = 0
    try:
        if snapshot_dir is not None:
            restored = s3_snapshot.restore(snapshot_dir, objects)
            s3_snapshot.mark_running(snapshot_dir)
            log.info("s3.restored", objects=restored, snapshot_dir=str(snapshot_dir))
        _publish(ready_file, bound_port)
        log.info("s3.started", host=bound_host, port=bound_port, signed_requests_only=key_pair is not None)
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
    parser.add_argument("--credentials-file", type=Path, default=None, help="serve only requests signed with it")
    args = parser.parse_args(argv)
    restrict_process()  # the objects it snapshots to disk: owner only
    configure_logging("service")
    pair = read_key_pair(args.credentials_file) if args.credentials_file is not None else None
    return serve(
        host=args.host, port=args.port, ready_file=args.ready_file, snapshot_dir=args.snapshot_dir, key_pair=pair
    )


if __name__ == "__main__":
    sys.exit(main())
