"""Kafka's data plane on a broker (orchestrator.broker.data_plane): Produce, Fetch and ListOffsets as a client sends
them, with an error per partition while the others of the request are served.

Most tests call the handlers of a real BrokerAgent (not started: no server, no loops) over a real SQLite store and
real partition directories, as tests/orchestrator/broker/test_agent_partition_dirs.py does; the broker's wall clock
is fake, so a LogAppendTime stamp is known. The remote-tier test builds a DataPlane over the in-process broker
harness (moto's S3 server). A test that long-polls runs in one event loop from start to end.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import time
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, Literal

import pytest

from orchestrator.broker import data_plane
from orchestrator.broker.agent import BrokerAgent
from orchestrator.broker.data_plane import MAX_FETCH_WAIT_MS, DataPlane
from orchestrator.ids import Uuid
from orchestrator.metadata.records import make_record
from orchestrator.metadata.sqlite import SqliteMetadataStore
from orchestrator.net.server import CLOSE_CONNECTION, NO_RESPONSE
from orchestrator.protocol.api_keys import ApiKey
from orchestrator.protocol.record_batch import (
    TimestampType,
    build_batch,
    decode_batches,
    encode_batch,
    records_at_or_after,
)
from remote_storage.keys import Suffix
from tests.support.broker_harness import BrokerUnderTest, ControllerWriter, in_process_broker
from tests.support.clocks import FakeClock, FakeWallClock
from tests.support.requests import data_request

pytestmark = [pytest.mark.timeout(60)]

NOW = int(time.time() * 1000)  # the broker's wall clock (fake, fixed), near the real one the logs roll by
T0 = NOW - 60_000
OK, OFFSET_OUT_OF_RANGE, CORRUPT_MESSAGE, UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER = 0, 1, 2, 3, 6
INVALID_REQUIRED_ACKS, UNSUPPORTED_VERSION, INVALID_REQUEST, INVALID_TOPIC_EXCEPTION = 21, 35, 42, 17
FETCH_SESSION_ID_NOT_FOUND, FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH = 70, 74, 75
LEADER_EPOCH = 5  # of topic "epoch"


def records(*values: bytes, ts: int = T0, stamps: list[int] | None = None) -> bytes:
    """One batch of ``values`` as a producer sends it (CreateTime)."""
    times = stamps or [ts + i for i in range(len(values))]
    return encode_batch(build_batch(0, [(None, v, t, ()) for v, t in zip(values, times, strict=True)]))


def produce_body(*entries: tuple[str, int, bytes | None], acks: int = -1) -> dict[str, Any]:
    topics: dict[str, list[dict[str, Any]]] = {}
    for topic, partition, data in entries:
        topics.setdefault(topic, []).append({"index": partition, "records": data})
    return {
        "acks": acks,
        "timeout_ms": 1000,
        "topic_data": [{"name": t, "partition_data": p} for t, p in topics.items()],
    }


def fetch_body(
    *entries: tuple[str, int, int],
    max_wait_ms: int = 0,
    min_bytes: int = 0,
    partition_max_bytes: int = 1 << 20,
    **extra: Any,
) -> dict[str, Any]:
    """A Fetch of (topic, partition, offset) entries; extra keys go in the body, or in each partition entry when
    they are partition fields (current_leader_epoch)."""
    epoch = extra.pop("current_leader_epoch", None)
    topics: dict[str, list[dict[str, Any]]] = {}
    for topic, partition, offset in entries:
        p = {"partition": partition, "fetch_offset": offset, "partition_max_bytes": partition_max_bytes}
        if epoch is not None:
            p["current_leader_epoch"] = epoch
        topics.setdefault(topic, []).append(p)
    return {
        "max_wait_ms": max_wait_ms,
        "min_bytes": min_bytes,
        "topics": [{"topic": t, "partitions": p} for t, p in topics.items()],
        **extra,
    }


def list_offsets_body(*entries: tuple[str, int, int], current_leader_epoch: int | None = None) -> dict[str, Any]:
    topics: dict[str, list[dict[str, Any]]] = {}
    for topic, partition, timestamp in entries:
        p: dict[str, Any] = {"partition_index": partition, "timestamp": timestamp}
        if current_leader_epoch is not None:
            p["current_leader_epoch"] = current_leader_epoch
        topics.setdefault(topic, []).append(p)
    return {"replica_id": -1, "topics": [{"name": t, "partitions": p} for t, p in topics.items()]}


def by_partition(response: dict[str, Any], list_field: str, topic_field: str, entries: str, index: str) -> dict:
    """``{(topic, partition): entry}`` of a response."""
    return {(t[topic_field], p[index]): p for t in response[list_field] for p in t[entries]}


def produced(response: dict[str, Any]) -> dict[tuple[str, int], dict[str, Any]]:
    return by_partition(response, "responses", "name", "partition_responses", "index")


def fetched(response: dict[str, Any]) -> dict[tuple[str, int], dict[str, Any]]:
    return by_partition(response, "responses", "topic", "partitions", "partition_index")


def listed(response: dict[str, Any]) -> dict[tuple[str, int], dict[str, Any]]:
    return by_partition(response, "topics", "name", "partitions", "partition_index")


def values(entry: dict[str, Any], offset: int = 0) -> list[bytes | None]:
    return [r.value for _, _, r in records_at_or_after(entry["records"] or b"", offset)]


class Env:
    def __init__(self, broker: BrokerAgent, writer: ControllerWriter, wall: FakeWallClock) -> None:
        self.broker = broker
        self.plane: DataPlane = broker.data_plane
        self.writer = writer
        self.wall = wall

    async def produce(self, body: dict[str, Any], version: int = 9) -> Any:
        return await self.plane.produce(data_request(ApiKey.PRODUCE, version, body))

    async def fetch(self, body: dict[str, Any], version: int = 12) -> Any:
        return await self.plane.fetch(data_request(ApiKey.FETCH, version, body))

    async def list_offsets(self, body: dict[str, Any], version: int = 9) -> Any:
        return await self.plane.list_offsets(data_request(ApiKey.LIST_OFFSETS, version, body))

    def run(self, coro: Coroutine[Any, Any, Any]) -> Any:
        return asyncio.run(asyncio.wait_for(coro, 30))

    def log_end_offset(self, topic: str, partition: int = 0) -> int:
        image = self.broker.follower.refresh()
        tid = image.topic_by_name(topic).topic_id
        return self.broker._leader_log(tid, partition).log_end_offset


@pytest.fixture
def env(tmp_path):
    """A broker agent (id 1, not started) with topics: t (2 partitions), elsewhere (led by broker 2), epoch (leader
    epoch 5), lat (LogAppendTime)."""
    wall = FakeWallClock(NOW)
    clocks = {"clock": FakeClock(1_000.0), "wall_clock_ms": wall}
    # no roll by age: a fetch reads from one segment, these tests from one batch on
    with in_process_broker(tmp_path, agent_kwargs=clocks, segment_ms=24 * 3_600_000) as (broker, writer):
        yield from _with_topics(broker, writer, wall)


def _with_topics(broker: BrokerAgent, writer: ControllerWriter, wall: FakeWallClock) -> Iterator[Env]:
    broker.data_dir.mkdir(parents=True)
    writer.create_topic("t", partitions=2, tiered=False)
    writer.create_topic("elsewhere", leader=2, tiered=False)
    writer.create_topic("lat", configs={"message.timestamp.type": "LogAppendTime"}, tiered=False)
    tid = Uuid.random()
    writer.store.append(
        [
            make_record("TopicRecord", name="epoch", topic_id=tid),
            make_record(
                "PartitionRecord",
                partition_id=0,
                topic_id=tid,
                replicas=[1],
                isr=[1],
                leader=1,
                leader_epoch=LEADER_EPOCH,
                partition_epoch=0,
            ),
        ],
        controller_epoch=writer.epoch,
    )
    asyncio.run(broker._metadata_round())
    yield Env(broker, writer, wall)


# --- Produce


@pytest.mark.unit
def test_a_produce_answers_each_partition_on_its_own_and_appends_only_the_good_ones(env):
    body = produce_body(
        ("t", 0, records(b"a", b"b")),
        ("t", 1, records(b"c")[:-1]),  # truncated: corrupt
        ("t", 7, records(b"d")),  # no such partition
        ("nope", 0, records(b"e")),  # no such topic
        ("elsewhere", 0, records(b"f")),  # led by broker 2
        ("epoch", 0, records(b"g")),
    )
    answer = produced(env.run(env.produce(body)))
    codes = {key: entry["error_code"] for key, entry in answer.items()}
    assert codes == {
        ("t", 0): OK,
        ("t", 1): CORRUPT_MESSAGE,
        ("t", 7): UNKNOWN_TOPIC_OR_PARTITION,
        ("nope", 0): UNKNOWN_TOPIC_OR_PARTITION,
        ("elsewhere", 0): NOT_LEADER,
        ("epoch", 0): OK,
    }
    assert (answer[("t", 0)]["base_offset"], answer[("t", 0)]["log_start_offset"]) == (0, 0)
    assert answer[("t", 0)]["log_append_time_ms"] == -1  # CreateTime
    assert all(answer[key]["base_offset"] == -1 for key in answer if codes[key] != OK)
    assert env.log_end_offset("t", 0) == 2 and env.log_end_offset("t", 1) == 0  # nothing of the refused partition
    again = produced(env.run(env.produce(produce_body(("t", 0, records(b"h"))))))
    assert again[("t", 0)]["base_offset"] == 2  # offsets follow on
    fetched_t0 = fetched(env.run(env.fetch(fetch_body(("t", 0, 0)))))[("t", 0)]
    assert values(fetched_t0) == [b"a", b"b", b"h"]


@pytest.mark.unit
def test_a_produce_of_several_partitions_takes_one_worker_thread_hop_under_the_log_lock(env, monkeypatch):
    hops: list[bool] = []  # whether the log lock was held at each hop
    real = asyncio.to_thread
    lock = env.plane.log_lock

    async def counted(fn: Any, /, *args: Any, **kwargs: Any) -> Any:
        hops.append(lock.locked())
        return await real(fn, *args, **kwargs)

    monkeypatch.setattr(data_plane.asyncio, "to_thread", counted)
    body = produce_body(("t", 0, records(b"a")), ("t", 1, records(b"c")[:-1]), ("nope", 0, records(b"d")))
    answer = produced(env.run(env.produce(body)))
    assert [answer[k]["error_code"] for k in sorted(answer)] == [UNKNOWN_TOPIC_OR_PARTITION, OK, CORRUPT_MESSAGE]
    assert hops == [True]
    assert env.log_end_offset("t", 0) == 1


@pytest.mark.unit
@pytest.mark.parametrize("acks", [2, -2, 3, 100])
def test_acks_other_than_0_1_and_all_are_invalid_required_acks_on_every_partition(env, acks):
    body = produce_body(("t", 0, records(b"a")), ("t", 1, records(b"b")), ("nope", 0, records(b"c")), acks=acks)
    answer = produced(env.run(env.produce(body)))
    assert {key: e["error_code"] for key, e in answer.items()} == dict.fromkeys(answer, INVALID_REQUIRED_ACKS)
    assert len(answer) == 3
    assert env.log_end_offset("t", 0) == env.log_end_offset("t", 1) == 0


@pytest.mark.unit
@pytest.mark.parametrize("acks", [1, -1])
def test_acks_1_and_all_answer_once_appended(env, acks):
    answer = produced(env.run(env.produce(produce_body(("t", 0, records(b"a")), acks=acks))))
    assert answer[("t", 0)]["error_code"] == OK and env.log_end_offset("t", 0) == 1


@pytest.mark.unit
def test_acks_0_gets_no_response_and_a_failure_closes_the_connection(env):
    ok = env.run(env.produce(produce_body(("t", 0, records(b"a")), acks=0)))
    assert ok is NO_RESPONSE
    assert env.log_end_offset("t", 0) == 1
    failed = env.run(env.produce(produce_body(("t", 1, records(b"b")[:-3]), acks=0)))
    assert failed is CLOSE_CONNECTION
    assert env.log_end_offset("t", 1) == 0
    mixed = env.run(env.produce(produce_body(("t", 0, records(b"c")), ("nope", 0, records(b"d")), acks=0)))
    assert mixed is CLOSE_CONNECTION


@pytest.mark.unit
@pytest.mark.parametrize("acks", [-1, 1])
def test_a_produce_to_the_internal_topic_is_refused_as_kafka_refuses_appends_to_internal_topics(env, acks):
    env.writer.create_topic("__remote_log_metadata", partitions=2, tiered=False)
    body = produce_body(("__remote_log_metadata", 0, records(b"x")), ("t", 0, records(b"a")), acks=acks)
    answer = produced(env.run(env.produce(body)))
    refused = answer[("__remote_log_metadata", 0)]
    assert (refused["error_code"], refused["base_offset"]) == (INVALID_TOPIC_EXCEPTION, -1)
    assert refused["error_message"] == "Cannot append to internal topic __remote_log_metadata"
    assert answer[("t", 0)]["error_code"] == OK
    assert env.log_end_offset("__remote_log_metadata", 0) == 0
    unanswered = env.run(env.produce(produce_body(("__remote_log_metadata", 1, records(b"y")), acks=0)))
    assert unanswered is CLOSE_CONNECTION
    assert env.log_end_offset("__remote_log_metadata", 1) == 0


@pytest.mark.unit
def test_a_log_append_time_topic_stamps_the_brokers_clock_on_the_batch(env):
    env.wall.now_ms = NOW + 12_345
    answer = produced(env.run(env.produce(produce_body(("lat", 0, records(b"x", b"y", ts=T0 - 10**9))))))
    entry = answer[("lat", 0)]
    assert (entry["error_code"], entry["log_append_time_ms"]) == (OK, NOW + 12_345)
    raw = fetched(env.run(env.fetch(fetch_body(("lat", 0, 0)))))[("lat", 0)]["records"]
    (batch,) = decode_batches(raw)  # its CRC was computed again
    assert batch.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert [(o, t, r.value) for o, t, r in batch.absolute_records()] == [
        (0, NOW + 12_345, b"x"),
        (1, NOW + 12_345, b"y"),
    ]
    found = listed(env.run(env.list_offsets(list_offsets_body(("lat", 0, NOW)))))[("lat", 0)]
    assert (found["offset"], found["timestamp"]) == (0, NOW + 12_345)  # lookups see the broker's time


# --- Fetch


@pytest.mark.unit
def test_a_fetch_answers_each_partition_on_its_own(env):
    env.run(env.produce(produce_body(("t", 0, records(b"a", b"b")), ("t", 1, records(b"c")))))
    body = fetch_body(
        ("t", 0, 1),
        ("t", 1, 5),  # past the log end offset
        ("t", 9, 0),
        ("nope", 0, 0),
        ("elsewhere", 0, 0),
    )
    answer = fetched(env.run(env.fetch(body)))
    assert {k: e["error_code"] for k, e in answer.items()} == {
        ("t", 0): OK,
        ("t", 1): OFFSET_OUT_OF_RANGE,
        ("t", 9): UNKNOWN_TOPIC_OR_PARTITION,
        ("nope", 0): UNKNOWN_TOPIC_OR_PARTITION,
        ("elsewhere", 0): NOT_LEADER,
    }
    t0 = answer[("t", 0)]
    assert values(t0, 1) == [b"b"] and values(t0) == [b"a", b"b"]  # the whole batch holding offset 1
    assert (t0["high_watermark"], t0["last_stable_offset"], t0["log_start_offset"]) == (2, 2, 0)
    out_of_range = answer[("t", 1)]
    assert (out_of_range["high_watermark"], out_of_range["log_start_offset"]) == (1, 0)  # so a consumer can reset
    assert out_of_range["records"] in (b"", None)


@pytest.mark.unit
@pytest.mark.parametrize("offset", [-1, -100, 3, 2**40])
def test_an_offset_outside_the_log_is_out_of_range_with_the_bounds(env, offset):
    env.run(env.produce(produce_body(("t", 0, records(b"a", b"b")))))
    entry = fetched(env.run(env.fetch(fetch_body(("t", 0, offset)))))[("t", 0)]
    assert (entry["error_code"], entry["high_watermark"], entry["log_start_offset"]) == (OFFSET_OUT_OF_RANGE, 2, 0)


@pytest.mark.unit
def test_a_fetch_at_the_log_end_offset_is_empty_not_an_error(env):
    env.run(env.produce(produce_body(("t", 0, records(b"a")))))
    entry = fetched(env.run(env.fetch(fetch_body(("t", 0, 1)))))[("t", 0)]
    assert (entry["error_code"], entry["high_watermark"], values(entry)) == (OK, 1, [])


@pytest.mark.unit
@pytest.mark.parametrize(
    "current_leader_epoch,code",
    [
        (-1, OK),
        (LEADER_EPOCH, OK),
        (LEADER_EPOCH - 1, FENCED_LEADER_EPOCH),
        (0, FENCED_LEADER_EPOCH),
        (LEADER_EPOCH + 1, UNKNOWN_LEADER_EPOCH),
    ],
)
def test_fetch_v9_and_later_fence_a_stale_or_future_leader_epoch(env, current_leader_epoch, code):
    env.run(env.produce(produce_body(("epoch", 0, records(b"a")), ("t", 0, records(b"b")))))
    body = fetch_body(("epoch", 0, 0), current_leader_epoch=current_leader_epoch)
    body["topics"].append(
        {"topic": "t", "partitions": [{"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}]}
    )
    for version in (9, 12):
        answer = fetched(env.run(env.fetch(body, version)))
        assert answer[("epoch", 0)]["error_code"] == code, version
        assert values(answer[("epoch", 0)]) == ([b"a"] if code == OK else [])
        assert (answer[("t", 0)]["error_code"], values(answer[("t", 0)])) == (OK, [b"b"])  # served all the same


@pytest.mark.unit
def test_a_fetch_naming_a_session_is_fetch_session_id_not_found_at_the_top_level(env):
    env.run(env.produce(produce_body(("t", 0, records(b"a")))))
    answer = env.run(env.fetch(fetch_body(("t", 0, 0), session_id=123, session_epoch=1)))
    assert (answer["error_code"], answer["session_id"], answer["responses"]) == (FETCH_SESSION_ID_NOT_FOUND, 0, [])
    full = env.run(env.fetch(fetch_body(("t", 0, 0), session_id=0, session_epoch=0)))
    assert (full["error_code"], full["session_id"]) == (OK, 0)  # no session is created: every fetch is full
    assert values(fetched(full)[("t", 0)]) == [b"a"]


@pytest.mark.unit
def test_read_committed_reads_as_read_uncommitted(env):
    env.run(env.produce(produce_body(("t", 0, records(b"a", b"b")))))
    entry = fetched(env.run(env.fetch(fetch_body(("t", 0, 0), isolation_level=1))))[("t", 0)]
    assert (entry["error_code"], entry["last_stable_offset"], entry["aborted_transactions"]) == (OK, 2, [])
    assert values(entry) == [b"a", b"b"]


@pytest.mark.unit
def test_kip_74_the_first_batch_comes_whole_whatever_the_limits_and_the_rest_stop_at_them(env):
    big, small = b"x" * 5000, b"y" * 10
    for value in (big, small, small):
        env.run(env.produce(produce_body(("t", 0, records(value)), ("t", 1, records(value)))))
    tiny = fetched(env.run(env.fetch(fetch_body(("t", 0, 0), ("t", 1, 0), partition_max_bytes=1, max_bytes=1))))
    assert values(tiny[("t", 0)]) == [big]  # the first partition with data: at least its first batch
    assert (tiny[("t", 1)]["error_code"], values(tiny[("t", 1)])) == (OK, [])  # the request's max_bytes is spent
    zero = fetched(env.run(env.fetch(fetch_body(("t", 0, 0), partition_max_bytes=0, max_bytes=0))))
    assert values(zero[("t", 0)]) == [big]
    per_partition = fetched(env.run(env.fetch(fetch_body(("t", 0, 1), ("t", 1, 1), partition_max_bytes=100))))
    assert values(per_partition[("t", 0)]) == [small]  # the next small batch (~80 bytes) would pass 100
    assert values(per_partition[("t", 1)]) == [small]  # a partition's own limit, not the first one's
    empty_first = fetched(env.run(env.fetch(fetch_body(("t", 0, 3), ("t", 1, 0), partition_max_bytes=1))))
    assert values(empty_first[("t", 1)]) == [big]  # the first partition with data, though not the first asked


@pytest.mark.unit
def test_a_long_poll_on_an_empty_partition_returns_empty_after_waiting(env):
    answer = env.run(env.fetch(fetch_body(("t", 0, 0), min_bytes=1, max_wait_ms=300)))
    entry = fetched(answer)[("t", 0)]
    assert (answer["error_code"], entry["error_code"], entry["high_watermark"], values(entry)) == (OK, OK, 0, [])


class ParkedWait(asyncio.Event):
    """The data plane's append event, telling when a long poll has read, found too little and started to wait."""

    def __init__(self) -> None:
        super().__init__()
        self.parked = asyncio.Event()

    async def wait(self) -> Literal[True]:
        self.parked.set()
        return await super().wait()


