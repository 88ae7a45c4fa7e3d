"""An HTTP fault proxy in front of an S3 endpoint (moto's server), and the record of what went through it.

:class:`S3FaultProxy` listens on 127.0.0.1 (a port of its own; HTTP/1.1, keep-alive) and forwards each request to
the target, relaying the answer (status, headers, body) unchanged. It names each request's S3 operation and key
from its method, path and query (path-style addressing, ``/bucket/key``: :func:`classify`), and applies the first
of its fault rules (:class:`S3Fault`) that matches and whose dice hit:

* ``slowdown``: 503 with S3's ``SlowDown`` error body and an ``x-amz-request-id``, not forwarded;
* ``internal``: 500 ``InternalError``, not forwarded;
* ``reset``: the client's connection closed with an RST (SO_LINGER 0), not forwarded;
* ``slow``: forwarded ``delay_s`` late;
* ``hang``: the same, with a ``delay_s`` longer than the client waits for an answer (a stalled S3): the client times
  out and tries again while the request is still held, and the held request reaches the target late all the same,
  as one stuck in a real S3's front end may (a write that lands after its writer gave up on it).

A faulted request is always read whole first, so the connection stays in step (a ``reset`` then hits a client
waiting for its answer). The rules are swapped whole (:meth:`S3FaultProxy.set_faults`), never edited, so a request
sees the old rules or the new ones; the dice come from one ``random.Random(seed)``, so a run whose requests come in
the same order draws the same faults.

The mutation log is the truth of what the cluster did to the bucket: every forwarded request that can change it
(:data:`MUTATING`) is logged when the target answered, before the answer is relayed, so whatever a client saw
acknowledged is in the log; a ``DeleteObjects`` is logged once per key its XML body names (once with the key ""
when its body cannot be read). A request the proxy
faulted is not in the log (it never reached the target). One the target never answered (its connection failed)
is logged with status 502: it may or may not have been applied.

Invariants: a malformed request gets a 400 (or its connection closed), never a crashed proxy; the counters and the
log only grow (``set_faults`` resets only each rule's own ``limit`` count, by giving it a new rule); :meth:`close`
ends every thread it started (the joins are bounded in time).
"""

from __future__ import annotations

import contextlib
import http.client
import random
import re
import socket
import struct
import threading
import uuid
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Final, Literal, get_args
from urllib.parse import parse_qs, unquote, urlsplit

from chaos.threads import ThreadSet
from orchestrator.clock import wall_ms

FaultKind = Literal["slowdown", "internal", "reset", "slow", "hang"]
FAULT_KINDS: Final[frozenset[str]] = frozenset(get_args(FaultKind))
MUTATING: Final[frozenset[str]] = frozenset(
    {
        "PutObject",
        "CopyObject",
        "DeleteObject",
        "DeleteObjects",
        "CreateMultipartUpload",
        "UploadPart",
        "CompleteMultipartUpload",
        "AbortMultipartUpload",
    }
)
# The query parameters of ListObjects(V2): a bucket GET with any other (?location, ?uploads...) is "Other".
_LIST_PARAMS: Final = frozenset(
    {"list-type", "prefix", "delimiter", "marker", "max-keys", "encoding-type", "continuation-token", "start-after"}
    | {"fetch-owner", "x-id"}
)
# Object subresources that make a request another operation than the plain one (PutObjectTagging...).
_OBJECT_SUBRESOURCES: Final = frozenset(
    {"acl", "tagging", "retention", "legal-hold", "torrent", "restore", "select", "attributes"}
)
# Hop-by-hop headers (RFC 9110 §7.6.1), Expect (the proxy answers 100-continue itself) and the body's framing,
# which the proxy sets again for the body it sends.
_NOT_FORWARDED: Final = frozenset(
    {"connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade", "expect"}
    | {"content-length"}
)
_UPSTREAM_TIMEOUT_S = 60.0
# A keep-alive connection with no request for this long is closed: longer than any client keeps one idle, so the
# proxy never closes a connection under a client about to reuse it (a fault nobody scheduled).
_IDLE_CONNECTION_S = 600.0
_JOIN_S = 5.0  # close() waits at most this long for all the threads together
_MAX_LINE = 65536
_MAX_TRAILERS = 100


