"""``TieredClient.read_topic`` reads every partition of a topic as a console consumer does: each partition's records
in offset order, each once, with one Fetch per leader for all the partitions it leads; to the end each partition
had when the read began, or from the end on; a partition without a leader is asked again with fresh metadata; and a
leader that returns nothing below a partition's end is an error (RECORDS_MISSING), never a quiet short read, as is
a partition that never gets a leader (LEADER_NOT_AVAILABLE)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from typing import Any

import pytest

from orchestrator.client import PartitionRecord, TieredClient
from orchestrator.client.data_plane import TOPIC_READ_ATTEMPTS
from orchestrator.errors import LeaderNotAvailable, RecordsMissing
from orchestrator.protocol.api_keys import ApiKey
from orchestrator.protocol.record_batch import build_batch, encode_batch

pytestmark = pytest.mark.unit

LATEST, EARLIEST = -1, -2


class Leaders:
    """The brokers of a topic ``t``, in memory: each partition's log (values) and leader, answering ListOffsets and
    Fetch as a leader does, at most ``per_fetch`` records a partition per Fetch. ``requests`` records each request:
    (api key, broker, partitions asked)."""

    def __init__(self, logs: dict[int, list[bytes]], leaders: dict[int, int], *, per_fetch: int = 3) -> None:
        self.logs, self.leaders, self.per_fetch = logs, leaders, per_fetch
        self.requests: list[tuple[int, int, list[int]]] = []
        self.leaderless_answers = 0  # metadata answers still to give with no leader for ``leaderless``
        self.leaderless: set[int] = set()
        self.lost_from: dict[int, int] = {}  # partition -> offset from which its leader returns nothing

    def metadata(self) -> dict[str, Any]:
        hidden = self.leaderless if self.leaderless_answers > 0 else set()
        self.leaderless_answers -= 1
        partitions = [
            {"partition_index": p, "leader_id": -1 if p in hidden else leader, "error_code": 0}
            for p, leader in sorted(self.leaders.items())
        ]
        return {"name": "t", "error_code": 0, "partitions": partitions}

    async def request(self, addr: tuple[str, int], api_key: int, version: int, body: Any, **_: Any) -> Any:
        broker = addr[1]
        [topic] = body["topics"]
        if api_key == ApiKey.LIST_OFFSETS:
            asked = [p["partition_index"] for p in topic["partitions"]]
            self.requests.append((api_key, broker, asked))
            entries = [self._offset(p["partition_index"], p["timestamp"], broker) for p in topic["partitions"]]
            return {"topics": [{"name": "t", "partitions": entries}]}
        assert api_key == ApiKey.FETCH
        asked = [p["partition"] for p in topic["partitions"]]
        self.requests.append((api_key, broker, asked))
        entries = [self._fetch(p["partition"], p["fetch_offset"], broker) for p in topic["partitions"]]
        return {"error_code": 0, "responses": [{"topic": "t", "partitions": entries}]}

    def _offset(self, partition: int, timestamp: int, broker: int) -> dict[str, Any]:
        assert self.leaders[partition] == broker, "asked its leader only"
        offset = 0 if timestamp == EARLIEST else len(self.logs[partition])
        return {"partition_index": partition, "error_code": 0, "timestamp": -1, "offset": offset, "leader_epoch": 0}

    def _fetch(self, partition: int, offset: int, broker: int) -> dict[str, Any]:
        assert self.leaders[partition] == broker, "asked its leader only"
        log = self.logs[partition][: self.lost_from.get(partition)]
        values = log[offset : offset + self.per_fetch]
        records = b""
        if values:
            batch = [(None, v, 1000 + offset + i, (("h", b"%d" % i),)) for i, v in enumerate(values)]
            records = encode_batch(build_batch(offset, batch))
        return {"partition_index": partition, "error_code": 0, "high_watermark": len(log), "records": records}

    async def close(self) -> None:
        pass


class Client(TieredClient):
    """A client whose metadata and connections are :class:`Leaders` (broker N is reached at ("broker", N))."""

    def __init__(self, leaders: Leaders) -> None:
        super().__init__("127.0.0.1:9")
        self.brokers = leaders
        self.pool = leaders  # type: ignore[assignment]
        self.pauses: list[int] = []  # the retries it paused before, without waiting

    async def topic(self, name: str) -> Any:
        assert name == "t"
        return self.brokers.metadata()

    async def node_address(self, node_id: int) -> tuple[str, int]:
        return "broker", node_id

    async def pause_before_retry(self, attempt: int) -> None:
        self.pauses.append(attempt)


def values(n: int, tag: str) -> list[bytes]:
    return [f"{tag}-{i}".encode() for i in range(n)]


def read(client: Client, *, limit: int | None = None, **kwargs: Any) -> list[PartitionRecord]:
    async def go() -> list[PartitionRecord]:
        records: AsyncGenerator[PartitionRecord, None] = client.read_topic("t", **kwargs)
        got: list[PartitionRecord] = []
        try:
            async for record in records:
                got.append(record)
                if limit is not None and len(got) == limit:
                    break
        finally:
            await records.aclose()
        return got

    return asyncio.run(go())


def by_partition(records: list[PartitionRecord]) -> dict[int, list[tuple[int, bytes | None]]]:
    out: dict[int, list[tuple[int, bytes | None]]] = {}
    for r in records:
        out.setdefault(r.partition, []).append((r.offset, r.value))
    return out


def test_a_read_to_the_end_yields_each_partitions_records_in_offset_order_once_with_one_fetch_per_leader() -> None:
    logs = {0: values(7, "a"), 1: values(2, "b"), 2: [], 3: values(5, "d")}
    leaders = Leaders(logs, {0: 1, 1: 2, 2: 2, 3: 1})
    client = Client(leaders)
    got = read(client, started=lambda: logs[0].append(b"after the read began"))
    wanted = {0: list(enumerate(values(7, "a"))), 1: list(enumerate(logs[1])), 3: list(enumerate(logs[3]))}
    assert by_partition(got) == wanted, "to the end each partition had when the read began, nothing later"
    assert (got[0].key, got[0].timestamp_ms, got[0].headers) == (None, 1000, (("h", b"0"),))
    fetches = [(broker, sorted(asked)) for key, broker, asked in leaders.requests if key == ApiKey.FETCH]
    # three records a Fetch: partition 0 takes three rounds, partition 3 two, partition 1 one; the empty one none
    assert sorted(fetches) == sorted([(1, [0, 3]), (2, [1]), (1, [0, 3]), (1, [0])])


def test_a_read_from_the_end_yields_only_what_is_appended_after_it_began() -> None:
    logs = {0: values(4, "a"), 1: values(3, "b")}
    client = Client(Leaders(logs, {0: 1, 1: 2}))

    def append() -> None:
        logs[0].extend([b"new-a0", b"new-a1"])
        logs[1].append(b"new-b0")

    got = read(client, from_beginning=False, to_end=False, started=append, limit=3)
    assert by_partition(got) == {0: [(4, b"new-a0"), (5, b"new-a1")], 1: [(3, b"new-b0")]}


def test_a_partition_without_a_leader_is_read_once_fresh_metadata_names_one() -> None:
    logs = {0: values(3, "a"), 1: values(4, "b")}
    leaders = Leaders(logs, {0: 1, 1: 2})
    leaders.leaderless, leaders.leaderless_answers = {1}, 2
    client = Client(leaders)
    got = read(client)
    assert by_partition(got) == {0: list(enumerate(logs[0])), 1: list(enumerate(logs[1]))}
    assert leaders.leaderless_answers < 0, "metadata was asked again after a partition had no leader"
    assert client.pauses == [1], "after a pause before the retry"


def test_a_leader_that_returns_nothing_below_a_partitions_end_is_records_missing() -> None:
    logs = {0: values(3, "a"), 1: values(9, "b")}
    leaders = Leaders(logs, {0: 1, 1: 1})
    leaders.lost_from = {1: 4}
    got: list[PartitionRecord] = []

    async def go() -> None:
        async for record in Client(leaders).read_topic("t"):
            got.append(record)

    with pytest.raises(RecordsMissing, match=r"no record though partitions end further: \{1: \(4, 9\)\}"):
        asyncio.run(go())
    assert by_partition(got) == {0: list(enumerate(logs[0])), 1: list(enumerate(logs[1][:4]))}


def test_a_partition_that_never_gets_a_leader_ends_the_read_with_leader_not_available() -> None:
    leaders = Leaders({0: values(3, "a"), 1: values(4, "b")}, {0: 1, 1: 2})
    leaders.leaderless, leaders.leaderless_answers = {1}, 1_000
    client = Client(leaders)
    with pytest.raises(LeaderNotAvailable, match=r"no reachable leader for partition\(s\) \[1\] after 10 attempts"):
        read(client)
    assert client.pauses == list(range(1, TOPIC_READ_ATTEMPTS))
