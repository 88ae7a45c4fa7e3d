"""The data plane of a session: Kafka's Produce, Fetch and ListOffsets, sent as any Kafka client sends them to each
partition's leader, found from Metadata and refreshed on NOT_LEADER_OR_FOLLOWER.

Invariants:

* A request names one partition and goes to that partition's leader; a retriable error (no leader yet, a connection
  that failed, a retriable code in the partition's entry) is retried with fresh metadata, a bounded number of times,
  and the last error met is raised when they run out (:meth:`DataPlane._leader_call`).
* A produce is acknowledged by all replicas (acks=all), one record batch of at most ``max_batch_bytes`` of values per
  request; a failure after some batches were acknowledged says how many records were written and where.
* A consume reads up to the log end its leader reported when the read began, and a read that ends short of it is
  RECORDS_MISSING, never a quiet success with fewer records.
* A topic read (:meth:`DataPlane.read_topic`, a console consumer's read of every partition) sends one Fetch per
  leader for all the partitions it leads, and yields each partition's records in offset order, each once.

The record batch codec (and crc32c, whose import reads its package's metadata: about 20 ms) is imported by the first
produce or fetch, not with the client: a CLI call that sends only admin requests never loads it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from orchestrator.client.answers import check
from orchestrator.client.session import ClientSession
from orchestrator.clock import wall_ms
from orchestrator.errors import (
    KafkaError,
    LeaderNotAvailable,
    NotLeaderOrFollower,
    ProtocolError,
    RecordsMissing,
    UnknownTopicOrPartition,
    for_code,
)
from orchestrator.protocol import messages as m
from orchestrator.protocol.api_keys import ApiKey
from orchestrator.protocol.batch_records import Header

# Kafka's data plane, as this client speaks it to a partition's leader (the newest versions the brokers serve).
PRODUCE_VERSION, FETCH_VERSION, LIST_OFFSETS_VERSION = 9, 12, 9
EARLIEST, LATEST, EARLIEST_LOCAL, LATEST_TIERED = -2, -1, -4, -5  # ListOffsets' special timestamps
TOPIC_READ_ATTEMPTS = 10  # rounds a read to the end waits for a leaderless partition before it gives up
PARTITION_FETCH_BYTES = 1 << 20  # per partition of a topic read's Fetch (its request takes all of them)
LONG_POLL_MS = 500  # how long a consume's Fetch waits on a leader whose high watermark is behind the offset


def _batches(values: Sequence[bytes], max_bytes: int) -> list[Sequence[bytes]]:
    """``values`` cut into runs of at most ``max_bytes`` (at least one value each), in order."""
    out: list[Sequence[bytes]] = []
    start = size = 0
    for i, value in enumerate(values):
        if i > start and size + len(value) > max_bytes:
            out.append(values[start:i])
            start, size = i, 0
        size += len(value)
    if start < len(values):
        out.append(values[start:])
    return out


def _partition_entry(response: Mapping[str, Any]) -> dict[str, Any]:
    """The one partition entry of a Produce, Fetch or ListOffsets answer about one partition."""
    topics = response.get("responses", response.get("topics")) or []
    partitions = [p for t in topics for p in t.get("partition_responses", t.get("partitions")) or []]
    if len(partitions) != 1:
        raise ProtocolError(f"expected an answer about one partition, got {len(partitions)}")
    return dict(partitions[0])


@dataclass(frozen=True)
class FetchedRecord:
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    remote: bool  # below the local log start offset when the read began: served from the remote tier


@dataclass(frozen=True)
class PartitionRecord:
    """A record of a topic read (:meth:`DataPlane.read_topic`), with its partition and headers."""

    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()


@dataclass(frozen=True)
class PartitionOffsets:
    """A partition's offsets as its leader answers ListOffsets."""

    log_start_offset: int  # the first offset readable from either tier
    local_log_start_offset: int  # the first offset on the leader's disk (KIP-405)
    log_end_offset: int  # the offset the next record gets
    highest_tiered_offset: int  # the last offset copied to the remote tier, -1 when none


