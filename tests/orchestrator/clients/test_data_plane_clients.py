"""Real Kafka producers and consumers judge the brokers' data plane across the tiers: kafka-python, confluent-kafka
(librdkafka) and kcat.

One cluster (1 controller, 2 brokers, the embedded S3) for the module. The story test writes a tiered topic of 2
partitions with tiny segments and ``local.retention.ms=0`` with both producers (acks=all, some batches gzipped), waits
until the early offsets live only in S3, and reads everything back from offset 0 with both consumers (manual
assignment: no consumer groups are served); then disables tiering with ``retain`` (everything still readable from 0),
re-enables it and writes more, disables with ``delete`` (the earliest offset becomes the local log start offset, a
read from 0 is OFFSET_OUT_OF_RANGE as each client reports it), and re-enables once more. Every comparison is against
what the producers were acknowledged: the multiset of (partition, offset, key, value) and a checksum of it.

The story's producers set idempotence off (kafka-python defaults it on): it is about the tiers, not producer state;
one test of its own writes with the clients' idempotent defaults. kcat writes and reads a tiered partition, and
kafka-python's offsets_for_times and its acks=0 / acks=1 produces are checked on their own topics.
"""

from __future__ import annotations

import asyncio
import hashlib
import shutil
import subprocess
import time
import warnings
from collections.abc import Iterator
from typing import Any

import pytest

from orchestrator.client import PartitionOffsets, TieredClient
from tests.support.kafka_clients import (
    BEGINNING,
    ClientReportedError,
    Record,
    ToProduce,
    confluent_offsets_for_times,
    confluent_watermarks,
    consume_confluent,
    consume_kafka_python,
    kafka_python_offsets,
    kafka_python_offsets_for_times,
    produce_confluent,
    produce_kafka_python,
)
from tests.support.live_cluster import LiveCluster, wait_until

with warnings.catch_warnings():  # kafka-python's first import reads schemas with a resources API Python deprecated
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import TopicPartition
    from kafka.errors import OffsetOutOfRangeError
from confluent_kafka import KafkaError

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

TIERED = {"remote.storage.enable": "true", "local.retention.ms": "0", "segment.bytes": "4096"}
PARTITIONS = [0, 1]
PAD = b"." * 100  # ~130-byte records: a few hundred of them fill many 4 KiB segments
TIERING_TIMEOUT_S = 60


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveCluster]:
    live = LiveCluster(tmp_path_factory.mktemp("data-plane"), brokers=2, controllers=1)
    try:
        yield live
    finally:
        live.close()


# -- helpers ----------------------------------------------------------------------------------------------------------


def records(prefix: str, count: int, partition: int | None = None) -> list[ToProduce]:
    """Distinct keys and values; ``partition`` None lets the client's partitioner spread them by key."""
    return [(partition, f"{prefix}-k{i:04d}".encode(), f"{prefix}-v{i:04d}-".encode() + PAD) for i in range(count)]


def checksum(recs: list[Record]) -> str:
    return hashlib.sha256(repr(sorted(recs)).encode()).hexdigest()


def offsets(cluster: LiveCluster, topic: str, partitions: list[int]) -> dict[int, PartitionOffsets]:
    """tieredctl's view of each partition: log start, local log start, log end, highest tiered offset."""

    async def ask(c: TieredClient) -> dict[int, PartitionOffsets]:
        found = await asyncio.gather(*(c.offsets(topic, p) for p in partitions))
        return dict(zip(partitions, found, strict=True))

    return cluster.call(ask)


def wait_for_tiering(cluster: LiveCluster, topic: str, partitions: list[int], past: dict[int, int]) -> dict[int, int]:
    """Wait until each partition's local log starts above ``past[p]`` (its records up to there are in S3 only, local
    retention having removed them); returns the local log start offsets."""

    def moved() -> dict[int, int] | None:
        now = offsets(cluster, topic, partitions)
        done = all(o.local_log_start_offset > past[p] for p, o in now.items())
        return {p: o.local_log_start_offset for p, o in now.items()} if done else None

    found: dict[int, int] = wait_until(
        f"{topic} tiered past {past}", moved, timeout_s=TIERING_TIMEOUT_S, interval_s=0.3
    )
    return found


def wait_for_state(cluster: LiveCluster, topic: str, state: str) -> Any:
    def reached() -> Any:
        status = cluster.status(topic)
        return status if status.state.name == state else None

    return wait_until(f"{topic} to reach {state}", reached, timeout_s=60, interval_s=0.3)


def assert_acknowledged_contiguously(acked: list[Record], ends: dict[int, int]) -> None:
    """Every offset of every partition was handed out once, and the partition holds nothing else."""
    for p, end in ends.items():
        got = sorted(o for q, o, _, _ in acked if q == p)
        assert got == list(range(end)), f"partition {p}: offsets acknowledged {got[:5]}... do not make up [0, {end})"