@pytest.mark.unit
def test_a_long_poll_is_answered_with_records_produced_while_it_waits(env):
    async def scenario() -> tuple[Any, bool]:
        append = env.plane._appended = ParkedWait()
        poll = asyncio.create_task(env.fetch(fetch_body(("t", 0, 0), min_bytes=1, max_wait_ms=MAX_FETCH_WAIT_MS)))
        await asyncio.wait_for(append.parked.wait(), 10)  # the fetch read nothing and waits for an append
        waited = not poll.done()
        await env.produce(produce_body(("t", 0, records(b"woken"))))
        # Its deadline is 30 s away: an answer within 20 s was woken by the append (a miss raises TimeoutError).
        return await asyncio.wait_for(poll, 20), waited

    answer, waited = env.run(scenario())
    assert waited  # the fetch did wait for data
    assert values(fetched(answer)[("t", 0)]) == [b"woken"]  # and the records came in that same response


@pytest.mark.unit
def test_a_long_poll_with_an_error_partition_answers_at_once(env):
    async def scenario() -> Any:
        return await asyncio.wait_for(env.fetch(fetch_body(("nope", 0, 0), min_bytes=1, max_wait_ms=20_000)), 10)

    assert fetched(env.run(scenario()))[("nope", 0)]["error_code"] == UNKNOWN_TOPIC_OR_PARTITION


