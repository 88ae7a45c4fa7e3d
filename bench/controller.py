"""Controller benches on a real local cluster (separate processes, embedded S3).

Bulk disablement: T topics x P partitions on B brokers, tiering on, all disabled at once with retain (one
IncrementalAlterConfigs with T resources), three times on the same cluster (tiering back on between, every topic
ENABLED again first, and each broker's tiering rounds through the passes that made due: two more rounds finished on
every broker, by its metrics), the median reported. Measured: seconds from the request until the store holds every
topic DISABLED (read every 20 ms by a follower of the store, caught up before the request: every broker asked and
acknowledged, and the DISABLED records appended). The ideal in the same run: (a) one batched round trip per broker
(one DisableRemoteTopic v1 carrying every topic the broker hosts, to every broker concurrently) plus (b) bare SQLite
appends of the records the state machine must write: T epoch bumps (DISABLING) and T DISABLED records, encoded, in
two transactions, same pragmas as the store; each part the median of three measurements. Also printed: the
DisableRemoteTopic exchanges the controller sent (its metrics), which must be O(brokers x rounds), not O(topics x
brokers).

Failover: SIGKILL of the active controller to the standby serving as active (Metadata names it and an admin
request succeeds), against the lease TTL, on the same (T-topic) log.

``python -m bench controller`` runs 2,000 and 10,000 topics (``TIEREDCTL_BENCH_CONTROLLER_TOPICS``: a comma list).
"""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import ssl
import statistics
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from bench.report import Figure, print_figures
from orchestrator.client import TieredClient
from orchestrator.local import cluster as lc
from orchestrator.metadata.follower import MetadataFollower
from orchestrator.metadata.records import DisablePolicy, TieredState, encode_record, make_record
from orchestrator.metadata.sqlite import SqliteMetadataStore
from orchestrator.net.connection import ConnectionPool
from orchestrator.protocol import messages as m
from orchestrator.protocol.api_keys import ApiKey

BROKER = {"broker": {"heartbeat_interval_ms": 500, "metadata_poll_ms": 50, "tiering_interval_ms": 5_000}}
CONTROLLER = {
    "controller": {"lease_ttl_ms": 10_000},
    "membership": {"session_timeout_ms": 60_000},
    "disablement": {"repoll_ms": 100},
}
TOPICS_ENV = "TIEREDCTL_BENCH_CONTROLLER_TOPICS"
EXCHANGES = "tieredctl_disable_remote_topic_exchanges_total"
TIERING_ROUNDS = "tieredctl_tiering_rounds_total"


async def _create(c: TieredClient, topics: int, partitions: int) -> None:
    for start in range(0, topics, 250):
        names = [f"bench-{i:05d}" for i in range(start, min(topics, start + 250))]
        tiering_on = [{"name": "remote.storage.enable", "value": "true"}]
        new_topics = [
            {"name": n, "num_partitions": partitions, "replication_factor": 1, "assignments": [], "configs": tiering_on}
            for n in names
        ]
        body = {"topics": new_topics, "timeout_ms": 120_000}
        resp = await c.admin.call(ApiKey.CREATE_TOPICS, (2, 7), body, m.CreateTopicsResponse)
        bad = [t for t in resp["topics"] if t["error_code"]]
        assert not bad, bad[:3]


async def _disable_all(c: TieredClient, topics: int) -> None:
    tiering_off = {"name": "remote.storage.enable", "config_operation": 0, "value": "false"}
    retain = {"name": "remote.log.disable.policy", "config_operation": 0, "value": "retain"}
    await _alter_all(c, topics, [tiering_off, retain])


async def _enable_all(c: TieredClient, topics: int) -> None:
    """Tiering back on for every topic (a new tiered epoch, ENABLED), so the disablement can be timed again."""
    await _alter_all(c, topics, [{"name": "remote.storage.enable", "config_operation": 0, "value": "true"}])


async def _alter_all(c: TieredClient, topics: int, configs: list[dict[str, Any]]) -> None:
    resources = [{"resource_type": 2, "resource_name": f"bench-{i:05d}", "configs": configs} for i in range(topics)]
    body = {"resources": resources, "validate_only": False}
    resp = await c.admin.call(ApiKey.INCREMENTAL_ALTER_CONFIGS, (0, 1), body, m.IncrementalAlterConfigsResponse)
    bad = [r for r in resp["responses"] if r["error_code"]]
    assert not bad, bad[:3]


def _counted(name: str, metrics_url: str, context: ssl.SSLContext | None) -> float:
    """The counter ``name`` of the process at ``metrics_url`` (``context``: https, secured)."""
    with urllib.request.urlopen(metrics_url, timeout=30, context=context) as response:
        text = response.read().decode()
    return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples if s.name == name)


