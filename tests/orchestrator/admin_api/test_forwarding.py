"""Forwarding admin writes to the active controller: the answer comes back as the controller gave it, and every
failure becomes the request's own response with a retriable error on each entry (never a dropped connection)."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Coroutine
from typing import Any

import pytest
from structlog.testing import capture_logs

from orchestrator.admin_api import envelope
from orchestrator.admin_api.forwarding import Forwarder
from orchestrator.errors import BrokerNotAvailable, NotController, RequestTimedOut
from orchestrator.net.admin import AdminClient
from orchestrator.net.server import KafkaServer
from orchestrator.protocol.api_keys import ApiKey
from orchestrator.protocol.framing import Request, decode_request, encode_request

CREATE = {"topics": [{"name": "a", "num_partitions": 1, "replication_factor": 1}, {"name": "b"}], "timeout_ms": 0}


def run(coro: Coroutine[Any, Any, None]) -> None:
    asyncio.run(asyncio.wait_for(coro, 30))


async def no_sleep(_seconds: float) -> None:
    return None


class FakeController:
    """A node that names itself (or nobody) the active controller and answers CreateTopics as told."""

    def __init__(self, *, active: bool = True, hang: bool = False) -> None:
        self.active, self.hang = active, hang
        self.created: list[tuple[int, list[str]]] = []
        self.received = 0
        self.server = KafkaServer(
            name="fake-controller",
            host="127.0.0.1",
            port=0,
            handlers={ApiKey.DESCRIBE_CLUSTER: self._describe, ApiKey.ENVELOPE: self._envelope},
        )
        self.principals: list[str] = []

    async def _envelope(self, request: Request) -> dict[str, Any]:
        inner = envelope.unwrap(request.body)
        self.principals.append(inner.principal)
        return envelope.answer(inner, await self._create(inner))

    async def _describe(self, _request: Request) -> dict[str, Any]:
        host, port = self.server.address
        return {
            "cluster_id": "k",
            "controller_id": 3000 if self.active else -1,
            "endpoint_type": 2,
            "brokers": [{"broker_id": 3000, "host": host, "port": port}] if self.active else [],
        }

    async def _create(self, request: Request) -> dict[str, Any]:
        self.received += 1
        if self.hang:
            await asyncio.Event().wait()
        names = [t["name"] for t in request.body["topics"]]
        self.created.append((request.header.api_version, names))
        return {"topics": [{"name": n, "error_code": 0, "num_partitions": 1} for n in names]}


def forwarded(version: int = 7) -> Request:
    request = decode_request(encode_request(ApiKey.CREATE_TOPICS, version, 11, CREATE, client_id="kafka-python")[4:])
    return dataclasses.replace(request, principal="User:alice", client_host="192.0.2.7")


def forwarder_to(fake: FakeController, **client: Any) -> Forwarder:
    host, port = fake.server.address
    return Forwarder(AdminClient(f"{host}:{port}", sleep=no_sleep, **client), timeout_s=0.5)


@pytest.mark.integration
def test_the_controllers_answer_comes_back_as_it_is_at_the_clients_version_in_an_envelope_naming_the_client() -> None:
    async def main() -> None:
        fake = FakeController()
        async with fake.server:
            forwarder = forwarder_to(fake)
            try:
                for version in (2, 5, 7):
                    answer = await forwarder.forward(forwarded(version))
                    assert [t["error_code"] for t in answer["topics"]] == [0, 0]
            finally:
                await forwarder.close()
        assert fake.created == [(2, ["a", "b"]), (5, ["a", "b"]), (7, ["a", "b"])]
        assert fake.principals == ["User:alice"] * 3  # the Envelope names the client, not the forwarding node

    run(main())


@pytest.mark.integration
def test_a_forward_that_times_out_is_not_sent_again_and_every_entry_says_request_timed_out() -> None:
    async def main() -> None:
        fake = FakeController(hang=True)
        async with fake.server:
            forwarder = forwarder_to(fake, max_attempts=5)
            try:
                with capture_logs() as logs:
                    answer = await forwarder.forward(forwarded())
            finally:
                await forwarder.close()
        assert [(t["name"], t["error_code"]) for t in answer["topics"]] == [
            ("a", RequestTimedOut.code),
            ("b", RequestTimedOut.code),
        ]
        assert fake.received == 1, "a write that may have been applied is never sent twice"
        failed = [e for e in logs if e["event"] == "admin.forward_failed"]
        assert failed and failed[0]["error"] == "REQUEST_TIMED_OUT" and failed[0]["client_id"] == "kafka-python"

    run(main())


@pytest.mark.integration
def test_with_no_active_controller_every_entry_says_not_controller_after_the_attempts() -> None:
    async def main() -> None:
        fake = FakeController(active=False)
        async with fake.server:
            forwarder = forwarder_to(fake, max_attempts=3)
            try:
                answer = await forwarder.forward(forwarded())
            finally:
                await forwarder.close()
        assert {t["error_code"] for t in answer["topics"]} == {NotController.code}
        assert fake.created == []

    run(main())


@pytest.mark.integration
def test_an_unreachable_controller_is_broker_not_available_on_every_entry() -> None:
    async def main() -> None:
        fake = FakeController()
        async with fake.server:
            host, port = fake.server.address
        forwarder = Forwarder(AdminClient(f"{host}:{port}", sleep=no_sleep, max_attempts=2), timeout_s=0.5)
        try:
            answer = await forwarder.forward(forwarded())
        finally:
            await forwarder.close()
        assert {t["error_code"] for t in answer["topics"]} == {BrokerNotAvailable.code}

    run(main())


@pytest.mark.unit
def test_only_the_admin_writes_are_forwarded() -> None:
    async def main() -> None:
        forwarder = Forwarder(AdminClient("127.0.0.1:9", sleep=no_sleep, max_attempts=1))
        metadata = decode_request(encode_request(ApiKey.METADATA, 12, 1, {"topics": None})[4:])
        try:
            with pytest.raises(ValueError, match="not forwarded"):
                await forwarder.forward(metadata)
        finally:
            await forwarder.close()

    run(main())