# --- ListOffsets


def _three_batches(env: Env) -> None:
    """Offsets 0..4 with timestamps T0+10, T0+30 | T0+20 | T0+50, T0+40."""
    for stamps in ([T0 + 10, T0 + 30], [T0 + 20], [T0 + 50, T0 + 40]):
        body = produce_body(("t", 0, records(*(b"%d" % s for s in stamps), stamps=stamps)))
        assert produced(env.run(env.produce(body)))[("t", 0)]["error_code"] == OK


def _relative(value: object) -> str:
    """A stable test id for a timestamp near T0 (the clock moves between runs)."""
    return f"T0+{value - T0}" if isinstance(value, int) and value > T0 // 2 else repr(value)


@pytest.mark.unit
@pytest.mark.parametrize(
    "timestamp,version,expected",
    [
        (-2, 1, (0, -1)),  # earliest
        (-1, 1, (5, -1)),  # latest: the log end offset
        (-3, 7, (3, T0 + 50)),  # the first record with the largest timestamp
        (-4, 8, (0, -1)),  # the local log start offset
        (-5, 9, (-1, -1)),  # nothing copied to the remote tier
        (0, 1, (0, T0 + 10)),
        (T0 + 10, 9, (0, T0 + 10)),
        (T0 + 11, 9, (1, T0 + 30)),
        (T0 + 25, 4, (1, T0 + 30)),
        (T0 + 31, 9, (3, T0 + 50)),  # the first in offset order, not the nearest in time
        (T0 + 45, 9, (3, T0 + 50)),
        (T0 + 50, 9, (3, T0 + 50)),
        (T0 + 51, 9, (-1, -1)),  # none at or after
    ],
    ids=lambda value: _relative(value) if isinstance(value, int) else "",
)
def test_list_offsets_special_values_and_timestamps(env, timestamp, version, expected):
    _three_batches(env)
    entry = listed(env.run(env.list_offsets(list_offsets_body(("t", 0, timestamp)), version)))[("t", 0)]
    assert (entry["error_code"], entry["offset"], entry["timestamp"]) == (OK, *expected)
    if timestamp == -1 and version >= 4:
        assert entry["leader_epoch"] == 0


