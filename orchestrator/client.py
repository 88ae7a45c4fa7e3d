"""High-level cluster operations over the Kafka protocol, shared by the CLI, the demo and the process tests.

Admin calls go to the active controller through :class:`~orchestrator.net.admin.AdminClient` (it follows a
failover by itself); data-plane calls (Kafka's Produce, Fetch and ListOffsets, as any Kafka client sends them) go
to each partition's leader, found from Metadata and refreshed on NOT_LEADER_OR_FOLLOWER. Errors in response bodies
are raised as the typed Kafka error with the server's message, so callers (and the CLI's exit status) never have to
read error codes.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, NamedTuple, cast

from orchestrator.errors import (
    KafkaError,
    NotLeaderOrFollower,
    ProtocolError,
    RecordsMissing,
    UnknownServerError,
    UnknownTopicOrPartition,
    error_name,
    for_code,
)
from orchestrator.ids import Uuid
from orchestrator.metadata.records import ConfigResourceType, DisablePolicy, TieredState
from orchestrator.metadata.topic_configs import AlterConfigOp
from orchestrator.net.admin import AdminClient
from orchestrator.net.client_security import PLAINTEXT, ClientSecurity
from orchestrator.net.connection import ConnectionPool
from orchestrator.protocol import messages as m
from orchestrator.protocol.api_keys import ApiKey
from orchestrator.protocol.record_batch import build_batch, encode_batch, records_at_or_after
from orchestrator.security.acls import AclBinding, AclBindingFilter, binding_codes, binding_from_codes
from orchestrator.security.scram import DEFAULT_ITERATIONS, ScramMechanism, salted_password

# Kafka's data plane, as this client speaks it to a partition's leader (the newest versions the brokers serve).
PRODUCE_VERSION, FETCH_VERSION, LIST_OFFSETS_VERSION = 9, 12, 9
EARLIEST, LATEST, EARLIEST_LOCAL, LATEST_TIERED = -2, -1, -4, -5  # ListOffsets' special timestamps
DEFAULT_MAX_BATCH_BYTES = 16384  # the values of one record batch, as Kafka's producers' batch.size


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


BULK_RESOURCES = 1000  # topics one IncrementalAlterConfigs of a bulk change carries at most


@dataclass(frozen=True, slots=True)
class TopicChange:
    """One topic's outcome in a bulk change: error code 0 (accepted) or the Kafka error and its message."""

    topic: str
    error_code: int
    error_message: str | None = None

    @property
    def ok(self) -> bool:
        return self.error_code == 0

    @property
    def error(self) -> str | None:
        return None if self.ok else error_name(self.error_code)


def check(code: int, message: str | None, what: str) -> None:
    if code:
        raise for_code(code)(f"{what}: {message}" if message else what)


def _partition_entry(response: Mapping[str, Any]) -> dict[str, Any]:
    """The one partition entry of a Produce, Fetch or ListOffsets answer about one partition."""
    topics = response.get("responses", response.get("topics")) or []
    partitions = [p for t in topics for p in t.get("partition_responses", t.get("partitions")) or []]
    if len(partitions) != 1:
        raise ProtocolError(f"expected an answer about one partition, got {len(partitions)}")
    return dict(partitions[0])


@dataclass(frozen=True)
class PendingBroker:
    """A broker that still owes the acknowledgement of a disablement, as the controller's queue sees it."""

    broker_id: int
    attempts: int  # requests sent for this epoch
    last_error: str | None  # the last error it answered (or the request's failure) with its cause, until progress
    last_attempt_ms: int  # ms since the epoch, -1 never
    fenced: bool
    stalled: bool
    next_attempt_ms: int = -1  # when it is asked next (ms since the epoch); -1 while in flight or fenced
    attempts_without_progress: int = 0  # consecutive attempts that made no progress: the backoff's attempt number


@dataclass(frozen=True)
class OwedPartition:
    """A partition of a delete-policy topic whose remote segments are not all deleted in the RLMM yet."""

    partition: int
    leader: int  # -1: no live leader
    assigned_broker: int  # who deletes them: the leader, or the live broker a leaderless partition was given; -1 none
    segments_remaining: int
    bytes_remaining: int

    @property
    def leaderless(self) -> bool:
        return self.leader < 0 or self.leader != self.assigned_broker


