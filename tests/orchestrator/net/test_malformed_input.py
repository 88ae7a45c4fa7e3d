"""Malformed input on a running KafkaServer costs the offending connection only.

Each case opens a raw connection, sends something bad, and checks that the server closes it (the read ends with EOF
or a reset within a bounded time), while a well-behaved client on its own connection gets correct answers before
and after, and the server keeps accepting. All randomness is seeded; every loop is bounded in count and time.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import struct
from collections.abc import Coroutine
from typing import Any

import pytest
from structlog.testing import capture_logs

from orchestrator.errors import BrokerNotAvailable, UnknownTopicOrPartition
from orchestrator.ids import Uuid
from orchestrator.net import KafkaConnection, KafkaServer
from orchestrator.protocol.api_keys import ApiKey
from orchestrator.protocol.framing import Request, encode_request

DESCRIBE = ApiKey.DESCRIBE_TIERED_STATE
DISABLE = ApiKey.DISABLE_REMOTE_TOPIC


pytestmark = pytest.mark.integration

MAX_FRAME_BYTES = 1 << 20
CLOSE_TIMEOUT_S = 5.0


def run(coro: Coroutine[Any, Any, None]) -> None:
    asyncio.run(asyncio.wait_for(coro, 30))


async def describe(request: Request) -> dict[str, Any]:
    names = request.body["topics"] or []
    if names == ["boom"]:
        raise RuntimeError("a bug in a handler")
    if names == ["kafka-boom"]:
        raise UnknownTopicOrPartition("handlers should have put this in the body")
    return {
        "error_code": 0,
        "topics": [
            {"name": n, "topic_id": Uuid.random(), "tiered_state": 2, "tiered_epoch": 7, "pending_brokers": []}
            for n in names
        ],
    }


async def disable(request: Request) -> dict[str, Any]:
    return {"error_code": 0, "tiered_epoch": request.body["tiered_epoch"]}


def frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def header_v1(api_key: int, version: int, correlation_id: int = 1, client_id: bytes = b"evil") -> bytes:
    """A well-formed request header v1 (non-flexible): key, version, correlation id, int16-length client id."""
    return struct.pack(">hhih", api_key, version, correlation_id, len(client_id)) + client_id


def header_v2(api_key: int, version: int, correlation_id: int = 1) -> bytes:
    return header_v1(api_key, version, correlation_id) + b"\x00"  # no tagged fields


class Harness:
    """A running server plus a well-behaved client on its own connection."""

    def __init__(self, server: KafkaServer, good: KafkaConnection) -> None:
        self.server = server
        self.good = good
        self.checks = 0

    async def good_client_is_served(self) -> None:
        self.checks += 1
        name = f"good-{self.checks}"
        body = await self.good.request(DESCRIBE, 0, {"topics": [name]}, timeout_s=5)
        assert [t["name"] for t in body["topics"]] == [name]

    async def assert_closed_by_server(self, data: bytes, *, then_eof: bool = False) -> None:
        """Send ``data`` on a fresh connection and check the server closes it; the good client works around it."""
        await self.good_client_is_served()
        closed_before = self.server.closed_connections
        reader, writer = await asyncio.open_connection(*self.server.address)
        try:
            writer.write(data)
            with contextlib.suppress(ConnectionError):
                await writer.drain()
                if then_eof:
                    writer.write_eof()
            await self.good_client_is_served()  # served while the bad connection is open
            async with asyncio.timeout(CLOSE_TIMEOUT_S):
                for _ in range(10_000):  # the server may still answer nothing; it must end the stream
                    try:
                        chunk = await reader.read(65536)
                    except ConnectionError:  # a reset: the server closed with our bytes still unread
                        break
                    if not chunk:
                        break
                    raise AssertionError(f"the server answered garbage with {chunk[:32]!r}")
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()
        async with asyncio.timeout(CLOSE_TIMEOUT_S):
            for _ in range(500):  # the server's own bookkeeping follows its close
                if self.server.closed_connections > closed_before:
                    break
                await asyncio.sleep(0.01)
        await self.good_client_is_served()


def with_harness(test: Any) -> Any:
    async def main() -> None:
        server = KafkaServer(
            name="malformed",
            host="127.0.0.1",
            port=0,
            handlers={DESCRIBE: describe, DISABLE: disable},
            max_frame_bytes=MAX_FRAME_BYTES,
        )
        async with server, await KafkaConnection.open(*server.address) as good:
            harness = Harness(server, good)
            await harness.good_client_is_served()
            await test(harness)
            await harness.good_client_is_served()

    run(main())


def test_random_bytes_close_only_their_connection():
    rng = random.Random(10950)

    async def cases(h: Harness) -> None:
        with capture_logs() as logs:
            for i in range(30):
                junk = rng.randbytes(rng.randint(1, 2048))
                if i % 2:
                    # A well-framed payload of random bytes: the server must refuse what it decodes.
                    await h.assert_closed_by_server(frame(junk))
                else:
                    # Raw random bytes; a size that promises more than we send ends as a truncated frame.
                    await h.assert_closed_by_server(junk, then_eof=True)
        bad = [e for e in logs if e["event"] == "net.bad_frame"]
        assert len(bad) == 30
        assert all(e["peer"].startswith("127.0.0.1:") and e["reason"] for e in bad)
        assert h.server.bad_frames == 30

    with_harness(cases)


@pytest.mark.parametrize(
    "case,data,then_eof",
    [
        ("truncated frame", struct.pack(">i", 100) + b"x" * 10, True),
        ("truncated size", b"\x00\x00", True),
        ("negative size", struct.pack(">i", -5), False),
        ("oversized size", struct.pack(">i", MAX_FRAME_BYTES + 1), False),
        ("largest size", struct.pack(">i", 2**31 - 1), False),
        ("empty frame", frame(b""), False),
        ("unknown api key", frame(header_v1(999, 0) + b"\x00\x00"), False),
        ("known key without a handler", frame(header_v2(3, 12) + b"\x01\x00\x00\x00"), False),
        ("unsupported version of a served key", frame(header_v2(DISABLE, 5)), False),
        ("api versions v3 with a garbage body", frame(header_v2(18, 3) + b"\xff\xff\xff\xff\xff\xff"), False),
        ("a header cut short", frame(struct.pack(">hhih", DESCRIBE, 0, 1, 40) + b"short"), False),
        (
            "a valid request with a corrupt body",
            frame(encode_request(DESCRIBE, 0, 3, {"topics": ["t"]})[4:-3]),
            False,
        ),
    ],
)
def test_malformed_frames_close_only_their_connection(case, data, then_eof):
    async def one(h: Harness) -> None:
        with capture_logs() as logs:
            await h.assert_closed_by_server(data, then_eof=then_eof)
        assert [e["event"] for e in logs if e["log_level"] == "warning"] == ["net.bad_frame"], case
        assert h.server.bad_frames == 1

    with_harness(one)


def test_ten_megabytes_of_zeros_close_only_their_connection():
    async def one(h: Harness) -> None:
        await h.assert_closed_by_server(b"\x00" * (10 * 1024 * 1024))
        assert h.server.bad_frames == 1

    with_harness(one)


def test_a_good_request_after_garbage_on_the_same_connection_is_not_answered():
    async def one(h: Harness) -> None:
        garbage_then_good = struct.pack(">i", -1) + encode_request(DESCRIBE, 0, 9, {"topics": ["late"]})
        await h.assert_closed_by_server(garbage_then_good)

    with_harness(one)


@pytest.mark.parametrize("topic", ["boom", "kafka-boom"])
def test_handler_failures_close_only_their_connection(topic):
    async def handler_fails(h: Harness) -> None:
        async with await KafkaConnection.open(*h.server.address) as victim:
            with capture_logs() as logs, pytest.raises(BrokerNotAvailable, match="closed by the server"):
                await victim.request(DESCRIBE, 0, {"topics": [topic]}, timeout_s=5)
            assert victim.closed
        failed = [e for e in logs if e["event"] == "net.handler_failed"]
        assert len(failed) == 1 and failed[0]["exc_info"] is True and failed[0]["api"] == "DescribeTieredStateRequest"
        assert h.server.handler_failures == 1
        await h.good_client_is_served()

    with_harness(handler_fails)


def test_a_handler_returning_a_body_that_does_not_encode_closes_only_its_connection():
    async def broken(_request: Request) -> dict[str, Any]:
        return {"error_code": 0, "tiered_epoch": 2**40}  # far outside int32: the response cannot be encoded

    async def main() -> None:
        server = KafkaServer(
            name="broken",
            host="127.0.0.1",
            port=0,
            handlers={DESCRIBE: describe, DISABLE: broken},
        )
        async with server, await KafkaConnection.open(*server.address) as good:
            h = Harness(server, good)
            await h.good_client_is_served()
            async with await KafkaConnection.open(*server.address) as victim:
                with pytest.raises(BrokerNotAvailable, match="closed by the server"):
                    await victim.request(DISABLE, 0, {"topic_id": Uuid.random()}, timeout_s=25)
            assert server.handler_failures == 1
            await h.good_client_is_served()

    run(main())


def test_an_idle_connection_is_closed_after_the_idle_timeout():
    async def main() -> None:
        server = KafkaServer(name="idle", host="127.0.0.1", port=0, handlers={DESCRIBE: describe}, idle_timeout_s=0.2)
        async with server:
            reader, writer = await asyncio.open_connection(*server.address)
            try:
                writer.write(struct.pack(">i", 50) + b"half")  # a slow sender: half a frame, then nothing
                await writer.drain()
                async with asyncio.timeout(CLOSE_TIMEOUT_S):
                    assert await reader.read() == b""
            finally:
                writer.close()
                await writer.wait_closed()
            assert server.bad_frames == 0

    run(main())
