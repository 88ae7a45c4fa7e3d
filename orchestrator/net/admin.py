"""The Kafka admin-client path: bootstrap, learn the nodes and the controller, send admin requests to it.

A :class:`AdminClient` is given a Kafka-style bootstrap list (``host:port,host:port``). It sends Metadata (v1 or
later, so that ``controller_id`` is present) to the first bootstrap address that answers — then to the nodes it has
learned, so losing the bootstrap node does not strand it — and sends each admin request to the node Metadata names
as the controller, at the highest version both sides speak (from ApiVersions, negotiated once per connection).

Invariants:

* **It follows a failover by itself.** A response whose top-level ``error_code`` is NOT_CONTROLLER (41), a
  controller id that names no known node, or a connection that cannot be made or dies: refresh Metadata and try
  again, at most ``max_attempts`` times with exponential backoff and jitter (tenacity; ``sleep`` is injected so
  tests check the schedule without waiting). When attempts run out the last error is raised as is.
* **Nothing else is retried here.** Any other response is returned as it is, whatever its error codes: callers know
  what the codes of their API mean. A timeout (RequestTimedOut) is not retried either, since the request may have
  been applied; UnsupportedVersion is a permanent mismatch.
* **Bad bootstrap input is refused up front** with :class:`~orchestrator.errors.InvalidArgument` naming the entry.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar, cast

import structlog
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception_type,
    stop_after_attempt,
    wait_exponential,
    wait_random,
)
from tenacity.wait import wait_base

from orchestrator.errors import BrokerNotAvailable, InvalidArgument, NotController, RequestTimedOut
from orchestrator.net.connection import (
    DEFAULT_CLIENT_ID,
    DEFAULT_REQUEST_TIMEOUT_S,
    Address,
    ConnectionPool,
    KafkaConnection,
    highest_common_version,
)
from orchestrator.net.server import format_address
from orchestrator.protocol import messages as m
from orchestrator.protocol.api_keys import ApiKey

log = structlog.get_logger(__name__)

_Response = TypeVar("_Response", bound=Mapping[str, object])

METADATA_VERSIONS = (1, 12)  # v0 has no controller_id (and reads an empty topic list as "all topics")
RETRIABLE = (NotController, BrokerNotAvailable)


def parse_bootstrap(bootstrap: str | Sequence[tuple[str, int]]) -> list[Address]:
    """``"host:port,host:port"`` (IPv6 as ``[::1]:9092``), or (host, port) pairs, to a checked address list."""
    if isinstance(bootstrap, str):
        entries = [e.strip() for e in bootstrap.split(",")]
        if not bootstrap.strip() or any(not e for e in entries):
            raise InvalidArgument(f"bootstrap servers {bootstrap!r}: expected 'host:port[,host:port...]'")
        return [_parse_entry(e) for e in entries]
    addresses = list(bootstrap)
    if not addresses:
        raise InvalidArgument("bootstrap servers: the list is empty")
    for entry in addresses:
        if not (isinstance(entry, tuple) and len(entry) == 2 and isinstance(entry[0], str)):
            raise InvalidArgument(f"bootstrap server {entry!r}: expected a (host, port) pair")
        _check_host_port(entry[0], entry[1], repr(entry))
    return [(host, int(port)) for host, port in addresses]


def _parse_entry(entry: str) -> Address:
    if entry.startswith("["):
        host, sep, rest = entry[1:].partition("]")
        if not sep or not rest.startswith(":"):
            raise InvalidArgument(f"bootstrap server {entry!r}: expected '[ipv6]:port'")
        port_text = rest[1:]
    else:
        host, sep, port_text = entry.rpartition(":")
        if not sep:
            raise InvalidArgument(f"bootstrap server {entry!r}: no port (expected 'host:port')")
        if ":" in host:
            raise InvalidArgument(f"bootstrap server {entry!r}: write an IPv6 address as '[addr]:port'")
    if not port_text.isdigit():
        raise InvalidArgument(f"bootstrap server {entry!r}: port {port_text!r} is not a number")
    port = int(port_text)
    _check_host_port(host, port, repr(entry))
    return host, port


def _check_host_port(host: str, port: object, what: str) -> None:
    if not host or any(c.isspace() for c in host):
        raise InvalidArgument(f"bootstrap server {what}: empty or malformed host")
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise InvalidArgument(f"bootstrap server {what}: port must be 1-65535")


class AdminClient:
    """Admin client for a cluster: Metadata from the bootstrap nodes, admin requests to the active controller."""

    def __init__(
        self,
        bootstrap: str | Sequence[tuple[str, int]],
        *,
        ssl_context: ssl.SSLContext | None = None,
        client_id: str = DEFAULT_CLIENT_ID,
        timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S,
        connect_timeout_s: float = 5.0,
        max_attempts: int = 10,
        backoff_initial_s: float = 0.05,
        backoff_max_s: float = 1.0,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        if max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {max_attempts}")
        self.bootstrap = parse_bootstrap(bootstrap)
        self._pool = ConnectionPool(ssl_context=ssl_context, client_id=client_id, connect_timeout_s=connect_timeout_s)
        self._timeout_s = timeout_s
        self._max_attempts = max_attempts
        # backoff_initial_s * 2**(attempt - 1), capped at backoff_max_s, plus up to backoff_initial_s of jitter so
        # that clients thrown off by the same failover do not come back in lockstep.
        exponential = wait_exponential(multiplier=backoff_initial_s, max=backoff_max_s)
        self._backoff: wait_base = exponential + wait_random(0, backoff_initial_s)
        self._sleep = sleep
        self._brokers: dict[int, Address] = {}
        self._controller_id: int | None = None

    @property
    def brokers(self) -> Mapping[int, Address]:
        """Node id -> (host, port), as of the last Metadata response."""
        return dict(self._brokers)

    @property
    def controller_id(self) -> int | None:
        """The active controller's node id as of the last Metadata response (-1: none known; None: never asked)."""
        return self._controller_id

    async def refresh_metadata(self) -> None:
        """Ask Metadata of the bootstrap addresses, then of known nodes, in order; the first answer wins."""
        candidates = list(self.bootstrap) + [a for a in self._brokers.values() if a not in self.bootstrap]
        failures: list[str] = []
        request: m.MetadataRequest = {"topics": []}
        for address in candidates:
            try:
                conn = await self._pool.connection(address)
                version = await self._negotiate(conn, ApiKey.METADATA, METADATA_VERSIONS)
                raw = await conn.request(ApiKey.METADATA, version, request, timeout_s=self._timeout_s)
            except (BrokerNotAvailable, RequestTimedOut) as exc:
                failures.append(str(exc))
                log.info("admin.metadata_unavailable", address=format_address(address), error=str(exc))
                continue
            body = cast(m.MetadataResponse, raw)
            self._brokers = {b["node_id"]: (b["host"], b["port"]) for b in body["brokers"]}
            self._controller_id = body["controller_id"]
            log.debug(
                "admin.metadata",
                source=format_address(address),
                controller_id=self._controller_id,
                nodes=sorted(self._brokers),
            )
            return
        raise BrokerNotAvailable(f"no bootstrap server answered Metadata: {'; '.join(failures)}")

    async def send_to_controller(
        self,
        api_key: int,
        version_range: tuple[int, int],
        body: Mapping[str, object],
        *,
        timeout_s: float | None = None,
    ) -> dict[str, Any]:
        """Send an admin request to the active controller, following NOT_CONTROLLER and lost connections.

        ``body`` is the request's typed body (``messages.CreateTopicsRequest``...). ``version_range`` is the range
        this caller can build and read; the highest version the controller also speaks is used. Returns the decoded
        response body, untyped because it depends on ``api_key``: the caller casts it to its API's response type
        and interprets the error codes in it (other than NOT_CONTROLLER).
        """
        request_timeout_s = self._timeout_s if timeout_s is None else timeout_s
        retrying = AsyncRetrying(
            stop=stop_after_attempt(self._max_attempts),
            wait=self._backoff,
            retry=retry_if_exception_type(RETRIABLE),
            sleep=self._sleep,
            before_sleep=self._log_retry,
            reraise=True,
        )
        async for attempt in retrying:
            with attempt:
                refresh = attempt.retry_state.attempt_number > 1
                return await self._send_once(api_key, version_range, body, request_timeout_s, refresh)
        raise AssertionError("unreachable: tenacity either returns, raises or retries")

    async def call(
        self,
        api_key: int,
        version_range: tuple[int, int],
        body: Mapping[str, object],
        response: type[_Response],
        *,
        timeout_s: float | None = None,
    ) -> _Response:
        """:meth:`send_to_controller`, its answer read as ``response``, the response type of ``api_key``: the one
        place an admin answer is typed."""
        return cast(_Response, await self.send_to_controller(api_key, version_range, body, timeout_s=timeout_s))

    async def close(self) -> None:
        await self._pool.close()

    async def __aenter__(self) -> AdminClient:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.close()

    # --- internals

    async def _send_once(
        self, api_key: int, version_range: tuple[int, int], body: Mapping[str, object], timeout_s: float, refresh: bool
    ) -> dict[str, Any]:
        if refresh or self._controller_id is None:
            await self.refresh_metadata()
        controller_id = self._controller_id
        address = self._brokers.get(controller_id) if controller_id is not None else None
        if address is None:
            raise NotController(f"Metadata names no known active controller (controller_id={controller_id})")
        conn = await self._pool.connection(address)
        version = await self._negotiate(conn, api_key, version_range)
        response = await conn.request(api_key, version, body, timeout_s=timeout_s)
        if carries_not_controller(response):
            log.info("admin.not_controller", node_id=controller_id, address=format_address(address), api_key=api_key)
            raise NotController(f"node {controller_id} at {format_address(address)} is not the active controller")
        return response

    async def _negotiate(self, conn: KafkaConnection, api_key: int, ours: tuple[int, int]) -> int:
        theirs = await conn.api_versions(timeout_s=self._timeout_s)
        return highest_common_version(api_key, ours, theirs)

    async def _log_retry(self, state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome is not None else None
        log.info(
            "admin.retry",
            attempt=state.attempt_number,
            max_attempts=self._max_attempts,
            sleep_s=round(state.upcoming_sleep, 3),
            error=str(exc),
        )


__all__ = ["METADATA_VERSIONS", "AdminClient", "parse_bootstrap"]


def carries_not_controller(response: Mapping[str, object]) -> bool:
    """NOT_CONTROLLER at the top level, or on every entry of a per-resource result list (CreateTopics,
    DeleteTopics, CreatePartitions and the config APIs report errors per topic or resource, as in Kafka)."""
    if response.get("error_code") == NotController.code:
        return True
    return any(
        isinstance(value, list)
        and value
        and all(isinstance(v, dict) and v.get("error_code") == NotController.code for v in value)
        for value in response.values()
    )