def assert_both_consumers_read(
    bootstrap: str,
    topic: str,
    expected: list[Record],
    *,
    from_offset: int = BEGINNING,
    partitions: list[int] = PARTITIONS,
) -> None:
    """kafka-python and confluent-kafka each read ``partitions`` from ``from_offset`` to the end: exactly
    ``expected`` (as a multiset, and by checksum)."""
    want = sorted(expected)
    for name, consume in (("kafka-python", consume_kafka_python), ("confluent-kafka", consume_confluent)):
        got = sorted(consume(bootstrap, topic, partitions, from_offset=from_offset, timeout_s=30))
        assert len(got) == len(want), f"{name} read {len(got)} records, {len(want)} were acknowledged"
        assert got == want, f"{name}: first difference at {next(g for g, w in zip(got, want, strict=True) if g != w)}"
        assert checksum(got) == checksum(want)


def produce_both(bootstrap: str, topic: str, phase: str, count: int) -> list[Record]:
    """``count`` records from each client (acks=all), and a few gzipped batches from each."""
    acked = produce_kafka_python(bootstrap, topic, records(f"kp-{phase}", count), acks="all")
    acked += produce_kafka_python(
        bootstrap, topic, records(f"kp-gz-{phase}", 20), acks="all", compression_type="gzip", linger_ms=20
    )
    acked += produce_confluent(bootstrap, topic, records(f"cf-{phase}", count), acks="all")
    acked += produce_confluent(
        bootstrap, topic, records(f"cf-gz-{phase}", 20), **{"acks": "all", "compression.type": "gzip"}
    )
    for prefix in (f"kp-{phase}", f"cf-{phase}"):
        spread = {p for p, _, k, _ in acked if k is not None and k.startswith(prefix.encode())}
        assert spread == set(PARTITIONS), f"{prefix}: the partitioner used only {spread}"
    return acked


# -- the story --------------------------------------------------------------------------------------------------------