def _exchanges(metrics_url: str, context: ssl.SSLContext | None) -> float:
    """The DisableRemoteTopic exchanges the controller at ``metrics_url`` counted."""
    return _counted(EXCHANGES, metrics_url, context)


def _tiering_settled(metrics_urls: list[str], context: ssl.SSLContext | None, timeout_s: float) -> None:
    """Until every broker has finished two more tiering rounds than it had now: the second began after this call,
    so it read the image as it is now, and passed every partition a change (the topics created, tiering back on)
    made due. Without it those passes (every partition of every broker) landed in the timed disablement or not, by
    luck, and made one run of the same code three times another."""
    start = [_counted(TIERING_ROUNDS, url, context) for url in metrics_urls]
    deadline = time.monotonic() + timeout_s
    for url, before in zip(metrics_urls, start, strict=True):
        while _counted(TIERING_ROUNDS, url, context) < before + 2:
            if time.monotonic() > deadline:
                raise TimeoutError(f"a broker ({url}) did not finish two tiering rounds in {timeout_s:.0f} s")
            time.sleep(0.1)


IDEAL_RUNS = 3  # the ideal's parts are each the median of this many measurements: one is too noisy to divide by
# The disablement is timed this many times on one cluster, tiering turned back on (and every topic ENABLED) between
# runs; the figure is the median (one run varied by a factor of three).
ROUNDS = 3


async def _one_round_trip(brokers: dict[int, tuple[str, int]], body: dict[str, Any]) -> float:
    """Seconds for one DisableRemoteTopic v1 carrying every topic to each broker, all brokers at once: the median
    of :data:`IDEAL_RUNS` round trips (every topic is DISABLED by then, so each answers every topic DONE alike)."""
    took: list[float] = []
    async with ConnectionPool() as pool:
        for addr in brokers.values():
            await pool.connection(addr)
        for _ in range(IDEAL_RUNS):
            t0 = time.perf_counter()
            replies = await asyncio.gather(
                *(pool.request(a, ApiKey.DISABLE_REMOTE_TOPIC, 1, body, timeout_s=600) for a in brokers.values())
            )
            took.append(time.perf_counter() - t0)
            assert all(r["error_code"] == 0 and len(r["topics"]) == len(body["topics"]) for r in replies)
    return statistics.median(took)


