"""Real Kafka clients drive a live cluster's admin API without one failure: kafka-python, confluent-kafka
(librdkafka), kafkajs, and kcat.

One cluster of 2 controllers and 3 brokers (separate OS processes, started as ``tieredctl cluster up`` starts them,
with short timings) and one long-lived admin client per library for the whole module, as an operator's tool or a
service would hold one. Each client creates a topic, reads it back with every read it has (list, describe, describe
cluster, describe configs) ten times in a row, alters its configs both ways (the non-incremental AlterConfigs resets
what it does not name; kafka-python reads the set configs first and sends them along, so it keeps them),
disables tiering with ``delete`` (checked through ``tieredctl tiering status``) and deletes the topic. Then the
active controller is SIGKILLed and every client, with the same connection state it had, reads and writes again.

Every call goes to whichever node the client picks: the clients learn the brokers from Metadata and send reads and
config changes to any of them, so these tests fail if a broker does not serve the admin API.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.local.state import LocalClusterState
from orchestrator.net.connection import DEFAULT_CLIENT_ID, KafkaConnection
from orchestrator.net.server import TRACE_ENV
from orchestrator.protocol.api_keys import ApiKey
from tests.support.client_frames import problem, read_frames, unique
from tests.support.kafka_clients import JUDGES, Judge, JudgeFailure
from tests.support.live_cluster import LiveCluster, run, wait_until

pytestmark = pytest.mark.integration

READS_IN_A_ROW = 10
BROKERS = {1, 2, 3}
PARTITIONS = 3
DEFAULT_RETENTION_MS = "604800000"
DISABLE_WITH_DELETE = {"remote.storage.enable": "false", "remote.log.disable.policy": "delete"}  # KIP-950


@pytest.fixture(scope="module")
def trace_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where every controller and broker of the cluster appends the requests it decodes."""
    return tmp_path_factory.mktemp("requests")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, trace_dir: Path) -> Iterator[LiveCluster]:
    with pytest.MonkeyPatch.context() as env:
        env.setenv(TRACE_ENV, str(trace_dir))  # the processes inherit it
        live = LiveCluster(tmp_path_factory.mktemp("clients"), brokers=3, controllers=2)
    try:
        yield live
    finally:
        live.close()


@pytest.fixture(scope="module")
def judges(cluster: LiveCluster) -> Iterator[dict[str, Judge]]:
    made: dict[str, Judge] = {}
    try:
        for name, judge in JUDGES.items():
            made[name] = judge(cluster.bootstrap)
        yield made
    finally:
        for judge in made.values():
            judge.close()


