"""The broker agent's background loops never die quietly: every error is logged with its cause and retried with
the declared backoff; a partition fails alone; a failed log directory is answered as KAFKA_STORAGE_ERROR; a loop
that ends anyway stops the broker with ``broker.loop_crashed``.

The loop driver and the backoff are tested with fakes (a recording sleep, a fake clock, a fake RemoteLogManager);
the agent's rounds run on a real SQLite store, with a regular file where the broker's data directory should be as
the failed disk (a real OS error, which works as root too). Nothing here talks to S3.
"""

import asyncio
import errno
import math
import random
import threading
import time

import pytest
from structlog.testing import capture_logs

from orchestrator.broker import agent as agent_module
from orchestrator.broker.agent import BrokerAgent
from orchestrator.broker.remote_log_manager import CopyResult, ReadResult
from orchestrator.broker.tiering_round import TIERING_CHUNK
from orchestrator.errors import KafkaStorageError
from orchestrator.metadata.records import DisablePolicy, TieredState, make_record
from orchestrator.metadata.sqlite import SqliteMetadataStore
from orchestrator.protocol.api_keys import ApiKey
from orchestrator.protocol.record_batch import build_batch, encode_batch
from orchestrator.settings import BrokerSettings
from orchestrator.supervision import (
    LOOP_RETRY_WAIT,
    RetryBackoff,
    loop_backoff_s,
    loop_retry_wait,
    loop_wait,
    supervise,
)
from tests.support.broker_harness import ControllerWriter
from tests.support.clocks import FakeClock
from tests.support.requests import data_request

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]


class StopLoop(BaseException):
    """Raised by the fake sleep to end a supervised loop after a bounded number of rounds."""


class RecordingSleep:
    def __init__(self, rounds: int) -> None:
        self.waits: list[float] = []
        self.rounds = rounds

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)
        if len(self.waits) >= self.rounds:
            raise StopLoop


def _events(logs, name, **fields):
    return [e for e in logs if e["event"] == name and all(e.get(k) == v for k, v in fields.items())]


# -- the loop driver and the declared backoff ----------------------------------------------------------------------


def test_a_round_that_raises_anything_is_logged_with_its_cause_and_retried_after_a_backoff_reset_by_a_success():
    def storage_error() -> KafkaStorageError:
        try:
            raise OSError(errno.EROFS, "Read-only file system", "/data/broker-2/orders-0")
        except OSError as exc:
            raise KafkaStorageError("log directory /data/broker-2/orders-0: [Errno 30] Read-only file system") from exc

    outcomes = [
        OSError(errno.EIO, "Input/output error"),
        RuntimeError("a bug"),
        "storage",
        None,  # success
        ValueError("again"),
        None,
    ]

    async def one_round() -> None:
        outcome = outcomes.pop(0)
        if outcome == "storage":
            storage_error()
        elif outcome is not None:
            raise outcome

    sleep = RecordingSleep(rounds=6)

    def deterministic(failures: int) -> float:  # 1, 2, 3 (capped), ...
        return min(3, 2 ** (failures - 1))

    with capture_logs() as logs, pytest.raises(StopLoop):
        asyncio.run(
            supervise("tiering", one_round, component="broker", interval_s=0.5, sleep=sleep, wait=deterministic)
        )

    assert sleep.waits == [1, 2, 3, 0.5, 1, 0.5]  # the backoff grows, is capped, and starts over after a success
    failed = _events(logs, "broker.loop_failed", loop="tiering")
    assert [(e["error"], e["attempt"], e["retry_in_s"]) for e in failed] == [
        ("OSError", 1, 1),
        ("RuntimeError", 2, 2),
        ("KAFKA_STORAGE_ERROR", 3, 3),
        ("ValueError", 1, 1),
    ]
    assert failed[0]["detail"] == "[Errno 5] Input/output error" and failed[0]["exc_info"] is not None
    assert failed[1]["detail"] == "a bug" and failed[1]["log_level"] == "error"
    storage = failed[2]
    assert storage["log_level"] == "warning" and "Read-only file system" in storage["detail"]
    assert storage["cause"] == "OSError: [Errno 30] Read-only file system: '/data/broker-2/orders-0'"
    recovered = _events(logs, "broker.loop_recovered", loop="tiering")
    assert [e["failed_attempts"] for e in recovered] == [3, 1]


