"""A running broker agent follows its image with its partition directories: a deleted topic's log is closed and
its directory moved to stale/ as soon as the image says so (the metadata round, or a request that meets the old
directory first), never under an append or a tiering pass; a re-created topic of the same name is served at once;
moved-aside directories are removed after the retention.

The agent is not started: its rounds and handlers are called directly on a real SQLite store and real partition
directories, with a fake monotonic clock and a fake wall clock. Nothing here talks to S3.
"""

import asyncio
import time

import pytest
from structlog.testing import capture_logs

from orchestrator.broker.agent import BrokerAgent
from orchestrator.broker.hosted_dirs import STALE_DIR_CHECK_INTERVAL_S
from orchestrator.broker.local_log import read_partition_metadata
from orchestrator.broker.partition_dirs import STALE_DIR, stale_dir_name
from orchestrator.errors import KafkaStorageError, UnknownTopicId
from orchestrator.protocol.api_keys import ApiKey
from orchestrator.protocol.record_batch import build_batch, encode_batch, records_at_or_after
from orchestrator.settings import load_broker_settings
from tests.support.broker_harness import ControllerWriter, in_process_broker
from tests.support.clocks import FakeClock, FakeWallClock
from tests.support.requests import data_request

pytestmark = pytest.mark.timeout(30)  # each test's kind is beside it

HOUR_MS = 3_600_000


def _events(logs, name, **fields):
    return [e for e in logs if e["event"] == name and all(e.get(k) == v for k, v in fields.items())]


def _produce(broker: BrokerAgent, topic: str = "again", value: bytes = b"v", partition: int = 0) -> dict:
    """A Produce of one record to ``topic``; the partition's entry of the answer."""
    records = encode_batch(build_batch(0, [(None, value, int(time.time() * 1000), ())]))
    body = {"acks": -1, "topic_data": [{"name": topic, "partition_data": [{"index": partition, "records": records}]}]}
    resp = asyncio.run(broker.data_plane.produce(data_request(ApiKey.PRODUCE, 9, body)))
    return resp["responses"][0]["partition_responses"][0]


def _fetch(broker: BrokerAgent, topic: str = "again", offset: int = 0) -> dict:
    """A Fetch of partition 0 of ``topic`` at ``offset``: the partition's entry, its records decoded."""
    wanted = {"partition": 0, "fetch_offset": offset, "partition_max_bytes": 1 << 20}
    body = {"max_wait_ms": 0, "min_bytes": 0, "topics": [{"topic": topic, "partitions": [wanted]}]}
    resp = asyncio.run(broker.data_plane.fetch(data_request(ApiKey.FETCH, 12, body)))
    entry = resp["responses"][0]["partitions"][0]
    return {**entry, "values": [r.value for _, _, r in records_at_or_after(entry["records"] or b"", offset)]}


class Env:
    def __init__(self, broker: BrokerAgent, writer: ControllerWriter) -> None:
        self.broker = broker
        self.writer = writer
        self.data_dir = broker.data_dir
        self.stale = broker.data_dir / STALE_DIR

    def stale_names(self) -> list[str]:
        return sorted(p.name for p in self.stale.iterdir()) if self.stale.is_dir() else []


@pytest.fixture
def env(tmp_path, request):
    """A broker agent (not started) with topic ``again`` (one partition, led by it) open and produced to; its
    ``stale_dir_retention_ms`` is an hour unless the test's indirect parameter names another."""
    clocks = {"clock": FakeClock(1_000.0), "wall_clock_ms": FakeWallClock(1_700_000_000_000)}
    retention_ms = getattr(request, "param", HOUR_MS)
    with in_process_broker(tmp_path, agent_kwargs=clocks, stale_dir_retention_ms=retention_ms) as (broker, writer):
        yield Env(broker, writer)


def _start_with_again(env: Env):
    """Start-up as run() does it, then topic ``again`` with three records; returns its topic id."""
    broker = env.broker
    broker.data_dir.mkdir(parents=True)
    broker.dirs.reconcile(broker.follower.refresh())
    old = env.writer.create_topic("again", tiered=False)
    asyncio.run(broker._metadata_round())
    for value in (b"old-0", b"old-1", b"old-2"):
        assert _produce(broker, "again", value)["error_code"] == 0
    return old


def _recreate(env: Env, old):
    env.writer.delete_topic(old)
    return env.writer.create_topic("again", tiered=False)