@dataclass(frozen=True)
class TieringStatus:
    topic: str
    topic_id: Uuid
    state: TieredState
    tiered_epoch: int
    policy: DisablePolicy
    partition_count: int
    pending_brokers: tuple[PendingBroker, ...]
    acknowledged_brokers: int = 0
    segments_deleted: int = 0
    segments_remaining: int = 0
    owed_partitions: tuple[OwedPartition, ...] = ()  # delete policy: partitions whose remote data is still owed

    @property
    def required_brokers(self) -> int:
        """The brokers that owe an acknowledgement of this epoch: those that gave it and those still pending."""
        return self.acknowledged_brokers + len(self.pending_brokers)

    def as_json(self) -> dict[str, Any]:
        pending_brokers = [asdict(p) for p in self.pending_brokers]
        return {
            "topic": self.topic,
            "topic_id": str(self.topic_id),
            "state": self.state.name,
            "tiered_epoch": self.tiered_epoch,
            "policy": self.policy.name.lower() if self.policy != DisablePolicy.NONE else None,
            "partitions": self.partition_count,
            "acknowledged_brokers": self.acknowledged_brokers,
            "segments_deleted": self.segments_deleted,
            "segments_remaining": self.segments_remaining,
            "pending_brokers": pending_brokers,
            "owed_partitions": [{**asdict(o), "leaderless": o.leaderless} for o in self.owed_partitions],
        }


@dataclass(frozen=True)
class DeletingBroker:
    """A broker deleting partitions of a deleted topic's remote data."""

    broker_id: int
    partitions: tuple[int, ...]
    attempts: int
    last_error: str | None
    next_attempt_ms: int  # -1 while a request to it is in flight


@dataclass(frozen=True)
class RemoteDeletionStatus:
    """A deleted topic whose remote data is still being deleted (KIP-405 partition deletion)."""

    topic: str
    topic_id: Uuid
    partitions_remaining: tuple[int, ...]
    segments_remaining: int
    bytes_remaining: int
    brokers: tuple[DeletingBroker, ...]

    def as_json(self) -> dict[str, Any]:
        """An entry of ``tiering status --output json`` beside the topics': state DELETED, its brokers as pending."""
        return {
            "topic": self.topic,
            "topic_id": str(self.topic_id),
            "state": "DELETED",
            "tiered_epoch": None,
            "policy": None,
            "pending_brokers": [
                {"broker_id": b.broker_id, "attempts": b.attempts, "last_error": b.last_error, "fenced": False}
                for b in self.brokers
            ],
            "remote_deletion": {
                "partitions_remaining": list(self.partitions_remaining),
                "segments_remaining": self.segments_remaining,
                "bytes_remaining": self.bytes_remaining,
                "brokers": [asdict(b) for b in self.brokers],
            },
        }


@dataclass(frozen=True)
class FetchedRecord:
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    remote: bool  # below the local log start offset when the read began: served from the remote tier


@dataclass(frozen=True)
class PartitionOffsets:
    """A partition's offsets as its leader answers ListOffsets."""

    log_start_offset: int  # the first offset readable from either tier
    local_log_start_offset: int  # the first offset on the leader's disk (KIP-405)
    log_end_offset: int  # the offset the next record gets
    highest_tiered_offset: int  # the last offset copied to the remote tier, -1 when none


