"""The data plane of a partition with three replicas (orchestrator/broker/data_plane.py, replication.py): followers'
fetches (replica ids 2 and 3, as the replica fetcher sends them) move the high watermark; consumers read up to it;
acks=all answers once every in-sync replica has the records, and is refused below min.insync.replicas; a follower
whose last fetched epoch ended earlier in the leader's log is told where to truncate.

One in-process broker (id 1) on a real SQLite store and real segment files; brokers 2 and 3 exist only as the
replica ids of the fetches sent here."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from orchestrator.ids import Uuid
from orchestrator.metadata.records import make_record
from orchestrator.protocol.api_keys import ApiKey
from tests.orchestrator.broker.test_data_plane import (
    fetch_body,
    fetched,
    list_offsets_body,
    listed,
    produce_body,
    produced,
    records,
    values,
)
from tests.support.broker_harness import in_process_broker
from tests.support.clocks import FakeClock, FakeWallClock
from tests.support.requests import data_request

pytestmark = pytest.mark.unit

NOW = 1_700_000_000_000
TOPIC = "r"


class Replicated:
    def __init__(self, broker: Any, writer: Any) -> None:
        self.broker, self.writer, self.plane = broker, writer, broker.data_plane
        self.tid = Uuid.random()

    def partition(self, *, isr: list[int], leader_epoch: int = 0, min_isr: int = 2) -> None:
        self.writer.store.append(
            [
                make_record("TopicRecord", name=TOPIC, topic_id=self.tid),
                make_record(
                    "PartitionRecord",
                    partition_id=0,
                    topic_id=self.tid,
                    replicas=[1, 2, 3],
                    isr=isr,
                    leader=1,
                    leader_epoch=leader_epoch,
                    partition_epoch=0,
                ),
                make_record(
                    "ConfigRecord", resource_type=2, resource_name=TOPIC, name="min.insync.replicas", value=str(min_isr)
                ),
            ],
            controller_epoch=self.writer.epoch,
        )
        asyncio.run(self.broker._metadata_round())

    async def produce(self, *values_: bytes, acks: int = -1, timeout_ms: int = 30_000) -> dict[str, Any]:
        body = produce_body((TOPIC, 0, records(*values_)), acks=acks)
        body["timeout_ms"] = timeout_ms
        return produced(await self.plane.produce(data_request(ApiKey.PRODUCE, 9, body)))[(TOPIC, 0)]

    async def fetch(self, offset: int, *, replica: int = -1, wait_ms: int = 0, **partition: Any) -> dict[str, Any]:
        body = fetch_body((TOPIC, 0, offset), max_wait_ms=wait_ms, min_bytes=1 if wait_ms else 0, replica_id=replica)
        body["topics"][0]["partitions"][0].update(partition)
        return fetched(await self.plane.fetch(data_request(ApiKey.FETCH, 12, body)))[(TOPIC, 0)]

    async def latest(self) -> int:
        body = list_offsets_body((TOPIC, 0, -1))
        return int(
            listed(await self.plane.list_offsets(data_request(ApiKey.LIST_OFFSETS, 9, body)))[(TOPIC, 0)]["offset"]
        )


@pytest.fixture
def rep(tmp_path):
    clocks = {"clock": FakeClock(1_000.0), "wall_clock_ms": FakeWallClock(NOW)}
    with in_process_broker(tmp_path, agent_kwargs=clocks, segment_ms=24 * 3_600_000) as (broker, writer):
        broker.data_dir.mkdir(parents=True)
        yield Replicated(broker, writer)


def test_consumers_read_up_to_the_high_watermark_which_the_isrs_fetches_move(rep):
    rep.partition(isr=[1, 2, 3])

    async def go() -> None:
        assert (await rep.produce(b"a", b"b", b"c", acks=1))["base_offset"] == 0
        seen = await rep.fetch(0)
        assert (seen["high_watermark"], values(seen), await rep.latest()) == (0, [], 0), "nobody else has them yet"
        to_2 = await rep.fetch(0, replica=2)
        assert values(to_2) == [b"a", b"b", b"c"], "a follower reads up to the log end"
        await rep.fetch(3, replica=2)
        assert (await rep.fetch(0))["high_watermark"] == 0, "3 is in the ISR and has nothing"
        await rep.fetch(3, replica=3)
        seen = await rep.fetch(0)
        assert (seen["high_watermark"], values(seen), await rep.latest()) == (3, [b"a", b"b", b"c"], 3)

    asyncio.run(asyncio.wait_for(go(), 30))


def test_acks_all_answers_once_every_in_sync_replica_has_the_records(rep):
    rep.partition(isr=[1, 2])

    async def go() -> None:
        producing = asyncio.create_task(rep.produce(b"x", b"y"))
        got = await rep.fetch(0, replica=2, wait_ms=10_000)  # woken by the append
        assert values(got) == [b"x", b"y"] and not producing.done()
        await rep.fetch(2, replica=2)
        answer = await producing
        assert (answer["error_code"], answer["base_offset"]) == (0, 0)
        assert (await rep.fetch(0))["high_watermark"] == 2, "3 is out of the ISR: it holds nothing back"

    asyncio.run(asyncio.wait_for(go(), 30))


def test_acks_all_is_refused_below_min_insync_replicas_and_times_out_when_the_isr_does_not_fetch(rep):
    rep.partition(isr=[1], min_isr=2)

    async def go() -> None:
        refused = await rep.produce(b"never")
        assert refused["error_code"] == 19, refused  # NOT_ENOUGH_REPLICAS
        assert "min.insync.replicas=2" in refused["error_message"]
        assert (await rep.fetch(0, replica=2))["records"] in (b"", None), "nothing was written"
        assert (await rep.produce(b"one", acks=1))["error_code"] == 0, "acks=1 does not need the ISR"

    asyncio.run(asyncio.wait_for(go(), 30))


def test_an_acks_all_write_the_isr_does_not_reach_in_time_is_request_timed_out_and_stays_in_the_log(rep):
    rep.partition(isr=[1, 2])

    async def go() -> None:
        late = await rep.produce(b"late", timeout_ms=0)
        assert late["error_code"] == 7, late  # REQUEST_TIMED_OUT
        assert values(await rep.fetch(0, replica=2)) == [b"late"]

    asyncio.run(asyncio.wait_for(go(), 30))


def test_a_follower_whose_last_epoch_ends_earlier_here_is_told_where_to_truncate(rep):
    rep.partition(isr=[1, 2, 3], leader_epoch=4)

    async def go() -> None:
        await rep.produce(b"p", b"q", acks=1)  # offsets 0-1 in epoch 4
        # a follower that led epoch 3 and wrote up to offset 5 there: this log has epoch 4 from offset 0
        answer = await rep.fetch(5, replica=2, last_fetched_epoch=3, current_leader_epoch=4)
        assert answer["diverging_epoch"] == {"epoch": 3, "end_offset": 0} and values(answer) == []
        # one that has epoch 4 up to offset 2 agrees
        agreed = await rep.fetch(2, replica=3, last_fetched_epoch=4, current_leader_epoch=4)
        assert agreed.get("diverging_epoch", {"epoch": -1, "end_offset": -1}) == {"epoch": -1, "end_offset": -1}
        # a broker that is no replica of the partition is not served
        assert (await rep.fetch(0, replica=7))["error_code"] == 6  # NOT_LEADER_OR_FOLLOWER

    asyncio.run(asyncio.wait_for(go(), 30))


def test_the_replication_round_forgets_the_followers_of_a_deleted_topic(rep):
    """The followers' state the leader keeps per partition is dropped once the image no longer has the partition
    here (it grew with every topic ever led before)."""
    from orchestrator.broker.replica_manager import ReplicaManager
    from orchestrator.net.connection import ConnectionPool

    broker = rep.broker
    rep.partition(isr=[1, 2, 3])
    asyncio.run(rep.produce(b"a", acks=1))
    asyncio.run(rep.fetch(1, replica=2))
    key = (rep.tid, 0)
    assert set(rep.plane.replicas.followers(key)) == {2}

    async def never_alter(_proposal: Any) -> None:
        raise AssertionError("nothing to propose")

    manager = ReplicaManager(
        broker_id=1,
        image=lambda: broker.follower.image,
        logs=broker.logs,
        open_log=broker._open_log,
        log_lock=asyncio.Lock(),
        replicas=rep.plane.replicas,
        pool=ConnectionPool(),
        request_timeout_s=5.0,
        alter_isr=never_alter,
        lag_max_ms=30_000,
        retry_max_ms=10_000,
        now_ms=lambda: NOW,
        on_isr_change=lambda _shrinks, _expands: None,
    )

    async def rounds() -> None:
        try:
            await manager.round()
            assert set(rep.plane.replicas.followers(key)) == {2}, "kept while the partition is here"
            rep.writer.delete_topic(rep.tid)
            await broker._metadata_round()
            await manager.round()
        finally:
            await manager.close()

    asyncio.run(rounds())
    assert rep.plane.replicas.followers(key) == {}


def test_an_acks_all_write_whose_isr_shrinks_below_min_isr_while_it_waits_is_not_enough_replicas_after_append(rep):
    """The records were appended with the ISR at min.insync.replicas; the controller then shrinks it (a follower
    lagged): the waiting write answers NOT_ENOUGH_REPLICAS_AFTER_APPEND (20), and the records stay in the log."""
    rep.partition(isr=[1, 2], min_isr=2)

    async def go() -> None:
        producing = asyncio.create_task(rep.produce(b"appended", timeout_ms=60_000))
        got = await rep.fetch(0, replica=2, wait_ms=10_000)  # the follower sees it (woken by the append)...
        assert values(got) == [b"appended"] and not producing.done()
        shrink = make_record("PartitionChangeRecord", topic_id=rep.tid, partition_id=0, isr=[1])
        rep.writer.store.append([shrink], controller_epoch=rep.writer.epoch)  # ...but never fetches past it
        await rep.broker._metadata_round()
        answer = await producing
        assert answer["error_code"] == 20, answer  # NOT_ENOUGH_REPLICAS_AFTER_APPEND
        assert "min.insync.replicas=2" in answer["error_message"]
        assert values(await rep.fetch(0, replica=2)) == [b"appended"], "in the leader's log, as Kafka leaves it"
        again = await rep.produce(b"refused")
        assert again["error_code"] == 19, "and the next acks=all write is refused before it is written"

    asyncio.run(asyncio.wait_for(go(), 30))
