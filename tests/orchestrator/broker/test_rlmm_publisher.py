"""The broker's publisher of ``__remote_log_metadata`` (orchestrator.broker.rlmm_publisher): every store RLMM record in
the partition Kafka's partitioner picks, in store order, once, whatever restarts, tears or empties a log.

A real BrokerAgent (not started: its publisher's rounds are run directly) over a real SQLite store and real partition
logs, with a writer in the controller's place, as tests/orchestrator/broker/test_data_plane.py does. The topic has 4
partitions here: 0-2 led by this broker (1), 3 by broker 2. Each expectation is computed from the store itself.
"""

from __future__ import annotations

import asyncio
import random
import shutil
from collections.abc import Coroutine, Iterator
from typing import Any, NamedTuple

import pytest
from structlog.testing import capture_logs

from orchestrator.broker.agent import BrokerAgent
from orchestrator.broker.local_log import PartitionLog
from orchestrator.broker.rlmm_publisher import RemoteLogMetadataPublisher
from orchestrator.errors import KafkaStorageError
from orchestrator.ids import Uuid
from orchestrator.metadata.records import MetadataRecord, SegmentState, make_record
from orchestrator.protocol.api_keys import ApiKey
from orchestrator.protocol.record_batch import build_batch, decode_batches, encode_batch
from orchestrator.settings import RemoteLogMetadataTopicSettings
from remote_storage.rlmm_topic.layout import TOPIC_CONFIGS, TOPIC_NAME
from remote_storage.rlmm_topic.partitioner import metadata_partition
from remote_storage.rlmm_topic.publishing import STORE_OFFSET_HEADER, metadata_partition_of, store_offset_of
from remote_storage.rlmm_topic.serde import encode_value
from tests.support.broker_harness import ControllerWriter, in_process_broker
from tests.support.clocks import FakeClock
from tests.support.requests import data_request

pytestmark = [pytest.mark.unit, pytest.mark.timeout(60)]

PARTITIONS = 4
LED = (0, 1, 2)  # partition 3 is led by broker 2
ORDERS_PARTITIONS = 16


class Published(NamedTuple):
    """A record of a partition's log, as a consumer reads it."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    store_offset: int | None


class Env:
    def __init__(self, broker: BrokerAgent, writer: ControllerWriter, metadata_topic: Uuid, orders: Uuid) -> None:
        self.broker = broker
        self.writer = writer
        self.metadata_topic = metadata_topic
        self.orders = orders
        self.rng = random.Random(7)
        self.clock = FakeClock(1_000.0)
        self.publisher = self.new_publisher()

    def new_publisher(self, **kwargs: Any) -> RemoteLogMetadataPublisher:
        """A publisher as a broker that starts builds it (it keeps nothing but what the logs hold)."""
        plane = self.broker.data_plane
        options: dict[str, Any] = {
            "broker_id": 1,
            "settings": RemoteLogMetadataTopicSettings(partitions=PARTITIONS),
            "store": self.broker.store,
            "image": self.broker.follower.refresh,
            "leader_log": plane.leader_log,
            "log_lock": plane.log_lock,
            "appended": plane.appended,
            "clock": self.clock,
        }
        return RemoteLogMetadataPublisher(**{**options, **kwargs})

    def run(self, coro: Coroutine[Any, Any, Any]) -> Any:
        return asyncio.run(asyncio.wait_for(coro, 30))

    def publish(self, publisher: RemoteLogMetadataPublisher | None = None) -> None:
        self.run((publisher or self.publisher).publish_round())

    def write_rlmm(self, count: int) -> None:
        """``count`` RLMM records about orders' partitions (copies started, some finished), as brokers write them."""
        records: list[MetadataRecord] = []
        for _ in range(count):
            partition = self.rng.randrange(ORDERS_PARTITIONS)
            segment = Uuid.random(self.rng.randbytes)
            sid = {"topic_id_partition": {"name": "orders", "id": self.orders, "partition": partition}, "id": segment}
            records.append(
                make_record(
                    "RemoteLogSegmentMetadataRecord",
                    remote_log_segment_id=sid,
                    start_offset=0,
                    end_offset=9,
                    broker_id=1,
                    max_timestamp_ms=1_700_000_000_000,
                    event_timestamp_ms=1_700_000_000_000,
                    segment_leader_epochs=[{"leader_epoch": 0, "offset": 0}],
                    segment_size_in_bytes=100,
                    remote_log_segment_state=int(SegmentState.COPY_SEGMENT_STARTED),
                    tiered_epoch=1,
                )
            )
        for record in records:
            self.writer.store.append_remote_log_metadata([record], now_ms=1_700_000_000_000 + self.rng.randrange(9))

    def expected(self, partition: int) -> list[tuple[int, bytes]]:
        """(store offset, value) of every store RLMM record Kafka's partitioner puts in ``partition``, in order."""
        return [
            (e.offset, encode_value(e.record, version=0))
            for e in self.writer.store.read_remote_log_metadata()
            if metadata_partition_of(e.record, partitions=PARTITIONS) == partition
        ]

    def log(self, partition: int) -> PartitionLog:
        """The partition's log: open already, or opened as its leader opens it."""
        plog = self.broker.logs.get((self.metadata_topic, partition))
        return plog if plog is not None else self.broker._leader_log(self.metadata_topic, partition)

    def published(self, partition: int) -> list[Published]:
        plog = self.log(partition)
        out: list[Published] = []
        offset = plog.local_log_start_offset
        while offset < plog.log_end_offset:
            for batch in decode_batches(plog.read_batches(offset)):
                for at, timestamp, record in batch.absolute_records():
                    if at >= offset:
                        stored = store_offset_of(record.headers)
                        out.append(Published(at, timestamp, record.key, record.value, stored))
            offset = out[-1].offset + 1
        return out

    def assert_complete(self, partition: int) -> None:
        """The partition's log holds exactly the store's records for it, in store order, at offsets 0, 1, 2..."""
        got = self.published(partition)
        assert [(p.store_offset, p.value) for p in got] == self.expected(partition)
        assert [p.offset for p in got] == list(range(len(got)))
        assert all(p.key is None for p in got)