class TieredClient:
    """A session with a cluster: ``async with TieredClient("host:port") as c: await c.create_topic(...)``."""

    def __init__(
        self,
        bootstrap: str,
        *,
        timeout_s: float = 30.0,
        security: ClientSecurity = PLAINTEXT,
        max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES,
    ) -> None:
        self.max_batch_bytes = max_batch_bytes
        self._leaders: dict[str, m.MetadataResponseTopic] = {}  # the data plane's last metadata of each topic
        ssl_context = security.ssl_context()
        self.admin = AdminClient(bootstrap, timeout_s=timeout_s, ssl_context=ssl_context, sasl=security.sasl)
        self.pool = ConnectionPool(ssl_context=ssl_context, sasl=security.sasl)
        self.timeout_s = timeout_s
        self._metadata: m.MetadataResponse | None = None

    async def __aenter__(self) -> TieredClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self.admin.close()
        await self.pool.close()

    # -- metadata ---------------------------------------------------------------------------------------------

    async def metadata(self, topics: Sequence[str] | None = None) -> m.MetadataResponse:
        requested: list[m.MetadataRequestTopic] | None = None if topics is None else [{"name": t} for t in topics]
        body: m.MetadataRequest = {"topics": requested, "allow_auto_topic_creation": False}
        self._metadata = await self.admin.call(ApiKey.METADATA, (1, 12), body, m.MetadataResponse, idempotent=True)
        return self._metadata

    async def topic(self, name: str) -> m.MetadataResponseTopic:
        md = await self.metadata([name])
        t = md["topics"][0]
        check(t["error_code"], None, f"topic '{name}'")
        return t

    async def node_address(self, node_id: int) -> tuple[str, int]:
        md = self._metadata or await self.metadata()
        for b in md["brokers"]:
            if b["node_id"] == node_id:
                return b["host"], b["port"]
        md = await self.metadata()
        for b in md["brokers"]:
            if b["node_id"] == node_id:
                return b["host"], b["port"]
        raise NotLeaderOrFollower(f"node {node_id} is not in the cluster metadata")

    # -- admin ------------------------------------------------------------------------------------------------

    async def create_topic(
        self, name: str, *, partitions: int = 1, replication_factor: int = 1, configs: Mapping[str, str] | None = None
    ) -> Uuid:
        config_entries: list[m.CreatableTopicConfig] = [{"name": k, "value": v} for k, v in (configs or {}).items()]
        new_topic: m.CreatableTopic = {
            "name": name,
            "num_partitions": partitions,
            "replication_factor": replication_factor,
            "assignments": [],
            "configs": config_entries,
        }
        body: m.CreateTopicsRequest = {"topics": [new_topic], "timeout_ms": int(self.timeout_s * 1000)}
        resp = await self.admin.call(ApiKey.CREATE_TOPICS, (2, 7), body, m.CreateTopicsResponse)
        t = resp["topics"][0]
        check(t["error_code"], t.get("error_message"), f"creating topic '{name}'")
        tid = t["topic_id"]
        if tid.is_zero:  # CreateTopics below v7 does not return the id: ask Metadata
            tid = (await self.topic(name))["topic_id"]
        return tid

    async def delete_topic(self, name: str) -> None:
        timeout_ms = int(self.timeout_s * 1000)
        body: m.DeleteTopicsRequest = {"topics": [{"name": name}], "topic_names": [name], "timeout_ms": timeout_ms}
        resp = await self.admin.call(ApiKey.DELETE_TOPICS, (1, 6), body, m.DeleteTopicsResponse)
        r = resp["responses"][0]
        check(r["error_code"], r.get("error_message"), f"deleting topic '{name}'")

    async def add_partitions(self, name: str, total: int) -> None:
        body: m.CreatePartitionsRequest = {
            "topics": [{"name": name, "count": total, "assignments": None}],
            "timeout_ms": int(self.timeout_s * 1000),
        }
        resp = await self.admin.call(ApiKey.CREATE_PARTITIONS, (0, 3), body, m.CreatePartitionsResponse)
        r = resp["results"][0]
        check(r["error_code"], r.get("error_message"), f"adding partitions to '{name}'")

    async def alter_configs(self, name: str, set_: Mapping[str, str], delete: Sequence[str] = ()) -> None:
        ops: list[m.IncrementalAlterConfigsRequestAlterableConfig] = [
            {"name": k, "config_operation": AlterConfigOp.SET, "value": v} for k, v in set_.items()
        ]
        ops += [{"name": k, "config_operation": AlterConfigOp.DELETE, "value": None} for k in delete]
        resource: m.IncrementalAlterConfigsRequestAlterConfigsResource = {
            "resource_type": ConfigResourceType.TOPIC,
            "resource_name": name,
            "configs": ops,
        }
        body: m.IncrementalAlterConfigsRequest = {"resources": [resource], "validate_only": False}
        resp = await self.admin.call(ApiKey.INCREMENTAL_ALTER_CONFIGS, (0, 1), body, m.IncrementalAlterConfigsResponse)
        r = resp["responses"][0]
        check(r["error_code"], r.get("error_message"), f"altering configs of '{name}'")

    async def describe_configs(self, name: str) -> dict[str, str | None]:
        resource: m.DescribeConfigsResource = {
            "resource_type": ConfigResourceType.TOPIC,
            "resource_name": name,
            "configuration_keys": None,
        }
        body: m.DescribeConfigsRequest = {
            "resources": [resource],
            "include_synonyms": False,
            "include_documentation": False,
        }
        resp = await self.admin.call(ApiKey.DESCRIBE_CONFIGS, (1, 4), body, m.DescribeConfigsResponse, idempotent=True)
        r = resp["results"][0]
        check(r["error_code"], r.get("error_message"), f"describing configs of '{name}'")
        return {c["name"]: c["value"] for c in r["configs"]}

    async def tiering_status(self, names: Sequence[str] | None = None) -> list[TieringStatus]:
        body: m.DescribeTieredStateRequest = {"topics": None if names is None else list(names)}
        resp = await self.admin.call(
            ApiKey.DESCRIBE_TIERED_STATE, (0, 0), body, m.DescribeTieredStateResponse, idempotent=True
        )
        check(resp["error_code"], None, "describing tiered state")
        out = []
        for t in resp["topics"]:
            check(t["error_code"], t.get("error_message"), f"topic '{t['name']}'")
            state = TieredState(t["tiered_state"])
            policy = DisablePolicy(t["policy"])
            pending = tuple(
                PendingBroker(
                    broker_id=p["broker_id"],
                    attempts=p["attempts"],
                    last_error=p["last_error"],
                    last_attempt_ms=p["last_attempt_ms"],
                    fenced=p["fenced"],
                    stalled=p["stalled"],
                    next_attempt_ms=p["next_attempt_ms"],
                    attempts_without_progress=p["attempts_without_progress"],
                )
                for p in t["pending_brokers"]
            )
            status = TieringStatus(
                topic=t["name"],
                topic_id=t["topic_id"],
                state=state,
                tiered_epoch=t["tiered_epoch"],
                policy=policy,
                partition_count=t["partition_count"],
                pending_brokers=pending,
                acknowledged_brokers=t["acknowledged_brokers"],
                segments_deleted=t["segments_deleted"],
                segments_remaining=t["segments_remaining"],
                owed_partitions=tuple(
                    OwedPartition(
                        partition=o["partition_id"],
                        leader=o["leader"],
                        assigned_broker=o["assigned_broker"],
                        segments_remaining=o["segments_remaining"],
                        bytes_remaining=o["bytes_remaining"],
                    )
                    for o in t.get("owed_partitions") or ()
                ),
            )
            out.append(status)
        return out

    async def remote_deletions(self, names: Sequence[str] | None = None) -> list[RemoteDeletionStatus]:
        """Deleted topics (named ``names``, if given) whose remote data is still being deleted."""
        body: m.DescribeTieredStateRequest = {"topics": None if names is None else list(names)}
        resp = await self.admin.call(
            ApiKey.DESCRIBE_TIERED_STATE, (0, 0), body, m.DescribeTieredStateResponse, idempotent=True
        )
        check(resp["error_code"], None, "describing tiered state")
        return [
            RemoteDeletionStatus(
                topic=d["name"],
                topic_id=d["topic_id"],
                partitions_remaining=tuple(d["partitions_remaining"]),
                segments_remaining=d["segments_remaining"],
                bytes_remaining=d["bytes_remaining"],
                brokers=tuple(
                    DeletingBroker(
                        b["broker_id"], tuple(b["partitions"]), b["attempts"], b["last_error"], b["next_attempt_ms"]
                    )
                    for b in d["brokers"]
                ),
            )
            for d in resp.get("deleting_topics") or ()
        ]

    async def disable_tiering(self, name: str, policy: str = "retain") -> None:
        await self.alter_configs(name, {"remote.storage.enable": "false", "remote.log.disable.policy": policy})

    async def disable_tiering_many(self, names: Sequence[str], policy: str = "retain") -> list[TopicChange]:
        """Disable tiered storage on every topic of ``names`` (bulk): one IncrementalAlterConfigs per
        :data:`BULK_RESOURCES` topics, each topic answered on its own (one refused changes nothing of the others).
        Returns each topic's outcome in the order asked; raises only for a failure of a whole request."""
        ops: list[m.IncrementalAlterConfigsRequestAlterableConfig] = [
            {"name": "remote.storage.enable", "config_operation": AlterConfigOp.SET, "value": "false"},
            {"name": "remote.log.disable.policy", "config_operation": AlterConfigOp.SET, "value": policy},
        ]
        out: list[TopicChange] = []
        for start in range(0, len(names), BULK_RESOURCES):
            chunk = names[start : start + BULK_RESOURCES]
            resources: list[m.IncrementalAlterConfigsRequestAlterConfigsResource] = [
                {"resource_type": ConfigResourceType.TOPIC, "resource_name": n, "configs": ops} for n in chunk
            ]
            body: m.IncrementalAlterConfigsRequest = {"resources": resources, "validate_only": False}
            resp = await self.admin.call(
                ApiKey.INCREMENTAL_ALTER_CONFIGS, (0, 1), body, m.IncrementalAlterConfigsResponse
            )
            answers = {r["resource_name"]: r for r in resp["responses"]}
            for n in chunk:
                r = answers.get(n)
                if r is None:
                    out.append(TopicChange(n, UnknownServerError.code, "the controller's answer has no entry for it"))
                else:
                    out.append(TopicChange(n, r["error_code"], r.get("error_message")))
        return out

    async def enable_tiering(self, name: str) -> None:
        await self.alter_configs(name, {"remote.storage.enable": "true"}, delete=[])

    async def decommission_broker(self, broker_id: int) -> None:
        body: m.UnregisterBrokerRequest = {"broker_id": broker_id}
        resp = await self.admin.call(ApiKey.UNREGISTER_BROKER, (0, 0), body, m.UnregisterBrokerResponse)
        check(resp["error_code"], resp.get("error_message"), f"decommissioning broker {broker_id}")

    # -- data plane -------------------------------------------------------------------------------------------

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
        self, name: str, values: Sequence[bytes], *, partition: int = 0, key: bytes | None = None
    ) -> tuple[int, int]:
        """Append ``values`` in order (acks=all), as record batches of at most ``max_batch_bytes`` of values (at
        least one record each; one Produce per batch, as Kafka allows one batch per partition per request); returns
        the offsets of the first and last. If a batch fails after others were acknowledged, the error says how many
        records were written and where."""
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
        assert first is not None, "values must not be empty"
        return first, first + done - 1

    async def _produce_batch(self, name: str, partition: int, key: bytes | None, values: Sequence[bytes]) -> int:
        now = int(time.time() * 1000)
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

    async def fetch(self, name: str, partition: int, offset: int, *, max_bytes: int = 1 << 20) -> dict[str, Any]:
        """One Fetch of a partition at ``offset`` (no waiting); returns the partition's entry: ``error_code``,
        ``high_watermark``, ``log_start_offset`` and ``records`` (record batches, possibly from below the
        offset)."""
        body: m.FetchRequest = {
            "replica_id": -1,
            "max_wait_ms": 0,
            "min_bytes": 0,
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
        read with Fetch; a record below the local log start offset at that time is marked ``remote``."""
        bounds = await self.offsets(name, partition)
        offset = bounds.log_start_offset if from_beginning else bounds.log_end_offset
        end = bounds.log_end_offset
        seen = 0
        while offset < end and (max_records is None or seen < max_records):
            entry = await self.fetch(name, partition, offset)
            check(entry["error_code"], None, f"fetching {name}-{partition} at {offset}")
            data = entry["records"] or b""
            records = list(records_at_or_after(data, offset))
            if not records:
                raise RecordsMissing(
                    f"{name}-{partition}: read {seen} record(s), then the leader returned none at offset {offset} "
                    f"though its log ends at {end} (log start {bounds.log_start_offset})"
                )
            for at, timestamp, record in records:
                if at >= end:
                    return
                remote = at < bounds.local_log_start_offset
                yield FetchedRecord(at, timestamp, record.key, record.value, remote)
                seen += 1
                if max_records is not None and seen >= max_records:
                    return
            offset = records[-1][0] + 1

    # -- SCRAM users and ACLs ---------------------------------------------------------------------------------

    async def upsert_scram_user(
        self, name: str, password: str, *, mechanism: str = "SCRAM-SHA-512", iterations: int = DEFAULT_ITERATIONS
    ) -> None:
        """Create or replace ``name``'s credential for ``mechanism`` (AlterUserScramCredentials).

        As Kafka's clients do, the salted password is computed here from a fresh random salt: the password itself
        never leaves this process."""
        salt = secrets.token_bytes(SCRAM_SALT_BYTES)
        scram = ScramMechanism.from_name(mechanism)
        body = scram_upsertion_request(name, password, mechanism=scram, iterations=iterations, salt=salt)
        resp = await self.admin.call(
            ApiKey.ALTER_USER_SCRAM_CREDENTIALS, (0, 0), body, m.AlterUserScramCredentialsResponse
        )
        for r in resp["results"]:
            check(r["error_code"], r.get("error_message"), f"setting the {mechanism} credential of user '{name}'")

    async def delete_scram_user(self, name: str, *, mechanisms: Sequence[str] | None = None) -> list[str]:
        """Remove ``name``'s credentials for ``mechanisms`` (default: every one the user has, as described first);
        returns the names of the mechanisms removed. A user without credentials is the server's RESOURCE_NOT_FOUND.

        One request per mechanism: Kafka refuses a user named twice in one request (DUPLICATE_RESOURCE). If one
        fails, those before it stay removed; the error names the mechanism."""
        if mechanisms is None:
            described = await self.describe_scram_users([name])
            mechanisms = [mech for user in described for mech, _ in user.credentials if mech in SCRAM_MECHANISMS]
            mechanisms = mechanisms or [SCRAM_MECHANISMS[-1]]  # none described: the server says what is wrong
        removed = []
        for mechanism in dict.fromkeys(mechanisms):
            body = scram_deletion_request(name, ScramMechanism.from_name(mechanism))
            resp = await self.admin.call(
                ApiKey.ALTER_USER_SCRAM_CREDENTIALS, (0, 0), body, m.AlterUserScramCredentialsResponse
            )
            for r in resp["results"]:
                check(r["error_code"], r.get("error_message"), f"removing the {mechanism} credential of user '{name}'")
            removed.append(mechanism)
        return removed

    async def describe_scram_users(self, names: Sequence[str] | None = None) -> list[ScramUser]:
        """The users named (default: every user with a credential), each with its mechanisms and iterations; a
        named user without any credential is the server's RESOURCE_NOT_FOUND."""
        users: list[m.UserName] | None = None if names is None else [{"name": n} for n in names]
        body: m.DescribeUserScramCredentialsRequest = {"users": users}
        resp = await self.admin.call(
            ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS,
            (0, 0),
            body,
            m.DescribeUserScramCredentialsResponse,
            idempotent=True,
        )
        check(resp["error_code"], resp.get("error_message"), "describing SCRAM users")
        return scram_users_from_response(resp)

    async def create_acls(self, bindings: Sequence[AclBinding]) -> None:
        """Create every binding (CreateAcls); one that already exists is left as it is, as in Kafka."""
        if not bindings:
            return
        body: m.CreateAclsRequest = {"creations": [acl_creation(b) for b in bindings]}
        resp = await self.admin.call(ApiKey.CREATE_ACLS, ACL_VERSIONS, body, m.CreateAclsResponse)
        for binding, r in zip(bindings, resp["results"], strict=True):
            check(r["error_code"], r.get("error_message"), f"creating ACL {describe_binding(binding)}")

    async def describe_acls(self, acl_filter: AclBindingFilter) -> list[AclBinding]:
        """The bindings ``acl_filter`` matches (DescribeAcls)."""
        body = describe_acls_request(acl_filter)
        resp = await self.admin.call(ApiKey.DESCRIBE_ACLS, ACL_VERSIONS, body, m.DescribeAclsResponse, idempotent=True)
        check(resp["error_code"], resp.get("error_message"), "describing ACLs")
        return bindings_from_describe(resp)

    async def delete_acls(self, filters: Sequence[AclBindingFilter]) -> list[AclBinding]:
        """Delete every binding one of ``filters`` matches (DeleteAcls); returns the bindings removed."""
        if not filters:
            return []
        body: m.DeleteAclsRequest = {"filters": [delete_acls_filter(f) for f in filters]}
        resp = await self.admin.call(ApiKey.DELETE_ACLS, ACL_VERSIONS, body, m.DeleteAclsResponse)
        return bindings_deleted(resp)


# -- SCRAM users and ACLs: the request bodies and the answers, as pure functions --------------------------------

SCRAM_SALT_BYTES = 32  # the salt of a new credential: random, as Kafka's clients make it
SCRAM_MECHANISMS = tuple(mech.mechanism_name for mech in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512))
ACL_VERSIONS = (1, 3)  # CreateAcls, DescribeAcls and DeleteAcls: v0 has no pattern type


