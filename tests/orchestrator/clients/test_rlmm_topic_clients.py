"""``__remote_log_metadata`` on a live cluster, judged by real Kafka clients (confluent-kafka/librdkafka, kcat,
kafka-python) and by ``tieredctl``: every RLMM record the store holds is in the topic, decoded, in order per
topic-partition, in the partition Kafka's partitioner picks, with a null key; nobody but the cluster writes it; and
SIGKILL of the broker leading a partition of it and of the active controller, while copies go on, loses, reorders
and duplicates nothing.

One cluster (2 controllers, 3 brokers, the embedded S3, separate OS processes with short timings) for the module;
the tests run in order and build on each other's records. Every expectation is computed from the store the cluster
writes (``metadata.db``), read directly: the topic must hold exactly the store's RLMM log, partition by partition.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from orchestrator.client import TieredClient
from orchestrator.ids import Uuid
from orchestrator.local import cluster as lc
from orchestrator.metadata.records import PartitionDeleteState, SegmentState, TieredState
from orchestrator.metadata.sqlite import SqliteMetadataStore
from orchestrator.metadata.store import LogEntry
from remote_storage.rlmm_topic.formatter import format_text, to_json
from remote_storage.rlmm_topic.layout import TOPIC_NAME
from remote_storage.rlmm_topic.partitioner import metadata_partition
from remote_storage.rlmm_topic.publishing import STORE_OFFSET_HEADER, metadata_partition_of, topic_partition_of
from remote_storage.rlmm_topic.serde import decode_value, encode_value
from tests.support import REPO_ROOT
from tests.support import kafka_json_serde as kafka
from tests.support.kafka_clients import (
    ClientReportedError,
    ConfluentJudge,
    JudgeFailure,
    confluent_watermarks,
    consume_confluent,
    consume_kafka_python,
    produce_confluent,
    produce_kafka_python,
)
from tests.support.live_cluster import LiveCluster, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(420)]

PARTITIONS = 50
ALL = list(range(PARTITIONS))
TIERED = {"remote.storage.enable": "true", "local.retention.ms": "0", "segment.bytes": "4096"}
KAFKA_SCHEMAS = REPO_ROOT / "tests" / "orchestrator" / "protocol" / "golden" / "kafka"
SCHEMA_FILES = {
    0: "RemoteLogSegmentMetadataRecord.json",
    1: "RemoteLogSegmentMetadataUpdateRecord.json",
    2: "RemotePartitionDeleteMetadataRecord.json",
}
INVALID_TOPIC_EXCEPTION, INVALID_REQUEST = 17, 42


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveCluster]:
    live = LiveCluster(tmp_path_factory.mktemp("rlmm-topic"), brokers=3, controllers=2)
    try:
        wait_until("the controller to create the topic", lambda: _metadata_topic(live) is not None, timeout_s=60)
        yield live
    finally:
        live.close()


# -- helpers ----------------------------------------------------------------------------------------------------------


def _metadata_topic(live: LiveCluster) -> Any:
    topics = live.call(lambda c: c.metadata())["topics"]
    return next((t for t in topics if t["name"] == TOPIC_NAME), None)


def _leader_of(live: LiveCluster, partition: int) -> int:
    [leader] = [p["leader_id"] for p in _metadata_topic(live)["partitions"] if p["partition_index"] == partition]
    return int(leader)


def store_entries(live: LiveCluster) -> list[LogEntry]:
    with SqliteMetadataStore(live.dir / "metadata.db", recover_on_open=False) as store:
        return list(store.read_remote_log_metadata())


def expected_by_partition(entries: list[LogEntry]) -> dict[int, list[tuple[int, bytes]]]:
    """(store offset, value) of the store's records, per partition of the topic, in store order."""
    out: dict[int, list[tuple[int, bytes]]] = {p: [] for p in ALL}
    for e in entries:
        out[metadata_partition_of(e.record, partitions=PARTITIONS)].append((e.offset, encode_value(e.record)))
    return out


def wait_published(live: LiveCluster, *, timeout_s: float = 90) -> dict[int, list[tuple[int, bytes]]]:
    """Wait until every partition's end offset is the count of store records it must hold (the store first: it only
    grows, so a partition that reached its count of a fresh read holds at least that read's records)."""
    expected: dict[int, list[tuple[int, bytes]]] = {}

    def caught_up() -> bool:
        expected.clear()
        expected.update(expected_by_partition(store_entries(live)))
        marks = confluent_watermarks(live.bootstrap, TOPIC_NAME, ALL)
        return all(marks[p][1] >= len(expected[p]) for p in ALL)

    wait_until("the topic to hold every store RLMM record", caught_up, timeout_s=timeout_s, interval_s=0.5)
    return expected