def _spread_topic_id() -> Uuid:
    """A topic id whose partitions Kafka's partitioner puts in every metadata partition (a random one misses one
    about once in a hundred: a test about partition 1 then has nothing to publish there)."""
    while True:
        tid = Uuid.random()
        if {metadata_partition(tid, p, partitions=PARTITIONS) for p in range(ORDERS_PARTITIONS)} == set(
            range(PARTITIONS)
        ):
            return tid


@pytest.fixture
def env(tmp_path) -> Iterator[Env]:
    with in_process_broker(tmp_path, segment_ms=24 * 3_600_000) as (broker, writer):
        broker.data_dir.mkdir(parents=True)
        orders = writer.create_topic("orders", partitions=ORDERS_PARTITIONS, topic_id=_spread_topic_id())
        metadata_topic = Uuid.random()
        records = [make_record("TopicRecord", name=TOPIC_NAME, topic_id=metadata_topic)]
        for p in range(PARTITIONS):
            leader = 1 if p in LED else 2
            assignment = {"replicas": [leader], "isr": [leader], "leader": leader}
            epochs = {"leader_epoch": 0, "partition_epoch": 0}
            records.append(
                make_record("PartitionRecord", partition_id=p, topic_id=metadata_topic, **assignment, **epochs)
            )
        for key, value in TOPIC_CONFIGS.items():
            where = {"resource_type": 2, "resource_name": TOPIC_NAME}
            records.append(make_record("ConfigRecord", **where, name=key, value=value))
        writer.store.append(records, controller_epoch=writer.epoch)
        broker.follower.refresh()
        yield Env(broker, writer, metadata_topic, orders)


def test_each_led_partition_gets_every_store_record_of_its_topic_partitions_in_store_order_once(env: Env) -> None:
    env.write_rlmm(40)
    assert all(env.expected(p) for p in range(PARTITIONS)), "the records spread over every partition"
    env.publish()
    for p in LED:
        env.assert_complete(p)
    assert (env.metadata_topic, 3) not in env.broker.logs, "led by broker 2: not this broker's to publish"
    assert env.publisher.lag() == dict.fromkeys(LED, 0)
    ends = {p: env.log(p).log_end_offset for p in LED}
    env.publish()
    assert {p: env.log(p).log_end_offset for p in LED} == ends, "nothing new: nothing appended"
    env.write_rlmm(15)
    env.publish()
    for p in LED:
        env.assert_complete(p)
    store_end = len(list(env.writer.store.read_remote_log_metadata()))
    assert env.publisher.positions() == dict.fromkeys(LED, store_end)


