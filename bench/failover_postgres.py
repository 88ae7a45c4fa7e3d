"""Controller failover on the PostgreSQL store: SIGKILL of the active controller until a standby is active and
answers, against the lease TTL (the goal: at most TTL + 1 s), with a local cluster (``cluster up --store``) on a
throwaway PostgreSQL server (the tests' ``tests.support.postgres_server``). ``TIEREDCTL_BENCH_FAILOVERS`` sets
how many failovers are timed (default 2), one after the other: the cluster has one controller more than that, and
each failover kills the controller then active."""

from __future__ import annotations

import asyncio
import os
import tempfile
from pathlib import Path

from bench.controller import time_failover
from bench.report import Figure, print_figures
from orchestrator.client import TieredClient
from orchestrator.local import cluster as lc
from orchestrator.metadata.open import PASSWORD_ENV
from tests.support.postgres_server import running_postgres

LEASE_TTL_MS = 3000
CONTROLLER = {"controller": {"lease_ttl_ms": LEASE_TTL_MS}, "membership": {"session_timeout_ms": 6000}}
BROKER = {"broker": {"heartbeat_interval_ms": 500}}


def run(failovers: int | None = None) -> list[Figure]:
    rounds = failovers or int(os.environ.get("TIEREDCTL_BENCH_FAILOVERS", "2"))
    took: list[float] = []
    with running_postgres() as server, tempfile.TemporaryDirectory(prefix="tieredctl-bench-pg-") as tmp:
        url = f"postgresql://postgres@{server.host}:{server.port}/{server.create_database()}"
        os.environ[PASSWORD_ENV] = server.password  # the cluster's processes inherit it
        try:
            state = lc.up(
                Path(tmp),
                brokers=2,
                controllers=rounds + 1,
                store=url,
                broker_overrides=BROKER,
                controller_overrides=CONTROLLER,
            )
            try:

                async def topic() -> None:
                    async with TieredClient(state.bootstrap_server, timeout_s=30) as c:
                        await c.create_topic("bench-failover", partitions=2, replication_factor=1)

                asyncio.run(topic())
                for _ in range(rounds):
                    active = next(
                        p for p in lc.status(Path(tmp))["processes"] if p["role"] == "controller" and p.get("active")
                    )
                    took.append(asyncio.run(time_failover(state.bootstrap_server, active, "bench-failover")))
            finally:
                lc.down(Path(tmp), purge=True)
        finally:
            os.environ.pop(PASSWORD_ENV, None)
    ttl_s = LEASE_TTL_MS / 1000
    figures = [
        Figure(f"PostgreSQL failover, worst of {rounds}", max(took), "s", "lease TTL", ttl_s, higher_is_better=False),
        Figure(f"PostgreSQL failover, best of {rounds}", min(took), "s", "lease TTL", ttl_s, higher_is_better=False),
    ]
    print_figures("Controller failover on PostgreSQL (real processes; goal: at most TTL + 1 s)", figures)
    return figures


if __name__ == "__main__":
    run()