@pytest.mark.unit
def test_the_metadata_round_retires_a_deleted_topic_and_the_recreated_name_is_served_at_once(env):
    broker = env.broker
    old = _start_with_again(env)
    old_log = broker.logs[(old, 0)]
    new = _recreate(env, old)

    with capture_logs() as logs:
        asyncio.run(broker._metadata_round())

    moved_to = env.stale / stale_dir_name("again-0", old, 1_700_000_000_000)
    assert env.stale_names() == [moved_to.name]
    assert read_partition_metadata(moved_to / "partition.metadata") == old
    assert old_log.active._log_file is None  # closed: no file of the old log is left open
    assert (old, 0) not in broker.logs and (new, 0) in broker.logs  # the round opened the new topic's log
    assert read_partition_metadata(env.data_dir / "again-0" / "partition.metadata") == new
    (moved,) = _events(logs, "broker.stale_partition_dir")
    assert (moved["directory"], moved["topic_id"], moved["moved_to"]) == ("again-0", str(old), str(moved_to))
    assert moved["reason"] == f"topic id deleted; the name again now belongs to topic id {new}"
    assert _events(logs, "broker.loop_failed") == []

    assert (_produce(broker, "again", b"new-0")["error_code"], _produce(broker, "again", b"new-1")["base_offset"]) == (
        0,
        1,
    )
    fetched = _fetch(broker, "again")
    assert fetched["error_code"] == 0 and fetched["values"] == [b"new-0", b"new-1"]  # nothing of the old topic id
    assert broker.logs[(new, 0)].log_end_offset == 2

    with capture_logs() as logs:  # nothing changed: nothing is looked at again
        asyncio.run(broker._metadata_round())
    assert logs == [] and env.stale_names() == [moved_to.name]


@pytest.mark.unit
def test_a_produce_that_meets_the_old_directory_before_the_metadata_round_moves_it_aside_itself(env):
    broker = env.broker
    old = _start_with_again(env)
    new = _recreate(env, old)

    with capture_logs() as logs:
        resp = _produce(broker, "again", b"new-0")  # the metadata round has not run since the delete

    assert (resp["error_code"], resp["base_offset"]) == (0, 0)
    assert _events(logs, "broker.stale_partition_dir", directory="again-0", topic_id=str(old))
    assert env.stale_names() == [stale_dir_name("again-0", old, 1_700_000_000_000)]
    assert sorted(broker.logs) == [(new, 0)]
    with capture_logs() as logs:
        asyncio.run(broker._metadata_round())  # already reconciled with an image at least this new
    assert _events(logs, "broker.stale_partition_dir") == [] and _events(logs, "broker.loop_failed") == []


@pytest.mark.unit
def test_a_fetch_that_meets_the_old_directory_first_moves_it_aside_too(env):
    broker = env.broker
    old = _start_with_again(env)
    _recreate(env, old)
    fetched = _fetch(broker, "again")
    assert (fetched["error_code"], fetched["high_watermark"], fetched["values"]) == (0, 0, [])
    assert env.stale_names() == [stale_dir_name("again-0", old, 1_700_000_000_000)]


@pytest.mark.integration
def test_closing_a_deleted_topics_log_waits_for_the_append_or_tiering_pass_that_holds_the_log_lock(env):
    broker = env.broker
    old = _start_with_again(env)
    new = _recreate(env, old)

    async def scenario() -> None:
        async with broker._log_lock:  # an append or a tiering pass of the old log in progress
            round_task = asyncio.create_task(broker._metadata_round())
            for _ in range(20):
                await asyncio.sleep(0.01)
            assert not round_task.done()
            assert (old, 0) in broker.logs and read_partition_metadata(
                env.data_dir / "again-0/partition.metadata"
            ) == old
            broker.logs[(old, 0)].append([(None, b"old-3", None)])  # still safe: nothing closed it under us
        await asyncio.wait_for(round_task, timeout=10)

    asyncio.run(scenario())
    assert sorted(broker.logs) == [(new, 0)]
    (moved,) = env.stale_names()
    assert b"old-3" in (env.stale / moved / f"{0:020d}.log").read_bytes()


@pytest.mark.unit
def test_a_tiering_pass_of_a_log_closed_since_its_round_began_does_nothing(env):
    broker = env.broker
    old = _start_with_again(env)

    class RecordingRemoteLogManager:
        def __init__(self) -> None:
            self.passes: list[tuple] = []

        def copy_partition(self, topic_id, partition: int, *, refresh: bool = True, high_watermark=None) -> None:
            self.passes.append((topic_id, partition))

        def apply_local_retention(self, topic_id, partition: int, *, refresh: bool = True) -> int:
            self.passes.append((topic_id, partition))
            return 0

        def expire_partition(self, topic_id, partition: int, *, refresh: bool = True) -> None:
            self.passes.append((topic_id, partition))

    broker.rlm = broker.tiering.rlm = RecordingRemoteLogManager()
    _recreate(env, old)
    asyncio.run(broker._metadata_round())
    assert asyncio.run(broker.tiering.passes([(old, 0)])) == {(old, 0): None}
    assert broker.rlm.passes == []


