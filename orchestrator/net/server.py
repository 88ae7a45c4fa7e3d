"""An asyncio server speaking Kafka's framing, dispatching each request to an async handler by api key.

Invariants:

* **One connection, one request at a time, answered in order.** Like a Kafka broker (which mutes a channel until
  its response is sent), the server reads the next request of a connection only after the previous one has been
  answered. Responses therefore leave in request order, and a client that pipelines requests sees their effects
  in the order it sent them. Connections are served concurrently with each other.
* **ApiVersions (18) is the server's own.** It is answered from the schemas of the handlers it was given (each api
  key with the versions both its request and response schemas cover), plus ApiVersions v0-3 itself. An
  ApiVersions request of a version the server does not speak gets, as in Kafka, a v0 response carrying
  UNSUPPORTED_VERSION (35) and the supported keys, so the client can retry with a version it finds there; the
  connection stays open.
* **Bad input costs one connection, never the server.** A malformed frame (random bytes, a truncated frame, a
  negative or oversized size, a body that does not decode; bytes after a body that decodes are ignored, as Kafka
  ignores them, and logged at debug level as ``net.request_trailing_bytes``), a request for an api key without a
  handler or a version the server does not serve: the server logs ``net.bad_frame`` with the peer and the reason
  and closes that connection. Frame sizes are checked before anything is allocated (``max_frame_bytes``).
* **Handlers put errors in their response bodies.** A handler that raises anything — a
  :class:`~orchestrator.errors.KafkaError` included — or returns a body that does not encode is a bug: the server
  logs ``net.handler_failed`` with the traceback and closes that connection; other connections are unaffected.
* **Requests can be traced.** With ``TIEREDCTL_TRACE_REQUESTS=<dir>`` in its environment, a server appends every
  request it decodes, as received (api key, version, client id, the frame's bytes in hex), to
  ``<dir>/<server name>.jsonl``: Kafka's request logger, for finding what a client really sends (the compatibility
  tests keep what real clients send this way). Off by default; a trace that cannot be written is logged once as
  ``net.trace_failed`` and turned off, never failing a request.
* **Who is asking is known before anything is served.** With :class:`Authentication`, a connection's principal
  comes from its verified TLS client certificate (``User:<CN>``) or from a SASL/SCRAM login (SaslHandshake v1, then
  SaslAuthenticate rounds, as Kafka clients speak it; both answered by the server itself, like ApiVersions). While
  SASL is on and a connection has no certificate principal, only ApiVersions, SaslHandshake and SaslAuthenticate
  are served: anything else is logged as ``net.unauthenticated_request`` and closes the connection, as Kafka
  does. A failed login is answered (SASL_AUTHENTICATION_FAILED, the same words for an unknown user and a wrong
  password), logged as ``net.authentication_failed`` with the peer and the user name, and the connection closed.
  Handlers see the principal and the peer's host on :attr:`Request.principal` / :attr:`Request.client_host`.
* **A request may go unanswered** when its handler says so (:data:`NO_RESPONSE`: a Produce with acks=0), or close
  its connection unanswered (:data:`CLOSE_CONNECTION`: such a Produce that failed, as Kafka does).
* **stop() leaves nothing behind.** It closes the listener, cancels every connection (and so every running
  handler), waits for them, and closes every transport; TLS shutdowns are bounded in time.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import ssl
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

import structlog

from orchestrator.errors import (
    ConnectionClosed,
    IllegalSaslState,
    ProtocolError,
    SaslAuthenticationFailed,
    UnsupportedSaslMechanism,
    UnsupportedVersion,
)
from orchestrator.protocol.api_keys import ApiKey
from orchestrator.protocol.framing import (
    DEFAULT_MAX_FRAME_BYTES,
    Request,
    RequestHeader,
    UnsupportedRequest,
    decode_request,
    encode_response,
    read_frame,
)
from orchestrator.protocol.schema import request_schema, response_schema
from orchestrator.security.principals import ANONYMOUS, principal_from_peer_cert
from orchestrator.security.scram import ScramCredential, ScramMechanism, ScramServerExchange

log = structlog.get_logger(__name__)

Handler = Callable[[Request], Awaitable[Mapping[str, object]]]
"""Serves one request: returns the response body (a dict keyed by snake_case field names), or one of the two
markers below."""

NO_RESPONSE: Mapping[str, object] = MappingProxyType({})
"""A handler's answer when the request gets none (a Produce with acks=0): nothing is sent, the connection stays."""

