"""What tieredctl learns from ApiVersions: a cluster is ours when its active controller answers DescribeTieredState
and its brokers DisableRemoteTopic; a stock Kafka cluster (neither) is driven through Kafka's own configs.
The client is real; the controller and the broker connection are stand-ins answering in this process."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import pytest

from orchestrator.client import TieredClient
from orchestrator.client.kafka_tiering import ASKED_AT_ONCE, MetadataTail, TopicRef, speaks_tiered_apis
from orchestrator.errors import BrokerNotAvailable
from orchestrator.ids import Uuid
from orchestrator.protocol.api_keys import ApiKey
from tests.support.controller_stand_in import StandInController, run_with

pytestmark = pytest.mark.unit

KAFKA_ADMIN_KEYS = [ApiKey.API_VERSIONS, ApiKey.METADATA, ApiKey.DESCRIBE_CONFIGS, ApiKey.INCREMENTAL_ALTER_CONFIGS]


class Controller(StandInController):
    def __init__(self, keys: list[int], hosts: tuple[str, ...] = ("broker.invalid",)) -> None:
        """``hosts``: the nodes Metadata lists, in order (port 9092 each)."""
        self.keys = keys
        self.hosts = hosts
        self.asked: list[int] = []

    async def call(
        self, api_key: int, version_range: tuple[int, int], body: Mapping[str, Any], response: Any, **options: Any
    ) -> Any:
        self.asked.append(api_key)
        if api_key == ApiKey.API_VERSIONS:
            listed = [{"api_key": k, "min_version": 0, "max_version": 3} for k in self.keys]
            return {"error_code": 0, "api_keys": listed, "throttle_time_ms": 0}
        assert api_key == ApiKey.METADATA
        brokers = [{"node_id": i, "host": h, "port": 9092, "rack": None} for i, h in enumerate(self.hosts, 1)]
        return {"brokers": brokers, "topics": [], "cluster_id": "c", "controller_id": 1}


class BrokerVersions:
    def __init__(self, keys: list[int]) -> None:
        self.keys = keys
        self.asked: list[tuple[str, int]] = []

    async def api_versions(self, address: tuple[str, int], *, timeout_s: float) -> dict[int, tuple[int, int]]:
        self.asked.append(address)
        return {k: (0, 0) for k in self.keys}

    async def close(self) -> None:
        pass


def speaks(controller: Controller, broker: BrokerVersions) -> bool:
    async def ask(c: TieredClient) -> bool:
        c.pool = broker  # type: ignore[assignment]
        return await speaks_tiered_apis(c)

    return run_with(controller, ask)


def test_a_stock_kafka_controller_is_told_by_its_api_versions_and_no_broker_is_asked():
    controller, broker = Controller(KAFKA_ADMIN_KEYS), BrokerVersions([ApiKey.FETCH])
    assert speaks(controller, broker) is False
    assert controller.asked == [ApiKey.API_VERSIONS] and broker.asked == []


def test_a_cluster_whose_brokers_lack_disable_remote_topic_is_not_ours():
    controller = Controller([*KAFKA_ADMIN_KEYS, ApiKey.DESCRIBE_TIERED_STATE])
    broker = BrokerVersions([ApiKey.FETCH, ApiKey.PRODUCE])
    assert speaks(controller, broker) is False
    assert broker.asked == [("broker.invalid", 9092)]


def test_our_cluster_answers_both_of_our_apis():
    controller = Controller([*KAFKA_ADMIN_KEYS, ApiKey.DESCRIBE_TIERED_STATE])
    broker = BrokerVersions([ApiKey.FETCH, ApiKey.DISABLE_REMOTE_TOPIC])
    assert speaks(controller, broker) is True


class DeadBrokers(BrokerVersions):
    async def api_versions(self, address: tuple[str, int], *, timeout_s: float) -> dict[int, tuple[int, int]]:
        self.asked.append(address)
        raise BrokerNotAvailable(f"{address} refused the connection")


class PausedFirst(BrokerVersions):
    def __init__(self, keys: list[int]) -> None:
        super().__init__(keys)
        self.paused_given_up = False

    async def api_versions(self, address: tuple[str, int], *, timeout_s: float) -> dict[int, tuple[int, int]]:
        if address[0] != "paused.invalid":
            return await super().api_versions(address, timeout_s=timeout_s)
        self.asked.append(address)
        try:
            await asyncio.Event().wait()  # never answered (asked in turn, as before, this waited for ever)
        except asyncio.CancelledError:
            self.paused_given_up = True
            raise
        raise AssertionError("unreachable")


def test_a_paused_broker_listed_first_holds_up_nothing_the_first_broker_to_answer_decides():
    """Both brokers are asked at once; the answering one decides and the paused one's request is cancelled, not
    waited out for the request timeout (a command started while a broker hangs once waited 30 s here)."""
    # Metadata lists a broker that accepts connections and never answers (paused) before one that answers
    controller = Controller([*KAFKA_ADMIN_KEYS, ApiKey.DESCRIBE_TIERED_STATE], ("paused.invalid", "broker.invalid"))
    broker = PausedFirst([ApiKey.FETCH, ApiKey.DISABLE_REMOTE_TOPIC])
    assert speaks(controller, broker) is True
    assert sorted(broker.asked) == [("broker.invalid", 9092), ("paused.invalid", 9092)]
    assert broker.paused_given_up, "the paused broker's request was cancelled once the other answered"


class CountingInFlight(BrokerVersions):
    def __init__(self, keys: list[int]) -> None:
        super().__init__(keys)
        self.in_flight = self.most_in_flight = 0

    async def api_versions(self, address: tuple[str, int], *, timeout_s: float) -> dict[int, tuple[int, int]]:
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        await asyncio.sleep(0)  # let the others be asked meanwhile, if they are going to be
        self.in_flight -= 1
        return await super().api_versions(address, timeout_s=timeout_s)


def test_the_nodes_are_asked_a_few_at_a_time_and_all_lacking_the_api_means_not_ours():
    """A large cluster's command opens no connection to every broker at once: at most ASKED_AT_ONCE in flight."""
    controller = Controller([*KAFKA_ADMIN_KEYS, ApiKey.DESCRIBE_TIERED_STATE], tuple(f"b{i}.invalid" for i in range(7)))
    broker = CountingInFlight([ApiKey.FETCH])
    assert speaks(controller, broker) is False
    assert sorted(broker.asked) == [(f"b{i}.invalid", 9092) for i in range(7)]
    assert broker.most_in_flight == ASKED_AT_ONCE


def test_with_every_broker_down_the_controllers_answer_decides():
    controller = Controller([*KAFKA_ADMIN_KEYS, ApiKey.DESCRIBE_TIERED_STATE])
    broker = DeadBrokers([])
    assert speaks(controller, broker) is True
    assert broker.asked == [("broker.invalid", 9092)]


class NoMetadataTopic(StandInController):
    async def call(
        self, api_key: int, version_range: tuple[int, int], body: Mapping[str, Any], response: Any, **options: Any
    ) -> Any:
        assert api_key == ApiKey.METADATA and [t["name"] for t in body["topics"]] == ["__remote_log_metadata"]
        missing = {"error_code": 3, "name": "__remote_log_metadata", "is_internal": False, "partitions": []}
        return {"brokers": [], "topics": [missing], "cluster_id": "c", "controller_id": 1}


def test_a_cluster_without_the_metadata_topic_has_recorded_nothing_yet():
    tail = MetadataTail((TopicRef("t", Uuid.from_string("AAAAAAAAAAAAAAAAAAAAAQ"), 3),))
    assert run_with(NoMetadataTopic(), tail.read_new) == []
    assert tail.positions == {}  # asked again at the next poll
