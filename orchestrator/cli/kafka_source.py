"""The scan's metadata read from a Kafka cluster (``scan run --source kafka``, and ``reclaim`` of such a scan).

What is read, all over the Kafka protocol, so any cluster serves it (ours, or Apache Kafka with any
RemoteStorageManager): topics and ids (Metadata), each topic's configs (DescribeConfigs, many topics a request),
the remote log metadata topic's configs and each partition's log start and end (ListOffsets), then every record of
that topic from each partition's start to the end it had when the read began (Fetch, as ``tieredctl rlmm dump
--from-beginning`` reads it: :meth:`~orchestrator.client.data_plane.DataPlane.read_topic`). The export is written by
:func:`remote_storage.kafka_export.export_kafka`, which refuses a metadata topic that may have lost records before
anything is written.

Order matters for that refusal: the metadata topic's retention and log starts are checked first, before a record
is read; progress (records read of the total) goes to ``progress`` as the read goes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from orchestrator.cli.context import Ctx
from orchestrator.client import TieredClient
from orchestrator.client.data_plane import EARLIEST, LATEST
from orchestrator.errors import UnknownTopicOrPartition
from remote_storage.export import ExportResult
from remote_storage.export_format import SOURCE_KAFKA, ExportSource
from remote_storage.kafka_export import (
    KafkaTopic,
    MetadataRecordAt,
    MetadataTopicState,
    check_metadata_topic_kept,
    decoded_record,
    export_kafka,
)

PROGRESS_EVERY = 10_000  # records between two progress lines
READ_TIMEOUT_S = 60.0  # each request of the read; a metadata topic of millions of records takes many


@dataclass(frozen=True, slots=True)
class ClusterMetadata:
    """What the cluster said: its topics, its metadata topic, and that topic's records, decoded."""

    topics: list[KafkaTopic]
    metadata_topic: MetadataTopicState
    records: list[MetadataRecordAt]


async def _partition_bounds(c: TieredClient, name: str) -> tuple[dict[int, int], dict[int, int]]:
    topic = await c.topic(name)
    partitions = sorted(p["partition_index"] for p in topic["partitions"])
    starts = await asyncio.gather(*(c.list_offset(name, p, EARLIEST) for p in partitions))
    ends = await asyncio.gather(*(c.list_offset(name, p, LATEST) for p in partitions))
    return dict(zip(partitions, starts, strict=True)), dict(zip(partitions, ends, strict=True))


async def _configs(c: TieredClient, name: str) -> dict[str, str]:
    return {k: v for k, v in (await c.describe_configs(name)).items() if v is not None}


async def topic_configs(c: TieredClient, names: Sequence[str]) -> dict[str, dict[str, str]]:
    """Each topic's set configs, many a request; a topic deleted since Metadata listed it is left out: it is gone,
    as its records will say."""
    described = await c.describe_many_configs(names)
    return {name: {k: v for k, v in configs.items() if v is not None} for name, configs in described.items()}


async def read_metadata_topic(c: TieredClient, rlmm_topic: str) -> MetadataTopicState:
    """The metadata topic's configs and each partition's log start and end (UNKNOWN_TOPIC_OR_PARTITION naming it
    when the cluster has no such topic)."""
    try:
        starts, ends = await _partition_bounds(c, rlmm_topic)
    except UnknownTopicOrPartition as exc:
        raise UnknownTopicOrPartition(
            f"the cluster has no remote log metadata topic {rlmm_topic!r} (is tiered storage on, with Kafka's "
            "TopicBasedRemoteLogMetadataManager? --rlmm-topic names another)"
        ) from exc
    return MetadataTopicState(rlmm_topic, await _configs(c, rlmm_topic), starts, ends)


async def read_cluster_metadata(
    c: TieredClient, *, rlmm_topic: str, progress: Callable[[str], None]
) -> ClusterMetadata:
    """Everything the export needs from the cluster; refuses (before reading a record) a metadata topic that may
    have lost records."""
    metadata_topic = await read_metadata_topic(c, rlmm_topic)
    check_metadata_topic_kept(metadata_topic)
    listed = await c.metadata()
    named = sorted((t["name"], t["topic_id"]) for t in listed["topics"] if t["error_code"] == 0 and t["name"])
    configs = await topic_configs(c, [name for name, _ in named])
    topics = [KafkaTopic(name, topic_id, configs[name]) for name, topic_id in named if name in configs]
    total = metadata_topic.records
    progress(f"reading {total} record(s) of {rlmm_topic} ({len(metadata_topic.end_offsets)} partitions)")
    records: list[MetadataRecordAt] = []
    reading = c.read_topic(rlmm_topic, from_beginning=True, to_end=True)
    try:
        async for r in reading:
            records.append(decoded_record(r.partition, r.offset, r.value, topic=rlmm_topic))
            if len(records) % PROGRESS_EVERY == 0:
                progress(f"read {len(records)} / {total} records of {rlmm_topic}")
    finally:
        await reading.aclose()
    progress(f"read {len(records)} / {total} records of {rlmm_topic}")
    return ClusterMetadata(topics, metadata_topic, records)


def export_from_kafka(
    obj: Ctx, dest: Path, *, rlmm_topic: str, progress: Callable[[str], None]
) -> tuple[ExportResult, ExportSource]:
    """Read the cluster ``obj`` names and write its export under ``dest`` (with ``source.json``)."""

    async def read(c: TieredClient) -> ClusterMetadata:
        return await read_cluster_metadata(c, rlmm_topic=rlmm_topic, progress=progress)

    found = obj.run(read, timeout_s=READ_TIMEOUT_S)
    source = ExportSource(SOURCE_KAFKA, obj.bootstrap(), rlmm_topic, len(found.records))
    result = export_kafka(
        dest, topics=found.topics, metadata_topic=found.metadata_topic, records=found.records, source=source
    )
    return result, source