CLOSE_CONNECTION: Mapping[str, object] = MappingProxyType({})
"""A handler's answer when the request gets no response and its connection is closed (a Produce with acks=0 that
failed: Kafka closes the connection so the producer learns of it and refreshes its metadata)."""

TRACE_ENV = "TIEREDCTL_TRACE_REQUESTS"
_CLOSE_TIMEOUT_S = 2.0  # bound on a graceful (TLS close_notify) shutdown before the transport is aborted


CredentialLookup = Callable[[str, str], "ScramCredential | None"]
"""(mechanism, user name) -> that user's SCRAM credential, or None; read from the node's metadata image."""

_SASL_APIS = (ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE)
_BEFORE_LOGIN = frozenset({ApiKey.API_VERSIONS, *_SASL_APIS})
# SaslHandshake v0 is followed by raw SASL tokens outside Kafka's framing; only v1 (tokens in SaslAuthenticate) is
# served, and every client that asks ApiVersions first (all of today's) uses it.
_SASL_HANDSHAKE_VERSIONS = (1, 1)


@dataclass(frozen=True)
class Authentication:
    """What a server asks of its clients: SASL/SCRAM mechanisms offered (empty: no SASL, everyone not identified
    by a certificate is ANONYMOUS) and where the credentials are looked up."""

    sasl_mechanisms: tuple[str, ...] = ()
    credentials: CredentialLookup | None = None

    def __post_init__(self) -> None:
        if self.sasl_mechanisms and self.credentials is None:
            raise ValueError("SASL needs a credential lookup")


NO_AUTHENTICATION = Authentication()


class _Session:
    """One connection's login state."""

    def __init__(self, principal: str | None) -> None:
        self.principal = principal or ANONYMOUS
        self.certified = principal is not None
        self.exchange: ScramServerExchange | None = None
        self.mechanism: str | None = None
        self.logged_in = False


def served_versions(api_key: int) -> tuple[int, int]:
    """The versions of ``api_key`` that both its request and its response schema describe."""
    req, resp = request_schema(api_key), response_schema(api_key)
    if req is None or resp is None:
        raise ValueError(f"api key {api_key} has no request/response schema pair")
    both = req.valid_versions.intersect(resp.valid_versions)
    if both.hi is None or both.lo > both.hi:
        raise ValueError(f"api key {api_key}: request and response schemas share no closed version range")
    return both.lo, both.hi


def format_address(address: Any) -> str:
    """``host:port`` for a socket address tuple (IPv6 hosts in brackets), ``?`` when unknown."""
    if isinstance(address, tuple) and len(address) >= 2:
        host = str(address[0])
        return f"[{host}]:{address[1]}" if ":" in host else f"{host}:{address[1]}"
    return "?" if address is None else str(address)


class RequestTrace:
    """Appends each request frame a server decodes to ``<directory>/<server>.jsonl`` (see the module docstring)."""

    def __init__(self, directory: Path, server: str) -> None:
        self.path = directory / f"{server}.jsonl"
        self._server = server
        self._failed = False

    @classmethod
    def from_env(cls, server: str) -> RequestTrace | None:
        directory = os.environ.get(TRACE_ENV)
        return cls(Path(directory), server) if directory else None

    def record(self, request: Request, payload: bytes) -> None:
        if self._failed:
            return
        header = request.header
        entry = {
            "api_key": header.api_key,
            "api_version": header.api_version,
            "client_id": header.client_id,
            "frame": payload.hex(),
        }
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a", encoding="utf-8") as out:
                out.write(json.dumps(entry) + "\n")
        except OSError as exc:
            self._failed = True
            log.warning("net.trace_failed", server=self._server, path=str(self.path), error=repr(exc))