class ScramUser(NamedTuple):
    """A user with SCRAM credentials, as DescribeUserScramCredentials tells it: never a salt or a key."""

    name: str
    credentials: list[tuple[str, int]]  # (mechanism name, iterations)


def scram_upsertion_request(
    name: str, password: str, *, mechanism: ScramMechanism, iterations: int, salt: bytes
) -> m.AlterUserScramCredentialsRequest:
    """The AlterUserScramCredentials body that sets ``name``'s credential: the salt and ``Hi(password, salt,
    iterations)``, never the password."""
    upsertion: m.ScramCredentialUpsertion = {
        "name": name,
        "mechanism": int(mechanism),
        "iterations": iterations,
        "salt": salt,
        "salted_password": salted_password(mechanism, password, salt, iterations),
    }
    return {"deletions": [], "upsertions": [upsertion]}


def scram_deletion_request(name: str, mechanism: ScramMechanism) -> m.AlterUserScramCredentialsRequest:
    """The AlterUserScramCredentials body that removes ``name``'s credential for ``mechanism``."""
    deletion: m.ScramCredentialDeletion = {"name": name, "mechanism": int(mechanism)}
    return {"deletions": [deletion], "upsertions": []}


def scram_users_from_response(resp: m.DescribeUserScramCredentialsResponse) -> list[ScramUser]:
    """The users of a DescribeUserScramCredentials answer; a user's error is raised (RESOURCE_NOT_FOUND: none)."""
    users = []
    for r in resp["results"]:
        check(r["error_code"], r.get("error_message"), f"describing user '{r['user']}'")
        credentials = [
            (ScramMechanism.from_code(c["mechanism"]).mechanism_name, c["iterations"]) for c in r["credential_infos"]
        ]
        users.append(ScramUser(r["user"], credentials))
    return users