@pytest.mark.unit
def test_list_offsets_latest_carries_the_partitions_leader_epoch(env):
    env.run(env.produce(produce_body(("epoch", 0, records(b"a")))))
    entry = listed(env.run(env.list_offsets(list_offsets_body(("epoch", 0, -1)))))[("epoch", 0)]
    assert (entry["offset"], entry["leader_epoch"]) == (1, LEADER_EPOCH)


@pytest.mark.unit
@pytest.mark.parametrize(
    "timestamp,version,code",
    [
        (-3, 6, UNSUPPORTED_VERSION),
        (-4, 7, UNSUPPORTED_VERSION),
        (-5, 8, UNSUPPORTED_VERSION),
        (-3, 1, UNSUPPORTED_VERSION),
        (-7, 9, INVALID_REQUEST),
        (-6, 9, INVALID_REQUEST),
        (-100, 4, INVALID_REQUEST),
        (-(2**63), 9, INVALID_REQUEST),
    ],
)
def test_list_offsets_refuses_a_special_value_its_version_does_not_know_and_any_other_negative(
    env, timestamp, version, code
):
    _three_batches(env)
    body = list_offsets_body(("t", 0, timestamp), ("t", 1, -1))
    answer = listed(env.run(env.list_offsets(body, version)))
    assert (answer[("t", 0)]["error_code"], answer[("t", 0)]["offset"]) == (code, -1)
    assert (answer[("t", 1)]["error_code"], answer[("t", 1)]["offset"]) == (OK, 0)  # the other partition is served