class KafkaServer:
    """Serves Kafka-framed requests to ``handlers`` (api key -> handler); see the module docstring for the rules.

    Counters for tests and metrics: ``accepted_connections``, ``closed_connections``, ``requests_handled``
    (ApiVersions included), ``bad_frames``, ``handler_failures``.
    """

    def __init__(
        self,
        *,
        name: str,
        host: str,
        port: int,
        handlers: Mapping[int, Handler],
        ssl_context: ssl.SSLContext | None = None,
        authentication: Authentication = NO_AUTHENTICATION,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        idle_timeout_s: float | None = None,
    ) -> None:
        own = sorted(key for key in (ApiKey.API_VERSIONS, *_SASL_APIS) if key in handlers)
        if own:
            raise ValueError(f"api keys {own} are answered by the server itself; do not register handlers for them")
        if max_frame_bytes < 0:
            raise ValueError(f"max_frame_bytes must be >= 0, got {max_frame_bytes}")
        self.name = name
        self._host = host
        self._port = port
        self._handlers = dict(handlers)
        self._ssl_context = ssl_context
        self._authentication = authentication
        self._max_frame_bytes = max_frame_bytes
        self._idle_timeout_s = idle_timeout_s
        versions = {key: served_versions(key) for key in self._handlers}
        versions[ApiKey.API_VERSIONS] = served_versions(ApiKey.API_VERSIONS)
        if authentication.sasl_mechanisms:
            versions[ApiKey.SASL_HANDSHAKE] = _SASL_HANDSHAKE_VERSIONS
            versions[ApiKey.SASL_AUTHENTICATE] = served_versions(ApiKey.SASL_AUTHENTICATE)
        self.api_versions: Mapping[int, tuple[int, int]] = dict(sorted(versions.items()))
        self._server: asyncio.Server | None = None
        self._address: tuple[str, int] | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._trace = RequestTrace.from_env(name)
        self.accepted_connections = 0
        self.closed_connections = 0
        self.requests_handled = 0
        self.bad_frames = 0
        self.handler_failures = 0
        self.authentication_failures = 0
        self.unauthenticated_requests = 0

    @property
    def address(self) -> tuple[str, int]:
        """The bound (host, port); only after :meth:`start`."""
        if self._address is None:
            raise RuntimeError(f"server {self.name} is not started")
        return self._address

    @property
    def open_connections(self) -> int:
        return len(self._tasks)

    async def start(self) -> tuple[str, int]:
        """Bind and listen; returns the bound (host, port) (the real port when ``port`` was 0)."""
        if self._server is not None:
            raise RuntimeError(f"server {self.name} is already started")
        self._server = await asyncio.start_server(self._on_connect, self._host, self._port, ssl=self._ssl_context)
        sockname = self._server.sockets[0].getsockname()
        self._address = (str(sockname[0]), int(sockname[1]))
        log.info(
            "net.listening",
            server=self.name,
            address=format_address(self._address),
            tls=self._ssl_context is not None,
            sasl=list(self._authentication.sasl_mechanisms),
            api_keys=sorted(self.api_versions),
        )
        return self._address

    async def stop(self) -> None:
        """Close the listener and every connection, cancelling running handlers, and wait for all of it."""
        server, self._server = self._server, None
        if server is not None:
            server.close()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if server is not None:
            await server.wait_closed()
            log.info("net.stopped", server=self.name, accepted=self.accepted_connections)

    async def __aenter__(self) -> KafkaServer:
        await self.start()
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.stop()

    # --- connections

    def _on_connect(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # A plain callback that starts a task the server owns: stop() can cancel and await it, and asyncio's own
        # wrapper task (which mis-reports cancellation) is never created.
        task = asyncio.get_running_loop().create_task(self._serve(reader, writer))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = format_address(writer.get_extra_info("peername"))
        self.accepted_connections += 1
        log.debug("net.accepted", server=self.name, peer=peer)
        try:
            await self._serve_requests(reader, writer, peer)
        finally:
            await _close_writer(writer)
            self.closed_connections += 1
            log.debug("net.closed", server=self.name, peer=peer)

    async def _serve_requests(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, peer: str) -> None:
        session = _Session(principal_from_peer_cert(writer.get_extra_info("peercert")))
        if session.certified:
            log.debug("net.certificate_principal", server=self.name, peer=peer, principal=session.principal)
        while True:
            try:
                async with asyncio.timeout(self._idle_timeout_s):
                    payload = await read_frame(reader, max_frame_bytes=self._max_frame_bytes)
            except ConnectionClosed:
                return
            except TimeoutError:
                log.info("net.idle_timeout", server=self.name, peer=peer, idle_timeout_s=self._idle_timeout_s)
                return
            except ProtocolError as exc:
                self._bad_frame(peer, exc.message)
                return
            except OSError as exc:  # reset by the peer, TLS errors (ssl.SSLError is an OSError)
                log.info("net.connection_error", server=self.name, peer=peer, error=repr(exc))
                return
            response, keep_open = await self._respond(payload, peer, session)
            if response is not None:
                writer.write(response)
                try:
                    await writer.drain()
                except OSError as exc:
                    log.info("net.connection_error", server=self.name, peer=peer, error=repr(exc))
                    return
            if not keep_open:
                return

    async def _respond(self, payload: bytes, peer: str, session: _Session) -> tuple[bytes | None, bool]:
        """The framed response to one request payload (None: nothing to send) and whether the connection stays."""
        try:
            request = decode_request(payload)
        except UnsupportedRequest as exc:
            if exc.api_key == ApiKey.API_VERSIONS:
                # Kafka's rule: answer in v0, which every client can read, with the versions we do speak.
                self.requests_handled += 1
                log.info("net.api_versions_unsupported", server=self.name, peer=peer, version=exc.api_version)
                header = RequestHeader(ApiKey.API_VERSIONS, 0, exc.correlation_id, None)
                return encode_response(header, self._api_versions_body(UnsupportedVersion.code)), True
            self._bad_frame(peer, exc.message)
            return None, False
        except ProtocolError as exc:
            self._bad_frame(peer, exc.message)
            return None, False
        header = request.header
        if self._trace is not None:
            self._trace.record(request, payload)
        if request.trailing_bytes:  # ignored, as Kafka does (orchestrator.protocol.framing); librdkafka sends them
            log.debug(
                "net.request_trailing_bytes",
                server=self.name,
                peer=peer,
                api=request.schema.name,
                api_version=header.api_version,
                trailing_bytes=request.trailing_bytes,
            )
        if header.api_key == ApiKey.API_VERSIONS:
            self.requests_handled += 1
            return encode_response(header, self._api_versions_body(0)), True
        served = self.api_versions.get(header.api_key)
        if served is None:
            self._bad_frame(peer, f"no handler for {request.schema.name} (api key {header.api_key})")
            return None, False
        lo, hi = served
        if not lo <= header.api_version <= hi:
            self._bad_frame(peer, f"{request.schema.name} version {header.api_version} is not served ({lo}-{hi})")
            return None, False
        if header.api_key in _SASL_APIS:
            self.requests_handled += 1
            answer, keep_open = self._login(request, peer, session)
            return encode_response(header, answer), keep_open
        if self._authentication.sasl_mechanisms and not (session.certified or session.logged_in):
            self.unauthenticated_requests += 1
            log.warning(
                "net.unauthenticated_request", server=self.name, peer=peer, api=request.schema.name, reason="no login"
            )
            return None, False
        handler = self._handlers[header.api_key]
        request = dataclasses.replace(request, principal=session.principal, client_host=_host_of(peer))
        try:
            body = await handler(request)
            if body is NO_RESPONSE or body is CLOSE_CONNECTION:
                self.requests_handled += 1
                return None, body is NO_RESPONSE
            response = encode_response(header, body)
        except Exception:  # a bug in a handler must cost its connection, not the server
            self.handler_failures += 1
            log.error(
                "net.handler_failed",
                server=self.name,
                peer=peer,
                api=request.schema.name,
                api_version=header.api_version,
                correlation_id=header.correlation_id,
                exc_info=True,
            )
            return None, False
        self.requests_handled += 1
        return response, True

    # --- SASL

    def _login(self, request: Request, peer: str, session: _Session) -> tuple[dict[str, Any], bool]:
        """Answer SaslHandshake or SaslAuthenticate; the connection stays open unless the login failed."""
        if request.header.api_key == ApiKey.SASL_HANDSHAKE:
            return self._handshake(str(request.body["mechanism"]), peer, session)
        if session.exchange is None or session.logged_in:
            return self._login_failed(peer, session, IllegalSaslState("SaslAuthenticate without a handshake"))
        try:
            reply = session.exchange.step(bytes(request.body["auth_bytes"]))
        except (SaslAuthenticationFailed, IllegalSaslState) as exc:
            return self._login_failed(peer, session, exc)
        if session.exchange.done:
            session.logged_in = True
            session.principal = f"User:{session.exchange.username}"
            log.info(
                "net.authenticated",
                server=self.name,
                peer=peer,
                principal=session.principal,
                mechanism=session.mechanism,
            )
        body = {"error_code": 0, "error_message": None, "auth_bytes": reply, "session_lifetime_ms": 0}
        return body, True

    def _handshake(self, mechanism: str, peer: str, session: _Session) -> tuple[dict[str, Any], bool]:
        offered = list(self._authentication.sasl_mechanisms)
        error: UnsupportedSaslMechanism | IllegalSaslState | None = None
        if session.exchange is not None or session.logged_in:
            error = IllegalSaslState("a second SaslHandshake on one connection")
        elif mechanism not in offered:
            error = UnsupportedSaslMechanism(f"{mechanism!r} is not offered; offered: {offered}")
        if error is not None:
            self.authentication_failures += 1
            log.warning("net.authentication_failed", server=self.name, peer=peer, mechanism=mechanism, error=error.name)
            return {"error_code": error.code, "mechanisms": offered}, False
        lookup = self._authentication.credentials
        assert lookup is not None  # Authentication checks it when SASL is on
        session.mechanism = mechanism
        session.exchange = ScramServerExchange(
            ScramMechanism.from_name(mechanism), lambda user: lookup(mechanism, user)
        )
        return {"error_code": 0, "mechanisms": offered}, True

    def _login_failed(
        self, peer: str, session: _Session, error: SaslAuthenticationFailed | IllegalSaslState
    ) -> tuple[dict[str, Any], bool]:
        self.authentication_failures += 1
        reason = session.exchange.failure_reason if session.exchange is not None else error.message
        log.warning(
            "net.authentication_failed",
            server=self.name,
            peer=peer,
            mechanism=session.mechanism,
            error=error.name,
            reason=reason,
        )
        message = (
            f"Authentication failed during authentication due to invalid credentials with SASL mechanism "
            f"{session.mechanism}"
            if isinstance(error, SaslAuthenticationFailed)
            else error.message
        )
        body = {"error_code": error.code, "error_message": message, "auth_bytes": b"", "session_lifetime_ms": 0}
        return body, False

    def _api_versions_body(self, error_code: int) -> dict[str, Any]:
        return {
            "error_code": error_code,
            "api_keys": [
                {"api_key": key, "min_version": lo, "max_version": hi} for key, (lo, hi) in self.api_versions.items()
            ],
            "throttle_time_ms": 0,
        }

    def _bad_frame(self, peer: str, reason: str) -> None:
        self.bad_frames += 1
        log.warning("net.bad_frame", server=self.name, peer=peer, reason=reason)


def _host_of(peer: str) -> str:
    """The host part of a ``host:port`` / ``[v6]:port`` peer label."""
    host = peer.rpartition(":")[0]
    return host.strip("[]") or peer


async def _close_writer(writer: asyncio.StreamWriter) -> None:
    """Close a stream, bounded in time: a TLS peer that never answers close_notify gets the transport aborted."""
    writer.close()
    try:
        async with asyncio.timeout(_CLOSE_TIMEOUT_S):
            await writer.wait_closed()
    except TimeoutError:
        writer.transport.abort()
    except OSError:  # the peer reset the connection while we closed it: closed all the same
        pass
    except asyncio.CancelledError:
        writer.transport.abort()
        raise


__all__ = [
    "NO_AUTHENTICATION",
    "Authentication",
    "CredentialLookup",
    "Handler",
    "KafkaServer",
    "format_address",
    "served_versions",
]