def test_cancelling_a_supervised_loop_ends_it():
    async def go() -> None:
        async def idle() -> None:
            return None

        task = asyncio.create_task(supervise("metadata", idle, component="broker", interval_s=10))
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(go())


def test_the_declared_loop_backoff_is_exponential_with_full_jitter_capped_and_never_zero():
    windows = [min(10.0, 0.2 * 2 ** (n - 1)) for n in range(1, 16)]
    for n, upper in enumerate(windows, start=1):
        draws = [loop_backoff_s(n) for _ in range(50)]
        assert all(0.1 <= d <= upper for d in draws), (n, upper, draws)
    assert max(loop_backoff_s(30) for _ in range(200)) > 5  # the window at the cap is 0.1-10 s, not a fixed value
    assert loop_backoff_s(0) <= 0.2  # zero failures counts as the first
    assert (LOOP_RETRY_WAIT.base, LOOP_RETRY_WAIT.cap, LOOP_RETRY_WAIT.floor) == (0.2, 10.0, 0.1)
    # A seeded generator reproduces the schedule exactly: a uniform draw between 0.1 s and the window.
    schedule = [loop_backoff_s(n, random.Random(3)) for n in (1, 4, 12)]
    assert schedule == [random.Random(3).uniform(0.1, upper) for upper in (0.2, 1.6, 10.0)]


def test_a_process_may_move_the_loop_backoffs_cap_and_nothing_else():
    assert loop_retry_wait(2_000) == LOOP_RETRY_WAIT.__class__(base=0.2, cap=2.0, floor=0.1)
    assert loop_retry_wait(30_000).cap == 30.0
    assert loop_retry_wait(50).cap == 0.1  # never below the shortest wait
    wait = loop_wait(500, random.Random(7))
    draws = [wait(n) for n in range(1, 40) for _ in range(5)]
    assert all(0.1 <= d <= 0.5 for d in draws) and max(draws) > 0.45  # the cap is reached, never passed
    assert loop_wait(500, random.Random(7))(1) == random.Random(7).uniform(0.1, 0.2)  # the same full jitter


def test_each_partition_backs_off_alone_and_a_success_resets_it():
    retry: RetryBackoff[str] = RetryBackoff(lambda failures: min(4, 2 ** (failures - 1)))
    assert retry.due("p0", now=0) and retry.due("p1", now=0)
    assert retry.failed("p0", now=0) == (1, 1)
    assert not retry.due("p0", now=0.5) and retry.due("p1", now=0.5)
    assert retry.due("p0", now=1)
    assert retry.failed("p0", now=1) == (2, 2)
    assert retry.failed("p0", now=3) == (3, 4)
    assert retry.failed("p0", now=7) == (4, 4)  # capped
    assert retry.succeeded("p0") == 4 and retry.due("p0", now=7)
    assert retry.failed("p0", now=8) == (1, 1)  # starts over
    retry.failed("gone", now=8)
    retry.forget_all_but(["p0"])
    assert retry.due("gone", now=8) and not retry.due("p0", now=8)


# -- the agent's rounds on a failed log directory ------------------------------------------------------------------


