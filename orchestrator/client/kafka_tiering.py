"""Tiering on a cluster through Kafka's own means only: what the cluster speaks (ApiVersions), its topics' tiering
configs (DescribeConfigs, IncrementalAlterConfigs) and the remote segments its leaders record in the metadata topic
(Fetch of ``__remote_log_metadata``), for ``tieredctl tiering ... --compat kafka`` and for a cluster without our APIs.

Invariants:
* Our cluster is told by its APIs, never by a name or a version string: its active controller answers
  DescribeTieredState and its brokers DisableRemoteTopic (:func:`speaks_tiered_apis`); a cluster missing either is
  driven as a stock Kafka cluster (with every broker down, the controller's answer decides).
* A :class:`MetadataTail` reads only the metadata topic's partitions that can hold its topics' records (Kafka's
  partitioner, :func:`remote_storage.rlmm_topic.partitioner.metadata_partition`), each from its log start once and
  then from where it stopped, up to the end each had when asked: a poll reads what is new, and a fold over what it
  read is complete up to that moment.
* A cluster without the metadata topic has recorded nothing: a tail reads no record there, and asks again at the
  next poll.
* A value that does not decode is counted and skipped (a record Kafka would not write there), never fatal.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import structlog

from orchestrator.client.admin import AdminCalls
from orchestrator.client.answers import check
from orchestrator.client.data_plane import EARLIEST, LATEST, DataPlane
from orchestrator.client.kafka_configs import KafkaConfigChange
from orchestrator.client.tiered_client import TieredClient
from orchestrator.errors import (
    BrokerNotAvailable,
    ConnectionClosed,
    ProtocolError,
    RecordsMissing,
    RequestTimedOut,
    UnknownTopicOrPartition,
)
from orchestrator.ids import Uuid
from orchestrator.metadata.records import MetadataRecord
from orchestrator.protocol import messages as m
from orchestrator.protocol.api_keys import ApiKey
from remote_storage.rlmm_topic.layout import TOPIC_NAME
from remote_storage.rlmm_topic.partitioner import metadata_partition
from remote_storage.rlmm_topic.serde import decode_value

log = structlog.get_logger(__name__)

TIERED_CONTROLLER_API = ApiKey.DESCRIBE_TIERED_STATE
TIERED_BROKER_API = ApiKey.DISABLE_REMOTE_TOPIC


ASKED_AT_ONCE = 3
"""How many nodes :func:`speaks_tiered_apis` has asked and not yet heard from at a time: enough that a hung node or
two hold nothing up, without a connection to every broker of a large cluster for each command."""


async def speaks_tiered_apis(c: TieredClient) -> bool:
    """Whether the cluster is ours: its active controller lists DescribeTieredState in ApiVersions and its brokers
    DisableRemoteTopic. A stock Kafka cluster lists neither. The nodes of Metadata are asked in order, up to
    ``ASKED_AT_ONCE`` side by side: the first that lists DisableRemoteTopic decides (the others' requests are
    cancelled), so a node that accepts connections and answers nothing (paused, or hung) holds up no command; when
    every one that answered lacks it, the cluster is not ours; when none can be reached (all down), the controller's
    answer decides."""
    body: m.ApiVersionsRequest = {"client_software_name": "tieredctl", "client_software_version": "0"}
    answer = await c.admin.call(ApiKey.API_VERSIONS, (0, 3), body, m.ApiVersionsResponse, idempotent=True)
    if TIERED_CONTROLLER_API not in {k["api_key"] for k in answer["api_keys"]}:
        return False

    async def ask(broker: m.MetadataResponseBroker) -> dict[int, tuple[int, int]] | None:
        try:
            return await c.pool.api_versions((broker["host"], broker["port"]), timeout_s=c.timeout_s)
        except (BrokerNotAvailable, RequestTimedOut, ConnectionClosed) as exc:
            log.info("compat.broker_unreachable", broker_id=broker["node_id"], error=str(exc))
            return None

    waiting = list((await c.metadata([]))["brokers"])
    asked: set[asyncio.Task[dict[int, tuple[int, int]] | None]] = set()
    answered = False
    try:
        while waiting or asked:
            while waiting and len(asked) < ASKED_AT_ONCE:
                asked.add(asyncio.ensure_future(ask(waiting.pop(0))))
            done, asked = await asyncio.wait(asked, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                versions = task.result()
                if versions is not None and TIERED_BROKER_API in versions:
                    return True
                answered = answered or versions is not None
        return not answered
    finally:
        for task in asked:
            task.cancel()
        await asyncio.gather(*asked, return_exceptions=True)


async def apply_change(c: AdminCalls, topic: str, change: KafkaConfigChange) -> None:
    """Send ``change`` as one IncrementalAlterConfigs of ``topic`` (nothing when it is empty)."""
    if not change.empty:
        await c.alter_configs(topic, change.set, change.delete)


@dataclass(frozen=True)
class TopicRef:
    name: str
    topic_id: Uuid
    partitions: int


async def topic_ref(c: AdminCalls, name: str) -> TopicRef:
    t = await c.topic(name)
    return TopicRef(name, t["topic_id"], len(t["partitions"]))


@dataclass
class MetadataTail:
    """Reads the records of some topics' partitions from the metadata topic, a poll at a time (see the module's
    invariants): the metadata partitions of all of them, each read once a poll. ``undecodable`` counts the values
    skipped; ``log_start_above_zero`` names the metadata partitions whose first records are gone (the history read
    is incomplete)."""

    topics: tuple[TopicRef, ...]
    metadata_topic: str = TOPIC_NAME
    positions: dict[int, int] = field(default_factory=dict)
    undecodable: int = 0
    log_start_above_zero: list[int] = field(default_factory=list)

    @property
    def found(self) -> bool:
        """Whether the metadata topic was found (at the first poll that found it; never before)."""
        return bool(self.positions)

    async def read_new(self, c: TieredClient) -> list[MetadataRecord]:
        """The records appended to the topics' metadata partitions since the last poll (from the start at the
        first), in order per metadata partition; records of other topics there are included (a fold skips them)."""
        if not self.positions:
            try:
                count = len((await c.topic(self.metadata_topic))["partitions"])
            except UnknownTopicOrPartition:  # no topic was ever tiered (or it is being created): nothing recorded yet
                return []
            wanted = sorted(
                {metadata_partition(t.topic_id, p, partitions=count) for t in self.topics for p in range(t.partitions)}
            )
            for mp in wanted:
                start = await c.list_offset(self.metadata_topic, mp, EARLIEST)
                if start > 0:
                    self.log_start_above_zero.append(mp)
                self.positions[mp] = start
        out: list[MetadataRecord] = []
        for mp in sorted(self.positions):
            end = await c.list_offset(self.metadata_topic, mp, LATEST)
            out += await self._read(c, mp, end)
        return out

    async def _read(self, c: DataPlane, mp: int, end: int) -> list[MetadataRecord]:
        from orchestrator.protocol.record_batch import records_at_or_after  # as the data plane: loaded on a fetch

        out: list[MetadataRecord] = []
        at = self.positions[mp]
        while at < end:
            entry = await c.fetch(self.metadata_topic, mp, at)
            check(entry["error_code"], entry.get("error_message"), f"fetching {self.metadata_topic}-{mp} at {at}")
            got = [r for r in records_at_or_after(entry["records"] or b"", at) if r[0] < end]
            if not got:
                raise RecordsMissing(
                    f"{self.metadata_topic}-{mp}: no record at offset {at} though its log ends at {end}"
                )
            for offset, _ts, record in got:
                at = offset + 1
                if record.value is None:
                    self.undecodable += 1
                    continue
                try:
                    out.append(decode_value(record.value))
                except ProtocolError:
                    self.undecodable += 1
        self.positions[mp] = at
        return out
