"""Bulk disablement: the controller coalesces every topic it owes a broker into one DisableRemoteTopic version 1
request per round, falls back to one version 0 request per topic for a broker that serves only version 0, and
retries a topic a version 1 reply leaves out.

A real ControllerService on a real SQLite store, and stand-in brokers: real Kafka-protocol servers on loopback
(``KafkaServer``) that answer DisableRemoteTopic DONE for each topic and record every request they get. The
topics are written DISABLING (retain) before the controller starts, so its first round owes every one of them.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import generate_latest

from orchestrator.controller.service import ControllerService
from orchestrator.ids import Uuid
from orchestrator.metadata.follower import MetadataFollower
from orchestrator.metadata.records import DisablePolicy, TieredState, make_record
from orchestrator.metadata.sqlite import SqliteMetadataStore
from orchestrator.net.server import KafkaServer
from orchestrator.protocol.api_keys import ApiKey
from orchestrator.protocol.framing import Request
from orchestrator.settings import BrokerMembership, ControllerSettings, DisablementSettings
from tests.support.monitoring import samples, total

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]

TOPICS = 120
BROKERS = (1, 2)


class StandInBroker:
    """Answers every DisableRemoteTopic topic DONE at the epoch asked; ``drop_once`` topics are left out of the
    first version 1 reply that names them."""

    def __init__(self, broker_id: int, *, max_version: int, drop_once: frozenset[Uuid] = frozenset()) -> None:
        self.broker_id = broker_id
        self.requests: list[tuple[int, int]] = []  # (version, topics carried)
        self._drop = set(drop_once)
        self.server = KafkaServer(
            name=f"stand-in-{broker_id}", host="127.0.0.1", port=0, handlers={ApiKey.DISABLE_REMOTE_TOPIC: self.answer}
        )
        self.server.api_versions = {**self.server.api_versions, ApiKey.DISABLE_REMOTE_TOPIC: (0, max_version)}

    async def answer(self, request: Request) -> dict[str, Any]:
        body = request.body
        if request.header.api_version == 0:
            self.requests.append((0, 1))
            return {"error_code": 0, "status": 0, "tiered_epoch": body["tiered_epoch"]}
        self.requests.append((request.header.api_version, len(body["topics"])))
        answers = []
        for t in body["topics"]:
            if t["topic_id"] in self._drop:
                self._drop.discard(t["topic_id"])
                continue
            answers.append({"topic_id": t["topic_id"], "error_code": 0, "status": 0, "tiered_epoch": t["tiered_epoch"]})
        random.Random(7).shuffle(answers)  # entries are matched by topic id, not by position
        return {"error_code": 0, "topics": answers}


def _write_cluster(store_path: Path, ports: dict[int, int]) -> list[Uuid]:
    """Brokers registered at the stand-ins' ports, and TOPICS topics with a partition on each broker, DISABLING."""
    store = SqliteMetadataStore(store_path)
    lease = store.acquire_lease(holder="setup", now_ms=0, ttl_ms=1)
    assert lease is not None
    records = []
    for b, port in ports.items():
        endpoint = {"name": "PLAINTEXT", "host": "127.0.0.1", "port": port, "security_protocol": 0}
        records.append(
            make_record(
                "RegisterBrokerRecord",
                broker_id=b,
                incarnation_id=Uuid.random(),
                broker_epoch=b,
                end_points=[endpoint],
                rack=None,
                fenced=False,
            )
        )
    topic_ids = []
    for i in range(TOPICS):
        tid = Uuid.random()
        topic_ids.append(tid)
        records.append(make_record("TopicRecord", name=f"bulk-{i:03d}", topic_id=tid))
        for p, b in enumerate(BROKERS):
            assignment = {"replicas": [b], "isr": [b], "leader": b, "leader_epoch": 0, "partition_epoch": 0}
            records.append(make_record("PartitionRecord", partition_id=p, topic_id=tid, **assignment))
        for epoch, state, policy in ((1, TieredState.ENABLED, 0), (2, TieredState.DISABLING, DisablePolicy.RETAIN)):
            tiered = {"tiered_epoch": epoch, "tiered_state": int(state), "policy": int(policy)}
            records.append(make_record("TieredStateRecord", topic_id=tid, **tiered))
    store.append(records, controller_epoch=lease.controller_epoch)
    store.release_lease(holder="setup", controller_epoch=lease.controller_epoch)
    store.close()
    return topic_ids


