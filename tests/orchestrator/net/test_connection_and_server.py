"""KafkaServer and KafkaConnection/ConnectionPool over loopback: negotiation, multiplexing, ordering, failures, TLS.

Every server binds 127.0.0.1 on port 0 and is stopped by its test; every wait is bounded by a timeout.
"""

from __future__ import annotations

import asyncio
import ssl
import struct
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import pytest
import trustme
from structlog.testing import capture_logs

from orchestrator.errors import BrokerNotAvailable, RequestTimedOut, UnsupportedVersion
from orchestrator.ids import Uuid
from orchestrator.net import ConnectionPool, KafkaConnection, KafkaServer
from orchestrator.protocol.api_keys import ApiKey
from orchestrator.protocol.framing import (
    Request,
    RequestHeader,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
)
from orchestrator.protocol.framing import read_frame as read_frame_

DESCRIBE = ApiKey.DESCRIBE_TIERED_STATE
DISABLE = ApiKey.DISABLE_REMOTE_TOPIC


pytestmark = pytest.mark.integration

API_VERSIONS = 18
TEST_TIMEOUT_S = 20.0


def run(coro: Coroutine[Any, Any, None]) -> None:
    asyncio.run(asyncio.wait_for(coro, TEST_TIMEOUT_S))


def described(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "topic_id": Uuid.from_bytes(name.encode().ljust(16, b"\0")[:16]),
        "error_code": 0,
        "tiered_state": 1,
        "tiered_epoch": len(name),
        "policy": 0,
        "partition_count": 1,
        "pending_brokers": [],
    }


async def echo_describe(request: Request) -> dict[str, Any]:
    return {"error_code": 0, "topics": [described(t) for t in request.body["topics"] or []]}


async def echo_disable(request: Request) -> dict[str, Any]:
    body = request.body
    return {"error_code": 0, "status": 1, "tiered_epoch": body["tiered_epoch"], "partitions_done": body["partition_id"]}


ECHO = {DESCRIBE: echo_describe, DISABLE: echo_disable}


def server(handlers: dict[int, Any] | None = None, **kwargs: Any) -> KafkaServer:
    return KafkaServer(name="test", host="127.0.0.1", port=kwargs.pop("port", 0), handlers=handlers or ECHO, **kwargs)


async def describe(conn: KafkaConnection, *names: str, timeout_s: float = 5.0) -> list[str]:
    body = await conn.request(DESCRIBE, 0, {"topics": list(names)}, timeout_s=timeout_s)
    assert body["error_code"] == 0
    return [t["name"] for t in body["topics"]]


async def until(predicate: Callable[[], bool], *, what: str) -> None:
    """Wait for ``predicate`` to hold: at most 500 polls, 10 s."""
    async with asyncio.timeout(10):
        for _ in range(500):
            if predicate():
                return
            await asyncio.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