@dataclass(frozen=True)
class S3Fault:
    """One fault rule. ``operation`` None matches any operation; ``key_pattern`` is a regular expression searched
    in the key (None: any key); ``limit`` is how many faults this rule serves at most (None: no limit)."""

    kind: FaultKind
    operation: str | None = None
    key_pattern: str | None = None
    probability: float = 1.0
    delay_s: float = 0.0  # for "slow" and "hang"
    limit: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in FAULT_KINDS:
            raise ValueError(f"unknown S3 fault kind {self.kind!r}; one of {sorted(FAULT_KINDS)}")
        if not 0.0 <= self.probability <= 1.0:
            raise ValueError(f"probability must be within [0, 1], got {self.probability}")
        if self.delay_s < 0 or (self.limit is not None and self.limit < 0):
            raise ValueError(f"delay_s and limit must be >= 0, got {self.delay_s}, {self.limit}")
        if self.key_pattern is not None:
            re.compile(self.key_pattern)  # a bad pattern is refused here, not in a request thread

    def matches(self, operation: str, key: str) -> bool:
        if self.operation is not None and self.operation != operation:
            return False
        return self.key_pattern is None or re.search(self.key_pattern, key) is not None


@dataclass(frozen=True)
class Mutation:
    time_ms: int  # wall clock, when the target answered (the cluster's logs use the same clock)
    operation: str
    key: str
    status: int  # the target's HTTP status; 502: it never answered (applied or not: unknown)


def classify(method: str, path: str, query: Mapping[str, Sequence[str]], headers: Mapping[str, str]) -> tuple[str, str]:
    """The S3 operation and the (URL-decoded) key of a path-style request; ``("Other", key)`` when it is none of
    those the proxy names. ``headers`` are looked up by lower-case name."""
    bucket, _, raw_key = path.lstrip("/").partition("/")
    key = unquote(raw_key)
    params = set(query)
    if not bucket:
        return "Other", ""  # ListBuckets
    if not key:
        if method == "GET" and params <= _LIST_PARAMS:
            return ("ListObjectsV2" if list(query.get("list-type", ())) == ["2"] else "ListObjects"), ""
        if method == "POST" and "delete" in params:
            return "DeleteObjects", ""
        bucket_ops = {"PUT": "CreateBucket", "HEAD": "HeadBucket", "DELETE": "DeleteBucket"}
        if method in bucket_ops and not params - {"x-id"}:
            return bucket_ops[method], ""
        return "Other", ""
    if params & _OBJECT_SUBRESOURCES:
        return "Other", key
    upload = "uploadId" in params
    if method == "PUT":
        if upload and "partNumber" in params:
            return "UploadPart", key  # UploadPartCopy too: a part written either way
        return ("CopyObject" if "x-amz-copy-source" in headers else "PutObject"), key
    if method == "GET":
        return ("Other" if upload else "GetObject"), key  # ListParts
    if method == "HEAD":
        return "HeadObject", key
    if method == "DELETE":
        return ("AbortMultipartUpload" if upload else "DeleteObject"), key
    if method == "POST":
        if "uploads" in params:
            return "CreateMultipartUpload", key
        if upload:
            return "CompleteMultipartUpload", key
    return "Other", key


def deleted_keys(body: bytes, *, aws_chunked: bool = False) -> list[str]:
    """The keys a DeleteObjects request body (``<Delete><Object><Key>...``) names, in order."""
    if aws_chunked:
        body = _aws_unchunk(body)
    root = ET.fromstring(body)
    return [el.text or "" for el in root.iter() if _local(el.tag) == "Key"]


def _local(tag: str) -> str:
    return tag.rpartition("}")[2]


def _aws_unchunk(body: bytes) -> bytes:
    """The payload of an ``aws-chunked`` body: ``<hex size>[;chunk-signature=...]\\r\\n<data>\\r\\n``... ``0``."""
    out, pos = bytearray(), 0
    while True:
        end = body.index(b"\r\n", pos)
        size = int(body[pos:end].split(b";", 1)[0], 16)
        if size == 0:
            return bytes(out)
        out += body[end + 2 : end + 2 + size]
        pos = end + 2 + size + 2


def error_body(code: str, message: str, request_id: str) -> bytes:
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f"<Error><Code>{code}</Code><Message>{message}</Message>"
        f"<RequestId>{request_id}</RequestId><HostId>{request_id}</HostId></Error>"
    ).encode()


_ERRORS: Final[dict[str, tuple[int, str, str]]] = {
    "slowdown": (503, "SlowDown", "Please reduce your request rate."),
    "internal": (500, "InternalError", "We encountered an internal error. Please try again."),
}