@pytest.mark.unit
def test_list_offsets_answers_each_partition_on_its_own(env):
    _three_batches(env)
    body = list_offsets_body(("t", 0, -1), ("t", 4, -1), ("nope", 0, -1), ("elsewhere", 0, -1))
    answer = listed(env.run(env.list_offsets(body)))
    assert {k: (e["error_code"], e["offset"]) for k, e in answer.items()} == {
        ("t", 0): (OK, 5),
        ("t", 4): (UNKNOWN_TOPIC_OR_PARTITION, -1),
        ("nope", 0): (UNKNOWN_TOPIC_OR_PARTITION, -1),
        ("elsewhere", 0): (NOT_LEADER, -1),
    }


@pytest.mark.unit
@pytest.mark.parametrize(
    "current_leader_epoch,code",
    [(-1, OK), (LEADER_EPOCH, OK), (LEADER_EPOCH - 2, FENCED_LEADER_EPOCH), (LEADER_EPOCH + 3, UNKNOWN_LEADER_EPOCH)],
)
def test_list_offsets_v4_and_later_fence_a_stale_or_future_leader_epoch(env, current_leader_epoch, code):
    env.run(env.produce(produce_body(("epoch", 0, records(b"a")))))
    for version in (4, 9):
        body = list_offsets_body(("epoch", 0, -1), current_leader_epoch=current_leader_epoch)
        entry = listed(env.run(env.list_offsets(body, version)))[("epoch", 0)]
        assert (entry["error_code"], entry["offset"]) == ((code, 1) if code == OK else (code, -1)), version