def test_a_record_is_stamped_with_when_the_store_took_it_in(env: Env) -> None:
    env.write_rlmm(10)
    env.publish()
    appended_at = {e.offset: e.appended_at_ms for e in env.writer.store.read_remote_log_metadata()}
    for p in LED:
        assert all(r.timestamp == appended_at[r.store_offset] for r in env.published(p))


def test_a_restarted_broker_resumes_after_the_last_store_offset_its_log_holds(env: Env) -> None:
    env.write_rlmm(30)
    env.publish()
    env.write_rlmm(12)
    restarted = env.new_publisher()
    with capture_logs() as logs:
        env.publish(restarted)
    for p in LED:
        env.assert_complete(p)
    resumed = {e["partition"]: e["next_store_offset"] for e in logs if e["event"] == "broker.rlmm_publish_resumed"}
    assert set(resumed) == set(LED)
    env.publish(restarted)
    for p in LED:
        env.assert_complete(p)


def test_records_a_client_wrote_before_the_topic_was_internal_are_passed_over_when_resuming(env: Env) -> None:
    env.write_rlmm(30)
    env.publish()
    victim = max(LED, key=lambda p: len(env.expected(p)))
    foreign = [(None, f"a client's record {i}".encode(), 1, ()) for i in range(3)]
    env.log(victim).append_batches([encode_batch(build_batch(0, foreign))])
    env.write_rlmm(20)
    env.publish(env.new_publisher())
    ours = [(r.store_offset, r.value) for r in env.published(victim) if r.store_offset is not None]
    assert ours == env.expected(victim), "resumed after its last record of ours, the client's records skipped"
    assert len(env.published(victim)) == len(ours) + 3


def test_a_torn_last_batch_is_cut_off_when_the_log_opens_and_published_again_exactly_once(env: Env) -> None:
    env.write_rlmm(30)
    env.publish()
    victim = max(LED, key=lambda p: len(env.expected(p)))
    before = env.published(victim)
    env.write_rlmm(20)
    env.publish()
    plog = env.broker.logs.pop((env.metadata_topic, victim))
    plog.close()
    segment = max(plog.directory.glob("*.log"))
    segment.write_bytes(segment.read_bytes()[:-7])  # a SIGKILL in the middle of the last batch's write
    assert len(env.published(victim)) == len(before), "the torn batch is gone when the log is opened again"
    env.publish(env.new_publisher())
    env.assert_complete(victim)


def test_an_empty_log_is_rebuilt_from_the_store_with_the_same_records_at_the_same_offsets(env: Env) -> None:
    env.write_rlmm(35)
    env.publish()
    built = {p: env.published(p) for p in LED}
    for p in LED:  # a new disk, or another broker: nothing of the old logs
        plog = env.broker.logs.pop((env.metadata_topic, p))
        plog.close()
        shutil.rmtree(plog.directory)
    env.publish(env.new_publisher())
    assert {p: env.published(p) for p in LED} == built


def test_a_round_reads_a_bounded_number_of_records_and_the_next_rounds_catch_up(env: Env) -> None:
    env.write_rlmm(50)
    small = env.new_publisher(max_records_per_round=12)
    rounds = 0
    while any(len(env.published(p)) < len(env.expected(p)) for p in LED):
        env.publish(small)
        rounds += 1
        assert rounds <= 5
    # 50 records, 12 a round, each round reading on from where the last one ended: done in the round that reads the
    # last record of a partition led here (the records after it, if any, are broker 2's partition's).
    order = [
        metadata_partition_of(e.record, partitions=PARTITIONS) for e in env.writer.store.read_remote_log_metadata()
    ]
    assert len(order) == 50
    assert rounds == max(i for i, p in enumerate(order) if p in LED) // 12 + 1
    for p in LED:
        env.assert_complete(p)


