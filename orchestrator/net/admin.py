"""The Kafka admin-client path: bootstrap, learn the active controller, send admin requests to it.

A :class:`AdminClient` is given a Kafka-style bootstrap list (``host:port,host:port``); an entry may name its node,
``id@host:port`` (Kafka's ``controller.quorum.voters``), and that node is then always reached at that address,
whatever address it advertises (the address it gave is the one that works from here: a NAT, a proxy). It asks
DescribeCluster v1 for the controllers (endpoint type 2, KIP-919) of the bootstrap addresses and of the controllers
it has learned (so losing the bootstrap node does not strand it), and sends each admin request to the node that
answer names as the active controller, at the highest version both sides speak (from ApiVersions, negotiated once
per connection). (Metadata's ``controller_id`` names a broker that forwards Kafka's admin writes, as in KRaft; our
own APIs, the broker lifecycle and DescribeTieredState, are served by the active controller alone.) A node that
serves only the brokers' endpoint (a stock Kafka broker answers MISMATCHED_ENDPOINT_TYPE: Kafka's controllers are
not reached by clients) is asked again for the brokers (endpoint type 1); the ``controller_id`` it names is a broker
(KRaft's brokers forward admin writes to their controller), which then takes the admin requests. Below,
"Metadata" means this DescribeCluster probe.

Invariants:

* **One unresponsive node costs a stagger, not a timeout.** A stopped process (SIGSTOP, a VM paused) still has its
  listening socket: the kernel accepts the connection and the request, and nothing ever answers. So Metadata is
  asked of one candidate at a time, but the next one is asked as well, without cancelling the first, as soon as
  the first fails or has not answered within ``probe_stagger_s`` ("happy eyeballs"). The first answer that names an
  active controller (a node of its own broker list) wins and the other probes are cancelled. An answer naming none
  (an election in progress) is kept and used when no better one comes within a stagger. Which candidate comes first
  is the pure :func:`probe_order`: bootstrap order, then learned nodes, and any address that failed, timed out or
  was overtaken at its last probe behind every other until it answers again.
* **A controller that does not answer is forgotten.** When a request to the controller times out or its connection
  fails, the controller id is dropped and its address goes to the back of the probe order, so the next call
  re-discovers the controller instead of waiting on the same silent node again.
* **It follows a failover by itself.** A response whose top-level ``error_code`` is NOT_CONTROLLER (41) (or on every
  entry of a per-resource list), a controller id that names no known node, or a connection that cannot be made or
  dies: refresh Metadata and try again, at most ``max_attempts`` times, tenacity retrying the call in place with
  the full-jitter backoff of :mod:`orchestrator.backoff` (``backoff_initial_s`` doubling per attempt, capped at
  ``backoff_max_s``; ``sleep`` and ``rng`` are injected so tests check the schedule without waiting). When attempts
  run out the last error is raised as is. A controller that does not answer ApiVersions on a new connection is
  unavailable (BrokerNotAvailable): the admin request itself was not sent.
* **A timeout is retried only when the caller says the request is idempotent.** A RequestTimedOut of a request that
  was sent may mean it was applied, so by default it is raised (after the controller was forgotten). A caller whose
  request may be applied twice (a heartbeat, a registration with the same incarnation id, Metadata, a describe)
  passes ``idempotent=True`` and the request is re-sent, to whichever controller Metadata then names, under the
  same attempt limit; the decision is the pure :func:`should_retry`.
* **Nothing else is retried here.** Any other response is returned as it is, whatever its error codes: callers know
  what the codes of their API mean. UnsupportedVersion is a permanent mismatch.
* **A refusal of the caller is the answer.** A Metadata probe answered CLUSTER_AUTHORIZATION_FAILED (31) raises
  that error at once, with the server's text: every node applies the same ACLs, so asking the others would only
  turn it into "no bootstrap server answered" (BROKER_NOT_AVAILABLE) after every candidate was tried.
* **Bad bootstrap input is refused up front** with :class:`~orchestrator.errors.InvalidArgument` naming the entry.
"""