@pytest.fixture
def broker(tmp_path, request):
    """A broker agent (not started) on a real store, with tiered topic 'orders' (2 partitions) led by it; its data
    directory is a regular file, as a disk the broker cannot write: remove ``broker.blocked`` to repair it. Every
    partition is passed every tiering round unless the test's parameter (indirect) sets other broker settings."""
    store_path = tmp_path / "metadata.db"
    writer_store = SqliteMetadataStore(store_path)
    writer = ControllerWriter(writer_store)
    topic_id = writer.create_topic("orders", partitions=2, leader=1, tiered=True)
    data_dir = tmp_path / "broker-1"
    data_dir.write_text("not a directory")
    settings = BrokerSettings(
        broker_id=1,
        data_dir=str(data_dir),
        metadata_store=str(store_path),
        controllers="127.0.0.1:1",
        heartbeat_interval_ms=50,
        metadata_poll_ms=20,
        tiering_interval_ms=20,
        **{"tiering_idle_rounds": 1, **getattr(request, "param", {})},
    )
    clock = FakeClock()
    agent = BrokerAgent(settings, clock=clock)
    writer.register_broker(1, agent.controller_link.incarnation_id)
    agent.blocked = data_dir
    agent.topic_id = topic_id
    agent.writer = writer
    agent.fake_clock = clock
    try:
        yield agent
    finally:
        for plog in agent.logs.values():
            plog.close()
        agent.store.close()
        writer_store.close()


def test_every_backoff_of_a_broker_stays_under_its_loop_retry_max_ms(tmp_path):
    """The partitions' backoffs (opening logs, tiering, publishing remote log metadata) and the loops' own, under
    ``[broker] loop_retry_max_ms`` (here 300 ms, not the default 10 s)."""
    settings = BrokerSettings(
        broker_id=1,
        data_dir=str(tmp_path / "broker-1"),
        metadata_store=str(tmp_path / "metadata.db"),
        controllers="127.0.0.1:1",
        loop_retry_max_ms=300,
    )
    agent = BrokerAgent(settings, clock=FakeClock())
    try:
        for retry in (agent._open_retry, agent._tiering_retry, agent.rlmm_publisher._retry):
            delays = [retry.failed(0, now=0)[1] for _ in range(60)]
            assert all(0.1 <= d <= 0.3 for d in delays) and max(delays) > 0.25, delays
        loop_waits = [agent._loop_wait(n) for n in range(1, 60)]
        assert all(0.1 <= d <= 0.3 for d in loop_waits) and max(loop_waits) > 0.25
    finally:
        agent.store.close()


def test_a_partition_whose_directory_cannot_be_created_is_retried_by_the_metadata_loop_until_the_disk_is_back(broker):
    with capture_logs() as logs:
        asyncio.run(broker._metadata_round())
    failed = _events(logs, "broker.loop_failed", loop="metadata")
    assert sorted(e["partition"] for e in failed) == [0, 1]
    assert all(e["error"] == "KAFKA_STORAGE_ERROR" and e["topic_id"] == str(broker.topic_id) for e in failed)
    directory = broker.blocked / "orders-0"
    detail = next(e["detail"] for e in failed if e["partition"] == 0)
    assert detail == f"log directory {directory}: [Errno {errno.ENOTDIR}] Not a directory"
    assert next(e["cause"] for e in failed if e["partition"] == 0).startswith("NotADirectoryError")
    assert broker.logs == {}

    with capture_logs() as logs:
        asyncio.run(broker._metadata_round())  # not due yet: nothing is tried, nothing logged
    assert _events(logs, "broker.loop_failed") == []

    broker.blocked.unlink()  # the disk is back
    broker.fake_clock.now += 10  # past the cap of the backoff
    with capture_logs() as logs:
        asyncio.run(broker._metadata_round())
    assert sorted(p for _, p in broker.logs) == [0, 1]
    assert directory.is_dir() and (broker.blocked / "orders-1").is_dir()
    assert sorted(e["partition"] for e in _events(logs, "broker.loop_recovered", loop="metadata")) == [0, 1]


class CountingLogs(dict):
    """The broker's open logs, noting which partitions a round looks up."""

    def __init__(self, logs: dict) -> None:
        super().__init__(logs)
        self.looked_up: set = set()

    def __contains__(self, key: object) -> bool:
        self.looked_up.add(key)
        return super().__contains__(key)