def test_a_partition_whose_appends_fail_is_counted_in_the_lag_and_the_others_go_on(env: Env) -> None:
    env.write_rlmm(30)
    failing: set[int] = set()
    leader_log = env.broker.data_plane.leader_log

    def flaky(topic_id: Uuid, partition: int) -> PartitionLog:
        plog = leader_log(topic_id, partition)
        if partition in failing:
            raise KafkaStorageError(f"log directory {plog.directory}: [Errno 5] Input/output error")
        return plog

    publisher = env.new_publisher(leader_log=flaky)
    env.publish(publisher)  # every partition is empty: each one's log is read, then the first appends go in
    before = {p: len(env.expected(p)) for p in LED}
    env.write_rlmm(30)
    victim = next(p for p in LED if len(env.expected(p)) > before[p])  # one with new records to append
    failing.add(victim)
    with capture_logs() as logs:
        env.publish(publisher)
    failed = [e for e in logs if e["event"] == "broker.loop_failed"]
    assert [(e["loop"], e["partition"], e["error"]) for e in failed] == [
        ("rlmm_publish", victim, "KAFKA_STORAGE_ERROR")
    ]
    for p in set(LED) - failing:
        env.assert_complete(p)
    published = len(env.published(victim))
    lag = publisher.lag()
    assert lag == {**dict.fromkeys(LED, 0), victim: len(env.expected(victim)) - published} and lag[victim] > 0
    env.write_rlmm(10)
    env.publish(publisher)  # still backing off: not retried, its new records counted too
    assert len(env.published(victim)) == published
    assert publisher.lag()[victim] == len(env.expected(victim)) - published

    failing.clear()
    env.clock.now += 60  # past the backoff
    with capture_logs() as logs:
        env.publish(publisher)
    assert [e["event"] for e in logs if e["event"].startswith("broker.loop")] == ["broker.loop_recovered"]
    for p in LED:
        env.assert_complete(p)
    assert publisher.lag() == dict.fromkeys(LED, 0)


def test_a_log_that_no_longer_matches_the_store_is_published_to_no_more(env: Env) -> None:
    env.write_rlmm(20)
    victim = next(p for p in LED if env.expected(p))
    first_offset, _ = env.expected(victim)[0]
    stranger = encode_value(next(iter(env.writer.store.read_remote_log_metadata(from_offset=first_offset + 1))).record)
    header = ((STORE_OFFSET_HEADER, str(first_offset).encode()),)
    env.log(victim).append_batches([encode_batch(build_batch(0, [(None, stranger, 1, header)]))])
    with capture_logs() as logs:
        env.publish()
    diverged = [e for e in logs if e["event"] == "broker.rlmm_publish_diverged"]
    assert [(e["partition"], e["store_offset"]) for e in diverged] == [(victim, first_offset)]
    assert len(env.published(victim)) == 1, "nothing appended after a record the store does not hold"
    assert env.publisher.lag()[victim] == len(env.expected(victim)) - 1
    for p in set(LED) - {victim}:
        env.assert_complete(p)


def test_leadership_that_moves_away_and_back_resumes_from_the_log(env: Env) -> None:
    env.write_rlmm(20)
    env.publish()
    moved = {"topic_id": env.metadata_topic, "partition_id": 0}
    env.writer.store.append(
        [make_record("PartitionChangeRecord", **moved, leader=2)], controller_epoch=env.writer.epoch
    )
    before = env.published(0)
    env.write_rlmm(20)
    env.publish()
    assert env.published(0) == before and 0 not in env.publisher.lag()
    env.writer.store.append(
        [make_record("PartitionChangeRecord", **moved, leader=1)], controller_epoch=env.writer.epoch
    )
    env.publish()
    env.assert_complete(0)


def test_a_waiting_fetch_of_the_topic_is_woken_by_a_publication(env: Env) -> None:
    env.write_rlmm(5)
    env.publish()
    partition = max(LED, key=lambda p: len(env.expected(p)))
    end = env.log(partition).log_end_offset
    body = {
        "max_wait_ms": 20_000,
        "min_bytes": 1,
        "topics": [
            {
                "topic": TOPIC_NAME,
                "partitions": [{"partition": partition, "fetch_offset": end, "partition_max_bytes": 1 << 20}],
            }
        ],
    }

    async def fetch_while_publishing() -> Any:
        waiting = asyncio.create_task(env.broker.data_plane.fetch(data_request(ApiKey.FETCH, 12, body)))
        while not any(len(env.expected(p)) > len(env.published(p)) for p in [partition]):
            await asyncio.to_thread(env.write_rlmm, 3)
        await env.publisher.publish_round()
        return await waiting

    answer = env.run(fetch_while_publishing())
    [entry] = answer["responses"][0]["partitions"]
    assert entry["error_code"] == 0 and entry["records"], "the fetch returned the records published while it waited"
    assert entry["high_watermark"] == len(env.expected(partition))