def kcat_binary() -> str:
    kcat = shutil.which("kcat") or shutil.which("kafkacat")
    assert kcat is not None, "kcat is not installed: run 'make test' (it installs Debian's kafkacat package)"
    return kcat


def consume_kcat(bootstrap: str) -> list[tuple[int, int, int, bytes, str]]:
    """(partition, offset, key length, value, headers) of every record, read by kcat from the beginning to the end
    (each record's payload is cut by its length, so binary values are read whole)."""
    fmt = r"%p %o %K %S %h\n%s"
    args = [kcat_binary(), "-C", "-b", bootstrap, "-t", TOPIC_NAME, "-o", "beginning", "-e", "-q", "-f", fmt]
    done = subprocess.run(args, capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr.decode()
    out, data, pos = [], done.stdout, 0
    while pos < len(data):
        end = data.index(b"\n", pos)
        partition, offset, key_length, size, headers = data[pos:end].decode().split(" ", 4)
        value = data[end + 1 : end + 1 + int(size)]
        out.append((int(partition), int(offset), int(key_length), value, headers))
        pos = end + 1 + int(size)
    return out


def tieredctl(live: LiveCluster, *args: str, check: int = 0, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "orchestrator.cli", *args, "--bootstrap-server", live.bootstrap]
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, cwd=REPO_ROOT)
    assert done.returncode == check, f"{args}: exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done


def tier(live: LiveCluster, name: str, *, partitions: int, records: int = 60) -> Uuid:
    """A tiered topic with tiny segments, written until it has copied segments."""
    live.call(lambda c: c.create_topic(name, partitions=partitions, configs=TIERED))

    async def produce(c: TieredClient) -> None:
        for p in range(partitions):
            await c.produce(name, [b"v" * 200 for _ in range(records)], partition=p)

    live.call(produce)
    topic_id: Uuid = live.status(name).topic_id
    live.wait_tiering_settled(topic_id, partitions)
    return topic_id


def states(entries: list[LogEntry], name: str) -> set[int]:
    f = "remote_log_segment_state" if name != "RemotePartitionDeleteMetadataRecord" else "remote_partition_delete_state"
    return {e.record.fields[f] for e in entries if e.record.name == name}


# -- the tests --------------------------------------------------------------------------------------------------------


def test_the_controller_creates_the_topic_as_kafka_lays_it_out_and_it_is_internal(cluster: LiveCluster) -> None:
    topic = _metadata_topic(cluster)
    assert topic["is_internal"] is True and len(topic["partitions"]) == PARTITIONS
    assert all(len(p["replica_nodes"]) == 1 and p["leader_id"] in {1, 2, 3} for p in topic["partitions"])
    assert {p["leader_id"] for p in topic["partitions"]} == {1, 2, 3}, "spread over every broker"
    configs = cluster.call(lambda c: c.describe_configs(TOPIC_NAME))
    assert (configs["retention.ms"], configs["cleanup.policy"], configs["remote.storage.enable"]) == (
        "-1",
        "delete",
        "false",
    )
    librdkafka = ConfluentJudge(cluster.bootstrap)
    assert TOPIC_NAME in librdkafka.list_topics() and librdkafka.describe_topic(TOPIC_NAME) == PARTITIONS

    hidden = json.loads(tieredctl(cluster, "topic", "list", "-o", "json").stdout)
    assert TOPIC_NAME not in [t["topic"] for t in hidden]
    shown = json.loads(tieredctl(cluster, "topic", "list", "--include-internal", "-o", "json").stdout)
    [internal] = [t for t in shown if t["topic"] == TOPIC_NAME]
    assert (internal["internal"], internal["partitions"], internal["state"]) == (True, PARTITIONS, "NOT_TIERED")
    every = json.loads(tieredctl(cluster, "tiering", "status", "-o", "json").stdout)
    assert TOPIC_NAME not in [t["topic"] for t in every], "never tiered: left out unless named"
    [named] = json.loads(tieredctl(cluster, "tiering", "status", TOPIC_NAME, "-o", "json").stdout)
    assert (named["topic"], named["state"]) == (TOPIC_NAME, "NOT_TIERED")