class DataPlane(ClientSession):
    """Produce, ListOffsets, Fetch and consume, each sent to the partition's leader."""

    async def _leader_call(
        self, name: str, partition: int, api_key: int, version: int, body: Mapping[str, Any]
    ) -> dict[str, Any]:
        """``body`` (naming this one partition) sent to the partition's leader; returns the partition's entry of
        the answer (Produce, Fetch and ListOffsets all answer per topic, then per partition).

        The leader is taken from this client's last metadata of the topic; a retriable error (no leader yet, a
        connection that failed, a retriable code in the entry such as NOT_LEADER_OR_FOLLOWER after a leader change,
        or KAFKA_STORAGE_ERROR) is retried, up to 10 attempts with a growing pause and fresh metadata. When they run
        out, the last error actually met is raised, with the leader's message (a storage error names the broker's
        failed log directory); NOT_LEADER_OR_FOLLOWER "no reachable leader" only when no leader was ever named.
        Other codes are returned in the entry."""
        attempts = 10
        last_error: KafkaError | None = None
        for attempt in range(attempts):
            if attempt:
                await asyncio.sleep(min(0.1 * 2 ** (attempt - 1), 2))
            cached = self._leaders.get(name) if attempt == 0 else None
            topic = cached or await self.topic(name)
            parts = {p["partition_index"]: p for p in topic["partitions"]}
            if partition not in parts and cached is not None:  # grown since: look again
                topic = await self.topic(name)
                parts = {p["partition_index"]: p for p in topic["partitions"]}
            if partition not in parts:
                raise UnknownTopicOrPartition(f"topic '{name}' has no partition {partition}")
            self._leaders[name] = topic
            leader = parts[partition]["leader_id"]
            if leader < 0:
                continue
            addr = await self.node_address(leader)
            try:
                raw = await self.pool.request(addr, api_key, version, body, timeout_s=self.timeout_s)
            except KafkaError as exc:
                if not exc.retriable:
                    raise
                last_error = exc
                continue
            check(raw.get("error_code", 0), None, f"{name}-{partition} on broker {leader}")  # Fetch's top level
            entry = _partition_entry(raw)
            code = entry["error_code"]
            if code and for_code(code).retriable:
                message = entry.get("error_message") or for_code(code).name
                last_error = for_code(code)(f"{name}-{partition} on broker {leader}: {message}")
                continue
            return entry
        if last_error is not None:
            raise last_error
        raise NotLeaderOrFollower(f"no reachable leader for {name}-{partition} after {attempts} attempts")

    async def produce(
        self,
        name: str,
        values: Sequence[bytes],
        *,
        partition: int = 0,
        key: bytes | None = None,
        on_ack: Callable[[int, int], None] | None = None,
    ) -> tuple[int, int]:
        """Append ``values`` in order (acks=all), as record batches of at most ``max_batch_bytes`` of values (at
        least one record each; one Produce per batch, as Kafka allows one batch per partition per request); returns
        the offsets of the first and last. If a batch fails after others were acknowledged, the error says how many
        records were written and where. ``on_ack(base_offset, records)`` is called for each acknowledged batch as
        its answer arrives, so a caller can account for every acknowledged record even when a later batch fails."""
        first: int | None = None
        done = 0
        for chunk in _batches(values, self.max_batch_bytes):
            try:
                base = await self._produce_batch(name, partition, key, chunk)
            except KafkaError as exc:
                if first is None:
                    raise
                raise type(exc)(
                    f"{exc.message} (after {done} of {len(values)} records were acknowledged at offsets "
                    f"{first}-{first + done - 1} of {name}-{partition})"
                ) from exc
            first = base if first is None else first
            done += len(chunk)
            if on_ack is not None:
                on_ack(base, len(chunk))
        assert first is not None, "values must not be empty"
        return first, first + done - 1

    async def _produce_batch(self, name: str, partition: int, key: bytes | None, values: Sequence[bytes]) -> int:
        now = wall_ms()
        from orchestrator.protocol.record_batch import build_batch, encode_batch  # see the module docstring

        batch = encode_batch(build_batch(0, [(key, value, now, ()) for value in values]))
        body: m.ProduceRequest = {
            "acks": -1,
            "timeout_ms": int(self.timeout_s * 1000),
            "topic_data": [{"name": name, "partition_data": [{"index": partition, "records": batch}]}],
        }
        entry = await self._leader_call(name, partition, ApiKey.PRODUCE, PRODUCE_VERSION, body)
        check(entry["error_code"], entry.get("error_message"), f"producing to {name}-{partition}")
        base: int = entry["base_offset"]
        return base

    async def list_offset(self, name: str, partition: int, timestamp: int) -> int:
        """The offset ListOffsets answers for ``timestamp`` (-2 earliest, -1 latest, -4 earliest local, -5 latest
        tiered, or a time in ms: the first record at or after it, -1 when none)."""
        body: m.ListOffsetsRequest = {
            "replica_id": -1,
            "topics": [{"name": name, "partitions": [{"partition_index": partition, "timestamp": timestamp}]}],
        }
        entry = await self._leader_call(name, partition, ApiKey.LIST_OFFSETS, LIST_OFFSETS_VERSION, body)
        check(entry["error_code"], None, f"listing offsets of {name}-{partition} at {timestamp}")
        offset: int = entry["offset"]
        return offset

    async def offsets(self, name: str, partition: int = 0) -> PartitionOffsets:
        """The partition's log start, local log start, log end and highest tiered offsets (ListOffsets)."""
        found = [await self.list_offset(name, partition, t) for t in (EARLIEST, EARLIEST_LOCAL, LATEST, LATEST_TIERED)]
        return PartitionOffsets(*found)

    async def fetch(
        self, name: str, partition: int, offset: int, *, max_bytes: int = 1 << 20, max_wait_ms: int = 0
    ) -> dict[str, Any]:
        """One Fetch of a partition at ``offset``; returns the partition's entry: ``error_code``,
        ``high_watermark``, ``log_start_offset`` and ``records`` (record batches, possibly from below the
        offset). ``max_wait_ms`` > 0: the leader holds the answer until it has a record to return or that time
        passes (a long poll); 0, it answers at once."""
        body: m.FetchRequest = {
            "replica_id": -1,
            "max_wait_ms": max_wait_ms,
            "min_bytes": 1 if max_wait_ms > 0 else 0,
            "max_bytes": max_bytes,
            "isolation_level": 0,
            "session_id": 0,
            "session_epoch": -1,
            "topics": [
                {
                    "topic": name,
                    "partitions": [{"partition": partition, "fetch_offset": offset, "partition_max_bytes": max_bytes}],
                }
            ],
            "forgotten_topics_data": [],
        }
        return await self._leader_call(name, partition, ApiKey.FETCH, FETCH_VERSION, body)

    async def consume(
        self, name: str, partition: int = 0, *, from_beginning: bool = True, max_records: int | None = None
    ) -> AsyncIterator[FetchedRecord]:
        """Records of one partition from its log start offset (or its end) up to its end when the read began,
        read with Fetch; a record below the local log start offset at that time is marked ``remote``.

        A leader that answers no records at an offset below that end is RECORDS_MISSING, unless its own high
        watermark is at or below the offset: a leader elected meanwhile may not have advanced its high watermark
        to where the last one had it yet (Kafka's rule too: its followers must fetch first), and nothing below it
        is missing. The read then waits for it (long polls) for up to the client's timeout."""
        from orchestrator.protocol.record_batch import records_at_or_after  # see the module docstring

        bounds = await self.offsets(name, partition)
        offset = bounds.log_start_offset if from_beginning else bounds.log_end_offset
        end = bounds.log_end_offset
        seen = 0
        behind_since: float | None = None  # when a leader's high watermark was first seen behind the offset
        while offset < end and (max_records is None or seen < max_records):
            entry = await self.fetch(name, partition, offset, max_wait_ms=0 if behind_since is None else LONG_POLL_MS)
            check(entry["error_code"], None, f"fetching {name}-{partition} at {offset}")
            data = entry["records"] or b""
            records = list(records_at_or_after(data, offset))
            if not records:
                hw = entry.get("high_watermark", -1)
                now = asyncio.get_running_loop().time()
                if 0 <= hw <= offset:
                    behind_since = now if behind_since is None else behind_since
                    if now - behind_since < self.timeout_s:
                        continue
                    raise RecordsMissing(
                        f"{name}-{partition}: read {seen} record(s), then the leader's high watermark stayed at {hw} "
                        f"for {self.timeout_s:g} s, below the end {end} the read began with; a leader elected "
                        "meanwhile whose in-sync followers do not fetch cannot advance it: see the brokers' logs"
                    )
                raise RecordsMissing(
                    f"{name}-{partition}: read {seen} record(s), then the leader returned none at offset {offset} "
                    f"though its log ends at {end} (log start {bounds.log_start_offset})"
                )
            behind_since = None
            for at, timestamp, record in records:
                if at >= end:
                    return
                remote = at < bounds.local_log_start_offset
                yield FetchedRecord(at, timestamp, record.key, record.value, remote)
                seen += 1
                if max_records is not None and seen >= max_records:
                    return
            offset = records[-1][0] + 1

    async def read_topic(
        self,
        name: str,
        *,
        from_beginning: bool = True,
        to_end: bool = True,
        max_wait_ms: int = 500,
        started: Callable[[], None] | None = None,
    ) -> AsyncGenerator[PartitionRecord, None]:
        """Every partition of topic ``name``, as a console consumer reads them: from each partition's log start
        (``from_beginning``) or its end, up to the end each had when the read began (``to_end``) or on for ever,
        each Fetch waiting up to ``max_wait_ms`` for new records (the caller stops it: a count, a timeout, Ctrl-C).
        Within a partition records come in offset order, each once. ``started`` is called once every partition's
        starting offset is known: what is appended from then on is read.

        ListOffsets and Fetch go to each leader once for all its partitions. A partition without a reachable leader
        (its broker down) is asked again with fresh metadata; finding the starting offsets, and a read to the end,
        give up after :data:`TOPIC_READ_ATTEMPTS` rounds in a row without progress (LEADER_NOT_AVAILABLE); a round in
        which every partition was served but none returned a record below its end is RECORDS_MISSING."""
        topic = await self.topic(name)
        partitions = sorted(p["partition_index"] for p in topic["partitions"])
        positions = await self._offsets_of(name, partitions, EARLIEST if from_beginning else LATEST)
        ends = await self._offsets_of(name, partitions, LATEST) if to_end else {}
        positions = {p: at for p, at in positions.items() if not to_end or at < ends[p]}
        if started is not None:
            started()
        wait_ms = 0 if to_end else max_wait_ms  # to the end: every record wanted is there already
        from orchestrator.protocol.record_batch import records_at_or_after  # see the module docstring

        stalled = 0
        while positions:
            entries, unavailable = await self._per_leader(name, positions, _fetch_body(name, positions, wait_ms))
            got = 0
            for partition, entry in sorted(entries.items()):
                at_offset = positions[partition]
                check(entry["error_code"], entry.get("error_message"), f"fetching {name}-{partition} at {at_offset}")
                for at, timestamp, record in records_at_or_after(entry["records"] or b"", at_offset):
                    if to_end and at >= ends[partition]:
                        break
                    yield PartitionRecord(partition, at, timestamp, record.key, record.value, record.headers)
                    positions[partition] = at + 1
                    got += 1
                if to_end and positions[partition] >= ends[partition]:
                    del positions[partition]
            stalled = 0 if got else stalled + 1
            if to_end and stalled and not unavailable:
                below = {p: (at, ends[p]) for p, at in sorted(positions.items())}
                raise RecordsMissing(f"{name}: the leaders returned no record though partitions end further: {below}")
            if unavailable:
                if to_end and stalled >= TOPIC_READ_ATTEMPTS:
                    raise LeaderNotAvailable(
                        f"{name}: no reachable leader for partition(s) {sorted(unavailable)} after {stalled} attempts"
                    )
                await self.pause_before_retry(stalled)

    async def pause_before_retry(self, attempt: int) -> None:
        """Wait before the ``attempt``-th retry (from 1) of a topic read's partitions that had no reachable leader:
        0.1 s doubling to at most 2 s."""
        await asyncio.sleep(_pause_s(attempt))

    async def _offsets_of(self, name: str, partitions: Sequence[int], timestamp: int) -> dict[int, int]:
        """ListOffsets' answer for ``timestamp`` of each of ``partitions`` (one request per leader), partitions
        without a reachable leader asked again with fresh metadata, :data:`TOPIC_READ_ATTEMPTS` times."""
        found: dict[int, int] = {}
        left = list(partitions)
        for attempt in range(TOPIC_READ_ATTEMPTS):
            if attempt:
                await self.pause_before_retry(attempt)
            entries, unavailable = await self._per_leader(name, left, _list_offsets_body(name, timestamp))
            for partition, entry in entries.items():
                check(entry["error_code"], None, f"listing offsets of {name}-{partition} at {timestamp}")
                found[partition] = entry["offset"]
            left = sorted(unavailable)
            if not left:
                return found
        raise LeaderNotAvailable(
            f"{name}: no reachable leader for partition(s) {left} after {TOPIC_READ_ATTEMPTS} attempts"
        )

    async def _per_leader(
        self, name: str, partitions: Collection[int], body_for: RequestFor
    ) -> tuple[dict[int, dict[str, Any]], set[int]]:
        """``body_for(partitions of one leader)`` sent to each leader of ``partitions``, concurrently: each served
        partition's entry, and the partitions that could not be served now (no leader, a leader unreachable, a
        retriable error in the entry)."""
        topic = self._leaders.get(name) or await self.topic(name)
        self._leaders[name] = topic
        leaders = {p["partition_index"]: p["leader_id"] for p in topic["partitions"]}
        by_leader: dict[int, list[int]] = {}
        unavailable: set[int] = set()
        for partition in partitions:
            leader = leaders.get(partition, -1)
            if leader < 0:
                unavailable.add(partition)
            else:
                by_leader.setdefault(leader, []).append(partition)

        async def ask(leader: int, of_leader: list[int]) -> dict[int, dict[str, Any]]:
            api_key, version, body = body_for(of_leader)
            try:
                addr = await self.node_address(leader)
                raw = await self.pool.request(addr, api_key, version, body, timeout_s=self.timeout_s)
            except KafkaError as exc:
                if not exc.retriable:
                    raise
                unavailable.update(of_leader)
                return {}
            check(raw.get("error_code", 0), None, f"asking broker {leader} about {name}")  # Fetch's top level
            served: dict[int, dict[str, Any]] = {}
            for t in raw.get("responses", raw.get("topics")) or []:
                for entry in t["partitions"]:
                    code = entry["error_code"]
                    if code and for_code(code).retriable:
                        unavailable.add(entry["partition_index"])
                    else:
                        served[entry["partition_index"]] = dict(entry)
            return served

        answers = await asyncio.gather(*(ask(leader, of_leader) for leader, of_leader in by_leader.items()))
        if unavailable:
            self._leaders.pop(name, None)  # a leader moved or died: fresh metadata next round
        return {p: entry for answer in answers for p, entry in answer.items()}, unavailable


