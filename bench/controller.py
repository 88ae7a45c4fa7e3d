"""Controller benches on a real local cluster (separate processes, embedded S3).

Fan-out: T topics x P partitions on B brokers, tiering on, all disabled at once with retain (one
IncrementalAlterConfigs with T resources). Measured: seconds until every topic is DISABLED (every RPC sent and
acknowledged and the DISABLED records appended). References in the same run: (a) the ideal of one round trip per
broker (one DisableRemoteTopic to each broker, concurrently), (b) the floor of sending the same T x B
DisableRemoteTopic RPCs straight to the brokers from one client, pipelined (no controller, no metadata writes).

Failover: SIGKILL of the active controller to the standby serving as active (Metadata names it and an admin
request succeeds), against the lease TTL.
"""

from __future__ import annotations

import asyncio
import os
import signal
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.report import Figure, print_figures
from orchestrator.client import TieredClient
from orchestrator.local import cluster as lc
from orchestrator.metadata.records import TieredState
from orchestrator.metadata.sqlite import SqliteMetadataStore
from orchestrator.net.connection import ConnectionPool
from orchestrator.protocol import messages as m
from orchestrator.protocol.api_keys import ApiKey

BROKER = {"broker": {"heartbeat_interval_ms": 500, "metadata_poll_ms": 50, "tiering_interval_ms": 5_000}}
CONTROLLER = {
    "controller": {"lease_ttl_ms": 10_000},
    "membership": {"session_timeout_ms": 30_000},
    "disablement": {"repoll_ms": 100},
}


async def _create(c: TieredClient, topics: int, partitions: int) -> None:
    for start in range(0, topics, 250):
        names = [f"bench-{i:05d}" for i in range(start, min(topics, start + 250))]
        tiering_on = [{"name": "remote.storage.enable", "value": "true"}]
        new_topics = [
            {"name": n, "num_partitions": partitions, "replication_factor": 1, "assignments": [], "configs": tiering_on}
            for n in names
        ]
        body = {"topics": new_topics, "timeout_ms": 60_000}
        resp = await c.admin.call(ApiKey.CREATE_TOPICS, (2, 7), body, m.CreateTopicsResponse)
        bad = [t for t in resp["topics"] if t["error_code"]]
        assert not bad, bad[:3]


async def _disable_all(c: TieredClient, topics: int) -> None:
    tiering_off = {"name": "remote.storage.enable", "config_operation": 0, "value": "false"}
    retain = {"name": "remote.log.disable.policy", "config_operation": 0, "value": "retain"}
    resources = [
        {"resource_type": 2, "resource_name": f"bench-{i:05d}", "configs": [tiering_off, retain]} for i in range(topics)
    ]
    body = {"resources": resources, "validate_only": False}
    resp = await c.admin.call(ApiKey.INCREMENTAL_ALTER_CONFIGS, (0, 1), body, m.IncrementalAlterConfigsResponse)
    bad = [r for r in resp["responses"] if r["error_code"]]
    assert not bad, bad[:3]


async def _all_disabled(c: TieredClient) -> bool:
    return all(s.state == TieredState.DISABLED for s in await c.tiering_status())


async def _raw_rpcs(brokers: dict[int, tuple[str, int]], bodies: list[dict[str, Any]]) -> tuple[float, float]:
    """(one round trip per broker, all bodies to every broker pipelined) in seconds."""
    async with ConnectionPool() as pool:
        for addr in brokers.values():
            await pool.connection(addr)
        t0 = time.perf_counter()
        await asyncio.gather(
            *(pool.request(a, ApiKey.DISABLE_REMOTE_TOPIC, 0, bodies[0], timeout_s=60) for a in brokers.values())
        )
        one = time.perf_counter() - t0
        t0 = time.perf_counter()
        await asyncio.gather(
            *(
                pool.request(a, ApiKey.DISABLE_REMOTE_TOPIC, 0, b, timeout_s=120)
                for a in brokers.values()
                for b in bodies
            )
        )
        return one, time.perf_counter() - t0


async def time_failover(bootstrap: str, active: dict[str, Any], topic: str) -> float:
    """SIGKILL the active controller; seconds until another controller is active and answers a tiering status."""
    async with TieredClient(bootstrap, timeout_s=30) as c:
        os.kill(active["pid"], signal.SIGKILL)
        t0 = time.perf_counter()
        while True:
            try:
                await c.admin.refresh_metadata()  # DescribeCluster for the controllers: who is active
                if c.admin.controller_id not in (None, -1, active["id"]):
                    await c.tiering_status([topic])
                    return time.perf_counter() - t0
            except Exception:  # the killed controller's address, an election in progress: ask again
                pass
            await asyncio.sleep(0.02)


def run(topics: int = 2000, partitions: int = 12, brokers: int = 6) -> list[Figure]:
    figures: list[Figure] = []
    with tempfile.TemporaryDirectory(prefix="tieredctl-bench-") as tmp:
        state = lc.up(
            Path(tmp),
            brokers=brokers,
            controllers=2,
            broker_overrides=BROKER,
            controller_overrides=CONTROLLER,
            timeout_s=120,
        )
        try:

            async def fanout() -> tuple[float, float, float]:
                async with TieredClient(state.bootstrap_server, timeout_s=120) as c:
                    await _create(c, topics, partitions)
                    t0 = time.perf_counter()
                    await _disable_all(c, topics)
                    while not await _all_disabled(c):  # a 2,000-topic status costs the core; ask twice a second
                        await asyncio.sleep(0.5)
                    ours = time.perf_counter() - t0
                    md = await c.metadata()
                    addrs = {
                        b["node_id"]: (b["host"], b["port"])
                        for b in md["brokers"]
                        if b["node_id"] < lc.CONTROLLER_ID_BASE
                    }
                    st = await c.tiering_status()
                    with SqliteMetadataStore(Path(tmp) / "metadata.db", recover_on_open=False) as store:
                        lease = store.current_lease()
                    epoch = lease.controller_epoch if lease else 0
                    bodies = [
                        {
                            "topic_id": s.topic_id,
                            "partition_id": -1,
                            "tiered_epoch": s.tiered_epoch,
                            "controller_epoch": epoch,
                        }
                        for s in st
                    ]
                    one, pipelined = await _raw_rpcs(addrs, bodies)
                    return ours, one, pipelined

            ours, one, pipelined = asyncio.run(fanout())
            n = f"{topics:,} topics x {partitions} partitions, {brokers} brokers"
            figures.append(
                Figure(f"disable all ({n})", ours, "s", "one round trip per broker", one, higher_is_better=False)
            )
            raw_rpcs = f"{topics * brokers:,} raw RPCs pipelined"
            figures.append(Figure(f"disable all ({n})", ours, "s", raw_rpcs, pipelined, higher_is_better=False))

            active = next(p for p in lc.status(Path(tmp))["processes"] if p["role"] == "controller" and p.get("active"))

            took = asyncio.run(time_failover(state.bootstrap_server, active, "bench-00000"))
            lease_ttl_s = CONTROLLER["controller"]["lease_ttl_ms"] / 1000
            failover_figure = Figure(
                "failover: SIGKILL to standby active", took, "s", "lease TTL", lease_ttl_s, higher_is_better=False
            )
            figures.append(failover_figure)
        finally:
            lc.down(Path(tmp), purge=True)
    print_figures("Controller (real processes)", figures)
    return figures


if __name__ == "__main__":
    run()