@pytest.mark.unit
def test_a_batch_header_that_understates_its_max_timestamp_does_not_hide_records_from_timestamp_lookups(env):
    honest = build_batch(0, [(None, b"early", T0 + 100, ()), (None, b"late", T0 + 200, ())])
    lying = encode_batch(dataclasses.replace(honest, max_timestamp=T0 + 100))  # its CRC is right
    assert produced(env.run(env.produce(produce_body(("t", 0, lying)))))[("t", 0)]["error_code"] == OK
    by_time = listed(env.run(env.list_offsets(list_offsets_body(("t", 0, T0 + 150)))))[("t", 0)]
    largest = listed(env.run(env.list_offsets(list_offsets_body(("t", 0, -3)))))[("t", 0)]
    assert (by_time["offset"], by_time["timestamp"]) == (1, T0 + 200)
    assert (largest["offset"], largest["timestamp"]) == (1, T0 + 200)


# --- the remote tier


@pytest.fixture
def tiered(tmp_path, s3_client, bucket):
    store_path = tmp_path / "metadata.db"
    writer_store = SqliteMetadataStore(store_path)
    writer = ControllerWriter(writer_store)
    harness = BrokerUnderTest(
        broker_id=1, data_dir=tmp_path / "broker-1", store_path=store_path, s3_client=s3_client, bucket=bucket
    )
    try:
        yield writer, harness
    finally:
        harness.close()
        writer_store.close()


