"""Produce throughput with replication: the same confluent-kafka producer (acks=all, Kafka's defaults of
``batch.size`` 16 KiB and ``linger.ms`` 5, no idempotence) writing the same records to a topic of replication factor
3 (``min.insync.replicas=2``: each acknowledgement waits for both followers' fetches to pass the records) and, as
the reference, to a topic of replication factor 1 on the same cluster (3 brokers, 1 controller, separate processes),
in the same run. The topics take turns, a few rounds each (a fresh topic per round), and the best round of each
counts. Each topic's latest offset (the high watermark: what every in-sync replica has) is checked to be the
record count."""

from __future__ import annotations

import asyncio
import logging
import tempfile
from pathlib import Path

from bench.dataplane import _confluent_produce, _log_end, _values
from bench.report import Figure, print_figures
from orchestrator.client import TieredClient
from orchestrator.local import cluster as lc
from orchestrator.logging import configure_logging


def _create(bootstrap: str, name: str, factor: int) -> None:
    async def go() -> None:
        async with TieredClient(bootstrap, timeout_s=60) as c:
            configs = {"min.insync.replicas": "2"} if factor > 1 else {}
            await c.create_topic(name, partitions=1, replication_factor=factor, configs=configs)

    asyncio.run(go())


def run(records: int = 100_000, rounds: int = 3) -> list[Figure]:
    configure_logging("cli", level=logging.WARNING)
    values = _values(records)
    best: dict[int, float] = {}
    with tempfile.TemporaryDirectory(prefix="tieredctl-bench-") as tmp:
        state = lc.up(Path(tmp), brokers=3, controllers=1, timeout_s=120)
        try:
            bootstrap = state.bootstrap_server
            for r in range(rounds):
                for factor in (1, 3):
                    topic = f"rf{factor}-{r}"
                    _create(bootstrap, topic, factor)
                    rate = records / _confluent_produce(bootstrap, topic, values)
                    best[factor] = max(rate, best.get(factor, 0.0))
                    end = _log_end(bootstrap, topic)
                    assert end == records, f"{topic} ends at offset {end}, expected {records}"
        finally:
            lc.down(Path(tmp), purge=True)
    figures = [Figure("produce acks=all, RF 3 (min.insync.replicas 2)", best[3], "rec/s", "RF 1, same client", best[1])]
    print_figures(f"Replication, 3 brokers: {records:,} records x 100 B, confluent-kafka, best of {rounds}", figures)
    return figures


if __name__ == "__main__":
    run()