from __future__ import annotations

import asyncio
import functools
import random
import ssl
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping, Sequence
from typing import Any, TypeVar, cast

import structlog
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_after_attempt, stop_after_delay
from tenacity.stop import StopBaseT

from orchestrator.backoff import Backoff, tenacity_wait
from orchestrator.errors import (
    BrokerNotAvailable,
    ClusterAuthorizationFailed,
    InvalidArgument,
    NotController,
    ProtocolError,
    RequestTimedOut,
    UnsupportedVersion,
    error_name,
    for_code,
)
from orchestrator.net.client_security import SaslCredentials
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

DESCRIBE_CLUSTER_VERSIONS = (1, 1)  # v1: the endpoint type (2, controllers) is in the request
ENDPOINT_BROKERS, ENDPOINT_CONTROLLERS = 1, 2
# DescribeCluster v1's answers of a node that serves the brokers' endpoint only (a stock Kafka broker, KIP-919):
# MISMATCHED_ENDPOINT_TYPE (114), UNSUPPORTED_ENDPOINT_TYPE (115).
_BROKER_ENDPOINT_ONLY = frozenset({114, 115})
RETRIABLE = (NotController, BrokerNotAvailable)  # retried for every request: nothing was applied, or Kafka says so
# Asked of a candidate that has not answered Metadata yet before the next one is asked too; a loopback or LAN
# Metadata round trip takes milliseconds, a busy controller's (its core thread) can take longer: then two answer.
DEFAULT_PROBE_STAGGER_S = 0.25
# What makes a Metadata probe give way to the next candidate (anything else is a bug and propagates).
_PROBE_FAILURES = (BrokerNotAvailable, RequestTimedOut, UnsupportedVersion, ProtocolError)
# A probe answered with one of these ends the search with it: an answer about the caller, the same from every node.
_REFUSALS = frozenset({ClusterAuthorizationFailed.code})


def probe_order(
    bootstrap: Sequence[Address], known: Iterable[Address], unresponsive: Collection[Address]
) -> list[Address]:
    """The order Metadata candidates are asked in: the bootstrap list, then the other nodes learned from Metadata,
    each in its order, with every address in ``unresponsive`` moved behind all the others (keeping its order)."""
    candidates = list(dict.fromkeys([*bootstrap, *known]))
    return [a for a in candidates if a not in unresponsive] + [a for a in candidates if a in unresponsive]


def names_active_controller(body: m.DescribeClusterResponse) -> bool:
    """The answer names an active controller it also gives the address of (-1, "nobody right now", does not)."""
    return any(b["broker_id"] == body["controller_id"] for b in body["brokers"])


def should_retry(exc: BaseException, *, idempotent: bool) -> bool:
    """Whether :meth:`AdminClient.send_to_controller` tries again after ``exc``: NOT_CONTROLLER and an unavailable
    node always; a timeout only for an idempotent request (a timed-out request may have been applied)."""
    if isinstance(exc, RETRIABLE):
        return True
    return idempotent and isinstance(exc, RequestTimedOut)


def parse_bootstrap(bootstrap: str | Sequence[tuple[str, int]]) -> list[Address]:
    """``"host:port,host:port"`` (IPv6 as ``[::1]:9092``; an entry may start with its node id, ``id@``), or (host,
    port) pairs, to a checked address list."""
    if isinstance(bootstrap, str):
        return [address for _, address in _parse_entries(bootstrap)]
    addresses = list(bootstrap)
    if not addresses:
        raise InvalidArgument("bootstrap servers: the list is empty")
    for entry in addresses:
        if not (isinstance(entry, tuple) and len(entry) == 2 and isinstance(entry[0], str)):
            raise InvalidArgument(f"bootstrap server {entry!r}: expected a (host, port) pair")
        _check_host_port(entry[0], entry[1], repr(entry))
    return [(host, int(port)) for host, port in addresses]


