"""AlterPartition on a real ControllerService (SQLite store, loopback port), sent by three brokers' real
ControllerLinks through a real AdminClient: the leader shrinks and then expands its partition's ISR, and a follower
asking is refused NOT_LEADER_OR_FOLLOWER with nothing written."""

from __future__ import annotations

import asyncio

import pytest

from orchestrator.broker.controller_link import AlterPartitionResult, ControllerLink
from orchestrator.controller.service import ControllerService
from orchestrator.errors import NotLeaderOrFollower
from orchestrator.net.admin import AdminClient
from orchestrator.protocol import messages as m
from orchestrator.protocol.api_keys import ApiKey
from orchestrator.settings import BrokerSettings, ControllerSettings

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


async def _scenario(tmp_path) -> None:  # type: ignore[no-untyped-def]
    service = ControllerService(
        ControllerSettings(node_id=3000, metadata_store=str(tmp_path / "m.db"), lease_ttl_ms=600)
    )
    task = asyncio.create_task(service.run())
    try:
        async with asyncio.timeout(30):
            while service.core is None or not service.port:
                assert not task.done(), "the controller stopped"
                await asyncio.sleep(0.02)
        async with AdminClient(f"127.0.0.1:{service.port}", timeout_s=5) as controllers:
            links = {}
            for b in (1, 2, 3):
                settings = BrokerSettings(
                    broker_id=b,
                    data_dir=str(tmp_path / f"b{b}"),
                    metadata_store=str(tmp_path / "m.db"),
                    controllers=f"127.0.0.1:{service.port}",
                )
                links[b] = ControllerLink(settings, advertised_port=lambda b=b: 9000 + b, image_offset=lambda: 1 << 40)
                await links[b].register(controllers)
                heartbeat: m.BrokerHeartbeatRequest = {
                    "broker_id": b,
                    "broker_epoch": links[b].broker_epoch,
                    "current_metadata_offset": 1 << 40,
                }
                await controllers.call(ApiKey.BROKER_HEARTBEAT, (0, 1), heartbeat, m.BrokerHeartbeatResponse)
            created = await controllers.call(
                ApiKey.CREATE_TOPICS,
                (7, 7),
                {"topics": [{"name": "t", "num_partitions": 1, "replication_factor": 3}]},
                m.CreateTopicsResponse,
            )
            assert created["topics"][0]["error_code"] == 0
            assert service.core is not None
            topic = service.core.refresh().topic_by_name("t")
            assert topic is not None
            p = topic.partitions[0]
            assert len(p.isr) == 3 and p.leader_epoch == 0 and p.partition_epoch == 0
            leader = links[p.leader]
            follower, other = (b for b in p.replicas if b != p.leader)

            shrunk = await leader.alter_partition(
                controllers,
                topic_id=topic.topic_id,
                partition=0,
                leader_epoch=0,
                partition_epoch=0,
                new_isr=[p.leader, follower],
            )
            assert shrunk == AlterPartitionResult(p.leader, 0, (p.leader, follower), 1)
            expanded = await leader.alter_partition(
                controllers,
                topic_id=topic.topic_id,
                partition=0,
                leader_epoch=0,
                partition_epoch=1,
                new_isr=[p.leader, follower, other],
            )
            assert expanded == AlterPartitionResult(p.leader, 0, (p.leader, follower, other), 2)
            with pytest.raises(NotLeaderOrFollower):
                await links[follower].alter_partition(
                    controllers,
                    topic_id=topic.topic_id,
                    partition=0,
                    leader_epoch=0,
                    partition_epoch=2,
                    new_isr=[follower, other],
                )
            after = service.core.refresh().topic_by_name("t")
            assert after is not None
            final = after.partitions[0]
            assert (final.isr, final.leader, final.partition_epoch) == ((p.leader, follower, other), p.leader, 2)
    finally:
        service.stop()
        await asyncio.wait_for(task, 10)


def test_a_leader_shrinks_and_expands_its_isr_and_a_follower_is_refused(tmp_path) -> None:
    asyncio.run(_scenario(tmp_path))