class ScriptedServer:
    """A raw loopback server that runs ``script(reader, writer)`` per connection: to misbehave on purpose."""

    def __init__(self, script: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]) -> None:
        self._script = script
        self._tasks: set[asyncio.Task[None]] = set()
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> tuple[str, int]:
        self._server = await asyncio.start_server(self._on_connect, "127.0.0.1", 0)
        host, port = self._server.sockets[0].getsockname()[:2]
        return host, port

    def _on_connect(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        async def go() -> None:
            try:
                await self._script(reader, writer)
            finally:
                writer.close()
                await writer.wait_closed()

        task = asyncio.get_running_loop().create_task(go())
        self._tasks.add(task)

    async def __aexit__(self, *_exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._server.wait_closed()


# --- ApiVersions


def test_api_versions_lists_every_handler_key_with_its_schema_range_and_picks_the_highest_common_version():
    async def main() -> None:
        async with server() as srv, await KafkaConnection.open(*srv.address) as conn:
            versions = await conn.api_versions()
            assert versions == {
                API_VERSIONS: (0, 3),
                DISABLE: (0, 1),
                DESCRIBE: (0, 0),
            }
            assert conn.pick_version(API_VERSIONS, (0, 9)) == 3
            assert conn.pick_version(DESCRIBE, (0, 4)) == 0
            assert conn.pick_version(DISABLE, (1, 2)) == 1
            with pytest.raises(UnsupportedVersion, match="we speak versions 2-3"):
                conn.pick_version(DISABLE, (2, 3))
            with pytest.raises(UnsupportedVersion, match="does not serve"):
                conn.pick_version(3, (0, 12))  # Metadata: no handler, not advertised
            assert srv.requests_handled == 1  # negotiated once, cached on the connection
            assert await conn.api_versions() == versions
            assert srv.requests_handled == 1

    run(main())


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_every_api_versions_version_is_answered_in_its_own_version(version):
    async def main() -> None:
        async with server() as srv, await KafkaConnection.open(*srv.address) as conn:
            body = await conn.request(API_VERSIONS, version, {}, timeout_s=5)
            assert body["error_code"] == 0
            keys = {k["api_key"]: (k["min_version"], k["max_version"]) for k in body["api_keys"]}
            assert keys == dict(srv.api_versions)
            if version >= 1:
                assert body["throttle_time_ms"] == 0
            if version >= 3:
                assert body["finalized_features_epoch"] == -1 and body["supported_features"] == []

    run(main())


def test_api_versions_of_an_unsupported_version_gets_v0_with_error_35_and_the_keys_and_the_connection_stays_open():
    async def main() -> None:
        async with server() as srv:
            reader, writer = await asyncio.open_connection(*srv.address)
            try:
                # ApiVersions v4 (which this server does not speak): header v2 then a body it need not parse.
                header = struct.pack(">hhih", API_VERSIONS, 4, 77, 3) + b"cli" + b"\x00"
                payload = header + b"\x05kafka\x043.9\x00"
                writer.write(struct.pack(">i", len(payload)) + payload)
                correlation_id, body = decode_response(await read_frame_(reader), API_VERSIONS, 0)
                assert correlation_id == 77
                assert body["error_code"] == 35
                assert {k["api_key"]: (k["min_version"], k["max_version"]) for k in body["api_keys"]}[18] == (0, 3)
                # The client retries with a version it found there, on the same connection.
                writer.write(encode_request(API_VERSIONS, 3, 78, {"client_software_name": "x"}))
                correlation_id, body = decode_response(await read_frame_(reader), API_VERSIONS, 3)
                assert (correlation_id, body["error_code"]) == (78, 0)
            finally:
                writer.close()
                await writer.wait_closed()
            assert srv.bad_frames == 0

    run(main())


def test_the_client_retries_api_versions_at_the_highest_version_an_older_server_advertises():
    seen: list[int] = []

    async def old_server(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for _ in range(2):
            payload = await read_frame_(reader)
            _key, version, correlation_id = struct.unpack_from(">hhi", payload)
            seen.append(version)
            keys = [
                {"api_key": 18, "min_version": 0, "max_version": 2},
                {"api_key": DESCRIBE, "min_version": 0, "max_version": 0},
            ]
            if version > 2:  # Kafka's rule: a v0 answer with UNSUPPORTED_VERSION
                reply = encode_response(
                    RequestHeader(18, 0, correlation_id, None), {"error_code": 35, "api_keys": keys}
                )
            else:
                reply = encode_response(
                    RequestHeader(18, version, correlation_id, None), {"error_code": 0, "api_keys": keys}
                )
            writer.write(reply)
            await writer.drain()
        await reader.read()  # until the client closes

    async def main() -> None:
        async with ScriptedServer(old_server) as address, await KafkaConnection.open(*address) as conn:
            assert await conn.api_versions() == {18: (0, 2), DESCRIBE: (0, 0)}
            assert seen == [3, 2]

    run(main())


# --- multiplexing and ordering


def test_two_thousand_concurrent_requests_share_one_connection_and_each_gets_its_own_answer():
    async def main() -> None:
        async with server() as srv, await KafkaConnection.open(*srv.address) as conn:

            async def one(i: int) -> None:
                if i % 2:
                    body = {"topic_id": Uuid.random(), "partition_id": i, "tiered_epoch": i * 3}
                    resp = await conn.request(DISABLE, 0, body, timeout_s=15)
                    assert (resp["tiered_epoch"], resp["partitions_done"]) == (i * 3, i)
                else:
                    assert await describe(conn, f"topic-{i}", f"t{i}", timeout_s=15) == [f"topic-{i}", f"t{i}"]

            await asyncio.gather(*(one(i) for i in range(2000)))
            assert conn.in_flight == 0
            assert srv.accepted_connections == 1
            assert srv.requests_handled == 2000

    run(main())


def test_responses_that_arrive_out_of_order_are_routed_by_correlation_id():
    async def reversing_server(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        requests = [decode_request(await read_frame_(reader)) for _ in range(3)]
        for request in reversed(requests):  # answers the last first
            writer.write(encode_response(request.header, await echo_describe(request)))
        await writer.drain()
        await reader.read()

    async def main() -> None:
        async with ScriptedServer(reversing_server) as address, await KafkaConnection.open(*address) as conn:
            finished: list[str] = []

            async def ask(name: str) -> None:
                assert await describe(conn, name) == [name]
                finished.append(name)

            await asyncio.gather(ask("a"), ask("b"), ask("c"))
            assert finished == ["c", "b", "a"]  # they did arrive reversed, and each found its own caller

    run(main())


def test_the_server_answers_one_connection_in_order_even_when_the_first_request_is_slow():
    gate = asyncio.Event()
    started = asyncio.Event()
    handled: list[str] = []

    async def slow_first(request: Request) -> dict[str, Any]:
        name = request.body["topics"][0]
        if name == "first":
            started.set()
            await gate.wait()
        handled.append(name)
        return await echo_describe(request)

    async def main() -> None:
        async with (
            server({DESCRIBE: slow_first}) as srv,
            await KafkaConnection.open(*srv.address) as conn,
        ):
            first = asyncio.create_task(describe(conn, "first"))
            second = asyncio.create_task(describe(conn, "second"))
            await asyncio.wait_for(started.wait(), 5)
            await asyncio.sleep(0.05)  # room for a wrong implementation to answer "second" early
            assert handled == [] and not second.done()
            gate.set()
            assert await first == ["first"] and await second == ["second"]
            assert handled == ["first", "second"]

    run(main())


# --- pool, timeouts, failures


def test_the_pool_shares_one_connection_per_address_and_reopens_it_after_a_server_restart():
    async def main() -> None:
        first = server()
        address = await first.start()
        pool = ConnectionPool()
        try:
            results = await asyncio.gather(
                *(pool.request(address, DESCRIBE, 0, {"topics": [f"t{i}"]}) for i in range(200))
            )
            assert [r["topics"][0]["name"] for r in results] == [f"t{i}" for i in range(200)]
            assert pool.connections_opened == 1 and first.accepted_connections == 1
            old = await pool.connection(address)

            await first.stop()
            await until(lambda: old.closed, what="the client to see the server go")
            with pytest.raises(BrokerNotAvailable, match=f"127.0.0.1:{address[1]}"):
                await pool.request(address, DESCRIBE, 0, {"topics": ["x"]})

            second = server(port=address[1])
            await second.start()
            try:
                body = await pool.request(address, DESCRIBE, 0, {"topics": ["back"]}, timeout_s=5)
                assert body["topics"][0]["name"] == "back"
                assert pool.connections_opened == 2 and second.accepted_connections == 1
                assert (await pool.api_versions(address))[DESCRIBE] == (0, 0)
            finally:
                await second.stop()
        finally:
            await pool.close()
            await first.stop()

    run(main())


def test_a_request_without_an_answer_times_out_and_its_late_answer_is_dropped():
    release = asyncio.Event()

    async def hang_on_slow(request: Request) -> dict[str, Any]:
        if request.body["topics"] == ["slow"]:
            await release.wait()
        return await echo_describe(request)

    async def main() -> None:
        async with (
            server({DESCRIBE: hang_on_slow}) as srv,
            await KafkaConnection.open(*srv.address) as conn,
        ):
            with capture_logs() as logs:
                with pytest.raises(RequestTimedOut, match="DescribeTieredState v0"):
                    await describe(conn, "slow", timeout_s=0.05)
                release.set()
                assert await describe(conn, "fast") == ["fast"]
            assert not conn.closed
            assert [e for e in logs if e["event"] == "net.unexpected_response"]

    run(main())


def test_a_server_that_is_down_gives_broker_not_available_naming_the_address():
    async def main() -> None:
        srv = server()
        host, port = await srv.start()
        await srv.stop()
        with pytest.raises(BrokerNotAvailable, match=f"{host}:{port}") as info:
            await KafkaConnection.open(host, port, connect_timeout_s=2)
        assert info.value.retriable
        async with ConnectionPool() as pool:
            with pytest.raises(BrokerNotAvailable, match=f"{host}:{port}"):
                await pool.request((host, port), DESCRIBE, 0, {"topics": []})

    run(main())


def test_every_pending_request_fails_when_the_connection_dies_and_the_connection_is_not_reused():
    started = asyncio.Event()

    async def hang(_request: Request) -> dict[str, Any]:
        started.set()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    async def main() -> None:
        srv = server({DESCRIBE: hang})
        address = await srv.start()
        async with await KafkaConnection.open(*address) as conn:
            pending = [asyncio.create_task(describe(conn, f"t{i}")) for i in range(5)]
            await asyncio.wait_for(started.wait(), 5)
            await srv.stop()
            for task in pending:
                with pytest.raises(BrokerNotAvailable, match="closed by the server"):
                    await task
            assert conn.closed and conn.in_flight == 0
            with pytest.raises(BrokerNotAvailable, match=f"127.0.0.1:{address[1]}"):
                await describe(conn, "again")

    run(main())


# --- TLS


class Tls:
    def __init__(self) -> None:
        ca = trustme.CA()
        self.server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ca.issue_cert("127.0.0.1").configure_cert(self.server)
        ca.configure_trust(self.server)
        self.server.verify_mode = ssl.CERT_REQUIRED  # mutual TLS: a client without a certificate is refused
        self.client = ssl.create_default_context()
        ca.configure_trust(self.client)
        ca.issue_cert("tieredctl-client").configure_cert(self.client)
        self.anonymous = ssl.create_default_context()
        ca.configure_trust(self.anonymous)


@pytest.fixture(scope="module")
def tls() -> Tls:
    return Tls()


def test_tls_with_a_client_certificate_is_served(tls):
    async def main() -> None:
        async with server(ssl_context=tls.server) as srv:
            async with await KafkaConnection.open(*srv.address, ssl_context=tls.client) as conn:
                assert (await conn.api_versions())[DESCRIBE] == (0, 0)
                assert await asyncio.gather(*(describe(conn, f"t{i}") for i in range(50))) == [
                    [f"t{i}"] for i in range(50)
                ]
            async with ConnectionPool(ssl_context=tls.client) as pool:
                body = await pool.request(srv.address, DISABLE, 0, {"topic_id": Uuid.random(), "tiered_epoch": 4})
                assert body["tiered_epoch"] == 4

    run(main())


@pytest.mark.parametrize("client", ["anonymous", "plaintext"])
def test_tls_refuses_a_client_without_a_certificate_or_without_tls(tls, client):
    async def main() -> None:
        async with server(ssl_context=tls.server) as srv:
            context = tls.anonymous if client == "anonymous" else None
            with pytest.raises(BrokerNotAvailable, match=f"127.0.0.1:{srv.address[1]}"):
                conn = await KafkaConnection.open(*srv.address, ssl_context=context, connect_timeout_s=5)
                try:
                    await describe(conn, "t")
                finally:
                    await conn.close()
            assert srv.requests_handled == 0

    run(main())


def test_tls_contexts_built_from_process_settings_give_mutual_tls(tmp_path):
    from orchestrator.net.tls import node_client_security, server_ssl_context
    from orchestrator.settings import SecuritySettings

    def client_ssl_context(tls: TlsSettings) -> ssl.SSLContext | None:
        return node_client_security(tls, SecuritySettings()).ssl_context()

    from orchestrator.settings import TlsSettings

    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(str(tmp_path / "server.pem"))
    ca.issue_cert("broker-1").private_key_and_cert_chain_pem.write_to_path(str(tmp_path / "client.pem"))
    cafile = str(tmp_path / "ca.pem")
    server_settings = TlsSettings(certfile=str(tmp_path / "server.pem"), cafile=cafile, require_client_cert=True)
    server_ctx = server_ssl_context(server_settings)
    with_cert = client_ssl_context(TlsSettings(certfile=str(tmp_path / "client.pem"), cafile=cafile))
    without_cert = client_ssl_context(TlsSettings(cafile=cafile))
    assert server_ssl_context(TlsSettings()) is None and client_ssl_context(TlsSettings()) is None

    async def main() -> None:
        async with server(ssl_context=server_ctx) as srv:
            async with await KafkaConnection.open(*srv.address, ssl_context=with_cert) as conn:
                assert await describe(conn, "t") == ["t"]
            with pytest.raises(BrokerNotAvailable):
                conn = await KafkaConnection.open(*srv.address, ssl_context=without_cert, connect_timeout_s=5)
                try:
                    await describe(conn, "t")
                finally:
                    await conn.close()

    run(main())