def test_a_metadata_round_looks_only_at_the_partitions_of_topics_whose_partitions_changed(broker):
    """Thousands of topics changing tiered state (a bulk disablement) must not make every round walk every
    partition: only new topics, added partitions and moved replicas are looked at, and they are opened."""
    broker.blocked.unlink()
    asyncio.run(broker._metadata_round())
    assert sorted(p for _, p in broker.logs) == [0, 1]
    broker.logs = CountingLogs(broker.logs)
    writer = broker.writer

    writer.set_state(broker.topic_id, TieredState.DISABLING, DisablePolicy.RETAIN)
    payments = writer.create_topic("payments", partitions=3, leader=1)
    writer.create_topic("elsewhere", partitions=2, leader=2)  # hosted by another broker: nothing to open
    asyncio.run(broker._metadata_round())
    new = {(payments, p) for p in range(3)}
    assert broker.logs.looked_up == new, "the new hosted partitions only: not orders' (its state changed, not them)"
    assert sorted(k for k in broker.logs if k[0] == payments) == [(payments, p) for p in range(3)]

    broker.logs.looked_up = set()
    asyncio.run(broker._metadata_round())
    assert broker.logs.looked_up == set(), "the same image: nothing to look at"

    added = {"topic_id": broker.topic_id, "partition_id": 2, "replicas": [1], "isr": [1], "leader": 1}
    epochs = {"leader_epoch": 0, "partition_epoch": 0}
    writer.store.append([make_record("PartitionRecord", **added, **epochs)], controller_epoch=writer.epoch)
    asyncio.run(broker._metadata_round())
    assert broker.logs.looked_up == {(broker.topic_id, p) for p in range(3)}, "orders' partitions changed: all three"
    assert (broker.topic_id, 2) in broker.logs, "the added partition's log is open"


def _produce_body(partition: int) -> dict:
    records = encode_batch(build_batch(0, [(None, b"v", int(time.time() * 1000), ())]))
    data = {"index": partition, "records": records}
    return {"acks": 1, "topic_data": [{"name": "orders", "partition_data": [data]}]}


def _produce(broker, partition: int) -> dict:
    resp = asyncio.run(broker.data_plane.produce(data_request(ApiKey.PRODUCE, 9, _produce_body(partition))))
    return resp["responses"][0]["partition_responses"][0]


def test_a_produce_on_a_failed_log_directory_answers_kafka_storage_error_naming_the_path(broker):
    with capture_logs() as logs:
        resp = _produce(broker, 1)
    directory = broker.blocked / "orders-1"
    assert resp["error_code"] == 56
    assert resp["error_message"] == f"log directory {directory}: [Errno {errno.ENOTDIR}] Not a directory"
    assert _events(logs, "broker.storage_error", api="Produce", partition=1)

    broker.blocked.unlink()
    resp = _produce(broker, 1)
    assert (resp["error_code"], resp["base_offset"]) == (0, 0)


def _use(broker, rlm):
    """``rlm`` in place of the broker's remote log manager, for the agent and its tiering round alike."""
    broker.rlm = broker.tiering.rlm = rlm
    return rlm


class FakeRemoteLogManager:
    """Tiering passes whose copy fails for some partitions, or waits (a slow S3) until released, recording every
    call."""

    def __init__(
        self, failing: dict[int, BaseException], *, slow: int | None = None, slow_expiry: int | None = None
    ) -> None:
        self.failing = failing
        self.passes: list[int] = []
        self.local_passes: list[tuple[object, int]] = []
        self.expired: list[tuple[object, int]] = []
        self.rlmm = self
        self.versions: dict[int, int] = {}  # partition -> what partition_version says (a test moves it)
        self.slow, self.copying, self.release = slow, threading.Event(), threading.Event()
        self.slow_expiry = slow_expiry

    def refresh(self) -> None:
        return None

    def partition_version(self, topic_id, partition: int) -> int:
        return self.versions.get(partition, 0)

    def retain_copy_lag(self, partitions) -> None:
        return None

    def copy_partition(self, topic_id, partition: int, *, refresh: bool = True, high_watermark=None) -> CopyResult:
        self.passes.append(partition)
        if partition == self.slow:
            self.copying.set()
            assert self.release.wait(timeout=30), "the copy was never released"
        if partition in self.failing:
            raise self.failing[partition]
        return CopyResult()

    def apply_local_retention(self, topic_id, partition: int, *, refresh: bool = True) -> int:
        return 0

    def local_pass(self, topic_id, partition: int) -> None:
        self.local_passes.append((topic_id, partition))

    def expire_partition(self, topic_id, partition: int, *, refresh: bool = True) -> None:
        self.expired.append((topic_id, partition))
        if partition == self.slow_expiry:  # a DeleteObjects (or an RLMM write) that does not answer
            self.copying.set()
            assert self.release.wait(timeout=30), "the expiry was never released"

    def read_local_or_locate(self, topic_id, partition: int, offset: int, *, max_bytes: int) -> object:
        return ("a remote segment of", topic_id, partition)  # every read goes to the remote tier

    def read_remote(self, seg: object, offset: int, *, max_bytes: int) -> ReadResult:
        self.copying.set()  # a GET under way
        assert self.release.wait(timeout=30), "the read was never released"
        return ReadResult(b"", remote=True)