def test_producers_and_consumers_across_tiers_through_retain_delete_and_reenable(cluster: LiveCluster) -> None:
    boot, topic = cluster.bootstrap, "orders"
    cluster.call(lambda c: c.create_topic(topic, partitions=len(PARTITIONS), configs=TIERED))

    # 1. Both producers write; every acknowledged offset is distinct and the partitions hold nothing else.
    acked = produce_both(boot, topic, "one", 300)
    ends = {p: o.log_end_offset for p, o in offsets(cluster, topic, PARTITIONS).items()}
    assert sum(ends.values()) == len(acked) == 2 * 320
    assert_acknowledged_contiguously(acked, ends)

    # 2. Tiering copies and local retention removes: the early offsets now live only in S3.
    local_start = wait_for_tiering(cluster, topic, PARTITIONS, dict.fromkeys(PARTITIONS, 0))
    for p in PARTITIONS:
        assert any(q == p and o < local_start[p] for q, o, _, _ in acked), f"nothing of partition {p} is remote-only"

    # 3. Before any disable: both consumers read everything from offset 0, remote and local tiers alike.
    assert_both_consumers_read(boot, topic, acked)
    # ... with tiny fetches too (KIP-74: one batch at least, then the limits), and from an offset in the remote tier
    # (most likely inside a batch: the consumers drop the records below it).
    tiny = consume_kafka_python(boot, topic, PARTITIONS, max_partition_fetch_bytes=512, fetch_max_bytes=1024)
    assert sorted(tiny) == sorted(acked)
    middle = local_start[0] // 2 + 1
    from_middle = [r for r in acked if r[0] == 0 and r[1] >= middle]
    assert_both_consumers_read(boot, topic, from_middle, from_offset=middle, partitions=[0])

    # 4. Disable with retain: nothing leaves, everything still reads from offset 0.
    cluster.call(lambda c: c.disable_tiering(topic, "retain"))
    status = wait_for_state(cluster, topic, "DISABLED")
    assert status.policy.name == "RETAIN"
    assert_both_consumers_read(boot, topic, acked)
    assert kafka_python_offsets(boot, topic, PARTITIONS) == {p: (0, ends[p]) for p in PARTITIONS}
    assert confluent_watermarks(boot, topic, PARTITIONS) == {p: (0, ends[p]) for p in PARTITIONS}
    assert confluent_offsets_for_times(boot, topic, PARTITIONS, BEGINNING) == dict.fromkeys(PARTITIONS, 0)

    # 5. Re-enable, write more, tiering goes on past the old ends; old and new read back.
    cluster.call(lambda c: c.enable_tiering(topic))
    wait_for_state(cluster, topic, "ENABLED")
    acked += produce_both(boot, topic, "two", 100)
    before = ends
    ends = {p: o.log_end_offset for p, o in offsets(cluster, topic, PARTITIONS).items()}
    assert_acknowledged_contiguously(acked, ends)
    local_start = wait_for_tiering(cluster, topic, PARTITIONS, before)
    assert_both_consumers_read(boot, topic, acked)

    # 6. Disable with delete: the remote tier's records are gone, the earliest offset is the local log start.
    cluster.call(lambda c: c.disable_tiering(topic, "delete"))
    status = wait_for_state(cluster, topic, "DISABLED")
    assert status.policy.name == "DELETE"
    after = offsets(cluster, topic, PARTITIONS)
    start = {p: o.local_log_start_offset for p, o in after.items()}
    assert all(start[p] >= local_start[p] > 0 for p in PARTITIONS), (start, local_start)
    assert {p: o.log_start_offset for p, o in after.items()} == start
    assert {p: o.highest_tiered_offset for p, o in after.items()} == {p: -1 for p in PARTITIONS}  # S3 holds none
    assert kafka_python_offsets(boot, topic, PARTITIONS) == {p: (start[p], ends[p]) for p in PARTITIONS}
    assert confluent_watermarks(boot, topic, PARTITIONS) == {p: (start[p], ends[p]) for p in PARTITIONS}
    assert confluent_offsets_for_times(boot, topic, PARTITIONS, BEGINNING) == start

    for p in PARTITIONS:  # offset 0 is out of range, as each client reports it
        with pytest.raises(ClientReportedError) as kp:
            consume_kafka_python(boot, topic, [p], from_offset=0, timeout_s=15, auto_offset_reset="none")
        assert isinstance(kp.value.reported, OffsetOutOfRangeError), kp.value
        assert kp.value.reported.args == ({TopicPartition(topic, p): 0},)
        with pytest.raises(ClientReportedError) as cf:
            consume_confluent(boot, topic, [p], from_offset=0, timeout_s=15, **{"auto.offset.reset": "error"})
        error = cf.value.reported
        assert isinstance(error, KafkaError), cf.value
        assert error.code() == KafkaError._AUTO_OFFSET_RESET, error
        assert "Offset out of range" in error.str(), error

    survivors = [r for r in acked if r[1] >= start[r[0]]]
    assert len(survivors) == sum(ends[p] - start[p] for p in PARTITIONS)
    assert_both_consumers_read(boot, topic, survivors)  # from the new earliest offset
    for p in PARTITIONS:  # and from it named explicitly
        mine = [r for r in survivors if r[0] == p]
        assert_both_consumers_read(boot, topic, mine, from_offset=start[p], partitions=[p])

    # 7. Re-enable after the delete: writes and reads go on, and tiering with them.
    cluster.call(lambda c: c.enable_tiering(topic))
    wait_for_state(cluster, topic, "ENABLED")
    fresh = produce_both(boot, topic, "three", 100)
    assert all(o >= ends[p] for p, o, _, _ in fresh), "offsets never go back"
    survivors += fresh
    before = ends
    ends = {p: o.log_end_offset for p, o in offsets(cluster, topic, PARTITIONS).items()}
    wait_for_tiering(cluster, topic, PARTITIONS, before)
    assert_both_consumers_read(boot, topic, survivors)


# -- kcat -------------------------------------------------------------------------------------------------------------


def kcat_binary() -> str:
    kcat = shutil.which("kcat") or shutil.which("kafkacat")
    assert kcat is not None, "kcat is not installed: run 'make test' (it installs Debian's kafkacat package)"
    return kcat


