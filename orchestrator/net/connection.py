"""A Kafka-protocol client connection that multiplexes requests by correlation id, and a pool of them.

Invariants:

* **Many requests in flight on one connection.** :meth:`KafkaConnection.request` writes its frame and waits on a
  future registered under a fresh correlation id; one reader task per connection reads every response and routes it
  by correlation id, so responses are matched even when they arrive out of order. Thousands of concurrent requests
  to one address cost one socket and one task, not one each.
* **Every waiting request ends.** When the connection dies (refused, reset, closed by the peer, a frame that cannot
  be read) every pending request fails with :class:`~orchestrator.errors.BrokerNotAvailable` (retriable) naming the
  address; a request that gets no answer within its ``timeout_s`` fails with
  :class:`~orchestrator.errors.RequestTimedOut` (its late answer, if any, is dropped). A response that does not
  decode fails only its own request: the frame boundaries are intact, so the connection stays usable.
* **A dead connection is never reused.** Once closed, :meth:`KafkaConnection.request` fails at once;
  :class:`ConnectionPool` keeps one connection per (host, port), opens it once however many callers ask at the same
  time, and opens a new one on the next request after the old one died.
* **A server that hangs up unanswered is explained.** A plaintext connection without a login that the server ends
  before any answer but ApiVersions (what a TLS or SASL listener does to such a client) fails its requests with a
  reason that says so and which client properties to connect with, not only "closed by the server".
* **A login before anything else.** With SASL credentials, :meth:`KafkaConnection.open` logs in (SaslHandshake v1,
  then SaslAuthenticate rounds of SCRAM) before the connection is handed out; a refused login closes it and raises
  :class:`~orchestrator.errors.SaslAuthenticationFailed` (not retriable: the same password fails the same way),
  with the server's message and never the password.
* **ApiVersions, the Kafka way.** :meth:`KafkaConnection.api_versions` asks with our highest version; a server that
  does not speak it answers in v0 with UNSUPPORTED_VERSION and its own range, and we retry once with the highest
  version we share. The result is cached on the connection, so a reconnect (possibly to an upgraded server)
  negotiates again.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Mapping
from typing import Any

import structlog

from orchestrator.errors import (
    BrokerNotAvailable,
    ConnectionClosed,
    ProtocolError,
    RequestTimedOut,
    TieredError,
    UnsupportedVersion,
    for_code,
)
from orchestrator.net.client_security import SaslCredentials
from orchestrator.net.server import format_address, served_versions
from orchestrator.protocol.api_keys import ApiKey
from orchestrator.protocol.framing import (
    DEFAULT_MAX_FRAME_BYTES,
    decode_response,
    encode_request,
    read_frame,
)
from orchestrator.protocol.schema import request_schema
from orchestrator.security.scram import ScramClientExchange, ScramMechanism

log = structlog.get_logger(__name__)

Address = tuple[str, int]

DEFAULT_CLIENT_ID = "tieredctl"
DEFAULT_REQUEST_TIMEOUT_S = 30.0  # Kafka's request.timeout.ms
_CLOSE_TIMEOUT_S = 2.0
_MAX_CORRELATION_ID = 2**31 - 1


def _api_name(api_key: int) -> str:
    req = request_schema(api_key)
    return req.name.removesuffix("Request") if req is not None else f"api key {api_key}"


def highest_common_version(api_key: int, ours: tuple[int, int], theirs: Mapping[int, tuple[int, int]]) -> int:
    """The highest version of ``api_key`` in both ranges; UnsupportedVersion when they do not overlap."""
    if api_key not in theirs:
        raise UnsupportedVersion(f"the server does not serve {_api_name(api_key)} (api key {api_key})")
    lo, hi = max(ours[0], theirs[api_key][0]), min(ours[1], theirs[api_key][1])
    if lo > hi:
        raise UnsupportedVersion(
            f"{_api_name(api_key)}: we speak versions {ours[0]}-{ours[1]}, "
            f"the server {theirs[api_key][0]}-{theirs[api_key][1]}"
        )
    return hi


class KafkaConnection:
    """One client connection; open it with :meth:`open`, close it with :meth:`close` (or ``async with``)."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        address: Address,
        client_id: str,
        max_frame_bytes: int,
        secured: bool = False,
    ) -> None:
        self.address = address
        self._secured = secured  # TLS or a SASL login: what a server that closes on sight may want
        self._answered = False
        self._label = format_address(address)
        self._reader = reader
        self._writer = writer
        self._client_id = client_id
        self._max_frame_bytes = max_frame_bytes
        self._pending: dict[int, tuple[int, int, asyncio.Future[dict[str, Any]]]] = {}
        self._next_id = 0
        self._closed_reason: str | None = None
        self._api_versions: dict[int, tuple[int, int]] | None = None
        self._reader_task = asyncio.get_running_loop().create_task(self._read_responses())

    @classmethod
    async def open(
        cls,
        host: str,
        port: int,
        *,
        ssl_context: ssl.SSLContext | None = None,
        sasl: SaslCredentials | None = None,
        client_id: str = DEFAULT_CLIENT_ID,
        connect_timeout_s: float = 5.0,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
    ) -> KafkaConnection:
        """Connect (with ``ssl_context``, complete the TLS handshake; with ``sasl``, log in); BrokerNotAvailable when
        the connection fails, SaslAuthenticationFailed when the login is refused."""
        label = format_address((host, port))
        try:
            async with asyncio.timeout(connect_timeout_s):
                reader, writer = await asyncio.open_connection(host, port, ssl=ssl_context)
        except TimeoutError as exc:
            raise BrokerNotAvailable(f"{label}: no connection within {connect_timeout_s}s") from exc
        except OSError as exc:  # refused, unreachable, reset, TLS handshake refused (ssl.SSLError)
            raise BrokerNotAvailable(f"{label}: cannot connect: {exc}") from exc
        log.debug("net.connected", address=label, tls=ssl_context is not None)
        secured = ssl_context is not None or sasl is not None
        conn = cls(
            reader, writer, address=(host, port), client_id=client_id, max_frame_bytes=max_frame_bytes, secured=secured
        )
        if sasl is not None:
            try:
                await conn._login(sasl, timeout_s=connect_timeout_s)
            except BaseException:
                await conn.close()
                raise
        return conn

    @property
    def closed(self) -> bool:
        return self._closed_reason is not None

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    async def request(
        self, api_key: int, version: int, body: Mapping[str, object], *, timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S
    ) -> dict[str, Any]:
        """Send one request and wait for its response body.

        BrokerNotAvailable when the connection is or becomes unusable, RequestTimedOut after ``timeout_s``,
        ProtocolError when the response does not decode; an unknown api key or version raises before sending.
        """
        if self._closed_reason is not None:
            raise BrokerNotAvailable(f"{self._label}: connection closed ({self._closed_reason})")
        correlation_id = self._take_correlation_id()
        data = encode_request(api_key, version, correlation_id, body, client_id=self._client_id)
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[correlation_id] = (api_key, version, future)
        try:
            async with asyncio.timeout(timeout_s):
                self._writer.write(data)
                await self._writer.drain()  # waits only when the socket buffer is above its high-water mark
                return await future
        except TimeoutError as exc:
            raise RequestTimedOut(
                f"{self._label}: {_api_name(api_key)} v{version} (correlation id {correlation_id}) "
                f"got no response within {timeout_s}s"
            ) from exc
        except OSError as exc:  # the write side failed; the reader fails the other requests
            raise BrokerNotAvailable(f"{self._label}: connection lost while sending: {exc!r}") from exc
        finally:
            self._pending.pop(correlation_id, None)
            if future.done() and not future.cancelled():
                future.exception()  # mark it retrieved: the caller may have gone before it was failed

    async def api_versions(self, *, timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S) -> dict[int, tuple[int, int]]:
        """The server's api key -> (min, max) version ranges, negotiated once per connection."""
        if self._api_versions is not None:
            return dict(self._api_versions)
        ours = served_versions(ApiKey.API_VERSIONS)
        version = ours[1]
        for _ in range(2):  # our highest, then (after UNSUPPORTED_VERSION) the highest we share
            body = await self.request(ApiKey.API_VERSIONS, version, {}, timeout_s=timeout_s)
            theirs = {int(k["api_key"]): (int(k["min_version"]), int(k["max_version"])) for k in body["api_keys"]}
            if body["error_code"] == 0:
                self._api_versions = theirs
                return dict(theirs)
            if body["error_code"] != UnsupportedVersion.code:
                break
            version = highest_common_version(ApiKey.API_VERSIONS, ours, theirs)
        raise UnsupportedVersion(f"{self._label}: ApiVersions failed with error code {body['error_code']}")

    def pick_version(self, api_key: int, ours: tuple[int, int]) -> int:
        """The highest version of ``api_key`` both sides speak; call :meth:`api_versions` first."""
        if self._api_versions is None:
            raise RuntimeError(f"{self._label}: api_versions() has not been negotiated yet")
        return highest_common_version(api_key, ours, self._api_versions)

    async def close(self) -> None:
        """Fail every pending request, stop the reader and close the socket; idempotent."""
        if self._closed_reason is None:
            self._closed_reason = "closed by the client"
        self._reader_task.cancel()
        await asyncio.gather(self._reader_task, return_exceptions=True)
        self._writer.close()
        try:
            async with asyncio.timeout(_CLOSE_TIMEOUT_S):
                await self._writer.wait_closed()
        except TimeoutError:
            self._writer.transport.abort()
        except OSError:
            pass

    async def __aenter__(self) -> KafkaConnection:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.close()

    # --- internals

    async def _login(self, sasl: SaslCredentials, *, timeout_s: float) -> None:
        handshake = await self.request(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": sasl.mechanism}, timeout_s=timeout_s)
        if handshake["error_code"] != 0:
            raise _login_error(
                handshake, f"{self._label}: SASL {sasl.mechanism} refused, server offers {handshake['mechanisms']}"
            )
        exchange = ScramClientExchange(ScramMechanism.from_name(sasl.mechanism), sasl.username, sasl.password)
        message = exchange.first()
        for round_number in (1, 2):
            reply = await self.request(ApiKey.SASL_AUTHENTICATE, 1, {"auth_bytes": message}, timeout_s=timeout_s)
            if reply["error_code"] != 0:
                raise _login_error(reply, f"{self._label}: login of {sasl.username!r} refused")
            if round_number == 1:
                message = exchange.step(bytes(reply["auth_bytes"]))
            else:
                exchange.finish(bytes(reply["auth_bytes"]))
        log.debug("net.logged_in", address=self._label, user=sasl.username, mechanism=sasl.mechanism)

    def _take_correlation_id(self) -> int:
        for _ in range(len(self._pending) + 1):  # a free id is at most len(pending) steps away
            correlation_id = self._next_id
            self._next_id = 0 if correlation_id >= _MAX_CORRELATION_ID else correlation_id + 1
            if correlation_id not in self._pending:
                return correlation_id
        raise AssertionError("no free correlation id")  # unreachable: there are more ids than pending requests

    async def _read_responses(self) -> None:
        reason = "closed by the client"
        try:
            while True:
                payload = await read_frame(self._reader, max_frame_bytes=self._max_frame_bytes)
                self._route(payload)
        except ConnectionClosed:
            reason = "closed by the server" + self._unanswered_hint()
        except ProtocolError as exc:
            reason = f"unreadable frame from the server: {exc.message}" + self._unanswered_hint()
        except OSError as exc:
            reason = f"connection error: {exc!r}" + self._unanswered_hint()
        finally:
            self._fail_pending(reason)
            self._writer.close()  # release the transport now; close() still awaits the shutdown

    def _unanswered_hint(self) -> str:
        """What a plaintext, unauthenticated connection that the server ended before any answer most likely met."""
        if self._answered or self._secured:
            return ""
        return (
            " before answering anything, as a listener that requires TLS or SASL does to a client without them: "
            "connect with the cluster's client properties (security.protocol, ssl.*, sasl.*), e.g. tieredctl "
            "--command-config FILE (a local cluster started with --tls or --sasl wrote client.properties in its "
            "directory)"
        )

    def _route(self, payload: bytes) -> None:
        if len(payload) < 4:
            raise ProtocolError(f"response of {len(payload)} bytes has no correlation id")
        correlation_id = int.from_bytes(payload[:4], "big", signed=True)
        entry = self._pending.pop(correlation_id, None)
        if entry is None:
            # Most likely the answer to a request that timed out; the stream itself is still in sync.
            log.info("net.unexpected_response", address=self._label, correlation_id=correlation_id)
            return
        api_key, version, future = entry
        self._answered = self._answered or api_key != ApiKey.API_VERSIONS  # served before any login: no proof
        if future.done():
            return
        try:
            _, body = decode_response(payload, api_key, version)
        except ProtocolError as exc:
            if api_key == ApiKey.API_VERSIONS and version > 0:
                # A server that does not speak our ApiVersions version answers in v0 (Kafka's rule).
                try:
                    _, body = decode_response(payload, api_key, 0)
                except ProtocolError:
                    future.set_exception(exc)
                    return
            else:
                future.set_exception(exc)
                return
        future.set_result(body)

    def _fail_pending(self, reason: str) -> None:
        if self._closed_reason is None:
            self._closed_reason = reason
            log.info("net.connection_lost", address=self._label, reason=reason, pending=len(self._pending))
        pending, self._pending = self._pending, {}
        for _api_key, _version, future in pending.values():
            if not future.done():
                future.set_exception(BrokerNotAvailable(f"{self._label}: {self._closed_reason}"))


def _login_error(reply: Mapping[str, Any], context: str) -> TieredError:
    """The typed error of a refused SaslHandshake / SaslAuthenticate, with the server's message."""
    detail = reply.get("error_message") or ""
    return for_code(int(reply["error_code"]))(f"{context}: {detail}" if detail else context)


class ConnectionPool:
    """One shared :class:`KafkaConnection` per (host, port), reopened on demand after it dies."""

    def __init__(
        self,
        *,
        ssl_context: ssl.SSLContext | None = None,
        sasl: SaslCredentials | None = None,
        client_id: str = DEFAULT_CLIENT_ID,
        connect_timeout_s: float = 5.0,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
    ) -> None:
        self._ssl_context = ssl_context
        self._sasl = sasl
        self._client_id = client_id
        self._connect_timeout_s = connect_timeout_s
        self._max_frame_bytes = max_frame_bytes
        self._connections: dict[Address, KafkaConnection] = {}
        self._opening: dict[Address, asyncio.Task[KafkaConnection]] = {}
        self._closed = False
        self.connections_opened = 0

    async def connection(self, address: Address) -> KafkaConnection:
        """The live connection to ``address``, opening it (once, for all concurrent callers) when needed."""
        if self._closed:
            raise RuntimeError("the connection pool is closed")
        conn = self._connections.get(address)
        if conn is not None and not conn.closed:
            return conn
        opening = self._opening.get(address)
        if opening is None:
            opening = asyncio.get_running_loop().create_task(self._open(address))
            self._opening[address] = opening
            opening.add_done_callback(lambda task: self._opened(address, task))
        # Shielded: a caller that gives up must not cancel the open the other callers are waiting on.
        return await asyncio.shield(opening)

    async def request(
        self,
        address: Address,
        api_key: int,
        version: int,
        body: Mapping[str, object],
        *,
        timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S,
    ) -> dict[str, Any]:
        conn = await self.connection(address)
        return await conn.request(api_key, version, body, timeout_s=timeout_s)

    async def api_versions(
        self, address: Address, *, timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S
    ) -> dict[int, tuple[int, int]]:
        """The server's version ranges, negotiated once per connection."""
        conn = await self.connection(address)
        return await conn.api_versions(timeout_s=timeout_s)

    async def close(self) -> None:
        self._closed = True
        opening = list(self._opening.values())
        for task in opening:
            task.cancel()
        await asyncio.gather(*opening, return_exceptions=True)
        connections, self._connections = list(self._connections.values()), {}
        await asyncio.gather(*(conn.close() for conn in connections))

    async def __aenter__(self) -> ConnectionPool:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.close()

    async def _open(self, address: Address) -> KafkaConnection:
        old = self._connections.pop(address, None)
        if old is not None:
            await old.close()  # already dead; this releases its reader task and transport
        conn = await KafkaConnection.open(
            address[0],
            address[1],
            ssl_context=self._ssl_context,
            sasl=self._sasl,
            client_id=self._client_id,
            connect_timeout_s=self._connect_timeout_s,
            max_frame_bytes=self._max_frame_bytes,
        )
        self._connections[address] = conn
        self.connections_opened += 1
        return conn

    def _opened(self, address: Address, task: asyncio.Task[KafkaConnection]) -> None:
        if self._opening.get(address) is task:
            del self._opening[address]
        if not task.cancelled():
            task.exception()  # retrieved here, so a failed open that nobody awaited any more is not reported


__all__ = ["Address", "ConnectionPool", "KafkaConnection", "highest_common_version"]