class FetchSpy:
    """Remembers the S3 keys the remote storage reads."""

    def __init__(self, fetch: Callable[..., bytes]) -> None:
        self._fetch = fetch
        self.keys: list[str] = []

    def __call__(self, key: str, **kwargs: Any) -> bytes:
        self.keys.append(key)
        return self._fetch(key, **kwargs)


@pytest.mark.integration
def test_fetch_and_list_offsets_read_from_the_remote_tier_below_the_local_log(tiered, monkeypatch):
    writer, harness = tiered
    tid = writer.create_topic("orders")
    plane = DataPlane(
        refresh_image=harness.follower.refresh,
        leader_log=harness.log,
        rlm=harness.rlm,
        log_lock=asyncio.Lock(),
        now_ms=lambda: NOW,
        producer_ids=itertools.count(1).__next__,
    )

    def call(handler: Callable[..., Any], api: int, version: int, body: dict[str, Any]) -> Any:
        return asyncio.run(asyncio.wait_for(handler(data_request(api, version, body)), 30))

    def produce(i: int) -> None:
        body = produce_body(("orders", 0, records(b"%d:" % i + b"x" * 100, ts=T0 + 10 * i)))
        assert produced(call(plane.produce, ApiKey.PRODUCE, 9, body))[("orders", 0)]["base_offset"] == i

    for i in range(40):
        produce(i)
    assert harness.tier(tid) > 1
    harness.trim_local(tid)
    for i in range(40, 45):
        produce(i)
    plog = harness.log(tid)
    local_start = plog.local_log_start_offset
    assert 0 == plog.log_start_offset < local_start <= 40 and plog.log_end_offset == 45

    spy = FetchSpy(harness.rsm.fetch)
    monkeypatch.setattr(harness.rsm, "fetch", spy)
    entry = fetched(call(plane.fetch, ApiKey.FETCH, 12, fetch_body(("orders", 0, 0), partition_max_bytes=300)))[
        ("orders", 0)
    ]
    assert (entry["error_code"], entry["high_watermark"], entry["log_start_offset"]) == (OK, 45, 0)
    assert values(entry)[0] == b"0:" + b"x" * 100
    assert any(key.endswith(Suffix.LOG.value) for key in spy.keys)  # read from S3

    offset, seen = 0, []  # a consumer reading on from the log start crosses from S3 to the local log
    while offset < 45:
        body = fetch_body(("orders", 0, offset), partition_max_bytes=500)
        got = [
            r
            for r in records_at_or_after(
                fetched(call(plane.fetch, ApiKey.FETCH, 12, body))[("orders", 0)]["records"], offset
            )
        ]
        assert got, offset
        seen.extend((o, r.value.split(b":")[0]) for o, _, r in got)
        offset = got[-1][0] + 1
    assert seen == [(i, b"%d" % i) for i in range(45)]

    spy.keys.clear()
    lookups = list_offsets_body(("orders", 0, T0 + 30), ("orders", 0, T0 + 35))
    answer = call(plane.list_offsets, ApiKey.LIST_OFFSETS, 9, lookups)
    found = [(p["error_code"], p["offset"], p["timestamp"]) for p in answer["topics"][0]["partitions"]]
    assert found == [(OK, 3, T0 + 30), (OK, 4, T0 + 40)]  # both only in S3
    assert local_start > 4 and spy.keys  # looked up in the remote tier

    def special(timestamp: int) -> tuple[int, int]:
        body = list_offsets_body(("orders", 0, timestamp))
        p = call(plane.list_offsets, ApiKey.LIST_OFFSETS, 9, body)["topics"][0]["partitions"][0]
        return p["offset"], p["timestamp"]

    harness.rlmm.refresh()
    assert special(-2) == (0, -1)
    assert special(-4) == (local_start, -1)
    assert special(-5) == (harness.rlmm.highest_copied_offset(tid, 0), -1) and special(-5)[0] == local_start - 1
    assert special(-1) == (45, -1)
    assert special(-3) == (44, T0 + 440)