def _disabled(store_path: Path, topic_ids: list[Uuid]) -> Callable[[], bool]:
    store = SqliteMetadataStore(store_path, recover_on_open=False)
    follower = MetadataFollower(store)

    def check() -> bool:
        image = follower.refresh()
        return all(image.topics[t].tiered_state == TieredState.DISABLED for t in topic_ids)

    return check


async def _run(tmp_path: Path, brokers: list[StandInBroker]) -> tuple[list[Uuid], str]:
    """Start the stand-ins and a controller; return when every topic is DISABLED, with the controller's metrics."""
    ports = {}
    for b in brokers:
        _, ports[b.broker_id] = await b.server.start()
    store_path = tmp_path / "metadata.db"
    topic_ids = _write_cluster(store_path, ports)
    settings = ControllerSettings(
        node_id=3000,
        metadata_store=str(store_path),
        lease_ttl_ms=1_000,
        membership=BrokerMembership(session_timeout_ms=600_000),  # the stand-ins send no heartbeats
        disablement=DisablementSettings(max_topics_per_request=50),
    )
    service = ControllerService(settings)
    task = asyncio.create_task(service.run())
    done = _disabled(store_path, topic_ids)
    try:
        async with asyncio.timeout(60):
            while not await asyncio.to_thread(done):
                assert not task.done(), "the controller stopped"
                await asyncio.sleep(0.05)
        return topic_ids, generate_latest(service.metrics.registry).decode()
    finally:
        service.stop()
        await asyncio.wait_for(task, 10)
        for b in brokers:
            await b.server.stop()


def test_every_topic_owed_a_broker_goes_in_version_1_requests_of_at_most_max_topics_per_request(tmp_path):
    brokers = [StandInBroker(b, max_version=1) for b in BROKERS]
    _, metrics = asyncio.run(_run(tmp_path, brokers))
    for b in brokers:
        assert {v for v, _ in b.requests} == {1}
        assert sum(n for _, n in b.requests) == TOPICS, "each topic asked once: every answer was DONE"
        assert len(b.requests) == TOPICS // 50 + 1 and max(n for _, n in b.requests) == 50
    exchanges = {ls["version"]: v for ls, v in samples(metrics, "tieredctl_disable_remote_topic_exchanges_total")}
    assert exchanges == {"1": 2 * (TOPICS // 50 + 1)}, "O(brokers x rounds) exchanges, not O(topics x brokers)"
    assert total(metrics, "tieredctl_disable_remote_topic_requests_total", result="acknowledged") == 2 * TOPICS


def test_a_broker_that_serves_only_version_0_gets_one_request_per_topic(tmp_path):
    old, new = StandInBroker(1, max_version=0), StandInBroker(2, max_version=1)
    asyncio.run(_run(tmp_path, [old, new]))
    assert old.requests == [(0, 1)] * TOPICS, "a rolling upgrade: the old broker is asked topic by topic"
    assert {v for v, _ in new.requests} == {1} and sum(n for _, n in new.requests) == TOPICS


def test_a_topic_a_version_1_reply_leaves_out_is_asked_again_and_completes(tmp_path):
    seed = random.Random(3)
    dropped_ids: set[Uuid] = set()

    class Dropping(StandInBroker):
        async def answer(self, request: Request) -> dict[str, Any]:
            if request.header.api_version >= 1 and not dropped_ids:
                victim = seed.choice(request.body["topics"])["topic_id"]
                dropped_ids.add(victim)
                self._drop.add(victim)
            return await super().answer(request)

    dropping = [Dropping(1, max_version=1), StandInBroker(2, max_version=1)]
    _, metrics = asyncio.run(_run(tmp_path, dropping))
    (victim,) = dropped_ids
    assert sum(n for _, n in dropping[0].requests) == TOPICS + 1, "the topic left out is asked once more"
    unknown = total(metrics, "tieredctl_disable_remote_topic_requests_total", result="UNKNOWN_SERVER_ERROR")
    assert unknown == 1 and victim is not None