class _Rule:
    def __init__(self, fault: S3Fault) -> None:
        self.fault = fault
        self.served = 0


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False  # close() joins the threads itself, bounded in time
    proxy: S3FaultProxy

    def process_request(self, request: Any, client_address: Any) -> None:
        self.proxy._track_connection(request, add=True)
        self.proxy._threads.start(self.process_request_thread, "s3-proxy-request", request, client_address)

    def shutdown_request(self, request: Any) -> None:
        self.proxy._track_connection(request, add=False)
        super().shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client gone mid-request is no news; anything else is a bug of the proxy's, counted, never raised."""
        self.proxy._count_error()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # A request line that cannot be read is answered with a status line (HTTP/1.0), not a bare HTTP/0.9 body.
    default_request_version = "HTTP/1.0"
    timeout = _IDLE_CONNECTION_S
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._handle()

    do_PUT = do_POST = do_DELETE = do_HEAD = do_GET

    def _handle(self) -> None:
        proxy = self.server.proxy
        if proxy._closing.is_set():
            self.close_connection = True
        try:
            body = self._read_body()
        except (ValueError, OSError):
            self.send_error(400, "Bad request body")
            self.close_connection = True
            return
        url = urlsplit(self.path)
        headers = {k.lower(): v for k, v in self.headers.items()}
        operation, key = classify(self.command, url.path, parse_qs(url.query, keep_blank_values=True), headers)
        fault = proxy._request_seen(operation, key)
        if fault is not None and fault.kind == "reset":
            self._reset()
            return
        if fault is not None and fault.kind in _ERRORS:
            self._send_error_xml(*_ERRORS[fault.kind])
            return
        if fault is not None and fault.kind in ("slow", "hang") and proxy._closing.wait(fault.delay_s):
            self._reset()
            return
        status, reason, resp_headers, resp_body = proxy._forward(self.command, self.path, self.headers.items(), body)
        if operation in MUTATING:
            proxy._log_mutations(operation, key, status, body, headers)
        self._relay(status, reason, resp_headers, resp_body)

    def _read_body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            return self._read_chunked()
        length = self.headers.get("Content-Length")
        if length is None:
            return b""
        n = int(length)
        if n < 0:
            raise ValueError(f"negative Content-Length {n}")
        body = self.rfile.read(n)
        if len(body) != n:
            raise ValueError("body shorter than its Content-Length")
        return body

    def _read_chunked(self) -> bytes:
        out = bytearray()
        while True:
            line = self.rfile.readline(_MAX_LINE)
            if not line.endswith(b"\n"):
                raise ValueError("truncated chunk size line")
            size = int(line.split(b";", 1)[0].strip(), 16)
            if size < 0:
                raise ValueError("negative chunk size")
            if size == 0:
                for _ in range(_MAX_TRAILERS):
                    if self.rfile.readline(_MAX_LINE) in (b"\r\n", b"\n", b""):
                        return bytes(out)
                raise ValueError("too many trailers")
            data = self.rfile.read(size)
            if len(data) != size or self.rfile.readline(_MAX_LINE) not in (b"\r\n", b"\n"):
                raise ValueError("truncated chunk")
            out += data

    def _send_error_xml(self, status: int, code: str, message: str) -> None:
        request_id = uuid.uuid4().hex[:16].upper()
        body = b"" if self.command == "HEAD" else error_body(code, message, request_id)
        self.send_response_only(status)
        self.send_header("Content-Type", "application/xml")
        self.send_header("x-amz-request-id", request_id)
        self.send_header("x-amz-id-2", request_id)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _relay(self, status: int, reason: str, headers: list[tuple[str, str]], body: bytes) -> None:
        self.send_response_only(status, reason)
        length = None
        for name, value in headers:
            lower = name.lower()
            if lower == "content-length":
                length = value
            elif lower not in _NOT_FORWARDED:
                self.send_header(name, value)
        if self.command == "HEAD":
            if length is not None:
                self.send_header("Content-Length", length)  # the object's size: a HEAD answer has no body
        elif body or length is not None or status not in (204, 304):
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _reset(self) -> None:
        """Close the client's connection with an RST; the server's own close of it afterwards is a no-op."""
        self.close_connection = True
        sock = self.connection
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.rfile.close()  # the socket's file holds a reference: closing it first makes the close below real
        sock.close()