def _bare_appends(directory: Path, topic_ids: list[Any]) -> float:
    """Seconds to append, bare, the records a bulk disablement must write: one DISABLING and one DISABLED record
    per topic, encoded, as two transactions into a SQLite table with the store's pragmas."""

    def records(state: TieredState) -> list[bytes]:
        fields = {"tiered_epoch": 2, "tiered_state": int(state), "policy": int(DisablePolicy.RETAIN)}
        return [encode_record(make_record("TieredStateRecord", topic_id=t, **fields)) for t in topic_ids]

    disabling, disabled = records(TieredState.DISABLING), records(TieredState.DISABLED)
    took: list[float] = []
    for run in range(IDEAL_RUNS):
        db = sqlite3.connect(directory / f"bare-{run}.db", isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")
        db.execute("CREATE TABLE log (offset INTEGER PRIMARY KEY, data BLOB NOT NULL)")
        t0 = time.perf_counter()
        offset = 0
        for batch in (disabling, disabled):
            db.execute("BEGIN IMMEDIATE")
            db.executemany("INSERT INTO log VALUES (?, ?)", ((offset + i, d) for i, d in enumerate(batch)))
            db.execute("COMMIT")
            offset += len(batch)
        took.append(time.perf_counter() - t0)
        db.close()
    return statistics.median(took)


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


def _wait_logs_open(cluster_dir: Path, partitions: int, timeout_s: float) -> None:
    """Wait until the brokers have opened every partition's log (one directory each): the disablement is timed on
    a settled cluster, not one still creating thousands of logs."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        opened = sum(
            1 for d in (cluster_dir / "data").glob("broker-*/bench-*") if d.is_dir() and not d.name.endswith("-stale")
        )
        if opened >= partitions:
            return
        time.sleep(0.2)
    raise SystemExit(f"the brokers had not opened {partitions} partition logs after {timeout_s:g}s")


class _Watch:
    """A follower of the store, opened once per cluster and caught up before each timed run begins: a run's time
    then holds the cluster's work only, not this bench's own load of the latest snapshot and replay of the log's
    tail (about a second at 10,000 topics, and more the longer the tail)."""

    def __init__(self, store_path: Path) -> None:
        self._store = SqliteMetadataStore(store_path, recover_on_open=False)
        self._follower = MetadataFollower(self._store)

    def catch_up(self) -> None:
        self._follower.refresh()

    def until(self, topics: int, state: TieredState, timeout_s: float) -> float:
        """perf_counter() when the follower first sees ``topics`` topics in ``state``."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            image = self._follower.refresh()
            if sum(1 for t in image.topics.values() if t.tiered_state == state) >= topics:
                return time.perf_counter()
            time.sleep(0.02)
        raise SystemExit(f"not every topic was {state.name} after {timeout_s:g}s")

    def close(self) -> None:
        self._store.close()


def run_size(topics: int, partitions: int = 12, brokers: int = 6) -> list[Figure]:
    figures: list[Figure] = []
    with tempfile.TemporaryDirectory(prefix="tieredctl-bench-") as tmp:
        state = lc.up(
            Path(tmp),
            brokers=brokers,
            controllers=2,
            broker_overrides=BROKER,
            controller_overrides=CONTROLLER,
            timeout_s=300,
        )
        try:
            processes = lc.status(Path(tmp))["processes"]
            active = next(p for p in processes if p["role"] == "controller" and p.get("active"))
            broker_metrics = [p["metrics_url"] for p in processes if p["role"] == "broker"]
            store_path = Path(tmp) / "metadata.db"
            scraper = lc.metrics_ssl_context(state)  # None: plain HTTP (this bench's cluster is not secured)

            async def fanout() -> tuple[list[float], float, float, float]:
                async with TieredClient(state.bootstrap_server, timeout_s=600) as c:
                    await _create(c, topics, partitions)
                    await asyncio.to_thread(_wait_logs_open, Path(tmp), topics * partitions, 1800)
                    ours: list[float] = []
                    watch = await asyncio.to_thread(_Watch, store_path)
                    try:
                        for run in range(ROUNDS):
                            if run:  # tiering back on, settled, before the next disablement is timed
                                await _enable_all(c, topics)
                                await asyncio.to_thread(watch.until, topics, TieredState.ENABLED, 3600)
                            await asyncio.to_thread(_tiering_settled, broker_metrics, scraper, 600)
                            await asyncio.to_thread(watch.catch_up)
                            sent_before = _exchanges(active["metrics_url"], scraper)
                            t0 = time.perf_counter()
                            await _disable_all(c, topics)
                            done_at = await asyncio.to_thread(watch.until, topics, TieredState.DISABLED, 3600)
                            ours.append(done_at - t0)
                            sent = _exchanges(active["metrics_url"], scraper) - sent_before
                    finally:
                        watch.close()
                    md = await c.metadata()
                    addrs = {
                        b["node_id"]: (b["host"], b["port"])
                        for b in md["brokers"]
                        if b["node_id"] < lc.CONTROLLER_ID_BASE
                    }
                    st = await c.tiering_status()
                    with SqliteMetadataStore(store_path, recover_on_open=False) as store:
                        lease = store.current_lease()
                    body = {
                        "controller_epoch": lease.controller_epoch if lease else 0,
                        "topics": [
                            {"topic_id": s.topic_id, "tiered_epoch": s.tiered_epoch, "policy": int(s.policy)}
                            for s in st
                        ],
                    }
                    one = await _one_round_trip(addrs, body)
                    bare = await asyncio.to_thread(_bare_appends, Path(tmp), [s.topic_id for s in st])
                    return ours, one, bare, sent

            ours, one, bare, sent = asyncio.run(fanout())
            n = f"{topics:,} topics x {partitions} partitions, {brokers} brokers"
            runs = ", ".join(f"{s:.2f}" for s in ours)
            ideal = f"ideal: 1 batched round trip/broker ({one:.2f} s) + bare appends ({bare:.2f} s)"
            figures.append(
                Figure(
                    f"disable all ({n}; median of {ROUNDS} runs: {runs} s)",
                    statistics.median(ours),
                    "s",
                    ideal,
                    one + bare,
                    higher_is_better=False,
                )
            )
            figures.append(
                Figure(
                    f"DisableRemoteTopic exchanges sent ({topics * brokers:,} topic-broker pairs)",
                    sent,
                    "RPCs",
                    "brokers (one round)",
                    brokers,
                    higher_is_better=False,
                )
            )
            took = asyncio.run(time_failover(state.bootstrap_server, active, "bench-00000"))
            lease_ttl_s = CONTROLLER["controller"]["lease_ttl_ms"] / 1000
            figures.append(
                Figure(
                    f"failover: SIGKILL to standby active ({topics:,}-topic log)",
                    took,
                    "s",
                    "lease TTL",
                    lease_ttl_s,
                    higher_is_better=False,
                )
            )
        finally:
            lc.down(Path(tmp), purge=True)
    print_figures(f"Controller (real processes, {topics:,} topics)", figures)
    return figures


def run() -> list[Figure]:
    sizes = [int(x) for x in os.environ.get(TOPICS_ENV, "2000,10000").split(",") if x.strip()]
    return [f for size in sizes for f in run_size(size)]


if __name__ == "__main__":
    run()