def test_no_client_writes_creates_deletes_grows_or_reconfigures_the_topic(cluster: LiveCluster) -> None:
    with pytest.raises(ClientReportedError) as librdkafka:
        produce_confluent(cluster.bootstrap, TOPIC_NAME, [(0, None, b"forged")], timeout_s=30)
    assert librdkafka.value.reported.code() == INVALID_TOPIC_EXCEPTION, librdkafka.value.reported
    with pytest.raises(ClientReportedError) as kafka_python:
        produce_kafka_python(cluster.bootstrap, TOPIC_NAME, [(1, None, b"forged")], timeout_s=30)
    # kafka-python never sends it: its metadata leaves out the topics Metadata calls internal, so it has no partition
    assert "did not assign a partition" in str(kafka_python.value.reported), kafka_python.value.reported

    admin = ConfluentJudge(cluster.bootstrap)
    refusals = {  # librdkafka shows the broker's message where its request version carries one (not DeleteTopics)
        "Creation": lambda: admin.create_topic(TOPIC_NAME, 1, {}),
        "Deletion": lambda: admin.delete_topic(TOPIC_NAME),
        "Config change": lambda: admin.incremental_alter_configs(TOPIC_NAME, {"retention.ms": "60000"}),
    }
    with_message = {}
    for change, request in refusals.items():
        with pytest.raises(JudgeFailure, match="code=INVALID_REQUEST,val=42") as refused:
            request()
        with_message[change] = f"{change} of internal topic __remote_log_metadata is prohibited." in str(refused.value)
    assert with_message == {"Creation": True, "Deletion": False, "Config change": True}
    grow = tieredctl(cluster, "topic", "add-partitions", TOPIC_NAME, "--total", "60", check=1)
    assert "INVALID_REQUEST (42): adding partitions to '__remote_log_metadata': Partition change of internal topic" in (
        grow.stderr
    )
    assert len(_metadata_topic(cluster)["partitions"]) == PARTITIONS
    assert cluster.call(lambda c: c.describe_configs(TOPIC_NAME))["retention.ms"] == "-1"
    assert all(high == 0 for _, high in confluent_watermarks(cluster.bootstrap, TOPIC_NAME, ALL).values())


def test_every_rlmm_record_of_the_store_is_in_the_topic_decoded_in_order_in_kafkas_partition(
    cluster: LiveCluster,
) -> None:
    orders = tier(cluster, "orders", partitions=2)
    cluster.call(lambda c: c.disable_tiering("orders", "delete"))
    wait_until("orders DISABLED", lambda: cluster.status("orders").state == TieredState.DISABLED, 120)
    clicks = tier(cluster, "clicks", partitions=2)
    cluster.call(lambda c: c.delete_topic("clicks"))
    finished = int(PartitionDeleteState.DELETE_PARTITION_FINISHED)

    def clicks_deleted() -> bool:
        deletes = [e for e in store_entries(cluster) if e.record.name == "RemotePartitionDeleteMetadataRecord"]
        done = {
            e.record.fields["topic_id_partition"]["partition"]
            for e in deletes
            if e.record.fields["remote_partition_delete_state"] == finished
            and e.record.fields["topic_id_partition"]["id"] == clicks
        }
        return done == {0, 1}

    wait_until("clicks' remote data deleted", clicks_deleted, timeout_s=120)

    expected = wait_published(cluster)
    entries = store_entries(cluster)
    update = "RemoteLogSegmentMetadataUpdateRecord"
    assert {int(SegmentState.COPY_SEGMENT_FINISHED), int(SegmentState.DELETE_SEGMENT_FINISHED)} <= states(
        entries, update
    )
    assert finished in states(entries, "RemotePartitionDeleteMetadataRecord")
    assert {topic_partition_of(e.record)[0] for e in entries} == {orders, clicks}

    # confluent-kafka (librdkafka): every partition from the beginning to its end
    got = consume_confluent(cluster.bootstrap, TOPIC_NAME, ALL, timeout_s=120)
    by_partition: dict[int, list[tuple[int, bytes | None, bytes | None]]] = {p: [] for p in ALL}
    for partition, offset, key, value in got:
        by_partition[partition].append((offset, key, value))
    for p in ALL:
        assert [o for o, _, _ in by_partition[p]] == list(range(len(expected[p]))), f"partition {p}: dense from 0"
        assert [k for _, k, _ in by_partition[p]] == [None] * len(expected[p]), f"partition {p}: null keys"
        assert [v for _, _, v in by_partition[p]] == [value for _, value in expected[p]], f"partition {p}"
    for partition, _, _, value in got:  # decoded, each where Kafka's partitioner puts its topic-partition
        assert value is not None
        topic_id, topic_partition = topic_partition_of(decode_value(value))
        assert metadata_partition(topic_id, topic_partition, partitions=PARTITIONS) == partition

    # kafka-python: it leaves internal topics out of its metadata for producing, yet reads them when assigned
    read_by_kafka_python = consume_kafka_python(cluster.bootstrap, TOPIC_NAME, ALL, timeout_s=120)
    assert sorted(read_by_kafka_python, key=lambda r: (r[0], r[1])) == sorted(got, key=lambda r: (r[0], r[1]))

    # kcat: the same records, with the store offset each came from in its header
    seen = consume_kcat(cluster.bootstrap)
    assert sorted((p, o) for p, o, _, _, _ in seen) == sorted((p, o) for p, o, _, _ in got)
    for partition, offset, key_length, value, headers in seen:
        store_offset, wanted = expected[partition][offset]
        assert (key_length, value, headers) == (-1, wanted, f"{STORE_OFFSET_HEADER}={store_offset}")

    # an independent reader of Kafka's schema files reads every value as Kafka would
    schemas = {key: kafka.load_schema(KAFKA_SCHEMAS / name) for key, name in SCHEMA_FILES.items()}
    for entry in entries:
        api_key, version, body = kafka.unframe(encode_value(entry.record))
        value, unknown_tags = kafka.read(schemas[api_key], version, body)
        f = entry.record.fields
        if api_key == 2:
            assert value["TopicIdPartition"]["Partition"] == f["topic_id_partition"]["partition"]
            assert value["RemotePartitionDeleteState"] == f["remote_partition_delete_state"]
        else:
            assert value["RemoteLogSegmentId"]["Id"].bytes == f["remote_log_segment_id"]["id"].raw
            assert value["RemoteLogSegmentState"] == f["remote_log_segment_state"]
        assert set(unknown_tags) <= {10950}, "only our TieredEpoch, which Kafka skips"