def test_a_partition_whose_tiering_pass_fails_is_backed_off_alone_while_the_others_go_on(broker):
    broker.blocked.unlink()
    asyncio.run(broker._metadata_round())
    _use(broker, FakeRemoteLogManager({0: RuntimeError("a bug in one partition's pass")}))

    with capture_logs() as logs:
        asyncio.run(broker.tiering.run())
        asyncio.run(broker.tiering.run())  # partition 0 is not due yet
    assert broker.rlm.passes == [0, 1, 1]
    (failed,) = _events(logs, "broker.loop_failed", loop="tiering")
    assert (failed["partition"], failed["error"]) == (0, "RuntimeError")
    assert failed["detail"] == "a bug in one partition's pass"
    assert failed["exc_info"] is not None

    broker.rlm.failing.clear()
    broker.fake_clock.now += 10
    with capture_logs() as logs:
        asyncio.run(broker.tiering.run())
    assert broker.rlm.passes[-2:] == [0, 1]
    assert _events(logs, "broker.loop_recovered", loop="tiering", partition=0, failed_attempts=1)


def test_a_tiering_round_hops_to_a_worker_thread_a_few_times_per_chunk_of_partitions_and_one_failure_stays_alone(
    broker, monkeypatch
):
    """Each step of the pass runs for a chunk of partitions in one worker-thread hop (four hops per partition were
    most of an idle broker's CPU); a partition whose copy raises is the only one that fails, and skips its expiry."""
    broker.blocked.unlink()
    many = broker.writer.create_topic("many", partitions=150, leader=1, tiered=True)
    asyncio.run(broker._metadata_round())
    _use(broker, FakeRemoteLogManager({5: RuntimeError("a bug in one partition's copy")}))
    hops: list[object] = []
    to_thread = asyncio.to_thread

    async def counted(fn, /, *args, **kwargs):
        hops.append(fn)
        return await to_thread(fn, *args, **kwargs)

    monkeypatch.setattr(asyncio, "to_thread", counted)
    with capture_logs() as logs:
        asyncio.run(broker.tiering.run())
    partitions = 150 + 2  # and 'orders'
    assert sorted(broker.rlm.passes) == sorted([*range(150), 0, 1])
    assert len(hops) <= 1 + 4 * math.ceil(partitions / TIERING_CHUNK) < partitions, len(hops)
    (failed,) = _events(logs, "broker.loop_failed", loop="tiering")
    assert (failed["topic_id"], failed["partition"]) == (str(many), 5)
    assert len(broker.rlm.expired) == partitions - 1 and (many, 5) not in broker.rlm.expired


def test_a_never_tiered_topics_round_is_the_roll_and_local_retention_alone_and_a_tiered_ones_copies_and_expires(
    broker,
):
    broker.blocked.unlink()
    logs = broker.writer.create_topic("logs", partitions=1, leader=1, tiered=False)
    asyncio.run(broker._metadata_round())
    _use(broker, FakeRemoteLogManager({}))

    asyncio.run(broker.tiering.run())
    assert broker.rlm.local_passes == [(logs, 0)]
    assert sorted(broker.rlm.passes) == [0, 1]  # the copies: 'orders' only
    assert sorted(broker.rlm.expired) == [(broker.topic_id, 0), (broker.topic_id, 1)]