def describe_binding(binding: AclBinding) -> str:
    """One ACL in words, for messages: ``ALLOW User:alice READ from * on TOPIC 'orders' (LITERAL)``."""
    b = binding
    resource = f"{b.resource_type.name} '{b.resource_name}' ({b.pattern_type.name})"
    return f"{b.permission_type.name} {b.principal} {b.operation.name} from {b.host} on {resource}"


def acl_creation(binding: AclBinding) -> m.AclCreation:
    return cast(m.AclCreation, binding_codes(binding, pattern_key="resource_pattern_type"))


def describe_acls_request(acl_filter: AclBindingFilter) -> m.DescribeAclsRequest:
    f = acl_filter
    return {
        "resource_type_filter": int(f.resource_type),
        "resource_name_filter": f.resource_name,
        "pattern_type_filter": int(f.pattern_type),
        "principal_filter": f.principal,
        "host_filter": f.host,
        "operation": int(f.operation),
        "permission_type": int(f.permission_type),
    }


def delete_acls_filter(acl_filter: AclBindingFilter) -> m.DeleteAclsFilter:
    return describe_acls_request(acl_filter)  # a DeleteAcls filter has the fields of a DescribeAcls request


def bindings_from_describe(resp: m.DescribeAclsResponse) -> list[AclBinding]:
    """Every binding of a DescribeAcls answer, one per ACL of each resource pattern."""
    return [binding_from_codes({**resource, **acl}) for resource in resp["resources"] for acl in resource["acls"]]


def bindings_deleted(resp: m.DeleteAclsResponse) -> list[AclBinding]:
    """The bindings a DeleteAcls answer says were removed; the error of a filter or of one binding is raised."""
    removed = []
    for result in resp["filter_results"]:
        check(result["error_code"], result.get("error_message"), "deleting ACLs")
        for acl in result["matching_acls"]:
            binding = binding_from_codes(acl)
            check(acl["error_code"], acl.get("error_message"), f"deleting ACL {describe_binding(binding)}")
            removed.append(binding)
    return removed