def test_tieredctl_rlmm_dump_prints_the_topic_as_kafkas_console_consumer_does(cluster: LiveCluster) -> None:
    expected = wait_published(cluster)
    entries = {e.offset: e.record for e in store_entries(cluster)}
    lines = {
        (p, i): format_text(entries[store_offset], partition=p, offset=i)
        for p in ALL
        for i, (store_offset, _) in enumerate(expected[p])
    }
    text = tieredctl(cluster, "rlmm", "dump", "--from-beginning")
    printed = text.stdout.splitlines()
    assert sorted(printed) == sorted(lines.values())
    for p in ALL:
        mine = [line for line in printed if line.startswith(f"partition: {p}, ")]
        assert mine == [lines[(p, i)] for i in range(len(expected[p]))], f"partition {p} in offset order"
    assert f"Processed a total of {len(lines)} messages" in text.stderr

    as_json = tieredctl(cluster, "rlmm", "dump", "--from-beginning", "-o", "json")
    documents = [json.loads(line) for line in as_json.stdout.splitlines()]
    wanted = [
        json.loads(json.dumps(to_json(entries[s], partition=p, offset=i)))
        for p in ALL
        for i, (s, _) in enumerate(expected[p])
    ]
    key = lambda d: (d["partition"], d["offset"])  # noqa: E731
    assert sorted(documents, key=key) == sorted(wanted, key=key)


def start_dump(live: LiveCluster, *args: str) -> subprocess.Popen[str]:
    """``tieredctl rlmm dump ARGS`` from the end, started and reading: returned once it said so on stderr."""
    command = [sys.executable, "-m", "orchestrator.cli", "rlmm", "dump", *args, "--bootstrap-server", live.bootstrap]
    dump = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO_ROOT)
    assert dump.stderr is not None
    for line in dump.stderr:  # ends if the process does
        if "Ctrl-C stops" in line:
            return dump
    dump.wait()
    raise AssertionError(f"rlmm dump ended before it began reading (exit {dump.returncode})")