@pytest.mark.parametrize("broker", [{"tiering_idle_rounds": 3}], indirect=True)
def test_an_idle_partition_is_passed_every_few_rounds_and_any_change_to_what_its_pass_reads_makes_it_due_at_once(
    broker,
):
    broker.blocked.unlink()
    asyncio.run(broker._metadata_round())
    _use(broker, FakeRemoteLogManager({}))

    def rounds(n: int) -> list[list[int]]:
        passed = []
        for _ in range(n):
            before = len(broker.rlm.passes)
            asyncio.run(broker.tiering.run())
            passed.append(sorted(broker.rlm.passes[before:]))
        return passed

    assert rounds(4) == [[0, 1], [], [], [0, 1]]  # nothing changed: every third round
    sample = broker.metrics.registry.get_sample_value
    assert (sample("tieredctl_tiering_rounds_total"), sample("tieredctl_tiering_partition_passes_total")) == (4, 4)

    assert _produce(broker, 1)["error_code"] == 0  # partition 1's log moved
    assert rounds(2) == [[1], []]
    broker.rlm.versions[0] = 7  # the RLMM's entries of partition 0 moved (another broker's copy, a deletion)
    assert rounds(1) == [[0]]
    broker.writer.store.append(  # a config of the topic: both partitions' passes read it
        [make_record("ConfigRecord", resource_type=2, resource_name="orders", name="retention.ms", value="60000")],
        controller_epoch=broker.writer.epoch,
    )
    asyncio.run(broker._metadata_round())
    assert rounds(1) == [[0, 1]]

    # Tiering turned off (the state and the key it mirrors, as a disablement writes them): no pass has anything to
    # do at once, so nothing is due before its three rounds are up; turned on again: both at once.
    off = make_record(
        "ConfigRecord", resource_type=2, resource_name="orders", name="remote.storage.enable", value="false"
    )
    broker.writer.store.append([off], controller_epoch=broker.writer.epoch)
    broker.writer.set_state(broker.topic_id, TieredState.DISABLING, DisablePolicy.RETAIN)
    asyncio.run(broker._metadata_round())
    assert rounds(1) == [[]]
    broker.writer.set_state(broker.topic_id, TieredState.DISABLED, DisablePolicy.RETAIN)
    asyncio.run(broker._metadata_round())
    assert rounds(2) == [[], [0, 1]]  # due by their rounds alone
    on = make_record(
        "ConfigRecord", resource_type=2, resource_name="orders", name="remote.storage.enable", value="true"
    )
    broker.writer.store.append([on], controller_epoch=broker.writer.epoch)
    broker.writer.set_state(broker.topic_id, TieredState.ENABLED)
    asyncio.run(broker._metadata_round())
    assert rounds(1) == [[0, 1]]

    broker.rlm.failing[0] = RuntimeError("S3 said no")
    broker.rlm.versions[0] = 8
    assert rounds(1) == [[0]]  # due: its RLMM entries moved; the pass fails
    del broker.rlm.failing[0]
    broker.fake_clock.now += 10  # past the failed partition's backoff
    assert rounds(1) == [[0]]  # nothing changed, but its last pass failed: passed again as soon as its backoff ends
    assert rounds(1) == [[1]]  # partition 1: three rounds since its last pass


@pytest.mark.parametrize("stuck_in", ["copy", "expiry"])
def test_a_tiering_pass_waiting_on_a_slow_s3_holds_up_no_produce_to_another_partition(broker, stuck_in):
    """The tiering pass copies, and expires remote segments (objects deleted, RLMM records written), outside the
    broker's log lock: a produce to another partition of the broker is answered while an upload or a delete is
    stuck (each used to hold the lock, so one hung S3 call stopped every produce and fetch of the broker)."""
    broker.blocked.unlink()
    asyncio.run(broker._metadata_round())
    _use(broker, FakeRemoteLogManager({}, slow=0) if stuck_in == "copy" else FakeRemoteLogManager({}, slow_expiry=0))

    async def scenario() -> dict:
        stuck = asyncio.create_task(broker.tiering.passes([(broker.topic_id, 0)]))
        assert await asyncio.to_thread(broker.rlm.copying.wait, 30), f"the {stuck_in} started"
        produce = data_request(ApiKey.PRODUCE, 9, _produce_body(1))
        answered = await asyncio.wait_for(broker.data_plane.produce(produce), timeout=30)
        assert not stuck.done(), f"answered while the {stuck_in} was still stuck"
        broker.rlm.release.set()
        assert await stuck == {(broker.topic_id, 0): None}
        return answered

    answered = asyncio.run(scenario())
    assert answered["responses"][0]["partition_responses"][0]["error_code"] == 0