def tieredctl(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", *args], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, f"tieredctl {' '.join(args)}: {done.stderr}"
    return done.stdout


def tiering_status(cluster: LiveCluster, topic: str) -> dict[str, object]:
    [status] = json.loads(tieredctl("tiering", "status", topic, "-o", "json", "--bootstrap-server", cluster.bootstrap))
    return dict(status)


def read_everything(judge: Judge, topic: str) -> None:
    """Every read the client has, ``READS_IN_A_ROW`` times in a row; any failure fails the test."""
    for _ in range(READS_IN_A_ROW):
        assert topic in judge.list_topics()
        assert judge.describe_topic(topic) == PARTITIONS
        controller, nodes = judge.describe_cluster()
        assert nodes >= BROKERS and controller in nodes
        assert judge.describe_configs(topic)["remote.storage.enable"] == "true"


@pytest.mark.parametrize("client", list(JUDGES))
def test_a_client_creates_reads_alters_disables_and_deletes_without_one_failure(
    cluster: LiveCluster, judges: dict[str, Judge], client: str
) -> None:
    judge = judges[client]
    topic = f"judged-by-{client}"
    judge.create_topic(topic, PARTITIONS, {"remote.storage.enable": "true", "retention.ms": "3600000"})
    read_everything(judge, topic)

    judge.alter_configs(topic, {"remote.storage.enable": "true", "segment.bytes": "1048576"})
    configs = judge.describe_configs(topic)
    assert configs["segment.bytes"] == "1048576"
    kept_or_reset = "3600000" if client == "kafka-python" else DEFAULT_RETENTION_MS
    assert configs["retention.ms"] == kept_or_reset, "AlterConfigs resets every config it does not name"
    if client != "kafka-python":  # kafka-python's path sends the set configs along: remote.storage.enable is named
        # Naming only segment.bytes would reset remote.storage.enable: refused, and nothing changed.
        with pytest.raises(JudgeFailure, match="INVALID_CONFIG"):
            judge.alter_configs(topic, {"segment.bytes": "2097152"})
        configs = judge.describe_configs(topic)
        assert (configs["segment.bytes"], configs["remote.storage.enable"]) == ("1048576", "true")

    if judge.incremental:
        judge.incremental_alter_configs(topic, {"retention.ms": "7200000"})
        configs = judge.describe_configs(topic)
        assert (configs["retention.ms"], configs["segment.bytes"]) == ("7200000", "1048576")
        judge.incremental_alter_configs(
            topic, {"remote.storage.enable": "false", "remote.log.disable.policy": "delete"}
        )
    else:
        judge.alter_configs(topic, {"remote.storage.enable": "false", "remote.log.disable.policy": "delete"})

    def disabled() -> dict[str, object] | None:
        status = tiering_status(cluster, topic)
        return status if status["state"] == "DISABLED" else None

    status = wait_until(f"{topic} to reach DISABLED", disabled, timeout_s=60, interval_s=0.5)
    assert status["policy"] == "delete" and status["tiered_epoch"] == 2
    assert judge.describe_configs(topic)["remote.storage.enable"] == "false"

    judge.delete_topic(topic)
    assert topic not in judge.list_topics()


SERVED_BY_EVERY_NODE = {
    ApiKey.METADATA,
    ApiKey.DESCRIBE_CONFIGS,
    ApiKey.DESCRIBE_CLUSTER,
    ApiKey.CREATE_TOPICS,
    ApiKey.DELETE_TOPICS,
    ApiKey.CREATE_PARTITIONS,
    ApiKey.ALTER_CONFIGS,
    ApiKey.INCREMENTAL_ALTER_CONFIGS,
}


def test_every_broker_and_the_standby_serve_the_reads_and_forward_the_writes(cluster: LiveCluster) -> None:
    active = cluster.active_controller()
    state = LocalClusterState.load(cluster.dir)
    others = [p for p in state.processes if p.role in ("broker", "controller") and p.id != active.id]
    assert len(others) == 4

    async def ask(port: int, name: str) -> None:
        async with await KafkaConnection.open("127.0.0.1", port) as conn:
            versions = await conn.api_versions(timeout_s=10)
            assert set(versions) >= SERVED_BY_EVERY_NODE
            md = await conn.request(ApiKey.METADATA, 12, {"topics": None}, timeout_s=10)
            assert md["controller_id"] == min(BROKERS) and BROKERS | {active.id} == {
                b["node_id"] for b in md["brokers"]
            }
            create = {"topics": [{"name": name, "num_partitions": 1, "replication_factor": 1}], "timeout_ms": 5000}
            created = await conn.request(ApiKey.CREATE_TOPICS, 7, create, timeout_s=15)
            assert created["topics"][0]["error_code"] == 0, created
            md = await conn.request(ApiKey.METADATA, 12, {"topics": [{"name": name}]}, timeout_s=10)
            assert md["topics"][0]["error_code"] == 0, "a write acknowledged is seen by the next read on any node"
            deleted = await conn.request(ApiKey.DELETE_TOPICS, 6, {"topics": [{"name": name}]}, timeout_s=15)
            assert deleted["responses"][0]["error_code"] == 0, deleted

    for p in others:
        run(ask(p.port, f"forwarded-by-{p.role}-{p.id}"))


def test_kcat_lists_the_brokers_and_topics(cluster: LiveCluster, judges: dict[str, Judge]) -> None:
    kcat = shutil.which("kcat") or shutil.which("kafkacat")
    assert kcat is not None, "kcat is not installed: run 'make test' (it installs Debian's kafkacat package)"
    judges["confluent-kafka"].create_topic("listed-by-kcat", PARTITIONS, {})
    done = subprocess.run([kcat, "-L", "-J", "-b", cluster.bootstrap], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    listing = json.loads(done.stdout)
    assert {b["id"] for b in listing["brokers"]} >= BROKERS
    assert listing["controllerid"] in {b["id"] for b in listing["brokers"]}
    [topic] = [t for t in listing["topics"] if t["topic"] == "listed-by-kcat"]
    assert len(topic["partitions"]) == PARTITIONS and all(p["leader"] in BROKERS for p in topic["partitions"])


def test_every_client_reads_and_writes_again_after_sigkill_of_the_active_controller(
    cluster: LiveCluster, judges: dict[str, Judge], tmp_path: Path
) -> None:
    topic = "judged-across-a-failover"
    judges["kafka-python"].create_topic(topic, PARTITIONS, {"remote.storage.enable": "true"})
    for judge in judges.values():
        read_everything(judge, topic)

    killed = cluster.active_controller()
    os.kill(killed.pid, signal.SIGKILL)
    wait_until(
        "another controller to take the lease",
        lambda: (active := cluster.maybe_active_controller()) is not None and active.id != killed.id,
        timeout_s=30,
    )

    for name, judge in judges.items():
        read_everything(judge, topic)
        controller, _ = judge.describe_cluster()
        assert controller != killed.id, f"{name} still names the killed controller"
        created = f"{topic}-{name}"
        judge.create_topic(created, PARTITIONS, {"remote.storage.enable": "true"})
        judge.alter_configs(created, {"remote.storage.enable": "true", "retention.ms": "60000"})
        assert judge.describe_configs(created)["retention.ms"] == "60000"
        judge.delete_topic(created)
        assert created not in judge.list_topics()


def test_every_request_the_clients_sent_reads_as_kafka_reads_it(trace_dir: Path) -> None:
    """Runs last: the frames of every test above, as the servers received them, decoded by us and by kio alike."""
    captured = read_frames(sorted(trace_dir.glob("*.jsonl")))
    frames = unique(f for f in captured if f["client_id"] != DEFAULT_CLIENT_ID)  # ours: forwards, heartbeats
    seen = {(f["client_id"], f["api_key"]) for f in frames}
    for client in ("kafka-python-judge", "confluent-kafka-judge", "kafkajs-judge"):
        served = {key for c, key in seen if c == client}
        assert {ApiKey.METADATA, ApiKey.CREATE_TOPICS, ApiKey.DESCRIBE_CONFIGS} <= served, (client, served)
    assert (ApiKey.ALTER_CONFIGS in {key for _, key in seen}) and ("rdkafka" in {c for c, _ in seen})  # kcat
    problems = [p for p in map(problem, frames) if p is not None]
    assert problems == [], "\n".join(problems)