def test_rlmm_dump_from_the_end_prints_what_is_published_from_then_on_until_told_to_stop(cluster: LiveCluster) -> None:
    before = len(store_entries(cluster))
    dump = start_dump(cluster, "--max-records", "2")
    try:
        tier(cluster, "after-the-dump-began", partitions=1)
        out, err = dump.communicate(timeout=120)
    finally:
        if dump.poll() is None:
            dump.kill()
            dump.communicate()
    assert dump.returncode == 0, err
    records = {e.offset: e.record for e in store_entries(cluster)}
    lines = out.splitlines()
    assert len(lines) == 2 and "Processed a total of 2 messages" in err
    newer = {format_text(r, partition=0, offset=0).split("value: ")[1] for o, r in records.items() if o >= before}
    assert all(line.split("value: ")[1] in newer for line in lines), "only records written after it began"

    interrupted = start_dump(cluster)
    try:
        interrupted.send_signal(signal.SIGINT)
        _, err = interrupted.communicate(timeout=60)
    finally:
        if interrupted.poll() is None:
            interrupted.kill()
            interrupted.communicate()
    assert interrupted.returncode == 0 and "Processed a total of" in err, err


def test_sigkill_of_a_partitions_leader_and_of_the_active_controller_mid_publish_loses_and_reorders_nothing(
    cluster: LiveCluster,
) -> None:
    name = "busy"
    metadata_topic_id = _metadata_topic(cluster)["topic_id"]
    cluster.call(lambda c: c.create_topic(name, partitions=6, configs=TIERED))
    topic_id = cluster.status(name).topic_id
    leaders = {p["partition_index"]: p["leader_id"] for p in cluster.call(lambda c: c.topic(name))["partitions"]}
    metadata_leaders = {p["partition_index"]: p["leader_id"] for p in _metadata_topic(cluster)["partitions"]}
    # a partition of busy whose records a broker other than its own leader publishes: it keeps copying meanwhile
    busy_partition, victim = next(
        (p, metadata_leaders[metadata_partition(topic_id, p, partitions=PARTITIONS)])
        for p in sorted(leaders)
        if metadata_leaders[metadata_partition(topic_id, p, partitions=PARTITIONS)] != leaders[p]
    )
    watched = metadata_partition(topic_id, busy_partition, partitions=PARTITIONS)
    stop = threading.Event()

    def keep_producing() -> None:
        async def produce(c: TieredClient) -> None:
            while not stop.is_set():
                await c.produce(name, [b"w" * 200 for _ in range(20)], partition=busy_partition)

        cluster.call(produce)

    producer = threading.Thread(target=keep_producing, daemon=True)
    producer.start()
    try:
        of_busy = lambda: [  # noqa: E731
            e for e in store_entries(cluster) if topic_partition_of(e.record) == (topic_id, busy_partition)
        ]
        wait_until("copies of busy to start", lambda: len(of_busy()) >= 4, timeout_s=60)
        published = lambda: confluent_watermarks(cluster.bootstrap, TOPIC_NAME, [watched])[watched][1]  # noqa: E731
        before = published()
        wait_until("publishing of busy's records to be under way", lambda: published() > before, timeout_s=60)

        controller = cluster.active_controller()
        os.kill(cluster.process("broker", victim).pid, signal.SIGKILL)
        os.kill(controller.pid, signal.SIGKILL)
        written_while_down = len(of_busy())
        wait_until(
            "copies of busy to go on while the publisher is down",
            lambda: len(of_busy()) > written_while_down + 2,
            timeout_s=60,
        )
        lc.restart(cluster.dir, "broker", victim)
        lc.restart(cluster.dir, "controller", controller.id)
    finally:
        stop.set()
        producer.join(timeout=60)
    assert not producer.is_alive()
    cluster.wait_tiering_settled(topic_id, 4)

    expected = wait_published(cluster, timeout_s=120)
    got = consume_confluent(cluster.bootstrap, TOPIC_NAME, ALL, timeout_s=120)
    values: dict[int, list[bytes | None]] = {p: [] for p in ALL}
    for partition, offset, _, value in got:
        assert offset == len(values[partition]), f"partition {partition}: offsets dense, each record once"
        values[partition].append(value)
    assert values == {p: [v for _, v in expected[p]] for p in ALL}, "nothing lost, reordered or duplicated"
    busy_records = [e.offset for e in of_busy()]
    assert len(busy_records) > written_while_down and {s for s, _ in expected[watched]} >= set(busy_records)
    assert metadata_leaders[watched] == victim == _leader_of(cluster, watched), "led again by its only replica"
    after = _metadata_topic(cluster)
    assert (after["topic_id"], len(after["partitions"])) == (metadata_topic_id, PARTITIONS), "the same topic"