def pinned_addresses(bootstrap: str | Sequence[tuple[str, int]]) -> dict[int, Address]:
    """The node id -> address of the bootstrap entries written ``id@host:port``."""
    if not isinstance(bootstrap, str):
        return {}
    return {node: address for node, address in _parse_entries(bootstrap) if node is not None}


def _parse_entries(bootstrap: str) -> list[tuple[int | None, Address]]:
    entries = [e.strip() for e in bootstrap.split(",")]
    if not bootstrap.strip() or any(not e for e in entries):
        raise InvalidArgument(f"bootstrap servers {bootstrap!r}: expected 'host:port[,host:port...]'")
    out: list[tuple[int | None, Address]] = []
    for entry in entries:
        node_text, at, address = entry.rpartition("@")
        if at and not node_text.isdigit():
            raise InvalidArgument(f"bootstrap server {entry!r}: node id {node_text!r} is not a number")
        out.append((int(node_text) if at else None, _parse_entry(address)))
    return out


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
        sasl: SaslCredentials | None = None,
        client_id: str = DEFAULT_CLIENT_ID,
        timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S,
        connect_timeout_s: float = 5.0,
        max_attempts: int = 10,
        retry_within_s: float | None = None,
        backoff_initial_s: float = 0.05,
        backoff_max_s: float = 1.0,
        probe_stagger_s: float = DEFAULT_PROBE_STAGGER_S,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        rng: random.Random | None = None,
    ) -> None:
        if max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {max_attempts}")
        if probe_stagger_s < 0:
            raise ValueError(f"probe_stagger_s must be >= 0, got {probe_stagger_s}")
        self.bootstrap = parse_bootstrap(bootstrap)
        self._pinned = pinned_addresses(bootstrap)  # node id -> the address it is reached at, whatever it advertises
        self._pool = ConnectionPool(
            ssl_context=ssl_context, sasl=sasl, client_id=client_id, connect_timeout_s=connect_timeout_s
        )
        self._timeout_s = timeout_s
        self._retry_within_s = retry_within_s  # an admin request and its retries end this long after the first
        self._max_attempts = max_attempts
        # A random wait of at most backoff_initial_s * 2**(attempt - 1), capped at backoff_max_s: clients thrown off
        # by the same failover do not come back in lockstep.
        backoff = Backoff(base=backoff_initial_s, cap=backoff_max_s)
        self._backoff = tenacity_wait(backoff, rng if rng is not None else random.Random())
        self._sleep = sleep
        # A deadline on waiting for a probe's answer, not a sleep: the event loop's own timer, like request timeouts.
        self._probe_stagger_s = probe_stagger_s
        self._brokers: dict[int, Address] = {}
        self._controller_id: int | None = None
        self._last_controller_id: int | None = None  # the last one Metadata named, kept when it is forgotten
        self._unresponsive: set[Address] = set()

    @property
    def brokers(self) -> Mapping[int, Address]:
        """The controllers learned (node id -> (host, port)), as of the last DescribeCluster answer."""
        return dict(self._brokers)

    @property
    def controller_id(self) -> int | None:
        """The active controller's node id as of the last Metadata response (-1: none known; None: never asked, or
        forgotten because it did not answer)."""
        return self._controller_id

    @property
    def unresponsive(self) -> frozenset[Address]:
        """Addresses asked last after failing, timing out or being overtaken at their last probe or request."""
        return frozenset(self._unresponsive)

    async def refresh_metadata(self) -> None:
        """Ask Metadata of the candidates in :func:`probe_order`, staggered; the first answer naming an active
        controller wins (see the module's invariants). BrokerNotAvailable when no candidate answers."""
        candidates = probe_order(self.bootstrap, self._brokers.values(), self._unresponsive)
        probes: dict[asyncio.Task[m.DescribeClusterResponse], Address] = {}
        failures: list[str] = []
        unsupported = 0
        fallback: tuple[Address, m.DescribeClusterResponse] | None = None
        started = 0
        try:
            while True:
                if started < len(candidates):  # the first, or the next: the last one failed or is slow
                    address = candidates[started]
                    probes[asyncio.create_task(self._probe_metadata(address))] = address
                    started += 1
                if not probes:
                    break
                wait_s = self._probe_stagger_s if started < len(candidates) or fallback is not None else None
                done, _ = await asyncio.wait(probes, timeout=wait_s, return_when=asyncio.FIRST_COMPLETED)
                if not done and started == len(candidates):  # only silent probes left, and an answer in hand
                    break
                for task in done:
                    address = probes.pop(task)
                    try:
                        body = task.result()
                    except _PROBE_FAILURES as exc:
                        self._unresponsive.add(address)
                        unsupported += isinstance(exc, UnsupportedVersion)
                        failures.append(str(exc))
                        log.info("admin.metadata_unavailable", address=format_address(address), error=str(exc))
                        continue
                    self._unresponsive.discard(address)
                    if names_active_controller(body):
                        self._apply_metadata(address, body)
                        return
                    fallback = (address, body)
        finally:
            overtaken = [a for t, a in probes.items() if not t.done()]
            if overtaken:
                self._unresponsive.update(overtaken)
                log.debug("admin.metadata_overtaken", addresses=[format_address(a) for a in overtaken])
            for task in probes:
                task.cancel()
            await asyncio.gather(*probes, return_exceptions=True)
        if fallback is not None:
            self._apply_metadata(*fallback)
            return
        reasons = "; ".join(failures)
        if failures and unsupported == len(failures):
            raise UnsupportedVersion(
                f"no bootstrap server serves DescribeCluster v{DESCRIBE_CLUSTER_VERSIONS[0]}: {reasons}"
            )
        raise BrokerNotAvailable(f"no bootstrap server answered Metadata: {reasons}")

    async def send_to_controller(
        self,
        api_key: int,
        version_range: tuple[int, int],
        body: Mapping[str, object],
        *,
        timeout_s: float | None = None,
        idempotent: bool = False,
    ) -> dict[str, Any]:
        """Send an admin request to the active controller, following NOT_CONTROLLER and lost connections.

        ``body`` is the request's typed body (``messages.CreateTopicsRequest``...). ``version_range`` is the range
        this caller can build and read; the highest version the controller also speaks is used. Returns the decoded
        response body, untyped because it depends on ``api_key``: the caller casts it to its API's response type
        and interprets the error codes in it (other than NOT_CONTROLLER). ``idempotent=True`` says applying the
        request twice does no harm, so a timed-out one is sent again (to the controller Metadata then names).
        """
        request_timeout_s = self._timeout_s if timeout_s is None else timeout_s
        retrying = AsyncRetrying(
            stop=self._stop,
            wait=self._backoff,
            retry=retry_if_exception(functools.partial(should_retry, idempotent=idempotent)),
            sleep=self._sleep,
            before_sleep=self._log_retry,
            reraise=True,
        )
        async for attempt in retrying:
            with attempt:
                refresh = attempt.retry_state.attempt_number > 1
                return await self._send_once(api_key, version_range, body, request_timeout_s, refresh=refresh)
        raise AssertionError("unreachable: tenacity either returns, raises or retries")

    @property
    def _stop(self) -> StopBaseT:
        """After the attempts; with ``retry_within_s``, also once that long has passed since the first was sent (a
        cluster that answers nothing, its store paused say, then costs a command that, not ten timeouts)."""
        attempts = stop_after_attempt(self._max_attempts)
        return attempts if self._retry_within_s is None else attempts | stop_after_delay(self._retry_within_s)

    async def call(
        self,
        api_key: int,
        version_range: tuple[int, int],
        body: Mapping[str, object],
        response: type[_Response],
        *,
        timeout_s: float | None = None,
        idempotent: bool = False,
    ) -> _Response:
        """:meth:`send_to_controller`, its answer read as ``response``, the response type of ``api_key``: the one
        place an admin answer is typed."""
        raw = await self.send_to_controller(api_key, version_range, body, timeout_s=timeout_s, idempotent=idempotent)
        return cast(_Response, raw)

    async def close(self) -> None:
        await self._pool.close()

    async def __aenter__(self) -> AdminClient:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.close()

    # --- internals

    async def _send_once(
        self,
        api_key: int,
        version_range: tuple[int, int],
        body: Mapping[str, object],
        timeout_s: float,
        *,
        refresh: bool,
    ) -> dict[str, Any]:
        if refresh or self._controller_id is None:
            await self.refresh_metadata()
        controller_id = self._controller_id
        address = self._brokers.get(controller_id) if controller_id is not None else None
        if controller_id is None or address is None:
            raise NotController(f"Metadata names no known active controller (controller_id={controller_id})")
        try:
            conn = await self._pool.connection(address)
            try:
                version = await self._negotiate(conn, api_key, version_range)
            except RequestTimedOut as exc:
                raise BrokerNotAvailable(f"{exc.message}; the admin request was not sent") from exc
            response = await conn.request(api_key, version, body, timeout_s=timeout_s)
        except (BrokerNotAvailable, RequestTimedOut) as exc:
            self._forget_controller(controller_id, address, api_key, exc)
            raise
        if carries_not_controller(response):
            log.info("admin.not_controller", node_id=controller_id, address=format_address(address), api_key=api_key)
            raise NotController(f"node {controller_id} at {format_address(address)} is not the active controller")
        return response

    async def _probe_metadata(self, address: Address) -> m.DescribeClusterResponse:
        conn = await self._pool.connection(address)
        version = await self._negotiate(conn, ApiKey.DESCRIBE_CLUSTER, DESCRIBE_CLUSTER_VERSIONS)
        body = await self._describe_cluster(conn, version, ENDPOINT_CONTROLLERS)
        if body["error_code"] in _BROKER_ENDPOINT_ONLY:  # a stock Kafka broker: its brokers, one of which forwards
            body = await self._describe_cluster(conn, version, ENDPOINT_BROKERS)
        code = body["error_code"]
        if code in _REFUSALS:  # the cluster's answer to who is asking: every node gives the same
            raise for_code(code)(body["error_message"] or f"DescribeCluster refused: {error_name(code)}")
        if code:
            raise ProtocolError(f"DescribeCluster answered error {code}: {body['error_message']}")
        return body

    async def _describe_cluster(
        self, conn: KafkaConnection, version: int, endpoint_type: int
    ) -> m.DescribeClusterResponse:
        request: m.DescribeClusterRequest = {"endpoint_type": endpoint_type}
        raw = await conn.request(ApiKey.DESCRIBE_CLUSTER, version, request, timeout_s=self._timeout_s)
        return cast(m.DescribeClusterResponse, raw)

    def _apply_metadata(self, source: Address, body: m.DescribeClusterResponse) -> None:
        self._brokers = {
            b["broker_id"]: self._pinned.get(b["broker_id"], (b["host"], b["port"])) for b in body["brokers"]
        }
        self._controller_id = body["controller_id"]
        previous, self._last_controller_id = self._last_controller_id, self._controller_id
        if previous is not None and previous != self._controller_id:
            log.info("admin.controller_changed", previous=previous, controller_id=self._controller_id)
        log.debug(
            "admin.metadata",
            source=format_address(source),
            controller_id=self._controller_id,
            nodes=sorted(self._brokers),
        )

    def _forget_controller(self, controller_id: int, address: Address, api_key: int, exc: Exception) -> None:
        """The controller did not answer: ask Metadata again next time, and ask its address last."""
        self._unresponsive.add(address)
        if self._controller_id == controller_id:
            self._controller_id = None
        log.info(
            "admin.controller_unreachable",
            node_id=controller_id,
            address=format_address(address),
            api_key=api_key,
            error=str(exc),
        )

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


__all__ = [
    "DEFAULT_PROBE_STAGGER_S",
    "DESCRIBE_CLUSTER_VERSIONS",
    "AdminClient",
    "carries_not_controller",
    "names_active_controller",
    "parse_bootstrap",
    "pinned_addresses",
    "probe_order",
    "should_retry",
]


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
