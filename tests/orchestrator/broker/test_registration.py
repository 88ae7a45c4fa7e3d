"""A broker registers the address the others reach it at: its host and bound port, or its ``advertised_port`` when
something in between (a NAT, a proxy, the fault suite's link proxies) relays to the bound one.

The agent is not started: its controller link's ``register`` runs against a fake controller that records the
request.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from orchestrator.broker.agent import BrokerAgent
from orchestrator.protocol.api_keys import ApiKey
from orchestrator.settings import BrokerSettings

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]


class RecordingController:
    def __init__(self) -> None:
        self.requests: list[tuple[int, Any]] = []

    async def call(self, api_key: int, version_range: tuple[int, int], body: Any, response: Any, **_: Any) -> Any:
        self.requests.append((api_key, body))
        return {"error_code": 0, "broker_epoch": 7}


def registered_listener(tmp_path, **settings: Any) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    base = {"broker_id": 1, "data_dir": str(tmp_path / "data"), "metadata_store": str(tmp_path / "m.db")}
    agent = BrokerAgent(BrokerSettings(**base, controllers="127.0.0.1:1", **settings))
    try:
        agent.port = 9092  # as if bound
        controller = RecordingController()
        asyncio.run(agent.controller_link.register(controller))  # type: ignore[arg-type]
        [(api_key, body)] = controller.requests
        assert api_key == ApiKey.BROKER_REGISTRATION and agent.controller_link.broker_epoch == 7
        [listener] = body["listeners"]
        return dict(listener)
    finally:
        agent.store.close()


def test_a_broker_registers_the_port_it_bound_by_default(tmp_path):
    listener = registered_listener(tmp_path)
    assert (listener["host"], listener["port"]) == ("127.0.0.1", 9092)


def test_a_broker_with_an_advertised_port_registers_that_port_instead(tmp_path):
    listener = registered_listener(tmp_path, advertised_port=19092)
    assert (listener["host"], listener["port"]) == ("127.0.0.1", 19092)