def kcat(*args: str, stdin: str | None = None) -> str:
    done = subprocess.run([kcat_binary(), *args], input=stdin, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, f"kcat {' '.join(args)}: exit {done.returncode}: {done.stderr}"
    return done.stdout


def test_kcat_produces_and_consumes_a_tiered_partition(cluster: LiveCluster) -> None:
    """``kcat -P`` (librdkafka's defaults: acks=all, idempotence off) writes lines; ``kcat -C`` reads them back
    with their offsets, from the beginning (in S3 only by then) and from an offset inside the remote tier."""
    boot, topic = cluster.bootstrap, "kcat-lines"
    cluster.call(lambda c: c.create_topic(topic, partitions=1, configs=TIERED))
    lines = [f"line-{i:04d}-" + "z" * 80 for i in range(300)]
    # Batches of 20 lines: librdkafka would otherwise send all 300 as one batch, one (active) segment never tiered.
    produce = ("-P", "-b", boot, "-t", topic, "-p", "0", "-X", "batch.num.messages=20")
    kcat(*produce, stdin="".join(line + "\n" for line in lines))
    assert offsets(cluster, topic, [0])[0].log_end_offset == len(lines)
    start = wait_for_tiering(cluster, topic, [0], {0: 0})[0]

    out = kcat("-C", "-b", boot, "-t", topic, "-p", "0", "-o", "beginning", "-e", "-f", "%o %s\n")
    assert out.splitlines() == [f"{i} {line}" for i, line in enumerate(lines)]

    middle = start // 2 + 1
    out = kcat("-C", "-b", boot, "-t", topic, "-p", "0", "-o", str(middle), "-e", "-f", "%o %s\n")
    assert out.splitlines() == [f"{i} {line}" for i, line in enumerate(lines)][middle:]


# -- timestamps and acks ----------------------------------------------------------------------------------------------


def test_offsets_for_times_finds_the_first_record_at_or_after_a_timestamp_in_either_tier(cluster: LiveCluster) -> None:
    boot, topic = cluster.bootstrap, "by-time"
    cluster.call(lambda c: c.create_topic(topic, partitions=1, configs=TIERED))
    count, step = 300, 10
    base = int(time.time() * 1000) - 600_000
    stamps = [base + i * step for i in range(count)]
    acked = produce_kafka_python(boot, topic, records("t", count, partition=0), timestamps=stamps, acks="all")
    at = {o: ts for (_, o, _, _), ts in zip(acked, stamps, strict=True)}
    assert sorted(at) == list(range(count))
    start = wait_for_tiering(cluster, topic, [0], {0: 0})[0]

    def first_at_or_after(target: int) -> tuple[int, int] | None:
        found = [(o, ts) for o, ts in at.items() if ts >= target]
        return min(found) if found else None

    remote, local = start // 2, start + (count - start) // 2
    targets = {
        "before everything": base - 60_000,
        "exactly a remote record": at[remote],
        "between remote records": at[remote] - step // 2,
        "the last remote record": at[start - 1],
        "between the tiers": at[start] - step // 2,
        "exactly a local record": at[local],
        "the last record": at[count - 1],
        "after everything": at[count - 1] + 1,
    }
    for what, target in targets.items():
        want = first_at_or_after(target)
        got = kafka_python_offsets_for_times(boot, topic, [0], target)[0]
        assert got == want, f"kafka-python offsets_for_times, {what} ({target}): {got}, expected {want}"
        librdkafka = confluent_offsets_for_times(boot, topic, [0], target)[0]
        assert librdkafka == (-1 if want is None else want[0]), f"confluent offsets_for_times, {what}: {librdkafka}"

    consumed = consume_kafka_python(boot, topic, [0])
    assert sorted(consumed) == sorted(acked)


def test_kafka_python_acks_0_and_1_produces_land(cluster: LiveCluster) -> None:
    boot, topic = cluster.bootstrap, "acks"
    cluster.call(lambda c: c.create_topic(topic, partitions=1, configs=TIERED))
    one = produce_kafka_python(boot, topic, records("acks1", 150, partition=0), acks=1)
    assert [o for _, o, _, _ in one] == list(range(150))
    # acks=0: no response, so no offset is learnt (kafka-python 3.0.12 reports each record's index in its batch
    # as its "offset", though its RecordMetadata documents -1): nothing to check but what lands.
    zero = produce_kafka_python(boot, topic, records("acks0", 150, partition=0), acks=0)

    # acks=0 gives no acknowledgement: wait (bounded) until the broker has appended all of them.
    wait_until("the acks=0 records to land", lambda: kafka_python_offsets(boot, topic, [0])[0] == (0, 300), 30)
    wait_for_tiering(cluster, topic, [0], {0: 0})
    expected = one + [(0, 150 + i, k, v) for i, (_, _, k, v) in enumerate(zero)]  # one connection: in send order
    assert_both_consumers_read(boot, topic, expected, partitions=[0])


def test_idempotent_producers_as_the_clients_default_them_land(cluster: LiveCluster) -> None:
    """kafka-python's default (enable_idempotence=True) and librdkafka's enable.idempotence=true: the brokers serve
    InitProducerId, so the producers' own defaults work on a tiered topic too."""
    boot, topic = cluster.bootstrap, "idempotent"
    cluster.call(lambda c: c.create_topic(topic, partitions=len(PARTITIONS), configs=TIERED))
    acked = produce_kafka_python(boot, topic, records("kp-idem", 200), enable_idempotence=True)
    acked += produce_confluent(boot, topic, records("cf-idem", 200), **{"enable.idempotence": True})
    ends = {p: o.log_end_offset for p, o in offsets(cluster, topic, PARTITIONS).items()}
    assert_acknowledged_contiguously(acked, ends)
    wait_for_tiering(cluster, topic, PARTITIONS, dict.fromkeys(PARTITIONS, 0))
    assert_both_consumers_read(boot, topic, acked)