class S3FaultProxy:
    def __init__(self, target_url: str, *, seed: int = 0) -> None:
        target = urlsplit(target_url)
        if target.scheme != "http" or target.hostname is None:
            raise ValueError(f"the target must be an http:// URL, got {target_url!r}")
        self.target_url = target_url
        self._target = (target.hostname, target.port or 80)
        self._lock = threading.Lock()
        self._rng = random.Random(seed)
        self._rules: tuple[_Rule, ...] = ()
        self._faults_served: Counter[str] = Counter()
        self._requests: Counter[str] = Counter()
        self._mutations: list[Mutation] = []
        self.errors = 0  # requests that failed inside the proxy (a bug, or a client gone mid-answer)
        self._closing = threading.Event()
        self._threads = ThreadSet()
        self._connections: set[socket.socket] = set()
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.proxy = self
        self.port: int = self._server.server_address[1]
        self._threads.start(self._server.serve_forever, "s3-proxy-serve", 0.1)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __repr__(self) -> str:
        return f"S3FaultProxy({self.url} -> {self.target_url})"

    # -- the fault rules -----------------------------------------------------------------------------------------

    def set_faults(self, faults: Iterable[S3Fault]) -> None:
        """Replace the active rules, all at once; each starts with none of its ``limit`` used."""
        rules = tuple(_Rule(f) for f in faults)
        with self._lock:
            self._rules = rules

    def clear(self) -> None:
        self.set_faults(())

    @property
    def faults(self) -> list[S3Fault]:
        with self._lock:
            return [r.fault for r in self._rules]

    # -- what went through ---------------------------------------------------------------------------------------

    @property
    def faults_served(self) -> Counter[str]:
        """Faults served so far, by kind (a copy)."""
        with self._lock:
            return Counter(self._faults_served)

    @property
    def requests(self) -> Counter[str]:
        """Requests received so far, faulted or not, by operation (a copy)."""
        with self._lock:
            return Counter(self._requests)

    def mutations(self) -> list[Mutation]:
        """Every mutation forwarded so far, in the order the target answered them (a copy)."""
        with self._lock:
            return list(self._mutations)

    # -- lifecycle -------------------------------------------------------------------------------------------------

    def close(self) -> None:
        if self._closing.is_set():
            return
        self._closing.set()
        self._server.shutdown()  # serve_forever returns within its poll interval
        self._server.server_close()
        with self._lock:
            connections = list(self._connections)
        for sock in connections:  # wakes the threads waiting for a keep-alive connection's next request
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        self._threads.join_all(_JOIN_S)

    def __enter__(self) -> S3FaultProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def live_threads(self) -> int:
        """How many of the proxy's threads still run (0 once :meth:`close` returned, unless a join timed out)."""
        return self._threads.live()

    # -- for the server and its handlers ---------------------------------------------------------------------------

    def _track_connection(self, sock: socket.socket, *, add: bool) -> None:
        with self._lock:
            if add:
                self._connections.add(sock)
            else:
                self._connections.discard(sock)

    def _count_error(self) -> None:
        with self._lock:
            self.errors += 1

    def _request_seen(self, operation: str, key: str) -> S3Fault | None:
        """Count the request; the fault it gets, if any: the first rule that matches and whose dice hit."""
        with self._lock:
            self._requests[operation] += 1
            for rule in self._rules:
                f = rule.fault
                if not f.matches(operation, key) or (f.limit is not None and rule.served >= f.limit):
                    continue
                if f.probability < 1.0 and self._rng.random() >= f.probability:
                    continue
                rule.served += 1
                self._faults_served[f.kind] += 1
                return f
            return None

    def _forward(
        self, method: str, path: str, headers: Iterable[tuple[str, str]], body: bytes
    ) -> tuple[int, str, list[tuple[str, str]], bytes]:
        """The target's answer to the request; a 502 when it gave none."""
        host, port = self._target
        conn = http.client.HTTPConnection(host, port, timeout=_UPSTREAM_TIMEOUT_S)
        try:
            conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
            has_body = bool(body)
            for name, value in headers:
                lower = name.lower()
                has_body |= lower in ("content-length", "transfer-encoding")
                if lower not in _NOT_FORWARDED:
                    conn.putheader(name, value)
            if has_body:
                conn.putheader("Content-Length", str(len(body)))
            conn.endheaders(body if body else None)
            resp = conn.getresponse()
            data = resp.read()
            return resp.status, resp.reason, resp.getheaders(), data
        except (OSError, http.client.HTTPException) as exc:
            message = f"the proxy got no answer from {self.target_url}: {type(exc).__name__}"
            data = error_body("BadGateway", message, uuid.uuid4().hex[:16].upper())
            return 502, "Bad Gateway", [("Content-Type", "application/xml")], data
        finally:
            conn.close()

    def _log_mutations(self, operation: str, key: str, status: int, body: bytes, headers: Mapping[str, str]) -> None:
        now = wall_ms()
        keys = [key]
        if operation == "DeleteObjects":
            try:
                keys = deleted_keys(body, aws_chunked="aws-chunked" in headers.get("content-encoding", ""))
            except (ET.ParseError, ValueError):
                keys = [""]  # keys unknown: logged once, with no key, for the checker to see
        with self._lock:
            self._mutations.extend(Mutation(now, operation, k, status) for k in keys)