RequestFor = Callable[[list[int]], tuple[int, int, Mapping[str, Any]]]
"""A request about some partitions of a topic: (api key, version, body)."""


def _pause_s(attempt: int) -> float:
    """The pause before the ``attempt``-th retry of partitions that had no reachable leader (seconds)."""
    return min(0.1 * 2.0 ** max(attempt - 1, 0), 2.0)


def _fetch_body(name: str, positions: Mapping[int, int], max_wait_ms: int) -> RequestFor:
    def body(partitions: list[int]) -> tuple[int, int, m.FetchRequest]:
        wanted: list[m.FetchPartition] = [
            {"partition": p, "fetch_offset": positions[p], "partition_max_bytes": PARTITION_FETCH_BYTES}
            for p in partitions
        ]
        request: m.FetchRequest = {
            "replica_id": -1,
            "max_wait_ms": max_wait_ms,
            "min_bytes": 1,
            "max_bytes": PARTITION_FETCH_BYTES * len(partitions),
            "isolation_level": 0,
            "session_id": 0,
            "session_epoch": -1,
            "topics": [{"topic": name, "partitions": wanted}],
            "forgotten_topics_data": [],
        }
        return ApiKey.FETCH, FETCH_VERSION, request

    return body


def _list_offsets_body(name: str, timestamp: int) -> RequestFor:
    def body(of_leader: list[int]) -> tuple[int, int, m.ListOffsetsRequest]:
        wanted: list[m.ListOffsetsPartition] = [{"partition_index": p, "timestamp": timestamp} for p in of_leader]
        request: m.ListOffsetsRequest = {"replica_id": -1, "topics": [{"name": name, "partitions": wanted}]}
        return ApiKey.LIST_OFFSETS, LIST_OFFSETS_VERSION, request

    return body