def test_a_fetch_waiting_on_a_slow_s3_holds_up_no_produce_to_another_partition(broker):
    broker.blocked.unlink()
    asyncio.run(broker._metadata_round())
    assert _produce(broker, 0)["error_code"] == 0  # offset 0 exists: the fetch below goes to the (slow) remote tier
    broker.rlm = broker.data_plane._rlm = FakeRemoteLogManager({})  # the data plane was given the broker's at start
    wanted = {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}
    fetch_body = {"max_wait_ms": 0, "min_bytes": 0, "topics": [{"topic": "orders", "partitions": [wanted]}]}

    async def scenario() -> dict:
        stuck = asyncio.create_task(broker.data_plane.fetch(data_request(ApiKey.FETCH, 12, fetch_body)))
        assert await asyncio.to_thread(broker.rlm.copying.wait, 30), "the remote read started"
        produce = data_request(ApiKey.PRODUCE, 9, _produce_body(1))
        answered = await asyncio.wait_for(broker.data_plane.produce(produce), timeout=30)
        assert not stuck.done(), "answered while the remote read was still stuck"
        broker.rlm.release.set()
        fetched = await stuck
        assert fetched["responses"][0]["partitions"][0]["error_code"] == 0
        return answered

    answered = asyncio.run(scenario())
    assert answered["responses"][0]["partition_responses"][0]["error_code"] == 0


# -- a loop that ends anyway ---------------------------------------------------------------------------------------


class LoopBug(BaseException):
    """What escapes supervise() only through a bug: stands for any way a loop task can end."""


def test_a_loop_that_ends_stops_the_broker_with_loop_crashed_instead_of_leaving_it_half_alive(broker, monkeypatch):
    broker.blocked.unlink()

    async def crashing_round() -> None:
        raise LoopBug("the tiering loop is gone")

    monkeypatch.setattr(broker.tiering, "run", crashing_round)
    with capture_logs() as logs:
        asyncio.run(asyncio.wait_for(broker.run(), timeout=20))
    assert broker.crashed_loop == "tiering"
    (crashed,) = _events(logs, "broker.loop_crashed")
    assert (crashed["loop"], crashed["error"], crashed["detail"]) == ("tiering", "LoopBug", "the tiering loop is gone")
    assert isinstance(crashed["exc_info"], LoopBug)
    assert _events(logs, "broker.stopped", crashed_loop="tiering")


def test_main_exits_nonzero_when_a_loop_crashed(broker, monkeypatch, tmp_path):
    class CrashedAgent:
        def __init__(self, settings) -> None:
            self.settings = settings
            self.crashed_loop = None

        async def run(self) -> None:
            self.crashed_loop = "metadata"

    settings_file = tmp_path / "broker.toml"
    settings_file.write_text(
        f'[broker]\nbroker_id = 1\ndata_dir = "{tmp_path}/d"\nmetadata_store = "{tmp_path}/m.db"\n'
        'controllers = "127.0.0.1:1"\n'
    )
    monkeypatch.setattr(agent_module, "BrokerAgent", CrashedAgent)
    monkeypatch.setattr(agent_module, "configure_logging", lambda mode: None)
    with pytest.raises(SystemExit) as exited:
        agent_module.main(str(settings_file))
    assert exited.value.code == "broker 1: its metadata loop crashed (broker.loop_crashed)"  # printed, status 1