@pytest.mark.unit
def test_a_caller_holding_an_image_from_before_the_delete_cannot_reopen_the_retired_topic(env):
    broker = env.broker
    old = _start_with_again(env)
    before_delete = broker.follower.image
    new = _recreate(env, old)
    asyncio.run(broker._metadata_round())

    with pytest.raises(UnknownTopicId):
        broker._open_log(before_delete, old, 0)
    with capture_logs() as logs:
        asyncio.run(broker._open_hosted_logs(before_delete))  # a metadata round that read its image just before
    assert _events(logs, "broker.loop_failed") == []
    assert read_partition_metadata(env.data_dir / "again-0" / "partition.metadata") == new
    assert len(env.stale_names()) == 1


@pytest.mark.unit
def test_a_directory_that_cannot_be_moved_fails_the_round_without_blocking_other_topics_and_moves_later(env):
    broker = env.broker
    old = _start_with_again(env)
    env.stale.write_text("in the way")  # data_dir/stale cannot be created: the move fails as on a failed disk
    new = _recreate(env, old)
    other = env.writer.create_topic("other", tiered=False)

    with capture_logs() as logs, pytest.raises(KafkaStorageError, match=str(env.data_dir / "again-0")):
        asyncio.run(broker._metadata_round())
    assert (other, 0) in broker.logs  # the round still opened the logs it could
    assert (old, 0) not in broker.logs  # its topic is gone: closed and dropped all the same
    (refused,) = _events(logs, "broker.loop_failed", loop="metadata")
    assert (refused["topic_id"], refused["error"]) == (str(new), "INCONSISTENT_TOPIC_ID")

    env.stale.unlink()
    broker._clock.now += 60  # past the new partition's backoff
    with capture_logs() as logs:
        asyncio.run(broker._metadata_round())  # the topic set is not marked reconciled: the round tries again
    assert _events(logs, "broker.stale_partition_dir", directory="again-0")
    assert _events(logs, "broker.loop_recovered", loop="metadata", topic_id=str(new))
    assert (new, 0) in broker.logs and _produce(broker, "again")["base_offset"] == 0


@pytest.mark.unit
def test_moved_aside_directories_are_removed_after_the_retention_looking_at_most_once_a_minute(env):
    broker = env.broker
    wall, clock = broker._wall_clock_ms, broker._clock
    old = _start_with_again(env)  # the first round looked at stale/ (nothing there)
    planted_by_operator = env.stale / "notes"
    planted_by_operator.mkdir(parents=True)
    _recreate(env, old)
    clock.now += STALE_DIR_CHECK_INTERVAL_S
    asyncio.run(broker._metadata_round())  # moves again-0 aside at the wall clock's time and looks at stale/
    moved = stale_dir_name("again-0", old, wall.now_ms)
    assert env.stale_names() == [moved, "notes"]

    wall.now_ms += HOUR_MS  # old enough now, but the last look was less than a minute ago
    clock.now += STALE_DIR_CHECK_INTERVAL_S - 1
    asyncio.run(broker._metadata_round())
    assert env.stale_names() == [moved, "notes"]

    clock.now += 1
    with capture_logs() as logs:
        asyncio.run(broker._metadata_round())
    assert env.stale_names() == ["notes"]
    (removed,) = _events(logs, "broker.stale_partition_dir_removed")
    assert (removed["directory"], removed["age_ms"]) == (moved, HOUR_MS)


@pytest.mark.unit
def test_the_retention_of_moved_aside_directories_is_a_broker_setting_of_a_day_unless_set(tmp_path):
    required = 'broker_id = 1\ndata_dir = "d"\nmetadata_store = "m.db"\ncontrollers = "127.0.0.1:1"\n'
    (tmp_path / "default.toml").write_text(f"[broker]\n{required}")
    (tmp_path / "forever.toml").write_text(f"[broker]\n{required}stale_dir_retention_ms = -1\n")
    assert load_broker_settings(tmp_path / "default.toml").stale_dir_retention_ms == 24 * HOUR_MS
    assert load_broker_settings(tmp_path / "forever.toml").stale_dir_retention_ms == -1


@pytest.mark.unit
@pytest.mark.parametrize("env", [-1], indirect=True)
def test_with_a_negative_retention_nothing_under_stale_is_ever_removed(env):
    broker = env.broker
    assert broker.settings.stale_dir_retention_ms == -1
    old = _start_with_again(env)
    _recreate(env, old)
    asyncio.run(broker._metadata_round())
    broker._wall_clock_ms.now_ms += 1000 * 24 * HOUR_MS
    broker._clock.now += 1000 * STALE_DIR_CHECK_INTERVAL_S
    asyncio.run(broker._metadata_round())
    assert env.stale_names() == [stale_dir_name("again-0", old, 1_700_000_000_000)]
